//! `git-collab verify`: replays every issue and reports what replay drops
//! (bad signatures, untrusted keys, malformed or misplaced events) and the
//! issues that are invalid as a whole (their root event was dropped); then
//! does the same for each server export held here (`export.rs`), which
//! counts as checked only when an allowlist exists, that is once the
//! server's key has been trusted: without one, any validly signed export
//! would pass. The server's patch export is checked the same way.

use git2::Repository;
use serde::Serialize;

use crate::error::Result;
use crate::export;
use crate::replay::DroppedEvent;
use crate::state::{self, IssueReplay};
use crate::trust::TrustList;

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
    /// The server exports held here, one per remote that has one.
    pub exports: Vec<ExportReport>,
}

/// The outcome of verifying the export of one remote's server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportReport {
    pub remote: String,
    /// True when the allowlist exists, so only trusted keys (the server's)
    /// may sign the export; false means signatures were checked but any
    /// key would have passed.
    pub checked: bool,
    /// Number of exported issue DAGs examined.
    pub issues: usize,
    /// Number of event commits examined.
    pub events: usize,
    pub dropped: Vec<Problem>,
    pub invalid_issues: Vec<InvalidIssue>,
    /// Number of exported patch DAGs examined.
    pub patches: usize,
    /// Events dropped from exported patches (`issue` names the patch).
    pub dropped_patch_events: Vec<Problem>,
    /// Exported patches that cannot be shown at all (`issue` names the
    /// patch).
    pub invalid_patches: Vec<InvalidIssue>,
}

/// Replays every issue of `repo`, and every server export it holds, and
/// collects the problems.
pub fn verify(repo: &Repository) -> Result<VerifyReport> {
    let replays = state::replay_all(repo)?;
    let trust = TrustList::load(repo)?;
    let mut report = VerifyReport {
        ok: true,
        issues: replays.len(),
        events: replays.iter().map(|r| r.events).sum(),
        allowlist: trust.is_some(),
        dropped: Vec::new(),
        invalid_issues: Vec::new(),
        exports: Vec::new(),
    };
    collect(replays, &mut report.dropped, &mut report.invalid_issues);
    for remote in repo.remotes()?.iter().flatten().flatten() {
        let replays = export::replay_all(repo, remote, trust.as_ref())?;
        let patches = export::replay_all_patches(repo, remote, trust.as_ref())?;
        if replays.is_empty() && patches.is_empty() {
            continue;
        }
        let mut export = ExportReport {
            remote: remote.to_string(),
            checked: trust.is_some(),
            issues: replays.len(),
            events: replays.iter().map(|r| r.events).sum(),
            dropped: Vec::new(),
            invalid_issues: Vec::new(),
            patches: patches.len(),
            dropped_patch_events: Vec::new(),
            invalid_patches: Vec::new(),
        };
        collect(replays, &mut export.dropped, &mut export.invalid_issues);
        for replay in patches {
            if let Err(reason) = &replay.state {
                export.invalid_patches.push(InvalidIssue {
                    issue: replay.id.clone(),
                    reason: reason.clone(),
                });
            }
            export
                .dropped_patch_events
                .extend(replay.dropped.into_iter().map(|event| Problem {
                    issue: replay.id.clone(),
                    event,
                }));
        }
        report.exports.push(export);
    }
    report.ok = report.dropped.is_empty()
        && report.invalid_issues.is_empty()
        && report.exports.iter().all(|e| {
            e.dropped.is_empty()
                && e.invalid_issues.is_empty()
                && e.dropped_patch_events.is_empty()
                && e.invalid_patches.is_empty()
        });
    Ok(report)
}

fn collect(replays: Vec<IssueReplay>, dropped: &mut Vec<Problem>, invalid: &mut Vec<InvalidIssue>) {
    for replay in replays {
        if let Err(reason) = &replay.state {
            invalid.push(InvalidIssue {
                issue: replay.id.clone(),
                reason: reason.clone(),
            });
        }
        dropped.extend(replay.dropped.into_iter().map(|event| Problem {
            issue: replay.id.clone(),
            event,
        }));
    }
}
