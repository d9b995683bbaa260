//! Queued tenure: a patch in a branch's merge queue holds the lease it was
//! queued with. Once `collab-patch merge --lease-token N` puts a patch into
//! a merge queue, the tenure of the linked issue held with token N is the
//! queue's to carry until the patch lands or leaves the queue: a row here
//! (the issue, the patch, the token, the branch, and the TTL to give back)
//! and the lease made open-ended (`expires_at` NULL), so no expiry pass
//! ends it and no renewal is needed. The token stays the same, so the
//! fence on the issue's refs and at landing still holds; a release or a
//! break still ends the tenure (the queue driver then drops the patch,
//! [`ended`]).
//!
//! When the patch leaves the queue for a reason that is not its own fault
//! (cancelled, a new revision, ...), the tenure gets its TTL back from that
//! moment ([`release_in`], run by `merge_intents::dequeue` and `fulfil`).
//! When the queue evicts it (it broke a group, it conflicts), the issue
//! goes back to its author: a fresh tenure with a new token for
//! `leases.eviction_grace`, a comment naming why, and the label
//! [`EVICTED_LABEL`] ([`evict_in`]); when that tenure expires the issue is
//! ready again. A hold whose token is no longer the live one holds
//! nothing; its row goes when its patch leaves the queue.

use crate::issues::{self, IssueError, Person};
use crate::leases::{self, Claim, Lease, Policy};
use crate::sql::{params, Connection, OptionalExtension as _};
use serde_json::json;

/// The label an issue gets when the merge queue evicts its patch.
pub const EVICTED_LABEL: &str = "queue-evicted";

/// A merge queue's hold on the tenure of an issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub repo: String,
    pub issue_id: String,
    pub patch: String,
    pub token: i64,
    pub holder: String,
    pub branch: String,
    /// The TTL given back when the patch leaves the queue; None: the
    /// tenure was open-ended.
    pub ttl: Option<i64>,
    pub held_at: i64,
}

const COLUMNS: &str = "repo, issue_id, patch_id, token, holder, branch, ttl, held_at";

fn from_row(r: &crate::sql::Row<'_>) -> crate::sql::Result<Hold> {
    Ok(Hold {
        repo: r.get(0)?,
        issue_id: r.get(1)?,
        patch: r.get(2)?,
        token: r.get(3)?,
        holder: r.get(4)?,
        branch: r.get(5)?,
        ttl: r.get(6)?,
        held_at: r.get(7)?,
    })
}

/// The holds of `patch`'s queued merge.
pub fn of_patch(conn: &Connection, repo: &str, patch: &str) -> crate::sql::Result<Vec<Hold>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM lease_queue_holds WHERE repo = ?1 AND patch_id = ?2
         ORDER BY issue_id"
    ))?;
    let rows = stmt.query_map(params![repo, patch], from_row)?;
    rows.collect()
}

/// The hold on `lease` (its issue and token), if a queued patch has one:
/// what `collab-lease show` reports as `queued`. A pure read.
pub fn of_lease(conn: &Connection, lease: &Lease) -> crate::sql::Result<Option<Hold>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM lease_queue_holds
         WHERE repo = ?1 AND issue_id = ?2 AND token = ?3
         ORDER BY held_at, patch_id LIMIT 1"
    ))?
    .query_row(params![lease.repo, lease.issue_id, lease.token], from_row)
    .optional()
}

