//! `/{repo}/-/patches` (open/merged/closed/all, 50 a page, following the
//! database's cursor) and `/{repo}/-/patches/{id}` (an id or a unique
//! prefix of 4+ hex digits): the patch's revisions with their votes, the
//! merge rule's state, its linked issues, its timeline, and a diff: the
//! revision `?rev=N` (default: the latest) against its base commit, with
//! inline comments under the lines they name, or the interdiff
//! `?from=A&to=B`. A plain GET form picks the interdiff, so the page works
//! without JavaScript. `/{repo}/-/patches/{id}.patch` and `.diff` (with
//! `?rev=N`) give a revision as text.
//!
//! Patches are the server's: read from `collab.db` through the read pool
//! (`collab_store::patches`), never replayed from DAGs and never cached. A
//! revision's base commit is where its head forks from the server's base
//! branch at push time, so the revision diff and the interdiff (revision
//! A's changes replayed onto B's base when they differ, by
//! `collab_record::diff`) never depend on a client's branches. Diffs
//! are rendered like the commit page's.

use std::net::SocketAddr;

use askama::Template;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::Utc;
use collab_record::diff;
use git2::Oid;
use serde::Deserialize;

use super::commit::{bounded_diff, collect_files, CheckView, FileDiff, LineNote};
use super::ctx::{OpenCounts, RepoCtx};
use crate::http::markdown;
use crate::http::state::AppState;
use crate::http::view::{self, PageError, PageResult, Who};
use crate::people::DisplayNames;
use collab_store::issues::Person;
use collab_store::patches::{
    self, ListQuery, MergeRule, PatchDetail, PatchError, PatchStatus, Revision, StateFilter,
    Verdict,
};

/// Patches per list page.
pub const PATCHES_PAGE: usize = 50;

/// One row of the patches list.
struct PatchListItem {
    short: String,
    title: String,
    status: &'static str,
    base: String,
    revisions: i64,
    comments: i64,
    author: Who,
    created: String,
    /// Votes that count on the latest revision.
    approvals: i64,
    changes_requested: i64,
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
    /// Patches matching the filter, over all pages.
    matching: i64,
    /// The first page, when this is a later one; else empty.
    first_url: String,
    next_url: String,
}

/// A vote shown beside a revision.
struct VoteView {
    author: Who,
    /// `approve`, `request_changes` or `comment`: also the CSS class.
    verdict: &'static str,
    label: &'static str,
}

struct RevisionView {
    n: i64,
    head: String,
    head_short: String,
    base_short: String,
    author: Who,
    when: String,
    votes: Vec<VoteView>,
    /// The revision whose diff is shown.
    shown: bool,
}

struct TimelineView {
    when: String,
    author: Who,
    /// What happened, without who and when (`approved revision 2`).
    what: String,
    /// The entry's kind, as a CSS class.
    kind: &'static str,
    /// A rendered review or comment body; empty for other entries.
    html: String,
    /// A commit to link (a revision head, a merge commit), else empty.
    commit: String,
    commit_short: String,
}

/// A linked issue of the same repository.
struct IssueLinkView {
    short: String,
    title: String,
    status: &'static str,
}

/// A comment on a file this diff does not show.
struct OffDiffNote {
    path: String,
    note: LineNote,
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
    author: Who,
    created: String,
    updated: String,
    body_html: String,
    merge_commit: String,
    merge_short: String,
    merged_by: Who,
    merged_when: String,
    /// Whether the merge rule lets the patch merge now.
    ready: bool,
    /// The merge rule's state in words (`the merge rule is met`, or what
    /// is missing: `needs 1 more approval on revision 2 (0 of 1)`); empty
    /// for a patch that is not open.
    merge_state: String,
    /// The rule itself (`1 approval on the latest revision, ...`).
    rule_text: String,
    /// The merge queue page of the patch's base when the rule queues and
    /// the patch is open, else empty.
    queue_url: String,
    /// The checks on the latest revision's head, by name.
    checks: Vec<CheckView>,
    issues: Vec<IssueLinkView>,
    revisions: Vec<RevisionView>,
    timeline: Vec<TimelineView>,
    /// What the diff section shows (`Revision 2 against main`).
    diff_title: String,
    /// Remarks on the diff (a replay onto a new base, conflicts, a head
    /// that is not here).
    diff_notes: Vec<String>,
    files: Vec<FileDiff>,
    /// Inline comments of the shown revision on files the diff leaves out.
    off_diff: Vec<OffDiffNote>,
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
    shown: i64,
    /// Revision numbers for the interdiff form.
    numbers: Vec<i64>,
    from: i64,
    to: i64,
}

