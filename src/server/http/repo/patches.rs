//! `/{repo}/-/patches` (open/merged/closed/all) and
//! `/{repo}/-/patches/{id}` (an id or a unique prefix of 4+ hex digits):
//! the patch's revisions with their votes, its timeline, and a diff: the
//! revision `?rev=N` (default: the latest) against its base, or the
//! interdiff `?from=A&to=B`. A plain GET form picks the interdiff, so the
//! page works without JavaScript. `/{repo}/-/patches/{id}.patch` and
//! `.diff` (with `?rev=N`) give a revision as text.
//!
//! Patches are replayed by `git_collab::record::patch` and kept in a per-repository
//! snapshot while no patch ref (and not the allowlist) changed, as issues
//! are. Diffs come from `git_collab::record::diff` (which trees to compare) and are
//! rendered like the commit page's.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};

use askama::Template;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use git2::Repository;
use git_collab::record::diff;
use git_collab::record::event::Verdict;
use git_collab::record::patch::{self, PatchState, PatchStatus};
use git_collab::record::refs;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::commit::{bounded_diff, collect_files, FileDiff, LineNote};
use super::RepoCtx;
use crate::http::markdown;
use crate::http::view::{self, PageError, PageResult};
use crate::http::AppState;

/// Patches per list page.
pub const PATCHES_PAGE: usize = 50;
/// Most repositories whose patches are kept in memory.
const MAX_REPOS: usize = 64;
/// Most patch memory (their JSON size) kept in all snapshots together; a
/// single repository with more is served but not kept.
pub const MAX_CACHED_BYTES: usize = 256 * 1024 * 1024;

/// Replayed patches per repository. A static rather than an `AppState`
/// field so the patches pages stay one file; it is keyed by repository path
/// and ref digest, so servers in one process (tests) cannot see each
/// other's stale data.
static SNAPSHOTS: LazyLock<Mutex<HashMap<PathBuf, Arc<PatchSnapshot>>>> =
    LazyLock::new(Default::default);

/// Every valid patch of one repository at one state of its refs.
pub struct PatchSnapshot {
    key: [u8; 32],
    /// When the replays stop being right even if no ref moves (an event
    /// dated in the future nears the clock).
    expires: Option<chrono::DateTime<chrono::Utc>>,
    /// About how much memory the patches hold (their JSON size).
    bytes: usize,
    /// Newest first.
    pub patches: Vec<PatchState>,
    pub open: usize,
    pub merged: usize,
    pub closed: usize,
}

/// The patches of `repo` as its refs are now (replayed only when a patch
/// ref or the allowlist changed). Blocking.
pub fn snapshot(repo: &Repository) -> anyhow::Result<Arc<PatchSnapshot>> {
    let key = refs_digest(repo)?;
    let path = repo.path().to_path_buf();
    let lock = || SNAPSHOTS.lock().unwrap_or_else(|e| e.into_inner());
    let holds = |s: &&Arc<PatchSnapshot>| {
        s.key == key && s.expires.is_none_or(|at| chrono::Utc::now() < at)
    };
    if let Some(hit) = lock().get(&path).filter(holds) {
        return Ok(hit.clone());
    }
    let (patches, expires) = patch::list_patches_until(repo)?;
    let count = |s: PatchStatus| patches.iter().filter(|p| p.status == s).count();
    let snapshot = Arc::new(PatchSnapshot {
        key,
        expires,
        bytes: serde_json::to_vec(&patches).map_or(0, |j| j.len()),
        open: count(PatchStatus::Open),
        merged: count(PatchStatus::Merged),
        closed: count(PatchStatus::Closed),
        patches,
    });
    let mut repos = lock();
    repos.remove(&path);
    let kept: usize = repos.values().map(|s| s.bytes).sum();
    if repos.len() >= MAX_REPOS || kept + snapshot.bytes > MAX_CACHED_BYTES {
        repos.clear();
    }
    if snapshot.bytes <= MAX_CACHED_BYTES {
        repos.insert(path, snapshot.clone());
    }
    Ok(snapshot)
}

