//! `collab-search '<query>' [--repo <glob>]... [--kind issue|patch]
//! [--state open|closed|all] [--limit N] [--after CURSOR]`: the issues and
//! patches of the repositories the caller may read whose title, body or a
//! comment holds every word of the query, best first (`collab_store::search`).
//!
//! A repository the caller cannot read is missing: it contributes
//! nothing, and a `--repo` naming it (no `*`) gets the one not-found
//! reply, as a name that does not exist does. A query or cursor the
//! search cannot take is a usage error (exit 2), never the engine's text.

use collab_proto::exit::USAGE;
use collab_proto::replies::search as wire;
use collab_proto::verbs::Invocation;

use super::context::Context;
use super::reply::{internal_reply, reply_line, NOT_FOUND};
use crate::app::App;
use crate::authz::{Access, Caller};
use collab_store::search::{self as store, Cursor, KindFilter, StateFilter, Terms};

/// How many results a page holds unless `--limit` says.
pub const DEFAULT_LIMIT: usize = 20;

/// A parsed `collab-search` command; its query and cursor are checked when
/// it runs, so their refusals say what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchCmd {
    pub query: String,
    pub repos: Vec<String>,
    pub kind: Option<String>,
    pub state: Option<String>,
    pub limit: Option<usize>,
    pub after: Option<String>,
}

impl SearchCmd {
    pub fn from_invocation(inv: &Invocation<'_>) -> SearchCmd {
        SearchCmd {
            query: inv.arg("query").to_string(),
            repos: inv
                .flags("--repo")
                .into_iter()
                .map(str::to_string)
                .collect(),
            kind: inv.flag("--kind").map(str::to_string),
            state: inv.flag("--state").map(str::to_string),
            limit: inv.int("--limit").map(|n| n as usize),
            after: inv.flag("--after").map(str::to_string),
        }
    }
}

/// The repositories a search reads: every one the caller may read, or of
/// those the ones `patterns` name (a name without `*` must be one of
/// them, else `None`: the not-found reply).
fn repositories(app: &App, caller: &Caller, patterns: &[String]) -> Option<Vec<String>> {
    let readable: Vec<crate::repos::RepoEntry> = crate::repos::list_repos(&app.config.repos_dir)
        .into_iter()
        .filter(|e| crate::authz::repo_access(app, caller, e).is_some())
        .collect();
    if patterns.is_empty() {
        return Some(readable.into_iter().map(|e| e.name).collect());
    }
    let mut names = Vec::new();
    for pattern in patterns {
        if !pattern.contains('*') {
            let (entry, _) = crate::authz::authorize(app, caller, pattern, Access::Read).ok()?;
            names.push(entry.name);
            continue;
        }
        let glob = pattern.strip_suffix(".git").unwrap_or(pattern);
        let glob = glob.strip_prefix('/').unwrap_or(glob);
        names.extend(
            readable
                .iter()
                .filter(|e| crate::events::filter::glob_match(glob, e.short_name()))
                .map(|e| e.name.clone()),
        );
    }
    names.sort();
    names.dedup();
    Some(names)
}

/// The reply line and exit status of one `collab-search`.
pub async fn reply(ctx: &Context, cmd: SearchCmd) -> (String, u32) {
    let usage = |e: store::QueryError| (format!("error: usage: {e}"), USAGE);
    let terms = match Terms::parse(&cmd.query) {
        Ok(terms) => terms,
        Err(e) => return usage(e),
    };
    let after = match cmd.after.as_deref().map(Cursor::decode).transpose() {
        Ok(after) => after,
        Err(e) => return usage(e),
    };
    let (app, caller, patterns) = (ctx.app.clone(), ctx.caller.clone(), cmd.repos);
    let repos = tokio::task::spawn_blocking(move || repositories(&app, &caller, &patterns))
        .await
        .unwrap_or_default();
    let Some(repos) = repos else {
        return (NOT_FOUND.to_string(), 1);
    };
    let query = store::Query {
        terms,
        repos,
        kind: match cmd.kind.as_deref() {
            Some("issue") => KindFilter::Issue,
            Some("patch") => KindFilter::Patch,
            _ => KindFilter::Both,
        },
        state: match cmd.state.as_deref() {
            Some("open") => StateFilter::Open,
            Some("closed") => StateFilter::Closed,
            _ => StateFilter::All,
        },
        limit: cmd.limit.unwrap_or(DEFAULT_LIMIT),
        after,
    };
    match ctx
        .app
        .reads
        .read(move |conn| Ok(store::search(conn, &query)?))
        .await
    {
        Ok(page) => (reply_line(&results(page)), 0),
        Err(e) => {
            tracing::error!("collab-search: {e:#}");
            internal_reply(&e)
        }
    }
}

/// A page as the reply shows it.
pub fn results(page: store::Page) -> wire::SearchResults {
    wire::SearchResults {
        results: page
            .hits
            .into_iter()
            .map(|h| wire::SearchResult {
                kind: h.kind,
                repo: h.repo,
                id: h.id,
                title: h.title,
                state: h.state,
                snippet: h.snippet,
            })
            .collect(),
        next: page.next.map(|c| c.encode()),
    }
}
