//! The work queue: which issues are *ready* and, for `collab-lease next`,
//! picking the first ready issue and acquiring it in the same transaction.
//!
//! An issue is ready for a caller when it is open, no live lease holds it,
//! no lock delay protects it from this caller (see `leases`), every issue
//! that `blocks` it is closed (in any repository of the server), and it
//! carries every label asked for. Ready issues are ordered by priority
//! (0 first, then 1, 2, …; no priority last), then oldest first, then by
//! id, so every caller sees the same order.
//!
//! `next_in` runs inside the writer's transaction: the pick and the acquire
//! see the same state, and the writer runs one operation at a time, so two
//! `next` calls can never pick the same issue. Like the rest of `db`, it
//! never reads the clock.

use crate::sql::Connection;

use super::leases::{self, Acquire, Claim, Lease, Policy};

/// Most labels a ready query may filter on.
pub const MAX_LABELS: usize = 16;

/// A ready issue, as `next` and `ready` report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyIssue {
    pub repo: String,
    pub id: String,
    pub title: String,
    /// Sorted.
    pub labels: Vec<String>,
    pub priority: Option<i64>,
    /// Unix milliseconds.
    pub created_ms: i64,
}

/// What `next` asks for: the caller's claim on whatever it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextRequest {
    pub repo: String,
    /// Every one of these labels (at most [`MAX_LABELS`]).
    pub labels: Vec<String>,
    pub holder: String,
    pub ttl_secs: Option<i64>,
    pub note: Option<String>,
}

/// The outcome of `next`.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// The first ready issue, now the caller's.
    Acquired {
        lease: Lease,
        issue: Box<ReadyIssue>,
    },
    /// Nothing is ready for this caller.
    Empty,
}

/// Why an issue is not ready (for `collab-issue show`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    Closed,
    Held {
        holder: String,
        expires_at: Option<i64>,
    },
    /// A lock delay after the last holder's lease expired.
    Locked {
        holder: String,
        until: i64,
    },
    /// An open issue that `blocks` it.
    BlockedBy {
        repo: String,
        id: String,
    },
}

/// The ready issues of `repo` for `principal`, in `next`'s order, at most
/// `limit`. A pure read.
pub fn ready_in(
    conn: &Connection,
    repo: &str,
    labels: &[String],
    principal: &str,
    now: i64,
    limit: usize,
) -> crate::sql::Result<Vec<ReadyIssue>> {
    ready_rows(conn, repo, labels, principal, now, limit, false)
}

/// `ready_in`; with `lock` (`next` on PostgreSQL) the rows are locked
/// `FOR UPDATE OF i SKIP LOCKED`: an issue another transaction is deciding
/// is passed over, not waited for.
fn ready_rows(
    conn: &Connection,
    repo: &str,
    labels: &[String],
    principal: &str,
    now: i64,
    limit: usize,
    lock: bool,
) -> crate::sql::Result<Vec<ReadyIssue>> {
    let mut sql = ready_sql(labels.len());
    if lock {
        sql.push_str(" FOR UPDATE OF i SKIP LOCKED");
    }
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut params: Vec<&dyn crate::sql::ToSql> = vec![&repo, &now, &principal];
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    params.push(&limit);
    for label in labels {
        params.push(label);
    }
    let rows = stmt.query_map(params.as_slice(), |r| {
        Ok(ReadyIssue {
            repo: repo.to_string(),
            id: r.get(0)?,
            title: r.get(1)?,
            labels: Vec::new(),
            priority: r.get(2)?,
            created_ms: r.get(3)?,
        })
    })?;
    let mut ready = rows.collect::<crate::sql::Result<Vec<_>>>()?;
    for issue in &mut ready {
        issue.labels = labels_of(conn, repo, &issue.id)?;
    }
    Ok(ready)
}

