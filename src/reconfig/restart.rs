//! The settings that take effect only when kshim restarts: one table that says
//! which config keys a dynamic change refuses and how a restart-only difference
//! between two configs is reported.

use crate::config::{Config, UpstreamConfig};
use std::sync::Arc;

/// Whether one restart-only setting is the same in two configs.
type Same = fn(&Config, &Config) -> bool;

/// One restart-only setting.
pub(super) struct RestartOnly {
    /// The config key (with every key below it) whose change needs a restart;
    /// `None` for what is not one key of its own (turning a section on or off,
    /// a part of a section already listed).
    pub(super) key: Option<&'static str>,
    /// How a change reports the difference.
    pub(super) name: &'static str,
    pub(super) same: Same,
}

/// `[upstream]` without what a component reloads (its TLS material) and what
/// is compared on its own (SASL).
fn upstream_rest(c: &Config) -> Option<UpstreamConfig> {
    c.upstream.as_ref().map(|u| {
        let mut u = u.clone();
        u.tls = None;
        u.sasl = None;
        u
    })
}

/// Every restart-only setting. A dynamic component's keys are claimed before
/// these keys are looked at.
pub(super) const RESTART_ONLY: [RestartOnly; 39] = [
    RestartOnly {
        key: Some("log.format"),
        name: "log.format",
        same: |a, b| a.log_json == b.log_json,
    },
    RestartOnly {
        key: Some("cluster"),
        name: "cluster",
        same: |a, b| a.cluster == b.cluster,
    },
    RestartOnly {
        key: Some("listen"),
        name: "listen",
        same: |a, b| a.listen == b.listen,
    },
    RestartOnly {
        key: Some("advertised_listener"),
        name: "advertised_listener",
        same: |a, b| a.advertised_listener == b.advertised_listener,
    },
    RestartOnly {
        key: Some("data_dir"),
        name: "data_dir",
        same: |a, b| a.data_dir == b.data_dir,
    },
    RestartOnly {
        key: Some("node_id"),
        name: "node_id",
        same: |a, b| a.node_id == b.node_id,
    },
    RestartOnly {
        key: Some("cluster_id"),
        name: "cluster_id",
        same: |a, b| a.cluster_id == b.cluster_id,
    },
    RestartOnly {
        key: Some("max_frame_bytes"),
        name: "max_frame_bytes",
        same: |a, b| a.max_frame_bytes == b.max_frame_bytes,
    },
    RestartOnly {
        key: Some("max_connections"),
        name: "max_connections",
        same: |a, b| a.max_connections == b.max_connections,
    },
    RestartOnly {
        key: Some("max_connections_per_ip"),
        name: "max_connections_per_ip",
        same: |a, b| a.max_connections_per_ip == b.max_connections_per_ip,
    },
    RestartOnly {
        key: Some("max_connections_per_ip_overrides"),
        name: "max_connections_per_ip_overrides",
        same: |a, b| a.max_connections_per_ip_overrides == b.max_connections_per_ip_overrides,
    },
    RestartOnly {
        key: Some("connections_max_idle_ms"),
        name: "connections_max_idle_ms",
        same: |a, b| a.connections_max_idle_ms == b.connections_max_idle_ms,
    },
    RestartOnly {
        key: Some("frame_read_timeout_ms"),
        name: "frame_read_timeout_ms",
        same: |a, b| a.frame_read_timeout_ms == b.frame_read_timeout_ms,
    },
    RestartOnly {
        key: Some("tls_handshake_timeout_ms"),
        name: "tls_handshake_timeout_ms",
        same: |a, b| a.tls_handshake_timeout_ms == b.tls_handshake_timeout_ms,
    },
    RestartOnly {
        key: Some("max_pending_handshakes"),
        name: "max_pending_handshakes",
        same: |a, b| a.max_pending_handshakes == b.max_pending_handshakes,
    },
    RestartOnly {
        key: Some("max_pending_handshakes_per_ip"),
        name: "max_pending_handshakes_per_ip",
        same: |a, b| a.max_pending_handshakes_per_ip == b.max_pending_handshakes_per_ip,
    },
    RestartOnly {
        key: Some("max_unsent_response_bytes"),
        name: "max_unsent_response_bytes",
        same: |a, b| a.max_unsent_response_bytes == b.max_unsent_response_bytes,
    },
    RestartOnly {
        key: Some("max_unauthenticated_frame_bytes"),
        name: "max_unauthenticated_frame_bytes",
        same: |a, b| a.max_unauthenticated_frame_bytes == b.max_unauthenticated_frame_bytes,
    },
    RestartOnly {
        key: Some("max_memory_bytes"),
        name: "max_memory_bytes",
        same: |a, b| a.max_memory_bytes == b.max_memory_bytes,
    },
    RestartOnly {
        key: Some("max_queued_request_bytes"),
        name: "max_queued_request_bytes",
        same: |a, b| a.max_queued_request_bytes == b.max_queued_request_bytes,
    },
    RestartOnly {
        key: Some("proxy_protocol"),
        name: "proxy_protocol",
        same: |a, b| a.proxy_protocol == b.proxy_protocol,
    },
    RestartOnly {
        key: Some("proxy_protocol_trusted"),
        name: "proxy_protocol_trusted",
        same: |a, b| a.proxy_protocol_trusted == b.proxy_protocol_trusted,
    },
    RestartOnly {
        key: Some("shutdown_delay_ms"),
        name: "shutdown_delay_ms",
        same: |a, b| a.shutdown_delay_ms == b.shutdown_delay_ms,
    },
    RestartOnly {
        key: Some("shutdown_grace_ms"),
        name: "shutdown_grace_ms",
        same: |a, b| a.shutdown_grace_ms == b.shutdown_grace_ms,
    },
    RestartOnly {
        key: Some("descriptor_reserve"),
        name: "descriptor_reserve",
        same: |a, b| a.descriptor_reserve == b.descriptor_reserve,
    },
    RestartOnly {
        key: Some("discovery"),
        name: "discovery.draft_tags",
        same: |a, b| a.draft_tags == b.draft_tags,
    },
    RestartOnly {
        key: Some("kafka_release"),
        name: "kafka_release",
        same: |a, b| a.kafka_release == b.kafka_release,
    },
    RestartOnly {
        key: Some("features"),
        name: "features",
        same: |a, b| {
            a.supported == b.supported
                && a.bootstrap == b.bootstrap
                && a.dependencies == b.dependencies
                && a.kshim_owned == b.kshim_owned
        },
    },
    RestartOnly {
        key: Some("upstream"),
        name: "upstream",
        same: |a, b| upstream_rest(a) == upstream_rest(b),
    },
    RestartOnly {
        key: None,
        name: "upstream.sasl",
        same: |a, b| a.upstream.as_ref().map(|u| &u.sasl) == b.upstream.as_ref().map(|u| &u.sasl),
    },
    RestartOnly {
        key: None,
        name: "upstream.tls (turning it on or off)",
        same: |a, b| {
            a.upstream.as_ref().is_some_and(|u| u.tls.is_some())
                == b.upstream.as_ref().is_some_and(|u| u.tls.is_some())
        },
    },
    RestartOnly {
        key: None,
        name: "tls (turning it on or off)",
        same: |a, b| a.tls.is_some() == b.tls.is_some(),
    },
    RestartOnly {
        key: None,
        name: "admin (turning it on or off)",
        same: |a, b| a.admin.is_some() == b.admin.is_some(),
    },
    RestartOnly {
        key: Some("admin.listen"),
        name: "admin.listen",
        same: |a, b| a.admin.as_ref().map(|x| &x.listen) == b.admin.as_ref().map(|x| &x.listen),
    },
    RestartOnly {
        key: Some("admin.max_body_bytes"),
        name: "admin.max_body_bytes",
        same: |a, b| {
            a.admin.as_ref().map(|x| x.max_body_bytes) == b.admin.as_ref().map(|x| x.max_body_bytes)
        },
    },
    RestartOnly {
        key: None,
        name: "admin.tls (turning it on or off)",
        same: |a, b| {
            a.admin.as_ref().is_some_and(|x| x.tls.is_some())
                == b.admin.as_ref().is_some_and(|x| x.tls.is_some())
        },
    },
    RestartOnly {
        key: Some("config_providers"),
        name: "config_providers",
        same: |a, b| a.file_allowed_paths == b.file_allowed_paths,
    },
    RestartOnly {
        key: Some("census"),
        name: "census",
        same: |a, b| a.census == b.census,
    },
    // The file's scenarios; the admin API's own changes to the lab apply at once.
    RestartOnly {
        key: Some("lab"),
        name: "lab",
        same: |a, b| a.lab == b.lab,
    },
];

