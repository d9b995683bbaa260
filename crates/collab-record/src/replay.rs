//! The one replay fold shared by every object kind kept as an event DAG
//! (issues in `state.rs`, patches in `patch.rs`). Replay verifies each
//! event commit (signature over the exact `event.json` bytes, author key in
//! the allowlist when there is one), puts the valid events in a topological
//! order where concurrent events go by `(at, commit id)`, and folds them
//! into the object's state through the [`Fold`] trait. Bad events are
//! dropped and reported as [`DroppedEvent`]s, never applied; an event the
//! object's fold refuses is dropped as [`DropReason::Misplaced`].
//!
//! Time: an event dated more than [`FUTURE_TOLERANCE`] after the replaying
//! machine's clock is dropped as [`DropReason::Future`] (docs/data-model.md):
//! otherwise an event dated in the year 9999 would sort after everything
//! else forever and win every conflict. Such a replay holds only until the
//! clock comes within the tolerance of that date ([`expires_at`]); caches
//! of replays honour that.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use chrono::{DateTime, Utc};
use git2::Oid;
use serde::{Deserialize, Serialize};

use crate::event::{DecodeError, Event};
use crate::sign::{self, VerifyError};
use crate::store::{Content, DagCommit};
pub use crate::store::{MAX_DAG_COMMITS, MAX_DAG_EVENT_BYTES, MAX_EVENT_BYTES};
use crate::trust::TrustList;

/// Why an event was not applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The commit has no (or a broken) `event.json`/`event.sig`.
    Malformed,
    /// `event.json` is not canonical JSON of a known event shape.
    BadEvent,
    /// The signature does not verify against `author.key`.
    BadSignature,
    /// The allowlist exists and does not list `author.key`.
    Untrusted,
    /// A valid event that does not belong where it is (an `issue.open`
    /// below the root, a type that is not an issue event, a commit not
    /// descended from the root).
    Misplaced,
    /// `event.json` or `event.sig` is over the size limits
    /// ([`MAX_EVENT_BYTES`]); it was not read.
    Oversized,
    /// The event is dated more than [`FUTURE_TOLERANCE`] after the
    /// replaying machine's clock.
    Future,
}

/// How far past the replaying machine's clock an event's `at` may lie
/// before the event is dropped as [`DropReason::Future`]: one day, for
/// clocks that are wrong by hours or time zones set badly.
pub const FUTURE_TOLERANCE: chrono::TimeDelta = chrono::TimeDelta::days(1);

/// When a replay that dropped `dropped` stops being right: the earliest
/// moment a [`DropReason::Future`] event among them comes within
/// [`FUTURE_TOLERANCE`] of the clock (it would then apply). `None`: the
/// replay holds for as long as the DAG and the allowlist do not change.
pub fn expires_at(dropped: &[DroppedEvent]) -> Option<DateTime<Utc>> {
    dropped
        .iter()
        .filter(|d| d.reason == DropReason::Future)
        .filter_map(|d| d.at)
        .map(|at| at - FUTURE_TOLERANCE)
        .min()
}

/// An event that replay dropped, with why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedEvent {
    /// The event commit's id.
    pub commit: String,
    /// The event type, when `event.json` could be read.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The author key fingerprint, when `event.json` could be read.
    pub author_fingerprint: Option<String>,
    pub reason: DropReason,
    /// A one-line human explanation.
    pub detail: String,
    /// The time the event claims, for a [`DropReason::Future`] drop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
}

/// Verifies events for one or more replays, remembering what it learnt
/// about each author key line (parsed key, allowlist decision): a DAG
/// usually has few authors and many events.
pub struct Checker<'a> {
    trust: Option<&'a TrustList>,
    keys: HashMap<String, (Result<ed25519_dalek::VerifyingKey, VerifyError>, bool)>,
    /// Events dated after this are dropped as [`DropReason::Future`].
    latest: DateTime<Utc>,
}

