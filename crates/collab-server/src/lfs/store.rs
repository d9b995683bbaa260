//! git-lfs objects on disk: `{state_dir}/lfs/<repo id>/<oid[0..2]>/<oid[2..4]>/<oid>`.
//!
//! Objects are kept by the repository's lasting id (`repo_ids` in the
//! collab database), not its name, so a rename keeps them and a delete
//! removes the one directory. An upload is written to a temporary file
//! beside where the object goes (`.tmp-<oid>-<random>`, never a name an
//! object has, and a name `backup` leaves out), hashed as it is written, and becomes visible only by a
//! rename once its size and SHA-256 are the ones it was uploaded as: a
//! reader never sees a partial object, and an upload that fails or is cut
//! off removes its temporary file ([`Incoming`] on drop). Nothing here
//! holds an object whole in memory. Objects never change once visible, so
//! `backup` copies them as it copies any other file of the state
//! directory.

use std::fs::File;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// Whether `oid` is a SHA-256 as git-lfs writes it: 64 lowercase hex digits.
pub fn valid_oid(oid: &str) -> bool {
    oid.len() == 64 && oid.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A repository id as `repo_ids` makes them (hex): anything else never
/// becomes a path.
fn valid_repo_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// How much a repository holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub objects: u64,
    pub bytes: u64,
}

/// Why an upload was not stored.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("object {oid}: more data than its size {size}")]
    TooLong { oid: String, size: u64 },
    #[error("object {oid}: {got} bytes received, its size is {size}")]
    WrongSize { oid: String, size: u64, got: u64 },
    #[error("object {oid}: the data's SHA-256 is {got}")]
    WrongHash { oid: String, got: String },
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The objects of every repository.
#[derive(Debug, Clone)]
pub struct LfsStore {
    root: PathBuf,
}

impl LfsStore {
    pub fn new(state_dir: &Path) -> LfsStore {
        LfsStore {
            root: state_dir.join("lfs"),
        }
    }

    /// The directory of one repository's objects.
    pub fn repo_dir(&self, repo_id: &str) -> io::Result<PathBuf> {
        if !valid_repo_id(repo_id) {
            return Err(io::Error::other(format!(
                "not a repository id: {repo_id:?}"
            )));
        }
        Ok(self.root.join(repo_id))
    }

    fn object_path(&self, repo_id: &str, oid: &str) -> io::Result<PathBuf> {
        if !valid_oid(oid) {
            return Err(io::Error::other(format!("not an object id: {oid:?}")));
        }
        Ok(self
            .repo_dir(repo_id)?
            .join(&oid[0..2])
            .join(&oid[2..4])
            .join(oid))
    }

