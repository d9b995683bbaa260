//! Issues and patches are held by the server (`collab.db`): issues written
//! by `collab-issue`, patches opened and revised by
//! `git push origin HEAD:refs/for/<base>` (`review`) and reviewed, commented
//! and merged through `collab-patch`. A push that creates, moves or deletes
//! one of their DAG refs (`refs/collab/issues/*`, `refs/collab/patches/*`,
//! what `git collab issue|patch …` and `sync` wrote before) is refused with
//! one line saying what to use instead. The DAGs already in a repository
//! stay as they were imported (`objects::import`, at start and on
//! first use, before any push can reach the repository), a read-only record
//! of the history before the server took over; the server's own signed
//! copies are under `refs/collab/export/*`. The revision pins beside the
//! patches (`refs/collab/revisions/*`) are the server's too
//! (`access::SERVER_MAINTAINED_PREFIXES`).

use super::check::Refusal;
use super::context::HookContext;
use super::updates::RefUpdate;
use collab_record::refs;

/// The refusal of a push touching issue DAG refs.
pub const ISSUES_REFUSAL: &str = "issues are kept by the server: use `git collab issue …` \
     (refs/collab/issues/* cannot be pushed; nothing was changed)";

/// The refusal of a push touching patch DAG refs.
pub const PATCHES_REFUSAL: &str =
    "patches are kept by the server: use `git push origin HEAD:refs/for/<base>` \
     (-o patch=<id> for a new revision) or `collab-patch` (refs/collab/patches/* cannot be \
     pushed; nothing was changed)";

/// Each record prefix the server holds, with its refusal, in the order
/// they are checked.
const HELD: &[(&str, &str)] = &[
    (refs::ISSUES_PREFIX, ISSUES_REFUSAL),
    (refs::PATCHES_PREFIX, PATCHES_REFUSAL),
];

pub fn check(_ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), Refusal> {
    for (prefix, refusal) in HELD {
        if updates.iter().any(|u| u.refname.starts_with(prefix)) {
            return Err(Refusal::one(*refusal));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn ctx() -> HookContext {
        HookContext {
            principal: "alice".into(),
            fingerprint: "SHA256:x".into(),
            repo: "r.git".into(),
            access: collab_proto::Access::Rewind,
            state_dir: PathBuf::from("/nonexistent"),
            collab_db: "/nonexistent/collab.db".into(),
            fenced_refs: Vec::new(),
            fenced_ref_issue: Vec::new(),
            others_may_revise: false,
            max_body: 1000,
            web_url: String::new(),
        }
    }

    fn update(refname: &str, old: bool, new: bool) -> RefUpdate {
        let oid = git2::Oid::from_str("1111111111111111111111111111111111111111").unwrap();
        RefUpdate {
            old: old.then_some(oid),
            new: new.then_some(oid),
            refname: refname.into(),
        }
    }

    #[test]
    fn record_refs_are_refused_in_every_form_and_the_rest_passes() {
        let issue = format!("{}{}", refs::ISSUES_PREFIX, "a".repeat(40));
        let patch = refs::patch_ref(&"a".repeat(40));
        for (record, refusal) in [(&issue, ISSUES_REFUSAL), (&patch, PATCHES_REFUSAL)] {
            for (old, new) in [(false, true), (true, true), (true, false)] {
                let refused = check(
                    &ctx(),
                    &[
                        update("refs/heads/main", false, true),
                        update(record, old, new),
                    ],
                );
                assert_eq!(refused, Err(Refusal::one(refusal)));
            }
        }
        let fine = [
            update("refs/heads/main", true, true),
            update("refs/for/main", false, true),
            update("refs/tags/v1", false, true),
        ];
        assert_eq!(check(&ctx(), &fine), Ok(()));
    }
}
