//! Repository mirrors in `collab.db`, as plain functions over a connection
//! (`now` passed in). A pull mirror fetches an upstream into the
//! repository; a push mirror pushes the repository to a downstream. The
//! server (`mirrors`) runs git; this module stores the rows and decides
//! who syncs what when.
//!
//! One node syncs a mirror at a time: a sync starts by *claiming* the row
//! (`claimed_by`, `claimed_until`) in a write transaction, and every write
//! runs under the one write lock on both backends, so two nodes (or the
//! schedule and an on-demand `mirror sync`) cannot both claim it. A claim
//! that its node never finished (the node died) lapses at
//! `claimed_until`. Failures back off exponentially ([`backoff`]), capped.

use crate::sql::{params, Connection, OptionalExtension as _};

/// A stored mirror. `credential` is what the server stored (sealed by it;
/// never shown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    pub id: String,
    pub repo: String,
    /// `pull` or `push`.
    pub direction: String,
    pub url: String,
    pub credential: Option<String>,
    pub interval_secs: i64,
    pub created_by: String,
    pub created_at: i64,
    /// When the schedule syncs it next.
    pub next_at: i64,
    /// Failures in a row since the last success.
    pub failures: i64,
    pub last_attempt_at: Option<i64>,
    pub last_success_at: Option<i64>,
    pub last_error: Option<String>,
    pub claimed_by: Option<String>,
    pub claimed_until: Option<i64>,
}

impl Mirror {
    pub fn is_pull(&self) -> bool {
        self.direction == "pull"
    }
}

const COLUMNS: &str = "id, repo, direction, url, credential, interval_secs, created_by, \
     created_at, next_at, failures, last_attempt_at, last_success_at, last_error, \
     claimed_by, claimed_until";

fn row(r: &crate::sql::Row<'_>) -> crate::sql::Result<Mirror> {
    Ok(Mirror {
        id: r.get(0)?,
        repo: r.get(1)?,
        direction: r.get(2)?,
        url: r.get(3)?,
        credential: r.get(4)?,
        interval_secs: r.get(5)?,
        created_by: r.get(6)?,
        created_at: r.get(7)?,
        next_at: r.get(8)?,
        failures: r.get(9)?,
        last_attempt_at: r.get(10)?,
        last_success_at: r.get(11)?,
        last_error: r.get(12)?,
        claimed_by: r.get(13)?,
        claimed_until: r.get(14)?,
    })
}

/// Why a mirror was not added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddRefused {
    /// The repository has `max` mirrors already.
    Full { max: i64 },
    /// The same direction and URL is there already (its id).
    Duplicate(String),
    /// A pull mirror is there already (its id): two would each prune the
    /// other's refs at every sync.
    SecondPull(String),
}

/// Add `mirror` unless its repository has `max_per_repo` mirrors, the same
/// one already, or (for a pull mirror) a pull mirror already; counted in the caller's write transaction, so concurrent
/// adds cannot overshoot.
pub fn add(
    conn: &Connection,
    mirror: &Mirror,
    max_per_repo: i64,
) -> crate::sql::Result<Result<(), AddRefused>> {
    if let Some(id) = conn
        .query_row(
            "SELECT id FROM mirrors WHERE repo = ?1 AND direction = ?2 AND url = ?3",
            params![mirror.repo, mirror.direction, mirror.url],
            |r| r.get::<_, String>(0),
        )
        .optional()?
    {
        return Ok(Err(AddRefused::Duplicate(id)));
    }
    if mirror.is_pull() {
        if let Some(id) = conn
            .query_row(
                "SELECT id FROM mirrors WHERE repo = ?1 AND direction = 'pull'",
                params![mirror.repo],
                |r| r.get::<_, String>(0),
            )
            .optional()?
        {
            return Ok(Err(AddRefused::SecondPull(id)));
        }
    }
    let count: i64 = conn.query_row(
        "SELECT COUNT(*) FROM mirrors WHERE repo = ?1",
        params![mirror.repo],
        |r| r.get(0),
    )?;
    if count >= max_per_repo {
        return Ok(Err(AddRefused::Full { max: max_per_repo }));
    }
    conn.execute(
        &format!(
            "INSERT INTO mirrors ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
        ),
        params![
            mirror.id,
            mirror.repo,
            mirror.direction,
            mirror.url,
            mirror.credential,
            mirror.interval_secs,
            mirror.created_by,
            mirror.created_at,
            mirror.next_at,
            mirror.failures,
            mirror.last_attempt_at,
            mirror.last_success_at,
            mirror.last_error,
            mirror.claimed_by,
            mirror.claimed_until,
        ],
    )?;
    Ok(Ok(()))
}

