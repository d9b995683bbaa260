//! The pack cache: `git-collab-server pack-objects-hook`, which `git
//! upload-pack` runs instead of `git pack-objects` (the server passes
//! `-c uploadpack.packObjectsHook=…` on the command line: git reads that key
//! only from protected config). A storm of identical clones or fetches then
//! costs about one `pack-objects`.
//!
//! The request is keyed by SHA-256 of (repository path, arguments, the whole
//! stdin: wants, haves, shallow lines). The key holds the repository, and
//! upload-pack runs only for an authorized caller, so a pack never crosses
//! repositories; a force-push changes the wants, hence the key.
//!
//! Files under `<state>/pack-cache/` (processes are separate, so they
//! coordinate on disk):
//! - `<key>.lock`: the producer election, an exclusive `flock`;
//! - `<key>.tmp`: the pack being produced, under the producer's exclusive
//!   `flock`; identical requests follow the growing file at their own pace;
//! - `<key>.pack`: a finished entry, renamed into place without fsync (a
//!   crash may lose it; the checksum catches a torn one). Its last
//!   [`TRAILER`] bytes are a magic, the creation time, the pack length and
//!   its CRC-32: a corrupt or truncated file is detected and regenerated.
//!   Its mtime is its last use (LRU);
//! - `<key>.seen`: one byte per request, for the min-occurrence threshold;
//! - `size`: the bytes of all `.pack` entries (8 bytes, little-endian),
//!   kept under its own `flock` by every store and removal ([`Ledger`]),
//!   so a store costs the same with 10 or 10,000 files in the directory:
//!   only a store that takes the total past the cap lists the directory
//!   (and trims to [`LOW_WATER`] of it, so the next ones need not), and
//!   the server's upkeep lists it once a minute and rewrites the exact
//!   total (at start too: a crash between a rename and the ledger's
//!   update is mended then);
//! - `slots/<n>`: `git.max_concurrent_pack_objects` slot locks;
//! - `stats/<pid>`: counters for the metrics (`hit 1`, `miss 1`, …).
//!
//! The producer keeps writing the file when its own client goes away
//! (`EPIPE` on stdout is ignored), so readers of the same producer are not
//! broken by it. A producer that dies leaves no valid entry: a reader that
//! has sent nothing yet runs `pack-objects` itself; one that has fails.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek as _, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest as _, Sha256};

use crate::flock::{self, Mode};

const ENV_DIR: &str = "GIT_COLLAB_PACK_CACHE_DIR";
const ENV_REPO: &str = "GIT_COLLAB_PACK_CACHE_REPO";
const ENV_MAX_SIZE: &str = "GIT_COLLAB_PACK_CACHE_MAX_SIZE";
const ENV_MAX_AGE: &str = "GIT_COLLAB_PACK_CACHE_MAX_AGE";
const ENV_MIN_OCCURRENCES: &str = "GIT_COLLAB_PACK_CACHE_MIN_OCCURRENCES";
const ENV_SLOTS: &str = "GIT_COLLAB_PACK_CACHE_SLOTS";

/// `02`: the checksum is CRC-32 (`01` had SHA-256; such an entry fails
/// its check once and is regenerated).
const MAGIC: &[u8; 8] = b"GCPACK02";
/// magic, created (u64 seconds), length (u64), checksum (u64: a CRC-32).
pub const TRAILER: usize = 8 + 8 + 8 + 8;

/// The checksum of an entry, checked on every hit before a byte is sent:
/// it only has to catch accidents (a torn write after a crash, a flipped
/// bit, a truncated file), not an adversary (only the server writes the
/// cache, and the key, which must not collide, is SHA-256). CRC-32 with
/// the CPU's carry-less multiply runs at several GB/s; SHA-256 was the
/// largest part of the hook's CPU on a hit.
#[derive(Clone, Default)]
struct Sum(crc32fast::Hasher);

impl Sum {
    fn new() -> Sum {
        Sum::default()
    }

    fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finalize(self) -> [u8; 8] {
        u64::from(self.0.finalize()).to_le_bytes()
    }
}
/// Requests with a larger stdin (huge `have` lists) are not cached: they
/// are rarely identical, and the key must be computed in memory.
const MAX_REQUEST: usize = 16 * 1024 * 1024;
const CHUNK: usize = 64 * 1024;
/// How often a follower looks again at a growing file.
const POLL: Duration = Duration::from_millis(20);

/// What the server tells the hook (through upload-pack's environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub dir: PathBuf,
    /// The repository directory the server authorized.
    pub repo: PathBuf,
    pub max_size: u64,
    pub max_age: Duration,
    pub min_occurrences: u64,
    pub slots: usize,
}

impl Settings {
    /// The variables to set on `git upload-pack`.
    pub fn to_env(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        vec![
            (ENV_DIR, self.dir.clone().into_os_string()),
            (ENV_REPO, self.repo.clone().into_os_string()),
            (ENV_MAX_SIZE, self.max_size.to_string().into()),
            (ENV_MAX_AGE, self.max_age.as_secs().to_string().into()),
            (ENV_MIN_OCCURRENCES, self.min_occurrences.to_string().into()),
            (ENV_SLOTS, self.slots.to_string().into()),
        ]
    }

