//! Repository mirrors: pull mirrors fetch an upstream into a repository,
//! push mirrors push a repository to a downstream, on a schedule and on
//! demand (`collab-repo mirror sync`, `service/mirror.rs`); push mirrors also
//! soon after the repository's refs move (a push, a merge, a pull mirror's
//! fetch: any `ref.updated` event), many moves making one push.
//!
//! - `url`: which URLs are taken, and the SSRF guard's pinning;
//! - `git`: one `git fetch` / `git push`, bounded and sealed off;
//! - here: [`Mirrors`] (in `App`), the scheduler ([`Mirrors::run`]) and one
//!   sync ([`Mirrors::sync`]).
//!
//! The rows live in `collab.db` (`collab_store::mirrors`). A sync claims its row first
//! (one node, one task at a time), runs git, then records in one
//! transaction the outcome (success, or the error and the next attempt,
//! backing off) and, for a pull, one `ref.updated` event with actor
//! `mirror` per ref that moved. Credentials are sealed with the webhook
//! secrets key (`webhooks::secrets`, their own associated data) and opened
//! only to run git.

pub mod git;
pub mod url;

/// `lfs` of a mirror in `collab-repo mirror list`: mirrors carry git only.
pub const LFS_NOT_MIRRORED: &str = "not mirrored";
/// The same, when the repository uses git-lfs.
pub const LFS_USED_NOT_MIRRORED: &str = "not mirrored: .gitattributes at HEAD sends files to \
     git-lfs; their objects are not fetched or pushed, clones get those files as pointers \
     unless the objects are pushed here with git lfs push";

/// The largest `.gitattributes` read for [`lfs_note`].
const MAX_ATTRIBUTES: usize = 64 * 1024;

/// What `collab-repo mirror list` says about git-lfs for the repository at
/// `repo_dir`: whether its root `.gitattributes` at `HEAD` names the lfs
/// filter (one tree entry and one small blob read).
pub fn lfs_note(repo_dir: &std::path::Path) -> &'static str {
    let uses_lfs = || -> Option<bool> {
        let repo = git2::Repository::open_bare(repo_dir).ok()?;
        let tree = repo.head().ok()?.peel_to_tree().ok()?;
        let entry = tree.get_name(".gitattributes")?;
        let (size, kind) = repo.odb().ok()?.read_header(entry.id()).ok()?;
        if kind != git2::ObjectType::Blob || size > MAX_ATTRIBUTES {
            return None;
        }
        let blob = repo.find_blob(entry.id()).ok()?;
        Some(
            String::from_utf8_lossy(blob.content())
                .split_whitespace()
                .any(|w| w == "filter=lfs"),
        )
    };
    if uses_lfs() == Some(true) {
        LFS_USED_NOT_MIRRORED
    } else {
        LFS_NOT_MIRRORED
    }
}

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{Notify, Semaphore};

use crate::config::MirrorsConfig;
use crate::events::recorded::Recorded;
use crate::webhooks::secrets::SecretBox;
use crate::webhooks::ssrf::Guard;
use collab_store::mirrors::{self as store, Mirror};
use collab_store::reads::ReadPool;
use collab_store::writer::Writer;
use git::Credential;

/// Binds a sealed credential to its use (a webhook secret does not open as
/// one, nor the other way round).
const AAD: &[u8] = b"git-collab mirror credential v1";

/// The actor (and `pusher`) of the events a pull mirror's fetch records.
pub const ACTOR: &str = "mirror";

/// How often the scheduler looks for due mirrors when nothing wakes it.
const TICK: Duration = Duration::from_secs(1);

/// Most events read per look for pushes to follow.
const EVENT_PAGE: i64 = 500;

/// The mirror service: configuration, the guard, the sealing key and the
/// handles a sync needs.
pub struct Mirrors {
    config: MirrorsConfig,
    guard: Guard,
    secrets: Arc<SecretBox>,
    writer: Writer,
    reads: ReadPool,
    repos_dir: PathBuf,
    /// `{state_dir}/mirrors`: git's home, known_hosts, key files.
    work_dir: PathBuf,
    /// This process's name in claims.
    node: String,
    /// Syncs at once on this node (`mirrors.concurrency`).
    slots: Arc<Semaphore>,
    wake: Notify,
    /// A fetch that moved refs counts as a push towards maintenance.
    maintenance: Arc<crate::maintenance::Maintenance>,
}

