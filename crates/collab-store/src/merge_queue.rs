//! The merge queue of a branch (a merge rule with `queue = true`), as
//! plain functions over a connection (`now` passed in).
//!
//! The queue's entries are the branch's merge intents (`merge_intents`:
//! `collab-patch merge` on a queued branch records one), in the order they
//! were queued (`queued_seq`). The server's driver (`collab-server`'s
//! `merge_queue`) builds a *merge group* from the head of the queue: the
//! base tip plus up to `max_batch` patches, each merged onto the one
//! before, at `refs/collab/queue/<branch>/<n>`. This module keeps:
//!
//! - `merge_queue_branches`: per branch, the node driving it now (a claim
//!   with a deadline, so a dead node's claim lapses), the last group
//!   number, and `suspects`: after a group of several patches failed, how
//!   many patches at the head of the queue hold the one that broke it
//!   (the next groups bisect them);
//! - `merge_groups`: one row per group built, with its members, its commit,
//!   the base it was built on and how it ended (`testing`, `merged`,
//!   `failed`, `stale`: rebuilt because the base moved or a member left).
//!
//! Every group is an event: `merge_group.checks_requested` when it is
//! built, `merge_group.merged`, `merge_group.failed` or
//! `merge_group.stale` when it ends, in the same transaction as its row.

use crate::event_log::{self, NewEvent};
use crate::merge_intents::Intent;
use crate::objects::person_at;
use crate::sql::{params, Connection, OptionalExtension as _};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A patch in a merge group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub patch: String,
    pub revision: i64,
    /// The commit of the group that brings the patch in (its head when it
    /// fast-forwarded, else the merge commit).
    pub commit: String,
}

/// A merge group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub repo: String,
    pub branch: String,
    pub n: i64,
    pub commit: String,
    /// The base branch's tip the group was built on.
    pub base: String,
    pub members: Vec<Member>,
    /// `testing`, `merged`, `failed` or `stale`.
    pub state: String,
    pub reason: Option<String>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

const GROUP_COLUMNS: &str =
    "repo, branch, n, commit_id, base_commit, members, state, reason, created_at, finished_at";

fn group_from_row(r: &crate::sql::Row<'_>) -> crate::sql::Result<Group> {
    let members: String = r.get(5)?;
    Ok(Group {
        repo: r.get(0)?,
        branch: r.get(1)?,
        n: r.get(2)?,
        commit: r.get(3)?,
        base: r.get(4)?,
        members: serde_json::from_str(&members).unwrap_or_default(),
        state: r.get(6)?,
        reason: r.get(7)?,
        created_at: r.get(8)?,
        finished_at: r.get(9)?,
    })
}

/// The queue of `branch` in `repo`: the merge intents of its open patches
/// based on it, in queue order, at most `limit`.
pub fn entries(
    conn: &Connection,
    repo: &str,
    branch: &str,
    limit: i64,
) -> crate::sql::Result<Vec<Intent>> {
    let mut stmt = conn.prepare(
        "SELECT i.repo, i.patch_id, i.revision, i.requested_by, i.requester_name,
                i.requester_key, i.lease_token, i.created_at
         FROM merge_intents i JOIN patches p ON p.repo = i.repo AND p.id = i.patch_id
         WHERE i.repo = ?1 AND p.base = ?2
         ORDER BY COALESCE(i.queued_seq, 0), i.created_at, i.patch_id
         LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![repo, branch, limit], |r| {
        Ok(Intent {
            repo: r.get(0)?,
            patch: r.get(1)?,
            revision: r.get(2)?,
            requester: person_at(r, 3)?,
            lease_token: r.get(6)?,
            created_at: r.get(7)?,
        })
    })?;
    rows.collect()
}

