//! Search over the words of issues, patches and their comments: the
//! indexes (migration 19), the user's query turned into plain terms, and
//! the one ranked, paged query the SSH verb `collab-search`, its MCP tool
//! and the web's search page share.
//!
//! The index is part of each write's transaction. On SQLite it is a
//! contentless FTS5 table (`search_fts`: the text stays in its own table,
//! not copied into the index) whose rows `search_docs` ties to their issue, patch or comment; triggers on those tables keep both, so no writer
//! has to remember it (a rename moves the rows' `repo`, the triggers
//! follow). On PostgreSQL each table holds its text search vector in a
//! stored generated column (`search_vector`, from `collab_search_vector`)
//! with a GIN index over it, which PostgreSQL keeps itself.
//!
//! No user syntax reaches either engine: a query is split into words of
//! letters and digits ([`Terms::parse`]), and every word must match.
//! Ranking is the engine's: bm25 (a title weighs ten times a body) on
//! SQLite, `ts_rank` (a title weighs A, the rest D) on PostgreSQL; an
//! object ranks by its best matching text. Which repositories a search
//! reads is the caller's decision (`Query::repos`); this module never
//! widens it.

use crate::sql::{params_from_iter, Connection, Result, Value};

/// The longest query accepted, in bytes (docs/security.md).
pub const MAX_QUERY_BYTES: usize = 256;
/// The most words a query may hold.
pub const MAX_TERMS: usize = 16;
/// About how many characters a snippet shows.
const SNIPPET_CHARS: usize = 160;

/// Version 19 on SQLite: the FTS5 table, its map to the rows, the triggers
/// that keep both, and the rows already there indexed. The map's column is
/// `in_repo`, not `repo`: a rename or delete of a repository moves the
/// indexed rows' own `repo`, and the triggers carry that here
/// (`repos::tables_with_repo` must not move these rows a second time).
pub const SQLITE_SCHEMA: &str = "
CREATE TABLE search_docs (
    doc       INTEGER NOT NULL PRIMARY KEY,
    in_repo   TEXT    NOT NULL,
    kind      TEXT    NOT NULL CHECK (kind IN ('issue', 'patch')),
    object_id TEXT    NOT NULL,
    part      TEXT    NOT NULL,
    UNIQUE (in_repo, kind, object_id, part)
);
CREATE VIRTUAL TABLE search_fts USING fts5(
    title, body, tokenize = 'porter unicode61',
    content = '', contentless_delete = 1
);

CREATE TRIGGER issues_search_insert AFTER INSERT ON issues BEGIN
    INSERT INTO search_docs (in_repo, kind, object_id, part) VALUES (NEW.repo, 'issue', NEW.id, '');
    INSERT INTO search_fts (rowid, title, body) VALUES (last_insert_rowid(), NEW.title, NEW.body);
END;
CREATE TRIGGER issues_search_update AFTER UPDATE OF repo, id, title, body ON issues BEGIN
    UPDATE search_docs SET in_repo = NEW.repo, object_id = NEW.id
    WHERE in_repo = OLD.repo AND kind = 'issue' AND object_id = OLD.id AND part = '';
    INSERT OR REPLACE INTO search_fts (rowid, title, body)
    SELECT doc, NEW.title, NEW.body FROM search_docs
    WHERE (OLD.title IS NOT NEW.title OR OLD.body IS NOT NEW.body)
      AND in_repo = NEW.repo AND kind = 'issue' AND object_id = NEW.id AND part = '';
END;
CREATE TRIGGER issues_search_delete AFTER DELETE ON issues BEGIN
    DELETE FROM search_fts WHERE rowid = (SELECT doc FROM search_docs
        WHERE in_repo = OLD.repo AND kind = 'issue' AND object_id = OLD.id AND part = '');
    DELETE FROM search_docs WHERE in_repo = OLD.repo AND kind = 'issue' AND object_id = OLD.id AND part = '';
END;