/// Pick the first ready issue and acquire it for `req.holder`, in the
/// caller's transaction.
pub fn next_in(
    conn: &Connection,
    req: &NextRequest,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Next> {
    // The query already left out held and locked issues (and, on
    // PostgreSQL, issues whose row another transaction has locked). Each
    // candidate's lock is tried: one another node is deciding is passed
    // over. The acquire reads the lease again under that lock, and one
    // refused anyway (taken on another node since the query) moves on.
    let lock = conn.is_postgres();
    for issue in ready_rows(conn, &req.repo, &req.labels, &req.holder, now, 8, lock)? {
        // Tried even where locks are waited for (a group with a generic
        // write): a candidate held long elsewhere must not hold the writer.
        if !conn.try_lock_issue(&req.repo, &issue.id)? {
            continue;
        }
        let claim = Claim {
            repo: req.repo.clone(),
            issue_id: issue.id.clone(),
            holder: req.holder.clone(),
            ttl_secs: req.ttl_secs,
            note: req.note.clone(),
        };
        if let Acquire::Acquired { lease, .. } = leases::acquire_in(conn, &claim, policy, now)? {
            return Ok(Next::Acquired {
                lease,
                issue: Box::new(issue),
            });
        }
    }
    // None taken. On PostgreSQL the query passed over the issues other
    // transactions were deciding (their rows locked, up to eight by each
    // concurrent `next`), and so did the issue locks above. Such an issue
    // may still be ready when that transaction ends: it may take another
    // one, or roll back. "Empty" is only the answer when no issue is ready
    // at all, locks aside; otherwise this `next` is busy, and the writer
    // runs it again in its next group (rolled back to its savepoint, so it
    // holds no lock meanwhile). Without this, 64 callers over three nodes
    // for 48 issues were sometimes told "empty" while issues were left.
    if lock && !ready_rows(conn, &req.repo, &req.labels, &req.holder, now, 1, false)?.is_empty() {
        return Err(crate::sql::Error::Busy(format!(
            "the ready issues of {}",
            req.repo
        )));
    }
    Ok(Next::Empty)
}

/// Why `repo`'s issue `id` is not ready for `principal` (empty: it is
/// ready, labels aside). A pure read.
pub fn not_ready_in(
    conn: &Connection,
    repo: &str,
    id: &str,
    principal: &str,
    now: i64,
) -> crate::sql::Result<Vec<NotReady>> {
    let mut reasons = Vec::new();
    let status: Option<String> = conn
        .prepare_cached("SELECT status FROM issues WHERE repo = ?1 AND id = ?2")?
        .query_row([repo, id], |r| r.get(0))
        .map(Some)
        .or_else(|e| match e {
            crate::sql::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })?;
    if status.as_deref() == Some("closed") {
        reasons.push(NotReady::Closed);
    }
    let status = leases::status_in(conn, repo, id, now)?;
    if let Some(live) = status.live {
        reasons.push(NotReady::Held {
            holder: live.holder,
            expires_at: live.expires_at,
        });
    } else if let Some((holder, until)) = status.locked.filter(|(h, _)| h != principal) {
        reasons.push(NotReady::Locked { holder, until });
    }
    let mut blockers = conn.prepare_cached(
        "SELECT b.repo, b.id FROM issue_links k
         JOIN issues b ON b.repo = k.repo AND b.id = k.issue_id
         WHERE k.target_repo = ?1 AND k.target_id = ?2 AND k.kind = 'blocks'
           AND b.status = 'open'
         ORDER BY b.repo, b.id",
    )?;
    let open = blockers.query_map([repo, id], |r| {
        Ok(NotReady::BlockedBy {
            repo: r.get(0)?,
            id: r.get(1)?,
        })
    })?;
    for blocker in open {
        reasons.push(blocker?);
    }
    Ok(reasons)
}

/// The ready query for `labels` labels: `?1` repo, `?2` now, `?3` the
/// caller (a lock delay spares its last holder), `?4` the limit, then one
/// parameter per label. Portable SQL: `NOT EXISTS` and a `CASE` for the
/// order (no priority last).
fn ready_sql(labels: usize) -> String {
    let mut sql = String::from(
        "SELECT i.id, i.title, i.priority, i.created_ms FROM issues i
         WHERE i.repo = ?1 AND i.status = 'open'
           AND NOT EXISTS (SELECT 1 FROM leases l
                           WHERE l.repo = i.repo AND l.issue_id = i.id
                             AND (l.expires_at IS NULL OR l.expires_at > ?2))
           AND NOT EXISTS (SELECT 1 FROM lease_tokens t
                           WHERE t.repo = i.repo AND t.issue_id = i.id
                             AND t.locked_until > ?2 AND t.last_holder <> ?3)
           AND NOT EXISTS (SELECT 1 FROM issue_links k
                           JOIN issues b ON b.repo = k.repo AND b.id = k.issue_id
                           WHERE k.target_repo = i.repo AND k.target_id = i.id
                             AND k.kind = 'blocks' AND b.status = 'open')",
    );
    for n in 0..labels {
        sql.push_str(&format!(
            "
           AND EXISTS (SELECT 1 FROM issue_labels g
                       WHERE g.repo = i.repo AND g.issue_id = i.id AND g.label = ?{})",
            n + 5
        ));
    }
    // The order of the `issues_ready` index (migration 7): keep the two in
    // step, or every `next` sorts all open issues again.
    sql.push_str(
        "
         ORDER BY CASE WHEN i.priority IS NULL THEN 1 ELSE 0 END, i.priority,
                  i.created_ms, i.id
         LIMIT ?4",
    );
    sql
}

fn labels_of(conn: &Connection, repo: &str, id: &str) -> crate::sql::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT label FROM issue_labels WHERE repo = ?1 AND issue_id = ?2 ORDER BY label",
    )?;
    let labels = stmt.query_map([repo, id], |r| r.get(0))?;
    labels.collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::issues::{self, LinkKind, NewIssue, Person, WriteCtx};

    const REPO: &str = "team/app.git";
    const LIB: &str = "team/lib.git";
    const T0: i64 = 1_790_000_000;

    fn db() -> crate::testing::TestDb {
        crate::testing::db()
    }

    #[test]
    fn the_ready_order_walks_the_index_without_sorting() {
        let conn = db();
        if conn.is_postgres() {
            // SQLite's plan; PostgreSQL's planner picks by table statistics.
            return;
        }
        for labels in [0, 2] {
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {}", ready_sql(labels)))
                .unwrap()
                .query_map(
                    crate::sql::params_from_iter(
                        ["r".to_string(), "0".into(), "h".into(), "1".into()]
                            .into_iter()
                            .chain((0..labels).map(|n| format!("l{n}"))),
                    ),
                    |r| r.get::<_, String>(3),
                )
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let plan = plan.join("\n");
            assert!(plan.contains("USING INDEX issues_ready"), "{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        }
    }

    fn person() -> Person {
        Person {
            principal: "admin".into(),
            name: "admin".into(),
            key: None,
        }
    }

    fn open(conn: &Connection, repo: &str, title: &str, labels: &[&str], at: i64) -> String {
        let actor = person();
        let w = WriteCtx {
            repo,
            actor: &actor,
            fence: None,
            max_body: 1024,
            now: at,
        };
        let new = NewIssue {
            title: title.into(),
            body: String::new(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
        };
        issues::open(conn, &w, &new).unwrap().issue
    }

    fn write_ctx<'a>(repo: &'a str, actor: &'a Person, now: i64) -> WriteCtx<'a> {
        WriteCtx {
            repo,
            actor,
            fence: None,
            max_body: 1024,
            now,
        }
    }

    fn req(holder: &str, labels: &[&str]) -> NextRequest {
        NextRequest {
            repo: REPO.into(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
            holder: holder.into(),
            ttl_secs: Some(600),
            note: None,
        }
    }

    fn next_id(conn: &Connection, r: &NextRequest, now: i64) -> Option<String> {
        match next_in(conn, r, &Policy::default(), now).unwrap() {
            Next::Acquired { lease, issue } => {
                assert_eq!(lease.issue_id, issue.id);
                assert_eq!(lease.holder, r.holder);
                Some(issue.id)
            }
            Next::Empty => None,
        }
    }

    fn titles(ready: &[ReadyIssue]) -> Vec<&str> {
        ready.iter().map(|i| i.title.as_str()).collect()
    }

    #[test]
    fn ready_order_is_priority_then_oldest_and_next_takes_each_once() {
        let conn = db();
        let old = open(&conn, REPO, "old", &[], T0);
        let new = open(&conn, REPO, "new", &[], T0 + 1);
        let urgent = open(&conn, REPO, "urgent", &[], T0 + 2);
        let low = open(&conn, REPO, "low", &[], T0 + 3);
        let actor = person();
        issues::set_priority(&conn, &write_ctx(REPO, &actor, T0), &urgent, Some(0)).unwrap();
        issues::set_priority(&conn, &write_ctx(REPO, &actor, T0), &low, Some(5)).unwrap();
        let ready = ready_in(&conn, REPO, &[], "a", T0 + 10, 10).unwrap();
        assert_eq!(titles(&ready), ["urgent", "low", "old", "new"]);
        let order: Vec<Option<String>> = (0..5)
            .map(|i| next_id(&conn, &req(&format!("agent{i}"), &[]), T0 + 10))
            .collect();
        assert_eq!(
            order,
            [Some(urgent), Some(low), Some(old), Some(new), None],
            "each issue handed out once, in order"
        );
        assert!(ready_in(&conn, REPO, &[], "a", T0 + 10, 10)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn blockers_count_until_closed_even_in_another_repository() {
        let conn = db();
        let actor = person();
        let blocked = open(&conn, REPO, "blocked", &[], T0);
        let here = open(&conn, REPO, "blocker here", &[], T0 + 1);
        let there = open(&conn, LIB, "blocker in lib", &[], T0 + 2);
        issues::link(
            &conn,
            &write_ctx(REPO, &actor, T0),
            &here,
            LinkKind::Blocks,
            REPO,
            &blocked,
        )
        .unwrap();
        issues::link(
            &conn,
            &write_ctx(LIB, &actor, T0),
            &there,
            LinkKind::Blocks,
            REPO,
            &blocked,
        )
        .unwrap();
        let ready = ready_in(&conn, REPO, &[], "a", T0, 10).unwrap();
        assert_eq!(titles(&ready), ["blocker here"]);
        assert_eq!(
            not_ready_in(&conn, REPO, &blocked, "a", T0).unwrap(),
            [
                NotReady::BlockedBy {
                    repo: REPO.into(),
                    id: here.clone()
                },
                NotReady::BlockedBy {
                    repo: LIB.into(),
                    id: there.clone()
                },
            ]
        );
        issues::close(&conn, &write_ctx(REPO, &actor, T0), &here, None).unwrap();
        assert!(
            ready_in(&conn, REPO, &[], "a", T0, 10).unwrap().is_empty(),
            "lib's still blocks"
        );
        issues::close(&conn, &write_ctx(LIB, &actor, T0), &there, None).unwrap();
        assert_eq!(next_id(&conn, &req("a", &[]), T0), Some(blocked.clone()));
        assert_eq!(
            not_ready_in(&conn, REPO, &blocked, "b", T0).unwrap(),
            [NotReady::Held {
                holder: "a".into(),
                expires_at: Some(T0 + 600)
            }]
        );
        assert_eq!(
            not_ready_in(&conn, REPO, &here, "b", T0).unwrap(),
            [NotReady::Closed]
        );
    }

    #[test]
    fn labels_must_all_match_and_lock_delays_spare_the_last_holder() {
        let conn = db();
        let both = open(&conn, REPO, "both", &["backend", "easy"], T0);
        open(&conn, REPO, "backend only", &["backend"], T0 + 1);
        let ready = ready_in(&conn, REPO, &["backend".into(), "easy".into()], "a", T0, 10).unwrap();
        assert_eq!(titles(&ready), ["both"]);
        assert_eq!(ready[0].labels, ["backend", "easy"]);
        assert_eq!(next_id(&conn, &req("a", &["frontend"]), T0), None);
        // a's lease on "both" expires into a lock delay: b skips it, a may
        // take it again.
        let p = Policy {
            lock_delay: 30,
            ..Policy::default()
        };
        let mut short = req("a", &["easy"]);
        short.ttl_secs = Some(5);
        assert!(matches!(
            next_in(&conn, &short, &p, T0).unwrap(),
            Next::Acquired { .. }
        ));
        leases::expire_due_in(&conn, &p, T0 + 5).unwrap();
        assert_eq!(next_id(&conn, &req("b", &["easy"]), T0 + 6), None);
        assert_eq!(
            not_ready_in(&conn, REPO, &both, "b", T0 + 6).unwrap(),
            [NotReady::Locked {
                holder: "a".into(),
                until: T0 + 35
            }]
        );
        assert_eq!(
            next_id(&conn, &req("a", &["easy"]), T0 + 6),
            Some(both.clone())
        );
    }
}
