//! Patches: Gerrit-style review kept in git. A patch is a DAG of signed
//! events under `refs/collab/patches/<id>` (`patch.open`, `patch.revise`,
//! `patch.review`, `patch.comment`, `patch.close`, `patch.merge`); its
//! state ([`PatchState`]: revisions, votes, comments, status, timeline) is
//! a pure fold of that DAG in replay order. Each revision's head commit is
//! kept reachable by a pin, `refs/collab/revisions/<id>/<n>`.
//!
//! Revisions are numbered in replay order, so two revisions pushed
//! concurrently by two clones get the same numbers on both sides once
//! synced. Reviews and comments name their revision by the id of the event
//! that made it, which never shifts. Pins are create-only: when concurrent
//! revisions took the same pin number, sync keeps the remote's and re-pins
//! ours at the next free number ([`pin_revisions`]), so a pin's number is
//! normally, but not always, its revision's number.
//!
//! This module owns the state and the operations the CLI runs (create,
//! revise, review, comment, close, merge, checkout). Every operation checks
//! its input against the current state first and writes nothing when a
//! check fails. Diffs are in `diff.rs`, the merge scan in `merge_scan.rs`.

use chrono::{DateTime, Utc};
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::event::{
    Action, Author, Event, PatchComment, PatchMerge, PatchOpen, PatchReview, PatchRevise, Verdict,
};
use crate::issue::{short_id, Identity};
use crate::refs;
use crate::replay::{self, Checker, DroppedEvent, Fold, Verified};
use crate::store;
use crate::timeline::{TimelineEntry, TimelineItem};
use crate::trust::TrustList;

/// Where a patch stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PatchStatus {
    Open,
    Merged,
    Closed,
}

impl std::fmt::Display for PatchStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            PatchStatus::Open => "open",
            PatchStatus::Merged => "merged",
            PatchStatus::Closed => "closed",
        })
    }
}

/// One revision: what the patch proposed at one point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    /// 1-based, in replay order.
    pub n: u32,
    /// The id of the event that made it (the patch id for revision 1).
    pub id: String,
    /// The proposed commit.
    pub head: String,
    /// The base-branch commit it starts from, when its event recorded one.
    pub base_commit: Option<String>,
    pub author: Author,
    pub at: DateTime<Utc>,
}

/// A reviewer's current vote on one revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    /// The id of the `patch.review` event.
    pub id: String,
    /// The revision's number.
    pub revision: u32,
    pub author: Author,
    pub at: DateTime<Utc>,
    pub verdict: Verdict,
    pub body: String,
    /// The principal the vote is for, when its event names one (the
    /// server's export; see `PatchReview::voter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voter: Option<String>,
}

/// A comment on the patch; inline when it has a `path`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    /// The id of the `patch.comment` event.
    pub id: String,
    pub author: Author,
    pub at: DateTime<Utc>,
    pub body: String,
    /// The revision's number, when the comment names one.
    pub revision: Option<u32>,
    pub path: Option<String>,
    pub line: Option<u32>,
}

/// How the patch landed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Merge {
    /// The base-branch commit that brought the patch in.
    pub commit: String,
    /// Who recorded it (the merger, or whoever's sync found it).
    pub author: Author,
    pub at: DateTime<Utc>,
}

/// A patch as its DAG says it is now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchState {
    /// The full 40-hex id of the root commit.
    pub id: String,
    pub title: String,
    pub body: String,
    /// Who opened it.
    pub author: Author,
    /// The branch it proposes to change.
    pub base: String,
    pub created_at: DateTime<Utc>,
    /// The latest `at` among the applied events.
    pub updated_at: DateTime<Utc>,
    pub status: PatchStatus,
    /// Never empty: revision 1 comes from `patch.open`.
    pub revisions: Vec<Revision>,
    /// The current votes: one per author and revision, in replay order.
    pub reviews: Vec<Review>,
    /// In replay order.
    pub comments: Vec<Comment>,
    /// Set once a `patch.merge` applied (the first one in replay order).
    pub merge: Option<Merge>,
    /// Every applied event, in replay order.
    pub timeline: Vec<TimelineEntry>,
}

impl PatchState {
    /// The latest revision.
    pub fn latest(&self) -> &Revision {
        self.revisions
            .last()
            .expect("a patch always has revision 1")
    }

    /// Revision `n`, or the latest one for `None`.
    pub fn revision(&self, n: Option<u32>) -> Result<&Revision> {
        let Some(n) = n else {
            return Ok(self.latest());
        };
        self.revisions.iter().find(|r| r.n == n).ok_or_else(|| {
            Error::Invalid(format!(
                "patch {} has no revision {n} (it has 1 to {})",
                short_id(&self.id),
                self.revisions.len()
            ))
        })
    }

    /// The current votes on revision `n`.
    pub fn reviews_of(&self, n: u32) -> impl Iterator<Item = &Review> {
        self.reviews.iter().filter(move |r| r.revision == n)
    }

    fn revision_by_event(&self, id: &str) -> Option<u32> {
        self.revisions.iter().find(|r| r.id == id).map(|r| r.n)
    }
}

/// The full outcome of replaying one patch DAG.
#[derive(Clone, Debug)]
pub struct PatchReplay {
    pub id: String,
    pub tip: Oid,
    /// `Err(reason)` when the patch is invalid (its root was dropped).
    pub state: Result<PatchState, String>,
    pub dropped: Vec<DroppedEvent>,
}

