//! How a verb's answer goes out on a channel: one line and the exit status
//! (`reply_and_close`, or `reply_on` for a verb that kept the read half;
//! the lines themselves are `service::reply`'s), and
//! the exit status noted for the verbs-by-outcome metric
//! (`note_exit_status`; `exec` scopes it per request). A reply never
//! waits for a caller that has left (`CALLER_LEFT`, scoped by `exec`
//! too): it gives up, as a write to a closed channel is an error.

use russh::server::Msg;
use russh::{Channel, ChannelWriteHalf};

pub use crate::service::reply::{
    internal_line, internal_reply, is_busy, is_unavailable, json_line, reply_line, BUSY,
    COMMIT_UNKNOWN, NOT_FOUND, UNAVAILABLE,
};

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

tokio::task_local! {
    /// The exit status the running verb sent, for the verbs-by-outcome metric.
    pub(super) static EXIT_STATUS: std::cell::Cell<Option<u32>>;
}

/// Record the exit status a verb sends (called next to every `exit_status`).
pub fn note_exit_status(code: u32) {
    let _ = EXIT_STATUS.try_with(|status| status.set(Some(code)));
}