CREATE TRIGGER issue_comments_search_insert AFTER INSERT ON issue_comments BEGIN
    INSERT INTO search_docs (in_repo, kind, object_id, part) VALUES (NEW.repo, 'issue', NEW.issue_id, NEW.id);
    INSERT INTO search_fts (rowid, title, body) VALUES (last_insert_rowid(), '', NEW.body);
END;
CREATE TRIGGER issue_comments_search_update AFTER UPDATE OF repo, issue_id, id, body ON issue_comments BEGIN
    UPDATE search_docs SET in_repo = NEW.repo, object_id = NEW.issue_id, part = NEW.id
    WHERE in_repo = OLD.repo AND kind = 'issue' AND object_id = OLD.issue_id AND part = OLD.id;
    INSERT OR REPLACE INTO search_fts (rowid, title, body)
    SELECT doc, '', NEW.body FROM search_docs
    WHERE OLD.body IS NOT NEW.body
      AND in_repo = NEW.repo AND kind = 'issue' AND object_id = NEW.issue_id AND part = NEW.id;
END;
CREATE TRIGGER issue_comments_search_delete AFTER DELETE ON issue_comments BEGIN
    DELETE FROM search_fts WHERE rowid = (SELECT doc FROM search_docs
        WHERE in_repo = OLD.repo AND kind = 'issue' AND object_id = OLD.issue_id AND part = OLD.id);
    DELETE FROM search_docs WHERE in_repo = OLD.repo AND kind = 'issue' AND object_id = OLD.issue_id AND part = OLD.id;
END;

CREATE TRIGGER patches_search_insert AFTER INSERT ON patches BEGIN
    INSERT INTO search_docs (in_repo, kind, object_id, part) VALUES (NEW.repo, 'patch', NEW.id, '');
    INSERT INTO search_fts (rowid, title, body) VALUES (last_insert_rowid(), NEW.title, NEW.body);
END;
CREATE TRIGGER patches_search_update AFTER UPDATE OF repo, id, title, body ON patches BEGIN
    UPDATE search_docs SET in_repo = NEW.repo, object_id = NEW.id
    WHERE in_repo = OLD.repo AND kind = 'patch' AND object_id = OLD.id AND part = '';
    INSERT OR REPLACE INTO search_fts (rowid, title, body)
    SELECT doc, NEW.title, NEW.body FROM search_docs
    WHERE (OLD.title IS NOT NEW.title OR OLD.body IS NOT NEW.body)
      AND in_repo = NEW.repo AND kind = 'patch' AND object_id = NEW.id AND part = '';
END;
CREATE TRIGGER patches_search_delete AFTER DELETE ON patches BEGIN
    DELETE FROM search_fts WHERE rowid = (SELECT doc FROM search_docs
        WHERE in_repo = OLD.repo AND kind = 'patch' AND object_id = OLD.id AND part = '');
    DELETE FROM search_docs WHERE in_repo = OLD.repo AND kind = 'patch' AND object_id = OLD.id AND part = '';
END;

CREATE TRIGGER patch_comments_search_insert AFTER INSERT ON patch_comments BEGIN
    INSERT INTO search_docs (in_repo, kind, object_id, part) VALUES (NEW.repo, 'patch', NEW.patch_id, NEW.id);
    INSERT INTO search_fts (rowid, title, body) VALUES (last_insert_rowid(), '', NEW.body);
END;
CREATE TRIGGER patch_comments_search_update AFTER UPDATE OF repo, patch_id, id, body ON patch_comments BEGIN
    UPDATE search_docs SET in_repo = NEW.repo, object_id = NEW.patch_id, part = NEW.id
    WHERE in_repo = OLD.repo AND kind = 'patch' AND object_id = OLD.patch_id AND part = OLD.id;
    INSERT OR REPLACE INTO search_fts (rowid, title, body)
    SELECT doc, '', NEW.body FROM search_docs
    WHERE OLD.body IS NOT NEW.body
      AND in_repo = NEW.repo AND kind = 'patch' AND object_id = NEW.patch_id AND part = NEW.id;
