//! TLS on kshim's client-facing listeners: building a rustls server config from
//! PEM files, and the cell every listener reads it from on each accept.
//!
//! New material is built and checked aside, then swapped in whole: a handshake
//! that starts after the swap uses it, connections already established keep what
//! they were accepted with, and material that fails to build changes nothing.

use super::principal::{subject_rfc2253, PrincipalRules};
use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use std::path::PathBuf;
use std::sync::Arc;

/// Whether clients must show a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    #[default]
    None,
    /// Asked for; a client without one is still served.
    Requested,
    Required,
}

/// `[tls]`: what the listeners present and accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first.
    pub certificate: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    pub client_auth: ClientAuth,
    /// PEM CA bundle for client certificates.
    pub ca: Option<PathBuf>,
    /// "TLSv1.2", "TLSv1.3"; empty: both.
    pub protocols: Vec<String>,
    /// rustls suite names such as "TLS13_AES_128_GCM_SHA256"; empty: rustls's defaults.
    pub cipher_suites: Vec<String>,
    /// Kafka's `ssl.principal.mapping.rules` syntax; `None`: DEFAULT.
    pub principal_mapping_rules: Option<String>,
}

/// Why TLS material was refused. Always a problem of the configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls.{key}: cannot read {path}: {reason}")]
    Unreadable {
        key: &'static str,
        path: String,
        reason: String,
    },
    #[error("tls.{key}: {path} holds no {what}")]
    Empty {
        key: &'static str,
        path: String,
        what: &'static str,
    },
    #[error("tls: {0}")]
    Invalid(String),
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

fn certificates(
    key: &'static str,
    path: &PathBuf,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let shown = path.display().to_string();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Unreadable {
            key,
            path: shown.clone(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            key,
            path: shown,
            what: "PEM certificate",
        });
    }
    Ok(certs)
}

/// Builds the server config for `settings`, checking everything: the files
/// parse, the key matches the certificate, every protocol and suite is known.
pub fn server_config(settings: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !settings.cipher_suites.is_empty() {
        let mut chosen = Vec::new();
        for name in &settings.cipher_suites {
            match provider
                .cipher_suites
                .iter()
                .find(|s| format!("{:?}", s.suite()) == *name)
            {
                Some(s) => chosen.push(*s),
                None => {
                    return Err(TlsError::Invalid(format!(
                        "cipher suite {name} is not known; known: {}",
                        cipher_suite_names().join(", ")
                    )))
                }
            }
        }
        provider.cipher_suites = chosen;
    }
    let provider: Arc<CryptoProvider> = Arc::new(provider);
    let mut versions: Vec<&'static SupportedProtocolVersion> = Vec::new();
    let names = if settings.protocols.is_empty() {
        PROTOCOLS.iter().map(|p| (*p).to_owned()).collect()
    } else {
        settings.protocols.clone()
    };
    for p in &names {
        versions.push(match p.as_str() {
            "TLSv1.2" => &rustls::version::TLS12,
            "TLSv1.3" => &rustls::version::TLS13,
            other => {
                return Err(TlsError::Invalid(format!(
                    "protocol {other} is not supported; use {}",
                    PROTOCOLS.join(" or ")
                )))
            }
        });
    }
    let chain = certificates("certificate", &settings.certificate)?;
    let key = PrivateKeyDer::from_pem_file(&settings.key).map_err(|e| TlsError::Unreadable {
        key: "key",
        path: settings.key.display().to_string(),
        reason: e.to_string(),
    })?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| {
            TlsError::Invalid(format!(
                "the protocols and cipher suites do not fit together: {e}"
            ))
        })?;
    let builder = match settings.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        mode => {
            let ca = settings.ca.as_ref().ok_or_else(|| {
                TlsError::Invalid(
                    "client_auth needs tls.ca, the CA bundle for client certificates".into(),
                )
            })?;
            let mut roots = RootCertStore::empty();
            for cert in certificates("ca", ca)? {
                roots.add(cert).map_err(|e| {
                    TlsError::Invalid(format!(
                        "tls.ca: {} holds a certificate that is not a usable CA: {e}",
                        ca.display()
                    ))
                })?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider));
            let verifier = if mode == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Invalid(format!("tls.ca: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        let (key, cert) = (settings.key.display(), settings.certificate.display());
        TlsError::Invalid(match e {
            rustls::Error::InconsistentKeys(_) => {
                format!("tls.key {key} does not fit tls.certificate {cert}: {e}")
            }
            e => format!("tls.certificate {cert} with tls.key {key} cannot be used: {e}"),
        })
    })?;
    Ok(Arc::new(config))
}

/// What one handshake uses: the rustls config, and how a client certificate
/// becomes a principal.
#[derive(Debug)]
pub struct TlsMaterial {
    pub config: Arc<ServerConfig>,
    pub principals: PrincipalRules,
    pub settings: TlsSettings,
}

impl TlsMaterial {
    pub fn build(settings: &TlsSettings) -> Result<TlsMaterial, TlsError> {
        let principals = match &settings.principal_mapping_rules {
            Some(text) => PrincipalRules::parse(text)
                .map_err(|e| TlsError::Invalid(format!("principal_mapping_rules: {e}")))?,
            None => PrincipalRules::default(),
        };
        Ok(TlsMaterial {
            config: server_config(settings)?,
            principals,
            settings: settings.clone(),
        })
    }

    /// The principal of a connection whose client showed `leaf` (DER), or why
    /// it has none.
    pub fn principal(&self, leaf: &[u8]) -> Result<String, String> {
        let dn = subject_rfc2253(leaf)?;
        self.principals
            .apply(&dn)
            .map(|name| format!("User:{name}"))
            .ok_or_else(|| format!("no principal mapping rule applies to {dn}"))
    }
}