    /// `None` when run without the server's context: then the hook only
    /// runs `pack-objects`, as git would have.
    fn from_env() -> Option<Settings> {
        let get = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let num = |name: &str| -> Option<u64> { get(name)?.to_str()?.parse().ok() };
        Some(Settings {
            dir: get(ENV_DIR)?.into(),
            repo: get(ENV_REPO)?.into(),
            max_size: num(ENV_MAX_SIZE)?,
            max_age: Duration::from_secs(num(ENV_MAX_AGE)?),
            min_occurrences: num(ENV_MIN_OCCURRENCES)?.max(1),
            slots: usize::try_from(num(ENV_SLOTS)?).ok()?.max(1),
        })
    }
}

/// The `-c` value for upload-pack: `<exe> pack-objects-hook` (git appends
/// `git pack-objects <args>` and runs it through the shell).
pub fn hook_config() -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    let exe = exe.to_str()?;
    Some(format!(
        "uploadpack.packObjectsHook='{}' pack-objects-hook",
        exe.replace('\'', "'\\''")
    ))
}

/// `git-collab-server pack-objects-hook git pack-objects <args>`.
pub fn run(argv: &[String]) -> ExitCode {
    let code = match run_inner(argv) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: pack cache: {e}");
            ExitCode::from(1)
        }
    };
    // Where a storm's CPU goes: this hook's own, and pack-objects'.
    stat("hook_cpu_us", cpu_micros(libc::RUSAGE_SELF));
    stat("pack_objects_cpu_us", cpu_micros(libc::RUSAGE_CHILDREN));
    code
}

/// User plus system CPU of `who` (`RUSAGE_SELF` or `RUSAGE_CHILDREN`), in
/// microseconds.
fn cpu_micros(who: libc::c_int) -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return 0;
    }
    let micros = |t: libc::timeval| (t.tv_sec as u64) * 1_000_000 + t.tv_usec as u64;
    micros(usage.ru_utime) + micros(usage.ru_stime)
}

fn run_inner(argv: &[String]) -> io::Result<ExitCode> {
    // `git [--shallow-file ''] pack-objects <args>`.
    if argv.first().map(String::as_str) != Some("git") || !argv.iter().any(|a| a == "pack-objects")
    {
        return Err(io::Error::other("expected `git pack-objects …`"));
    }
    let settings = Settings::from_env();
    let mut request = Vec::new();
    let mut stdin = io::stdin().lock();
    (&mut stdin)
        .take(MAX_REQUEST as u64 + 1)
        .read_to_end(&mut request)?;
    // Before any byte, cached or not: a want no ref reaches is refused
    // (`wants`). Wants come first in the request; a request so long that
    // its `--not` is past what was read has more wants than any clone.
    let checked = match crate::wants::of_request(&request) {
        Some(wants) => crate::wants::check(&wants),
        None => Err("upload-pack: too many wants".to_string()),
    };
    if let Err(line) = checked {
        eprintln!("error: {line}");
        return Ok(ExitCode::from(128));
    }
    let Some(settings) = settings.filter(|_| request.len() <= MAX_REQUEST) else {
        // Not cacheable: what was read, then the rest, to pack-objects,
        // whose pack goes straight to upload-pack.
        let mut child = pack_objects(argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::inherit())
            .spawn()?;
        let mut to = child.stdin.take().expect("piped");
        to.write_all(&request)?;
        io::copy(&mut stdin, &mut to)?;
        drop(to);
        return exit_of(child.wait()?);
    };
    drop(stdin);
    std::fs::create_dir_all(&settings.dir)?;
    let key = key(&settings.repo, &argv[1..], &request);
    let cache = Cache {
        settings: &settings,
        key: &key,
    };
    cache.serve(argv, &request)
}

/// SHA-256 of the repository, the arguments and the request, hex.
pub fn key(repo: &Path, args: &[String], request: &[u8]) -> String {
    let mut h = Sha256::new();
    let field = |h: &mut Sha256, bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(&mut h, repo.as_os_str().as_encoded_bytes());
    field(&mut h, &(args.len() as u64).to_le_bytes());
    for arg in args {
        field(&mut h, arg.as_bytes());
    }
    field(&mut h, request);
    hex::encode(h.finalize())
}

fn pack_objects(argv: &[String]) -> Command {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).stdout(Stdio::piped());
    // stderr is inherited: progress reaches the client.
    cmd
}

fn exit_of(status: std::process::ExitStatus) -> io::Result<ExitCode> {
    Ok(ExitCode::from(
        status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(1),
    ))
}

struct Cache<'a> {
    settings: &'a Settings,
    key: &'a str,
}

/// How a follower's read of a producer's file ended.
enum Followed {
    Done,
    /// The producer died (or the file was not one), nothing sent yet.
    Retry,
}