/// The pure replay of one patch DAG: verifies, orders and folds its
/// commits. Returns the state (or why the patch is invalid) and the
/// dropped events, sorted by commit id.
pub fn replay(
    root_id: &str,
    dag: &[store::DagCommit],
    checker: &mut Checker,
) -> (Result<PatchState, String>, Vec<DroppedEvent>) {
    replay::fold(root_id, dag, checker)
}

impl Fold for PatchState {
    fn from_root(root: &Verified) -> Result<PatchState, String> {
        open_state(root)
    }

    fn apply(&mut self, event: &Verified) -> Result<(), String> {
        apply(self, event)
    }
}

fn open_state(root: &Verified) -> Result<PatchState, String> {
    let Action::PatchOpen(open) = &root.event.action else {
        return Err(format!(
            "root event is {}, not patch.open",
            root.event.action.kind()
        ));
    };
    let ev = &root.event;
    let id = root.oid.to_string();
    Ok(PatchState {
        id: id.clone(),
        title: open.title.clone(),
        body: open.body.clone(),
        author: ev.author.clone(),
        base: open.base.clone(),
        created_at: ev.at,
        updated_at: ev.at,
        status: PatchStatus::Open,
        revisions: vec![Revision {
            n: 1,
            id: id.clone(),
            head: open.head.clone(),
            base_commit: open.base_commit.clone(),
            author: ev.author.clone(),
            at: ev.at,
        }],
        reviews: Vec::new(),
        comments: Vec::new(),
        merge: None,
        timeline: vec![TimelineEntry {
            at: ev.at,
            event: id,
            author: ev.author.clone(),
            item: TimelineItem::Opened {
                revision: 1,
                head: open.head.clone(),
                base: open.base.clone(),
            },
        }],
    })
}

/// Applies one verified non-root event; `Err(why)` if it does not belong
/// in this patch (it is then dropped as misplaced).
fn apply(s: &mut PatchState, v: &Verified) -> Result<(), String> {
    let ev = &v.event;
    let id = v.oid.to_string();
    let unknown_revision = |r: &str| format!("names revision {r}, which is not in this patch");
    let item = match &ev.action {
        Action::PatchRevise(PatchRevise { head, base_commit }) => {
            let n = s.revisions.len() as u32 + 1;
            s.revisions.push(Revision {
                n,
                id: id.clone(),
                head: head.clone(),
                base_commit: base_commit.clone(),
                author: ev.author.clone(),
                at: ev.at,
            });
            TimelineItem::Revised {
                revision: n,
                head: head.clone(),
            }
        }
        Action::PatchReview(PatchReview {
            revision,
            verdict,
            body,
            voter,
        }) => {
            let n = s
                .revision_by_event(revision)
                .ok_or_else(|| unknown_revision(revision))?;
            // One vote per author (key, and voter where the event names
            // one) and revision: the later one replaces it.
            let earlier = s.reviews.iter().position(|r| {
                r.revision == n && r.author.key == ev.author.key && r.voter == *voter
            });
            let replaces = earlier.map(|i| s.reviews.remove(i).id);
            s.reviews.push(Review {
                id: id.clone(),
                revision: n,
                author: ev.author.clone(),
                at: ev.at,
                verdict: *verdict,
                body: body.clone(),
                voter: voter.clone(),
            });
            TimelineItem::Reviewed {
                revision: n,
                verdict: *verdict,
                body: body.clone(),
                replaces,
            }
        }
        Action::PatchComment(PatchComment {
            body,
            revision,
            path,
            line,
        }) => {
            let n = match revision {
                Some(r) => Some(s.revision_by_event(r).ok_or_else(|| unknown_revision(r))?),
                None => None,
            };
            s.comments.push(Comment {
                id: id.clone(),
                author: ev.author.clone(),
                at: ev.at,
                body: body.clone(),
                revision: n,
                path: path.clone(),
                line: *line,
            });
            TimelineItem::Commented {
                body: body.clone(),
                revision: n,
                path: path.clone(),
                line: *line,
            }
        }
        Action::PatchClose => {
            // Merged is final: the code landed whatever happens after.
            if s.status == PatchStatus::Open {
                s.status = PatchStatus::Closed;
            }
            TimelineItem::Closed
        }
        Action::PatchMerge(PatchMerge { commit }) => {
            s.status = PatchStatus::Merged;
            if s.merge.is_none() {
                s.merge = Some(Merge {
                    commit: commit.clone(),
                    author: ev.author.clone(),
                    at: ev.at,
                });
            }
            TimelineItem::Merged {
                commit: commit.clone(),
            }
        }
        Action::PatchOpen(_) => return Err("patch.open below the root".into()),
        other => return Err(format!("{} is not a patch event", other.kind())),
    };
    s.timeline.push(TimelineEntry {
        at: ev.at,
        event: id,
        author: ev.author.clone(),
        item,
    });
    s.updated_at = s.updated_at.max(ev.at);
    Ok(())
}

impl PatchState {
    /// Materializes the patch at `ref_name` whose root is `full_id`,
    /// applying the allowlist of `repo` if present.
    pub fn from_ref(repo: &Repository, ref_name: &str, full_id: &str) -> Result<PatchState> {
        let trust = TrustList::load(repo)?;
        replay_ref(repo, ref_name, full_id, trust.as_ref())?
            .state
            .map_err(|reason| {
                Error::Invalid(format!("patch {} is invalid: {reason}", short_id(full_id)))
            })
    }

