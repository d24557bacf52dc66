//! `[cluster]`: several kshim instances in front of one Kafka cluster that share
//! one feature state and one set of config overrides, kept on that cluster.

use super::{walker, ConfigError};
use crate::cluster::{ClusterConfig, DEFAULT_STATE_TOPIC};

/// A topic name as Kafka accepts it.
fn valid_topic(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `<host name>-<node_id>`, so that instances on different hosts differ
/// without being told; `kshim-<node_id>` when the host name is unusable.
fn default_instance_id(node_id: i32) -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let host = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(100)
        .collect();
    if host.is_empty() {
        format!("kshim-{node_id}")
    } else {
        format!("{host}-{node_id}")
    }
}

pub(super) fn parse_cluster(
    t: &toml::Table,
    node_id: i32,
    errors: &mut Vec<ConfigError>,
) -> Option<ClusterConfig> {
    let mut w = walker("cluster", t, errors);
    let id = w.string("id");
    let state_topic = w
        .string("state_topic")
        .unwrap_or_else(|| DEFAULT_STATE_TOPIC.to_owned());
    let instance_id = w
        .string("instance_id")
        .unwrap_or_else(|| default_instance_id(node_id));
    let ms = "a positive number of milliseconds";
    let session_timeout_ms = w.int::<u64>("session_timeout_ms", ms).unwrap_or(10_000);
    let heartbeat_interval_ms = w.int::<u64>("heartbeat_interval_ms", ms).unwrap_or(2_000);
    let transaction_timeout_ms = w.int::<u64>("transaction_timeout_ms", ms).unwrap_or(5_000);
    let write_timeout_ms = w.int::<u64>("write_timeout_ms", ms).unwrap_or(30_000);
    let startup_timeout_ms = w.int::<u64>("startup_timeout_ms", ms).unwrap_or(30_000);
    w.finish();
    let mut ok = true;
    let mut refuse = |key: &str, message: String| {
        ok = false;
        errors.push(ConfigError::new(format!("cluster.{key}"), message));
    };
    let id = match id {
        Some(id) if valid_id(&id) => id,
        Some(id) => {
            refuse(
                "id",
                format!("\"{id}\" is not an id (letters, digits, '.', '_', '-')"),
            );
            String::new()
        }
        None => {
            refuse(
                "id",
                "required: instances with the same id share one state".into(),
            );
            String::new()
        }
    };
    if !valid_id(&instance_id) {
        refuse(
            "instance_id",
            format!("\"{instance_id}\" is not an id (letters, digits, '.', '_', '-')"),
        );
    }
    if !valid_topic(&state_topic) {
        refuse(
            "state_topic",
            format!("\"{state_topic}\" is not a valid topic name"),
        );
    }
    if heartbeat_interval_ms == 0 || heartbeat_interval_ms * 2 > session_timeout_ms {
        refuse(
            "heartbeat_interval_ms",
            format!(
                "must be at least 1 and at most half of session_timeout_ms ({session_timeout_ms})"
            ),
        );
    }
    if transaction_timeout_ms < 1_000 || transaction_timeout_ms >= session_timeout_ms {
        refuse(
            "transaction_timeout_ms",
            format!(
                "must be at least 1000 and less than session_timeout_ms ({session_timeout_ms}): \
                 registrations behind an unfinished change must not expire"
            ),
        );
    }
    for (key, value) in [
        ("write_timeout_ms", write_timeout_ms),
        ("startup_timeout_ms", startup_timeout_ms),
    ] {
        if value == 0 {
            refuse(key, "must be at least 1".into());
        }
    }
    ok.then_some(ClusterConfig {
        id,
        state_topic,
        instance_id,
        session_timeout_ms,
        heartbeat_interval_ms,
        transaction_timeout_ms,
        write_timeout_ms,
        startup_timeout_ms,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn defaults_and_errors() {
        let c = Config::from_toml(
            "node_id = 7\n[upstream]\nbootstrap = [\"127.0.0.1:9092\"]\n[cluster]\nid = \"east\"\n",
        )
        .unwrap();
        let k = c.cluster.unwrap();
        assert_eq!(k.id, "east");
        assert_eq!(k.state_topic, "__kshim_state");
        assert!(k.instance_id.ends_with("-7"), "{}", k.instance_id);
        assert!(super::valid_id(&k.instance_id), "{}", k.instance_id);
        assert!(k.transaction_timeout_ms < k.session_timeout_ms);

        let err = Config::from_toml(
            "[cluster]\nstate_topic = \"a b\"\nheartbeat_interval_ms = 9000\nwat = 1\n",
        )
        .unwrap_err()
        .messages()
        .join("\n");
        for expected in [
            "cluster.id: required",
            "cluster.state_topic: \"a b\" is not a valid topic name",
            "cluster.heartbeat_interval_ms: must be at least 1 and at most half",
            "cluster.wat: unknown key",
        ] {
            assert!(err.contains(expected), "{expected} not in:\n{err}");
        }
    }

    #[test]
    fn the_compose_example_is_a_valid_cluster_config() {
        let text = include_str!("../../docker/cluster/kshim.toml")
            .replace("${env:KSHIM_HOST}", "kshim-2")
            .replace("${env:KSHIM_INSTANCE_ID}", "kshim-2")
            .replace("${env:KSHIM_ADMIN_TOKEN}", "token");
        let c = Config::from_toml(&text).unwrap();
        let mut errors = Vec::new();
        c.validate(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let k = c.cluster.unwrap();
        assert_eq!(
            (k.id.as_str(), k.instance_id.as_str()),
            ("compose", "kshim-2")
        );
    }

    #[test]
    fn the_quick_start_of_docs_cluster_md_is_a_valid_config() {
        let doc = include_str!("../../docs/cluster.md");
        let start = doc.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let end = start + doc[start..].find("```").expect("its end");
        let c = Config::from_toml(&doc[start..end]).unwrap();
        let mut errors = Vec::new();
        c.validate(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(c.cluster.unwrap().id, "prod-east");
    }

    #[test]
    fn a_cluster_needs_an_upstream() {
        let mut errors = Vec::new();
        let c = Config::from_toml("[cluster]\nid = \"east\"\n").unwrap();
        c.validate(&mut errors);
        assert!(
            errors
                .iter()
                .any(|e| e.key == "cluster" && e.message.contains("[upstream]")),
            "{errors:?}"
        );
    }
}
