//! Replay: the materialized state of an issue is a pure function of its
//! event DAG and the trust allowlist. Events are verified (signature over
//! the exact `event.json` bytes, author key in the allowlist when there is
//! one), put in a topological order where concurrent events go by
//! `(at, commit id)`, and folded into an [`IssueState`]. Bad events are
//! dropped and reported as [`DroppedEvent`]s, never applied. Also here:
//! resolving an id prefix to an issue ref, and listing every issue.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use chrono::{DateTime, Utc};
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::record::cache;
pub use crate::record::event::Author;
use crate::record::event::{Action, DecodeError, Event};
use crate::record::refs;
use crate::record::sign::{self, VerifyError};
use crate::record::store::{self, Content, DagCommit};
use crate::record::trust::TrustList;

/// Open or closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IssueStatus {
    Open,
    Closed,
}

impl std::fmt::Display for IssueStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad` so that width specifiers (`{:<6}`) apply.
        f.pad(match self {
            IssueStatus::Open => "open",
            IssueStatus::Closed => "closed",
        })
    }
}

/// A comment on an issue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    /// The full id of the event commit that added it.
    pub id: String,
    pub author: Author,
    pub at: DateTime<Utc>,
    pub body: String,
}

/// An issue as its DAG says it is now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueState {
    /// The full 40-hex id of the root commit.
    pub id: String,
    pub title: String,
    pub body: String,
    /// Who opened it.
    pub author: Author,
    /// `at` of the `issue.open` event.
    pub created_at: DateTime<Utc>,
    /// The latest `at` among the applied events.
    pub updated_at: DateTime<Utc>,
    pub status: IssueStatus,
    /// The reason given by the `issue.close` that closed it, if any.
    pub closed_reason: Option<String>,
    /// Sorted, without duplicates.
    pub labels: Vec<String>,
    /// In replay order.
    pub comments: Vec<Comment>,
}

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
}

/// The full outcome of replaying one issue DAG.
#[derive(Clone, Debug)]
pub struct IssueReplay {
    pub id: String,
    pub ref_name: String,
    /// The commit the ref pointed at: the cache key of this replay (with the
    /// allowlist's contents).
    pub tip: Oid,
    /// `Err(reason)` when the issue is invalid (its root was dropped).
    pub state: Result<IssueState, String>,
    pub dropped: Vec<DroppedEvent>,
    /// Number of event commits (structural merges excluded).
    pub events: usize,
}

impl IssueState {
    /// Materializes the issue at `ref_name` whose root is `full_id`,
    /// applying the allowlist of `repo` if present. Fails with
    /// [`Error::InvalidIssue`] if the root event is dropped.
    pub fn from_ref(repo: &Repository, ref_name: &str, full_id: &str) -> Result<IssueState> {
        let trust = TrustList::load(repo)?;
        replay_ref(repo, ref_name, full_id, trust.as_ref())?
            .state
            .map_err(|reason| Error::InvalidIssue {
                id: full_id.to_string(),
                reason,
            })
    }
}

/// Replays the DAG at `ref_name` with an already loaded allowlist.
pub fn replay_ref(
    repo: &Repository,
    ref_name: &str,
    full_id: &str,
    trust: Option<&TrustList>,
) -> Result<IssueReplay> {
    replay_ref_with(repo, ref_name, full_id, &mut Checker::new(trust))
}

fn replay_ref_with(
    repo: &Repository,
    ref_name: &str,
    full_id: &str,
    checker: &mut Checker,
) -> Result<IssueReplay> {
    let tip =
        store::ref_tip(repo, ref_name)?.ok_or_else(|| Error::IssueNotFound(full_id.to_string()))?;
    let dag = store::read_dag(repo, tip)?;
    let (state, dropped) = replay_with(full_id, &dag, checker);
    Ok(IssueReplay {
        id: full_id.to_string(),
        ref_name: ref_name.to_string(),
        tip,
        state,
        dropped,
        events: dag
            .iter()
            .filter(|c| !matches!(c.content, Content::Merge))
            .count(),
    })
}

/// Replays every issue of `repo`, valid or not, in id order, verifying
/// every event (no cache: this is what `verify` runs).
pub fn replay_all(repo: &Repository) -> Result<Vec<IssueReplay>> {
    let trust = TrustList::load(repo)?;
    let refs = issue_refs(repo)?;
    replay_many(repo, trust.as_ref(), &refs)
}

/// Replays the given issue refs. Many refs are split over a few threads,
/// each with its own handle on the repository.
fn replay_many(
    repo: &Repository,
    trust: Option<&TrustList>,
    refs: &[(String, String)],
) -> Result<Vec<IssueReplay>> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8)
        .min(refs.len() / 64)
        .max(1);
    let run = |repo: &Repository, chunk: &[(String, String)]| -> Result<Vec<IssueReplay>> {
        let mut checker = Checker::new(trust);
        chunk
            .iter()
            .map(|(name, id)| replay_ref_with(repo, name, id, &mut checker))
            .collect()
    };
    if threads == 1 {
        return run(repo, refs);
    }
    let git_dir = repo.path().to_path_buf();
    let chunk_len = refs.len().div_ceil(threads);
    let results: Vec<Result<Vec<IssueReplay>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = refs
            .chunks(chunk_len)
            .map(|chunk| {
                let git_dir = &git_dir;
                scope.spawn(move || run(&Repository::open(git_dir)?, chunk))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("replay thread panicked"))
            .collect()
    });
    let mut all = Vec::with_capacity(refs.len());
    for part in results {
        all.extend(part?);
    }
    Ok(all)
}

/// Every valid issue of `repo`, newest first (ties by id). Invalid issues
/// (root dropped) are left out; `verify` reports them.
///
/// Issues whose ref tip (and the allowlist) did not change since the last
/// call are taken from the disk cache (`cache::cache_path`); the others are
/// replayed and the cache is updated.
pub fn list_issues(repo: &Repository) -> Result<Vec<IssueState>> {
    let trust = TrustList::load(repo)?;
    let key = cache::fingerprint(repo);
    let mut cached = cache::load(repo, &key);
    let mut entries = BTreeMap::new();
    let mut stale = Vec::new();
    for reference in repo.references_glob(refs::ISSUES_GLOB)? {
        let reference = reference?;
        let Ok(name) = reference.name() else { continue };
        let Some(id) = refs::issue_id_of(name) else {
            continue;
        };
        let tip = reference.target().map(|t| t.to_string());
        match cached.remove(id) {
            Some(entry) if Some(&entry.tip) == tip.as_ref() => {
                entries.insert(id.to_string(), entry);
            }
            _ => stale.push((name.to_string(), id.to_string())),
        }
    }
    let changed = !stale.is_empty() || !cached.is_empty();
    for replay in replay_many(repo, trust.as_ref(), &stale)? {
        entries.insert(
            replay.id.clone(),
            cache::Entry {
                tip: replay.tip.to_string(),
                state: replay.state,
                dropped: replay.dropped,
                events: replay.events,
            },
        );
    }
    let mut issues: Vec<IssueState> = entries
        .values()
        .filter_map(|e| e.state.as_ref().ok().cloned())
        .collect();
    if changed {
        cache::save(repo, &key, entries);
    }
    issues.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
    Ok(issues)
}

/// `(ref name, full id)` of every issue ref, sorted by id.
pub fn issue_refs(repo: &Repository) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for reference in repo.references_glob(refs::ISSUES_GLOB)? {
        let reference = reference?;
        let Ok(name) = reference.name() else { continue };
        if let Some(id) = refs::issue_id_of(name) {
            out.push((name.to_string(), id.to_string()));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// Resolves a full id or a unique prefix of 4+ hex digits to
/// `(ref name, full id)`.
pub fn resolve_issue_ref(repo: &Repository, id_or_prefix: &str) -> Result<(String, String)> {
    let prefix = id_or_prefix.trim().to_ascii_lowercase();
    if prefix.len() < 4 || prefix.len() > 40 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::InvalidIssueId(id_or_prefix.to_string()));
    }
    if refs::is_full_hex_id(&prefix) {
        // A full id needs no scan of every issue ref.
        let name = refs::issue_ref(&prefix);
        return match repo.find_reference(&name) {
            Ok(_) => Ok((name, prefix)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => {
                Err(Error::IssueNotFound(id_or_prefix.to_string()))
            }
            Err(e) => Err(e.into()),
        };
    }
    let mut matches = Vec::new();
    for reference in repo.references_glob(&format!("{}*", refs::issue_ref(&prefix)))? {
        let reference = reference?;
        if let Some(id) = reference.name().ok().and_then(refs::issue_id_of) {
            matches.push((reference.name()?.to_string(), id.to_string()));
        }
    }
    matches.sort_by(|a, b| a.1.cmp(&b.1));
    match matches.len() {
        0 => Err(Error::IssueNotFound(id_or_prefix.to_string())),
        1 => Ok(matches.remove(0)),
        _ => Err(Error::AmbiguousIssue {
            prefix: id_or_prefix.to_string(),
            candidates: matches.into_iter().map(|(_, id)| id).collect(),
        }),
    }
}

/// Verifies events for one or more replays, remembering what it learnt
/// about each author key line (parsed key, allowlist decision): a DAG
/// usually has few authors and many events.
pub struct Checker<'a> {
    trust: Option<&'a TrustList>,
    keys: HashMap<String, (Result<ed25519_dalek::VerifyingKey, VerifyError>, bool)>,
}

impl<'a> Checker<'a> {
    /// A checker applying `trust` (`None`: no allowlist, trust every valid
    /// signature).
    pub fn new(trust: Option<&'a TrustList>) -> Checker<'a> {
        Checker {
            trust,
            keys: HashMap::new(),
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

/// The verified events of one DAG in replay order, for folds of object
/// types other than issues (see `patch::PatchState`).
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
/// (topological; concurrent events by `(at, commit id)`), exactly as
/// [`replay`] does for issues, without interpreting any event.
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

/// The pure replay: verifies, orders and folds the commits of one DAG.
/// Returns the state (or why the issue is invalid) and the dropped events.
pub fn replay(
    root_id: &str,
    dag: &[DagCommit],
    trust: Option<&TrustList>,
) -> (Result<IssueState, String>, Vec<DroppedEvent>) {
    replay_with(root_id, dag, &mut Checker::new(trust))
}

/// [`replay`] with a [`Checker`] shared across DAGs: orders the DAG with
/// [`ordered_events`], then folds the events into an [`IssueState`].
pub fn replay_with(
    root_id: &str,
    dag: &[DagCommit],
    checker: &mut Checker,
) -> (Result<IssueState, String>, Vec<DroppedEvent>) {
    let OrderedEvents {
        root,
        events,
        mut dropped,
    } = ordered_events(root_id, dag, checker);
    let state = root.and_then(|root| match &root.event.action {
        Action::IssueOpen(open) => {
            let mut state = IssueState {
                id: root_id.to_string(),
                title: open.title.clone(),
                body: open.body.clone(),
                author: root.event.author.clone(),
                created_at: root.event.at,
                updated_at: root.event.at,
                status: IssueStatus::Open,
                closed_reason: None,
                labels: normalize_labels(open.labels.iter().cloned()),
                comments: Vec::new(),
            };
            for v in &events {
                if apply(&mut state, v).is_err() {
                    let why = match v.event.action {
                        Action::IssueOpen(_) => "issue.open below the root".to_string(),
                        ref other => format!("{} is not an issue event", other.kind()),
                    };
                    dropped.push(misplaced_event(v, &why));
                }
            }
            Ok(state)
        }
        // The root is not an issue: nothing can apply, and the issue is
        // reported invalid as a whole.
        other => {
            let why = format!("root event is {}, not issue.open", other.kind());
            dropped.push(misplaced_event(&root, &why));
            Err(why)
        }
    });
    dropped.sort_by(|a, b| a.commit.cmp(&b.commit));
    (state, dropped)
}

/// Applies one verified non-root event; `Err` if it is not an issue event
/// that may appear below the root.
fn apply(s: &mut IssueState, v: &Verified) -> Result<(), ()> {
    let ev = &v.event;
    match &ev.action {
        Action::IssueComment(c) => s.comments.push(Comment {
            id: v.oid.to_string(),
            author: ev.author.clone(),
            at: ev.at,
            body: c.body.clone(),
        }),
        Action::IssueEdit(edit) => {
            if let Some(title) = &edit.title {
                s.title = title.clone();
            }
            if let Some(body) = &edit.body {
                s.body = body.clone();
            }
        }
        Action::IssueLabel(l) => {
            let mut labels: Vec<String> = s
                .labels
                .drain(..)
                .filter(|x| !l.remove.contains(x))
                .collect();
            labels.extend(l.add.iter().cloned());
            s.labels = normalize_labels(labels);
        }
        Action::IssueClose(c) => {
            s.status = IssueStatus::Closed;
            s.closed_reason = c.reason.clone();
        }
        Action::IssueReopen => {
            s.status = IssueStatus::Open;
            s.closed_reason = None;
        }
        // A second open, another family's event (patch.*) or an unknown
        // type does not belong below an issue's root.
        _ => return Err(()),
    }
    s.updated_at = s.updated_at.max(ev.at);
    Ok(())
}

fn normalize_labels(labels: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = labels.into_iter().filter(|l| !l.is_empty()).collect();
    out.sort();
    out.dedup();
    out
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
    };
    let (json, sig) = match &commit.content {
        Content::Merge => return Ok(None),
        Content::Malformed(why) => return Err(drop(None, DropReason::Malformed, why.clone())),
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
    }
}

fn author_fingerprint(key_line: &str) -> Option<String> {
    sign::parse_public_key(key_line)
        .ok()
        .map(|k| sign::fingerprint(&k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::event::{IssueClose, IssueComment, IssueLabel, IssueOpen};
    use crate::record::sign::SigningKey;
    use chrono::TimeZone;

    struct Fixture {
        _dir: tempfile::TempDir,
        key: SigningKey,
        other: SigningKey,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::generate(&dir.path().join("a"), "a", false).unwrap();
        let other = SigningKey::generate(&dir.path().join("b"), "b", false).unwrap();
        Fixture {
            _dir: dir,
            key,
            other,
        }
    }

    fn oid(n: u8) -> Oid {
        Oid::from_bytes(&[n; 20]).unwrap()
    }

    fn event(key: &SigningKey, secs: i64, action: Action) -> Content {
        let ev = Event::new(
            Author {
                name: "n".into(),
                key: key.public_key_line(),
            },
            Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap(),
            action,
        );
        let json = ev.to_canonical_json();
        let sig = sign::encode_signature(&key.sign(&json)).into_bytes();
        Content::Event { json, sig }
    }

    fn commit(n: u8, parents: &[u8], content: Content) -> DagCommit {
        DagCommit {
            oid: oid(n),
            parents: parents.iter().map(|&p| oid(p)).collect(),
            content,
        }
    }

    fn open(key: &SigningKey) -> DagCommit {
        commit(
            1,
            &[],
            event(
                key,
                0,
                Action::IssueOpen(IssueOpen {
                    title: "T".into(),
                    body: "B".into(),
                    labels: vec!["z".into(), "a".into(), "a".into()],
                    nonce: "1".into(),
                }),
            ),
        )
    }

    fn root() -> String {
        oid(1).to_string()
    }

    fn close() -> Action {
        Action::IssueClose(IssueClose { reason: None })
    }

    #[test]
    fn linear_history_folds_in_order() {
        let f = fixture();
        let dag = vec![
            open(&f.key),
            commit(
                2,
                &[1],
                event(
                    &f.key,
                    1,
                    Action::IssueComment(IssueComment { body: "c".into() }),
                ),
            ),
            commit(
                3,
                &[2],
                event(
                    &f.key,
                    2,
                    Action::IssueLabel(IssueLabel {
                        add: vec!["bug".into()],
                        remove: vec!["z".into()],
                    }),
                ),
            ),
            commit(4, &[3], event(&f.key, 3, close())),
        ];
        let (state, dropped) = replay(&root(), &dag, None);
        let s = state.unwrap();
        assert!(dropped.is_empty(), "{dropped:?}");
        assert_eq!(s.title, "T");
        assert_eq!(s.labels, vec!["a", "bug"]);
        assert_eq!(s.comments.len(), 1);
        assert_eq!(s.comments[0].id, oid(2).to_string());
        assert_eq!(s.status, IssueStatus::Closed);
        assert_eq!(s.updated_at - s.created_at, chrono::Duration::seconds(3));
    }

    #[test]
    fn concurrent_events_apply_in_at_order() {
        let f = fixture();
        // A reopen and a close are siblings below a close: the later `at`
        // wins, whatever order the commits come in.
        for (reopen_at, close_at, want) in [(6, 5, IssueStatus::Open), (5, 6, IssueStatus::Closed)]
        {
            let mut dag = vec![
                open(&f.key),
                commit(2, &[1], event(&f.key, 1, close())),
                commit(3, &[2], event(&f.key, reopen_at, Action::IssueReopen)),
                commit(4, &[2], event(&f.key, close_at, close())),
            ];
            for _ in 0..2 {
                let (state, dropped) = replay(&root(), &dag, None);
                assert!(dropped.is_empty());
                assert_eq!(
                    state.unwrap().status,
                    want,
                    "reopen at {reopen_at}, close at {close_at}"
                );
                dag.swap(2, 3);
            }
        }
    }

    #[test]
    fn equal_times_break_ties_by_commit_id() {
        let f = fixture();
        let title = |t: &str| {
            Action::IssueEdit(crate::record::event::IssueEdit {
                title: Some(t.into()),
                body: None,
            })
        };
        let dag = vec![
            open(&f.key),
            commit(9, &[1], event(&f.key, 5, title("from 9"))),
            commit(7, &[1], event(&f.key, 5, title("from 7"))),
        ];
        let (state, _) = replay(&root(), &dag, None);
        assert_eq!(state.unwrap().title, "from 9", "higher oid applies last");
    }

    #[test]
    fn causality_beats_timestamps() {
        let f = fixture();
        // The reopen is a child of the close but claims an earlier time (a
        // skewed clock): it still applies after its parent.
        let dag = vec![
            open(&f.key),
            commit(2, &[1], event(&f.key, 10, close())),
            commit(3, &[2], event(&f.key, 1, Action::IssueReopen)),
        ];
        let (state, _) = replay(&root(), &dag, None);
        assert_eq!(state.unwrap().status, IssueStatus::Open);
    }

    #[test]
    fn merges_add_nothing_and_join_branches() {
        let f = fixture();
        let dag = vec![
            open(&f.key),
            commit(
                2,
                &[1],
                event(
                    &f.key,
                    1,
                    Action::IssueComment(IssueComment { body: "x".into() }),
                ),
            ),
            commit(
                3,
                &[1],
                event(
                    &f.key,
                    2,
                    Action::IssueComment(IssueComment { body: "y".into() }),
                ),
            ),
            commit(4, &[2, 3], Content::Merge),
            commit(5, &[4], event(&f.key, 0, close())),
        ];
        let (state, dropped) = replay(&root(), &dag, None);
        assert!(dropped.is_empty());
        let s = state.unwrap();
        let bodies: Vec<&str> = s.comments.iter().map(|c| c.body.as_str()).collect();
        assert_eq!(bodies, vec!["x", "y"]);
        assert_eq!(s.status, IssueStatus::Closed);
    }

    #[test]
    fn tampered_and_untrusted_events_are_dropped_and_reported() {
        let f = fixture();
        let Content::Event { json, sig } = event(&f.key, 1, close()) else {
            unreachable!()
        };
        let tampered = Content::Event {
            json: String::from_utf8(json.clone())
                .unwrap()
                .replace("close", "reopen")
                .into_bytes(),
            sig: sig.clone(),
        };
        let truncated = Content::Event {
            json: json.clone(),
            sig: sig[..20].to_vec(),
        };
        let dag = vec![
            open(&f.key),
            commit(2, &[1], tampered),
            commit(3, &[2], truncated),
            commit(4, &[3], event(&f.other, 2, close())),
            commit(5, &[4], Content::Malformed("event.json is missing".into())),
        ];
        let (state, dropped) = replay(&root(), &dag, None);
        assert_eq!(
            state.unwrap().status,
            IssueStatus::Closed,
            "other key counts without allowlist"
        );
        let reasons: Vec<_> = dropped
            .iter()
            .map(|d| (d.commit.clone(), d.reason.clone()))
            .collect();
        assert_eq!(
            reasons,
            vec![
                (oid(2).to_string(), DropReason::BadSignature),
                (oid(3).to_string(), DropReason::BadSignature),
                (oid(5).to_string(), DropReason::Malformed),
            ]
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trusted_keys");
        std::fs::write(&path, format!("{}\n", f.key.public_key_line())).unwrap();
        let trust = TrustList::load_path(&path).unwrap().unwrap();
        let (state, dropped) = replay(&root(), &dag, Some(&trust));
        assert_eq!(state.unwrap().status, IssueStatus::Open);
        assert!(dropped
            .iter()
            .any(|d| d.commit == oid(4).to_string() && d.reason == DropReason::Untrusted));
    }

    #[test]
    fn dropped_root_makes_the_issue_invalid() {
        let f = fixture();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trusted_keys");
        std::fs::write(&path, format!("{}\n", f.other.public_key_line())).unwrap();
        let trust = TrustList::load_path(&path).unwrap().unwrap();
        let dag = vec![open(&f.key), commit(2, &[1], event(&f.other, 1, close()))];
        let (state, dropped) = replay(&root(), &dag, Some(&trust));
        assert!(state.unwrap_err().contains("root event dropped"));
        assert_eq!(dropped.len(), 1);
    }

    #[test]
    fn open_below_root_and_foreign_roots_are_misplaced() {
        let f = fixture();
        let mut second_open = open(&f.key);
        second_open.oid = oid(2);
        second_open.parents = vec![oid(1)];
        let mut foreign = open(&f.other);
        foreign.oid = oid(3);
        let dag = vec![
            open(&f.key),
            second_open,
            foreign,
            commit(4, &[3], event(&f.other, 1, close())),
        ];
        let (state, dropped) = replay(&root(), &dag, None);
        assert_eq!(state.unwrap().status, IssueStatus::Open);
        assert_eq!(dropped.len(), 3);
        assert!(dropped.iter().all(|d| d.reason == DropReason::Misplaced));
    }
}
