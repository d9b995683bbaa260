//! What every repository page shares: [`open`] (the visibility check, then
//! the git repository: [`RepoCtx`]), [`RepoNav`] (the fields
//! `repo_base.html` needs, with the open issue and patch counts), resolving
//! `<ref>/<path>` URL tails, and small git helpers (branches, commit rows).

use std::path::Path;

use git2::{ObjectType, Oid, Repository};

use crate::app::App;
use crate::http::state::AppState;
use crate::http::view::PageError;
use crate::repos::RepoEntry;

/// A visible repository, opened.
pub struct RepoCtx {
    pub entry: RepoEntry,
    pub git: Repository,
}

impl RepoCtx {
    /// The name shown and used in links (without `.git`).
    pub fn name(&self) -> &str {
        self.entry.short_name()
    }
}

/// Open `requested` if anonymous HTTP may read it; otherwise the generic
/// not-found, whether it exists or not.
pub fn open(app: &App, requested: &str) -> Result<RepoCtx, PageError> {
    let entry = crate::http::state::visible_repo(app, requested).ok_or(PageError::NoRepo)?;
    let git = Repository::open_bare(&entry.path)?;
    Ok(RepoCtx { entry, git })
}

/// What `repo_base.html` shows around every repository page. A page struct
/// whose template extends `repo_base.html` has these five fields.
pub struct RepoNav {
    pub site_title: String,
    pub repo_name: String,
    /// `summary`, `tree`, `log`, `branches`, `tags`, `issues`, `patches`
    /// or `releases`.
    pub active_section: &'static str,
    pub open_patches: usize,
    pub open_issues: usize,
}

/// The navigation fields for a page of `ctx` in `section`. Open issues and
/// open patches are counted in collab.db (index range counts; the
/// repository's DAGs are imported first if the server has not seen it yet).
pub fn nav(st: &AppState, ctx: &RepoCtx, section: &'static str) -> Result<RepoNav, PageError> {
    let app = &st.app;
    app.imports.ensure(
        &app.reads,
        &app.writer,
        &app.export,
        &ctx.entry,
        &tokio::runtime::Handle::current(),
    )?;
    let name = ctx.entry.name.clone();
    let counts = app
        .reads
        .read_blocking(move |conn| open_counts(conn, &name))?;
    Ok(nav_with_counts(st, ctx, section, counts))
}

/// Open issues and open patches of `repo`, in one read.
pub fn open_counts(conn: &collab_store::sql::Connection, repo: &str) -> anyhow::Result<OpenCounts> {
    Ok(OpenCounts {
        issues: collab_store::issues::count(
            conn,
            repo,
            collab_store::issues::StateFilter::Open,
            &[],
        )? as usize,
        patches: collab_store::patches::count(conn, repo, collab_store::patches::StateFilter::Open)?
            as usize,
    })
}

/// What the navigation badges count.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenCounts {
    pub issues: usize,
    pub patches: usize,
}

/// `nav` for a page that has counted already (in its own read).
pub fn nav_with_counts(
    st: &AppState,
    ctx: &RepoCtx,
    section: &'static str,
    counts: OpenCounts,
) -> RepoNav {
    RepoNav {
        site_title: st.app.config.site_title.clone(),
        repo_name: ctx.name().to_string(),
        active_section: section,
        open_patches: counts.patches,
        open_issues: counts.issues,
    }
}

/// The repository's `description` file, unless it is git's placeholder.
pub fn description(repo_dir: &Path) -> String {
    let text = std::fs::read_to_string(repo_dir.join("description")).unwrap_or_default();
    let text = text.trim();
    if text.starts_with("Unnamed repository;") {
        String::new()
    } else {
        text.to_string()
    }
}

