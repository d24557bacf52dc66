//! `[upstream]`: the cluster kshim stands in front of, its per-broker listeners,
//! and the credentials and TLS of kshim's own connections to it.

use super::walk::record_key;
use super::ConfigError;
use super::{string_list, tls, walker, UpstreamConfig};
use crate::upstream::UnknownApiKeys;

pub(super) fn parse_upstream(t: &toml::Table, errors: &mut Vec<ConfigError>) -> UpstreamConfig {
    let mut u = UpstreamConfig::default();
    let mut w = walker("upstream", t, errors);
    if let Some(v) = w.get("bootstrap") {
        if let Some(list) = string_list(v, "upstream.bootstrap", w.errors) {
            u.bootstrap = list;
        }
    }
    if let Some(v) = w.int::<u64>("refresh_interval_ms", "a positive number of milliseconds") {
        u.refresh_interval_ms = v;
    }
    if let Some(v) = w.int::<u64>("connect_timeout_ms", "a positive number of milliseconds") {
        u.connect_timeout_ms = v;
    }
    if let Some(v) = w.int::<u64>("request_timeout_ms", "a positive number of milliseconds") {
        u.request_timeout_ms = v;
    }
    if let Some(v) = w.int::<u64>("unready_after_ms", "a number of milliseconds") {
        u.unready_after_ms = v;
    }
    if let Some(v) = w.int::<usize>("max_response_bytes", "a positive size") {
        u.max_response_bytes = v;
    }
    if let Some(v) = w.int::<usize>("max_brokers", "a positive count") {
        u.max_brokers = v;
    }
    if let Some(v) = w.int::<u64>("listener_grace_ms", "a number of milliseconds") {
        u.listener_grace_ms = v;
    }
    match w.string("unknown_api_keys").as_deref() {
        None => {}
        Some("hide") => u.unknown_api_keys = UnknownApiKeys::Hide,
        Some("forward") => u.unknown_api_keys = UnknownApiKeys::Forward,
        Some(other) => w.errors.push(ConfigError::new(
            "upstream.unknown_api_keys",
            format!("\"{other}\" is not one of \"hide\" and \"forward\""),
        )),
    }
    let listeners = w.table("listeners");
    let sasl = w.table("sasl");
    let tls_table = w.table("tls");
    w.finish();
    if let Some(t) = tls_table {
        u.tls = tls::parse_upstream_tls("upstream.tls", t, errors);
    }
    if let Some(t) = sasl {
        let mut w = walker("upstream.sasl", t, errors);
        let mechanism = w.string("mechanism").unwrap_or_else(|| "PLAIN".into());
        let username = w.string("username");
        let password = w.string("password");
        w.finish();
        let parsed = crate::client::SaslMechanism::parse(&mechanism);
        if parsed.is_none() {
            errors.push(ConfigError::new(
                "upstream.sasl.mechanism",
                format!(
                    "\"{mechanism}\" is not supported for kshim's own connections \
                     (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
                ),
            ));
        }
        match (parsed, username, password) {
            (Some(mechanism), Some(username), Some(password)) => {
                u.sasl = Some(crate::client::SaslCredentials {
                    mechanism,
                    username,
                    password,
                })
            }
            (None, ..) => {}
            _ => errors.push(ConfigError::new(
                "upstream.sasl",
                "both username and password are required",
            )),
        }
    }
    if let Some(t) = listeners {
        let mut w = walker("upstream.listeners", t, errors);
        u.listener_host = w.string("host");
        u.advertised_host = w.string("advertised_host");
        u.port_base = w.int::<u16>("port_base", "0 to 65535");
        u.sni_host = w.string("sni_host");
        let ports = w.table("ports");
        w.finish();
        for (node, port) in ports.into_iter().flatten() {
            let key = format!("upstream.listeners.ports.\"{node}\"");
            record_key(&key);
            let Ok(node_id) = node.parse::<i32>() else {
                errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("the key must be a node id"),
                ));
                continue;
            };
            match port.as_integer().map(u16::try_from) {
                Some(Ok(p)) => {
                    u.ports.insert(node_id, p);
                }
                _ => errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("expected a port (0 to 65535)"),
                )),
            }
        }
    }
    u
}