/// What a sync came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done; how many refs moved (here for a pull, there for a push).
    Synced { refs_updated: usize },
    /// Failed with this (redacted) error; retried later.
    Failed(String),
    /// Another node or task is syncing it now.
    Busy,
}

impl Mirrors {
    pub fn new(
        config: &crate::config::ServerConfig,
        secrets: Arc<SecretBox>,
        writer: Writer,
        reads: ReadPool,
        maintenance: Arc<crate::maintenance::Maintenance>,
    ) -> anyhow::Result<Mirrors> {
        let guard = Guard::for_key("mirrors.allowed_hosts", &config.mirrors.allowed_hosts)
            .map_err(anyhow::Error::msg)?;
        Ok(Mirrors {
            config: config.mirrors.clone(),
            guard,
            secrets,
            writer,
            reads,
            repos_dir: config.repos_dir.clone(),
            work_dir: config.state_dir.join("mirrors"),
            node: format!("{}-{:08x}", std::process::id(), rand::random::<u32>()),
            slots: Arc::new(Semaphore::new(config.mirrors.concurrency.max(1) as usize)),
            wake: Notify::new(),
            maintenance,
        })
    }

    pub fn config(&self) -> &MirrorsConfig {
        &self.config
    }

    /// Check a URL (shape and address) before it is stored.
    pub async fn vet(&self, raw: &str) -> Result<url::Pinned, String> {
        url::pin(&self.guard, url::check(raw)?).await
    }

    /// Seal a credential for storage.
    pub fn seal(&self, credential: &str) -> String {
        self.secrets.seal_for(AAD, credential)
    }

    /// Wake the scheduler (a mirror was added).
    pub fn poke(&self) {
        self.wake.notify_one();
    }

    /// How long a claim lasts: the git deadline and a margin.
    fn claim_secs(&self) -> i64 {
        self.config.timeout_secs as i64 + 60
    }

