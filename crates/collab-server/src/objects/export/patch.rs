//! The export of patches ([`PatchExport`]): each patch as a chain of event
//! commits in the ordinary patch DAG format
//! (`refs/collab/export/patches/<id>`; read back by
//! `collab_record::export::replay_patch_export`). Its exporter ([`spawn`])
//! wakes whenever the event log's head moves (writes of this process, and
//! of the push hooks, seen by the head poller), waits [`DEBOUNCE`],
//! and exports the repositories with new `patch.*` events. An export
//! whose record does not match its ref is rebuilt from a new root.
//!
//! Shape of an exported DAG: a linear chain. The root is a `patch.open`
//! (title, body, base branch, revision 1's head and base commit, `at` =
//! the patch's creation time, the author's display name); then, in time
//! order, one `patch.revise` per later revision (head and base commit, its
//! pusher's name and time), one `patch.review` per vote that counts (its
//! revision by the export's own event id, verdict, body, `voter` = the
//! voting principal, its author's name and time) and one `patch.comment`
//! per comment (body, revision, inline path and line); then `patch.close`
//! or `patch.merge` (the merge commit, by the merging principal, at the
//! merge time). Every event's key is the server's, so votes carry `voter`:
//! the replay keeps one vote per (key, voter) and revision, and a vote the
//! database replaced is followed by the one that replaced it. The root's
//! commit id is not the patch id: readers take the id from the ref name.
//!
//! Kept: what replaying the export gives is the patch's title, body, base,
//! status and merge commit; revisions with heads, base commits, authors'
//! names and times; the votes that count with verdicts, bodies, voters'
//! names and principals; comments in order with bodies, authors' names,
//! times, revisions, paths and lines. Dropped: principals and keys of
//! authors other than voters (every key is the server's), each revision's
//! base-branch tip at push time, links to issues, replaced votes, ids of
//! votes and comments (the export's own commit ids stand in), the
//! timeline's exact interleaving where times are equal, and who closed the
//! patch. A patch that was reopened after being closed has its chain
//! rebuilt from a new root (the DAG format has no reopen event); the ref
//! is the server's alone, so clones follow it with a forced fetch.

use std::collections::BTreeSet;

use collab_record::event::{
    Action, Event, PatchComment, PatchMerge, PatchOpen, PatchReview, PatchRevise,
    Verdict as EventVerdict,
};
use collab_record::refs;
use collab_record::sign::SigningKey;
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};

use super::exporter::{
    at, export_pending, run_blocking, write_event, ExportKind, Exporter, DEBOUNCE, SERVER_NAME,
};
use crate::shutdown::Stop;
use collab_store::exports;
use collab_store::patches::{self, PatchDetail, PatchStatus, Verdict};
use collab_store::sql::Connection;

/// The export of patches.
pub struct PatchExport;

/// What an export shows, kept beside it so the next run appends only the
/// difference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    title: String,
    body: String,
    base: String,
    /// The export's event id of each revision, in order (the root first).
    revisions: Vec<String>,
    /// The database ids of the votes exported.
    reviews: BTreeSet<String>,
    comments: usize,
    /// `open`, `closed` or `merged`.
    status: String,
}

/// Start the background exporter of patches: it follows the event log's
/// head until `stopping` fires.
pub fn spawn(ex: Exporter, stopping: Stop) {
    tokio::spawn(async move {
        let mut head = ex.writer.subscribe_event_head();
        let mut seen = *head.borrow_and_update();
        let catch_up = ex.clone();
        run_blocking::<PatchExport>(move || export_pending::<PatchExport>(&catch_up, None)).await;
        loop {
            tokio::select! {
                changed = head.changed() => if changed.is_err() { return },
                _ = stopping.clone().wait() => return,
            }
            tokio::time::sleep(DEBOUNCE).await;
            let upto = *head.borrow_and_update();
            let after = std::mem::replace(&mut seen, upto);
            if upto <= after {
                continue;
            }
            let ex = ex.clone();
            run_blocking::<PatchExport>(move || {
                let repos = ex.reads.read_blocking(move |c| {
                    Ok(exports::repos_with_patch_events(c, after, upto)?)
                })?;
                let mut done = 0;
                for repo in repos {
                    done += export_pending::<PatchExport>(&ex, Some(&repo))?;
                }
                Ok(done)
            })
            .await;
        }
    });
}

