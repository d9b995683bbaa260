//! Patches held by the server (push-to-review): every patch decision as a
//! plain function over a `crate::sql::Connection`, with `now` (unix seconds)
//! passed in. Writes run inside the caller's transaction (the writer's
//! SAVEPOINT, or a push hook's own IMMEDIATE transaction), check everything
//! before they change anything, and append their event row (`patch.opened`,
//! `patch.revised`, `patch.reviewed`, `patch.commented`, `patch.closed`,
//! `patch.reopened`, `patch.merged`, `patch.linked`) through
//! `event_log::append` in that same transaction.
//!
//! What this module does not do: authorization, the clock, threads, or
//! git. The caller reads git (a revision's head, where it forks from the
//! server's base branch, whether an inline comment's path exists) and hands
//! the results in; this module keeps the record and its rules. Ids are
//! random 160-bit hex, in the same space as the root commit ids of patch
//! DAGs, so imported patches keep their ids.
//!
//! Revisions are numbered from 1 in the order the server accepted them.
//! A vote is on one revision; a principal's later vote on the same revision
//! replaces the earlier one (the event log keeps both; `patch.reviewed`
//! names the replaced vote). Merged is final; a closed patch can be
//! reopened.

use crate::sql::{Connection, OptionalExtension};
use serde::Serialize;
use serde_json::json;

pub use super::issues::{check_body, check_title};
use super::objects::{self, ms, person_at, person_json, short, Filter, PATCHES};
pub use super::objects::{new_id, Person};

/// Default and largest page of `list` (the largest is the verbs' bound).
pub const DEFAULT_PAGE: usize = 50;
pub const MAX_PAGE: usize = collab_proto::limits::MAX_PAGE;
/// Longest path of an inline comment, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;

/// Where a patch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchStatus {
    Open,
    Merged,
    Closed,
}

impl PatchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PatchStatus::Open => "open",
            PatchStatus::Merged => "merged",
            PatchStatus::Closed => "closed",
        }
    }

    fn parse(s: &str) -> PatchStatus {
        match s {
            "merged" => PatchStatus::Merged,
            "closed" => PatchStatus::Closed,
            _ => PatchStatus::Open,
        }
    }
}

/// A vote's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Approve,
    RequestChanges,
    Comment,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::RequestChanges => "request_changes",
            Verdict::Comment => "comment",
        }
    }

    pub fn parse(s: &str) -> Option<Verdict> {
        match s {
            "approve" => Some(Verdict::Approve),
            "request_changes" => Some(Verdict::RequestChanges),
            "comment" => Some(Verdict::Comment),
            _ => None,
        }
    }
}

/// One patch row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub repo: String,
    pub id: String,
    pub title: String,
    pub body: String,
    /// The base branch's short name (`main`).
    pub base: String,
    pub author: Person,
    /// Unix milliseconds.
    pub created_ms: i64,
    pub updated_ms: i64,
    pub status: PatchStatus,
    pub merge: Option<Merge>,
    pub imported: bool,
    pub revision_count: i64,
    pub comment_count: i64,
    /// The change id its commits carry (a `Change-Id: I<40 hex>` trailer
    /// or a Jujutsu `change-id` header), `None` for a patch opened without
    /// one.
    pub change_id: Option<String>,
    /// The full id of the patch it is stacked on (the patch of its head's
    /// parent commit), `None` at the bottom of a stack or outside one.
    pub depends_on: Option<String>,
}

/// How a patch was merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merge {
    /// The commit of the base branch that brought the patch in.
    pub commit: String,
    /// The principal who merged (or pushed the merge).
    pub by: String,
    pub at_ms: i64,
}

/// One revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    pub n: i64,
    pub head: String,
    /// Where the revision forks from the base branch.
    pub base_commit: String,
    /// The server's base branch tip when the revision was pushed (`None`
    /// for imported revisions).
    pub base_tip: Option<String>,
    pub author: Person,
    pub at_ms: i64,
    /// Who held the live leases of the patch's linked issues when the
    /// revision was pushed (a merge rule may treat them as its authors).
    pub lease_holders: Vec<String>,
}

/// A vote that counts (the principal's latest on that revision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub id: String,
    pub revision: i64,
    pub author: Person,
    pub verdict: Verdict,
    pub body: String,
    pub at_ms: i64,
}

/// Where an inline comment points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inline {
    pub path: String,
    pub line: Option<i64>,
}

/// A comment, general or inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub id: String,
    pub position: i64,
    pub author: Person,
    pub at_ms: i64,
    pub body: String,
    /// The revision it was made on (always set for inline comments).
    pub revision: Option<i64>,
    pub inline: Option<Inline>,
}

/// Everything `show` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchDetail {
    pub patch: Patch,
    pub revisions: Vec<Revision>,
    /// By revision, then time.
    pub reviews: Vec<Review>,
    pub comments: Vec<Comment>,
    /// Full ids of linked issues of the same repository, sorted.
    pub issues: Vec<String>,
    /// Who holds, or last held, the lease of an issue linked to the patch
    /// now, sorted: read at every `show`, so an issue linked after a push
    /// counts as one linked before it (`lease_holder_is_author`).
    pub linked_lease_holders: Vec<String>,
    /// The status now of the patch it depends on (`patch.depends_on`),
    /// `None` when it depends on none (or that patch is gone).
    pub depends_on_status: Option<PatchStatus>,
}

impl PatchDetail {
    pub fn latest(&self) -> Option<&Revision> {
        self.revisions.last()
    }

    /// The votes on revision `n`.
    pub fn votes_on(&self, n: i64) -> impl Iterator<Item = &Review> {
        self.reviews.iter().filter(move |r| r.revision == n)
    }
}

/// What a write produced: the patch, the revision it concerns (if any),
/// the id of what it created (comment, vote), and its event's `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub patch: String,
    pub revision: Option<i64>,
    pub event: Option<String>,
    pub seq: i64,
}

/// Why a patch operation was refused. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("invalid patch id '{0}': expected 4 to 40 hex digits")]
    InvalidId(String),
    #[error("no patch matches '{0}'")]
    NotFound(String),
    #[error("patch id '{prefix}' is ambiguous; candidates: {}", candidates.join(", "))]
    Ambiguous {
        prefix: String,
        candidates: Vec<String>,
    },
    /// Bad input or a write that does not apply: the message is the reply.
    #[error("{0}")]
    Invalid(String),
    /// The merge rule forbids the merge; the message says why.
    #[error("merge refused: {0}")]
    Rule(String),
    #[error(transparent)]
    Issue(#[from] super::issues::IssueError),
    #[error(transparent)]
    Sql(#[from] crate::sql::Error),
}

impl PatchError {
    /// Whether a statement failed (the database's error, busy or not),
    /// rather than a decision refusing the write.
    pub fn is_sql(&self) -> bool {
        matches!(
            self,
            PatchError::Sql(_) | PatchError::Issue(super::issues::IssueError::Sql(_))
        )
    }

    /// Whether the write failed only because another transaction held what
    /// it needed (the writer runs a repository write again later).
    pub fn is_busy(&self) -> bool {
        match self {
            PatchError::Issue(e) => e.is_busy(),
            PatchError::Sql(e) => e.is_busy(),
            _ => false,
        }
    }
}

type Result<T, E = PatchError> = std::result::Result<T, E>;

fn invalid(message: impl Into<String>) -> PatchError {
    PatchError::Invalid(message.into())
}

objects::from_unresolved!(PatchError);

fn from_issue_rule(e: super::issues::IssueError) -> PatchError {
    match e {
        super::issues::IssueError::Invalid(m) => PatchError::Invalid(m),
        other => PatchError::Issue(other),
    }
}

/// A commit id as git prints it: 40 (SHA-1) or 64 (SHA-256) lowercase hex.
fn check_oid(what: &str, oid: &str) -> Result<()> {
    if (oid.len() == 40 || oid.len() == 64)
        && oid.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(())
    } else {
        Err(invalid(format!("{what} is not a full commit id")))
    }
}

/// A base branch name: what follows `refs/heads/`, as git allows it
/// (checked by the caller with git); here only non-empty and one line.
fn check_base(base: &str) -> Result<()> {
    if base.is_empty()
        || base.len() > 255
        || base
            .chars()
            .any(|c| c.is_control() || c == ' ' || collab_record::text::is_hidden(c))
    {
        return Err(invalid(format!(
            "invalid base branch '{}'",
            base.escape_default()
        )));
    }
    Ok(())
}

