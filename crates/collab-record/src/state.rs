//! Issues as a replay of their DAG: the materialized state of an issue is
//! a pure function of its event DAG and the trust allowlist, folded by the
//! shared replay (`replay.rs`: verification, order, drops) through
//! [`IssueState`]'s [`Fold`]. Also here: resolving an id prefix to an issue
//! ref, and listing every issue.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};

use crate::cache;
use crate::error::{Error, Result};
use crate::event::Action;
pub use crate::event::Author;
use crate::refs;
use crate::replay::{self as fold_replay, Checker, Fold, Verified};
pub use crate::replay::{DropReason, DroppedEvent};
use crate::store::{self, Content, DagCommit};
use crate::trust::TrustList;

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
    let (state, dropped, events) = match store::read_dag(repo, tip) {
        Ok(dag) => {
            let (state, dropped) = replay_with(full_id, &dag, checker);
            let events = dag
                .iter()
                .filter(|c| !matches!(c.content, Content::Merge))
                .count();
            (state, dropped, events)
        }
        Err(Error::DagTooLarge(why)) => (Err(over_limits(&why)), Vec::new(), 0),
        Err(e) => return Err(e),
    };
    Ok(IssueReplay {
        id: full_id.to_string(),
        ref_name: ref_name.to_string(),
        tip,
        state,
        dropped,
        events,
    })
}

/// How the reason of an object whose DAG is past the replay limits begins.
pub const OVER_LIMITS: &str = "not replayed: its DAG is past the replay limits";

/// The reason an object is invalid when its DAG is past the replay limits
/// (`why` says which).
pub fn over_limits(why: &str) -> String {
    format!("{OVER_LIMITS} ({why})")
}

