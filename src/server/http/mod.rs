//! The HTTP side of the server (read-only). For now only the probes:
//! `/livez` (the process is up) and `/readyz` (repos_dir is readable). The
//! web UI and smart-HTTP clone are built on this router later; every page
//! must ask `authz` before it shows a repository.

use std::future::Future;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::app::App;

/// The router with every HTTP route.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state(app)
}

/// Serve HTTP on `listener` until `shutdown` resolves; in-flight requests
/// finish first.
pub async fn serve(
    app: Arc<App>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

async fn livez() -> &'static str {
    "ok"
}

async fn readyz(State(app): State<Arc<App>>) -> (StatusCode, &'static str) {
    match std::fs::read_dir(&app.config.repos_dir) {
        Ok(_) => (StatusCode::OK, "ready"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "repos_dir is not readable"),
    }
}