/// The config keys whose changes need a restart, with everything below them.
pub(super) fn restart_keys() -> impl Iterator<Item = &'static str> {
    RESTART_ONLY.iter().filter_map(|r| r.key)
}

/// The restart-only settings of a config: the config itself, compared field
/// by field with `==` on the typed values (never through their `Debug` text,
/// which hides secrets), by `RESTART_ONLY`.
#[derive(Clone)]
pub(super) struct RestartView(Arc<Config>);

pub(super) fn restart_view(c: &Config) -> RestartView {
    RestartView(Arc::new(c.clone()))
}

/// The restart-only settings that differ between two configs.
pub(super) fn differences(from: &RestartView, to: &RestartView) -> Vec<String> {
    RESTART_ONLY
        .iter()
        .filter(|r| !(r.same)(&from.0, &to.0))
        .map(|r| r.name.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn config(password: &str, max_connections: u32) -> RestartView {
        let text = format!(
            "listen = \"127.0.0.1:0\"\nmax_connections = {max_connections}\n\
             [upstream]\nbootstrap = [\"127.0.0.1:9092\"]\n\
             [upstream.sasl]\nmechanism = \"PLAIN\"\nusername = \"kshim\"\npassword = \"{password}\"\n"
        );
        restart_view(&Config::from_toml(&text).unwrap())
    }

    #[test]
    fn a_changed_secret_is_a_restart_only_change() {
        let running = config("first", 100);
        assert!(differences(&running, &config("first", 100)).is_empty());
        assert_eq!(
            differences(&running, &config("second", 100)),
            ["upstream.sasl"]
        );
        assert_eq!(
            differences(&running, &config("second", 200)),
            ["max_connections", "upstream.sasl"]
        );
    }
}
