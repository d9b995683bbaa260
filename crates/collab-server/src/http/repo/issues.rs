//! `/{repo}/-/issues` (open/closed/all, a label filter, 50 a page) and
//! `/{repo}/-/issues/{id}` (an id or a unique prefix of 4+ hex digits):
//! status, labels, body, comments, links and the live claim.
//!
//! Issues are read from `collab.db` through the read pool (`collab_store::issues`):
//! no replay, no snapshot cache; a repository whose issue DAGs were never
//! imported is imported first (`import`). Claims are the live leases of the
//! repository (`Writer::list`); a claim is shown on OPEN issues only
//! ("claimed by <holder>"). Holders and authors show their display name
//! (`people`) with the full principal in a `title`. Links into repositories that
//! anonymous readers cannot see are left out.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{TimeZone as _, Utc};

use serde::Deserialize;

use super::ctx::RepoCtx;
use crate::http::markdown;
use crate::http::state::AppState;
use crate::http::view::{self, PageError, Who};
use crate::people::DisplayNames;
use collab_store::issues::{
    self, Issue, IssueError, IssueKey, IssueStatus, ListQuery, Person, StateFilter,
};
use collab_store::leases::Lease;

/// Issues per list page.
pub const ISSUES_PAGE: usize = 50;

/// One row of the issues list.
pub struct IssueListItem {
    pub id: String,
    pub short: String,
    pub title: String,
    pub status: &'static str,
    pub labels: Vec<String>,
    pub author: Who,
    pub created: String,
    pub comments: usize,
    /// The holder of a live lease on this open issue; empty = unclaimed.
    pub claimed_by: Who,
    /// The holder's note on its lease; empty = none.
    pub claim_note: String,
}

/// One comment, its body rendered.
pub struct CommentView {
    pub author: Who,
    pub when: String,
    pub html: String,
}

/// Everything the issue page shows.
pub struct IssueDetailView {
    pub id: String,
    pub short: String,
    pub title: String,
    pub status: &'static str,
    pub closed_reason: String,
    pub labels: Vec<String>,
    pub author: Who,
    pub created: String,
    pub updated: String,
    pub body_html: String,
    pub comments: Vec<CommentView>,
    /// Issues this one blocks, is blocked by, relates to.
    pub blocks: Vec<LinkView>,
    pub blocked_by: Vec<LinkView>,
    pub relates: Vec<LinkView>,
    /// The holder of a live lease on this open issue; empty = unclaimed.
    pub claimed_by: Who,
    /// `until <time>`, or `no expiry` for an open-ended claim.
    pub claim_until: String,
    /// The holder's note on its lease; empty = none.
    pub claim_note: String,
    /// Patches linked to this issue, newest first.
    pub patches: Vec<PatchLinkView>,
}

/// A patch linked to the issue: `/{repo}/-/patches/{short}`.
pub struct PatchLinkView {
    pub short: String,
    pub title: String,
    /// `open`, `merged` or `closed`: also the CSS class.
    pub status: &'static str,
}

/// A link to another issue: `team/app#8bab8db7` and its page.
pub struct LinkView {
    pub text: String,
    pub url: String,
}

/// A link on the filter bar.
struct FilterLink {
    label: String,
    url: String,
    active: bool,
}

#[derive(Template)]
#[template(path = "issues.html")]
struct IssuesPage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    filters: Vec<FilterLink>,
    label: String,
    issues: Vec<IssueListItem>,
    /// Issues matching the filter, over all pages.
    matching: usize,
    page: usize,
    prev_url: String,
    next_url: String,
}

#[derive(Template)]
#[template(path = "issue_detail.html")]
struct IssueDetailPage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    issue: IssueDetailView,
}

#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    state: Option<String>,
    label: Option<String>,
    page: Option<usize>,
}

/// Which issues a list shows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Filter {
    Open,
    Closed,
    All,
}

impl Filter {
    fn parse(s: Option<&str>) -> Filter {
        match s {
            Some("closed") => Filter::Closed,
            Some("all") => Filter::All,
            _ => Filter::Open,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Filter::Open => "open",
            Filter::Closed => "closed",
            Filter::All => "all",
        }
    }

    fn state(self) -> StateFilter {
        match self {
            Filter::Open => StateFilter::Open,
            Filter::Closed => StateFilter::Closed,
            Filter::All => StateFilter::All,
        }
    }
}

/// Read `f` from collab.db for the visible repository `ctx` (imported first
/// if the server has not seen it yet).
fn read_issues<T: Send + 'static>(
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

/// Run `work` on the blocking pool, under a page render slot.
async fn blocking<T: Send + 'static>(
    st: &AppState,
    work: impl FnOnce() -> Result<T, PageError> + Send + 'static,
) -> Result<T, PageError> {
    let slot = crate::http::view::page_slot(&st.app).await?;
    tokio::task::spawn_blocking(move || {
        let outcome = work();
        drop(slot);
        outcome
    })
    .await
    .map_err(|e| PageError::Internal(anyhow::anyhow!("issues task: {e}")))?
}

