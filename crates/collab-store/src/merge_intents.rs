//! Merge intents (`collab-patch merge --when-green`): "merge this patch's
//! revision N as soon as the merge rule allows it", held by the server so
//! that no client has to stay connected. One row per patch; the server's
//! merge driver (`collab-server`'s `auto_merge`) claims a row before it
//! merges (one node at a time, a claim with a deadline so a dead node's
//! claim lapses), and deletes it when the patch merges or the intent is
//! dropped. Every queue and drop is an event on the patch
//! (`patch.merge_queued`, `patch.merge_dequeued` with the reason), in the
//! same transaction as the row.

use crate::objects::{self, person_at, Person};
use crate::sql::{params, Connection, OptionalExtension as _};
use serde_json::json;

/// The most intents one repository may hold (the verb refuses beyond).
pub const MAX_PER_REPO: i64 = 1000;

/// A stored intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub repo: String,
    pub patch: String,
    /// The revision that was latest when the merge was asked for: a newer
    /// one drops the intent (it was not the one reviewed).
    pub revision: i64,
    /// Who asked: the merger recorded, and whose lease fences the merge.
    pub requester: Person,
    /// `--lease-token`, checked again at merge time.
    pub lease_token: Option<i64>,
    /// Unix seconds.
    pub created_at: i64,
}

const COLUMNS: &str =
    "repo, patch_id, revision, requested_by, requester_name, requester_key, lease_token, created_at";

fn from_row(r: &crate::sql::Row<'_>) -> crate::sql::Result<Intent> {
    Ok(Intent {
        repo: r.get(0)?,
        patch: r.get(1)?,
        revision: r.get(2)?,
        requester: person_at(r, 3)?,
        lease_token: r.get(6)?,
        created_at: r.get(7)?,
    })
}

/// Record (or replace) the intent to merge `intent.patch` at
/// `intent.revision`, and append `patch.merge_queued`. Returns the event's
/// seq and whether an earlier intent was replaced.
pub fn queue(conn: &Connection, intent: &Intent, now: i64) -> crate::sql::Result<(i64, bool)> {
    let replaced = conn.execute(
        "DELETE FROM merge_intents WHERE repo = ?1 AND patch_id = ?2",
        params![intent.repo, intent.patch],
    )? > 0;
    conn.execute(
        &format!("INSERT INTO merge_intents ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
        params![
            intent.repo,
            intent.patch,
            intent.revision,
            intent.requester.principal,
            intent.requester.name,
            intent.requester.key,
            intent.lease_token,
            now,
        ],
    )?;
    let seq = objects::append_event(
        conn,
        "patch.merge_queued",
        &intent.repo,
        &intent.patch,
        Some(&intent.requester),
        json!({
            "revision": intent.revision,
            "requested_by": intent.requester.principal,
            "lease_token": intent.lease_token,
            "replaced": replaced,
        }),
        now,
    )?;
    // The queue's order (a merge queue takes patches in this order): one
    // past the repository's last. Not the event's seq: on PostgreSQL that
    // is a provisional number until COMMIT (event_log), and provisional
    // numbers run downwards.
    conn.execute(
        "UPDATE merge_intents SET queued_seq =
             (SELECT COALESCE(MAX(queued_seq), 0) + 1 FROM merge_intents WHERE repo = ?1)
         WHERE repo = ?1 AND patch_id = ?2",
        params![intent.repo, intent.patch],
    )?;
    Ok((seq, replaced))
}

/// The intent on `patch` of `repo`, if any.
pub fn get(conn: &Connection, repo: &str, patch: &str) -> crate::sql::Result<Option<Intent>> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM merge_intents WHERE repo = ?1 AND patch_id = ?2"),
        params![repo, patch],
        from_row,
    )
    .optional()
}

/// Every intent, oldest first, at most `limit`.
pub fn all(conn: &Connection, limit: i64) -> crate::sql::Result<Vec<Intent>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM merge_intents ORDER BY created_at, repo, patch_id LIMIT ?1"
    ))?;
    let rows = stmt.query_map(params![limit], from_row)?;
    rows.collect()
}

/// How many intents in `repo` `principal` asked for (`collab-lease next
/// --wait` watches for them to settle only when there are some).
pub fn count_requested_by(
    conn: &Connection,
    repo: &str,
    principal: &str,
) -> crate::sql::Result<i64> {
    conn.query_row(
        "SELECT COUNT(*) FROM merge_intents WHERE repo = ?1 AND requested_by = ?2",
        params![repo, principal],
        |r| r.get(0),
    )
}

/// How many intents `repo` holds.
pub fn count_in(conn: &Connection, repo: &str) -> crate::sql::Result<i64> {
    conn.query_row(
        "SELECT COUNT(*) FROM merge_intents WHERE repo = ?1",
        params![repo],
        |r| r.get(0),
    )
}

