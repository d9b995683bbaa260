//! The schema of `collab.db` and its forward-only migrations.
//!
//! `PRAGMA user_version` is the version a database is at. At open, every
//! step above it runs in order, each in its own IMMEDIATE transaction that
//! also sets the new version, so a crash mid-upgrade leaves the database at
//! the last complete step and the next start carries on. A database at a
//! version newer than [`SCHEMA_VERSION`] was written by a newer server and
//! is refused rather than misread. Steps are never edited once released:
//! a change is a new step at the end.
//!
//! Version numbers are taken in order by the work that adds tables:
//! 1 leases (first release), 2 events, 3 issues, 4 lease policy and the
//! work queue, 5 webhooks, 6 patches, 7 the work queue's index, 8 patch
//! import and export, 9 repository identity, 10 mirrors, 11 commit checks,
//! 12 merge intents, 13 the merge queue, 14 webhook claims, 15 merge
//! rounds, 16 PostgreSQL's lease functions (a no-op step on SQLite), 17
//! merge trains (`merge_groups.built_on`), 18 queued tenure
//! (`lease_queue_holds`), 19 search (`search`), 20 git-lfs
//! locks (`lfs_locks`), 21 stacked patches (`patches.change_id`,
//! `patches.depends_on`). SQL
//! here stays portable where it can (no SQLite-only functions in the domain
//! queries), because the same tables live in PostgreSQL too.
//!
//! PostgreSQL keeps its own list of steps ([`POSTGRES_STEPS`]) with the same
//! version numbers, its version in the one-row table `collab_schema`. Its
//! first step is the whole schema at version 8 (no PostgreSQL database was
//! written before then); from there each new version is a step in both
//! lists. Migration runs under the global key taken exclusively ([`Behavior::Exclusive`]), so
//! nodes starting together on one database migrate it once.

use super::sql::{Behavior, Connection, Error, Transaction};
use crate::repo_ids::new_repo_id;

/// One migration: the version it brings the database to, and its SQL.
struct Step {
    version: i64,
    sql: &'static str,
}