END;
CREATE TRIGGER patch_comments_search_delete AFTER DELETE ON patch_comments BEGIN
    DELETE FROM search_fts WHERE rowid = (SELECT doc FROM search_docs
        WHERE in_repo = OLD.repo AND kind = 'patch' AND object_id = OLD.patch_id AND part = OLD.id);
    DELETE FROM search_docs WHERE in_repo = OLD.repo AND kind = 'patch' AND object_id = OLD.patch_id AND part = OLD.id;
END;

INSERT INTO search_docs (in_repo, kind, object_id, part)
    SELECT repo, 'issue', id, '' FROM issues
    UNION ALL SELECT repo, 'issue', issue_id, id FROM issue_comments
    UNION ALL SELECT repo, 'patch', id, '' FROM patches
    UNION ALL SELECT repo, 'patch', patch_id, id FROM patch_comments;
INSERT INTO search_fts (rowid, title, body)
    SELECT d.doc, i.title, i.body FROM search_docs d
        JOIN issues i ON i.repo = d.in_repo AND i.id = d.object_id
        WHERE d.kind = 'issue' AND d.part = ''
    UNION ALL SELECT d.doc, '', c.body FROM search_docs d
        JOIN issue_comments c ON c.repo = d.in_repo AND c.id = d.part
        WHERE d.kind = 'issue' AND d.part <> ''
    UNION ALL SELECT d.doc, p.title, p.body FROM search_docs d
        JOIN patches p ON p.repo = d.in_repo AND p.id = d.object_id
        WHERE d.kind = 'patch' AND d.part = ''
    UNION ALL SELECT d.doc, '', c.body FROM search_docs d
        JOIN patch_comments c ON c.repo = d.in_repo AND c.id = d.part
        WHERE d.kind = 'patch' AND d.part <> '';
";

/// Version 19 on PostgreSQL: the vectors as immutable functions, kept in
/// a stored generated column of each table (so ranking reads them rather
/// than parsing every matching text again), and a GIN index over each.
pub const POSTGRES_SCHEMA: &str = "
CREATE FUNCTION collab_search_vector(title TEXT, body TEXT) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT setweight(to_tsvector('english'::regconfig, title), 'A')
        || setweight(to_tsvector('english'::regconfig, body), 'D')
$$;
CREATE FUNCTION collab_search_comment(body TEXT) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('english'::regconfig, body)
$$;
ALTER TABLE issues ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (collab_search_vector(title, body)) STORED;
ALTER TABLE issue_comments ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (collab_search_comment(body)) STORED;
ALTER TABLE patches ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (collab_search_vector(title, body)) STORED;
ALTER TABLE patch_comments ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (collab_search_comment(body)) STORED;
CREATE INDEX issues_search ON issues USING gin (search_vector);
CREATE INDEX issue_comments_search ON issue_comments USING gin (search_vector);
CREATE INDEX patches_search ON patches USING gin (search_vector);
CREATE INDEX patch_comments_search ON patch_comments USING gin (search_vector);
";

/// The same undone on PostgreSQL (tests and the bench's baseline).
pub const POSTGRES_UNDO: &str = "
ALTER TABLE issues DROP COLUMN search_vector;
ALTER TABLE issue_comments DROP COLUMN search_vector;
ALTER TABLE patches DROP COLUMN search_vector;
ALTER TABLE patch_comments DROP COLUMN search_vector;
DROP FUNCTION collab_search_vector(TEXT, TEXT);
DROP FUNCTION collab_search_comment(TEXT);
";

