//! What both modes of `git-collab patch ...` share: the verdict a review's
//! flags ask for and the verb its report uses, and the `patch list` line.
//! `patch_cmd` (local mode) and `patch_server_cmd` (server mode) use it.

use collab_cli::client::terminal;
use collab_record::event::Verdict;
use collab_record::issue::short_id;

use crate::cli::VerdictFlags;

pub(crate) fn verdict_of(flags: VerdictFlags) -> Verdict {
    if flags.approve {
        Verdict::Approve
    } else if flags.request_changes {
        Verdict::RequestChanges
    } else {
        Verdict::Comment
    }
}

/// What a vote's report says was done (`approved 1a2b3c4d (revision 2)`).
pub(crate) fn verdict_verb(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Approve => "approved",
        Verdict::RequestChanges => "requested changes on",
        Verdict::Comment => "reviewed",
    }
}

/// One `patch list` line, in both modes: id, status, revision count, title
/// and base, `+N` approvals and `-N` change requests on the latest
/// revision.
pub(crate) fn list_row(
    id: &str,
    status: &str,
    revisions: usize,
    title: &str,
    base: &str,
    approvals: usize,
    changes_requested: usize,
) -> String {
    let mut votes = String::new();
    if approvals > 0 {
        votes.push_str(&format!("  +{approvals}"));
    }
    if changes_requested > 0 {
        votes.push_str(&format!("  -{changes_requested}"));
    }
    format!(
        "{}  {:<6}  r{revisions}  {} -> {}{votes}",
        short_id(id),
        terminal::line(status),
        terminal::line(title),
        terminal::line(base)
    )
}