    /// Resolves `id_or_prefix` and materializes that patch.
    pub fn load(repo: &Repository, id_or_prefix: &str) -> Result<PatchState> {
        let (ref_name, full_id) = resolve_patch_ref(repo, id_or_prefix)?;
        PatchState::from_ref(repo, &ref_name, &full_id)
    }
}

/// Replays the DAG at `ref_name` with an already loaded allowlist.
pub fn replay_ref(
    repo: &Repository,
    ref_name: &str,
    full_id: &str,
    trust: Option<&TrustList>,
) -> Result<PatchReplay> {
    let tip = store::ref_tip(repo, ref_name)?
        .ok_or_else(|| Error::Invalid(format!("no patch matches '{full_id}'")))?;
    let (state, dropped) = match store::read_dag(repo, tip) {
        Ok(dag) => replay(full_id, &dag, &mut Checker::new(trust)),
        Err(Error::DagTooLarge(why)) => (Err(crate::state::over_limits(&why)), Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(PatchReplay {
        id: full_id.to_string(),
        tip,
        state,
        dropped,
    })
}

/// `(ref name, full id)` of every patch ref, sorted by id.
pub fn patch_refs(repo: &Repository) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for reference in repo.references_glob(refs::PATCHES_GLOB)? {
        let reference = reference?;
        if let Some(id) = reference.name().ok().and_then(refs::patch_id_of) {
            out.push((refs::patch_ref(id), id.to_string()));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// Every valid patch of `repo`, newest first (ties by id). Invalid patches
/// (root dropped) are left out.
pub fn list_patches(repo: &Repository) -> Result<Vec<PatchState>> {
    Ok(list_patches_until(repo)?.0)
}

/// [`list_patches`], and when that list stops being right even if no ref
/// moves (an event dated in the future comes within the tolerance, see
/// `replay::expires_at`).
pub fn list_patches_until(
    repo: &Repository,
) -> Result<(Vec<PatchState>, Option<chrono::DateTime<chrono::Utc>>)> {
    let trust = TrustList::load(repo)?;
    let mut patches = Vec::new();
    let mut expires = None;
    for (name, id) in patch_refs(repo)? {
        let replay = replay_ref(repo, &name, &id, trust.as_ref())?;
        expires = [expires, crate::replay::expires_at(&replay.dropped)]
            .into_iter()
            .flatten()
            .min();
        if let Ok(state) = replay.state {
            patches.push(state);
        }
    }
    patches.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
    Ok((patches, expires))
}

/// Resolves a full id or a unique prefix of 4+ hex digits to
/// `(ref name, full id)`.
pub fn resolve_patch_ref(repo: &Repository, id_or_prefix: &str) -> Result<(String, String)> {
    let Some(mut matches) = matching_patch_ids(repo, id_or_prefix)? else {
        return Err(Error::Invalid(format!(
            "invalid patch id '{id_or_prefix}': expected 4 to 40 hex digits"
        )));
    };
    match matches.len() {
        0 => Err(Error::Invalid(format!("no patch matches '{id_or_prefix}'"))),
        1 => {
            let id = matches.remove(0);
            Ok((refs::patch_ref(&id), id))
        }
        _ => Err(Error::Invalid(format!(
            "patch id '{id_or_prefix}' is ambiguous; candidates: {}",
            matches.join(", ")
        ))),
    }
}

/// The full ids of the patches whose id starts with `id_or_prefix`, sorted;
/// `None` when it is not 4 to 40 hex digits.
pub fn matching_patch_ids(repo: &Repository, id_or_prefix: &str) -> Result<Option<Vec<String>>> {
    let prefix = id_or_prefix.trim().to_ascii_lowercase();
    if prefix.len() < 4 || prefix.len() > 40 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(None);
    }
    let mut matches = Vec::new();
    for reference in repo.references_glob(&format!("{}*", refs::patch_ref(&prefix)))? {
        let reference = reference?;
        if let Some(id) = reference.name().ok().and_then(refs::patch_id_of) {
            matches.push(id.to_string());
        }
    }
    matches.sort();
    Ok(Some(matches))
}

/// What a write produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The patch's full id.
    pub patch: String,
    /// The new event commit.
    pub event: Oid,
    /// The revision the event made or names, if any.
    pub revision: Option<u32>,
}

/// What `create` is asked for. `None` fields take their defaults: the base
/// is the remote's default branch (else `init.defaultBranch`, else `main`),
/// the head is `HEAD`, the title and body come from the head commit.
#[derive(Debug, Default, Clone)]
pub struct NewPatch<'a> {
    pub base: Option<&'a str>,
    pub head: Option<&'a str>,
    pub title: Option<&'a str>,
    pub body: Option<&'a str>,
}

/// Opens a patch proposing `head` for `base`, and pins revision 1.
pub fn create(repo: &Repository, who: &Identity, new: &NewPatch) -> Result<Written> {
    let base = match new.base {
        Some(b) => b.to_string(),
        None => default_base(repo)?,
    };
    check_branch_name(&base)?;
    let head = resolve_commit(repo, new.head.unwrap_or("HEAD"))?;
    let (_, base_tip) = base_tip(repo, &base)?;
    let base_commit = proposable(repo, head, base_tip, &base)?;
    let commit = repo.find_commit(head)?;
    let title = match new.title {
        Some(t) => t.trim().to_string(),
        None => commit.summary().ok().flatten().unwrap_or("").to_string(),
    };
    check_title(&title)?;
    let body = match new.body {
        Some(b) => b.to_string(),
        None => commit
            .body()
            .ok()
            .flatten()
            .unwrap_or("")
            .trim()
            .to_string(),
    };
    let nonce: [u8; 16] = rand::random();
    let event = event(
        who,
        Action::PatchOpen(PatchOpen {
            title,
            body,
            base,
            head: head.to_string(),
            base_commit: Some(base_commit.to_string()),
            nonce: hex::encode(nonce),
        }),
    );
    let root = store::write_event_commit(repo, &[], &event, &who.key)?;
    let id = root.to_string();
    // The pin first: a patch ref never exists without its revision 1 pin.
    let pin = pin_head(repo, &id, head)?;
    if let Err(e) = store::compare_and_swap(repo, &refs::patch_ref(&id), None, root, "patch.open") {
        unpin(repo, pin);
        return Err(e);
    }
    Ok(Written {
        patch: id,
        event: root,
        revision: Some(1),
    })
}

/// Adds a revision proposing `head` (default `HEAD`) and pins it.
pub fn revise(
    repo: &Repository,
    who: &Identity,
    patch: &str,
    head: Option<&str>,
) -> Result<Written> {
    let (ref_name, state, tip) = load_for_write(repo, patch)?;
    require_open(&state, "revise")?;
    let head = resolve_commit(repo, head.unwrap_or("HEAD"))?;
    let latest = state.latest();
    if latest.head == head.to_string() {
        return Err(Error::Invalid(format!(
            "revision {} of patch {} already proposes {}; commit or pick another head",
            latest.n,
            short_id(&state.id),
            short_id(&latest.head)
        )));
    }
    let (_, base_tip) = base_tip(repo, &state.base)?;
    let base_commit = proposable(repo, head, base_tip, &state.base)?;
    let event = event(
        who,
        Action::PatchRevise(PatchRevise {
            head: head.to_string(),
            base_commit: Some(base_commit.to_string()),
        }),
    );
    let oid = store::write_event_commit(repo, &[tip], &event, &who.key)?;
    let pin = pin_head(repo, &state.id, head)?;
    if let Err(e) = store::compare_and_swap(repo, &ref_name, Some(tip), oid, "patch.revise") {
        unpin(repo, pin);
        return Err(e);
    }
    Ok(Written {
        patch: state.id.clone(),
        event: oid,
        revision: Some(latest.n + 1),
    })
}

/// Votes on revision `rev` (default: the latest) of an open patch.
pub fn review(
    repo: &Repository,
    who: &Identity,
    patch: &str,
    rev: Option<u32>,
    verdict: Verdict,
    body: &str,
) -> Result<Written> {
    let (ref_name, state, tip) = load_for_write(repo, patch)?;
    require_open(&state, "review")?;
    let revision = state.revision(rev)?;
    let n = revision.n;
    let action = Action::PatchReview(PatchReview {
        revision: revision.id.clone(),
        verdict,
        body: body.to_string(),
        voter: None,
    });
    append(repo, who, &ref_name, &state, tip, action, Some(n))
}

/// Comments on a patch (any status). With `path` (and `line`) the comment
/// is inline on revision `rev` (default: the latest), and the file must
/// exist in that revision or in its base.
pub fn comment(
    repo: &Repository,
    who: &Identity,
    patch: &str,
    body: &str,
    rev: Option<u32>,
    path: Option<&str>,
    line: Option<u32>,
) -> Result<Written> {
    if body.trim().is_empty() {
        return Err(Error::Invalid("comment body is empty".into()));
    }
    if line.is_some() && path.is_none() {
        return Err(Error::Invalid("--line needs --path".into()));
    }
    if line == Some(0) {
        return Err(Error::Invalid("lines are numbered from 1".into()));
    }
    let (ref_name, state, tip) = load_for_write(repo, patch)?;
    let revision = match (rev, path) {
        (None, None) => None,
        _ => Some(state.revision(rev)?),
    };
    if let (Some(path), Some(r)) = (path, revision) {
        check_path_in_revision(repo, r, path)?;
    }
    let n = revision.map(|r| r.n);
    let action = Action::PatchComment(PatchComment {
        body: body.to_string(),
        revision: revision.map(|r| r.id.clone()),
        path: path.map(str::to_string),
        line,
    });
    append(repo, who, &ref_name, &state, tip, action, n)
}

/// Closes an open patch without merging it.
pub fn close(repo: &Repository, who: &Identity, patch: &str) -> Result<Written> {
    let (ref_name, state, tip) = load_for_write(repo, patch)?;
    require_open(&state, "close")?;
    append(repo, who, &ref_name, &state, tip, Action::PatchClose, None)
}

/// Records that an open patch landed in `commit`. Used by `merge` and by
/// the merge scan at sync.
pub fn record_merge(
    repo: &Repository,
    who: &Identity,
    patch: &str,
    commit: Oid,
) -> Result<Written> {
    let (ref_name, state, tip) = load_for_write(repo, patch)?;
    require_open(&state, "merge")?;
    let action = Action::PatchMerge(PatchMerge {
        commit: commit.to_string(),
    });
    let n = state.latest().n;
    append(repo, who, &ref_name, &state, tip, action, Some(n))
}

/// How `merge` brought a patch into its base branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeKind {
    /// The base branch moved forward to the revision's head.
    FastForward,
    /// A merge commit joins the base branch and the revision's head.
    MergeCommit,
    /// The base branch already contained the head; only the record is new.
    AlreadyMerged,
}

