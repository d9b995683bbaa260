//! `collab-lease next --wait`'s other way out: the caller's queued merges
//! (`collab-patch merge --when-green`, or a branch's merge queue) that
//! settled since the call began. An agent with patches queued and no
//! issue ready waits for "new work, or my patches merged or dropped" in
//! one call instead of looping `next --wait` and `patch show`.
//!
//! It watches only for a caller with merges queued in the repository when
//! the call began (a merge queued later, by another session of the same
//! key, is not waited for), and reads the event log (through the read
//! pool, never the writer) after the head the call began at, woken by the writer's event head (and a poll,
//! for heads raised on other nodes): a `patch.merged` whose payload says
//! the caller queued it (`requested_by`), or a `patch.merge_dequeued` of
//! a merge the caller asked for. It decides nothing and writes nothing.

use std::time::Duration;

use collab_proto::replies::lease::SettledPatch;
use serde_json::Value;

use collab_store::event_log::{self, Event};
use collab_store::merge_intents;
use collab_store::reads::ReadPool;
use collab_store::writer::Writer;

/// Events read per look.
const PAGE: i64 = 256;

/// How often it looks without a signal from the writer (another node's
/// events reach this node's head within about a second anyway).
const POLL: Duration = Duration::from_secs(1);

/// The event log's head now, where a call's "since it began" starts, if
/// `principal` has merges queued in `repo` now (read in one snapshot):
/// `None` when there is nothing of theirs to settle, and no watch is kept.
pub async fn start(reads: &ReadPool, repo: &str, principal: &str) -> anyhow::Result<Option<i64>> {
    let (repo, principal) = (repo.to_string(), principal.to_string());
    reads
        .read(move |conn| {
            let head = event_log::head(conn)?;
            let queued = merge_intents::count_requested_by(conn, &repo, &principal)?;
            Ok((queued > 0).then_some(head))
        })
        .await
}

/// Resolves with the queued merges of `principal` in `repo` that settled
/// in events after `since`, in order; pending while none did. Cancel it by
/// dropping it.
pub async fn settled(
    reads: &ReadPool,
    writer: &Writer,
    repo: &str,
    principal: &str,
    mut since: i64,
) -> Vec<SettledPatch> {
    let mut head = writer.subscribe_event_head();
    loop {
        let after = since;
        let events = match reads
            .read(move |conn| Ok(event_log::after(conn, after, PAGE)?))
            .await
        {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(repo, "next --wait: reading events: {e:#}");
                Vec::new()
            }
        };
        let more = events.len() as i64 == PAGE;
        let mut found = Vec::new();
        for event in &events {
            since = since.max(event.seq);
            found.extend(settled_patch(event, repo, principal));
        }
        if !found.is_empty() {
            return found;
        }
        if more {
            continue;
        }
        // A stopped writer (`Err` at once) leaves only the poll.
        if let Ok(Err(_)) = tokio::time::timeout(POLL, head.changed()).await {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The queued merge `event` settled, when it is one `principal` asked for
/// in `repo`.
pub fn settled_patch(event: &Event, repo: &str, principal: &str) -> Option<SettledPatch> {
    let here = event.repo_now.as_deref().or(event.repo.as_deref()) == Some(repo);
    let payload = &event.payload;
    let text = |key: &str| payload.get(key).and_then(Value::as_str);
    if !here || text("requested_by") != Some(principal) {
        return None;
    }
    let state = match event.kind.as_str() {
        "patch.merged" => "merged",
        "patch.merge_dequeued" => "evicted",
        _ => return None,
    };
    Some(SettledPatch {
        patch: event.object_id.clone()?,
        state: state.to_string(),
        revision: payload.get("revision").and_then(Value::as_i64),
        commit: (state == "merged")
            .then(|| text("commit").map(str::to_string))
            .flatten(),
        reason: text("reason").map(str::to_string),
        seq: event.seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: &str, repo: &str, payload: Value) -> Event {
        Event {
            seq: 7,
            at: 0,
            kind: kind.to_string(),
            repo: Some(repo.to_string()),
            repo_id: None,
            repo_now: Some(repo.to_string()),
            object_id: Some("p1".to_string()),
            actor: None,
            payload,
        }
    }

    #[test]
    fn only_the_callers_queued_merges_in_the_repository_settle() {
        let merged = event(
            "patch.merged",
            "r.git",
            json!({"commit": "c1", "revision": 2, "by": "queue", "queued": true, "requested_by": "alice"}),
        );
        let got = settled_patch(&merged, "r.git", "alice").unwrap();
        assert_eq!(
            (got.state.as_str(), got.commit.as_deref(), got.revision),
            ("merged", Some("c1"), Some(2))
        );
        assert_eq!(settled_patch(&merged, "r.git", "bob"), None);
        assert_eq!(settled_patch(&merged, "other.git", "alice"), None);
        let dropped = event(
            "patch.merge_dequeued",
            "r.git",
            json!({"revision": 1, "requested_by": "alice", "reason": "required check ci failed"}),
        );
        let got = settled_patch(&dropped, "r.git", "alice").unwrap();
        assert_eq!(
            (got.state.as_str(), got.reason.as_deref(), got.commit),
            ("evicted", Some("required check ci failed"), None)
        );
        // A merge nobody queued, and a queue entry's start, settle nothing.
        let direct = event(
            "patch.merged",
            "r.git",
            json!({"commit": "c", "by": "merge"}),
        );
        assert_eq!(settled_patch(&direct, "r.git", "alice"), None);
        let queued = event(
            "patch.merge_queued",
            "r.git",
            json!({"revision": 1, "requested_by": "alice"}),
        );
        assert_eq!(settled_patch(&queued, "r.git", "alice"), None);
    }
}
