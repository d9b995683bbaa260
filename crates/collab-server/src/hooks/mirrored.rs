//! A repository with a pull mirror holds its upstream's refs: the mirror's
//! next fetch would overwrite (or prune) whatever a user pushed, so a push
//! to any ref it mirrors (everything but `refs/collab/*`, which the fetch
//! never touches and other checks guard) is refused, whole, with one line
//! saying why. Push-to-review (`refs/for/<base>`) still works: it stores no
//! ref of that name, it opens a patch.

use super::check::Refusal;
use super::context::HookContext;
use super::updates::RefUpdate;
use collab_record::refs;

/// The refusal of a push to a mirrored ref.
pub fn refusal(refname: &str) -> String {
    format!(
        "{refname}: this repository is a pull mirror; its refs come from the upstream \
         (push there, or open a patch with `git push origin HEAD:refs/for/<base>`); \
         nothing was changed"
    )
}

/// Whether `refname` is one a pull mirror's fetch writes.
fn mirrored(refname: &str) -> bool {
    !refname.starts_with(refs::COLLAB_PREFIX) && refs::for_review_base(refname).is_none()
}

pub fn check(ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), Refusal> {
    let Some(first) = updates.iter().find(|u| mirrored(&u.refname)) else {
        return Ok(());
    };
    let conn = collab_store::open_reader(&ctx.collab_db)
        .map_err(|e| Refusal::one(format!("push refused: cannot read the mirror list: {e}")))?;
    match collab_store::mirrors::has_pull(&conn, &ctx.repo) {
        Ok(false) => Ok(()),
        Ok(true) => Err(Refusal::one(refusal(&first.refname))),
        Err(e) => Err(Refusal::one(format!(
            "push refused: cannot read the mirror list: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_but_the_record_and_review_pushes_is_mirrored() {
        assert!(mirrored("refs/heads/main"));
        assert!(mirrored("refs/tags/v1"));
        assert!(mirrored("refs/notes/commits"));
        assert!(!mirrored("refs/collab/export/issues/x"));
        assert!(!mirrored("refs/for/main"));
    }
}
