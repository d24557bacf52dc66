//! The components kshim can change while it runs, each behind the cell its users
//! read: TLS material (client-facing listeners, the admin listener, the
//! upstream connections), the policies, who may alter the cluster, the log
//! filter. Who may use the admin API is `crate::admin`'s own component.

use super::{KeyError, Prepared, Reconfigurable};
use crate::config::{tls as tls_keys, Config};
use crate::handlers::Authorizer;
use crate::policy::PolicyCell;
use crate::tls::{ClientTlsCell, ClientTlsMaterial, ListenerTls, TlsCell, TlsError, TlsMaterial};
use std::sync::{Arc, Mutex};

fn tls_error(e: TlsError) -> Vec<KeyError> {
    vec![KeyError::new(e.key, e.message)]
}

/// Builds every TLS material `config` names, without putting any in force: what
/// kshim checks before it starts with stored overrides.
pub(super) fn check_material(config: &Config) -> Result<(), TlsError> {
    if let Some(t) = &config.tls {
        TlsMaterial::build("tls", t)?;
    }
    if let Some(t) = config.admin.as_ref().and_then(|a| a.tls.as_ref()) {
        TlsMaterial::build("admin.tls", t)?;
    }
    if let Some(t) = config.upstream.as_ref().and_then(|u| u.tls.as_ref()) {
        ClientTlsMaterial::build("upstream.tls", t)?;
    }
    Ok(())
}

/// TLS on a listener: `[tls]` for the Kafka listeners, `[admin.tls]` for the
/// admin API. Turning TLS on or off needs a restart; the registry reports that.
pub struct ListenerTlsComponent {
    name: &'static str,
    section: &'static str,
    role: &'static str,
    cell: Option<Arc<TlsCell>>,
    select: fn(&Config) -> Option<&ListenerTls>,
}

impl ListenerTlsComponent {
    /// The Kafka listeners' TLS (`[tls]`).
    pub fn kafka(cell: Option<Arc<TlsCell>>) -> ListenerTlsComponent {
        ListenerTlsComponent {
            name: "listener TLS",
            section: "tls",
            role: "client",
            cell,
            select: |c| c.tls.as_ref(),
        }
    }

    /// The admin listener's TLS (`[admin.tls]`).
    pub fn admin(cell: Option<Arc<TlsCell>>) -> ListenerTlsComponent {
        ListenerTlsComponent {
            name: "admin TLS",
            section: "admin.tls",
            role: "admin",
            cell,
            select: |c| c.admin.as_ref().and_then(|a| a.tls.as_ref()),
        }
    }
}

impl Reconfigurable for ListenerTlsComponent {
    fn name(&self) -> &'static str {
        self.name
    }

    fn keys(&self) -> Vec<String> {
        tls_keys::LISTENER_KEYS
            .iter()
            .map(|k| format!("{}.{k}", self.section))
            .collect()
    }

    fn prepare(&self, next: &Config) -> Result<Prepared, Vec<KeyError>> {
        let (Some(cell), Some(settings)) = (&self.cell, (self.select)(next)) else {
            return Ok(Prepared::unchanged());
        };
        // Always built again, so that a certificate replaced in the same file
        // (SIGHUP after a rotation on disk) is read.
        let material = TlsMaterial::build(self.section, settings).map_err(tls_error)?;
        let current = cell.current();
        let changed = material.settings != current.settings || material.leaf != current.leaf;
        let cell = Arc::clone(cell);
        Ok(Prepared::new(changed, move || cell.install(material)))
    }

    fn certificate_expiry(&self) -> Option<(&'static str, i64)> {
        let cell = self.cell.as_ref()?;
        cell.current().not_after.map(|t| (self.role, t))
    }
}

/// TLS on kshim's connections to the upstream (`[upstream.tls]`): new
/// connections use new material; open ones keep theirs.
pub struct UpstreamTlsComponent {
    pub cell: Option<Arc<ClientTlsCell>>,
}

