//! TLS on kshim's listeners: a rustls server config built from a `ListenerTls`,
//! and the cell each listener reads it from on every accept.

use super::files::{identity, not_after, provider_and_versions, roots};
use super::principal::{subject_rfc2253, PrincipalRules};
use super::{ClientAuth, ListenerTls, TlsError};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use std::sync::Arc;

/// Builds the server config for the table `section` (such as `tls`) around the
/// certificate chain and key already read from it, checking everything else:
/// the key fits the certificate, every protocol and suite is known and they fit
/// together, client authentication has CA certificates.
fn server_config(
    section: &str,
    settings: &ListenerTls,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let (provider, versions) = provider_and_versions(section, &settings.protocols)?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| {
            TlsError::new(
                section,
                "protocols",
                format!("the protocols and cipher suites do not fit together: {e}"),
            )
        })?;
    let builder = match settings.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        mode => {
            let trust = settings.trust.as_ref().ok_or_else(|| {
                TlsError::new(
                    section,
                    "ca",
                    "client_auth needs the CA certificates for client certificates (ca or truststore)",
                )
            })?;
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(section, trust)?),
                provider,
            );
            let verifier = if mode == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::new(section, "ca", e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| identity_error(section, &settings.identity, e))?;
    // kshim's order of cipher suites, not the client's: Java clients list
    // AES-256-GCM first, and AES-128-GCM costs less per byte for the same
    // protection in practice (see `files::provider_and_versions`).
    config.ignore_client_order = true;
    Ok(Arc::new(config))
}

/// Why a certificate and its key cannot serve, naming the files.
pub(super) fn identity_error(
    section: &str,
    identity: &super::Identity,
    e: rustls::Error,
) -> TlsError {
    let (key_name, cert_name, files) = match identity {
        super::Identity::Pem { certificate, key } => (
            "key",
            "certificate",
            format!("{} with {}", key.display(), certificate.display()),
        ),
        super::Identity::Pkcs12 { keystore, .. } => {
            ("keystore", "keystore", keystore.display().to_string())
        }
    };
    match e {
        rustls::Error::InconsistentKeys(_) => TlsError::new(
            section,
            key_name,
            format!("the private key does not fit the certificate ({files}): {e}"),
        ),
        e => TlsError::new(
            section,
            cert_name,
            format!("the certificate and key cannot be used ({files}): {e}"),
        ),
    }
}

/// What one handshake uses: the rustls config, and how a client certificate
/// becomes a principal.
#[derive(Debug)]
pub struct TlsMaterial {
    pub config: Arc<ServerConfig>,
    pub principals: PrincipalRules,
    pub settings: ListenerTls,
    /// When the certificate expires, as Unix seconds.
    pub not_after: Option<i64>,
    /// The leaf certificate (DER), to tell a real rotation from a reload of the
    /// same material.
    pub leaf: Vec<u8>,
}

impl TlsMaterial {
    /// The DNS names the certificate is for.
    pub fn dns_names(&self) -> Vec<String> {
        super::files::dns_names(&self.leaf)
    }

    pub fn build(section: &str, settings: &ListenerTls) -> Result<TlsMaterial, TlsError> {
        let principals = match &settings.principal_mapping_rules {
            Some(text) => PrincipalRules::parse(text)
                .map_err(|e| TlsError::new(section, "principal_mapping_rules", e))?,
            None => PrincipalRules::default(),
        };
        // Read once: a PKCS#12 keystore costs a key derivation per read.
        let (chain, key) = identity(section, &settings.identity)?;
        let not_after = chain.first().and_then(not_after);
        let leaf = chain.first().map(|c| c.to_vec()).unwrap_or_default();
        Ok(TlsMaterial {
            config: server_config(section, settings, chain, key)?,
            principals,
            settings: settings.clone(),
            not_after,
            leaf,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{Identity, Protocols, TlsCell, Trust};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use rustls::RootCertStore;
    use std::path::Path;
    use std::path::PathBuf;
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

    fn settings(certificate: PathBuf, key: PathBuf) -> ListenerTls {
        ListenerTls {
            identity: Identity::Pem { certificate, key },
            client_auth: ClientAuth::None,
            trust: None,
            protocols: Protocols::default(),
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
    fn reload(cell: &TlsCell, settings: &ListenerTls) -> Result<(), TlsError> {
        cell.install(TlsMaterial::build("tls", settings)?);
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
        let cell = Arc::new(TlsCell::new(
            TlsMaterial::build("tls", &settings(cert_a.clone(), key_a.clone())).unwrap(),
        ));
        let addr = echo_server(Arc::clone(&cell)).await;

        let (mut old, leaf) = connect(&addr, &issuer).await;
        assert_eq!(leaf, der_of(&cert_a));
        // The client lists AES-256-GCM first; kshim's order decides.
        assert_eq!(
            old.get_ref().1.negotiated_cipher_suite().map(|s| s.suite()),
            Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256)
        );
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
        assert_eq!(missing.key, "tls.certificate", "{missing}");
        std::fs::write(dir.path().join("garbage.pem"), "not a certificate").unwrap();
        let garbage = reload(&cell, &settings(dir.path().join("garbage.pem"), key_a)).unwrap_err();
        assert!(
            garbage.to_string().contains("no PEM certificate"),
            "{garbage}"
        );
        let (_, leaf) = connect(&addr, &issuer).await;
        assert_eq!(leaf, der_of(&cert_b));
        assert_eq!(
            cell.current().settings.identity,
            settings(cert_b, key_b).identity
        );
    }

    #[test]
    fn protocols_suites_and_client_auth_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let issuer = ca();
        let (cert, key) = server_files(dir.path(), "s", &issuer);
        let mut s = settings(cert, key);
        s.protocols.versions = vec!["TLSv1.3".into()];
        s.protocols.cipher_suites = vec!["TLS13_AES_128_GCM_SHA256".into()];
        assert!(TlsMaterial::build("tls", &s).map(|m| m.config).is_ok());
        s.protocols.cipher_suites = vec!["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()];
        assert!(
            TlsMaterial::build("tls", &s).map(|m| m.config).is_err(),
            "a TLS 1.2 suite alone cannot serve TLS 1.3"
        );
        s.protocols.cipher_suites.clear();
        s.client_auth = ClientAuth::Required;
        assert_eq!(
            TlsMaterial::build("tls", &s)
                .map(|m| m.config)
                .unwrap_err()
                .key,
            "tls.ca"
        );
        let ca_path = dir.path().join("ca.pem");
        std::fs::write(&ca_path, issuer.ca.pem()).unwrap();
        s.trust = Some(Trust::Pem(ca_path));
        assert!(TlsMaterial::build("tls", &s).map(|m| m.config).is_ok());
        // Devices and other files that are not regular files are refused, not read.
        s.trust = Some(Trust::Pem("/dev/zero".into()));
        let refused = TlsMaterial::build("tls", &s).map(|m| m.config).unwrap_err();
        assert!(refused.message.contains("not a regular file"), "{refused}");
    }
}
