//! Issues are held by the server (`collab.db`, written by `collab-issue`):
//! a push that creates, moves or deletes an issue DAG ref
//! (`refs/collab/issues/*`) is refused with one line pointing at
//! `git collab issue …`. The DAGs already in a repository stay as they were
//! imported (`import`), a read-only record of the history before the server
//! took over; the server's own signed copy is `refs/collab/export/*`.

use super::{HookContext, RefUpdate, Refusal};
use git_collab::record::refs;

/// The one line a refused push gets.
pub const REFUSAL: &str = "issues are kept by the server: use `git collab issue …` \
     (refs/collab/issues/* cannot be pushed; nothing was changed)";

pub fn check(_ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), Refusal> {
    if updates
        .iter()
        .any(|u| u.refname.starts_with(refs::ISSUES_PREFIX))
    {
        return Err(Refusal::one(REFUSAL));
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
            access: crate::authz::Access::Rewind,
            state_dir: PathBuf::from("/nonexistent"),
            collab_db: PathBuf::from("/nonexistent/collab.db"),
            fenced_refs: Vec::new(),
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
    fn issue_refs_are_refused_in_every_form_and_the_rest_passes() {
        let issue = format!("{}{}", refs::ISSUES_PREFIX, "a".repeat(40));
        for (old, new) in [(false, true), (true, true), (true, false)] {
            let refused = check(
                &ctx(),
                &[
                    update("refs/heads/main", false, true),
                    update(&issue, old, new),
                ],
            );
            assert_eq!(refused, Err(Refusal::one(REFUSAL)));
        }
        let fine = [
            update("refs/heads/main", true, true),
            update("refs/collab/patches/abcd", false, true),
            update("refs/tags/v1", false, true),
        ];
        assert_eq!(check(&ctx(), &fine), Ok(()));
    }
}
