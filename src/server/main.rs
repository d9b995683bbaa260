//! `git-collab-server`: hosts bare repositories over SSH, authorizes every
//! verb, keeps leases in SQLite and serves a read-only web UI.
//! See ARCHITECTURE.md for the map.
//!
//! This file only parses flags and dispatches; it owns no behaviour.

mod app;
mod config;
// Called by the collab-lease SSH verb once the SSH server lands.
#[allow(dead_code)]
mod lease_service;
#[allow(dead_code)]
mod leases;
mod repos;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "git-collab-server", version, about = "Self-hosted SSH-first forge server")]
struct Cli {
    #[command(flatten)]
    flags: config::ConfigFlags,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve SSH and HTTP until SIGTERM.
    Serve,
    /// Inspect the effective configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCmd,
    },
    /// Manage repositories on this host.
    Repo {
        #[command(subcommand)]
        command: RepoCmd,
    },
    /// Exit 0 when the local server answers /readyz (for container health checks).
    Healthcheck,
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Print the effective configuration and the layer that set each key.
    Show {
        #[arg(long)]
        json: bool,
    },
    /// Validate the configuration; exit 1 with the error if it is bad.
    Check,
}

#[derive(Subcommand)]
enum RepoCmd {
    /// Create a bare repository under repos_dir.
    Create { name: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let loaded = config::load(&cli.flags)?;
    match cli.command {
        Command::Serve => {
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(app::serve(loaded.config))?;
        }
        Command::Config { command } => match command {
            ConfigCmd::Show { json } => {
                let _ = json;
                println!("{:#?}", loaded.config);
            }
            ConfigCmd::Check => println!("configuration ok"),
        },
        Command::Repo {
            command: RepoCmd::Create { name },
        } => {
            let path = repos::create_repo(&loaded.config, &name)?;
            println!("created {}", path.display());
        }
        Command::Healthcheck => anyhow::bail!("healthcheck: not implemented yet"),
    }
    Ok(ExitCode::SUCCESS)
}
