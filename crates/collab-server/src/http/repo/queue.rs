//! `/{repo}/-/queue/{branch}`: a branch's merge queue (docs/checks.md, "The
//! merge queue"): the merge rule's queue settings, the entries in order,
//! every group under test with the checks on its commit (several while a
//! round of exclusion groups searches a failure), and the latest groups
//! with how they ended. Read-only, like every page; the same data
//! as `collab-queue show`.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::ctx::RepoCtx;
use crate::http::state::AppState;
use crate::http::view::{self, PageError, PageResult, Who};
use crate::people::DisplayNames;
use collab_store::merge_queue::{self as store, Group};

/// A patch as listed on the page.
pub struct PatchRow {
    pub id: String,
    pub short: String,
    pub title: String,
    pub revision: i64,
}

/// One queue entry.
pub struct EntryRow {
    pub position: usize,
    pub patch: PatchRow,
    pub requested_by: Who,
    pub queued_at: String,
    /// The groups under test holding it.
    pub in_groups: String,
}

/// One check on the group's commit.
pub struct CheckRow {
    pub name: String,
    pub state: String,
    pub url: String,
}

/// One merge group.
pub struct GroupRow {
    pub n: i64,
    pub commit: String,
    pub commit_short: String,
    pub base_short: String,
    pub state: String,
    pub reason: String,
    pub created: String,
    pub patches: Vec<PatchRow>,
    /// The suspects an exclusion group leaves out (short ids).
    pub excluded: String,
    /// The train's group it was built on, 0 when on the tip.
    pub built_on: i64,
}

/// A group under test, with the checks on its commit.
pub struct LiveRow {
    pub group: GroupRow,
    pub checks: Vec<CheckRow>,
}

#[derive(Template)]
#[template(path = "queue.html")]
struct QueuePage {
    site_title: String,
    repo_name: String,
    active_section: &'static str,
    open_patches: usize,
    open_issues: usize,
    branch: String,
    /// `branch` escaped for a URL path.
    branch_url: String,
    queue_on: bool,
    max_batch: u32,
    max_parallel: u32,
    train: bool,
    queue_method: &'static str,
    required_checks: String,
    suspects: i64,
    search: &'static str,
    entries: Vec<EntryRow>,
    live: Vec<LiveRow>,
    groups: Vec<GroupRow>,
    /// Groups built, and how they ended (what the queue cost in CI runs).
    counts: store::GroupCounts,
}

pub async fn show(
    State(st): State<AppState>,
    Path((repo, branch)): Path<(String, String)>,
) -> Response {
    let app = st.app.clone();
    view::blocking(&app, move || page(&st, &repo, &branch)).await
}

fn time(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0)
        .map(view::fmt_time)
        .unwrap_or_default()
}

