//! Writing event commits and reading a DAG's commits, with git2 only: no
//! worktree, index or HEAD is touched, so everything works on bare
//! repositories. Refs are only ever moved by compare-and-swap, after every
//! object they point to has been written, so a failing command never leaves
//! a half-written ref. This module makes no domain decisions: it neither
//! verifies signatures nor interprets events.
//!
//! Reading is bounded (docs/security.md, "Limits"): anyone who may push can
//! write a DAG, so [`read_dag`] looks at an object's size before it reads
//! the object, reads at most [`MAX_DAG_COMMITS`] commits and
//! [`MAX_DAG_EVENT_BYTES`] of events, and reports a DAG past those limits
//! as [`Error::DagTooLarge`] instead of reading it whole.

use std::collections::{HashSet, VecDeque};

use git2::{ObjectType, Oid, Repository, Signature, Time};

use crate::error::{Error, Result};
use crate::event::Event;
use crate::sign::{self, SigningKey};

/// File name of the event in an event commit's tree.
pub const EVENT_FILE: &str = "event.json";
/// File name of the signature in an event commit's tree.
pub const SIG_FILE: &str = "event.sig";
/// Commit message of a structural merge commit.
const MERGE_MESSAGE: &str = "merge\n";
/// Identity recorded on structural merge commits (they carry no event).
const MERGE_IDENT: &str = "git-collab";

/// Most commits (events and structural merges) one DAG may have; a bigger
/// DAG is not replayed at all.
pub const MAX_DAG_COMMITS: usize = 10_000;
/// Largest `event.json`; a bigger event is dropped unread.
pub const MAX_EVENT_BYTES: usize = 256 * 1024;
/// Largest `event.sig` (an armored Ed25519 signature is about 300 bytes).
pub const MAX_SIG_BYTES: usize = 4 * 1024;
/// Most `event.json` bytes one DAG may hold in all; a DAG holding more is
/// not replayed at all.
pub const MAX_DAG_EVENT_BYTES: usize = 32 * 1024 * 1024;
/// Largest commit object of a DAG (a merge of many heads is a few KiB).
pub const MAX_COMMIT_BYTES: usize = 256 * 1024;
/// Largest tree object of an event commit (it names two files).
pub const MAX_TREE_BYTES: usize = 4 * 1024;

/// What a commit of a collab DAG holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// An event: the exact bytes of `event.json` and `event.sig`.
    Event { json: Vec<u8>, sig: Vec<u8> },
    /// A structural merge made by sync: several parents, no event.
    Merge,
    /// Neither: a commit without an event that is not a merge.
    Malformed(String),
    /// An event whose `event.json` or `event.sig` (or tree) is over the
    /// size limits; left unread.
    Oversized(String),
}

/// One commit of a DAG, read without interpretation.
#[derive(Debug, Clone)]
pub struct DagCommit {
    pub oid: Oid,
    pub parents: Vec<Oid>,
    pub content: Content,
}

/// Signs `event` and writes its blobs, tree and commit (with `parents`).
/// Writes no ref. Returns the new commit id.
pub fn write_event_commit(
    repo: &Repository,
    parents: &[Oid],
    event: &Event,
    key: &SigningKey,
) -> Result<Oid> {
    let json = event.to_canonical_json();
    let sig = sign::encode_signature(&key.sign(&json));
    write_raw_event_commit(repo, parents, event, &json, sig.as_bytes())
}

/// Writes an event commit from already-encoded bytes. Used by
/// [`write_event_commit`] and by tests that need to store tampered events.
pub fn write_raw_event_commit(
    repo: &Repository,
    parents: &[Oid],
    event: &Event,
    json: &[u8],
    sig: &[u8],
) -> Result<Oid> {
    let mut tree = repo.treebuilder(None)?;
    tree.insert(EVENT_FILE, repo.blob(json)?, 0o100644)?;
    tree.insert(SIG_FILE, repo.blob(sig)?, 0o100644)?;
    let tree = repo.find_tree(tree.write()?)?;
    let name = commit_name(&event.author.name);
    let ident = Signature::new(&name, "git-collab", &Time::new(event.at.timestamp(), 0))?;
    let parents = parents
        .iter()
        .map(|p| repo.find_commit(*p))
        .collect::<Result<Vec<_>, _>>()?;
    let parent_refs: Vec<&git2::Commit> = parents.iter().collect();
    let message = format!("{}\n", event.action.kind());
    Ok(repo.commit(None, &ident, &ident, &message, &tree, &parent_refs)?)
}