impl Cache<'_> {
    fn path(&self, ext: &str) -> PathBuf {
        self.settings.dir.join(format!("{}.{ext}", self.key))
    }

    fn serve(&self, argv: &[String], request: &[u8]) -> io::Result<ExitCode> {
        let mut out = io::stdout().lock();
        // Bounded: each round either serves, or found a producer that went
        // away; after a few, run pack-objects ourselves.
        for _ in 0..50 {
            if self.serve_entry(&mut out)? {
                stat("hit", 1);
                return Ok(ExitCode::SUCCESS);
            }
            let election = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(self.path("lock"))?;
            if flock::lock(&election, Mode::Exclusive, false)? {
                // Someone may have finished between our look and the lock.
                if self.serve_entry(&mut out)? {
                    stat("hit", 1);
                    return Ok(ExitCode::SUCCESS);
                }
                if self.occurrences()? < self.settings.min_occurrences {
                    drop(election);
                    stat("miss", 1);
                    return self.direct(argv, request, &mut out);
                }
                stat("miss", 1);
                return self.produce(argv, request, &mut out, election);
            }
            match self.follow(&mut out)? {
                Followed::Done => {
                    stat("hit", 1);
                    return Ok(ExitCode::SUCCESS);
                }
                Followed::Retry => std::thread::sleep(POLL),
            }
        }
        stat("miss", 1);
        self.direct(argv, request, &mut out)
    }

    /// Count this request; the count so far.
    fn occurrences(&self) -> io::Result<u64> {
        count_occurrence(self.settings, self.key)
    }

    /// Serve a finished, valid, young entry; `false` when there is none (a
    /// bad one is removed).
    fn serve_entry(&self, out: &mut (impl Write + AsRawFd)) -> io::Result<bool> {
        let (file, len) = match open_entry(self.settings, self.key)? {
            Entry::Found(file, len) => (file, len),
            Entry::Missing => return Ok(false),
            Entry::Corrupt => {
                stat("corrupt", 1);
                return Ok(false);
            }
        };
        send_entry(&file, len, out)?;
        stat("bytes_from_cache", len);
        Ok(true)
    }

    /// Run `pack-objects` as git would (within a slot), no caching.
    fn direct(
        &self,
        argv: &[String],
        request: &[u8],
        out: &mut impl Write,
    ) -> io::Result<ExitCode> {
        let _slot = self.slot()?;
        stat("pack_objects", 1);
        let mut child = pack_objects(argv).stdin(Stdio::piped()).spawn()?;
        let feeder = feed(request, child.stdin.take());
        let mut from = child.stdout.take().expect("piped");
        let copied = io::copy(&mut from, out);
        drop(feeder);
        let status = child.wait()?;
        copied?;
        exit_of(status)
    }

    /// Be the producer: run pack-objects, send its output to our client and
    /// to `<key>.tmp` for followers, then make it an entry.
    fn produce(
        &self,
        argv: &[String],
        request: &[u8],
        out: &mut impl Write,
        election: File,
    ) -> io::Result<ExitCode> {
        let tmp = self.path("tmp");
        let fresh = self
            .settings
            .dir
            .join(format!("{}.{}.new", self.key, std::process::id()));
        let mut file = File::create(&fresh)?;
        flock::lock(&file, Mode::Exclusive, true)?;
        std::fs::rename(&fresh, &tmp)?;
        let _slot = self.slot()?;
        stat("pack_objects", 1);
        stat("producers", 1);
        let _producing = Producing;
        let mut child = pack_objects(argv).stdin(Stdio::piped()).spawn()?;
        let feeder = feed(request, child.stdin.take());
        let mut from = child.stdout.take().expect("piped");
        let mut hash = Sum::new();
        let mut len = 0u64;
        let mut client_gone = false;
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            };
            file.write_all(&buf[..n])?;
            hash.update(&buf[..n]);
            len += n as u64;
            // Our client going away must not stop the followers' pack.
            if !client_gone && out.write_all(&buf[..n]).and_then(|()| out.flush()).is_err() {
                client_gone = true;
            }
        }
        drop(feeder);
        let status = child.wait()?;
        if !status.success() {
            let _ = std::fs::remove_file(&tmp);
            return exit_of(status);
        }
        let mut trailer = Vec::with_capacity(TRAILER);
        trailer.extend_from_slice(MAGIC);
        trailer.extend_from_slice(&now_secs().to_le_bytes());
        trailer.extend_from_slice(&len.to_le_bytes());
        trailer.extend_from_slice(&hash.finalize());
        file.write_all(&trailer)?;
        if len + TRAILER as u64 <= self.settings.max_size {
            store(self.settings, &tmp, &self.path("pack"))?;
        } else {
            // Too big to keep: followers still read it through their
            // descriptors.
            std::fs::remove_file(&tmp)?;
        }
        drop(file);
        drop(election);
        if client_gone {
            return Ok(ExitCode::from(1));
        }
        Ok(ExitCode::SUCCESS)
    }

    /// Follow the producer's growing `<key>.tmp` to its trailer.
    fn follow(&self, out: &mut (impl Write + AsRawFd)) -> io::Result<Followed> {
        let mut file = match File::open(self.path("tmp")) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Followed::Retry),
            Err(e) => return Err(e),
        };
        // Nobody producing into this file: it is finished, or a dead
        // producer's leftover. Check it whole before sending a byte.
        if flock::lock(&file, Mode::Shared, false)? {
            let Some(len) = verify(&mut file)? else {
                return Ok(Followed::Retry);
            };
            send_entry(&file, len, out)?;
            stat("bytes_from_cache", len);
            return Ok(Followed::Done);
        }
        stat("followers", 1);
        let mut hash = Sum::new();
        let mut sent = 0u64;
        // The last TRAILER bytes read are held back: they may be the trailer.
        let mut held: Vec<u8> = Vec::with_capacity(CHUNK + TRAILER);
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = file.read(&mut buf)?;
            if n > 0 {
                held.extend_from_slice(&buf[..n]);
                if held.len() > TRAILER {
                    let cut = held.len() - TRAILER;
                    out.write_all(&held[..cut])?;
                    out.flush()?;
                    hash.update(&held[..cut]);
                    sent += cut as u64;
                    held.drain(..cut);
                }
                continue;
            }
            // At the end for now: is the producer still at it?
            if !flock::lock(&file, Mode::Shared, false)? {
                std::thread::sleep(POLL);
                continue;
            }
            // Finished (or died): read what is left, then the trailer decides.
            file.read_to_end(&mut held)?;
            if held.len() >= TRAILER {
                let cut = held.len() - TRAILER;
                let mut h = hash.clone();
                h.update(&held[..cut]);
                if trailer_ok(&held[cut..], sent + cut as u64, &h.finalize()) {
                    out.write_all(&held[..cut])?;
                    out.flush()?;
                    stat("bytes_from_cache", sent + cut as u64);
                    return Ok(Followed::Done);
                }
            }
            if sent == 0 {
                return Ok(Followed::Retry);
            }
            return Err(io::Error::other(
                "the pack being shared ended early; fetch again",
            ));
        }
    }

    /// One of `slots` concurrent pack-objects; waits in turn, telling the
    /// client (stderr reaches it as progress) once.
    fn slot(&self) -> io::Result<File> {
        let dir = self.settings.dir.join("slots");
        std::fs::create_dir_all(&dir)?;
        let files: Vec<File> = (0..self.settings.slots)
            .map(|n| {
                OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(dir.join(n.to_string()))
            })
            .collect::<io::Result<_>>()?;
        let mut waiting = None;
        let start = (std::process::id() as usize) % files.len();
        loop {
            for i in 0..files.len() {
                let file = &files[(start + i) % files.len()];
                if flock::lock(file, Mode::Exclusive, false)? {
                    let file = file.try_clone()?;
                    return Ok(file);
                }
            }
            if waiting.is_none() {
                waiting = Some(Waiting::new());
                eprintln!(
                    "remote: waiting for a pack-objects slot ({} busy)",
                    files.len()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Counts this process in `stats` as waiting for a slot while alive.
struct Waiting;

impl Waiting {
    fn new() -> Waiting {
        stat("queued", 1);
        Waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        stat("queued", -1i64 as u64);
    }
}

/// Counts this process as a live producer while alive.
struct Producing;

impl Drop for Producing {
    fn drop(&mut self) {
        stat("producers", -1i64 as u64);
    }
}

/// Write the request to pack-objects from a thread (it may start writing
/// before it has read all of its input), closing its stdin after.
fn feed(request: &[u8], to: Option<std::process::ChildStdin>) -> std::thread::JoinHandle<()> {
    let request = request.to_vec();
    std::thread::spawn(move || {
        if let Some(mut to) = to {
            let _ = to.write_all(&request);
        }
    })
}

/// Send the first `len` bytes of `file` to `out` (our stdout, a pipe to
/// upload-pack) with `sendfile`: the kernel moves the page-cache pages,
/// with no copy through this process. Falls back to reading and writing
/// where `sendfile` does not apply.
fn send_entry(file: &File, len: u64, out: &mut (impl Write + AsRawFd)) -> io::Result<()> {
    out.flush()?;
    let mut offset: libc::off_t = 0;
    while (offset as u64) < len {
        let want = (len - offset as u64).min(1 << 30) as usize;
        // SAFETY: both descriptors are open for the call; `offset` is ours.
        let n = unsafe { libc::sendfile(out.as_raw_fd(), file.as_raw_fd(), &mut offset, want) };
        if n > 0 {
            continue;
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EINVAL | libc::ENOSYS) if offset == 0 => {
                let mut from = file.try_clone()?;
                from.seek(SeekFrom::Start(0))?;
                io::copy(&mut from.take(len), out)?;
                return out.flush();
            }
            _ => return Err(err),
        }
    }
    Ok(())
}

/// Whether an [`EntryWriter`] holds `key` now (its `<key>.lock`). Never
/// blocks.
pub fn being_written(settings: &Settings, key: &str) -> bool {
    let Ok(file) = File::open(settings.dir.join(format!("{key}.lock"))) else {
        return false;
    };
    !flock::lock(&file, Mode::Shared, false).unwrap_or(true)
}

/// Count one more request for `key` in `<key>.seen`; the count so far
/// (counting stops at the threshold: the file stays tiny).
pub fn count_occurrence(settings: &Settings, key: &str) -> io::Result<u64> {
    std::fs::create_dir_all(&settings.dir)?;
    let mut seen = OpenOptions::new()
        .create(true)
        .append(true)
        .open(settings.dir.join(format!("{key}.seen")))?;
    let so_far = seen.metadata()?.len();
    if so_far >= settings.min_occurrences {
        return Ok(so_far);
    }
    seen.write_all(b".")?;
    Ok(seen.metadata()?.len())
}

/// What [`open_entry`] found.
pub enum Entry {
    /// The file, at its start, and the length of what it holds (without
    /// the trailer).
    Found(File, u64),
    /// None, or one too old (removed).
    Missing,
    /// One that failed its checksum or was truncated (removed).
    Corrupt,
}

/// The finished entry `<key>.pack` when it is there, whole (its checksum
/// holds) and younger than `max_age`. A corrupt, truncated or old entry is
/// removed.
pub fn open_entry(settings: &Settings, key: &str) -> io::Result<Entry> {
    let path = settings.dir.join(format!("{key}.pack"));
    let mut file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Entry::Missing),
        Err(e) => return Err(e),
    };
    let Some(len) = verify(&mut file)? else {
        remove_entry(settings, &path);
        return Ok(Entry::Corrupt);
    };
    let created = created_of(&mut file)?;
    if now_secs().saturating_sub(created) > settings.max_age.as_secs() {
        remove_entry(settings, &path);
        return Ok(Entry::Missing);
    }
    let _ = file.set_modified(SystemTime::now());
    file.seek(SeekFrom::Start(0))?;
    Ok(Entry::Found(file, len))
}

/// A new entry being written by one process: the bytes, then the trailer,
/// then renamed to `<key>.pack` by [`EntryWriter::finish`]. Dropped
/// unfinished, it removes its file. It holds `<key>.lock` (taken without
/// waiting), so one request of a storm writes the entry, not all.
pub struct EntryWriter {
    settings: Settings,
    key: String,
    tmp: PathBuf,
    file: File,
    _election: File,
    hash: Sum,
    len: u64,
    done: bool,
}

impl EntryWriter {
    /// `None` when another request is writing this entry now.
    pub fn start(settings: &Settings, key: &str) -> io::Result<Option<EntryWriter>> {
        std::fs::create_dir_all(&settings.dir)?;
        let election = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(settings.dir.join(format!("{key}.lock")))?;
        if !flock::lock(&election, Mode::Exclusive, false)? {
            return Ok(None);
        }
        let tmp = settings
            .dir
            .join(format!("{key}.{}.new", std::process::id()));
        let file = File::create(&tmp)?;
        Ok(Some(EntryWriter {
            settings: settings.clone(),
            key: key.to_string(),
            tmp,
            file,
            _election: election,
            hash: Sum::new(),
            len: 0,
            done: false,
        }))
    }

    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.hash.update(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Close the entry with its trailer and put it in place (or drop it
    /// when it is bigger than the whole cache may be).
    pub fn finish(mut self) -> io::Result<()> {
        self.done = true;
        let mut trailer = Vec::with_capacity(TRAILER);
        trailer.extend_from_slice(MAGIC);
        trailer.extend_from_slice(&now_secs().to_le_bytes());
        trailer.extend_from_slice(&self.len.to_le_bytes());
        trailer.extend_from_slice(&std::mem::take(&mut self.hash).finalize());
        self.file.write_all(&trailer)?;
        let path = self.settings.dir.join(format!("{}.pack", self.key));
        if self.len + TRAILER as u64 <= self.settings.max_size {
            store(&self.settings, &self.tmp, &path)?;
        } else {
            std::fs::remove_file(&self.tmp)?;
        }
        Ok(())
    }
}

impl Drop for EntryWriter {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn trailer_ok(trailer: &[u8], len: u64, sum: &[u8]) -> bool {
    trailer.len() == TRAILER
        && &trailer[..8] == MAGIC
        && trailer[16..24] == len.to_le_bytes()
        && &trailer[24..] == sum
}

/// Check an entry's checksum; its pack length when valid.
fn verify(file: &mut File) -> io::Result<Option<u64>> {
    let total = file.metadata()?.len();
    if total < TRAILER as u64 {
        return Ok(None);
    }
    let len = total - TRAILER as u64;
    let mut hash = Sum::new();
    file.seek(SeekFrom::Start(0))?;
    let mut rest = len;
    let mut buf = vec![0u8; CHUNK];
    while rest > 0 {
        let want = rest.min(CHUNK as u64) as usize;
        file.read_exact(&mut buf[..want])?;
        hash.update(&buf[..want]);
        rest -= want as u64;
    }
    let mut trailer = [0u8; TRAILER];
    file.read_exact(&mut trailer)?;
    Ok(trailer_ok(&trailer, len, &hash.finalize()).then_some(len))
}

fn created_of(file: &mut File) -> io::Result<u64> {
    let total = file.metadata()?.len();
    file.seek(SeekFrom::Start(total - TRAILER as u64 + 8))?;
    let mut b = [0u8; 8];
    file.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The share of `max_size` a store past the cap trims the cache to: the
/// stores after it fit without listing the directory again.
pub const LOW_WATER: (u64, u64) = (3, 4);

/// The running total of the entries' bytes (`<dir>/size`), locked for as
/// long as it is held: stores, removals and trims take it in turn.
pub struct Ledger {
    file: File,
}

impl Ledger {
    pub fn open(settings: &Settings) -> io::Result<Ledger> {
        std::fs::create_dir_all(&settings.dir)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(settings.dir.join("size"))?;
        flock::lock(&file, Mode::Exclusive, true)?;
        Ok(Ledger { file })
    }

    /// The total; 0 when the file is new or torn (the next trim rewrites
    /// it from the directory).
    pub fn total(&mut self) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.file.seek(SeekFrom::Start(0))?;
        match self.file.read_exact(&mut b) {
            Ok(()) => Ok(u64::from_le_bytes(b)),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
            Err(e) => Err(e),
        }
    }

    pub fn set(&mut self, total: u64) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&total.to_le_bytes())
    }

    fn add(&mut self, by: i64) -> io::Result<u64> {
        let total = self.total()?.saturating_add_signed(by);
        self.set(total)?;
        Ok(total)
    }
}

fn len_of(path: &Path) -> i64 {
    std::fs::metadata(path).map_or(0, |m| m.len() as i64)
}

/// Put the finished entry `from` in place as `to` and count it; past the
/// cap, trim the cache to [`LOW_WATER`] of it, `to` last.
fn store(settings: &Settings, from: &Path, to: &Path) -> io::Result<()> {
    let mut ledger = Ledger::open(settings)?;
    let replaced = len_of(to);
    std::fs::rename(from, to)?;
    let total = ledger.add(len_of(to) - replaced)?;
    if total > settings.max_size {
        let target = settings.max_size / LOW_WATER.1 * LOW_WATER.0;
        trim(settings, &mut ledger, Some(to), target)?;
    }
    Ok(())
}

/// Remove an entry and take it off the total.
fn remove_entry(settings: &Settings, path: &Path) {
    let Ok(mut ledger) = Ledger::open(settings) else {
        let _ = std::fs::remove_file(path);
        return;
    };
    let len = len_of(path);
    if std::fs::remove_file(path).is_ok() {
        let _ = ledger.add(-len);
    }
}

/// How many times this process listed the cache directory ([`trim`]).
static LISTINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Keep the entries under `max_size` (least recently used go first) and
/// drop those older than `max_age`, and stale `.seen`/`.lock`/`.tmp`
/// files nobody holds; then the ledger holds the exact total. The
/// server's upkeep, every minute and at start; `keep` goes last.
pub fn evict(settings: &Settings, keep: Option<&Path>) -> io::Result<()> {
    if !settings.dir.is_dir() {
        return Ok(());
    }
    let mut ledger = Ledger::open(settings)?;
    trim(settings, &mut ledger, keep, settings.max_size)
}

/// [`evict`] down to `target` bytes, under the ledger.
fn trim(
    settings: &Settings,
    ledger: &mut Ledger,
    keep: Option<&Path>,
    target: u64,
) -> io::Result<()> {
    LISTINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut entries = Vec::new();
    let Ok(dir) = std::fs::read_dir(&settings.dir) else {
        return Ok(());
    };
    let now = SystemTime::now();
    let age_of = |m: &std::fs::Metadata| {
        m.modified()
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .unwrap_or_default()
    };
    for e in dir.flatten() {
        let path = e.path();
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let ext = path.extension().and_then(|x| x.to_str()).unwrap_or("");
        match ext {
            "pack" => {
                if age_of(&meta) > settings.max_age {
                    let _ = std::fs::remove_file(&path);
                } else {
                    entries.push((meta.modified().unwrap_or(now), meta.len(), path));
                }
            }
            // Occurrence counts and leftovers of dead producers: old ones
            // only (a live producer holds its files open and locked).
            "seen" | "lock" | "tmp" | "new"
                if age_of(&meta) > settings.max_age.max(Duration::from_secs(60)) =>
            {
                let unheld = File::open(&path)
                    .and_then(|f| flock::lock(&f, Mode::Exclusive, false))
                    .unwrap_or(false);
                if unheld || ext == "seen" {
                    let _ = std::fs::remove_file(&path);
                }
            }
            _ => {}
        }
    }
    // Oldest use first; the one just written last.
    entries.sort_by_key(|(used, _, path)| (Some(path.as_path()) == keep, *used));
    let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
    for (_, len, path) in entries {
        if total <= target {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= len;
            stat("evicted", 1);
        }
    }
    ledger.set(total)
}

/// Add `by` (wrapping: `-1 as u64` subtracts) to counter `name` in this
/// process's stats file, `<dir>/stats/<pid>`, which the server folds into
/// its metrics and removes.
fn stat(name: &str, by: u64) {
    let Some(dir) = std::env::var_os(ENV_DIR) else {
        return;
    };
    let dir = PathBuf::from(dir).join("stats");
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(mut f) = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(std::process::id().to_string()))
    {
        let _ = writeln!(f, "{name} {}", by as i64);
    }
}

/// The counters of the pack cache, summed over the hook processes' stats
/// files (finished ones are folded in and removed).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    pub hits: u64,
    pub misses: u64,
    pub bytes_from_cache: u64,
    pub pack_objects: u64,
    pub corrupt: u64,
    pub evicted: u64,
    /// CPU microseconds of the hook processes themselves, and of the
    /// `pack-objects` they ran.
    pub hook_cpu_us: u64,
    pub pack_objects_cpu_us: u64,
    /// Smart HTTP responses the server sent itself from a cached response,
    /// without running upload-pack (also counted in `hits`).
    pub direct: u64,
    /// Smart HTTP `ls-refs` answers the server sent itself from a cached
    /// response (not counted in `hits` or `direct`, which count fetches).
    pub ref_lists: u64,
    /// Smart HTTP capability and ref advertisements (`GET info/refs`)
    /// the server sent itself from a cached one.
    pub advertisements: u64,
    /// Gauges: producers running and requests waiting for a slot now.
    pub producers: i64,
    pub queued: i64,
}

