//! The `kshim` binary: `serve`, and the operator CLIs `features`, `clients`,
//! `config` and `lab`.

mod cli;

use clap::Parser;

/// The system allocator, counting what kshim holds (`kshim::heap`).
#[global_allocator]
static ALLOCATOR: kshim::heap::CountingAllocator = kshim::heap::CountingAllocator;

/// jemalloc's options, read at its start (the prefixed build's `malloc_conf`; it must be in
/// the binary itself, a library's symbol is not linked in): its background thread purges
/// freed pages a second after they were freed, also while every runtime thread sleeps, and
/// purges them for good (no lazily freed pages left counting as resident); `kshim::heap` says
/// why. `_RJEM_MALLOC_CONF` in the environment overrides them.
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &[u8; 60] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

#[derive(Parser, Debug)]
#[command(
    name = "kshim",
    version,
    about = "A Kafka protocol proxy that serves KIP-584 feature discovery and gating"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Run kshim (without an upstream: a one-node discovery server).
    Serve(cli::serve::ServeArgs),
    /// Describe, upgrade, downgrade or disable finalized features of kshim or of
    /// any Kafka cluster.
    Features(cli::features::FeaturesArgs),
    /// The client census and upgrade impact, from a running kshim's admin API.
    Clients(cli::clients::ClientsArgs),
    /// Check a kshim config and a broker's properties against the config
    /// validators, offline.
    Config(cli::config::ConfigArgs),
    /// The discovery lab from the command line: `matrix` runs a command against
    /// every Kafka release and feature level kshim presents.
    Lab(cli::lab::LabArgs),
}

fn main() -> std::process::ExitCode {
    ALLOCATOR.mark_installed();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return refuse_command_line(e),
    };
    let log = init_logging(&cli.command);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kshim: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => cli::serve::run(args, log).await.map(|()| 0),
            Command::Features(args) => cli::features::run(args).await,
            Command::Config(args) => cli::config::run(args),
            Command::Clients(args) => cli::clients::run(args).await,
            Command::Lab(args) => cli::lab::run(args).await,
        }
    });
    match result {
        Ok(0) => std::process::ExitCode::SUCCESS,
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => match e.downcast_ref::<cli::features::CommandLineError>() {
            Some(usage) => usage_error(usage),
            None => {
                eprintln!("kshim: {}", chain_once(&e));
                std::process::ExitCode::FAILURE
            }
        },
    }
}

/// A command line clap refuses: `kshim features` words it as kafka-features.sh
/// does; everything else as clap does (which also prints help and version).
fn refuse_command_line(e: clap::Error) -> std::process::ExitCode {
    let features = std::env::args().nth(1).as_deref() == Some("features");
    match features
        .then(|| cli::features::command_line_error(&e))
        .flatten()
    {
        Some(usage) => usage_error(&usage),
        None => e.exit(),
    }
}

/// kafka-features.sh prints its command-line errors without a final newline.
fn usage_error(usage: &cli::features::CommandLineError) -> std::process::ExitCode {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{usage}").and_then(|()| err.flush());
    std::process::ExitCode::FAILURE
}

/// Colour only on a terminal, and never with NO_COLOR set (no-color.org).
fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// An error and its causes as one line, each cause once: a cause whose text
/// its wrapper already shows (errors that print their source) is not repeated.
fn chain_once(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(text.trim()) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Logs to stderr with `RUST_LOG`'s filter (or the command's default), through
/// a reload layer, so that `log.level` can change the filter while kshim runs.
fn init_logging(command: &Command) -> kshim::service::LogControl {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::EnvFilter;
    let startup_filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|f| EnvFilter::builder().parse(f).is_ok())
        .unwrap_or_else(|| default_filter(command).to_owned());
    let (filter, handle) =
        tracing_subscriber::reload::Layer::new(EnvFilter::new(startup_filter.as_str()));
    let json = matches!(command, Command::Serve(args) if args.log_json());
    let registry = tracing_subscriber::registry().with(filter);
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    if json {
        // One object per line: the span fields (peer, principal, client software)
        // appear under "span" and "spans".
        registry.with(lines.json()).init();
    } else {
        registry.with(lines.with_ansi(colour())).init();
    }
    kshim::service::LogControl {
        set: std::sync::Arc::new(move |text: &str| {
            let next = EnvFilter::builder()
                .parse(text)
                .map_err(|e| e.to_string())?;
            handle.reload(next).map_err(|e| e.to_string())
        }),
        startup_filter,
    }
}

fn default_filter(command: &Command) -> &'static str {
    match command {
        Command::Serve(_) => "info",
        Command::Features(_) | Command::Config(_) | Command::Clients(_) => "warn",
        // Each cell's kshim runs in this process: its warnings about a setup made
        // for the cell (no authorizer, say) would only interleave with the table.
        Command::Lab(_) => "error",
    }
}
