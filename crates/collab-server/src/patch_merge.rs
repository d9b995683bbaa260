//! `collab-patch merge`: the server merges a patch's latest revision into
//! its base branch, by rule.
//!
//! Two steps, so that no git work runs on the writer thread:
//!
//! 1. [`prepare`] (a blocking task, read-only database connection): reads
//!    the base branch's tip, and makes the new tip: the revision's head
//!    when the base is its ancestor (fast-forward), else a merge commit
//!    (`Merge patch <id8>: <title>` with a `Patch: <id>` trailer, the
//!    merger as author and committer). A conflict refuses with the paths.
//!    It also finds what the move would merge or fix besides this patch
//!    (`hooks::merge_scan::plan`), exactly as a push of that move would.
//! 2. [`commit`] (inside the writer's transaction): re-reads the patch and
//!    checks again that it is open, that its latest revision is still the
//!    one prepared, that the merge rule allows it and, when the base is a
//!    fenced ref or a token is given, that the merger holds the live lease
//!    of a linked issue; then moves the base ref by compare-and-swap from
//!    the tip `prepare` saw, and records `patch.merged`, the `ref.updated`
//!    event and what the scan found, in that one transaction.
//!
//! A base branch that moved between the steps fails the swap: [`run`]
//! prepares again (a few times). [`run`] is the whole merge, for the verb
//! (`collab-patch merge`) and the driver of queued merges
//! (`crate::auto_merge`) alike. The ref moves before the transaction
//! commits: if the transaction then fails, the caller swaps the ref back
//! ([`Prepared::undo`]), so the branch and the record never disagree for
//! longer than the write takes.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use collab_store::sql::Connection;
use git2::{Oid, Repository};

use crate::events::Recorded;
use crate::hooks::merge_scan::{self, Found, Plan};
use crate::hooks::RefUpdate;
use collab_record::refs;
use collab_store::issues::Person;
use collab_store::leases;
use collab_store::patches::{self, MergeRule, MergedBy, PatchDetail, PatchError};

/// How the base branch takes the revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeKind {
    FastForward,
    MergeCommit,
    /// The head was already in the base branch (a push brought it and the
    /// scan has not recorded it): recorded, no ref moves.
    AlreadyMerged,
}

impl MergeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MergeKind::FastForward => "fast_forward",
            MergeKind::MergeCommit => "merge_commit",
            MergeKind::AlreadyMerged => "already_merged",
        }
    }
}

/// A merge made in git but not yet published.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub patch: String,
    pub revision: i64,
    pub base_ref: String,
    pub old_tip: Oid,
    pub new_tip: Oid,
    /// The commit that brings the patch in (the head, or the merge commit).
    pub commit: Oid,
    pub head: Oid,
    pub kind: MergeKind,
    /// What the move merges or fixes besides this patch.
    pub plan: Plan,
}

/// Why a merge did not happen.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The rule, a conflict, a patch that is not open, ...: the message is
    /// the reply.
    #[error(transparent)]
    Patch(#[from] PatchError),
    /// The base branch moved since `prepare`: prepare again.
    #[error("the base branch moved while merging")]
    Moved,
    /// Fencing refused: the issue's live holder and token, if any.
    #[error("fenced")]
    Fenced {
        issue: Option<String>,
        holder: Option<String>,
        token: Option<i64>,
        message: String,
    },
}

fn refuse(message: impl Into<String>) -> MergeError {
    MergeError::Patch(PatchError::Invalid(message.into()))
}