impl Reconfigurable for UpstreamTlsComponent {
    fn name(&self) -> &'static str {
        "upstream TLS"
    }

    fn keys(&self) -> Vec<String> {
        tls_keys::UPSTREAM_KEYS
            .iter()
            .map(|k| format!("upstream.tls.{k}"))
            .collect()
    }

    fn prepare(&self, next: &Config) -> Result<Prepared, Vec<KeyError>> {
        let wanted = next.upstream.as_ref().and_then(|u| u.tls.as_ref());
        let (Some(cell), Some(settings)) = (&self.cell, wanted) else {
            return Ok(Prepared::unchanged());
        };
        let material = ClientTlsMaterial::build("upstream.tls", settings).map_err(tls_error)?;
        let changed = material.settings != cell.current().settings;
        let cell = Arc::clone(cell);
        Ok(Prepared::new(changed, move || cell.install(material)))
    }

    fn certificate_expiry(&self) -> Option<(&'static str, i64)> {
        let cell = self.cell.as_ref()?;
        cell.current().not_after.map(|t| ("upstream", t))
    }
}

/// The create-topic policy, the config validators and the exemptions
/// (`[policy]`): each request reads one snapshot, so a change applies from the
/// next request.
pub struct PolicyComponent {
    pub cell: Arc<PolicyCell>,
}

impl Reconfigurable for PolicyComponent {
    fn name(&self) -> &'static str {
        "policies"
    }

    fn keys(&self) -> Vec<String> {
        vec!["policy".into()]
    }

    fn prepare(&self, next: &Config) -> Result<Prepared, Vec<KeyError>> {
        // The policies were parsed and checked with the config.
        let policies = next.policies.clone();
        let current = self.cell.load();
        // An installed library policy stays, whatever the file declares.
        let changed = policies.validators != current.validators
            || policies.exempt_principals != current.exempt_principals
            || (!self.cell.has_installed_policy()
                && policies.create_topic.declared() != current.create_topic.declared());
        let cell = Arc::clone(&self.cell);
        Ok(Prepared::new(changed, move || cell.replace(policies)))
    }
}

/// Who holds ALTER on CLUSTER (`authorization.alter_cluster`).
pub struct AuthorizationComponent {
    pub authorizer: Arc<Authorizer>,
}

impl Reconfigurable for AuthorizationComponent {
    fn name(&self) -> &'static str {
        "authorization"
    }

    fn keys(&self) -> Vec<String> {
        vec!["authorization.alter_cluster".into()]
    }

    fn prepare(&self, next: &Config) -> Result<Prepared, Vec<KeyError>> {
        let wanted = next.alter_cluster.clone();
        let changed = wanted != self.authorizer.alter_cluster();
        let authorizer = Arc::clone(&self.authorizer);
        Ok(Prepared::new(changed, move || authorizer.replace(wanted)))
    }
}

/// Sets the log filter of the running process.
pub type LogFilterSetter = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// The log filter (`log.level`, in `RUST_LOG` syntax). Without a configured
/// level, the filter kshim started with applies.
pub struct LogLevelComponent {
    set: LogFilterSetter,
    /// The filter without `log.level`: `RUST_LOG`, or `info`.
    fallback: String,
    current: Arc<Mutex<String>>,
}

impl LogLevelComponent {
    pub fn new(set: LogFilterSetter, fallback: String, current: String) -> LogLevelComponent {
        LogLevelComponent {
            set,
            fallback,
            current: Arc::new(Mutex::new(current)),
        }
    }
}

impl Reconfigurable for LogLevelComponent {
    fn name(&self) -> &'static str {
        "log level"
    }

    fn keys(&self) -> Vec<String> {
        vec!["log.level".into()]
    }

    fn prepare(&self, next: &Config) -> Result<Prepared, Vec<KeyError>> {
        let wanted = next
            .log_level
            .clone()
            .unwrap_or_else(|| self.fallback.clone());
        crate::config::check_log_filter(&wanted)
            .map_err(|e| vec![KeyError::new("log.level", format!("\"{wanted}\": {e}"))])?;
        let current = Arc::clone(&self.current);
        let changed = current.lock().map(|c| *c != wanted).unwrap_or(true);
        let set = Arc::clone(&self.set);
        Ok(Prepared::new(changed, move || {
            match set(&wanted) {
                Ok(()) => {
                    if let Ok(mut c) = current.lock() {
                        *c = wanted;
                    }
                }
                // Checked above; a failure here is the subscriber's.
                Err(e) => tracing::error!("log.level {wanted:?} not applied: {e}"),
            }
        }))
    }
}