impl<'a> Checker<'a> {
    /// A checker applying `trust` (`None`: no allowlist, trust every valid
    /// signature) as of this machine's clock.
    pub fn new(trust: Option<&'a TrustList>) -> Checker<'a> {
        Checker::at(trust, Utc::now())
    }

    /// A checker whose clock reads `now`.
    pub fn at(trust: Option<&'a TrustList>, now: DateTime<Utc>) -> Checker<'a> {
        Checker {
            trust,
            keys: HashMap::new(),
            latest: now + FUTURE_TOLERANCE,
        }
    }

    /// Verifies the signature; on success tells whether the key is trusted.
    fn verify(&mut self, key_line: &str, json: &[u8], sig: &[u8]) -> Result<bool, VerifyError> {
        let trust = self.trust;
        let (key, trusted) = self.keys.entry(key_line.to_string()).or_insert_with(|| {
            let trusted = trust.is_none_or(|t| t.allows(key_line));
            (sign::verifying_key(key_line), trusted)
        });
        let key = key.as_ref().map_err(|e| e.clone())?;
        sign::verify_with(key, json, sig)?;
        Ok(*trusted)
    }
}

/// A verified event, ready to apply.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The event commit's id.
    pub oid: Oid,
    pub event: Event,
}

impl Verified {
    /// Reports this event as dropped because it does not belong where it
    /// is (`why` says where that is).
    pub fn misplaced(&self, why: &str) -> DroppedEvent {
        misplaced_event(self, why)
    }
}

/// The verified events of one DAG in replay order.
#[derive(Debug)]
pub struct OrderedEvents {
    /// The root event, or why the DAG has no usable root.
    pub root: Result<Verified, String>,
    /// Every other verified event descended from the root, in replay order.
    pub events: Vec<Verified>,
    /// Events dropped by verification or for not descending from the root.
    pub dropped: Vec<DroppedEvent>,
}

/// Verifies the commits of one DAG and puts the valid ones in replay order
/// (topological; concurrent events by `(at, commit id)`), without
/// interpreting any event. [`fold`] applies them to an object's state.
pub fn ordered_events(root_id: &str, dag: &[DagCommit], checker: &mut Checker) -> OrderedEvents {
    let mut dropped = Vec::new();
    let index: HashMap<Oid, usize> = dag.iter().enumerate().map(|(i, c)| (c.oid, i)).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); dag.len()];
    let mut waiting: Vec<usize> = vec![0; dag.len()];
    for (i, c) in dag.iter().enumerate() {
        for p in &c.parents {
            if let Some(&pi) = index.get(p) {
                children[pi].push(i);
                waiting[i] += 1;
            }
        }
    }
    let mut verified: Vec<Option<Verified>> = dag
        .iter()
        .map(|c| {
            check(c, checker)
                .map_err(|d| dropped.push(d))
                .ok()
                .flatten()
        })
        .collect();
    let key = |verified: &[Option<Verified>], i: usize| -> ReadyKey {
        match &verified[i] {
            Some(v) => Reverse((1, v.event.at, v.oid)),
            None => Reverse((0, DateTime::<Utc>::MIN_UTC, dag[i].oid)),
        }
    };
    let mut ready: BinaryHeap<(ReadyKey, usize)> = (0..dag.len())
        .filter(|&i| waiting[i] == 0)
        .map(|i| (key(&verified, i), i))
        .collect();
    let mut rooted = vec![false; dag.len()];
    let mut root: Option<Result<Verified, String>> = None;
    let mut events = Vec::new();
    while let Some((_, i)) = ready.pop() {
        let commit = &dag[i];
        let is_root = commit.oid.to_string() == root_id;
        rooted[i] = is_root
            || commit
                .parents
                .iter()
                .any(|p| index.get(p).is_some_and(|&pi| rooted[pi]));
        for &child in &children[i] {
            waiting[child] -= 1;
            if waiting[child] == 0 {
                ready.push((key(&verified, child), child));
            }
        }
        let Some(v) = verified[i].take() else {
            if is_root {
                root = Some(Err(dropped
                    .iter()
                    .find(|d: &&DroppedEvent| d.commit == root_id)
                    .map(|d| format!("root event dropped: {}", d.detail))
                    .unwrap_or_else(|| "root commit holds no event".into())));
            }
            continue;
        };
        if is_root {
            root = Some(Ok(v));
        } else if rooted[i] {
            events.push(v);
        } else {
            dropped.push(v.misplaced("not descended from the root"));
        }
    }
    OrderedEvents {
        root: root.unwrap_or_else(|| Err(format!("root commit {root_id} is not in the DAG"))),
        events,
        dropped,
    }
}