/// `patch` joined the merge queue of `branch` with `token`: among
/// `issues` (the patch's linked issues), the one whose live lease `holder`
/// holds with that token is held by the queue from now on. Its issue, or
/// None when no such lease is live (the verb's fence check refused that
/// already; nothing is held). A hold this patch had on another tenure
/// (queued again with another token) is given back.
#[allow(clippy::too_many_arguments)]
pub fn take_in(
    conn: &Connection,
    repo: &str,
    patch: &str,
    branch: &str,
    issues: &[String],
    holder: &str,
    token: i64,
    now: i64,
) -> crate::sql::Result<Option<String>> {
    let mut target = None;
    for issue in issues {
        leases::lock_issue(conn, repo, issue)?;
        if let Some(l) = leases::live_in(conn, repo, issue, now)? {
            if l.holder == holder && l.token == token {
                target = Some(l);
                break;
            }
        }
    }
    for old in of_patch(conn, repo, patch)? {
        let same = target
            .as_ref()
            .is_some_and(|l| l.issue_id == old.issue_id && l.token == old.token);
        if !same {
            give_back(conn, &old, now)?;
        }
    }
    let Some(lease) = target else {
        return Ok(None);
    };
    // The TTL the tenure had: what another queued patch holding it already
    // recorded, else the span of its last acquire or renewal.
    let ttl = match of_lease(conn, &lease)? {
        Some(other) => other.ttl,
        None => lease
            .expires_at
            .map(|e| (e - lease.renewed_at.unwrap_or(lease.acquired_at)).max(1)),
    };
    conn.prepare_cached(&format!(
        "INSERT INTO lease_queue_holds ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (repo, issue_id, patch_id) DO UPDATE SET
             token = excluded.token, holder = excluded.holder, branch = excluded.branch,
             ttl = excluded.ttl, held_at = excluded.held_at"
    ))?
    .execute(params![
        repo,
        lease.issue_id,
        patch,
        token,
        holder,
        branch,
        ttl,
        now
    ])?;
    conn.prepare_cached(
        "UPDATE leases SET expires_at = NULL WHERE repo = ?1 AND issue_id = ?2 AND token = ?3",
    )?
    .execute(params![repo, lease.issue_id, token])?;
    leases::record(
        conn,
        "lease.queued",
        &lease,
        Some(holder),
        json!({
            "holder": holder,
            "token": token,
            "patch": patch,
            "branch": branch,
            "expires_at": leases::rfc3339(lease.expires_at),
        }),
        now,
    )?;
    Ok(Some(lease.issue_id))
}

/// `patch` left the queue, not by its own fault, or landed: give back
/// every tenure it held (each gets its TTL again, counted from `now`,
/// unless another queued patch still holds it).
pub fn release_in(conn: &Connection, repo: &str, patch: &str, now: i64) -> crate::sql::Result<()> {
    for hold in of_patch(conn, repo, patch)? {
        give_back(conn, &hold, now)?;
    }
    Ok(())
}

/// Drop `hold`'s row and, when it was the tenure's last hold and the
/// tenure is still live with its token, end the open-ended stretch.
fn give_back(conn: &Connection, hold: &Hold, now: i64) -> crate::sql::Result<()> {
    leases::lock_issue(conn, &hold.repo, &hold.issue_id)?;
    conn.prepare_cached(
        "DELETE FROM lease_queue_holds WHERE repo = ?1 AND issue_id = ?2 AND patch_id = ?3",
    )?
    .execute(params![hold.repo, hold.issue_id, hold.patch])?;
    let Some(mut live) = leases::live_in(conn, &hold.repo, &hold.issue_id, now)? else {
        return Ok(());
    };
    if live.token != hold.token || of_lease(conn, &live)?.is_some() {
        return Ok(());
    }
    live.expires_at = hold.ttl.map(|ttl| now.saturating_add(ttl));
    conn.prepare_cached("UPDATE leases SET expires_at = ?3 WHERE repo = ?1 AND issue_id = ?2")?
        .execute(params![hold.repo, hold.issue_id, live.expires_at])?;
    leases::record(
        conn,
        "lease.unqueued",
        &live,
        None,
        json!({
            "holder": live.holder,
            "token": live.token,
            "patch": hold.patch,
            "expires_at": leases::rfc3339(live.expires_at),
        }),
        now,
    )
}

/// For the queue driver: why `patch`'s queued merge can no longer be
/// carried, when a tenure it held has ended (released by its holder,
/// broken, the issue closed, ...). None while every hold is live. A pure
/// read.
pub fn ended(
    conn: &Connection,
    repo: &str,
    patch: &str,
    now: i64,
) -> crate::sql::Result<Option<String>> {
    for hold in of_patch(conn, repo, patch)? {
        let live = leases::live_in(conn, repo, &hold.issue_id, now)?;
        if live.is_some_and(|l| l.token == hold.token) {
            continue;
        }
        let how = how_it_ended(conn, &hold)?;
        return Ok(Some(format!(
            "the lease of issue {} (token {}) it was queued with {how}",
            short(&hold.issue_id),
            hold.token
        )));
    }
    Ok(None)
}