/// Statements the `sqlite::patch_import` fixture runs to take a database
/// back before version 19.
pub const SQLITE_UNDO: &str = "
DROP TRIGGER issues_search_insert;
DROP TRIGGER issues_search_update;
DROP TRIGGER issues_search_delete;
DROP TRIGGER issue_comments_search_insert;
DROP TRIGGER issue_comments_search_update;
DROP TRIGGER issue_comments_search_delete;
DROP TRIGGER patches_search_insert;
DROP TRIGGER patches_search_update;
DROP TRIGGER patches_search_delete;
DROP TRIGGER patch_comments_search_insert;
DROP TRIGGER patch_comments_search_update;
DROP TRIGGER patch_comments_search_delete;
DROP TABLE search_fts;
DROP TABLE search_docs;
";

/// Whether a table is the search index's own (derived from other tables,
/// so never copied or counted: `snapshot::table_names`).
pub fn is_index_table(name: &str) -> bool {
    name == "search_docs" || name.starts_with("search_fts")
}

/// Why a query was refused; each says it in a line for a usage error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("the query has no words to search for")]
    Empty,
    #[error("the query is longer than {MAX_QUERY_BYTES} bytes")]
    TooLong,
    #[error("the query has more than {MAX_TERMS} words")]
    TooManyTerms,
    #[error("invalid cursor")]
    BadCursor,
}

/// A query as plain words: letters and digits, lower case. Everything else
/// (quotes, operators, `*`, `NEAR(`, NUL) only separates words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms(Vec<String>);

impl Terms {
    pub fn parse(query: &str) -> std::result::Result<Terms, QueryError> {
        if query.len() > MAX_QUERY_BYTES {
            return Err(QueryError::TooLong);
        }
        let mut terms: Vec<String> = Vec::new();
        for word in query.split(|c: char| !c.is_alphanumeric()) {
            let word = word.to_lowercase();
            if !word.is_empty() && !terms.contains(&word) {
                terms.push(word);
            }
        }
        if terms.is_empty() {
            return Err(QueryError::Empty);
        }
        if terms.len() > MAX_TERMS {
            return Err(QueryError::TooManyTerms);
        }
        Ok(Terms(terms))
    }

    pub fn words(&self) -> &[String] {
        &self.0
    }

    /// FTS5's query: each word a quoted string (the words hold no quote),
    /// all of them required.
    fn fts5(&self) -> String {
        let quoted: Vec<String> = self.0.iter().map(|t| format!("\"{t}\"")).collect();
        quoted.join(" ")
    }
}

/// Issues, patches, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindFilter {
    Issue,
    Patch,
    Both,
}

/// Open, not open (closed, or merged for a patch), or any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFilter {
    Open,
    Closed,
    All,
}

/// Where the previous page ended: its last hit's rank, kind, repository
/// and id. Shown to clients as an opaque word.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor {
    rank: f64,
    kind: String,
    repo: String,
    id: String,
}

impl Cursor {
    /// `<rank bits, 16 hex>.<i|p>.<id>.<repo, hex>`.
    pub fn encode(&self) -> String {
        let repo_hex: String = self.repo.bytes().map(|b| format!("{b:02x}")).collect();
        format!(
            "{:016x}.{}.{}.{}",
            self.rank.to_bits(),
            &self.kind[..1],
            self.id,
            repo_hex
        )
    }

    pub fn decode(word: &str) -> std::result::Result<Cursor, QueryError> {
        let bad = QueryError::BadCursor;
        let mut parts = word.split('.');
        let (Some(rank), Some(kind), Some(id), Some(repo), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad);
        };
        let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
        if rank.len() != 16 || !hex(rank) || id.len() != 40 || !hex(id) || !hex(repo) {
            return Err(bad);
        }
        if repo.len() % 2 != 0 || repo.len() > 2048 {
            return Err(bad);
        }
        let rank = f64::from_bits(u64::from_str_radix(rank, 16).map_err(|_| bad)?);
        if !rank.is_finite() {
            return Err(bad);
        }
        let kind = match kind {
            "i" => "issue",
            "p" => "patch",
            _ => return Err(bad),
        };
        let bytes: Vec<u8> = (0..repo.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&repo[i..i + 2], 16))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| bad)?;
        let repo = String::from_utf8(bytes).map_err(|_| bad)?;
        Ok(Cursor {
            rank,
            kind: kind.to_string(),
            repo,
            id: id.to_ascii_lowercase(),
        })
    }
}