    /// Claim `mirror` and sync it now (for `collab-repo mirror sync`),
    /// waiting for a slot and for a sync already running (here or on
    /// another node) to end first, at most as long as a claim lasts.
    pub async fn sync_now(&self, mirror: &Mirror) -> anyhow::Result<Outcome> {
        let _slot = self.slots.clone().acquire_owned().await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(self.claim_secs() as u64);
        loop {
            let (id, node, secs) = (mirror.id.clone(), self.node.clone(), self.claim_secs());
            let claimed = self
                .writer
                .write("claim a mirror", move |conn, now| {
                    Ok(store::claim(conn, &id, &node, now, now + secs)?)
                })
                .await?;
            if let Some(m) = claimed {
                return Ok(self.sync(m).await);
            }
            let (repo, id) = (mirror.repo.clone(), mirror.id.clone());
            let exists = self
                .reads
                .read(move |conn| Ok(store::get(conn, &repo, &id)?.is_some()))
                .await?;
            if !exists {
                return Ok(Outcome::Failed("the mirror was removed".into()));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Outcome::Busy);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Run one claimed mirror's git and record the outcome.
    async fn sync(&self, mirror: Mirror) -> Outcome {
        let (result, events) = self.run_git(&mirror).await;
        // A pull counts the refs it moved here (one event each), a push
        // those it moved there.
        let moved = match &result {
            Ok(pushed) => pushed.unwrap_or(events.len()),
            Err(_) => 0,
        };
        let result = result.map(|_| ());
        let outcome = match &result {
            Ok(()) => Outcome::Synced {
                refs_updated: moved,
            },
            Err(e) => Outcome::Failed(e.clone()),
        };
        crate::metrics::mirror_sync(
            if mirror.is_pull() { "pull" } else { "push" },
            if result.is_ok() { "ok" } else { "error" },
        );
        if let Err(e) = &result {
            tracing::warn!(
                mirror = mirror.id,
                repo = mirror.repo,
                "mirror sync failed: {e}"
            );
        } else {
            tracing::info!(
                mirror = mirror.id,
                repo = mirror.repo,
                direction = mirror.direction,
                refs = moved,
                "mirror synced"
            );
        }
        let (id, node) = (mirror.id.clone(), self.node.clone());
        let (base, max) = (
            self.config.min_interval_secs as i64,
            self.config.max_backoff_secs as i64,
        );
        let recorded = self
            .writer
            .write("finish a mirror sync", move |conn, now| {
                for event in &events {
                    event.append_in(conn, now)?;
                }
                Ok(store::finish(
                    conn,
                    &id,
                    &node,
                    now,
                    result.as_ref().map(|_| ()).map_err(String::as_str),
                    base,
                    max,
                )?)
            })
            .await;
        if let Err(e) = recorded {
            tracing::error!(mirror = mirror.id, "recording a mirror sync: {e:#}");
        }
        outcome
    }

    /// Git for one mirror: the result (for a push, how many refs it moved
    /// there) and, for a pull, the events of the refs that moved here
    /// (recorded whatever the result: a failed fetch may have moved some).
    async fn run_git(&self, mirror: &Mirror) -> (Result<Option<usize>, String>, Vec<Recorded>) {
        let credential = match &mirror.credential {
            None => None,
            Some(sealed) if SecretBox::is_sealed(sealed) => {
                match self.secrets.open_for(AAD, sealed) {
                    Ok(text) => Some(Credential::classify(&text)),
                    Err(e) => {
                        tracing::error!(mirror = mirror.id, "mirror credential: {e}");
                        return (
                            Err("the credential cannot be opened with this node's webhook-secrets.key".into()),
                            Vec::new(),
                        );
                    }
                }
            }
            Some(_) => {
                return (
                    Err("the stored credential is not sealed".into()),
                    Vec::new(),
                )
            }
        };
        // Checked and resolved again at every sync: a name may have moved.
        let pinned = match self.vet(&mirror.url).await {
            Ok(p) => p,
            Err(e) => return (Err(e), Vec::new()),
        };
        let Some(path) = crate::repos::resolve_repo_path(&self.repos_dir, &mirror.repo) else {
            return (Err("the repository is gone".into()), Vec::new());
        };
        let run = git::Run {
            repo: &path,
            pinned: &pinned,
            credential: credential.as_ref(),
            timeout: Duration::from_secs(self.config.timeout_secs),
            work_dir: &self.work_dir,
            synced_before: mirror.last_success_at.is_some(),
        };
        if !mirror.is_pull() {
            return (git::push(&run).await.map(Some), Vec::new());
        }
        let snapshot = |path: PathBuf| async move {
            tokio::task::spawn_blocking(move || git::ref_snapshot(&path))
                .await
                .context("ref snapshot task")?
        };
        let before = match snapshot(path.clone()).await {
            Ok(refs) => refs,
            Err(e) => {
                tracing::error!(mirror = mirror.id, "reading refs: {e:#}");
                return (
                    Err("internal error reading the repository".into()),
                    Vec::new(),
                );
            }
        };
        let result = git::fetch(&run).await;
        let after = snapshot(path.clone()).await.unwrap_or_else(|e| {
            tracing::error!(mirror = mirror.id, "reading refs: {e:#}");
            before.clone()
        });
        // An empty repository's HEAD may name a branch the upstream lacks.
        let repair = path.clone();
        let _ =
            tokio::task::spawn_blocking(move || crate::repo_admin::repair_dangling_head(&repair))
                .await;
        let events = ref_events(&mirror.repo, &before, &after);
        if !events.is_empty() {
            // Each fetch leaves a pack, like a push; `false`: the
            // per-repository maintenance metrics stay off for it (they are
            // shown only for repositories known to be public).
            self.maintenance.push_finished(&path, &mirror.repo, false);
        }
        (result.map(|()| None), events)
    }

    /// The scheduler: syncs due mirrors (at most `mirrors.concurrency` at
    /// once), and makes push mirrors due when their repository's refs
    /// moved. Ends when `stopping` fires; running syncs end by their
    /// deadline (or with the process), their claims lapsing.
    pub async fn run(self: Arc<Self>, stopping: crate::shutdown::Stop) {
        let mut head = self.writer.subscribe_event_head();
        // Pushes before this start are not followed (the schedule covers
        // them).
        let mut seen = loop {
            match self
                .reads
                .read(|conn| Ok(collab_store::event_log::head(conn)?))
                .await
            {
                Ok(seq) => break seq,
                Err(e) => tracing::warn!("mirrors: reading the event head: {e:#}"),
            }
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = stopping.clone().wait() => return,
            }
        };
        loop {
            // Only when the log moved (this process's writes, hooks' and
            // other nodes' as the event poller publishes them).
            let published = *head.borrow_and_update();
            if published > seen {
                if let Err(e) = self.follow_pushes(&mut seen).await {
                    tracing::warn!("mirrors: following pushes: {e:#}");
                }
            }
            if let Err(e) = self.start_due().await {
                tracing::warn!("mirrors: starting due syncs: {e:#}");
            }
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = self.wake.notified() => {}
                _ = head.changed() => {}
                _ = stopping.clone().wait() => return,
            }
        }
    }

