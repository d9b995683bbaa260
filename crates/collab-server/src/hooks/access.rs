//! Per-ref access: which level each ref update of a push needs, checked
//! against the pusher's level on the repository (decided by `authz` before
//! `git receive-pack` started, passed in the hook context).
//!
//! The rules, for every ref namespace and in both regimes:
//!
//! | update | needs |
//! |---|---|
//! | create any ref | write |
//! | fast-forward a branch, a collab ref, a note, any other ref | write |
//! | non-fast-forward update of any ref (a collab DAG only grows) | rewind |
//! | move a tag (`refs/tags/*`), even forward | rewind |
//! | delete any ref | rewind |
//! | anything under a server-maintained prefix | refused to every client |
//!
//! git's own `receive.denyDeletes` / `receive.denyNonFastForwards`, which
//! `ssh/git.rs` still sets below rewind, only guard branches; this check is
//! the one that holds.

use git2::{Oid, Repository};

use super::check::Refusal;
use super::context::HookContext;
use super::updates::RefUpdate;
use collab_proto::Access;
use collab_record::refs;

/// Ref prefixes only the server writes; a client push touching one is
/// refused whatever the pusher's level. Add a prefix here when the server
/// starts maintaining a namespace.
///
/// `refs/collab/revisions/*` is the server's since the client-written
/// patch DAGs are imported (`objects::import::patch`, at start, before the
/// server listens): the server writes every revision pin itself, from the
/// `proc-receive` hook (`hooks::review`) and the import, never through a
/// push, so no client push may touch one.
///
/// `refs/collab/queue/*` holds the merge queue's group commits, built by
/// the server (`crate::merge_queue`) for CI to test.
pub const SERVER_MAINTAINED_PREFIXES: &[&str] = &[
    refs::EXPORT_PREFIX,
    refs::REVISIONS_PREFIX,
    refs::QUEUE_PREFIX,
];

/// What an update does to its ref.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Create,
    /// The new tip descends from the old one.
    FastForward,
    /// Anything else that keeps the ref: history is lost from this ref.
    Rewrite,
    Delete,
}

/// What the rules say about one update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Allowed at `Access` or above; `&str` says what the update does.
    Needs(Access, &'static str),
    /// Never accepted from a client.
    ServerMaintained,
}

/// The rule for `change` on `refname`.
pub fn rule(refname: &str, change: Change) -> Rule {
    if is_server_maintained(refname) {
        return Rule::ServerMaintained;
    }
    let is_tag = refname.starts_with(refs::TAGS_PREFIX);
    let is_collab = refname.starts_with(refs::COLLAB_PREFIX);
    match change {
        Change::Create => Rule::Needs(Access::Write, "creating a ref"),
        Change::Delete => Rule::Needs(Access::Rewind, "deleting a ref"),
        _ if is_tag => Rule::Needs(Access::Rewind, "moving a tag"),
        Change::FastForward => Rule::Needs(Access::Write, "updating a ref"),
        Change::Rewrite if is_collab => Rule::Needs(
            Access::Rewind,
            "rewriting a collab record (its history only grows)",
        ),
        Change::Rewrite => Rule::Needs(Access::Rewind, "a non-fast-forward update"),
    }
}

pub fn is_server_maintained(refname: &str) -> bool {
    SERVER_MAINTAINED_PREFIXES
        .iter()
        .any(|p| refname.starts_with(p))
}

/// The refusal line for `update` at `level`, if the rules refuse it.
pub fn judge(refname: &str, change: Change, level: Access) -> Option<String> {
    match rule(refname, change) {
        Rule::ServerMaintained if refname.starts_with(refs::REVISIONS_PREFIX) => Some(format!(
            "{refname}: maintained by the server; push to refs/for/<base> \
             (-o patch=<id> adds a revision) and the server writes it"
        )),
        Rule::ServerMaintained => Some(format!(
            "{refname}: maintained by the server; clients cannot push it"
        )),
        Rule::Needs(needed, what) if level < needed => Some(format!(
            "{refname}: {what} needs {} access",
            needed.as_str()
        )),
        Rule::Needs(..) => None,
    }
}

