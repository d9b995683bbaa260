//! `collab-release`: release files attached to git tags.
//!
//! ```text
//! collab-release create   '<repo>' '<tag>' '<file>'    bytes on stdin     needs rewind
//! collab-release list     '<repo>'                                        needs read
//! collab-release download '<repo>' '<tag>' '<file>'    bytes on stdout    needs read
//! collab-release delete   '<repo>' '<tag>' ['<file>']                     needs rewind
//! ```
//!
//! `create` needs the tag to exist in the repository (`refs/tags/<tag>`).
//! Its bytes are read from the channel's data messages as they arrive and
//! handed to a blocking writer through a small bounded queue, so memory stays
//! bounded whatever the file size. The upload is complete only when the
//! client sends EOF; a connection that closes first, or more than
//! `max_release_size` bytes, leaves nothing on disk (`releases::Upload`
//! cleans up when dropped). Access is `authz`'s; storage is `releases`'.

use chrono::SubsecRound as _;
use collab_proto::replies::release as wire;
use russh::server::Msg;
use russh::{Channel, ChannelMsg};
use tokio::io::{AsyncWriteExt as _, BufReader};

use super::context::ExecContext;
use super::reply::{reply_and_close, reply_line};
use crate::authz::Access;
use crate::releases::{valid_file_name, valid_tag_name, ReleaseError, Upload};
use crate::repos::RepoEntry;
use crate::service::command::ReleaseCmd;
use crate::service::release::{blocking, error_line, file_shown, store};

/// Upload chunks queued between the channel and the disk writer (each one
/// SSH packet, at most 32 KiB).
const QUEUED_CHUNKS: usize = 8;

/// Download read buffer: one SSH packet's worth.
const CHUNK: usize = 32 * 1024;

/// Run one `collab-release` command on `channel`.
pub async fn run(ctx: &ExecContext, channel: Channel<Msg>, cmd: ReleaseCmd) {
    // The level its row of the verb table asks (readers list and download,
    // rewinders create and delete).
    let needed = cmd.needed_access();
    match cmd {
        ReleaseCmd::Create { repo, tag, file } => {
            create(ctx, channel, needed, &repo, &tag, &file).await
        }
        // The service's (`service::release`).
        ReleaseCmd::List { .. } | ReleaseCmd::Delete { .. } => {
            reply_and_close(channel, "error: internal error", 1).await
        }
        ReleaseCmd::Download { repo, tag, file } => {
            download(ctx, channel, needed, &repo, &tag, &file).await
        }
    }
}

/// The repository, if the caller has `needed` on it; else the reply has
/// been sent (not found, or permission denied for a reader).
async fn authorized(
    ctx: &ExecContext,
    channel: Channel<Msg>,
    repo: &str,
    needed: Access,
) -> Option<(RepoEntry, Channel<Msg>)> {
    super::context::authorize_or_reply(ctx, channel, repo, needed, "releases need").await
}

fn tag_exists(repo_dir: &std::path::Path, tag: &str) -> Result<bool, git2::Error> {
    let repo = git2::Repository::open_bare(repo_dir)?;
    let found = match repo.find_reference(&collab_record::refs::tag_ref(tag)) {
        Ok(_) => Ok(true),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(false),
        Err(e) => Err(e),
    };
    found
}

/// Write queued chunks to the upload on the blocking pool until the queue
/// ends; the first error drops the upload (and with it the queue).
fn spawn_writer<T: AsRef<[u8]> + Send + 'static>(
    mut upload: Upload,
    mut queued: tokio::sync::mpsc::Receiver<T>,
) -> tokio::task::JoinHandle<Result<Upload, ReleaseError>> {
    tokio::task::spawn_blocking(move || {
        while let Some(chunk) = queued.blocking_recv() {
            upload.write(chunk.as_ref())?;
        }
        Ok(upload)
    })
}