impl ExportKind for PatchExport {
    const KIND: exports::Kind = exports::Kind::Patch;
    const NOUN: &'static str = "patch";
    const RECORD_LABEL: &'static str = "patch export record";

    type Detail = PatchDetail;
    type Summary = Summary;

    fn ref_name(id: &str) -> String {
        refs::server_export_patch_ref(id)
    }

    fn load(c: &Connection, repo: &str, id: &str) -> anyhow::Result<(PatchDetail, i64)> {
        let detail = patches::show(c, repo, id)?;
        let version: i64 = c.query_row(
            "SELECT version FROM patches WHERE repo = ?1 AND id = ?2",
            [repo, id],
            |row| row.get(0),
        )?;
        Ok((detail, version))
    }

    /// An unreadable record starts a new chain.
    fn recorded(state: &str) -> anyhow::Result<Option<Summary>> {
        Ok(serde_json::from_str::<Summary>(state).ok())
    }

    /// A new chain.
    fn unrecorded(_: &Repository, _: &str, _: &str) -> anyhow::Result<Option<Summary>> {
        Ok(None)
    }

    fn append_changes(
        git: &Repository,
        key: &SigningKey,
        tip: Option<Oid>,
        before: Option<Summary>,
        detail: &PatchDetail,
    ) -> anyhow::Result<(Option<Oid>, Summary)> {
        let (tip, s) = append_changes(git, key, tip, before, detail)?;
        Ok((Some(tip), s))
    }

    fn log_exported(n: usize) {
        tracing::debug!(patches = n, "exported patches");
    }

    fn log_failed(repo: &str, id: &str, e: &anyhow::Error) {
        tracing::warn!(repo, patch = id, "exporting the patch failed: {e:#}");
    }
}

fn status_str(status: PatchStatus) -> &'static str {
    status.as_str()
}

fn verdict(v: Verdict) -> EventVerdict {
    match v {
        Verdict::Approve => EventVerdict::Approve,
        Verdict::RequestChanges => EventVerdict::RequestChanges,
        Verdict::Comment => EventVerdict::Comment,
    }
}

/// Whether the export showing `s` can reach `detail` by appending events.
fn appendable(s: &Summary, detail: &PatchDetail) -> bool {
    let p = &detail.patch;
    s.title == p.title
        && s.body == p.body
        && s.base == p.base
        && s.revisions.len() <= detail.revisions.len()
        && s.comments <= detail.comments.len()
        && match (s.status.as_str(), p.status) {
            ("merged", status) => status == PatchStatus::Merged,
            ("closed", PatchStatus::Open) => false,
            _ => true,
        }
}

