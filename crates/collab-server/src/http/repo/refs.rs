//! Refs: `/{repo}/-/branches` and `/{repo}/-/tags` (every branch and tag,
//! newest first, with their commit and archive links), the branch/tag
//! switcher the tree and log pages carry ([`switcher`]), and archive
//! downloads `/{repo}/-/archive/{ref}.tar.gz` and `.zip`, made by
//! `git archive` under a git process slot and streamed.

use std::net::SocketAddr;

use askama::Template;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use git2::Repository;

use crate::http::state::AppState;
use crate::http::view::{self, PageError, PageResult};

/// Branches and tags listed in the switcher, each; the rest are on the
/// branches and tags pages.
const SWITCH_MAX: usize = 30;

/// One branch or tag in a list.
pub struct RefRow {
    /// The name as shown (`view::shown_name`).
    pub name: String,
    /// `name`, escaped for a URL path.
    pub url: String,
    pub id: String,
    pub short: String,
    pub summary: String,
    pub when: String,
    /// The tag's message (first line), for annotated tags.
    pub note: String,
    /// The default branch.
    pub default: bool,
    time: i64,
}

#[derive(Template)]
#[template(path = "refs.html")]
struct RefsPage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    /// `branches` or `tags`.
    kind: &'static str,
    rows: Vec<RefRow>,
}

/// Every local branch, newest commit first.
pub fn branch_rows(git: &Repository) -> anyhow::Result<Vec<RefRow>> {
    let default = super::ctx::default_branch(git).map(|(name, _)| name);
    let mut rows = Vec::new();
    for branch in git.branches(Some(git2::BranchType::Local))? {
        let (branch, _) = branch?;
        let Ok(Some(name)) = branch.name().map(|n| n.map(str::to_string)) else {
            continue;
        };
        let Ok(commit) = branch.get().peel_to_commit() else {
            continue;
        };
        let mut row = row_of(&name, &commit);
        row.default = default.as_deref() == Some(name.as_str());
        rows.push(row);
    }
    rows.sort_by(|a, b| b.time.cmp(&a.time).then(a.name.cmp(&b.name)));
    Ok(rows)
}

/// Every tag that leads to a commit, newest first (the tagger's date for
/// an annotated tag, else the commit's).
pub fn tag_rows(git: &Repository) -> anyhow::Result<Vec<RefRow>> {
    let mut rows = Vec::new();
    let names = git.tag_names(None)?;
    for name in names.iter().flatten().flatten() {
        let Ok(reference) = git.find_reference(&format!("refs/tags/{name}")) else {
            continue;
        };
        let Ok(commit) = reference.peel_to_commit() else {
            continue;
        };
        let mut row = row_of(name, &commit);
        if let Ok(tag) = reference.peel_to_tag() {
            if let Some(tagger) = tag.tagger() {
                row.time = tagger.when().seconds();
                row.when = view::fmt_git_time(tagger.when());
            }
            row.note = tag
                .message()
                .ok()
                .flatten()
                .and_then(|m| m.lines().next())
                .unwrap_or("")
                .to_string();
        }
        rows.push(row);
    }
    rows.sort_by(|a, b| b.time.cmp(&a.time).then(b.name.cmp(&a.name)));
    Ok(rows)
}

fn row_of(name: &str, commit: &git2::Commit) -> RefRow {
    let id = commit.id().to_string();
    RefRow {
        name: view::shown_name(name),
        url: view::url_path(name),
        short: view::short_id(&id),
        id,
        summary: commit.summary().ok().flatten().unwrap_or("").to_string(),
        when: view::fmt_git_time(commit.time()),
        note: String::new(),
        default: false,
        time: commit.time().seconds(),
    }
}

pub async fn branches(State(st): State<AppState>, Path(repo): Path<String>) -> Response {
    let app = st.app.clone();
    view::blocking(&app, move || refs_page(&st, &repo, "branches")).await
}

pub async fn tags(State(st): State<AppState>, Path(repo): Path<String>) -> Response {
    let app = st.app.clone();
    view::blocking(&app, move || refs_page(&st, &repo, "tags")).await
}

fn refs_page(st: &AppState, requested: &str, kind: &'static str) -> PageResult {
    let ctx = super::ctx::open(&st.app, requested)?;
    let rows = if kind == "branches" {
        branch_rows(&ctx.git)?
    } else {
        tag_rows(&ctx.git)?
    };
    let nav = super::ctx::nav(st, &ctx, kind)?;
    let page = RefsPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        kind,
        rows,
    };
    Ok(view::render(StatusCode::OK, &page))
}

/// The branch/tag switcher of a tree or log page: links to the same page
/// (`section`, and `tail` after the ref: `/src/lib` or empty) at another
/// ref.
pub struct Switcher {
    /// `tree` or `log`.
    pub section: &'static str,
    /// The escaped path after the ref, with its leading `/`, or empty.
    pub tail: String,
    pub branches: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
    /// More branches or tags than listed.
    pub more: bool,
}

