//! Patches are held by the server (`collab.db`): opened and revised by
//! `git push origin HEAD:refs/for/<base>` (`review`), reviewed, commented
//! and merged through `collab-patch`. A push that creates, moves or deletes
//! a patch DAG ref (`refs/collab/patches/*`, what `git collab patch …` and
//! `sync` wrote before) is refused with one line saying so. The DAGs
//! already in a repository stay as they were imported (`patch_import`, at
//! start and on first use, before any push can reach the repository), a
//! read-only record of the history before the server took over; the
//! server's own signed copy is `refs/collab/export/patches/*`. The revision
//! pins beside them (`refs/collab/revisions/*`) are the server's too
//! (`access::SERVER_MAINTAINED_PREFIXES`).

use super::{HookContext, RefUpdate, Refusal};
use git_collab::record::refs;

/// The one line a refused push gets.
pub const REFUSAL: &str =
    "patches are kept by the server: use `git push origin HEAD:refs/for/<base>` \
     (-o patch=<id> for a new revision) or `collab-patch` (refs/collab/patches/* cannot be \
     pushed; nothing was changed)";

pub fn check(_ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), Refusal> {
    if updates
        .iter()
        .any(|u| u.refname.starts_with(refs::PATCHES_PREFIX))
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
    fn patch_refs_are_refused_in_every_form_and_the_rest_passes() {
        let patch = refs::patch_ref(&"a".repeat(40));
        for (old, new) in [(false, true), (true, true), (true, false)] {
            let refused = check(
                &ctx(),
                &[
                    update("refs/heads/main", false, true),
                    update(&patch, old, new),
                ],
            );
            assert_eq!(refused, Err(Refusal::one(REFUSAL)));
        }
        let fine = [
            update("refs/heads/main", true, true),
            update("refs/for/main", false, true),
            update("refs/tags/v1", false, true),
        ];
        assert_eq!(check(&ctx(), &fine), Ok(()));
    }
}
