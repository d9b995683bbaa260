//! Webhook subscriptions and their delivery log in `collab.db`, as plain
//! functions over a connection (`now` passed in). The delivery engine
//! (`webhooks`) decides what to send; this module only stores.
//!
//! A subscription's progress through the event log is its `cursor`: every
//! event with `seq <= cursor` has been delivered or did not match. The
//! event after the cursor may be mid-retry (`attempts`, `failing_since`,
//! `next_attempt_at`). Both move only in the writer's transactions, with
//! the attempt row that explains them, so a crash loses at most the
//! knowledge that an attempt succeeded (it is then sent again, with the
//! same `webhook-id`: at least once).

use crate::sql::{params, Connection, OptionalExtension as _};

/// A stored subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub id: String,
    /// `ssh` (added with `collab-hook add`), `config` or `governance`.
    pub origin: String,
    /// The principal that added it; `config` / `governance` for declared ones.
    pub owner: String,
    pub repo_glob: String,
    pub url: String,
    /// Type patterns; empty = every type.
    pub events: Vec<String>,
    /// `whsec_…` HMAC secret, if any.
    pub secret: Option<String>,
    pub active: bool,
    pub disabled_reason: Option<String>,
    pub created_at: i64,
    pub cursor: i64,
    pub attempts: i64,
    pub failing_since: Option<i64>,
    pub next_attempt_at: Option<i64>,
    /// Its target was not on the public internet when a non-administrator
    /// added it: it stays inactive until an administrator approves it.
    pub needs_approval: bool,
    /// The administrator who approved it.
    pub approved_by: Option<String>,
}

impl Webhook {
    /// Waiting for an administrator's `collab-hook approve`.
    pub fn pending_approval(&self) -> bool {
        self.needs_approval && self.approved_by.is_none()
    }
}

/// One HTTP attempt.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Attempt {
    pub id: i64,
    pub webhook_id: String,
    /// The `webhook-id` header (`<webhook>-<seq>`, or `<webhook>-test-…`).
    pub message_id: String,
    pub seq: Option<i64>,
    pub at: i64,
    /// HTTP status, `None` when no response came.
    pub status: Option<i64>,
    /// `delivered`, `failed` or `refused` (SSRF guard).
    pub outcome: String,
    pub latency_ms: i64,
    /// The response body (or the error), truncated.
    pub response: String,
}

const COLUMNS: &str = "id, origin, owner, repo_glob, url, events, secret, active, \
     disabled_reason, created_at, cursor, attempts, failing_since, next_attempt_at, \
     needs_approval, approved_by";

fn row(r: &crate::sql::Row<'_>) -> crate::sql::Result<Webhook> {
    let events: String = r.get(5)?;
    Ok(Webhook {
        id: r.get(0)?,
        origin: r.get(1)?,
        owner: r.get(2)?,
        repo_glob: r.get(3)?,
        url: r.get(4)?,
        events: serde_json::from_str(&events).unwrap_or_default(),
        secret: r.get(6)?,
        active: r.get::<_, i64>(7)? != 0,
        disabled_reason: r.get(8)?,
        created_at: r.get(9)?,
        cursor: r.get(10)?,
        attempts: r.get(11)?,
        failing_since: r.get(12)?,
        next_attempt_at: r.get(13)?,
        needs_approval: r.get::<_, i64>(14)? != 0,
        approved_by: r.get(15)?,
    })
}

/// Insert a new subscription (its cursor decides where delivery starts).
pub fn insert(conn: &Connection, hook: &Webhook) -> crate::sql::Result<()> {
    conn.execute(
        &format!(
            "INSERT INTO webhooks ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
        ),
        params![
            hook.id,
            hook.origin,
            hook.owner,
            hook.repo_glob,
            hook.url,
            serde_json::to_string(&hook.events).unwrap_or_else(|_| "[]".into()),
            hook.secret,
            hook.active as i64,
            hook.disabled_reason,
            hook.created_at,
            hook.cursor,
            hook.attempts,
            hook.failing_since,
            hook.next_attempt_at,
            hook.needs_approval as i64,
            hook.approved_by,
        ],
    )?;
    Ok(())
}

