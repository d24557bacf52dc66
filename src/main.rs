//! The `kshim` binary: `serve`, and the operator CLIs `features` and `config`.

mod cli;

use clap::Parser;

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
    /// Check a kshim config and a broker's properties against the config
    /// validators, offline.
    Config(cli::config::ConfigArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(default_filter(&cli.command))
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kshim: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => cli::serve::run(args).await.map(|()| 0),
            Command::Features(args) => cli::features::run(args).await,
            Command::Config(args) => cli::config::run(args),
        }
    });
    match result {
        Ok(0) => std::process::ExitCode::SUCCESS,
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("kshim: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn default_filter(command: &Command) -> &'static str {
    match command {
        Command::Serve(_) => "info",
        Command::Features(_) | Command::Config(_) => "warn",
    }
}
