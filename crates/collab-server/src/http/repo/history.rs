//! One file's past: `/{repo}/-/history/{ref}/{path}?page=N` (the commits
//! that changed a file or directory, 50 a page, like `git log -- path`
//! without `--follow`) and `/{repo}/-/blame/{ref}/{path}` (who last changed
//! each line, `git blame`).
//!
//! Bounded. History walks commits newest first by commit time, one at a
//! time ([`DateWalk`]: no topological sort, nothing read ahead), and stops
//! as soon as the page is full; a walk that finds nothing for [`HISTORY_SCAN_MAX`] commits
//! stops there and says so. Blame runs only on text files up to
//! [`BLAME_MAX_BYTES`]; bigger files get a note and the link to their
//! history.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use git2::{Oid, Repository, Tree};
use serde::Deserialize;

use super::ctx::{CommitRow, RepoCtx, RevPath};
use crate::highlight;
use crate::http::state::AppState;
use crate::http::view::{self, PageError, PageResult};

/// Commits per history page.
pub const HISTORY_PAGE: usize = 50;
/// Commits one history request examines at most.
pub const HISTORY_SCAN_MAX: usize = 100_000;
/// The largest file blame runs on.
pub const BLAME_MAX_BYTES: u64 = 256 * 1024;

#[derive(Template)]
#[template(path = "history.html")]
struct HistoryPage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    rev: String,
    rev_url: String,
    path: String,
    path_url: String,
    /// `path` escaped for a query string (commit links show its diff alone).
    path_query: String,
    /// `blob` or `tree` (where the path's own link goes); empty when the
    /// path is gone at this ref.
    kind: &'static str,
    commits: Vec<CommitRow>,
    page: usize,
    has_more: bool,
    /// The walk stopped at [`HISTORY_SCAN_MAX`] commits before the page
    /// was full.
    stopped: bool,
    scan_max: usize,
}

#[derive(Template)]
#[template(path = "blame.html")]
struct BlamePage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    rev: String,
    rev_url: String,
    path: String,
    path_url: String,
    note: String,
    lines: Vec<BlameLine>,
}

struct BlameLine {
    /// Set on the first line of each run of lines from one commit.
    commit: Option<BlameCommit>,
    /// The line as HTML (highlighted, or escaped).
    html: String,
}

#[derive(Clone)]
struct BlameCommit {
    id: String,
    short: String,
    summary: String,
    author: String,
    when: String,
}

#[derive(Debug, Deserialize)]
pub struct HistoryQuery {
    page: Option<usize>,
}

pub async fn history(
    State(st): State<AppState>,
    Path((repo, rest)): Path<(String, String)>,
    Query(query): Query<HistoryQuery>,
) -> Response {
    let app = st.app.clone();
    let page = query.page.unwrap_or(1).max(1);
    view::blocking(&app, move || history_page(&st, &repo, &rest, page)).await
}

pub async fn blame(
    State(st): State<AppState>,
    Path((repo, rest)): Path<(String, String)>,
) -> Response {
    let app = st.app.clone();
    view::blocking(&app, move || blame_page(&st, &repo, &rest)).await
}

fn resolve(ctx: &RepoCtx, rest: &str) -> Result<RevPath, PageError> {
    let at = super::ctx::resolve_rev_path(&ctx.git, rest)
        .ok_or_else(|| PageError::Missing("No such branch, tag or commit.".into()))?;
    if at.path.is_empty() || !super::tree::is_tree_path(&at.path) {
        return Err(PageError::Missing("No such path.".into()));
    }
    Ok(at)
}

/// The id of what is at `path` in `tree`, if anything.
fn entry_id(tree: &Tree, path: &std::path::Path) -> Option<Oid> {
    tree.get_path(path).ok().map(|e| e.id())
}

/// What the history walk found: the commits of the page, whether there
/// are more, whether it stopped at the scan bound.
struct Found {
    commits: Vec<Oid>,
    has_more: bool,
    stopped: bool,
}

