//! Smart HTTP fetches answered by the server itself from the pack cache
//! (issue 29): a protocol v2 `command=fetch` or `command=ls-refs` POST
//! whose whole request, on the same repository in the same ref state, was
//! answered before gets that answer again from `<state>/pack-cache/`, with
//! no `git upload-pack` and no hook process: the bytes go from the cache
//! file to the socket. A fetch over smart HTTP is two such POSTs (the ref
//! list, then the pack), so a fleet fetching after a push starts no
//! upload-pack for either once the first answers are kept.
//!
//! What upload-pack's answer to a v2 fetch or ls-refs depends on, and how
//! the key holds it:
//! - the repository (its path is in the key; the caller was authorized for
//!   it before, by the same `visible` check as the uncached path);
//! - the request (the command; wants, haves, `done`, capabilities,
//!   filter, depth, `include-tag`…; `ref-prefix`, `symrefs`, `peel`,
//!   `unborn`): the whole body, gunzipped, is in the key, and so is the
//!   `Git-Protocol` header;
//! - the refs (which wants are allowed, `include-tag`, shallow answers),
//!   the repository's `config`, `shallow` and `info/grafts`: their
//!   [`repo_state`] digest is in the key. It covers every loose ref file
//!   and `packed-refs` by content, inode, size and modification time, so a
//!   push, force-push, delete or `pack-refs` changes it even when a ref
//!   comes back to an earlier value;
//! - the objects: immutable by name, and reachable from the refs.
//!
//! An answer is kept only when upload-pack exited 0, the whole answer was
//! sent, and [`repo_state`] after it is the one before it (nothing moved
//! while upload-pack read the refs). Entries share the pack cache's file
//! format (trailer with length and checksum: a corrupt or truncated one is
//! detected, removed, and the request goes to upload-pack, which writes a
//! new one), its size limit, age limit, LRU and min-occurrence threshold.
//! Repositories on the reftable backend are never answered this way.

use std::io::{self, Read as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use sha2::{Digest as _, Sha256};

use crate::pack_cache::{self, Entry, Settings};

/// Requests larger than this (after gunzipping) are not looked up: long
/// `have` lists are rarely identical, and the key is computed in memory.
pub const MAX_CACHED_REQUEST: usize = 256 * 1024;

/// The requests whose answers are kept: the protocol v2 commands, and the
/// `GET info/refs` advertisement before them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `command=fetch`: the pack (and acknowledgments, shallow info).
    Fetch,
    /// `command=ls-refs`: the ref list every fetch starts with; after a
    /// push, 64 agents fetching at once ask for the same one 64 times.
    LsRefs,
    /// `GET info/refs?service=git-upload-pack`.
    Advertisement,
}

impl Command {
    /// The metric a hit of this command counts as.
    fn counter(self) -> &'static str {
        match self {
            Command::Fetch => "direct",
            Command::LsRefs => "ref_lists",
            Command::Advertisement => "advertisements",
        }
    }
}

/// The protocol v2 command of a request body (its first pkt-line), if it
/// is one whose answer is kept.
pub fn v2_command(body: &[u8]) -> Option<Command> {
    let len = body
        .get(..4)
        .and_then(|h| std::str::from_utf8(h).ok())
        .and_then(|h| usize::from_str_radix(h, 16).ok())?;
    if len <= 4 {
        return None;
    }
    let line = body.get(4..len)?;
    match line.strip_suffix(b"\n").unwrap_or(line) {
        b"command=fetch" => Some(Command::Fetch),
        b"command=ls-refs" => Some(Command::LsRefs),
        _ => None,
    }
}

/// A digest of everything in the repository besides its objects that
/// upload-pack's answer depends on; `None` when it cannot be taken (a
/// reftable repository, an unreadable file).
pub fn repo_state(repo: &Path) -> Option<[u8; 32]> {
    if repo.join("reftable").exists() {
        return None;
    }
    let mut h = Sha256::new();
    // Loose refs before packed-refs: `pack-refs` writes packed-refs, then
    // removes the loose files, so a ref moving between them is seen in one
    // at least.
    let mut loose = Vec::new();
    walk(repo, Path::new("refs"), &mut loose).ok()?;
    loose.sort();
    for rel in &loose {
        file_into(&mut h, repo, rel).ok()?;
    }
    for rel in ["packed-refs", "HEAD", "config", "shallow", "info/grafts"] {
        file_into(&mut h, repo, Path::new(rel)).ok()?;
    }
    Some(h.finalize().into())
}

/// Relative paths of the files under `repo/rel`, lock files left out.
fn walk(repo: &Path, rel: &Path, out: &mut Vec<std::path::PathBuf>) -> io::Result<()> {
    let dir = match std::fs::read_dir(repo.join(rel)) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in dir {
        let e = e?;
        let name = e.file_name();
        let path = rel.join(&name);
        let kind = e.file_type()?;
        if kind.is_dir() {
            walk(repo, &path, out)?;
        } else if !name.as_encoded_bytes().ends_with(b".lock") {
            out.push(path);
        }
    }
    Ok(())
}

