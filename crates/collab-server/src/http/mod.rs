//! The HTTP side of the server, read-only: the web UI (askama templates, one
//! stylesheet, no JavaScript), smart-HTTP clone and fetch, the probes
//! (`/livez`, `/readyz`) and `/metrics`.
//!
//! Routing. Repository names may contain `/` (`team/app`), so before routing
//! [`canonical_path`] rewrites the request path so that the repository name
//! is ONE percent-encoded segment: `/team/app/-/issues` becomes
//! `/team%2Fapp/-/issues` (everything after the first `/-/` is the page),
//! `/team/app.git/info/refs` becomes `/team%2Fapp.git/info/refs`, and any
//! other path is a summary page. Routes are then ordinary axum routes,
//! `/{repo}/-/issues/{id}`, and `Path` hands handlers the decoded name. A
//! repository with a `-` segment in its name is therefore not reachable
//! over HTTP.
//!
//! Access. Anonymous HTTP sees only repositories that
//! `authz::anonymous_can_read` allows; [`state::visible_repo`] is the one
//! place this module asks, and a repository it refuses gets exactly the
//! same answer as one that does not exist ([`view::not_found`], or the
//! smart-HTTP equivalent). Every page is a GET; nothing here writes to a repository
//! except the replay cache the library keeps beside it.
//!
//! Adding a page family: a file under `repo/`, a `Template` struct whose
//! template extends `repo_base.html` (fields from [`repo::ctx::RepoNav`]), and
//! one `.route(...)` line below.

mod blobs;
mod git_http;
mod git_stream;
mod health;
mod index;
pub mod listener;
mod markdown;
pub mod repo;
mod search;
mod state;
mod view;

use std::future::Future;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderValue, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower::Layer as _;

use crate::app::App;
use state::AppState;

/// The stylesheet, compiled in.
const STYLE_CSS: &str = include_str!("static/style.css");

/// The one stylesheet served: ours, then the highlighting colours.
static STYLESHEET: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{STYLE_CSS}\n/* Syntax highlighting (syntect) */\n{}",
        crate::highlight::css()
    )
});

/// Every route. Paths are as [`canonical_path`] leaves them. `ssh_port`
/// is where the SSH listener is bound (for clone URLs).
pub fn router(app: Arc<App>, ssh_port: u16) -> Router {
    let state = AppState { app, ssh_port };
    Router::new()
        .route("/", get(index::index))
        .route("/-/static/style.css", get(style_css))
        .route("/-/search", get(search::search))
        .route("/favicon.ico", get(favicon))
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/{repo}", get(repo::summary::summary))
        .route("/{repo}/-/tree", get(repo::tree::tree_default))
        .route("/{repo}/-/tree/{*rest}", get(repo::tree::tree))
        .route("/{repo}/-/blob/{*rest}", get(repo::tree::blob))
        .route("/{repo}/-/raw/{*rest}", get(repo::tree::raw))
        .route("/{repo}/-/commit/{oid}", get(repo::commit::commit))
        .route("/{repo}/-/log", get(repo::commit::log_default))
        .route("/{repo}/-/log/{*rest}", get(repo::commit::log))
        .route("/{repo}/-/history/{*rest}", get(repo::history::history))
        .route("/{repo}/-/blame/{*rest}", get(repo::history::blame))
        .route("/{repo}/-/branches", get(repo::refs::branches))
        .route("/{repo}/-/tags", get(repo::refs::tags))
        .route("/{repo}/-/archive/{*rest}", get(repo::refs::archive))
        .route("/{repo}/-/issues", get(repo::issues::list))
        .route("/{repo}/-/issues/{id}", get(repo::issues::detail))
        .route("/{repo}/-/patches", get(repo::patches::list))
        .route("/{repo}/-/patches/{id}", get(repo::patches::detail))
        .route("/{repo}/-/queue/{*branch}", get(repo::queue::show))
        .route("/{repo}/-/releases", get(repo::releases::list))
        .route("/{repo}/-/releases/{*rest}", get(repo::releases::download))
        .route("/{repo}/info/refs", get(git_http::info_refs))
        .route("/{repo}/git-upload-pack", post(git_http::upload_pack_post))
        .route(
            "/{repo}/git-receive-pack",
            post(git_http::receive_pack_post),
        )
        .fallback(fallback)
        .layer(middleware::from_fn(common_headers))
        .with_state(state)
}

