//! The one-time import of a repository's client-written patch DAGs
//! (`refs/collab/patches/*`, made by `git-collab patch …` and `sync`)
//! into the patch tables of `collab.db`, after which the server is the
//! only writer of that repository's patches: `refs/collab/patches/*` and
//! `refs/collab/revisions/*` can no longer be pushed (`hooks::records`,
//! `hooks::access`). It runs with the issue import ([`super`]), under the
//! same rules:
//!
//! - Replay is the library's (`record::patch::replay_ref`): signatures are
//!   verified and the repository's trust allowlist is honoured, so what is
//!   imported is what `git-collab patch list|show` showed on that
//!   repository. Dropped events are reported, never imported; a patch
//!   whose root event was dropped is reported as invalid; a DAG past the
//!   replay limits of `record::store` is reported as skipped, never read
//!   whole.
//! - Kept: the id (the DAG's root commit id), title, body, base branch,
//!   author, times, status and merge (commit, who, when); every revision
//!   in replay order with its head, its author and time, and its base
//!   commit (when the event recorded none, the merge base of the head and
//!   the server's base branch at import, else the head itself); the votes
//!   that count (one per principal and revision, a later vote replacing an
//!   earlier one, as replay decides them) with their ids, verdicts, bodies
//!   and times; comments in replay order with their ids (the event commit
//!   ids), revisions and inline path and line. Revisions pushed later go
//!   through `refs/for/<base>` with `-o patch=<id>` as for any server-held
//!   patch. Not kept: the DAG's timeline as such (the event log gets one
//!   `patch.imported` per patch).
//! - Each revision `n` is pinned at `refs/collab/revisions/<id>/<n>` (the
//!   pin is written, or moved to that revision's head, when the DAG's own
//!   pins were numbered otherwise), so the server's next revision pin is
//!   free and every head stays reachable.
//! - Idempotent: patches are inserted with `ON CONFLICT DO NOTHING`, in
//!   batches of [`super::replay::BATCH`]; the repository's `patch_imports`
//!   row is written with the last batch, so a crash mid-import is finished
//!   by the next start and a finished repository is never imported again.
//!   The DAGs stay in the repository, untouched, as the read-only record of
//!   the history before the server took over.

use collab_record::patch::{self as record_patch, PatchState, PatchStatus as DagStatus};
use collab_record::refs;
use collab_record::replay::DroppedEvent;
use collab_record::trust::TrustList;
use git2::{Oid, Repository};
use serde::Serialize;

use super::replay::{person, replay_in_batches, DagKind, Replayed};
use collab_store::patches::{
    self, Comment, Inline, Merge, Patch, PatchDetail, PatchStatus, Review, Revision, Verdict,
};
use collab_store::sql::Connection;

/// What importing one repository's patch DAGs found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PatchReport {
    /// Patch DAGs found.
    pub found: usize,
    /// Patches inserted now, and their rows.
    pub patches: usize,
    pub revisions: usize,
    pub reviews: usize,
    pub comments: usize,
    /// Event commits applied or dropped (structural merges excluded).
    pub events: usize,
    /// Events replay dropped (bad signature, untrusted key, malformed, ...).
    pub dropped: Vec<DroppedPatchEvent>,
    /// Patches whose root event was dropped, or that the database cannot
    /// hold (an empty title): not imported.
    pub invalid_patches: Vec<SkippedPatch>,
    /// Patches that could not be replayed at all (a DAG past the size
    /// limits, an unreadable object): not imported.
    pub skipped: Vec<SkippedPatch>,
    /// Revision pins written or moved to match the revision numbers.
    pub pins: usize,
}

/// A dropped event, as `git-collab verify --json` shows it, with its patch.
#[derive(Debug, Clone, Serialize)]
pub struct DroppedPatchEvent {
    pub patch: String,
    #[serde(flatten)]
    pub event: DroppedEvent,
}

/// A patch left out, and why.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedPatch {
    pub patch: String,
    pub reason: String,
}

/// One batch of replayed patches, ready to store: each with the ids of the
/// events that made its revisions.
#[derive(Default)]
pub struct PatchBatch {
    patches: Vec<(PatchDetail, Vec<String>)>,
}

/// Rows inserted: `(patches, revisions, reviews, comments)`.
pub type Counts = (usize, usize, usize, usize);

