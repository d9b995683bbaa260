//! Issues held by the server: every issue decision as a plain function over
//! a `crate::sql::Connection`, with `now` (unix seconds) passed in. Writes run
//! inside the caller's transaction (the writer's SAVEPOINT), check
//! everything before they change anything, and append their event row
//! (`issue.opened`, `issue.commented`, ...) through `event_log::append` in that
//! same transaction, so a change and its event commit together or not at all.
//!
//! What this module does not do: authorization (the SSH verb asks `authz`
//! first), reading the clock, threads, or git. Ids are random 160-bit hex,
//! in the same space as the root commit ids of imported issue DAGs.
//!
//! Fencing: a write given `fence: Some(token)` goes ahead only if `token` is
//! the token of the issue's live lease; otherwise it fails with
//! [`IssueError::Fenced`] naming the live holder and token, before anything
//! is written.

use crate::sql::{Connection, OptionalExtension};
use serde_json::json;

use super::event_log;
use super::leases::{self, Lease};
use super::objects::{self, append_event, ms, person_at, person_json, short, Filter, ISSUES};
pub use super::objects::{new_id, Person};
pub use collab_record::state::IssueStatus;

/// Longest title, in bytes.
pub const MAX_TITLE_BYTES: usize = 1024;
/// Longest label, in bytes.
pub const MAX_LABEL_BYTES: usize = 100;
/// Most labels one issue may carry.
pub const MAX_LABELS: usize = 32;
/// Longest close reason, in bytes.
pub const MAX_REASON_BYTES: usize = 1024;
/// Default and largest page of `list` (the largest is the verbs' bound).
pub const DEFAULT_PAGE: usize = 50;
pub const MAX_PAGE: usize = collab_proto::limits::MAX_PAGE;
/// One issue row with its labels (comments and links are in [`IssueDetail`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub repo: String,
    pub id: String,
    pub title: String,
    pub body: String,
    pub author: Person,
    /// Unix milliseconds.
    pub created_ms: i64,
    pub updated_ms: i64,
    pub status: IssueStatus,
    pub closed_reason: Option<String>,
    pub priority: Option<i64>,
    /// Replayed from the repository's git DAG by the importer.
    pub imported: bool,
    /// Sorted, without duplicates.
    pub labels: Vec<String>,
    pub comment_count: i64,
}

/// A comment, in the issue's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    /// 40 hex: the event commit id for imported comments, random otherwise.
    pub id: String,
    pub author: Person,
    pub at_ms: i64,
    pub body: String,
}

/// `blocks` or `relates`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkKind {
    Blocks,
    Relates,
}

impl LinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Blocks => "blocks",
            LinkKind::Relates => "relates",
        }
    }

    pub fn parse(s: &str) -> Option<LinkKind> {
        match s {
            "blocks" => Some(LinkKind::Blocks),
            "relates" => Some(LinkKind::Relates),
            _ => None,
        }
    }
}

/// An issue somewhere on this server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IssueKey {
    pub repo: String,
    pub id: String,
}

/// An issue's links, seen from that issue. `relates` is symmetric: a link
/// made from either side shows on both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Links {
    pub blocks: Vec<IssueKey>,
    pub blocked_by: Vec<IssueKey>,
    pub relates: Vec<IssueKey>,
}

impl Links {
    /// Keep only the links whose other end `visible` admits (the caller
    /// drops issues of repositories the reader cannot see).
    pub fn retain(&mut self, mut visible: impl FnMut(&IssueKey) -> bool) {
        self.blocks.retain(&mut visible);
        self.blocked_by.retain(&mut visible);
        self.relates.retain(&mut visible);
    }
}

/// Everything `show` returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueDetail {
    pub issue: Issue,
    pub comments: Vec<Comment>,
    pub links: Links,
}

/// What a write produced: the issue, the id of what it created (the issue
/// for `open`, the comment for `comment`), and its event's `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub issue: String,
    pub event: Option<String>,
    pub seq: i64,
}

/// A close: the write, and the lease it ended, if one was live.
#[derive(Debug, Clone, PartialEq)]
pub struct Closed {
    pub written: Written,
    pub ended_lease: Option<Lease>,
}

/// Why an issue operation was refused. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("invalid issue id '{0}': expected 4 to 40 hex digits")]
    InvalidId(String),
    #[error("no issue matches '{0}'")]
    NotFound(String),
    #[error("issue id '{prefix}' is ambiguous; candidates: {}", candidates.join(", "))]
    Ambiguous {
        prefix: String,
        candidates: Vec<String>,
    },
    /// Bad input or a write that does not apply (empty title, already
    /// closed, ...): the message is the reply.
    #[error("{0}")]
    Invalid(String),
    /// `--lease-token` is not the token of the issue's live lease.
    #[error("{}", fenced_message(holder.as_deref(), *token, *closed))]
    Fenced {
        /// The issue's full id.
        issue: String,
        holder: Option<String>,
        token: Option<i64>,
        /// The issue is closed, which ended its lease (by `close`, or a
        /// merge's auto-close): the reason no tenure is live.
        closed: bool,
    },
    #[error(transparent)]
    Sql(#[from] crate::sql::Error),
}

impl IssueError {
    /// Whether the write failed only because another transaction held what
    /// it needed (the writer runs a repository write again later).
    pub fn is_busy(&self) -> bool {
        matches!(self, IssueError::Sql(e) if e.is_busy())
    }
}

fn fenced_message(holder: Option<&str>, token: Option<i64>, closed: bool) -> String {
    format!(
        "lease token refused: {}",
        fenced_reason(holder, token, closed)
    )
}

/// Why a token was refused, in words: who holds the issue now, or why
/// nobody does.
pub fn fenced_reason(holder: Option<&str>, token: Option<i64>, closed: bool) -> String {
    match (holder, token) {
        (Some(h), Some(t)) => format!("the issue is held by {h} with token {t}"),
        _ if closed => "the issue is closed, which ended its lease".to_string(),
        _ => "the issue has no live lease".to_string(),
    }
}

type Result<T, E = IssueError> = std::result::Result<T, E>;

fn invalid(message: impl Into<String>) -> IssueError {
    IssueError::Invalid(message.into())
}

objects::from_unresolved!(IssueError);

// ---------------------------------------------------------------- input rules

/// A title: one non-empty line, no control characters, no invisible or
/// text-direction characters (`collab_record::text`), at most
/// [`MAX_TITLE_BYTES`]. Returns it trimmed.
pub fn check_title(title: &str) -> Result<String> {
    let trimmed = title.trim();
    if trimmed.is_empty() {
        return Err(invalid("title is empty"));
    }
    if title.chars().any(char::is_control) {
        return Err(invalid("title must be one line without control characters"));
    }
    collab_record::text::check_line("title", title).map_err(invalid)?;
    if trimmed.len() > MAX_TITLE_BYTES {
        return Err(invalid(format!(
            "title is longer than {MAX_TITLE_BYTES} bytes"
        )));
    }
    Ok(trimmed.to_string())
}

/// A body or comment: at most `max` bytes; no NUL or other control
/// characters except tab, newline and carriage return.
pub fn check_body(what: &str, body: &str, max: usize) -> Result<()> {
    if body.len() > max {
        return Err(invalid(format!(
            "{what} is larger than max_issue_body ({max} bytes)"
        )));
    }
    if body
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    {
        return Err(invalid(format!(
            "{what} contains a NUL or control character"
        )));
    }
    collab_record::text::check_body(what, body).map_err(invalid)?;
    Ok(())
}

/// A label: non-empty, no whitespace, commas or control characters, at most
/// [`MAX_LABEL_BYTES`].
pub fn check_label(label: &str) -> Result<()> {
    if label.is_empty()
        || label.len() > MAX_LABEL_BYTES
        || label
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ',')
    {
        return Err(invalid(format!(
            "invalid label '{}': labels are 1 to {MAX_LABEL_BYTES} bytes, without spaces, commas or control characters",
            label.escape_default()
        )));
    }
    collab_record::text::check_line("label", label).map_err(invalid)?;
    Ok(())
}