/// The commits reachable from `from` that changed `path` (its entry
/// differs from every parent's, or it appears in a root commit), newest
/// first by commit time; skips `skip` of them, returns up to `limit`.
fn changes(
    git: &Repository,
    from: Oid,
    path: &str,
    skip: usize,
    limit: usize,
    scan_max: usize,
) -> anyhow::Result<Found> {
    let path = std::path::Path::new(path);
    let mut walk = DateWalk::new(git, from)?;
    // Entry ids by commit, so a commit is looked up once as a child and
    // once more at most as a parent; cleared when it grows.
    let mut ids: HashMap<Oid, Option<Oid>> = HashMap::new();
    let mut id_at = |oid: Oid| -> anyhow::Result<Option<Oid>> {
        if let Some(id) = ids.get(&oid) {
            return Ok(*id);
        }
        if ids.len() > 4096 {
            ids.clear();
        }
        let id = entry_id(&git.find_commit(oid)?.tree()?, path);
        ids.insert(oid, id);
        Ok(id)
    };
    let mut matched = 0usize;
    let mut commits = Vec::with_capacity(limit);
    let mut scanned = 0usize;
    while let Some(oid) = walk.next_commit()? {
        scanned += 1;
        if scanned > scan_max {
            return Ok(Found {
                commits,
                has_more: false,
                stopped: true,
            });
        }
        let mine = id_at(oid)?;
        let commit = git.find_commit(oid)?;
        let changed = if commit.parent_count() == 0 {
            mine.is_some()
        } else {
            let mut all_differ = true;
            for parent in commit.parent_ids() {
                if id_at(parent)? == mine {
                    all_differ = false;
                    break;
                }
            }
            all_differ
        };
        if !changed {
            continue;
        }
        matched += 1;
        if matched <= skip {
            continue;
        }
        if commits.len() == limit {
            return Ok(Found {
                commits,
                has_more: true,
                stopped: false,
            });
        }
        commits.push(oid);
    }
    Ok(Found {
        commits,
        has_more: false,
        stopped: false,
    })
}

/// Commits reachable from a tip, newest commit time first, read one at a
/// time: a commit's parents are queued only when it is taken, so a walk
/// stopped early has read only what it returned and their parents
/// (libgit2's time-sorted revwalk can read the whole history up front).
/// Ties go to the commit queued first, so a chain of commits made in the
/// same second still comes out child before parent.
struct DateWalk<'r> {
    git: &'r Repository,
    queue: BinaryHeap<(i64, Reverse<u64>, Oid)>,
    seen: HashSet<Oid>,
    queued: u64,
}

