//! `/{repo}/-/releases` (every release with its files, sizes and SHA-256
//! checksums) and `/{repo}/-/releases/{tag}/{file}` (the file's bytes,
//! streamed from disk with its Content-Length).
//!
//! Storage and its rules are `crate::releases`'; visibility is the web UI's
//! one rule (`super::ctx::open`: a private repository is the generic 404).
//! Downloads are always attachments, and their content type comes from a
//! short allowlist of inert types by extension, else
//! `application/octet-stream`: a release file is user content and must
//! never be served as something a browser would run (HTML, SVG, scripts).

use askama::Template;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse as _, Response};
use tokio_util::io::ReaderStream;

use super::ctx::RepoCtx;
use crate::http::state::AppState;
use crate::http::view::{self, PageError, PageResult};
use crate::releases::{ReleaseError, ReleaseStore};

/// One file on the page.
pub struct FileView {
    pub name: String,
    /// Path of the download, relative to `/{repo}/-/releases/`.
    pub url: String,
    pub size: String,
    pub bytes: u64,
    pub sha256: String,
    pub uploaded: String,
    pub uploader: crate::http::view::Who,
}

/// One release on the page.
pub struct ReleaseView {
    pub tag: String,
    /// `tag` escaped for a URL path.
    pub tag_url: String,
    /// Whether the tag still exists in the repository (else no tree link).
    pub tag_exists: bool,
    pub created: String,
    pub size: String,
    pub files: Vec<FileView>,
}

#[derive(Template)]
#[template(path = "releases.html")]
struct ReleasesPage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    releases: Vec<ReleaseView>,
}

fn store(st: &AppState) -> ReleaseStore {
    ReleaseStore::new(st.app.config.releases_dir())
}

pub async fn list(State(st): State<AppState>, Path(repo): Path<String>) -> Response {
    let app = st.app.clone();
    view::blocking(&app, move || list_page(&st, &repo)).await
}

fn list_page(st: &AppState, requested: &str) -> PageResult {
    let ctx = super::ctx::open(&st.app, requested)?;
    let nav = super::ctx::nav(st, &ctx, "releases")?;
    let releases = store(st)
        .list(&ctx.entry.name)
        .map_err(|e| PageError::Internal(e.into()))?;
    let names = crate::people::DisplayNames::of(&st.app);
    let releases = releases
        .into_iter()
        .map(|r| {
            let tag_url = view::url_path(&r.tag);
            ReleaseView {
                tag_exists: tag_exists(&ctx, &r.tag),
                created: r.created_at().map(view::fmt_time).unwrap_or_default(),
                size: view::fmt_size(r.size()),
                files: r
                    .files
                    .into_iter()
                    .map(|f| FileView {
                        url: format!("{tag_url}/{}", f.name),
                        size: view::fmt_size(f.size),
                        bytes: f.size,
                        uploaded: view::fmt_time(f.uploaded_at),
                        name: f.name,
                        sha256: f.sha256,
                        uploader: crate::http::view::Who::principal(&names, &f.uploader),
                    })
                    .collect(),
                tag: r.tag,
                tag_url,
            }
        })
        .collect();
    let page = ReleasesPage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        releases,
    };
    Ok(view::render(StatusCode::OK, &page))
}

fn tag_exists(ctx: &RepoCtx, tag: &str) -> bool {
    ctx.git
        .find_reference(&collab_record::refs::tag_ref(tag))
        .is_ok()
}

/// The content type of a download: inert types by extension, else bytes.
fn content_type(file: &str) -> &'static str {
    let lower = file.to_ascii_lowercase();
    let ext = lower.rsplit('.').next().unwrap_or("");
    match ext {
        "gz" | "tgz" => "application/gzip",
        "zip" => "application/zip",
        "tar" => "application/x-tar",
        "xz" => "application/x-xz",
        "bz2" => "application/x-bzip2",
        "zst" => "application/zstd",
        "deb" => "application/vnd.debian.binary-package",
        "rpm" => "application/x-rpm",
        "pdf" => "application/pdf",
        "json" => "application/json",
        "txt" | "sha256" | "sha512" | "asc" | "sig" | "md" => "text/plain; charset=utf-8",
        _ if lower.ends_with("sums") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// `/{repo}/-/releases/{tag}/{file}`: the tag may contain `/`, the file
/// name never does, so the last segment is the file.
pub async fn download(
    State(st): State<AppState>,
    Path((repo, rest)): Path<(String, String)>,
) -> Response {
    let app = st.app.clone();
    let opened = tokio::task::spawn_blocking(move || {
        let ctx = super::ctx::open(&st.app, &repo)?;
        let (tag, file) = rest
            .rsplit_once('/')
            .ok_or_else(|| PageError::Missing("No such release file.".into()))?;
        match store(&st).open(&ctx.entry.name, tag, file) {
            Ok(opened) => Ok(opened),
            Err(ReleaseError::Io(e)) => Err(PageError::Internal(e.into())),
            Err(_) => Err(PageError::Missing("No such release file.".into())),
        }
    })
    .await
    .unwrap_or_else(|e| Err(PageError::Internal(anyhow::anyhow!("release task: {e}"))));
    let (file, record) = match opened {
        Ok(o) => o,
        Err(e) => return e.into_response(&app),
    };
    let body = Body::from_stream(ReaderStream::with_capacity(
        tokio::fs::File::from_std(file),
        64 * 1024,
    ));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(&record.name)),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(record.size));
    // File names are `[A-Za-z0-9._+-]`: nothing to quote or escape.
    if let Ok(disposition) =
        HeaderValue::from_str(&format!("attachment; filename=\"{}\"", record.name))
    {
        headers.insert(header::CONTENT_DISPOSITION, disposition);
    }
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", record.sha256)) {
        headers.insert(header::ETAG, etag);
    }
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::content_type;

    #[test]
    fn only_inert_types_by_extension() {
        assert_eq!(content_type("app-1.0.tar.gz"), "application/gzip");
        assert_eq!(content_type("SHA256SUMS"), "text/plain; charset=utf-8");
        assert_eq!(content_type("notes.TXT"), "text/plain; charset=utf-8");
        for active in ["index.html", "x.svg", "a.js", "page.htm", "bin", "a.xhtml"] {
            assert_eq!(content_type(active), "application/octet-stream", "{active}");
        }
    }
}
