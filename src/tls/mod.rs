//! TLS material: what the settings name (PEM files or PKCS#12 stores), reading
//! and checking it, and the cells that hold the material in force.
//!
//! - `server`: kshim's listeners (client-facing and admin): a rustls server
//!   config, client authentication, and the principal of a client certificate.
//! - `client`: kshim's own connections to the upstream cluster.
//! - `files`: bounded reads of certificates, keys and stores.
//! - `stream`: a TLS session over TCP that holds no buffer while idle;
//!   `hello`, a client's first flight, read before the handshake goes on;
//!   `transport`, what the stream needs of its socket, and a socket in
//!   memory; `feed`, a real client driving the stream over that socket in
//!   chosen pieces (the stream's property tests and its fuzz target).
//!
//! Material is built and checked aside, then swapped in whole: a handshake that
//! starts after the swap uses it, established connections keep theirs, and
//! material that fails to build changes nothing. Knows nothing of Kafka.

pub mod client;
#[doc(hidden)]
pub mod feed;
mod files;
pub mod hello;
pub mod principal;
pub mod server;
pub mod stream;
mod transport;

pub use client::ClientTlsMaterial;
pub use files::read_bounded;
pub use server::TlsMaterial;

use crate::secret::Secret;
use arc_swap::ArcSwap;
use std::path::PathBuf;
use std::sync::Arc;

/// The material one kind of connection uses now. A handshake reads it once, at
/// its start; `install` puts material that was built (and so checked) in force
/// for every handshake after it.
#[derive(Debug)]
pub struct MaterialCell<T>(ArcSwap<T>);

impl<T> MaterialCell<T> {
    pub fn new(material: T) -> MaterialCell<T> {
        MaterialCell(ArcSwap::from_pointee(material))
    }

    pub fn current(&self) -> Arc<T> {
        self.0.load_full()
    }

    pub fn install(&self, material: T) {
        self.0.store(Arc::new(material));
    }
}

/// What kshim's listeners present.
pub type TlsCell = MaterialCell<TlsMaterial>;
/// What kshim's connections to the upstream present.
pub type ClientTlsCell = MaterialCell<ClientTlsMaterial>;

/// Where a certificate chain and its private key come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// A PEM certificate chain (leaf first) and a PEM private key (PKCS#8,
    /// PKCS#1 or SEC1).
    Pem { certificate: PathBuf, key: PathBuf },
    /// A PKCS#12 keystore holding one private key with its chain, as
    /// `keytool` or `openssl pkcs12 -export` write it.
    Pkcs12 { keystore: PathBuf, password: Secret },
}

/// Where trusted CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// A PEM bundle.
    Pem(PathBuf),
    /// A PKCS#12 truststore: every certificate in it is trusted.
    Pkcs12 {
        truststore: PathBuf,
        password: Secret,
    },
}

/// Whether clients of a listener must show a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    #[default]
    None,
    /// Asked for; a client without one is still served.
    Requested,
    Required,
}

/// The protocol settings every TLS table shares.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Protocols {
    /// "TLSv1.2", "TLSv1.3"; empty: both.
    pub versions: Vec<String>,
    /// rustls suite names such as "TLS13_AES_128_GCM_SHA256"; empty: rustls's defaults.
    pub cipher_suites: Vec<String>,
}

/// `[tls]` and `[admin.tls]`: what a listener presents and accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    pub identity: Identity,
    pub client_auth: ClientAuth,
    /// CA certificates for client certificates.
    pub trust: Option<Trust>,
    pub protocols: Protocols,
    /// Kafka's `ssl.principal.mapping.rules` syntax; `None`: DEFAULT.
    pub principal_mapping_rules: Option<String>,
}

/// `[upstream.tls]`: how kshim's connections to the upstream brokers are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// CA certificates the brokers' certificates must chain to.
    pub trust: Trust,
    /// kshim's client certificate, for brokers that require one.
    pub identity: Option<Identity>,
    pub protocols: Protocols,
    /// The name the brokers' certificates are checked against; default: the host
    /// of each broker address (an IP address is checked against IP SANs).
    pub server_name: Option<String>,
}

/// Why TLS material was refused. Always a problem of the configuration, and
/// always about one key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{key}: {message}")]
pub struct TlsError {
    /// The full config key, such as `tls.certificate` or `upstream.tls.ca`.
    pub key: String,
    pub message: String,
}

impl TlsError {
    pub(crate) fn new(section: &str, name: &str, message: impl Into<String>) -> TlsError {
        TlsError {
            key: format!("{section}.{name}"),
            message: message.into(),
        }
    }
}

pub const PROTOCOLS: [&str; 2] = ["TLSv1.2", "TLSv1.3"];

/// The names `cipher_suites` accepts.
pub fn cipher_suite_names() -> Vec<String> {
    rustls::crypto::ring::default_provider()
        .cipher_suites
        .iter()
        .map(|s| format!("{:?}", s.suite()))
        .collect()
}
