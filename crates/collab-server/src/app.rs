//! The running server: shared state (`App`) and `serve`, which prepares the
//! state directory, starts the SSH and HTTP listeners and stops them cleanly
//! on SIGTERM/SIGINT (stop accepting, let in-flight commands finish for a
//! bounded time, exit 0).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::config::{LeasesConfig, ServerConfig};
use crate::db::leases::Policy;
use crate::db::reads::ReadPool;
use crate::db::writer::Writer;
use crate::governance::Governance;
use crate::identity::AuthorizedKeys;
use crate::leasing::waiters::Waiters;
use crate::limits::{fds, Limits};
use crate::shutdown::{self, Stop, StopTrigger, WorkTracker};

/// How long running commands may take to finish after a stop signal. With
/// the session close-out after it, shutdown stays below the 10 s a container
/// runtime waits before it kills.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(7);

/// State shared by every connection and request.
pub struct App {
    pub config: Arc<ServerConfig>,
    /// The live `ssh.authorized_keys` (re-read when it changes).
    pub authorized_keys: AuthorizedKeys,
    /// The live governance state (`_governance.git`).
    pub governance: Governance,
    /// In-flight exec commands, for a clean shutdown.
    pub work: WorkTracker,
    /// Set once shutdown starts: no new commands.
    pub stopping: Stop,
    stop: StopTrigger,
    /// The collab database's single writer thread (`collab.db`): lease
    /// operations and every other write (`write`) go through it.
    pub writer: Writer,
    /// Callers waiting for a lease (`acquire --wait`).
    pub waiters: Arc<Waiters>,
    /// Connection caps, git process gate, page semaphore.
    pub limits: Limits,
    /// Read-only connections to `collab.db` that never wait for the writer.
    pub reads: ReadPool,
    /// Which repositories' issue DAGs are imported into `collab.db`.
    pub imports: crate::objects::import::Imports,
    /// Repositories whose signed issue export is behind (`export`).
    pub export: crate::objects::export::ExportQueue,
    /// The server's Ed25519 signing key (`signing`).
    pub signing_key: Arc<collab_record::sign::SigningKey>,
    /// Webhook delivery (HTTP client, SSRF guard).
    pub webhooks: crate::webhooks::Webhooks,
    /// Repository maintenance: push counts, single flight, the bound.
    pub maintenance: Arc<crate::maintenance::Maintenance>,
}

impl App {
    /// Build the shared state. Reads governance once and opens the lease
    /// database (creating it); authorized_keys is read lazily on first use.
    pub fn new(config: ServerConfig) -> anyhow::Result<App> {
        let (stop, stopping) = shutdown::stop_pair();
        let location = config.collab_db_location();
        if let Some(dir) = location.sqlite_path().and_then(|p| p.parent()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("collab_db: creating {}", dir.display()))?;
        }
        let writer = Writer::open_with(
            &location,
            lease_policy(&config.leases),
            Arc::new(|| chrono::Utc::now().timestamp()),
        )
        .with_context(|| format!("collab_db: opening {}", location.display()))?;
        let signing_key = crate::signing::load_or_generate(&config.signing_key_path())?;
        let webhooks = crate::webhooks::Webhooks::new(&config.webhooks)?;
        let limits = Limits::new(&config, fds::open_file_limit());
        Ok(App {
            waiters: Waiters::new(writer.clone()),
            writer,
            reads: ReadPool::new(&location),
            imports: Default::default(),
            export: Default::default(),
            signing_key,
            webhooks,
            limits,
            maintenance: crate::maintenance::Maintenance::new(config.maintenance.clone()),
            authorized_keys: AuthorizedKeys::new(config.ssh.authorized_keys.clone()),
            governance: Governance::load(&config.repos_dir),
            config: Arc::new(config),
            work: WorkTracker::default(),
            stopping,
            stop,
        })
    }

    /// Start shutting down: listeners stop accepting, new commands are
    /// refused.
    pub fn begin_shutdown(&self) {
        self.stop.trigger();
    }
}

/// The `leases.*` keys as the lease decisions take them (0 = unlimited
/// lifetime).
pub fn lease_policy(config: &LeasesConfig) -> Policy {
    let secs = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Policy {
        max_lifetime: (config.max_lifetime > 0).then(|| secs(config.max_lifetime)),
        lock_delay: secs(config.lock_delay),
        max_ttl: secs(config.max_ttl),
    }
}

/// Make every path absolute: git runs hooks from inside the repository, so
/// a relative hooks path (from a relative `--state-dir`) would miss.
pub fn absolute_paths(mut config: ServerConfig) -> anyhow::Result<ServerConfig> {
    for path in [
        &mut config.state_dir,
        &mut config.repos_dir,
        &mut config.ssh.host_key,
        &mut config.ssh.authorized_keys,
    ] {
        *path =
            std::path::absolute(&*path).with_context(|| format!("resolving {}", path.display()))?;
    }
    // A SQLite path is resolved like the others; a PostgreSQL URL is kept.
    if let Some(db) = config.collab_db.as_mut() {
        if let crate::db::Location::Sqlite(path) = crate::db::Location::parse(&db.to_string_lossy())
        {
            *db = std::path::absolute(&path)
                .with_context(|| format!("resolving {}", path.display()))?;
        }
    }
    Ok(config)
}

/// How `serve` was asked to start (flags of `serve` itself, for one start
/// only; never configuration).
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeOptions {
    /// Start even though `collab.db` is missing or empty where the state
    /// directory was used before (`serve --allow-empty-db`).
    pub allow_empty_db: bool,
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
/// `collab.db` (`db::guard`) first.
pub async fn serve(config: ServerConfig, options: ServeOptions) -> anyhow::Result<()> {
    let mut config = absolute_paths(config)?;
    // Before any listener exists: the connection caps are fitted into it.
    fds::raise_open_file_limit();
    let prepared = crate::setup::prepare(&config)?;
    // The database calls are blocking (a PostgreSQL client runs its own
    // small runtime): off the async workers.
    tokio::task::block_in_place(|| {
        crate::db::guard::check_before_open(
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
    crate::db::guard::mark_state_dir(&app.config.state_dir)?;
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
    crate::objects::export::issue::spawn(app.clone());
    crate::objects::export::patch::spawn(app.clone());
    crate::events::spawn_background(&app);
    crate::webhooks::spawn(app.clone());
    tokio::spawn(crate::maintenance::sweep::run(
        app.config.repos_dir.clone(),
        app.stopping.clone(),
    ));
    tokio::spawn(app.maintenance.clone().idle_loop(stopping.clone().wait()));

    if app.authorized_keys.current().is_empty()
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
    eprintln!("listening ssh={ssh_addr} http={http_addr}");
    tracing::info!("listening ssh={ssh_addr} http={http_addr}");

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
