//! `collab-repo mirror …`: a repository's pull and push mirrors, for server
//! administrators (a mirror makes the server connect to another host with a
//! stored credential).
//!
//! ```text
//! collab-repo mirror add '<repo>' '<url>' [--interval 10m] [--credential-file PATH] [--push]
//! collab-repo mirror list '<repo>'
//! collab-repo mirror sync '<repo>' ['<id>']
//! collab-repo mirror remove '<repo>' '<id>'
//! ```
//!
//! A mirror is named by the id `add` prints and `list` shows (`mr` and 12
//! hex digits), within its repository. `--credential-file` takes the
//! file's contents on standard input (`… --credential-file token < token`;
//! the path itself is only a label for the caller): it is sealed at once
//! and never shown again, by any verb, page, event or log line. Someone who
//! is not an administrator gets `error: permission denied` before any
//! repository is looked up, so the verbs say nothing about which exist.

use collab_proto::replies::mirror as wire;

use super::command::MirrorCmd;
use super::context::{authorize_repo, Context};
use super::reply::reply_line;
use crate::authz;
use crate::mirrors::{git::Credential, Outcome};
use crate::repos::RepoEntry;
use collab_store::mirrors::{self as store, AddRefused, Mirror};

/// The largest credential read from stdin (an RSA-4096 key is ~3.4 KiB).
pub const MAX_CREDENTIAL: usize = 16 * 1024;

/// The default `--interval`.
const DEFAULT_INTERVAL_SECS: u64 = 600;

/// The longest `--interval`.
const MAX_INTERVAL_SECS: u64 = 30 * 86_400;

const NOT_FOUND: &str = "error: mirror not found";

/// The repository a `collab-repo mirror` command is for: mirrors are for
/// server administrators with rewind on it. Decided before a credential
/// is read.
pub fn authorized(ctx: &Context, cmd: &MirrorCmd) -> Result<RepoEntry, Reply> {
    if !authz::is_server_admin(&ctx.app, &ctx.caller) {
        return Err(err(
            "permission denied: mirrors are for server administrators",
        ));
    }
    authorize_repo(ctx, cmd.repo(), cmd.needed_access(), "mirrors need")
}

/// Whether the command reads a credential on stdin.
pub fn reads_stdin(cmd: &MirrorCmd) -> bool {
    matches!(
        cmd,
        MirrorCmd::Add {
            credential: Some(_),
            ..
        }
    )
}

/// Run one authorized `collab-repo mirror` command; `stdin` is the
/// credential of `add --credential-stdin` (read by the door, at most
/// [`MAX_CREDENTIAL`] bytes, trimmed).
pub async fn reply(
    ctx: &Context,
    entry: RepoEntry,
    cmd: MirrorCmd,
    stdin: Option<String>,
) -> Reply {
    let repo = entry.name.clone();
    match cmd {
        MirrorCmd::Add {
            url,
            interval,
            credential,
            push,
            ..
        } => {
            let credential = credential.map(|_| stdin.unwrap_or_default());
            // Its pushes are validated (`hooks::governance`); a fetch is not.
            if !push && entry.is_governance() {
                return err("the governance repository cannot be a pull mirror: \
                            its changes are checked when pushed");
            }
            add(
                ctx,
                &repo,
                &entry.path,
                &url,
                interval.as_deref(),
                credential,
                push,
            )
            .await
        }
        MirrorCmd::List { .. } => list(ctx, &repo, &entry.path).await,
        MirrorCmd::Sync { id, .. } => sync(ctx, &repo, id.as_deref()).await,
        MirrorCmd::Remove { id, .. } => remove(ctx, &repo, &id).await,
    }
}

type Reply = (String, u32);

fn err(message: impl std::fmt::Display) -> Reply {
    (format!("error: {message}"), 1)
}

fn internal(e: anyhow::Error) -> Reply {
    tracing::error!("collab-repo mirror: {e:#}");
    ("error: internal error".to_string(), 1)
}

