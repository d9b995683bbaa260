//! History: `/{repo}/-/commit/{oid}` (message, author, parents and the diff
//! against the first parent, with renames found and large diffs cut) and
//! `/{repo}/-/log/{ref}?page=N` (50 commits a page), and the commit as
//! text: `/{repo}/-/commit/{oid}.patch` and `.diff`.
//!
//! A log page costs what `git log` costs for the same commits: the walk is
//! incremental (see [`super::ctx::commits`]), and a deep page is walked by `git
//! rev-list`, which reads the commit-graph chain maintenance keeps.
//!
//! Diffs never load a file over `http.max_file_shown`: libgit2 is told to
//! treat bigger blobs as binary (it checks the object header first), rename
//! detection compares only object ids when a big file was added or deleted,
//! and the page says "large file" with its size instead of a diff.

use askama::Template;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use git2::{Delta, DiffFindOptions, DiffOptions, ObjectType, Repository, Tree};
use serde::Deserialize;

use super::ctx::CommitRow;
use crate::highlight;
use crate::http::state::AppState;
use crate::http::view::{self, PageError, PageResult};

/// Commits per log page.
pub const LOG_PAGE: usize = 50;
/// From this many commits skipped on, a log page is walked by
/// `git rev-list` (which reads split commit-graphs) rather than libgit2.
const DEEP_LOG_SKIP: usize = 1_000;
/// Diff lines shown on a commit page, all files together.
const MAX_DIFF_LINES: usize = 10_000;

#[derive(Template)]
#[template(path = "commit.html")]
struct CommitPage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    id: String,
    short: String,
    summary: String,
    /// The message after the summary line.
    body: String,
    author: String,
    authored: String,
    committer: String,
    parents: Vec<(String, String)>,
    files: Vec<FileDiff>,
    additions: usize,
    deletions: usize,
    truncated: bool,
    /// The one file shown (`?path=`), else empty.
    only: String,
    /// A file's own diff is this followed by its `path_query`.
    file_link: String,
    /// The checks CI reported on this commit (`collab-check set`), by name.
    checks: Vec<CheckView>,
}

/// One file of a rendered diff (also used by the patches pages).
pub(super) struct FileDiff {
    pub(super) path: String,
    /// The old path of a rename or copy, else empty.
    pub(super) old_path: String,
    /// `added`, `deleted`, `modified`, `renamed`, ...
    pub(super) status: &'static str,
    pub(super) binary: bool,
    /// Git holds this file (either side) as a git-lfs pointer: the page
    /// tags it `LFS`.
    pub(super) lfs: bool,
    /// The size of a file too large to diff (`http.max_file_shown`), else empty.
    pub(super) large: String,
    /// Lines of this file were left out (the page's line budget ran out):
    /// the page links to this file's diff alone.
    pub(super) cut: bool,
    /// `path` escaped for a query string (`?path=`).
    pub(super) path_query: String,
    pub(super) lines: Vec<DiffLine>,
    /// Comments on this file that no shown line carries (inline review
    /// comments on a line outside the diff's hunks, or on the whole file).
    pub(super) notes: Vec<LineNote>,
}

pub(super) struct DiffLine {
    /// `add`, `del`, `ctx` or `hunk`: the CSS class.
    pub(super) kind: &'static str,
    /// The `+`/`-`/space column.
    pub(super) sign: char,
    /// Line numbers in the old and the new file; empty where the line has
    /// none (an added line has no old number).
    pub(super) old_no: String,
    pub(super) new_no: String,
    /// The line as HTML (highlighted, or escaped).
    pub(super) html: String,
    /// Comments anchored on this line (inline review comments).
    pub(super) notes: Vec<LineNote>,
}

/// A comment shown under a diff line.
pub(super) struct LineNote {
    pub(super) author: crate::http::view::Who,
    pub(super) when: String,
    /// Where the comment points when it is not under its line (`line 40`),
    /// else empty.
    pub(super) at: String,
    /// Rendered markdown.
    pub(super) html: String,
}