    /// The size of object `oid`, if the repository has it.
    pub fn size_of(&self, repo_id: &str, oid: &str) -> io::Result<Option<u64>> {
        match std::fs::metadata(self.object_path(repo_id, oid)?) {
            Ok(meta) => Ok(Some(meta.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The size of object `oid` if the repository has it, its file's time
    /// set to now: an upload's `batch` found it held, so a push about to
    /// point at it again is covered by the collection's grace as a new
    /// upload is ([`LfsStore::collect`]). `None` if it is not held, or
    /// was collected just now (the client then uploads it again).
    pub fn freshen(&self, repo_id: &str, oid: &str) -> io::Result<Option<u64>> {
        match File::open(self.object_path(repo_id, oid)?) {
            Ok(file) => {
                file.set_modified(std::time::SystemTime::now())?;
                Ok(Some(file.metadata()?.len()))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Remove the objects of a repository that are not in `keep` and whose
    /// file is at least `grace` old (uploaded, or last freshened, that
    /// long ago), and temporary files as old (an upload cut off by a
    /// killed server). An object is first renamed aside (`.gc-<oid>-…`,
    /// which nothing reads), then its time looked at again: a `batch`
    /// that freshened it in between wins and it is put back; a `batch`
    /// after the rename finds it missing and has it uploaded again.
    /// Directories stay (an upload may be creating its file in one).
    pub fn collect(
        &self,
        repo_id: &str,
        keep: &std::collections::HashSet<String>,
        grace: std::time::Duration,
        now: std::time::SystemTime,
    ) -> io::Result<Usage> {
        let old = |meta: &std::fs::Metadata| {
            meta.modified()
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age >= grace)
        };
        let mut removed = Usage::default();
        let dir = self.repo_dir(repo_id)?;
        let Some(first) = read_dir_if_any(&dir)? else {
            return Ok(removed);
        };
        for a in first {
            let Some(second) = read_dir_if_any(&a?.path())? else {
                continue;
            };
            for b in second {
                let Some(objects) = read_dir_if_any(&b?.path())? else {
                    continue;
                };
                for object in objects {
                    let object = object?;
                    let name = object.file_name().to_string_lossy().into_owned();
                    let path = object.path();
                    let Ok(meta) = object.metadata() else {
                        continue;
                    };
                    // A `.gc-` file left by a killed collection: old,
                    // it was on its way out; freshened, it is put back by
                    // the collection that set it aside.
                    if name.starts_with(".tmp-") || name.starts_with(".gc-") {
                        if old(&meta) {
                            remove_if_there(&path)?;
                        }
                        continue;
                    }
                    if !valid_oid(&name) || keep.contains(&name) || !old(&meta) {
                        continue;
                    }
                    let aside = path.with_file_name(format!(
                        ".gc-{name}-{}",
                        hex::encode(rand::random::<[u8; 8]>())
                    ));
                    match std::fs::rename(&path, &aside) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(e),
                    }
                    let meta = std::fs::metadata(&aside)?;
                    if old(&meta) {
                        std::fs::remove_file(&aside)?;
                        removed.objects += 1;
                        removed.bytes += meta.len();
                    } else if std::fs::hard_link(&aside, &path).is_ok() || path.exists() {
                        // Freshened meanwhile: back (or stored again).
                        std::fs::remove_file(&aside)?;
                    }
                }
            }
        }
        Ok(removed)
    }

    /// Object `oid` opened for reading, with its size.
    pub fn open(&self, repo_id: &str, oid: &str) -> io::Result<Option<(File, u64)>> {
        match File::open(self.object_path(repo_id, oid)?) {
            Ok(file) => {
                let size = file.metadata()?.len();
                Ok(Some((file, size)))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The objects a repository holds (temporary files not counted).
    pub fn usage(&self, repo_id: &str) -> io::Result<Usage> {
        let mut usage = Usage::default();
        let dir = self.repo_dir(repo_id)?;
        let Some(first) = read_dir_if_any(&dir)? else {
            return Ok(usage);
        };
        for a in first {
            let Some(second) = read_dir_if_any(&a?.path())? else {
                continue;
            };
            for b in second {
                let Some(objects) = read_dir_if_any(&b?.path())? else {
                    continue;
                };
                for object in objects {
                    let object = object?;
                    if object.file_name().to_str().is_some_and(valid_oid) {
                        usage.objects += 1;
                        usage.bytes += object.metadata()?.len();
                    }
                }
            }
        }
        Ok(usage)
    }

    /// Start storing object `oid` of `size` bytes.
    pub fn begin(&self, repo_id: &str, oid: &str, size: u64) -> io::Result<Incoming> {
        let dest = self.object_path(repo_id, oid)?;
        let dir = dest.parent().expect("an object path has a directory");
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(
            ".tmp-{oid}-{}",
            hex::encode(rand::random::<[u8; 8]>())
        ));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        Ok(Incoming {
            oid: oid.to_string(),
            size,
            tmp,
            dest,
            file: Some(file),
            hasher: Sha256::new(),
            written: 0,
        })
    }

    /// Remove every object of a repository (it was deleted).
    pub fn remove_repo(&self, repo_id: &str) -> io::Result<()> {
        match std::fs::remove_dir_all(self.repo_dir(repo_id)?) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn read_dir_if_any(dir: &Path) -> io::Result<Option<std::fs::ReadDir>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(Some(entries)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// An object being uploaded: its temporary file, removed when dropped
/// before [`Incoming::finish`] made it the object.
#[derive(Debug)]
pub struct Incoming {
    oid: String,
    size: u64,
    tmp: PathBuf,
    dest: PathBuf,
    file: Option<File>,
    hasher: Sha256,
    written: u64,
}

impl Incoming {
    /// Append `data`; more than the object's size is refused.
    pub fn write(&mut self, data: &[u8]) -> Result<(), UploadError> {
        if self.written + data.len() as u64 > self.size {
            return Err(UploadError::TooLong {
                oid: self.oid.clone(),
                size: self.size,
            });
        }
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| io::Error::other("closed"))?;
        file.write_all(data)?;
        self.hasher.update(data);
        self.written += data.len() as u64;
        Ok(())
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// Check the size and hash, make the data durable, and only then make
    /// it the object. An object stored meanwhile by another upload is the
    /// same bytes (same hash): it stays, and this one's file goes.
    pub fn finish(mut self) -> Result<u64, UploadError> {
        if self.written != self.size {
            return Err(UploadError::WrongSize {
                oid: self.oid.clone(),
                size: self.size,
                got: self.written,
            });
        }
        let got = hex::encode(std::mem::take(&mut self.hasher).finalize());
        if got != self.oid {
            return Err(UploadError::WrongHash {
                oid: self.oid.clone(),
                got,
            });
        }
        let file = self.file.take().ok_or_else(|| io::Error::other("closed"))?;
        file.sync_all()?;
        drop(file);
        if !self.dest.exists() {
            std::fs::rename(&self.tmp, &self.dest)?;
            if let Some(dir) = self.dest.parent() {
                File::open(dir)?.sync_all()?;
            }
        }
        Ok(self.size)
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        // After a rename there is nothing at `tmp`: NotFound is the usual case.
        if let Err(e) = std::fs::remove_file(&self.tmp) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!("removing {}: {e}", self.tmp.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPO: &str = "0123456789abcdef0123456789abcdef";

    fn oid_of(data: &[u8]) -> String {
        hex::encode(Sha256::digest(data))
    }

    fn files_under(dir: &Path) -> Vec<String> {
        let mut found = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    todo.push(e.path());
                } else {
                    found.push(e.file_name().to_string_lossy().into_owned());
                }
            }
        }
        found
    }

    #[test]
    fn an_upload_becomes_visible_only_when_its_size_and_hash_match() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LfsStore::new(tmp.path());
        let data = b"hello large file";
        let oid = oid_of(data);
        let mut up = store.begin(REPO, &oid, data.len() as u64).unwrap();
        up.write(&data[..5]).unwrap();
        assert_eq!(store.size_of(REPO, &oid).unwrap(), None);
        up.write(&data[5..]).unwrap();
        assert_eq!(up.finish().unwrap(), data.len() as u64);
        assert_eq!(store.size_of(REPO, &oid).unwrap(), Some(data.len() as u64));
        assert_eq!(
            store.usage(REPO).unwrap(),
            Usage {
                objects: 1,
                bytes: data.len() as u64
            }
        );
        assert_eq!(files_under(&store.repo_dir(REPO).unwrap()), vec![oid]);
    }

    #[test]
    fn failed_uploads_leave_nothing_and_lose_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LfsStore::new(tmp.path());
        let data = b"the real bytes";
        let oid = oid_of(data);
        // Wrong bytes of the right size: refused.
        let mut up = store.begin(REPO, &oid, data.len() as u64).unwrap();
        up.write(b"the fake bytes").unwrap();
        assert!(matches!(up.finish(), Err(UploadError::WrongHash { .. })));
        // Truncated.
        let mut up = store.begin(REPO, &oid, data.len() as u64).unwrap();
        up.write(&data[..3]).unwrap();
        assert!(matches!(up.finish(), Err(UploadError::WrongSize { .. })));
        // Too long.
        let mut up = store.begin(REPO, &oid, 3).unwrap();
        assert!(matches!(up.write(data), Err(UploadError::TooLong { .. })));
        drop(up);
        assert!(files_under(&store.repo_dir(REPO).unwrap()).is_empty());
        // A stored object survives a bad upload of the same oid.
        let mut up = store.begin(REPO, &oid, data.len() as u64).unwrap();
        up.write(data).unwrap();
        up.finish().unwrap();
        let mut bad = store.begin(REPO, &oid, data.len() as u64).unwrap();
        bad.write(b"the fake bytes").unwrap();
        assert!(bad.finish().is_err());
        let (mut file, _) = store.open(REPO, &oid).unwrap().unwrap();
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(files_under(&store.repo_dir(REPO).unwrap()), vec![oid]);
    }

    fn stored(store: &LfsStore, data: &[u8]) -> String {
        let oid = oid_of(data);
        let mut up = store.begin(REPO, &oid, data.len() as u64).unwrap();
        up.write(data).unwrap();
        up.finish().unwrap();
        oid
    }

    #[test]
    fn collect_removes_old_unkept_objects_and_old_leftovers_only() {
        use std::time::{Duration, SystemTime};
        let tmp = tempfile::tempdir().unwrap();
        let store = LfsStore::new(tmp.path());
        let (kept, gone, young) = (
            stored(&store, b"kept"),
            stored(&store, b"gone"),
            stored(&store, b"young"),
        );
        let grace = Duration::from_secs(3600);
        let later = SystemTime::now() + Duration::from_secs(7200);
        // A leftover upload, and `young` freshened as by a batch: both as
        // new as `later`.
        let leftover = store.begin(REPO, &oid_of(b"cut"), 3).unwrap();
        std::mem::forget(leftover);
        let set_time = |oid: &str, t: SystemTime| {
            let path = store.object_path(REPO, oid).unwrap();
            File::open(path).unwrap().set_modified(t).unwrap();
        };
        set_time(&young, later);
        let keep: std::collections::HashSet<String> = [kept.clone()].into();
        // Not yet old: nothing goes.
        let removed = store
            .collect(REPO, &keep, grace, SystemTime::now())
            .unwrap();
        assert_eq!(removed, Usage::default());
        assert_eq!(files_under(&store.repo_dir(REPO).unwrap()).len(), 4);
        // Later: the unkept old object and the leftover go.
        let removed = store.collect(REPO, &keep, grace, later).unwrap();
        assert_eq!(
            removed,
            Usage {
                objects: 1,
                bytes: 4
            }
        );
        let mut left = files_under(&store.repo_dir(REPO).unwrap());
        left.sort();
        let mut want = vec![kept.clone(), young.clone()];
        want.sort();
        assert_eq!(left, want);
        assert_eq!(store.size_of(REPO, &gone).unwrap(), None);
        // Freshening a held object answers its size; a missing one, none.
        assert_eq!(store.freshen(REPO, &kept).unwrap(), Some(4));
        assert_eq!(store.freshen(REPO, &gone).unwrap(), None);
    }

    #[test]
    fn ids_that_are_not_hex_never_become_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LfsStore::new(tmp.path());
        let oid = oid_of(b"x");
        assert!(store.begin("../etc", &oid, 1).is_err());
        assert!(store.size_of(REPO, "../../../../etc/passwd").is_err());
        assert!(store.size_of(REPO, &oid.to_uppercase()).is_err());
        assert!(!valid_oid(&oid[..63]));
    }
}
