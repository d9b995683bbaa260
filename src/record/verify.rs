//! `git-collab verify`: replays every issue and reports what replay drops
//! (bad signatures, untrusted keys, malformed or misplaced events) and the
//! issues that are invalid as a whole (their root event was dropped).

use git2::Repository;
use serde::Serialize;

use crate::error::Result;
use crate::record::replay::DroppedEvent;
use crate::record::state;

/// One dropped event, with the issue it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The issue's full id.
    pub issue: String,
    #[serde(flatten)]
    pub event: DroppedEvent,
}

/// An issue that cannot be shown at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvalidIssue {
    pub issue: String,
    pub reason: String,
}

/// The outcome of verifying a repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// True when nothing was dropped and every issue is valid.
    pub ok: bool,
    /// Number of issue DAGs examined.
    pub issues: usize,
    /// Number of event commits examined (structural merges excluded).
    pub events: usize,
    /// Whether the trust allowlist exists (and so was applied).
    pub allowlist: bool,
    pub dropped: Vec<Problem>,
    pub invalid_issues: Vec<InvalidIssue>,
}

/// Replays every issue of `repo` and collects the problems.
pub fn verify(repo: &Repository) -> Result<VerifyReport> {
    let replays = state::replay_all(repo)?;
    let mut report = VerifyReport {
        ok: true,
        issues: replays.len(),
        events: replays.iter().map(|r| r.events).sum(),
        allowlist: crate::record::trust::trust_path(repo).exists(),
        dropped: Vec::new(),
        invalid_issues: Vec::new(),
    };
    for replay in replays {
        if let Err(reason) = &replay.state {
            report.invalid_issues.push(InvalidIssue {
                issue: replay.id.clone(),
                reason: reason.clone(),
            });
        }
        report
            .dropped
            .extend(replay.dropped.into_iter().map(|event| Problem {
                issue: replay.id.clone(),
                event,
            }));
    }
    report.ok = report.dropped.is_empty() && report.invalid_issues.is_empty();
    Ok(report)
}
