//! The rows of the verb table, one per SSH exec verb, in the order `help`
//! and docs/ssh-verbs.md show them. See the parent module for what is
//! derived from them.

use super::row::{Access, Arg, Arity, Flag, Kind, Need, Rule, Verb};
use crate::limits::{MAX_HOOK_DELIVERIES, MAX_PAGE, MAX_TTL_SECS, MAX_WAIT_SECS, MAX_WATCH_REPOS};

// Building blocks: positional arguments ...

const fn one(name: &'static str, kind: Kind, doc: &'static str) -> Arg {
    Arg {
        name,
        kind,
        arity: Arity::One,
        doc,
    }
}

const fn optional(name: &'static str, kind: Kind, doc: &'static str) -> Arg {
    Arg {
        name,
        kind,
        arity: Arity::Optional,
        doc,
    }
}

// ... and flags.

const fn value(
    long: &'static str,
    placeholder: &'static str,
    kind: Kind,
    doc: &'static str,
) -> Flag {
    Flag {
        long,
        value: Some((placeholder, kind)),
        repeat: false,
        required: false,
        doc,
    }
}

const fn repeated(
    long: &'static str,
    placeholder: &'static str,
    kind: Kind,
    doc: &'static str,
) -> Flag {
    Flag {
        repeat: true,
        ..value(long, placeholder, kind, doc)
    }
}

const fn required(flag: Flag) -> Flag {
    Flag {
        required: true,
        ..flag
    }
}

const fn switch(long: &'static str, doc: &'static str) -> Flag {
    Flag {
        long,
        value: None,
        repeat: false,
        required: false,
        doc,
    }
}

const fn verb(family: &'static str, action: &'static str, need: Need, help: &'static str) -> Verb {
    Verb {
        family,
        action,
        aliases: &[],
        args: &[],
        flags: &[],
        rules: &[],
        need,
        help,
    }
}

const READ: Need = Need::Repo(Access::Read);
/// Posting checks: write, or the `checks` level CI keys get.
const CHECKS: Need = Need::Repo(Access::Checks);
const WRITE: Need = Need::Repo(Access::Write);
const REWIND: Need = Need::Repo(Access::Rewind);

/// Server administrators only (mirrors reach other hosts with stored
/// credentials; a webhook to a private address).
const ADMIN: Need = Need::Admin;
/// Who may manage webhooks: owners of every repository a hook's glob
/// matches, or an admin (the handler decides).
const HOOK_OWNER: Need = Need::Rule("rewind on every repository the glob matches (or admin)");

/// A setting shown to readers and set with rewind: set when the verb's
/// optional second argument is given. `describe` and `visibility` name it
/// differently, so each row says which (`help` groups them by this text).
const fn setting(arg: &'static str) -> Need {
    Need::RepoBy {
        base: Access::Read,
        raised: Access::Rewind,
        arg,
        value: None,
        text: "read; rewind to set",
    }
}

const U32_MAX: i64 = u32::MAX as i64;

const REPO: Arg = one(
    "repo",
    Kind::Repo,
    "the repository, as `team/app` or `team/app.git`",
);
const ISSUE: Arg = one(
    "issue",
    Kind::Id,
    "an issue id, or a unique prefix of 4+ hex digits",
);
const PATCH: Arg = one(
    "patch",
    Kind::Id,
    "a patch id, or a unique prefix of 4+ hex digits",
);
const HOOK: Arg = one("id", Kind::Word, "a webhook id (`collab-hook list`)");

const LEASE_TOKEN: Flag = value(
    "--lease-token",
    "N",
    Kind::Int {
        min: 1,
        max: i64::MAX,
    },
    "fencing: refused (exit 4) unless N is the live tenure of the issue's lease",
);
const TTL: Flag = value(
    "--ttl",
    "<secs>",
    Kind::Int {
        min: 1,
        max: MAX_TTL_SECS as i64,
    },
    "lease time to live; without it, an open-ended claim",
);
const NOTE: Flag = value(
    "--note",
    "<text>",
    Kind::Text,
    "a note shown with the lease",
);
const WAIT: Flag = value(
    "--wait",
    "<secs>",
    Kind::Int {
        min: 0,
        max: MAX_WAIT_SECS as i64,
    },
    "wait up to this long for the issue to become free",
);
const BODY: Flag = value("--body", "B", Kind::Text, "the text (Markdown)");
const BODY_STDIN: Flag = switch("--body-stdin", "read the text from standard input");
const BODY_EITHER: Rule = Rule::AtMostOne(&["--body", "--body-stdin"]);
const BODY_ONE: Rule = Rule::OneOf(&["--body", "--body-stdin"]);
const LABEL: Flag = repeated("--label", "L", Kind::Word, "a label (repeatable)");
const LIMIT: Flag = value(
    "--limit",
    "N",
    Kind::Int {
        min: 1,
        max: MAX_PAGE as i64,
    },
    "at most N per page",
);
const AFTER: Flag = value(
    "--after",
    "CURSOR",
    Kind::Word,
    "the page after this cursor (`next` of the previous page)",
);
const REV: Flag = value(
    "--rev",
    "N",
    Kind::Int {
        min: 1,
        max: U32_MAX,
    },
    "revision N (default: the latest)",
);
const TYPE_PATTERN: Kind = Kind::Word;

