//! `kshim features`: the KIP-584 operator tool. Speaks the Kafka protocol to kshim
//! or to any Kafka cluster; its text output uses the lines of Kafka's
//! FeatureCommand, its JSON output the KIP's describe document.

mod offline;
mod update;
mod usage;

use super::command_config::CommandConfig;
use anyhow::{bail, Context as _, Result};
use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{ApiKey, UpdateFeaturesRequest};
use kafka_protocol::protocol::StrBytes;
use kshim::client::{negotiate, ClientSecurity, KafkaClient};
use kshim::features::kafka::{KafkaRelease, METADATA_VERSION};
use kshim::features::UpgradeType;
use kshim::protocol::api_versions::DecodedApiVersions;
use kshim::protocol::apis::{
    decode_metadata_brokers, metadata_request, METADATA_VERSION as METADATA_REQUEST_VERSION,
};
use kshim::protocol::errors;
use offline::{feature_dependencies, version_mapping};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;
use update::update_features;
pub use usage::{command_line_error, CommandLineError};

#[derive(clap::Args, Debug)]
pub struct FeaturesArgs {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    op: Op,
}

/// Options every subcommand takes, before or after its name (as Kafka's tool
/// takes them before).
#[derive(clap::Args, Debug, Clone)]
struct Common {
    /// HOST:PORT[,HOST:PORT...] of kshim or of Kafka brokers.
    #[arg(long = "bootstrap-server", global = true)]
    bootstrap_server: Option<String>,
    /// HOST:PORT[,HOST:PORT...] of Kafka controllers, asked directly (KIP-919).
    #[arg(
        long = "bootstrap-controller",
        global = true,
        conflicts_with = "bootstrap_server"
    )]
    bootstrap_controller: Option<String>,
    /// Kafka client properties: security.protocol, ssl.* and sasl.* (PLAIN,
    /// SCRAM-SHA-256, SCRAM-SHA-512), as kafka-features.sh reads them.
    #[arg(long = "command-config", global = true, value_name = "FILE")]
    command_config: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "text", global = true)]
    output: Output,
    /// Seconds to wait for each server.
    #[arg(long, default_value_t = 30, global = true)]
    timeout: u64,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Text,
    Json,
}

#[derive(clap::Args, Debug, Clone)]
struct UpdateArgs {
    /// NAME=LEVEL (repeatable). metadata.version also takes a release name such as 4.1-IV1.
    #[arg(long = "feature")]
    features: Vec<String>,
    /// Validate only; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
}