fn check_path(path: &str) -> Result<()> {
    if path.is_empty()
        || path.len() > MAX_PATH_BYTES
        || path.chars().any(char::is_control)
        || path.starts_with('/')
    {
        return Err(invalid(format!(
            "invalid path '{}': a path inside the repository, one line",
            path.escape_default()
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------- resolving

/// A full 40-hex id or a unique prefix of 4+ hex digits (any case) to the
/// full id of a patch of `repo`.
pub fn resolve(conn: &Connection, repo: &str, id_or_prefix: &str) -> Result<String> {
    Ok(objects::resolve(conn, PATCHES, repo, id_or_prefix)?)
}

// ---------------------------------------------------------------- reads

const PATCH_COLUMNS: &str = "repo, id, title, body, base, author, author_name, author_key, \
     created_ms, updated_ms, status, merged_commit, merged_by, merged_ms, imported, \
     revision_count, comment_count, change_id, depends_on";

fn patch_from_row(r: &crate::sql::Row<'_>) -> crate::sql::Result<Patch> {
    let status: String = r.get(10)?;
    let merged_commit: Option<String> = r.get(11)?;
    Ok(Patch {
        repo: r.get(0)?,
        id: r.get(1)?,
        title: r.get(2)?,
        body: r.get(3)?,
        base: r.get(4)?,
        author: person_at(r, 5)?,
        created_ms: r.get(8)?,
        updated_ms: r.get(9)?,
        status: PatchStatus::parse(&status),
        merge: match merged_commit {
            Some(commit) => Some(Merge {
                commit,
                by: r.get::<_, Option<String>>(12)?.unwrap_or_default(),
                at_ms: r.get::<_, Option<i64>>(13)?.unwrap_or_default(),
            }),
            None => None,
        },
        imported: r.get::<_, i64>(14)? != 0,
        revision_count: r.get(15)?,
        comment_count: r.get(16)?,
        change_id: r.get(17)?,
        depends_on: r.get(18)?,
    })
}

/// One patch by full id.
pub fn get(conn: &Connection, repo: &str, id: &str) -> crate::sql::Result<Option<Patch>> {
    conn.prepare_cached(&format!(
        "SELECT {PATCH_COLUMNS} FROM patches WHERE repo = ?1 AND id = ?2"
    ))?
    .query_row([repo, id], patch_from_row)
    .optional()
}

/// Whether the server holds patch `id` (full id) of `repo`.
pub fn exists(conn: &Connection, repo: &str, id: &str) -> crate::sql::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM patches WHERE repo = ?1 AND id = ?2")?
        .exists([repo, id])
}

/// The revisions of a patch, in order.
pub fn revisions(conn: &Connection, repo: &str, id: &str) -> crate::sql::Result<Vec<Revision>> {
    let mut stmt = conn.prepare_cached(
        "SELECT n, head, base_commit, base_tip, author, author_name, author_key, at_ms,
                lease_holders
         FROM patch_revisions WHERE repo = ?1 AND patch_id = ?2 ORDER BY n",
    )?;
    let rows = stmt.query_map([repo, id], |r| {
        let holders: Option<String> = r.get(8)?;
        Ok(Revision {
            n: r.get(0)?,
            head: r.get(1)?,
            base_commit: r.get(2)?,
            base_tip: r.get(3)?,
            author: person_at(r, 4)?,
            at_ms: r.get(7)?,
            lease_holders: holders
                .and_then(|h| serde_json::from_str(&h).ok())
                .unwrap_or_default(),
        })
    })?;
    rows.collect()
}

/// A patch by id or prefix, with its revisions, votes, comments and
/// linked issues.
pub fn show(conn: &Connection, repo: &str, id_or_prefix: &str) -> Result<PatchDetail> {
    let id = resolve(conn, repo, id_or_prefix)?;
    let patch = get(conn, repo, &id)?.ok_or_else(|| PatchError::NotFound(id.clone()))?;
    let revisions = revisions(conn, repo, &id)?;
    let reviews = conn
        .prepare_cached(
            "SELECT id, revision, author, author_name, author_key, verdict, body, at_ms
             FROM patch_reviews WHERE repo = ?1 AND patch_id = ?2 ORDER BY revision, at_ms, id",
        )?
        .query_map([repo, &id], |r| {
            let verdict: String = r.get(5)?;
            Ok(Review {
                id: r.get(0)?,
                revision: r.get(1)?,
                author: person_at(r, 2)?,
                verdict: Verdict::parse(&verdict).unwrap_or(Verdict::Comment),
                body: r.get(6)?,
                at_ms: r.get(7)?,
            })
        })?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    let comments = conn
        .prepare_cached(
            "SELECT id, position, author, author_name, author_key, at_ms, body, revision, path,
                    line
             FROM patch_comments WHERE repo = ?1 AND patch_id = ?2 ORDER BY position",
        )?
        .query_map([repo, &id], |r| {
            let path: Option<String> = r.get(8)?;
            let line: Option<i64> = r.get(9)?;
            Ok(Comment {
                id: r.get(0)?,
                position: r.get(1)?,
                author: person_at(r, 2)?,
                at_ms: r.get(5)?,
                body: r.get(6)?,
                revision: r.get(7)?,
                inline: path.map(|path| Inline { path, line }),
            })
        })?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    let issues = conn
        .prepare_cached(
            "SELECT issue_id FROM patch_issues WHERE repo = ?1 AND patch_id = ?2 ORDER BY issue_id",
        )?
        .query_map([repo, &id], |r| r.get(0))?
        .collect::<crate::sql::Result<Vec<String>>>()?;
    let linked_lease_holders = linked_lease_holders(conn, repo, &id)?;
    let depends_on_status = match &patch.depends_on {
        Some(below) => get(conn, repo, below)?.map(|p| p.status),
        None => None,
    };
    Ok(PatchDetail {
        patch,
        revisions,
        reviews,
        comments,
        issues,
        linked_lease_holders,
        depends_on_status,
    })
}

/// The holders of the tenures (live, or expired and not yet reaped) and the
/// last holders (`lease_tokens`, kept after a release) of the leases of the
/// issues `patch_id` is linked to now. A revision records who held them at
/// its push; a link made later, perhaps after the lease was released, is
/// only seen here.
fn linked_lease_holders(
    conn: &Connection,
    repo: &str,
    patch_id: &str,
) -> crate::sql::Result<Vec<String>> {
    let mut holders = conn
        .prepare_cached(
            "SELECT l.holder FROM patch_issues i
             JOIN leases l ON l.repo = i.repo AND l.issue_id = i.issue_id
             WHERE i.repo = ?1 AND i.patch_id = ?2
             UNION
             SELECT t.last_holder FROM patch_issues i
             JOIN lease_tokens t ON t.repo = i.repo AND t.issue_id = i.issue_id
             WHERE i.repo = ?1 AND i.patch_id = ?2 AND t.last_holder IS NOT NULL",
        )?
        .query_map([repo, patch_id], |r| r.get(0))?
        .collect::<crate::sql::Result<Vec<String>>>()?;
    holders.sort();
    holders.dedup();
    Ok(holders)
}

/// Which patches `list` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFilter {
    Open,
    Merged,
    Closed,
    All,
}

impl StateFilter {
    pub fn parse(s: &str) -> Option<StateFilter> {
        match s {
            "open" => Some(StateFilter::Open),
            "merged" => Some(StateFilter::Merged),
            "closed" => Some(StateFilter::Closed),
            "all" => Some(StateFilter::All),
            _ => None,
        }
    }

    /// The status `list` keeps (`None`: any).
    fn status(self) -> Option<&'static str> {
        match self {
            StateFilter::Open => Some("open"),
            StateFilter::Merged => Some("merged"),
            StateFilter::Closed => Some("closed"),
            StateFilter::All => None,
        }
    }
}

/// A `list` request: newest first, ties by id; `after` is the last
/// `(created_ms, id)` of the previous page.
#[derive(Debug, Clone)]
pub struct ListQuery {
    pub state: StateFilter,
    pub limit: usize,
    pub after: Option<(i64, String)>,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery {
            state: StateFilter::Open,
            limit: DEFAULT_PAGE,
            after: None,
        }
    }
}

/// One page of patches, and whether there are more.
#[derive(Debug, Clone)]
pub struct Page {
    pub patches: Vec<Patch>,
    pub more: bool,
}

/// Patches of `repo`, newest first (ties by id), filtered and paged.
pub fn list(conn: &Connection, repo: &str, query: &ListQuery) -> Result<Page> {
    let limit = query.limit.clamp(1, MAX_PAGE);
    let mut f = Filter::new(PATCH_COLUMNS, PATCHES, "", repo);
    f.status(query.state.status());
    if let Some((created_ms, id)) = &query.after {
        f.after(*created_ms, id);
    }
    f.page(limit, None);
    let mut patches = conn
        .prepare_cached(&f.sql)?
        .query_map(crate::sql::params_from_iter(f.params), patch_from_row)?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    let more = objects::cut_page(&mut patches, limit);
    Ok(Page { patches, more })
}

/// How many patches of `repo` `state` admits (an index range count).
pub fn count(conn: &Connection, repo: &str, state: StateFilter) -> crate::sql::Result<i64> {
    let mut f = Filter::new("COUNT(*)", PATCHES, "", repo);
    f.status(state.status());
    conn.prepare_cached(&f.sql)?
        .query_row(crate::sql::params_from_iter(f.params), |r| r.get(0))
}

/// The patches of `repo` linked to issue `issue_id` (full id), newest
/// first.
pub fn for_issue(conn: &Connection, repo: &str, issue_id: &str) -> crate::sql::Result<Vec<Patch>> {
    let columns = PATCH_COLUMNS
        .split(", ")
        .map(|c| format!("p.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {columns} FROM patch_issues l JOIN patches p
           ON p.repo = l.repo AND p.id = l.patch_id
         WHERE l.repo = ?1 AND l.issue_id = ?2 ORDER BY p.created_ms DESC, p.id"
    ))?;
    let rows = stmt.query_map([repo, issue_id], patch_from_row)?;
    rows.collect()
}

/// The votes that count on the latest revision of patch `id`:
/// `(approvals, changes requested)`.
pub fn latest_votes(conn: &Connection, repo: &str, id: &str) -> crate::sql::Result<(i64, i64)> {
    conn.prepare_cached(
        "SELECT COUNT(CASE WHEN r.verdict = 'approve' THEN 1 END),
                COUNT(CASE WHEN r.verdict = 'request_changes' THEN 1 END)
         FROM patches p JOIN patch_reviews r
           ON r.repo = p.repo AND r.patch_id = p.id AND r.revision = p.revision_count
         WHERE p.repo = ?1 AND p.id = ?2",
    )?
    .query_row([repo, id], |r| Ok((r.get(0)?, r.get(1)?)))
}

/// The open patches of `repo` that target `base`, with their latest
/// revision's head: what the push-time merge scan looks at.
pub fn open_on_base(
    conn: &Connection,
    repo: &str,
    base: &str,
) -> crate::sql::Result<Vec<(String, String)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT p.id, r.head FROM patches p JOIN patch_revisions r
           ON r.repo = p.repo AND r.patch_id = p.id AND r.n = p.revision_count
         WHERE p.repo = ?1 AND p.base = ?2 AND p.status = 'open' ORDER BY p.id",
    )?;
    let rows = stmt.query_map([repo, base], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// The open patch of `repo` for `base` whose commits carry change id
/// `change_id`, with its latest revision's head (the index
/// `patches_change_id`). Two open patches with one change id cannot be
/// made by a push; should an import or a hand edit have made them, the
/// oldest wins.
pub fn open_by_change_id(
    conn: &Connection,
    repo: &str,
    base: &str,
    change_id: &str,
) -> crate::sql::Result<Option<(String, String)>> {
    conn.prepare_cached(
        "SELECT p.id, r.head FROM patches p JOIN patch_revisions r
           ON r.repo = p.repo AND r.patch_id = p.id AND r.n = p.revision_count
         WHERE p.repo = ?1 AND p.change_id = ?2 AND p.base = ?3 AND p.status = 'open'
         ORDER BY p.created_ms, p.id LIMIT 1",
    )?
    .query_row([repo, change_id, base], |r| Ok((r.get(0)?, r.get(1)?)))
    .optional()
}

/// Restack patch `id` (full id) on `depends_on` (a stack pushed again:
/// reordered, or a lower patch replaced). Returns whether it changed.
pub fn set_depends_on(
    conn: &Connection,
    repo: &str,
    id: &str,
    depends_on: Option<&str>,
) -> crate::sql::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE patches SET depends_on = ?3
             WHERE repo = ?1 AND id = ?2 AND depends_on IS DISTINCT FROM ?3",
        )?
        .execute(crate::sql::params![repo, id, depends_on])?;
    Ok(changed == 1)
}