/// Open patches, for the navigation badge (0 when they cannot be read).
pub fn open_count(repo: &Repository) -> usize {
    match snapshot(repo) {
        Ok(s) => s.open,
        Err(e) => {
            tracing::warn!("counting patches of {}: {e:#}", repo.path().display());
            0
        }
    }
}

/// Digest of every patch ref with its target, and of the allowlist.
fn refs_digest(repo: &Repository) -> anyhow::Result<[u8; 32]> {
    let mut tips = Vec::new();
    for reference in repo.references_glob(refs::PATCHES_GLOB)? {
        let reference = reference?;
        let Ok(name) = reference.name() else { continue };
        let target = reference
            .target()
            .map(|o| o.to_string())
            .unwrap_or_default();
        tips.push((name.to_string(), target));
    }
    tips.sort_unstable();
    let mut hasher = Sha256::new();
    for (name, target) in &tips {
        hasher.update(format!("{name} {target}\n").as_bytes());
    }
    match std::fs::read(git_collab::record::trust::trust_path(repo)) {
        Ok(bytes) => {
            hasher.update(b"trust\n");
            hasher.update(&bytes);
        }
        Err(_) => hasher.update(b"no trust\n"),
    }
    Ok(hasher.finalize().into())
}

/// One row of the patches list.
struct PatchListItem {
    short: String,
    title: String,
    status: &'static str,
    base: String,
    revisions: usize,
    author: String,
    created: String,
    approvals: usize,
    changes_requested: usize,
}

struct FilterLink {
    label: String,
    url: String,
    active: bool,
}

#[derive(Template)]
#[template(path = "patches.html")]
struct PatchesPage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    filters: Vec<FilterLink>,
    patches: Vec<PatchListItem>,
    matching: usize,
    page: usize,
    prev_url: String,
    next_url: String,
}

/// A vote shown beside a revision.
struct VoteView {
    author: String,
    /// `approve`, `request_changes` or `comment`: also the CSS class.
    verdict: &'static str,
    label: &'static str,
}

struct RevisionView {
    n: u32,
    head: String,
    head_short: String,
    author: String,
    when: String,
    votes: Vec<VoteView>,
    /// The revision whose diff is shown.
    shown: bool,
}

struct TimelineView {
    when: String,
    author: String,
    /// What happened, without who and when (`approved revision 2`).
    what: String,
    /// The event's kind, as a CSS class.
    kind: &'static str,
    /// A rendered review or comment body; empty for other entries.
    html: String,
    /// A commit to link (a revision head, a merge commit), else empty.
    commit: String,
    commit_short: String,
}

#[derive(Template)]
#[template(path = "patch_detail.html")]
struct PatchDetailPage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    id: String,
    short: String,
    title: String,
    status: &'static str,
    base: String,
    author: String,
    created: String,
    updated: String,
    body_html: String,
    merge_commit: String,
    merge_short: String,
    revisions: Vec<RevisionView>,
    timeline: Vec<TimelineView>,
    /// What the diff section shows (`Revision 2 against main`).
    diff_title: String,
    /// Remarks on the diff (a replay onto a new base, conflicts, a head
    /// that is not here).
    diff_notes: Vec<String>,
    files: Vec<FileDiff>,
    additions: usize,
    deletions: usize,
    truncated: bool,
    /// The one file shown (`?path=`), else empty.
    only: String,
    /// A file's own diff is this followed by its `path_query`.
    file_link: String,
    /// This diff with every file.
    all_files_link: String,
    /// The revision whose diff (or `.patch`) is offered.
    shown: u32,
    /// Revision numbers for the interdiff form.
    numbers: Vec<u32>,
    from: u32,
    to: u32,
}

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    state: Option<String>,
    page: Option<usize>,
}