/// What `merge` did.
#[derive(Debug, Clone)]
pub struct Merged {
    pub written: Written,
    /// The local branch that received the patch (`main`).
    pub branch: String,
    /// The commit recorded in `patch.merge`.
    pub commit: Oid,
    pub kind: MergeKind,
}

/// The oldest commit of `tip`'s first-parent history that contains `head`
/// (`tip` must contain it): the merge commit for a merge, `head` itself (or
/// the commit after which it appeared) for a fast-forward.
pub fn merging_commit(repo: &Repository, tip: Oid, head: Oid) -> Result<Oid> {
    let mut current = tip;
    loop {
        let commit = repo.find_commit(current)?;
        let Ok(parent) = commit.parent_id(0) else {
            return Ok(current);
        };
        if current == head || !(parent == head || repo.graph_descendant_of(parent, head)?) {
            return Ok(current);
        }
        current = parent;
    }
}

/// Merges the latest revision of an open patch into the local base branch
/// (fast-forward when possible, else a merge commit with a `Patch: <id>`
/// trailer) and records `patch.merge`. When the base branch is checked
/// out, the worktree must be clean and is updated too. Nothing is pushed.
pub fn merge(repo: &Repository, who: &Identity, patch: &str) -> Result<Merged> {
    let (ref_name, state, tip) = load_for_write(repo, patch)?;
    require_open(&state, "merge")?;
    let latest = state.latest();
    let head = present_commit(repo, &latest.head, latest.n)?;
    let branch_ref = refs::branch_ref(&state.base);
    let local = store::ref_tip(repo, &branch_ref)?;
    let base_tip = match local {
        Some(t) => t,
        None => base_tip(repo, &state.base)?.1,
    };
    let (new_tip, commit, kind) = if base_tip == head || repo.graph_descendant_of(base_tip, head)? {
        let commit = merging_commit(repo, base_tip, head)?;
        (base_tip, commit, MergeKind::AlreadyMerged)
    } else if repo.graph_descendant_of(head, base_tip)? {
        (head, head, MergeKind::FastForward)
    } else {
        let merge = merge_commit(repo, &state, base_tip, head)?;
        (merge, merge, MergeKind::MergeCommit)
    };
    if kind != MergeKind::AlreadyMerged && local != Some(new_tip) {
        if checked_out(repo, &branch_ref) {
            update_worktree(repo, new_tip)?;
        }
        store::compare_and_swap(
            repo,
            &branch_ref,
            local,
            new_tip,
            &format!("git-collab: merge patch {}", short_id(&state.id)),
        )?;
    }
    let action = Action::PatchMerge(PatchMerge {
        commit: commit.to_string(),
    });
    let written = append(repo, who, &ref_name, &state, tip, action, Some(latest.n))?;
    Ok(Merged {
        written,
        branch: state.base.clone(),
        commit,
        kind,
    })
}

