//! Small pieces shared by every page: rendering a template into a response,
//! the error page and the one "not found" page (`not_found`), running git
//! work off the async threads (at most `http.max_concurrent_pages` at once,
//! else 503 with `Retry-After`), and formatting (short ids, times, sizes,
//! URL path segments).

use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, TimeZone as _, Utc};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::app::App;
use crate::people::DisplayNames;

/// Why a page could not be shown.
#[derive(Debug)]
pub enum PageError {
    /// The repository is missing or not visible: the one generic 404.
    NoRepo,
    /// Something inside a visible repository is missing (a ref, a path, an
    /// issue): a 404 that says what.
    Missing(String),
    /// A bug or an I/O failure: logged, and a bare 500 for the client.
    Internal(anyhow::Error),
    /// Every render slot stayed taken: 503 with `Retry-After`.
    Busy,
}

impl<E: Into<anyhow::Error>> From<E> for PageError {
    fn from(e: E) -> Self {
        PageError::Internal(e.into())
    }
}

pub type PageResult = Result<Response, PageError>;

impl PageError {
    pub fn into_response(self, app: &App) -> Response {
        match self {
            PageError::NoRepo => not_found(app),
            PageError::Busy => busy_page(app),
            PageError::Missing(what) => error_page(app, StatusCode::NOT_FOUND, "Not found", &what),
            PageError::Internal(e) => {
                tracing::error!("web page failed: {e:#}");
                error_page(
                    app,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Server error",
                    "Something went wrong; the error was logged.",
                )
            }
        }
    }
}

/// How long a page waits for a render slot before it gets 503.
pub const PAGE_QUEUE_WAIT: Duration = Duration::from_secs(2);

/// Run blocking git work on the blocking pool and turn its outcome into a
/// response.
pub async fn blocking<F>(app: &Arc<App>, work: F) -> Response
where
    F: FnOnce() -> PageResult + Send + 'static,
{
    match blocking_value(app, work).await {
        Ok(response) | Err(response) => response,
    }
}

/// Run blocking git work under the page semaphore; `Err` is the response
/// to send instead (503 when every render slot stays taken, the error
/// page when the work fails).
pub async fn blocking_value<T, F>(app: &Arc<App>, work: F) -> Result<T, Response>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, PageError> + Send + 'static,
{
    let pages = app.limits.pages.clone();
    let Ok(Ok(slot)) = tokio::time::timeout(PAGE_QUEUE_WAIT, pages.acquire_owned()).await else {
        crate::limits::note_refusal("page", "max_concurrent_pages", || {
            format!("{} pages rendering", app.config.http.max_concurrent_pages)
        });
        return Err(busy_page(app));
    };
    let outcome = tokio::task::spawn_blocking(move || {
        let outcome = work();
        drop(slot);
        outcome
    })
    .await;
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.into_response(app)),
        Err(join) => {
            Err(PageError::Internal(anyhow::anyhow!("page task: {join}")).into_response(app))
        }
    }
}

/// A render slot (`http.max_concurrent_pages`), waiting at most
/// `PAGE_QUEUE_WAIT`; hold it while the page's git work runs.
pub async fn page_slot(app: &App) -> Result<tokio::sync::OwnedSemaphorePermit, PageError> {
    let pages = app.limits.pages.clone();
    match tokio::time::timeout(PAGE_QUEUE_WAIT, pages.acquire_owned()).await {
        Ok(Ok(slot)) => Ok(slot),
        _ => {
            crate::limits::note_refusal("page", "max_concurrent_pages", || {
                format!("{} pages rendering", app.config.http.max_concurrent_pages)
            });
            Err(PageError::Busy)
        }
    }
}