/// Every step, in order. Append only.
const STEPS: &[Step] = &[
    // Version 1 (first release): `leases` holds tenures (live, or expired and
    // not yet reaped); `lease_tokens` holds each issue's last token handed
    // out and is never deleted from. The CHECKs make a malformed write fail
    // instead of storing it. WITHOUT ROWID: the composite key is the table's
    // only B-tree, so a write touches half the pages.
    Step {
        version: 1,
        sql: "
CREATE TABLE leases (
    repo        TEXT    NOT NULL,
    issue_id    TEXT    NOT NULL,
    holder      TEXT    NOT NULL CHECK (holder <> ''),
    token       INTEGER NOT NULL CHECK (token > 0),
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER,
    PRIMARY KEY (repo, issue_id)
) WITHOUT ROWID;
CREATE TABLE lease_tokens (
    repo       TEXT    NOT NULL,
    issue_id   TEXT    NOT NULL,
    last_token INTEGER NOT NULL CHECK (last_token > 0),
    PRIMARY KEY (repo, issue_id)
) WITHOUT ROWID;
",
    },
    // Version 2: the append-only event log. `seq` is global, gap-free and
    // increasing: it is taken from the `counters` row 'events' inside the
    // writing transaction (a rolled-back write gives its number back, and
    // retention deleting old rows never lets a number be reused). See
    // `events`.
    Step {
        version: 2,
        sql: "
CREATE TABLE counters (
    name  TEXT    NOT NULL PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters (name, value) VALUES ('events', 0);
CREATE TABLE events (
    seq       INTEGER NOT NULL PRIMARY KEY,
    at        INTEGER NOT NULL,
    type      TEXT    NOT NULL CHECK (type <> ''),
    repo      TEXT,
    object_id TEXT,
    actor     TEXT,
    payload   TEXT    NOT NULL
);
CREATE INDEX events_repo_seq ON events (repo, seq);
CREATE INDEX events_at ON events (at);
",
    },
    // Version 3: issues held by the server (see `issues` and
    // docs/data-model.md). Times here are unix MILLISECONDS (`*_ms`), the
    // precision of the git event record the importer keeps. `author` is a
    // principal (a governed name or a `SHA256:` fingerprint), `author_name`
    // the display name, `author_key` the OpenSSH key line where known.
    // Lists go newest first, ties by id, so the two list indexes carry
    // `created_ms DESC, id` and a cursor `(created_ms, id)` pages stably;
    // `imports` says which repositories the importer has replayed
    // into these tables. `issues.revision` grows with every write to an
    // issue; `issue_exports` records the revision (and a summary of the
    // state) the signed git export of each issue has reached.
    Step {
        version: 3,
        sql: "
CREATE TABLE issues (
    repo          TEXT    NOT NULL,
    id            TEXT    NOT NULL CHECK (length(id) = 40),
    title         TEXT    NOT NULL CHECK (title <> ''),
    body          TEXT    NOT NULL,
    author        TEXT    NOT NULL CHECK (author <> ''),
    author_name   TEXT    NOT NULL,
    author_key    TEXT,
    created_ms    INTEGER NOT NULL,
    updated_ms    INTEGER NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('open', 'closed')),
    closed_reason TEXT,
    priority      INTEGER,
    imported      INTEGER NOT NULL DEFAULT 0 CHECK (imported IN (0, 1)),
    comment_count INTEGER NOT NULL DEFAULT 0,
    revision      INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (repo, id)
);
CREATE INDEX issues_list ON issues (repo, created_ms DESC, id);
CREATE INDEX issues_list_status ON issues (repo, status, created_ms DESC, id);
CREATE TABLE issue_comments (
    repo        TEXT    NOT NULL,
    issue_id    TEXT    NOT NULL,
    position    INTEGER NOT NULL CHECK (position > 0),
    id          TEXT    NOT NULL CHECK (length(id) = 40),
    author      TEXT    NOT NULL CHECK (author <> ''),
    author_name TEXT    NOT NULL,
    author_key  TEXT,
    at_ms       INTEGER NOT NULL,
    body        TEXT    NOT NULL,
    PRIMARY KEY (repo, issue_id, position),
    FOREIGN KEY (repo, issue_id) REFERENCES issues (repo, id)
);
CREATE UNIQUE INDEX issue_comments_id ON issue_comments (repo, id);
CREATE TABLE issue_labels (
    repo     TEXT NOT NULL,
    issue_id TEXT NOT NULL,
    label    TEXT NOT NULL CHECK (label <> ''),
    PRIMARY KEY (repo, issue_id, label),
    FOREIGN KEY (repo, issue_id) REFERENCES issues (repo, id)
);
CREATE INDEX issue_labels_by_label ON issue_labels (repo, label, issue_id);
CREATE TABLE issue_links (
    repo        TEXT    NOT NULL,
    issue_id    TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('blocks', 'relates')),
    target_repo TEXT    NOT NULL,
    target_id   TEXT    NOT NULL CHECK (length(target_id) = 40),
    author      TEXT    NOT NULL,
    created_ms  INTEGER NOT NULL,
    PRIMARY KEY (repo, issue_id, kind, target_repo, target_id),
    FOREIGN KEY (repo, issue_id) REFERENCES issues (repo, id)
);
CREATE INDEX issue_links_target ON issue_links (target_repo, target_id);
CREATE TABLE imports (
    repo        TEXT    NOT NULL PRIMARY KEY,
    status      TEXT    NOT NULL CHECK (status IN ('imported', 'skipped')),
    imported_at INTEGER NOT NULL,
    issues      INTEGER NOT NULL,
    comments    INTEGER NOT NULL,
    events      INTEGER NOT NULL,
    dropped     INTEGER NOT NULL,
    report      TEXT    NOT NULL
);
CREATE TABLE issue_exports (
    repo     TEXT    NOT NULL,
    issue_id TEXT    NOT NULL,
    revision INTEGER NOT NULL,
    tip      TEXT    NOT NULL,
    state    TEXT    NOT NULL,
    PRIMARY KEY (repo, issue_id)
);
",
    },
    // Version 4: lease policy and the work queue. A tenure keeps its
    // holder's note and its last renewal; per issue, `lease_tokens` counts
    // holder changes (`transitions`), remembers the last holder and the end
    // of a lock delay. The indexes let the expiry timer find the next
    // instant something is due without a scan.
    Step {
        version: 4,
        sql: "
ALTER TABLE leases ADD COLUMN renewed_at INTEGER;
ALTER TABLE leases ADD COLUMN note TEXT;
ALTER TABLE lease_tokens ADD COLUMN transitions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE lease_tokens ADD COLUMN last_holder TEXT;
ALTER TABLE lease_tokens ADD COLUMN locked_until INTEGER;
CREATE INDEX leases_expires_at ON leases (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX lease_tokens_locked_until ON lease_tokens (locked_until)
    WHERE locked_until IS NOT NULL;
",
    },
    // Version 5: webhooks. `webhooks` holds each subscription and its
    // delivery state: `cursor` (every event up to it is handled, delivered
    // or not matching), and for the event after it the retry state
    // (`attempts`, `failing_since`, `next_attempt_at`). `webhook_attempts`
    // is the delivery log, one row per HTTP attempt; `message_id` is the
    // `webhook-id` header, stable per (event, subscription).
    Step {
        version: 5,
        sql: "
CREATE TABLE webhooks (
    id              TEXT    NOT NULL PRIMARY KEY,
    origin          TEXT    NOT NULL CHECK (origin IN ('ssh', 'config', 'governance')),
    owner           TEXT    NOT NULL,
    repo_glob       TEXT    NOT NULL,
    url             TEXT    NOT NULL,
    events          TEXT    NOT NULL,
    secret          TEXT,
    active          INTEGER NOT NULL,
    disabled_reason TEXT,
    created_at      INTEGER NOT NULL,
    cursor          INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    failing_since   INTEGER,
    next_attempt_at INTEGER
);
CREATE TABLE webhook_attempts (
    id          INTEGER NOT NULL PRIMARY KEY,
    webhook_id  TEXT    NOT NULL,
    message_id  TEXT    NOT NULL,
    seq         INTEGER,
    at          INTEGER NOT NULL,
    status      INTEGER,
    outcome     TEXT    NOT NULL,
    latency_ms  INTEGER NOT NULL,
    response    TEXT    NOT NULL
);
CREATE INDEX webhook_attempts_by_hook ON webhook_attempts (webhook_id, id);
CREATE INDEX webhook_attempts_by_message ON webhook_attempts (message_id, id);
CREATE INDEX webhook_attempts_at ON webhook_attempts (at);
",
    },
    // Version 6: patches held by the server (push-to-review, see `patches`
    // and docs/patches.md). Times are unix milliseconds like issues'.
    // `patch_revisions` numbers each patch's revisions from 1; `base_commit`
    // is where the revision forks from the server's base branch as it was
    // when the revision was pushed (`base_tip`). `patch_reviews` holds the
    // vote that counts, one per principal and revision (a later vote
    // replaces the row; the event log keeps every vote). Comments are
    // general, or inline on `path` (and `line`) of `revision`.
    // `patch_issues` links patches to the issues they address.
    // `patches.version` grows with every write (for an export to follow).
    Step {
        version: 6,
        sql: "
CREATE TABLE patches (
    repo           TEXT    NOT NULL,
    id             TEXT    NOT NULL CHECK (length(id) = 40),
    title          TEXT    NOT NULL CHECK (title <> ''),
    body           TEXT    NOT NULL,
    base           TEXT    NOT NULL CHECK (base <> ''),
    author         TEXT    NOT NULL CHECK (author <> ''),
    author_name    TEXT    NOT NULL,
    author_key     TEXT,
    created_ms     INTEGER NOT NULL,
    updated_ms     INTEGER NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('open', 'merged', 'closed')),
    merged_commit  TEXT,
    merged_by      TEXT,
    merged_ms      INTEGER,
    imported       INTEGER NOT NULL DEFAULT 0 CHECK (imported IN (0, 1)),
    revision_count INTEGER NOT NULL DEFAULT 0,
    comment_count  INTEGER NOT NULL DEFAULT 0,
    version        INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (repo, id)
);
CREATE INDEX patches_list ON patches (repo, created_ms DESC, id);
CREATE INDEX patches_list_status ON patches (repo, status, created_ms DESC, id);
CREATE INDEX patches_open_base ON patches (repo, base) WHERE status = 'open';
CREATE TABLE patch_revisions (
    repo        TEXT    NOT NULL,
    patch_id    TEXT    NOT NULL,
    n           INTEGER NOT NULL CHECK (n > 0),
    head        TEXT    NOT NULL,
    base_commit TEXT    NOT NULL,
    base_tip    TEXT,
    author      TEXT    NOT NULL CHECK (author <> ''),
    author_name TEXT    NOT NULL,
    author_key  TEXT,
    at_ms       INTEGER NOT NULL,
    event_id    TEXT,
    PRIMARY KEY (repo, patch_id, n),
    FOREIGN KEY (repo, patch_id) REFERENCES patches (repo, id)
);
CREATE INDEX patch_revisions_head ON patch_revisions (repo, head);
CREATE TABLE patch_reviews (
    repo        TEXT    NOT NULL,
    patch_id    TEXT    NOT NULL,
    revision    INTEGER NOT NULL CHECK (revision > 0),
    author      TEXT    NOT NULL CHECK (author <> ''),
    author_name TEXT    NOT NULL,
    author_key  TEXT,
    id          TEXT    NOT NULL CHECK (length(id) = 40),
    verdict     TEXT    NOT NULL CHECK (verdict IN ('approve', 'request_changes', 'comment')),
    body        TEXT    NOT NULL,
    at_ms       INTEGER NOT NULL,
    PRIMARY KEY (repo, patch_id, revision, author),
    FOREIGN KEY (repo, patch_id) REFERENCES patches (repo, id)
);
CREATE TABLE patch_comments (
    repo        TEXT    NOT NULL,
    patch_id    TEXT    NOT NULL,
    position    INTEGER NOT NULL CHECK (position > 0),
    id          TEXT    NOT NULL CHECK (length(id) = 40),
    author      TEXT    NOT NULL CHECK (author <> ''),
    author_name TEXT    NOT NULL,
    author_key  TEXT,
    at_ms       INTEGER NOT NULL,
    body        TEXT    NOT NULL,
    revision    INTEGER CHECK (revision IS NULL OR revision > 0),
    path        TEXT    CHECK (path IS NULL OR path <> ''),
    line        INTEGER CHECK (line IS NULL OR (line > 0 AND path IS NOT NULL)),
    PRIMARY KEY (repo, patch_id, position),
    FOREIGN KEY (repo, patch_id) REFERENCES patches (repo, id)
);
CREATE UNIQUE INDEX patch_comments_id ON patch_comments (repo, id);
CREATE TABLE patch_issues (
    repo     TEXT NOT NULL,
    patch_id TEXT NOT NULL,
    issue_id TEXT NOT NULL CHECK (length(issue_id) = 40),
    PRIMARY KEY (repo, patch_id, issue_id),
    FOREIGN KEY (repo, patch_id) REFERENCES patches (repo, id)
);
CREATE INDEX patch_issues_issue ON patch_issues (repo, issue_id);
",
    },
    // Version 7: the work queue's order as an index. `collab-lease next`
    // and `collab-issue ready` list open issues by priority (none last),
    // then age, then id (`db::queue::ready_sql`, whose ORDER BY must keep
    // this exact expression); with this index SQLite walks the issues in
    // that order and stops at the first ready ones instead of sorting every
    // open issue of the repository inside the writer.
    Step {
        version: 7,
        sql: "
CREATE INDEX issues_ready ON issues
    (repo, status, (CASE WHEN priority IS NULL THEN 1 ELSE 0 END), priority, created_ms, id);
",
    },
    // Version 8: patches imported from git and exported to it. A
    // `patch_imports` row says the repository's client-written patch DAGs
    // (`refs/collab/patches/*`) have been replayed into the patch tables
    // (see `patch_import`), with what the import counted and its JSON
    // report; its absence makes the next start (or first use) import them,
    // also in a database whose issues were imported before this step.
    // `patch_exports` records, per patch, the `patches.version` the signed
    // git export (`refs/collab/export/patches/<id>`) reflects, the export
    // ref's tip and a summary of what it shows (see `export`).
    Step {
        version: 8,
        sql: "
CREATE TABLE patch_imports (
    repo        TEXT    NOT NULL PRIMARY KEY,
    imported_at INTEGER NOT NULL,
    patches     INTEGER NOT NULL,
    revisions   INTEGER NOT NULL,
    reviews     INTEGER NOT NULL,
    comments    INTEGER NOT NULL,
    events      INTEGER NOT NULL,
    dropped     INTEGER NOT NULL,
    report      TEXT    NOT NULL
);
CREATE TABLE patch_exports (
    repo     TEXT    NOT NULL,
    patch_id TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    tip      TEXT    NOT NULL,
    state    TEXT    NOT NULL,
    PRIMARY KEY (repo, patch_id)
);
",
    },
    // Version 9: repository identity. `repositories` gives every
    // repository a random id that outlives its name: a rename changes
    // `name`, a delete sets it NULL (the row stays for ever, so the
    // deleted repository's events stay admin-only); a new repository
    // under a reused name gets a new id. Each event carries the id of the
    // repository it was written for (`events.repo_id`), and readers judge
    // visibility by that id. The column is named `name`, not `repo`, so
    // `repos::rename`/`delete` (which sweep every `repo` column) leave it
    // to the code that owns it. Existing events get ids by replaying the
    // log's `repo.created`/`renamed`/`deleted` rows (`backfill_repo_ids`).
    // Webhooks gain an administrator's approval: a subscription whose
    // target is not on the public internet, added by someone who is not an
    // administrator, waits (`needs_approval`) until `approved_by` is set.
    Step {
        version: 9,
        sql: REPOSITORIES_SQL,
    },
    // Version 10: repository mirrors (`mirrors`). `credential` is sealed by
    // the server with `{state_dir}/webhook-secrets.key` before it is
    // stored; `claimed_by`/`claimed_until` say which node syncs the mirror
    // now (one at a time); `repo` moves with a rename and goes with a
    // delete like every `repo` column (`repos`).
    Step {
        version: 10,
        sql: "
CREATE TABLE mirrors (
    id              TEXT    NOT NULL PRIMARY KEY,
    repo            TEXT    NOT NULL,
    direction       TEXT    NOT NULL CHECK (direction IN ('pull', 'push')),
    url             TEXT    NOT NULL,
    credential      TEXT,
    interval_secs   INTEGER NOT NULL CHECK (interval_secs > 0),
    created_by      TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    next_at         INTEGER NOT NULL,
    failures        INTEGER NOT NULL DEFAULT 0,
    last_attempt_at INTEGER,
    last_success_at INTEGER,
    last_error      TEXT,
    claimed_by      TEXT,
    claimed_until   INTEGER
);
CREATE INDEX mirrors_repo ON mirrors (repo);
CREATE INDEX mirrors_next_at ON mirrors (next_at);
",
    },
    // Version 11: commit checks (`checks`), one row per (repository
    // identity, commit, name) holding the latest state; their history is
    // the `check.updated` events. `repo` follows renames and deletes.
    Step {
        version: 11,
        sql: "
CREATE TABLE checks (
    repo_id     TEXT    NOT NULL,
    repo        TEXT    NOT NULL,
    commit_id   TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    state       TEXT    NOT NULL
        CHECK (state IN ('pending', 'success', 'failure', 'error', 'skipped')),
    url         TEXT,
    description TEXT,
    updated_by  TEXT    NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (repo_id, commit_id, name)
);
CREATE INDEX checks_repo ON checks (repo);
",
    },
    // Version 12: merge intents (`collab-patch merge --when-green`), one row
    // per patch, claimed by the node that merges it; and, per revision, who
    // held the live leases of the patch's linked issues when it was pushed
    // (a merge rule treats them as authors: `lease_holder_is_author`).
    Step {
        version: 12,
        sql: "
CREATE TABLE merge_intents (
    repo           TEXT    NOT NULL,
    patch_id       TEXT    NOT NULL,
    revision       INTEGER NOT NULL CHECK (revision > 0),
    requested_by   TEXT    NOT NULL,
    requester_name TEXT    NOT NULL,
    requester_key  TEXT,
    lease_token    INTEGER,
    created_at     INTEGER NOT NULL,
    claimed_by     TEXT,
    claimed_until  INTEGER,
    PRIMARY KEY (repo, patch_id)
);
ALTER TABLE patch_revisions ADD COLUMN lease_holders TEXT;
",
    },
    // Version 13: the merge queue (`merge_queue`): per branch, who drives
    // it now (a claim with a deadline), the last group number and the
    // bisect state (`suspects`); one row per merge group built; and the
    // order of the queue (`merge_intents.queued_seq`, one past the
    // repository's last). `repo` follows renames and deletes.
    Step {
        version: 13,
        sql: "
CREATE TABLE merge_queue_branches (
    repo          TEXT    NOT NULL,
    branch        TEXT    NOT NULL,
    last_group    INTEGER NOT NULL DEFAULT 0,
    suspects      INTEGER NOT NULL DEFAULT 0,
    claimed_by    TEXT,
    claimed_until INTEGER,
    PRIMARY KEY (repo, branch)
);
CREATE TABLE merge_groups (
    repo        TEXT    NOT NULL,
    branch      TEXT    NOT NULL,
    n           INTEGER NOT NULL CHECK (n > 0),
    commit_id   TEXT    NOT NULL,
    base_commit TEXT    NOT NULL,
    members     TEXT    NOT NULL,
    state       TEXT    NOT NULL
        CHECK (state IN ('testing', 'merged', 'failed', 'stale')),
    reason      TEXT,
    created_at  INTEGER NOT NULL,
    finished_at INTEGER,
    PRIMARY KEY (repo, branch, n)
);
ALTER TABLE merge_intents ADD COLUMN queued_seq INTEGER;
",
    },
    // Version 14: webhook deliveries claimed per subscription row
    // (`claimed_by`, `claimed_until`: one node delivers a subscription at a
    // time, a dead node's claims lapse) and the nodes that deliver, each
    // with the instant its presence lapses (`webhook_nodes`), so every node
    // takes its share.
    Step {
        version: 14,
        sql: "
ALTER TABLE webhooks ADD COLUMN claimed_by TEXT;
ALTER TABLE webhooks ADD COLUMN claimed_until INTEGER;
CREATE TABLE webhook_nodes (
    node       TEXT    NOT NULL PRIMARY KEY,
    seen_until INTEGER NOT NULL
);
",
    }, // Version 15: several merge groups of a branch under test at once (a
    // round of exclusion groups after a failure, `merge_queue`): each
    // group's `excluded` patches (JSON, NULL for a plain group), and per
    // branch which search runs (`search`: '', 'exclude' or 'bisect') and
    // the first group of the round under test (`round_from`, 0: none).
    Step {
        version: 15,
        sql: "
ALTER TABLE merge_groups ADD COLUMN excluded TEXT;
ALTER TABLE merge_queue_branches ADD COLUMN search TEXT NOT NULL DEFAULT '';
ALTER TABLE merge_queue_branches ADD COLUMN round_from INTEGER NOT NULL DEFAULT 0;
",
    },
    // Version 16: PostgreSQL's lease functions (`collab_lease_acquire`,
    // `collab_lease_release`: one statement per operation). Nothing on
    // SQLite, where the statements run in process.
    Step {
        version: 16,
        sql: "-- PostgreSQL only",
    },
    // Version 17: a merge train (`merge_queue`, `train = true`): the group a
    // merge group was built on (`built_on`, NULL when built on the base
    // branch's tip), so a train's groups under test survive a restart.
    Step {
        version: 17,
        sql: "ALTER TABLE merge_groups ADD COLUMN built_on INTEGER;",
    },
    // Version 18: queued tenure. A patch in a merge queue holds the lease
    // it was queued with (`queue_holds`): one row per (issue, patch), the
    // token held, the branch, and the TTL given back when the patch leaves
    // the queue; the lease itself is open-ended (`expires_at` NULL) while
    // held.
    Step {
        version: 18,
        sql: QUEUE_HOLDS_SQL,
    },
    // Version 19: search (`search`). An FTS5 index over the words of
    // issues, patches and their comments, kept by triggers in the
    // transaction of each write, and filled here from the rows already
    // there.
    Step {
        version: 19,
        sql: crate::search::SQLITE_SCHEMA,
    },
    // Version 20: git-lfs file locks (`lfs_locks`), by the repository's
    // lasting id so that a rename keeps them; one lock per path.
    Step {
        version: 20,
        sql: "
CREATE TABLE lfs_locks (
    id         TEXT    NOT NULL PRIMARY KEY,
    repo_id    TEXT    NOT NULL,
    path       TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (repo_id, path)
);
",
    },
    // Version 21: change-ids and stacks (`hooks::review`): the change id a
    // patch's commits carry (a `Change-Id:` trailer or a `change-id`
    // header), and the patch it is stacked on (`NULL` at the bottom).
    Step {
        version: 21,
        sql: STACKS_SQL,
    },
];