fn check_reason(reason: &str) -> Result<()> {
    if reason.chars().any(char::is_control) || reason.len() > MAX_REASON_BYTES {
        return Err(invalid(format!(
            "reason must be one line of at most {MAX_REASON_BYTES} bytes"
        )));
    }
    collab_record::text::check_line("reason", reason).map_err(invalid)?;
    Ok(())
}

fn sorted_labels(labels: &[String]) -> Result<Vec<String>> {
    for l in labels {
        check_label(l)?;
    }
    let mut out = labels.to_vec();
    out.sort();
    out.dedup();
    if out.len() > MAX_LABELS {
        return Err(invalid(format!(
            "too many labels: at most {MAX_LABELS} per issue"
        )));
    }
    Ok(out)
}

// ---------------------------------------------------------------- resolving

/// A full 40-hex id or a unique prefix of 4+ hex digits (any case) to the
/// full id of an issue of `repo`.
pub fn resolve(conn: &Connection, repo: &str, id_or_prefix: &str) -> Result<String> {
    Ok(objects::resolve(conn, ISSUES, repo, id_or_prefix)?)
}

// ---------------------------------------------------------------- reads

const ISSUE_COLUMNS: &str = "repo, id, title, body, author, author_name, author_key, created_ms, \
     updated_ms, status, closed_reason, priority, imported, comment_count";

fn issue_from_row(r: &crate::sql::Row<'_>) -> crate::sql::Result<Issue> {
    let status: String = r.get(9)?;
    Ok(Issue {
        repo: r.get(0)?,
        id: r.get(1)?,
        title: r.get(2)?,
        body: r.get(3)?,
        author: person_at(r, 4)?,
        created_ms: r.get(7)?,
        updated_ms: r.get(8)?,
        status: if status == "closed" {
            IssueStatus::Closed
        } else {
            IssueStatus::Open
        },
        closed_reason: r.get(10)?,
        priority: r.get(11)?,
        imported: r.get::<_, i64>(12)? != 0,
        labels: Vec::new(),
        comment_count: r.get(13)?,
    })
}

// Used by the importer and the web pages (landing next).
fn status_str(status: IssueStatus) -> &'static str {
    match status {
        IssueStatus::Open => "open",
        IssueStatus::Closed => "closed",
    }
}

fn labels_of(conn: &Connection, repo: &str, id: &str) -> crate::sql::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT label FROM issue_labels WHERE repo = ?1 AND issue_id = ?2 ORDER BY label",
    )?;
    let labels = stmt.query_map([repo, id], |r| r.get(0))?;
    labels.collect()
}

/// One issue with its labels, by full id.
pub fn get(conn: &Connection, repo: &str, id: &str) -> crate::sql::Result<Option<Issue>> {
    let issue = conn
        .prepare_cached(&format!(
            "SELECT {ISSUE_COLUMNS} FROM issues WHERE repo = ?1 AND id = ?2"
        ))?
        .query_row([repo, id], issue_from_row)
        .optional()?;
    match issue {
        Some(mut issue) => {
            issue.labels = labels_of(conn, repo, id)?;
            Ok(Some(issue))
        }
        None => Ok(None),
    }
}

/// An issue by id or prefix, with its comments (in order) and links.
pub fn show(conn: &Connection, repo: &str, id_or_prefix: &str) -> Result<IssueDetail> {
    let id = resolve(conn, repo, id_or_prefix)?;
    let issue = get(conn, repo, &id)?.ok_or_else(|| IssueError::NotFound(id.clone()))?;
    let mut stmt = conn.prepare_cached(
        "SELECT id, author, author_name, author_key, at_ms, body FROM issue_comments
         WHERE repo = ?1 AND issue_id = ?2 ORDER BY position",
    )?;
    let comments = stmt
        .query_map([repo, &id], |r| {
            Ok(Comment {
                id: r.get(0)?,
                author: person_at(r, 1)?,
                at_ms: r.get(4)?,
                body: r.get(5)?,
            })
        })?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    let links = links_of(conn, repo, &id)?;
    Ok(IssueDetail {
        issue,
        comments,
        links,
    })
}

/// The links of one issue, both directions, each list sorted.
pub fn links_of(conn: &Connection, repo: &str, id: &str) -> crate::sql::Result<Links> {
    let mut links = Links::default();
    let key = |r: &crate::sql::Row<'_>| -> crate::sql::Result<(String, IssueKey)> {
        Ok((
            r.get(0)?,
            IssueKey {
                repo: r.get(1)?,
                id: r.get(2)?,
            },
        ))
    };
    let mut out = conn.prepare_cached(
        "SELECT kind, target_repo, target_id FROM issue_links WHERE repo = ?1 AND issue_id = ?2",
    )?;
    for row in out.query_map([repo, id], key)? {
        let (kind, other) = row?;
        match LinkKind::parse(&kind) {
            Some(LinkKind::Blocks) => links.blocks.push(other),
            Some(LinkKind::Relates) => links.relates.push(other),
            None => {}
        }
    }
    let mut incoming = conn.prepare_cached(
        "SELECT kind, repo, issue_id FROM issue_links WHERE target_repo = ?1 AND target_id = ?2",
    )?;
    for row in incoming.query_map([repo, id], key)? {
        let (kind, other) = row?;
        match LinkKind::parse(&kind) {
            Some(LinkKind::Blocks) => links.blocked_by.push(other),
            Some(LinkKind::Relates) => links.relates.push(other),
            None => {}
        }
    }
    for list in [&mut links.blocks, &mut links.blocked_by, &mut links.relates] {
        list.sort();
        list.dedup();
    }
    Ok(links)
}

/// Which issues `list` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFilter {
    Open,
    Closed,
    All,
}

impl StateFilter {
    pub fn parse(s: &str) -> Option<StateFilter> {
        match s {
            "open" => Some(StateFilter::Open),
            "closed" => Some(StateFilter::Closed),
            "all" => Some(StateFilter::All),
            _ => None,
        }
    }

    /// The status `list` keeps (`None`: any).
    fn status(self) -> Option<&'static str> {
        match self {
            StateFilter::Open => Some("open"),
            StateFilter::Closed => Some("closed"),
            StateFilter::All => None,
        }
    }
}

/// Where a page starts: after the issue `(created_ms, id)` in list order
/// (newest first, ties by id). Text form `<created_ms>-<id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub created_ms: i64,
    pub id: String,
}

impl Cursor {
    pub fn parse(s: &str) -> Option<Cursor> {
        let (ms, id) = s.split_once('-')?;
        if ms.is_empty()
            || ms.len() > 18
            || !ms.bytes().all(|b| b.is_ascii_digit())
            || id.len() != 40
            || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return None;
        }
        Some(Cursor {
            created_ms: ms.parse().ok()?,
            id: id.to_string(),
        })
    }

    pub fn text(&self) -> String {
        format!("{}-{}", self.created_ms, self.id)
    }
}

/// A `list` request.
#[derive(Debug, Clone)]
pub struct ListQuery {
    pub state: StateFilter,
    /// Every one must be on the issue.
    pub labels: Vec<String>,
    pub limit: usize,
    pub after: Option<Cursor>,
    /// Skip this many first (the web's page numbers); 0 with a cursor.
    pub offset: usize,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery {
            state: StateFilter::Open,
            labels: Vec::new(),
            limit: DEFAULT_PAGE,
            after: None,
            offset: 0,
        }
    }
}

/// One page of issues and the cursor of the next, if there is one.
#[derive(Debug, Clone)]
pub struct Page {
    pub issues: Vec<Issue>,
    pub next: Option<Cursor>,
}

