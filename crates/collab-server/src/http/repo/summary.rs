//! `/{repo}`: the repository's front page: description, clone URLs (SSH and
//! HTTP), branches, recent commits and the README of the default branch,
//! rendered from Markdown with raw HTML escaped.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use git2::{ObjectType, Repository, Tree};

use super::ctx::{BranchRow, CommitRow, RepoCtx};
use crate::http::markdown::{self, LinkBase};
use crate::http::state::AppState;
use crate::http::view::{self, PageResult};

/// Recent commits shown on the summary page.
const RECENT_COMMITS: usize = 10;
/// Branches shown on the summary page.
const MAX_BRANCHES: usize = 20;
/// A README bigger than this is linked, not rendered.
pub const MAX_README: usize = 512 * 1024;

#[derive(Template)]
#[template(path = "summary.html")]
struct SummaryPage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    description: String,
    ssh_url: String,
    http_url: String,
    default_branch: String,
    branches: Vec<BranchRow>,
    commits: Vec<CommitRow>,
    readme: Option<Readme>,
    upstreams: Vec<UpstreamRow>,
}

/// A pull mirror as the page shows it: where from, when it last synced,
/// and its last error while it fails (never its credential, nor a URL's
/// user, password or query; push mirrors are for administrators'
/// `collab-repo mirror list` only).
pub struct UpstreamRow {
    pub url: String,
    pub last_success: String,
    pub last_error: Option<String>,
    /// When the schedule syncs it next.
    pub next_sync: String,
    /// How often it syncs, as `10m`, `1h`.
    pub interval: String,
}

fn upstreams(st: &AppState, repo: &str) -> anyhow::Result<Vec<UpstreamRow>> {
    let name = repo.to_string();
    let mirrors = st
        .app
        .reads
        .read_blocking(move |conn| Ok(collab_store::mirrors::list(conn, &name)?))?;
    let when = |at: Option<i64>| {
        at.and_then(|t| chrono::DateTime::from_timestamp(t, 0))
            .map(view::fmt_time)
            .unwrap_or_else(|| "never".into())
    };
    Ok(mirrors
        .into_iter()
        .filter(|m| m.is_pull())
        .map(|m| UpstreamRow {
            next_sync: when(Some(m.next_at)),
            interval: every(m.interval_secs),
            last_success: when(m.last_success_at),
            last_error: m.last_error.as_deref().map(crate::mirrors::url::scrub),
            url: crate::mirrors::url::shown(&m.url),
        })
        .collect())
}

/// A mirror's interval in its largest whole unit (`90s`, `10m`, `2h`, `1d`).
fn every(secs: i64) -> String {
    match secs {
        s if s > 0 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s > 0 && s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A rendered README.
pub struct Readme {
    pub name: String,
    /// Safe HTML (Markdown rendered with raw HTML escaped), or `None` for a
    /// plain-text README shown in `text`.
    pub html: Option<String>,
    pub text: String,
}

pub async fn summary(
    State(st): State<AppState>,
    Path(repo): Path<String>,
    headers: HeaderMap,
) -> Response {
    let app = st.app.clone();
    view::blocking(&app, move || page(&st, &repo, &headers)).await
}

fn page(st: &AppState, requested: &str, headers: &HeaderMap) -> PageResult {
    let ctx = super::ctx::open(&st.app, requested)?;
    let nav = super::ctx::nav(st, &ctx, "summary")?;
    let head = super::ctx::default_branch(&ctx.git);
    let (commits, readme) = match &head {
        Some((branch, oid)) => {
            let tree = ctx.git.find_commit(*oid)?.tree()?;
            let readme = find_readme(&ctx, &tree, branch, "")?;
            (
                super::ctx::commits(&ctx.git, *oid, 0, RECENT_COMMITS)?,
                readme,
            )
        }
        None => (Vec::new(), None),
    };
    let page = SummaryPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        description: super::ctx::description(&ctx.entry.path),
        ssh_url: crate::http::state::ssh_clone_url(st, headers, &ctx.entry),
        http_url: format!("{}/{}", view::request_origin(headers), ctx.entry.name),
        default_branch: head.map(|(b, _)| b).unwrap_or_default(),
        branches: super::ctx::branches(&ctx.git, MAX_BRANCHES)?,
        commits,
        readme,
        upstreams: upstreams(st, &ctx.entry.name)?,
    };
    Ok(view::render(StatusCode::OK, &page))
}

/// The README in `tree` (the directory `dir` of `rev`), if any: the first
/// entry named `README*` (case-insensitive), Markdown preferred.
pub fn find_readme(
    ctx: &RepoCtx,
    tree: &Tree,
    rev: &str,
    dir: &str,
) -> anyhow::Result<Option<Readme>> {
    let mut candidates: Vec<(u8, String, git2::Oid)> = tree
        .iter()
        .filter(|e| e.kind() == Some(ObjectType::Blob))
        .filter_map(|e| {
            let name = e.name().ok()?.to_string();
            let lower = name.to_ascii_lowercase();
            if !lower.starts_with("readme") {
                return None;
            }
            let rank = if is_markdown(&lower) { 0 } else { 1 };
            Some((rank, name, e.id()))
        })
        .collect();
    candidates.sort();
    let Some((_, name, oid)) = candidates.into_iter().next() else {
        return Ok(None);
    };
    Ok(Some(render_readme(ctx, &ctx.git, oid, &name, rev, dir)?))
}

fn is_markdown(lower_name: &str) -> bool {
    [".md", ".markdown", ".mdown", ".mkd"]
        .iter()
        .any(|ext| lower_name.ends_with(ext))
}

fn render_readme(
    ctx: &RepoCtx,
    git: &Repository,
    oid: git2::Oid,
    name: &str,
    rev: &str,
    dir: &str,
) -> anyhow::Result<Readme> {
    // The size from the object header first: a huge README is never loaded.
    let (size, _) = git.odb()?.read_header(oid)?;
    let too_large = |size: usize| Readme {
        name: name.to_string(),
        html: None,
        text: format!(
            "{name} is too large to show here ({}).",
            view::fmt_size(size as u64)
        ),
    };
    if size > MAX_README {
        return Ok(too_large(size));
    }
    let blob = git.find_blob(oid)?;
    if blob.is_binary() {
        return Ok(too_large(blob.size()));
    }
    let text = String::from_utf8_lossy(blob.content()).into_owned();
    if !is_markdown(&name.to_ascii_lowercase()) {
        return Ok(Readme {
            name: name.to_string(),
            html: None,
            text,
        });
    }
    let dir_prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{}/", view::url_path(dir))
    };
    let base = LinkBase {
        links: format!("/{}/-/blob/{}/", ctx.name(), view::url_path(rev)),
        images: format!("/{}/-/raw/{}/", ctx.name(), view::url_path(rev)),
        dir: dir_prefix,
    };
    Ok(Readme {
        name: name.to_string(),
        html: Some(markdown::render(&text, Some(&base))),
        text: String::new(),
    })
}