/// The mirrors of `repo`, oldest first.
pub fn list(conn: &Connection, repo: &str) -> crate::sql::Result<Vec<Mirror>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM mirrors WHERE repo = ?1 ORDER BY created_at, id"
    ))?;
    let rows = stmt.query_map(params![repo], row)?;
    rows.collect()
}

/// One mirror of `repo`.
pub fn get(conn: &Connection, repo: &str, id: &str) -> crate::sql::Result<Option<Mirror>> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM mirrors WHERE repo = ?1 AND id = ?2"),
        params![repo, id],
        row,
    )
    .optional()
}

/// Whether `repo` is fetched from an upstream (its refs are the upstream's).
pub fn has_pull(conn: &Connection, repo: &str) -> crate::sql::Result<bool> {
    let n: i64 = conn.query_row(
        "SELECT COUNT(*) FROM mirrors WHERE repo = ?1 AND direction = 'pull'",
        params![repo],
        |r| r.get(0),
    )?;
    Ok(n > 0)
}

/// Remove one mirror of `repo`; whether it was there.
pub fn remove(conn: &Connection, repo: &str, id: &str) -> crate::sql::Result<bool> {
    Ok(conn.execute(
        "DELETE FROM mirrors WHERE repo = ?1 AND id = ?2",
        params![repo, id],
    )? > 0)
}

/// Claim `id` for `node` until `until`, unless another claim is live.
/// The claimed row, or `None` (gone, or someone else syncs it now).
pub fn claim(
    conn: &Connection,
    id: &str,
    node: &str,
    now: i64,
    until: i64,
) -> crate::sql::Result<Option<Mirror>> {
    let changed = conn.execute(
        "UPDATE mirrors SET claimed_by = ?2, claimed_until = ?4
         WHERE id = ?1 AND (claimed_until IS NULL OR claimed_until <= ?3)",
        params![id, node, now, until],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM mirrors WHERE id = ?1"),
        params![id],
        row,
    )
    .optional()
}