#[derive(Template)]
#[template(path = "log.html")]
struct LogPage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    rev: String,
    rev_url: String,
    switch: super::refs::Switcher,
    commits: Vec<CommitRow>,
    page: usize,
    has_more: bool,
}

#[derive(Debug, Deserialize)]
pub struct CommitQuery {
    /// Show only this file's diff, with the whole line budget.
    path: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct LogQuery {
    page: Option<usize>,
}

pub async fn commit(
    State(st): State<AppState>,
    Path((repo, oid)): Path<(String, String)>,
    Query(query): Query<CommitQuery>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Response {
    let app = st.app.clone();
    if let Some(id) = oid.strip_suffix(".patch") {
        return commit_text(st, repo, id.to_string(), peer, true).await;
    }
    if let Some(id) = oid.strip_suffix(".diff") {
        return commit_text(st, repo, id.to_string(), peer, false).await;
    }
    let only = query.path.filter(|p| !p.is_empty());
    view::blocking(&app, move || commit_page(&st, &repo, &oid, only.as_deref())).await
}

/// The commit named by `oid` (4 to 40 hex digits), or the 404 that says so.
fn find_commit<'r>(ctx: &'r super::ctx::RepoCtx, oid: &str) -> Result<git2::Commit<'r>, PageError> {
    let missing = || PageError::Missing("No such commit.".into());
    if !(4..=40).contains(&oid.len()) || !oid.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(missing());
    }
    ctx.git
        .find_object_by_prefix(oid, Some(ObjectType::Commit))
        .ok()
        .and_then(|o| o.into_commit().ok())
        .filter(|c| super::ctx::reachable(&ctx.git, c.id()))
        .ok_or_else(missing)
}

