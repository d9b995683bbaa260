//! `collab-release list` and `delete`, the release verbs that answer one
//! line (upload and download stream: `ssh/release.rs`), and what both
//! sides show of a release.

use collab_proto::replies::release as wire;

use super::context::{authorize_repo, Context};
use super::reply::reply_line;
use crate::authz::Access;
use crate::releases::{Release, ReleaseError, ReleaseStore};

type Reply = (String, u32);

pub(crate) fn store(ctx: &Context) -> ReleaseStore {
    ReleaseStore::new(ctx.app.config.releases_dir())
}

/// The reply line for a failed operation; internal errors are logged and
/// shown only as `internal error`.
pub(crate) fn error_line(e: &ReleaseError) -> String {
    match e {
        ReleaseError::Io(io) => {
            tracing::error!("release storage: {io}");
            "error: internal error".to_string()
        }
        other => format!("error: {other}"),
    }
}

/// Run blocking storage work off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ReleaseError> + Send + 'static,
) -> Result<T, ReleaseError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(ReleaseError::Io(std::io::Error::other(e))))
}

/// A time as the replies write it (as serde writes a `DateTime<Utc>`).
pub(crate) fn time_text(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// A stored file as the replies show it.
pub(crate) fn file_shown(file: &crate::releases::ReleaseFile) -> wire::ReleaseFile {
    wire::ReleaseFile {
        name: file.name.clone(),
        size: file.size,
        sha256: file.sha256.clone(),
        uploaded_at: time_text(file.uploaded_at),
        uploader: file.uploader.clone(),
    }
}

/// A release as the replies show it.
pub(crate) fn release_shown(release: &Release) -> wire::Release {
    wire::Release {
        tag: release.tag.clone(),
        created_at: release.created_at().map(time_text),
        size: release.size(),
        files: release.files.iter().map(file_shown).collect(),
    }
}

/// `collab-release list '<repo>'`.
pub async fn list(ctx: &Context, needed: Access, repo: &str) -> Reply {
    let entry = match authorize_repo(ctx, repo, needed, "releases need") {
        Ok(entry) => entry,
        Err(reply) => return reply,
    };
    let store = store(ctx);
    let name = entry.name.clone();
    match blocking(move || store.list(&name)).await {
        Ok(releases) => {
            let reply = wire::ReleaseList {
                repo: entry.name.clone(),
                releases: releases.iter().map(release_shown).collect(),
            };
            (reply_line(&reply), 0)
        }
        Err(e) => (error_line(&e), 1),
    }
}

/// `collab-release delete '<repo>' '<tag>' ['<file>']`.
pub async fn delete(
    ctx: &Context,
    needed: Access,
    repo: &str,
    tag: &str,
    file: Option<&str>,
) -> Reply {
    let entry = match authorize_repo(ctx, repo, needed, "releases need") {
        Ok(entry) => entry,
        Err(reply) => return reply,
    };
    let store = store(ctx);
    let (name, t, f) = (
        entry.name.clone(),
        tag.to_string(),
        file.map(str::to_string),
    );
    match blocking(move || store.delete(&name, &t, f.as_deref())).await {
        Ok(deleted) => {
            tracing::info!(
                principal = ctx.caller.principal(),
                repo = entry.name,
                tag,
                files = ?deleted,
                "release files deleted"
            );
            let files_json = serde_json::to_value(&deleted).unwrap_or_default();
            crate::events::Recorded::release_deleted(
                &entry.name,
                tag,
                &files_json,
                ctx.caller.principal(),
            )
            .record_or_log(&ctx.app.writer)
            .await;
            let reply = wire::ReleaseDeleted {
                status: "deleted".to_string(),
                repo: entry.name.clone(),
                tag: tag.to_string(),
                files: deleted,
            };
            (reply_line(&reply), 0)
        }
        Err(e) => (error_line(&e), 1),
    }
}