/// The pipeline check: every update judged, every refusal reported.
pub fn check(ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), Refusal> {
    let mut repo: Option<Repository> = None;
    let mut refused = Vec::new();
    for update in updates {
        let change = match (update.old, update.new) {
            (None, Some(_)) => Change::Create,
            (_, None) => Change::Delete,
            (Some(old), Some(new)) => {
                if repo.is_none() {
                    repo = Some(ctx.open_repo().map_err(Refusal::one)?);
                }
                let repo = repo.as_ref().expect("opened above");
                if is_fast_forward(repo, old, new) {
                    Change::FastForward
                } else {
                    Change::Rewrite
                }
            }
        };
        if let Some(line) = judge(&update.refname, change, ctx.access) {
            refused.push(line);
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Refusal(refused))
    }
}

/// Whether `new` descends from `old` (both peeled to commits, as git's own
/// fast-forward check does). Anything that cannot be shown to descend is
/// not a fast-forward.
fn is_fast_forward(repo: &Repository, old: Oid, new: Oid) -> bool {
    let commit = |oid| {
        repo.find_object(oid, None)
            .and_then(|o| o.peel_to_commit())
            .map(|c| c.id())
    };
    match (commit(old), commit(new)) {
        (Ok(old), Ok(new)) => old == new || repo.graph_descendant_of(new, old).unwrap_or(false),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Access::*;
    use Change::*;

    const ISSUE: &str = "refs/collab/issues/0123456789abcdef0123456789abcdef01234567";

    fn allowed(refname: &str, change: Change, level: Access) -> bool {
        judge(refname, change, level).is_none()
    }

    #[test]
    fn writers_create_and_fast_forward_everywhere() {
        for r in [
            "refs/heads/main",
            "refs/tags/v1",
            ISSUE,
            "refs/notes/commits",
            "refs/x/y",
        ] {
            assert!(allowed(r, Create, Write), "{r}");
            assert!(!allowed(r, Create, Read), "{r}");
            assert!(!allowed(r, Delete, Write), "{r}");
            assert!(allowed(r, Delete, Rewind), "{r}");
            assert!(!allowed(r, Rewrite, Write), "{r}");
            assert!(allowed(r, Rewrite, Rewind), "{r}");
        }
        for r in ["refs/heads/main", ISSUE, "refs/notes/commits", "refs/x/y"] {
            assert!(allowed(r, FastForward, Write), "{r}");
        }
    }

    #[test]
    fn tags_never_move_below_rewind() {
        assert_eq!(
            judge("refs/tags/v1.0", FastForward, Write).unwrap(),
            "refs/tags/v1.0: moving a tag needs rewind access"
        );
        assert!(allowed("refs/tags/v1.0", FastForward, Rewind));
        assert_eq!(
            judge("refs/tags/v1.0", Delete, Write).unwrap(),
            "refs/tags/v1.0: deleting a ref needs rewind access"
        );
    }

    #[test]
    fn collab_history_only_grows() {
        let line = judge(ISSUE, Rewrite, Write).unwrap();
        assert!(
            line.starts_with(ISSUE) && line.ends_with("needs rewind access"),
            "{line}"
        );
        assert!(line.contains("collab record"), "{line}");
    }

    #[test]
    fn server_maintained_refs_are_refused_to_everyone() {
        let r = format!("{}issues/x", refs::EXPORT_PREFIX);
        for change in [Create, FastForward, Rewrite, Delete] {
            assert_eq!(rule(&r, change), Rule::ServerMaintained);
            assert!(!allowed(&r, change, Rewind));
        }
        assert!(!is_server_maintained(ISSUE));
        let pin = refs::revision_ref(&"a".repeat(40), 1);
        for change in [Create, FastForward, Rewrite, Delete] {
            assert_eq!(rule(&pin, change), Rule::ServerMaintained);
        }
        assert!(judge(&pin, Create, Rewind)
            .unwrap()
            .contains("push to refs/for/<base>"));
    }
}
