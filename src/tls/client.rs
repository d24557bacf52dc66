//! TLS on kshim's own connections to the upstream brokers: a rustls client config
//! built from `[upstream.tls]`, and the cell every new upstream connection reads
//! it from.

use super::files::{identity, not_after, provider_and_versions, trusted, validity};
use super::{TlsError, UpstreamTls};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_name, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;

/// What one upstream handshake uses.
#[derive(Debug)]
pub struct ClientTlsMaterial {
    pub config: Arc<ClientConfig>,
    /// The name every broker certificate is checked against, when configured.
    pub server_name: Option<ServerName<'static>>,
    pub settings: UpstreamTls,
    /// When kshim's client certificate expires, as Unix seconds.
    pub not_after: Option<i64>,
}

impl ClientTlsMaterial {
    /// Builds the client config for the table `section` (`upstream.tls`),
    /// checking every file and name.
    pub fn build(section: &str, settings: &UpstreamTls) -> Result<ClientTlsMaterial, TlsError> {
        let (provider, versions) = provider_and_versions(section, &settings.protocols)?;
        let (roots, anchors) = trusted(section, &settings.trust)?;
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| TlsError::new(section, "ca", format!("no usable trust anchor: {e}")))?;
        let verifier = Arc::new(TrustedServer { webpki, anchors });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&versions)
            .map_err(|e| {
                TlsError::new(
                    section,
                    "protocols",
                    format!("the protocols and cipher suites do not fit together: {e}"),
                )
            })?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let (config, leaf_not_after) = match &settings.identity {
            None => (builder.with_no_client_auth(), None),
            Some(id) => {
                let (chain, key) = identity(section, id)?;
                let expiry = chain.first().and_then(not_after);
                let config = builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| super::server::identity_error(section, id, e))?;
                (config, expiry)
            }
        };
        let server_name =
            match &settings.server_name {
                None => None,
                Some(name) => Some(ServerName::try_from(name.clone()).map_err(|e| {
                    TlsError::new(section, "server_name", format!("\"{name}\": {e}"))
                })?),
            };
        Ok(ClientTlsMaterial {
            config: Arc::new(config),
            server_name,
            settings: settings.clone(),
            not_after: leaf_not_after,
        })
    }

    /// The name to check the certificate of the broker at `target` (HOST:PORT)
    /// against.
    pub fn name_for(&self, target: &str) -> Result<ServerName<'static>, String> {
        if let Some(name) = &self.server_name {
            return Ok(name.clone());
        }
        let host = target
            .rsplit_once(':')
            .map_or(target, |(h, _)| h)
            .trim_matches(['[', ']']);
        ServerName::try_from(host.to_owned())
            .map_err(|e| format!("{host} cannot be checked against a certificate: {e}"))
    }
}

/// The server certificate check: a chain to one of the trusted CAs, as webpki
/// checks it; or, as Java's trust manager accepts it, a server certificate
/// that is itself in the truststore, CA or not (what `openssl req -x509`
/// makes, with CA:TRUE). That certificate must still name the server and be
/// within its validity period.
#[derive(Debug)]
struct TrustedServer {
    webpki: Arc<WebPkiServerVerifier>,
    anchors: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for TrustedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let chained = self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        if chained.is_ok() || !self.anchors.iter().any(|a| a == end_entity) {
            return chained;
        }
        verify_server_name(&ParsedCertificate::try_from(end_entity)?, server_name)?;
        let (not_before, not_after) = validity(end_entity).ok_or(
            rustls::Error::InvalidCertificate(CertificateError::BadEncoding),
        )?;
        let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        if now < not_before {
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidYet,
            ));
        }
        if now > not_after {
            return Err(rustls::Error::InvalidCertificate(CertificateError::Expired));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    use rustls::RootCertStore;

    /// A certificate for localhost, signed by itself, CA:TRUE (what `openssl req -x509` makes).
    fn self_signed() -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2099, 1, 1);
        params.self_signed(&key).unwrap().der().clone()
    }

    fn verifier(trusted: &[CertificateDer<'static>]) -> TrustedServer {
        let mut roots = RootCertStore::empty();
        for cert in trusted {
            roots.add(cert.clone()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        TrustedServer {
            webpki: WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap(),
            anchors: trusted.to_vec(),
        }
    }

    #[test]
    fn a_server_certificate_in_the_truststore_is_trusted_and_must_still_name_the_server() {
        let cert = self_signed();
        let v = verifier(std::slice::from_ref(&cert));
        let now = UnixTime::now();
        let name = |n: &str| ServerName::try_from(n.to_owned()).unwrap();
        // webpki alone refuses it: a CA certificate used as the end entity.
        assert!(v
            .webpki
            .verify_server_cert(&cert, &[], &name("localhost"), &[], now)
            .is_err());
        assert!(v
            .verify_server_cert(&cert, &[], &name("localhost"), &[], now)
            .is_ok());
        assert!(v
            .verify_server_cert(&cert, &[], &name("elsewhere.example"), &[], now)
            .is_err());
        // 2100-01-01, after its validity period.
        let expired = UnixTime::since_unix_epoch(std::time::Duration::from_secs(4_102_444_800));
        assert!(v
            .verify_server_cert(&cert, &[], &name("localhost"), &[], expired)
            .is_err());
        // Another self-signed certificate is not in the truststore.
        let stranger = self_signed();
        assert!(v
            .verify_server_cert(&stranger, &[], &name("localhost"), &[], now)
            .is_err());
    }
}