/// `/{repo}/-/commit/{oid}.patch` (the commit as `git format-patch` writes
/// it: mail headers, message, diffstat, diff) and `.diff` (the diff
/// alone), as plain text streamed out of git under a git process slot.
/// A merge is shown against its first parent, as on the commit page.
async fn commit_text(
    st: AppState,
    repo: String,
    oid: String,
    peer: SocketAddr,
    patch: bool,
) -> Response {
    let app = st.app.clone();
    let found = view::blocking_value(&app, move || {
        let ctx = super::ctx::open(&st.app, &repo)?;
        let commit = find_commit(&ctx, &oid)?;
        Ok((ctx.entry.path.clone(), commit.id()))
    })
    .await;
    let (repo_dir, id) = match found {
        Ok(found) => found,
        Err(response) => return response,
    };
    let slot = match crate::http::git_http::process_slot(&app, peer).await {
        Ok(slot) => slot,
        Err(busy) => return busy,
    };
    let args: Vec<String> = if patch {
        [
            "log",
            "-1",
            "--format=email",
            "--stat",
            "--patch",
            "-M",
            "--diff-merges=first-parent",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(["--end-of-options".to_string(), id.to_string()])
        .collect()
    } else {
        [
            "diff-tree",
            "-p",
            "-M",
            "--root",
            "--diff-merges=first-parent",
            "--no-commit-id",
            "--no-color",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(["--end-of-options".to_string(), id.to_string()])
        .collect()
    };
    let cmd = crate::http::git_stream::git(&repo_dir, &args);
    match crate::http::git_stream::respond(cmd, slot, "text/plain; charset=utf-8", None).await {
        Ok(response) => response,
        Err(e) => PageError::Internal(e.context("commit patch")).into_response(&app),
    }
}

pub async fn log_default(State(st): State<AppState>, Path(repo): Path<String>) -> Response {
    super::ctx::to_default_branch(st, repo, "log").await
}

pub async fn log(
    State(st): State<AppState>,
    Path((repo, rest)): Path<(String, String)>,
    Query(query): Query<LogQuery>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Response {
    let app = st.app.clone();
    let page = query.page.unwrap_or(1).max(1);
    let skip = (page - 1).saturating_mul(LOG_PAGE);
    // A deep page is walked by `git rev-list`, under a git process slot.
    let slot = if skip >= DEEP_LOG_SKIP {
        match crate::http::git_http::process_slot(&app, peer).await {
            Ok(slot) => Some(slot),
            Err(busy) => return busy,
        }
    } else {
        None
    };
    view::blocking(&app, move || {
        let outcome = log_page(&st, &repo, &rest, page, slot.is_some());
        drop(slot);
        outcome
    })
    .await
}

fn log_page(st: &AppState, requested: &str, rest: &str, page: usize, deep: bool) -> PageResult {
    let ctx = super::ctx::open(&st.app, requested)?;
    let at = super::ctx::resolve_rev_path(&ctx.git, rest)
        .filter(|at| at.path.is_empty())
        .ok_or_else(|| PageError::Missing("No such branch, tag or commit.".into()))?;
    let skip = (page - 1).saturating_mul(LOG_PAGE);
    let mut commits = if deep {
        let ids = super::ctx::commit_ids(&ctx.entry.path, at.commit, skip, LOG_PAGE + 1)?;
        super::ctx::commit_rows(&ctx.git, &ids)?
    } else {
        super::ctx::commits(&ctx.git, at.commit, skip, LOG_PAGE + 1)?
    };
    let has_more = commits.len() > LOG_PAGE;
    commits.truncate(LOG_PAGE);
    if commits.is_empty() && page > 1 {
        return Err(PageError::Missing(
            "There are no commits on this page.".into(),
        ));
    }
    let nav = super::ctx::nav(st, &ctx, "log")?;
    let view = LogPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        rev_url: view::url_path(&at.rev),
        switch: super::refs::switcher(&ctx.git, "log", ""),
        rev: view::shown_name(&at.rev),
        commits,
        page,
        has_more,
    };
    Ok(view::render(StatusCode::OK, &view))
}

fn commit_page(st: &AppState, requested: &str, oid: &str, only: Option<&str>) -> PageResult {
    let ctx = super::ctx::open(&st.app, requested)?;
    let commit = find_commit(&ctx, oid)?;
    let message = commit.message_bytes();
    let message = String::from_utf8_lossy(message);
    let (summary, body) = match message.split_once('\n') {
        Some((first, rest)) => (first.to_string(), rest.trim_matches('\n').to_string()),
        None => (message.trim().to_string(), String::new()),
    };
    let parents = commit
        .parent_ids()
        .map(|p| {
            let id = p.to_string();
            (view::short_id(&id), id)
        })
        .collect();

    let new_tree = commit.tree()?;
    let old_tree = match commit.parent(0) {
        Ok(parent) => Some(parent.tree()?),
        Err(_) => None,
    };
    let max_file = st.app.config.http.max_file_shown;
    let diff = bounded_diff(&ctx.git, old_tree.as_ref(), &new_tree, max_file)?;
    let stats = diff.stats()?;
    let (files, truncated) = collect_files(&ctx.git, &diff, max_file, only)?;
    if only.is_some() && files.is_empty() {
        return Err(PageError::Missing(
            "This commit does not change that file.".into(),
        ));
    }

    let author = commit.author();
    let committer = commit.committer();
    let nav = super::ctx::nav(st, &ctx, "log")?;
    let id = commit.id().to_string();
    let file_link = format!("/{}/-/commit/{id}?path=", ctx.name());
    let checks = {
        let (repo, commit) = (ctx.entry.name.clone(), id.clone());
        st.app
            .reads
            .read_blocking(move |conn| Ok(collab_store::checks::list(conn, &repo, &commit)?))?
    };
    let page = CommitPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        short: view::short_id(&id),
        id,
        summary,
        body,
        author: format!(
            "{} <{}>",
            String::from_utf8_lossy(author.name_bytes()),
            String::from_utf8_lossy(author.email_bytes())
        ),
        authored: view::fmt_git_time(author.when()),
        committer: String::from_utf8_lossy(committer.name_bytes()).into_owned(),
        parents,
        files,
        additions: stats.insertions(),
        deletions: stats.deletions(),
        truncated,
        only: only.unwrap_or("").to_string(),
        file_link,
        checks: checks.iter().map(CheckView::of).collect(),
    };
    Ok(view::render(StatusCode::OK, &page))
}

fn status_word(delta: Delta) -> &'static str {
    match delta {
        Delta::Added => "added",
        Delta::Deleted => "deleted",
        Delta::Renamed => "renamed",
        Delta::Copied => "copied",
        Delta::Typechange => "type changed",
        _ => "modified",
    }
}