impl Stats {
    pub const EMPTY: Stats = Stats {
        hits: 0,
        misses: 0,
        bytes_from_cache: 0,
        pack_objects: 0,
        corrupt: 0,
        evicted: 0,
        hook_cpu_us: 0,
        pack_objects_cpu_us: 0,
        direct: 0,
        ref_lists: 0,
        advertisements: 0,
        producers: 0,
        queued: 0,
    };

    /// Add the counters (not the gauges) of `other`.
    pub fn merge(&mut self, other: &Stats) {
        for (name, v) in [
            ("hit", other.hits),
            ("miss", other.misses),
            ("bytes_from_cache", other.bytes_from_cache),
            ("pack_objects", other.pack_objects),
            ("corrupt", other.corrupt),
            ("evicted", other.evicted),
            ("hook_cpu_us", other.hook_cpu_us),
            ("pack_objects_cpu_us", other.pack_objects_cpu_us),
            ("direct", other.direct),
            ("ref_lists", other.ref_lists),
            ("advertisements", other.advertisements),
        ] {
            self.add(name, v as i64);
        }
    }

    /// Add `by` to counter `name` (`hit`, `miss`, `bytes_from_cache`, …).
    pub fn add(&mut self, name: &str, by: i64) {
        let c = |v: &mut u64| *v = v.saturating_add_signed(by);
        match name {
            "hit" => c(&mut self.hits),
            "miss" => c(&mut self.misses),
            "bytes_from_cache" => c(&mut self.bytes_from_cache),
            "pack_objects" => c(&mut self.pack_objects),
            "corrupt" => c(&mut self.corrupt),
            "evicted" => c(&mut self.evicted),
            "direct" => c(&mut self.direct),
            "ref_lists" => c(&mut self.ref_lists),
            "advertisements" => c(&mut self.advertisements),
            "hook_cpu_us" => c(&mut self.hook_cpu_us),
            "pack_objects_cpu_us" => c(&mut self.pack_objects_cpu_us),
            "producers" => self.producers += by,
            "queued" => self.queued += by,
            _ => {}
        }
    }
}

