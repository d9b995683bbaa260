//! `restore --from DIR`: put a backup back into an empty state directory,
//! then prove it: every repository passes `git fsck` with the refs the
//! backup took, the database passes SQLite's integrity check (or, on
//! PostgreSQL, `pg_restore` loads it in one transaction) and holds what the
//! manifest counted (rows, counters, fencing-token high-water marks).
//!
//! The backup is checked (the manifest's signature by the key the operator
//! names, hashes, database, no symbolic link or special file anywhere)
//! before anything is written, and every file is opened again without
//! following links and hashed as it is copied. Every target
//! (the state directory, `repos_dir`, the release directory, the database,
//! the keys) must be missing or an empty directory; a failure at any point
//! removes what the restore wrote, so it never leaves a half-restored
//! state directory a server could start on.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _};

use super::manifest::{
    copy_hashed_from, layout, open_in, safe_relative, sync_filesystem, Manifest, Signer, Trust,
};
use super::postgres;
use super::progress::Progress;
use super::repo_copy;
use super::verify::{self, Depth};
use crate::config::ServerConfig;
use crate::maintenance::git::{git, output};
use collab_store::snapshot;

/// What `restore` reports.
pub struct Restored {
    pub manifest: Manifest,
    /// Who vouched for the backup.
    pub signer: Signer,
    /// Whether `--signing-key` put the server's signing key back.
    pub signing_key_restored: bool,
    pub seconds: f64,
}