/// The diff of two trees (3 lines of context, renames found) that loads
/// no blob over `max_file` bytes.
pub(super) fn bounded_diff<'r>(
    git: &'r Repository,
    old: Option<&Tree>,
    new: &Tree,
    max_file: u64,
) -> anyhow::Result<git2::Diff<'r>> {
    let mut options = DiffOptions::new();
    options
        .context_lines(3)
        .max_size(i64::try_from(max_file).unwrap_or(i64::MAX));
    let mut diff = git.diff_tree_to_tree(old, Some(new), Some(&mut options))?;
    // Rename detection reads whole added and deleted files to compare
    // them; with a big one among them, only identical ids count.
    let odb = git.odb()?;
    let big_candidate = diff.deltas().any(|d| {
        let file = match d.status() {
            Delta::Added => d.new_file(),
            Delta::Deleted => d.old_file(),
            _ => return false,
        };
        odb.read_header(file.id())
            .map_or(true, |(size, _)| size as u64 > max_file)
    });
    let mut find = DiffFindOptions::new();
    find.renames(true).exact_match_only(big_candidate);
    diff.find_similar(Some(&mut find))?;
    Ok(diff)
}

/// The size shown for a file too large to diff, or empty.
fn large_size(odb: &git2::Odb, delta: &git2::DiffDelta, max_file: u64) -> String {
    let size_of = |f: git2::DiffFile| {
        if f.id().is_zero() {
            return 0;
        }
        odb.read_header(f.id()).map_or(0, |(size, _)| size as u64)
    };
    let size = size_of(delta.old_file()).max(size_of(delta.new_file()));
    if size > max_file {
        view::fmt_size(size)
    } else {
        String::new()
    }
}

