//! `backup --to DIR`: write a consistent backup of a running server.
//!
//! Order: the database first (SQLite's online backup API, one read
//! transaction; on PostgreSQL `pg_dump` on one exported snapshot), then the keys and other state files, then every
//! repository (lock, refs, objects: see `repo_copy`), then the release
//! files, then the manifest, then one `syncfs`. Each part is read after the
//! backup started, so every write acknowledged before it started is in it.
//! A backup without `manifest.json` is incomplete; on failure the directory
//! is removed again.
//!
//! The manifest is signed with the server's signing key
//! (`{state_dir}/collab_signing_key`), whose public half `backup` prints:
//! the operator keeps it (or its fingerprint) apart from the backups and
//! names it to `--verify` and `restore`. The private key itself is left out
//! of the backup: whoever can read a backup could otherwise sign a forged
//! one. Every file is written 0600 in 0700 directories (the manifest keeps
//! the original modes for the restore): a backup holds the host key and the
//! database.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _};

use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};

use collab_record::sign::SigningKey;

use super::manifest::{
    self, copy_hashed, hash_file, layout, manifest_path, mode_of, walk_files, Counts, FileRecord,
    Manifest, RepoRecord, DIR_MODE, FILE_MODE,
};
use super::postgres;
use super::progress::Progress;
use super::repo_copy;
use crate::config::ServerConfig;
use crate::repos;
use collab_store::snapshot;

/// What `backup` reports.
pub struct Taken {
    pub dir: PathBuf,
    /// The key that signed the manifest: `ssh-ed25519 AAAA…` and `SHA256:…`.
    pub key_line: String,
    pub fingerprint: String,
    pub manifest: Manifest,
    pub seconds: f64,
}

/// Write a backup of the server described by `config` into `to`, which must
/// not exist or be empty, and must lie outside the server's directories.
pub fn take(config: &ServerConfig, to: &Path, progress: &mut Progress) -> anyhow::Result<Taken> {
    let started = Instant::now();
    let to = std::path::absolute(to).with_context(|| format!("resolving {}", to.display()))?;
    check_outside(config, &to)?;
    let key = crate::signing::load_or_generate(&config.signing_key_path())
        .context("the server signing key, which signs the backup")?;
    let created = match std::fs::read_dir(&to) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "refusing to write the backup into {}: it is not empty",
                    to.display()
                );
            }
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(DIR_MODE))
                .with_context(|| format!("making {} private", to.display()))?;
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(&to)
                .with_context(|| format!("creating {}", to.display()))?;
            // The mode asked for is filtered by the umask; set it exactly.
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(DIR_MODE))?;
            true
        }
        Err(e) => bail!("{}: {e}", to.display()),
    };
    let result = write(config, &to, &key, progress);
    match result {
        Ok(manifest) => Ok(Taken {
            dir: to,
            key_line: key.public_key_line(),
            fingerprint: key.fingerprint(),
            manifest,
            seconds: started.elapsed().as_secs_f64(),
        }),
        Err(e) => {
            remove_partial(&to, created);
            Err(e)
        }
    }
}

/// A backup inside the state directory would be backed up by the next one.
fn check_outside(config: &ServerConfig, to: &Path) -> anyhow::Result<()> {
    let to = resolved(to);
    for dir in [&config.state_dir, &config.repos_dir, &config.releases_dir()] {
        let dir = resolved(dir);
        if to.starts_with(&dir) {
            bail!(
                "refusing to write the backup into {}: it is inside {} (keep backups outside \
                 the server's directories)",
                to.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

fn remove_partial(to: &Path, created: bool) {
    if created {
        let _ = std::fs::remove_dir_all(to);
    } else if let Ok(entries) = std::fs::read_dir(to) {
        for entry in entries.flatten() {
            let path = entry.path();
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }
}

/// The files of the backup as they are written.
struct Writer {
    root: PathBuf,
    files: Vec<FileRecord>,
    bytes: u64,
}

impl Writer {
    /// Copy `src` into the backup at `rel`, keeping its mode. `Ok(false)` if
    /// `src` vanished before it could be opened (and `tolerate_vanished`).
    fn copy(&mut self, src: &Path, rel: &Path, tolerate_vanished: bool) -> anyhow::Result<bool> {
        let mode = match mode_of(src) {
            Ok(mode) => mode,
            Err(e) if tolerate_vanished && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(false)
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", src.display())),
        };
        // Written private; the manifest keeps the mode a restore puts back.
        let (size, sha256) = match copy_hashed(src, &self.root.join(rel), FILE_MODE) {
            Ok(done) => done,
            Err(e) if tolerate_vanished && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(false)
            }
            Err(e) => return Err(e).with_context(|| format!("copying {}", src.display())),
        };
        self.record(rel, size, mode, sha256)?;
        Ok(true)
    }

    /// Record a file already written into the backup at `rel`, making it
    /// private (it is restored 0600 as well).
    fn record_written(&mut self, rel: &Path) -> anyhow::Result<()> {
        let path = self.root.join(rel);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(FILE_MODE))
            .with_context(|| format!("making {} private", path.display()))?;
        let (size, sha256) =
            hash_file(&path).with_context(|| format!("reading {}", path.display()))?;
        self.record(rel, size, FILE_MODE, sha256)
    }

    fn record(&mut self, rel: &Path, size: u64, mode: u32, sha256: String) -> anyhow::Result<()> {
        self.files.push(FileRecord {
            path: manifest_path(rel)?,
            size,
            mode,
            sha256,
        });
        self.bytes += size;
        Ok(())
    }
}

/// An absolute path with the symlinks of its existing part resolved, so
/// paths compare by where they really are, whether they exist yet or not.
fn resolved(path: &Path) -> PathBuf {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut missing = Vec::new();
    let mut at = path.as_path();
    loop {
        if let Ok(real) = at.canonicalize() {
            return missing.iter().rev().fold(real, |p, part| p.join(part));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_os_string());
                at = parent;
            }
            _ => return path,
        }
    }
}

/// The database and its SQLite side files.
fn database_files(db: &Path) -> Vec<PathBuf> {
    let mut files = vec![resolved(db)];
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        files.push(resolved(Path::new(&name)));
    }
    files
}

