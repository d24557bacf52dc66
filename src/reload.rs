//! Changing what can change while kshim runs: the TLS material and the policies.
//! Everything new is built and checked first; only when all of it is good is any
//! of it put in force, so a failed reload changes nothing. Keys that need a
//! restart are named and left as they are.
//!
//! `kshim serve` runs this on SIGHUP with its config file.

use crate::config::Config;
use crate::policy::PolicyCell;
use crate::server::tls::{TlsCell, TlsMaterial};
use std::sync::Arc;

/// What a running kshim can change.
pub struct Reloadable {
    pub policies: Arc<PolicyCell>,
    /// `None` when kshim was started without `[tls]`.
    pub tls: Option<Arc<TlsCell>>,
    /// The config kshim is running with, to tell which keys changed.
    pub running: Config,
}

/// The result of one reload.
#[derive(Debug, Default)]
pub struct ReloadOutcome {
    /// What was put in force.
    pub applied: Vec<String>,
    /// Changes that need a restart and were not applied.
    pub need_restart: Vec<String>,
}

impl Reloadable {
    /// Puts the dynamic parts of `next` in force, or returns every reason it
    /// cannot (and then nothing changes).
    pub fn apply(&mut self, next: Config) -> Result<ReloadOutcome, Vec<String>> {
        let mut outcome = ReloadOutcome::default();
        let r = &self.running;
        for (key, changed) in [
            ("listen", r.listen != next.listen),
            (
                "advertised_listener",
                r.advertised_listener != next.advertised_listener,
            ),
            ("data_dir", r.data_dir != next.data_dir),
            ("node_id", r.node_id != next.node_id),
            ("upstream", r.upstream != next.upstream),
            (
                "tls (turning it on or off)",
                r.tls.is_some() != next.tls.is_some(),
            ),
        ] {
            if changed {
                outcome.need_restart.push(key.to_owned());
            }
        }
        // Build everything aside first.
        let material = match (&self.tls, &next.tls) {
            (Some(_), Some(settings)) => {
                Some(TlsMaterial::build(settings).map_err(|e| vec![e.to_string()])?)
            }
            _ => None,
        };
        // Nothing below can fail.
        if let (Some(cell), Some(material)) = (&self.tls, material) {
            if material.settings != cell.current().settings {
                outcome.applied.push("tls".into());
            }
            cell.install(material);
        }
        self.policies.replace(next.policies.clone());
        outcome.applied.push("policy".into());
        self.running.policies = next.policies;
        self.running.tls = match (&self.running.tls, next.tls) {
            (Some(_), Some(t)) => Some(t),
            (kept, _) => kept.clone(),
        };
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policies;

    #[test]
    fn restart_keys_are_named_and_policies_change_whole() {
        let running = Config::default();
        let policies = Arc::new(PolicyCell::new(Policies::default()));
        let mut r = Reloadable {
            policies: Arc::clone(&policies),
            tls: None,
            running: running.clone(),
        };
        let next = Config::from_toml(
            "listen = \"127.0.0.1:9999\"\n[policy.create_topic]\nmax_partitions = 3\n",
        )
        .unwrap();
        let outcome = r.apply(next).unwrap();
        assert_eq!(outcome.need_restart, ["listen"]);
        assert!(!policies.load().create_topic.is_permissive());
        assert_eq!(
            r.running.listen, running.listen,
            "the running listener is unchanged"
        );

        let with_tls =
            Config::from_toml("[tls]\ncertificate = \"c.pem\"\nkey = \"k.pem\"\n").unwrap();
        let outcome = r.apply(with_tls).unwrap();
        assert!(outcome.need_restart.iter().any(|k| k.starts_with("tls")));
        assert!(
            policies.load().create_topic.is_permissive(),
            "the file's policies apply"
        );
    }
}