/// Store one batch inside the caller's transaction; the last batch also
/// records the repository's patches as imported. Returns the rows inserted
/// as `(patches, revisions, reviews, comments)`.
pub fn store(
    conn: &Connection,
    repo: &str,
    batch: &PatchBatch,
    last: Option<&PatchReport>,
    now: i64,
) -> anyhow::Result<Counts> {
    let mut counts = (0, 0, 0, 0);
    for (detail, revision_events) in &batch.patches {
        if patches::insert_imported(conn, detail, revision_events, now)?.is_some() {
            counts.0 += 1;
            counts.1 += detail.revisions.len();
            counts.2 += detail.reviews.len();
            counts.3 += detail.comments.len();
        }
    }
    if let Some(report) = last {
        conn.prepare_cached(
            "INSERT INTO patch_imports (repo, imported_at, patches, revisions, reviews, comments,
                                        events, dropped, report)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (repo) DO NOTHING",
        )?
        .execute(collab_store::sql::params![
            repo,
            now,
            (report.patches + counts.0) as i64,
            (report.revisions + counts.1) as i64,
            (report.reviews + counts.2) as i64,
            (report.comments + counts.3) as i64,
            report.events as i64,
            report.dropped.len() as i64,
            serde_json::to_string(report)?,
        ])?;
    }
    Ok(counts)
}

fn ms(at: chrono::DateTime<chrono::Utc>) -> i64 {
    at.timestamp_millis()
}

/// The base commit of a revision whose event recorded none: where `head`
/// forks from the server's base branch now, else the head itself.
fn fallback_base(git: &Repository, base_tip: Option<Oid>, head: &str) -> String {
    let merge_base = Oid::from_str(head)
        .ok()
        .zip(base_tip)
        .and_then(|(h, b)| git.merge_base(h, b).ok());
    merge_base.map_or_else(|| head.to_string(), |o| o.to_string())
}

/// The rows of one replayed patch, or why the database cannot hold it.
fn rows(
    git: &Repository,
    repo: &str,
    s: &PatchState,
) -> Result<(PatchDetail, Vec<String>), String> {
    if !refs::is_full_hex_id(&s.id) {
        return Err("the patch id is not a 40-hex commit id".into());
    }
    if s.title.trim().is_empty() {
        return Err("the patch has an empty title".into());
    }
    if s.base.trim().is_empty() {
        return Err("the patch names no base branch".into());
    }
    let base_tip = git
        .find_reference(&refs::branch_ref(&s.base))
        .and_then(|r| r.peel_to_commit())
        .map(|c| c.id())
        .ok();
    let revisions: Vec<Revision> = s
        .revisions
        .iter()
        .map(|r| Revision {
            n: i64::from(r.n),
            head: r.head.clone(),
            base_commit: r
                .base_commit
                .clone()
                .unwrap_or_else(|| fallback_base(git, base_tip, &r.head)),
            base_tip: None,
            author: person(&r.author),
            at_ms: ms(r.at),
            lease_holders: Vec::new(),
        })
        .collect();
    let revision_events = s.revisions.iter().map(|r| r.id.clone()).collect();
    let reviews = s
        .reviews
        .iter()
        .map(|r| Review {
            id: r.id.clone(),
            revision: i64::from(r.revision),
            author: person(&r.author),
            verdict: Verdict::parse(r.verdict.as_str()).unwrap_or(Verdict::Comment),
            body: r.body.clone(),
            at_ms: ms(r.at),
        })
        .collect();
    let comments = s
        .comments
        .iter()
        .enumerate()
        .map(|(i, c)| Comment {
            id: c.id.clone(),
            position: i as i64 + 1,
            author: person(&c.author),
            at_ms: ms(c.at),
            body: c.body.clone(),
            revision: c.revision.map(i64::from),
            inline: c
                .path
                .as_ref()
                .filter(|p| !p.is_empty())
                .map(|path| Inline {
                    path: path.clone(),
                    line: c.line.filter(|l| *l > 0).map(i64::from),
                }),
        })
        .collect::<Vec<_>>();
    let status = match s.status {
        DagStatus::Open => PatchStatus::Open,
        DagStatus::Merged => PatchStatus::Merged,
        DagStatus::Closed => PatchStatus::Closed,
    };
    let patch = Patch {
        repo: repo.to_string(),
        id: s.id.clone(),
        title: s.title.clone(),
        body: s.body.clone(),
        base: s.base.clone(),
        author: person(&s.author),
        created_ms: ms(s.created_at),
        updated_ms: ms(s.updated_at),
        status,
        merge: s.merge.as_ref().map(|m| Merge {
            commit: m.commit.clone(),
            by: person(&m.author).principal,
            at_ms: ms(m.at),
        }),
        imported: true,
        revision_count: revisions.len() as i64,
        comment_count: comments.len() as i64,
        change_id: None,
        depends_on: None,
    };
    Ok((
        PatchDetail {
            patch,
            revisions,
            reviews,
            comments,
            issues: Vec::new(),
            linked_lease_holders: Vec::new(),
            depends_on_status: None,
        },
        revision_events,
    ))
}