/// Orders ready commits: commits that apply nothing (merges, dropped
/// events) first, so they never reorder the events after them; then events
/// by `(at, oid)`.
type ReadyKey = Reverse<(u8, DateTime<Utc>, Oid)>;

/// The state of one kind of object as a fold of its events: how the root
/// event makes it, and how each later event changes it.
pub trait Fold: Sized {
    /// The state the root event makes; `Err(why)` when the root is not an
    /// event that opens this kind of object (the object is then invalid).
    fn from_root(root: &Verified) -> Result<Self, String>;

    /// Applies one verified non-root event, in replay order; `Err(why)` when
    /// the event does not belong below this object's root (it is then
    /// dropped as misplaced and the state is left as it was).
    fn apply(&mut self, event: &Verified) -> Result<(), String>;
}

/// The pure replay of one DAG rooted at `root_id`: verifies and orders its
/// commits ([`ordered_events`]) and folds them into `S`. Returns the state
/// (or why the object is invalid: its root was dropped or opens another
/// kind of object) and the dropped events, sorted by commit id.
pub fn fold<S: Fold>(
    root_id: &str,
    dag: &[DagCommit],
    checker: &mut Checker,
) -> (Result<S, String>, Vec<DroppedEvent>) {
    let OrderedEvents {
        root,
        events,
        mut dropped,
    } = ordered_events(root_id, dag, checker);
    let state = root.and_then(|root| match S::from_root(&root) {
        Err(why) => {
            dropped.push(root.misplaced(&why));
            Err(why)
        }
        Ok(mut state) => {
            for v in &events {
                if let Err(why) = state.apply(v) {
                    dropped.push(v.misplaced(&why));
                }
            }
            Ok(state)
        }
    });
    dropped.sort_by(|a, b| a.commit.cmp(&b.commit));
    (state, dropped)
}

/// Verifies one commit: `Ok(None)` for a structural merge, `Ok(Some)` for a
/// valid trusted event, `Err` for a dropped one.
fn check(commit: &DagCommit, checker: &mut Checker) -> Result<Option<Verified>, DroppedEvent> {
    let drop = |kind: Option<&Event>, reason, detail: String| DroppedEvent {
        commit: commit.oid.to_string(),
        kind: kind.map(|e| e.action.kind().to_string()),
        author_fingerprint: kind.and_then(|e| author_fingerprint(&e.author.key)),
        reason,
        detail,
        at: None,
    };
    let (json, sig) = match &commit.content {
        Content::Merge => return Ok(None),
        Content::Malformed(why) => return Err(drop(None, DropReason::Malformed, why.clone())),
        Content::Oversized(why) => return Err(drop(None, DropReason::Oversized, why.clone())),
        Content::Event { json, sig } => (json, sig),
    };
    let event = Event::from_canonical_json(json)
        .map_err(|e: DecodeError| drop(None, DropReason::BadEvent, e.to_string()))?;
    let trusted = checker
        .verify(&event.author.key, json, sig)
        .map_err(|e: VerifyError| drop(Some(&event), DropReason::BadSignature, e.to_string()))?;
    if !trusted {
        return Err(drop(
            Some(&event),
            DropReason::Untrusted,
            "author key is not in the trust allowlist".into(),
        ));
    }
    if event.at > checker.latest {
        let mut dropped = drop(
            Some(&event),
            DropReason::Future,
            format!(
                "dated {}, more than a day after this machine's clock",
                event.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        );
        dropped.at = Some(event.at);
        return Err(dropped);
    }
    Ok(Some(Verified {
        oid: commit.oid,
        event,
    }))
}

fn misplaced_event(v: &Verified, why: &str) -> DroppedEvent {
    DroppedEvent {
        commit: v.oid.to_string(),
        kind: Some(v.event.action.kind().to_string()),
        author_fingerprint: author_fingerprint(&v.event.author.key),
        reason: DropReason::Misplaced,
        detail: why.to_string(),
        at: None,
    }
}

fn author_fingerprint(key_line: &str) -> Option<String> {
    sign::parse_public_key(key_line)
        .ok()
        .map(|k| sign::fingerprint(&k))
}