/// Version 21's columns (the same on both backends). Undone by
/// [`STACKS_UNDO`].
const STACKS_SQL: &str = "
ALTER TABLE patches ADD COLUMN change_id TEXT;
ALTER TABLE patches ADD COLUMN depends_on TEXT;
CREATE INDEX patches_change_id ON patches (repo, change_id) WHERE change_id IS NOT NULL;
";

/// Version 21 undone (tests that take a database back to an older
/// version; the same on both backends).
pub const STACKS_UNDO: &str = "
DROP INDEX patches_change_id;
ALTER TABLE patches DROP COLUMN depends_on;
ALTER TABLE patches DROP COLUMN change_id;
";

/// Version 18's table (SQLite; PostgreSQL's step adds a trigger).
const QUEUE_HOLDS_SQL: &str = "
CREATE TABLE lease_queue_holds (
    repo     TEXT    NOT NULL,
    issue_id TEXT    NOT NULL,
    patch_id TEXT    NOT NULL,
    token    INTEGER NOT NULL CHECK (token > 0),
    holder   TEXT    NOT NULL,
    branch   TEXT    NOT NULL,
    ttl      INTEGER,
    held_at  INTEGER NOT NULL,
    PRIMARY KEY (repo, issue_id, patch_id)
);
CREATE INDEX lease_queue_holds_patch ON lease_queue_holds (repo, patch_id);
";