/// Drop the intent on `patch` (if there is one) and append
/// `patch.merge_dequeued` with `reason`, by `actor` (the canceller, or
/// `None` for the server). Returns the event's seq, `None` when there was
/// no intent.
pub fn dequeue(
    conn: &Connection,
    repo: &str,
    patch: &str,
    actor: Option<&Person>,
    reason: &str,
    now: i64,
) -> crate::sql::Result<Option<i64>> {
    let Some(intent) = get(conn, repo, patch)? else {
        return Ok(None);
    };
    conn.execute(
        "DELETE FROM merge_intents WHERE repo = ?1 AND patch_id = ?2",
        params![repo, patch],
    )?;
    // The queue no longer carries the tenure it held: its TTL runs again.
    crate::queue_holds::release_in(conn, repo, patch, now)?;
    let seq = objects::append_event(
        conn,
        "patch.merge_dequeued",
        repo,
        patch,
        actor,
        json!({
            "revision": intent.revision,
            "requested_by": intent.requester.principal,
            "reason": reason,
        }),
        now,
    )?;
    Ok(Some(seq))
}

/// Delete the intent on `patch` without an event (it was fulfilled: the
/// patch merged). Whether there was one. A tenure the queue held for it
/// and that is still live (an issue the merge did not close) gets its TTL
/// back.
pub fn fulfil(conn: &Connection, repo: &str, patch: &str, now: i64) -> crate::sql::Result<bool> {
    crate::queue_holds::release_in(conn, repo, patch, now)?;
    Ok(conn.execute(
        "DELETE FROM merge_intents WHERE repo = ?1 AND patch_id = ?2",
        params![repo, patch],
    )? > 0)
}

/// The merge queue evicts `patch` for `reason`, its own fault (it broke
/// a group, it conflicts): the issues whose tenure it held go back to its
/// author for `policy.eviction_grace` (`queue_holds::evict_in`), then the
/// intent is dropped as [`dequeue`] does.
pub fn evict(
    conn: &Connection,
    repo: &str,
    patch: &str,
    reason: &str,
    policy: &crate::leases::Policy,
    now: i64,
) -> crate::sql::Result<Option<i64>> {
    crate::queue_holds::evict_in(conn, repo, patch, reason, policy, now)?;
    dequeue(conn, repo, patch, None, reason, now)
}

/// Claim the intent on `patch` for `node` until `until`, unless another
/// node's claim is still running. The intent as claimed, or `None`.
pub fn claim(
    conn: &Connection,
    repo: &str,
    patch: &str,
    node: &str,
    now: i64,
    until: i64,
) -> crate::sql::Result<Option<Intent>> {
    let claimed = conn.execute(
        "UPDATE merge_intents SET claimed_by = ?3, claimed_until = ?5
         WHERE repo = ?1 AND patch_id = ?2
           AND (claimed_until IS NULL OR claimed_until <= ?4 OR claimed_by = ?3)",
        params![repo, patch, node, now, until],
    )?;
    if claimed == 0 {
        return Ok(None);
    }
    get(conn, repo, patch)
}

/// End `node`'s claim on `patch` (the intent stays queued).
pub fn unclaim(conn: &Connection, repo: &str, patch: &str, node: &str) -> crate::sql::Result<()> {
    conn.execute(
        "UPDATE merge_intents SET claimed_by = NULL, claimed_until = NULL
         WHERE repo = ?1 AND patch_id = ?2 AND claimed_by = ?3",
        params![repo, patch, node],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(patch: &str) -> Intent {
        Intent {
            repo: "r.git".into(),
            patch: patch.into(),
            revision: 1,
            requester: Person {
                principal: "alice".into(),
                name: "Alice".into(),
                key: None,
            },
            lease_token: Some(3),
            created_at: 0,
        }
    }

    fn events(conn: &Connection, kind: &str) -> i64 {
        conn.query_row(
            "SELECT COUNT(*) FROM events WHERE type = ?1",
            params![kind],
            |r| r.get(0),
        )
        .unwrap()
    }

    /// Queue, replace, claim (one node at a time until the claim lapses),
    /// dequeue with an event, fulfil without one.
    #[test]
    fn queue_claim_and_drop() {
        let conn = crate::testing::db();
        let p = "a".repeat(40);
        assert!(!queue(&conn, &intent(&p), 10).unwrap().1);
        assert!(queue(&conn, &intent(&p), 11).unwrap().1);
        assert_eq!(count_in(&conn, "r.git").unwrap(), 1);
        let got = get(&conn, "r.git", &p).unwrap().unwrap();
        assert_eq!((got.created_at, got.lease_token), (11, Some(3)));

        assert!(claim(&conn, "r.git", &p, "n1", 20, 30).unwrap().is_some());
        assert!(claim(&conn, "r.git", &p, "n2", 25, 35).unwrap().is_none());
        assert!(claim(&conn, "r.git", &p, "n2", 30, 40).unwrap().is_some());
        unclaim(&conn, "r.git", &p, "n2").unwrap();
        assert!(claim(&conn, "r.git", &p, "n1", 31, 41).unwrap().is_some());

        assert!(dequeue(&conn, "r.git", &p, None, "cancelled", 40)
            .unwrap()
            .is_some());
        assert!(dequeue(&conn, "r.git", &p, None, "again", 41)
            .unwrap()
            .is_none());
        assert_eq!(events(&conn, "patch.merge_queued"), 2);
        assert_eq!(events(&conn, "patch.merge_dequeued"), 1);

        queue(&conn, &intent(&p), 50).unwrap();
        assert!(fulfil(&conn, "r.git", &p, 50).unwrap());
        assert!(all(&conn, 10).unwrap().is_empty());
        assert_eq!(events(&conn, "patch.merge_dequeued"), 1);
    }
}
