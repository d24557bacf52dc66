//! kshim: a Kafka wire-protocol proxy that answers KIP-584 feature discovery
//! (ApiVersions) and feature gating (UpdateFeatures) itself.
//!
//! Layers, from the bytes up: `protocol` (wire format, no I/O), `features` (the
//! feature model and its rules, no I/O), `store` (durable state), `controller`
//! (one update at a time, durable before visible), `handlers` (one file per API
//! kshim answers), `server` (listeners and connections), `config`, `client` (a
//! minimal Kafka client for the CLI and tests), and `cli`.

pub mod admin;
pub mod census;
pub mod client;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod features;
pub mod framing;
pub mod handlers;
pub mod heap;
pub mod lab;
pub mod log_limit;
pub mod metrics;
pub mod policy;
pub mod protocol;
pub mod proxy;
pub mod reconfig;
pub mod releases;
pub mod secret;
pub mod server;
pub mod service;
pub mod standalone;
pub mod store;
pub mod tls;
pub mod upstream;