/// Issues of `repo` with `state` and every one of `labels`, selecting
/// `what`.
fn filter<'a>(what: &str, repo: &str, state: StateFilter, labels: &[String]) -> Filter<'a> {
    let mut f = Filter::new(what, ISSUES, "i", repo);
    f.status(state.status());
    for label in labels {
        f.sql.push_str(
            " AND EXISTS (SELECT 1 FROM issue_labels l \
             WHERE l.repo = i.repo AND l.issue_id = i.id AND l.label = ?)",
        );
        f.params.push(label.clone().into());
    }
    f
}

/// Issues of `repo`, newest first (ties by id), filtered and paged.
pub fn list(conn: &Connection, repo: &str, query: &ListQuery) -> Result<Page> {
    let limit = query.limit.clamp(1, MAX_PAGE);
    let mut f = filter(ISSUE_COLUMNS, repo, query.state, &query.labels);
    if let Some(after) = &query.after {
        f.after(after.created_ms, &after.id);
    }
    f.page(limit, Some(query.offset));
    let mut issues = conn
        .prepare_cached(&f.sql)?
        .query_map(crate::sql::params_from_iter(f.params), issue_from_row)?
        .collect::<crate::sql::Result<Vec<_>>>()?;
    let next = if objects::cut_page(&mut issues, limit) {
        issues.last().map(|i| Cursor {
            created_ms: i.created_ms,
            id: i.id.clone(),
        })
    } else {
        None
    };
    for issue in &mut issues {
        issue.labels = labels_of(conn, repo, &issue.id)?;
    }
    Ok(Page { issues, next })
}

/// How many issues of `repo` match a state and labels (for page counts).
// Used by the importer and the web pages (landing next).
pub fn count(conn: &Connection, repo: &str, state: StateFilter, labels: &[String]) -> Result<i64> {
    let f = filter("COUNT(*)", repo, state, labels);
    Ok(conn
        .prepare_cached(&f.sql)?
        .query_row(crate::sql::params_from_iter(f.params), |r| r.get(0))?)
}

// ---------------------------------------------------------------- writes

/// Who writes, where, and under what conditions: shared by every write.
#[derive(Debug, Clone, Copy)]
pub struct WriteCtx<'a> {
    /// The repository's canonical name (`team/app.git`).
    pub repo: &'a str,
    pub actor: &'a Person,
    /// `--lease-token`: the write needs the issue's live tenure to have it.
    pub fence: Option<i64>,
    /// `max_issue_body`, in bytes.
    pub max_body: usize,
    /// Unix seconds.
    pub now: i64,
}

/// A new issue's fields.
#[derive(Debug, Clone, Default)]
pub struct NewIssue {
    pub title: String,
    pub body: String,
    pub labels: Vec<String>,
}

/// Open a new issue.
pub fn open(conn: &Connection, w: &WriteCtx<'_>, new: &NewIssue) -> Result<Written> {
    let WriteCtx {
        repo,
        actor,
        max_body,
        now,
        ..
    } = *w;
    let title = check_title(&new.title)?;
    check_body("body", &new.body, max_body)?;
    let labels = sorted_labels(&new.labels)?;
    let id = new_id();
    conn.prepare_cached(
        "INSERT INTO issues (repo, id, title, body, author, author_name, author_key,
                             created_ms, updated_ms, status)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, 'open')",
    )?
    .execute(crate::sql::params![
        repo,
        id,
        title,
        new.body,
        actor.principal,
        actor.name,
        actor.key,
        ms(now)
    ])?;
    insert_labels(conn, repo, &id, &labels)?;
    let seq = append_event(
        conn,
        "issue.opened",
        repo,
        &id,
        Some(actor),
        json!({
            "title": title,
            "body": new.body,
            "labels": labels,
            "author": person_json(actor),
        }),
        now,
    )?;
    Ok(Written {
        issue: id.clone(),
        event: Some(id),
        seq,
    })
}

fn insert_labels(conn: &Connection, repo: &str, id: &str, labels: &[String]) -> Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO issue_labels (repo, issue_id, label) VALUES (?1, ?2, ?3)
         ON CONFLICT DO NOTHING",
    )?;
    for label in labels {
        stmt.execute([repo, id, label])?;
    }
    Ok(())
}

/// Resolve the issue, check the fence, and return its row.
fn target(
    conn: &Connection,
    repo: &str,
    id_or_prefix: &str,
    fence: Option<i64>,
    now: i64,
) -> Result<Issue> {
    let id = resolve(conn, repo, id_or_prefix)?;
    let issue = get(conn, repo, &id)?.ok_or_else(|| IssueError::NotFound(id.clone()))?;
    if let Some(token) = fence {
        // Under the issue's lock, so no lease operation of another node
        // ends or hands on the tenure between this check and COMMIT.
        leases::lock_issue(conn, repo, &id)?;
        match leases::live_in(conn, repo, &id, now)? {
            Some(live) if live.token == token => {}
            live => {
                return Err(IssueError::Fenced {
                    closed: live.is_none() && issue.status == IssueStatus::Closed,
                    issue: id,
                    holder: live.as_ref().map(|l| l.holder.clone()),
                    token: live.map(|l| l.token),
                })
            }
        }
    }
    Ok(issue)
}

/// Record a write on `issue`: its time and a new revision (the export
/// follows revisions).
fn touch(conn: &Connection, issue: &Issue, now: i64) -> crate::sql::Result<()> {
    objects::touch(conn, ISSUES, &issue.repo, &issue.id, issue.updated_ms, now)
}

/// The end of every write on an existing issue: record the write
/// ([`touch`]) and append its event `kind` with `payload`.
fn record(
    conn: &Connection,
    w: &WriteCtx<'_>,
    issue: Issue,
    kind: &str,
    payload: serde_json::Value,
) -> Result<Written> {
    touch(conn, &issue, w.now)?;
    let seq = append_event(conn, kind, w.repo, &issue.id, Some(w.actor), payload, w.now)?;
    Ok(Written {
        issue: issue.id,
        event: None,
        seq,
    })
}

/// A comment row.
const INSERT_COMMENT: &str =
    "INSERT INTO issue_comments (repo, issue_id, position, id, author, author_name,
                                 author_key, at_ms, body)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

/// Add a comment at the end of the issue's thread.
pub fn comment(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    body: &str,
) -> Result<Written> {
    let WriteCtx {
        repo,
        actor,
        fence,
        max_body,
        now,
    } = *w;
    if body.trim().is_empty() {
        return Err(invalid("comment body is empty"));
    }
    check_body("comment", body, max_body)?;
    let comment_id = new_id();
    if fence.is_none() {
        if let Some(written) = comment_in_one_statement(conn, w, id_or_prefix, body, &comment_id)? {
            return Ok(written);
        }
    }
    let issue = target(conn, repo, id_or_prefix, fence, now)?;
    let position =
        objects::touch_for_comment(conn, ISSUES, repo, &issue.id, issue.updated_ms, now)?;
    conn.prepare_cached(INSERT_COMMENT)?
        .execute(crate::sql::params![
            repo,
            issue.id,
            position,
            comment_id,
            actor.principal,
            actor.name,
            actor.key,
            ms(now),
            body
        ])?;
    let seq = append_event(
        conn,
        "issue.commented",
        repo,
        &issue.id,
        Some(actor),
        comment_payload(&comment_id, position, body),
        now,
    )?;
    Ok(Written {
        issue: issue.id,
        event: Some(comment_id),
        seq,
    })
}

/// A comment's event payload.
fn comment_payload(comment_id: &str, position: i64, body: &str) -> serde_json::Value {
    json!({ "comment": { "id": comment_id, "position": position, "body": body } })
}