/// Restore the backup in `from` into the (empty) places `config` names,
/// trusting it as `trust` says. `signing_key`: the server's signing key
/// file, kept apart from the backups, to put back (its public half must be
/// the key that signed the backup).
pub fn restore(
    config: &ServerConfig,
    from: &Path,
    trust: &Trust,
    signing_key: Option<&Path>,
    progress: &mut Progress,
) -> anyhow::Result<Restored> {
    let started = Instant::now();
    let checked = verify::check(from, trust, Depth::Files, progress);
    if !checked.problems.is_empty() {
        bail!(
            "the backup in {} failed its check, nothing restored: {}",
            from.display(),
            checked.problems.join("; ")
        );
    }
    let manifest = checked
        .manifest
        .expect("a check without problems read the manifest");
    let signer = checked.signer.expect("a read manifest has a signer");
    let key = match signing_key {
        Some(path) => Some(signing_key_to_restore(path, &signer)?),
        None => None,
    };
    check_targets_empty(config)?;
    let pg_url = match (
        &manifest.database,
        manifest.database_dump.as_deref(),
        config.collab_db_location(),
    ) {
        // A SQLite database restored beside a server configured for
        // PostgreSQL would be a file nobody reads, reported as restored.
        (Some(_), None, location @ collab_store::Location::Postgres(_)) => bail!(
            "the backup holds a SQLite collab database, but collab_db is PostgreSQL ({}): \
             restore with collab_db unset, then move it with `db migrate`",
            location.display()
        ),
        (Some(_), Some(postgres::DUMP_FORMAT), collab_store::Location::Postgres(url)) => {
            postgres::check_empty(&url)?;
            Some(url)
        }
        (Some(_), Some(postgres::DUMP_FORMAT), collab_store::Location::Sqlite(_)) => bail!(
            "the backup holds a PostgreSQL database (a pg_dump archive), but collab_db is \
             SQLite: set collab_db to an empty PostgreSQL database and restore again"
        ),
        (_, Some(other), _) => bail!("the backup's database is in an unknown format {other:?}"),
        _ => None,
    };

    let mut written = Written::default();
    let mut loaded = false;
    let result = copy_all(config, from, &manifest, &mut written, progress)
        .and_then(|()| match &pg_url {
            Some(url) => {
                load_dump(config, from, &manifest, url)?;
                loaded = true;
                Ok(())
            }
            None => Ok(()),
        })
        .and_then(|()| match &key {
            Some(bytes) => install_signing_key(config, bytes, &mut written),
            None => Ok(()),
        })
        .and_then(|()| prove(config, &manifest, pg_url.as_deref(), progress));
    progress.finish();
    if let Err(e) = result {
        written.remove();
        if let (true, Some(url)) = (loaded, &pg_url) {
            // The database held no table before (`check_empty`).
            let _ = postgres::drop_restored(url);
        }
        return Err(e);
    }
    Ok(Restored {
        manifest,
        signer,
        signing_key_restored: key.is_some(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The server signing key `--signing-key` puts back.
struct KeyFiles {
    private: Vec<u8>,
    public_line: String,
}

/// Read `--signing-key FILE`, if it is the key that signed the backup (any
/// Ed25519 key with `--trust-unsigned`).
fn signing_key_to_restore(path: &Path, signer: &Signer) -> anyhow::Result<KeyFiles> {
    let key = collab_record::sign::SigningKey::load(path)
        .map_err(|e| anyhow::anyhow!("--signing-key: {e}"))?;
    if let Signer::Verified(fingerprint) = signer {
        if key.fingerprint() != *fingerprint {
            bail!(
                "--signing-key {} is {}, but the backup was signed by {fingerprint}",
                path.display(),
                key.fingerprint()
            );
        }
    }
    Ok(KeyFiles {
        private: std::fs::read(path)?,
        public_line: format!("{}\n", key.public_key_line()),
    })
}

/// Write the signing key to `{state_dir}/collab_signing_key` (0600) and
/// its `.pub`.
fn install_signing_key(
    config: &ServerConfig,
    key: &KeyFiles,
    written: &mut Written,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let path = config.signing_key_path();
    let public_path = PathBuf::from(format!("{}.pub", path.display()));
    for (file, data, mode) in [
        (&path, key.private.as_slice(), 0o600),
        (&public_path, key.public_line.as_bytes(), 0o644),
    ] {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(file)
            .with_context(|| format!("writing {}", file.display()))?;
        written.files.push(file.clone());
        out.write_all(data)?;
        out.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Refuse to mix a backup with anything already there.
fn check_targets_empty(config: &ServerConfig) -> anyhow::Result<()> {
    for dir in [&config.state_dir, &config.repos_dir, &config.releases_dir()] {
        match std::fs::read_dir(dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    bail!(
                        "refusing to restore into {}: it is not empty",
                        dir.display()
                    );
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!("{}: {e}", dir.display()),
        }
    }
    let db = config.collab_db_path();
    for file in [&db, &config.ssh.host_key, &config.ssh.authorized_keys] {
        if file.exists() {
            bail!("refusing to restore: {} already exists", file.display());
        }
    }
    Ok(())
}

/// Where a backup file goes under `config`.
fn destination(config: &ServerConfig, rel: &Path) -> anyhow::Result<PathBuf> {
    let path = rel.to_str().unwrap_or("");
    let under = |prefix: &str, root: &Path| -> Option<PathBuf> {
        rel.strip_prefix(prefix).ok().map(|rest| root.join(rest))
    };
    Ok(match path {
        layout::DATABASE => config.collab_db_path(),
        layout::HOST_KEY => config.ssh.host_key.clone(),
        layout::AUTHORIZED_KEYS => config.ssh.authorized_keys.clone(),
        _ => under(layout::STATE, &config.state_dir)
            .or_else(|| under(layout::REPOS, &config.repos_dir))
            .or_else(|| under(layout::RELEASES, &config.releases_dir()))
            .with_context(|| format!("{path}: not a known part of a backup"))?,
    })
}

/// What a restore wrote, to take back on failure.
#[derive(Default)]
struct Written {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl Written {
    /// Create `dir` and any missing parents, remembering the new ones.
    fn make_dirs(&mut self, dir: &Path) -> std::io::Result<()> {
        let mut missing = Vec::new();
        let mut at = Some(dir);
        while let Some(d) = at {
            if d.exists() {
                break;
            }
            missing.push(d.to_path_buf());
            at = d.parent();
        }
        for d in missing.into_iter().rev() {
            std::fs::create_dir(&d)?;
            self.dirs.push(d);
        }
        Ok(())
    }

    fn remove(self) {
        for file in self.files.iter().rev() {
            let _ = std::fs::remove_file(file);
        }
        for dir in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn copy_all(
    config: &ServerConfig,
    from: &Path,
    manifest: &Manifest,
    written: &mut Written,
    progress: &mut Progress,
) -> anyhow::Result<()> {
    written
        .make_dirs(&config.state_dir)
        .with_context(|| format!("creating {}", config.state_dir.display()))?;
    let total = manifest.files.len();
    for (i, file) in manifest.files.iter().enumerate() {
        progress.step("restore: files", i, total);
        if file.path == layout::PG_DUMP {
            continue; // loaded into PostgreSQL by `load_dump`, not a file of the server
        }
        let rel = safe_relative(&file.path)?;
        let dest = destination(config, &rel)?;
        if let Some(parent) = dest.parent() {
            written
                .make_dirs(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        // Never a link (checked above, and again here: the backup may have
        // changed since), and never a set-id or sticky bit.
        let (size, sha) = open_in(from, &rel)
            .and_then(|src| copy_hashed_from(src, &dest, file.mode & 0o777))
            .with_context(|| format!("restoring {}", dest.display()))?;
        written.files.push(dest.clone());
        if size != file.size || sha != file.sha256 {
            bail!("{}: changed while it was being restored", file.path);
        }
    }
    progress.step("restore: files", total, total);
    written.make_dirs(&config.repos_dir)?;
    for repo in &manifest.repos {
        let path = config.repos_dir.join(safe_relative(&repo.name)?);
        written.make_dirs(&path)?;
        repo_copy::make_skeleton(&path, 0o777)?;
    }
    for dir in [&config.state_dir, &config.repos_dir] {
        sync_filesystem(dir).with_context(|| format!("syncing {}", dir.display()))?;
    }
    Ok(())
}

/// Load the backup's `pg_dump` archive into the (empty) PostgreSQL database
/// at `url`: copied first, opened without following links and hashed again,
/// to a private file of the restored state directory, which is removed
/// afterwards.
fn load_dump(
    config: &ServerConfig,
    from: &Path,
    manifest: &Manifest,
    url: &str,
) -> anyhow::Result<()> {
    let record = manifest
        .files
        .iter()
        .find(|f| f.path == layout::PG_DUMP)
        .with_context(|| format!("the backup lists no {}", layout::PG_DUMP))?;
    let temp = config
        .state_dir
        .join(format!(".restore-{}.pgdump", std::process::id()));
    let (size, sha) = open_in(from, Path::new(layout::PG_DUMP))
        .and_then(|src| copy_hashed_from(src, &temp, 0o600))
        .with_context(|| format!("copying {}", layout::PG_DUMP))?;
    let loaded = if size != record.size || sha != record.sha256 {
        Err(anyhow::anyhow!(
            "{}: changed while it was being restored",
            layout::PG_DUMP
        ))
    } else {
        postgres::load(url, &temp).context("loading the PostgreSQL database")
    };
    let _ = std::fs::remove_file(&temp);
    loaded
}

/// The restored state holds what the backup held.
fn prove(
    config: &ServerConfig,
    manifest: &Manifest,
    pg_url: Option<&str>,
    progress: &mut Progress,
) -> anyhow::Result<()> {
    for (i, repo) in manifest.repos.iter().enumerate() {
        progress.step("restore: git fsck", i, manifest.repos.len());
        let path = config.repos_dir.join(safe_relative(&repo.name)?);
        verify::fsck(&path).with_context(|| format!("restored repository {}", repo.name))?;
        let refs = output(git(&path).args(["for-each-ref", "--format=%(refname)"]))?;
        let count = refs
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count() as u64;
        if count != repo.refs {
            bail!(
                "restored repository {}: {count} refs, the backup took {}",
                repo.name,
                repo.refs
            );
        }
    }
    if let (Some(expected), Some(url)) = (&manifest.database, pg_url) {
        let census = postgres::census(url).context("counting the restored database")?;
        if census != *expected {
            bail!(
                "restored database holds {} but the backup counted {}",
                serde_json::to_string(&census)?,
                serde_json::to_string(expected)?
            );
        }
    } else if let Some(expected) = &manifest.database {
        let db = config.collab_db_path();
        let problems = snapshot::integrity_problems(&db)
            .with_context(|| format!("checking {}", db.display()))?;
        if !problems.is_empty() {
            bail!(
                "restored database fails its integrity check: {}",
                problems.join("; ")
            );
        }
        let census = snapshot::census_of(&db)?;
        if census != *expected {
            bail!(
                "restored database holds {} but the backup counted {}",
                serde_json::to_string(&census)?,
                serde_json::to_string(expected)?
            );
        }
        if expected.tables.contains_key("lease_tokens") && census.tokens.is_none() {
            bail!("restored database has no fencing-token high-water marks");
        }
    }
    Ok(())
}
