//! `/{repo}/-/issues` (open/closed/all, a label filter, 50 a page) and
//! `/{repo}/-/issues/{id}` (an id or a unique prefix of 4+ hex digits):
//! status, labels, body and comments, and the live claim.
//!
//! Issues come from the in-memory [`IssueCache`](crate::http::issue_cache),
//! so an unchanged repository is not replayed again. Claims are the live
//! leases of the repository (`LeaseService::list`, keyed by the repository's
//! canonical name, as the `collab-lease` verb stores them); a claim is shown
//! on OPEN issues only ("claimed by <holder>"): a closed issue's leftover
//! lease is noise.

use std::collections::HashMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{TimeZone as _, Utc};
use git_collab::record::state::{IssueState, IssueStatus};
use serde::Deserialize;

use super::{RepoCtx, RepoNav};
use crate::db::leases::Lease;
use crate::http::issue_cache::IssueSnapshot;
use crate::http::markdown;
use crate::http::view::{self, PageError};
use crate::http::AppState;

/// Issues per list page.
pub const ISSUES_PAGE: usize = 50;

/// One row of the issues list.
pub struct IssueListItem {
    pub id: String,
    pub short: String,
    pub title: String,
    pub status: &'static str,
    pub labels: Vec<String>,
    pub author: String,
    pub created: String,
    pub comments: usize,
    /// The holder of a live lease on this open issue; empty = unclaimed.
    pub claimed_by: String,
    /// The holder's note on its lease; empty = none.
    pub claim_note: String,
}

/// One comment, its body rendered.
pub struct CommentView {
    pub author: String,
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
    pub author: String,
    pub created: String,
    pub updated: String,
    pub body_html: String,
    pub comments: Vec<CommentView>,
    /// The holder of a live lease on this open issue; empty = unclaimed.
    pub claimed_by: String,
    /// `until <time>`, or `no expiry` for an open-ended claim.
    pub claim_until: String,
    /// The holder's note on its lease; empty = none.
    pub claim_note: String,
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
pub struct ListQuery {
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

    fn admits(self, status: IssueStatus) -> bool {
        match self {
            Filter::Open => status == IssueStatus::Open,
            Filter::Closed => status == IssueStatus::Closed,
            Filter::All => true,
        }
    }
}

/// What the blocking part of a page hands to the async part.
struct Loaded {
    canonical: String,
    nav: RepoNav,
    snapshot: Arc<IssueSnapshot>,
}

/// Read the issues of an open repository (through the cache) and its nav.
fn load(st: &AppState, ctx: &RepoCtx) -> Result<Loaded, PageError> {
    let snapshot = st.issues.snapshot(&ctx.git)?;
    Ok(Loaded {
        canonical: ctx.entry.name.clone(),
        nav: super::nav_with_issues(st, ctx, "issues", snapshot.open),
        snapshot,
    })
}

/// Run `work` on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, PageError> + Send + 'static,
) -> Result<T, PageError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| PageError::Internal(anyhow::anyhow!("issues task: {e}")))?
}

/// Live leases of the repository by issue id. A lease store failure is
/// logged and shows no claims rather than no page.
async fn claims(st: &AppState, canonical: &str) -> HashMap<String, Lease> {
    match st.app.leases.list(canonical).await {
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
fn claim_of<'a>(issue: &IssueState, claims: &'a HashMap<String, Lease>) -> Option<&'a Lease> {
    if issue.status != IssueStatus::Open {
        return None;
    }
    claims.get(&issue.id)
}

pub async fn list(
    State(st): State<AppState>,
    Path(repo): Path<String>,
    Query(query): Query<ListQuery>,
) -> Response {
    match list_page(&st, repo, query).await {
        Ok(r) => r,
        Err(e) => e.into_response(&st.app),
    }
}