/// Query strings are taken as text and checked here, so a bad number is
/// this page's 404 and not a bare 400.
#[derive(Debug, Default, Deserialize)]
pub struct DetailQuery {
    rev: Option<String>,
    from: Option<String>,
    to: Option<String>,
    /// Show only this file's diff, with the whole line budget.
    path: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Filter {
    Open,
    Merged,
    Closed,
    All,
}

impl Filter {
    fn parse(s: Option<&str>) -> Filter {
        match s {
            Some("merged") => Filter::Merged,
            Some("closed") => Filter::Closed,
            Some("all") => Filter::All,
            _ => Filter::Open,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Filter::Open => "open",
            Filter::Merged => "merged",
            Filter::Closed => "closed",
            Filter::All => "all",
        }
    }

    fn admits(self, status: PatchStatus) -> bool {
        match self {
            Filter::Open => status == PatchStatus::Open,
            Filter::Merged => status == PatchStatus::Merged,
            Filter::Closed => status == PatchStatus::Closed,
            Filter::All => true,
        }
    }
}

pub async fn list(
    State(st): State<AppState>,
    Path(repo): Path<String>,
    Query(query): Query<ListQuery>,
) -> Response {
    let app = st.app.clone();
    view::blocking(&app, move || list_page(&st, &repo, query)).await
}

fn list_page(st: &AppState, requested: &str, query: ListQuery) -> PageResult {
    let ctx = super::open(&st.app, requested)?;
    let snap = snapshot(&ctx.git)?;
    let nav = super::nav(st, &ctx, "patches")?;
    let filter = Filter::parse(query.state.as_deref());
    let matching: Vec<&PatchState> = snap
        .patches
        .iter()
        .filter(|p| filter.admits(p.status))
        .collect();
    let pages = matching.len().div_ceil(PATCHES_PAGE).max(1);
    let page = query.page.unwrap_or(1).clamp(1, pages);
    let patches = matching
        .iter()
        .skip((page - 1) * PATCHES_PAGE)
        .take(PATCHES_PAGE)
        .map(|p| {
            let latest = p.latest().n;
            let votes = |v: Verdict| p.reviews_of(latest).filter(|r| r.verdict == v).count();
            PatchListItem {
                short: view::short_id(&p.id),
                title: p.title.clone(),
                status: status_word(p.status),
                base: p.base.clone(),
                revisions: p.revisions.len(),
                author: super::event_author_name(st, &p.author),
                created: view::fmt_time(p.created_at),
                approvals: votes(Verdict::Approve),
                changes_requested: votes(Verdict::RequestChanges),
            }
        })
        .collect();
    let base = format!("/{}/-/patches", nav.repo_name);
    let url = |f: Filter, page: usize| {
        let mut url = format!("{base}?state={}", f.as_str());
        if page > 1 {
            url.push_str(&format!("&page={page}"));
        }
        url
    };
    let filters = [
        (Filter::Open, format!("{} open", snap.open)),
        (Filter::Merged, format!("{} merged", snap.merged)),
        (Filter::Closed, format!("{} closed", snap.closed)),
        (Filter::All, "all".to_string()),
    ]
    .into_iter()
    .map(|(f, label)| FilterLink {
        label,
        url: url(f, 1),
        active: f == filter,
    })
    .collect();
    let view = PatchesPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        filters,
        patches,
        matching: matching.len(),
        prev_url: if page > 1 {
            url(filter, page - 1)
        } else {
            String::new()
        },
        next_url: if page < pages {
            url(filter, page + 1)
        } else {
            String::new()
        },
        page,
    };
    Ok(view::render(StatusCode::OK, &view))
}

