//! The library's error type. Every fallible function in `collab_record` returns
//! [`Error`]; binaries wrap it with context (anyhow) and print it as one
//! `error: ...` line. Messages are single lines and never contain secrets.

use std::path::PathBuf;

/// Everything that can go wrong in the library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A libgit2 call failed.
    #[error("git: {}", .0.message())]
    Git(#[from] git2::Error),

    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// An issue id or prefix that is not 4 to 40 hex digits.
    #[error("invalid issue id '{0}': expected 4 to 40 hex digits")]
    InvalidIssueId(String),

    /// No issue matches the given id or prefix.
    #[error("no issue matches '{0}'")]
    IssueNotFound(String),

    /// More than one issue matches the given prefix.
    #[error("issue id '{prefix}' is ambiguous; candidates: {}", candidates.join(", "))]
    AmbiguousIssue {
        prefix: String,
        candidates: Vec<String>,
    },

    /// The issue's DAG cannot be replayed (its root event was dropped, or it
    /// has no root `issue.open`).
    #[error("issue {id} is invalid: {reason}")]
    InvalidIssue { id: String, reason: String },

    /// A DAG is past the replay limits (`record::store::MAX_DAG_COMMITS`,
    /// `MAX_DAG_EVENT_BYTES`): it is reported and not replayed.
    #[error("DAG too large to replay: {0}")]
    DagTooLarge(String),

    /// A signing key could not be loaded, parsed or created.
    #[error("signing key {}: {reason}", path.display())]
    Key { path: PathBuf, reason: String },

    /// A public key line (trust list, event author) could not be used.
    #[error("public key: {0}")]
    PublicKey(String),

    /// Writing an event or a ref was refused before anything was written
    /// (empty title, nothing to change, wrong status ...).
    #[error("{0}")]
    Invalid(String),

    /// A ref moved while we were writing it (compare-and-swap failed).
    #[error("{ref_name} changed concurrently; try again")]
    Concurrent { ref_name: String },

    /// The trust allowlist could not be read or edited.
    #[error("trust list {}: {reason}", path.display())]
    Trust { path: PathBuf, reason: String },

    /// A `git` subprocess (fetch/push during sync) failed.
    #[error("{0}")]
    Sync(String),

    /// JSON (de)serialization of an event failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