/// A signature git accepts for `who`: no angle brackets or newlines.
pub(crate) fn signature(who: &Person) -> Result<git2::Signature<'static>, MergeError> {
    let clean = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '<' | '>' | '\n' | '\r') && !c.is_control())
            .collect::<String>()
            .trim()
            .to_string()
    };
    let name = match clean(&who.name) {
        n if n.is_empty() => "git-collab".to_string(),
        n => n,
    };
    let email = format!("{}@git-collab", clean(&who.principal).replace(' ', "-"));
    git2::Signature::now(&name, &email).map_err(|e| refuse(format!("merge commit author: {e}")))
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// Make the merge in git (objects only; no ref moves).
pub fn prepare(
    repo: &Repository,
    reader: &Connection,
    repo_name: &str,
    detail: &PatchDetail,
    merger: &Person,
) -> Result<Prepared, MergeError> {
    let p = &detail.patch;
    if p.status != patches::PatchStatus::Open {
        return Err(refuse(format!(
            "cannot merge patch {}: it is {}",
            short(&p.id),
            p.status.as_str()
        )));
    }
    let latest = detail
        .latest()
        .ok_or_else(|| refuse("the patch has no revision"))?;
    let base_ref = refs::branch_ref(&p.base);
    let old_tip = repo
        .find_reference(&base_ref)
        .and_then(|r| r.peel_to_commit())
        .map_err(|_| refuse(format!("the base branch '{}' does not exist", p.base)))?
        .id();
    let head = Oid::from_str(&latest.head)
        .ok()
        .filter(|oid| repo.find_commit(*oid).is_ok())
        .ok_or_else(|| {
            refuse(format!(
                "revision {} is missing from the repository",
                latest.n
            ))
        })?;
    let (new_tip, commit, kind) = if head == old_tip
        || repo.graph_descendant_of(old_tip, head).unwrap_or(false)
    {
        let commit = collab_record::patch::merging_commit(repo, old_tip, head).unwrap_or(old_tip);
        (old_tip, commit, MergeKind::AlreadyMerged)
    } else if repo.graph_descendant_of(head, old_tip).unwrap_or(false) {
        (head, head, MergeKind::FastForward)
    } else {
        let merge = merge_commit(repo, detail, old_tip, head, merger)?;
        (merge, merge, MergeKind::MergeCommit)
    };
    let plan = if kind == MergeKind::AlreadyMerged {
        Plan::default()
    } else {
        let update = RefUpdate {
            old: Some(old_tip),
            new: Some(new_tip),
            refname: base_ref.clone(),
        };
        merge_scan::plan(repo, reader, repo_name, std::slice::from_ref(&update))
            .map_err(refuse)?
            .without_patch(&p.id)
    };
    Ok(Prepared {
        patch: p.id.clone(),
        revision: latest.n,
        base_ref,
        old_tip,
        new_tip,
        commit,
        head,
        kind,
        plan,
    })
}

fn merge_commit(
    repo: &Repository,
    detail: &PatchDetail,
    base_tip: Oid,
    head: Oid,
    merger: &Person,
) -> Result<Oid, MergeError> {
    let p = &detail.patch;
    let git = |e: git2::Error| refuse(format!("merging in git: {}", e.message()));
    let ours = repo.find_commit(base_tip).map_err(git)?;
    let theirs = repo.find_commit(head).map_err(git)?;
    let mut index = repo.merge_commits(&ours, &theirs, None).map_err(git)?;
    if index.has_conflicts() {
        let listed = conflict_paths(&index).map_err(git)?;
        return Err(refuse(format!(
            "merge refused: patch {} conflicts with '{}' in {listed}; push a revision rebased onto {}",
            short(&p.id),
            p.base,
            p.base
        )));
    }
    let tree = repo
        .find_tree(index.write_tree_to(repo).map_err(git)?)
        .map_err(git)?;
    let sig = signature(merger)?;
    let n = detail.latest().map_or(0, |r| r.n);
    let message = format!(
        "Merge patch {}: {}\n\nRevision {n} of the patch onto {}.\n\nPatch: {}\n",
        short(&p.id),
        p.title,
        p.base,
        p.id
    );
    repo.commit(None, &sig, &sig, &message, &tree, &[&ours, &theirs])
        .map_err(git)
}

/// The conflicting paths of a merge's index, sorted, at most 10 named
/// ("a.txt, b.txt and 3 more").
pub(crate) fn conflict_paths(index: &git2::Index) -> Result<String, git2::Error> {
    let mut paths: Vec<String> = index
        .conflicts()?
        .filter_map(|c| c.ok())
        .filter_map(|c| c.our.or(c.their).or(c.ancestor))
        .map(|e| String::from_utf8_lossy(&e.path).into_owned())
        .collect();
    paths.sort();
    paths.dedup();
    let more = paths.len().saturating_sub(10);
    paths.truncate(10);
    let mut listed = paths.join(", ");
    if more > 0 {
        listed.push_str(&format!(" and {more} more"));
    }
    Ok(listed)
}

