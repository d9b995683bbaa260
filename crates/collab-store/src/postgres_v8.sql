-- The collab database's schema on PostgreSQL at version 8: the tables of
-- SQLite's steps 1 to 8 (migrations.rs), with INTEGER as BIGINT (every
-- integer is read as a 64-bit integer) and the webhook attempt log's
-- rowid as an identity column. Foreign keys are DEFERRABLE so a repository
-- rename can move parents and children in one transaction
-- (`SET CONSTRAINTS ALL DEFERRED`, SQLite's `defer_foreign_keys`). Later versions are new steps in both lists.

-- from SQLite version 1
CREATE TABLE leases (
    repo        TEXT    NOT NULL,
    issue_id    TEXT    NOT NULL,
    holder      TEXT    NOT NULL CHECK (holder <> ''),
    token       BIGINT NOT NULL CHECK (token > 0),
    acquired_at BIGINT NOT NULL,
    expires_at  BIGINT,
    PRIMARY KEY (repo, issue_id)
);
CREATE TABLE lease_tokens (
    repo       TEXT    NOT NULL,
    issue_id   TEXT    NOT NULL,
    last_token BIGINT NOT NULL CHECK (last_token > 0),
    PRIMARY KEY (repo, issue_id)
);

-- from SQLite version 2
CREATE TABLE counters (
    name  TEXT    NOT NULL PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('events', 0);
CREATE TABLE events (
    seq       BIGINT NOT NULL PRIMARY KEY,
    at        BIGINT NOT NULL,
    type      TEXT    NOT NULL CHECK (type <> ''),
    repo      TEXT,
    object_id TEXT,
    actor     TEXT,
    payload   TEXT    NOT NULL
);
CREATE INDEX events_repo_seq ON events (repo, seq);
CREATE INDEX events_at ON events (at);

-- from SQLite version 3
CREATE TABLE issues (
    repo          TEXT    NOT NULL,
    id            TEXT    NOT NULL CHECK (length(id) = 40),
    title         TEXT    NOT NULL CHECK (title <> ''),
    body          TEXT    NOT NULL,
    author        TEXT    NOT NULL CHECK (author <> ''),
    author_name   TEXT    NOT NULL,
    author_key    TEXT,
    created_ms    BIGINT NOT NULL,
    updated_ms    BIGINT NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('open', 'closed')),
    closed_reason TEXT,
    priority      BIGINT,
    imported      BIGINT NOT NULL DEFAULT 0 CHECK (imported IN (0, 1)),
    comment_count BIGINT NOT NULL DEFAULT 0,
    revision      BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (repo, id)
);
CREATE INDEX issues_list ON issues (repo, created_ms DESC, id);
CREATE INDEX issues_list_status ON issues (repo, status, created_ms DESC, id);
CREATE TABLE issue_comments (
    repo        TEXT    NOT NULL,
    issue_id    TEXT    NOT NULL,
    position    BIGINT NOT NULL CHECK (position > 0),
    id          TEXT    NOT NULL CHECK (length(id) = 40),
    author      TEXT    NOT NULL CHECK (author <> ''),
    author_name TEXT    NOT NULL,
    author_key  TEXT,
    at_ms       BIGINT NOT NULL,
    body        TEXT    NOT NULL,
    PRIMARY KEY (repo, issue_id, position),
    FOREIGN KEY (repo, issue_id) REFERENCES issues (repo, id) DEFERRABLE INITIALLY IMMEDIATE
);
CREATE UNIQUE INDEX issue_comments_id ON issue_comments (repo, id);
CREATE TABLE issue_labels (
    repo     TEXT NOT NULL,
    issue_id TEXT NOT NULL,
    label    TEXT NOT NULL CHECK (label <> ''),
    PRIMARY KEY (repo, issue_id, label),
    FOREIGN KEY (repo, issue_id) REFERENCES issues (repo, id) DEFERRABLE INITIALLY IMMEDIATE
);
CREATE INDEX issue_labels_by_label ON issue_labels (repo, label, issue_id);
CREATE TABLE issue_links (
    repo        TEXT    NOT NULL,
    issue_id    TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('blocks', 'relates')),
    target_repo TEXT    NOT NULL,
    target_id   TEXT    NOT NULL CHECK (length(target_id) = 40),
    author      TEXT    NOT NULL,
    created_ms  BIGINT NOT NULL,
    PRIMARY KEY (repo, issue_id, kind, target_repo, target_id),
    FOREIGN KEY (repo, issue_id) REFERENCES issues (repo, id) DEFERRABLE INITIALLY IMMEDIATE
);
CREATE INDEX issue_links_target ON issue_links (target_repo, target_id);
CREATE TABLE imports (
    repo        TEXT    NOT NULL PRIMARY KEY,
    status      TEXT    NOT NULL CHECK (status IN ('imported', 'skipped')),
    imported_at BIGINT NOT NULL,
    issues      BIGINT NOT NULL,
    comments    BIGINT NOT NULL,
    events      BIGINT NOT NULL,
    dropped     BIGINT NOT NULL,
    report      TEXT    NOT NULL
);
CREATE TABLE issue_exports (
    repo     TEXT    NOT NULL,
    issue_id TEXT    NOT NULL,
    revision BIGINT NOT NULL,
    tip      TEXT    NOT NULL,
    state    TEXT    NOT NULL,
    PRIMARY KEY (repo, issue_id)
);