/// A mirror's public shape: never the credential, only whether there is one,
/// and its URL and last error without user, password or query (mirrors
/// added before those were refused may hold a token there).
fn mirror_shown(m: &Mirror, lfs: &str) -> wire::MirrorShown {
    let at = |t: Option<i64>| t.map(crate::events::rfc3339);
    wire::MirrorShown {
        id: m.id.clone(),
        direction: m.direction.clone(),
        url: crate::mirrors::url::shown(&m.url),
        interval_secs: m.interval_secs,
        credential: m.credential.is_some(),
        created_by: m.created_by.clone(),
        created_at: crate::events::rfc3339(m.created_at),
        last_attempt_at: at(m.last_attempt_at),
        last_success_at: at(m.last_success_at),
        last_error: m.last_error.as_deref().map(crate::mirrors::url::scrub),
        failures: m.failures,
        next_sync_at: crate::events::rfc3339(m.next_at),
        lfs: lfs.to_string(),
    }
}

/// `--interval`: a duration (`90s`, `10m`, `1h`) within the bounds.
fn interval_secs(given: Option<&str>, min: u64) -> Result<u64, String> {
    let Some(text) = given else {
        return Ok(DEFAULT_INTERVAL_SECS.max(min));
    };
    let secs = crate::config::parse_duration(text)
        .map_err(|e| format!("invalid --interval: {e}"))?
        .as_secs();
    if secs < min {
        return Err(format!(
            "invalid --interval: at least {min}s (mirrors.min_interval_secs)"
        ));
    }
    if secs > MAX_INTERVAL_SECS {
        return Err("invalid --interval: at most 30d".into());
    }
    Ok(secs)
}

async fn add(
    ctx: &Context,
    repo: &str,
    path: &std::path::Path,
    url: &str,
    interval: Option<&str>,
    credential: Option<String>,
    push: bool,
) -> Reply {
    let mirrors = &ctx.app.mirrors;
    let interval = match interval_secs(interval, mirrors.config().min_interval_secs) {
        Ok(secs) => secs,
        Err(e) => return err(e),
    };
    let pinned = match mirrors.vet(url).await {
        Ok(p) => p,
        Err(e) => return err(e),
    };
    let credential = match credential {
        Some(text) if text.is_empty() => return err(
            "the credential is empty: send the file on standard input (`--credential-file F < F`)",
        ),
        Some(text) => {
            if let Err(e) = Credential::classify(&text).fits(pinned.checked.scheme) {
                return err(e);
            }
            Some(mirrors.seal(&text))
        }
        None => None,
    };
    let max = mirrors.config().max_per_repo as i64;
    let id = format!("mr{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
    let mirror = Mirror {
        id: id.clone(),
        repo: repo.to_string(),
        direction: if push { "push" } else { "pull" }.into(),
        url: url.to_string(),
        credential,
        interval_secs: interval as i64,
        created_by: ctx.caller.principal().to_string(),
        created_at: 0,
        // Due at once: the first sync follows the add.
        next_at: 0,
        failures: 0,
        last_attempt_at: None,
        last_success_at: None,
        last_error: None,
        claimed_by: None,
        claimed_until: None,
    };
    let stored = ctx
        .app
        .writer
        .write("add a mirror", move |conn, now| {
            let mirror = Mirror {
                created_at: now,
                next_at: now,
                ..mirror
            };
            Ok(store::add(conn, &mirror, max)?.map(|()| mirror))
        })
        .await;
    match stored {
        Ok(Ok(mirror)) => {
            tracing::info!(
                repo,
                mirror = mirror.id,
                direction = mirror.direction,
                url = crate::mirrors::url::shown(&mirror.url),
                by = ctx.caller.principal(),
                "mirror added"
            );
            mirrors.poke();
            let added = wire::MirrorAdded {
                repo: repo.to_string(),
                mirror: mirror_shown(&mirror, &lfs_note(path).await),
            };
            (reply_line(&added), 0)
        }
        Ok(Err(AddRefused::Full { max })) => err(format!(
            "the repository has {max} mirrors already (mirrors.max_per_repo)"
        )),
        Ok(Err(AddRefused::Duplicate(id))) => {
            err(format!("the repository has this mirror already: {id}"))
        }
        Ok(Err(AddRefused::SecondPull(id))) => err(format!(
            "the repository has a pull mirror already ({id}); a second would prune its refs: remove it first"
        )),
        Err(e) => internal(e),
    }
}

/// What the mirrors say about git-lfs (`mirrors::lfs_note`).
async fn lfs_note(path: &std::path::Path) -> String {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || crate::mirrors::lfs_note(&path))
        .await
        .unwrap_or(crate::mirrors::LFS_NOT_MIRRORED)
        .to_string()
}

