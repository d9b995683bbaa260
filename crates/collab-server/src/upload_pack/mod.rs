//! What the two read transports share about `git upload-pack`: the
//! stateless command they run for one protocol v2 request (or the
//! advertisement), and the answers the server keeps and sends itself
//! ([`answers`]). Smart HTTP (`http/git_http.rs`) asks one request per
//! POST; SSH (`ssh/git_v2.rs`) reads the same requests off one channel.

pub mod answers;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command;

use crate::pack_cache::{self, EntryWriter, Settings};
use answers::Command as V2Command;

/// Only `version=N` style values of `GIT_PROTOCOL` (or the `Git-Protocol`
/// header) are passed on to git or put in a key.
pub fn sane_protocol(value: &str) -> bool {
    value.len() <= 128
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'=' | b':' | b'.' | b'_' | b'-'))
}

/// Whether `protocol` asks for protocol v2.
pub fn is_v2(protocol: &str) -> bool {
    protocol.split(':').any(|v| v == "version=2")
}

/// What every `git upload-pack` the server runs gets before the
/// subcommand: `nice` steps below the server (`git.nice`), filters
/// allowed, and the pack-objects hook, always: it refuses wants no ref
/// reaches (`wants`), and with `cache` given it is the pack cache too (the
/// caller was authorized for the repository: the cache sits after
/// authorization). The hook is set only on the command line: git ignores
/// `uploadpack.packObjectsHook` in a repository's own config.
pub fn configure(cmd: &mut Command, nice: u64, cache: Option<&Settings>) {
    crate::limits::priority::lower(cmd, nice);
    if let Some(hook) = pack_cache::hook_config() {
        cmd.arg("-c").arg(hook);
        if let Some(settings) = cache {
            cmd.envs(settings.to_env());
        }
    }
    cmd.args(["-c", "uploadpack.allowFilter=true"]);
}

/// `git upload-pack --stateless-rpc [--advertise-refs] <repo>`: one request
/// on stdin, its answer on stdout. A clean git environment, [`configure`]d,
/// and `GIT_PROTOCOL` when given (sane).
pub fn stateless(
    repo: &Path,
    protocol: Option<&str>,
    advertise: bool,
    nice: u64,
    cache: Option<&Settings>,
) -> Command {
    let mut cmd = Command::from(crate::maintenance::git::clean());
    configure(&mut cmd, nice, cache);
    cmd.args(["upload-pack", "--stateless-rpc"]);
    if advertise {
        cmd.arg("--advertise-refs");
    }
    cmd.arg("--end-of-options")
        .arg(repo)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(protocol) = protocol.filter(|p| sane_protocol(p)) {
        cmd.env("GIT_PROTOCOL", protocol);
    }
    cmd
}

/// The advertisement of `repo` for a client sending `protocol`, as kept,
/// or what to do instead: `Some(keep)`, run [`advertise`] and keep what it
/// prints; `None`, run it and keep nothing (below the threshold, being
/// kept elsewhere, a reftable repository).
pub async fn kept_advertisement(
    settings: &Settings,
    repo: &Path,
    protocol: &str,
) -> Result<Vec<u8>, Option<Box<answers::KeepAdvertisement>>> {
    let (settings, repo, protocol) = (settings.clone(), repo.to_path_buf(), protocol.to_string());
    let found =
        tokio::task::spawn_blocking(move || answers::advertisement(&settings, &repo, &protocol))
            .await;
    match found {
        Ok(answers::Advertisement::Hit(bytes)) => Ok(bytes),
        Ok(answers::Advertisement::Keep(keep)) => Err(Some(keep)),
        Ok(answers::Advertisement::Run) | Err(_) => Err(None),
    }
}