/// Update what a declaration says (url, glob, patterns, secret) of a
/// declared subscription, keeping its delivery state.
pub fn update_declared(conn: &Connection, hook: &Webhook) -> crate::sql::Result<()> {
    conn.execute(
        "UPDATE webhooks SET repo_glob = ?2, url = ?3, events = ?4, secret = ?5 WHERE id = ?1",
        params![
            hook.id,
            hook.repo_glob,
            hook.url,
            serde_json::to_string(&hook.events).unwrap_or_else(|_| "[]".into()),
            hook.secret,
        ],
    )?;
    Ok(())
}

pub fn get(conn: &Connection, id: &str) -> crate::sql::Result<Option<Webhook>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM webhooks WHERE id = ?1"))?
        .query_row([id], row)
        .optional()
}

/// Every subscription, oldest first.
pub fn list(conn: &Connection) -> crate::sql::Result<Vec<Webhook>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM webhooks ORDER BY created_at, id"
    ))?;
    let rows = stmt.query_map([], row)?;
    rows.collect()
}

/// Delete a subscription and its log; false if it did not exist.
pub fn remove(conn: &Connection, id: &str) -> crate::sql::Result<bool> {
    conn.execute("DELETE FROM webhook_attempts WHERE webhook_id = ?1", [id])?;
    Ok(conn.execute("DELETE FROM webhooks WHERE id = ?1", [id])? > 0)
}

/// Re-activate a subscription, clearing its failure streak; false if it
/// does not exist or still waits for an administrator's approval.
pub fn enable(conn: &Connection, id: &str) -> crate::sql::Result<bool> {
    Ok(conn.execute(
        "UPDATE webhooks SET active = 1, disabled_reason = NULL, attempts = 0,
             failing_since = NULL, next_attempt_at = NULL
         WHERE id = ?1 AND (needs_approval = 0 OR approved_by IS NOT NULL)",
        [id],
    )? > 0)
}

/// Replace the stored (sealed) secret.
pub fn set_secret(conn: &Connection, id: &str, secret: &str) -> crate::sql::Result<()> {
    conn.execute(
        "UPDATE webhooks SET secret = ?2 WHERE id = ?1",
        [id, secret],
    )?;
    Ok(())
}

/// An administrator's approval of a subscription to a non-public target:
/// recorded, and the subscription activated; false if it does not exist.
pub fn approve(conn: &Connection, id: &str, by: &str) -> crate::sql::Result<bool> {
    Ok(conn.execute(
        "UPDATE webhooks SET approved_by = ?2, active = 1, disabled_reason = NULL, attempts = 0,
             failing_since = NULL, next_attempt_at = NULL WHERE id = ?1",
        [id, by],
    )? > 0)
}

/// Log one attempt; returns its id.
pub fn log_attempt(conn: &Connection, attempt: &Attempt) -> crate::sql::Result<i64> {
    conn.prepare_cached(
        "INSERT INTO webhook_attempts (webhook_id, message_id, seq, at, status, outcome, latency_ms, response)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id",
    )?
    .query_row(
        params![
            attempt.webhook_id,
            attempt.message_id,
            attempt.seq,
            attempt.at,
            attempt.status,
            attempt.outcome,
            attempt.latency_ms,
            attempt.response,
        ],
        |r| r.get(0),
    )
}

/// The event after the cursor was delivered (or skipped): move the cursor
/// to `seq` (never backwards) and clear the retry state, if `node` still
/// holds the subscription's claim (compare-and-set: a node whose claim
/// lapsed and went to another never moves the cursor). False if it does not.
pub fn advance(conn: &Connection, id: &str, node: &str, seq: i64) -> crate::sql::Result<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE webhooks SET cursor = CASE WHEN ?2 > cursor THEN ?2 ELSE cursor END, attempts = 0,
                 failing_since = NULL, next_attempt_at = NULL
             WHERE id = ?1 AND claimed_by = ?3",
        )?
        .execute(params![id, seq, node])?
        > 0)
}

/// An attempt at the event after the cursor failed: count it and schedule
/// the next one, if `node` still holds the claim. False if it does not.
pub fn failed(
    conn: &Connection,
    id: &str,
    node: &str,
    now: i64,
    next_attempt_at: i64,
) -> crate::sql::Result<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE webhooks SET attempts = attempts + 1, failing_since = COALESCE(failing_since, ?2),
                 next_attempt_at = ?3 WHERE id = ?1 AND claimed_by = ?4",
        )?
        .execute(params![id, now, next_attempt_at, node])?
        > 0)
}