/// PostgreSQL, in a transaction: `comment`'s common case (an unfenced
/// comment on an issue named by a prefix that matches exactly one, in a
/// repository with its lasting id) as ONE statement, one round trip
/// instead of five (resolve, read, count, insert, event): data-modifying
/// CTEs that find the issue, count the comment, insert it and its event
/// (with a provisional `seq`, as `event_log::append` does). `None` when it
/// wrote nothing (another case, or SQLite): `comment`'s statements run
/// and say what is wrong, if anything. docs/postgres.md, "One statement
/// per issue comment".
fn comment_in_one_statement(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    body: &str,
    comment_id: &str,
) -> Result<Option<Written>> {
    let prefix = id_or_prefix.trim().to_ascii_lowercase();
    if !conn.is_postgres()
        || prefix.len() < 4
        || prefix.len() > 40
        || !prefix.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Ok(None);
    }
    // The payload's text around its position, which only the statement
    // learns: serialized with a stand-in, cut at the stand-in (a JSON
    // string holds no bare `"`, so the last match is the key itself).
    let text = comment_payload(comment_id, 0, body).to_string();
    let Some((before, after)) = text.rsplit_once("\"position\":0") else {
        return Ok(None);
    };
    let Some(seq) = conn.provisional_seq() else {
        return Ok(None);
    };
    let (actor, now_ms) = (w.actor, ms(w.now));
    let row = conn
        .prepare_cached(
            "WITH found AS (
                 SELECT id FROM issues WHERE repo = ?1 AND id >= ?2 AND id < ?3
                 ORDER BY id LIMIT 2
             ), one AS (
                 SELECT id FROM found
                 WHERE (SELECT count(*) FROM found) = 1
                   AND EXISTS (SELECT 1 FROM repositories WHERE name = ?1)
             ), touched AS (
                 UPDATE issues AS i
                 SET comment_count = i.comment_count + 1,
                     updated_ms = GREATEST(i.updated_ms, ?4),
                     revision = i.revision + 1
                 FROM one WHERE i.repo = ?1 AND i.id = one.id
                 RETURNING i.id, i.comment_count
             ), commented AS (
                 INSERT INTO issue_comments (repo, issue_id, position, id, author, author_name,
                                             author_key, at_ms, body)
                 SELECT ?1, id, comment_count, ?5, ?6, ?7, ?8, ?4, ?9 FROM touched
                 RETURNING issue_id, position
             ), appended AS (
                 INSERT INTO events (seq, at, type, repo, repo_id, object_id, actor, payload)
                 SELECT CAST(?10 AS BIGINT), CAST(?11 AS BIGINT), 'issue.commented', ?1, r.id,
                        c.issue_id, ?6, ?12 || c.position || ?13
                 FROM commented AS c JOIN repositories AS r ON r.name = ?1
                 RETURNING object_id
             )
             SELECT c.issue_id, c.position FROM commented AS c JOIN appended AS a
                 ON a.object_id = c.issue_id",
        )?
        .query_row(
            crate::sql::params![
                w.repo,
                prefix,
                format!("{prefix}g"),
                now_ms,
                comment_id,
                actor.principal,
                actor.name,
                actor.key,
                body,
                seq,
                w.now,
                format!("{before}\"position\":"),
                after,
            ],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
        )
        .optional()?;
    let Some((issue, _position)) = row else {
        return Ok(None);
    };
    conn.notify(event_log::EVENTS_CHANNEL)?;
    Ok(Some(Written {
        issue,
        event: Some(comment_id.to_string()),
        seq,
    }))
}

/// Replace the title and/or the body.
pub fn edit(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    title: Option<&str>,
    body: Option<&str>,
) -> Result<Written> {
    let WriteCtx {
        repo,
        fence,
        max_body,
        now,
        ..
    } = *w;
    if title.is_none() && body.is_none() {
        return Err(invalid("nothing to edit: give a title or a body"));
    }
    let title = title.map(check_title).transpose()?;
    if let Some(body) = body {
        check_body("body", body, max_body)?;
    }
    let issue = target(conn, repo, id_or_prefix, fence, now)?;
    conn.prepare_cached(
        "UPDATE issues SET title = COALESCE(?3, title), body = COALESCE(?4, body)
         WHERE repo = ?1 AND id = ?2",
    )?
    .execute(crate::sql::params![repo, issue.id, title, body])?;
    let mut payload = serde_json::Map::new();
    if let Some(t) = &title {
        payload.insert("title".into(), json!(t));
    }
    if let Some(b) = body {
        payload.insert("body".into(), json!(b));
    }
    record(conn, w, issue, "issue.edited", payload.into())
}

/// Highest priority accepted (0 is the most urgent).
pub const MAX_PRIORITY: i64 = 1_000_000;

/// Set or clear an issue's priority, which orders the work queue (0 first,
/// no priority last; see `queue`). Recorded as `issue.edited` with
/// `{"priority"}`; setting the priority it already has records nothing.
pub fn set_priority(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    priority: Option<i64>,
) -> Result<Written> {
    let WriteCtx {
        repo, fence, now, ..
    } = *w;
    if let Some(p) = priority {
        if !(0..=MAX_PRIORITY).contains(&p) {
            return Err(invalid(format!(
                "priority must be 0 to {MAX_PRIORITY}, or none"
            )));
        }
    }
    let issue = target(conn, repo, id_or_prefix, fence, now)?;
    if issue.priority == priority {
        return Ok(Written {
            issue: issue.id,
            event: None,
            seq: event_log::head(conn)?,
        });
    }
    conn.prepare_cached("UPDATE issues SET priority = ?3 WHERE repo = ?1 AND id = ?2")?
        .execute(crate::sql::params![repo, issue.id, priority])?;
    record(
        conn,
        w,
        issue,
        "issue.edited",
        json!({ "priority": priority }),
    )
}

/// Add and remove labels. Only real changes are recorded; asking for no
/// change is an error, as is ending up with more than [`MAX_LABELS`].
pub fn label(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    add: &[String],
    remove: &[String],
) -> Result<Written> {
    let WriteCtx {
        repo, fence, now, ..
    } = *w;
    for l in add.iter().chain(remove) {
        check_label(l)?;
    }
    if add.is_empty() && remove.is_empty() {
        return Err(invalid("nothing to do: give --add or --remove"));
    }
    if let Some(both) = add.iter().find(|l| remove.contains(l)) {
        return Err(invalid(format!("label '{both}' is both added and removed")));
    }
    let issue = target(conn, repo, id_or_prefix, fence, now)?;
    let mut added: Vec<String> = add
        .iter()
        .filter(|l| !issue.labels.contains(l))
        .cloned()
        .collect();
    let mut removed: Vec<String> = remove
        .iter()
        .filter(|l| issue.labels.contains(l))
        .cloned()
        .collect();
    for list in [&mut added, &mut removed] {
        list.sort();
        list.dedup();
    }
    if added.is_empty() && removed.is_empty() {
        return Err(invalid("labels already as requested"));
    }
    if issue.labels.len() + added.len() - removed.len() > MAX_LABELS {
        return Err(invalid(format!(
            "too many labels: at most {MAX_LABELS} per issue"
        )));
    }
    insert_labels(conn, repo, &issue.id, &added)?;
    let mut delete = conn.prepare_cached(
        "DELETE FROM issue_labels WHERE repo = ?1 AND issue_id = ?2 AND label = ?3",
    )?;
    for label in &removed {
        delete.execute([repo, &issue.id, label])?;
    }
    record(
        conn,
        w,
        issue,
        "issue.labeled",
        json!({ "add": added, "remove": removed }),
    )
}

/// Close an open issue, ending its live lease (recorded as a
/// `lease.released` event with reason `issue_closed`).
pub fn close(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    reason: Option<&str>,
) -> Result<Closed> {
    let WriteCtx {
        repo,
        actor,
        fence,
        now,
        ..
    } = *w;
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    if let Some(r) = reason {
        check_reason(r)?;
    }
    let issue = target(conn, repo, id_or_prefix, fence, now)?;
    if issue.status == IssueStatus::Closed {
        return Err(invalid(format!(
            "issue {} is already closed",
            short(&issue.id)
        )));
    }
    conn.prepare_cached(
        "UPDATE issues SET status = 'closed', closed_reason = ?3 WHERE repo = ?1 AND id = ?2",
    )?
    .execute(crate::sql::params![repo, issue.id, reason])?;
    let written = record(conn, w, issue, "issue.closed", json!({ "reason": reason }))?;
    let ended_lease = leases::end_on_close_in(conn, repo, &written.issue, now)?;
    if let Some(lease) = &ended_lease {
        append_event(
            conn,
            "lease.released",
            repo,
            &written.issue,
            Some(actor),
            json!({
                "holder": lease.holder,
                "token": lease.token,
                "reason": "issue_closed",
            }),
            now,
        )?;
    }
    Ok(Closed {
        written,
        ended_lease,
    })
}

