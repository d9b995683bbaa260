//! Ref names of the collab record. This is the only module that spells
//! `refs/collab/...` (and the sync tracking namespace); everything else asks
//! it for names and parses names through it.

/// Every collab ref lives under this prefix.
pub const COLLAB_PREFIX: &str = "refs/collab/";
/// Issue DAGs: `refs/collab/issues/<40-hex root oid>`.
pub const ISSUES_PREFIX: &str = "refs/collab/issues/";
/// Patch DAGs: `refs/collab/patches/<40-hex root oid>`.
pub const PATCHES_PREFIX: &str = "refs/collab/patches/";
/// Glob matching every issue ref (for `references_glob`, `for-each-ref`).
pub const ISSUES_GLOB: &str = "refs/collab/issues/*";
/// The refspec pattern matching every collab ref.
pub const COLLAB_GLOB: &str = "refs/collab/*";
/// Remote-tracking copies of a remote's collab refs live under
/// `refs/collab-remotes/<remote>/...`: outside `refs/collab/` so that pushing
/// `refs/collab/*` never pushes them back and replay never lists them.
pub const TRACKING_ROOT: &str = "refs/collab-remotes/";

/// Patch revision pins: `refs/collab/revisions/<patch id>/<n>`.
pub const REVISIONS_PREFIX: &str = "refs/collab/revisions/";
/// Glob matching every patch ref.
pub const PATCHES_GLOB: &str = "refs/collab/patches/*";
/// Local branches made by `git-collab patch checkout` live under
/// `refs/heads/patch/`.
pub const PATCH_BRANCH_PREFIX: &str = "patch/";

/// The ref holding the DAG of patch `full_id`.
pub fn patch_ref(full_id: &str) -> String {
    format!("{PATCHES_PREFIX}{full_id}")
}

/// The patch id of a patch ref, if `name` is one.
pub fn patch_id_of(name: &str) -> Option<&str> {
    let id = name.strip_prefix(PATCHES_PREFIX)?;
    is_full_hex_id(id).then_some(id)
}

/// The pin keeping revision `n` of patch `patch_id` reachable.
pub fn revision_ref(patch_id: &str, n: u32) -> String {
    format!("{REVISIONS_PREFIX}{patch_id}/{n}")
}

/// Glob matching every revision pin of `patch_id`.
pub fn revisions_glob(patch_id: &str) -> String {
    format!("{REVISIONS_PREFIX}{patch_id}/*")
}

/// `(patch id, n)` of a revision pin, if `name` is one.
pub fn revision_of(name: &str) -> Option<(&str, u32)> {
    let (id, n) = name.strip_prefix(REVISIONS_PREFIX)?.split_once('/')?;
    let n: u32 = n.parse().ok().filter(|n| *n > 0)?;
    is_full_hex_id(id).then_some((id, n))
}

/// A local branch, `refs/heads/<branch>`.
pub fn branch_ref(branch: &str) -> String {
    format!("refs/heads/{branch}")
}

/// The remote-tracking branch `refs/remotes/<remote>/<branch>`.
pub fn remote_branch_ref(remote: &str, branch: &str) -> String {
    format!("refs/remotes/{remote}/{branch}")
}

/// The fetch refspec sync uses to update the remote's branches (as a plain
/// `git fetch <remote>` does), so the merge scan sees merges made there.
pub fn remote_branches_refspec(remote: &str) -> String {
    format!("+refs/heads/*:refs/remotes/{remote}/*")
}

/// The local branch `git-collab patch checkout` makes for a patch.
pub fn patch_branch(short_id: &str) -> String {
    format!("{PATCH_BRANCH_PREFIX}{short_id}")
}

/// Signed, read-only export of the server's record (written by the server
/// only): `refs/collab/export/...`, e.g. `refs/collab/export/issues/<issue
/// id>`. A clone keeps it only in its tracking namespace
/// (`refs/collab-remotes/<remote>/export/...`), never under `refs/collab/`,
/// so sync never joins or pushes it.
pub const EXPORT_PREFIX: &str = "refs/collab/export/";

/// The server's export of issue `full_id`, in the repository the server
/// serves: `refs/collab/export/issues/<id>`.
pub fn server_export_issue_ref(full_id: &str) -> String {
    format!("{EXPORT_PREFIX}issues/{full_id}")
}

