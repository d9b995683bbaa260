//! Browsing files: `/{repo}/-/tree/{ref}/{path}` (a directory, with its
//! README), `/{repo}/-/blob/{ref}/{path}` (a file with line numbers; binary
//! files are described, files over `http.max_file_shown` show their first
//! part) and `/{repo}/-/raw/{ref}/{path}` (the bytes, sandboxed: user
//! content is never served as an active document).
//!
//! No page holds a blob bigger than `http.max_file_shown` in memory: sizes
//! come from object headers, big blobs are read through `blobs` (a prefix
//! for the blob page, a stream under a git process slot for raw).

use std::net::SocketAddr;
use std::path::PathBuf;

use askama::Template;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use futures_util::StreamExt as _;
use git2::{ObjectType, Oid, Tree};

use super::ctx::{RepoCtx, RevPath};
use super::summary::{find_readme, Readme};
use crate::highlight;
use crate::http::blobs::{self, BlobStream};
use crate::http::state::AppState;
use crate::http::view::{self, PageError, PageResult};

/// Read buffer of a streamed raw file.
const RAW_CHUNK: usize = 64 * 1024;

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
    switch: super::refs::Switcher,
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
    /// A git-lfs pointer whose object the server holds: `size` is the
    /// object's, and the row is tagged.
    lfs: bool,
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
    /// The file is a git-lfs pointer and this page shows the object.
    lfs: bool,
    /// Why the content is not shown, or not all of it (binary, large).
    note: String,
    /// The lines as HTML: highlighted, or escaped.
    lines: Vec<String>,
}

pub async fn tree_default(State(st): State<AppState>, Path(repo): Path<String>) -> Response {
    super::ctx::to_default_branch(st, repo, "tree").await
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
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Response {
    let app = st.app.clone();
    let found = view::blocking_value(&app, move || raw_lookup(&st, &repo, &rest)).await;
    match found {
        Err(response) => response,
        Ok(RawFile::Small { path, bytes }) => {
            let binary = blobs::looks_binary(&bytes);
            raw_response(&path, binary, Body::from(bytes))
        }
        Ok(RawFile::Large {
            path,
            repo_dir,
            oid,
            size,
        }) => stream_raw(&app, peer, path, repo_dir, oid, size).await,
        Ok(RawFile::Lfs { path, head, file }) => {
            let binary = blobs::looks_binary(&head);
            let head = futures_util::stream::once(async move {
                Ok::<_, std::io::Error>(axum::body::Bytes::from(head))
            });
            let rest = tokio_util::io::ReaderStream::with_capacity(
                tokio::fs::File::from_std(file),
                RAW_CHUNK,
            );
            raw_response(&path, binary, Body::from_stream(head.chain(rest)))
        }
    }
}

/// What `/-/raw/` found: a small blob's bytes, or where to stream a big one.
enum RawFile {
    Small {
        path: String,
        bytes: Vec<u8>,
    },
    Large {
        path: String,
        repo_dir: PathBuf,
        oid: Oid,
        size: u64,
    },
    /// A git-lfs pointer whose object the server holds: the object's
    /// first bytes (to tell text from binary) and the rest of it.
    Lfs {
        path: String,
        head: Vec<u8>,
        file: std::fs::File,
    },
}

/// An entry at a path: a tree (loaded: trees are small) or a blob (only
/// its id: it may be huge).
enum Found<'r> {
    Tree(Tree<'r>),
    Blob(Oid),
    Other,
}

/// What is at `at.path` in `at.commit`: `None` for a missing path,
/// including one no tree can hold (a `.` or `..` segment, a NUL byte): a
/// malformed URL is an ordinary 404, never a logged server error.
fn lookup<'r>(ctx: &'r RepoCtx, at: &RevPath) -> anyhow::Result<Option<Found<'r>>> {
    let tree = ctx.git.find_commit(at.commit)?.tree()?;
    if at.path.is_empty() {
        return Ok(Some(Found::Tree(tree)));
    }
    if !is_tree_path(&at.path) {
        return Ok(None);
    }
    let entry = match tree.get_path(std::path::Path::new(&at.path)) {
        Ok(entry) => entry,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(Some(match entry.kind() {
        Some(ObjectType::Tree) => Found::Tree(ctx.git.find_tree(entry.id())?),
        Some(ObjectType::Blob) => Found::Blob(entry.id()),
        _ => Found::Other,
    }))
}

/// Whether `path` (segments joined by `/`, none empty) could name an entry
/// of a git tree: git refuses `.` and `..` as entry names, and NUL cannot
/// occur in one.
pub(super) fn is_tree_path(path: &str) -> bool {
    path.split('/')
        .all(|seg| !seg.is_empty() && seg != "." && seg != ".." && !seg.contains('\0'))
}

