//! What every verb answers, whatever the door: one line (a JSON reply, or
//! one `error:` line) and an exit status ([`Answer`]); JSON replies
//! (`json_line`, `reply_line`), the one not-found reply (`NOT_FOUND`), and
//! what a fault inside the server means for the caller (`internal_reply`).

use crate::authz::NotFound;

/// A verb's whole answer: the line the SSH door prints (stdout for a JSON
/// reply, stderr for an `error:` line) and the exit status. A lease won
/// by waiting rides along (`won`): a door that cannot deliver the answer
/// gives it back (`service::undelivered`).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub line: String,
    pub status: u32,
    pub won: Option<Box<collab_store::leases::Lease>>,
}

impl Answer {
    pub fn new(line: impl Into<String>, status: u32) -> Answer {
        Answer {
            line: line.into(),
            status,
            won: None,
        }
    }

    /// Whether the line is an `error:` line (the SSH door's stderr).
    pub fn is_error_line(&self) -> bool {
        self.line.starts_with("error:")
    }
}

impl From<(String, u32)> for Answer {
    fn from((line, status): (String, u32)) -> Answer {
        Answer::new(line, status)
    }
}

/// The reply for an unknown or invisible repository, identical for every verb.
pub const NOT_FOUND: &str = NotFound::MESSAGE;

/// Serialize a reply object (one line of JSON).
pub fn json_line(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_string())
}

/// Serialize a typed reply (`collab_proto::replies`) as one line of JSON.
pub fn reply_line<T: serde::Serialize>(reply: &T) -> String {
    serde_json::to_string(reply).unwrap_or_else(|_| "{}".to_string())
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