// ---------------------------------------------------------------- writes

/// Who writes, where: shared by every write.
#[derive(Debug, Clone, Copy)]
pub struct WriteCtx<'a> {
    /// The repository's canonical name (`team/app.git`).
    pub repo: &'a str,
    pub actor: &'a Person,
    /// `max_issue_body`, in bytes (patch bodies and comments share it).
    pub max_body: usize,
    /// Unix seconds.
    pub now: i64,
}

/// A revision as the caller found it in git.
#[derive(Debug, Clone)]
pub struct NewRevision {
    pub head: String,
    /// Where `head` forks from the base branch.
    pub base_commit: String,
    /// The server's base branch tip when the push came in.
    pub base_tip: Option<String>,
}

/// A new patch.
#[derive(Debug, Clone)]
pub struct NewPatch {
    pub title: String,
    pub body: String,
    pub base: String,
    pub revision: NewRevision,
    /// Issues (ids or prefixes in the same repository) to link.
    pub issues: Vec<String>,
    /// The change id of its head commit, if it has one.
    pub change_id: Option<String>,
    /// The patch (full id) it is stacked on.
    pub depends_on: Option<String>,
}

fn append_event(
    conn: &Connection,
    w: &WriteCtx<'_>,
    kind: &str,
    id: &str,
    payload: serde_json::Value,
) -> crate::sql::Result<i64> {
    objects::append_event(conn, kind, w.repo, id, Some(w.actor), payload, w.now)
}

/// Resolve the patch and return its row.
fn target(conn: &Connection, repo: &str, id_or_prefix: &str) -> Result<Patch> {
    let id = resolve(conn, repo, id_or_prefix)?;
    get(conn, repo, &id)?.ok_or(PatchError::NotFound(id))
}

fn require_open(patch: &Patch, doing: &str) -> Result<()> {
    if patch.status != PatchStatus::Open {
        return Err(invalid(format!(
            "cannot {doing} patch {}: it is {}",
            short(&patch.id),
            patch.status.as_str()
        )));
    }
    Ok(())
}

/// Record a write on `patch`: its time and a new version.
fn touch(conn: &Connection, patch: &Patch, now: i64) -> crate::sql::Result<()> {
    objects::touch(conn, PATCHES, &patch.repo, &patch.id, patch.updated_ms, now)
}

/// The end of every write on an existing patch: record the write
/// ([`touch`]) and append its event `kind` with `payload`; returns the
/// event's `seq`.
fn record(
    conn: &Connection,
    w: &WriteCtx<'_>,
    patch: &Patch,
    kind: &str,
    payload: serde_json::Value,
) -> crate::sql::Result<i64> {
    touch(conn, patch, w.now)?;
    append_event(conn, w, kind, &patch.id, payload)
}

/// A revision row (its patch's `revision_count` is the caller's).
const INSERT_REVISION: &str =
    "INSERT INTO patch_revisions (repo, patch_id, n, head, base_commit, base_tip, author,
                                  author_name, author_key, at_ms, event_id)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

/// A vote row, replacing the author's earlier vote on that revision.
const UPSERT_REVIEW: &str =
    "INSERT INTO patch_reviews (repo, patch_id, revision, author, author_name, author_key,
                                id, verdict, body, at_ms)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
     ON CONFLICT (repo, patch_id, revision, author) DO UPDATE SET
       author_name = excluded.author_name, author_key = excluded.author_key,
       id = excluded.id, verdict = excluded.verdict, body = excluded.body,
       at_ms = excluded.at_ms";

/// A comment row.
const INSERT_COMMENT: &str =
    "INSERT INTO patch_comments (repo, patch_id, position, id, author, author_name,
                                 author_key, at_ms, body, revision, path, line)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

fn check_revision(r: &NewRevision) -> Result<()> {
    check_oid("head", &r.head)?;
    check_oid("base commit", &r.base_commit)?;
    if let Some(tip) = &r.base_tip {
        check_oid("base tip", tip)?;
    }
    if r.head == r.base_commit {
        return Err(invalid(
            "nothing to propose: the head is already in the base branch",
        ));
    }
    Ok(())
}

fn insert_revision(
    conn: &Connection,
    w: &WriteCtx<'_>,
    patch_id: &str,
    n: i64,
    r: &NewRevision,
    event_id: Option<&str>,
) -> crate::sql::Result<()> {
    conn.prepare_cached(INSERT_REVISION)?
        .execute(crate::sql::params![
            w.repo,
            patch_id,
            n,
            r.head,
            r.base_commit,
            r.base_tip,
            w.actor.principal,
            w.actor.name,
            w.actor.key,
            ms(w.now),
            event_id
        ])?;
    conn.prepare_cached("UPDATE patches SET revision_count = ?3 WHERE repo = ?1 AND id = ?2")?
        .execute(crate::sql::params![w.repo, patch_id, n])?;
    Ok(())
}

/// Record on revision `n` who holds the live leases of the patch's linked
/// issues now (at its push).
fn record_lease_holders(
    conn: &Connection,
    w: &WriteCtx<'_>,
    patch_id: &str,
    n: i64,
) -> crate::sql::Result<()> {
    let issues: Vec<String> = {
        let mut stmt = conn.prepare_cached(
            "SELECT issue_id FROM patch_issues WHERE repo = ?1 AND patch_id = ?2",
        )?;
        let rows = stmt.query_map([w.repo, patch_id], |r| r.get(0))?;
        rows.collect::<crate::sql::Result<_>>()?
    };
    let mut holders = Vec::new();
    for issue in &issues {
        if let Some(lease) = crate::leases::current_in(conn, w.repo, issue, w.now)? {
            holders.push(lease.holder);
        }
    }
    if holders.is_empty() {
        return Ok(());
    }
    holders.sort();
    holders.dedup();
    conn.prepare_cached(
        "UPDATE patch_revisions SET lease_holders = ?4 WHERE repo = ?1 AND patch_id = ?2 AND n = ?3",
    )?
    .execute(crate::sql::params![
        w.repo,
        patch_id,
        n,
        serde_json::to_string(&holders).unwrap_or_default()
    ])?;
    Ok(())
}

/// Resolve issue ids or prefixes of the same repository to full ids.
fn resolve_issues(conn: &Connection, repo: &str, issues: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for issue in issues {
        out.push(super::issues::resolve(conn, repo, issue)?);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Open a patch proposing `new.revision` for branch `new.base`: the patch
/// and its revision 1, linked to `new.issues`.
pub fn open(conn: &Connection, w: &WriteCtx<'_>, new: &NewPatch) -> Result<Written> {
    let title = check_title(&new.title).map_err(from_issue_rule)?;
    check_body("body", &new.body, w.max_body).map_err(from_issue_rule)?;
    check_base(&new.base)?;
    check_revision(&new.revision)?;
    let issues = resolve_issues(conn, w.repo, &new.issues)?;
    let id = new_id();
    conn.prepare_cached(
        "INSERT INTO patches (repo, id, title, body, base, author, author_name, author_key,
                              created_ms, updated_ms, status, change_id, depends_on)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, 'open', ?10, ?11)",
    )?
    .execute(crate::sql::params![
        w.repo,
        id,
        title,
        new.body,
        new.base,
        w.actor.principal,
        w.actor.name,
        w.actor.key,
        ms(w.now),
        new.change_id,
        new.depends_on
    ])?;
    insert_revision(conn, w, &id, 1, &new.revision, None)?;
    for issue in &issues {
        insert_issue_link(conn, w.repo, &id, issue)?;
    }
    record_lease_holders(conn, w, &id, 1)?;
    let seq = append_event(
        conn,
        w,
        "patch.opened",
        &id,
        json!({
            "title": title,
            "body": new.body,
            "base": new.base,
            "revision": revision_json(1, &new.revision),
            "issues": issues,
            "author": person_json(w.actor),
            "change_id": new.change_id,
            "depends_on": new.depends_on,
        }),
    )?;
    Ok(Written {
        patch: id,
        revision: Some(1),
        event: None,
        seq,
    })
}

fn revision_json(n: i64, r: &NewRevision) -> serde_json::Value {
    json!({ "n": n, "head": r.head, "base_commit": r.base_commit, "base_tip": r.base_tip })
}

fn insert_issue_link(conn: &Connection, repo: &str, patch: &str, issue: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "INSERT INTO patch_issues (repo, patch_id, issue_id) VALUES (?1, ?2, ?3)
             ON CONFLICT DO NOTHING",
        )?
        .execute([repo, patch, issue])?
        == 1)
}

/// Who besides a patch's author may add a revision to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revisers {
    /// Its author only (`others_may_revise = false`, the default).
    AuthorOnly,
    /// Anyone the caller let write (`others_may_revise = true`, or the
    /// pusher holds Rewind on the repository).
    Anyone,
}