/// Who merges, under which rule and fencing, inside the writer.
pub struct MergeCtx<'a> {
    pub w: &'a patches::WriteCtx<'a>,
    pub rule: MergeRule,
    /// Whether the base branch is a fenced ref of this repository.
    pub base_fenced: bool,
    /// `--lease-token`, if given.
    pub token: Option<i64>,
}

/// What `commit` recorded.
#[derive(Debug, Clone)]
pub struct Committed {
    pub written: patches::Written,
    pub found: Found,
}

/// Check again and publish `prepared`, inside the writer's transaction
/// (see the module doc). `repo` is opened by the caller on the writer
/// thread. On `Err` the ref is where it was.
pub fn commit(
    conn: &Connection,
    repo: &Repository,
    prepared: &Prepared,
    m: &MergeCtx<'_>,
) -> Result<Committed, MergeError> {
    let w = m.w;
    let detail = patches::show(conn, w.repo, &prepared.patch)?;
    let latest = detail.latest().map(|r| (r.n, r.head.clone()));
    if detail.patch.status == patches::PatchStatus::Open
        && latest != Some((prepared.revision, prepared.head.to_string()))
    {
        return Err(refuse(format!(
            "patch {} got a new revision while merging; review it and merge again",
            short(&prepared.patch)
        )));
    }
    // Checks too, read in this transaction: a check set to failure after
    // the merge was prepared still stops it.
    let checks = patches::head_checks(conn, &detail).map_err(PatchError::from)?;
    patches::verdict(&detail, &m.rule, &checks).map_err(PatchError::Rule)?;
    check_fence(conn, w, &detail, m)?;

    let moved = prepared.kind != MergeKind::AlreadyMerged;
    if moved {
        let message = format!("git-collab: merge patch {}", short(&prepared.patch));
        repo.reference_matching(
            &prepared.base_ref,
            prepared.new_tip,
            true,
            prepared.old_tip,
            &message,
        )
        .map_err(|_| MergeError::Moved)?;
    }
    let recorded = (|| -> Result<Committed, MergeError> {
        let written = patches::mark_merged(
            conn,
            w,
            &prepared.patch,
            &prepared.commit.to_string(),
            &MergedBy::Verb,
        )?;
        if moved {
            Recorded::ref_updated(
                w.repo,
                &prepared.base_ref,
                &prepared.old_tip.to_string(),
                &prepared.new_tip.to_string(),
                &w.actor.principal,
            )
            .append_in(conn, w.now)
            .map_err(PatchError::Sql)?;
        }
        let found = merge_scan::apply(conn, &prepared.plan, w.repo, w.actor, w.max_body, w.now);
        Ok(Committed { written, found })
    })();
    if recorded.is_err() && moved {
        prepared.undo(repo);
    }
    recorded
}

impl Prepared {
    /// Put the base branch back where `prepare` found it, if it is still
    /// where this merge put it.
    pub fn undo(&self, repo: &Repository) {
        if self.kind == MergeKind::AlreadyMerged {
            return;
        }
        let message = format!("git-collab: undo merge of patch {}", short(&self.patch));
        if let Err(e) =
            repo.reference_matching(&self.base_ref, self.old_tip, true, self.new_tip, &message)
        {
            tracing::error!(
                patch = self.patch,
                "could not put {} back after a failed merge: {e}",
                self.base_ref
            );
        }
    }
}

/// When the base is fenced, or a token is given: the merger must hold the
/// live lease of an issue linked to the patch, with that token.
pub fn check_fence(
    conn: &Connection,
    w: &patches::WriteCtx<'_>,
    detail: &PatchDetail,
    m: &MergeCtx<'_>,
) -> Result<(), MergeError> {
    if !m.base_fenced && m.token.is_none() {
        return Ok(());
    }
    let base = &detail.patch.base;
    let Some(token) = m.token else {
        return Err(MergeError::Fenced {
            issue: None,
            holder: None,
            token: None,
            message: format!(
                "'{base}' is a fenced branch: merge with --lease-token <N> of your live lease on an issue linked to the patch"
            ),
        });
    };
    if detail.issues.is_empty() {
        return Err(MergeError::Fenced {
            issue: None,
            holder: None,
            token: None,
            message: format!(
                "patch {} is linked to no issue, so lease token {token} fences nothing; link it (git push -o issue=<id>)",
                short(&detail.patch.id)
            ),
        });
    }
    match holds_one_of(
        conn,
        w.repo,
        &detail.issues,
        &w.actor.principal,
        token,
        w.now,
    )
    .map_err(PatchError::Sql)?
    {
        Ok(()) => Ok(()),
        Err(f) => Err(MergeError::Fenced {
            issue: Some(f.issue),
            holder: f.holder,
            token: f.token,
            message: f.message,
        }),
    }
}