async fn create(
    ctx: &ExecContext,
    channel: Channel<Msg>,
    needed: Access,
    repo: &str,
    tag: &str,
    file: &str,
) {
    if !valid_file_name(file) {
        let e = ReleaseError::FileName(file.to_string());
        return reply_and_close(channel, &error_line(&e), 1).await;
    }
    let Some((entry, mut channel)) = authorized(ctx, channel, repo, needed).await else {
        return;
    };
    if !valid_tag_name(tag) {
        let e = ReleaseError::TagName(tag.to_string());
        return reply_and_close(channel, &error_line(&e), 1).await;
    }
    let (path, owned_tag) = (entry.path.clone(), tag.to_string());
    match tokio::task::spawn_blocking(move || tag_exists(&path, &owned_tag)).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => {
            // The usual cause: the tag exists only in the caller's clone.
            let message = format!(
                "error: no tag {tag} in {}: push it first (git push origin tag {tag})",
                entry.name
            );
            return reply_and_close(channel, &message, 1).await;
        }
        Ok(Err(e)) => {
            tracing::error!("reading tags of {}: {e}", entry.name);
            return reply_and_close(channel, "error: internal error", 1).await;
        }
        Err(e) => {
            tracing::error!("reading tags of {}: {e}", entry.name);
            return reply_and_close(channel, "error: internal error", 1).await;
        }
    }

    let store = store(ctx);
    let limit = ctx.app.config.max_release_size;
    let (name, t, f) = (entry.name.clone(), tag.to_string(), file.to_string());
    let upload = match blocking(move || store.begin_upload(&name, &t, &f, limit)).await {
        Ok(u) => u,
        Err(e) => return reply_and_close(channel, &error_line(&e), 1).await,
    };

    // Channel -> bounded queue -> disk. The writer stops at the first error
    // (too large, disk full), which ends the queue and this loop.
    let (chunks, queued) = tokio::sync::mpsc::channel(QUEUED_CHUNKS);
    let writer = spawn_writer(upload, queued);
    let mut complete = false;
    while let Some(msg) = channel.wait().await {
        match msg {
            ChannelMsg::Data { data } => {
                // A closed queue means the writer stopped with an error.
                let queued = chunks.send(data).await;
                if queued.is_err() {
                    break;
                }
            }
            ChannelMsg::Eof => {
                complete = true;
                break;
            }
            ChannelMsg::Close => break,
            _ => {}
        }
    }
    drop(chunks);
    let upload = match writer.await {
        Ok(Ok(upload)) => upload,
        Ok(Err(e)) => {
            // The upload was dropped in the writer: nothing is left on disk.
            tracing::info!(
                principal = ctx.caller.principal(),
                repo = entry.name,
                tag,
                file,
                "release upload refused: {e}"
            );
            return reply_and_close(channel, &error_line(&e), 1).await;
        }
        Err(e) => {
            tracing::error!("release upload writer: {e}");
            return reply_and_close(channel, "error: internal error", 1).await;
        }
    };
    if !complete {
        let received = upload.size();
        // Dropping the upload removes what it wrote; log once that is done.
        let _ = tokio::task::spawn_blocking(move || drop(upload)).await;
        tracing::info!(
            principal = ctx.caller.principal(),
            repo = entry.name,
            tag,
            file,
            received,
            "release upload aborted: the connection closed before EOF; nothing stored"
        );
        return;
    }
    let uploader = ctx.caller.principal().to_string();
    match blocking(move || upload.finish(&uploader, chrono::Utc::now().trunc_subsecs(0))).await {
        Ok(record) => {
            tracing::info!(
                principal = ctx.caller.principal(),
                repo = entry.name,
                tag,
                file,
                size = record.size,
                "release file stored"
            );
            let file_json = serde_json::to_value(&record).unwrap_or_default();
            crate::events::Recorded::release_uploaded(
                &entry.name,
                tag,
                &file_json,
                ctx.caller.principal(),
            )
            .record_or_log(&ctx.app.writer)
            .await;
            let reply = wire::ReleaseCreated {
                status: "created".to_string(),
                repo: entry.name.clone(),
                tag: tag.to_string(),
                file: file_shown(&record),
            };
            reply_and_close(channel, &reply_line(&reply), 0).await
        }
        Err(e) => reply_and_close(channel, &error_line(&e), 1).await,
    }
}

/// Stream the file's bytes to stdout (with the client's window as
/// backpressure), then exit 0. The one verb whose success is not JSON.
async fn download(
    ctx: &ExecContext,
    channel: Channel<Msg>,
    needed: Access,
    repo: &str,
    tag: &str,
    file: &str,
) {
    let Some((entry, channel)) = authorized(ctx, channel, repo, needed).await else {
        return;
    };
    let store = store(ctx);
    let (name, t, f) = (entry.name.clone(), tag.to_string(), file.to_string());
    let (data, record) = match blocking(move || store.open(&name, &t, &f)).await {
        Ok(opened) => opened,
        Err(e) => return reply_and_close(channel, &error_line(&e), 1).await,
    };
    let (read, tx) = channel.split();
    drop(read);
    let mut out = tx.make_writer();
    let mut data = BufReader::with_capacity(CHUNK, tokio::fs::File::from_std(data));
    match tokio::io::copy_buf(&mut data, &mut out).await {
        Ok(sent) if sent == record.size => {}
        Ok(sent) => {
            tracing::error!(
                "release file {}/{tag}/{file}: sent {sent} bytes, recorded {}",
                entry.name,
                record.size
            );
            let line = b"error: internal error\n".to_vec();
            let _ = tx.extended_data_bytes(1, line).await;
            super::reply::note_exit_status(1);
            let _ = tx.exit_status(1).await;
            let _ = tx.eof().await;
            let _ = tx.close().await;
            return;
        }
        Err(e) => {
            tracing::info!("release download {}/{tag}/{file}: {e}", entry.name);
            return;
        }
    }
    // Never shutdown() the writer: that sends EOF before the exit status.
    let _ = out.flush().await;
    super::reply::note_exit_status(0);
    let _ = tx.exit_status(0).await;
    let _ = tx.eof().await;
    let _ = tx.close().await;
}