#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    state: Option<String>,
    /// The cursor: `<created_ms>.<id>` of the last patch of the previous
    /// page.
    after: Option<String>,
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

fn parse_state(s: Option<&str>) -> (StateFilter, &'static str) {
    match s {
        Some("merged") => (StateFilter::Merged, "merged"),
        Some("closed") => (StateFilter::Closed, "closed"),
        Some("all") => (StateFilter::All, "all"),
        _ => (StateFilter::Open, "open"),
    }
}

/// `<created_ms>.<40 hex id>`, else `None` (the first page).
fn parse_cursor(s: Option<&str>) -> Option<(i64, String)> {
    let (ms, id) = s?.split_once('.')?;
    let ms = ms.parse::<i64>().ok()?;
    (id.len() == 40 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| (ms, id.to_string()))
}

/// Read `f` from collab.db for the visible repository `ctx` (its DAGs
/// imported first if the server has not seen it yet). Blocking.
fn read<T: Send + 'static>(
    st: &AppState,
    ctx: &RepoCtx,
    f: impl Fn(&collab_store::sql::Connection) -> anyhow::Result<T> + Send + 'static,
) -> Result<T, PageError> {
    let app = &st.app;
    app.imports.ensure(
        &app.reads,
        &app.writer,
        &app.export,
        &ctx.entry,
        &tokio::runtime::Handle::current(),
    )?;
    Ok(app.reads.read_blocking(f)?)
}

/// An author as shown (`people`), the principal in `title`.
fn person(names: &DisplayNames, p: &Person) -> Who {
    Who::author(names, &p.principal, &p.name)
}

fn time(ms: i64) -> String {
    chrono::DateTime::<Utc>::from_timestamp_millis(ms)
        .map(view::fmt_time)
        .unwrap_or_default()
}

pub async fn list(
    State(st): State<AppState>,
    Path(repo): Path<String>,
    Query(query): Query<ListParams>,
) -> Response {
    let app = st.app.clone();
    view::blocking(&app, move || list_page(&st, &repo, query)).await
}

/// What the list page reads in one read transaction.
struct ListData {
    page: patches::Page,
    /// `(approvals, changes requested)` of each patch of the page.
    votes: Vec<(i64, i64)>,
    matching: i64,
    open: i64,
    merged: i64,
    closed: i64,
    counts: OpenCounts,
}

