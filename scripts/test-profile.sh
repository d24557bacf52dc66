# Sourced by scripts/test.sh and scripts/fuzz.sh: the release profile their builds use.
#
# Cargo.toml's release profile links kshim as one unit (fat LTO, one codegen unit), which is
# what users and the benchmarks run. Under that profile every binary cargo links is optimized
# whole, one at a time: the test harnesses, the examples and the fuzz targets too, fifteen
# links of a minute or more each on two cores. The test command builds them all, to check
# behaviour and not speed, so its builds keep cargo's default release settings (thin LTO
# within each crate, 16 codegen units). Both builds compile the same source with the same
# opt-level. A build run from the command line without this file takes Cargo.toml's profile.
export CARGO_PROFILE_RELEASE_LTO=false
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
