//! The `git-collab-server` command line: parses flags and dispatches; it
//! owns no behaviour.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::objects::import;
use crate::{config, events, healthcheck, hooks, logging, ops, repos, serve};

#[derive(Parser)]
#[command(
    name = "git-collab-server",
    version,
    about = "Self-hosted SSH-first forge server"
)]
struct Cli {
    #[command(flatten)]
    flags: config::ConfigFlags,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve SSH and HTTP until SIGTERM.
    Serve {
        /// Start even though collab.db is missing or empty in a state
        /// directory that was used before (fencing tokens start again at 1).
        #[arg(long)]
        allow_empty_db: bool,
        /// Create the state directory if it does not exist: a new, empty
        /// forge. Without it, only the default state directory is created;
        /// a missing (mistyped?) --state-dir is an error.
        #[arg(long)]
        init: bool,
    },
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
    /// Replay repositories' issue DAGs (refs/collab/issues/*) into the
    /// collab database, once per repository (the server does it at start).
    Import {
        /// Only this repository (default: every repository not imported yet).
        repo: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The collab database itself.
    Db {
        #[command(subcommand)]
        command: DbCmd,
    },
    /// Exit 0 when the local server answers /readyz (for container health checks).
    Healthcheck,
    /// Write a consistent backup while the server runs, or check one.
    Backup {
        /// Write the backup into DIR (missing or empty, outside the state directory).
        #[arg(long, value_name = "DIR", required_unless_present = "verify")]
        to: Option<PathBuf>,
        /// Check the backup in DIR (signature, hashes, database, git fsck)
        /// without restoring it; needs --key (or --trust-unsigned).
        #[arg(long, value_name = "DIR", conflicts_with = "to")]
        verify: Option<PathBuf>,
        /// With --verify: the key the backup must be signed by, as `backup`
        /// printed it (`ssh-ed25519 AAAA…`, `SHA256:…`, or a file holding the
        /// key line such as collab_signing_key.pub, outside the backup).
        #[arg(long, value_name = "KEY", requires = "verify")]
        key: Option<String>,
        /// With --verify: check an unsigned backup (written before backups
        /// were signed) by its checksum only, which proves nothing against
        /// whoever could write it. A signed backup is refused with it.
        #[arg(long, requires = "verify", conflicts_with = "key")]
        trust_unsigned: bool,
        /// After a successful backup, keep only the N newest backups beside it
        /// (directories of DIR's parent holding a backup manifest).
        #[arg(long, value_name = "N", conflicts_with = "verify", value_parser = clap::value_parser!(u32).range(1..))]
        keep: Option<u32>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Restore a backup into an empty state directory, then check it.
    Restore {
        /// The backup directory (written by `backup --to`).
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
        /// The key the backup must be signed by, as `backup` printed it
        /// (`ssh-ed25519 AAAA…`, `SHA256:…`, or a file holding the key line).
        /// Required unless --trust-unsigned.
        #[arg(long, value_name = "KEY", required_unless_present = "trust_unsigned")]
        key: Option<String>,
        /// Restore a backup that has no signature (one written before
        /// backups were signed): only for a backup nobody else could have
        /// written. A signed backup is refused with it.
        #[arg(long, conflicts_with = "key")]
        trust_unsigned: bool,
        /// The server's signing key file (collab_signing_key, kept apart
        /// from the backups) to put back; without it the restored server
        /// makes a new one at start.
        #[arg(long, value_name = "FILE")]
        signing_key: Option<PathBuf>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Internal: the server's git hooks run this (`hook pre-receive`).
    #[command(hide = true)]
    Hook { name: String },
    /// Internal: `git upload-pack` runs this instead of `git pack-objects`
    /// (`uploadpack.packObjectsHook`, the pack cache).
    #[command(hide = true)]
    PackObjectsHook {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        argv: Vec<String>,
    },
    /// Internal: `git archive` runs this as the `lfs` smudge filter of
    /// the web's archive downloads (`lfs::smudge`).
    #[command(hide = true)]
    LfsSmudge { state_dir: PathBuf, repo_id: String },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Print the effective configuration and the layer that set each key.
    Show {
        /// Print {"key": {"value": ..., "source": "..."}} instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Validate the configuration; exit 1 with the error if it is bad.
    Check,
}

#[derive(Subcommand)]
enum DbCmd {
    /// Copy the SQLite collab database (collab_db) into an empty PostgreSQL
    /// database, checking row counts and fencing token high-water marks.
    /// Stop the server first.
    Migrate {
        /// postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (or `-` to read it
        /// from stdin, keeping a password out of the process list).
        #[arg(long, value_name = "URL")]
        to: String,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum RepoCmd {
    /// Create a bare repository under repos_dir.
    Create { name: String },
}

/// The binary's `main`: parse flags, run, turn an error into one
/// `error: …` line and exit status 1.
pub fn main() -> ExitCode {
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
    // Hooks run inside `git receive-pack` and need no configuration.
    if let Command::Hook { name } = &cli.command {
        return Ok(ExitCode::from(hooks::run(name)));
    }
    if let Command::PackObjectsHook { argv } = &cli.command {
        return Ok(crate::pack_cache::run(argv));
    }
    if let Command::LfsSmudge { state_dir, repo_id } = &cli.command {
        return Ok(crate::lfs::smudge::run(state_dir, repo_id));
    }
    let loaded = config::load(&cli.flags)?;
    logging::init(&loaded.config.log)?;
    for (name, meant) in config::misspelled_env_vars(&config::process_env()) {
        if meant.is_empty() {
            tracing::warn!(
                "{name} is not a server setting and is ignored (docs/configuration.md lists them)"
            );
        } else {
            tracing::warn!("{name} is not a server setting and is ignored; did you mean {meant}?");
        }
    }
    match cli.command {
        Command::Serve {
            allow_empty_db,
            init,
        } => {
            let rt = tokio::runtime::Runtime::new()?;
            let options = serve::ServeOptions {
                allow_empty_db,
                init,
            };
            rt.block_on(serve::serve(loaded.config, options))?;
        }
        Command::Config { command } => match command {
            ConfigCmd::Show { json: true } => {
                print_stdout(&(serde_json::to_string_pretty(&loaded.to_json())? + "\n"))?;
            }
            ConfigCmd::Show { json: false } => print_stdout(&loaded.to_text())?,
            ConfigCmd::Check => println!("configuration ok"),
        },
        Command::Repo {
            command: RepoCmd::Create { name },
        } => {
            let (created, path) = repos::create_repo(&loaded.config, &name)?;
            events::record_host_event(
                &loaded.config,
                &events::Recorded::repo_created(&created, events::HOST_ACTOR),
            );
            println!("created {}", path.display());
        }
        Command::Import { repo, json } => return import_cmd(&loaded.config, repo.as_deref(), json),
        Command::Db {
            command: DbCmd::Migrate { to, json },
        } => return db_migrate_cmd(&loaded.config, &to, json),
        Command::Healthcheck => healthcheck::check(&loaded.config)?,
        Command::Backup {
            to: Some(to),
            keep,
            json,
            ..
        } => ops::backup(&loaded.config, &to, keep, json)?,
        Command::Backup {
            verify: Some(dir),
            key,
            trust_unsigned,
            json,
            ..
        } => {
            return ops::verify(
                &dir,
                &ops::trust(key.as_deref(), trust_unsigned, &dir)?,
                json,
            )
        }
        Command::Backup { .. } => unreachable!("clap requires --to or --verify"),
        Command::Restore {
            from,
            key,
            trust_unsigned,
            signing_key,
            json,
        } => ops::restore(
            &loaded.config,
            &from,
            &ops::trust(key.as_deref(), trust_unsigned, &from)?,
            signing_key.as_deref(),
            json,
        )?,
        Command::Hook { .. } | Command::PackObjectsHook { .. } | Command::LfsSmudge { .. } => {
            unreachable!("handled above")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `git-collab-server import [REPO] [--json]`: import on the host, beside a
/// running server or not (SQLite serializes the two writers).
fn db_migrate_cmd(config: &config::ServerConfig, to: &str, json: bool) -> anyhow::Result<ExitCode> {
    let source = match config.collab_db_location() {
        collab_store::Location::Sqlite(path) => path,
        collab_store::Location::Postgres(_) => {
            anyhow::bail!("collab_db is already a PostgreSQL database: nothing to migrate")
        }
    };
    let url = if to == "-" {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        line.trim().to_string()
    } else {
        to.to_string()
    };
    let target = match collab_store::Location::parse(&url) {
        collab_store::Location::Postgres(url) => url,
        collab_store::Location::Sqlite(_) => anyhow::bail!("--to must be a postgres:// URL"),
    };
    let shown = collab_store::Location::Postgres(target.clone()).display();
    // No server may write the SQLite file while it is copied, nor start
    // before the copy is done and collab_db points at PostgreSQL.
    let _offline = crate::server_lock::ServerLock::offline(&config.state_dir)
        .map_err(|held| anyhow::anyhow!("db migrate: {held}"))?;
    let copied = collab_store::transfer::sqlite_to_postgres(&source, &target)
        .map_err(|e| anyhow::anyhow!("db migrate to {shown}: {e:#}"))?;
    if json {
        print_stdout(&(serde_json::to_string_pretty(&copied)? + "\n"))?;
    } else {
        let rows: i64 = copied.tables.values().sum();
        print_stdout(&format!(
            "migrated {} into {shown}: {rows} rows in {} tables, {} fencing tokens \
             (highest {}), event seq at {}\nset collab_db to the URL and start the server\n",
            source.display(),
            copied.tables.len(),
            copied.token_pairs,
            copied.token_max,
            copied.counters.get("events").copied().unwrap_or(0),
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn import_cmd(
    config: &config::ServerConfig,
    repo: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let only = match repo {
        Some(name) => Some(
            repos::find_repo(&config.repos_dir, name)
                .ok_or_else(|| anyhow::anyhow!("repository not found"))?,
        ),
        None => None,
    };
    let location = config.collab_db_location();
    let mut conn = collab_store::open(&location)
        .map_err(|e| anyhow::anyhow!("collab_db: opening {}: {e}", location.display()))?;
    let reader = collab_store::open(&location)
        .map_err(|e| anyhow::anyhow!("collab_db: opening {}: {e}", location.display()))?;
    let mut is_done =
        |name: &str| -> anyhow::Result<import::Done> { Ok(import::import_state(&reader, name)?) };
    let mut sink = import::ConnSink {
        conn: &mut conn,
        now: chrono::Utc::now().timestamp(),
    };
    let results = import::import_all(&config.repos_dir, only.as_ref(), &mut is_done, &mut sink);
    let failed = results.iter().any(Result::is_err);
    if json {
        print_stdout(&(serde_json::to_string_pretty(&import::reports_json(&results))? + "\n"))?;
    } else {
        let mut text = String::new();
        for result in &results {
            text.push_str(&match result {
                Ok(r) if r.status == "imported" => {
                    let mut line = format!(
                        "{}: imported {} issues, {} comments ({} events replayed, {} dropped, {} invalid issues, {} skipped)",
                        r.repo,
                        r.issues,
                        r.comments,
                        r.events,
                        r.dropped.len(),
                        r.invalid_issues.len(),
                        r.skipped.len()
                    );
                    if let Some(p) = &r.patches {
                        line.push_str(&format!(
                            "; {} patches, {} revisions, {} votes, {} comments ({} events replayed, {} dropped, {} invalid patches, {} skipped)",
                            p.patches,
                            p.revisions,
                            p.reviews,
                            p.comments,
                            p.events,
                            p.dropped.len(),
                            p.invalid_patches.len(),
                            p.skipped.len()
                        ));
                    }
                    line + "\n"
                }
                Ok(r) => format!("{}: already imported\n", r.repo),
                Err((repo, error)) => format!("{repo}: failed: {error}\n"),
            });
        }
        print_stdout(&text)?;
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Write command output; a reader that went away (`| head`) is not an error.
fn print_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