/// Live leases of the repository by issue id. A lease store failure is
/// logged and shows no claims rather than no page.
async fn claims(st: &AppState, canonical: &str) -> HashMap<String, Lease> {
    match st.app.writer.list(canonical).await {
        Ok(leases) => leases
            .into_iter()
            .map(|l| (l.issue_id.clone(), l))
            .collect(),
        Err(e) => {
            tracing::warn!("issues page: reading leases of {canonical}: {e:#}");
            HashMap::new()
        }
    }
}

/// The holder to show for `issue`: only open issues show a claim.
fn claim_of<'a>(issue: &Issue, claims: &'a HashMap<String, Lease>) -> Option<&'a Lease> {
    if issue.status != IssueStatus::Open {
        return None;
    }
    claims.get(&issue.id)
}

/// An author as shown.
fn author_name(names: &DisplayNames, p: &Person) -> Who {
    Who::author(names, &p.principal, &p.name)
}

fn time(ms: i64) -> String {
    chrono::DateTime::<Utc>::from_timestamp_millis(ms)
        .map(view::fmt_time)
        .unwrap_or_default()
}

/// What the list page reads in one read transaction.
struct ListData {
    page: Vec<Issue>,
    matching: i64,
    open: i64,
    closed: i64,
    open_patches: usize,
}

pub async fn list(
    State(st): State<AppState>,
    Path(repo): Path<String>,
    Query(query): Query<ListParams>,
) -> Response {
    match list_page(&st, repo, query).await {
        Ok(r) => r,
        Err(e) => e.into_response(&st.app),
    }
}

async fn list_page(st: &AppState, repo: String, query: ListParams) -> Result<Response, PageError> {
    let filter = Filter::parse(query.state.as_deref());
    let label = query.label.unwrap_or_default();
    let labels: Vec<String> = if label.is_empty() {
        Vec::new()
    } else {
        vec![label.clone()]
    };
    let requested_page = query.page.unwrap_or(1).max(1);
    let st2 = st.clone();
    let (canonical, nav, data) = blocking(st, move || {
        let ctx = super::ctx::open(&st2.app, &repo)?;
        let name = ctx.entry.name.clone();
        let data = read_issues(&st2, &ctx, move |conn| {
            let state = filter.state();
            let matching = issues::count(conn, &name, state, &labels)?;
            let pages = (matching as usize).div_ceil(ISSUES_PAGE).max(1);
            let page = requested_page.min(pages);
            let list = issues::list(
                conn,
                &name,
                &ListQuery {
                    state,
                    labels: labels.clone(),
                    limit: ISSUES_PAGE,
                    after: None,
                    offset: (page - 1) * ISSUES_PAGE,
                },
            )?;
            Ok((
                page,
                ListData {
                    page: list.issues,
                    matching,
                    open: issues::count(conn, &name, StateFilter::Open, &[])?,
                    closed: issues::count(conn, &name, StateFilter::Closed, &[])?,
                    open_patches: super::ctx::open_counts(conn, &name)?.patches,
                },
            ))
        })?;
        let counts = super::ctx::OpenCounts {
            issues: data.1.open as usize,
            patches: data.1.open_patches,
        };
        let nav = super::ctx::nav_with_counts(&st2, &ctx, "issues", counts);
        Ok((ctx.entry.name.clone(), nav, data))
    })
    .await?;
    let (page, data) = data;
    let claims = claims(st, &canonical).await;
    let pages = (data.matching as usize).div_ceil(ISSUES_PAGE).max(1);
    let names = DisplayNames::of(&st.app);
    let issues = data
        .page
        .iter()
        .map(|i| IssueListItem {
            id: i.id.clone(),
            short: view::short_id(&i.id),
            title: i.title.clone(),
            status: status_word(i.status),
            labels: i.labels.clone(),
            author: author_name(&names, &i.author),
            created: time(i.created_ms),
            comments: i.comment_count as usize,
            claimed_by: claim_of(i, &claims)
                .map(|l| Who::principal(&names, &l.holder))
                .unwrap_or_default(),
            claim_note: claim_of(i, &claims)
                .and_then(|l| l.note.clone())
                .unwrap_or_default(),
        })
        .collect();

    let base = format!("/{}/-/issues", nav.repo_name);
    let url = |state: Filter, page: usize| {
        let mut url = format!("{base}?state={}", state.as_str());
        if !label.is_empty() {
            url.push_str(&format!("&label={}", view::url_query(&label)));
        }
        if page > 1 {
            url.push_str(&format!("&page={page}"));
        }
        url
    };
    let filters = [
        (Filter::Open, format!("{} open", data.open)),
        (Filter::Closed, format!("{} closed", data.closed)),
        (Filter::All, "all".to_string()),
    ]
    .into_iter()
    .map(|(f, text)| FilterLink {
        label: text,
        url: url(f, 1),
        active: f == filter,
    })
    .collect();
    let view = IssuesPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        filters,
        issues,
        matching: data.matching as usize,
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
        label,
    };
    Ok(view::render(StatusCode::OK, &view))
}