/// The branch HEAD points at and its commit; `None` for an empty repository.
/// Redirect `/{repo}/-/{section}` to the same section at the default branch.
pub async fn to_default_branch(
    st: AppState,
    repo: String,
    section: &'static str,
) -> axum::response::Response {
    use axum::response::{IntoResponse as _, Redirect};
    let app = st.app.clone();
    crate::http::view::blocking(&app, move || {
        let ctx = open(&st.app, &repo)?;
        match default_branch(&ctx.git) {
            Some((branch, _)) => Ok(Redirect::to(&format!(
                "/{}/-/{section}/{}",
                ctx.name(),
                crate::http::view::url_path(&branch)
            ))
            .into_response()),
            None => Err(PageError::Missing("This repository is empty.".into())),
        }
    })
    .await
}

/// HEAD's branch and commit; when HEAD names a branch that does not exist
/// (a repository pushed before HEAD was repaired on push), an existing
/// branch instead: `main`, else `master`, else the first by name, so such a
/// repository does not look empty.
pub fn default_branch(git: &Repository) -> Option<(String, Oid)> {
    if let Ok(head) = git.head() {
        let oid = head.peel_to_commit().ok()?.id();
        let name = head
            .shorthand()
            .ok()
            .map(str::to_string)
            .unwrap_or_else(|| oid.to_string());
        return Some((name, oid));
    }
    let mut branches: Vec<(String, Oid)> = git
        .branches(Some(git2::BranchType::Local))
        .ok()?
        .filter_map(|b| {
            let (branch, _) = b.ok()?;
            let name = branch.name().ok()??.to_string();
            let oid = branch.get().peel_to_commit().ok()?.id();
            Some((name, oid))
        })
        .collect();
    branches.sort();
    let preferred = ["main", "master"]
        .iter()
        .find_map(|want| branches.iter().position(|(n, _)| n == want));
    let pick = preferred.unwrap_or(0);
    (!branches.is_empty()).then(|| branches.swap_remove(pick))
}

/// A commit named at the start of a URL tail, and what follows it.
pub struct RevPath {
    /// The ref as written in the URL (`main`, `feature/x`, `v1.0`, an id).
    pub rev: String,
    pub commit: Oid,
    /// The rest of the tail (a path inside the tree), without slashes at
    /// either end; empty for the root.
    pub path: String,
}

/// Split `tail` (`feature/x/src/main.rs`) into a revision and a path. The
/// revision is the shortest leading run of segments that names a branch, a
/// tag, `HEAD` or (one segment) a commit id of 4 to 40 hex digits. Branch
/// names cannot overlap (`a` and `a/b` cannot both exist), so the first
/// match is the only one among branches.
pub fn resolve_rev_path(git: &Repository, tail: &str) -> Option<RevPath> {
    let segments: Vec<&str> = tail.split('/').filter(|s| !s.is_empty()).collect();
    for take in 1..=segments.len() {
        let rev = segments[..take].join("/");
        if let Some(commit) = resolve_rev(git, &rev, take == 1) {
            return Some(RevPath {
                rev,
                commit,
                path: segments[take..].join("/"),
            });
        }
    }
    None
}

/// A branch, tag, `HEAD` or (if `allow_id`) commit id prefix, peeled to a
/// commit.
fn resolve_rev(git: &Repository, rev: &str, allow_id: bool) -> Option<Oid> {
    let peel = |name: &str| {
        git.find_reference(name)
            .ok()
            .and_then(|r| r.peel_to_commit().ok())
            .map(|c| c.id())
    };
    if rev == "HEAD" {
        return peel("HEAD");
    }
    if git2::Reference::is_valid_name(&format!("refs/heads/{rev}")) {
        if let Some(oid) =
            peel(&format!("refs/heads/{rev}")).or_else(|| peel(&format!("refs/tags/{rev}")))
        {
            return Some(oid);
        }
    }
    if allow_id && (4..=40).contains(&rev.len()) && rev.bytes().all(|b| b.is_ascii_hexdigit()) {
        return git
            .find_object_by_prefix(rev, Some(ObjectType::Commit))
            .ok()
            .map(|o| o.id())
            .filter(|id| reachable(git, *id));
    }
    None
}

/// Whether some ref of `git` reaches commit `id` (`crate::wants`): a
/// commit deleted or force-pushed away is shown by no page; it answers
/// 404 as an unknown id does, although its objects stay until
/// maintenance prunes them.
pub fn reachable(git: &Repository, id: Oid) -> bool {
    crate::wants::reachable(git, id)
}