fn list_page(st: &AppState, requested: &str, query: ListParams) -> PageResult {
    let ctx = super::ctx::open(&st.app, requested)?;
    let (state, state_word) = parse_state(query.state.as_deref());
    let after = parse_cursor(query.after.as_deref());
    let name = ctx.entry.name.clone();
    let data = read(st, &ctx, move |conn| {
        let page = patches::list(
            conn,
            &name,
            &ListQuery {
                state,
                limit: PATCHES_PAGE,
                after: after.clone(),
            },
        )?;
        let votes = page
            .patches
            .iter()
            .map(|p| patches::latest_votes(conn, &name, &p.id))
            .collect::<collab_store::sql::Result<_>>()?;
        Ok(ListData {
            page,
            votes,
            matching: patches::count(conn, &name, state)?,
            open: patches::count(conn, &name, StateFilter::Open)?,
            merged: patches::count(conn, &name, StateFilter::Merged)?,
            closed: patches::count(conn, &name, StateFilter::Closed)?,
            counts: super::ctx::open_counts(conn, &name)?,
        })
    })?;
    let nav = super::ctx::nav_with_counts(st, &ctx, "patches", data.counts);
    let names = DisplayNames::of(&st.app);
    let base = format!("/{}/-/patches", nav.repo_name);
    let next_url = match data.page.patches.last() {
        Some(last) if data.page.more => format!(
            "{base}?state={state_word}&after={}.{}",
            last.created_ms, last.id
        ),
        _ => String::new(),
    };
    let first_url = if query.after.is_some() {
        format!("{base}?state={state_word}")
    } else {
        String::new()
    };
    let patches = data
        .page
        .patches
        .iter()
        .zip(&data.votes)
        .map(|(p, (approvals, changes_requested))| PatchListItem {
            short: view::short_id(&p.id),
            title: p.title.clone(),
            status: p.status.as_str(),
            base: p.base.clone(),
            revisions: p.revision_count,
            comments: p.comment_count,
            author: person(&names, &p.author),
            created: time(p.created_ms),
            approvals: *approvals,
            changes_requested: *changes_requested,
        })
        .collect();
    let filters = [
        ("open", format!("{} open", data.open)),
        ("merged", format!("{} merged", data.merged)),
        ("closed", format!("{} closed", data.closed)),
        ("all", "all".to_string()),
    ]
    .into_iter()
    .map(|(word, label)| FilterLink {
        label,
        url: format!("{base}?state={word}"),
        active: word == state_word,
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
        matching: data.matching,
        first_url,
        next_url,
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

/// The patch `id` names with everything `show` reads, the titles of its
/// linked issues, and the navigation counts; or the 404 that says why not.
struct Found {
    detail: PatchDetail,
    /// The checks on the latest revision's head.
    checks: Vec<collab_store::checks::Check>,
    issues: Vec<IssueLinkView>,
    counts: OpenCounts,
}

fn find(st: &AppState, ctx: &RepoCtx, id: &str) -> Result<Found, PageError> {
    let name = ctx.entry.name.clone();
    let id = id.to_string();
    let (detail, issues, counts) = read(st, ctx, move |conn| {
        let detail = patches::show(conn, &name, &id);
        let checks = match &detail {
            Ok(d) => patches::head_checks(conn, d)?,
            Err(_) => Vec::new(),
        };
        let mut issues = Vec::new();
        if let Ok(d) = &detail {
            for issue in &d.issues {
                if let Some(i) = collab_store::issues::get(conn, &name, issue)? {
                    issues.push(IssueLinkView {
                        short: view::short_id(&i.id),
                        title: i.title,
                        status: match i.status {
                            collab_store::issues::IssueStatus::Open => "open",
                            collab_store::issues::IssueStatus::Closed => "closed",
                        },
                    });
                }
            }
        }
        Ok((
            (detail, checks),
            issues,
            super::ctx::open_counts(conn, &name)?,
        ))
    })?;
    let (detail, checks) = detail;
    let detail = match detail {
        Ok(d) => d,
        Err(PatchError::Ambiguous { prefix, candidates }) => {
            let shown: Vec<String> = candidates.iter().map(|c| view::short_id(c)).collect();
            return Err(PageError::Missing(format!(
                "The id {prefix} matches more than one patch: {}. Use a longer prefix.",
                shown.join(", ")
            )));
        }
        Err(PatchError::Sql(e)) => return Err(e.into()),
        Err(_) => return Err(PageError::Missing("No such patch.".into())),
    };
    Ok(Found {
        detail,
        checks,
        issues,
        counts,
    })
}

/// A revision number from the query: absent, or one of the patch's.
fn revision_number(detail: &PatchDetail, s: &Option<String>) -> Result<Option<i64>, PageError> {
    match s.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|n| detail.revisions.iter().any(|r| r.n == *n))
            .map(Some)
            .ok_or_else(|| PageError::Missing("No such revision.".into())),
    }
}

/// A revision's base commit and head as present commits of `git`, or why
/// not (a note for the page).
fn present(git: &git2::Repository, r: &Revision) -> Result<(Oid, Oid), String> {
    let commit = |what: &str, id: &str| {
        Oid::from_str(id)
            .ok()
            .filter(|oid| git.find_commit(*oid).is_ok())
            .ok_or_else(|| {
                format!(
                    "revision {}'s {what} {} is not in this repository",
                    r.n,
                    view::short_id(id)
                )
            })
    };
    Ok((
        commit("base commit", &r.base_commit)?,
        commit("head", &r.head)?,
    ))
}

/// `/{repo}/-/patches/{id}.patch?rev=N` (the revision's commits since its
/// base commit, as `git format-patch` writes a series) and `.diff` (the
/// revision against its base commit, as the page shows it), streamed out
/// of git under a git process slot. Without `rev`, the latest revision.
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
        let ctx = super::ctx::open(&st.app, &repo)?;
        let found = find(&st, &ctx, &id)?;
        let d = &found.detail;
        let n = revision_number(d, &query.rev)?;
        let r = match n {
            Some(n) => d.revisions.iter().find(|r| r.n == n),
            None => d.latest(),
        }
        .ok_or_else(|| PageError::Missing("No such revision.".into()))?;
        let (base, head) = present(&ctx.git, r)
            .map_err(|_| PageError::Missing("That revision's commits are not here.".into()))?;
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
    args.push("--end-of-options".into());
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
    let ctx = super::ctx::open(&st.app, requested)?;
    let Found {
        detail: d,
        checks,
        issues,
        counts,
    } = find(st, &ctx, id)?;
    let p = &d.patch;
    let names = DisplayNames::of(&st.app);
    let (rev, from, to) = (
        revision_number(&d, &query.rev)?,
        revision_number(&d, &query.from)?,
        revision_number(&d, &query.to)?,
    );
    let latest = d.latest().map_or(0, |r| r.n);
    let shown = rev.unwrap_or(latest);
    let revision = |n: i64| d.revisions.iter().find(|r| r.n == n);

    let mut diff_notes = Vec::new();
    let (diff_title, sides) = match (from, to) {
        (Some(from), Some(to)) => {
            let title = format!("Interdiff: revision {from} → revision {to}");
            let (ra, rb) = (revision(from), revision(to));
            match ra
                .zip(rb)
                .map(|(ra, rb)| (present(&ctx.git, ra), present(&ctx.git, rb)))
            {
                Some((Ok((fork_a, head_a)), Ok((fork_b, head_b)))) => {
                    let s = diff::commits_interdiff_sides(
                        &ctx.git,
                        (from as u32, fork_a, head_a),
                        (to as u32, fork_b, head_b),
                    )?;
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
                Some((Err(why), _)) | Some((_, Err(why))) => {
                    diff_notes.push(format!("No diff: {why}."));
                    (title, None)
                }
                None => (title, None),
            }
        }
        (None, None) => {
            let title = format!("Revision {shown} against {}", p.base);
            match revision(shown).map(|r| present(&ctx.git, r)) {
                Some(Ok((base, head))) => {
                    let old = ctx.git.find_commit(base)?.tree()?;
                    let new = ctx.git.find_commit(head)?.tree()?;
                    (title, Some((old, new)))
                }
                Some(Err(why)) => {
                    diff_notes.push(format!("No diff: {why}."));
                    (title, None)
                }
                None => (title, None),
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
    let off_diff = if from.is_none() {
        anchor_comments(&names, &d, shown, only, &mut files)
    } else {
        Vec::new()
    };
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

    let revisions = d
        .revisions
        .iter()
        .map(|r| RevisionView {
            n: r.n,
            head: r.head.clone(),
            head_short: view::short_id(&r.head),
            base_short: view::short_id(&r.base_commit),
            author: person(&names, &r.author),
            when: time(r.at_ms),
            votes: d
                .votes_on(r.n)
                .map(|v| VoteView {
                    author: person(&names, &v.author),
                    verdict: v.verdict.as_str(),
                    label: verdict_label(v.verdict),
                })
                .collect(),
            shown: from.is_none() && r.n == shown,
        })
        .collect();
    let rule = crate::authz::merge_rule(&st.app, &ctx.entry);
    // On a queued branch the required checks are the merge group's: the
    // patch is ready to join a group on its votes alone.
    let (ready, merge_state) = match p.status {
        PatchStatus::Open if rule.queue => match patches::rule_allows(&d, &rule) {
            Ok(()) => (true, "ready for the merge queue".to_string()),
            Err(why) => (false, why),
        },
        PatchStatus::Open => match patches::verdict(&d, &rule, &checks) {
            Ok(()) => (true, "the merge rule is met".to_string()),
            Err(why) => (false, why),
        },
        _ => (false, String::new()),
    };
    let queue_url = if rule.queue && p.status == PatchStatus::Open {
        format!("/{}/-/queue/{}", ctx.name(), view::url_path(&p.base))
    } else {
        String::new()
    };
    let merge = p.merge.as_ref();
    let nav = super::ctx::nav_with_counts(st, &ctx, "patches", counts);
    let page = PatchDetailPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        short: view::short_id(&p.id),
        id: p.id.clone(),
        title: p.title.clone(),
        status: p.status.as_str(),
        base: p.base.clone(),
        author: person(&names, &p.author),
        created: time(p.created_ms),
        updated: time(p.updated_ms),
        body_html: markdown::render(&p.body, None),
        merge_commit: merge.map(|m| m.commit.clone()).unwrap_or_default(),
        merge_short: merge.map(|m| view::short_id(&m.commit)).unwrap_or_default(),
        merged_by: merge
            .filter(|m| !m.by.is_empty())
            .map(|m| Who::principal(&names, &m.by))
            .unwrap_or_default(),
        merged_when: merge
            .filter(|m| m.at_ms > 0)
            .map(|m| time(m.at_ms))
            .unwrap_or_default(),
        ready,
        merge_state,
        rule_text: rule_text(&rule),
        queue_url,
        checks: checks.iter().map(CheckView::of).collect(),
        issues,
        revisions,
        timeline: timeline(&names, &d),
        diff_title,
        diff_notes,
        files,
        off_diff,
        additions,
        deletions,
        truncated,
        only: only.unwrap_or("").to_string(),
        file_link,
        all_files_link,
        shown,
        numbers: d.revisions.iter().map(|r| r.n).collect(),
        from: from.unwrap_or(latest.saturating_sub(1).max(1)),
        to: to.unwrap_or(latest),
    };
    Ok(view::render(StatusCode::OK, &page))
}

/// The merge rule in words.
fn rule_text(rule: &MergeRule) -> String {
    let mut parts = vec![match rule.approvals {
        0 => "no approval needed".to_string(),
        1 => "1 approval on the latest revision".to_string(),
        n => format!("{n} approvals on the latest revision"),
    }];
    if rule.no_changes_requested {
        parts.push("no changes requested".into());
    }
    if rule.approvals > 0 {
        parts.push(if rule.author_may_approve {
            "the author's approval counts".into()
        } else {
            "the author's own approval does not count".into()
        });
        parts.push("a reviser's approval does not count".into());
    }
    if !rule.required_checks.is_empty() {
        parts.push(format!(
            "checks {} must pass{}",
            rule.required_checks.join(", "),
            if rule.skipped_is_success {
                " (skipped counts)"
            } else {
                ""
            }
        ));
    }
    if rule.others_may_revise {
        parts.push("others may push revisions".into());
    }
    if rule.queue {
        parts.push(format!(
            "merged through the merge queue (at most {} patches per group, {}{})",
            rule.max_batch,
            if rule.queue_method == collab_store::patches::QueueMethod::Rebase {
                "rebased"
            } else {
                "merged"
            },
            if rule.required_checks.is_empty() {
                ""
            } else {
                ", the checks on the group's commit"
            }
        ));
    }
    parts.join(", ")
}

/// Put each inline comment on revision `shown` under the diff line it
/// names (by its number in the revision's file). A comment on a line the
/// diff does not show (or on a whole file) is listed under its file; one
/// on a file the diff leaves out is returned, to be listed after the diff.
fn anchor_comments(
    names: &DisplayNames,
    d: &PatchDetail,
    shown: i64,
    only: Option<&str>,
    files: &mut [FileDiff],
) -> Vec<OffDiffNote> {
    let mut off = Vec::new();
    for c in &d.comments {
        let Some(inline) = &c.inline else { continue };
        if c.revision != Some(shown) || only.is_some_and(|o| o != inline.path) {
            continue;
        }
        let note = |at: String| LineNote {
            author: person(names, &c.author),
            when: time(c.at_ms),
            at,
            html: markdown::render(&c.body, None),
        };
        let at = inline.line.map(|l| format!("line {l}")).unwrap_or_default();
        let Some(file) = files.iter_mut().find(|f| f.path == inline.path) else {
            off.push(OffDiffNote {
                path: inline.path.clone(),
                note: note(at),
            });
            continue;
        };
        let line = inline.line.map(|l| l.to_string());
        let target = line.and_then(|line| {
            file.lines
                .iter_mut()
                .find(|l| l.kind != "del" && l.kind != "hunk" && l.new_no == line)
        });
        match target {
            Some(l) => l.notes.push(note(String::new())),
            None => file.notes.push(note(at)),
        }
    }
    off
}

/// The patch's history as one list, oldest first: opened, revisions,
/// votes that count, comments, merged.
fn timeline(names: &DisplayNames, d: &PatchDetail) -> Vec<TimelineView> {
    let p = &d.patch;
    let mut entries: Vec<(i64, TimelineView)> = Vec::new();
    let mut push =
        |at: i64, who: Who, kind: &'static str, what: String, body: &str, commit: &str| {
            entries.push((
                at,
                TimelineView {
                    when: time(at),
                    author: who,
                    what,
                    kind,
                    html: if body.trim().is_empty() {
                        String::new()
                    } else {
                        markdown::render(body, None)
                    },
                    commit: commit.to_string(),
                    commit_short: view::short_id(commit),
                },
            ))
        };
    for r in &d.revisions {
        if r.n == 1 {
            push(
                p.created_ms.min(r.at_ms),
                person(names, &p.author),
                "opened",
                format!("opened the patch onto {} with revision 1", p.base),
                "",
                &r.head,
            );
        } else {
            push(
                r.at_ms,
                person(names, &r.author),
                "revised",
                format!("pushed revision {}", r.n),
                "",
                &r.head,
            );
        }
    }
    for v in &d.reviews {
        let what = match v.verdict {
            Verdict::Approve => "approved",
            Verdict::RequestChanges => "requested changes on",
            Verdict::Comment => "reviewed",
        };
        push(
            v.at_ms,
            person(names, &v.author),
            "reviewed",
            format!("{what} revision {}", v.revision),
            &v.body,
            "",
        );
    }
    for c in &d.comments {
        let mut what = "commented".to_string();
        if let Some(inline) = &c.inline {
            what.push_str(&format!(" on {}", inline.path));
            if let Some(line) = inline.line {
                what.push_str(&format!(" line {line}"));
            }
        }
        if let Some(r) = c.revision {
            what.push_str(&format!(" of revision {r}"));
        }
        push(
            c.at_ms,
            person(names, &c.author),
            "commented",
            what,
            &c.body,
            "",
        );
    }
    if let Some(m) = &p.merge {
        push(
            m.at_ms,
            Who::principal(names, &m.by),
            "merged",
            "merged the patch".into(),
            "",
            &m.commit,
        );
    }
    // Stable: equal times keep the order above.
    entries.sort_by_key(|(at, _)| *at);
    entries.into_iter().map(|(_, v)| v).collect()
}

fn verdict_label(v: Verdict) -> &'static str {
    match v {
        Verdict::Approve => "approved",
        Verdict::RequestChanges => "changes requested",
        Verdict::Comment => "commented",
    }
}
