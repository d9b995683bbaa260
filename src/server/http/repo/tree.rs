//! Browsing files: `/{repo}/-/tree/{ref}/{path}` (a directory, with its
//! README), `/{repo}/-/blob/{ref}/{path}` (a file with line numbers; binary
//! and very large files are described, not shown) and
//! `/{repo}/-/raw/{ref}/{path}` (the bytes, sandboxed: user content is never
//! served as an active document).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use git2::{ObjectType, Tree};

use super::summary::{find_readme, Readme};
use super::{RepoCtx, RevPath};
use crate::http::view::{self, PageError, PageResult};
use crate::http::AppState;

/// A file bigger than this is not shown inline (the raw link still works).
const MAX_BLOB_SHOWN: usize = 1024 * 1024;

#[derive(Template)]
#[template(path = "tree.html")]
struct TreePage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    /// The ref as given, escaped for a URL.
    rev_url: String,
    rev: String,
    crumbs: Vec<Crumb>,
    /// The parent directory's URL path, or `None` at the root.
    parent: Option<String>,
    entries: Vec<EntryRow>,
    readme: Option<Readme>,
}

/// One step of the `repo / dir / file` path.
struct Crumb {
    name: String,
    /// The URL path (escaped) of this directory, relative to the rev.
    url: String,
}

struct EntryRow {
    name: String,
    /// `tree`, `blob`, `link` (symlink) or `commit` (submodule).
    kind: &'static str,
    /// The URL path (escaped) relative to the rev.
    url: String,
    size: String,
}

#[derive(Template)]
#[template(path = "blob.html")]
struct BlobPage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    rev_url: String,
    rev: String,
    crumbs: Vec<Crumb>,
    file_url: String,
    size: String,
    /// Why the content is not shown (binary, too large), if it is not.
    note: String,
    lines: Vec<String>,
}

pub async fn tree_default(State(st): State<AppState>, Path(repo): Path<String>) -> Response {
    super::to_default_branch(st, repo, "tree").await
}

pub async fn tree(
    State(st): State<AppState>,
    Path((repo, rest)): Path<(String, String)>,
) -> Response {
    let app = st.app.clone();
    view::blocking(&app, move || tree_page(&st, &repo, &rest)).await
}

pub async fn blob(
    State(st): State<AppState>,
    Path((repo, rest)): Path<(String, String)>,
) -> Response {
    let app = st.app.clone();
    view::blocking(&app, move || blob_page(&st, &repo, &rest)).await
}

pub async fn raw(
    State(st): State<AppState>,
    Path((repo, rest)): Path<(String, String)>,
) -> Response {
    let app = st.app.clone();
    view::blocking(&app, move || raw_bytes(&st, &repo, &rest)).await
}