/// Whether `node` holds the claim on subscription `id` (on PostgreSQL the
/// row stays locked to the end of the transaction, so the answer holds for
/// what the transaction writes next).
pub fn holds(conn: &Connection, id: &str, node: &str) -> crate::sql::Result<bool> {
    let sql = if conn.is_postgres() {
        "SELECT 1 FROM webhooks WHERE id = ?1 AND claimed_by = ?2 FOR UPDATE"
    } else {
        "SELECT 1 FROM webhooks WHERE id = ?1 AND claimed_by = ?2"
    };
    Ok(conn
        .prepare_cached(sql)?
        .query_row(params![id, node], |r| r.get::<_, i64>(0))
        .optional()?
        .is_some())
}

/// What one node's claim pass left it with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    /// The active subscriptions this node delivers now (renewed or newly
    /// claimed), by id.
    pub held: Vec<Webhook>,
    /// The ones it gave back this pass (more than its share, or no longer
    /// active): their workers must stop.
    pub released: Vec<String>,
}

/// One node's claim pass, in one write transaction, run every few seconds
/// by each delivering node:
///
/// 1. the node says it is alive until `until` (`webhook_nodes`; entries
///    that lapsed are dropped);
/// 2. it renews its claims on active subscriptions to `until` and gives back
///    the ones no longer active;
/// 3. its share is the active subscriptions divided by the live nodes,
///    rounded up: above it, it gives back the excess (highest ids first);
///    below it, it claims free subscriptions (never claimed, given back, or
///    whose claim lapsed: a dead node's) with `FOR UPDATE SKIP LOCKED` on
///    PostgreSQL, so concurrent passes never wait on or take the same row.
///
/// On SQLite one server runs and its passes claim everything.
pub fn claim_pass(
    conn: &Connection,
    node: &str,
    now: i64,
    until: i64,
) -> crate::sql::Result<Claims> {
    conn.execute("DELETE FROM webhook_nodes WHERE seen_until < ?1", [now])?;
    conn.execute(
        "INSERT INTO webhook_nodes (node, seen_until) VALUES (?1, ?2)
         ON CONFLICT (node) DO UPDATE SET seen_until = excluded.seen_until",
        params![node, until],
    )?;
    let nodes: i64 = conn.query_row("SELECT COUNT(*) FROM webhook_nodes", [], |r| r.get(0))?;
    let active: i64 =
        conn.query_row("SELECT COUNT(*) FROM webhooks WHERE active = 1", [], |r| {
            r.get(0)
        })?;
    let share = (active + nodes.max(1) - 1) / nodes.max(1);
    let mut released: Vec<String> = {
        let mut stmt = conn.prepare_cached(
            "SELECT id FROM webhooks WHERE claimed_by = ?1 AND active = 0 ORDER BY id",
        )?;
        let rows = stmt.query_map([node], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    conn.execute(
        "UPDATE webhooks SET claimed_by = NULL, claimed_until = NULL
         WHERE claimed_by = ?1 AND active = 0",
        [node],
    )?;
    conn.execute(
        "UPDATE webhooks SET claimed_until = ?2 WHERE claimed_by = ?1",
        params![node, until],
    )?;
    let mine: Vec<String> = {
        let mut stmt =
            conn.prepare_cached("SELECT id FROM webhooks WHERE claimed_by = ?1 ORDER BY id")?;
        let rows = stmt.query_map([node], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    let held = mine.len() as i64;
    if held > share {
        for id in &mine[share as usize..] {
            conn.execute(
                "UPDATE webhooks SET claimed_by = NULL, claimed_until = NULL
                 WHERE id = ?1 AND claimed_by = ?2",
                [id.as_str(), node],
            )?;
            released.push(id.clone());
        }
    } else if held < share {
        let sql = if conn.is_postgres() {
            "SELECT id FROM webhooks
             WHERE active = 1 AND (claimed_by IS NULL OR claimed_until < ?1)
             ORDER BY id LIMIT ?2 FOR UPDATE SKIP LOCKED"
        } else {
            "SELECT id FROM webhooks
             WHERE active = 1 AND (claimed_by IS NULL OR claimed_until < ?1)
             ORDER BY id LIMIT ?2"
        };
        let free: Vec<String> = {
            let mut stmt = conn.prepare_cached(sql)?;
            let rows = stmt.query_map(params![now, share - held], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        for id in free {
            conn.execute(
                "UPDATE webhooks SET claimed_by = ?2, claimed_until = ?4
                 WHERE id = ?1 AND (claimed_by IS NULL OR claimed_until < ?3)",
                params![id, node, now, until],
            )?;
        }
    }
    let held = {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM webhooks WHERE claimed_by = ?1 AND active = 1 ORDER BY id"
        ))?;
        let rows = stmt.query_map([node], row)?;
        rows.collect::<Result<_, _>>()?
    };
    Ok(Claims { held, released })
}

/// A stopping node gives its claims back and leaves `webhook_nodes`, so
/// the others take its subscriptions at their next pass.
pub fn release_all(conn: &Connection, node: &str) -> crate::sql::Result<()> {
    conn.execute(
        "UPDATE webhooks SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = ?1",
        [node],
    )?;
    conn.execute("DELETE FROM webhook_nodes WHERE node = ?1", [node])?;
    Ok(())
}

/// Turn a subscription off (continuous failure), saying why.
pub fn disable(conn: &Connection, id: &str, reason: &str) -> crate::sql::Result<()> {
    conn.execute(
        "UPDATE webhooks SET active = 0, disabled_reason = ?2, next_attempt_at = NULL WHERE id = ?1",
        params![id, reason],
    )?;
    Ok(())
}

/// The newest attempts of a subscription, newest first.
pub fn attempts(
    conn: &Connection,
    webhook_id: &str,
    limit: i64,
) -> crate::sql::Result<Vec<Attempt>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, webhook_id, message_id, seq, at, status, outcome, latency_ms, response
         FROM webhook_attempts WHERE webhook_id = ?1 ORDER BY id DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![webhook_id, limit], |r| {
        Ok(Attempt {
            id: r.get(0)?,
            webhook_id: r.get(1)?,
            message_id: r.get(2)?,
            seq: r.get(3)?,
            at: r.get(4)?,
            status: r.get(5)?,
            outcome: r.get(6)?,
            latency_ms: r.get(7)?,
            response: r.get(8)?,
        })
    })?;
    rows.collect()
}

/// Delete log rows older than `cutoff`; returns how many.
pub fn prune_attempts(conn: &Connection, cutoff: i64, limit: i64) -> crate::sql::Result<usize> {
    conn.prepare_cached(
        "DELETE FROM webhook_attempts WHERE id IN
           (SELECT id FROM webhook_attempts WHERE at < ?1 ORDER BY id LIMIT ?2)",
    )?
    .execute(params![cutoff, limit])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> crate::testing::TestDb {
        crate::testing::db()
    }

    fn hook(id: &str) -> Webhook {
        Webhook {
            id: id.into(),
            origin: "ssh".into(),
            owner: "alice".into(),
            repo_glob: "team/*".into(),
            url: "https://example.com/hook".into(),
            events: vec!["lease.*".into()],
            secret: None,
            active: true,
            disabled_reason: None,
            created_at: 100,
            cursor: 7,
            attempts: 0,
            failing_since: None,
            next_attempt_at: None,
            needs_approval: false,
            approved_by: None,
        }
    }

    #[test]
    fn a_subscription_waiting_for_approval_is_enabled_only_by_approving_it() {
        let conn = db();
        let waiting = Webhook {
            active: false,
            needs_approval: true,
            ..hook("wh2")
        };
        insert(&conn, &waiting).unwrap();
        assert!(get(&conn, "wh2").unwrap().unwrap().pending_approval());
        assert!(!enable(&conn, "wh2").unwrap());
        assert!(!get(&conn, "wh2").unwrap().unwrap().active);
        assert!(approve(&conn, "wh2", "root").unwrap());
        let h = get(&conn, "wh2").unwrap().unwrap();
        assert!(h.active && !h.pending_approval());
        assert_eq!(h.approved_by.as_deref(), Some("root"));
        disable(&conn, "wh2", "failing").unwrap();
        assert!(enable(&conn, "wh2").unwrap());
        assert!(!approve(&conn, "nope", "root").unwrap());
    }

    #[test]
    fn delivery_state_moves_forward_only() {
        let conn = db();
        insert(&conn, &hook("wh1")).unwrap();
        // Unclaimed: nothing moves.
        assert!(!failed(&conn, "wh1", "n1", 200, 210).unwrap());
        assert!(!advance(&conn, "wh1", "n1", 9).unwrap());
        assert_eq!(claim_pass(&conn, "n1", 150, 180).unwrap().held.len(), 1);
        assert!(failed(&conn, "wh1", "n1", 200, 210).unwrap());
        assert!(failed(&conn, "wh1", "n1", 210, 230).unwrap());
        let h = get(&conn, "wh1").unwrap().unwrap();
        assert_eq!(
            (h.attempts, h.failing_since, h.next_attempt_at),
            (2, Some(200), Some(230))
        );
        assert!(advance(&conn, "wh1", "n1", 9).unwrap());
        assert!(advance(&conn, "wh1", "n1", 8).unwrap());
        assert!(!advance(&conn, "wh1", "n2", 10).unwrap());
        let h = get(&conn, "wh1").unwrap().unwrap();
        assert_eq!((h.cursor, h.attempts, h.failing_since), (9, 0, None));
        assert_eq!(h.events, vec!["lease.*".to_string()]);
        disable(&conn, "wh1", "failing").unwrap();
        assert!(!get(&conn, "wh1").unwrap().unwrap().active);
        assert!(enable(&conn, "wh1").unwrap());
        assert!(get(&conn, "wh1").unwrap().unwrap().active);
        let attempt = Attempt {
            id: 0,
            webhook_id: "wh1".into(),
            message_id: "wh1-9".into(),
            seq: Some(9),
            at: 300,
            status: Some(500),
            outcome: "failed".into(),
            latency_ms: 3,
            response: "oops".into(),
        };
        let first = log_attempt(&conn, &attempt).unwrap();
        let second = log_attempt(&conn, &attempt).unwrap();
        assert!(second > first);
        assert_eq!(attempts(&conn, "wh1", 1).unwrap()[0].id, second);
        assert_eq!(prune_attempts(&conn, 301, 10).unwrap(), 2);
        assert!(remove(&conn, "wh1").unwrap());
        assert!(get(&conn, "wh1").unwrap().is_none());
    }

    fn held(claims: &Claims) -> Vec<&str> {
        claims.held.iter().map(|h| h.id.as_str()).collect()
    }

    #[test]
    fn nodes_share_the_subscriptions_and_take_over_a_dead_nodes_claims() {
        let conn = db();
        for id in ["wh1", "wh2", "wh3", "wh4"] {
            insert(&conn, &hook(id)).unwrap();
        }
        insert(
            &conn,
            &Webhook {
                active: false,
                ..hook("wh5")
            },
        )
        .unwrap();
        // Alone, node a takes every active one.
        let a = claim_pass(&conn, "a", 100, 130).unwrap();
        assert_eq!(held(&a), ["wh1", "wh2", "wh3", "wh4"]);
        // Node b arrives: nothing is free yet, but a sees two live nodes
        // and gives back its excess; b takes it at its next pass.
        assert!(claim_pass(&conn, "b", 105, 135).unwrap().held.is_empty());
        let a = claim_pass(&conn, "a", 110, 140).unwrap();
        assert_eq!(
            (held(&a), a.released.clone()),
            (
                vec!["wh1", "wh2"],
                vec!["wh3".to_string(), "wh4".to_string()]
            )
        );
        let b = claim_pass(&conn, "b", 111, 141).unwrap();
        assert_eq!(held(&b), ["wh3", "wh4"]);
        // Only the claimant moves a cursor.
        assert!(!advance(&conn, "wh3", "a", 50).unwrap());
        assert!(advance(&conn, "wh3", "b", 50).unwrap());
        assert!(holds(&conn, "wh3", "b").unwrap() && !holds(&conn, "wh3", "a").unwrap());
        // b dies: while its claims are live nobody takes them ...
        let a = claim_pass(&conn, "a", 130, 160).unwrap();
        assert_eq!(held(&a), ["wh1", "wh2"]);
        // ... once they and its presence lapse, a takes them over, cursor kept.
        let a = claim_pass(&conn, "a", 142, 172).unwrap();
        assert_eq!(held(&a), ["wh1", "wh2", "wh3", "wh4"]);
        assert_eq!(get(&conn, "wh3").unwrap().unwrap().cursor, 50);
        // A disabled subscription is given back.
        disable(&conn, "wh1", "failing").unwrap();
        let a = claim_pass(&conn, "a", 150, 180).unwrap();
        assert_eq!(
            (held(&a), a.released.clone()),
            (vec!["wh2", "wh3", "wh4"], vec!["wh1".to_string()])
        );
        // A stopping node gives everything back.
        release_all(&conn, "a").unwrap();
        let b = claim_pass(&conn, "b", 151, 181).unwrap();
        assert_eq!(held(&b), ["wh2", "wh3", "wh4"]);
    }
}