fn resolve(ctx: &RepoCtx, rest: &str) -> Result<RevPath, PageError> {
    super::ctx::resolve_rev_path(&ctx.git, rest)
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
    let ctx = super::ctx::open(&st.app, requested)?;
    let at = resolve(&ctx, rest)?;
    let tree = match lookup(&ctx, &at)? {
        None => return Err(PageError::Missing("No such path.".into())),
        Some(Found::Tree(tree)) => tree,
        Some(Found::Blob(_)) => {
            return Ok(Redirect::to(&format!(
                "/{}/-/blob/{}/{}",
                ctx.name(),
                view::url_path(&at.rev),
                view::url_path(&at.path)
            ))
            .into_response())
        }
        Some(Found::Other) => return Err(PageError::Missing("No such directory.".into())),
    };
    let odb = ctx.git.odb()?;
    let lfs = LfsSizes::new(st, &ctx)?;
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
            let header = (kind == "blob")
                .then(|| odb.read_header(e.id()).ok())
                .flatten()
                .map(|(size, _)| size as u64);
            let held = header
                .filter(|size| *size <= crate::lfs::pointer::MAX_POINTER as u64)
                .and_then(|_| lfs.held_size(&ctx.git, e.id()));
            let size = held.or(header).map(view::fmt_size).unwrap_or_default();
            EntryRow {
                url: view::url_path(&join(&at.path, &name)),
                name,
                kind,
                size,
                lfs: held.is_some(),
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
    let nav = super::ctx::nav(st, &ctx, "tree")?;
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
        rev: view::shown_name(&at.rev),
        switch: super::refs::switcher(&ctx.git, "tree", &at.path),
        crumbs: crumbs(&at.path),
        parent,
        entries,
        readme,
    };
    Ok(view::render(StatusCode::OK, &page))
}