/// What `upload-pack --advertise-refs` prints for `repo` (kept, before it
/// is returned, when `keep` says so; a failure to keep only means no
/// entry). An error carries git's exit status and stderr.
pub async fn advertise(
    repo: &Path,
    protocol: Option<&str>,
    nice: u64,
    keep: Option<Box<answers::KeepAdvertisement>>,
) -> anyhow::Result<Vec<u8>> {
    let output = stateless(repo, protocol, true, nice, None).output().await?;
    if !output.status.success() {
        anyhow::bail!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let printed = output.stdout;
    if let Some(keep) = keep {
        let copy = printed.clone();
        let _ =
            tokio::task::spawn_blocking(move || answers::keep_advertisement(*keep, &copy)).await;
    }
    Ok(printed)
}

/// What the cache holds for a v2 request.
pub enum Found {
    /// A finished answer: the file and its length.
    Hit((std::fs::File, u64)),
    /// None; this request's answer is to be kept while it is sent.
    Fill(Box<Fill>),
    /// Another request is keeping this answer now: [`wait_for_answer`].
    Wait(String),
}

/// An answer being kept in the cache while it is sent: the copy, and
/// what decides whether it becomes an entry.
pub struct Fill {
    pub writer: EntryWriter,
    pub check: RefCheck,
}

/// The ref state a request was keyed in.
pub struct RefCheck {
    repo: PathBuf,
    state: [u8; 32],
}

impl RefCheck {
    /// Make `writer`'s copy an entry (call once all of the answer went out
    /// and upload-pack exited 0), unless the refs moved since the request
    /// was keyed (blocking).
    pub fn keep(self, writer: EntryWriter) {
        if answers::repo_state(&self.repo) != Some(self.state) {
            tracing::debug!(
                "pack cache: answer for {} not kept: its refs moved meanwhile",
                self.repo.display()
            );
        } else if let Err(e) = writer.finish() {
            tracing::warn!("pack cache: keeping an answer: {e}");
        }
    }
}

/// Look up the answer to `request` (a whole v2 `command`) on `repo`:
/// kept, to keep, being kept elsewhere, or `None` (ask upload-pack and
/// keep nothing: below the threshold, a reftable repository, an error).
pub async fn find(
    settings: &Settings,
    repo: &Path,
    protocol: &str,
    command: V2Command,
    request: Vec<u8>,
) -> Option<Found> {
    let (settings, repo, protocol) = (settings.clone(), repo.to_path_buf(), protocol.to_string());
    tokio::task::spawn_blocking(move || {
        let state = answers::repo_state(&repo)?;
        let key = answers::key(&repo, &protocol, &request, &state);
        if let Some(hit) = answers::lookup(&settings, &key, command) {
            return Some(Found::Hit(hit));
        }
        // Identical requests wait for the one keeping it.
        match answers::keeping(&settings, &key) {
            answers::Keeping::Writer(writer) => Some(Found::Fill(Box::new(Fill {
                writer,
                check: RefCheck { repo, state },
            }))),
            answers::Keeping::Elsewhere => Some(Found::Wait(key)),
            answers::Keeping::No => None,
        }
    })
    .await
    .ok()
    .flatten()
}

/// How long an identical request waits for the answer being kept before
/// it asks upload-pack itself.
const WAIT_FOR_ANSWER: Duration = Duration::from_secs(60);

/// Wait until the answer another request is keeping for `key` is
/// finished (or given up): the entry, or `None` (then upload-pack
/// answers: the other request failed, its client went away, or the refs
/// moved meanwhile).
pub async fn wait_for_answer(
    settings: &Settings,
    key: String,
    command: V2Command,
) -> Option<(std::fs::File, u64)> {
    let start = Instant::now();
    while pack_cache::being_written(settings, &key) {
        if start.elapsed() > WAIT_FOR_ANSWER {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let settings = settings.clone();
    tokio::task::spawn_blocking(move || answers::lookup(&settings, &key, command))
        .await
        .ok()
        .flatten()
}

/// The kept answer for a request, waiting for one being kept: a hit (or a
/// finished wait), or what to do instead (`Some(fill)`: run upload-pack
/// and keep its answer; `None`: run it and keep nothing).
pub async fn cached_or_fill(
    settings: &Settings,
    repo: &Path,
    protocol: &str,
    command: V2Command,
    request: Vec<u8>,
) -> Result<(std::fs::File, u64), Option<Fill>> {
    match find(settings, repo, protocol, command, request).await {
        Some(Found::Hit(hit)) => Ok(hit),
        Some(Found::Fill(fill)) => Err(Some(*fill)),
        Some(Found::Wait(key)) => wait_for_answer(settings, key, command).await.ok_or(None),
        None => Err(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_protocol_values_pass() {
        assert!(sane_protocol("version=2"));
        assert!(sane_protocol("version=2:object-format=sha1"));
        assert!(!sane_protocol("version=2\n"));
        assert!(!sane_protocol("$(id)"));
        assert!(!sane_protocol(&"v".repeat(129)));
        assert!(is_v2("version=2"));
        assert!(is_v2("object-format=sha1:version=2"));
        assert!(!is_v2("version=1"));
        assert!(!is_v2("version=22"));
    }
}