/// The server's export of patch `full_id`, in the repository the server
/// serves: `refs/collab/export/patches/<id>`.
pub fn server_export_patch_ref(full_id: &str) -> String {
    format!("{EXPORT_PREFIX}patches/{full_id}")
}

/// Where a clone keeps the export of `remote`'s patch `full_id`.
pub fn export_patch_ref(remote: &str, full_id: &str) -> String {
    format!("{}export/patches/{full_id}", tracking_prefix(remote))
}

/// Glob matching the export of every patch of `remote` in a clone.
pub fn export_patches_glob(remote: &str) -> String {
    format!("{}export/patches/*", tracking_prefix(remote))
}

/// The patch id of a patch export ref of `remote` in a clone, if `name` is
/// one.
pub fn export_patch_id_of<'a>(remote: &str, name: &'a str) -> Option<&'a str> {
    let id = name
        .strip_prefix(&tracking_prefix(remote))?
        .strip_prefix("export/patches/")?;
    is_full_hex_id(id).then_some(id)
}

/// Push-to-review: `git push origin HEAD:refs/for/<base>` proposes a patch
/// against branch `<base>`. The server never stores these refs: its
/// `proc-receive` hook takes the update and records a patch revision.
pub const FOR_REVIEW_PREFIX: &str = "refs/for/";

/// The base branch a `refs/for/<base>` push names, if `name` is one.
pub fn for_review_base(name: &str) -> Option<&str> {
    name.strip_prefix(FOR_REVIEW_PREFIX)
        .filter(|b| !b.is_empty())
}

/// Git notes (`git notes`), e.g. `refs/notes/commits`.
pub const NOTES_PREFIX: &str = "refs/notes/";

/// Git tags, which releases attach to.
pub const TAGS_PREFIX: &str = "refs/tags/";

/// The ref of tag `name`: `refs/tags/<name>`.
pub fn tag_ref(name: &str) -> String {
    format!("{TAGS_PREFIX}{name}")
}

/// The ref holding the DAG of issue `full_id`.
pub fn issue_ref(full_id: &str) -> String {
    format!("{ISSUES_PREFIX}{full_id}")
}

/// The issue id of an issue ref, if `name` is one (`refs/collab/issues/<id>`
/// with a 40-hex id).
pub fn issue_id_of(name: &str) -> Option<&str> {
    let id = name.strip_prefix(ISSUES_PREFIX)?;
    is_full_hex_id(id).then_some(id)
}

/// True for a full 40-digit lowercase hex object id.
pub fn is_full_hex_id(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The tracking prefix for `remote`: `refs/collab-remotes/<remote>/`.
pub fn tracking_prefix(remote: &str) -> String {
    format!("{TRACKING_ROOT}{remote}/")
}

/// The fetch refspec that mirrors a remote's collab refs into its tracking
/// namespace (forced: the tracking copy always follows the remote).
pub fn tracking_refspec(remote: &str) -> String {
    format!("+{COLLAB_GLOB}:{}*", tracking_prefix(remote))
}

/// The push refspec for sync: every local collab ref to the same name,
/// never forced (the remote refuses a push that would lose events).
pub fn push_refspec() -> String {
    format!("{COLLAB_GLOB}:{COLLAB_GLOB}")
}

/// The prefixes a git-collab server holds itself (issues, patches, their
/// revision pins and merge-queue groups): sync never pushes them to such a
/// server.
pub const SERVER_HELD_PREFIXES: &[&str] = &[
    ISSUES_PREFIX,
    PATCHES_PREFIX,
    REVISIONS_PREFIX,
    QUEUE_PREFIX,
];

/// Merge-queue group commits, written by the server only:
/// `refs/collab/queue/<branch>/<n>`.
pub const QUEUE_PREFIX: &str = "refs/collab/queue/";

/// The ref of merge group `n` of `branch`'s queue.
pub fn queue_group_ref(branch: &str, n: i64) -> String {
    format!("{QUEUE_PREFIX}{branch}/{n}")
}

/// The negative refspecs that keep [`SERVER_HELD_PREFIXES`] out of sync's
/// push (server mode).
pub fn not_server_held_refspecs() -> Vec<String> {
    SERVER_HELD_PREFIXES
        .iter()
        .map(|prefix| format!("^{prefix}*"))
        .collect()
}

/// Maps a tracking ref `refs/collab-remotes/<remote>/<rest>` back to the
/// local collab ref `refs/collab/<rest>`; `None` for the server's export,
/// which stays in the tracking namespace.
pub fn local_for_tracking(remote: &str, tracking: &str) -> Option<String> {
    let rest = tracking.strip_prefix(&tracking_prefix(remote))?;
    let local = format!("{COLLAB_PREFIX}{rest}");
    (!rest.is_empty() && !local.starts_with(EXPORT_PREFIX)).then_some(local)
}

/// The fetch refspec that mirrors only the server's export into the
/// tracking namespace of `remote` (forced: the copy follows the server).
pub fn export_refspec(remote: &str) -> String {
    format!("+{EXPORT_PREFIX}*:{}export/*", tracking_prefix(remote))
}

/// Where a clone keeps the export of `remote`'s issue `full_id`.
pub fn export_issue_ref(remote: &str, full_id: &str) -> String {
    format!("{}export/issues/{full_id}", tracking_prefix(remote))
}

/// Glob matching the export of every issue of `remote` in a clone.
pub fn export_issues_glob(remote: &str) -> String {
    format!("{}export/issues/*", tracking_prefix(remote))
}

/// The issue id of an export ref of `remote` in a clone, if `name` is one.
pub fn export_issue_id_of<'a>(remote: &str, name: &'a str) -> Option<&'a str> {
    let id = name
        .strip_prefix(&tracking_prefix(remote))?
        .strip_prefix("export/issues/")?;
    is_full_hex_id(id).then_some(id)
}

