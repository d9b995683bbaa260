//! The running server's shared state (`App`): configuration, keys,
//! governance, the collab database's writer and read pool, and the handles
//! of the background services. Building it opens the database (and so
//! starts the writer's thread); the background tasks and the listeners are
//! started by `serve`, which nothing here imports.

use std::sync::Arc;

use anyhow::Context as _;

use crate::config::{LeasesConfig, ServerConfig};
use crate::governance::Governance;
use crate::identity::certs::CertAuthority;
use crate::identity::AuthorizedKeys;
use crate::leasing::waiters::Waiters;
use crate::limits::{fds, Limits};
use crate::shutdown::{self, Stop, StopTrigger, WorkTracker};
use collab_store::leases::Policy;
use collab_store::reads::ReadPool;
use collab_store::writer::Writer;

/// State shared by every connection and request.
pub struct App {
    pub config: Arc<ServerConfig>,
    /// The live `ssh.authorized_keys` (re-read when it changes).
    pub authorized_keys: AuthorizedKeys,
    /// The live `ssh.trusted_user_ca_keys` and `ssh.revoked_keys`.
    pub certs: CertAuthority,
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
    pub webhooks: crate::webhooks::client::Webhooks,
    /// Repository maintenance: push counts, single flight, the bound.
    pub maintenance: Arc<crate::maintenance::Maintenance>,
    /// Pull and push mirrors (the scheduler is started by `serve`).
    pub mirrors: Arc<crate::mirrors::Mirrors>,
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
        let webhooks = crate::webhooks::client::Webhooks::new(
            &config.webhooks,
            &config.state_dir.join("webhook-secrets.key"),
        )?;
        let limits = Limits::new(&config, fds::open_file_limit());
        let reads = ReadPool::new(&location);
        let maintenance = crate::maintenance::Maintenance::new(
            config.maintenance.clone(),
            Some(crate::maintenance::LfsCollection {
                store: crate::lfs::store::LfsStore::new(&config.state_dir),
                grace: config.lfs.gc_grace,
                db: location.clone(),
            }),
        );
        let mirrors = Arc::new(crate::mirrors::Mirrors::new(
            &config,
            webhooks.secrets.clone(),
            writer.clone(),
            reads.clone(),
            maintenance.clone(),
        )?);
        Ok(App {
            waiters: Waiters::new(writer.clone(), config.leases.max_waiters),
            writer,
            reads,
            mirrors,
            imports: Default::default(),
            export: Default::default(),
            signing_key,
            webhooks,
            limits,
            maintenance,
            authorized_keys: AuthorizedKeys::new(config.ssh.authorized_keys.clone()),
            certs: CertAuthority::new(
                config.ssh.trusted_user_ca_keys.clone(),
                config.ssh.revoked_keys.clone(),
            ),
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
        eviction_grace: secs(config.eviction_grace),
    }
}