-- from SQLite version 4
ALTER TABLE leases ADD COLUMN renewed_at BIGINT;
ALTER TABLE leases ADD COLUMN note TEXT;
ALTER TABLE lease_tokens ADD COLUMN transitions BIGINT NOT NULL DEFAULT 0;
ALTER TABLE lease_tokens ADD COLUMN last_holder TEXT;
ALTER TABLE lease_tokens ADD COLUMN locked_until BIGINT;
CREATE INDEX leases_expires_at ON leases (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX lease_tokens_locked_until ON lease_tokens (locked_until)
    WHERE locked_until IS NOT NULL;

-- from SQLite version 5
CREATE TABLE webhooks (
    id              TEXT    NOT NULL PRIMARY KEY,
    origin          TEXT    NOT NULL CHECK (origin IN ('ssh', 'config', 'governance')),
    owner           TEXT    NOT NULL,
    repo_glob       TEXT    NOT NULL,
    url             TEXT    NOT NULL,
    events          TEXT    NOT NULL,
    secret          TEXT,
    active          BIGINT NOT NULL,
    disabled_reason TEXT,
    created_at      BIGINT NOT NULL,
    cursor          BIGINT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    failing_since   BIGINT,
    next_attempt_at BIGINT
);
CREATE TABLE webhook_attempts (
    id          BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    webhook_id  TEXT    NOT NULL,
    message_id  TEXT    NOT NULL,
    seq         BIGINT,
    at          BIGINT NOT NULL,
    status      BIGINT,
    outcome     TEXT    NOT NULL,
    latency_ms  BIGINT NOT NULL,
    response    TEXT    NOT NULL
);
CREATE INDEX webhook_attempts_by_hook ON webhook_attempts (webhook_id, id);
CREATE INDEX webhook_attempts_by_message ON webhook_attempts (message_id, id);
CREATE INDEX webhook_attempts_at ON webhook_attempts (at);

-- from SQLite version 6
CREATE TABLE patches (
    repo           TEXT    NOT NULL,
    id             TEXT    NOT NULL CHECK (length(id) = 40),
    title          TEXT    NOT NULL CHECK (title <> ''),
    body           TEXT    NOT NULL,
    base           TEXT    NOT NULL CHECK (base <> ''),
    author         TEXT    NOT NULL CHECK (author <> ''),
    author_name    TEXT    NOT NULL,
    author_key     TEXT,
    created_ms     BIGINT NOT NULL,
    updated_ms     BIGINT NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('open', 'merged', 'closed')),
    merged_commit  TEXT,
    merged_by      TEXT,
    merged_ms      BIGINT,
    imported       BIGINT NOT NULL DEFAULT 0 CHECK (imported IN (0, 1)),
    revision_count BIGINT NOT NULL DEFAULT 0,
    comment_count  BIGINT NOT NULL DEFAULT 0,
    version        BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (repo, id)
);
CREATE INDEX patches_list ON patches (repo, created_ms DESC, id);
CREATE INDEX patches_list_status ON patches (repo, status, created_ms DESC, id);
CREATE INDEX patches_open_base ON patches (repo, base) WHERE status = 'open';
CREATE TABLE patch_revisions (
    repo        TEXT    NOT NULL,
    patch_id    TEXT    NOT NULL,
    n           BIGINT NOT NULL CHECK (n > 0),
    head        TEXT    NOT NULL,
    base_commit TEXT    NOT NULL,
    base_tip    TEXT,
    author      TEXT    NOT NULL CHECK (author <> ''),
    author_name TEXT    NOT NULL,
    author_key  TEXT,
    at_ms       BIGINT NOT NULL,
    event_id    TEXT,
    PRIMARY KEY (repo, patch_id, n),
    FOREIGN KEY (repo, patch_id) REFERENCES patches (repo, id) DEFERRABLE INITIALLY IMMEDIATE
);
CREATE INDEX patch_revisions_head ON patch_revisions (repo, head);
CREATE TABLE patch_reviews (
    repo        TEXT    NOT NULL,
    patch_id    TEXT    NOT NULL,
    revision    BIGINT NOT NULL CHECK (revision > 0),
    author      TEXT    NOT NULL CHECK (author <> ''),
    author_name TEXT    NOT NULL,
    author_key  TEXT,
    id          TEXT    NOT NULL CHECK (length(id) = 40),
    verdict     TEXT    NOT NULL CHECK (verdict IN ('approve', 'request_changes', 'comment')),
    body        TEXT    NOT NULL,
    at_ms       BIGINT NOT NULL,
    PRIMARY KEY (repo, patch_id, revision, author),
    FOREIGN KEY (repo, patch_id) REFERENCES patches (repo, id) DEFERRABLE INITIALLY IMMEDIATE
);
CREATE TABLE patch_comments (
    repo        TEXT    NOT NULL,
    patch_id    TEXT    NOT NULL,
    position    BIGINT NOT NULL CHECK (position > 0),
    id          TEXT    NOT NULL CHECK (length(id) = 40),
    author      TEXT    NOT NULL CHECK (author <> ''),
    author_name TEXT    NOT NULL,
    author_key  TEXT,
    at_ms       BIGINT NOT NULL,
    body        TEXT    NOT NULL,
    revision    BIGINT CHECK (revision IS NULL OR revision > 0),
    path        TEXT    CHECK (path IS NULL OR path <> ''),
    line        BIGINT CHECK (line IS NULL OR (line > 0 AND path IS NOT NULL)),
    PRIMARY KEY (repo, patch_id, position),
    FOREIGN KEY (repo, patch_id) REFERENCES patches (repo, id) DEFERRABLE INITIALLY IMMEDIATE
);
CREATE UNIQUE INDEX patch_comments_id ON patch_comments (repo, id);
CREATE TABLE patch_issues (
    repo     TEXT NOT NULL,
    patch_id TEXT NOT NULL,
    issue_id TEXT NOT NULL CHECK (length(issue_id) = 40),
    PRIMARY KEY (repo, patch_id, issue_id),
    FOREIGN KEY (repo, patch_id) REFERENCES patches (repo, id) DEFERRABLE INITIALLY IMMEDIATE
);
CREATE INDEX patch_issues_issue ON patch_issues (repo, issue_id);

-- from SQLite version 7
CREATE INDEX issues_ready ON issues
    (repo, status, (CASE WHEN priority IS NULL THEN 1 ELSE 0 END), priority, created_ms, id);

-- from SQLite version 8
CREATE TABLE patch_imports (
    repo        TEXT    NOT NULL PRIMARY KEY,
    imported_at BIGINT NOT NULL,
    patches     BIGINT NOT NULL,
    revisions   BIGINT NOT NULL,
    reviews     BIGINT NOT NULL,
    comments    BIGINT NOT NULL,
    events      BIGINT NOT NULL,
    dropped     BIGINT NOT NULL,
    report      TEXT    NOT NULL
);
CREATE TABLE patch_exports (
    repo     TEXT    NOT NULL,
    patch_id TEXT    NOT NULL,
    version  BIGINT NOT NULL,
    tip      TEXT    NOT NULL,
    state    TEXT    NOT NULL,
    PRIMARY KEY (repo, patch_id)
);