/// Reads the hooks' stats files: counters of finished processes are folded
/// into `folded` and their files removed; live ones are added as they are.
#[derive(Debug, Default)]
pub struct StatsReader {
    folded: Stats,
}

impl StatsReader {
    pub fn read(&mut self, cache_dir: &Path) -> Stats {
        let mut now = self.folded.clone();
        now.producers = 0;
        now.queued = 0;
        let Ok(dir) = std::fs::read_dir(cache_dir.join("stats")) else {
            return now;
        };
        for e in dir.flatten() {
            let path = e.path();
            let Some(pid) = path
                .file_name()
                .and_then(|n| n.to_str()?.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let alive = Path::new(&format!("/proc/{pid}")).exists();
            let mut its = Stats::default();
            for line in text.lines() {
                if let Some((name, by)) = line.split_once(' ') {
                    if let Ok(by) = by.parse::<i64>() {
                        its.add(name, by);
                    }
                }
            }
            if alive {
                for (name, v) in [
                    ("hit", its.hits),
                    ("miss", its.misses),
                    ("bytes_from_cache", its.bytes_from_cache),
                    ("pack_objects", its.pack_objects),
                    ("corrupt", its.corrupt),
                    ("evicted", its.evicted),
                    ("hook_cpu_us", its.hook_cpu_us),
                    ("pack_objects_cpu_us", its.pack_objects_cpu_us),
                ] {
                    now.add(name, v as i64);
                }
                now.producers += its.producers.max(0);
                now.queued += its.queued.max(0);
            } else if std::fs::remove_file(&path).is_ok() {
                // A complete line-by-line record of a finished process.
                for (name, v) in [
                    ("hit", its.hits),
                    ("miss", its.misses),
                    ("bytes_from_cache", its.bytes_from_cache),
                    ("pack_objects", its.pack_objects),
                    ("corrupt", its.corrupt),
                    ("evicted", its.evicted),
                    ("hook_cpu_us", its.hook_cpu_us),
                    ("pack_objects_cpu_us", its.pack_objects_cpu_us),
                ] {
                    self.folded.add(name, v as i64);
                    now.add(name, v as i64);
                }
            }
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_separates_repositories_arguments_and_requests() {
        let a = key(Path::new("/r/a.git"), &["--revs".into()], b"want1\n");
        assert_eq!(
            a,
            key(Path::new("/r/a.git"), &["--revs".into()], b"want1\n")
        );
        assert_ne!(
            a,
            key(Path::new("/r/b.git"), &["--revs".into()], b"want1\n")
        );
        assert_ne!(
            a,
            key(
                Path::new("/r/a.git"),
                &["--revs".into(), "--filter=blob:none".into()],
                b"want1\n"
            )
        );
        assert_ne!(
            a,
            key(Path::new("/r/a.git"), &["--revs".into()], b"want2\n")
        );
        // Field boundaries count: moving bytes between fields changes it.
        assert_ne!(
            key(Path::new("/r/a"), &["b".into()], b""),
            key(Path::new("/r/"), &["ab".into()], b"")
        );
    }

    #[test]
    fn a_truncated_or_flipped_entry_fails_its_checksum() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("e.pack");
        let body = b"PACK some bytes".to_vec();
        let mut bytes = body.clone();
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
        let mut sum = Sum::new();
        sum.update(&body);
        bytes.extend_from_slice(&sum.finalize());
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            verify(&mut File::open(&path).unwrap()).unwrap(),
            Some(body.len() as u64)
        );
        let mut flipped = bytes.clone();
        flipped[2] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        assert_eq!(verify(&mut File::open(&path).unwrap()).unwrap(), None);
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(verify(&mut File::open(&path).unwrap()).unwrap(), None);
    }

    #[test]
    fn eviction_keeps_the_total_under_the_limit_least_recently_used_first() {
        let tmp = tempfile::tempdir().unwrap();
        let settings = Settings {
            dir: tmp.path().to_path_buf(),
            repo: PathBuf::new(),
            max_size: 250,
            max_age: Duration::from_secs(3600),
            min_occurrences: 1,
            slots: 1,
        };
        let now = SystemTime::now();
        for (name, ago) in [("old", 30), ("mid", 20), ("new", 10)] {
            let path = tmp.path().join(format!("{name}.pack"));
            std::fs::write(&path, [0u8; 100]).unwrap();
            File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(now - Duration::from_secs(ago))
                .unwrap();
        }
        evict(&settings, None).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["mid.pack", "new.pack", "size"]);
        assert_eq!(Ledger::open(&settings).unwrap().total().unwrap(), 200);
    }