/// Serve HTTP on `listener` until `shutdown` resolves; in-flight requests
/// finish first.
pub async fn serve(
    app: Arc<App>,
    listener: tokio::net::TcpListener,
    ssh_port: u16,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // Syntax grammars load in the background, not on the first page.
    std::thread::spawn(crate::highlight::preload);
    // The rewrite must run before routing, so it wraps the router instead of
    // being one of its layers.
    let service =
        tower::util::MapRequestLayer::new(rewrite_request).layer(router(app.clone(), ssh_port));
    listener::serve(app, listener, service, shutdown).await
}

fn rewrite_request(mut request: Request) -> Request {
    if let Some(path) = canonical_path(request.uri().path()) {
        let rebuilt = match request.uri().query() {
            Some(q) => format!("{path}?{q}"),
            None => path,
        };
        if let Ok(uri) = rebuilt.parse::<Uri>() {
            *request.uri_mut() = uri;
        }
    }
    request
}

/// Git's smart-HTTP endpoints, relative to the repository.
const GIT_SUFFIXES: [&str; 3] = ["/info/refs", "/git-upload-pack", "/git-receive-pack"];

/// The routed form of a raw request path, with the repository name folded
/// into one segment; `None` when the path is already in routed form.
pub fn canonical_path(path: &str) -> Option<String> {
    if path == "/" || path.starts_with("/-/") || !path.starts_with('/') {
        return None;
    }
    let fold = |repo: &str| repo.trim_matches('/').replace('/', "%2F");
    let routed = if let Some(at) = path.find("/-/") {
        format!("/{}{}", fold(&path[..at]), &path[at..])
    } else if let Some(suffix) = GIT_SUFFIXES.iter().find(|s| path.ends_with(*s)) {
        format!("/{}{suffix}", fold(&path[..path.len() - suffix.len()]))
    } else {
        let trimmed = path.trim_end_matches('/');
        let trimmed = trimmed.strip_suffix("/-").unwrap_or(trimmed);
        format!("/{}", fold(trimmed))
    };
    (routed != path).then_some(routed)
}

async fn fallback(axum::extract::State(app): axum::extract::State<Arc<App>>) -> Response {
    view::not_found(&app)
}

async fn style_css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        STYLESHEET.as_str(),
    )
        .into_response()
}

/// The site icon: a small SVG (browsers ask for `/favicon.ico` on every
/// first visit; without one each page load logged a 404).
const FAVICON: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\">\
<rect width=\"16\" height=\"16\" rx=\"3\" fill=\"#24292f\"/>\
<circle cx=\"5\" cy=\"5\" r=\"2\" fill=\"#fff\"/><circle cx=\"11\" cy=\"11\" r=\"2\" fill=\"#fff\"/>\
<path d=\"M5 7v2a2 2 0 0 0 2 2h2\" stroke=\"#fff\" fill=\"none\"/></svg>";

async fn favicon() -> Response {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        FAVICON,
    )
        .into_response()
}

/// Count every response and add the headers every response carries: no
/// script may run on any page (the UI needs none), no MIME sniffing, no
/// framing.
async fn common_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    crate::metrics::http_request(response.status().as_u16());
    let headers = response.headers_mut();
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self' https: data:; \
             base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

#[cfg(test)]
mod tests {
    use super::canonical_path;

    #[test]
    fn folds_the_repository_name_into_one_segment() {
        let cases = [
            ("/", None),
            ("/-/static/style.css", None),
            ("/livez", None),
            ("/r", None),
            ("/r/", Some("/r")),
            ("/team/app", Some("/team%2Fapp")),
            ("/team/app/", Some("/team%2Fapp")),
            ("/team/app/-/issues", Some("/team%2Fapp/-/issues")),
            ("/r/-/issues/abcd", None),
            (
                "/a/b/c/-/tree/main/src/-/x.rs",
                Some("/a%2Fb%2Fc/-/tree/main/src/-/x.rs"),
            ),
            ("/team/app.git/info/refs", Some("/team%2Fapp.git/info/refs")),
            ("/r.git/git-upload-pack", None),
            ("/t/r/git-receive-pack", Some("/t%2Fr/git-receive-pack")),
            ("/t/r/-", Some("/t%2Fr")),
        ];
        for (raw, want) in cases {
            assert_eq!(canonical_path(raw).as_deref(), want, "{raw}");
        }
    }
}
