//! Repository maintenance: keeping served repositories fast to clone and
//! free of leftovers, without ever failing a concurrent clone or push.
//!
//! - `run`: the git steps of one run (pack refs, geometric repack with a
//!   multi-pack bitmap, split commit-graph, leftovers) and what they changed;
//! - `lock`: the per-repository file lock that runs and backups share;
//! - `quarantine`: the leftovers of killed pushes, and `sweep`, which
//!   removes them in every repository at start and every 15 minutes (a
//!   killed push counts as no push, so no run follows it);
//! - `git`: how the server runs git on its own repositories;
//! - `pack_cache`: trims the pack cache (`crate::pack_cache`) and reports
//!   its counters;
//! - after a run's git steps, the repository's git-lfs objects no ref
//!   points at any more and older than `lfs.gc_grace` are collected
//!   (`crate::lfs::gc`), in the pruning runs (once a day per repository,
//!   `run::PRUNE_EVERY`) and in every `collab-repo gc`: listing the
//!   pointers walks every reachable object, so not in every run.
//!
//! This module decides *when* and *how many*: a run is triggered after
//! `maintenance.after_pushes` pushes to a repository (counted by `ssh/git.rs`
//! when a `git receive-pack` exits 0, not by a hook), once a repository
//! pushed to since its last run has been idle `maintenance.idle_secs`, or by
//! `collab-repo gc`. Single flight: one run per repository at a time, in
//! this process (a per-repository async mutex) and across processes (the
//! `lock` file, which `backup` also takes); an automatic run that finds
//! either taken is skipped, since the run in progress covers it, while
//! `collab-repo gc` waits its turn. At most `maintenance.concurrency` runs
//! at once across the server (a semaphore). Push counts live in memory: a
//! restart forgets them, and the idle trigger catches up after the next push.

pub mod git;
pub mod git_version;
pub mod lock;
pub mod pack_cache;
pub mod quarantine;
pub mod run;
pub mod sweep;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::config::MaintenanceConfig;
pub use run::RunReport;

/// What started a run (a metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Pushes,
    Idle,
    Manual,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Pushes => "pushes",
            Trigger::Idle => "idle",
            Trigger::Manual => "manual",
        }
    }
}

/// One repository as the scheduler knows it.
struct RepoState {
    name: String,
    /// Whether anonymous users may see it (its metrics carry its name).
    public: bool,
    /// Pushes since the last run started.
    pushes: u64,
    last_push: Instant,
    /// Held by the run in progress (single flight in this process).
    flight: Arc<tokio::sync::Mutex<()>>,
}

/// What collecting git-lfs objects needs: the store, the grace, and the
/// collab database (a repository's objects are kept by its lasting id).
#[derive(Debug, Clone)]
pub struct LfsCollection {
    pub store: crate::lfs::store::LfsStore,
    pub grace: Duration,
    pub db: collab_store::Location,
}

/// The scheduler, shared by the SSH verbs and the idle timer.
pub struct Maintenance {
    config: MaintenanceConfig,
    lfs: Option<LfsCollection>,
    permits: Arc<Semaphore>,
    repos: Mutex<HashMap<PathBuf, RepoState>>,
}

impl Maintenance {
    pub fn new(config: MaintenanceConfig, lfs: Option<LfsCollection>) -> Arc<Maintenance> {
        Arc::new(Maintenance {
            permits: Arc::new(Semaphore::new(config.concurrency.max(1) as usize)),
            config,
            lfs,
            repos: Mutex::new(HashMap::new()),
        })
    }

