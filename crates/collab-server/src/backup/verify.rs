//! `backup --verify DIR`: check a backup without restoring it. The manifest
//! must match its checksum and carry the signature of the key the operator
//! named (`manifest::Trust`); every file it lists must be there with its size
//! and SHA-256, and no other file may be; the database copy must pass
//! SQLite's integrity check and hold what the manifest counted (a
//! PostgreSQL archive must be one `pg_restore` reads); every
//! repository copy must have its refs and pass `git fsck`; every git-lfs
//! object under `state/lfs/` must hold the data its name is the SHA-256
//! of, and no partial one (an upload's `.tmp-`, a collection's `.gc-`)
//! may be there. Nothing in the
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
    /// The git-lfs objects checked (held whole, under their names).
    pub lfs: LfsCount,
}

/// git-lfs objects in a backup: how many, and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LfsCount {
    pub objects: u64,
    pub bytes: u64,
}

/// Where a backup keeps the git-lfs store: `state/lfs/<repo id>/<oid[0..2]>/<oid[2..4]>/<oid>`.
const LFS_DIR: &str = "state/lfs";

/// Why `rel` (a path under [`LFS_DIR`] of a file hashed to `sha`) is not
/// a sound git-lfs object, in one line; `None` when it is one.
fn lfs_problem(rel: &Path, sha: &str) -> Option<String> {
    let parts: Vec<&str> = rel
        .strip_prefix(LFS_DIR)
        .ok()?
        .iter()
        .map(|p| p.to_str().unwrap_or(""))
        .collect();
    let shown = rel.display();
    if super::take::is_temporary(rel) {
        return Some(format!(
            "{shown}: a partial git-lfs file (an upload in flight or an object being collected), not an object: backups leave these out"
        ));
    }
    let name = parts.last().copied().unwrap_or("");
    let placed = parts.len() == 4
        && crate::lfs::store::valid_oid(name)
        && parts[1] == &name[..2]
        && parts[2] == &name[2..4];
    if !placed {
        return Some(format!(
            "{shown}: not a git-lfs object (its name must be the SHA-256 of its data, under <repo id>/<2 hex>/<2 hex>/)"
        ));
    }
    (sha != name)
        .then(|| format!("{shown}: git-lfs object {name} is damaged: its data's SHA-256 is {sha}"))
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
                lfs: LfsCount::default(),
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
            lfs: LfsCount::default(),
        };
    }
    let mut listed = BTreeSet::new();
    let mut lfs = LfsCount::default();
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
        let is_lfs = rel.starts_with(LFS_DIR);
        match open_in(dir, &rel).and_then(hash_open) {
            Ok((_, sha)) if is_lfs && lfs_problem(&rel, &sha).is_some() => {
                problems.extend(lfs_problem(&rel, &sha));
            }
            Ok((size, sha)) if size == file.size && sha == file.sha256 => {
                if is_lfs {
                    lfs.objects += 1;
                    lfs.bytes += size;
                }
            }
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
        lfs,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lfs_objects_are_named_by_their_hash_and_never_partial() {
        let oid = "4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393";
        let at = |rel: &str| Path::new(LFS_DIR).join(rel);
        let sound = at(&format!("ab12/4d/7a/{oid}"));
        assert_eq!(lfs_problem(&sound, oid), None);
        let damaged = lfs_problem(&sound, &"0".repeat(64)).unwrap();
        assert!(
            damaged.contains(oid) && damaged.contains("damaged"),
            "{damaged}"
        );
        for partial in [
            format!("ab12/4d/7a/.tmp-{oid}-x1"),
            format!("ab12/4d/7a/.gc-{oid}-x1"),
        ] {
            let problem = lfs_problem(&at(&partial), oid).unwrap();
            assert!(problem.contains("partial"), "{problem}");
        }
        for misplaced in [
            format!("ab12/00/7a/{oid}"),
            format!("ab12/{oid}"),
            "ab12/4d/7a/x".into(),
        ] {
            let problem = lfs_problem(&at(&misplaced), oid).unwrap();
            assert!(problem.contains("not a git-lfs object"), "{problem}");
        }
    }
}