/// The words for how the tenure of `hold` ended, from the issue's last
/// lease event of that token.
fn how_it_ended(conn: &Connection, hold: &Hold) -> crate::sql::Result<String> {
    let last: Option<(String, Option<String>, String)> = conn
        .prepare_cached(
            "SELECT type, actor, payload FROM events
             WHERE repo = ?1 AND object_id = ?2
               AND type IN ('lease.released', 'lease.broken', 'lease.expired', 'lease.evicted')
             ORDER BY seq DESC LIMIT 1",
        )?
        .query_row(params![hold.repo, hold.issue_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?;
    let Some((kind, actor, payload)) = last else {
        return Ok("ended".into());
    };
    let payload: serde_json::Value = serde_json::from_str(&payload).unwrap_or_default();
    if payload["token"].as_i64() != Some(hold.token) {
        return Ok("ended".into());
    }
    let text = |k: &str| payload[k].as_str().unwrap_or("?").to_string();
    Ok(match kind.as_str() {
        "lease.released" if payload["reason"].as_str() == Some("issue_closed") => {
            "ended: the issue was closed".into()
        }
        "lease.released" => format!(
            "was released by {}",
            actor.unwrap_or_else(|| text("holder"))
        ),
        "lease.broken" => format!("was broken by {}: {}", text("by"), text("reason")),
        "lease.expired" => "expired".into(),
        _ => "ended".into(),
    })
}

/// What an eviction did to the issue of a held tenure.
#[derive(Debug, Clone, PartialEq)]
pub struct Evicted {
    pub issue_id: String,
    /// The author's fresh tenure (None: no grace, or the tenure had
    /// already ended).
    pub lease: Option<Lease>,
}

/// The merge queue evicts `patch` for `reason` (it broke a group, it
/// conflicts): each issue whose tenure it held goes back to its author
/// with a fresh tenure (a new token) for `policy.eviction_grace`, gets a
/// comment naming the reason and the label [`EVICTED_LABEL`], and an
/// `lease.evicted` event. Run before `merge_intents::dequeue` in the same
/// transaction.
pub fn evict_in(
    conn: &Connection,
    repo: &str,
    patch: &str,
    reason: &str,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Vec<Evicted>> {
    let mut evicted = Vec::new();
    for hold in of_patch(conn, repo, patch)? {
        leases::lock_issue(conn, repo, &hold.issue_id)?;
        conn.prepare_cached(
            "DELETE FROM lease_queue_holds WHERE repo = ?1 AND issue_id = ?2 AND patch_id = ?3",
        )?
        .execute(params![repo, hold.issue_id, patch])?;
        let live =
            leases::live_in(conn, repo, &hold.issue_id, now)?.filter(|l| l.token == hold.token);
        let mut fresh = None;
        if let Some(old) = &live {
            // The old token ends here: work pushed under it is fenced out.
            leases::delete_row(conn, repo, &hold.issue_id)?;
            if policy.eviction_grace > 0 {
                let claim = Claim {
                    repo: repo.into(),
                    issue_id: hold.issue_id.clone(),
                    holder: old.holder.clone(),
                    ttl_secs: Some(policy.eviction_grace),
                    note: old.note.clone(),
                };
                let grace = Policy {
                    max_lifetime: None,
                    ..*policy
                };
                if let leases::Acquire::Acquired { lease, .. } =
                    leases::begin_tenure(conn, &claim, &grace, now)?
                {
                    fresh = Some(lease);
                }
            }
            leases::record(
                conn,
                "lease.evicted",
                old,
                None,
                json!({
                    "holder": old.holder,
                    "token": old.token,
                    "patch": patch,
                    "branch": hold.branch,
                    "reason": reason,
                    "new_token": fresh.as_ref().map(|l| l.token),
                    "expires_at": leases::rfc3339(fresh.as_ref().and_then(|l| l.expires_at)),
                }),
                now,
            )?;
        }
        tell_the_issue(conn, &hold, reason, fresh.as_ref(), now)?;
        evicted.push(Evicted {
            issue_id: hold.issue_id.clone(),
            lease: fresh,
        });
    }
    Ok(evicted)
}

/// The comment and the label an evicted patch's issue gets (an open issue
/// of this server; a closed or unknown one is left as it is).
fn tell_the_issue(
    conn: &Connection,
    hold: &Hold,
    reason: &str,
    fresh: Option<&Lease>,
    now: i64,
) -> crate::sql::Result<()> {
    let open = issues::get(conn, &hold.repo, &hold.issue_id)?
        .is_some_and(|i| i.status == issues::IssueStatus::Open);
    if !open {
        return Ok(());
    }
    let queue = queue_person();
    let w = issues::WriteCtx {
        repo: &hold.repo,
        actor: &queue,
        fence: None,
        max_body: usize::MAX,
        now,
    };
    let back = match fresh {
        Some(l) => format!(
            "The issue is back with {} under a new lease (token {}) until {}; after that it \
             returns to the ready queue, labelled `{EVICTED_LABEL}`.",
            l.holder,
            l.token,
            leases::rfc3339(l.expires_at).as_str().unwrap_or("-"),
        ),
        None => format!("The issue returns to the ready queue, labelled `{EVICTED_LABEL}`."),
    };
    let body = format!(
        "The merge queue of '{}' evicted patch {} (lease token {}): {reason}.\n\n{back}",
        hold.branch,
        short(&hold.patch),
        hold.token
    );
    for written in [
        issues::comment(conn, &w, &hold.issue_id, &body).map(drop),
        issues::label(conn, &w, &hold.issue_id, &[EVICTED_LABEL.to_string()], &[]).map(drop),
    ] {
        match written {
            // Already labelled, or at its most labels: the comment says it.
            Ok(()) | Err(IssueError::Invalid(_)) => {}
            Err(IssueError::Sql(e)) => return Err(e),
            Err(e) => tracing::warn!(issue = hold.issue_id, "eviction note: {e}"),
        }
    }
    Ok(())
}

/// The author of what the queue writes on an issue.
fn queue_person() -> Person {
    Person {
        principal: "git-collab".into(),
        name: "merge queue".into(),
        key: None,
    }
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leases::{break_in, current_in, expire_due_in, renew_in, status_in, Queued};

    const REPO: &str = "team/app.git";
    const T0: i64 = 1_790_000_000;

    fn alice() -> Person {
        Person {
            principal: "alice".into(),
            name: "alice".into(),
            key: None,
        }
    }

    /// An open issue of `REPO` that alice holds with `ttl` from `T0`.
    fn leased_issue(conn: &Connection, title: &str, ttl: i64) -> (String, Lease) {
        let a = alice();
        let w = issues::WriteCtx {
            repo: REPO,
            actor: &a,
            fence: None,
            max_body: 1 << 16,
            now: T0,
        };
        let new = issues::NewIssue {
            title: title.into(),
            ..Default::default()
        };
        let issue = issues::open(conn, &w, &new).unwrap().issue;
        let claim = Claim::new(REPO, &issue, "alice", Some(ttl));
        match leases::acquire_in(conn, &claim, &Policy::default(), T0).unwrap() {
            leases::Acquire::Acquired { lease, .. } => (issue, lease),
            other => panic!("{other:?}"),
        }
    }

    /// Held, the tenure outlives its TTL with the same token, a renew keeps
    /// it open-ended (on PostgreSQL through the lease functions and the
    /// trigger), and leaving the queue gives the TTL last asked for back.
    #[test]
    fn a_held_tenure_outlives_its_ttl_and_gets_it_back_on_leaving() {
        let conn = crate::testing::db();
        let (issue, lease) = leased_issue(&conn, "Fix it", 30);
        let held = take_in(
            &conn,
            REPO,
            "p1",
            "main",
            std::slice::from_ref(&issue),
            "alice",
            1,
            T0 + 10,
        );
        assert_eq!(held.unwrap(), Some(issue.clone()));
        let late = T0 + 1000;
        assert!(expire_due_in(&conn, &Policy::default(), late)
            .unwrap()
            .ended
            .is_empty());
        let live = current_in(&conn, REPO, &issue, late).unwrap().unwrap();
        assert_eq!((live.token, live.expires_at), (lease.token, None));
        let status = status_in(&conn, REPO, &issue, late).unwrap();
        let queued = Queued {
            patch: "p1".into(),
            branch: "main".into(),
        };
        assert_eq!(status.queued, Some(queued));

        let claim = Claim::new(REPO, &issue, "alice", Some(60));
        assert!(matches!(
            renew_in(&conn, &claim, &Policy::default(), late).unwrap(),
            leases::Renew::Renewed(_)
        ));
        let live = current_in(&conn, REPO, &issue, late).unwrap().unwrap();
        assert_eq!(live.expires_at, None, "a renew keeps a held tenure open");
        assert_eq!(ended(&conn, REPO, "p1", late).unwrap(), None);

        release_in(&conn, REPO, "p1", late + 5).unwrap();
        let live = current_in(&conn, REPO, &issue, late + 5).unwrap().unwrap();
        assert_eq!(
            (live.token, live.expires_at),
            (lease.token, Some(late + 65))
        );
        assert!(of_patch(&conn, REPO, "p1").unwrap().is_empty());
        assert_eq!(status_in(&conn, REPO, &issue, late).unwrap().queued, None);
    }

    /// Only the caller's live tenure with that token is held.
    #[test]
    fn a_wrong_token_or_holder_holds_nothing() {
        let conn = crate::testing::db();
        let (issue, _) = leased_issue(&conn, "Fix it", 30);
        let issues = [issue.clone()];
        assert_eq!(
            take_in(&conn, REPO, "p", "main", &issues, "alice", 2, T0).unwrap(),
            None
        );
        assert_eq!(
            take_in(&conn, REPO, "p", "main", &issues, "bob", 1, T0).unwrap(),
            None
        );
        assert!(of_patch(&conn, REPO, "p").unwrap().is_empty());
        let live = current_in(&conn, REPO, &issue, T0).unwrap().unwrap();
        assert_eq!(live.expires_at, Some(T0 + 30));
    }

    /// A break ends a held tenure as ever, and the driver learns how.
    #[test]
    fn a_broken_held_tenure_ends_and_says_how() {
        let conn = crate::testing::db();
        let (issue, _) = leased_issue(&conn, "Fix it", 30);
        take_in(
            &conn,
            REPO,
            "p1",
            "main",
            std::slice::from_ref(&issue),
            "alice",
            1,
            T0,
        )
        .unwrap();
        let p = Policy::default();
        break_in(&conn, REPO, &issue, "admin", "agent died", &p, T0 + 5).unwrap();
        let why = ended(&conn, REPO, "p1", T0 + 6).unwrap().unwrap();
        assert!(why.contains("(token 1)"), "{why}");
        assert!(why.contains("was broken by admin: agent died"), "{why}");
    }

    /// An eviction ends the old tenure and hands the issue back to its
    /// holder under a new token for the grace, with a comment and the
    /// label; no grace, no new tenure.
    #[test]
    fn an_eviction_hands_the_issue_back_under_a_new_token() {
        let conn = crate::testing::db();
        let (issue, lease) = leased_issue(&conn, "Fix it", 30);
        take_in(
            &conn,
            REPO,
            "p1",
            "main",
            std::slice::from_ref(&issue),
            "alice",
            1,
            T0,
        )
        .unwrap();
        let reason =
            "required checks failed on merge group 3 (commit 1a2b3c4d): ci/test is failure";
        let policy = Policy {
            eviction_grace: 300,
            ..Policy::default()
        };
        let evicted = evict_in(&conn, REPO, "p1", reason, &policy, T0 + 100).unwrap();
        let fresh = evicted[0].lease.clone().unwrap();
        assert_eq!(fresh.holder, "alice");
        assert!(fresh.token > lease.token);
        assert_eq!(fresh.expires_at, Some(T0 + 400));
        assert_eq!(
            current_in(&conn, REPO, &issue, T0 + 100).unwrap(),
            Some(fresh)
        );
        assert!(of_patch(&conn, REPO, "p1").unwrap().is_empty());
        let shown = issues::show(&conn, REPO, &issue).unwrap();
        assert!(shown.issue.labels.contains(&EVICTED_LABEL.to_string()));
        let body = &shown.comments.last().unwrap().body;
        assert!(
            body.contains("ci/test is failure") && body.contains("merge group 3"),
            "{body}"
        );
        // The grace runs out like any TTL: the issue is free again.
        let expired = expire_due_in(&conn, &policy, T0 + 400).unwrap();
        assert_eq!(expired.ended, vec![(REPO.to_string(), issue.clone())]);

        let (other, _) = leased_issue(&conn, "Fix that", 30);
        take_in(
            &conn,
            REPO,
            "p2",
            "main",
            std::slice::from_ref(&other),
            "alice",
            1,
            T0,
        )
        .unwrap();
        let none = Policy {
            eviction_grace: 0,
            ..Policy::default()
        };
        let evicted = evict_in(&conn, REPO, "p2", reason, &none, T0 + 100).unwrap();
        assert_eq!(evicted[0].lease, None);
        assert_eq!(current_in(&conn, REPO, &other, T0 + 100).unwrap(), None);
    }
}