    /// Mark the push mirrors of repositories with new `ref.updated` events
    /// due now.
    async fn follow_pushes(&self, seen: &mut i64) -> anyhow::Result<()> {
        let after = *seen;
        let events = self
            .reads
            .read(move |conn| Ok(collab_store::event_log::after(conn, after, EVENT_PAGE)?))
            .await?;
        let Some(last) = events.last() else {
            return Ok(());
        };
        *seen = last.seq;
        let repos: BTreeSet<String> = events
            .iter()
            .filter(|e| e.kind == "ref.updated")
            .filter_map(|e| e.repo_now.clone().or_else(|| e.repo.clone()))
            .collect();
        if repos.is_empty() {
            return Ok(());
        }
        let made_due = self
            .writer
            .write("push mirrors due", move |conn, now| {
                let mut n = 0;
                for repo in &repos {
                    n += store::push_due(conn, repo, now)?;
                }
                Ok(n)
            })
            .await?;
        if made_due > 0 {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Claim what is due, as many as there are free slots, and start them.
    async fn start_due(self: &Arc<Self>) -> anyhow::Result<()> {
        if self.slots.available_permits() == 0 {
            return Ok(());
        }
        let next = self.reads.read(|conn| Ok(store::next_due(conn)?)).await?;
        let now = chrono::Utc::now().timestamp();
        if next.is_none_or(|at| at > now) {
            return Ok(());
        }
        // The slots first, then as many claims: a claimed row always has a
        // slot to run in (an on-demand sync cannot take it in between).
        let mut slots = Vec::new();
        while let Ok(slot) = self.slots.clone().try_acquire_owned() {
            slots.push(slot);
        }
        let (node, secs, free) = (self.node.clone(), self.claim_secs(), slots.len() as i64);
        let claimed = self
            .writer
            .write("claim due mirrors", move |conn, now| {
                Ok(store::claim_due(conn, &node, now, now + secs, free)?)
            })
            .await?;
        for (mirror, slot) in claimed.into_iter().zip(slots) {
            let this = self.clone();
            tokio::spawn(async move {
                this.sync(mirror).await;
                drop(slot);
                this.wake.notify_one();
            });
        }
        Ok(())
    }
}

/// One `ref.updated` event (actor `mirror`) per ref that differs between
/// the two snapshots.
fn ref_events(
    repo: &str,
    before: &std::collections::BTreeMap<String, String>,
    after: &std::collections::BTreeMap<String, String>,
) -> Vec<Recorded> {
    let zero = |other: &str| "0".repeat(other.len());
    let mut out = Vec::new();
    for (name, new) in after {
        match before.get(name) {
            Some(old) if old == new => {}
            Some(old) => out.push(Recorded::ref_updated(repo, name, old, new, ACTOR)),
            None => out.push(Recorded::ref_updated(repo, name, &zero(new), new, ACTOR)),
        }
    }
    for (name, old) in before {
        if !after.contains_key(name) {
            out.push(Recorded::ref_updated(repo, name, old, &zero(old), ACTOR));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_per_moved_created_or_deleted_ref() {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let before = map(&[
            ("refs/heads/a", "11"),
            ("refs/heads/b", "22"),
            ("refs/tags/t", "33"),
        ]);
        let after = map(&[
            ("refs/heads/a", "11"),
            ("refs/heads/b", "44"),
            ("refs/heads/c", "55"),
        ]);
        let events = ref_events("r.git", &before, &after);
        let got: Vec<(String, String, String)> = events
            .iter()
            .map(|e| {
                assert_eq!(e.actor.as_deref(), Some(ACTOR));
                (
                    e.payload["ref"].as_str().unwrap().to_string(),
                    e.payload["old"].as_str().unwrap().to_string(),
                    e.payload["new"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let t = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        assert_eq!(
            got,
            vec![
                t("refs/heads/b", "22", "44"),
                t("refs/heads/c", "00", "55"),
                t("refs/tags/t", "33", "00"),
            ]
        );
    }
}