impl<'r> DateWalk<'r> {
    fn new(git: &'r Repository, tip: Oid) -> anyhow::Result<DateWalk<'r>> {
        let mut walk = DateWalk {
            git,
            queue: BinaryHeap::new(),
            seen: HashSet::new(),
            queued: 0,
        };
        walk.enqueue(tip)?;
        Ok(walk)
    }

    fn enqueue(&mut self, oid: Oid) -> anyhow::Result<()> {
        if self.seen.insert(oid) {
            let time = self.git.find_commit(oid)?.time().seconds();
            self.queue.push((time, Reverse(self.queued), oid));
            self.queued += 1;
        }
        Ok(())
    }

    fn next_commit(&mut self) -> anyhow::Result<Option<Oid>> {
        let Some((_, _, oid)) = self.queue.pop() else {
            return Ok(None);
        };
        let parents: Vec<Oid> = self.git.find_commit(oid)?.parent_ids().collect();
        for parent in parents {
            self.enqueue(parent)?;
        }
        Ok(Some(oid))
    }
}

fn history_page(st: &AppState, requested: &str, rest: &str, page: usize) -> PageResult {
    let ctx = super::ctx::open(&st.app, requested)?;
    let at = resolve(&ctx, rest)?;
    let tip_tree = ctx.git.find_commit(at.commit)?.tree()?;
    let kind = match tip_tree.get_path(std::path::Path::new(&at.path)) {
        Ok(e) if e.kind() == Some(git2::ObjectType::Tree) => "tree",
        Ok(_) => "blob",
        // A path that is gone at this ref still has a history.
        Err(_) => "",
    };
    let skip = (page - 1).saturating_mul(HISTORY_PAGE);
    let found = changes(
        &ctx.git,
        at.commit,
        &at.path,
        skip,
        HISTORY_PAGE,
        HISTORY_SCAN_MAX,
    )?;
    if found.commits.is_empty() && kind.is_empty() && !found.stopped {
        return Err(PageError::Missing("No such path.".into()));
    }
    let commits = found
        .commits
        .iter()
        .map(|oid| Ok(CommitRow::of(&ctx.git.find_commit(*oid)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let nav = super::ctx::nav(st, &ctx, "tree")?;
    let view = HistoryPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        rev_url: view::url_path(&at.rev),
        rev: view::shown_name(&at.rev),
        path_url: view::url_path(&at.path),
        path_query: view::url_query(&at.path),
        path: at.path,
        kind,
        commits,
        page,
        has_more: found.has_more,
        stopped: found.stopped,
        scan_max: HISTORY_SCAN_MAX,
    };
    Ok(view::render(StatusCode::OK, &view))
}

fn blame_page(st: &AppState, requested: &str, rest: &str) -> PageResult {
    let ctx = super::ctx::open(&st.app, requested)?;
    let at = resolve(&ctx, rest)?;
    let tree = ctx.git.find_commit(at.commit)?.tree()?;
    let missing = || PageError::Missing("No such file.".into());
    let entry = tree
        .get_path(std::path::Path::new(&at.path))
        .map_err(|_| missing())?;
    if entry.kind() != Some(git2::ObjectType::Blob) {
        return Err(missing());
    }
    let size = crate::http::blobs::size(&ctx.git, entry.id())?;
    let mut note = String::new();
    let mut lines = Vec::new();
    if size > BLAME_MAX_BYTES {
        note = format!(
            "This file is too large to blame here ({}; the limit is {}).",
            view::fmt_size(size),
            view::fmt_size(BLAME_MAX_BYTES)
        );
    } else {
        let blob = ctx.git.find_blob(entry.id())?;
        if crate::http::blobs::looks_binary(blob.content()) {
            note = "Binary file: there are no lines to blame.".into();
        } else {
            let text = String::from_utf8_lossy(blob.content()).into_owned();
            let source: Vec<String> = text.lines().map(str::to_string).collect();
            let html = highlight::file_lines(&at.path, &source, highlight::Deadline::start());
            let mut options = git2::BlameOptions::new();
            options.newest_commit(at.commit);
            let blame = ctx
                .git
                .blame_file(std::path::Path::new(&at.path), Some(&mut options))?;
            // The commit of each line (1-based line numbers).
            let mut owner: Vec<Option<Oid>> = vec![None; html.len()];
            for hunk in blame.iter() {
                let start = hunk.final_start_line().saturating_sub(1);
                for n in start..(start + hunk.lines_in_hunk()).min(owner.len()) {
                    owner[n] = Some(hunk.final_commit_id());
                }
            }
            let mut seen: HashMap<Oid, BlameCommit> = HashMap::new();
            let mut previous = None;
            for (html, oid) in html.into_iter().zip(owner) {
                let commit = match oid {
                    Some(oid) if previous != Some(oid) => Some(match seen.get(&oid) {
                        Some(c) => c.clone(),
                        None => {
                            let c = blame_commit(&ctx.git, oid)?;
                            seen.insert(oid, c.clone());
                            c
                        }
                    }),
                    _ => None,
                };
                previous = oid;
                lines.push(BlameLine { commit, html });
            }
        }
    }
    let nav = super::ctx::nav(st, &ctx, "tree")?;
    let view = BlamePage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        rev_url: view::url_path(&at.rev),
        rev: view::shown_name(&at.rev),
        path_url: view::url_path(&at.path),
        path: at.path,
        note,
        lines,
    };
    Ok(view::render(StatusCode::OK, &view))
}

fn blame_commit(git: &Repository, oid: Oid) -> anyhow::Result<BlameCommit> {
    let row = CommitRow::of(&git.find_commit(oid)?);
    Ok(BlameCommit {
        id: row.id,
        short: row.short,
        summary: row.summary,
        author: row.author,
        when: row.when,
    })
}