/// One search.
#[derive(Debug, Clone)]
pub struct Query {
    pub terms: Terms,
    /// The repositories to read: every one the caller may read (and asked
    /// for). Empty: nothing is found.
    pub repos: Vec<String>,
    pub kind: KindFilter,
    pub state: StateFilter,
    pub limit: usize,
    pub after: Option<Cursor>,
}

/// One issue or patch found.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// `issue` or `patch`.
    pub kind: String,
    pub repo: String,
    pub id: String,
    pub title: String,
    /// `open`, `closed`, or `merged`.
    pub state: String,
    /// Text around the first word found in its best matching text.
    pub snippet: String,
}

/// A page of hits, best first, and where the next one starts.
#[derive(Debug, Clone)]
pub struct Page {
    pub hits: Vec<Hit>,
    pub next: Option<Cursor>,
}

/// Builds the parameter list as the SQL asks for each value.
struct Binds(Vec<Value>);

impl Binds {
    fn bind(&mut self, value: impl Into<Value>) -> String {
        self.0.push(value.into());
        format!("?{}", self.0.len())
    }
}

/// The matching rows, one per indexed text: kind, repo, object_id, part
/// ('' for the object itself, else the comment's id), rank (lower is
/// better).
fn hits_sql(conn: &Connection, q: &Query, b: &mut Binds) -> String {
    let repos: Vec<String> = q.repos.iter().map(|r| b.bind(r.clone())).collect();
    let repos = repos.join(", ");
    if !conn.is_postgres() {
        let terms = b.bind(q.terms.fts5());
        let kind = match q.kind {
            KindFilter::Issue => " AND d.kind = 'issue'",
            KindFilter::Patch => " AND d.kind = 'patch'",
            KindFilter::Both => "",
        };
        return format!(
            "SELECT d.kind AS kind, d.in_repo AS repo, d.object_id AS object_id, d.part AS part,
                    bm25(search_fts, 10.0, 1.0) AS rank
             FROM search_fts JOIN search_docs d ON d.doc = search_fts.rowid
             WHERE search_fts MATCH {terms} AND d.in_repo IN ({repos}){kind}"
        );
    }
    let terms = b.bind(q.terms.words().join(" "));
    let query = format!("plainto_tsquery('english'::regconfig, {terms})");
    let object = |kind: &str, table: &str| {
        format!(
            "SELECT '{kind}'::text AS kind, o.repo, o.id AS object_id, ''::text AS part,
                    -(ts_rank(o.search_vector, q.q)::float8) AS rank
             FROM {table} o, {query} AS q(q)
             WHERE o.search_vector @@ q.q AND o.repo IN ({repos})"
        )
    };
    let comment = |kind: &str, table: &str, parent: &str| {
        format!(
            "SELECT '{kind}'::text, c.repo, c.{parent}, c.id,
                    -(ts_rank(c.search_vector, q.q)::float8)
             FROM {table} c, {query} AS q(q)
             WHERE c.search_vector @@ q.q AND c.repo IN ({repos})"
        )
    };
    let mut parts = Vec::new();
    if q.kind != KindFilter::Patch {
        parts.push(object("issue", "issues"));
        parts.push(comment("issue", "issue_comments", "issue_id"));
    }
    if q.kind != KindFilter::Issue {
        parts.push(object("patch", "patches"));
        parts.push(comment("patch", "patch_comments", "patch_id"));
    }
    parts.join("\nUNION ALL\n")
}