/// Version 9's tables (SQLite; PostgreSQL's are in `POSTGRES_STEPS`).
const REPOSITORIES_SQL: &str = "
CREATE TABLE repositories (
    id         TEXT    NOT NULL PRIMARY KEY,
    name       TEXT    UNIQUE,
    created_at INTEGER NOT NULL,
    deleted_at INTEGER
);
ALTER TABLE events ADD COLUMN repo_id TEXT;
CREATE INDEX events_repo_id_seq ON events (repo_id, seq);
ALTER TABLE webhooks ADD COLUMN needs_approval INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhooks ADD COLUMN approved_by TEXT;
";

/// PostgreSQL's steps. Append only, with the version numbers of `STEPS`.
const POSTGRES_STEPS: &[Step] = &[
    Step {
        version: 8,
        sql: include_str!("postgres_v8.sql"),
    },
    Step {
        version: 9,
        sql: "
CREATE TABLE repositories (
    id         TEXT   NOT NULL PRIMARY KEY,
    name       TEXT   UNIQUE,
    created_at BIGINT NOT NULL,
    deleted_at BIGINT
);
ALTER TABLE events ADD COLUMN repo_id TEXT;
CREATE INDEX events_repo_id_seq ON events (repo_id, seq);
ALTER TABLE webhooks ADD COLUMN needs_approval BIGINT NOT NULL DEFAULT 0;
ALTER TABLE webhooks ADD COLUMN approved_by TEXT;
",
    },
    Step {
        version: 10,
        sql: "
CREATE TABLE mirrors (
    id              TEXT    NOT NULL PRIMARY KEY,
    repo            TEXT    NOT NULL,
    direction       TEXT    NOT NULL CHECK (direction IN ('pull', 'push')),
    url             TEXT    NOT NULL,
    credential      TEXT,
    interval_secs   BIGINT  NOT NULL CHECK (interval_secs > 0),
    created_by      TEXT    NOT NULL,
    created_at      BIGINT  NOT NULL,
    next_at         BIGINT  NOT NULL,
    failures        BIGINT  NOT NULL DEFAULT 0,
    last_attempt_at BIGINT,
    last_success_at BIGINT,
    last_error      TEXT,
    claimed_by      TEXT,
    claimed_until   BIGINT
);
CREATE INDEX mirrors_repo ON mirrors (repo);
CREATE INDEX mirrors_next_at ON mirrors (next_at);
",
    },
    // Version 11: commit checks (`checks`), one row per (repository
    // identity, commit, name) holding the latest state; their history is
    // the `check.updated` events. `repo` follows renames and deletes.
    Step {
        version: 11,
        sql: "
CREATE TABLE checks (
    repo_id     TEXT    NOT NULL,
    repo        TEXT    NOT NULL,
    commit_id   TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    state       TEXT    NOT NULL
        CHECK (state IN ('pending', 'success', 'failure', 'error', 'skipped')),
    url         TEXT,
    description TEXT,
    updated_by  TEXT    NOT NULL,
    updated_at  BIGINT  NOT NULL,
    PRIMARY KEY (repo_id, commit_id, name)
);
CREATE INDEX checks_repo ON checks (repo);
",
    },
    // Version 12: merge intents (`collab-patch merge --when-green`), one row
    // per patch, claimed by the node that merges it; and, per revision, who
    // held the live leases of the patch's linked issues when it was pushed
    // (a merge rule treats them as authors: `lease_holder_is_author`).
    Step {
        version: 12,
        sql: "
CREATE TABLE merge_intents (
    repo           TEXT    NOT NULL,
    patch_id       TEXT    NOT NULL,
    revision       BIGINT  NOT NULL CHECK (revision > 0),
    requested_by   TEXT    NOT NULL,
    requester_name TEXT    NOT NULL,
    requester_key  TEXT,
    lease_token    BIGINT ,
    created_at     BIGINT  NOT NULL,
    claimed_by     TEXT,
    claimed_until  BIGINT ,
    PRIMARY KEY (repo, patch_id)
);
ALTER TABLE patch_revisions ADD COLUMN lease_holders TEXT;
",
    },
    // Version 13: the merge queue (`merge_queue`): per branch, who drives
    // it now (a claim with a deadline), the last group number and the
    // bisect state (`suspects`); one row per merge group built; and the
    // order of the queue (`merge_intents.queued_seq`, one past the
    // repository's last). `repo` follows renames and deletes.
    Step {
        version: 13,
        sql: "
CREATE TABLE merge_queue_branches (
    repo          TEXT    NOT NULL,
    branch        TEXT    NOT NULL,
    last_group    BIGINT  NOT NULL DEFAULT 0,
    suspects      BIGINT  NOT NULL DEFAULT 0,
    claimed_by    TEXT,
    claimed_until BIGINT ,
    PRIMARY KEY (repo, branch)
);
CREATE TABLE merge_groups (
    repo        TEXT    NOT NULL,
    branch      TEXT    NOT NULL,
    n           BIGINT  NOT NULL CHECK (n > 0),
    commit_id   TEXT    NOT NULL,
    base_commit TEXT    NOT NULL,
    members     TEXT    NOT NULL,
    state       TEXT    NOT NULL
        CHECK (state IN ('testing', 'merged', 'failed', 'stale')),
    reason      TEXT,
    created_at  BIGINT  NOT NULL,
    finished_at BIGINT ,
    PRIMARY KEY (repo, branch, n)
);
ALTER TABLE merge_intents ADD COLUMN queued_seq BIGINT ;
",
    },
    // Version 14: webhook deliveries claimed per subscription row
    // (`claimed_by`, `claimed_until`: one node delivers a subscription at a
    // time, a dead node's claims lapse) and the nodes that deliver, each
    // with the instant its presence lapses (`webhook_nodes`), so every node
    // takes its share.
    Step {
        version: 14,
        sql: "
ALTER TABLE webhooks ADD COLUMN claimed_by TEXT;
ALTER TABLE webhooks ADD COLUMN claimed_until BIGINT;
CREATE TABLE webhook_nodes (
    node       TEXT    NOT NULL PRIMARY KEY,
    seen_until BIGINT NOT NULL
);
",
    }, // Version 15: several merge groups of a branch under test at once (a
    // round of exclusion groups after a failure, `merge_queue`): each
    // group's `excluded` patches (JSON, NULL for a plain group), and per
    // branch which search runs (`search`: '', 'exclude' or 'bisect') and
    // the first group of the round under test (`round_from`, 0: none).
    Step {
        version: 15,
        sql: "
ALTER TABLE merge_groups ADD COLUMN excluded TEXT;
ALTER TABLE merge_queue_branches ADD COLUMN search TEXT NOT NULL DEFAULT '';
ALTER TABLE merge_queue_branches ADD COLUMN round_from BIGINT NOT NULL DEFAULT 0;
",
    },
    // Version 16: a lease acquire or release decided in one statement, by
    // a PL/pgSQL function per write kind (`leases`, docs/postgres.md "One
    // statement per lease operation").
    Step {
        version: 16,
        sql: include_str!("postgres_v16.sql"),
    },
    // Version 17: the group a merge group was built on (a merge train).
    Step {
        version: 17,
        sql: "ALTER TABLE merge_groups ADD COLUMN built_on BIGINT;",
    },
    // Version 18: queued tenure (see `STEPS`). The lease functions set
    // `expires_at` on a renew or re-acquire; the trigger keeps a held
    // tenure open-ended whatever they compute, and records a renewal's
    // span as the TTL to give back (as `leases::extend` does in Rust).
    Step {
        version: 18,
        sql: "
CREATE TABLE lease_queue_holds (
    repo     TEXT   NOT NULL,
    issue_id TEXT   NOT NULL,
    patch_id TEXT   NOT NULL,
    token    BIGINT NOT NULL CHECK (token > 0),
    holder   TEXT   NOT NULL,
    branch   TEXT   NOT NULL,
    ttl      BIGINT,
    held_at  BIGINT NOT NULL,
    PRIMARY KEY (repo, issue_id, patch_id)
);
CREATE INDEX lease_queue_holds_patch ON lease_queue_holds (repo, patch_id);
CREATE FUNCTION collab_lease_queue_hold() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.expires_at IS NOT NULL AND NEW.token = OLD.token THEN
        UPDATE lease_queue_holds h SET ttl = CASE
                WHEN NEW.renewed_at IS DISTINCT FROM OLD.renewed_at
                THEN GREATEST(NEW.expires_at - NEW.renewed_at, 1) ELSE h.ttl END
        WHERE h.repo = NEW.repo AND h.issue_id = NEW.issue_id AND h.token = NEW.token;
        IF FOUND THEN
            NEW.expires_at := NULL;
        END IF;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER leases_queue_hold BEFORE UPDATE OF expires_at ON leases
    FOR EACH ROW EXECUTE FUNCTION collab_lease_queue_hold();
",
    },
    // Version 19: search (see `STEPS`): a stored generated text search
    // vector per table under a GIN index, which PostgreSQL keeps in the
    // transaction of each write and computes here for the rows there.
    Step {
        version: 19,
        sql: crate::search::POSTGRES_SCHEMA,
    },
    // Version 20: git-lfs file locks (see `STEPS`).
    Step {
        version: 20,
        sql: "
CREATE TABLE lfs_locks (
    id         TEXT   NOT NULL PRIMARY KEY,
    repo_id    TEXT   NOT NULL,
    path       TEXT   NOT NULL,
    owner      TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (repo_id, path)
);
",
    },
    // Version 21: change-ids and stacks (see `STEPS`).
    Step {
        version: 21,
        sql: STACKS_SQL,
    },
];

