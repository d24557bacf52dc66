//! `kshim lab matrix`: runs a command once per cell of a release-by-feature
//! matrix, each time against a fresh kshim (in this process, its own data
//! directory and ports) that presents the cell to every connection through a
//! discovery-lab scenario, in front of the given brokers or standalone. What
//! the cells are and how they are reported is `kshim::lab::matrix`.

use anyhow::{bail, Context as _, Result};
use kshim::census::Filter;
use kshim::config::{CliOverrides, ConfigSource};
use kshim::features::kafka::KafkaRelease;
use kshim::lab::matrix::{self, Axis, Cell, Outcome, Verdict};
use kshim::service::Service;
use std::collections::BTreeMap;
use std::io::{BufRead, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(clap::Args, Debug)]
pub struct LabArgs {
    #[command(subcommand)]
    op: Op,
}

#[derive(clap::Subcommand, Debug)]
enum Op {
    /// Run COMMAND once per Kafka release (and feature level) that kshim
    /// presents, and print a table of what passed. The command finds the
    /// bootstrap address in $KAFKA_BOOTSTRAP and in {bootstrap}.
    Matrix(MatrixArgs),
}

#[derive(clap::Args, Debug)]
struct MatrixArgs {
    /// Releases to present, such as 4.0,4.4 (default: every release kshim has data for).
    #[arg(long, value_delimiter = ',')]
    releases: Vec<String>,
    /// A feature axis, NAME=LEVEL[,LEVEL...], such as group.version=0,1; repeatable.
    #[arg(long = "features", value_name = "NAME=LEVELS")]
    features: Vec<String>,
    /// Stand in front of these Kafka brokers (HOST:PORT[,HOST:PORT...]);
    /// without it each kshim is a standalone discovery server (ApiVersions,
    /// Metadata and the feature RPCs only).
    #[arg(long)]
    upstream: Option<String>,
    /// Seconds a cell's command may run before it is killed and the cell fails.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    #[arg(long, value_enum, default_value = "table")]
    output: Output,
    /// Lines "CELL pass|fail" (a cell such as "4.0 group.version=0", or a
    /// release for all its cells); listed failures do not fail the run.
    #[arg(long, value_name = "FILE")]
    expect: Option<PathBuf>,
    /// Where each cell's output and kshim data go (default: a new directory
    /// under the system's temporary directory).
    #[arg(long, value_name = "DIR")]
    logs: Option<PathBuf>,
    /// A kshim config each cell's kshim starts from, for what the brokers need
    /// ([upstream.tls], [upstream.sasl], policies); its listen, data_dir,
    /// shutdown_delay_ms, broker ports and lab are the matrix's own.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The command and its arguments; {bootstrap}, {cell} and {release} in
    /// them are replaced per cell.
    #[arg(trailing_var_arg = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Table,
    Json,
    Markdown,
}

/// Lines of a cell's output kept for the report.
const TAIL_LINES: usize = 12;
/// How long a cell's kshim may take to read the brokers' API table.
const READY_WITHIN: Duration = Duration::from_secs(30);

pub async fn run(args: LabArgs) -> Result<u8> {
    match args.op {
        Op::Matrix(args) => run_matrix(args).await,
    }
}

async fn run_matrix(args: MatrixArgs) -> Result<u8> {
    if args.timeout == 0 {
        bail!("--timeout must be at least 1 second");
    }
    let releases: Vec<KafkaRelease> = if args.releases.is_empty() {
        kshim::releases::releases()
            .iter()
            .filter_map(|r| KafkaRelease::named(r.minor()))
            .collect()
    } else {
        args.releases
            .iter()
            .map(|name| {
                KafkaRelease::named(name.trim()).with_context(|| {
                    format!(
                        "--releases: \"{name}\" is not a Kafka release kshim has data for ({})",
                        KafkaRelease::known()
                    )
                })
            })
            .collect::<Result<_>>()?
    };
    let axes: Vec<Axis> = args
        .features
        .iter()
        .map(|text| Axis::parse(text).map_err(|e| anyhow::anyhow!("--features {e}")))
        .collect::<Result<_>>()?;
    let expectations = match &args.expect {
        Some(path) => matrix::parse_expectations(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading --expect {}", path.display()))?,
        )
        .map_err(|e| anyhow::anyhow!("--expect {}: {e}", path.display()))?,
        None => Vec::new(),
    };
    let logs = match &args.logs {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("kshim-matrix-{}", std::process::id())),
    };
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let cells = matrix::cells(&releases, &axes);
    let mut outcomes = Vec::with_capacity(cells.len());
    for (i, cell) in cells.iter().enumerate() {
        eprint!("[{}/{}] {}: ", i + 1, cells.len(), cell.label());
        let _ = std::io::stderr().flush();
        let mut outcome = run_cell(cell, &args, &logs).await?;
        outcome.expected = matrix::expected(&expectations, cell);
        eprintln!(
            "{} in {:.1} s{}",
            match outcome.verdict {
                Verdict::Pass => "pass",
                Verdict::Fail => "fail",
                Verdict::Skip => "skipped",
            },
            outcome.seconds,
            outcome
                .why
                .as_deref()
                .map(|w| format!(": {w}"))
                .unwrap_or_default()
        );
        outcomes.push(outcome);
    }
    let report = match args.output {
        Output::Table => matrix::table(&outcomes),
        Output::Markdown => matrix::markdown(&outcomes),
        Output::Json => {
            let mut text = serde_json::to_string_pretty(&serde_json::json!({
                "cells": outcomes,
                "summary": matrix::summary(&outcomes),
                "logs": logs,
            }))?;
            text.push('\n');
            text
        }
    };
    print!("{report}");
    eprintln!("each cell's output and kshim data: {}", logs.display());
    Ok(u8::from(outcomes.iter().any(|o| !o.as_expected())))
}