pub async fn detail(
    State(st): State<AppState>,
    Path((repo, id)): Path<(String, String)>,
    Query(query): Query<DetailQuery>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Response {
    let app = st.app.clone();
    if let Some(id) = id.strip_suffix(".patch") {
        return revision_text(st, repo, id.to_string(), query, peer, true).await;
    }
    if let Some(id) = id.strip_suffix(".diff") {
        return revision_text(st, repo, id.to_string(), query, peer, false).await;
    }
    view::blocking(&app, move || detail_page(&st, &repo, &id, query)).await
}

/// `/{repo}/-/patches/{id}.patch?rev=N` (the revision's commits since its
/// base, as `git format-patch` writes a series) and `.diff` (the revision
/// against its base, as the page shows it), streamed out of git under a
/// git process slot. Without `rev`, the latest revision.
async fn revision_text(
    st: AppState,
    repo: String,
    id: String,
    query: DetailQuery,
    peer: SocketAddr,
    patch: bool,
) -> Response {
    let app = st.app.clone();
    let found = view::blocking_value(&app, move || {
        let ctx = super::open(&st.app, &repo)?;
        let p = find(&ctx, &id)?;
        let n = match query
            .rev
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            None => None,
            Some(text) => Some(
                text.parse::<u32>()
                    .ok()
                    .ok_or_else(|| PageError::Missing("No such revision.".into()))?,
            ),
        };
        let missing = |_| PageError::Missing("That revision's commits are not here.".into());
        let r = p
            .revision(n)
            .map_err(|_| PageError::Missing("No such revision.".into()))?;
        let head = patch::present_commit(&ctx.git, &r.head, r.n).map_err(missing)?;
        let base = diff::fork_point(&ctx.git, &p, r).map_err(missing)?;
        Ok((ctx.entry.path.clone(), base, head))
    })
    .await;
    let (repo_dir, base, head) = match found {
        Ok(found) => found,
        Err(response) => return response,
    };
    let slot = match crate::http::git_http::process_slot(&app, peer).await {
        Ok(slot) => slot,
        Err(busy) => return busy,
    };
    let mut args: Vec<String> = if patch {
        [
            "format-patch",
            "--stdout",
            "-M",
            "--no-color",
            "--no-signature",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    } else {
        ["diff-tree", "-p", "-M", "--no-color"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    if patch {
        args.push(format!("{base}..{head}"));
    } else {
        args.extend([base.to_string(), head.to_string()]);
    }
    let cmd = crate::http::git_stream::git(&repo_dir, &args);
    match crate::http::git_stream::respond(cmd, slot, "text/plain; charset=utf-8", None).await {
        Ok(response) => response,
        Err(e) => PageError::Internal(e.context("patch revision text")).into_response(&app),
    }
}

fn detail_page(st: &AppState, requested: &str, id: &str, query: DetailQuery) -> PageResult {
    let ctx = super::open(&st.app, requested)?;
    let p = find(&ctx, id)?;
    let number = |s: &Option<String>| -> Result<Option<u32>, PageError> {
        match s.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(text) => text
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=p.revisions.len() as u32).contains(n))
                .map(Some)
                .ok_or_else(|| PageError::Missing("No such revision.".into())),
        }
    };
    let (rev, from, to) = (
        number(&query.rev)?,
        number(&query.from)?,
        number(&query.to)?,
    );
    let latest = p.latest().n;
    let shown = rev.unwrap_or(latest);

    let mut diff_notes = Vec::new();
    let (diff_title, sides) = match (from, to) {
        (Some(from), Some(to)) => {
            let title = format!("Interdiff: revision {from} → revision {to}");
            match diff::interdiff_sides(&ctx.git, &p, from, to) {
                Ok(s) => {
                    if s.rebased {
                        diff_notes.push(format!(
                            "The revisions start from different base commits: revision {from}'s changes were replayed onto revision {to}'s base, so what the rebase brought in is left out."
                        ));
                    }
                    if !s.conflicts.is_empty() {
                        diff_notes.push(format!(
                            "That replay conflicted in {}; those files are compared as revision {from} has them.",
                            s.conflicts.join(", ")
                        ));
                    }
                    (title, Some((s.old, s.new)))
                }
                Err(e) => (title, unavailable(&mut diff_notes, e)?),
            }
        }
        (None, None) => {
            let title = format!("Revision {shown} against {}", p.base);
            match diff::revision_sides(&ctx.git, &p, Some(shown)) {
                Ok(s) => (title, Some((s.old, s.new))),
                Err(e) => (title, unavailable(&mut diff_notes, e)?),
            }
        }
        _ => {
            return Err(PageError::Missing(
                "An interdiff needs both from= and to=.".into(),
            ))
        }
    };
    let only = query.path.as_deref().filter(|p| !p.is_empty());
    let (mut files, truncated, additions, deletions) = match sides {
        Some((old, new)) => {
            let max_file = st.app.config.http.max_file_shown;
            let d = bounded_diff(&ctx.git, Some(&old), &new, max_file)?;
            let stats = d.stats()?;
            let (files, truncated) = collect_files(&ctx.git, &d, max_file, only)?;
            (files, truncated, stats.insertions(), stats.deletions())
        }
        None => (Vec::new(), false, 0, 0),
    };
    if from.is_none() {
        anchor_comments(&p, shown, &mut files);
    }
    // The same view of the patch, with `path=` appended by the template.
    let view_query = match (from, to) {
        (Some(from), Some(to)) => format!("from={from}&to={to}"),
        _ => format!("rev={shown}"),
    };
    let all_files_link = format!(
        "/{}/-/patches/{}?{view_query}",
        ctx.name(),
        view::short_id(&p.id)
    );
    let file_link = format!("{all_files_link}&path=");

    let revisions = p
        .revisions
        .iter()
        .map(|r| RevisionView {
            n: r.n,
            head: r.head.clone(),
            head_short: view::short_id(&r.head),
            author: super::event_author_name(st, &r.author),
            when: view::fmt_time(r.at),
            votes: p
                .reviews_of(r.n)
                .map(|v| VoteView {
                    author: super::event_author_name(st, &v.author),
                    verdict: v.verdict.as_str(),
                    label: verdict_label(v.verdict),
                })
                .collect(),
            shown: from.is_none() && r.n == shown,
        })
        .collect();
    let timeline = p.timeline.iter().map(|e| timeline_view(st, e)).collect();
    let nav = super::nav(st, &ctx, "patches")?;
    let page = PatchDetailPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        short: view::short_id(&p.id),
        id: p.id.clone(),
        title: p.title.clone(),
        status: status_word(p.status),
        base: p.base.clone(),
        author: super::event_author_name(st, &p.author),
        created: view::fmt_time(p.created_at),
        updated: view::fmt_time(p.updated_at),
        body_html: markdown::render(&p.body, None),
        merge_commit: p
            .merge
            .as_ref()
            .map(|m| m.commit.clone())
            .unwrap_or_default(),
        merge_short: p
            .merge
            .as_ref()
            .map(|m| view::short_id(&m.commit))
            .unwrap_or_default(),
        revisions,
        timeline,
        diff_title,
        diff_notes,
        files,
        additions,
        deletions,
        truncated,
        only: only.unwrap_or("").to_string(),
        file_link,
        all_files_link,
        shown,
        numbers: p.revisions.iter().map(|r| r.n).collect(),
        from: from.unwrap_or(latest.saturating_sub(1).max(1)),
        to: to.unwrap_or(latest),
    };
    Ok(view::render(StatusCode::OK, &page))
}