/// True when the collab ref `name` holds an event DAG (issues, patches), so
/// that two diverged tips may be joined by a structural merge. Other collab
/// refs (e.g. patch revision refs) point at code and are never merged.
pub fn is_dag_ref(name: &str) -> bool {
    [ISSUES_PREFIX, PATCHES_PREFIX]
        .iter()
        .any(|p| name.strip_prefix(p).is_some_and(is_full_hex_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn issue_ref_round_trips() {
        assert_eq!(issue_id_of(&issue_ref(ID)), Some(ID));
        assert_eq!(issue_id_of("refs/collab/issues/abc"), None);
        assert_eq!(issue_id_of("refs/heads/main"), None);
    }

    #[test]
    fn tracking_maps_back_to_local() {
        let t = format!("{}issues/{ID}", tracking_prefix("origin"));
        assert_eq!(
            local_for_tracking("origin", &t),
            Some(issue_ref(ID)),
            "tracking ref maps to the local issue ref"
        );
        assert_eq!(local_for_tracking("other", &t), None);
        let export = export_issue_ref("origin", ID);
        assert_eq!(local_for_tracking("origin", &export), None, "export stays");
        assert_eq!(export_issue_id_of("origin", &export), Some(ID));
        assert_eq!(export_issue_id_of("other", &export), None);
        let patch = export_patch_ref("origin", ID);
        assert_eq!(export_patch_id_of("origin", &patch), Some(ID));
        assert_eq!(export_issue_id_of("origin", &patch), None);
        assert_eq!(local_for_tracking("origin", &patch), None, "export stays");
        assert!(server_export_patch_ref(ID).starts_with(EXPORT_PREFIX));
        assert_eq!(
            export_refspec("origin"),
            "+refs/collab/export/*:refs/collab-remotes/origin/export/*"
        );
        assert_eq!(
            tracking_refspec("origin"),
            "+refs/collab/*:refs/collab-remotes/origin/*"
        );
    }

    #[test]
    fn patch_and_revision_refs_round_trip() {
        assert_eq!(patch_id_of(&patch_ref(ID)), Some(ID));
        assert_eq!(patch_id_of(&issue_ref(ID)), None);
        assert_eq!(revision_of(&revision_ref(ID, 12)), Some((ID, 12)));
        assert_eq!(revision_of(&format!("{REVISIONS_PREFIX}{ID}/0")), None);
        assert_eq!(revision_of(&format!("{REVISIONS_PREFIX}{ID}/x")), None);
        assert_eq!(revision_of(&format!("{REVISIONS_PREFIX}abc/1")), None);
        assert!(revision_ref(ID, 3).starts_with(&revisions_glob(ID).replace('*', "")));
    }

    #[test]
    fn only_event_dags_are_mergeable() {
        assert!(is_dag_ref(&issue_ref(ID)));
        assert!(is_dag_ref(&format!("{PATCHES_PREFIX}{ID}")));
        assert!(!is_dag_ref(&format!("refs/collab/revisions/{ID}/1")));
    }
}