/// Whether an invalid object's `reason` is that its DAG is past the replay
/// limits (rather than a dropped root).
pub fn is_over_limits(reason: &str) -> bool {
    reason.starts_with(OVER_LIMITS)
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

/// One issue as [`list_all_issues`] found it.
#[derive(Clone, Debug)]
pub struct ListedIssue {
    pub id: String,
    /// The ref's tip the state was replayed from.
    pub tip: String,
    /// `Err(reason)` when the issue is invalid.
    pub state: Result<IssueState, String>,
    /// When this replay stops being right (see `replay::expires_at`).
    pub expires: Option<DateTime<Utc>>,
}

/// Every valid issue of `repo`, newest first (ties by id). Invalid issues
/// (root dropped, DAG past the replay limits) are left out; `verify`
/// reports them.
pub fn list_issues(repo: &Repository) -> Result<Vec<IssueState>> {
    let mut issues: Vec<IssueState> = list_all_issues(repo)?
        .into_iter()
        .filter_map(|i| i.state.ok())
        .collect();
    issues.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
    Ok(issues)
}

/// Every issue of `repo`, valid or not, in id order.
///
/// Issues whose ref tip (and the allowlist) did not change since the last
/// call, and whose replay has not expired, are taken from the disk cache
/// (`cache::cache_path`); the others are replayed and the cache is updated.
pub fn list_all_issues(repo: &Repository) -> Result<Vec<ListedIssue>> {
    let trust = TrustList::load(repo)?;
    let key = cache::fingerprint(repo);
    let mut cached = cache::load(repo, &key);
    let mut entries = BTreeMap::new();
    let mut stale = Vec::new();
    let now = Utc::now();
    for reference in repo.references_glob(refs::ISSUES_GLOB)? {
        let reference = reference?;
        let Ok(name) = reference.name() else { continue };
        let Some(id) = refs::issue_id_of(name) else {
            continue;
        };
        let tip = reference.target().map(|t| t.to_string());
        match cached.remove(id) {
            Some(entry)
                if Some(&entry.tip) == tip.as_ref()
                    && fold_replay::expires_at(&entry.dropped).is_none_or(|at| now < at) =>
            {
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
    let listed = entries
        .iter()
        .map(|(id, e)| ListedIssue {
            id: id.clone(),
            tip: e.tip.clone(),
            state: e.state.clone(),
            expires: fold_replay::expires_at(&e.dropped),
        })
        .collect();
    if changed {
        cache::save(repo, &key, entries);
    }
    Ok(listed)
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

/// The pure replay: verifies, orders and folds the commits of one DAG.
/// Returns the state (or why the issue is invalid) and the dropped events.
pub fn replay(
    root_id: &str,
    dag: &[DagCommit],
    trust: Option<&TrustList>,
) -> (Result<IssueState, String>, Vec<DroppedEvent>) {
    replay_with(root_id, dag, &mut Checker::new(trust))
}

/// [`replay`] with a [`Checker`] shared across DAGs.
pub fn replay_with(
    root_id: &str,
    dag: &[DagCommit],
    checker: &mut Checker,
) -> (Result<IssueState, String>, Vec<DroppedEvent>) {
    fold_replay::fold(root_id, dag, checker)
}

impl Fold for IssueState {
    fn from_root(root: &Verified) -> Result<IssueState, String> {
        let Action::IssueOpen(open) = &root.event.action else {
            // The root is not an issue: nothing can apply, and the issue
            // is reported invalid as a whole.
            return Err(format!(
                "root event is {}, not issue.open",
                root.event.action.kind()
            ));
        };
        Ok(IssueState {
            id: root.oid.to_string(),
            title: open.title.clone(),
            body: open.body.clone(),
            author: root.event.author.clone(),
            created_at: root.event.at,
            updated_at: root.event.at,
            status: IssueStatus::Open,
            closed_reason: None,
            labels: normalize_labels(open.labels.iter().cloned()),
            comments: Vec::new(),
        })
    }

    fn apply(&mut self, v: &Verified) -> Result<(), String> {
        let s = self;
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
            Action::IssueOpen(_) => return Err("issue.open below the root".to_string()),
            other => return Err(format!("{} is not an issue event", other.kind())),
        }
        s.updated_at = s.updated_at.max(ev.at);
        Ok(())
    }
}

fn normalize_labels(labels: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = labels.into_iter().filter(|l| !l.is_empty()).collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, IssueClose, IssueComment, IssueLabel, IssueOpen};
    use crate::sign;
    use crate::sign::SigningKey;
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
            Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap(),
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
            Action::IssueEdit(crate::event::IssueEdit {
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
    fn events_dated_past_the_tolerance_wait_for_the_clock() {
        use crate::replay::{expires_at, FUTURE_TOLERANCE};
        let f = fixture();
        let epoch = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let ahead = chrono::TimeDelta::seconds(100_000); // past one day
        let dag = vec![
            open(&f.key),
            commit(2, &[1], event(&f.key, ahead.num_seconds(), close())),
        ];
        let (state, dropped) = replay_with(&root(), &dag, &mut Checker::at(None, epoch));
        assert_eq!(state.unwrap().status, IssueStatus::Open);
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].reason, DropReason::Future);
        assert_eq!(dropped[0].at, Some(epoch + ahead));
        assert!(
            dropped[0].detail.starts_with("dated 2023-11-"),
            "{:?}",
            dropped[0]
        );
        let expires = expires_at(&dropped).unwrap();
        assert_eq!(expires, epoch + ahead - FUTURE_TOLERANCE);
        // Once the clock is within the tolerance, the event applies.
        let (state, dropped) = replay_with(&root(), &dag, &mut Checker::at(None, expires));
        assert_eq!(state.unwrap().status, IssueStatus::Closed);
        assert!(dropped.is_empty());
        assert_eq!(expires_at(&dropped), None);

        // A root far in the future makes the issue invalid.
        let far = vec![commit(
            1,
            &[],
            event(
                &f.key,
                250_000_000_000, // the year 9900 or so
                Action::IssueOpen(IssueOpen {
                    title: "T".into(),
                    body: String::new(),
                    labels: vec![],
                    nonce: "1".into(),
                }),
            ),
        )];
        let (state, dropped) = replay_with(&root(), &far, &mut Checker::at(None, epoch));
        let reason = state.unwrap_err();
        assert!(reason.starts_with("root event dropped: dated "), "{reason}");
        assert_eq!(dropped[0].reason, DropReason::Future);
    }

    #[test]
    fn over_limit_reasons_are_recognised() {
        let reason = over_limits("more than 10000 commits");
        assert!(is_over_limits(&reason));
        assert!(!is_over_limits("root event dropped: bad signature"));
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