/// Name, identity (inode, size, mtime) and content of one file, or that it
/// is absent.
fn file_into(h: &mut Sha256, repo: &Path, rel: &Path) -> io::Result<()> {
    let name = rel.as_os_str().as_encoded_bytes();
    h.update((name.len() as u64).to_le_bytes());
    h.update(name);
    let mut file = match std::fs::File::open(repo.join(rel)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            h.update([0u8]);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    h.update([1u8]);
    for v in [
        meta.ino(),
        meta.size(),
        meta.mtime() as u64,
        meta.mtime_nsec() as u64,
    ] {
        h.update(v.to_le_bytes());
    }
    let mut content = Vec::with_capacity(meta.size() as usize);
    file.read_to_end(&mut content)?;
    h.update((content.len() as u64).to_le_bytes());
    h.update(&content);
    Ok(())
}

/// The cache key of a v2 fetch or ls-refs answer.
pub fn key(repo: &Path, protocol: &str, request: &[u8], state: &[u8; 32]) -> String {
    // Apart from the hook's keys (which hash a path first, never this).
    digest(&[
        b"git-collab http upload-pack v2 answer",
        repo.as_os_str().as_encoded_bytes(),
        protocol.as_bytes(),
        request,
        state,
    ])
}

/// SHA-256 of `fields`, each after its length (so no two lists of fields
/// give the same bytes), hex.
fn digest(fields: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for field in fields {
        h.update((field.len() as u64).to_le_bytes());
        h.update(field);
    }
    hex::encode(h.finalize())
}

/// A finished answer of `command` for `key`: the file and its length.
/// Counts it (fetches: also as a hit, with its bytes) or a corrupt entry
/// for the metrics.
pub fn lookup(settings: &Settings, key: &str, command: Command) -> Option<(std::fs::File, u64)> {
    match pack_cache::open_entry(settings, key) {
        Ok(Entry::Found(file, len)) => {
            crate::metrics::pack_cache(command.counter(), 1);
            if command == Command::Fetch {
                crate::metrics::pack_cache("hit", 1);
                crate::metrics::pack_cache("bytes_from_cache", len);
            }
            Some((file, len))
        }
        Ok(Entry::Missing) => None,
        Ok(Entry::Corrupt) => {
            crate::metrics::pack_cache("corrupt", 1);
            None
        }
        Err(e) => {
            tracing::warn!("pack cache: reading an answer: {e}");
            None
        }
    }
}

/// Whether this request keeps the answer for `key`.
pub enum Keeping {
    /// Yes: this writer is the one (it holds `<key>.lock`).
    Writer(pack_cache::EntryWriter),
    /// Another request is keeping it now.
    Elsewhere,
    /// No: below the threshold (`git.pack_cache_min_occurrences`), or the
    /// cache failed (logged).
    No,
}

/// Count an occurrence of `key`'s request and decide who keeps its answer:
/// only from the threshold's occurrence on, one request at a time.
pub fn keeping(settings: &Settings, key: &str) -> Keeping {
    match pack_cache::count_occurrence(settings, key) {
        Ok(seen) if seen >= settings.min_occurrences => {}
        Ok(_) => return Keeping::No,
        Err(e) => {
            tracing::warn!("pack cache: counting a request: {e}");
            return Keeping::No;
        }
    }
    match pack_cache::EntryWriter::start(settings, key) {
        Ok(Some(writer)) => Keeping::Writer(writer),
        Ok(None) => Keeping::Elsewhere,
        Err(e) => {
            tracing::warn!("pack cache: keeping an answer: {e}");
            Keeping::No
        }
    }
}

/// The key of a `GET info/refs?service=git-upload-pack` advertisement:
/// what `upload-pack --advertise-refs` printed for the repository, the
/// `Git-Protocol` header (v2: the capabilities; v0: the refs and the
/// capabilities) and the ref state, and the version of git that printed
/// it (the capabilities and `agent=` are git's own).
fn advertisement_key(repo: &Path, protocol: &str, state: &[u8; 32]) -> String {
    digest(&[
        b"git-collab http upload-pack advertisement",
        repo.as_os_str().as_encoded_bytes(),
        protocol.as_bytes(),
        crate::maintenance::git_version::line().as_bytes(),
        state,
    ])
}

/// Largest advertisement kept (a v0 one lists every ref).
const MAX_ADVERTISEMENT: u64 = 4 * 1024 * 1024;

/// What the cache says about an advertisement.
pub enum Advertisement {
    /// The kept one.
    Hit(Vec<u8>),
    /// None kept; keep the one upload-pack prints now ([`keep_advertisement`]).
    Keep(Box<KeepAdvertisement>),
    /// Ask upload-pack and keep nothing (below the threshold, another
    /// request keeping it now, a reftable repository, an error).
    Run,
}

pub struct KeepAdvertisement {
    writer: pack_cache::EntryWriter,
    repo: std::path::PathBuf,
    state: [u8; 32],
}

/// Look up the advertisement of `repo` for a client sending `protocol`
/// (blocking: it reads the ref state and the entry).
pub fn advertisement(settings: &Settings, repo: &Path, protocol: &str) -> Advertisement {
    let Some(state) = repo_state(repo) else {
        return Advertisement::Run;
    };
    let key = advertisement_key(repo, protocol, &state);
    // Never larger than kept (`keep_advertisement`); bounded all the same.
    let found = lookup(settings, &key, Command::Advertisement);
    if let Some((file, len)) = found.filter(|(_, len)| *len <= MAX_ADVERTISEMENT) {
        let mut bytes = Vec::with_capacity(len as usize);
        if file.take(len).read_to_end(&mut bytes).is_ok() && bytes.len() as u64 == len {
            return Advertisement::Hit(bytes);
        }
    }
    match keeping(settings, &key) {
        Keeping::Writer(writer) => Advertisement::Keep(Box::new(KeepAdvertisement {
            writer,
            repo: repo.to_path_buf(),
            state,
        })),
        Keeping::Elsewhere | Keeping::No => Advertisement::Run,
    }
}

/// Keep `bytes`, what upload-pack advertised, unless the refs moved while
/// it ran (blocking).
pub fn keep_advertisement(keep: KeepAdvertisement, bytes: &[u8]) {
    let KeepAdvertisement {
        mut writer,
        repo,
        state,
    } = keep;
    if bytes.len() as u64 > MAX_ADVERTISEMENT || repo_state(&repo) != Some(state) {
        return;
    }
    if let Err(e) = writer.write(bytes).and_then(|()| writer.finish()) {
        tracing::warn!("pack cache: keeping an advertisement: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_v2_fetch_and_ls_refs_commands_are_looked_up() {
        let fetch = Some(Command::Fetch);
        assert_eq!(v2_command(b"0012command=fetch\n0001000ddone\n0000"), fetch);
        assert_eq!(v2_command(b"0011command=fetch0000"), fetch);
        assert_eq!(
            v2_command(b"0014command=ls-refs\n0001000bsymrefs\n0000"),
            Some(Command::LsRefs)
        );
        assert_eq!(
            v2_command(b"0013command=ls-refs0000"),
            Some(Command::LsRefs)
        );
        assert_eq!(v2_command(b"0016command=object-info\n0000"), None);
        assert_eq!(v2_command(b"0015command=fetchmore\n0000"), None);
        assert_eq!(
            v2_command(b"0032want 0123456789012345678901234567890123456789\n"),
            None
        );
        assert_eq!(v2_command(b"00"), None);
        assert_eq!(v2_command(b"0004"), None);
        assert_eq!(v2_command(b"zzzzcommand=fetch\n"), None);
        assert_eq!(v2_command(b"0099command=fetch\n"), None);
    }

    #[test]
    fn the_state_changes_with_any_ref_even_back_to_an_old_value() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path();
        std::fs::create_dir_all(repo.join("refs/heads")).unwrap();
        std::fs::write(repo.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let main = repo.join("refs/heads/main");
        std::fs::write(&main, "a".repeat(40) + "\n").unwrap();
        let first = repo_state(repo).unwrap();
        assert_eq!(repo_state(repo), Some(first));
        // A new ref, then gone again: the same state.
        std::fs::write(repo.join("refs/heads/x"), "b".repeat(40) + "\n").unwrap();
        assert_ne!(repo_state(repo), Some(first));
        std::fs::remove_file(repo.join("refs/heads/x")).unwrap();
        assert_eq!(repo_state(repo), Some(first));
        // A lock file is not a ref.
        std::fs::write(repo.join("refs/heads/main.lock"), "c").unwrap();
        assert_eq!(repo_state(repo), Some(first));
        // Rewritten with the same value (as git does: a new file renamed
        // into place): a new state.
        let tmp_ref = repo.join("refs/heads/main.new");
        std::fs::write(&tmp_ref, "a".repeat(40) + "\n").unwrap();
        std::fs::rename(&tmp_ref, &main).unwrap();
        assert_ne!(repo_state(repo), Some(first));
        // packed-refs counts.
        let second = repo_state(repo).unwrap();
        std::fs::write(repo.join("packed-refs"), "# pack-refs\n").unwrap();
        assert_ne!(repo_state(repo), Some(second));
        // A reftable repository is never answered from the cache.
        std::fs::create_dir_all(repo.join("reftable")).unwrap();
        assert_eq!(repo_state(repo), None);
    }

    #[test]
    fn the_key_separates_repositories_requests_and_states() {
        let r = Path::new("/r/a.git");
        let k = key(r, "version=2", b"req", &[0; 32]);
        assert_eq!(k, key(r, "version=2", b"req", &[0; 32]));
        assert_ne!(k, key(Path::new("/r/b.git"), "version=2", b"req", &[0; 32]));
        assert_ne!(k, key(r, "version=2", b"req2", &[0; 32]));
        assert_ne!(k, key(r, "version=2", b"req", &[1; 32]));
        assert_ne!(k, key(r, "version=1", b"req", &[0; 32]));
    }
}
