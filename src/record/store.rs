//! Writing event commits and reading a DAG's commits, with git2 only: no
//! worktree, index or HEAD is touched, so everything works on bare
//! repositories. Refs are only ever moved by compare-and-swap, after every
//! object they point to has been written, so a failing command never leaves
//! a half-written ref. This module makes no domain decisions: it neither
//! verifies signatures nor interprets events.

use git2::{Oid, Repository, Signature, Time};

use crate::error::{Error, Result};
use crate::record::event::Event;
use crate::record::sign::{self, SigningKey};

/// File name of the event in an event commit's tree.
pub const EVENT_FILE: &str = "event.json";
/// File name of the signature in an event commit's tree.
pub const SIG_FILE: &str = "event.sig";
/// Commit message of a structural merge commit.
const MERGE_MESSAGE: &str = "merge\n";
/// Identity recorded on structural merge commits (they carry no event).
const MERGE_IDENT: &str = "git-collab";

/// What a commit of a collab DAG holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// An event: the exact bytes of `event.json` and `event.sig`.
    Event { json: Vec<u8>, sig: Vec<u8> },
    /// A structural merge made by sync: several parents, no event.
    Merge,
    /// Neither: a commit without an event that is not a merge.
    Malformed(String),
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
/// particular order.
pub fn read_dag(repo: &Repository, tip: Oid) -> Result<Vec<DagCommit>> {
    let mut walk = repo.revwalk()?;
    walk.push(tip)?;
    let mut commits = Vec::new();
    for oid in walk {
        let commit = repo.find_commit(oid?)?;
        let parents: Vec<Oid> = commit.parent_ids().collect();
        let tree = commit.tree()?;
        let json = tree.get_name(EVENT_FILE).map(|e| e.id());
        let sig = tree.get_name(SIG_FILE).map(|e| e.id());
        let content = match (json, sig) {
            (Some(json), Some(sig)) => match (repo.find_blob(json), repo.find_blob(sig)) {
                (Ok(json), Ok(sig)) => Content::Event {
                    json: json.content().to_vec(),
                    sig: sig.content().to_vec(),
                },
                _ => Content::Malformed("event.json or event.sig is not a file".into()),
            },
            (None, None) if parents.len() >= 2 => Content::Merge,
            (Some(_), None) => Content::Malformed("event.sig is missing".into()),
            _ => Content::Malformed("event.json is missing".into()),
        };
        commits.push(DagCommit {
            oid: commit.id(),
            parents,
            content,
        });
    }
    Ok(commits)
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
    use crate::record::event::{Action, Author, IssueComment};
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
            Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap(),
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