/// What `checkout` did.
#[derive(Debug, Clone, Serialize)]
pub struct CheckedOut {
    pub patch: String,
    pub revision: u32,
    pub head: String,
    /// The local branch now checked out (`patch/<8 hex>`).
    pub branch: String,
}

/// Creates (or fast-forwards) the local branch `patch/<8 hex>` at revision
/// `rev` (default: the latest) and checks it out. A branch holding commits
/// that are not in that revision is left alone (error).
pub fn checkout(repo: &Repository, patch: &str, rev: Option<u32>) -> Result<CheckedOut> {
    if repo.is_bare() {
        return Err(Error::Invalid(
            "cannot check out a patch in a bare repository".into(),
        ));
    }
    let state = PatchState::load(repo, patch)?;
    let revision = state.revision(rev)?;
    let head = present_commit(repo, &revision.head, revision.n)?;
    let branch = refs::patch_branch(short_id(&state.id));
    let branch_ref = refs::branch_ref(&branch);
    let existing = store::ref_tip(repo, &branch_ref)?;
    if let Some(old) = existing {
        if old != head && !repo.graph_descendant_of(head, old)? {
            return Err(Error::Invalid(format!(
                "branch {branch} has commits that are not in revision {}; rename or delete it first",
                revision.n
            )));
        }
    }
    let commit = repo.find_commit(head)?;
    let mut opts = git2::build::CheckoutBuilder::new();
    opts.safe();
    repo.checkout_tree(commit.as_object(), Some(&mut opts))
        .map_err(|e| Error::Invalid(format!("cannot check out revision: {}", e.message())))?;
    let log = format!("git-collab: checkout patch {}", short_id(&state.id));
    repo.reference(&branch_ref, head, true, &log)?;
    repo.set_head(&branch_ref)?;
    Ok(CheckedOut {
        patch: state.id.clone(),
        revision: revision.n,
        head: revision.head.clone(),
        branch,
    })
}