/// Add a revision to an open patch. `issues` are linked too (those not
/// linked yet, each recorded as `patch.linked`). Only the patch's author
/// may, unless `revisers` is [`Revisers::Anyone`].
pub fn revise(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    revision: &NewRevision,
    issues: &[String],
    revisers: Revisers,
) -> Result<Written> {
    check_revision(revision)?;
    let patch = target(conn, w.repo, id_or_prefix)?;
    require_open(&patch, "revise")?;
    if revisers == Revisers::AuthorOnly && patch.author.principal != w.actor.principal {
        return Err(invalid(format!(
            "patch {} belongs to {}: only its author may push a revision (the repository's merge \
             rule has others_may_revise = false)",
            short(&patch.id),
            patch.author.name
        )));
    }
    let issues = resolve_issues(conn, w.repo, issues)?;
    if let Some(latest) = revisions(conn, w.repo, &patch.id)?.last() {
        if latest.head == revision.head {
            return Err(invalid(format!(
                "patch {} already proposes {} (revision {})",
                short(&patch.id),
                short(&revision.head),
                latest.n
            )));
        }
    }
    let n = patch.revision_count + 1;
    insert_revision(conn, w, &patch.id, n, revision, None)?;
    let mut seq = record(
        conn,
        w,
        &patch,
        "patch.revised",
        json!({ "revision": revision_json(n, revision) }),
    )?;
    for issue in &issues {
        if insert_issue_link(conn, w.repo, &patch.id, issue)? {
            seq = append_event(
                conn,
                w,
                "patch.linked",
                &patch.id,
                json!({ "issue": issue }),
            )?;
        }
    }
    record_lease_holders(conn, w, &patch.id, n)?;
    // A merge asked for an earlier revision was not asked for this one.
    if let Some(intent) = crate::merge_intents::get(conn, w.repo, &patch.id)? {
        let reason = format!(
            "revision {n} was pushed; the merge was queued for revision {}",
            intent.revision
        );
        if let Some(s) =
            crate::merge_intents::dequeue(conn, w.repo, &patch.id, Some(w.actor), &reason, w.now)?
        {
            seq = s;
        }
    }
    Ok(Written {
        patch: patch.id,
        revision: Some(n),
        event: None,
        seq,
    })
}

/// Link an issue of the same repository to a patch (any status).
pub fn link_issue(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    issue: &str,
) -> Result<Written> {
    let patch = target(conn, w.repo, id_or_prefix)?;
    let issue = super::issues::resolve(conn, w.repo, issue)?;
    if !insert_issue_link(conn, w.repo, &patch.id, &issue)? {
        return Err(invalid(format!(
            "patch {} is already linked to issue {}",
            short(&patch.id),
            short(&issue)
        )));
    }
    let seq = record(conn, w, &patch, "patch.linked", json!({ "issue": issue }))?;
    Ok(Written {
        patch: patch.id,
        revision: None,
        event: None,
        seq,
    })
}

/// Which revision a review or comment is on: `Some(n)` or the latest.
fn pick_revision(patch: &Patch, revision: Option<i64>) -> Result<i64> {
    match revision {
        None if patch.revision_count > 0 => Ok(patch.revision_count),
        None => Err(invalid("the patch has no revision")),
        Some(n) if n >= 1 && n <= patch.revision_count => Ok(n),
        Some(n) => Err(invalid(format!(
            "patch {} has no revision {n} (it has {})",
            short(&patch.id),
            patch.revision_count
        ))),
    }
}

/// Vote on revision `revision` (default: the latest) of an open patch.
/// The actor's earlier vote on that revision, if any, is replaced.
pub fn review(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    revision: Option<i64>,
    verdict: Verdict,
    body: &str,
) -> Result<Written> {
    check_body("review", body, w.max_body).map_err(from_issue_rule)?;
    let patch = target(conn, w.repo, id_or_prefix)?;
    require_open(&patch, "review")?;
    let n = pick_revision(&patch, revision)?;
    let replaces: Option<String> = conn
        .prepare_cached(
            "SELECT id FROM patch_reviews
             WHERE repo = ?1 AND patch_id = ?2 AND revision = ?3 AND author = ?4",
        )?
        .query_row(
            crate::sql::params![w.repo, patch.id, n, w.actor.principal],
            |r| r.get(0),
        )
        .optional()?;
    let review_id = new_id();
    conn.prepare_cached(UPSERT_REVIEW)?
        .execute(crate::sql::params![
            w.repo,
            patch.id,
            n,
            w.actor.principal,
            w.actor.name,
            w.actor.key,
            review_id,
            verdict.as_str(),
            body,
            ms(w.now)
        ])?;
    let seq = record(
        conn,
        w,
        &patch,
        "patch.reviewed",
        json!({
            "review": {"id": review_id, "revision": n, "verdict": verdict.as_str(), "body": body},
            "replaces": replaces,
        }),
    )?;
    Ok(Written {
        patch: patch.id,
        revision: Some(n),
        event: Some(review_id),
        seq,
    })
}

/// Comment on a patch (any status): general, or inline on `inline.path`
/// (and line) of revision `revision` (default: the latest). The caller has
/// checked that the path exists in that revision or its base.
pub fn comment(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    body: &str,
    revision: Option<i64>,
    inline: Option<&Inline>,
) -> Result<Written> {
    if body.trim().is_empty() {
        return Err(invalid("comment body is empty"));
    }
    check_body("comment", body, w.max_body).map_err(from_issue_rule)?;
    if let Some(inline) = inline {
        check_path(&inline.path)?;
        if inline.line.is_some_and(|l| l < 1) {
            return Err(invalid("line numbers start at 1"));
        }
    }
    let patch = target(conn, w.repo, id_or_prefix)?;
    let n = match (revision, inline) {
        (None, None) => None,
        _ => Some(pick_revision(&patch, revision)?),
    };
    let comment_id = new_id();
    let position =
        objects::touch_for_comment(conn, PATCHES, w.repo, &patch.id, patch.updated_ms, w.now)?;
    conn.prepare_cached(INSERT_COMMENT)?
        .execute(crate::sql::params![
            w.repo,
            patch.id,
            position,
            comment_id,
            w.actor.principal,
            w.actor.name,
            w.actor.key,
            ms(w.now),
            body,
            n,
            inline.map(|i| i.path.as_str()),
            inline.and_then(|i| i.line),
        ])?;
    let seq = append_event(
        conn,
        w,
        "patch.commented",
        &patch.id,
        json!({ "comment": {
            "id": comment_id, "position": position, "body": body, "revision": n,
            "path": inline.map(|i| i.path.as_str()), "line": inline.and_then(|i| i.line),
        }}),
    )?;
    Ok(Written {
        patch: patch.id,
        revision: n,
        event: Some(comment_id),
        seq,
    })
}

/// Close an open patch.
pub fn close(conn: &Connection, w: &WriteCtx<'_>, id_or_prefix: &str) -> Result<Written> {
    let patch = target(conn, w.repo, id_or_prefix)?;
    require_open(&patch, "close")?;
    set_status(conn, &patch, PatchStatus::Closed)?;
    crate::merge_intents::dequeue(
        conn,
        w.repo,
        &patch.id,
        Some(w.actor),
        "the patch was closed",
        w.now,
    )?;
    let seq = record(conn, w, &patch, "patch.closed", json!({}))?;
    Ok(Written {
        patch: patch.id,
        revision: None,
        event: None,
        seq,
    })
}

/// Reopen a closed patch (a merged one stays merged).
pub fn reopen(conn: &Connection, w: &WriteCtx<'_>, id_or_prefix: &str) -> Result<Written> {
    let patch = target(conn, w.repo, id_or_prefix)?;
    if patch.status != PatchStatus::Closed {
        return Err(invalid(format!(
            "cannot reopen patch {}: it is {}",
            short(&patch.id),
            patch.status.as_str()
        )));
    }
    set_status(conn, &patch, PatchStatus::Open)?;
    let seq = record(conn, w, &patch, "patch.reopened", json!({}))?;
    Ok(Written {
        patch: patch.id,
        revision: None,
        event: None,
        seq,
    })
}

fn set_status(conn: &Connection, patch: &Patch, status: PatchStatus) -> crate::sql::Result<()> {
    conn.prepare_cached("UPDATE patches SET status = ?3 WHERE repo = ?1 AND id = ?2")?
        .execute(crate::sql::params![patch.repo, patch.id, status.as_str()])?;
    Ok(())
}

/// How a merge was found or made, recorded in `patch.merged`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergedBy {
    /// `collab-patch merge` (fast-forward or merge commit).
    Verb,
    /// A push made the latest revision reachable from the base branch, or
    /// brought a commit naming the patch in a `Patch:` trailer.
    Push {
        /// The pushed ref and its new tip.
        refname: String,
        new: String,
        /// `reachable` or `trailer`.
        how: &'static str,
    },
    /// The branch's merge queue fast-forwarded the base to merge group
    /// `group` (commit `group_commit`), which held the patch.
    Queue {
        branch: String,
        group: i64,
        group_commit: String,
    },
}

/// Mark an open patch merged in `commit`. Merging a merged patch is
/// refused; a closed one too (reopen it first) unless a push merged it,
/// which is a fact about the branch and is recorded whatever the status.
pub fn mark_merged(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    commit: &str,
    by: &MergedBy,
) -> Result<Written> {
    check_oid("merge commit", commit)?;
    let patch = target(conn, w.repo, id_or_prefix)?;
    match (patch.status, by) {
        (PatchStatus::Open, _) | (PatchStatus::Closed, MergedBy::Push { .. }) => {}
        _ => require_open(&patch, "merge")?,
    }
    conn.prepare_cached(
        "UPDATE patches SET status = 'merged', merged_commit = ?3, merged_by = ?4,
                            merged_ms = ?5
         WHERE repo = ?1 AND id = ?2",
    )?
    .execute(crate::sql::params![
        w.repo,
        patch.id,
        commit,
        w.actor.principal,
        ms(w.now)
    ])?;
    let mut payload = match by {
        MergedBy::Verb => {
            json!({ "commit": commit, "revision": patch.revision_count, "by": "merge" })
        }
        MergedBy::Push { refname, new, how } => json!({
            "commit": commit, "revision": patch.revision_count, "by": "push",
            "push": { "ref": refname, "new": new }, "how": how,
        }),
        MergedBy::Queue {
            branch,
            group,
            group_commit,
        } => json!({
            "commit": commit, "revision": patch.revision_count, "by": "queue",
            "queue": { "branch": branch, "group": group, "commit": group_commit },
        }),
    };
    // A merge queued with --when-green is done, whoever merged it. Who
    // queued it goes with the event: `collab-lease next --wait` tells that
    // caller its queued patch settled.
    if let Some(intent) = crate::merge_intents::get(conn, w.repo, &patch.id)? {
        crate::merge_intents::fulfil(conn, w.repo, &patch.id, w.now)?;
        payload["queued"] = json!(true);
        payload["requested_by"] = json!(intent.requester.principal);
    }
    let seq = record(conn, w, &patch, "patch.merged", payload)?;
    Ok(Written {
        patch: patch.id,
        revision: Some(patch.revision_count),
        event: None,
        seq,
    })
}