/// Work a step needs beyond its SQL, run in the same transaction.
fn after_step(conn: &Connection, version: i64) -> Result<(), Error> {
    match version {
        9 => backfill_repo_ids(conn),
        _ => Ok(()),
    }
}

/// Give the events written before version 9 the ids of the repositories
/// they belonged to. The log itself says where one repository ended and
/// the next began under the same name: a `repo.created` starts a new one
/// (events of that name before it were a predecessor's, which is treated
/// as deleted), `repo.renamed {from}` carries the id to the new name, and
/// `repo.deleted` ends it. A name whose history is still open is assigned
/// to its last id. Pruned history cannot be replayed: events that survive
/// from before the oldest kept lifecycle row go to the first id seen.
fn backfill_repo_ids(conn: &Connection) -> Result<(), Error> {
    use std::collections::HashMap;
    struct Segment {
        id: String,
        name: String,
        from: i64,
        to: Option<i64>,
    }
    let lifecycle: Vec<(i64, i64, String, String, String)> = {
        let mut stmt = conn.prepare(
            "SELECT seq, at, type, repo, payload FROM events
             WHERE repo IS NOT NULL
               AND type IN ('repo.created', 'repo.renamed', 'repo.deleted')
             ORDER BY seq",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?;
        rows.collect::<Result<_, _>>()?
    };
    let names: Vec<String> = {
        let mut stmt =
            conn.prepare("SELECT DISTINCT repo FROM events WHERE repo IS NOT NULL ORDER BY repo")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    let mut segments: Vec<Segment> = Vec::new();
    // name -> index of its open segment.
    let mut open: HashMap<String, usize> = HashMap::new();
    // id -> (created_at, deleted_at)
    let mut ids: HashMap<String, (i64, Option<i64>)> = HashMap::new();
    let mut first_at = 0;
    fn start(
        segments: &mut Vec<Segment>,
        open: &mut HashMap<String, usize>,
        id: String,
        name: &str,
        from: i64,
    ) {
        segments.push(Segment {
            id,
            name: name.to_string(),
            from,
            to: None,
        });
        open.insert(name.to_string(), segments.len() - 1);
    }
    for (seq, at, kind, repo, payload) in lifecycle {
        if first_at == 0 {
            first_at = at;
        }
        match kind.as_str() {
            "repo.created" => {
                if let Some(i) = open.remove(&repo) {
                    segments[i].to = Some(seq);
                    ids.entry(segments[i].id.clone()).or_insert((at, None)).1 = Some(at);
                } else {
                    // Whatever this name wrote before was a predecessor's.
                    let old = new_repo_id();
                    ids.insert(old.clone(), (at, Some(at)));
                    segments.push(Segment {
                        id: old,
                        name: repo.clone(),
                        from: 0,
                        to: Some(seq),
                    });
                }
                let id = new_repo_id();
                ids.insert(id.clone(), (at, None));
                start(&mut segments, &mut open, id, &repo, seq);
            }
            "repo.renamed" => {
                let from = serde_json::from_str::<serde_json::Value>(&payload)
                    .ok()
                    .and_then(|p| p.get("from").and_then(|f| f.as_str()).map(str::to_string));
                let id = match from.as_deref().and_then(|f| open.remove(f)) {
                    Some(i) => {
                        segments[i].to = Some(seq);
                        segments[i].id.clone()
                    }
                    None => {
                        let id = new_repo_id();
                        ids.insert(id.clone(), (at, None));
                        if let Some(from) = &from {
                            segments.push(Segment {
                                id: id.clone(),
                                name: from.clone(),
                                from: 0,
                                to: Some(seq),
                            });
                        }
                        id
                    }
                };
                if let Some(i) = open.remove(&repo) {
                    segments[i].to = Some(seq);
                    ids.entry(segments[i].id.clone()).or_insert((at, None)).1 = Some(at);
                }
                start(&mut segments, &mut open, id, &repo, seq);
            }
            _ => {
                // repo.deleted: the row itself is the repository's last.
                let i = match open.remove(&repo) {
                    Some(i) => i,
                    None => {
                        let id = new_repo_id();
                        ids.insert(id.clone(), (at, None));
                        segments.push(Segment {
                            id,
                            name: repo.clone(),
                            from: 0,
                            to: None,
                        });
                        segments.len() - 1
                    }
                };
                segments[i].to = Some(seq + 1);
                ids.entry(segments[i].id.clone()).or_insert((at, None)).1 = Some(at);
            }
        }
    }
    for name in names {
        if !open.contains_key(&name) && !segments.iter().any(|s| s.name == name) {
            let id = new_repo_id();
            ids.insert(id.clone(), (first_at, None));
            start(&mut segments, &mut open, id, &name, 0);
        }
    }
    let live: HashMap<String, String> = open
        .iter()
        .map(|(name, &i)| (segments[i].id.clone(), name.clone()))
        .collect();
    for (id, (created_at, deleted_at)) in &ids {
        // An id with an open segment is live under that name.
        let name = live
            .get(id)
            .filter(|_| deleted_at.is_none())
            .map(String::as_str);
        conn.execute(
            "INSERT INTO repositories (id, name, created_at, deleted_at) VALUES (?1, ?2, ?3, ?4)",
            crate::sql::params![id, name, created_at, deleted_at],
        )?;
    }
    // In the order the segments were opened: a later catch-all for a name
    // (`from: 0`) only takes the rows no earlier segment claimed.
    for s in &segments {
        conn.execute(
            "UPDATE events SET repo_id = ?1
             WHERE repo = ?2 AND seq >= ?3 AND seq < ?4 AND repo_id IS NULL",
            crate::sql::params![s.id, s.name, s.from, s.to.unwrap_or(i64::MAX)],
        )?;
    }
    Ok(())
}

/// The schema version this code reads and writes (`PRAGMA user_version`,
/// `collab_schema.version`).
pub const SCHEMA_VERSION: i64 = STEPS[STEPS.len() - 1].version;

/// Bring the schema on `conn` up to [`SCHEMA_VERSION`], one step per
/// transaction. A database from a newer server is an error.
pub fn migrate(conn: &Connection) -> Result<(), Error> {
    let steps = if conn.is_postgres() {
        // Before the first step there is no version table to lock rows of;
        // concurrent creators are serialized by the write lock.
        // (Checked first rather than `IF NOT EXISTS`, whose notice would
        // reach the log at every start.)
        let tx = Transaction::new_unchecked(conn, Behavior::Exclusive)?;
        let exists: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables
                            WHERE table_schema = current_schema() AND table_name = 'collab_schema')",
            [],
            |r| r.get(0),
        )?;
        if !exists {
            tx.execute_batch(
                "CREATE TABLE collab_schema (
                     one     BIGINT NOT NULL PRIMARY KEY CHECK (one = 1),
                     version BIGINT NOT NULL
                 )",
            )?;
        }
        tx.commit()?;
        POSTGRES_STEPS
    } else {
        STEPS
    };
    loop {
        let tx = Transaction::new_unchecked(conn, Behavior::Exclusive)?;
        let version = version(&tx)?;
        if version > SCHEMA_VERSION {
            return Err(Error::failure(format!(
                "collab database schema version {version} is newer than this server understands \
                 ({SCHEMA_VERSION})"
            )));
        }
        let Some(step) = steps.iter().find(|s| s.version > version) else {
            return tx.commit();
        };
        tx.execute_batch(step.sql)?;
        after_step(&tx, step.version)?;
        set_version(&tx, step.version)?;
        tx.commit()?;
    }
}