/// Why a `--lease-token` fenced a write: the issue looked at last, its live
/// tenure if any, and the sentence saying so.
pub struct Fenced {
    pub issue: String,
    pub holder: Option<String>,
    pub token: Option<i64>,
    pub message: String,
}

/// Whether `principal` holds, with `token`, the live lease of one of
/// `issues` (never empty): what a fenced merge and a fenced check both ask.
pub fn holds_one_of(
    conn: &Connection,
    repo: &str,
    issues: &[String],
    principal: &str,
    token: i64,
    now: i64,
) -> collab_store::sql::Result<Result<(), Fenced>> {
    let mut last = None;
    for issue in issues {
        match leases::current_in(conn, repo, issue, now)? {
            Some(l) if l.token == token && l.holder == principal => return Ok(Ok(())),
            other => last = Some((issue.clone(), other)),
        }
    }
    let (issue, live) = last.expect("at least one issue");
    let message = match &live {
        Some(l) => format!(
            "lease token {token} is not live: issue {} is held by {} with token {}",
            short(&issue),
            l.holder,
            l.token
        ),
        None => format!(
            "lease token {token} is not live: issue {} has no live lease",
            short(&issue)
        ),
    };
    Ok(Err(Fenced {
        issue,
        holder: live.as_ref().map(|l| l.holder.clone()),
        token: live.as_ref().map(|l| l.token),
        message,
    }))
}

// ---------------------------------------------------------------- the whole merge

/// How often [`run`] prepares again when the base branch moves under it.
const MERGE_ATTEMPTS: usize = 3;

/// How often, at most, [`run`] runs a merge whose write found a lock busy
/// (the first run included; paced as the clients pace theirs,
/// `collab_proto::exit::busy_backoff_ms`).
const BUSY_ATTEMPTS: u32 = 5;

/// What [`run`] is asked to merge.
pub struct Request<'a> {
    pub app: &'a Arc<crate::app::App>,
    pub entry: &'a crate::repos::RepoEntry,
    /// The patch's id or a prefix of it.
    pub patch: String,
    /// The merger recorded (author and committer of a merge commit).
    pub merger: Person,
    /// `--lease-token`, if given.
    pub token: Option<i64>,
    /// Merge only this revision (a queued merge): a newer one refuses.
    pub revision: Option<i64>,
}

/// A merge [`run`] made.
#[derive(Debug, Clone)]
pub struct Merged {
    pub prepared: Prepared,
    pub committed: Committed,
}

/// Why [`run`] did not merge.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Refused (the rule, a conflict, fencing, a missing patch, ...).
    #[error(transparent)]
    Refused(#[from] MergeError),
    /// The base branch moved under every attempt.
    #[error(
        "the base branch kept moving; merge refused after {MERGE_ATTEMPTS} attempts, try again"
    )]
    KeptMoving,
    /// The database or the repository failed.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// Merge `req.patch`'s latest revision into its base branch, by the