    /// Issue 44: each store listed the whole directory (2,000 requests,
    /// 6,028 files, requests 3x slower). A store now adds to the ledger;
    /// only one past the cap lists the directory, and it trims to
    /// `LOW_WATER`, so 1,000 stores list it a bounded number of times while
    /// the total never passes the cap.
    #[test]
    fn stores_list_the_directory_only_past_the_cap_and_stay_under_it() {
        use std::sync::atomic::Ordering;
        let tmp = tempfile::tempdir().unwrap();
        let settings = Settings {
            dir: tmp.path().to_path_buf(),
            repo: PathBuf::new(),
            max_size: 100 * 100,
            max_age: Duration::from_secs(3600),
            min_occurrences: 1,
            slots: 1,
        };
        let before = LISTINGS.load(Ordering::Relaxed);
        for n in 0..1000 {
            // Requests that never repeat leave `.seen` and `.lock` files too.
            std::fs::write(tmp.path().join(format!("{n}.seen")), b".").unwrap();
            std::fs::write(tmp.path().join(format!("{n}.lock")), b"").unwrap();
            let from = tmp.path().join(format!("{n}.1.new"));
            std::fs::write(&from, [0u8; 100]).unwrap();
            store(&settings, &from, &tmp.path().join(format!("{n}.pack"))).unwrap();
            let on_disk: u64 = std::fs::read_dir(tmp.path())
                .unwrap()
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
                .map(|e| e.metadata().unwrap().len())
                .sum();
            assert!(on_disk <= settings.max_size, "store {n}: {on_disk} bytes");
            assert_eq!(Ledger::open(&settings).unwrap().total().unwrap(), on_disk);
        }
        // 100 entries fit; each trim frees 25 of them: one listing per 25
        // stores past the first 100, not one per store.
        let listings = LISTINGS.load(Ordering::Relaxed) - before;
        assert!(listings <= 40, "{listings} listings for 1000 stores");
        // A server started again (or after a crash) trims and mends the
        // total from the directory.
        Ledger::open(&settings).unwrap().set(1).unwrap();
        evict(&settings, None).unwrap();
        let total = Ledger::open(&settings).unwrap().total().unwrap();
        assert!((7500..=10_000).contains(&total), "{total}");
    }
}
