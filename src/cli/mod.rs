//! Subcommands of the `kshim` binary. The only place `anyhow` is used.

pub mod features;
pub mod serve;
