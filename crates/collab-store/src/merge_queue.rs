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
//!   number, and the search for a breaker ([`Search`]): after a group of
//!   several patches failed, how many patches at the head of the queue
//!   hold the one that broke it (`suspects`), how they are searched
//!   (`search`: a round of exclusion groups tested at once, or bisection)
//!   and the first group of the round under test (`round_from`);
//! - `merge_groups`: one row per group built, with its members, its commit,
//!   the base it was built on, the suspects it leaves out (`excluded`, an
//!   exclusion group of a round) and how it ended (`testing`, `merged`,
//!   `failed`, `stale`: rebuilt because the base moved or a member left).
//!   Several groups of a branch are under test at once during a round.
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
    /// The suspects an exclusion group leaves out (patch ids, queue
    /// order); `None` for a plain group.
    pub excluded: Option<Vec<String>>,
    pub reason: Option<String>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    /// The group of a merge train this one was built on (its `base` is
    /// that group's commit); `None` when built on the base branch's tip.
    pub built_on: Option<i64>,
}

const GROUP_COLUMNS: &str = "repo, branch, n, commit_id, base_commit, members, state, reason, \
                             created_at, finished_at, excluded, built_on";

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
        excluded: r
            .get::<_, Option<String>>(10)?
            .and_then(|e| serde_json::from_str(&e).ok()),
        built_on: r.get(11)?,
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

/// How a queue searches for the patch that broke a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum How {
    /// No search: full batches.
    #[default]
    None,
    /// Rounds of exclusion groups tested at once (see [`chunks`]).
    Exclude,
    /// One group at a time, halving the suspects.
    Bisect,
}

impl How {
    pub fn as_str(self) -> &'static str {
        match self {
            How::None => "",
            How::Exclude => "exclude",
            How::Bisect => "bisect",
        }
    }

    fn parse(s: &str) -> How {
        match s {
            "exclude" => How::Exclude,
            "bisect" => How::Bisect,
            _ => How::None,
        }
    }
}

/// The search of a branch's queue for a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Search {
    /// How many patches at the head of the queue hold the one that broke
    /// the last failed group (0: none known, no search).
    pub suspects: i64,
    pub how: How,
    /// The first group of the round of exclusion groups under test (0:
    /// none built yet).
    pub round_from: i64,
}

impl Search {
    /// No search: full batches.
    pub const NONE: Search = Search {
        suspects: 0,
        how: How::None,
        round_from: 0,
    };

    /// A search of `suspects` by `how`, no round built yet (`NONE` when
    /// there is nothing to search).
    pub fn of(suspects: i64, how: How) -> Search {
        if suspects <= 0 || how == How::None {
            return Search::NONE;
        }
        Search {
            suspects,
            how,
            round_from: 0,
        }
    }
}

/// The search state of `branch` (see [`Search`]).
pub fn search(conn: &Connection, repo: &str, branch: &str) -> crate::sql::Result<Search> {
    Ok(conn
        .query_row(
            "SELECT suspects, search, round_from FROM merge_queue_branches
             WHERE repo = ?1 AND branch = ?2",
            params![repo, branch],
            |r| {
                let suspects: i64 = r.get(0)?;
                // Suspects from before version 15 (no `search`) are bisected.
                let how = match How::parse(&r.get::<_, String>(1)?) {
                    How::None if suspects > 0 => How::Bisect,
                    how => how,
                };
                Ok(Search {
                    suspects,
                    how,
                    round_from: r.get(2)?,
                })
            },
        )
        .optional()?
        .unwrap_or_default())
}

/// Set the search state of `branch`.
pub fn set_search(
    conn: &Connection,
    repo: &str,
    branch: &str,
    s: Search,
) -> crate::sql::Result<()> {
    ensure_branch(conn, repo, branch)?;
    let s = if s.suspects <= 0 { Search::NONE } else { s };
    conn.execute(
        "UPDATE merge_queue_branches SET suspects = ?3, search = ?4, round_from = ?5
         WHERE repo = ?1 AND branch = ?2",
        params![repo, branch, s.suspects, s.how.as_str(), s.round_from],
    )?;
    Ok(())
}

