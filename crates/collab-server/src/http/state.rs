//! The state every HTTP handler extracts (`AppState`), and what the
//! handlers ask of it: whether anonymous HTTP may see a repository
//! (`visible_repo`, the one place the web side asks `authz`) and a
//! repository's SSH clone URL (`ssh_clone_url`).

use std::sync::Arc;

use axum::extract::FromRef;

use super::view;
use crate::app::App;
use crate::repos::RepoEntry;

/// The state every handler can extract: `State<AppState>`, or just
/// `State<Arc<App>>` (through `FromRef`).
#[derive(Clone)]
pub struct AppState {
    pub app: Arc<App>,
    /// The port the SSH listener is bound to, for SSH clone URLs.
    pub ssh_port: u16,
}

impl FromRef<AppState> for Arc<App> {
    fn from_ref(state: &AppState) -> Arc<App> {
        state.app.clone()
    }
}

/// `ssh://git@HOST[:PORT]/NAME` for a repository, `HOST` as the client
/// named this server.
pub fn ssh_clone_url(st: &AppState, headers: &axum::http::HeaderMap, repo: &RepoEntry) -> String {
    let host = view::request_host(headers);
    match st.ssh_port {
        22 => format!("ssh://git@{host}/{}", repo.name),
        port => format!("ssh://git@{host}:{port}/{}", repo.name),
    }
}

/// The repository `requested` if anonymous HTTP may read it. `None` for a
/// missing repository and for one it may not see alike.
pub fn visible_repo(app: &App, requested: &str) -> Option<RepoEntry> {
    let entry = crate::repos::find_repo(&app.config.repos_dir, requested)?;
    crate::authz::anonymous_can_read(app, &entry).then_some(entry)
}