/// Every (repository, branch) with a queued merge or a group under test,
/// at most `limit`.
pub fn branches(conn: &Connection, limit: i64) -> crate::sql::Result<Vec<(String, String)>> {
    let mut stmt = conn.prepare(
        "SELECT DISTINCT i.repo, p.base
         FROM merge_intents i JOIN patches p ON p.repo = i.repo AND p.id = i.patch_id
         UNION
         SELECT repo, branch FROM merge_groups WHERE state = 'testing'
         ORDER BY 1, 2 LIMIT ?1",
    )?;
    let rows = stmt.query_map(params![limit], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

fn ensure_branch(conn: &Connection, repo: &str, branch: &str) -> crate::sql::Result<()> {
    conn.execute(
        "INSERT INTO merge_queue_branches (repo, branch) VALUES (?1, ?2)
         ON CONFLICT (repo, branch) DO NOTHING",
        params![repo, branch],
    )?;
    Ok(())
}

/// Claim the driving of `branch`'s queue for `node` until `until`, unless
/// another node's claim is still running. Whether `node` holds it now.
pub fn claim(
    conn: &Connection,
    repo: &str,
    branch: &str,
    node: &str,
    now: i64,
    until: i64,
) -> crate::sql::Result<bool> {
    ensure_branch(conn, repo, branch)?;
    Ok(conn.execute(
        "UPDATE merge_queue_branches SET claimed_by = ?3, claimed_until = ?5
         WHERE repo = ?1 AND branch = ?2
           AND (claimed_until IS NULL OR claimed_until <= ?4 OR claimed_by = ?3)",
        params![repo, branch, node, now, until],
    )? > 0)
}

/// End `node`'s claim on `branch`'s queue.
pub fn release(conn: &Connection, repo: &str, branch: &str, node: &str) -> crate::sql::Result<()> {
    conn.execute(
        "UPDATE merge_queue_branches SET claimed_by = NULL, claimed_until = NULL
         WHERE repo = ?1 AND branch = ?2 AND claimed_by = ?3",
        params![repo, branch, node],
    )?;
    Ok(())
}

/// Who drives `branch`'s queue now (node and deadline), if anyone.
pub fn driver(
    conn: &Connection,
    repo: &str,
    branch: &str,
) -> crate::sql::Result<Option<(String, i64)>> {
    Ok(conn
        .query_row(
            "SELECT claimed_by, claimed_until FROM merge_queue_branches
             WHERE repo = ?1 AND branch = ?2",
            params![repo, branch],
            |r| Ok((r.get::<_, Option<String>>(0)?, r.get::<_, Option<i64>>(1)?)),
        )
        .optional()?
        .and_then(|(by, until)| Some((by?, until?))))
}

/// How many patches at the head of `branch`'s queue hold the one that
/// broke the last failed group (0: none known).
pub fn suspects(conn: &Connection, repo: &str, branch: &str) -> crate::sql::Result<i64> {
    Ok(conn
        .query_row(
            "SELECT suspects FROM merge_queue_branches WHERE repo = ?1 AND branch = ?2",
            params![repo, branch],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0))
}

/// Set the bisect state of `branch` (see [`suspects`]).
pub fn set_suspects(conn: &Connection, repo: &str, branch: &str, n: i64) -> crate::sql::Result<()> {
    ensure_branch(conn, repo, branch)?;
    conn.execute(
        "UPDATE merge_queue_branches SET suspects = ?3 WHERE repo = ?1 AND branch = ?2",
        params![repo, branch, n.max(0)],
    )?;
    Ok(())
}

/// The group of `branch` under test, if any.
pub fn current(conn: &Connection, repo: &str, branch: &str) -> crate::sql::Result<Option<Group>> {
    conn.query_row(
        &format!(
            "SELECT {GROUP_COLUMNS} FROM merge_groups
             WHERE repo = ?1 AND branch = ?2 AND state = 'testing'
             ORDER BY n DESC LIMIT 1"
        ),
        params![repo, branch],
        group_from_row,
    )
    .optional()
}

/// The latest `limit` groups of `branch`, newest first.
pub fn recent(
    conn: &Connection,
    repo: &str,
    branch: &str,
    limit: i64,
) -> crate::sql::Result<Vec<Group>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {GROUP_COLUMNS} FROM merge_groups
         WHERE repo = ?1 AND branch = ?2 ORDER BY n DESC LIMIT ?3"
    ))?;
    let rows = stmt.query_map(params![repo, branch, limit], group_from_row)?;
    rows.collect()
}