/// Pin each revision of `s` at its number; returns how many pins were
/// written or moved. A head that is not in the repository is left alone.
fn pin_revisions(git: &Repository, s: &PatchState) -> usize {
    let mut written = 0;
    for r in &s.revisions {
        let Ok(head) = Oid::from_str(&r.head) else {
            continue;
        };
        if git.find_commit(head).is_err() {
            continue;
        }
        let pin = refs::revision_ref(&s.id, r.n);
        let current = git.refname_to_id(&pin).ok();
        if current == Some(head) {
            continue;
        }
        match git.reference(&pin, head, true, "git-collab-server: imported revision") {
            Ok(_) => written += 1,
            Err(e) => tracing::warn!(patch = s.id, pin, "pinning an imported revision: {e}"),
        }
    }
    written
}

/// Patch DAGs, as [`replay_in_batches`] replays them.
struct PatchDags;

impl DagKind for PatchDags {
    type State = PatchState;
    type Rows = (PatchDetail, Vec<String>);
    type Report = PatchReport;
    type Counts = Counts;

    fn replay(
        git: &Repository,
        ref_name: &str,
        id: &str,
        trust: Option<&TrustList>,
    ) -> Result<Replayed<PatchState>, String> {
        let replay =
            record_patch::replay_ref(git, ref_name, id, trust).map_err(|e| e.to_string())?;
        let applied = replay.state.as_ref().map_or(0, |s| s.timeline.len());
        Ok(Replayed {
            events: replay.dropped.len() + applied,
            dropped: replay.dropped,
            state: replay.state,
        })
    }

    /// The rows, and the revisions pinned at their numbers.
    fn rows(
        git: &Repository,
        repo: &str,
        s: &PatchState,
        report: &mut PatchReport,
    ) -> Result<(PatchDetail, Vec<String>), String> {
        let rows = rows(git, repo, s)?;
        report.pins += pin_revisions(git, s);
        Ok(rows)
    }

    fn note_replayed(
        report: &mut PatchReport,
        id: &str,
        events: usize,
        dropped: Vec<DroppedEvent>,
    ) {
        report.events += events;
        report
            .dropped
            .extend(dropped.into_iter().map(|event| DroppedPatchEvent {
                patch: id.to_string(),
                event,
            }));
    }

    fn note_left_out(report: &mut PatchReport, id: &str, reason: String, invalid: bool) {
        let skipped = SkippedPatch {
            patch: id.to_string(),
            reason,
        };
        if invalid {
            report.invalid_patches.push(skipped);
        } else {
            report.skipped.push(skipped);
        }
    }

    fn add(report: &mut PatchReport, (p, r, v, c): Counts) {
        report.patches += p;
        report.revisions += r;
        report.reviews += v;
        report.comments += c;
    }
}

/// Replay every patch DAG of the repository at `git` (canonical name
/// `repo`) and hand the rows to `store` in batches; the last call carries
/// the report (`Some`), and its counts are added to the report returned.
pub fn import(
    git: &Repository,
    repo: &str,
    store: &mut dyn FnMut(PatchBatch, Option<PatchReport>) -> anyhow::Result<Counts>,
) -> anyhow::Result<PatchReport> {
    let trust = TrustList::load(git)?;
    let found = record_patch::patch_refs(git)?;
    let mut report = PatchReport {
        found: found.len(),
        ..Default::default()
    };
    replay_in_batches::<PatchDags>(
        git,
        repo,
        &found,
        trust.as_ref(),
        &mut report,
        &mut |patches, last| store(PatchBatch { patches }, last),
    )?;
    Ok(report)
}

pub fn log_report(repo: &str, report: &PatchReport) {
    tracing::info!(
        repo,
        patches = report.patches,
        revisions = report.revisions,
        reviews = report.reviews,
        comments = report.comments,
        events = report.events,
        dropped = report.dropped.len(),
        invalid = report.invalid_patches.len(),
        skipped = report.skipped.len(),
        "imported patches from git"
    );
    for s in report.invalid_patches.iter().chain(&report.skipped) {
        tracing::warn!(repo, patch = s.patch, "patch not imported: {}", s.reason);
    }
}