/// When `branch`'s round of exclusion groups has ended without one landing
/// (none left under test), what the search does next: every group of the
/// round failed, so two or more patches break it: bisect the suspects;
/// some ended stale (the base moved, a member left): build the round
/// again. `None` when no round is under test or some group of it still is.
pub fn end_round(
    conn: &Connection,
    repo: &str,
    branch: &str,
) -> crate::sql::Result<Option<Search>> {
    let s = search(conn, repo, branch)?;
    if s.how != How::Exclude || s.round_from <= 0 {
        return Ok(None);
    }
    let mut stmt =
        conn.prepare("SELECT state FROM merge_groups WHERE repo = ?1 AND branch = ?2 AND n >= ?3")?;
    let states = stmt
        .query_map(params![repo, branch, s.round_from], |r| {
            r.get::<_, String>(0)
        })?
        .collect::<crate::sql::Result<Vec<String>>>()?;
    if states.iter().any(|st| st == "testing") {
        return Ok(None);
    }
    let next = if states.iter().all(|st| st == "failed") && !states.is_empty() {
        Search::of(s.suspects, How::Bisect)
    } else {
        Search::of(s.suspects, How::Exclude)
    };
    set_search(conn, repo, branch, next)?;
    Ok(Some(next))
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

/// Every group of `branch` under test, oldest first (several during a
/// round of exclusion groups; at most [`crate::patches::MAX_PARALLEL`]).
pub fn live(conn: &Connection, repo: &str, branch: &str) -> crate::sql::Result<Vec<Group>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {GROUP_COLUMNS} FROM merge_groups
         WHERE repo = ?1 AND branch = ?2 AND state = 'testing' ORDER BY n LIMIT 64"
    ))?;
    let rows = stmt.query_map(params![repo, branch], group_from_row)?;
    rows.collect()
}

/// The latest group of `branch` that failed with `patch` in it.
pub fn last_failed_with(
    conn: &Connection,
    repo: &str,
    branch: &str,
    patch: &str,
) -> crate::sql::Result<Option<Group>> {
    Ok(recent(conn, repo, branch, 128)?
        .into_iter()
        .find(|g| g.state == "failed" && g.members.iter().any(|m| m.patch == patch)))
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

/// How many groups of a branch were built, and how each ended: what the
/// queue cost in CI runs (`stale` ones were thrown away).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct GroupCounts {
    pub built: i64,
    pub testing: i64,
    pub merged: i64,
    pub failed: i64,
    pub stale: i64,
}

/// The [`GroupCounts`] of `branch`.
pub fn counts(conn: &Connection, repo: &str, branch: &str) -> crate::sql::Result<GroupCounts> {
    let mut stmt = conn.prepare(
        "SELECT state, COUNT(*) FROM merge_groups WHERE repo = ?1 AND branch = ?2 GROUP BY state",
    )?;
    let rows = stmt.query_map(params![repo, branch], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
    })?;
    let mut c = GroupCounts::default();
    for row in rows {
        let (state, n) = row?;
        c.built += n;
        match state.as_str() {
            "testing" => c.testing = n,
            "merged" => c.merged = n,
            "failed" => c.failed = n,
            "stale" => c.stale = n,
            _ => {}
        }
    }
    Ok(c)
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
        "excluded": g.excluded,
        "built_on": g.built_on,
    })
}