// ---------------------------------------------------------------- merge rule

/// A repository's merge rule (`merge = { ... }` in the policy files).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MergeRule {
    /// Approvals needed on the latest revision.
    pub approvals: u32,
    /// No vote on the latest revision may request changes.
    pub no_changes_requested: bool,
    /// Whether the patch author's own approval counts.
    pub author_may_approve: bool,
    /// Whether a writer other than the patch's author may push a revision
    /// onto it (a principal with Rewind on the repository always may).
    /// Off by default: otherwise a writer could replace another's patch
    /// under its approvals' eyes. Whoever pushed a revision never counts as
    /// an approver, whatever this says.
    pub others_may_revise: bool,
    /// Checks that must be `success` on the latest revision's head
    /// (`collab-check set`); missing or pending is not green.
    pub required_checks: Vec<String>,
    /// Whether a required check in state `skipped` counts as green.
    pub skipped_is_success: bool,
    /// Whose check results count for `required_checks`: anyone who may
    /// post them, or only principals holding exactly the `checks` level
    /// (a CI key), so that a writer cannot turn its own patch green.
    pub checks_from: ChecksFrom,
    /// Who holds the `checks` level here now: the server attaches it when
    /// it reads the rule (the store knows no access levels). Without it,
    /// `checks_from = "checks"` counts no check at all (fail closed).
    #[serde(skip)]
    pub check_posters: CheckPosters,
    /// Whether whoever held the live lease of a linked issue when a
    /// revision was pushed counts as the patch's author (their approval
    /// counts only when `author_may_approve`): an agent's work is not
    /// approved by the agent that claimed it, whoever pushed it.
    pub lease_holder_is_author: bool,
    /// Merge through the branch's merge queue (`crate::merge_queue`):
    /// queued patches are tested together on a merge-group commit before
    /// the base moves, and the required checks are those of the group.
    pub queue: bool,
    /// The most patches one merge group holds (1 to [`MAX_BATCH`]).
    pub max_batch: u32,
    /// The most merge groups of a branch under test at once while the
    /// queue searches a failed group for its breaker (1 to
    /// [`MAX_PARALLEL`]; 1: bisection, one group at a time), and the depth
    /// of its merge train (`train`) while nothing failed.
    pub max_parallel: u32,
    /// How a patch enters a merge group: merged onto it (a merge commit,
    /// or a fast-forward) or its commits rebased onto it.
    pub queue_method: QueueMethod,
    /// Build the round of exclusion groups that would search a batch
    /// together with the batch (with `max_parallel` >= 2), so a failed
    /// batch costs one round less, for `max_parallel` more CI runs per
    /// batch that are thrown away when it passes.
    pub speculate: bool,
    /// A merge train while nothing failed: up to `max_parallel` groups
    /// under test at once, each built on the group before it, landing in
    /// order. Off: one group at a time (the runs of a train after a
    /// failed group are thrown away).
    pub train: bool,
    /// The fewest ready patches a new group is built from, unless the
    /// oldest of them has waited `batch_wait` seconds (1 to `max_batch`).
    pub min_batch: u32,
    /// Seconds the oldest ready patch waits for `min_batch` to fill a
    /// group (0 to [`MAX_BATCH_WAIT`]).
    pub batch_wait: u32,
}

/// How a patch enters a merge group (`queue_method` of a merge rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueMethod {
    /// Merged onto the group so far (a fast-forward when it can be).
    #[default]
    Merge,
    /// Each of its commits cherry-picked in order onto the group so far:
    /// the branch's history stays linear.
    Rebase,
}

impl QueueMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueMethod::Merge => "merge",
            QueueMethod::Rebase => "rebase",
        }
    }
}

/// Whose check results satisfy a merge rule's `required_checks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChecksFrom {
    /// Anyone who may post a check on the repository (checks, write or
    /// rewind).
    #[default]
    Anyone,
    /// Only principals whose level on the repository is `checks`.
    Checks,
}

/// Whether a principal (a check's `updated_by`) holds the `checks` level
/// where a rule applies, as the server decides it.
#[derive(Clone, Default)]
pub struct CheckPosters(Option<std::sync::Arc<HoldsChecks>>);

/// The server's answer to "does this principal hold the `checks` level?".
type HoldsChecks = dyn Fn(&str) -> bool + Send + Sync;

impl CheckPosters {
    pub fn new(holds_checks: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        CheckPosters(Some(std::sync::Arc::new(holds_checks)))
    }
}

impl std::fmt::Debug for CheckPosters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "CheckPosters(..)"
        } else {
            "CheckPosters(none)"
        })
    }
}

// A rule's values are what is compared; who holds a level is not one.
impl PartialEq for CheckPosters {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for CheckPosters {}

impl MergeRule {
    /// Whether `check` may satisfy a required check under this rule: with
    /// `checks_from = "checks"`, only when its poster holds the `checks`
    /// level now.
    pub fn counts(&self, check: &crate::checks::Check) -> bool {
        match self.checks_from {
            ChecksFrom::Anyone => true,
            ChecksFrom::Checks => self
                .check_posters
                .0
                .as_ref()
                .is_some_and(|holds| holds(&check.updated_by)),
        }
    }

    /// How a required check with no counted result reads in a reason.
    pub fn missing(&self, name: &str) -> String {
        match self.checks_from {
            ChecksFrom::Anyone => format!("{name} is missing"),
            ChecksFrom::Checks => {
                format!("{name} is missing from a principal with the checks level")
            }
        }
    }
}

/// The most required checks one merge rule may name.
pub const MAX_REQUIRED_CHECKS: usize = 32;

/// The largest `max_batch` a merge rule may set.
pub const MAX_BATCH: u32 = 32;

/// `max_batch` when the rule does not say.
pub const DEFAULT_MAX_BATCH: u32 = 8;

/// The largest `max_parallel` a merge rule may set.
pub const MAX_PARALLEL: u32 = 32;

/// `max_parallel` when the rule does not say.
pub const DEFAULT_MAX_PARALLEL: u32 = 8;

/// The longest `batch_wait` a merge rule may set, in seconds.
pub const MAX_BATCH_WAIT: u32 = 3600;

impl Default for MergeRule {
    fn default() -> Self {
        MergeRule {
            approvals: 0,
            no_changes_requested: true,
            author_may_approve: false,
            others_may_revise: false,
            required_checks: Vec::new(),
            skipped_is_success: false,
            checks_from: ChecksFrom::Anyone,
            check_posters: CheckPosters::default(),
            lease_holder_is_author: true,
            queue: false,
            max_batch: DEFAULT_MAX_BATCH,
            max_parallel: DEFAULT_MAX_PARALLEL,
            queue_method: QueueMethod::Merge,
            speculate: false,
            train: false,
            min_batch: 1,
            batch_wait: 0,
        }
    }
}

impl MergeRule {
    /// Whether the rule's own values are acceptable (check names, their
    /// number); `Err` is the reason a policy file is refused.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.required_checks.len() > MAX_REQUIRED_CHECKS {
            return Err(format!(
                "required_checks: at most {MAX_REQUIRED_CHECKS} names"
            ));
        }
        for name in &self.required_checks {
            crate::checks::valid_name(name).map_err(|e| format!("required_checks: {e}"))?;
        }
        if !(1..=MAX_BATCH).contains(&self.max_batch) {
            return Err(format!("max_batch: 1 to {MAX_BATCH}"));
        }
        if !(1..=MAX_PARALLEL).contains(&self.max_parallel) {
            return Err(format!("max_parallel: 1 to {MAX_PARALLEL}"));
        }
        if !(1..=self.max_batch).contains(&self.min_batch) {
            return Err(format!("min_batch: 1 to max_batch ({})", self.max_batch));
        }
        if self.batch_wait > MAX_BATCH_WAIT {
            return Err(format!("batch_wait: 0 to {MAX_BATCH_WAIT} seconds"));
        }
        Ok(())
    }
}

/// Whether every check `rule` requires is green among `checks` (those of
/// the latest revision's head); `Err` names each one that is not and its
/// state ("ci/test is pending, lint is missing").
pub fn checks_allow(
    detail: &PatchDetail,
    rule: &MergeRule,
    checks: &[crate::checks::Check],
) -> std::result::Result<(), String> {
    let head = detail.latest().map(|r| r.head.as_str());
    let mut not_green = Vec::new();
    for name in &rule.required_checks {
        // Only a check on the latest head counts (never an older revision's).
        let found = checks
            .iter()
            .find(|c| &c.name == name && Some(c.commit.as_str()) == head)
            .filter(|c| rule.counts(c));
        match found.map(|c| c.state.as_str()) {
            Some("success") => {}
            Some("skipped") if rule.skipped_is_success => {}
            Some(state) => not_green.push(format!("{name} is {state}")),
            None => not_green.push(rule.missing(name)),
        }
    }
    if not_green.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "required checks are not green on revision {}: {}",
            detail.latest().map_or(0, |r| r.n),
            not_green.join(", ")
        ))
    }
}

