//! One maintenance run on one repository: the git commands, in order, and
//! what they changed. The caller (`Maintenance`) has made sure no other run
//! is on this repository and holds its lock.
//!
//! 1. remove the leftovers of killed pushes and repacks (`quarantine`);
//! 2. `git pack-refs --all`: one `packed-refs` file instead of a file per ref
//!    (a push of many small refs leaves thousands);
//! 3. `git repack -d --geometric=2 --write-midx --write-bitmap-index`: roll
//!    the loose objects and the small packs into a new pack until every pack
//!    is at least twice the size of all smaller ones together; the work of a
//!    run is proportional to what arrived since the last one, not to the
//!    repository. Loose objects are packed whatever their reachability and
//!    no object is ever dropped (no prune), so a push landing during the
//!    run cannot lose an object it refers to. A multi-pack index over the
//!    packs, with a reachability bitmap, is rewritten each run; when the
//!    geometric progression collapses to one pack that is a full repack
//!    with a bitmap. (git 2.32+ for `--geometric`, 2.34+ for multi-pack
//!    bitmaps; Debian 12 ships 2.39.)
//! 4. `git commit-graph write --reachable --split`: an incremental
//!    commit-graph chain for fast history walks (negotiation, merge bases).
//!
//! Once every [`PRUNE_EVERY`] per repository, step 3 is instead the full
//! `git repack -a -d --cruft --cruft-expiration=<PRUNE_GRACE>` (what
//! `git gc --cruft --prune=<grace>` runs): the objects no ref reaches go
//! to a cruft pack, and those untouched for [`PRUNE_GRACE`] are dropped,
//! so a commit deleted or force-pushed away (a leaked secret) leaves the
//! disk, not only the answers (`crate::wants`, the web's 404). The grace
//! keeps what a push is landing: its pack is new, and git gives each
//! unreachable object the time of the newest pack or file holding it.
//!
//! A push never needs a directory a step removes: pushes are kept as
//! packs (`receive.unpackLimit=1`, set in `ssh/git.rs`), because
//! `repack -d` removes the loose-object fan-out directories it empties,
//! under a push moving loose objects into them. A step that fails (the
//! multi-pack bitmap when a pack lands mid-run) is tried again, and the
//! repack finally runs without the bitmap rather than fail the run.
//!
//! Every step is one git command that replaces files by atomic rename and
//! removes a pack only after the packs replacing it are in place; a clone
//! that already opened a pack keeps reading it (the file lives on until it
//! is closed) and git re-scans the pack directory when an object is not
//! where it expected. A killed run leaves only temporary files, which step 1
//! of the next run removes.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;

use super::git::git;
use super::quarantine;

/// What a run did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunReport {
    /// Unix seconds when the run started.
    pub started_at: i64,
    pub seconds: f64,
    pub packs_before: u64,
    pub packs_after: u64,
    pub loose_before: u64,
    pub loose_after: u64,
    /// Quarantine and temporary-pack leftovers removed.
    pub leftovers_removed: usize,
    /// Whether the run wrote a reachability bitmap (false when pushes kept
    /// landing during the repack; see `run_step_retrying`).
    pub bitmap: bool,
    /// Whether this was a pruning run (unreachable objects past the grace
    /// dropped; the git-lfs objects no ref points at are collected then).
    pub pruning: bool,
    /// git-lfs objects collected by this run (`Maintenance` fills them in).
    pub lfs_objects_removed: u64,
    pub lfs_bytes_removed: u64,
}

/// How long one git step may take before it is killed (a hang guard; a
/// killed step leaves only temporary files).
const STEP_LIMIT: Duration = Duration::from_secs(6 * 60 * 60);

/// The git commands of a run, in order.
pub const STEPS: &[&[&str]] = &[
    &["pack-refs", "--all"],
    &[
        "repack",
        "-d",
        "-q",
        "--geometric=2",
        "--write-midx",
        "--write-bitmap-index",
    ],
    &[
        "commit-graph",
        "write",
        "--reachable",
        "--split",
        "--no-progress",
    ],
];

/// How long an object no ref reaches is kept (by its file's time).
pub const PRUNE_GRACE: Duration = Duration::from_secs(2 * 24 * 60 * 60);
/// How often a repository's run is the pruning one (a full repack).
pub const PRUNE_EVERY: Duration = Duration::from_secs(24 * 60 * 60);
/// The file whose modification time is the last pruning run.
const PRUNED_MARK: &str = "objects/info/collab-pruned";

/// The repack of a pruning run: everything reachable in one pack, the
/// rest in a cruft pack, minus what is older than [`PRUNE_GRACE`].
fn prune_step() -> Vec<String> {
    [
        "repack",
        "-a",
        "-d",
        "-q",
        "--cruft",
        &format!("--cruft-expiration={}.seconds.ago", PRUNE_GRACE.as_secs()),
        "--write-midx",
        "--write-bitmap-index",
    ]
    .map(str::to_string)
    .to_vec()
}