fn blob_page(st: &AppState, requested: &str, rest: &str) -> PageResult {
    let ctx = super::ctx::open(&st.app, requested)?;
    let at = resolve(&ctx, rest)?;
    let oid = match lookup(&ctx, &at)? {
        None | Some(Found::Other) => return Err(PageError::Missing("No such file.".into())),
        Some(Found::Blob(oid)) => oid,
        Some(Found::Tree(_)) => {
            return Ok(Redirect::to(&format!(
                "/{}/-/tree/{}/{}",
                ctx.name(),
                view::url_path(&at.rev),
                view::url_path(&at.path)
            ))
            .into_response())
        }
    };
    let mut size = blobs::size(&ctx.git, oid)?;
    let shown_max = st.app.config.http.max_file_shown;
    // A git-lfs pointer whose object the server holds shows the object,
    // read as a blob of its size would be (whole, or its first part).
    let mut lfs = None;
    if size <= crate::lfs::pointer::MAX_POINTER as u64 {
        let pointer = ctx.git.find_blob(oid)?.content().to_vec();
        if let Some((file, stored)) = lfs_stored(st, &ctx, &pointer)? {
            lfs = Some(file);
            size = stored;
        }
    }
    // Small files come whole from libgit2; big ones only their first part.
    let is_lfs = lfs.is_some();
    let (content, partial) = match lfs {
        Some(file) => {
            use std::io::Read as _;
            let mut content = Vec::with_capacity(size.min(shown_max) as usize);
            file.take(shown_max).read_to_end(&mut content)?;
            (content, size > shown_max)
        }
        None if size <= shown_max => (ctx.git.find_blob(oid)?.content().to_vec(), false),
        None => (blobs::prefix(&ctx.entry.path, oid, shown_max)?, true),
    };
    let (note, lines) = if blobs::looks_binary(&content) {
        let note = if is_lfs {
            format!(
                "Stored in git-lfs, {}: binary, not shown; use the raw link to download it.",
                view::fmt_size(size)
            )
        } else {
            "Binary file, not shown.".to_string()
        };
        (note, Vec::new())
    } else {
        let text = if partial {
            // End at the last complete line of the part read.
            let end = content.iter().rposition(|b| *b == b'\n').unwrap_or(0);
            String::from_utf8_lossy(&content[..end])
        } else {
            String::from_utf8_lossy(&content)
        };
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        let lines = highlight::file_lines(&at.path, &lines, highlight::Deadline::start());
        let note = if partial {
            format!(
                "This file is large ({}): only its first {} lines are shown; use the raw link for all of it.",
                view::fmt_size(size),
                lines.len()
            )
        } else {
            String::new()
        };
        (note, lines)
    };
    let nav = super::ctx::nav(st, &ctx, "tree")?;
    let page = BlobPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        rev_url: view::url_path(&at.rev),
        rev: view::shown_name(&at.rev),
        crumbs: crumbs(&at.path),
        file_url: view::url_path(&at.path),
        size: view::fmt_size(size),
        lfs: is_lfs,
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

fn raw_lookup(st: &AppState, requested: &str, rest: &str) -> Result<RawFile, PageError> {
    let ctx = super::ctx::open(&st.app, requested)?;
    let at = resolve(&ctx, rest)?;
    let Some(Found::Blob(oid)) = lookup(&ctx, &at)? else {
        return Err(PageError::Missing("No such file.".into()));
    };
    let size = blobs::size(&ctx.git, oid)?;
    if size <= st.app.config.http.max_file_shown {
        let bytes = ctx.git.find_blob(oid)?.content().to_vec();
        if let Some((head, file)) = lfs_object(st, &ctx, &bytes)? {
            return Ok(RawFile::Lfs {
                path: at.path,
                head,
                file,
            });
        }
        return Ok(RawFile::Small {
            path: at.path,
            bytes,
        });
    }
    Ok(RawFile::Large {
        path: at.path,
        repo_dir: ctx.entry.path.clone(),
        oid,
        size,
    })
}

/// The sizes of the git-lfs objects a directory's pointer files name, from
/// the store of one repository.
struct LfsSizes {
    store: crate::lfs::store::LfsStore,
    /// The repository's lasting id, `None` when it has none (no objects).
    repo_id: Option<String>,
}

impl LfsSizes {
    fn new(st: &AppState, ctx: &RepoCtx) -> anyhow::Result<LfsSizes> {
        let name = ctx.entry.name.clone();
        let repo_id = st
            .app
            .reads
            .read_blocking(|conn| Ok(collab_store::repo_ids::live_id(conn, &name)?))?;
        Ok(LfsSizes {
            store: crate::lfs::store::LfsStore::new(&st.app.config.state_dir),
            repo_id,
        })
    }

    /// The size of the object the blob `id` points at, if it is a pointer
    /// and the repository holds the object at the pointer's size.
    fn held_size(&self, git: &git2::Repository, id: Oid) -> Option<u64> {
        let repo_id = self.repo_id.as_deref()?;
        let blob = git.find_blob(id).ok()?;
        let (oid, size) = crate::lfs::pointer::parse(blob.content())?;
        (self.store.size_of(repo_id, &oid).ok()?? == size).then_some(size)
    }
}

/// The object a git-lfs pointer names, when `blob` is one and the
/// repository holds it (a pointer to a missing object is served as the
/// pointer): its first 8 KiB read, the file positioned after them.
fn lfs_object(
    st: &AppState,
    ctx: &RepoCtx,
    blob: &[u8],
) -> anyhow::Result<Option<(Vec<u8>, std::fs::File)>> {
    use std::io::Read as _;
    let Some((mut file, _)) = lfs_stored(st, ctx, blob)? else {
        return Ok(None);
    };
    let mut head = Vec::with_capacity(8192);
    (&mut file).take(8192).read_to_end(&mut head)?;
    Ok(Some((head, file)))
}

/// The stored object (opened, and its size) a git-lfs pointer names, when
/// `blob` is one and the repository holds the object at the pointer's size.
pub(super) fn lfs_stored(
    st: &AppState,
    ctx: &RepoCtx,
    blob: &[u8],
) -> anyhow::Result<Option<(std::fs::File, u64)>> {
    let Some((oid, size)) = crate::lfs::pointer::parse(blob) else {
        return Ok(None);
    };
    let name = ctx.entry.name.clone();
    let Some(repo_id) = st
        .app
        .reads
        .read_blocking(|conn| Ok(collab_store::repo_ids::live_id(conn, &name)?))?
    else {
        return Ok(None);
    };
    let store = crate::lfs::store::LfsStore::new(&st.app.config.state_dir);
    match store.open(&repo_id, &oid)? {
        Some((file, stored)) if stored == size => Ok(Some((file, stored))),
        _ => Ok(None),
    }
}

/// Stream a big blob out of `git cat-file` under a git process slot of
/// the client's; 503 with `Retry-After` when none is free.
async fn stream_raw(
    app: &std::sync::Arc<crate::app::App>,
    peer: SocketAddr,
    path: String,
    repo_dir: PathBuf,
    oid: Oid,
    size: u64,
) -> Response {
    let slot = match crate::http::git_http::process_slot(app, peer).await {
        Ok(slot) => slot,
        Err(busy) => return busy,
    };
    let (head, rest) = match BlobStream::open(&repo_dir, oid, slot).await {
        Ok(opened) => opened,
        Err(e) => return PageError::Internal(e.context("streaming a raw file")).into_response(app),
    };
    let binary = blobs::looks_binary(&head);
    let head = futures_util::stream::once(async move {
        Ok::<_, std::io::Error>(axum::body::Bytes::from(head))
    });
    let body =
        Body::from_stream(head.chain(tokio_util::io::ReaderStream::with_capacity(rest, RAW_CHUNK)));
    let mut response = raw_response(&path, binary, body);
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    response
}

/// Headers of a raw file: its type (image, binary or text) and a sandbox.
fn raw_response(path: &str, binary: bool, body: Body) -> Response {
    let content_type = match image_type(path) {
        Some(t) => t,
        None if binary => "application/octet-stream",
        None => "text/plain; charset=utf-8",
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Even if a browser were talked into rendering it, it runs nothing.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'; img-src 'self'"),
    );
    response
}