/// Reopen a closed issue.
pub fn reopen(conn: &Connection, w: &WriteCtx<'_>, id_or_prefix: &str) -> Result<Written> {
    let WriteCtx {
        repo, fence, now, ..
    } = *w;
    let issue = target(conn, repo, id_or_prefix, fence, now)?;
    if issue.status == IssueStatus::Open {
        return Err(invalid(format!(
            "issue {} is already open",
            short(&issue.id)
        )));
    }
    conn.prepare_cached(
        "UPDATE issues SET status = 'open', closed_reason = NULL WHERE repo = ?1 AND id = ?2",
    )?
    .execute([repo, &issue.id])?;
    record(conn, w, issue, "issue.reopened", json!({}))
}

/// `repo#id8`: how a link target is written in text.
pub fn link_text(key: &IssueKey) -> String {
    let repo = key.repo.strip_suffix(".git").unwrap_or(&key.repo);
    format!("{repo}#{}", short(&key.id))
}

/// The existing link between two issues of this kind, either way round for
/// `relates`: `(from, to)` as stored.
fn find_link(
    conn: &Connection,
    from: &IssueKey,
    kind: LinkKind,
    to: &IssueKey,
) -> crate::sql::Result<Option<(IssueKey, IssueKey)>> {
    let exists = |a: &IssueKey, b: &IssueKey| -> crate::sql::Result<bool> {
        Ok(conn
            .prepare_cached(
                "SELECT 1 FROM issue_links WHERE repo = ?1 AND issue_id = ?2 AND kind = ?3
                 AND target_repo = ?4 AND target_id = ?5",
            )?
            .query_row(
                crate::sql::params![a.repo, a.id, kind.as_str(), b.repo, b.id],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    };
    if exists(from, to)? {
        return Ok(Some((from.clone(), to.clone())));
    }
    if kind == LinkKind::Relates && exists(to, from)? {
        return Ok(Some((to.clone(), from.clone())));
    }
    Ok(None)
}

/// Link `id_or_prefix` (in `repo`) to `target_prefix` in `target_repo`
/// (the same server; the caller checked the reader may see it).
/// The two ends of a link or unlink: the (fenced) issue written, its key,
/// and the other end's key.
fn link_ends(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    target_repo: &str,
    target_prefix: &str,
) -> Result<(Issue, IssueKey, IssueKey)> {
    let issue = target(conn, w.repo, id_or_prefix, w.fence, w.now)?;
    let other = IssueKey {
        repo: target_repo.to_string(),
        id: resolve(conn, target_repo, target_prefix)?,
    };
    let me = IssueKey {
        repo: w.repo.to_string(),
        id: issue.id.clone(),
    };
    Ok((issue, me, other))
}

pub fn link(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    kind: LinkKind,
    target_repo: &str,
    target_prefix: &str,
) -> Result<Written> {
    let WriteCtx {
        repo, actor, now, ..
    } = *w;
    let (issue, me, other) = link_ends(conn, w, id_or_prefix, target_repo, target_prefix)?;
    if me == other {
        return Err(invalid("an issue cannot link to itself"));
    }
    if find_link(conn, &me, kind, &other)?.is_some() {
        return Err(invalid(format!(
            "{} already {} {}",
            link_text(&me),
            kind.as_str(),
            link_text(&other)
        )));
    }
    conn.prepare_cached(
        "INSERT INTO issue_links (repo, issue_id, kind, target_repo, target_id, author, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(crate::sql::params![
        repo,
        issue.id,
        kind.as_str(),
        other.repo,
        other.id,
        actor.principal,
        ms(now)
    ])?;
    record(conn, w, issue, "issue.linked", link_payload(kind, &other))
}

fn link_payload(kind: LinkKind, other: &IssueKey) -> serde_json::Value {
    json!({
        "kind": kind.as_str(),
        "target_repo": other.repo,
        "target_id": other.id,
        "target": link_text(other),
    })
}

/// Remove a link made by `link` (for `relates`, made from either side).
pub fn unlink(
    conn: &Connection,
    w: &WriteCtx<'_>,
    id_or_prefix: &str,
    kind: LinkKind,
    target_repo: &str,
    target_prefix: &str,
) -> Result<Written> {
    let (issue, me, other) = link_ends(conn, w, id_or_prefix, target_repo, target_prefix)?;
    let Some((from, to)) = find_link(conn, &me, kind, &other)? else {
        return Err(invalid(format!(
            "{} does not {} {}",
            link_text(&me),
            if kind == LinkKind::Blocks {
                "block"
            } else {
                "relate to"
            },
            link_text(&other)
        )));
    };
    conn.prepare_cached(
        "DELETE FROM issue_links WHERE repo = ?1 AND issue_id = ?2 AND kind = ?3
         AND target_repo = ?4 AND target_id = ?5",
    )?
    .execute(crate::sql::params![
        from.repo,
        from.id,
        kind.as_str(),
        to.repo,
        to.id
    ])?;
    record(conn, w, issue, "issue.unlinked", link_payload(kind, &other))
}

// ---------------------------------------------------------------- import

/// Insert an issue replayed from git, keeping its id, authors, times,
/// labels, status and comment order, and append its `issue.imported`
/// event. An issue already in the table is left alone (`Ok(None)`).
// Used by the importer and the web pages (landing next).
pub fn insert_imported(
    conn: &Connection,
    issue: &Issue,
    comments: &[Comment],
    now: i64,
) -> Result<Option<i64>> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO issues (repo, id, title, body, author, author_name, author_key,
                                 created_ms, updated_ms, status, closed_reason, imported,
                                 comment_count)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 1, ?12)
             ON CONFLICT (repo, id) DO NOTHING",
        )?
        .execute(crate::sql::params![
            issue.repo,
            issue.id,
            issue.title,
            issue.body,
            issue.author.principal,
            issue.author.name,
            issue.author.key,
            issue.created_ms,
            issue.updated_ms,
            status_str(issue.status),
            issue.closed_reason,
            comments.len() as i64,
        ])?;
    if inserted == 0 {
        return Ok(None);
    }
    insert_labels(conn, &issue.repo, &issue.id, &issue.labels)?;
    let mut stmt = conn.prepare_cached(INSERT_COMMENT)?;
    for (i, c) in comments.iter().enumerate() {
        stmt.execute(crate::sql::params![
            issue.repo,
            issue.id,
            i as i64 + 1,
            c.id,
            c.author.principal,
            c.author.name,
            c.author.key,
            c.at_ms,
            c.body
        ])?;
    }
    // The server imports; the issue's author is in the payload.
    let payload = json!({
        "title": issue.title,
        "status": status_str(issue.status),
        "labels": issue.labels,
        "comments": comments.len(),
        "created_ms": issue.created_ms,
        "author": person_json(&issue.author),
    });
    let seq = objects::append_event(
        conn,
        "issue.imported",
        &issue.repo,
        &issue.id,
        None,
        payload,
        now,
    )?;
    Ok(Some(seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPO: &str = "team/app.git";
    const T0: i64 = 1_790_000_000;
    const MAX: usize = 256 * 1024;

    fn db() -> crate::testing::TestDb {
        crate::testing::db()
    }

    fn alice() -> Person {
        Person {
            principal: "alice".into(),
            name: "alice".into(),
            key: Some("ssh-ed25519 AAAAalice".into()),
        }
    }

    fn at(now: i64) -> WriteCtx<'static> {
        in_repo(REPO, None, now)
    }

    fn fenced(token: i64, now: i64) -> WriteCtx<'static> {
        in_repo(REPO, Some(token), now)
    }

    fn in_repo(repo: &'static str, fence: Option<i64>, now: i64) -> WriteCtx<'static> {
        static ALICE: std::sync::OnceLock<Person> = std::sync::OnceLock::new();
        WriteCtx {
            repo,
            actor: ALICE.get_or_init(alice),
            fence,
            max_body: MAX,
            now,
        }
    }

    fn open_one(conn: &Connection, title: &str, labels: &[&str], now: i64) -> String {
        let new = NewIssue {
            title: title.into(),
            body: "body".into(),
            labels: labels.iter().map(|s| s.to_string()).collect(),
        };
        open(conn, &at(now), &new).unwrap().issue
    }

    #[test]
    fn hidden_characters_are_refused_and_nothing_is_written() {
        let conn = crate::testing::db();
        let issue = |title: &str, body: &str, label: &str| NewIssue {
            title: title.into(),
            body: body.into(),
            labels: vec![label.to_string()],
        };
        for (new, says) in [
            (issue("a\u{202E}b", "", "x"), "title contains U+202E"),
            (issue("a\u{200B}b", "", "x"), "title contains U+200B"),
            (issue("ok", "", "b\u{2060}ug"), "label contains U+2060"),
            (
                issue("ok", "x \u{2066}y\u{2069}", "x"),
                "body contains U+2066",
            ),
        ] {
            let err = open(&conn, &at(100), &new).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
        assert_eq!(row_counts(&conn), [0, 0, 0, 0, 0]);
        // Marks and joiners pass in a body.
        let id = open(
            &conn,
            &at(100),
            &issue("ok", "שלום\u{200F} 👩\u{200D}💻", "x"),
        )
        .unwrap()
        .issue;
        let err = close(&conn, &at(101), &id, Some("done\u{202D}")).unwrap_err();
        assert!(err.to_string().contains("reason contains U+202D"), "{err}");
    }

    fn event_kinds(conn: &Connection) -> Vec<(i64, String)> {
        event_log::after(conn, 0, 1000)
            .unwrap()
            .into_iter()
            .map(|e| (e.seq, e.kind))
            .collect()
    }

    fn row_counts(conn: &Connection) -> Vec<i64> {
        [
            "issues",
            "issue_comments",
            "issue_labels",
            "issue_links",
            "events",
        ]
        .iter()
        .map(|t| {
            conn.query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| r.get(0))
                .unwrap()
        })
        .collect()
    }

    #[test]
    fn open_then_show_round_trips_with_its_event() {
        let conn = db();
        let new = NewIssue {
            title: "  Crash on start ".into(),
            body: "boom\nline two".into(),
            labels: vec!["ui".into(), "bug".into(), "ui".into()],
        };
        let w = open(&conn, &at(T0), &new).unwrap();
        assert_eq!(w.issue.len(), 40);
        assert!(w.issue.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(w.seq, 1);
        let d = show(&conn, REPO, &w.issue[..6]).unwrap();
        assert_eq!(d.issue.title, "Crash on start");
        assert_eq!(d.issue.body, "boom\nline two");
        assert_eq!(d.issue.labels, ["bug", "ui"]);
        assert_eq!(d.issue.status, IssueStatus::Open);
        assert_eq!(d.issue.created_ms, T0 * 1000);
        assert_eq!(d.issue.author, alice());
        assert!(d.comments.is_empty());
        let ev = &event_log::after(&conn, 0, 10).unwrap()[0];
        assert_eq!(ev.kind, "issue.opened");
        assert_eq!(ev.object_id.as_deref(), Some(w.issue.as_str()));
        assert_eq!(ev.actor.as_deref(), Some("alice"));
        assert_eq!(ev.payload["labels"], json!(["bug", "ui"]));
    }

    #[test]
    fn comments_keep_their_order_and_bump_updated() {
        let conn = db();
        let id = open_one(&conn, "t", &[], T0);
        for (i, body) in ["one", "two", "three"].iter().enumerate() {
            let w = comment(&conn, &at(T0 + i as i64), &id, body).unwrap();
            assert_eq!(w.seq, i as i64 + 2);
            assert_eq!(w.event.as_ref().unwrap().len(), 40);
        }
        let d = show(&conn, REPO, &id).unwrap();
        let bodies: Vec<_> = d.comments.iter().map(|c| c.body.as_str()).collect();
        assert_eq!(bodies, ["one", "two", "three"]);
        assert_eq!(d.issue.comment_count, 3);
        assert_eq!(d.issue.updated_ms, (T0 + 2) * 1000);
    }

    /// A comment written in a transaction (on PostgreSQL the one-statement
    /// path, `comment_in_one_statement`) reads back as the statements
    /// write it: the row, the count, the issue's time and revision, and the
    /// event with its payload byte for byte the JSON `comment_payload`
    /// makes, whatever the body holds; a prefix that is ambiguous, unknown
    /// or fenced still gets its own error and writes nothing.
    #[test]
    fn a_comment_in_a_transaction_writes_what_the_statements_write() {
        use crate::sql::{Transaction, TransactionBehavior};
        let conn = db();
        let id = open_one(&conn, "t", &[], T0);
        let before = get(&conn, REPO, &id).unwrap().unwrap();
        let revision = |conn: &Connection| -> i64 {
            conn.query_row(
                "SELECT revision FROM issues WHERE repo = ?1 AND id = ?2",
                [REPO, &id],
                |r| r.get(0),
            )
            .unwrap()
        };
        let revision_before = revision(&conn);
        let bodies = [
            "plain",
            "quotes \" and \\ and \"position\":0 and {\"position\":0}}",
            "lines\nand\ttabs, ünïcödé, 🦀, </script>",
        ];
        for (i, body) in bodies.iter().enumerate() {
            let tx = Transaction::new_unchecked(&conn, TransactionBehavior::Immediate).unwrap();
            let w = comment(&tx, &at(T0 + 10 + i as i64), &id[..8], body).unwrap();
            tx.commit().unwrap();
            assert_eq!(w.issue, id);
            let event = event_log::after(&conn, 0, 100)
                .unwrap()
                .into_iter()
                .find(|e| e.kind == "issue.commented" && e.payload["comment"]["body"] == *body)
                .expect("the comment's event");
            let comment_id = w.event.as_deref().unwrap();
            let position = i as i64 + 1;
            assert_eq!(event.payload, comment_payload(comment_id, position, body));
            let raw: String = conn
                .query_row(
                    "SELECT payload FROM events WHERE seq = ?1",
                    [event.seq],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(raw, comment_payload(comment_id, position, body).to_string());
            assert_eq!(event.object_id.as_deref(), Some(id.as_str()));
            assert_eq!(event.actor.as_deref(), Some("alice"));
            assert_eq!(event.at, T0 + 10 + i as i64);
        }
        let after = show(&conn, REPO, &id).unwrap();
        let got: Vec<_> = after.comments.iter().map(|c| c.body.as_str()).collect();
        assert_eq!(got, bodies);
        assert_eq!(after.issue.comment_count, 3);
        assert_eq!(after.issue.updated_ms, (T0 + 12) * 1000);
        assert!(after.issue.updated_ms > before.updated_ms);
        assert_eq!(revision(&conn), revision_before + 3);
        let seqs: Vec<i64> = event_log::after(&conn, 0, 100)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, (1..=4).collect::<Vec<_>>(), "final, gap-free numbers");

        // The other cases go the statements' way and say what is wrong.
        conn.execute(
            "INSERT INTO issues (repo, id, title, body, author, author_name, created_ms,
                                 updated_ms, status) VALUES (?1, ?2, 't', '', 'a', 'a', 0, 0, 'open')",
            [REPO, &format!("{}{}", &id[..8], "0".repeat(32))],
        )
        .unwrap();
        let other = format!("{}{}", &id[..8], "1".repeat(32));
        conn.execute(
            "INSERT INTO issues (repo, id, title, body, author, author_name, created_ms,
                                 updated_ms, status) VALUES (?1, ?2, 't', '', 'a', 'a', 0, 0, 'open')",
            [REPO, &other],
        )
        .unwrap();
        let tx = Transaction::new_unchecked(&conn, TransactionBehavior::Immediate).unwrap();
        let ambiguous = comment(&tx, &at(T0 + 20), &id[..8], "x");
        assert!(
            matches!(ambiguous, Err(IssueError::Ambiguous { .. })),
            "{ambiguous:?}"
        );
        let unknown = comment(&tx, &at(T0 + 20), "0123456789", "x");
        assert!(
            matches!(unknown, Err(IssueError::NotFound(_))),
            "{unknown:?}"
        );
        let fenced = comment(&tx, &fenced(7, T0 + 20), &id, "x");
        assert!(
            matches!(fenced, Err(IssueError::Fenced { .. })),
            "{fenced:?}"
        );
        tx.commit().unwrap();
        assert_eq!(show(&conn, REPO, &id).unwrap().issue.comment_count, 3);
        assert_eq!(event_log::after(&conn, 0, 100).unwrap().len(), 4);
    }

    #[test]
    fn resolve_prefixes_and_ambiguity() {
        let conn = db();
        for id in [
            "abcd000000000000000000000000000000000001",
            "abcd000000000000000000000000000000000002",
            "ef01000000000000000000000000000000000003",
        ] {
            conn.execute(
                "INSERT INTO issues (repo, id, title, body, author, author_name, created_ms,
                                     updated_ms, status) VALUES (?1, ?2, 't', '', 'a', 'a', 0, 0, 'open')",
                [REPO, id],
            )
            .unwrap();
        }
        assert_eq!(
            resolve(&conn, REPO, "EF01").unwrap(),
            "ef01000000000000000000000000000000000003"
        );
        match resolve(&conn, REPO, "abcd") {
            Err(IssueError::Ambiguous { candidates, .. }) => assert_eq!(candidates.len(), 2),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            resolve(&conn, REPO, "abc"),
            Err(IssueError::InvalidId(_))
        ));
        assert!(matches!(
            resolve(&conn, REPO, "zzzz"),
            Err(IssueError::InvalidId(_))
        ));
        assert!(matches!(
            resolve(&conn, REPO, "1234"),
            Err(IssueError::NotFound(_))
        ));
        assert!(matches!(
            resolve(&conn, "other.git", "ef01"),
            Err(IssueError::NotFound(_))
        ));
    }

    #[test]
    fn hostile_input_is_refused_and_writes_nothing() {
        let conn = db();
        let id = open_one(&conn, "t", &[], T0);
        let before = row_counts(&conn);
        let bad_opens = [
            ("", "", vec![]),
            ("two\nlines", "", vec![]),
            ("esc\x1b[31m", "", vec![]),
            ("ok", "nul\0here", vec![]),
            ("ok", "", vec!["".to_string()]),
            ("ok", "", vec!["has space".to_string()]),
            ("ok", "", vec!["a,b".to_string()]),
            (
                "ok",
                "",
                (0..=MAX_LABELS).map(|i| format!("l{i}")).collect(),
            ),
            ("ok", "", vec!["x".repeat(MAX_LABEL_BYTES + 1)]),
            (&"t".repeat(MAX_TITLE_BYTES + 1) as &str, "", vec![]),
        ];
        for (title, body, labels) in bad_opens {
            let new = NewIssue {
                title: title.into(),
                body: body.into(),
                labels,
            };
            let err = open(&conn, &at(T0), &new).unwrap_err();
            assert!(matches!(err, IssueError::Invalid(_)), "{title:?}: {err}");
        }
        let big = "x".repeat(11);
        assert!(matches!(
            comment(
                &conn,
                &WriteCtx {
                    max_body: 10,
                    ..at(T0)
                },
                &id,
                &big
            ),
            Err(IssueError::Invalid(_))
        ));
        for body in ["", "  \n", "a\0b"] {
            assert!(comment(&conn, &at(T0), &id, body).is_err());
        }
        assert!(label(&conn, &at(T0), &id, &[], &[]).is_err());
        assert!(label(&conn, &at(T0), &id, &["a".into()], &["a".into()]).is_err());
        assert!(close(&conn, &at(T0), &id, Some("a\nb")).is_err());
        assert!(edit(&conn, &at(T0), &id, None, None).is_err());
        assert_eq!(row_counts(&conn), before);
    }

    #[test]
    fn labels_change_only_what_differs() {
        let conn = db();
        let id = open_one(&conn, "t", &["bug"], T0);
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        label(&conn, &at(T0), &id, &s(&["ui", "bug"]), &s(&[])).unwrap();
        assert_eq!(
            get(&conn, REPO, &id).unwrap().unwrap().labels,
            ["bug", "ui"]
        );
        let ev = event_log::after(&conn, 0, 10).unwrap().pop().unwrap();
        assert_eq!(ev.payload, json!({"add": ["ui"], "remove": []}));
        let err = label(&conn, &at(T0), &id, &s(&["ui"]), &s(&["nope"]));
        assert!(matches!(err, Err(IssueError::Invalid(m)) if m.contains("already")));
        label(&conn, &at(T0), &id, &s(&[]), &s(&["bug"])).unwrap();
        assert_eq!(get(&conn, REPO, &id).unwrap().unwrap().labels, ["ui"]);
        // The label cap counts what the issue would end up with.
        let many: Vec<String> = (0..MAX_LABELS).map(|i| format!("l{i}")).collect();
        assert!(label(&conn, &at(T0), &id, &many, &[]).is_err());
        assert!(label(&conn, &at(T0), &id, &many, &s(&["ui"])).is_ok());
    }

    #[test]
    fn close_and_reopen_follow_the_status() {
        let conn = db();
        let id = open_one(&conn, "t", &[], T0);
        close(&conn, &at(T0), &id, Some(" done ")).unwrap();
        let issue = get(&conn, REPO, &id).unwrap().unwrap();
        assert_eq!(issue.status, IssueStatus::Closed);
        assert_eq!(issue.closed_reason.as_deref(), Some("done"));
        assert!(close(&conn, &at(T0), &id, None).is_err());
        reopen(&conn, &at(T0), &id).unwrap();
        let issue = get(&conn, REPO, &id).unwrap().unwrap();
        assert_eq!(
            (issue.status, issue.closed_reason),
            (IssueStatus::Open, None)
        );
        assert!(reopen(&conn, &at(T0), &id).is_err());
        let kinds: Vec<String> = event_kinds(&conn).into_iter().map(|(_, k)| k).collect();
        assert_eq!(kinds, ["issue.opened", "issue.closed", "issue.reopened"]);
    }

    #[test]
    fn fencing_refuses_stale_tokens_and_writes_nothing() {
        let conn = db();
        let id = open_one(&conn, "t", &[], T0);
        // No lease at all: any token is refused.
        let err = comment(&conn, &fenced(1, T0), &id, "x").unwrap_err();
        assert!(matches!(
            err,
            IssueError::Fenced {
                holder: None,
                token: None,
                ..
            }
        ));
        leases::acquire(&conn, REPO, &id, "bob", Some(60), T0).unwrap();
        leases::release(&conn, REPO, &id, "bob", T0).unwrap();
        leases::acquire(&conn, REPO, &id, "carol", Some(60), T0).unwrap();
        let before = row_counts(&conn);
        let err = comment(&conn, &fenced(1, T0), &id, "x").unwrap_err();
        match &err {
            IssueError::Fenced { holder, token, .. } => {
                assert_eq!((holder.as_deref(), *token), (Some("carol"), Some(2)));
                assert!(err.to_string().contains("carol") && err.to_string().contains('2'));
            }
            other => panic!("{other:?}"),
        }
        assert!(close(&conn, &fenced(1, T0), &id, None).is_err());
        assert_eq!(row_counts(&conn), before);
        comment(&conn, &fenced(2, T0), &id, "x").unwrap();
        // An expired tenure's token no longer passes.
        let err = comment(&conn, &fenced(2, T0 + 60), &id, "y").unwrap_err();
        assert!(matches!(
            err,
            IssueError::Fenced {
                holder: None,
                closed: false,
                ..
            }
        ));
    }

    #[test]
    fn a_token_whose_lease_the_close_ended_is_told_the_issue_is_closed() {
        let conn = db();
        let id = open_one(&conn, "t", &[], T0);
        leases::acquire(&conn, REPO, &id, "bob", Some(60), T0).unwrap();
        close(&conn, &fenced(1, T0), &id, None).unwrap();
        let err = close(&conn, &fenced(1, T0), &id, None).unwrap_err();
        assert!(
            matches!(
                err,
                IssueError::Fenced {
                    holder: None,
                    closed: true,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("is closed"), "{err}");
    }

    #[test]
    fn closing_ends_the_live_lease_and_records_it() {
        let conn = db();
        let id = open_one(&conn, "t", &[], T0);
        leases::acquire(&conn, REPO, &id, "bob", None, T0).unwrap();
        let closed = close(&conn, &fenced(1, T0), &id, None).unwrap();
        let ended = closed.ended_lease.unwrap();
        assert_eq!((ended.holder.as_str(), ended.token), ("bob", 1));
        assert_eq!(leases::live_in(&conn, REPO, &id, T0).unwrap(), None);
        let last = event_log::after(&conn, 0, 10).unwrap().pop().unwrap();
        assert_eq!(last.kind, "lease.released");
        assert_eq!(last.payload["reason"], "issue_closed");
        assert_eq!(last.payload["holder"], "bob");
        // The token keeps growing for the next tenure.
        reopen(&conn, &at(T0), &id).unwrap();
        let leases::Acquire::Acquired { lease, .. } =
            leases::acquire(&conn, REPO, &id, "dave", None, T0).unwrap()
        else {
            panic!("dave acquires")
        };
        assert_eq!((lease.token, lease.expires_at), (2, None));
    }

    #[test]
    fn links_show_from_both_sides_and_across_repos() {
        const LIB: &str = "team/lib.git";
        let conn = db();
        let a = open_one(&conn, "a", &[], T0);
        let b = open_one(&conn, "b", &[], T0 + 1);
        let new = NewIssue {
            title: "c".into(),
            ..Default::default()
        };
        let lib = in_repo(LIB, None, T0);
        let other = open(&conn, &lib, &new).unwrap().issue;
        let w = at(T0);
        link(&conn, &w, &a, LinkKind::Blocks, REPO, &b[..8]).unwrap();
        link(&conn, &w, &a, LinkKind::Relates, LIB, &other).unwrap();
        let key = |repo: &str, id: &str| IssueKey {
            repo: repo.into(),
            id: id.into(),
        };
        let la = links_of(&conn, REPO, &a).unwrap();
        assert_eq!(la.blocks, [key(REPO, &b)]);
        assert_eq!(la.relates, [key(LIB, &other)]);
        let lb = links_of(&conn, REPO, &b).unwrap();
        assert_eq!(lb.blocked_by, [key(REPO, &a)]);
        let lc = links_of(&conn, LIB, &other).unwrap();
        assert_eq!(lc.relates, [key(REPO, &a)]);
        // Duplicates (relates either way round) and self links are refused.
        assert!(link(&conn, &w, &a, LinkKind::Blocks, REPO, &b).is_err());
        assert!(link(&conn, &lib, &other, LinkKind::Relates, REPO, &a).is_err());
        assert!(link(&conn, &w, &a, LinkKind::Blocks, REPO, &a).is_err());
        // Unlink from the other side of a relates.
        unlink(&conn, &lib, &other, LinkKind::Relates, REPO, &a).unwrap();
        assert!(links_of(&conn, REPO, &a).unwrap().relates.is_empty());
        assert!(unlink(&conn, &w, &b, LinkKind::Blocks, REPO, &a).is_err());
        let ev = event_log::after(&conn, 0, 100).unwrap();
        let linked = ev.iter().find(|e| e.kind == "issue.linked").unwrap();
        assert_eq!(linked.payload["target"], format!("team/app#{}", &b[..8]));
    }

    #[test]
    fn list_pages_with_a_stable_cursor_and_filters() {
        let conn = db();
        let mut ids = Vec::new();
        for i in 0..7 {
            // Two issues share each second, so ties by id are exercised.
            let labels: &[&str] = if i % 2 == 0 { &["even"] } else { &[] };
            ids.push((
                T0 + i / 2,
                open_one(&conn, &format!("t{i}"), labels, T0 + i / 2),
            ));
        }
        let id0 = ids[0].1.clone();
        close(&conn, &at(T0), &id0, None).unwrap();
        ids.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let expected: Vec<String> = ids.iter().map(|(_, id)| id.clone()).collect();
        let mut got = Vec::new();
        let mut query = ListQuery {
            state: StateFilter::All,
            limit: 3,
            ..Default::default()
        };
        loop {
            let page = list(&conn, REPO, &query).unwrap();
            assert!(page.issues.len() <= 3);
            got.extend(page.issues.iter().map(|i| i.id.clone()));
            match page.next {
                Some(c) => query.after = Some(Cursor::parse(&c.text()).unwrap()),
                None => break,
            }
        }
        assert_eq!(got, expected);
        let open_even = list(
            &conn,
            REPO,
            &ListQuery {
                labels: vec!["even".into()],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(open_even.issues.len(), 3, "4 even, one of them closed");
        assert!(open_even.issues.iter().all(|i| i.labels == ["even"]));
        assert_eq!(count(&conn, REPO, StateFilter::Closed, &[]).unwrap(), 1);
        assert_eq!(
            count(&conn, REPO, StateFilter::Open, &["even".into()]).unwrap(),
            3
        );
    }

    #[test]
    fn cursors_parse_strictly() {
        let id = "a".repeat(40);
        assert_eq!(
            Cursor::parse(&format!("12-{id}")),
            Some(Cursor {
                created_ms: 12,
                id: id.clone()
            })
        );
        for bad in [
            "",
            "12",
            "-aaaa",
            &format!("x-{id}"),
            &format!("12-{}", "A".repeat(40)),
        ] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn import_keeps_everything_and_is_idempotent() {
        let conn = db();
        let issue = Issue {
            repo: REPO.into(),
            id: "0123456789012345678901234567890123456789".into(),
            title: "old".into(),
            body: "b".into(),
            author: alice(),
            created_ms: 1_000,
            updated_ms: 5_000,
            status: IssueStatus::Closed,
            closed_reason: Some("done".into()),
            priority: None,
            imported: true,
            labels: vec!["bug".into()],
            comment_count: 2,
        };
        let comments: Vec<Comment> = (0..2)
            .map(|i| Comment {
                id: format!("{i:040}"),
                author: alice(),
                at_ms: 2_000 + i,
                body: format!("c{i}"),
            })
            .collect();
        assert_eq!(
            insert_imported(&conn, &issue, &comments, T0).unwrap(),
            Some(1)
        );
        assert_eq!(insert_imported(&conn, &issue, &comments, T0).unwrap(), None);
        let d = show(&conn, REPO, &issue.id).unwrap();
        assert_eq!(d.issue, issue);
        assert_eq!(d.comments, comments);
        // Server writes carry on after the imported comments.
        comment(&conn, &at(T0), &issue.id, "new").unwrap();
        let d = show(&conn, REPO, &issue.id).unwrap();
        assert_eq!(d.comments.len(), 3);
        assert_eq!(d.comments[2].body, "new");
    }
}