/// The payload of a group's events.
fn payload(g: &Group) -> serde_json::Value {
    json!({
        "repo": g.repo,
        "branch": g.branch,
        "group": g.n,
        "commit": g.commit,
        "base": g.base,
        "ref": format!("refs/collab/queue/{}/{}", g.branch, g.n),
        "patches": g.members,
    })
}

/// Record a new group under test (the next number of `branch`) and append
/// `merge_group.checks_requested`. The group as stored, with the event's
/// seq.
pub fn open(
    conn: &Connection,
    repo: &str,
    branch: &str,
    commit: &str,
    base: &str,
    members: &[Member],
    now: i64,
) -> crate::sql::Result<(Group, i64)> {
    ensure_branch(conn, repo, branch)?;
    let n: i64 = conn.query_row(
        "UPDATE merge_queue_branches SET last_group = last_group + 1
         WHERE repo = ?1 AND branch = ?2 RETURNING last_group",
        params![repo, branch],
        |r| r.get(0),
    )?;
    let group = Group {
        repo: repo.to_string(),
        branch: branch.to_string(),
        n,
        commit: commit.to_string(),
        base: base.to_string(),
        members: members.to_vec(),
        state: "testing".into(),
        reason: None,
        created_at: now,
        finished_at: None,
    };
    conn.execute(
        &format!(
            "INSERT INTO merge_groups ({GROUP_COLUMNS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'testing', NULL, ?7, NULL)"
        ),
        params![
            repo,
            branch,
            n,
            commit,
            base,
            serde_json::to_string(members).unwrap_or_else(|_| "[]".into()),
            now
        ],
    )?;
    let seq = event_log::append(
        conn,
        &NewEvent {
            kind: "merge_group.checks_requested",
            repo: Some(repo),
            object_id: Some(commit),
            actor: None,
            payload: payload(&group),
        },
        now,
    )?;
    Ok((group, seq))
}

/// The next number `branch`'s queue will give a group (for the ref the
/// driver writes before [`open`] records it).
pub fn next_number(conn: &Connection, repo: &str, branch: &str) -> crate::sql::Result<i64> {
    Ok(conn
        .query_row(
            "SELECT last_group FROM merge_queue_branches WHERE repo = ?1 AND branch = ?2",
            params![repo, branch],
            |r| r.get::<_, i64>(0),
        )
        .optional()?
        .unwrap_or(0)
        + 1)
}

/// End group `n` of `branch` in `state` (`merged`, `failed`, `stale`) with
/// `reason`, and append `merge_group.<state>`. `None` when the group was
/// not under test (another node ended it).
pub fn finish(
    conn: &Connection,
    repo: &str,
    branch: &str,
    n: i64,
    state: &str,
    reason: Option<&str>,
    now: i64,
) -> crate::sql::Result<Option<i64>> {
    let changed = conn.execute(
        "UPDATE merge_groups SET state = ?4, reason = ?5, finished_at = ?6
         WHERE repo = ?1 AND branch = ?2 AND n = ?3 AND state = 'testing'",
        params![repo, branch, n, state, reason, now],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    let group = conn.query_row(
        &format!(
            "SELECT {GROUP_COLUMNS} FROM merge_groups WHERE repo = ?1 AND branch = ?2 AND n = ?3"
        ),
        params![repo, branch, n],
        group_from_row,
    )?;
    let mut body = payload(&group);
    body["reason"] = json!(reason);
    let seq = event_log::append(
        conn,
        &NewEvent {
            kind: &format!("merge_group.{state}"),
            repo: Some(repo),
            object_id: Some(&group.commit),
            actor: None,
            payload: body,
        },
        now,
    )?;
    Ok(Some(seq))
}

/// What the required checks on a group's commit say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupVerdict {
    /// Every required check is green.
    Green,
    /// Some finished without passing: "name is state" each.
    Failed(Vec<String>),
    /// Some are pending or missing: "name is state" each.
    Waiting(Vec<String>),
}