#[derive(clap::Args, Debug, Clone)]
struct ReleaseArgs {
    /// Every feature to the levels of this Kafka release, such as 4.0 or 3.9-IV0
    /// (see version-mapping).
    #[arg(long, conflicts_with = "all")]
    release_version: Option<String>,
    /// Deprecated in Kafka's tool: metadata.version only, to this release.
    #[arg(long, hide = true)]
    metadata: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
enum Op {
    /// Show supported and finalized features.
    Describe {
        /// Ask this node (a broker id from the cluster's Metadata) instead of the
        /// bootstrap servers.
        #[arg(long = "node-id", allow_negative_numbers = true)]
        node_id: Option<i32>,
        /// One tab-separated line per feature, as kafka-features.sh 4.2 and older
        /// print them, for scripts that parse that format.
        #[arg(long)]
        tab_separated: bool,
    },
    /// Raise finalized levels.
    Upgrade {
        #[command(flatten)]
        update: UpdateArgs,
        #[command(flatten)]
        release: ReleaseArgs,
        /// Every feature below the latest stable Kafka release's level to that
        /// level, and every other feature to the highest level the server supports.
        #[arg(long)]
        all: bool,
        /// With --all: Kafka's features too to the highest level the server
        /// supports, including levels the release does not ship as stable.
        #[arg(long, requires = "all")]
        unstable: bool,
    },
    /// Lower finalized levels.
    Downgrade {
        #[command(flatten)]
        update: UpdateArgs,
        #[command(flatten)]
        release: ReleaseArgs,
        /// Every Kafka feature finalized above the latest stable Kafka release's
        /// level down to it (before rolling brokers back to that release).
        #[arg(long)]
        all: bool,
        /// Allow a downgrade that may lose data (UNSAFE_DOWNGRADE).
        #[arg(long = "unsafe", alias = "unsafe-downgrade")]
        unsafe_downgrade: bool,
    },
    /// Disable features (finalize level 0).
    Disable {
        #[command(flatten)]
        update: UpdateArgs,
        #[arg(long = "unsafe")]
        unsafe_flag: bool,
    },
    /// The feature levels of a Kafka release (default: the latest stable one).
    /// Needs no server.
    VersionMapping {
        #[arg(long)]
        release_version: Option<String>,
    },
    /// What a feature level requires of other features. Needs no server.
    FeatureDependencies {
        /// NAME=LEVEL (repeatable).
        #[arg(long = "feature", required = true)]
        features: Vec<String>,
    },
}

/// One server's answer.
struct Described {
    host: String,
    port: u16,
    answer: DecodedApiVersions,
}

/// Writes to stdout; a reader that went away (`| head`) ends the output quietly
/// instead of panicking.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

fn split_servers(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Where the commands that talk to a server connect, and how.
struct Target {
    servers: Vec<String>,
    security: ClientSecurity,
    timeout: Duration,
    output: Output,
}

impl Target {
    fn new(common: &Common) -> Result<Target> {
        let Some(list) = common
            .bootstrap_server
            .as_ref()
            .or(common.bootstrap_controller.as_ref())
        else {
            return Err(CommandLineError(
                "You must specify either --bootstrap-controller or --bootstrap-server.".into(),
            )
            .into());
        };
        let servers = split_servers(list);
        if servers.is_empty() {
            bail!("--bootstrap-server names no server");
        }
        let security = match &common.command_config {
            Some(path) => CommandConfig::load(path)?.security()?,
            None => ClientSecurity::default(),
        };
        Ok(Target {
            servers,
            security,
            timeout: Duration::from_secs(common.timeout),
            output: common.output,
        })
    }

    async fn connect(&self, server: &str) -> Result<KafkaClient, kshim::client::ClientError> {
        KafkaClient::connect_secured(server, self.timeout, &self.security).await
    }
}

/// Asks every bootstrap server and keeps the answer with the highest epoch: the
/// KIP's rule for eventually consistent reads.
async fn describe_all(target: &Target) -> Result<Described> {
    let mut best: Option<Described> = None;
    let mut failures = Vec::new();
    for server in &target.servers {
        let attempt = async {
            let mut client = target.connect(server).await?;
            let (_, answer) = client.api_versions().await?;
            Ok::<_, kshim::client::ClientError>(answer)
        };
        match attempt.await {
            Ok(answer) if answer.error_code != errors::NONE => failures.push(format!(
                "{server}: ApiVersions failed with {}",
                errors::name(answer.error_code)
            )),
            Ok(answer) => {
                let (host, port) = server.rsplit_once(':').unwrap_or((server.as_str(), "9092"));
                let d = Described {
                    host: host.to_owned(),
                    port: port.parse().unwrap_or(9092),
                    answer,
                };
                if best
                    .as_ref()
                    .is_none_or(|b| d.answer.features.epoch > b.answer.features.epoch)
                {
                    best = Some(d);
                }
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    match best {
        Some(d) => {
            for f in failures {
                eprintln!("warning: {f}");
            }
            Ok(d)
        }
        None => bail!("no bootstrap server answered: {}", failures.join("; ")),
    }
}

/// Asks node `node_id` itself, found in the Metadata of the first bootstrap
/// server that answers (kafka-features.sh's `describe --node-id`).
async fn describe_node(target: &Target, node_id: i32) -> Result<Described> {
    if node_id < 0 {
        bail!("Invalid node id {node_id}: must be non-negative.");
    }
    let mut failures = Vec::new();
    for server in &target.servers {
        let brokers = async {
            let mut client = target.connect(server).await?;
            let raw = client
                .request(
                    ApiKey::Metadata,
                    METADATA_REQUEST_VERSION,
                    &metadata_request(&[]),
                )
                .await?;
            decode_metadata_brokers(METADATA_REQUEST_VERSION, &raw)
                .map(|(_, brokers)| brokers)
                .map_err(|source| kshim::client::ClientError::Decode {
                    addr: server.clone(),
                    source,
                })
        };
        let brokers = match brokers.await {
            Ok(brokers) => brokers,
            Err(e) => {
                failures.push(e.to_string());
                continue;
            }
        };
        let Some(broker) = brokers.get(&node_id) else {
            let known: Vec<String> = brokers.keys().map(ToString::to_string).collect();
            bail!(
                "node {node_id} is not in the cluster's metadata (nodes: {})",
                known.join(", ")
            );
        };
        let mut client = target.connect(&broker.address()).await?;
        let (_, answer) = client.api_versions().await?;
        if answer.error_code != errors::NONE {
            bail!(
                "{}: ApiVersions failed with {}",
                broker.address(),
                errors::name(answer.error_code)
            );
        }
        return Ok(Described {
            host: broker.host.clone(),
            port: u16::try_from(broker.port).unwrap_or(0),
            answer,
        });
    }
    bail!("no bootstrap server answered: {}", failures.join("; "))
}

/// The Kafka release whose FeatureCommand this tool speaks as (the newest
/// kshim has data for): its metadata.version names, release levels and
/// dependency table.
pub(super) fn tool_release() -> KafkaRelease {
    KafkaRelease::newest()
}

fn level_to_string(feature: &str, level: i16) -> String {
    if feature == METADATA_VERSION {
        match tool_release().metadata_version_name(level) {
            Some(name) => name.to_owned(),
            None => format!("UNKNOWN {level}"),
        }
    } else {
        level.to_string()
    }
}

/// Kafka 4.3 and later print fixed-width columns; 4.2 and older one
/// tab-separated line per feature.
fn describe_text(d: &Described, tab_separated: bool) -> String {
    let f = &d.answer.features;
    let epoch = if f.epoch >= 0 {
        f.epoch.to_string()
    } else {
        "-".to_owned()
    };
    let mut out = String::new();
    for (name, &(min, max)) in &f.supported {
        let finalized = f.finalized.get(name).map_or(0, |&(_, max)| max);
        let (min, max, finalized) = (
            level_to_string(name, min),
            level_to_string(name, max),
            level_to_string(name, finalized),
        );
        out.push_str(&if tab_separated {
            format!(
                "Feature: {name}\tSupportedMinVersion: {min}\tSupportedMaxVersion: {max}\tFinalizedVersionLevel: {finalized}\tEpoch: {epoch}\n"
            )
        } else {
            format!(
                "Feature: {name:<40}  SupportedMinVersion: {min:<15}  SupportedMaxVersion: {max:<15}  FinalizedVersionLevel: {finalized:<15}  Epoch: {epoch}\n"
            )
        });
    }
    out
}

/// The KIP-584 describe document.
fn describe_json(d: &Described, status: &str) -> Map<String, Value> {
    d.answer
        .features
        .describe_document(status, &d.host, i32::from(d.port))
}

fn parse_feature(spec: &str, disable: bool) -> Result<(String, i16)> {
    let (name, level) = match spec.split_once('=') {
        Some((n, l)) => (n.trim(), Some(l.trim())),
        None if disable => (spec.trim(), None),
        None => bail!("Can't parse feature=level string {spec}: equals sign not found."),
    };
    if name.is_empty() {
        bail!("Can't parse feature=level string {spec}: the feature name is empty.");
    }
    let level = match level {
        None => 0,
        Some(l) => match l.parse::<i16>() {
            Ok(v) => v,
            Err(_) if name == METADATA_VERSION => tool_release()
                .metadata_version_level(l)
                .with_context(|| format!("Unknown metadata.version {l}."))?,
            Err(_) => {
                bail!("Can't parse feature=level string {spec}: unable to parse {l} as a short.")
            }
        },
    };
    if disable && level != 0 {
        bail!("disable takes --feature NAME (or NAME=0), not {spec}");
    }
    Ok((name.to_owned(), level))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Upgrade,
    Downgrade,
    Disable,
}

impl Kind {
    fn op(self) -> &'static str {
        match self {
            Kind::Upgrade => "upgrade",
            Kind::Downgrade => "downgrade",
            Kind::Disable => "disable",
        }
    }
}

pub async fn run(args: FeaturesArgs) -> Result<u8> {
    let common = args.common;
    match args.op {
        Op::VersionMapping { release_version } => {
            version_mapping(release_version.as_deref(), common.output)
        }
        Op::FeatureDependencies { features } => feature_dependencies(&features, common.output),
        Op::Describe {
            node_id,
            tab_separated,
        } => {
            let target = Target::new(&common)?;
            let d = match node_id {
                Some(node_id) => describe_node(&target, node_id).await?,
                None => describe_all(&target).await?,
            };
            // Epoch -1 with nothing finalized: the server does not know the
            // finalized features yet (KAFKA-19964: a broker that has not loaded
            // its metadata, or kshim in front of a cluster that has not answered).
            let unknown = d.answer.features.epoch < 0 && d.answer.features.finalized.is_empty();
            let status = if unknown { "UNKNOWN" } else { "OK" };
            match target.output {
                Output::Text => emit(&describe_text(&d, tab_separated)),
                Output::Json => emit(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&Value::Object(describe_json(&d, status)))?
                )),
            }
            if unknown {
                eprintln!(
                    "The finalized features of {}:{} are unknown: it answered epoch -1 with none finalized. \
                     A Kafka broker answers so before it has loaded its metadata, and a kshim in front of a \
                     cluster until one of the brokers has answered it (see kshim's log and /readyz).",
                    d.host, d.port
                );
                return Ok(1);
            }
            Ok(0)
        }
        Op::Upgrade {
            update,
            release,
            all,
            unstable,
        } => {
            let target = Target::new(&common)?;
            let mut wanted = parse_all(&update.features, false)?;
            release_or_metadata(Kind::Upgrade, &release, &mut wanted)?;
            if all {
                let nothing = "Every feature is already finalized at the level --all would set.";
                match levels_for_all(&target, &wanted, |d| upgrade_all(d, unstable), nothing)
                    .await?
                {
                    Some(levels) => wanted = levels,
                    None => return Ok(0),
                }
            }
            let t = UpgradeType::Upgrade;
            update_features(Kind::Upgrade, t, wanted, &update, &target).await
        }
        Op::Downgrade {
            update,
            release,
            all,
            unsafe_downgrade,
        } => {
            let target = Target::new(&common)?;
            let mut wanted = parse_all(&update.features, false)?;
            release_or_metadata(Kind::Downgrade, &release, &mut wanted)?;
            if all {
                let nothing =
                    "No feature is finalized above the latest stable Kafka release's level.";
                match levels_for_all(&target, &wanted, downgrade_all, nothing).await? {
                    Some(levels) => wanted = levels,
                    None => return Ok(0),
                }
            }
            let t = downgrade_type(unsafe_downgrade);
            update_features(Kind::Downgrade, t, wanted, &update, &target).await
        }
        Op::Disable {
            update,
            unsafe_flag,
        } => {
            let target = Target::new(&common)?;
            let wanted = parse_all(&update.features, true)?;
            let t = downgrade_type(unsafe_flag);
            update_features(Kind::Disable, t, wanted, &update, &target).await
        }
    }
}

fn downgrade_type(unsafe_flag: bool) -> UpgradeType {
    if unsafe_flag {
        UpgradeType::UnsafeDowngrade
    } else {
        UpgradeType::SafeDowngrade
    }
}

/// `--all`: the levels `pick` chooses from what the server describes; `None`
/// (having said so) when there is nothing to change.
async fn levels_for_all(
    target: &Target,
    named: &BTreeMap<String, i16>,
    pick: impl FnOnce(&Described) -> BTreeMap<String, i16>,
    nothing: &str,
) -> Result<Option<BTreeMap<String, i16>>> {
    if !named.is_empty() {
        bail!("--all cannot be combined with --feature or --release-version");
    }
    let levels = pick(&describe_all(target).await?);
    if levels.is_empty() {
        emit(&format!("{nothing}\n"));
        return Ok(None);
    }
    Ok(Some(levels))
}

/// `--release-version` (every release feature to the release's level) and the
/// deprecated `--metadata` (metadata.version only), as Kafka's tool reads them.
/// An upgrade leaves out features whose release level is 0; a downgrade sets
/// them too.
fn release_or_metadata(
    kind: Kind,
    release: &ReleaseArgs,
    wanted: &mut BTreeMap<String, i16>,
) -> Result<()> {
    if let Some(name) = &release.metadata {
        emit(" `metadata` flag is deprecated and may be removed in a future release.\n");
        if release.release_version.is_some() || !wanted.is_empty() {
            bail!("Can not specify `metadata` with other feature flags.");
        }
        wanted.insert(METADATA_VERSION.to_owned(), release_level(name)?);
    }
    if let Some(name) = &release.release_version {
        if !wanted.is_empty() {
            bail!("Can not specify `release-version` with other feature flags.");
        }
        for (feature, level) in tool_release().release_levels(release_level(name)?) {
            if kind == Kind::Downgrade || level > 0 {
                wanted.insert(feature.to_owned(), level);
            }
        }
    }
    Ok(())
}

/// The level of a metadata.version name, or Kafka 4.4's error naming every known one.
pub(super) fn release_level(name: &str) -> Result<i16> {
    let release = tool_release();
    release.any_metadata_version_level(name).with_context(|| {
        let known: Vec<&str> = release
            .data()
            .metadata_versions
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        format!(
            "Unknown metadata.version '{name}'. Supported metadata.version are: {}",
            known.join(", ")
        )
    })
}

/// The levels of the latest stable Kafka release this tool knows.
fn latest_release_levels() -> BTreeMap<&'static str, i16> {
    tool_release()
        .release_levels(tool_release().metadata_version_latest_production())
        .into_iter()
        .collect()
}

/// `upgrade --all`: Kafka's features to the latest stable release's levels (or,
/// with `unstable`, to the server's highest), every other feature to the
/// highest level the server supports; only ever up, never past what the
/// server supports.
fn upgrade_all(d: &Described, unstable: bool) -> BTreeMap<String, i16> {
    let release = latest_release_levels();
    let f = &d.answer.features;
    let mut wanted = BTreeMap::new();
    for (name, &(_, max)) in &f.supported {
        let goal = match release.get(name.as_str()) {
            Some(&level) if !unstable => level.min(max),
            _ => max,
        };
        let current = f.finalized.get(name).map_or(0, |&(_, m)| m);
        if goal > current {
            wanted.insert(name.clone(), goal);
        }
    }
    wanted
}

/// `downgrade --all`: every Kafka feature finalized above the latest stable
/// release's level down to it. Features Kafka does not define are left alone:
/// this tool knows no release of theirs.
fn downgrade_all(d: &Described) -> BTreeMap<String, i16> {
    let release = latest_release_levels();
    let mut wanted = BTreeMap::new();
    for (name, &(_, current)) in &d.answer.features.finalized {
        if let Some(&level) = release.get(name.as_str()) {
            if current > level {
                wanted.insert(name.clone(), level);
            }
        }
    }
    wanted
}

fn parse_all(specs: &[String], disable: bool) -> Result<BTreeMap<String, i16>> {
    let mut out = BTreeMap::new();
    for spec in specs {
        let (name, level) = parse_feature(spec, disable)?;
        if out.insert(name.clone(), level).is_some() {
            bail!("Feature {name} was specified more than once.");
        }
    }
    Ok(out)
}
