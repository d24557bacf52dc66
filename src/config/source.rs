//! Where a config comes from: the file (read again on every reload), the
//! command-line flags that override it, and the placeholders resolved in
//! between. `ConfigSource::build` is the one way from a TOML document to a
//! `Config` that kshim runs with.

use super::placeholders::{self, Providers, Scrubber};
use super::{operations, Config, ConfigError, ConfigErrors, UpstreamConfig};
use std::path::PathBuf;

/// The flags of `kshim serve` that override the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CliOverrides {
    pub listen: Option<String>,
    pub advertised_listener: Option<String>,
    pub data_dir: Option<PathBuf>,
    /// HOST:PORT[,HOST:PORT...] of upstream brokers.
    pub upstream: Option<String>,
    pub kafka_release: Option<crate::features::kafka::KafkaRelease>,
    /// The admin API's listener (`admin.listen`); with no `admin.token`, the
    /// token is `$KSHIM_ADMIN_TOKEN` when that is set.
    pub admin_listen: Option<String>,
}

impl CliOverrides {
    fn apply(&self, config: &mut Config) {
        if let Some(v) = &self.listen {
            config.listen = v.clone();
        }
        if let Some(v) = &self.advertised_listener {
            config.advertised_listener = Some(v.clone());
        }
        if let Some(v) = &self.data_dir {
            config.data_dir = v.clone();
        }
        if let Some(v) = self.kafka_release {
            config.kafka_release = v;
        }
        if let Some(v) = &self.admin_listen {
            let admin = config.admin.get_or_insert_with(Default::default);
            admin.listen = v.clone();
            if admin.token.is_none() {
                admin.token = std::env::var("KSHIM_ADMIN_TOKEN")
                    .ok()
                    .filter(|t| !t.is_empty())
                    .map(crate::secret::Secret::new);
            }
        }
        if let Some(v) = &self.upstream {
            let upstream = config.upstream.get_or_insert_with(UpstreamConfig::default);
            upstream.bootstrap = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
        }
    }
}

/// A config as kshim runs with it, and what hides the secrets it resolved.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// Replaces resolved placeholder values (and literal passwords and tokens)
    /// in any message about this config.
    pub scrubber: Scrubber,
}

#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// `None`: no file; every key has its default.
    pub file: Option<PathBuf>,
    pub cli: CliOverrides,
}

/// A TOML document, or the one error that says why it is not one.
pub fn parse_document(text: &str) -> Result<toml::Table, ConfigErrors> {
    text.parse()
        .map_err(|e: toml::de::Error| ConfigErrors(vec![ConfigError::new("config", e.to_string())]))
}

impl ConfigSource {
    /// The file as a TOML document (empty without a file).
    pub fn read_document(&self) -> Result<toml::Table, ConfigErrors> {
        let Some(path) = &self.file else {
            return Ok(toml::Table::new());
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError::new(
                "config",
                format!("reading {}: {e}", path.display()),
            )])
        })?;
        parse_document(&text).map_err(|e| {
            ConfigErrors(
                e.0.into_iter()
                    .map(|m| {
                        ConfigError::new("config", format!("{}: {}", path.display(), m.message))
                    })
                    .collect(),
            )
        })
    }

    /// The config the file gives, with the command line over it.
    pub fn load(&self) -> Result<Loaded, ConfigErrors> {
        self.build(self.read_document()?)
    }

    /// Resolves the placeholders of `doc`, parses it, applies the command line
    /// and checks the result; every error at once, secrets scrubbed.
    pub fn build(&self, mut doc: toml::Table) -> Result<Loaded, ConfigErrors> {
        let mut scrubber = Scrubber::default();
        let providers = Providers {
            file_allowed_paths: allowed_paths(&doc),
        };
        placeholders::resolve_document(&mut doc, &providers, &mut scrubber)
            .map_err(|e| scrubbed(&scrubber, e))?;
        let mut config = Config::from_document(&doc).map_err(|e| scrubbed(&scrubber, e.0))?;
        self.cli.apply(&mut config);
        let mut errors = Vec::new();
        config.validate(&mut errors);
        hide_literal_secrets(&config, &mut scrubber);
        if errors.is_empty() {
            Ok(Loaded { config, scrubber })
        } else {
            Err(scrubbed(&scrubber, errors))
        }
    }
}

/// `[config_providers] file_allowed_paths`, read before any placeholder is
/// resolved: it says what placeholders may read, so it cannot be one.
fn allowed_paths(doc: &toml::Table) -> Vec<PathBuf> {
    match doc.get("config_providers").and_then(toml::Value::as_table) {
        Some(t) => operations::parse_providers(t, &mut Vec::new()),
        None => Vec::new(),
    }
}

fn scrubbed(scrubber: &Scrubber, errors: Vec<ConfigError>) -> ConfigErrors {
    ConfigErrors(
        errors
            .into_iter()
            .map(|e| ConfigError::new(e.key, scrubber.scrub(&e.message)))
            .collect(),
    )
}

fn hide_literal_secrets(config: &Config, scrubber: &mut Scrubber) {
    use crate::tls::{Identity, Trust};
    fn stores<'a>(identity: Option<&'a Identity>, trust: Option<&'a Trust>) -> Vec<&'a str> {
        let mut out = Vec::new();
        if let Some(Identity::Pkcs12 { password, .. }) = identity {
            out.push(password.expose());
        }
        if let Some(Trust::Pkcs12 { password, .. }) = trust {
            out.push(password.expose());
        }
        out
    }
    let mut secrets: Vec<&str> = Vec::new();
    if let Some(t) = &config.tls {
        secrets.extend(stores(Some(&t.identity), t.trust.as_ref()));
    }
    if let Some(a) = &config.admin {
        if let Some(t) = &a.tls {
            secrets.extend(stores(Some(&t.identity), t.trust.as_ref()));
        }
        if let Some(token) = &a.token {
            secrets.push(token.expose());
        }
    }
    if let Some(u) = &config.upstream {
        if let Some(s) = &u.sasl {
            secrets.push(&s.password);
        }
        if let Some(t) = &u.tls {
            secrets.extend(stores(t.identity.as_ref(), Some(&t.trust)));
        }
    }
    for s in secrets {
        scrubber.add_literal(s);
    }
}