/// Every file of `diff` with its lines (numbered, highlighted), stopping
/// after `MAX_DIFF_LINES` lines in all; `true` when something was left
/// out. With `only`, just the files at or under that path (new or old),
/// which then have the whole line budget to themselves. Files over `max_file` bytes are
/// listed with their size, without lines.
pub(super) fn collect_files(
    git: &Repository,
    diff: &git2::Diff,
    max_file: u64,
    only: Option<&str>,
) -> anyhow::Result<(Vec<FileDiff>, bool)> {
    let odb = git.odb()?;
    let path_of = |f: git2::DiffFile| {
        f.path()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let deadline = highlight::Deadline::start();
    let mut files = Vec::new();
    let mut shown = 0usize;
    let mut truncated = false;
    for (index, delta) in diff.deltas().enumerate() {
        let new = path_of(delta.new_file());
        let old = path_of(delta.old_file());
        if only.is_some_and(|p| !within(&new, p) && !within(&old, p)) {
            continue;
        }
        let status = delta.status();
        let path = if status == Delta::Deleted {
            old.clone()
        } else {
            new
        };
        let mut file = FileDiff {
            path_query: view::url_query(&path),
            path,
            old_path: if matches!(status, Delta::Renamed | Delta::Copied) {
                old
            } else {
                String::new()
            },
            status: status_word(status),
            binary: delta.flags().is_binary(),
            lfs: is_lfs_pointer(git, delta.new_file().id())
                || is_lfs_pointer(git, delta.old_file().id()),
            large: String::new(),
            cut: false,
            lines: Vec::new(),
            notes: Vec::new(),
        };
        let patch = if file.binary || truncated {
            file.cut = truncated && !file.binary;
            None
        } else {
            git2::Patch::from_diff(diff, index)?
        };
        if let Some(patch) = patch {
            file.binary = patch.delta().flags().is_binary();
            // Each side is highlighted as its own stream: context and
            // deleted lines on the old side, context and added on the new.
            let mut old_side = highlight::Highlighter::for_path(&file.path, "", deadline);
            let mut new_side = highlight::Highlighter::for_path(&file.path, "", deadline);
            let side_bytes = patch.size(true, false, false);
            if side_bytes > highlight::MAX_BYTES {
                old_side = None;
                new_side = None;
            }
            'hunks: for h in 0..patch.num_hunks() {
                let (hunk, count) = patch.hunk(h)?;
                let header = String::from_utf8_lossy(hunk.header());
                file.lines.push(DiffLine {
                    kind: "hunk",
                    sign: ' ',
                    old_no: String::new(),
                    new_no: String::new(),
                    html: highlight::escape(header.trim_end()),
                    notes: Vec::new(),
                });
                for l in 0..count {
                    if shown >= MAX_DIFF_LINES {
                        truncated = true;
                        file.cut = true;
                        break 'hunks;
                    }
                    let line = patch.line_in_hunk(h, l)?;
                    let (kind, sign) = match line.origin() {
                        '+' => ("add", '+'),
                        '-' => ("del", '-'),
                        ' ' => ("ctx", ' '),
                        // "\ No newline at end of file" markers.
                        _ => continue,
                    };
                    shown += 1;
                    let text = String::from_utf8_lossy(line.content());
                    let text = text.trim_end_matches(['\n', '\r']);
                    let html = match kind {
                        "add" => side_line(&mut new_side, text),
                        "del" => side_line(&mut old_side, text),
                        _ => {
                            // Both sides see context; the new side's colours are shown.
                            side_line(&mut old_side, text);
                            side_line(&mut new_side, text)
                        }
                    };
                    let number = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_default();
                    file.lines.push(DiffLine {
                        kind,
                        sign,
                        old_no: number(line.old_lineno()),
                        new_no: number(line.new_lineno()),
                        html,
                        notes: Vec::new(),
                    });
                }
            }
        }
        if file.binary {
            file.large = large_size(&odb, &delta, max_file);
        }
        files.push(file);
    }
    Ok((files, truncated))
}

/// Whether the blob `id` is a git-lfs pointer file (read only when its
/// header says it is small enough to be one).
fn is_lfs_pointer(git: &Repository, id: git2::Oid) -> bool {
    if id.is_zero() {
        return false;
    }
    let small = git
        .odb()
        .and_then(|odb| odb.read_header(id))
        .is_ok_and(|(size, kind)| {
            kind == git2::ObjectType::Blob && size <= crate::lfs::pointer::MAX_POINTER
        });
    small
        && git
            .find_blob(id)
            .is_ok_and(|b| crate::lfs::pointer::parse(b.content()).is_some())
}

/// Whether `file` is `path` or lies under the directory `path`.
fn within(file: &str, path: &str) -> bool {
    file.strip_prefix(path)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// One line through a side's highlighter, or escaped.
fn side_line(side: &mut Option<highlight::Highlighter>, text: &str) -> String {
    match side {
        Some(h) => h.line(text),
        None => highlight::escape(text),
    }
}

/// A check on the page: its state, and a link only to http(s) URLs (the
/// verb accepts no others; checked again here for rows from elsewhere).
pub(super) struct CheckView {
    pub(super) name: String,
    pub(super) state: String,
    pub(super) url: String,
    pub(super) description: String,
}

impl CheckView {
    pub(super) fn of(c: &collab_store::checks::Check) -> CheckView {
        let url = c
            .url
            .clone()
            .filter(|u| crate::service::check::valid_url(u).is_ok())
            .unwrap_or_default();
        CheckView {
            name: c.name.clone(),
            state: c.state.clone(),
            url,
            description: c.description.clone().unwrap_or_default(),
        }
    }
}