async fn list(ctx: &Context, repo: &str, path: &std::path::Path) -> Reply {
    let owned = repo.to_string();
    match ctx
        .app
        .reads
        .read(move |conn| Ok(store::list(conn, &owned)?))
        .await
    {
        Ok(mirrors) => {
            let lfs = lfs_note(path).await;
            let list = wire::MirrorList {
                repo: repo.to_string(),
                mirrors: mirrors.iter().map(|m| mirror_shown(m, &lfs)).collect(),
            };
            (reply_line(&list), 0)
        }
        Err(e) => internal(e),
    }
}

async fn sync(ctx: &Context, repo: &str, id: Option<&str>) -> Reply {
    let owned = repo.to_string();
    let mut mirrors = match ctx
        .app
        .reads
        .read(move |conn| Ok(store::list(conn, &owned)?))
        .await
    {
        Ok(m) => m,
        Err(e) => return internal(e),
    };
    if let Some(id) = id {
        mirrors.retain(|m| m.id == id);
        if mirrors.is_empty() {
            return (NOT_FOUND.into(), 1);
        }
    }
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for mirror in &mirrors {
        let outcome = match ctx.app.mirrors.sync_now(mirror).await {
            Ok(o) => o,
            Err(e) => return internal(e),
        };
        let (what, refs_updated, error) = match &outcome {
            Outcome::Synced { refs_updated } => ("synced", Some(*refs_updated as u64), None),
            Outcome::Failed(e) => {
                failures.push(format!("mirror {} failed: {e}", mirror.id));
                ("failed", None, Some(e.clone()))
            }
            Outcome::Busy => {
                failures.push(format!("mirror {} is still syncing elsewhere", mirror.id));
                ("busy", None, None)
            }
        };
        results.push(wire::SyncOutcome {
            id: mirror.id.clone(),
            direction: mirror.direction.clone(),
            outcome: what.to_string(),
            refs_updated,
            error,
        });
    }
    if !failures.is_empty() {
        return err(failures.join("; "));
    }
    let synced = wire::MirrorSynced {
        repo: repo.to_string(),
        synced: results,
    };
    (reply_line(&synced), 0)
}

async fn remove(ctx: &Context, repo: &str, id: &str) -> Reply {
    let (owned, mirror_id) = (repo.to_string(), id.to_string());
    match ctx
        .app
        .writer
        .write("remove a mirror", move |conn, _now| {
            Ok(store::remove(conn, &owned, &mirror_id)?)
        })
        .await
    {
        Ok(true) => {
            tracing::info!(
                repo,
                mirror = id,
                by = ctx.caller.principal(),
                "mirror removed"
            );
            let removed = wire::MirrorRemoved {
                repo: repo.to_string(),
                removed: id.to_string(),
            };
            (reply_line(&removed), 0)
        }
        Ok(false) => (NOT_FOUND.into(), 1),
        Err(e) => internal(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_default_and_are_bounded() {
        assert_eq!(interval_secs(None, 60), Ok(600));
        assert_eq!(interval_secs(None, 900), Ok(900));
        assert_eq!(interval_secs(Some("90s"), 60), Ok(90));
        assert_eq!(interval_secs(Some("2h"), 60), Ok(7200));
        assert!(interval_secs(Some("30s"), 60)
            .unwrap_err()
            .contains("at least 60s"));
        assert!(interval_secs(Some("31d"), 60).is_err());
        assert!(interval_secs(Some("soon"), 60).is_err());
    }
}
