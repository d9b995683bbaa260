//! How every verb answers: one line and the exit status
//! (`reply_and_close`, or `reply_on` for a verb that kept the read half),
//! JSON replies (`json_line`), the one not-found reply (`NOT_FOUND`), and
//! the exit status noted for the verbs-by-outcome metric
//! (`note_exit_status`; `exec` scopes it per request). A reply never
//! waits for a caller that has left (`CALLER_LEFT`, scoped by `exec`
//! too): it gives up, as a write to a closed channel is an error.

use russh::server::Msg;
use russh::{Channel, ChannelWriteHalf};

use crate::authz::NotFound;

/// The reply for an unknown or invisible repository, identical for every verb.
pub const NOT_FOUND: &str = NotFound::MESSAGE;

/// Send one reply and end the channel: `message` goes to stderr when it is an
/// `error: …` line, else to stdout; a newline is added; then the exit status,
/// EOF and close. The read half is dropped first so the session never waits
/// on a reader that is not there.
pub async fn reply_and_close(channel: Channel<Msg>, message: &str, exit_code: u32) {
    let (read, write) = channel.split();
    drop(read);
    reply_on(write, message, exit_code).await;
}

/// `reply_and_close` on the write half of a channel whose read half the
/// verb kept (to notice the client leaving while it waits). False when the
/// reply could not be sent (the client is gone).
pub async fn reply_on(write: ChannelWriteHalf<Msg>, message: &str, exit_code: u32) -> bool {
    let mut line = message.trim_end_matches('\n').to_string();
    line.push('\n');
    let send = async {
        let sent = if message.starts_with("error:") {
            write.extended_data_bytes(1, line.into_bytes()).await
        } else {
            write.data_bytes(line.into_bytes()).await
        };
        if sent.is_err() {
            return false;
        }
        note_exit_status(exit_code);
        let delivered = write.exit_status(exit_code).await.is_ok();
        let _ = write.eof().await;
        let _ = write.close().await;
        delivered
    };
    // A client that closed the channel, or a connection that is gone,
    // will never give the window a reply may wait for.
    unless_caller_left(send).await.unwrap_or(false)
}

tokio::task_local! {
    /// Fires when the running verb's caller has left (`ssh::leaving`).
    pub(super) static CALLER_LEFT: super::leaving::Left;
}

/// `work`'s output, or `None` when the running verb's caller leaves first
/// (`work` is dropped then). Outside a verb, just `work`.
pub async fn unless_caller_left<T>(work: impl std::future::Future<Output = T>) -> Option<T> {
    let Ok(left) = CALLER_LEFT.try_with(Clone::clone) else {
        return Some(work.await);
    };
    tokio::select! {
        done = work => Some(done),
        _ = left.wait() => None,
    }
}

/// Serialize a reply object (one line of JSON).
pub fn json_line(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_string())
}

/// Serialize a typed reply (`collab_proto::replies`) as one line of JSON.
pub fn reply_line<T: serde::Serialize>(reply: &T) -> String {
    serde_json::to_string(reply).unwrap_or_else(|_| "{}".to_string())
}

tokio::task_local! {
    /// The exit status the running verb sent, for the verbs-by-outcome metric.
    pub(super) static EXIT_STATUS: std::cell::Cell<Option<u32>>;
}

/// Record the exit status a verb sends (called next to every `exit_status`).
pub fn note_exit_status(code: u32) {
    let _ = EXIT_STATUS.try_with(|status| status.set(Some(code)));
}

/// The reply line for an operation that failed inside the server: what a
/// fault of the database means for the caller (docs/postgres.md, "Faults
/// of the database") when that is what happened, [`BUSY`] for a lock held
/// elsewhere past the server's own wait, `error: internal error` otherwise
/// (the error itself goes to the log).
pub fn internal_line(e: &anyhow::Error) -> &'static str {
    use collab_store::sql::Error;
    if is_busy(e) {
        return BUSY;
    }
    let fault = e
        .chain()
        .find_map(|cause| match cause.downcast_ref::<Error>() {
            Some(Error::CommitUnknown(_)) => Some(COMMIT_UNKNOWN),
            Some(e) if e.is_unavailable() => Some(UNAVAILABLE),
            _ => None,
        });
    fault.unwrap_or("error: internal error")
}

/// The whole reply for an operation that failed inside the server: its
/// line ([`internal_line`]) and exit status, `collab_proto::exit::BUSY`
/// for busy (the clients run it again), else 1.
pub fn internal_reply(e: &anyhow::Error) -> (String, u32) {
    let code = if is_busy(e) {
        collab_proto::exit::BUSY
    } else {
        1
    };
    (internal_line(e).to_string(), code)
}

/// Whether `e` failed only because another transaction held what it
/// needed (an issue's or a repository's lock, a row) past the server's own
/// wait, and nothing was written (`collab_store::writer::is_busy`).
pub fn is_busy(e: &anyhow::Error) -> bool {
    collab_store::writer::is_busy(e)
}

/// Busy past the server's own wait: nothing was written.
pub const BUSY: &str =
    "error: busy: another writer held this issue or repository too long; nothing was written, try again";

/// Whether `e` is the database being unreachable (or the connection lost
/// before anything was committed): trying again later is the remedy.
pub fn is_unavailable(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<collab_store::sql::Error>()
            .is_some_and(collab_store::sql::Error::is_unavailable)
    })
}

/// The database could not be reached (or the connection was lost before
/// COMMIT): nothing was written.
pub const UNAVAILABLE: &str =
    "error: the collab database is unavailable; nothing was written, try again in a few seconds";

/// The connection was lost while COMMIT was on its way.
pub const COMMIT_UNKNOWN: &str = "error: the collab database connection was lost during commit; \
     the write may or may not have been recorded: check before trying again";
