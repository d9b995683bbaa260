//! Collecting a repository's git-lfs objects that no ref points at any
//! more (maintenance, `Maintenance::run_once`): the objects named by an
//! LFS pointer blob reachable from any ref of the repository (`git
//! rev-list --objects --all`: branches, tags, the patch revisions and
//! queue groups under `refs/collab/`; `refs/for/<base>` is never stored,
//! it becomes a revision ref) are kept; the others go once their file is
//! `lfs.gc_grace` old ([`LfsStore::collect`]). docs/lfs.md argues why the
//! grace covers a push whose objects are uploaded but whose refs have not
//! landed yet.

use std::collections::HashSet;
use std::io::BufRead as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;

use super::pointer::{self, MAX_POINTER};
use super::store::{LfsStore, Usage};
use crate::maintenance::git::git;

/// The oids of every LFS pointer blob reachable from a ref of the bare
/// repository at `repo_dir`. Blobs larger than a pointer can be are left
/// out by git itself (`--filter=blob:limit`); the rest are read one by one
/// (a header first), so memory holds the set of oids found, not the list
/// of objects.
pub fn referenced(repo_dir: &Path) -> anyhow::Result<HashSet<String>> {
    let repo = git2::Repository::open_bare(repo_dir).context("opening the repository")?;
    let odb = repo.odb()?;
    let mut child = git(repo_dir)
        .args([
            "rev-list",
            "--objects",
            "--all",
            "--no-object-names",
            &format!("--filter=blob:limit={}", MAX_POINTER + 1),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run git rev-list")?;
    let stdout = child.stdout.take().expect("piped");
    let mut found = HashSet::new();
    let mut failed = None;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line?;
        let Some(oid) = line.split_whitespace().next() else {
            continue;
        };
        // `~<oid>`-style marks are not printed without --filter-print-omitted.
        let oid = match git2::Oid::from_str(oid) {
            Ok(oid) => oid,
            Err(e) => {
                failed = Some(anyhow::anyhow!("git rev-list printed {line:?}: {e}"));
                break;
            }
        };
        let (size, kind) = odb.read_header(oid)?;
        if kind != git2::ObjectType::Blob || size > MAX_POINTER {
            continue;
        }
        let blob = odb.read(oid)?;
        if let Some((lfs_oid, _)) = pointer::parse(blob.data()) {
            found.insert(lfs_oid);
        }
    }
    let out = child.wait_with_output()?;
    if let Some(e) = failed {
        return Err(e);
    }
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        anyhow::bail!(
            "git rev-list --objects --all failed ({}): {first}",
            out.status
        );
    }
    Ok(found)
}

/// Collect repository `repo_id`'s objects (its git directory at
/// `repo_dir`) that no ref points at and are `grace` old. A repository
/// without LFS objects costs one directory lookup.
pub fn collect(
    store: &LfsStore,
    repo_id: &str,
    repo_dir: &Path,
    grace: Duration,
) -> anyhow::Result<Usage> {
    if !store.repo_dir(repo_id)?.is_dir() {
        return Ok(Usage::default());
    }
    let keep = referenced(repo_dir).context("listing the LFS pointers")?;
    let removed = store
        .collect(repo_id, &keep, grace, SystemTime::now())
        .context("removing LFS objects")?;
    Ok(removed)
}