/// One cell: a fresh kshim presenting it, the command against it, what the
/// census saw, and the kshim stopped.
async fn run_cell(cell: &Cell, args: &MatrixArgs, logs: &Path) -> Result<Outcome> {
    let mut outcome = Outcome {
        cell: cell.label(),
        release: cell.release.minor().to_owned(),
        features: cell.levels.iter().cloned().collect(),
        verdict: Verdict::Skip,
        expected: Verdict::Pass,
        exit_status: None,
        timed_out: false,
        seconds: 0.0,
        why: None,
        output_tail: Vec::new(),
        clients: Vec::new(),
        apis: BTreeMap::new(),
        served: BTreeMap::new(),
        refusals: BTreeMap::new(),
    };
    if let Some(why) = cell.unsupported() {
        outcome.why = Some(why);
        return Ok(outcome);
    }
    let slug = cell.slug();
    let dir = logs.join(&slug);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let config_path = dir.join("kshim.toml");
    std::fs::write(&config_path, cell_config(cell, args, &dir)?)?;
    let service = Service::start(
        ConfigSource {
            file: Some(config_path),
            cli: CliOverrides::default(),
        },
        None,
    )
    .await
    .with_context(|| format!("starting kshim for cell {}", cell.label()))?;
    let context = Arc::clone(&service.context);
    let bootstrap = service.local_addr.to_string();
    let (stop, stopped) = watch::channel(false);
    let serving = tokio::spawn(service.serve(stopped));
    let started = Instant::now();
    let ready = wait_ready(&context).await;
    let output_path = logs.join(format!("{slug}.log"));
    let result = match ready {
        Err(why) => Err(why),
        Ok(()) => Ok(run_command(cell, args, &bootstrap, &output_path).await?),
    };
    outcome.seconds = started.elapsed().as_secs_f64();
    for client in context.census.clients(&Filter::default()) {
        if let Some(name) = &client.software_name {
            let who = format!(
                "{name} {}",
                client.software_version.as_deref().unwrap_or("")
            );
            if !outcome.clients.contains(&who) {
                outcome.clients.push(who);
            }
        }
        for api in &client.apis {
            let versions = outcome.apis.entry(api.api.clone()).or_default();
            if !versions.contains(&api.version) {
                versions.push(api.version);
                versions.sort_unstable();
            }
        }
        if let Some(served) = &client.served {
            outcome.served.extend(served.levels.clone());
        }
        for (refusal, n) in &client.errors {
            *outcome.refusals.entry(refusal.clone()).or_default() += n;
        }
    }
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
    outcome.output_tail = tail(&output_path);
    match result {
        Err(why) => {
            outcome.verdict = Verdict::Fail;
            outcome.why = Some(why);
        }
        Ok(Finished::Exited(0)) => {
            outcome.verdict = Verdict::Pass;
            outcome.exit_status = Some(0);
        }
        Ok(finished) => {
            outcome.verdict = Verdict::Fail;
            let timed_out = matches!(finished, Finished::TimedOut).then_some(args.timeout);
            outcome.timed_out = timed_out.is_some();
            outcome.exit_status = match finished {
                Finished::Exited(code) => Some(code),
                _ => None,
            };
            outcome.why = Some(matrix::why_failed(
                cell,
                timed_out,
                outcome.exit_status,
                &outcome.refusals,
                &outcome.output_tail,
            ));
        }
    }
    Ok(outcome)
}

