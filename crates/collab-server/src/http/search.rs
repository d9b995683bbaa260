//! `/-/search?q=…[&after=…]`: the search box over the issues and patches
//! of the repositories anonymous HTTP may read (`authz::anonymous_can_read`),
//! with the same store query as `collab-search` (`collab_store::search`). A query it
//! cannot take is a 400 with the reason; an empty one shows the box only.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::state::AppState;
use super::view::{self, PageError, PageResult};
use collab_store::search::{self as store, Cursor, KindFilter, StateFilter, Terms};

/// Results per page.
pub const SEARCH_PAGE: usize = 25;

#[derive(Debug, Deserialize)]
pub struct SearchParams {
    q: Option<String>,
    after: Option<String>,
}

struct ResultRow {
    kind: String,
    url: String,
    repo: String,
    short: String,
    title: String,
    state: String,
    snippet: String,
}

#[derive(Template)]
#[template(path = "search.html")]
struct SearchPage {
    site_title: String,
    query: String,
    searched: bool,
    error: String,
    results: Vec<ResultRow>,
    next_url: String,
}

pub async fn search(State(st): State<AppState>, Query(params): Query<SearchParams>) -> Response {
    let app = st.app.clone();
    view::blocking(&st.app, move || page(&app, params)).await
}

fn page(app: &crate::app::App, params: SearchParams) -> PageResult {
    let query = params.q.unwrap_or_default();
    let mut shown = SearchPage {
        site_title: app.config.site_title.clone(),
        query: query.clone(),
        searched: false,
        error: String::new(),
        results: Vec::new(),
        next_url: String::new(),
    };
    if query.trim().is_empty() {
        return Ok(view::render(StatusCode::OK, &shown));
    }
    let parsed = Terms::parse(&query).and_then(|terms| {
        let after = params.after.as_deref().map(Cursor::decode).transpose()?;
        Ok((terms, after))
    });
    let (terms, after) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            shown.error = e.to_string();
            return Ok(view::render(StatusCode::BAD_REQUEST, &shown));
        }
    };
    let repos: Vec<String> = crate::repos::list_repos(&app.config.repos_dir)
        .into_iter()
        .filter(|entry| crate::authz::anonymous_can_read(app, entry))
        .map(|entry| entry.name)
        .collect();
    let q = store::Query {
        terms,
        repos,
        kind: KindFilter::Both,
        state: StateFilter::All,
        limit: SEARCH_PAGE,
        after,
    };
    let found = app
        .reads
        .read_blocking(move |conn| Ok(store::search(conn, &q)?))
        .map_err(PageError::Internal)?;
    shown.searched = true;
    shown.results = found
        .hits
        .into_iter()
        .map(|h| {
            let repo = h.repo.strip_suffix(".git").unwrap_or(&h.repo).to_string();
            let short = view::short_id(&h.id);
            let family = if h.kind == "patch" {
                "patches"
            } else {
                "issues"
            };
            ResultRow {
                url: format!("/{}/-/{family}/{short}", view::url_path(&repo)),
                kind: h.kind,
                repo,
                short,
                title: h.title,
                state: h.state,
                snippet: h.snippet,
            }
        })
        .collect();
    if let Some(next) = found.next {
        shown.next_url = format!(
            "/-/search?q={}&after={}",
            view::url_query(&query),
            view::url_query(&next.encode())
        );
    }
    Ok(view::render(StatusCode::OK, &shown))
}