pub async fn detail(
    State(st): State<AppState>,
    Path((repo, id)): Path<(String, String)>,
) -> Response {
    match detail_page(&st, repo, id).await {
        Ok(r) => r,
        Err(e) => e.into_response(&st.app),
    }
}

async fn detail_page(st: &AppState, repo: String, id: String) -> Result<Response, PageError> {
    let st2 = st.clone();
    let (canonical, nav, detail) = blocking(st, move || {
        let ctx = super::ctx::open(&st2.app, &repo)?;
        let name = ctx.entry.name.clone();
        let (detail, patches, counts) = read_issues(&st2, &ctx, move |conn| {
            let detail = issues::show(conn, &name, &id);
            let patches = match &detail {
                Ok(d) => collab_store::patches::for_issue(conn, &name, &d.issue.id)?,
                Err(_) => Vec::new(),
            };
            Ok((detail, patches, super::ctx::open_counts(conn, &name)?))
        })?;
        let mut detail = match detail {
            Ok(d) => d,
            Err(IssueError::Ambiguous { candidates, prefix }) => {
                let shown: Vec<String> = candidates.iter().map(|c| view::short_id(c)).collect();
                return Err(PageError::Missing(format!(
                    "The id {prefix} matches more than one issue: {}. Use a longer prefix.",
                    shown.join(", ")
                )));
            }
            Err(IssueError::Sql(e)) => return Err(e.into()),
            Err(_) => return Err(PageError::Missing("No such issue.".into())),
        };
        // Links into repositories anonymous readers cannot see stay hidden.
        let here = ctx.entry.name.clone();
        detail.links.retain(|k| {
            k.repo == here || crate::http::state::visible_repo(&st2.app, &k.repo).is_some()
        });
        let nav = super::ctx::nav_with_counts(&st2, &ctx, "issues", counts);
        Ok((ctx.entry.name.clone(), nav, (detail, patches)))
    })
    .await?;
    let (detail, patches) = detail;
    let issue = &detail.issue;
    let claims = claims(st, &canonical).await;
    let claim = claim_of(issue, &claims);
    let names = DisplayNames::of(&st.app);
    let links = |keys: &[IssueKey]| -> Vec<LinkView> {
        keys.iter()
            .map(|k| LinkView {
                text: issues::link_text(k),
                url: format!(
                    "/{}/-/issues/{}",
                    k.repo.strip_suffix(".git").unwrap_or(&k.repo),
                    view::short_id(&k.id)
                ),
            })
            .collect()
    };
    let view = IssueDetailView {
        id: issue.id.clone(),
        short: view::short_id(&issue.id),
        title: issue.title.clone(),
        status: status_word(issue.status),
        closed_reason: issue.closed_reason.clone().unwrap_or_default(),
        labels: issue.labels.clone(),
        author: author_name(&names, &issue.author),
        created: time(issue.created_ms),
        updated: time(issue.updated_ms),
        body_html: markdown::render(&issue.body, None),
        comments: detail
            .comments
            .iter()
            .map(|c| CommentView {
                author: author_name(&names, &c.author),
                when: time(c.at_ms),
                html: markdown::render(&c.body, None),
            })
            .collect(),
        blocks: links(&detail.links.blocks),
        blocked_by: links(&detail.links.blocked_by),
        relates: links(&detail.links.relates),
        claimed_by: claim
            .map(|l| Who::principal(&names, &l.holder))
            .unwrap_or_default(),
        claim_note: claim.and_then(|l| l.note.clone()).unwrap_or_default(),
        patches: patches
            .iter()
            .map(|p| PatchLinkView {
                short: view::short_id(&p.id),
                title: p.title.clone(),
                status: p.status.as_str(),
            })
            .collect(),
        claim_until: match claim.map(|l| l.expires_at) {
            Some(Some(at)) => Utc
                .timestamp_opt(at, 0)
                .single()
                .map(|t| format!("until {}", view::fmt_time(t)))
                .unwrap_or_default(),
            Some(None) => "no expiry".to_string(),
            None => String::new(),
        },
    };
    let page = IssueDetailPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        issue: view,
    };
    Ok(view::render(StatusCode::OK, &page))
}

fn status_word(status: IssueStatus) -> &'static str {
    match status {
        IssueStatus::Open => "open",
        IssueStatus::Closed => "closed",
    }
}