/// Temporary files of the server's own atomic writes (and a git-lfs
/// object being collected, `.gc-<oid>-…`).
pub(super) fn is_temporary(rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with(".lock")
        || name.contains(".tmp-")
        || name.starts_with(".#creating-")
        || name.starts_with(".gc-")
}

fn write(
    config: &ServerConfig,
    to: &Path,
    key: &SigningKey,
    progress: &mut Progress,
) -> anyhow::Result<Manifest> {
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut out = Writer {
        root: to.to_path_buf(),
        files: Vec::new(),
        bytes: 0,
    };

    // 1. The database, as of one read transaction: SQLite's online copy,
    // or PostgreSQL's `pg_dump` on an exported snapshot (`postgres`). A
    // SQLite file left from before `db migrate` is stale and never stands
    // in for a PostgreSQL database (it is skipped below as well).
    let db = config.collab_db_path();
    let (census, database_dump) = match config.collab_db_location() {
        collab_store::Location::Postgres(url) => {
            let copy = to.join(layout::PG_DUMP);
            let census = postgres::dump(&url, &copy).context("dumping the PostgreSQL database")?;
            out.record_written(Path::new(layout::PG_DUMP))?;
            (Some(census), Some(postgres::DUMP_FORMAT.to_string()))
        }
        collab_store::Location::Sqlite(_) if db.exists() => {
            let copy = to.join(layout::DATABASE);
            // Created 0600 before SQLite writes into it (it would use 0644).
            collab_store::leases::make_private(&copy)
                .with_context(|| format!("creating {}", copy.display()))?;
            snapshot::copy_online(&db, &copy)
                .with_context(|| format!("copying the database {}", db.display()))?;
            out.record_written(Path::new(layout::DATABASE))?;
            let census = snapshot::census_of(&copy).context("reading the database copy")?;
            (Some(census), None)
        }
        collab_store::Location::Sqlite(_) => (None, None),
    };

    // 2. Keys, and every other file of the state directory.
    for (src, rel) in [
        (&config.ssh.host_key, layout::HOST_KEY),
        (&config.ssh.authorized_keys, layout::AUTHORIZED_KEYS),
    ] {
        out.copy(src, Path::new(rel), true)?;
    }
    let mut not_state: Vec<PathBuf> = database_files(&db);
    not_state.extend(
        [
            &config.repos_dir,
            &config.releases_dir(),
            &config.hooks_dir(),
            // Rebuilt on demand; a restored server starts with it empty.
            &config.pack_cache_dir(),
            &config.ssh.host_key,
            &config.ssh.authorized_keys,
            &to.to_path_buf(),
            // The key that signs backups is never in one (see above).
            &config.signing_key_path(),
            &PathBuf::from(format!("{}.pub", config.signing_key_path().display())),
        ]
        .into_iter()
        .map(|p| resolved(p)),
    );
    let state_root = resolved(&config.state_dir);
    if state_root.is_dir() {
        let skip = |rel: &Path, _is_dir: bool| {
            is_temporary(rel) || not_state.iter().any(|p| *p == state_root.join(rel))
        };
        for rel in walk_files(&state_root, &skip)? {
            out.copy(
                &state_root.join(&rel),
                &Path::new(layout::STATE).join(&rel),
                true,
            )?;
        }
    }

    // 3. Repositories, each consistent on its own.
    let repos_root = resolved(&config.repos_dir);
    let entries = repos::list_repos(&repos_root);
    let mut repo_records = Vec::new();
    let mut refs_total = 0u64;
    for (i, entry) in entries.iter().enumerate() {
        progress.step("backup: repositories", i, entries.len());
        let dest_rel = Path::new(layout::REPOS).join(&entry.name);
        let (lock, refs) = repo_copy::begin(&entry.path)?;
        for rel in repo_copy::files_to_copy(&entry.path)? {
            out.copy(&entry.path.join(&rel), &dest_rel.join(&rel), false)
                .with_context(|| format!("repository {}", entry.name))?;
        }
        drop(lock);
        let packed = dest_rel.join("packed-refs");
        manifest::create_private_dirs(&to.join(&dest_rel))?;
        std::fs::write(to.join(&packed), refs.packed_refs())?;
        out.record_written(&packed)?;
        repo_copy::make_skeleton(&to.join(&dest_rel), DIR_MODE)?;
        refs_total += refs.lines.len() as u64;
        repo_records.push(RepoRecord {
            name: entry.name.clone(),
            refs: refs.lines.len() as u64,
            head: refs.head,
        });
    }
    progress.step("backup: repositories", entries.len(), entries.len());
    // Files of repos_dir that belong to no repository (not the database).
    if repos_root.is_dir() {
        let db_files = database_files(&db);
        let skip = |rel: &Path, is_dir: bool| {
            let path = repos_root.join(rel);
            is_temporary(rel) || (is_dir && repos::is_bare_repo(&path)) || db_files.contains(&path)
        };
        for rel in walk_files(&repos_root, &skip)? {
            out.copy(
                &repos_root.join(&rel),
                &Path::new(layout::REPOS).join(&rel),
                true,
            )?;
        }
    }

    // 4. Release files (a half-written upload is a `.tmp-` file).
    let releases_root = resolved(&config.releases_dir());
    let mut release_files = 0u64;
    if releases_root.is_dir() {
        let skip = |rel: &Path, _: bool| is_temporary(rel);
        for rel in walk_files(&releases_root, &skip)? {
            let copied = out.copy(
                &releases_root.join(&rel),
                &Path::new(layout::RELEASES).join(&rel),
                true,
            )?;
            let is_data = !rel
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            if copied && is_data {
                release_files += 1;
            }
        }
    }

    let counts = Counts {
        repos: repo_records.len() as u64,
        refs: refs_total,
        leases: census.as_ref().and_then(|c| c.rows("leases")),
        issues: census.as_ref().and_then(|c| c.rows("issues")),
        events: census.as_ref().and_then(|c| c.rows("events")),
        max_token: census
            .as_ref()
            .and_then(|c| c.tokens.as_ref())
            .map(|t| t.max),
        token_pairs: census
            .as_ref()
            .and_then(|c| c.tokens.as_ref())
            .map(|t| t.pairs),
        release_files,
        files: out.files.len() as u64,
        bytes: out.bytes,
    };
    let manifest = Manifest {
        format: manifest::FORMAT.into(),
        version: manifest::VERSION,
        started_at,
        server_version: env!("CARGO_PKG_VERSION").into(),
        counts,
        database: census,
        database_dump,
        database_elsewhere: None,
        repos: repo_records,
        files: out.files,
    };
    // Data first, then the manifest that declares the backup complete.
    manifest::sync_filesystem(to).context("syncing the backup")?;
    manifest::write_manifest(to, &manifest, key)?;
    manifest::sync_filesystem(to).context("syncing the backup")?;
    Ok(manifest)
}