/// Whether this run of `repo_dir` is a pruning one.
fn prune_due(repo_dir: &Path, now: SystemTime) -> bool {
    std::fs::metadata(repo_dir.join(PRUNED_MARK))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| now.duration_since(t).ok())
        .is_none_or(|age| age >= PRUNE_EVERY)
}

/// Run maintenance on the bare repository at `repo_dir`.
pub async fn run(repo_dir: &Path) -> anyhow::Result<RunReport> {
    let started = Instant::now();
    let started_at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (packs_before, loose_before) = count_objects(repo_dir);
    let dir = repo_dir.to_path_buf();
    let leftovers_removed = tokio::task::spawn_blocking(move || {
        quarantine::prune_leftovers(&dir, quarantine::DEFAULT_MAX_AGE, SystemTime::now())
    })
    .await?
    .context("removing leftovers")?;
    let mut bitmap = true;
    let pruning = prune_due(repo_dir, SystemTime::now());
    let prune = prune_step();
    for step in STEPS {
        let step: Vec<&str> = if pruning && step.contains(&"--geometric=2") {
            prune.iter().map(String::as_str).collect()
        } else {
            step.to_vec()
        };
        let step = step.as_slice();
        match run_step_retrying(repo_dir, step).await {
            Ok(()) => {}
            // Pushes kept landing mid-repack: settle for the packs and the
            // multi-pack index without a bitmap this time (the next run
            // writes it; clones are only slower meanwhile).
            Err(e) if step.contains(&"--write-bitmap-index") => {
                tracing::info!(
                    repo = %repo_dir.display(),
                    "repack without a bitmap this time: {e:#}"
                );
                let without: Vec<&str> = step
                    .iter()
                    .copied()
                    .filter(|a| *a != "--write-bitmap-index")
                    .collect();
                run_step(repo_dir, &without).await?;
                bitmap = false;
            }
            Err(e) => return Err(e),
        }
    }
    if pruning {
        std::fs::write(repo_dir.join(PRUNED_MARK), b"").context("marking the pruning run")?;
    }
    let (packs_after, loose_after) = count_objects(repo_dir);
    Ok(RunReport {
        started_at,
        seconds: started.elapsed().as_secs_f64(),
        packs_before,
        packs_after,
        loose_before,
        loose_after,
        leftovers_removed,
        bitmap,
        pruning,
        lfs_objects_removed: 0,
        lfs_bytes_removed: 0,
    })
}

/// How many times a step is tried before the run fails.
const ATTEMPTS: u32 = 3;

/// Run a step, again if it fails. `git repack --geometric --write-midx
/// --write-bitmap-index` lists the packs before it reads the refs it picks
/// bitmap commits from, so a push whose pack lands in between leaves a tip
/// outside the multi-pack index and the bitmap fails ("could not write
/// multi-pack bitmap"). The push is unharmed (its pack and ref are in
/// place) and a failed repack removes nothing (the redundant packs are
/// deleted only after the index is written), so trying again is safe and
/// almost always enough; after `ATTEMPTS` the run repacks without the
/// bitmap. The other steps are idempotent and are retried the same way.
async fn run_step_retrying(repo_dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let mut attempt = 1;
    loop {
        match run_step(repo_dir, args).await {
            Ok(()) => return Ok(()),
            Err(e) if attempt < ATTEMPTS => {
                tracing::debug!(
                    repo = %repo_dir.display(),
                    attempt,
                    "maintenance step failed, trying again: {e:#}"
                );
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
            Err(e) => return Err(e),
        }
    }
}

async fn run_step(repo_dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let mut cmd = tokio::process::Command::from(git(repo_dir));
    // Killed with the task: a server that stops does not wait for a repack.
    cmd.args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(STEP_LIMIT, cmd.output())
        .await
        .map_err(|_| anyhow::anyhow!("git {} took too long", args[0]))?
        .with_context(|| format!("cannot run git {}", args[0]))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        anyhow::bail!("git {} failed ({}): {first}", args.join(" "), out.status);
    }
    Ok(())
}

/// Packs (with their index) and loose objects in a repository.
pub fn count_objects(repo_dir: &Path) -> (u64, u64) {
    let objects = repo_dir.join("objects");
    let packs = std::fs::read_dir(objects.join("pack"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.starts_with("pack-")
                        && name.ends_with(".pack")
                        && objects
                            .join("pack")
                            .join(name.replace(".pack", ".idx"))
                            .exists()
                })
                .count() as u64
        })
        .unwrap_or(0);
    let mut loose = 0u64;
    for byte in 0..=255u8 {
        if let Ok(entries) = std::fs::read_dir(objects.join(format!("{byte:02x}"))) {
            loose += entries.flatten().count() as u64;
        }
    }
    (packs, loose)
}