/// One page of `q`: the issues and patches whose title, body or a comment
/// holds every word, best first (ties by kind, repository, id).
pub fn search(conn: &Connection, q: &Query) -> Result<Page> {
    let limit = q.limit.max(1);
    if q.repos.is_empty() {
        return Ok(Page {
            hits: Vec::new(),
            next: None,
        });
    }
    let mut b = Binds(Vec::new());
    let hits = hits_sql(conn, q, &mut b);
    let state = match q.state {
        StateFilter::Open => " AND COALESCE(i.status, p.status) = 'open'",
        StateFilter::Closed => " AND COALESCE(i.status, p.status) <> 'open'",
        StateFilter::All => "",
    };
    let after = match &q.after {
        Some(c) => format!(
            " AND (r.rank, r.kind, r.repo, r.object_id) > ({}, {}, {}, {})",
            b.bind(Value::Real(c.rank)),
            b.bind(c.kind.clone()),
            b.bind(c.repo.clone()),
            b.bind(c.id.clone())
        ),
        None => String::new(),
    };
    let sql = format!(
        "WITH hits AS ({hits}),
         ranked AS (
             SELECT kind, repo, object_id, part, rank,
                    ROW_NUMBER() OVER (PARTITION BY kind, repo, object_id ORDER BY rank, part) AS n
             FROM hits)
         SELECT r.kind, r.repo, r.object_id, r.part, r.rank,
                COALESCE(i.title, p.title), COALESCE(i.status, p.status)
         FROM ranked r
         LEFT JOIN issues i ON r.kind = 'issue' AND i.repo = r.repo AND i.id = r.object_id
         LEFT JOIN patches p ON r.kind = 'patch' AND p.repo = r.repo AND p.id = r.object_id
         WHERE r.n = 1{state}{after}
         ORDER BY r.rank, r.kind, r.repo, r.object_id
         LIMIT {}",
        limit + 1
    );
    struct Row {
        cursor: Cursor,
        part: String,
        title: String,
        state: String,
    }
    let mut rows = conn
        .prepare(&sql)?
        .query_map(params_from_iter(b.0), |r| {
            Ok(Row {
                cursor: Cursor {
                    kind: r.get(0)?,
                    repo: r.get(1)?,
                    id: r.get(2)?,
                    rank: r.get(4)?,
                },
                part: r.get(3)?,
                title: r.get(5)?,
                state: r.get(6)?,
            })
        })?
        .collect::<Result<Vec<_>>>()?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = more
        .then(|| rows.last().map(|r| r.cursor.clone()))
        .flatten();
    let mut hits = Vec::with_capacity(rows.len());
    for row in rows {
        let text = matched_text(conn, &row.cursor, &row.part)?;
        // An object matched on its title alone shows its title.
        let text = if first_word_at(&text, q.terms.words()).is_none()
            && (row.part.is_empty() || text.trim().is_empty())
        {
            &row.title
        } else {
            &text
        };
        hits.push(Hit {
            snippet: snippet(text, q.terms.words()),
            kind: row.cursor.kind,
            repo: row.cursor.repo,
            id: row.cursor.id,
            title: row.title,
            state: row.state,
        });
    }
    Ok(Page { hits, next })
}

/// The body of the object, or of the comment `part`.
fn matched_text(conn: &Connection, at: &Cursor, part: &str) -> Result<String> {
    let (objects, comments) = match at.kind.as_str() {
        "issue" => ("issues", "issue_comments"),
        _ => ("patches", "patch_comments"),
    };
    let (sql, key) = if part.is_empty() {
        (
            format!("SELECT body FROM {objects} WHERE repo = ?1 AND id = ?2"),
            at.id.as_str(),
        )
    } else {
        (
            format!("SELECT body FROM {comments} WHERE repo = ?1 AND id = ?2"),
            part,
        )
    };
    use crate::sql::OptionalExtension;
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([at.repo.as_str(), key], |r| r.get(0))
        .optional()?
        .unwrap_or_default())
}

/// `text` on one line, as characters.
fn one_line(text: &str) -> Vec<char> {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .collect()
}