/// Writes the structural merge commit joining `heads`. It is a pure
/// function of the heads (sorted parents, empty tree, fixed identity, time
/// of the newest head), so two clones joining the same heads write the same
/// commit and converge without a further merge.
pub fn write_merge_commit(repo: &Repository, heads: &[Oid]) -> Result<Oid> {
    let mut heads = heads.to_vec();
    heads.sort();
    heads.dedup();
    let parents = heads
        .iter()
        .map(|p| repo.find_commit(*p))
        .collect::<Result<Vec<_>, _>>()?;
    let newest = parents
        .iter()
        .map(|c| c.time().seconds())
        .max()
        .unwrap_or(0);
    let ident = Signature::new(MERGE_IDENT, MERGE_IDENT, &Time::new(newest, 0))?;
    let tree = repo.find_tree(repo.treebuilder(None)?.write()?)?;
    let parent_refs: Vec<&git2::Commit> = parents.iter().collect();
    Ok(repo.commit(None, &ident, &ident, MERGE_MESSAGE, &tree, &parent_refs)?)
}

/// The commit a ref points at, or `None` if the ref does not exist.
pub fn ref_tip(repo: &Repository, ref_name: &str) -> Result<Option<Oid>> {
    match repo.find_reference(ref_name) {
        Ok(r) => Ok(Some(r.peel_to_commit()?.id())),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Moves `ref_name` from `expected` (`None`: the ref must not exist) to
/// `new`, atomically; fails with [`Error::Concurrent`] if the ref moved.
pub fn compare_and_swap(
    repo: &Repository,
    ref_name: &str,
    expected: Option<Oid>,
    new: Oid,
    log: &str,
) -> Result<()> {
    let result = match expected {
        Some(old) => repo.reference_matching(ref_name, new, true, old, log),
        None => repo.reference(ref_name, new, false, log),
    };
    match result {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.code(),
                git2::ErrorCode::Modified | git2::ErrorCode::Exists | git2::ErrorCode::Locked
            ) =>
        {
            Err(Error::Concurrent {
                ref_name: ref_name.to_string(),
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// Appends `event` to the DAG at `ref_name` (which must exist): the new
/// commit's parent is the current tip, and the ref moves only if it still
/// points there.
pub fn append_event(
    repo: &Repository,
    ref_name: &str,
    event: &Event,
    key: &SigningKey,
) -> Result<Oid> {
    let tip = ref_tip(repo, ref_name)?
        .ok_or_else(|| Error::Invalid(format!("{ref_name} does not exist")))?;
    let oid = write_event_commit(repo, &[tip], event, key)?;
    compare_and_swap(repo, ref_name, Some(tip), oid, event.action.kind())?;
    Ok(oid)
}

/// Writes a root event and creates the ref named by `ref_for(root id)`.
/// Returns the root commit id (the object's id).
pub fn create_dag(
    repo: &Repository,
    event: &Event,
    key: &SigningKey,
    ref_for: impl Fn(&str) -> String,
) -> Result<Oid> {
    let oid = write_event_commit(repo, &[], event, key)?;
    compare_and_swap(
        repo,
        &ref_for(&oid.to_string()),
        None,
        oid,
        event.action.kind(),
    )?;
    Ok(oid)
}

/// Every commit reachable from `tip`, with its raw content, in no
/// particular order. Fails with [`Error::DagTooLarge`] as soon as the DAG
/// is past [`MAX_DAG_COMMITS`] or [`MAX_DAG_EVENT_BYTES`] (or holds a commit
/// over [`MAX_COMMIT_BYTES`]), having read no more than that; an event
/// over [`MAX_EVENT_BYTES`] or [`MAX_SIG_BYTES`] is [`Content::Oversized`],
/// its blobs unread.
pub fn read_dag(repo: &Repository, tip: Oid) -> Result<Vec<DagCommit>> {
    read_dag_within(repo, tip, MAX_DAG_COMMITS, MAX_DAG_EVENT_BYTES)
}

/// [`read_dag`] with the commit and byte limits given (tests use small ones).
fn read_dag_within(
    repo: &Repository,
    tip: Oid,
    max_commits: usize,
    max_event_bytes: usize,
) -> Result<Vec<DagCommit>> {
    let odb = repo.odb()?;
    let too_large = |why: String| Error::DagTooLarge(why);
    let mut seen: HashSet<Oid> = HashSet::from([tip]);
    let mut queue: VecDeque<Oid> = VecDeque::from([tip]);
    let mut commits = Vec::new();
    let mut event_bytes = 0usize;
    while let Some(oid) = queue.pop_front() {
        if commits.len() == max_commits {
            return Err(too_large(format!("more than {max_commits} commits")));
        }
        let (size, kind) = odb.read_header(oid)?;
        if kind != ObjectType::Commit {
            return Err(Error::Invalid(format!("{oid} is a {kind}, not a commit")));
        }
        if size > MAX_COMMIT_BYTES {
            return Err(too_large(format!(
                "commit {oid} is {size} bytes, over the {MAX_COMMIT_BYTES}-byte limit"
            )));
        }
        let commit = repo.find_commit(oid)?;
        let parents: Vec<Oid> = commit.parent_ids().collect();
        for p in &parents {
            if seen.insert(*p) {
                queue.push_back(*p);
            }
        }
        let content = read_content(repo, &odb, &commit, parents.len())?;
        if let Content::Event { json, .. } = &content {
            event_bytes += json.len();
            if event_bytes > max_event_bytes {
                return Err(too_large(format!(
                    "more than {max_event_bytes} bytes of events"
                )));
            }
        }
        commits.push(DagCommit {
            oid,
            parents,
            content,
        });
    }
    Ok(commits)
}

/// What one commit of a DAG holds, reading each object only once its size
/// is known to be within the limits.
fn read_content(
    repo: &Repository,
    odb: &git2::Odb,
    commit: &git2::Commit,
    parents: usize,
) -> Result<Content> {
    let (tree_size, _) = odb.read_header(commit.tree_id())?;
    if tree_size > MAX_TREE_BYTES {
        return Ok(Content::Oversized(format!(
            "its tree is {tree_size} bytes, over the {MAX_TREE_BYTES}-byte limit"
        )));
    }
    let tree = commit.tree()?;
    let json = tree.get_name(EVENT_FILE).map(|e| e.id());
    let sig = tree.get_name(SIG_FILE).map(|e| e.id());
    let (json, sig) = match (json, sig) {
        (Some(json), Some(sig)) => (json, sig),
        (None, None) if parents >= 2 => return Ok(Content::Merge),
        (Some(_), None) => return Ok(Content::Malformed("event.sig is missing".into())),
        _ => return Ok(Content::Malformed("event.json is missing".into())),
    };
    for (file, oid, limit) in [
        (EVENT_FILE, json, MAX_EVENT_BYTES),
        (SIG_FILE, sig, MAX_SIG_BYTES),
    ] {
        match odb.read_header(oid) {
            Ok((size, ObjectType::Blob)) if size > limit => {
                return Ok(Content::Oversized(format!(
                    "{file} is {size} bytes, over the {limit}-byte limit"
                )))
            }
            Ok((_, ObjectType::Blob)) => {}
            _ => {
                return Ok(Content::Malformed(
                    "event.json or event.sig is not a file".into(),
                ))
            }
        }
    }
    Ok(Content::Event {
        json: repo.find_blob(json)?.content().to_vec(),
        sig: repo.find_blob(sig)?.content().to_vec(),
    })
}

/// A commit author name git accepts: no angle brackets or newlines.
fn commit_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .filter(|c| !matches!(c, '<' | '>' | '\n' | '\r' | '\0'))
        .collect();
    let trimmed = cleaned.trim();
    if trimmed.is_empty() {
        MERGE_IDENT.to_string()
    } else {
        trimmed.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Action, Author, IssueComment};
    use chrono::{TimeZone, Utc};

    fn setup() -> (tempfile::TempDir, Repository, SigningKey) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path().join("r.git")).unwrap();
        let key = SigningKey::generate(&dir.path().join("k"), "k", false).unwrap();
        (dir, repo, key)
    }

    fn comment(key: &SigningKey, body: &str, secs: i64) -> Event {
        Event::new(
            Author {
                name: "A <evil>\nname".into(),
                key: key.public_key_line(),
            },
            Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap(),
            Action::IssueComment(IssueComment { body: body.into() }),
        )
    }

    #[test]
    fn events_round_trip_through_a_bare_repository() {
        let (_dir, repo, key) = setup();
        let ev = comment(&key, "one", 0);
        let root = create_dag(&repo, &ev, &key, |id| format!("refs/collab/test/{id}")).unwrap();
        let name = format!("refs/collab/test/{root}");
        let second = append_event(&repo, &name, &comment(&key, "two", 1), &key).unwrap();
        assert_eq!(ref_tip(&repo, &name).unwrap(), Some(second));
        let dag = read_dag(&repo, second).unwrap();
        assert_eq!(dag.len(), 2);
        let first = dag.iter().find(|c| c.oid == root).unwrap();
        let Content::Event { json, sig } = &first.content else {
            panic!("an event")
        };
        assert_eq!(json, &ev.to_canonical_json());
        assert!(sign::verify(&key.public_key_line(), json, sig).is_ok());
        assert!(repo.head().is_err(), "HEAD stays unborn");
    }

    #[test]
    fn merges_are_deterministic_and_hold_no_event() {
        let (_dir, repo, key) = setup();
        let root = write_event_commit(&repo, &[], &comment(&key, "r", 0), &key).unwrap();
        let a = write_event_commit(&repo, &[root], &comment(&key, "a", 1), &key).unwrap();
        let b = write_event_commit(&repo, &[root], &comment(&key, "b", 2), &key).unwrap();
        let m1 = write_merge_commit(&repo, &[a, b]).unwrap();
        let m2 = write_merge_commit(&repo, &[b, a]).unwrap();
        assert_eq!(m1, m2, "the same heads give the same merge");
        let dag = read_dag(&repo, m1).unwrap();
        let merge = dag.iter().find(|c| c.oid == m1).unwrap();
        assert_eq!(merge.content, Content::Merge);
        assert_eq!(dag.len(), 4);
    }

    #[test]
    fn oversized_events_are_left_unread_and_large_dags_refused() {
        let (_dir, repo, key) = setup();
        let root = write_event_commit(&repo, &[], &comment(&key, "r", 0), &key).unwrap();
        let huge = vec![b'x'; MAX_EVENT_BYTES + 1];
        let ev = comment(&key, "h", 1);
        let big = write_raw_event_commit(&repo, &[root], &ev, &huge, b"sig").unwrap();
        let big_sig = vec![b's'; MAX_SIG_BYTES + 1];
        let json = ev.to_canonical_json();
        let tip = write_raw_event_commit(&repo, &[big], &ev, &json, &big_sig).unwrap();
        let dag = read_dag(&repo, tip).unwrap();
        assert_eq!(dag.len(), 3);
        for (oid, file) in [(big, EVENT_FILE), (tip, SIG_FILE)] {
            let c = dag.iter().find(|c| c.oid == oid).unwrap();
            let Content::Oversized(why) = &c.content else {
                panic!("{file}: {:?}", c.content)
            };
            assert!(why.starts_with(file), "{why}");
        }

        let mut tip = root;
        for i in 0..5 {
            tip = write_event_commit(&repo, &[tip], &comment(&key, "n", i), &key).unwrap();
        }
        assert_eq!(read_dag_within(&repo, tip, 6, usize::MAX).unwrap().len(), 6);
        let err = read_dag_within(&repo, tip, 5, usize::MAX).unwrap_err();
        assert_eq!(
            err.to_string(),
            "DAG too large to replay: more than 5 commits"
        );
        let one = comment(&key, "n", 0).to_canonical_json().len();
        assert!(read_dag_within(&repo, tip, 100, 6 * one + 10).is_ok());
        let err = read_dag_within(&repo, tip, 100, 3 * one).unwrap_err();
        assert!(matches!(err, Error::DagTooLarge(_)), "{err}");
    }

    #[test]
    fn compare_and_swap_fails_on_a_moved_ref_and_changes_nothing() {
        let (_dir, repo, key) = setup();
        let root = write_event_commit(&repo, &[], &comment(&key, "r", 0), &key).unwrap();
        let next = write_event_commit(&repo, &[root], &comment(&key, "n", 1), &key).unwrap();
        compare_and_swap(&repo, "refs/collab/x", None, root, "t").unwrap();
        assert!(matches!(
            compare_and_swap(&repo, "refs/collab/x", None, next, "t"),
            Err(Error::Concurrent { .. })
        ));
        assert!(matches!(
            compare_and_swap(&repo, "refs/collab/x", Some(next), next, "t"),
            Err(Error::Concurrent { .. })
        ));
        assert_eq!(ref_tip(&repo, "refs/collab/x").unwrap(), Some(root));
        compare_and_swap(&repo, "refs/collab/x", Some(root), next, "t").unwrap();
        assert_eq!(ref_tip(&repo, "refs/collab/x").unwrap(), Some(next));
    }
}
