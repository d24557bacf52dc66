//! `kshim config check`: checks a kshim config file as `kshim serve` would, short
//! of binding ports and opening the data directory (placeholders resolved, every
//! TLS file read and each key matched to its certificate, policies compiled),
//! and a broker's properties file against the config validators in force at
//! given feature levels (format-time validation, before anything is started).

use anyhow::{bail, Context as _, Result};
use kshim::config::{Config, ConfigSource};
use kshim::features::kafka::METADATA_VERSION;
use kshim::policy::properties;
use kshim::tls::{ClientTlsMaterial, TlsMaterial};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ConfigCommand {
    /// Check a kshim config, and optionally a broker's properties file against
    /// its validators. Exits 1 when a property violates a validator in force, 2
    /// when the input cannot be read, 0 otherwise.
    Check(CheckArgs),
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    /// kshim's TOML config (the validators come from its [policy] section).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A broker properties file (server.properties) to check.
    #[arg(long)]
    file: Option<PathBuf>,
    /// NAME=LEVEL: the finalized level a feature will have (repeatable);
    /// metadata.version also takes a release such as 4.1-IV0. Features not named
    /// are at level 0, where no validator is in force unless one is registered at 0.
    #[arg(long = "feature", value_name = "NAME=LEVEL")]
    features: Vec<String>,
}

/// Loads the config as `kshim serve` does (placeholders, command-line defaults,
/// cross-key checks) and builds its TLS material; every problem at once. With
/// the config, what `kshim serve` accepts but clients may not (warnings).
fn serve_would_accept(path: &std::path::Path) -> Result<(Config, Vec<String>), Vec<String>> {
    let source = ConfigSource {
        file: Some(path.to_owned()),
        ..ConfigSource::default()
    };
    let loaded = source
        .load()
        .map_err(|errors| errors.0.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    let config = loaded.config;
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    if let Some(settings) = &config.tls {
        match TlsMaterial::build("tls", settings) {
            Ok(material) => {
                if let Some(Ok(names)) = config.server_names() {
                    if let Some(why) = names.uncovered(&material.dns_names()) {
                        warnings.push(format!("upstream.listeners.sni_host: {why}"));
                    }
                }
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    if let Some(settings) = config.admin.as_ref().and_then(|a| a.tls.as_ref()) {
        if let Err(e) = TlsMaterial::build("admin.tls", settings) {
            problems.push(e.to_string());
        }
    }
    if let Some(settings) = config.upstream.as_ref().and_then(|u| u.tls.as_ref()) {
        if let Err(e) = ClientTlsMaterial::build("upstream.tls", settings) {
            problems.push(e.to_string());
        }
    }
    if config.data_dir.exists() && !config.data_dir.is_dir() {
        problems.push(format!(
            "data_dir: {} exists and is not a directory",
            config.data_dir.display()
        ));
    }
    if problems.is_empty() {
        Ok((config, warnings))
    } else {
        Err(problems)
    }
}

/// Runs the subcommand; the exit code is the result.
pub fn run(args: ConfigArgs) -> Result<u8> {
    match args.command {
        ConfigCommand::Check(a) => Ok(check(a).unwrap_or_else(|e| {
            eprintln!("kshim config check: {e:#}");
            UNUSABLE_INPUT
        })),
    }
}

const VIOLATIONS: u8 = 1;
const UNUSABLE_INPUT: u8 = 2;

fn check(args: CheckArgs) -> Result<u8> {
    if args.config.is_none() && args.file.is_none() {
        bail!(
            "nothing to check: give --config FILE (a kshim config) and/or --file FILE \
             (a broker's properties, checked against the validators)"
        );
    }
    let (config, warnings) = match &args.config {
        Some(path) => match serve_would_accept(path) {
            Ok(accepted) => accepted,
            Err(problems) => {
                for p in &problems {
                    eprintln!("{}: {p}", path.display());
                }
                eprintln!(
                    "{}: {} problem(s); kshim serve would refuse this config",
                    path.display(),
                    problems.len()
                );
                return Ok(UNUSABLE_INPUT);
            }
        },
        None => (Config::default(), Vec::new()),
    };
    let mut levels = BTreeMap::new();
    for f in &args.features {
        let Some((name, level)) = f.split_once('=') else {
            bail!("--feature {f}: expected NAME=LEVEL");
        };
        let (name, level) = (name.trim(), level.trim());
        let level: i16 = match level.parse::<i16>() {
            Ok(l) if l >= 0 => l,
            // metadata.version may be named by release, as kafka-storage takes it.
            _ if name == METADATA_VERSION => config
                .kafka_release
                .metadata_version_level(level)
                .with_context(|| {
                    format!("--feature {f}: not a level or a metadata.version such as 4.1-IV0")
                })?,
            _ => bail!("--feature {f}: the level must be an integer from 0 to 32767"),
        };
        levels.insert(name.to_owned(), level);
    }
    let validators = &config.policies.validators;
    if let Some(path) = &args.config {
        println!("{}: the configuration is valid", path.display());
        for w in &warnings {
            eprintln!("{}: warning: {w}", path.display());
        }
    }
    let Some(file) = &args.file else {
        return Ok(0);
    };
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let props = properties::parse(&text);
    for feature in validators.features() {
        if !levels.contains_key(feature) {
            println!(
                "note: no --feature {feature}=LEVEL given; its validators are checked at level 0"
            );
        }
    }
    let level_of = |f: &str| levels.get(f).copied().unwrap_or(0);
    let violations = properties::check(&props, validators, &level_of);
    for v in &violations {
        println!("{}: {v}", file.display());
    }
    if violations.is_empty() {
        println!(
            "{}: {} properties checked, no violation",
            file.display(),
            props.len()
        );
        Ok(0)
    } else {
        println!("{}: {} violation(s)", file.display(), violations.len());
        Ok(VIOLATIONS)
    }
}