/// Where in `text` on one line the first of `words` (or a word's first
/// five letters, where the engine matched a stem) starts, in characters.
fn first_word_at(text: &str, words: &[String]) -> Option<usize> {
    let lower: Vec<char> = one_line(text)
        .iter()
        .flat_map(|c| c.to_lowercase().take(1))
        .collect();
    let find = |needle: &[char]| {
        (needle.len() <= lower.len())
            .then(|| lower.windows(needle.len()).position(|w| w == needle))
            .flatten()
    };
    words
        .iter()
        .filter_map(|w| {
            let w: Vec<char> = w.chars().collect();
            find(&w).or_else(|| (w.len() > 5).then(|| find(&w[..5])).flatten())
        })
        .min()
}

/// About [`SNIPPET_CHARS`] characters of `text` around the first of
/// `words` it holds (a word's first five letters, where the engine matched
/// a stem), on one line; its start when none is found.
pub fn snippet(text: &str, words: &[String]) -> String {
    let flat = one_line(text);
    let at = first_word_at(text, words).unwrap_or(0);
    let start = at.saturating_sub(SNIPPET_CHARS / 3);
    let end = (start + SNIPPET_CHARS).min(flat.len());
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(&flat[start..end]);
    if end < flat.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_become_plain_words() {
        let t = Terms::parse("Crash \"on\" NEAR(start* OR -x) crash").unwrap();
        assert_eq!(t.words(), ["crash", "on", "near", "start", "or", "x"]);
        assert_eq!(t.fts5(), "\"crash\" \"on\" \"near\" \"start\" \"or\" \"x\"");
        assert_eq!(Terms::parse("* \" ( ) \0"), Err(QueryError::Empty));
        assert_eq!(Terms::parse(""), Err(QueryError::Empty));
        assert_eq!(
            Terms::parse(&"a".repeat(MAX_QUERY_BYTES + 1)),
            Err(QueryError::TooLong)
        );
        let many: Vec<String> = (0..=MAX_TERMS).map(|i| format!("w{i}")).collect();
        assert_eq!(Terms::parse(&many.join(" ")), Err(QueryError::TooManyTerms));
    }

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let c = Cursor {
            rank: -3.25,
            kind: "patch".into(),
            repo: "team/app.git".into(),
            id: "ab".repeat(20),
        };
        assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
        for bad in [
            "",
            "x",
            "0000000000000000.i.abc.00",
            &format!("{:016x}.q.{}.61", 1.0f64.to_bits(), "a".repeat(40)),
            &format!("{:016x}.i.{}.6", 1.0f64.to_bits(), "a".repeat(40)),
            &format!("{:016x}.i.{}.ff", 1.0f64.to_bits(), "a".repeat(40)),
            &format!("{:016x}.i.{}.61", f64::NAN.to_bits(), "a".repeat(40)),
            &format!("{}.extra", c.encode()),
        ] {
            assert_eq!(Cursor::decode(bad), Err(QueryError::BadCursor), "{bad}");
        }
    }

    use crate::issues::{self, NewIssue, WriteCtx};
    use crate::objects::Person;

    fn open(conn: &Connection, repo: &str, title: &str, body: &str) -> String {
        let actor = Person {
            principal: "alice".into(),
            name: "alice".into(),
            key: None,
        };
        let w = WriteCtx {
            repo,
            actor: &actor,
            fence: None,
            max_body: 1 << 20,
            now: 100,
        };
        let new = NewIssue {
            title: title.into(),
            body: body.into(),
            labels: vec![],
        };
        issues::open(conn, &w, &new).unwrap().issue
    }

    fn find(conn: &Connection, repos: &[&str], words: &str) -> Vec<String> {
        let q = Query {
            terms: Terms::parse(words).unwrap(),
            repos: repos.iter().map(|r| r.to_string()).collect(),
            kind: KindFilter::Both,
            state: StateFilter::All,
            limit: 50,
            after: None,
        };
        search(conn, &q)
            .unwrap()
            .hits
            .into_iter()
            .map(|h| format!("{}:{}", h.repo, h.title))
            .collect()
    }

    /// The triggers keep the index in the write's transaction: an insert,
    /// an edit, a rename and a delete of the repository all show at once.
    #[test]
    fn the_index_follows_every_write() {
        let db = crate::testing::db();
        let conn = &*db;
        let one = open(
            conn,
            "a.git",
            "Parser crashes on empty input",
            "stack trace",
        );
        open(
            conn,
            "a.git",
            "Docs typo",
            "the parser page says parse twice",
        );
        assert_eq!(
            find(conn, &["a.git"], "parser"),
            ["a.git:Parser crashes on empty input", "a.git:Docs typo"],
            "a title outranks a body"
        );
        let actor = Person {
            principal: "bob".into(),
            name: "bob".into(),
            key: None,
        };
        let w = WriteCtx {
            repo: "a.git",
            actor: &actor,
            fence: None,
            max_body: 1 << 20,
            now: 101,
        };
        issues::comment(conn, &w, &one, "seen with the zeppelin backend too").unwrap();
        assert_eq!(
            find(conn, &["a.git"], "zeppelin"),
            ["a.git:Parser crashes on empty input"]
        );
        issues::edit(conn, &w, &one, Some("Lexer crashes"), None).unwrap();
        assert_eq!(find(conn, &["a.git"], "lexer"), ["a.git:Lexer crashes"]);
        assert_eq!(find(conn, &["a.git"], "parser"), ["a.git:Docs typo"]);
        // A rename moves parents and children one table at a time, its
        // foreign keys checked at COMMIT.
        let tx = conn.unchecked_transaction().unwrap();
        crate::repos::rename(&tx, "a.git", "b.git", "admin", 102).unwrap();
        tx.commit().unwrap();
        assert!(find(conn, &["a.git"], "zeppelin").is_empty());
        assert_eq!(find(conn, &["b.git"], "zeppelin"), ["b.git:Lexer crashes"]);
        let tx = conn.unchecked_transaction().unwrap();
        crate::repos::delete(&tx, "b.git", "admin", 103).unwrap();
        tx.commit().unwrap();
        assert!(find(conn, &["b.git"], "zeppelin").is_empty());
        assert!(find(conn, &["b.git"], "docs").is_empty());
    }

    /// Migration 19 indexes what a database held before it.
    #[test]
    fn migration_19_indexes_the_rows_already_there() {
        let db = crate::testing::db();
        let conn = &*db;
        open(conn, "a.git", "Flaky checkout test", "fails one run in ten");
        // Back to version 18: later steps (20, git-lfs locks; 21, stacks)
        // undone too.
        let stacks = crate::migrations::STACKS_UNDO;
        let undo = if conn.is_postgres() {
            format!(
                "{POSTGRES_UNDO} DROP TABLE lfs_locks; {stacks} UPDATE collab_schema SET version = 18;"
            )
        } else {
            format!("{SQLITE_UNDO} DROP TABLE lfs_locks; {stacks}")
        };
        conn.execute_batch(&undo).unwrap();
        if !conn.is_postgres() {
            conn.execute_batch("PRAGMA user_version = 18").unwrap();
        }
        crate::migrations::migrate(conn).unwrap();
        assert_eq!(
            find(conn, &["a.git"], "flaky runs"),
            ["a.git:Flaky checkout test"]
        );
    }

    #[test]
    fn a_snippet_is_around_the_first_word_found() {
        let text = format!("{} the parser crashes\non empty input", "x ".repeat(200));
        let s = snippet(&text, &["crashing".to_string()]);
        assert!(
            s.starts_with('…') && s.contains("parser crashes on empty input"),
            "{s}"
        );
        assert_eq!(snippet("short", &["zzz".to_string()]), "short");
    }
}