/// `--keep N`: among the directories beside `newest` (in its parent) that
/// hold a readable backup manifest, remove all but the `keep` most recent
/// (by the manifest's start time). Anything else in the parent (files,
/// unfinished backups without a manifest) is left alone. Returns what was
/// removed.
pub fn prune_siblings(newest: &Path, keep: usize) -> anyhow::Result<Vec<PathBuf>> {
    let Some(parent) = newest.parent() else {
        return Ok(Vec::new());
    };
    let mut backups = Vec::new();
    for entry in
        std::fs::read_dir(parent).with_context(|| format!("listing {}", parent.display()))?
    {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        let Ok(found) = manifest::read_manifest_unchecked(&path) else {
            continue;
        };
        let started = chrono::DateTime::parse_from_rfc3339(&found.started_at)
            .map(|t| t.timestamp())
            .unwrap_or(i64::MIN);
        backups.push((started, path));
    }
    // Newest first; the one just written is kept whatever its clock said.
    backups.sort_by(|a, b| b.cmp(a));
    let mut removed = Vec::new();
    let mut kept = 0;
    for (_, path) in backups {
        if path == newest || kept < keep.saturating_sub(1) {
            if path != newest {
                kept += 1;
            }
            continue;
        }
        std::fs::remove_dir_all(&path)
            .with_context(|| format!("removing old backup {}", path.display()))?;
        removed.push(path);
    }
    Ok(removed)
}