/// The cell's kshim config: a port and data directory of its own, brokers'
/// listeners on ports of the system's choosing, no shutdown delay, and the
/// cell's scenario.
fn cell_config(cell: &Cell, args: &MatrixArgs, dir: &Path) -> Result<String> {
    let mut doc = match &args.config {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading --config {}", path.display()))?
            .parse::<toml::Table>()
            .with_context(|| format!("--config {}", path.display()))?,
        None => toml::Table::new(),
    };
    for key in ["advertised_listener", "admin", "cluster"] {
        doc.remove(key);
    }
    // A port of the system's choosing: a standalone kshim advertises the port it
    // bound, and in front of brokers clients go on to the brokers' own ports.
    doc.insert("listen".into(), "127.0.0.1:0".into());
    doc.insert(
        "data_dir".into(),
        dir.join("data").display().to_string().into(),
    );
    doc.insert("shutdown_delay_ms".into(), 0.into());
    match &args.upstream {
        Some(brokers) => {
            let mut upstream = match doc.remove("upstream") {
                Some(toml::Value::Table(t)) => t,
                _ => toml::Table::new(),
            };
            let list: Vec<toml::Value> = brokers
                .split(',')
                .map(|b| toml::Value::from(b.trim()))
                .collect();
            upstream.insert("bootstrap".into(), list.into());
            let mut listeners = toml::Table::new();
            listeners.insert("port_base".into(), 0.into());
            upstream.insert("listeners".into(), listeners.into());
            doc.insert("upstream".into(), upstream.into());
        }
        None => {
            doc.remove("upstream");
            doc.insert("kafka_release".into(), cell.release.minor().into());
        }
    }
    let scenario = toml::Value::try_from(cell.scenario())?;
    let mut lab = toml::Table::new();
    lab.insert("scenarios".into(), vec![scenario].into());
    doc.insert("lab".into(), lab.into());
    Ok(toml::to_string(&doc)?)
}

/// Until a proxy has read its brokers' API table (standalone: at once).
async fn wait_ready(context: &kshim::handlers::Context) -> Result<(), String> {
    let Some(upstream) = &context.upstream else {
        return Ok(());
    };
    let deadline = Instant::now() + READY_WITHIN;
    while Instant::now() < deadline {
        if upstream.reachable() && context.discovery.apis().len() > 2 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "kshim could not read the brokers' API table within {} s",
        READY_WITHIN.as_secs()
    ))
}

enum Finished {
    Exited(i32),
    Signalled,
    TimedOut,
}

/// Runs the cell's command, its output (stdout and stderr, in order) to
/// `output`; on timeout its whole process group is killed.
async fn run_command(
    cell: &Cell,
    args: &MatrixArgs,
    bootstrap: &str,
    output: &Path,
) -> Result<Finished> {
    let fill = |text: &str| {
        text.replace("{bootstrap}", bootstrap)
            .replace("{cell}", &cell.slug())
            .replace("{release}", cell.release.minor())
    };
    let file =
        std::fs::File::create(output).with_context(|| format!("creating {}", output.display()))?;
    let mut command = tokio::process::Command::new(fill(&args.command[0]));
    command
        .args(args.command[1..].iter().map(|a| fill(a)))
        .env("KAFKA_BOOTSTRAP", bootstrap)
        .env("KSHIM_CELL", cell.slug())
        .env("KSHIM_RELEASE", cell.release.minor())
        .stdin(Stdio::null())
        .stdout(Stdio::from(file.try_clone()?))
        .stderr(Stdio::from(file))
        .process_group(0)
        .kill_on_drop(true);
    for (feature, level) in &cell.levels {
        let name = format!(
            "KSHIM_FEATURE_{}",
            feature.to_ascii_uppercase().replace(['.', '-'], "_")
        );
        command.env(name, level.to_string());
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("running {}", args.command[0]))?;
    let pid = child.id();
    match tokio::time::timeout(Duration::from_secs(args.timeout), child.wait()).await {
        Ok(status) => {
            let status = status?;
            Ok(status.code().map_or(Finished::Signalled, Finished::Exited))
        }
        Err(_) => {
            if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                // SAFETY: kill(2) on the process group the child leads.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
            let _ = child.wait().await;
            Ok(Finished::TimedOut)
        }
    }
}

/// The last lines of a cell's output.
fn tail(path: &Path) -> Vec<String> {
    let Ok(file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut lines = std::collections::VecDeque::with_capacity(TAIL_LINES + 1);
    for line in std::io::BufReader::new(file)
        .split(b'\n')
        .map_while(Result::ok)
    {
        let line = String::from_utf8_lossy(&line).trim_end().to_owned();
        if line.is_empty() {
            continue;
        }
        lines.push_back(line);
        if lines.len() > TAIL_LINES {
            lines.pop_front();
        }
    }
    lines.into()
}
