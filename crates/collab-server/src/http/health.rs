//! Probes and metrics: `/livez` (the process answers), `/readyz` (collab.db
//! opens and answers a query on the lease tables, repos_dir is readable)
//! and `/metrics`
//! (Prometheus text from `crate::metrics`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::app::App;

pub async fn livez() -> &'static str {
    "ok"
}

pub async fn readyz(State(app): State<Arc<App>>) -> Response {
    let checked = tokio::task::spawn_blocking(move || ready(&app)).await;
    match checked {
        Ok(Ok(())) => (StatusCode::OK, "ready\n").into_response(),
        Ok(Err(why)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "not ready: check failed\n").into_response(),
    }
}

/// What `/readyz` checks; the error names the failing part (not the path:
/// the probe is anonymous).
fn ready(app: &App) -> Result<(), &'static str> {
    std::fs::read_dir(&app.config.repos_dir).map_err(|_| "repos_dir is not readable")?;
    let db = collab_store::open_reader(app.config.collab_db_location())
        .map_err(|_| "collab_db does not open")?;
    // A real query on the lease tables: a corrupt page there fails it.
    collab_store::guard::ready_query(&db).map_err(|e| {
        tracing::warn!("readyz: collab_db: {e}");
        "collab_db does not answer"
    })?;
    Ok(())
}

pub async fn metrics() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::render(),
    )
        .into_response()
}