async fn list_page(st: &AppState, repo: String, query: ListQuery) -> Result<Response, PageError> {
    let st2 = st.clone();
    let loaded = blocking(move || load(&st2, &super::open(&st2.app, &repo)?)).await?;
    let claims = claims(st, &loaded.canonical).await;
    let filter = Filter::parse(query.state.as_deref());
    let label = query.label.unwrap_or_default();
    let matching: Vec<&IssueState> = loaded
        .snapshot
        .issues
        .iter()
        .map(|i| i.as_ref())
        .filter(|i| filter.admits(i.status))
        .filter(|i| label.is_empty() || i.labels.contains(&label))
        .collect();
    let pages = matching.len().div_ceil(ISSUES_PAGE).max(1);
    let page = query.page.unwrap_or(1).clamp(1, pages);
    let issues = matching
        .iter()
        .skip((page - 1) * ISSUES_PAGE)
        .take(ISSUES_PAGE)
        .map(|i| IssueListItem {
            id: i.id.clone(),
            short: view::short_id(&i.id),
            title: i.title.clone(),
            status: status_word(i.status),
            labels: i.labels.clone(),
            author: i.author.name.clone(),
            created: view::fmt_time(i.created_at),
            comments: i.comments.len(),
            claimed_by: claim_of(i, &claims)
                .map(|l| l.holder.clone())
                .unwrap_or_default(),
            claim_note: claim_of(i, &claims)
                .and_then(|l| l.note.clone())
                .unwrap_or_default(),
        })
        .collect();

    let base = format!("/{}/-/issues", loaded.nav.repo_name);
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
    let snapshot = &loaded.snapshot;
    let filters = [
        (Filter::Open, format!("{} open", snapshot.open)),
        (Filter::Closed, format!("{} closed", snapshot.closed)),
        (Filter::All, "all".to_string()),
    ]
    .into_iter()
    .map(|(f, text)| FilterLink {
        label: text,
        url: url(f, 1),
        active: f == filter,
    })
    .collect();
    let nav = loaded.nav;
    let view = IssuesPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        filters,
        issues,
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
    let (loaded, full_id) = blocking(move || {
        let ctx = super::open(&st2.app, &repo)?;
        let full_id = match git_collab::record::state::resolve_issue_ref(&ctx.git, &id) {
            Ok((_, full_id)) => full_id,
            Err(git_collab::Error::AmbiguousIssue { candidates, .. }) => {
                let shown: Vec<String> = candidates.iter().map(|c| view::short_id(c)).collect();
                return Err(PageError::Missing(format!(
                    "The id {id} matches more than one issue: {}. Use a longer prefix.",
                    shown.join(", ")
                )));
            }
            Err(git_collab::Error::InvalidIssueId(_) | git_collab::Error::IssueNotFound(_)) => {
                return Err(PageError::Missing("No such issue.".into()))
            }
            Err(e) => return Err(e.into()),
        };
        Ok((load(&st2, &ctx)?, full_id))
    })
    .await?;
    let issue = loaded
        .snapshot
        .issues
        .iter()
        .find(|i| i.id == full_id)
        .ok_or_else(|| {
            PageError::Missing("This issue cannot be shown: its history is invalid.".into())
        })?;
    let claims = claims(st, &loaded.canonical).await;
    let claim = claim_of(issue, &claims);
    let view = IssueDetailView {
        id: issue.id.clone(),
        short: view::short_id(&issue.id),
        title: issue.title.clone(),
        status: status_word(issue.status),
        closed_reason: issue.closed_reason.clone().unwrap_or_default(),
        labels: issue.labels.clone(),
        author: issue.author.name.clone(),
        created: view::fmt_time(issue.created_at),
        updated: view::fmt_time(issue.updated_at),
        body_html: markdown::render(&issue.body, None),
        comments: issue
            .comments
            .iter()
            .map(|c| CommentView {
                author: c.author.name.clone(),
                when: view::fmt_time(c.at),
                html: markdown::render(&c.body, None),
            })
            .collect(),
        claimed_by: claim.map(|l| l.holder.clone()).unwrap_or_default(),
        claim_note: claim.and_then(|l| l.note.clone()).unwrap_or_default(),
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
    let nav = loaded.nav;
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