/// Put each inline comment on revision `shown` under the diff line it
/// names (by its number in the revision's file); comments on lines the
/// diff does not show stay in the timeline only.
fn anchor_comments(p: &PatchState, shown: u32, files: &mut [FileDiff]) {
    for c in &p.comments {
        let (Some(path), Some(line)) = (&c.path, c.line) else {
            continue;
        };
        if c.revision != Some(shown) {
            continue;
        }
        let line = line.to_string();
        let target = files
            .iter_mut()
            .filter(|f| &f.path == path)
            .flat_map(|f| f.lines.iter_mut())
            .find(|l| l.kind != "del" && l.new_no == line);
        if let Some(l) = target {
            l.notes.push(LineNote {
                author: c.author.name.clone(),
                when: view::fmt_time(c.at),
                html: markdown::render(&c.body, None),
            });
        }
    }
}

/// The patch `id` names, or the 404 that says why not.
fn find(ctx: &RepoCtx, id: &str) -> Result<PatchState, PageError> {
    let no_such = || PageError::Missing("No such patch.".into());
    let ids = patch::matching_patch_ids(&ctx.git, id)?.ok_or_else(no_such)?;
    let full = match ids.as_slice() {
        [] => return Err(no_such()),
        [one] => one.clone(),
        many => {
            let shown: Vec<String> = many.iter().map(|c| view::short_id(c)).collect();
            return Err(PageError::Missing(format!(
                "The id {id} matches more than one patch: {}. Use a longer prefix.",
                shown.join(", ")
            )));
        }
    };
    snapshot(&ctx.git)?
        .patches
        .iter()
        .find(|p| p.id == full)
        .cloned()
        .ok_or_else(|| {
            PageError::Missing("This patch cannot be shown: its history is invalid.".into())
        })
}