/// The required checks on the latest revision's head that have finished
/// without passing (`failure`, `error`, or `skipped` when it does not
/// count): "name is state" each. Waiting cannot make these green; a new run
/// (a later `set`) or a new revision can.
pub fn failed_checks(
    detail: &PatchDetail,
    rule: &MergeRule,
    checks: &[crate::checks::Check],
) -> Vec<String> {
    let head = detail.latest().map(|r| r.head.as_str());
    rule.required_checks
        .iter()
        .filter_map(|name| {
            let c = checks
                .iter()
                .find(|c| &c.name == name && Some(c.commit.as_str()) == head)
                .filter(|c| rule.counts(c))?;
            match c.state.as_str() {
                "failure" | "error" => Some(format!("{name} is {}", c.state)),
                "skipped" if !rule.skipped_is_success => Some(format!("{name} is skipped")),
                _ => None,
            }
        })
        .collect()
}

/// [`rule_allows`] and [`checks_allow`] together: the whole verdict, with
/// every reason the patch may not merge.
pub fn verdict(
    detail: &PatchDetail,
    rule: &MergeRule,
    checks: &[crate::checks::Check],
) -> std::result::Result<(), String> {
    let votes = rule_allows(detail, rule);
    if detail.patch.status != PatchStatus::Open || detail.latest().is_none() {
        return votes;
    }
    match (votes, checks_allow(detail, rule, checks)) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(a), Err(b)) => Err(format!("{a}; {b}")),
        (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
    }
}

/// The checks on the latest revision's head of `detail`.
pub fn head_checks(
    conn: &Connection,
    detail: &PatchDetail,
) -> crate::sql::Result<Vec<crate::checks::Check>> {
    match detail.latest() {
        Some(r) => crate::checks::list(conn, &detail.patch.repo, &r.head),
        None => Ok(Vec::new()),
    }
}

/// Whether `rule` lets `detail` merge now; `Err` says what is missing, in
/// words fit for a refusal and for a page ("needs 1 more approval").
pub fn rule_allows(detail: &PatchDetail, rule: &MergeRule) -> std::result::Result<(), String> {
    if detail.patch.status != PatchStatus::Open {
        return Err(format!("the patch is {}", detail.patch.status.as_str()));
    }
    let Some(latest) = detail.latest() else {
        return Err("the patch has no revision".into());
    };
    // A stacked patch lands after the patches below it.
    if let (Some(below), Some(status)) = (&detail.patch.depends_on, detail.depends_on_status) {
        let then = match status {
            PatchStatus::Merged => None,
            PatchStatus::Open => Some("merge that one first"),
            PatchStatus::Closed => Some("push the stack again to open a new one below it"),
        };
        if let Some(then) = then {
            return Err(format!(
                "it depends on patch {}, which is {}: {then}",
                short(below),
                status.as_str()
            ));
        }
    }
    let votes: Vec<&Review> = detail.votes_on(latest.n).collect();
    if rule.no_changes_requested {
        if let Some(r) = votes.iter().find(|r| r.verdict == Verdict::RequestChanges) {
            return Err(format!(
                "{} requested changes on revision {}",
                r.author.name, latest.n
            ));
        }
    }
    // Whoever pushed a revision of the patch (besides its author, whom
    // `author_may_approve` governs) wrote code under review: their approval
    // is not a review.
    let author = &detail.patch.author.principal;
    let revised = |principal: &str| {
        detail
            .revisions
            .iter()
            .any(|rev| rev.author.principal == principal)
    };
    // Whoever held the lease of a linked issue when a revision was pushed,
    // or holds (last held) the lease of an issue linked now, claimed the
    // work: an author too, when the rule says so. The links are read now,
    // so linking after the push does not launder the holder's approval.
    let held_lease = |principal: &str| {
        if !rule.lease_holder_is_author {
            None
        } else if detail
            .revisions
            .iter()
            .any(|rev| rev.lease_holders.iter().any(|h| h == principal))
        {
            Some("held the lease of a linked issue when a revision was pushed")
        } else if detail.linked_lease_holders.iter().any(|h| h == principal) {
            Some("holds or last held the lease of a linked issue")
        } else {
            None
        }
    };
    let mut discounted: Vec<(&str, &str)> = Vec::new();
    let mut approvals = 0u32;
    for r in votes.iter().filter(|r| r.verdict == Verdict::Approve) {
        if &r.author.principal == author {
            approvals += u32::from(rule.author_may_approve);
        } else if revised(&r.author.principal) {
            discounted.push((&r.author.name, "pushed a revision of this patch"));
        } else if let Some(because) = held_lease(&r.author.principal) {
            if rule.author_may_approve {
                approvals += 1;
            } else {
                discounted.push((&r.author.name, because));
            }
        } else {
            approvals += 1;
        }
    }
    if approvals < rule.approvals {
        let missing = rule.approvals - approvals;
        let mut why = format!(
            "needs {missing} more approval{} on revision {} ({approvals} of {})",
            if missing == 1 { "" } else { "s" },
            latest.n,
            rule.approvals
        );
        for (name, because) in discounted {
            why.push_str(&format!(
                "; {name}'s approval does not count: {name} {because}"
            ));
        }
        return Err(why);
    }
    Ok(())
}

// ---------------------------------------------------------------- import

/// Insert a patch replayed from a client-written DAG (the server's
/// `objects::import::patch`), with its revisions (`revision_events[i]` is
/// the id of the event that made revision `i + 1`), votes and comments as given, unless the repository
/// already holds a patch with that id. Appends `patch.imported` (actor: the
/// server; the author is in the payload). Returns the event's `seq`, `None`
/// when the patch was there already. The caller has made the rows fit the
/// schema's checks (non-empty title and base, a line only with a path).
pub fn insert_imported(
    conn: &Connection,
    detail: &PatchDetail,
    revision_events: &[String],
    now: i64,
) -> crate::sql::Result<Option<i64>> {
    let p = &detail.patch;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO patches (repo, id, title, body, base, author, author_name, author_key,
                                  created_ms, updated_ms, status, merged_commit, merged_by,
                                  merged_ms, imported, revision_count, comment_count)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 1, ?15, ?16)
             ON CONFLICT (repo, id) DO NOTHING",
        )?
        .execute(crate::sql::params![
            p.repo,
            p.id,
            p.title,
            p.body,
            p.base,
            p.author.principal,
            p.author.name,
            p.author.key,
            p.created_ms,
            p.updated_ms,
            p.status.as_str(),
            p.merge.as_ref().map(|m| m.commit.as_str()),
            p.merge.as_ref().map(|m| m.by.as_str()),
            p.merge.as_ref().map(|m| m.at_ms),
            detail.revisions.len() as i64,
            detail.comments.len() as i64,
        ])?;
    if inserted == 0 {
        return Ok(None);
    }
    let mut stmt = conn.prepare_cached(INSERT_REVISION)?;
    for (i, r) in detail.revisions.iter().enumerate() {
        stmt.execute(crate::sql::params![
            p.repo,
            p.id,
            r.n,
            r.head,
            r.base_commit,
            r.base_tip,
            r.author.principal,
            r.author.name,
            r.author.key,
            r.at_ms,
            revision_events.get(i),
        ])?;
    }
    let mut stmt = conn.prepare_cached(UPSERT_REVIEW)?;
    for r in &detail.reviews {
        stmt.execute(crate::sql::params![
            p.repo,
            p.id,
            r.revision,
            r.author.principal,
            r.author.name,
            r.author.key,
            r.id,
            r.verdict.as_str(),
            r.body,
            r.at_ms,
        ])?;
    }
    let mut stmt = conn.prepare_cached(INSERT_COMMENT)?;
    for (i, c) in detail.comments.iter().enumerate() {
        stmt.execute(crate::sql::params![
            p.repo,
            p.id,
            i as i64 + 1,
            c.id,
            c.author.principal,
            c.author.name,
            c.author.key,
            c.at_ms,
            c.body,
            c.revision,
            c.inline.as_ref().map(|x| x.path.as_str()),
            c.inline.as_ref().and_then(|x| x.line),
        ])?;
    }
    for issue in &detail.issues {
        insert_issue_link(conn, &p.repo, &p.id, issue).map_err(|e| match e {
            PatchError::Sql(e) => e,
            other => failure(other.to_string()),
        })?;
    }
    let payload = json!({
        "title": p.title,
        "base": p.base,
        "status": p.status.as_str(),
        "revisions": detail.revisions.len(),
        "reviews": detail.reviews.len(),
        "comments": detail.comments.len(),
        "created_ms": p.created_ms,
        "author": person_json(&p.author),
        "merged_commit": p.merge.as_ref().map(|m| m.commit.as_str()),
    });
    objects::append_event(conn, "patch.imported", &p.repo, &p.id, None, payload, now).map(Some)
}

