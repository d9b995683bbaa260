//! The composition root: `serve` prepares the state directory, builds the
//! shared state (`App`), starts every background task (lease expiry and
//! waiters, the issue import, the issue and patch exports, the event log's
//! head poller and pruning, webhook delivery, repository maintenance) and
//! the SSH and HTTP listeners, and stops them cleanly on SIGTERM/SIGINT
//! (stop accepting, let in-flight commands finish for a bounded time,
//! exit 0). It may import anything; only `cli` imports it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::app::App;
use crate::config::ServerConfig;
use crate::limits::fds;
use crate::shutdown::{self, DRAIN_LIMIT};

/// How `serve` was asked to start (flags of `serve` itself, for one start
/// only; never configuration).
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeOptions {
    /// Start even though `collab.db` is missing or empty where the state
    /// directory was used before (`serve --allow-empty-db`).
    pub allow_empty_db: bool,
    /// Create a missing state directory (`serve --init`).
    pub init: bool,
}

/// Import the issue DAGs of every repository not imported yet. A
/// repository that fails is logged and retried on first use or next start.
fn import_at_start(app: &App, runtime: tokio::runtime::Handle) {
    let mut is_done = |repo: &str| -> anyhow::Result<crate::objects::import::Done> {
        let repo = repo.to_string();
        app.reads
            .read_blocking(move |c| Ok(crate::objects::import::import_state(c, &repo)?))
    };
    let mut sink = crate::objects::import::WriterSink {
        writer: &app.writer,
        runtime,
    };
    for result in
        crate::objects::import::import_all(&app.config.repos_dir, None, &mut is_done, &mut sink)
    {
        match result {
            Ok(report) => {
                crate::objects::import::log_report(&report);
                app.imports.mark(&report.repo);
            }
            Err((repo, error)) => {
                tracing::warn!(
                    repo,
                    "importing issue DAGs failed (retried on first use): {error}"
                )
            }
        }
    }
}

