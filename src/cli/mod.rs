//! Subcommands of the `kshim` binary. The only place `anyhow` is used.

pub mod clients;
pub mod config;
pub mod features;
pub mod serve;