/// The version `conn`'s database is at (0: empty).
pub fn version(conn: &Connection) -> Result<i64, Error> {
    match conn.as_sqlite() {
        Some(c) => Ok(c.pragma_query_value(None, "user_version", |r| r.get(0))?),
        None => Ok(conn
            .query_row("SELECT version FROM collab_schema", [], |r| r.get(0))
            .or_else(|e| match e {
                Error::QueryReturnedNoRows => Ok(0),
                e => Err(e),
            })?),
    }
}

fn set_version(conn: &Connection, version: i64) -> Result<(), Error> {
    match conn.as_sqlite() {
        Some(c) => Ok(c.pragma_update(None, "user_version", version)?),
        None => {
            conn.execute(
                "INSERT INTO collab_schema (one, version) VALUES (1, ?1)
                 ON CONFLICT (one) DO UPDATE SET version = excluded.version",
                [version],
            )?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_in_order_and_dense() {
        for (i, step) in STEPS.iter().enumerate() {
            assert_eq!(
                step.version,
                i as i64 + 1,
                "step {i} has version {}",
                step.version
            );
        }
    }

    #[test]
    fn a_fresh_database_reaches_the_latest_version() {
        let conn = Connection::open_in_memory().unwrap();
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
        // Idempotent.
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn a_version_1_database_upgrades_in_place_keeping_its_rows() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(STEPS[0].sql).unwrap();
        set_version(&conn, 1).unwrap();
        conn.execute(
            "INSERT INTO lease_tokens (repo, issue_id, last_token) VALUES ('r', 'i', 7)",
            [],
        )
        .unwrap();
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
        let token: i64 = conn
            .query_row("SELECT last_token FROM lease_tokens", [], |r| r.get(0))
            .unwrap();
        assert_eq!(token, 7);
    }

    #[test]
    fn a_version_7_database_gains_the_patch_import_and_export_tables() {
        let conn = Connection::open_in_memory().unwrap();
        for step in STEPS.iter().filter(|s| s.version <= 7) {
            conn.execute_batch(step.sql).unwrap();
        }
        set_version(&conn, 7).unwrap();
        // Issues imported, a server-held patch: kept, and the patch DAGs of
        // the repository are still to import (no `patch_imports` row).
        conn.execute_batch(
            "INSERT INTO imports VALUES ('r.git', 'imported', 1, 0, 0, 0, 0, '{}');
             INSERT INTO patches (repo, id, title, body, base, author, author_name,
                                  created_ms, updated_ms, status)
             VALUES ('r.git', '0123456789abcdef0123456789abcdef01234567', 't', '', 'main',
                     'p', 'p', 1, 1, 'open');",
        )
        .unwrap();
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(count("SELECT COUNT(*) FROM imports"), 1);
        assert_eq!(count("SELECT COUNT(*) FROM patches"), 1);
        assert_eq!(count("SELECT COUNT(*) FROM patch_imports"), 0);
        assert_eq!(count("SELECT COUNT(*) FROM patch_exports"), 0);
    }

    /// A database at version 8 on the test backend (SQLite in memory, or a
    /// fresh PostgreSQL database kept alive by the second value).
    fn at_version_8() -> (Connection, Option<crate::sql::test_database::TestDatabase>) {
        use crate::sql::test_database::{wanted, TestDatabase};
        if wanted() {
            let pg = TestDatabase::create();
            let conn = Connection::open_postgres(&pg.url).unwrap();
            conn.execute_batch(
                "CREATE TABLE collab_schema (
                     one     BIGINT NOT NULL PRIMARY KEY CHECK (one = 1),
                     version BIGINT NOT NULL
                 )",
            )
            .unwrap();
            conn.execute_batch(POSTGRES_STEPS[0].sql).unwrap();
            set_version(&conn, 8).unwrap();
            return (conn, Some(pg));
        }
        let conn = Connection::open_in_memory().unwrap();
        for step in STEPS.iter().filter(|s| s.version <= 8) {
            conn.execute_batch(step.sql).unwrap();
        }
        set_version(&conn, 8).unwrap();
        (conn, None)
    }

    /// Version 10 adds the empty `mirrors` table, whose `repo` column the
    /// rename and delete sweeps of `repos` pick up (on both backends).
    #[test]
    fn an_older_database_gains_an_empty_mirrors_table_with_a_repo_column() {
        let (conn, _pg) = at_version_8();
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
        let n: i64 = conn
            .query_row("SELECT COUNT(*) FROM mirrors WHERE repo = 'x'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(n, 0);
    }

    /// Version 13 adds the merge queue's empty tables and the queue order
    /// of merge intents (on both backends); their `repo` columns follow
    /// renames like every other.
    #[test]
    fn an_older_database_gains_the_merge_queue_tables() {
        let (conn, _pg) = at_version_8();
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(count("SELECT COUNT(*) FROM merge_groups"), 0);
        assert_eq!(count("SELECT COUNT(*) FROM merge_queue_branches"), 0);
        assert_eq!(
            count("SELECT COUNT(*) FROM merge_intents WHERE queued_seq IS NOT NULL"),
            0
        );
        crate::merge_queue::claim(&conn, "a.git", "main", "n1", 1, 2).unwrap();
        crate::repos::rename(&conn, "a.git", "b.git", "admin", 5).unwrap();
        assert_eq!(
            count("SELECT COUNT(*) FROM merge_queue_branches WHERE repo = 'b.git'"),
            1
        );
    }

    /// Version 21 gives the patches of an older database an empty change
    /// id and no patch below them (on both backends).
    #[test]
    fn an_older_database_gains_the_stack_columns() {
        let (conn, _pg) = at_version_8();
        conn.execute_batch(
            "INSERT INTO patches (repo, id, title, body, base, author, author_name,
                                  created_ms, updated_ms, status)
             VALUES ('r.git', '0123456789abcdef0123456789abcdef01234567', 't', '', 'main',
                     'p', 'p', 1, 1, 'open');",
        )
        .unwrap();
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(
            count("SELECT COUNT(*) FROM patches WHERE change_id IS NULL AND depends_on IS NULL"),
            1
        );
    }

    /// Version 16 gives a database at version 15 PostgreSQL's lease
    /// functions (nothing on SQLite), and its leases carry on through them.
    #[test]
    fn a_version_15_database_gains_the_lease_functions() {
        use crate::leases;
        let (conn, _pg) = at_version_8();
        let steps = if conn.is_postgres() {
            POSTGRES_STEPS
        } else {
            STEPS
        };
        for step in steps.iter().filter(|s| (9..=15).contains(&s.version)) {
            conn.execute_batch(step.sql).unwrap();
            after_step(&conn, step.version).unwrap();
        }
        set_version(&conn, 15).unwrap();
        let functions = |conn: &Connection| -> i64 {
            if !conn.is_postgres() {
                return 0;
            }
            conn.query_row(
                "SELECT COUNT(*) FROM pg_proc
                 WHERE proname IN ('collab_lease_acquire', 'collab_lease_release')",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(functions(&conn), 0);
        // Before the upgrade a lease can only be taken statement by statement.
        conn.set_lease_statements(true);
        let t0 = 1_790_000_000;
        leases::acquire(&conn, "r.git", "01", "alice", Some(10), t0).unwrap();
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
        assert_eq!(functions(&conn), if conn.is_postgres() { 2 } else { 0 });
        conn.set_lease_statements(false);
        assert_eq!(conn.lease_functions(), conn.is_postgres());
        let got = leases::acquire(&conn, "r.git", "01", "bob", None, t0 + 10).unwrap();
        let leases::Acquire::Acquired { lease, fresh } = got else {
            panic!("{got:?}")
        };
        assert_eq!((lease.token, lease.transitions, fresh), (2, 1, true));
        assert_eq!(
            leases::release(&conn, "r.git", "01", "bob", t0 + 11).unwrap(),
            leases::Release::Released
        );
        let kinds: Vec<String> = crate::event_log::after(&conn, 0, 10)
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(
            kinds,
            [
                "lease.acquired",
                "lease.expired",
                "lease.acquired",
                "lease.released"
            ]
        );
    }

    /// Version 9 splits a name's history at each `repo.created`, follows
    /// `repo.renamed` and ends at `repo.deleted` (on both backends).
    #[test]
    fn a_version_8_database_gets_repository_ids_from_its_history() {
        let (conn, pg) = at_version_8();
        let rows = [
            (1, "issue.opened", "p.git", "{}"), // before any created: a predecessor's
            (2, "repo.created", "p.git", "{}"),
            (3, "issue.opened", "p.git", "{}"),
            (4, "repo.deleted", "p.git", "{}"),
            (5, "repo.created", "p.git", "{}"),
            (6, "issue.opened", "p.git", "{}"),
            (
                7,
                "repo.renamed",
                "q.git",
                r#"{"from":"p.git","to":"q.git"}"#,
            ),
            (8, "issue.opened", "q.git", "{}"),
            (9, "issue.opened", "other.git", "{}"),
        ];
        for (seq, kind, repo, payload) in rows {
            conn.execute(
                "INSERT INTO events (seq, at, type, repo, payload) VALUES (?1, ?1, ?2, ?3, ?4)",
                crate::sql::params![seq, kind, repo, payload],
            )
            .unwrap();
        }
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
        let got: Vec<(String, Option<String>)> = {
            let mut stmt = conn
                .prepare(
                    "SELECT e.repo_id, r.name FROM events e
                     JOIN repositories r ON r.id = e.repo_id ORDER BY e.seq",
                )
                .unwrap();
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
            rows.collect::<Result<_, _>>().unwrap()
        };
        assert_eq!(got.len(), 9, "every event has an id");
        let id = |i: usize| got[i].0.clone();
        let name = |i: usize| got[i].1.clone();
        // 1: predecessor, deleted. 2-4: the first p, deleted.
        assert_eq!(name(0), None);
        assert_ne!(id(0), id(1));
        assert_eq!((id(1), id(2)), (id(3), id(3)));
        assert_eq!(name(1), None);
        // 5-8: the second p, renamed to q and live.
        assert_ne!(id(4), id(1));
        for i in 4..8 {
            assert_eq!((id(i), name(i).as_deref()), (id(4), Some("q.git")));
        }
        assert_eq!(name(8).as_deref(), Some("other.git"));
        // New events of q continue its id; p is free.
        let next = crate::repo_ids::id_of(&conn, "q.git", 10).unwrap();
        assert_eq!(next, id(4));
        // The connection goes before its database.
        drop(conn);
        drop(pg);
    }
}