/// 503 with `Retry-After`: every render slot is taken.
pub fn busy_page(app: &App) -> Response {
    let mut response = error_page(
        app,
        StatusCode::SERVICE_UNAVAILABLE,
        "Busy",
        "The server is rendering as many pages as it may at once; try again in a few seconds.",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

/// Render `template` with `status`; a render failure is a logged 500.
pub fn render(status: StatusCode, template: &impl Template) -> Response {
    match template.render() {
        Ok(body) => (status, Html(body)).into_response(),
        Err(e) => {
            tracing::error!("template failed: {e}");
            (StatusCode::INTERNAL_SERVER_ERROR, "template error").into_response()
        }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    site_title: &'a str,
    heading: &'a str,
    message: &'a str,
}

/// A page with a heading and one message line.
pub fn error_page(app: &App, status: StatusCode, heading: &str, message: &str) -> Response {
    render(
        status,
        &ErrorPage {
            site_title: &app.config.site_title,
            heading,
            message,
        },
    )
}

/// The one "not found" page: for a missing repository, a repository the
/// caller may not see, and any unknown path. It names nothing from the
/// request, so it cannot tell those cases apart.
pub fn not_found(app: &App) -> Response {
    error_page(
        app,
        StatusCode::NOT_FOUND,
        "Not found",
        "There is nothing here, or you are not allowed to see it.",
    )
}

/// A person as pages show them: the display name (`people`),
/// with the full principal (a `SHA256:` fingerprint or a governed name) for
/// the `title` attribute. Templates write
/// `<span class="who" title="{{ w.id }}">{{ w.name }}</span>`.
#[derive(Debug, Clone, Default)]
pub struct Who {
    pub name: String,
    pub id: String,
}

impl Who {
    /// `principal` (a lease holder, a merger) as named now.
    pub fn principal(names: &DisplayNames, principal: &str) -> Who {
        Who {
            name: names.name(principal),
            id: principal.to_string(),
        }
    }

    /// An author recorded as `principal` with the name `recorded`.
    pub fn author(names: &DisplayNames, principal: &str, recorded: &str) -> Who {
        Who {
            name: names.author(principal, recorded),
            id: if principal.is_empty() {
                recorded.to_string()
            } else {
                principal.to_string()
            },
        }
    }

    /// No one (an unclaimed issue).
    pub fn is_empty(&self) -> bool {
        self.name.is_empty()
    }
}

/// The first 8 hex digits of an id, as the CLI shows it.
pub fn short_id(id: &str) -> String {
    id.chars().take(8).collect()
}

/// `2026-12-03 10:15 UTC`.
pub fn fmt_time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// A git signature time, shown in UTC.
pub fn fmt_git_time(time: git2::Time) -> String {
    Utc.timestamp_opt(time.seconds(), 0)
        .single()
        .map(fmt_time)
        .unwrap_or_default()
}

/// `1.2 KiB`.
pub fn fmt_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Characters left as they are in a URL path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A ref name as a page shows it: control, text-direction and invisible
/// characters (which a mirror's upstream or an old push may have put in a
/// branch or tag name) as visible escapes (`\u{202e}`), so the name says
/// what it is. Links keep the name itself ([`url_path`]).
pub fn shown_name(name: &str) -> String {
    collab_record::text::escape_line(name).into_owned()
}

/// A `/`-separated path (a ref name, a file path) as a URL path: each
/// segment percent-encoded, the slashes kept.
pub fn url_path(path: &str) -> String {
    path.split('/')
        .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// One query-string value, percent-encoded.
pub fn url_query(value: &str) -> String {
    utf8_percent_encode(value, SEGMENT).to_string()
}

/// The host name the client used (from `Host`, without the port), for
/// clone URLs; `localhost` when absent or odd.
pub fn request_host(headers: &HeaderMap) -> String {
    let raw = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let host = if raw.starts_with('[') {
        // [::1]:8080
        raw.split_inclusive(']').next().unwrap_or(raw)
    } else {
        raw.rsplit_once(':').map(|(h, _)| h).unwrap_or(raw)
    };
    let ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'));
    if ok {
        host.to_string()
    } else {
        "localhost".to_string()
    }
}

/// The `scheme://host[:port]` the client used, for the HTTP clone URL.
pub fn request_origin(headers: &HeaderMap) -> String {
    let scheme = match headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
    {
        Some("https") => "https",
        _ => "http",
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'))
        })
        .unwrap_or("localhost");
    format!("{scheme}://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(short_id("0123456789abcdef"), "01234567");
        assert_eq!(fmt_size(10), "10 B");
        assert_eq!(fmt_size(1536), "1.5 KiB");
        assert_eq!(fmt_size(3 * 1024 * 1024), "3.0 MiB");
        assert_eq!(url_path("feature/a b#?"), "feature/a%20b%23%3F");
        assert_eq!(url_query("a&b=c"), "a%26b%3Dc");
    }

    #[tokio::test(start_paused = true)]
    async fn pages_past_the_limit_are_busy() {
        let tmp = tempfile::tempdir().unwrap();
        let mut config = crate::config::ServerConfig::with_state_dir(tmp.path().to_path_buf());
        config.http.max_concurrent_pages = 1;
        let app = App::new(config).unwrap();
        let held = page_slot(&app).await.unwrap();
        // The second waits PAGE_QUEUE_WAIT (paused clock), then is busy.
        let busy = page_slot(&app).await.unwrap_err();
        assert!(matches!(busy, PageError::Busy));
        let response = busy.into_response(&app);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
        drop(held);
        assert!(page_slot(&app).await.is_ok());
    }

    #[test]
    fn host_from_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(request_host(&h), "localhost");
        h.insert("host", "example.org:8080".parse().unwrap());
        assert_eq!(request_host(&h), "example.org");
        assert_eq!(request_origin(&h), "http://example.org:8080");
        h.insert("host", "[::1]:8080".parse().unwrap());
        assert_eq!(request_host(&h), "[::1]");
        h.insert("host", "evil\"<x>".parse().unwrap());
        assert_eq!(request_host(&h), "localhost");
        assert_eq!(request_origin(&h), "http://localhost");
    }
}