/// A diff that cannot be computed here (a head commit that was never
/// pushed, a base branch that is gone) is a note on the page; anything
/// else is a server error.
fn unavailable<T>(notes: &mut Vec<String>, e: git_collab::Error) -> Result<Option<T>, PageError> {
    match e {
        git_collab::Error::Invalid(why) => {
            notes.push(format!("No diff: {why}."));
            Ok(None)
        }
        other => Err(other.into()),
    }
}

fn timeline_view(st: &AppState, e: &git_collab::record::timeline::TimelineEntry) -> TimelineView {
    use git_collab::record::timeline::TimelineItem as I;
    let (kind, what, commit) = match &e.item {
        I::Opened {
            revision,
            base,
            head,
        } => (
            "opened",
            format!("opened the patch onto {base} with revision {revision}"),
            head.clone(),
        ),
        I::Revised { revision, head } => (
            "revised",
            format!("pushed revision {revision}"),
            head.clone(),
        ),
        I::Reviewed {
            revision,
            verdict,
            replaces,
            ..
        } => (
            "reviewed",
            format!(
                "{} revision {revision}{}",
                match verdict {
                    Verdict::Approve => "approved",
                    Verdict::RequestChanges => "requested changes on",
                    Verdict::Comment => "reviewed",
                },
                if replaces.is_some() {
                    " (replacing an earlier vote)"
                } else {
                    ""
                }
            ),
            String::new(),
        ),
        I::Commented {
            revision,
            path,
            line,
            ..
        } => {
            let mut what = "commented".to_string();
            if let Some(path) = path {
                what.push_str(&format!(" on {path}"));
                if let Some(line) = line {
                    what.push_str(&format!(" line {line}"));
                }
            }
            if let Some(r) = revision {
                what.push_str(&format!(" of revision {r}"));
            }
            ("commented", what, String::new())
        }
        I::Closed => ("closed", "closed the patch".to_string(), String::new()),
        I::Merged { commit } => ("merged", "merged the patch".to_string(), commit.clone()),
    };
    TimelineView {
        when: view::fmt_time(e.at),
        author: super::event_author_name(st, &e.author),
        what,
        kind,
        html: if e.body().trim().is_empty() {
            String::new()
        } else {
            markdown::render(e.body(), None)
        },
        commit_short: view::short_id(&commit),
        commit,
    }
}

fn status_word(status: PatchStatus) -> &'static str {
    match status {
        PatchStatus::Open => "open",
        PatchStatus::Merged => "merged",
        PatchStatus::Closed => "closed",
    }
}

fn verdict_label(v: Verdict) -> &'static str {
    match v {
        Verdict::Approve => "approved",
        Verdict::RequestChanges => "changes requested",
        Verdict::Comment => "commented",
    }
}
