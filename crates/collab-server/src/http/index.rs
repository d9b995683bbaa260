//! `/`: the repositories anonymous HTTP may read, with their descriptions.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::state::AppState;
use super::view::{self, PageResult};

struct RepoRow {
    name: String,
    description: String,
}

#[derive(Template)]
#[template(path = "index.html")]
struct IndexPage {
    site_title: String,
    repos: Vec<RepoRow>,
}

pub async fn index(State(st): State<AppState>) -> Response {
    let app = st.app.clone();
    view::blocking(&st.app, move || page(&app)).await
}

fn page(app: &crate::app::App) -> PageResult {
    let repos = crate::repos::list_repos(&app.config.repos_dir)
        .into_iter()
        .filter(|entry| crate::authz::anonymous_can_read(app, entry))
        .map(|entry| RepoRow {
            description: super::repo::ctx::description(&entry.path),
            name: entry.short_name().to_string(),
        })
        .collect();
    Ok(view::render(
        StatusCode::OK,
        &IndexPage {
            site_title: app.config.site_title.clone(),
            repos,
        },
    ))
}