/// The verdict of `rule`'s required checks among `checks` (those of the
/// group's commit).
pub fn verdict(rule: &crate::patches::MergeRule, checks: &[crate::checks::Check]) -> GroupVerdict {
    let (mut failed, mut waiting) = (Vec::new(), Vec::new());
    for name in &rule.required_checks {
        match checks
            .iter()
            .find(|c| &c.name == name)
            .map(|c| c.state.as_str())
        {
            Some("success") => {}
            Some("skipped") if rule.skipped_is_success => {}
            Some(state @ ("failure" | "error" | "skipped")) => {
                failed.push(format!("{name} is {state}"))
            }
            Some(state) => waiting.push(format!("{name} is {state}")),
            None => waiting.push(format!("{name} is missing")),
        }
    }
    if !failed.is_empty() {
        GroupVerdict::Failed(failed)
    } else if !waiting.is_empty() {
        GroupVerdict::Waiting(waiting)
    } else {
        GroupVerdict::Green
    }
}

/// How many patches the next group of a queue takes: `max_batch`, or,
/// while a failure is being bisected (`suspects` > 0), the first half of
/// the suspects (at least one).
pub fn batch_size(max_batch: u32, suspects: i64) -> usize {
    let max = usize::try_from(max_batch.max(1)).unwrap_or(1);
    if suspects <= 0 {
        return max;
    }
    let half = usize::try_from((suspects + 1) / 2).unwrap_or(1).max(1);
    half.min(max)
}