/// Pins every revision head of every patch that has no pin yet (at the
/// next free number), skipping heads whose commits are not here. Run by
/// sync after integrating the remote's refs; returns the new pins.
pub fn pin_revisions(repo: &Repository) -> Result<Vec<String>> {
    let trust = TrustList::load(repo)?;
    let mut created = Vec::new();
    for (name, id) in patch_refs(repo)? {
        let Ok(state) = replay_ref(repo, &name, &id, trust.as_ref())?.state else {
            continue;
        };
        for r in &state.revisions {
            let Ok(head) = Oid::from_str(&r.head) else {
                continue;
            };
            if r.head.len() != 40 || repo.find_commit(head).is_err() {
                continue;
            }
            if let Some(pin) = pin_head(repo, &id, head)? {
                created.push(pin);
            }
        }
    }
    Ok(created)
}

/// Points a new pin `refs/collab/revisions/<id>/<n>` at `head` unless a pin
/// of this patch already does; `n` is one more than the highest pin.
fn pin_head(repo: &Repository, patch_id: &str, head: Oid) -> Result<Option<String>> {
    let mut highest = 0;
    for reference in repo.references_glob(&refs::revisions_glob(patch_id))? {
        let reference = reference?;
        if reference.target() == Some(head) {
            return Ok(None);
        }
        if let Some((_, n)) = reference.name().ok().and_then(refs::revision_of) {
            highest = highest.max(n);
        }
    }
    let name = refs::revision_ref(patch_id, highest + 1);
    store::compare_and_swap(repo, &name, None, head, "git-collab: pin revision")?;
    Ok(Some(name))
}

/// Removes a pin made by a write that then failed.
fn unpin(repo: &Repository, pin: Option<String>) {
    if let Some(name) = pin {
        if let Ok(mut r) = repo.find_reference(&name) {
            let _ = r.delete();
        }
    }
}

/// Resolves and replays a patch, returning its ref, state and ref tip (the
/// compare-and-swap base of the next write).
fn load_for_write(repo: &Repository, patch: &str) -> Result<(String, PatchState, Oid)> {
    let (ref_name, full_id) = resolve_patch_ref(repo, patch)?;
    let trust = TrustList::load(repo)?;
    let replay = replay_ref(repo, &ref_name, &full_id, trust.as_ref())?;
    let state = replay.state.map_err(|reason| {
        Error::Invalid(format!("patch {} is invalid: {reason}", short_id(&full_id)))
    })?;
    Ok((ref_name, state, replay.tip))
}

fn append(
    repo: &Repository,
    who: &Identity,
    ref_name: &str,
    state: &PatchState,
    tip: Oid,
    action: Action,
    revision: Option<u32>,
) -> Result<Written> {
    let event = event(who, action);
    let oid = store::write_event_commit(repo, &[tip], &event, &who.key)?;
    store::compare_and_swap(repo, ref_name, Some(tip), oid, event.action.kind())?;
    Ok(Written {
        patch: state.id.clone(),
        event: oid,
        revision,
    })
}

fn event(who: &Identity, action: Action) -> Event {
    Event::new(who.author(), Utc::now(), action)
}

fn require_open(state: &PatchState, verb: &str) -> Result<()> {
    if state.status == PatchStatus::Open {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "patch {} is {}; cannot {verb} it",
        short_id(&state.id),
        state.status
    )))
}

fn check_title(title: &str) -> Result<()> {
    if title.trim().is_empty() {
        return Err(Error::Invalid(
            "title is empty (give -t, or a head commit with a subject)".into(),
        ));
    }
    if title.contains(['\n', '\r']) {
        return Err(Error::Invalid("title must be one line".into()));
    }
    crate::text::check_line("title", title).map_err(Error::Invalid)
}

fn check_branch_name(base: &str) -> Result<()> {
    if base.starts_with("refs/") || !git2::Reference::is_valid_name(&refs::branch_ref(base)) {
        return Err(Error::Invalid(format!(
            "invalid base branch '{base}': give a branch name such as main"
        )));
    }
    Ok(())
}

/// The commit `rev` names (any revision expression git understands).
pub fn resolve_commit(repo: &Repository, rev: &str) -> Result<Oid> {
    if rev.starts_with('-') {
        return Err(Error::Invalid(format!("unknown revision '{rev}'")));
    }
    repo.revparse_single(rev)
        .and_then(|o| o.peel_to_commit())
        .map(|c| c.id())
        .map_err(|_| Error::Invalid(format!("unknown revision '{rev}'")))
}

/// The tip of branch `base`: the local branch, else a remote-tracking
/// branch of that name (`origin` first). Returns `(ref name, tip)`.
pub fn base_tip(repo: &Repository, base: &str) -> Result<(String, Oid)> {
    let mut candidates = vec![refs::branch_ref(base)];
    let remotes = repo.remotes()?;
    let mut names: Vec<&str> = remotes.iter().flatten().flatten().collect();
    names.sort_by_key(|n| (*n != "origin", n.to_string()));
    candidates.extend(names.iter().map(|r| refs::remote_branch_ref(r, base)));
    for name in candidates {
        if let Some(tip) = store::ref_tip(repo, &name)? {
            return Ok((name, tip));
        }
    }
    Err(Error::Invalid(format!(
        "base branch '{base}' not found (no local branch and no remote-tracking branch of that name)"
    )))
}

