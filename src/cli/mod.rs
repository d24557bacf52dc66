//! Subcommands of the `kshim` binary. The only place `anyhow` is used.

pub mod clients;
pub mod command_config;
pub mod config;
pub mod features;
pub mod lab;
pub mod serve;
