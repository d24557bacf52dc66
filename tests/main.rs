//! kshim's Rust integration tests, one module per file beside this one, built as
//! one test binary: one link against kshim and its dependencies instead of one per
//! file (`autotests = false` in Cargo.toml). `cargo test --release --test
//! integration MODULE::` runs one file's tests.

mod support;

/// The `kshim` binary's allocator, so that /metrics renders here the heap series it
/// renders there (docs_reference).
#[global_allocator]
static ALLOCATOR: kshim::heap::CountingAllocator = kshim::heap::CountingAllocator;

mod admin_listener;
mod bad_input;
mod cli_messages;
mod connection_limits;
mod crash;
mod descriptors;
mod docs_cli;
mod docs_reference;
mod fixtures;
mod fuzz_smoke;
mod policy_scale;
mod proxy_faults;
mod structure;
mod upstream_bounds;
