//! `collab-events watch ['<repo>'...] [--since SEQ] [--type PATTERN]...
//! [--no-follow]`: the event log as JSON lines on stdout, from the
//! service's source (`service::events`: the checks, the slots, the loop
//! and its visibility). This door adds the channel: a client that stops
//! reading blocks the channel writer; after `events.stall_timeout_secs`
//! it is cut off with a last stderr line naming the seq to resume from
//! (sent past the full window: one short line) and exit status 1.

use std::time::Duration;

use russh::server::Msg;
use russh::{Channel, ChannelId, ChannelMsg};
use tokio::io::AsyncWriteExt as _;

use super::context::ExecContext;
use super::reply::reply_and_close;
use crate::service::command::WatchCmd;
use crate::service::events::{self, End};

pub use crate::service::events::Visibility;

/// How long a cut-off client gets to read its last line before the whole
/// connection is dropped.
const CUT_GRACE: Duration = Duration::from_secs(30);

/// Run one watcher until the client leaves, it is cut off, or the server
/// stops.
pub async fn watch(ctx: &ExecContext, channel: Channel<Msg>, cmd: WatchCmd) {
    let watch = match events::open(ctx, cmd).await {
        Ok(watch) => watch,
        Err(line) => return reply_and_close(channel, &line, 1).await,
    };
    let id = channel.id();
    let (mut read, write) = channel.split();
    // Drain the client's side until it closes: an undrained channel stalls
    // the whole connection. EOF (stdin closed) is not leaving.
    let (gone_tx, mut gone) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        while let Some(msg) = read.wait().await {
            if matches!(msg, ChannelMsg::Close) {
                break;
            }
        }
        let _ = gone_tx.send(());
    });
    let mut out = write.make_writer();
    let end = watch.run(ctx, &mut out, &mut gone).await;
    match end {
        End::ClientGone => {}
        End::CaughtUp => {
            let _ = out.flush().await;
            super::reply::note_exit_status(0);
            let _ = write.exit_status(0).await;
            let _ = write.eof().await;
            let _ = write.close().await;
        }
        End::Cut(line) => {
            tracing::info!(
                principal = ctx.caller.principal(),
                "event watcher cut off: {line}"
            );
            cut(ctx, id, &line, gone).await;
        }
    }
}

/// End a stream whose output may be blocked: the last line and the exit
/// status go through the session (past the window: one short line), then
/// the client has `CUT_GRACE` to read them before the connection drops.
async fn cut(
    ctx: &ExecContext,
    id: ChannelId,
    line: &str,
    gone: tokio::sync::oneshot::Receiver<()>,
) {
    let session = &ctx.session;
    let _ = session
        .extended_data(id, 1, format!("{line}\n").into_bytes())
        .await;
    super::reply::note_exit_status(1);
    let _ = session.exit_status_request(id, 1).await;
    let _ = session.eof(id).await;
    let _ = session.close(id).await;
    if tokio::time::timeout(CUT_GRACE, gone).await.is_err() {
        tracing::info!("event watcher did not read its last line; dropping the connection");
        let _ = session
            .disconnect(
                russh::Disconnect::ByApplication,
                "event stream consumer too slow".into(),
                String::new(),
            )
            .await;
    }
}