/// The TLS material the listeners use now.
#[derive(Debug)]
pub struct TlsCell(ArcSwap<TlsMaterial>);

impl TlsCell {
    pub fn new(settings: &TlsSettings) -> Result<TlsCell, TlsError> {
        Ok(TlsCell(ArcSwap::from_pointee(TlsMaterial::build(
            settings,
        )?)))
    }

    /// What the next handshake uses.
    pub fn current(&self) -> Arc<TlsMaterial> {
        self.0.load_full()
    }

    /// Puts material that was built (and so checked) in force for every
    /// handshake from now on; see `reload::Reloadable`.
    pub fn install(&self, material: TlsMaterial) {
        self.0.store(Arc::new(material));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use std::path::Path;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    struct Issued {
        ca: rcgen::Certificate,
        ca_key: rcgen::KeyPair,
    }

    fn ca() -> Issued {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&ca_key).unwrap();
        Issued { ca, ca_key }
    }

    /// Writes a server certificate for 127.0.0.1 signed by `issuer`, and its key.
    fn server_files(dir: &Path, name: &str, issuer: &Issued) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &issuer.ca, &issuer.ca_key).unwrap();
        let (c, k) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    fn settings(certificate: PathBuf, key: PathBuf) -> TlsSettings {
        TlsSettings {
            certificate,
            key,
            client_auth: ClientAuth::None,
            ca: None,
            protocols: Vec::new(),
            cipher_suites: Vec::new(),
            principal_mapping_rules: None,
        }
    }

    /// Accepts TLS connections with whatever the cell holds at each accept, and
    /// echoes every byte.
    async fn echo_server(cell: Arc<TlsCell>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&cell.current().config));
                tokio::spawn(async move {
                    if let Ok(mut s) = acceptor.accept(stream).await {
                        let mut buf = [0u8; 64];
                        while let Ok(n) = s.read(&mut buf).await {
                            if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    async fn connect(
        addr: &str,
        issuer: &Issued,
    ) -> (tokio_rustls::client::TlsStream<TcpStream>, Vec<u8>) {
        let mut roots = RootCertStore::empty();
        roots.add(issuer.ca.der().clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let s = connector.connect(name, tcp).await.unwrap();
        let leaf = s.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        (s, leaf)
    }

    async fn echoes(s: &mut tokio_rustls::client::TlsStream<TcpStream>) {
        s.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
    }

    /// Builds aside, then installs: what a reload does.
    fn reload(cell: &TlsCell, settings: &TlsSettings) -> Result<(), TlsError> {
        cell.install(TlsMaterial::build(settings)?);
        Ok(())
    }

    fn der_of(pem_path: &Path) -> Vec<u8> {
        CertificateDer::from_pem_file(pem_path).unwrap().to_vec()
    }

    #[tokio::test]
    async fn a_reload_reaches_new_handshakes_and_spares_established_connections() {
        let dir = tempfile::tempdir().unwrap();
        let issuer = ca();
        let (cert_a, key_a) = server_files(dir.path(), "a", &issuer);
        let (cert_b, key_b) = server_files(dir.path(), "b", &issuer);
        let cell = Arc::new(TlsCell::new(&settings(cert_a.clone(), key_a.clone())).unwrap());
        let addr = echo_server(Arc::clone(&cell)).await;

        let (mut old, leaf) = connect(&addr, &issuer).await;
        assert_eq!(leaf, der_of(&cert_a));
        echoes(&mut old).await;

        reload(&cell, &settings(cert_b.clone(), key_b.clone())).unwrap();
        let (mut new, leaf) = connect(&addr, &issuer).await;
        assert_eq!(
            leaf,
            der_of(&cert_b),
            "a new handshake sees the new certificate"
        );
        echoes(&mut new).await;
        echoes(&mut old).await;

        // Broken material is refused and the current one stays.
        let mismatched = reload(&cell, &settings(cert_a.clone(), key_b.clone())).unwrap_err();
        assert!(
            mismatched.to_string().contains("does not fit"),
            "{mismatched}"
        );
        let missing =
            reload(&cell, &settings(dir.path().join("nope.pem"), key_a.clone())).unwrap_err();
        assert!(missing.to_string().contains("tls.certificate"), "{missing}");
        std::fs::write(dir.path().join("garbage.pem"), "not a certificate").unwrap();
        let garbage = reload(&cell, &settings(dir.path().join("garbage.pem"), key_a)).unwrap_err();
        assert!(
            garbage.to_string().contains("no PEM certificate"),
            "{garbage}"
        );
        let (_, leaf) = connect(&addr, &issuer).await;
        assert_eq!(leaf, der_of(&cert_b));
        assert_eq!(cell.current().settings.certificate, cert_b);
    }

    #[test]
    fn protocols_suites_and_client_auth_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let issuer = ca();
        let (cert, key) = server_files(dir.path(), "s", &issuer);
        let mut s = settings(cert, key);
        s.protocols = vec!["TLSv1.3".into()];
        s.cipher_suites = vec!["TLS13_AES_128_GCM_SHA256".into()];
        assert!(server_config(&s).is_ok());
        s.cipher_suites = vec!["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()];
        assert!(
            server_config(&s).is_err(),
            "a TLS 1.2 suite alone cannot serve TLS 1.3"
        );
        s.cipher_suites.clear();
        s.client_auth = ClientAuth::Required;
        assert!(server_config(&s)
            .unwrap_err()
            .to_string()
            .contains("tls.ca"));
        let ca_path = dir.path().join("ca.pem");
        std::fs::write(&ca_path, issuer.ca.pem()).unwrap();
        s.ca = Some(ca_path);
        assert!(server_config(&s).is_ok());
    }
}