    fn repos(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, RepoState>> {
        // A panic mid-update leaves only a counter off by one: keep going.
        self.repos.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The per-repository flight lock, creating the entry if needed.
    fn flight(&self, path: &Path, name: &str, public: bool) -> Arc<tokio::sync::Mutex<()>> {
        let mut repos = self.repos();
        let state = repos
            .entry(path.to_path_buf())
            .or_insert_with(|| RepoState {
                name: name.to_string(),
                public,
                pushes: 0,
                last_push: Instant::now(),
                flight: Arc::default(),
            });
        state.public = public;
        state.flight.clone()
    }

    /// A `git receive-pack` into `path` exited 0. Starts a run in the
    /// background once the repository has had `after_pushes` pushes.
    pub fn push_finished(self: &Arc<Self>, path: &Path, name: &str, public: bool) {
        let due = {
            let mut repos = self.repos();
            let state = repos
                .entry(path.to_path_buf())
                .or_insert_with(|| RepoState {
                    name: name.to_string(),
                    public,
                    pushes: 0,
                    last_push: Instant::now(),
                    flight: Arc::default(),
                });
            state.public = public;
            state.pushes += 1;
            state.last_push = Instant::now();
            self.config.after_pushes > 0 && state.pushes >= self.config.after_pushes
        };
        if due {
            self.spawn(
                path.to_path_buf(),
                name.to_string(),
                public,
                Trigger::Pushes,
            );
        }
    }

    /// Start an automatic run in the background (skipped if one is running).
    fn spawn(self: &Arc<Self>, path: PathBuf, name: String, public: bool, trigger: Trigger) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(e) = this.run_once(&path, &name, public, trigger).await {
                tracing::warn!(
                    repo = name,
                    "maintenance ({}) failed: {e:#}",
                    trigger.as_str()
                );
            }
        });
    }

    /// `collab-repo gc`: run now, waiting for a run in progress (or a
    /// backup copying the repository) to finish first.
    pub async fn run_now(
        &self,
        path: &Path,
        name: &str,
        public: bool,
    ) -> anyhow::Result<RunReport> {
        let report = self.run_once(path, name, public, Trigger::Manual).await?;
        Ok(report.expect("a manual run waits instead of skipping"))
    }

    /// One run under single flight and the concurrency bound. `Ok(None)`:
    /// an automatic run skipped because another run or a backup has the
    /// repository.
    async fn run_once(
        &self,
        path: &Path,
        name: &str,
        public: bool,
        trigger: Trigger,
    ) -> anyhow::Result<Option<RunReport>> {
        let wait = trigger == Trigger::Manual;
        let flight = self.flight(path, name, public);
        let _flight = if wait {
            flight.lock_owned().await
        } else {
            match flight.try_lock_owned() {
                Ok(guard) => guard,
                Err(_) => return Ok(None),
            }
        };
        let _permit = Arc::clone(&self.permits).acquire_owned().await?;
        let dir = path.to_path_buf();
        let file_lock = tokio::task::spawn_blocking(move || {
            if wait {
                lock::RepoLock::acquire(&dir).map(Some)
            } else {
                lock::RepoLock::try_acquire(&dir)
            }
        })
        .await??;
        let Some(_file_lock) = file_lock else {
            tracing::info!(
                repo = name,
                "maintenance skipped: the repository is being backed up"
            );
            return Ok(None);
        };
        if let Some(state) = self.repos().get_mut(path) {
            // Pushes from now on count towards the next run.
            state.pushes = 0;
        }
        let mut result = run::run(path).await;
        if let Ok(report) = &mut result {
            if report.pruning || trigger == Trigger::Manual {
                match self.collect_lfs(path, name, public).await {
                    Ok(removed) => {
                        report.lfs_objects_removed = removed.objects;
                        report.lfs_bytes_removed = removed.bytes;
                    }
                    // The git steps did their work; the objects wait for
                    // the next run.
                    Err(e) => tracing::warn!(repo = name, "collecting LFS objects: {e:#}"),
                }
            }
        }
        let outcome = if result.is_ok() { "ok" } else { "error" };
        crate::metrics::maintenance_finished(
            public.then_some(name),
            &path.to_string_lossy(),
            trigger.as_str(),
            outcome,
            result.as_ref().ok(),
        );
        let report = result?;
        tracing::info!(
            repo = name,
            trigger = trigger.as_str(),
            seconds = report.seconds,
            packs_before = report.packs_before,
            packs_after = report.packs_after,
            loose_before = report.loose_before,
            "maintenance done"
        );
        Ok(Some(report))
    }

    /// Collect the repository's git-lfs objects no ref points at; a public
    /// repository's `/metrics` series then show what it holds now.
    async fn collect_lfs(
        &self,
        path: &Path,
        name: &str,
        public: bool,
    ) -> anyhow::Result<crate::lfs::store::Usage> {
        use crate::lfs::store::Usage;
        let Some(lfs) = self.lfs.clone() else {
            return Ok(Default::default());
        };
        let (dir, owned) = (path.to_path_buf(), name.to_string());
        let (removed, held) = tokio::task::spawn_blocking(move || {
            let conn = collab_store::open_reader(&lfs.db)?;
            let Some(id) = collab_store::repo_ids::live_id(&conn, &owned)? else {
                return Ok((Usage::default(), None));
            };
            drop(conn);
            let removed = crate::lfs::gc::collect(&lfs.store, &id, &dir, lfs.grace)?;
            let held = if removed.objects > 0 && public {
                Some(lfs.store.usage(&id)?)
            } else {
                None
            };
            anyhow::Ok((removed, held))
        })
        .await??;
        if let Some(held) = held {
            crate::metrics::lfs_stored(name, held.objects, held.bytes);
        }
        if removed.objects > 0 {
            tracing::info!(
                repo = name,
                objects = removed.objects,
                bytes = removed.bytes,
                "LFS objects no ref points at collected"
            );
        }
        Ok(removed)
    }

    /// Repositories pushed to since their last run and idle long enough.
    fn idle_due(&self) -> Vec<(PathBuf, String, bool)> {
        let idle = Duration::from_secs(self.config.idle_secs);
        self.repos()
            .iter()
            .filter(|(_, s)| s.pushes > 0 && s.last_push.elapsed() >= idle)
            .map(|(path, s)| (path.clone(), s.name.clone(), s.public))
            .collect()
    }

    /// The idle trigger: every so often, start a run for each repository
    /// whose last push is `idle_secs` old. Returns when `stopping` fires.
    pub async fn idle_loop(self: Arc<Self>, stopping: impl std::future::Future<Output = ()>) {
        if self.config.idle_secs == 0 {
            return stopping.await;
        }
        let tick = Duration::from_secs((self.config.idle_secs / 4).clamp(1, 30));
        tokio::pin!(stopping);
        loop {
            tokio::select! {
                () = &mut stopping => return,
                () = tokio::time::sleep(tick) => {}
            }
            for (path, name, public) in self.idle_due() {
                self.spawn(path, name, public, Trigger::Idle);
            }
        }
    }
}