/// The object at `at.path` in `at.commit`: `None` for a missing path,
/// including one no tree can hold (a `.` or `..` segment, a NUL byte): a
/// malformed URL is an ordinary 404, never a logged server error.
fn lookup<'r>(ctx: &'r RepoCtx, at: &RevPath) -> anyhow::Result<Option<git2::Object<'r>>> {
    let tree = ctx.git.find_commit(at.commit)?.tree()?;
    if at.path.is_empty() {
        return Ok(Some(tree.into_object()));
    }
    if !is_tree_path(&at.path) {
        return Ok(None);
    }
    match tree.get_path(std::path::Path::new(&at.path)) {
        Ok(entry) => Ok(Some(entry.to_object(&ctx.git)?)),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether `path` (segments joined by `/`, none empty) could name an entry
/// of a git tree: git refuses `.` and `..` as entry names, and NUL cannot
/// occur in one.
fn is_tree_path(path: &str) -> bool {
    path.split('/')
        .all(|seg| !seg.is_empty() && seg != "." && seg != ".." && !seg.contains('\0'))
}

fn resolve(ctx: &RepoCtx, rest: &str) -> Result<RevPath, PageError> {
    super::resolve_rev_path(&ctx.git, rest)
        .ok_or_else(|| PageError::Missing("No such branch, tag or commit.".into()))
}

fn crumbs(path: &str) -> Vec<Crumb> {
    let mut out = Vec::new();
    let mut so_far = String::new();
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        if !so_far.is_empty() {
            so_far.push('/');
        }
        so_far.push_str(segment);
        out.push(Crumb {
            name: segment.to_string(),
            url: view::url_path(&so_far),
        });
    }
    out
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn tree_page(st: &AppState, requested: &str, rest: &str) -> PageResult {
    let ctx = super::open(&st.app, requested)?;
    let at = resolve(&ctx, rest)?;
    let object = lookup(&ctx, &at)?.ok_or_else(|| PageError::Missing("No such path.".into()))?;
    if object.kind() == Some(ObjectType::Blob) {
        return Ok(Redirect::to(&format!(
            "/{}/-/blob/{}/{}",
            ctx.name(),
            view::url_path(&at.rev),
            view::url_path(&at.path)
        ))
        .into_response());
    }
    let tree: Tree = object
        .into_tree()
        .map_err(|_| PageError::Missing("No such directory.".into()))?;
    let odb = ctx.git.odb()?;
    let mut entries: Vec<EntryRow> = tree
        .iter()
        .map(|e| {
            let name = String::from_utf8_lossy(e.name_bytes()).into_owned();
            let kind = match (e.kind(), e.filemode()) {
                (Some(ObjectType::Tree), _) => "tree",
                (Some(ObjectType::Commit), _) => "commit",
                (_, 0o120000) => "link",
                _ => "blob",
            };
            let size = if kind == "blob" {
                odb.read_header(e.id())
                    .map(|(size, _)| view::fmt_size(size as u64))
                    .unwrap_or_default()
            } else {
                String::new()
            };
            EntryRow {
                url: view::url_path(&join(&at.path, &name)),
                name,
                kind,
                size,
            }
        })
        .collect();
    // Directories first, then by name (git's tree order is by bytes).
    entries.sort_by(|a, b| {
        (a.kind != "tree")
            .cmp(&(b.kind != "tree"))
            .then(a.name.cmp(&b.name))
    });
    let readme = find_readme(&ctx, &tree, &at.rev, &at.path)?;
    let nav = super::nav(st, &ctx, "tree")?;
    let parent = (!at.path.is_empty()).then(|| {
        at.path
            .rsplit_once('/')
            .map(|(p, _)| view::url_path(p))
            .unwrap_or_default()
    });
    let page = TreePage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        rev_url: view::url_path(&at.rev),
        rev: at.rev.clone(),
        crumbs: crumbs(&at.path),
        parent,
        entries,
        readme,
    };
    Ok(view::render(StatusCode::OK, &page))
}

fn blob_page(st: &AppState, requested: &str, rest: &str) -> PageResult {
    let ctx = super::open(&st.app, requested)?;
    let at = resolve(&ctx, rest)?;
    let object = lookup(&ctx, &at)?.ok_or_else(|| PageError::Missing("No such file.".into()))?;
    if object.kind() == Some(ObjectType::Tree) {
        return Ok(Redirect::to(&format!(
            "/{}/-/tree/{}/{}",
            ctx.name(),
            view::url_path(&at.rev),
            view::url_path(&at.path)
        ))
        .into_response());
    }
    let blob = object
        .into_blob()
        .map_err(|_| PageError::Missing("No such file.".into()))?;
    let (note, lines) = if blob.is_binary() {
        ("Binary file, not shown.".to_string(), Vec::new())
    } else if blob.size() > MAX_BLOB_SHOWN {
        (
            format!(
                "This file is too large to show ({}); use the raw link.",
                view::fmt_size(blob.size() as u64)
            ),
            Vec::new(),
        )
    } else {
        let text = String::from_utf8_lossy(blob.content());
        (String::new(), text.lines().map(str::to_string).collect())
    };
    let nav = super::nav(st, &ctx, "tree")?;
    let page = BlobPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        rev_url: view::url_path(&at.rev),
        rev: at.rev.clone(),
        crumbs: crumbs(&at.path),
        file_url: view::url_path(&at.path),
        size: view::fmt_size(blob.size() as u64),
        note,
        lines,
    };
    Ok(view::render(StatusCode::OK, &page))
}

/// Image types shown inline; everything else is text or a download.
fn image_type(path: &str) -> Option<&'static str> {
    let lower = path.to_ascii_lowercase();
    let ext = lower.rsplit('.').next()?;
    Some(match ext {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => return None,
    })
}

fn raw_bytes(st: &AppState, requested: &str, rest: &str) -> PageResult {
    let ctx = super::open(&st.app, requested)?;
    let at = resolve(&ctx, rest)?;
    let blob = lookup(&ctx, &at)?
        .and_then(|o| o.into_blob().ok())
        .ok_or_else(|| PageError::Missing("No such file.".into()))?;
    let content_type = match image_type(&at.path) {
        Some(t) => t,
        None if blob.is_binary() => "application/octet-stream",
        None => "text/plain; charset=utf-8",
    };
    let mut response = blob.content().to_vec().into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Even if a browser were talked into rendering it, it runs nothing.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'; img-src 'self'"),
    );
    Ok(response)
}
