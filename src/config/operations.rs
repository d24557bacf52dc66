//! The tables an operator runs kshim with: `[admin]` (the admin HTTP API),
//! `[log]` and `[config_providers]`.

use super::ConfigError;
use super::{tls, walker, Secret};
use crate::tls::ListenerTls;
use std::path::PathBuf;

pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9880";
const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

/// `[admin]`: the admin HTTP API. Absent: no admin listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// HOST:PORT; loopback by default.
    pub listen: String,
    /// Bearer token for the API. Usually a placeholder (`${env:...}`).
    pub token: Option<Secret>,
    /// With `[admin.tls]` client authentication: the principals whose
    /// certificates may use the API; `None`: any certificate the CA verifies.
    pub principals: Option<Vec<String>>,
    /// Whether reads (config, features, metrics) need a credential too. Health
    /// checks never do.
    pub read_requires_auth: bool,
    /// The largest request body accepted.
    pub max_body_bytes: usize,
    /// `[admin.tls]`: HTTPS, and optionally client certificates.
    pub tls: Option<ListenerTls>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: DEFAULT_ADMIN_LISTEN.into(),
            token: None,
            principals: None,
            read_requires_auth: true,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            tls: None,
        }
    }
}

pub(super) fn parse_admin(t: &toml::Table, errors: &mut Vec<ConfigError>) -> AdminConfig {
    let mut a = AdminConfig::default();
    let mut w = walker("admin", t, errors);
    if let Some(v) = w.string("listen") {
        a.listen = v;
    }
    a.token = w.string("token").map(Secret::new);
    if w.table.contains_key("principals") {
        a.principals = Some(w.strings("principals"));
    }
    if let Some(v) = w.bool("read_requires_auth") {
        a.read_requires_auth = v;
    }
    if let Some(v) = w.int::<usize>("max_body_bytes", "a positive size") {
        a.max_body_bytes = v;
    }
    let tls_table = w.table("tls");
    w.finish();
    if let Some(t) = tls_table {
        a.tls = tls::parse_listener_tls("admin.tls", t, errors);
    }
    if a.token.as_ref().is_some_and(|t| t.expose().is_empty()) {
        errors.push(ConfigError::new("admin.token", "must not be empty"));
    }
    for p in a.principals.iter().flatten() {
        if !p.contains(':') {
            errors.push(ConfigError::new(
                "admin.principals",
                format!("\"{p}\" is not TYPE:NAME (for example User:ops)"),
            ));
        }
    }
    if a.max_body_bytes < 1024 {
        errors.push(ConfigError::new(
            "admin.max_body_bytes",
            format!("{} is too small (at least 1024)", a.max_body_bytes),
        ));
    }
    a
}

/// `[log] level`: a filter in `RUST_LOG` syntax, such as `info,kshim::upstream=debug`;
/// `format`: `"text"` (the default) or `"json"`.
pub(super) fn parse_log(t: &toml::Table, errors: &mut Vec<ConfigError>) -> (Option<String>, bool) {
    let mut w = walker("log", t, errors);
    let level = w.string("level");
    let format = w.string("format");
    w.finish();
    let json = match format.as_deref() {
        None | Some("text") => false,
        Some("json") => true,
        Some(other) => {
            errors.push(ConfigError::new(
                "log.format",
                format!("\"{other}\": expected \"text\" or \"json\""),
            ));
            false
        }
    };
    if let Some(l) = &level {
        if let Err(e) = check_log_filter(l) {
            errors.push(ConfigError::new(
                "log.level",
                format!("\"{l}\" is not a log filter: {e}"),
            ));
        }
    }
    (level, json)
}

/// Whether `filter` reads as a `RUST_LOG`-style filter.
pub fn check_log_filter(filter: &str) -> Result<(), String> {
    // RUST_LOG reads a bare word as a target to log at every level, so a
    // misspelt level ("warning") would silently turn the rest of the log off.
    // Here a directive without '=' must be a level.
    const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if !directive.contains('=') && !LEVELS.contains(&directive.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "\"{directive}\" is not a log level (one of {}); a target takes TARGET=LEVEL, such as kshim::upstream=debug",
                LEVELS.join(", ")
            ));
        }
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(filter)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// `[config_providers] file_allowed_paths`: the directories `${file:...}`
/// placeholders may read from.
pub(super) fn parse_providers(t: &toml::Table, errors: &mut Vec<ConfigError>) -> Vec<PathBuf> {
    let mut w = walker("config_providers", t, errors);
    let paths: Vec<PathBuf> = w
        .strings("file_allowed_paths")
        .into_iter()
        .map(PathBuf::from)
        .collect();
    w.finish();
    for p in &paths {
        if !p.is_absolute() {
            errors.push(ConfigError::new(
                "config_providers.file_allowed_paths",
                format!("\"{}\" is not an absolute path", p.display()),
            ));
        }
    }
    paths
}