/// One thing to append, in time order.
enum Item<'a> {
    Revision(usize),
    Comment(usize, &'a patches::Comment),
    Vote(&'a patches::Review),
}

/// Append to the chain at `tip` the events that take `before` (nothing, or
/// a summary the database cannot be reached from by appending: start a new
/// chain) to `detail`; returns the new tip and its summary.
fn append_changes(
    git: &Repository,
    key: &SigningKey,
    tip: Option<Oid>,
    before: Option<Summary>,
    detail: &PatchDetail,
) -> anyhow::Result<(Oid, Summary)> {
    let p = &detail.patch;
    let first = detail
        .revisions
        .first()
        .ok_or_else(|| anyhow::anyhow!("patch {} has no revision", p.id))?;
    let server_key = key.public_key_line();
    let by = |name: &str| super::exporter::by(&server_key, name);
    let before = before.filter(|s| appendable(s, detail));
    // A new chain starts from no parent.
    let mut tip = if before.is_some() { tip } else { None };
    let mut write = |event: Event| write_event(git, key, &mut tip, &event);
    let mut s = match before {
        Some(s) => s,
        None => {
            let open = Action::PatchOpen(PatchOpen {
                title: p.title.clone(),
                body: p.body.clone(),
                base: p.base.clone(),
                head: first.head.clone(),
                base_commit: Some(first.base_commit.clone()),
                nonce: hex::encode(rand::random::<[u8; 16]>()),
            });
            let root = write(Event::new(by(&p.author.name), at(p.created_ms), open))?;
            Summary {
                title: p.title.clone(),
                body: p.body.clone(),
                base: p.base.clone(),
                revisions: vec![root.to_string()],
                reviews: BTreeSet::new(),
                comments: 0,
                status: "open".into(),
            }
        }
    };

    // New revisions, votes and comments, by time.
    let mut items: Vec<(i64, u8, Item<'_>)> = Vec::new();
    for (i, r) in detail.revisions.iter().enumerate().skip(s.revisions.len()) {
        items.push((r.at_ms, 0, Item::Revision(i)));
    }
    for (i, c) in detail.comments.iter().enumerate().skip(s.comments) {
        items.push((c.at_ms, 1, Item::Comment(i, c)));
    }
    for v in detail.reviews.iter().filter(|v| !s.reviews.contains(&v.id)) {
        items.push((v.at_ms, 2, Item::Vote(v)));
    }
    items.sort_by_key(|(at_ms, kind, _)| (*at_ms, *kind));
    let revise_upto = |s: &mut Summary,
                       n: usize,
                       write: &mut dyn FnMut(Event) -> anyhow::Result<Oid>|
     -> anyhow::Result<()> {
        while s.revisions.len() < n.min(detail.revisions.len()) {
            let r = &detail.revisions[s.revisions.len()];
            let revise = Action::PatchRevise(PatchRevise {
                head: r.head.clone(),
                base_commit: Some(r.base_commit.clone()),
            });
            let oid = write(Event::new(by(&r.author.name), at(r.at_ms), revise))?;
            s.revisions.push(oid.to_string());
        }
        Ok(())
    };
    let revision_event = |s: &Summary, n: Option<i64>| -> Option<String> {
        n.and_then(|n| s.revisions.get((n as usize).checked_sub(1)?).cloned())
    };
    for (_, _, item) in items {
        match item {
            Item::Revision(i) => revise_upto(&mut s, i + 1, &mut write)?,
            Item::Comment(i, c) => {
                if let Some(n) = c.revision {
                    revise_upto(&mut s, n as usize, &mut write)?;
                }
                let comment = Action::PatchComment(PatchComment {
                    body: c.body.clone(),
                    revision: revision_event(&s, c.revision),
                    path: c.inline.as_ref().map(|x| x.path.clone()),
                    line: c
                        .inline
                        .as_ref()
                        .and_then(|x| x.line)
                        .and_then(|l| u32::try_from(l).ok()),
                });
                write(Event::new(by(&c.author.name), at(c.at_ms), comment))?;
                s.comments = s.comments.max(i + 1);
            }
            Item::Vote(v) => {
                revise_upto(&mut s, v.revision as usize, &mut write)?;
                let Some(revision) = revision_event(&s, Some(v.revision)) else {
                    continue;
                };
                let review = Action::PatchReview(PatchReview {
                    revision,
                    verdict: verdict(v.verdict),
                    body: v.body.clone(),
                    voter: Some(v.author.principal.clone()),
                });
                write(Event::new(by(&v.author.name), at(v.at_ms), review))?;
                s.reviews.insert(v.id.clone());
            }
        }
    }
    revise_upto(&mut s, detail.revisions.len(), &mut write)?;

    match (s.status.as_str(), p.status) {
        ("open", PatchStatus::Closed) => {
            write(Event::new(
                by(SERVER_NAME),
                at(p.updated_ms),
                Action::PatchClose,
            ))?;
        }
        (old, PatchStatus::Merged) if old != "merged" => {
            let (commit, who, when) = match &p.merge {
                Some(m) => (m.commit.clone(), m.by.clone(), m.at_ms),
                None => (String::new(), SERVER_NAME.to_string(), p.updated_ms),
            };
            let merge = Action::PatchMerge(PatchMerge { commit });
            write(Event::new(by(&who), at(when), merge))?;
        }
        _ => {}
    }
    s.status = status_str(p.status).to_string();
    let tip = tip.ok_or_else(|| anyhow::anyhow!("the export of {} is empty", p.id))?;
    Ok((tip, s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use collab_record::patch::{self as record_patch, PatchState};
    use collab_record::replay::Checker;
    use collab_record::store;
    use collab_store::patches::{Comment, Inline, Merge, Patch, Person, Review, Revision};

    fn person(p: &str) -> Person {
        Person {
            principal: p.into(),
            name: p.to_uppercase(),
            key: None,
        }
    }

    fn oid(c: char) -> String {
        c.to_string().repeat(40)
    }

    fn revision(n: i64, head: char, at_ms: i64) -> Revision {
        Revision {
            n,
            head: oid(head),
            base_commit: oid('b'),
            base_tip: None,
            author: person("alice"),
            at_ms,
            lease_holders: Vec::new(),
        }
    }

    fn vote(id: char, revision: i64, who: &str, verdict: Verdict, at_ms: i64) -> Review {
        Review {
            id: oid(id),
            revision,
            author: person(who),
            verdict,
            body: format!("{who} says {}", verdict.as_str()),
            at_ms,
        }
    }

    /// The export at `tip` as the library replays it (any key trusted).
    fn replay(git: &Repository, tip: Oid) -> PatchState {
        let dag = store::read_dag(git, tip).unwrap();
        let roots: Vec<Oid> = dag
            .iter()
            .filter(|c| c.parents.is_empty())
            .map(|c| c.oid)
            .collect();
        assert_eq!(roots.len(), 1, "a chain has one root");
        let (state, dropped) =
            record_patch::replay(&roots[0].to_string(), &dag, &mut Checker::new(None));
        assert!(dropped.is_empty(), "{dropped:?}");
        state.unwrap()
    }

    fn votes(s: &PatchState) -> Vec<(u32, Option<String>, &'static str)> {
        let mut v: Vec<_> = s
            .reviews
            .iter()
            .map(|r| (r.revision, r.voter.clone(), r.verdict.as_str()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn appends_what_changed_and_rebuilds_a_reopened_patch() {
        let dir = tempfile::tempdir().unwrap();
        let git = Repository::init_bare(dir.path().join("r.git")).unwrap();
        let key = SigningKey::generate(&dir.path().join("key"), "server", false).unwrap();
        let mut d = PatchDetail {
            patch: Patch {
                repo: "r.git".into(),
                id: oid('9'),
                title: "Add lib".into(),
                body: "why".into(),
                base: "main".into(),
                author: person("alice"),
                created_ms: 1_000,
                updated_ms: 1_000,
                status: PatchStatus::Open,
                merge: None,
                imported: false,
                revision_count: 1,
                comment_count: 0,
                change_id: None,
                depends_on: None,
            },
            revisions: vec![revision(1, '1', 1_000)],
            reviews: Vec::new(),
            comments: Vec::new(),
            issues: Vec::new(),
            linked_lease_holders: Vec::new(),
            depends_on_status: None,
        };
        let (tip1, s1) = append_changes(&git, &key, None, None, &d).unwrap();
        let p = replay(&git, tip1);
        assert_eq!((p.title.as_str(), p.base.as_str()), ("Add lib", "main"));
        assert_eq!(p.author.name, "ALICE");
        assert_eq!(p.author.key, key.public_key_line());
        assert_eq!(p.revisions[0].base_commit, Some(oid('b')));

        // A second revision, votes of two principals, two comments.
        d.revisions.push(revision(2, '2', 3_000));
        d.reviews = vec![
            vote('a', 1, "bob", Verdict::RequestChanges, 2_000),
            vote('c', 2, "bob", Verdict::Approve, 4_000),
            vote('d', 2, "carol", Verdict::Approve, 5_000),
        ];
        d.comments = vec![
            Comment {
                id: oid('e'),
                position: 1,
                author: person("carol"),
                at_ms: 2_500,
                body: "general".into(),
                revision: None,
                inline: None,
            },
            Comment {
                id: oid('f'),
                position: 2,
                author: person("bob"),
                at_ms: 4_500,
                body: "nit".into(),
                revision: Some(2),
                inline: Some(Inline {
                    path: "src/lib.rs".into(),
                    line: Some(3),
                }),
            },
        ];
        let (tip2, s2) = append_changes(&git, &key, Some(tip1), Some(s1), &d).unwrap();
        assert!(git.graph_descendant_of(tip2, tip1).unwrap(), "appended");
        let p = replay(&git, tip2);
        assert_eq!(p.revisions.len(), 2);
        assert_eq!(p.revisions[1].head, oid('2'));
        assert_eq!(
            votes(&p),
            [
                (1, Some("bob".into()), "request_changes"),
                (2, Some("bob".into()), "approve"),
                (2, Some("carol".into()), "approve"),
            ]
        );
        let comments: Vec<_> = p
            .comments
            .iter()
            .map(|c| (c.body.as_str(), c.revision, c.path.as_deref(), c.line))
            .collect();
        assert_eq!(
            comments,
            [
                ("general", None, None, None),
                ("nit", Some(2), Some("src/lib.rs"), Some(3))
            ]
        );
        // Nothing new: nothing written.
        let (same, s2) = append_changes(&git, &key, Some(tip2), Some(s2), &d).unwrap();
        assert_eq!(same, tip2);

        // Bob's later vote on revision 2 replaces his earlier one; then the
        // patch is closed.
        d.reviews[1] = vote('g', 2, "bob", Verdict::RequestChanges, 6_000);
        d.patch.status = PatchStatus::Closed;
        let (tip3, s3) = append_changes(&git, &key, Some(tip2), Some(s2), &d).unwrap();
        assert!(git.graph_descendant_of(tip3, tip2).unwrap());
        let p = replay(&git, tip3);
        assert_eq!(p.status, record_patch::PatchStatus::Closed);
        assert_eq!(
            votes(&p),
            [
                (1, Some("bob".into()), "request_changes"),
                (2, Some("bob".into()), "request_changes"),
                (2, Some("carol".into()), "approve"),
            ]
        );

        // Reopened: the format has no reopen event, so a new chain.
        d.patch.status = PatchStatus::Open;
        let (tip4, s4) = append_changes(&git, &key, Some(tip3), Some(s3), &d).unwrap();
        assert!(!git.graph_descendant_of(tip4, tip3).unwrap(), "rebuilt");
        let p = replay(&git, tip4);
        assert_eq!(p.status, record_patch::PatchStatus::Open);
        assert_eq!((p.revisions.len(), p.comments.len()), (2, 2));
        assert_eq!(votes(&p).len(), 3);

        // Merged.
        d.patch.status = PatchStatus::Merged;
        d.patch.merge = Some(Merge {
            commit: oid('7'),
            by: "carol".into(),
            at_ms: 9_000,
        });
        let (tip5, _) = append_changes(&git, &key, Some(tip4), Some(s4), &d).unwrap();
        let p = replay(&git, tip5);
        assert_eq!(p.status, record_patch::PatchStatus::Merged);
        assert_eq!(p.merge.unwrap().commit, oid('7'));
    }
}