/// The switcher for `section` at `path` (unescaped, no slashes at the
/// ends; empty for the root or the log).
pub fn switcher(git: &Repository, section: &'static str, path: &str) -> Switcher {
    let pick = |rows: anyhow::Result<Vec<RefRow>>| -> (Vec<(String, String)>, bool) {
        let rows = rows.unwrap_or_default();
        let more = rows.len() > SWITCH_MAX;
        let listed = rows
            .into_iter()
            .take(SWITCH_MAX)
            .map(|r| (r.name, r.url))
            .collect();
        (listed, more)
    };
    let (branches, more_branches) = pick(branch_rows(git));
    // Tags by name, highest version first: no object is read, so a
    // repository with thousands of tags costs the page nothing much.
    let mut tag_names: Vec<String> = git
        .tag_names(None)
        .map(|names| {
            names
                .iter()
                .flatten()
                .flatten()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    tag_names.sort_by(|a, b| version_cmp(b, a));
    let more_tags = tag_names.len() > SWITCH_MAX;
    let tags = tag_names
        .into_iter()
        .take(SWITCH_MAX)
        .map(|n| (view::shown_name(&n), view::url_path(&n)))
        .collect();
    Switcher {
        section,
        tail: if path.is_empty() {
            String::new()
        } else {
            format!("/{}", view::url_path(path))
        },
        branches,
        tags,
        more: more_branches || more_tags,
    }
}

/// Compare names piece by piece, runs of digits as numbers (`v1.10` after
/// `v1.9`).
fn version_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn pieces(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (pa, pb) = (pieces(a), pieces(b));
    for (x, y) in pa.iter().zip(pb.iter()) {
        let ord = match (x, y) {
            ((true, x), (true, y)) => {
                let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                x.len().cmp(&y.len()).then(x.cmp(y))
            }
            ((_, x), (_, y)) => x.cmp(y),
        };
        if ord != std::cmp::Ordering::Equal {
            return ord;
        }
    }
    pa.len().cmp(&pb.len()).then(a.cmp(b))
}

/// An archive format of the download URL.
#[derive(Clone, Copy)]
enum Format {
    TarGz,
    Zip,
}

impl Format {
    fn split(rest: &str) -> Option<(&str, Format)> {
        if let Some(rev) = rest.strip_suffix(".tar.gz") {
            Some((rev, Format::TarGz))
        } else {
            rest.strip_suffix(".zip").map(|rev| (rev, Format::Zip))
        }
    }
}

/// `/{repo}/-/archive/{ref}.tar.gz|.zip`: the tree of `ref` under a
/// `<repo>-<ref>/` directory, as `git archive` writes it. Readers only: a
/// repository anonymous HTTP may not read is the same 404 as a missing one.
pub async fn archive(
    State(st): State<AppState>,
    Path((repo, rest)): Path<(String, String)>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Response {
    let app = st.app.clone();
    let found = view::blocking_value(&app, move || {
        let (rev, format) = Format::split(&rest)
            .ok_or(PageError::Missing("Archives are .tar.gz or .zip.".into()))?;
        let ctx = super::ctx::open(&st.app, &repo)?;
        let at = super::ctx::resolve_rev_path(&ctx.git, rev)
            .filter(|at| at.path.is_empty())
            .ok_or_else(|| PageError::Missing("No such branch, tag or commit.".into()))?;
        let base = ctx.name().rsplit('/').next().unwrap_or("repo").to_string();
        let stem = crate::http::git_stream::safe_filename(&format!("{base}-{}", at.rev));
        // Files git holds as LFS pointers go in with the stored content.
        let name = ctx.entry.name.clone();
        let smudge = st
            .app
            .reads
            .read_blocking(|conn| Ok(collab_store::repo_ids::live_id(conn, &name)?))?
            .and_then(|id| crate::lfs::smudge::archive_config(&st.app.config.state_dir, &id))
            .unwrap_or_default();
        Ok((ctx.entry.path.clone(), at.commit, stem, format, smudge))
    })
    .await;
    let (repo_dir, commit, stem, format, smudge) = match found {
        Ok(found) => found,
        Err(response) => return response,
    };
    let slot = match crate::http::git_http::process_slot(&app, peer).await {
        Ok(slot) => slot,
        Err(busy) => return busy,
    };
    let (fmt, ext, content_type) = match format {
        Format::TarGz => ("tar.gz", "tar.gz", "application/gzip"),
        Format::Zip => ("zip", "zip", "application/zip"),
    };
    let mut args = smudge;
    args.extend([
        "archive".into(),
        format!("--format={fmt}"),
        format!("--prefix={stem}/"),
        "--end-of-options".into(),
        commit.to_string(),
    ]);
    let mut cmd = crate::http::git_stream::git(&repo_dir, &args);
    // No user's or system's git-lfs filter (`filter.lfs.process`) in the way.
    cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1");
    let filename = format!("{stem}.{ext}");
    match crate::http::git_stream::respond(cmd, slot, content_type, Some(&filename)).await {
        Ok(response) => response,
        Err(e) => PageError::Internal(e.context("git archive")).into_response(&app),
    }
}

#[cfg(test)]
mod tests {
    use super::version_cmp;

    #[test]
    fn versions_compare_by_number() {
        let mut tags = vec!["v1.9", "v1.10", "v1.2", "v2.0", "alpha"];
        tags.sort_by(|a, b| version_cmp(b, a));
        assert_eq!(tags, ["v2.0", "v1.10", "v1.9", "v1.2", "alpha"]);
    }
}
