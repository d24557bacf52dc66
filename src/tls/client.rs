//! TLS on kshim's own connections to the upstream brokers: a rustls client config
//! built from `[upstream.tls]`, and the cell every new upstream connection reads
//! it from.

use super::files::{identity, not_after, provider_and_versions, roots};
use super::{TlsError, UpstreamTls};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
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
        let roots = roots(section, &settings.trust)?;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&versions)
            .map_err(|e| {
                TlsError::new(
                    section,
                    "protocols",
                    format!("the protocols and cipher suites do not fit together: {e}"),
                )
            })?
            .with_root_certificates(roots);
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