/// Record a new group under test (the next number of `branch`), an
/// exclusion group when `excluded` is given, a group of a merge train
/// built on group `built_on` when given, and append
/// `merge_group.checks_requested`. The group as stored, with the event's
/// seq.
#[allow(clippy::too_many_arguments)]
pub fn open(
    conn: &Connection,
    repo: &str,
    branch: &str,
    commit: &str,
    base: &str,
    members: &[Member],
    excluded: Option<&[String]>,
    built_on: Option<i64>,
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
        excluded: excluded.map(<[String]>::to_vec),
        built_on,
    };
    conn.execute(
        &format!(
            "INSERT INTO merge_groups ({GROUP_COLUMNS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'testing', NULL, ?7, NULL, ?8, ?9)"
        ),
        params![
            repo,
            branch,
            n,
            commit,
            base,
            serde_json::to_string(members).unwrap_or_else(|_| "[]".into()),
            now,
            excluded.map(|e| serde_json::to_string(e).unwrap_or_else(|_| "[]".into())),
            built_on
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
            .filter(|c| rule.counts(c))
            .map(|c| c.state.as_str())
        {
            Some("success") => {}
            Some("skipped") if rule.skipped_is_success => {}
            Some(state @ ("failure" | "error" | "skipped")) => {
                failed.push(format!("{name} is {state}"))
            }
            Some(state) => waiting.push(format!("{name} is {state}")),
            None => waiting.push(rule.missing(name)),
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

/// The chunks of a round of exclusion groups over `suspects` patches with
/// at most `max_parallel` groups: `min(suspects, max_parallel)` ranges of
/// the suspects, as even as can be, in queue order. Group `i` of the round
/// holds every suspect but chunk `i`.
pub fn chunks(suspects: usize, max_parallel: u32) -> Vec<std::ops::Range<usize>> {
    let k = suspects.min(usize::try_from(max_parallel.max(1)).unwrap_or(1));
    (0..k)
        .map(|i| i * suspects / k..(i + 1) * suspects / k)
        .collect()
}

/// Whether the exclusion round of `s` was built beside group `n` as its
/// speculative round (`speculate`): a round under way that began after
/// the batch it searches.
pub fn speculated_over(s: Search, n: i64) -> bool {
    s.how == How::Exclude && s.round_from > n
}

/// The search after a plain group of `size` patches failed under `s`,
/// with `max_parallel` groups allowed at once: `(search after, whether
/// the group's one patch is the breaker)`. A full batch that failed is
/// searched by exclusion rounds when two groups may run at once; a half
/// that failed while bisecting is bisected further.
pub fn after_failure(s: Search, size: usize, max_parallel: u32) -> (Search, bool) {
    let (suspects, breaker) = after_group(s.suspects, size, false);
    let how = if s.how == How::None && max_parallel >= 2 {
        How::Exclude
    } else {
        How::Bisect
    };
    (Search::of(suspects, how), breaker)
}

/// The search after a plain group of `size` patches landed under `s`.
pub fn after_pass(s: Search, size: usize) -> Search {
    let (suspects, _) = after_group(s.suspects, size, true);
    Search::of(suspects, s.how)
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
            None,
            None,
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
            Some(&["b".repeat(40)]),
            None,
            13,
        )
        .unwrap();
        assert_eq!(g2.n, 2);
        let recent = recent(&conn, "r.git", "main", 10).unwrap();
        assert_eq!(recent.len(), 2);
        assert_eq!(recent[1].state, "failed");
        assert_eq!(recent[1].members.len(), 2);
        assert_eq!(recent[1].reason.as_deref(), Some("ci is failure"));
        assert_eq!(recent[0].excluded, Some(vec!["b".repeat(40)]));
        assert_eq!(recent[1].excluded, None);
        assert_eq!(
            live(&conn, "r.git", "main").unwrap(),
            std::slice::from_ref(&g2)
        );
        assert_eq!(
            last_failed_with(&conn, "r.git", "main", &"b".repeat(40))
                .unwrap()
                .map(|g| g.n),
            Some(1)
        );
        assert!(last_failed_with(&conn, "r.git", "main", &"z".repeat(40))
            .unwrap()
            .is_none());
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
        set_search(&conn, "r.git", "main", Search::of(4, How::Bisect)).unwrap();
        assert_eq!(
            search(&conn, "r.git", "main").unwrap(),
            Search::of(4, How::Bisect)
        );
        // The group number survives the claims.
        assert_eq!(next_number(&conn, "r.git", "main").unwrap(), 3);
    }

    /// A train's group keeps the group it was built on (in its row and its
    /// event); the counts add up every group by how it ended.
    #[test]
    fn train_groups_and_counts() {
        let conn = crate::testing::db();
        let (r, b) = ("r.git", "main");
        let (g1, _) = open(
            &conn,
            r,
            b,
            &"1".repeat(40),
            &"0".repeat(40),
            &[member('a')],
            None,
            None,
            1,
        )
        .unwrap();
        let (g2, _) = open(
            &conn,
            r,
            b,
            &"2".repeat(40),
            &g1.commit,
            &[member('b')],
            None,
            Some(g1.n),
            1,
        )
        .unwrap();
        assert_eq!(g2.built_on, Some(g1.n));
        assert_eq!(live(&conn, r, b).unwrap()[1].built_on, Some(g1.n));
        let built_on: Option<String> = conn
            .query_row(
                "SELECT payload FROM events WHERE type = 'merge_group.checks_requested'
                 ORDER BY seq DESC LIMIT 1",
                [],
                |row| row.get(0),
            )
            .unwrap();
        let payload: serde_json::Value = serde_json::from_str(&built_on.unwrap()).unwrap();
        assert_eq!(payload["built_on"], g1.n);
        finish(&conn, r, b, g1.n, "merged", None, 2).unwrap();
        let (g3, _) = open(
            &conn,
            r,
            b,
            &"3".repeat(40),
            &g2.commit,
            &[member('c')],
            None,
            Some(g2.n),
            2,
        )
        .unwrap();
        finish(&conn, r, b, g2.n, "failed", Some("ci"), 3).unwrap();
        finish(
            &conn,
            r,
            b,
            g3.n,
            "stale",
            Some("built on failed merge group 2"),
            3,
        )
        .unwrap();
        assert_eq!(
            counts(&conn, r, b).unwrap(),
            GroupCounts {
                built: 3,
                testing: 0,
                merged: 1,
                failed: 1,
                stale: 1
            }
        );
        assert_eq!(counts(&conn, r, "dev").unwrap(), GroupCounts::default());
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

    /// A round of exclusion groups: even chunks, at most `max_parallel`;
    /// a failed full batch starts a round (bisection when one group at a
    /// time); a round that ended all failed turns to bisection, one with a
    /// stale group is built again, one still under test goes on.
    #[test]
    fn exclusion_rounds() {
        assert_eq!(chunks(32, 8).len(), 8);
        assert!(chunks(32, 8).iter().all(|c| c.len() == 4));
        assert_eq!(chunks(4, 8), [0..1, 1..2, 2..3, 3..4]);
        assert_eq!(chunks(7, 3), [0..2, 2..4, 4..7]);
        assert_eq!(chunks(5, 1), vec![std::ops::Range { start: 0, end: 5 }]);
        assert_eq!(
            after_failure(Search::NONE, 8, 4),
            (Search::of(8, How::Exclude), false)
        );
        assert_eq!(
            after_failure(Search::NONE, 8, 1),
            (Search::of(8, How::Bisect), false)
        );
        assert_eq!(
            after_failure(Search::of(8, How::Bisect), 4, 4),
            (Search::of(4, How::Bisect), false)
        );
        assert_eq!(after_failure(Search::NONE, 1, 4), (Search::NONE, true));
        assert_eq!(
            after_pass(Search::of(4, How::Bisect), 2),
            Search::of(2, How::Bisect)
        );
        assert_eq!(after_pass(Search::of(2, How::Bisect), 2), Search::NONE);

        let conn = crate::testing::db();
        let (r, b) = ("r.git", "main");
        assert_eq!(end_round(&conn, r, b).unwrap(), None, "no search");
        let open_group = |c: char| {
            open(
                &conn,
                r,
                b,
                &c.to_string().repeat(40),
                &"0".repeat(40),
                &[member(c)],
                Some(&[]),
                None,
                1,
            )
            .unwrap()
            .0
            .n
        };
        let first = open_group('a');
        open_group('b');
        let round = Search {
            round_from: first,
            ..Search::of(4, How::Exclude)
        };
        set_search(&conn, r, b, round).unwrap();
        assert_eq!(end_round(&conn, r, b).unwrap(), None, "under test");
        finish(&conn, r, b, first, "failed", None, 2).unwrap();
        assert_eq!(
            end_round(&conn, r, b).unwrap(),
            None,
            "one still under test"
        );
        finish(&conn, r, b, first + 1, "failed", None, 2).unwrap();
        assert_eq!(
            end_round(&conn, r, b).unwrap(),
            Some(Search::of(4, How::Bisect))
        );
        assert_eq!(search(&conn, r, b).unwrap(), Search::of(4, How::Bisect));
        // Suspects written before version 15 (no `search`) are bisected.
        conn.execute(
            "UPDATE merge_queue_branches SET suspects = 3, search = '' WHERE repo = ?1",
            params![r],
        )
        .unwrap();
        assert_eq!(search(&conn, r, b).unwrap(), Search::of(3, How::Bisect));
        let next = open_group('c');
        set_search(
            &conn,
            r,
            b,
            Search {
                round_from: next,
                ..round
            },
        )
        .unwrap();
        finish(&conn, r, b, next, "stale", None, 3).unwrap();
        assert_eq!(
            end_round(&conn, r, b).unwrap(),
            Some(Search::of(4, How::Exclude)),
            "built again"
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