/// Claim up to `limit` mirrors the schedule has due (`next_at <= now`) and
/// nobody syncs, earliest first.
pub fn claim_due(
    conn: &Connection,
    node: &str,
    now: i64,
    until: i64,
    limit: i64,
) -> crate::sql::Result<Vec<Mirror>> {
    let ids: Vec<String> = {
        let mut stmt = conn.prepare(
            "SELECT id FROM mirrors
             WHERE next_at <= ?1 AND (claimed_until IS NULL OR claimed_until <= ?1)
             ORDER BY next_at, id LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![now, limit], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    let mut claimed = Vec::new();
    for id in ids {
        if let Some(m) = claim(conn, &id, node, now, until)? {
            claimed.push(m);
        }
    }
    Ok(claimed)
}

/// The earliest `next_at` among the mirrors (for the scheduler's sleep).
pub fn next_due(conn: &Connection) -> crate::sql::Result<Option<i64>> {
    conn.query_row("SELECT MIN(next_at) FROM mirrors", [], |r| r.get(0))
}

/// The delay before the next attempt after `failures` failures in a row:
/// `base` doubled per further failure, at most `max`.
pub fn backoff(failures: i64, base: i64, max: i64) -> i64 {
    let shift = (failures.max(1) - 1).min(32) as u32;
    base.max(1).saturating_mul(1i64 << shift).min(max.max(1))
}

/// Record the end of `node`'s sync of `id`: a success schedules the next
/// one an interval away and clears the error; a failure keeps `error` and
/// backs off. The claim ends. Nothing happens if the claim was not
/// `node`'s any more (it lapsed and another node took it).
pub fn finish(
    conn: &Connection,
    id: &str,
    node: &str,
    now: i64,
    outcome: Result<(), &str>,
    backoff_base: i64,
    backoff_max: i64,
) -> crate::sql::Result<bool> {
    let Some((interval, failures)) = conn
        .query_row(
            "SELECT interval_secs, failures FROM mirrors WHERE id = ?1 AND claimed_by = ?2",
            params![id, node],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
        )
        .optional()?
    else {
        return Ok(false);
    };
    match outcome {
        Ok(()) => conn.execute(
            "UPDATE mirrors SET failures = 0, last_error = NULL, last_attempt_at = ?2,
                 last_success_at = ?2, next_at = ?3, claimed_by = NULL, claimed_until = NULL
             WHERE id = ?1",
            params![id, now, now + interval],
        )?,
        Err(error) => {
            let failures = failures + 1;
            let delay = backoff(failures, backoff_base, backoff_max);
            conn.execute(
                "UPDATE mirrors SET failures = ?2, last_error = ?3, last_attempt_at = ?4,
                     next_at = ?5, claimed_by = NULL, claimed_until = NULL
                 WHERE id = ?1",
                params![id, failures, error, now, now + delay],
            )?
        }
    };
    Ok(true)
}

/// After `repo`'s refs moved: its push mirrors that are not backing off
/// are due now (coalesced: many pushes make one sync).
pub fn push_due(conn: &Connection, repo: &str, now: i64) -> crate::sql::Result<usize> {
    conn.execute(
        "UPDATE mirrors SET next_at = ?2
         WHERE repo = ?1 AND direction = 'push' AND failures = 0 AND next_at > ?2",
        params![repo, now],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mirror(id: &str, repo: &str, direction: &str, url: &str) -> Mirror {
        Mirror {
            id: id.into(),
            repo: repo.into(),
            direction: direction.into(),
            url: url.into(),
            credential: Some("sealed1:xyz".into()),
            interval_secs: 600,
            created_by: "admin".into(),
            created_at: 100,
            next_at: 100,
            failures: 0,
            last_attempt_at: None,
            last_success_at: None,
            last_error: None,
            claimed_by: None,
            claimed_until: None,
        }
    }

    #[test]
    fn adds_are_capped_per_repository_and_duplicates_refused() {
        let conn = crate::testing::db();
        let a = mirror("mr1", "r.git", "pull", "https://a/x.git");
        assert_eq!(add(&conn, &a, 2).unwrap(), Ok(()));
        assert_eq!(
            add(&conn, &mirror("mr2", "r.git", "pull", "https://a/x.git"), 2).unwrap(),
            Err(AddRefused::Duplicate("mr1".into()))
        );
        // A second pull mirror would prune the first one's refs.
        assert_eq!(
            add(&conn, &mirror("mr2", "r.git", "pull", "https://c/x.git"), 5).unwrap(),
            Err(AddRefused::SecondPull("mr1".into()))
        );
        assert_eq!(
            add(&conn, &mirror("mr2", "r.git", "push", "https://a/x.git"), 2).unwrap(),
            Ok(())
        );
        assert_eq!(
            add(&conn, &mirror("mr3", "r.git", "push", "https://b/x.git"), 2).unwrap(),
            Err(AddRefused::Full { max: 2 })
        );
        assert_eq!(
            add(&conn, &mirror("mr3", "s.git", "push", "https://b/x.git"), 2).unwrap(),
            Ok(())
        );
        assert_eq!(list(&conn, "r.git").unwrap().len(), 2);
        assert!(has_pull(&conn, "r.git").unwrap());
        assert!(!has_pull(&conn, "s.git").unwrap());
        assert_eq!(get(&conn, "r.git", "mr1").unwrap().unwrap(), a);
        // Another repository's id is not found under this one.
        assert!(get(&conn, "r.git", "mr3").unwrap().is_none());
        assert!(!remove(&conn, "r.git", "mr3").unwrap());
        assert!(remove(&conn, "r.git", "mr1").unwrap());
        assert!(!has_pull(&conn, "r.git").unwrap());
    }

    #[test]
    fn one_claim_at_a_time_and_a_lapsed_claim_is_taken_over() {
        let conn = crate::testing::db();
        add(&conn, &mirror("mr1", "r.git", "pull", "https://a/x.git"), 5)
            .unwrap()
            .unwrap();
        let got = claim_due(&conn, "node-a", 100, 200, 10).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].claimed_by.as_deref(), Some("node-a"));
        // Node b sees nothing to do while a's claim is live ...
        assert!(claim_due(&conn, "node-b", 150, 250, 10).unwrap().is_empty());
        assert!(claim(&conn, "mr1", "node-b", 150, 250).unwrap().is_none());
        // ... and takes it over once it lapsed; a's late finish is ignored.
        assert!(claim(&conn, "mr1", "node-b", 200, 300).unwrap().is_some());
        assert!(!finish(&conn, "mr1", "node-a", 210, Ok(()), 10, 100).unwrap());
        assert!(finish(&conn, "mr1", "node-b", 210, Ok(()), 10, 100).unwrap());
        let m = get(&conn, "r.git", "mr1").unwrap().unwrap();
        assert_eq!(
            (m.next_at, m.last_success_at, m.claimed_by),
            (810, Some(210), None)
        );
        assert_eq!(next_due(&conn).unwrap(), Some(810));
    }

    #[test]
    fn failures_back_off_exponentially_up_to_the_cap_and_a_success_resets() {
        assert_eq!(backoff(1, 10, 1000), 10);
        assert_eq!(backoff(2, 10, 1000), 20);
        assert_eq!(backoff(4, 10, 1000), 80);
        assert_eq!(backoff(60, 10, 1000), 1000);
        let conn = crate::testing::db();
        add(&conn, &mirror("mr1", "r.git", "pull", "https://a/x.git"), 5)
            .unwrap()
            .unwrap();
        let mut now = 100;
        for expected in [10, 20, 40, 80, 100, 100] {
            claim(&conn, "mr1", "n", now, now + 50).unwrap().unwrap();
            finish(&conn, "mr1", "n", now, Err("unreachable"), 10, 100).unwrap();
            let m = get(&conn, "r.git", "mr1").unwrap().unwrap();
            assert_eq!(m.next_at - now, expected);
            assert_eq!(m.last_error.as_deref(), Some("unreachable"));
            now = m.next_at;
        }
        claim(&conn, "mr1", "n", now, now + 50).unwrap().unwrap();
        finish(&conn, "mr1", "n", now, Ok(()), 10, 100).unwrap();
        let m = get(&conn, "r.git", "mr1").unwrap().unwrap();
        assert_eq!((m.failures, m.last_error), (0, None));
    }

    #[test]
    fn a_push_makes_healthy_push_mirrors_due_now() {
        let conn = crate::testing::db();
        let mut healthy = mirror("mr1", "r.git", "push", "https://a/x.git");
        healthy.next_at = 5000;
        let mut failing = mirror("mr2", "r.git", "push", "https://b/x.git");
        failing.next_at = 5000;
        failing.failures = 3;
        let mut pull = mirror("mr3", "r.git", "pull", "https://c/x.git");
        pull.next_at = 5000;
        for m in [&healthy, &failing, &pull] {
            add(&conn, m, 5).unwrap().unwrap();
        }
        assert_eq!(push_due(&conn, "r.git", 200).unwrap(), 1);
        let next = |id| get(&conn, "r.git", id).unwrap().unwrap().next_at;
        assert_eq!((next("mr1"), next("mr2"), next("mr3")), (200, 5000, 5000));
    }
}
