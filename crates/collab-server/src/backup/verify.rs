//! `backup --verify DIR`: check a backup without restoring it. The manifest
//! must match its checksum and carry the signature of the key the operator
//! named (`manifest::Trust`); every file it lists must be there with its size
//! and SHA-256, and no other file may be; the database copy must pass
//! SQLite's integrity check and hold what the manifest counted (a
//! PostgreSQL archive must be one `pg_restore` reads); every
//! repository copy must have its refs and pass `git fsck`. Nothing in the
//! backup but directories and regular files is allowed, and no symbolic
//! link is followed: each is a problem of its own.

use std::collections::BTreeSet;
use std::path::Path;

use super::manifest::{
    self, hash_open, layout, open_in, read_in, safe_relative, walk_files, walk_special, Manifest,
    Signer, Trust,
};
use super::progress::Progress;
use crate::maintenance::git::git;
use collab_store::snapshot;

/// The outcome of a check: the manifest (if it could be read) and every
/// problem found. No problems means the backup is sound.
pub struct Checked {
    pub manifest: Option<Manifest>,
    /// Who vouches for the manifest (when it could be read).
    pub signer: Option<Signer>,
    pub problems: Vec<String>,
}

/// How thorough a check is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Manifest, hashes, unlisted files, database integrity and census.
    Files,
    /// All of that and `git fsck` of every repository copy.
    Full,
}

/// Check the backup in `dir`.
pub fn check(dir: &Path, trust: &Trust, depth: Depth, progress: &mut Progress) -> Checked {
    let (manifest, signer) = match manifest::read_manifest(dir, trust) {
        Ok(read) => read,
        Err(e) => {
            return Checked {
                manifest: None,
                signer: None,
                problems: vec![format!("{e:#}")],
            }
        }
    };
    let mut problems = Vec::new();
    // Links, FIFOs and devices first: none is ever opened or followed.
    match walk_special(dir) {
        Ok(found) => problems.extend(found.into_iter().map(|(rel, what)| {
            format!(
                "{}: {what}, not a regular file: refused, not followed",
                rel.display()
            )
        })),
        Err(e) => problems.push(format!("listing {}: {e}", dir.display())),
    }
    if !problems.is_empty() {
        // SQLite and git fsck would follow such links: check nothing more.
        return Checked {
            manifest: Some(manifest),
            signer: Some(signer),
            problems,
        };
    }
    let mut listed = BTreeSet::new();
    let total = manifest.files.len();
    for (i, file) in manifest.files.iter().enumerate() {
        progress.step("verify: files", i, total);
        let rel = match safe_relative(&file.path) {
            Ok(rel) => rel,
            Err(e) => {
                problems.push(format!("{e:#}"));
                continue;
            }
        };
        listed.insert(rel.clone());
        match open_in(dir, &rel).and_then(hash_open) {
            Ok((size, sha)) if size == file.size && sha == file.sha256 => {}
            Ok((size, _)) if size != file.size => problems.push(format!(
                "{}: size {size}, the manifest says {}",
                file.path, file.size
            )),
            Ok(_) => problems.push(format!(
                "{}: SHA-256 does not match the manifest",
                file.path
            )),
            Err(e) => problems.push(format!("{}: {e}", file.path)),
        }
    }
    progress.step("verify: files", total, total);
    match walk_files(dir, &|_, _| false) {
        Ok(present) => {
            for rel in present {
                let top = rel.to_str().unwrap_or("");
                if [
                    manifest::MANIFEST,
                    manifest::MANIFEST_SUM,
                    manifest::MANIFEST_SIG,
                ]
                .contains(&top)
                {
                    continue;
                }
                if !listed.contains(&rel) {
                    problems.push(format!("{}: not in the manifest", rel.display()));
                }
            }
        }
        Err(e) => problems.push(format!("listing {}: {e}", dir.display())),
    }

    if manifest.database_dump.is_some() {
        // A pg_dump archive: its bytes are the manifest's (hashed above); its
        // census is checked when `restore` loads it. Here, that pg_restore
        // can read it, where pg_restore is installed.
        let dump = dir.join(layout::PG_DUMP);
        if let Some(Err(e)) = super::postgres::readable(&dump) {
            problems.push(format!("{}: {e:#}", layout::PG_DUMP));
        }
    } else if let Some(expected) = &manifest.database {
        let db = dir.join(layout::DATABASE);
        match snapshot::integrity_problems(&db) {
            Ok(found) => problems.extend(found.into_iter().map(|p| format!("collab.db: {p}"))),
            Err(e) => problems.push(format!("collab.db: {e}")),
        }
        match snapshot::census_of(&db) {
            Ok(census) if census == *expected => {}
            Ok(census) => problems.push(format!(
                "collab.db holds {} but the manifest counted {}",
                serde_json::to_string(&census).unwrap_or_default(),
                serde_json::to_string(expected).unwrap_or_default()
            )),
            Err(e) => problems.push(format!("collab.db: {e}")),
        }
    }

    for (i, repo) in manifest.repos.iter().enumerate() {
        progress.step("verify: repositories", i, manifest.repos.len());
        let Ok(rel) = safe_relative(&repo.name) else {
            problems.push(format!(
                "bad repository name {:?} in the manifest",
                repo.name
            ));
            continue;
        };
        let path = dir.join(layout::REPOS).join(&rel);
        let refs = read_in(
            dir,
            &Path::new(layout::REPOS).join(&rel).join("packed-refs"),
        )
        .map(|text| {
            String::from_utf8_lossy(&text)
                .lines()
                .filter(|l| !l.starts_with('#'))
                .count() as u64
        });
        match refs {
            Ok(n) if n == repo.refs => {}
            Ok(n) => problems.push(format!(
                "{}: {n} refs, the manifest says {}",
                repo.name, repo.refs
            )),
            Err(e) => problems.push(format!("{}: packed-refs: {e}", repo.name)),
        }
        if depth == Depth::Full {
            if let Err(e) = fsck(&path) {
                problems.push(format!("{}: {e:#}", repo.name));
            }
        }
    }
    progress.finish();
    Checked {
        manifest: Some(manifest),
        signer: Some(signer),
        problems,
    }
}

/// `git fsck` of a repository: every object readable and well-formed, every
/// ref's history complete.
pub fn fsck(repo: &Path) -> anyhow::Result<()> {
    let out = git(repo)
        .args(["fsck", "--no-dangling", "--no-progress"])
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run git fsck: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let first: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(3)
        .collect();
    anyhow::bail!("git fsck failed: {}", first.join("; "))
}
