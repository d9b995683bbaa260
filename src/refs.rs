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

/// Maps a tracking ref `refs/collab-remotes/<remote>/<rest>` back to the
/// local collab ref `refs/collab/<rest>`.
pub fn local_for_tracking(remote: &str, tracking: &str) -> Option<String> {
    let rest = tracking.strip_prefix(&tracking_prefix(remote))?;
    (!rest.is_empty()).then(|| format!("{COLLAB_PREFIX}{rest}"))
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
        assert_eq!(
            tracking_refspec("origin"),
            "+refs/collab/*:refs/collab-remotes/origin/*"
        );
    }

    #[test]
    fn only_event_dags_are_mergeable() {
        assert!(is_dag_ref(&issue_ref(ID)));
        assert!(is_dag_ref(&format!("{PATCHES_PREFIX}{ID}")));
        assert!(!is_dag_ref(&format!("refs/collab/revisions/{ID}/1")));
    }
}