/// The bisect state after a group of `size` patches ended: `passed` or
/// not, with `suspects` before. `(suspects after, whether the group's one
/// patch is the breaker)`.
pub fn after_group(suspects: i64, size: usize, passed: bool) -> (i64, bool) {
    let size = i64::try_from(size).unwrap_or(i64::MAX);
    match (passed, size) {
        // The breaker is among the rest of the suspects.
        (true, _) => ((suspects - size).max(0), false),
        // One patch alone failed: it is the breaker.
        (false, 1) => (0, true),
        // Several failed together: bisect them.
        (false, _) => (size, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge_intents;
    use crate::objects::Person;

    fn member(p: char) -> Member {
        Member {
            patch: p.to_string().repeat(40),
            revision: 1,
            commit: "c".repeat(40),
        }
    }

    /// Groups are numbered per branch, one under test at a time as the
    /// driver uses them, ended once (a second end finds nothing), each
    /// with its event; claims give one driver per branch until they lapse.
    #[test]
    fn groups_claims_and_events() {
        let conn = crate::testing::db();
        assert_eq!(next_number(&conn, "r.git", "main").unwrap(), 1);
        let (g1, _) = open(
            &conn,
            "r.git",
            "main",
            &"1".repeat(40),
            &"0".repeat(40),
            &[member('a'), member('b')],
            10,
        )
        .unwrap();
        assert_eq!(g1.n, 1);
        assert_eq!(current(&conn, "r.git", "main").unwrap(), Some(g1.clone()));
        assert!(current(&conn, "r.git", "dev").unwrap().is_none());
        assert!(finish(
            &conn,
            "r.git",
            "main",
            1,
            "failed",
            Some("ci is failure"),
            11
        )
        .unwrap()
        .is_some());
        assert!(finish(&conn, "r.git", "main", 1, "merged", None, 12)
            .unwrap()
            .is_none());
        assert_eq!(next_number(&conn, "r.git", "main").unwrap(), 2);
        let (g2, _) = open(
            &conn,
            "r.git",
            "main",
            &"2".repeat(40),
            &"0".repeat(40),
            &[member('a')],
            13,
        )
        .unwrap();
        assert_eq!(g2.n, 2);
        let recent = recent(&conn, "r.git", "main", 10).unwrap();
        assert_eq!(recent.len(), 2);
        assert_eq!(recent[1].state, "failed");
        assert_eq!(recent[1].members.len(), 2);
        assert_eq!(recent[1].reason.as_deref(), Some("ci is failure"));
        let kinds: Vec<String> = {
            let mut stmt = conn
                .prepare("SELECT type FROM events WHERE type LIKE 'merge_group.%' ORDER BY seq")
                .unwrap();
            let rows = stmt.query_map([], |r| r.get(0)).unwrap();
            rows.collect::<Result<_, _>>().unwrap()
        };
        assert_eq!(
            kinds,
            [
                "merge_group.checks_requested",
                "merge_group.failed",
                "merge_group.checks_requested"
            ]
        );

        assert!(claim(&conn, "r.git", "main", "n1", 20, 30).unwrap());
        assert!(!claim(&conn, "r.git", "main", "n2", 25, 35).unwrap());
        assert!(claim(&conn, "r.git", "dev", "n2", 25, 35).unwrap());
        assert_eq!(
            driver(&conn, "r.git", "main").unwrap(),
            Some(("n1".into(), 30))
        );
        release(&conn, "r.git", "main", "n1").unwrap();
        assert!(claim(&conn, "r.git", "main", "n2", 26, 36).unwrap());
        assert!(
            claim(&conn, "r.git", "main", "n1", 36, 46).unwrap(),
            "lapsed"
        );
        set_suspects(&conn, "r.git", "main", 4).unwrap();
        assert_eq!(suspects(&conn, "r.git", "main").unwrap(), 4);
        // The group number survives the claims.
        assert_eq!(next_number(&conn, "r.git", "main").unwrap(), 3);
    }

    /// The queue is the branch's intents in the order they were queued.
    #[test]
    fn entries_follow_the_queue_order_of_the_branch() {
        let conn = crate::testing::db();
        for (id, base) in [('b', "main"), ('a', "main"), ('c', "dev")] {
            conn.execute(
                "INSERT INTO patches (repo, id, title, body, base, author, author_name,
                                      created_ms, updated_ms, status)
                 VALUES ('r.git', ?1, 't', '', ?2, 'p', 'p', 1, 1, 'open')",
                params![id.to_string().repeat(40), base],
            )
            .unwrap();
        }
        for id in ['b', 'c', 'a'] {
            let intent = Intent {
                repo: "r.git".into(),
                patch: id.to_string().repeat(40),
                revision: 1,
                requester: Person {
                    principal: "alice".into(),
                    name: "Alice".into(),
                    key: None,
                },
                lease_token: None,
                created_at: 0,
            };
            merge_intents::queue(&conn, &intent, 5).unwrap();
        }
        let main: Vec<char> = entries(&conn, "r.git", "main", 10)
            .unwrap()
            .iter()
            .map(|i| i.patch.chars().next().unwrap())
            .collect();
        assert_eq!(main, ['b', 'a'], "queue order, not id order");
        assert_eq!(entries(&conn, "r.git", "dev", 10).unwrap().len(), 1);
        assert_eq!(
            branches(&conn, 10).unwrap(),
            [
                ("r.git".to_string(), "dev".to_string()),
                ("r.git".into(), "main".into())
            ]
        );
    }

    /// Bisecting: a failed batch of 4 is halved until one patch alone
    /// fails; a passing half moves the suspicion to the rest.
    #[test]
    fn bisect_state() {
        assert_eq!(batch_size(8, 0), 8);
        assert_eq!(after_group(0, 4, false), (4, false));
        assert_eq!(batch_size(8, 4), 2);
        // The first half passes: the breaker is in the other two.
        assert_eq!(after_group(4, 2, true), (2, false));
        assert_eq!(batch_size(8, 2), 1);
        assert_eq!(after_group(2, 1, true), (1, false));
        assert_eq!(batch_size(8, 1), 1);
        assert_eq!(after_group(1, 1, false), (0, true));
        assert_eq!(batch_size(8, 0), 8);
        assert_eq!(batch_size(2, 7), 2);
        let rule = crate::patches::MergeRule {
            required_checks: vec!["ci".into(), "lint".into()],
            ..Default::default()
        };
        let check = |name: &str, state: &str| crate::checks::Check {
            commit: "c".repeat(40),
            name: name.into(),
            state: state.into(),
            url: None,
            description: None,
            updated_by: "ci".into(),
            updated_at: 0,
        };
        assert_eq!(
            verdict(&rule, &[check("ci", "success")]),
            GroupVerdict::Waiting(vec!["lint is missing".into()])
        );
        assert_eq!(
            verdict(&rule, &[check("ci", "success"), check("lint", "error")]),
            GroupVerdict::Failed(vec!["lint is error".into()])
        );
        assert_eq!(
            verdict(&rule, &[check("ci", "success"), check("lint", "success")]),
            GroupVerdict::Green
        );
    }
}