/// The base a new patch targets by default: the branch `origin/HEAD`
/// points at, else `init.defaultBranch`, else `main`.
pub fn default_base(repo: &Repository) -> Result<String> {
    if let Ok(r) = repo.find_reference("refs/remotes/origin/HEAD") {
        if let Some(target) = r.symbolic_target().ok().flatten() {
            if let Some(branch) = target.strip_prefix("refs/remotes/origin/") {
                return Ok(branch.to_string());
            }
        }
    }
    Ok(repo
        .config()?
        .get_string("init.defaultBranch")
        .unwrap_or_else(|_| "main".to_string()))
}

/// Checks that `head` proposes something for `base` and returns the base
/// commit it starts from (their merge base).
fn proposable(repo: &Repository, head: Oid, base_tip: Oid, base: &str) -> Result<Oid> {
    if head == base_tip || repo.graph_descendant_of(base_tip, head)? {
        return Err(Error::Invalid(format!(
            "{} is already in '{base}': nothing to propose",
            short_id(&head.to_string())
        )));
    }
    repo.merge_base(head, base_tip).map_err(|_| {
        Error::Invalid(format!(
            "{} shares no history with '{base}'",
            short_id(&head.to_string())
        ))
    })
}

/// The commit of revision `n`'s head, which must be in this repository.
pub fn present_commit(repo: &Repository, head: &str, n: u32) -> Result<Oid> {
    Oid::from_str(head)
        .ok()
        .filter(|_| head.len() == 40)
        .filter(|oid| repo.find_commit(*oid).is_ok())
        .ok_or_else(|| {
            Error::Invalid(format!(
                "revision {n}'s head {} is not in this repository; run git-collab sync",
                short_id(head)
            ))
        })
}

fn check_path_in_revision(repo: &Repository, r: &Revision, path: &str) -> Result<()> {
    let in_tree = |oid: &str| -> bool {
        Oid::from_str(oid)
            .ok()
            .and_then(|o| repo.find_commit(o).ok())
            .and_then(|c| c.tree().ok())
            .is_some_and(|t| t.get_path(std::path::Path::new(path)).is_ok())
    };
    let head = present_commit(repo, &r.head, r.n)?.to_string();
    if in_tree(&head) || r.base_commit.as_deref().is_some_and(in_tree) {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "no file '{path}' in revision {} or its base",
        r.n
    )))
}

/// Writes the merge commit of `head` into `base_tip`, or fails naming the
/// conflicting paths.
fn merge_commit(repo: &Repository, state: &PatchState, base_tip: Oid, head: Oid) -> Result<Oid> {
    let ours = repo.find_commit(base_tip)?;
    let theirs = repo.find_commit(head)?;
    let mut index = repo.merge_commits(&ours, &theirs, None)?;
    if index.has_conflicts() {
        let mut paths: Vec<String> = index
            .conflicts()?
            .filter_map(|c| c.ok())
            .filter_map(|c| c.our.or(c.their).or(c.ancestor))
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect();
        paths.dedup();
        return Err(Error::Invalid(format!(
            "patch {} conflicts with '{}' in {}; revise it onto {} first",
            short_id(&state.id),
            state.base,
            paths.join(", "),
            state.base
        )));
    }
    let tree = repo.find_tree(index.write_tree_to(repo)?)?;
    let sig = repo.signature().map_err(|_| {
        Error::Invalid("set git's user.name and user.email to write a merge commit".into())
    })?;
    let message = format!(
        "Merge patch {}: {}\n\n{}\n\nPatch: {}\n",
        short_id(&state.id),
        state.title,
        format_args!(
            "Revision {} of the patch onto {}.",
            state.latest().n,
            state.base
        ),
        state.id
    );
    Ok(repo.commit(None, &sig, &sig, &message, &tree, &[&ours, &theirs])?)
}

/// True when `branch_ref` is the branch checked out in this worktree.
fn checked_out(repo: &Repository, branch_ref: &str) -> bool {
    !repo.is_bare()
        && repo
            .find_reference("HEAD")
            .ok()
            .and_then(|h| h.symbolic_target().ok().flatten().map(str::to_string))
            .is_some_and(|t| t == branch_ref)
}