fn page(st: &AppState, requested: &str, branch: &str) -> PageResult {
    let ctx: RepoCtx = super::ctx::open(&st.app, requested)?;
    if !git2::Reference::is_valid_name(&collab_record::refs::branch_ref(branch)) {
        return Err(PageError::Missing("No such branch.".into()));
    }
    let rule = crate::authz::merge_rule(&st.app, &ctx.entry);
    let (name, b) = (ctx.entry.name.clone(), branch.to_string());
    st.app.imports.ensure(
        &st.app.reads,
        &st.app.writer,
        &st.app.export,
        &ctx.entry,
        &tokio::runtime::Handle::current(),
    )?;
    type Read = (
        Vec<(
            collab_store::merge_intents::Intent,
            Option<collab_store::patches::Patch>,
        )>,
        Vec<Group>,
        Vec<Group>,
        Vec<(i64, Vec<(String, String, i64)>)>,
        Vec<Vec<collab_store::checks::Check>>,
        store::Search,
        super::ctx::OpenCounts,
        store::GroupCounts,
    );
    let (entries, groups, live, titles, checks, search, counts, group_counts): Read =
        st.app.reads.read_blocking(move |conn| {
            let entries =
                store::entries(conn, &name, &b, collab_store::merge_intents::MAX_PER_REPO)?
                    .into_iter()
                    .map(|i| {
                        let p = collab_store::patches::get(conn, &name, &i.patch)?;
                        Ok((i, p))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
            let groups = store::recent(conn, &name, &b, crate::service::queue::GROUPS_SHOWN)?;
            let live = store::live(conn, &name, &b)?;
            let titles = groups
                .iter()
                .chain(&live)
                .map(|g| {
                    let rows = g
                        .members
                        .iter()
                        .map(|m| {
                            let title = collab_store::patches::get(conn, &name, &m.patch)?
                                .map(|p| p.title)
                                .unwrap_or_default();
                            Ok((m.patch.clone(), title, m.revision))
                        })
                        .collect::<anyhow::Result<Vec<_>>>()?;
                    Ok((g.n, rows))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let checks = live
                .iter()
                .map(|g| Ok(collab_store::checks::list(conn, &name, &g.commit)?))
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok((
                entries,
                groups,
                live,
                titles,
                checks,
                store::search(conn, &name, &b)?,
                super::ctx::open_counts(conn, &name)?,
                store::counts(conn, &name, &b)?,
            ))
        })?;
    let nav = super::ctx::nav_with_counts(st, &ctx, "patches", counts);
    let names = DisplayNames::of(&st.app);
    let row = |g: &Group| GroupRow {
        n: g.n,
        commit: g.commit.clone(),
        commit_short: view::short_id(&g.commit),
        base_short: view::short_id(&g.base),
        state: g.state.clone(),
        reason: g.reason.clone().unwrap_or_default(),
        created: time(g.created_at),
        patches: titles
            .iter()
            .find(|(n, _)| *n == g.n)
            .map(|(_, rows)| {
                rows.iter()
                    .map(|(id, title, revision)| PatchRow {
                        id: id.clone(),
                        short: view::short_id(id),
                        title: title.clone(),
                        revision: *revision,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        excluded: g
            .excluded
            .iter()
            .flatten()
            .map(|id| view::short_id(id))
            .collect::<Vec<_>>()
            .join(" "),
        built_on: g.built_on.unwrap_or(0),
    };
    let page = QueuePage {
        site_title: nav.site_title,
        repo_name: nav.repo_name,
        active_section: nav.active_section,
        open_patches: nav.open_patches,
        open_issues: nav.open_issues,
        branch: branch.to_string(),
        branch_url: view::url_path(branch),
        queue_on: rule.queue,
        max_batch: rule.max_batch,
        max_parallel: rule.max_parallel,
        train: rule.train && !rule.speculate && rule.max_parallel >= 2,
        queue_method: rule.queue_method.as_str(),
        required_checks: rule.required_checks.join(", "),
        suspects: search.suspects,
        search: search.how.as_str(),
        entries: entries
            .iter()
            .enumerate()
            .map(|(i, (e, p))| EntryRow {
                position: i + 1,
                patch: PatchRow {
                    id: e.patch.clone(),
                    short: view::short_id(&e.patch),
                    title: p.as_ref().map(|p| p.title.clone()).unwrap_or_default(),
                    revision: e.revision,
                },
                requested_by: Who::author(&names, &e.requester.principal, &e.requester.name),
                queued_at: time(e.created_at),
                in_groups: live
                    .iter()
                    .filter(|g| g.members.iter().any(|m| m.patch == e.patch))
                    .map(|g| g.n.to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
            })
            .collect(),
        live: live
            .iter()
            .zip(checks)
            .map(|(g, checks)| LiveRow {
                group: row(g),
                checks: checks
                    .into_iter()
                    .map(|c| CheckRow {
                        name: c.name,
                        state: c.state,
                        url: c.url.unwrap_or_default(),
                    })
                    .collect(),
            })
            .collect(),
        groups: groups.iter().map(row).collect(),
        counts: group_counts,
    };
    Ok(view::render(StatusCode::OK, &page))
}