/// Branch names, most recently committed first.
pub fn branches(git: &Repository, limit: usize) -> anyhow::Result<Vec<BranchRow>> {
    let mut rows = Vec::new();
    for branch in git.branches(Some(git2::BranchType::Local))? {
        let (branch, _) = branch?;
        let Ok(Some(name)) = branch.name().map(|n| n.map(str::to_string)) else {
            continue;
        };
        let Ok(commit) = branch.get().peel_to_commit() else {
            continue;
        };
        rows.push(BranchRow {
            url: crate::http::view::url_path(&name),
            name,
            time: commit.time().seconds(),
            when: crate::http::view::fmt_git_time(commit.time()),
        });
    }
    rows.sort_by(|a, b| b.time.cmp(&a.time).then(a.name.cmp(&b.name)));
    rows.truncate(limit);
    Ok(rows)
}

/// One branch in a list.
pub struct BranchRow {
    pub name: String,
    /// `name`, escaped for a URL path.
    pub url: String,
    time: i64,
    pub when: String,
}

/// One commit in a list (summary page, log).
pub struct CommitRow {
    pub id: String,
    pub short: String,
    pub summary: String,
    pub author: String,
    pub when: String,
}

impl CommitRow {
    pub fn of(commit: &git2::Commit) -> CommitRow {
        let id = commit.id().to_string();
        CommitRow {
            short: crate::http::view::short_id(&id),
            id,
            summary: commit.summary().ok().flatten().unwrap_or("").to_string(),
            author: commit.author().name().unwrap_or("").to_string(),
            when: crate::http::view::fmt_git_time(commit.time()),
        }
    }
}

/// Up to `limit` commits reachable from `from`, newest first, after
/// skipping `skip`, in `git log`'s default order (by committer date, as
/// parents are reached).
///
/// The walk is incremental, like `git log`'s: it parses the `skip + limit`
/// commits it hands out and their parents, never the rest of the history
/// (libgit2 sorts the whole history first for any `Sort` but `NONE`, whose
/// walk already goes by date). libgit2 reads parents and dates from a
/// single-file commit-graph (`objects/info/commit-graph`) when there is
/// one; deep log pages go through `git rev-list` instead ([`commit_ids`]),
/// which also reads the split commit-graph chains maintenance writes.
pub fn commits(
    git: &Repository,
    from: Oid,
    skip: usize,
    limit: usize,
) -> anyhow::Result<Vec<CommitRow>> {
    let mut walk = git.revwalk()?;
    walk.set_sorting(git2::Sort::NONE)?;
    walk.push(from)?;
    let mut rows = Vec::with_capacity(limit);
    for oid in walk.skip(skip).take(limit) {
        rows.push(CommitRow::of(&git.find_commit(oid?)?));
    }
    Ok(rows)
}

/// The rows of `ids`, in order.
pub fn commit_rows(git: &Repository, ids: &[Oid]) -> anyhow::Result<Vec<CommitRow>> {
    ids.iter()
        .map(|id| Ok(CommitRow::of(&git.find_commit(*id)?)))
        .collect()
}

/// The ids `git rev-list --skip=<skip> --max-count=<limit> <from>` lists:
/// the same commits in the same order as [`commits`], walked by git
/// itself, which reads every kind of commit-graph. The caller holds a git
/// process slot.
pub fn commit_ids(
    repo_dir: &Path,
    from: Oid,
    skip: usize,
    limit: usize,
) -> anyhow::Result<Vec<Oid>> {
    let out = crate::maintenance::git::output(crate::maintenance::git::git(repo_dir).args([
        "rev-list".to_string(),
        format!("--skip={skip}"),
        format!("--max-count={limit}"),
        "--end-of-options".to_string(),
        from.to_string(),
    ]))?;
    String::from_utf8_lossy(&out)
        .lines()
        .map(|l| Ok(Oid::from_str(l.trim())?))
        .collect()
}
