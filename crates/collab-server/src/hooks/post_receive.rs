//! `post-receive`: record one `ref.updated` event per ref the push changed,
//! all in one transaction (see `events::append_from_other_process`). It
//! runs after git has updated the refs, so only accepted updates are
//! recorded. The server raises the published event head once receive-pack
//! exits, which wakes the watchers and webhook workers.
//!
//! The push has already happened: a failure to record is reported to the
//! pusher as a warning and logged by the server, never turned into a
//! refusal.

use super::context::HookContext;
use super::updates::RefUpdate;
use crate::events::{append_from_other_process, Recorded};
use collab_record::refs;

/// All-zero id for a created or deleted side (SHA-1 width unless the
/// other side says otherwise).
fn zero_like(other: Option<git2::Oid>) -> String {
    let width = other.map_or(40, |oid| oid.to_string().len());
    "0".repeat(width)
}

/// The events of `updates`, in the order git reported them.
pub fn ref_events(ctx: &HookContext, updates: &[RefUpdate]) -> Vec<Recorded> {
    updates
        .iter()
        // Push-to-review updates are not stored as refs (`review`).
        .filter(|u| refs::for_review_base(&u.refname).is_none())
        .map(|u| {
            let old = u.old.map_or_else(|| zero_like(u.new), |o| o.to_string());
            let new = u.new.map_or_else(|| zero_like(u.old), |o| o.to_string());
            Recorded::ref_updated(&ctx.repo, &u.refname, &old, &new, &ctx.principal)
        })
        .collect()
}

/// Record the push's ref updates.
pub fn record(ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), String> {
    let events = ref_events(ctx, updates);
    if events.is_empty() {
        return Ok(());
    }
    append_from_other_process(&ctx.collab_db, &events)
        .map_err(|e| format!("could not record the ref.updated events: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use collab_proto::Access;

    #[test]
    fn one_event_per_update_with_zero_ids_for_create_and_delete() {
        let ctx = HookContext {
            principal: "alice".into(),
            fingerprint: "SHA256:x".into(),
            repo: "r.git".into(),
            access: Access::Write,
            state_dir: "/s".into(),
            collab_db: "/s/collab.db".into(),
            fenced_refs: Vec::new(),
            fenced_ref_issue: Vec::new(),
            others_may_revise: false,
            max_body: 1000,
            web_url: String::new(),
        };
        let a = git2::Oid::from_str("1111111111111111111111111111111111111111").unwrap();
        let updates = vec![
            RefUpdate {
                old: None,
                new: Some(a),
                refname: "refs/heads/main".into(),
            },
            RefUpdate {
                old: Some(a),
                new: None,
                refname: "refs/tags/v1".into(),
            },
        ];
        let events = ref_events(&ctx, &updates);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].payload["old"], "0".repeat(40));
        assert_eq!(events[0].payload["new"], a.to_string());
        assert_eq!(events[1].payload["new"], "0".repeat(40));
        assert_eq!(events[1].object_id.as_deref(), Some("refs/tags/v1"));
        assert_eq!(events[1].actor.as_deref(), Some("alice"));
    }
}