/// repository's merge rule: read, check the rule (a refused merge makes no
/// commit), [`prepare`] on a read-pool thread, [`commit`] in the writer;
/// again when the base branch moved in between, or when its write found a
/// lock busy ([`BUSY_ATTEMPTS`]). One merge at a time per
/// repository on this node (merges never race each other here; outside
/// pushes and other nodes' merges can move the base, which the swap
/// catches).
pub async fn run(req: Request<'_>) -> Result<Merged, RunError> {
    let app = req.app;
    let repo = req.entry.name.clone();
    let rule = {
        let (rule_app, entry) = (app.clone(), req.entry.clone());
        tokio::task::spawn_blocking(move || crate::authz::merge_rule(&rule_app, &entry))
            .await
            .unwrap_or_default()
    };
    let queue = merge_lock(&repo);
    let _turn = queue.lock().await;
    let max_body = usize::try_from(app.config.max_issue_body).unwrap_or(usize::MAX);
    let (mut moves, mut busy) = (0, 0);
    loop {
        let (r, id) = (repo.clone(), req.patch.clone());
        let (detail, checks) = app
            .reads
            .read(move |conn| {
                Ok(patches::show(conn, &r, &id).and_then(|d| {
                    let checks = patches::head_checks(conn, &d)?;
                    Ok((d, checks))
                }))
            })
            .await?
            .map_err(MergeError::Patch)?;
        if let (Some(wanted), Some(latest)) = (req.revision, detail.latest()) {
            if latest.n != wanted {
                return Err(refuse(format!(
                    "patch {} has revision {} now; the merge was asked for revision {wanted}",
                    short(&detail.patch.id),
                    latest.n
                ))
                .into());
            }
        }
        // The rule first: a refused merge makes no commit.
        patches::verdict(&detail, &rule, &checks)
            .map_err(|why| MergeError::Patch(PatchError::Rule(why)))?;
        let base_fenced = crate::authz::base_is_fenced(app, req.entry, &detail.patch.base);
        let (path, name, merger) = (req.entry.path.clone(), repo.clone(), req.merger.clone());
        // Git work on a read-pool thread, with its read-only connection.
        let prepared = app
            .reads
            .read(move |reader| {
                let git = Repository::open_bare(&path)?;
                Ok(prepare(&git, reader, &name, &detail, &merger))
            })
            .await??;
        let (path, name, merger) = (req.entry.path.clone(), repo.clone(), req.merger.clone());
        let (mine, rule, token) = (prepared.clone(), rule.clone(), req.token);
        let done = app
            .writer
            .write("collab-patch merge", move |conn, now| {
                let git = Repository::open_bare(&path)?;
                let w = patches::WriteCtx {
                    repo: &name,
                    actor: &merger,
                    max_body,
                    now,
                };
                let m = MergeCtx {
                    w: &w,
                    rule,
                    base_fenced,
                    token,
                };
                match commit(conn, &git, &mine, &m) {
                    // A statement failed (busy, say): an `Err` rolls the
                    // write back to its savepoint, where PostgreSQL would
                    // otherwise keep the whole group's transaction aborted.
                    Err(MergeError::Patch(e)) if e.is_sql() => Err(e.into()),
                    other => Ok(other),
                }
            })
            .await;
        match done {
            Ok(Ok(committed)) => {
                return Ok(Merged {
                    prepared,
                    committed,
                })
            }
            Ok(Err(MergeError::Moved)) if moves + 1 < MERGE_ATTEMPTS => moves += 1,
            Ok(Err(MergeError::Moved)) => return Err(RunError::KeptMoving),
            Ok(Err(e)) => return Err(e.into()),
            Err(e) => {
                // The transaction did not commit: put the branch back.
                let path = req.entry.path.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    if let Ok(git) = Repository::open_bare(&path) {
                        prepared.undo(&git);
                    }
                })
                .await;
                // Busy: a lock another node held (an issue a close ends,
                // a row) past the wait; nothing was written, so the merge
                // is prepared and run again here, a few times, before the
                // caller hears "busy" (docs/postgres.md).
                if collab_store::writer::is_busy(&e) && busy + 1 < BUSY_ATTEMPTS {
                    busy += 1;
                    let pause = collab_proto::exit::busy_backoff_ms(busy + 1, rand::random());
                    tracing::info!(repo, "collab-patch merge: busy ({e:#}); running it again");
                    tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                    continue;
                }
                return Err(e.into());
            }
        }
    }
}

/// The merge lock of `repo`. Entries nobody holds are dropped when the
/// next one is taken, so the map stays as small as the merges in flight.
pub(crate) fn merge_lock(repo: &str) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
        LazyLock::new(Default::default);
    let mut locks = LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    locks.retain(|_, q| Arc::strong_count(q) > 1);
    locks.entry(repo.to_string()).or_default().clone()
}