/// Run the server until SIGTERM or SIGINT. Prepares the state directory
/// (host key, authorized_keys, initial admin keys, hooks) and checks
/// `collab.db` (`collab_store::guard`) first.
pub async fn serve(config: ServerConfig, options: ServeOptions) -> anyhow::Result<()> {
    let mut config = crate::config::absolute_paths(config)?;
    // Before any listener exists: the connection caps are fitted into it.
    fds::raise_open_file_limit();
    // A mistyped --state-dir must not become a new, empty forge with a
    // new host key: only the documented default, or `--init`, creates one.
    if !config.state_dir.exists()
        && !options.init
        && config.state_dir != std::path::Path::new(crate::config::DEFAULT_STATE_DIR)
    {
        anyhow::bail!(
            "state directory {} does not exist: check --state-dir (or state_dir in the \
             configuration); to start a new, empty forge there, run `serve --init` once",
            config.state_dir.display()
        );
    }
    let prepared = crate::setup::prepare(&config)?;
    // Held until serve returns: `db migrate` refuses while it is.
    let _server_lock = crate::server_lock::ServerLock::serve(&config.state_dir)?;
    // The database calls are blocking (a PostgreSQL client runs its own
    // small runtime): off the async workers.
    tokio::task::block_in_place(|| {
        collab_store::guard::check_before_open(
            &config.collab_db_location(),
            &config.state_dir,
            &config.repos_dir,
            options.allow_empty_db,
        )
    })?;

    let ssh_listener = tokio::net::TcpListener::bind(&config.ssh.listen)
        .await
        .with_context(|| format!("ssh.listen: cannot listen on {}", config.ssh.listen))?;
    let http_listener = tokio::net::TcpListener::bind(&config.http.listen)
        .await
        .with_context(|| format!("http.listen: cannot listen on {}", config.http.listen))?;
    let ssh_addr = ssh_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;
    // The address actually bound (port 0 picks one): what push-to-review
    // prints as the web address.
    config.http.listen = http_addr.to_string();

    let app = Arc::new(tokio::task::block_in_place(|| App::new(config))?);
    collab_store::guard::mark_state_dir(&app.config.state_dir)?;
    let stopping = app.stopping.clone();
    // Leases end on time and waiters are served without anyone polling.
    tokio::spawn(crate::leasing::expiry::run(
        app.writer.clone(),
        stopping.clone(),
    ));
    app.waiters.spawn(stopping.clone());
    let budget = &app.limits.budget;
    if let Some(warning) = &budget.warning {
        eprintln!("warning: {warning}");
        tracing::warn!("{warning}");
    }
    if let Some(warning) = crate::maintenance::git_version::warning() {
        eprintln!("warning: {warning}");
        tracing::warn!("{warning}");
    }
    tracing::info!(
        open_files = budget.open_files,
        http_max_connections = budget.http,
        ssh_max_connections = budget.ssh,
        "connection caps"
    );
    // Issue DAGs not imported yet are replayed into collab.db before anyone
    // can read or write issues (once per repository, see `import`).
    let importing = app.clone();
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || import_at_start(&importing, runtime))
        .await
        .context("importing issue DAGs")?;
    let exporter = crate::objects::export::Exporter {
        reads: app.reads.clone(),
        writer: app.writer.clone(),
        repos_dir: app.config.repos_dir.clone(),
        key: app.signing_key.clone(),
    };
    crate::objects::export::issue::spawn(&app.export, exporter.clone());
    crate::objects::export::patch::spawn(exporter, app.stopping.clone());
    crate::events::spawn_background(&app);
    crate::webhooks::spawn(app.clone());
    tokio::spawn(app.mirrors.clone().run(app.stopping.clone()));
    tokio::spawn(crate::auto_merge::run(app.clone(), app.stopping.clone()));
    tokio::spawn(crate::merge_queue::run(app.clone(), app.stopping.clone()));
    if let Some(settings) = app.config.pack_cache_settings(std::path::Path::new("")) {
        tokio::spawn(crate::maintenance::pack_cache::run(
            settings,
            app.stopping.clone(),
        ));
    }
    tokio::spawn(crate::maintenance::sweep::run(
        app.config.repos_dir.clone(),
        app.stopping.clone(),
    ));
    tokio::spawn(app.maintenance.clone().idle_loop(stopping.clone().wait()));

    // Read the certificate files now, so a mistake in them is in the log
    // at start rather than at the first certificate login.
    let trusted_cas = app.certs.load_now();
    if app.authorized_keys.current().is_empty()
        && trusted_cas == 0
        && !matches!(
            app.governance.state().as_ref(),
            crate::governance::GovState::Active(_)
        )
    {
        eprintln!(
            "warning: no key is admitted: add one to {} or set initial_admin_keys",
            app.authorized_keys.path().display()
        );
    }

    let mut ssh = tokio::spawn(crate::ssh::serve(
        app.clone(),
        prepared.host_keys(),
        prepared.host_certificates.clone(),
        ssh_listener,
        stopping.clone(),
    ));
    let http = tokio::spawn(crate::http::serve(
        app.clone(),
        http_listener,
        ssh_addr.port(),
        stopping.clone().wait(),
    ));
    // Installed before the announcement: a SIGTERM right after it stops the
    // server cleanly instead of killing it.
    let stop_signal = shutdown::signal();
    // Once, on stderr as a plain line whatever the log format or level:
    // what a person, a script and the test harness wait for.
    eprintln!("listening ssh={ssh_addr} http={http_addr}");

    tokio::select! {
        _ = stop_signal => {}
        r = &mut ssh => {
            // The SSH listener only returns early on a fatal accept error.
            let reason = match r {
                Ok(Err(e)) => format!("{e:#}"),
                Ok(Ok(())) => "no reason".to_string(),
                Err(e) => e.to_string(),
            };
            anyhow::bail!("ssh listener stopped: {reason}");
        }
    }
    tracing::info!("stopping: no new connections, waiting for running commands");
    app.begin_shutdown();
    // `ssh::serve` stops accepting, lets running commands finish (bounded by
    // DRAIN_LIMIT), then disconnects whoever is left.
    match tokio::time::timeout(DRAIN_LIMIT + Duration::from_secs(3), ssh).await {
        Ok(Ok(Err(e))) => tracing::warn!("ssh listener: {e:#}"),
        Ok(_) => {}
        Err(_) => tracing::warn!("ssh sessions did not close in time"),
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), http).await;
    tracing::info!("stopped");
    Ok(())
}