/// What a git-lfs session does: `upload` (push objects, take and give back
/// locks) or `download` (fetch objects, list locks).
const LFS_OPERATION: Arg = one(
    "operation",
    Kind::Choice(&["upload", "download"]),
    "`upload` or `download`, as git-lfs sends it",
);

/// `collab-issue link|unlink`'s arguments.
const ISSUE_LINK: &[Arg] = &[
    REPO,
    ISSUE,
    one(
        "kind",
        Kind::Choice(&["blocks", "relates"]),
        "the link's kind",
    ),
    one(
        "other",
        Kind::Word,
        "the other issue: an id, or `repo#id` across repositories",
    ),
];

/// Every verb.
pub static VERBS: &[Verb] = &[
    // Git transport.
    Verb {
        aliases: &["git upload-pack"],
        args: &[REPO],
        ..verb(
            "git-upload-pack",
            "",
            READ,
            "clone and fetch (git's own transport)",
        )
    },
    Verb {
        aliases: &["git receive-pack"],
        args: &[REPO],
        ..verb(
            "git-receive-pack",
            "",
            Need::RepoAtLeast {
                level: Access::Write,
                text: "write; rewind to delete or rewrite refs",
            },
            "push (git's own transport); `refs/for/<base>` opens a patch",
        )
    },
    Verb {
        aliases: &["git upload-archive"],
        args: &[REPO],
        ..verb("git-upload-archive", "", READ, "`git archive --remote`")
    },
    // git-lfs's pure SSH transfer (docs/lfs.md): large files over the
    // same login. git-lfs runs `git-lfs-transfer '<repo>' upload|download`
    // and speaks its pkt-line protocol on the channel.
    Verb {
        args: &[REPO, LFS_OPERATION],
        ..verb(
            "git-lfs-transfer",
            "",
            Need::RepoBy {
                base: Access::Read,
                raised: Access::Write,
                arg: "operation",
                value: Some("upload"),
                text: "read to download; write to upload and lock",
            },
            "git-lfs's SSH transfer (git-lfs >= 3.0): large files and their locks",
        )
    },
    // git-lfs before 3.0 asks for an HTTP endpoint: refused with one line.
    Verb {
        args: &[REPO, LFS_OPERATION],
        ..verb(
            "git-lfs-authenticate",
            "",
            Need::Anyone,
            "refused: git-lfs's HTTP endpoint; use the SSH transfer (git-lfs >= 3.0)",
        )
    },
    // Who am I, what may I do.
    verb(
        "collab-whoami",
        "",
        Need::Anyone,
        "your principal, your access and the server's signing key, as JSON",
    ),
    verb(
        "collab-mcp",
        "",
        Need::Anyone,
        "the Model Context Protocol on this channel (stdio transport): these verbs as tools",
    ),
    Verb {
        flags: &[switch(
            "--json",
            "one JSON object: access, open issues and patches, your leases, the server",
        )],
        ..verb(
            "info",
            "",
            Need::Rule("read (lists what you may read)"),
            "the repositories you may read with R / RW / RW+ (gitolite's `info`)",
        )
    },
    Verb {
        aliases: &["collab-help"],
        ..verb(
            "help",
            "",
            Need::Anyone,
            "the verbs open to your key and the access each needs",
        )
    },
    // The terminal UI (docs/tui.md); `ssh -t HOST` with no command opens it too.
    verb(
        "tui",
        "",
        Need::Rule("read (shows what you may read; each action asks its verb's access)"),
        "the terminal UI, on a terminal (`ssh -t HOST tui`)",
    ),
    // Repositories.
    Verb {
        args: &[one("name", Kind::Repo, "the new repository's path")],
        ..verb(
            "collab-repo",
            "create",
            Need::Rule("rewind on the name"),
            "create an empty repository",
        )
    },
    verb(
        "collab-repo",
        "list",
        Need::Rule("read (lists what you may read)"),
        "the repositories you may read, with your access to each",
    ),
    Verb {
        args: &[REPO],
        ..verb(
            "collab-repo",
            "gc",
            REWIND,
            "run git's housekeeping on the repository now",
        )
    },
    Verb {
        args: &[REPO, optional("text", Kind::Text, "the new description")],
        ..verb(
            "collab-repo",
            "describe",
            setting("text"),
            "show or set the description",
        )
    },
    Verb {
        args: &[
            REPO,
            optional(
                "visibility",
                Kind::Choice(&["public", "private"]),
                "the new visibility",
            ),
        ],
        ..verb(
            "collab-repo",
            "visibility",
            setting("visibility"),
            "show or set whether anonymous HTTP readers see the repository",
        )
    },
    Verb {
        args: &[REPO, one("branch", Kind::Word, "an existing branch")],
        ..verb("collab-repo", "set-head", REWIND, "set the default branch")
    },
    Verb {
        args: &[REPO, one("new-name", Kind::Repo, "the new path")],
        ..verb(
            "collab-repo",
            "rename",
            REWIND,
            "rename the repository (and its issues, patches, leases)",
        )
    },
    Verb {
        args: &[REPO],
        flags: &[required(value(
            "--confirm",
            "'<repo>'",
            Kind::Repo,
            "the repository's path again",
        ))],
        ..verb(
            "collab-repo",
            "delete",
            REWIND,
            "delete the repository and everything kept for it",
        )
    },
    // Mirrors (docs/operations.md, "Mirrors"): two-word actions.
    Verb {
        args: &[REPO, one("url", Kind::Word, "https://, http://, ssh:// or git:// only")],
        flags: &[
            value(
                "--interval",
                "<duration>",
                Kind::Word,
                "how often it syncs on schedule: 90s, 10m, 1h (default 10m; mirrors.min_interval_secs at least)",
            ),
            value(
                "--credential-file",
                "<path>",
                Kind::Word,
                "send the credential on standard input (`< PATH`): a token (or user:token) for http(s), a private key for ssh",
            ),
            switch(
                "--credential-stdin",
                "the credential on standard input: the same as --credential-file, for a caller with no file (MCP)",
            ),
            switch("--push", "a push mirror (the forge pushes to the URL) instead of a pull mirror"),
        ],
        ..verb(
            "collab-repo",
            "mirror add",
            ADMIN,
            "keep the repository in sync with another (pull), or copy it there (--push)",
        )
    },
    Verb {
        args: &[REPO],
        ..verb(
            "collab-repo",
            "mirror list",
            ADMIN,
            "the repository's mirrors with their ids, status and last error",
        )
    },
    Verb {
        args: &[REPO, optional("id", Kind::Word, "a mirror id from `mirror list` (default: all)")],
        ..verb(
            "collab-repo",
            "mirror sync",
            ADMIN,
            "sync the repository's mirrors (or one) now, waiting for the outcome",
        )
    },
    Verb {
        args: &[REPO, one("id", Kind::Word, "a mirror id from `mirror list`")],
        ..verb(
            "collab-repo",
            "mirror remove",
            ADMIN,
            "remove a mirror (the repository keeps its refs)",
        )
    },
    // Leases and the work queue.
    Verb {
        args: &[REPO, ISSUE],
        flags: &[TTL, NOTE, WAIT],
        ..verb(
            "collab-lease",
            "acquire",
            WRITE,
            "claim an issue; prints the lease and its fencing token",
        )
    },
    Verb {
        args: &[REPO, ISSUE],
        flags: &[required(TTL), NOTE],
        ..verb(
            "collab-lease",
            "renew",
            WRITE,
            "extend your lease (same token)",
        )
    },
    Verb {
        args: &[REPO, ISSUE],
        ..verb("collab-lease", "release", WRITE, "give your lease up")
    },
    Verb {
        args: &[REPO, ISSUE],
        flags: &[required(value(
            "--reason",
            "<text>",
            Kind::Text,
            "why, recorded in the event",
        ))],
        ..verb("collab-lease", "break", REWIND, "end someone else's lease")
    },
    Verb {
        args: &[REPO],
        ..verb(
            "collab-lease",
            "list",
            READ,
            "the live leases of the repository",
        )
    },
    Verb {
        args: &[REPO, ISSUE],
        ..verb("collab-lease", "show", READ, "the lease on one issue")
    },
    Verb {
        args: &[REPO],
        flags: &[
            repeated(
                "--label",
                "<label>",
                Kind::Word,
                "only issues with this label (repeatable)",
            ),
            TTL,
            NOTE,
            WAIT,
        ],
        ..verb(
            "collab-lease",
            "next",
            WRITE,
            "claim the next ready issue (exit 3: nothing ready)",
        )
    },
    // Releases.
    Verb {
        args: &[
            REPO,
            one("tag", Kind::Word, "an existing tag"),
            one("file", Kind::Word, "the file name"),
        ],
        ..verb(
            "collab-release",
            "create",
            REWIND,
            "upload a file (standard input) to a tag's release",
        )
    },
    Verb {
        args: &[REPO],
        ..verb(
            "collab-release",
            "list",
            READ,
            "every release, newest first",
        )
    },
    Verb {
        args: &[
            REPO,
            one("tag", Kind::Word, "the release's tag"),
            one("file", Kind::Word, "the file name"),
        ],
        ..verb(
            "collab-release",
            "download",
            READ,
            "a release file, on standard output",
        )
    },
    Verb {
        args: &[
            REPO,
            one("tag", Kind::Word, "the release's tag"),
            optional("file", Kind::Word, "only this file"),
        ],
        ..verb(
            "collab-release",
            "delete",
            REWIND,
            "delete a release, or one file of it",
        )
    },
    // Issues.
    Verb {
        args: &[REPO],
        flags: &[
            required(value("--title", "T", Kind::Text, "the title, one line")),
            BODY,
            BODY_STDIN,
            LABEL,
        ],
        rules: &[BODY_EITHER],
        ..verb("collab-issue", "open", WRITE, "open an issue")
    },
    Verb {
        args: &[REPO, ISSUE],
        ..verb(
            "collab-issue",
            "show",
            READ,
            "an issue with its comments, labels, links and lease",
        )
    },
    Verb {
        args: &[REPO],
        flags: &[
            value(
                "--state",
                "open|closed|all",
                Kind::Choice(&["open", "closed", "all"]),
                "which issues (default: open)",
            ),
            LABEL,
            LIMIT,
            AFTER,
        ],
        ..verb("collab-issue", "list", READ, "issues, a page at a time")
    },
    Verb {
        args: &[REPO, ISSUE],
        flags: &[BODY, BODY_STDIN, LEASE_TOKEN],
        rules: &[BODY_ONE],
        ..verb("collab-issue", "comment", WRITE, "comment on an issue")
    },
    Verb {
        args: &[REPO, ISSUE],
        flags: &[
            value("--title", "T", Kind::Text, "the new title"),
            BODY,
            BODY_STDIN,
            value(
                "--priority",
                "N|none",
                Kind::Word,
                "the work queue's order (higher first)",
            ),
            LEASE_TOKEN,
        ],
        rules: &[
            BODY_EITHER,
            Rule::AtLeastOne(&["--title", "--body", "--body-stdin", "--priority"]),
        ],
        ..verb(
            "collab-issue",
            "edit",
            WRITE,
            "change the title, body or priority",
        )
    },
    Verb {
        args: &[REPO, ISSUE],
        flags: &[
            repeated("--add", "L", Kind::Word, "add this label (repeatable)"),
            repeated(
                "--remove",
                "L",
                Kind::Word,
                "remove this label (repeatable)",
            ),
            LEASE_TOKEN,
        ],
        rules: &[Rule::AtLeastOne(&["--add", "--remove"])],
        ..verb("collab-issue", "label", WRITE, "add and remove labels")
    },
    Verb {
        args: &[REPO, ISSUE],
        flags: &[
            value("--reason", "R", Kind::Text, "why, recorded in the event"),
            LEASE_TOKEN,
        ],
        ..verb("collab-issue", "close", WRITE, "close an issue")
    },
    Verb {
        args: &[REPO, ISSUE],
        flags: &[LEASE_TOKEN],
        ..verb("collab-issue", "reopen", WRITE, "reopen an issue")
    },
    Verb {
        args: ISSUE_LINK,
        flags: &[LEASE_TOKEN],
        ..verb(
            "collab-issue",
            "link",
            WRITE,
            "link two issues (`blocks` keeps the other out of the ready queue)",
        )
    },
    Verb {
        args: ISSUE_LINK,
        flags: &[LEASE_TOKEN],
        ..verb("collab-issue", "unlink", WRITE, "remove a link")
    },
    Verb {
        args: &[REPO],
        flags: &[LABEL, LIMIT],
        ..verb(
            "collab-issue",
            "ready",
            READ,
            "the ready queue: open, unblocked, unclaimed issues in order",
        )
    },
    // Patches (opened by `git push origin HEAD:refs/for/<base>`).
    Verb {
        args: &[REPO],
        flags: &[
            value(
                "--state",
                "open|merged|closed|all",
                Kind::Choice(&["open", "merged", "closed", "all"]),
                "which patches (default: open)",
            ),
            LIMIT,
            AFTER,
        ],
        ..verb("collab-patch", "list", READ, "patches, a page at a time")
    },
    Verb {
        args: &[REPO, PATCH],
        ..verb(
            "collab-patch",
            "show",
            READ,
            "a patch with its revisions, reviews and comments",
        )
    },
    Verb {
        args: &[REPO, PATCH],
        flags: &[REV],
        ..verb(
            "collab-patch",
            "diff",
            READ,
            "a revision's diff against its base",
        )
    },
    Verb {
        args: &[
            REPO,
            PATCH,
            one(
                "from",
                Kind::Int {
                    min: 1,
                    max: U32_MAX,
                },
                "revision A",
            ),
            one(
                "to",
                Kind::Int {
                    min: 1,
                    max: U32_MAX,
                },
                "revision B",
            ),
        ],
        ..verb(
            "collab-patch",
            "interdiff",
            READ,
            "what changed between two revisions, rebase left out",
        )
    },
    Verb {
        args: &[REPO, PATCH],
        flags: &[
            switch("--approve", "approve"),
            switch("--request-changes", "ask for changes"),
            switch("--comment", "comment without a verdict"),
            BODY,
            BODY_STDIN,
            REV,
        ],
        rules: &[
            Rule::OneOf(&["--approve", "--request-changes", "--comment"]),
            BODY_EITHER,
        ],
        ..verb("collab-patch", "review", WRITE, "review a revision")
    },
    Verb {
        args: &[REPO, PATCH],
        flags: &[
            BODY,
            BODY_STDIN,
            value(
                "--path",
                "P",
                Kind::Word,
                "a file of the revision, for an inline comment",
            ),
            value(
                "--line",
                "N",
                Kind::Int {
                    min: 1,
                    max: U32_MAX,
                },
                "a line of that file",
            ),
            REV,
        ],
        rules: &[BODY_ONE, Rule::Requires("--line", "--path")],
        ..verb(
            "collab-patch",
            "comment",
            WRITE,
            "comment on a patch, or on a line of it",
        )
    },
    Verb {
        args: &[REPO, PATCH],
        ..verb(
            "collab-patch",
            "close",
            WRITE,
            "close a patch without merging",
        )
    },
    Verb {
        args: &[REPO, PATCH],
        ..verb("collab-patch", "reopen", WRITE, "reopen a closed patch")
    },
    Verb {
        args: &[REPO, PATCH],
        flags: &[
            LEASE_TOKEN,
            switch(
                "--when-green",
                "queue the merge: the server merges the latest revision as soon as the rule allows",
            ),
            switch("--cancel", "drop a merge queued with --when-green"),
        ],
        rules: &[
            Rule::AtMostOne(&["--when-green", "--cancel"]),
            Rule::AtMostOne(&["--cancel", "--lease-token"]),
        ],
        ..verb(
            "collab-patch",
            "merge",
            WRITE,
            "merge the latest revision into its base, as the merge rules allow (now, or when green; a rule with a merge queue queues it)",
        )
    },
    Verb {
        args: &[REPO, PATCH, one("issue", Kind::Id, "the issue it fixes")],
        ..verb("collab-patch", "link", WRITE, "link the patch to an issue")
    },
    // Commit checks (CI results).
    Verb {
        args: &[
            REPO,
            one("commit", Kind::Word, "a full commit id (40 hex digits) in the repository"),
            one(
                "name",
                Kind::Word,
                "the check's name: `ci/test`, `lint` (1 to 100 bytes of letters, digits and `/._:-`, starting with a letter or digit)",
            ),
        ],
        flags: &[
            required(value(
                "--state",
                "<state>",
                Kind::Choice(&["pending", "success", "failure", "error", "skipped"]),
                "the check's state",
            )),
            value("--url", "<url>", Kind::Word, "where the run is (http or https)"),
            value("--description", "<text>", Kind::Text, "one line about the run"),
            LEASE_TOKEN,
        ],
        ..verb(
            "collab-check",
            "set",
            CHECKS,
            "set a check on a commit (CI's result); records check.updated",
        )
    },
    Verb {
        args: &[
            REPO,
            one("target", Kind::Word, "a full commit id, or a patch id (its latest revision's head)"),
        ],
        ..verb("collab-check", "list", READ, "the checks on a commit or a patch")
    },
    // The merge queue.
    Verb {
        args: &[REPO, one("branch", Kind::Word, "the base branch whose queue to show: `main`")],
        ..verb(
            "collab-queue",
            "show",
            READ,
            "a branch's merge queue: its entries in order and its merge groups",
        )
    },
    // Search.
    Verb {
        args: &[one(
            "query",
            Kind::Text,
            "the words to find, every one (letters and digits; anything else only separates them)",
        )],
        flags: &[
            repeated(
                "--repo",
                "<glob>",
                Kind::RepoGlob,
                "only repositories matching (repeatable; default: every one you may read)",
            ),
            value(
                "--kind",
                "issue|patch",
                Kind::Choice(&["issue", "patch"]),
                "only issues, or only patches (default: both)",
            ),
            value(
                "--state",
                "open|closed|all",
                Kind::Choice(&["open", "closed", "all"]),
                "open ones, or closed and merged ones (default: all)",
            ),
            LIMIT,
            AFTER,
        ],
        ..verb(
            "collab-search",
            "",
            Need::Rule("read (finds only what you may read)"),
            "issues and patches by the words of their titles, bodies and comments, best first",
        )
    },
    // Events.
    Verb {
        args: &[Arg {
            name: "repo",
            kind: Kind::Repo,
            arity: Arity::Many(MAX_WATCH_REPOS),
            doc: "only these repositories (default: every one you may read)",
        }],
        flags: &[
            value(
                "--since",
                "<seq>",
                Kind::Int {
                    min: 0,
                    max: i64::MAX,
                },
                "replay the events after this seq first",
            ),
            repeated(
                "--type",
                "<pattern>",
                TYPE_PATTERN,
                "only these types (`lease.*`; repeatable)",
            ),
            switch("--no-follow", "stop after the replay"),
        ],
        ..verb(
            "collab-events",
            "watch",
            Need::Rule("read (per event's repository)"),
            "the event log as JSON lines, replayed and then followed",
        )
    },
    // Webhooks.
    Verb {
        args: &[
            one(
                "repo-glob",
                Kind::RepoGlob,
                "the repositories whose events it gets",
            ),
            one("url", Kind::Word, "where to POST them"),
        ],
        flags: &[
            repeated(
                "--event",
                "<pattern>",
                TYPE_PATTERN,
                "only these types (repeatable)",
            ),
            switch("--secret-stdin", "read an HMAC secret from standard input"),
        ],
        ..verb("collab-hook", "add", HOOK_OWNER, "add a webhook")
    },
    verb("collab-hook", "list", HOOK_OWNER, "your webhooks"),
    Verb {
        args: &[HOOK],
        ..verb("collab-hook", "remove", HOOK_OWNER, "remove a webhook")
    },
    Verb {
        args: &[HOOK],
        ..verb(
            "collab-hook",
            "enable",
            HOOK_OWNER,
            "enable a webhook the server disabled after failures",
        )
    },
    Verb {
        args: &[HOOK],
        ..verb(
            "collab-hook",
            "approve",
            ADMIN,
            "let a webhook reach a target that is not on the public internet",
        )
    },
    Verb {
        args: &[HOOK],
        ..verb(
            "collab-hook",
            "test",
            HOOK_OWNER,
            "send a test delivery now",
        )
    },
    Verb {
        args: &[HOOK],
        flags: &[value(
            "--limit",
            "<n>",
            Kind::Int {
                min: 1,
                max: MAX_HOOK_DELIVERIES,
            },
            "at most n, newest first (default 50)",
        )],
        ..verb(
            "collab-hook",
            "deliveries",
            HOOK_OWNER,
            "recent deliveries and their outcomes",
        )
    },
    Verb {
        args: &[one("webhook-id", Kind::Word, "a delivery's `webhook-id`")],
        ..verb(
            "collab-hook",
            "redeliver",
            HOOK_OWNER,
            "deliver one message again",
        )
    },
];