/// Moves the worktree and index to `target`, refusing when tracked files
/// have uncommitted changes.
fn update_worktree(repo: &Repository, target: Oid) -> Result<()> {
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(false).include_ignored(false);
    let dirty = repo
        .statuses(Some(&mut opts))?
        .iter()
        .any(|s| s.status() != git2::Status::CURRENT);
    if dirty {
        return Err(Error::Invalid(
            "the worktree has uncommitted changes; commit or stash them before merging".into(),
        ));
    }
    let commit = repo.find_commit(target)?;
    let mut checkout = git2::build::CheckoutBuilder::new();
    checkout.safe();
    repo.checkout_tree(commit.as_object(), Some(&mut checkout))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sign::{self, SigningKey};
    use crate::store::{Content, DagCommit};
    use chrono::TimeZone;

    fn key(dir: &std::path::Path, name: &str) -> SigningKey {
        SigningKey::generate(&dir.join(name), name, false).unwrap()
    }

    fn oid(n: u8) -> Oid {
        Oid::from_bytes(&[n; 20]).unwrap()
    }

    fn commit(n: u8, parents: &[u8], key: &SigningKey, secs: i64, action: Action) -> DagCommit {
        let ev = Event::new(
            Author {
                name: "n".into(),
                key: key.public_key_line(),
            },
            Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap(),
            action,
        );
        let json = ev.to_canonical_json();
        let sig = sign::encode_signature(&key.sign(&json)).into_bytes();
        DagCommit {
            oid: oid(n),
            parents: parents.iter().map(|&p| oid(p)).collect(),
            content: Content::Event { json, sig },
        }
    }

    fn open() -> Action {
        Action::PatchOpen(PatchOpen {
            title: "T".into(),
            body: "B".into(),
            base: "main".into(),
            head: "a".repeat(40),
            base_commit: None,
            nonce: "1".into(),
        })
    }

    fn revise(head: char) -> Action {
        Action::PatchRevise(PatchRevise {
            head: head.to_string().repeat(40),
            base_commit: None,
        })
    }

    fn vote(revision: u8, verdict: Verdict) -> Action {
        Action::PatchReview(PatchReview {
            revision: oid(revision).to_string(),
            verdict,
            body: String::new(),
            voter: None,
        })
    }

    fn run(dag: &[DagCommit]) -> (Result<PatchState, String>, Vec<DroppedEvent>) {
        replay(&oid(1).to_string(), dag, &mut Checker::new(None))
    }

    #[test]
    fn concurrent_revisions_are_numbered_in_replay_order() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path(), "k");
        // Two revisions made concurrently on top of the open; whatever order
        // the commits come in, the earlier `at` is revision 2.
        let mut dag = vec![
            commit(1, &[], &k, 0, open()),
            commit(3, &[1], &k, 5, revise('c')),
            commit(2, &[1], &k, 9, revise('b')),
            commit(4, &[2], &k, 10, vote(2, Verdict::Approve)),
        ];
        for _ in 0..2 {
            let (state, dropped) = run(&dag);
            assert!(dropped.is_empty(), "{dropped:?}");
            let s = state.unwrap();
            let heads: Vec<(u32, char)> = s
                .revisions
                .iter()
                .map(|r| (r.n, r.head.chars().next().unwrap()))
                .collect();
            assert_eq!(heads, vec![(1, 'a'), (2, 'c'), (3, 'b')]);
            assert_eq!(s.reviews[0].revision, 3, "the vote names b's event");
            dag.reverse();
        }
    }

    #[test]
    fn a_later_vote_replaces_the_same_authors_earlier_vote() {
        let dir = tempfile::tempdir().unwrap();
        let (k, other) = (key(dir.path(), "k"), key(dir.path(), "o"));
        let dag = vec![
            commit(1, &[], &k, 0, open()),
            commit(2, &[1], &k, 1, vote(1, Verdict::RequestChanges)),
            commit(3, &[2], &other, 2, vote(1, Verdict::Comment)),
            commit(4, &[3], &k, 3, vote(1, Verdict::Approve)),
            commit(5, &[4], &k, 4, revise('b')),
            commit(6, &[5], &k, 5, vote(5, Verdict::RequestChanges)),
        ];
        let s = run(&dag).0.unwrap();
        let votes: Vec<(u32, Verdict)> =
            s.reviews.iter().map(|r| (r.revision, r.verdict)).collect();
        assert_eq!(
            votes,
            vec![
                (1, Verdict::Comment),
                (1, Verdict::Approve),
                (2, Verdict::RequestChanges)
            ]
        );
        let replaced: Vec<Option<String>> = s
            .timeline
            .iter()
            .filter_map(|e| match &e.item {
                TimelineItem::Reviewed { replaces, .. } => Some(replaces.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            replaced,
            vec![None, None, Some(oid(2).to_string()), None],
            "the timeline keeps every vote and says which one was replaced"
        );
        assert_eq!(s.timeline.len(), 6);
    }

    #[test]
    fn merge_is_final_and_misplaced_events_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path(), "k");
        let dag = vec![
            commit(1, &[], &k, 0, open()),
            commit(
                2,
                &[1],
                &k,
                1,
                Action::PatchMerge(PatchMerge {
                    commit: "d".repeat(40),
                }),
            ),
            commit(3, &[2], &k, 2, Action::PatchClose),
            commit(4, &[3], &k, 3, vote(9, Verdict::Approve)),
            commit(5, &[4], &k, 4, Action::IssueReopen),
            commit(6, &[5], &k, 5, open()),
        ];
        let (state, dropped) = run(&dag);
        let s = state.unwrap();
        assert_eq!(s.status, PatchStatus::Merged);
        assert_eq!(s.merge.unwrap().commit, "d".repeat(40));
        let misplaced: Vec<String> = dropped.iter().map(|d| d.commit.clone()).collect();
        assert_eq!(
            misplaced,
            vec![oid(4).to_string(), oid(5).to_string(), oid(6).to_string()]
        );
    }

    #[test]
    fn an_issue_root_is_not_a_patch() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path(), "k");
        let dag = vec![commit(
            1,
            &[],
            &k,
            0,
            Action::IssueOpen(crate::event::IssueOpen {
                title: "t".into(),
                body: String::new(),
                labels: vec![],
                nonce: "n".into(),
            }),
        )];
        let (state, dropped) = run(&dag);
        assert!(state.unwrap_err().contains("not patch.open"));
        assert_eq!(dropped.len(), 1);
    }
}