fn failure(message: String) -> crate::sql::Error {
    crate::sql::Error::failure(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_log;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";
    const C: &str = "3333333333333333333333333333333333333333";
    const BASE: &str = "0000000000000000000000000000000000000abc";
    const REPO: &str = "team/app.git";

    fn db() -> crate::testing::TestDb {
        crate::testing::db()
    }

    fn person(name: &str) -> Person {
        Person {
            principal: name.into(),
            name: name.into(),
            key: None,
        }
    }

    fn ctx<'a>(actor: &'a Person, now: i64) -> WriteCtx<'a> {
        WriteCtx {
            repo: REPO,
            actor,
            max_body: 1000,
            now,
        }
    }

    fn rev(head: &str) -> NewRevision {
        NewRevision {
            head: head.into(),
            base_commit: BASE.into(),
            base_tip: Some(BASE.into()),
        }
    }

    fn open_one(conn: &Connection, alice: &Person) -> String {
        open(
            conn,
            &ctx(alice, 100),
            &NewPatch {
                title: "Fix a typo".into(),
                body: "body".into(),
                base: "main".into(),
                revision: rev(A),
                issues: vec![],
                change_id: None,
                depends_on: None,
            },
        )
        .unwrap()
        .patch
    }

    fn kinds(conn: &Connection) -> Vec<String> {
        event_log::after(conn, 0, 100)
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect()
    }

    #[test]
    fn open_revise_and_show() {
        let conn = db();
        let alice = person("alice");
        let id = open_one(&conn, &alice);
        let w = revise(
            &conn,
            &ctx(&alice, 200),
            &id[..8],
            &rev(B),
            &[],
            Revisers::AuthorOnly,
        )
        .unwrap();
        assert_eq!(w.revision, Some(2));
        let d = show(&conn, REPO, &id[..6]).unwrap();
        assert_eq!(d.patch.title, "Fix a typo");
        assert_eq!(d.patch.status, PatchStatus::Open);
        assert_eq!(d.patch.revision_count, 2);
        assert_eq!(
            d.revisions
                .iter()
                .map(|r| r.head.as_str())
                .collect::<Vec<_>>(),
            vec![A, B]
        );
        assert_eq!(d.patch.updated_ms, 200_000);
        assert_eq!(kinds(&conn), vec!["patch.opened", "patch.revised"]);
        assert_eq!(
            open_on_base(&conn, REPO, "main").unwrap(),
            vec![(id.clone(), B.to_string())]
        );
        // The same head again is refused and writes nothing.
        let err = revise(
            &conn,
            &ctx(&alice, 300),
            &id,
            &rev(B),
            &[],
            Revisers::AuthorOnly,
        )
        .unwrap_err();
        assert!(err.to_string().contains("already proposes"), "{err}");
        assert_eq!(kinds(&conn).len(), 2);
    }

    #[test]
    fn bad_input_is_refused_before_anything_is_written() {
        let conn = db();
        let alice = person("alice");
        let bad = |title: &str, r: NewRevision| {
            open(
                &conn,
                &ctx(&alice, 1),
                &NewPatch {
                    title: title.into(),
                    body: String::new(),
                    base: "main".into(),
                    revision: r,
                    issues: vec![],
                    change_id: None,
                    depends_on: None,
                },
            )
            .unwrap_err()
            .to_string()
        };
        assert!(bad(" ", rev(A)).contains("title is empty"));
        assert!(bad("t", rev("nope")).contains("not a full commit id"));
        assert!(bad("t", rev(BASE)).contains("nothing to propose"));
        let unknown_issue = open(
            &conn,
            &ctx(&alice, 1),
            &NewPatch {
                title: "t".into(),
                body: String::new(),
                base: "main".into(),
                revision: rev(A),
                issues: vec!["abcd".into()],
                change_id: None,
                depends_on: None,
            },
        )
        .unwrap_err();
        assert!(
            unknown_issue.to_string().contains("no issue matches"),
            "{unknown_issue}"
        );
        assert!(kinds(&conn).is_empty());
        let n: i64 = conn
            .query_row("SELECT COUNT(*) FROM patches", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn a_later_vote_replaces_the_earlier_one_on_the_same_revision() {
        let conn = db();
        let (alice, bob) = (person("alice"), person("bob"));
        let id = open_one(&conn, &alice);
        let first = review(
            &conn,
            &ctx(&bob, 110),
            &id,
            None,
            Verdict::RequestChanges,
            "no",
        )
        .unwrap();
        let second = review(&conn, &ctx(&bob, 120), &id, Some(1), Verdict::Approve, "ok").unwrap();
        let d = show(&conn, REPO, &id).unwrap();
        assert_eq!(d.reviews.len(), 1);
        assert_eq!(d.reviews[0].verdict, Verdict::Approve);
        assert_eq!(Some(d.reviews[0].id.clone()), second.event);
        let last = event_log::after(&conn, 0, 100).unwrap().pop().unwrap();
        assert_eq!(last.kind, "patch.reviewed");
        assert_eq!(last.payload["replaces"], json!(first.event));
        // A vote on revision 2 is a separate vote.
        revise(
            &conn,
            &ctx(&alice, 130),
            &id,
            &rev(B),
            &[],
            Revisers::AuthorOnly,
        )
        .unwrap();
        review(&conn, &ctx(&bob, 140), &id, None, Verdict::Comment, "").unwrap();
        let d = show(&conn, REPO, &id).unwrap();
        assert_eq!(
            d.reviews
                .iter()
                .map(|r| (r.revision, r.verdict))
                .collect::<Vec<_>>(),
            vec![(1, Verdict::Approve), (2, Verdict::Comment)]
        );
        let err = review(&conn, &ctx(&bob, 150), &id, Some(3), Verdict::Approve, "").unwrap_err();
        assert!(err.to_string().contains("has no revision 3"), "{err}");
    }

    #[test]
    fn comments_general_and_inline() {
        let conn = db();
        let alice = person("alice");
        let id = open_one(&conn, &alice);
        comment(&conn, &ctx(&alice, 101), &id, "general", None, None).unwrap();
        let inline = Inline {
            path: "src/lib.rs".into(),
            line: Some(12),
        };
        let w = comment(&conn, &ctx(&alice, 102), &id, "here", None, Some(&inline)).unwrap();
        assert_eq!(w.revision, Some(1));
        let d = show(&conn, REPO, &id).unwrap();
        assert_eq!(d.comments.len(), 2);
        assert_eq!(d.comments[0].inline, None);
        assert_eq!(d.comments[0].revision, None);
        assert_eq!(d.comments[1].inline, Some(inline));
        assert_eq!(d.comments[1].position, 2);
        assert_eq!(d.patch.comment_count, 2);
        for (body, inline) in [
            ("  ", None),
            (
                "x",
                Some(Inline {
                    path: "/etc/passwd".into(),
                    line: None,
                }),
            ),
            (
                "x",
                Some(Inline {
                    path: "a".into(),
                    line: Some(0),
                }),
            ),
        ] {
            assert!(comment(&conn, &ctx(&alice, 103), &id, body, None, inline.as_ref()).is_err());
        }
    }

    #[test]
    fn status_changes_close_reopen_merge() {
        let conn = db();
        let alice = person("alice");
        let id = open_one(&conn, &alice);
        close(&conn, &ctx(&alice, 101), &id).unwrap();
        assert!(close(&conn, &ctx(&alice, 102), &id).is_err());
        assert!(review(&conn, &ctx(&alice, 102), &id, None, Verdict::Approve, "").is_err());
        assert!(mark_merged(&conn, &ctx(&alice, 102), &id, C, &MergedBy::Verb).is_err());
        // Comments stay allowed on any patch.
        comment(&conn, &ctx(&alice, 103), &id, "still here", None, None).unwrap();
        reopen(&conn, &ctx(&alice, 104), &id).unwrap();
        mark_merged(&conn, &ctx(&alice, 105), &id, C, &MergedBy::Verb).unwrap();
        let p = get(&conn, REPO, &id).unwrap().unwrap();
        assert_eq!(p.status, PatchStatus::Merged);
        assert_eq!(p.merge.unwrap().commit, C);
        assert!(reopen(&conn, &ctx(&alice, 106), &id).is_err());
        assert!(open_on_base(&conn, REPO, "main").unwrap().is_empty());
        assert_eq!(
            kinds(&conn),
            vec![
                "patch.opened",
                "patch.closed",
                "patch.commented",
                "patch.reopened",
                "patch.merged"
            ]
        );
    }

    #[test]
    fn a_push_records_the_merge_of_a_closed_patch() {
        let conn = db();
        let alice = person("alice");
        let id = open_one(&conn, &alice);
        close(&conn, &ctx(&alice, 101), &id).unwrap();
        let by = MergedBy::Push {
            refname: "refs/heads/main".into(),
            new: C.into(),
            how: "reachable",
        };
        mark_merged(&conn, &ctx(&alice, 102), &id, C, &by).unwrap();
        let last = event_log::after(&conn, 0, 100).unwrap().pop().unwrap();
        assert_eq!(last.payload["push"]["ref"], "refs/heads/main");
        assert_eq!(last.payload["how"], "reachable");
    }

    #[test]
    fn issues_link_at_open_and_revise_once() {
        let conn = db();
        let alice = person("alice");
        let issue = super::super::issues::open(
            &conn,
            &super::super::issues::WriteCtx {
                repo: REPO,
                actor: &alice,
                fence: None,
                max_body: 100,
                now: 1,
            },
            &super::super::issues::NewIssue {
                title: "bug".into(),
                ..Default::default()
            },
        )
        .unwrap()
        .issue;
        let id = open(
            &conn,
            &ctx(&alice, 10),
            &NewPatch {
                title: "fix".into(),
                body: String::new(),
                base: "main".into(),
                revision: rev(A),
                issues: vec![issue[..8].to_string()],
                change_id: None,
                depends_on: None,
            },
        )
        .unwrap()
        .patch;
        assert_eq!(show(&conn, REPO, &id).unwrap().issues, vec![issue.clone()]);
        revise(
            &conn,
            &ctx(&alice, 11),
            &id,
            &rev(B),
            std::slice::from_ref(&issue),
            Revisers::AuthorOnly,
        )
        .unwrap();
        assert!(link_issue(&conn, &ctx(&alice, 12), &id, &issue).is_err());
        assert!(!kinds(&conn).contains(&"patch.linked".to_string()));
    }

    #[test]
    fn counts_latest_votes_and_patches_of_an_issue() {
        let conn = db();
        let (alice, bob) = (person("alice"), person("bob"));
        let issue = super::super::issues::open(
            &conn,
            &super::super::issues::WriteCtx {
                repo: REPO,
                actor: &alice,
                fence: None,
                max_body: 100,
                now: 1,
            },
            &super::super::issues::NewIssue {
                title: "bug".into(),
                ..Default::default()
            },
        )
        .unwrap()
        .issue;
        let id = open_one(&conn, &alice);
        assert_eq!(count(&conn, REPO, StateFilter::Open).unwrap(), 1);
        assert_eq!(count(&conn, REPO, StateFilter::Closed).unwrap(), 0);
        assert_eq!(count(&conn, "other.git", StateFilter::All).unwrap(), 0);
        assert!(for_issue(&conn, REPO, &issue).unwrap().is_empty());
        link_issue(&conn, &ctx(&alice, 105), &id, &issue).unwrap();
        let linked = for_issue(&conn, REPO, &issue).unwrap();
        assert_eq!(linked.len(), 1);
        assert_eq!(linked[0].id, id);
        assert_eq!(latest_votes(&conn, REPO, &id).unwrap(), (0, 0));
        review(&conn, &ctx(&bob, 110), &id, None, Verdict::Approve, "").unwrap();
        review(
            &conn,
            &ctx(&alice, 111),
            &id,
            None,
            Verdict::RequestChanges,
            "",
        )
        .unwrap();
        assert_eq!(latest_votes(&conn, REPO, &id).unwrap(), (1, 1));
        // Votes on an older revision do not count.
        revise(
            &conn,
            &ctx(&alice, 120),
            &id,
            &rev(B),
            &[],
            Revisers::AuthorOnly,
        )
        .unwrap();
        assert_eq!(latest_votes(&conn, REPO, &id).unwrap(), (0, 0));
        close(&conn, &ctx(&alice, 130), &id).unwrap();
        assert_eq!(count(&conn, REPO, StateFilter::Closed).unwrap(), 1);
        assert_eq!(count(&conn, REPO, StateFilter::All).unwrap(), 1);
    }

    /// `checks_from = "checks"`: only a poster the server says holds the
    /// `checks` level counts; without the server's answer nothing does.
    #[test]
    fn checks_from_checks_counts_only_checks_principals() {
        let conn = db();
        let id = open_one(&conn, &person("alice"));
        let detail = show(&conn, REPO, &id).unwrap();
        let head = detail.latest().unwrap().head.clone();
        let by = |who: &str, state: &str| crate::checks::Check {
            commit: head.clone(),
            name: "ci".into(),
            state: state.into(),
            url: None,
            description: None,
            updated_by: who.into(),
            updated_at: 0,
        };
        let mut rule = MergeRule {
            required_checks: vec!["ci".into()],
            checks_from: ChecksFrom::Checks,
            ..MergeRule::default()
        };
        let missing = "required checks are not green on revision 1: \
                       ci is missing from a principal with the checks level";
        assert_eq!(
            checks_allow(&detail, &rule, &[by("bot", "success")]).unwrap_err(),
            missing
        );
        rule.check_posters = CheckPosters::new(|p| p == "bot");
        assert_eq!(
            checks_allow(&detail, &rule, &[by("alice", "success")]).unwrap_err(),
            missing
        );
        assert!(failed_checks(&detail, &rule, &[by("alice", "failure")]).is_empty());
        assert_eq!(
            checks_allow(&detail, &rule, &[by("bot", "success")]),
            Ok(())
        );
        assert_eq!(
            failed_checks(&detail, &rule, &[by("bot", "failure")]),
            ["ci is failure"]
        );
        let anyone = MergeRule {
            checks_from: ChecksFrom::Anyone,
            ..rule
        };
        assert_eq!(
            checks_allow(&detail, &anyone, &[by("alice", "success")]),
            Ok(())
        );
    }

    #[test]
    fn required_checks_count_only_on_the_latest_head_and_join_the_votes_reasons() {
        let conn = db();
        let alice = person("alice");
        let id = open_one(&conn, &alice);
        let rule = MergeRule {
            approvals: 1,
            required_checks: vec!["ci".into(), "lint".into()],
            ..MergeRule::default()
        };
        let detail = show(&conn, REPO, &id).unwrap();
        let head = detail.latest().unwrap().head.clone();
        let check = |commit: &str, name: &str, state: &str| crate::checks::Check {
            commit: commit.into(),
            name: name.into(),
            state: state.into(),
            url: None,
            description: None,
            updated_by: "ci".into(),
            updated_at: 0,
        };
        let old = "f".repeat(40);
        let checks = [
            check(&old, "ci", "success"),
            check(&head, "lint", "skipped"),
        ];
        assert_eq!(
            verdict(&detail, &rule, &checks).unwrap_err(),
            "needs 1 more approval on revision 1 (0 of 1); \
             required checks are not green on revision 1: ci is missing, lint is skipped"
        );
        let lenient = MergeRule {
            approvals: 0,
            skipped_is_success: true,
            ..rule.clone()
        };
        let green = [
            check(&head, "ci", "success"),
            check(&head, "lint", "skipped"),
        ];
        assert_eq!(verdict(&detail, &lenient, &green), Ok(()));
        assert!(verdict(&detail, &rule, &green).is_err());
        assert!(MergeRule {
            required_checks: vec!["bad name".into()],
            ..MergeRule::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn the_merge_rule_counts_votes_on_the_latest_revision() {
        let conn = db();
        let (alice, bob) = (person("alice"), person("bob"));
        let id = open_one(&conn, &alice);
        let rule = MergeRule {
            approvals: 1,
            ..MergeRule::default()
        };
        let why = |conn: &Connection| rule_allows(&show(conn, REPO, &id).unwrap(), &rule);
        assert_eq!(
            why(&conn).unwrap_err(),
            "needs 1 more approval on revision 1 (0 of 1)"
        );
        review(&conn, &ctx(&alice, 101), &id, None, Verdict::Approve, "").unwrap();
        assert!(
            why(&conn).is_err(),
            "the author's own approval does not count"
        );
        review(
            &conn,
            &ctx(&bob, 102),
            &id,
            None,
            Verdict::RequestChanges,
            "",
        )
        .unwrap();
        assert_eq!(
            why(&conn).unwrap_err(),
            "bob requested changes on revision 1"
        );
        review(&conn, &ctx(&bob, 103), &id, None, Verdict::Approve, "").unwrap();
        assert!(why(&conn).is_ok());
        // A new revision needs its own approval.
        revise(
            &conn,
            &ctx(&alice, 104),
            &id,
            &rev(B),
            &[],
            Revisers::AuthorOnly,
        )
        .unwrap();
        assert!(why(&conn).is_err());
        let lenient = MergeRule {
            approvals: 1,
            no_changes_requested: false,
            author_may_approve: true,
            ..MergeRule::default()
        };
        review(&conn, &ctx(&alice, 105), &id, None, Verdict::Approve, "").unwrap();
        assert!(rule_allows(&show(&conn, REPO, &id).unwrap(), &lenient).is_ok());
    }

    #[test]
    fn only_the_author_revises_unless_allowed_and_revisers_never_approve() {
        let conn = db();
        let (alice, bob, carol) = (person("alice"), person("bob"), person("carol"));
        let id = open_one(&conn, &alice);
        // Bob may not push onto alice's patch by default; nothing is written.
        let err = revise(
            &conn,
            &ctx(&bob, 110),
            &id,
            &rev(B),
            &[],
            Revisers::AuthorOnly,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("only its author may push a revision")
                && err.contains("others_may_revise = false"),
            "{err}"
        );
        assert_eq!(show(&conn, REPO, &id).unwrap().revisions.len(), 1);
        // Allowed by the rule: bob's revision lands, but his approval of it
        // is no review, and the merge verdict says why.
        revise(&conn, &ctx(&bob, 120), &id, &rev(B), &[], Revisers::Anyone).unwrap();
        review(&conn, &ctx(&bob, 130), &id, None, Verdict::Approve, "").unwrap();
        let rule = MergeRule {
            approvals: 1,
            others_may_revise: true,
            ..MergeRule::default()
        };
        let why = |conn: &Connection| rule_allows(&show(conn, REPO, &id).unwrap(), &rule);
        assert_eq!(
            why(&conn).unwrap_err(),
            "needs 1 more approval on revision 2 (0 of 1); bob's approval does not count: \
             bob pushed a revision of this patch"
        );
        // Not even with author_may_approve, which is about the author alone.
        let lenient = MergeRule {
            author_may_approve: true,
            ..rule.clone()
        };
        assert!(rule_allows(&show(&conn, REPO, &id).unwrap(), &lenient).is_err());
        // A third person's approval counts.
        review(&conn, &ctx(&carol, 140), &id, None, Verdict::Approve, "").unwrap();
        assert!(why(&conn).is_ok());
        // The author still revises her own patch under the default.
        revise(
            &conn,
            &ctx(&alice, 150),
            &id,
            &rev(C),
            &[],
            Revisers::AuthorOnly,
        )
        .unwrap();
    }

    #[test]
    fn list_pages_newest_first() {
        let conn = db();
        let alice = person("alice");
        let mut ids = Vec::new();
        for t in 0..3 {
            let w = open(
                &conn,
                &ctx(&alice, 100 + t),
                &NewPatch {
                    title: format!("p{t}"),
                    body: String::new(),
                    base: "main".into(),
                    revision: rev(A),
                    issues: vec![],
                    change_id: None,
                    depends_on: None,
                },
            )
            .unwrap();
            ids.push(w.patch);
        }
        close(&conn, &ctx(&alice, 200), &ids[0]).unwrap();
        let page = list(
            &conn,
            REPO,
            &ListQuery {
                limit: 1,
                ..ListQuery::default()
            },
        )
        .unwrap();
        assert!(page.more);
        assert_eq!(page.patches[0].id, ids[2]);
        let last = &page.patches[0];
        let page = list(
            &conn,
            REPO,
            &ListQuery {
                limit: 5,
                after: Some((last.created_ms, last.id.clone())),
                ..ListQuery::default()
            },
        )
        .unwrap();
        assert_eq!(
            page.patches.iter().map(|p| &p.id).collect::<Vec<_>>(),
            vec![&ids[1]]
        );
        let all = list(
            &conn,
            REPO,
            &ListQuery {
                state: StateFilter::All,
                ..ListQuery::default()
            },
        )
        .unwrap();
        assert_eq!(all.patches.len(), 3);
        assert!(!all.more);
    }

    #[test]
    fn resolving_ids() {
        let conn = db();
        let alice = person("alice");
        let id = open_one(&conn, &alice);
        assert_eq!(resolve(&conn, REPO, &id[..4].to_uppercase()).unwrap(), id);
        assert!(matches!(
            resolve(&conn, REPO, "zz"),
            Err(PatchError::InvalidId(_))
        ));
        assert!(matches!(
            resolve(&conn, "other.git", &id),
            Err(PatchError::NotFound(_))
        ));
    }
}
