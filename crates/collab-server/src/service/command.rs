//! The typed SSH exec commands and how a command line becomes one. The
//! grammar is the verb table's (`collab_proto::verbs`): it finds the row,
//! fills its arguments and checks their shape; `from_invocation` here turns
//! the row's values into the command its handler runs, checking what only
//! the server knows (label syntax, event patterns, note length). A command
//! names its row (`verb()`), and its `needed_access()` is the level that
//! row asks: the only level its handler authorizes.

use collab_proto::verbs::{self, Invocation};
use collab_proto::Access;

pub use super::issue::IssueCmd;
pub use collab_proto::limits::{MAX_NOTE_BYTES, MAX_WAIT_SECS, MAX_WATCH_REPOS};
pub use collab_proto::tokens::shell_tokens;
/// The level a typed command's row asks (`verbs::level`): how every
/// handler learns the level it authorizes.
pub use collab_proto::verbs::level as row_level;

/// Which git transport service to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitService {
    UploadPack,
    ReceivePack,
    /// `git archive --remote` (readers).
    UploadArchive,
}

impl GitService {
    /// The verb (its row's name).
    pub fn verb(self) -> &'static str {
        match self {
            GitService::UploadPack => "git-upload-pack",
            GitService::ReceivePack => "git-receive-pack",
            GitService::UploadArchive => "git-upload-archive",
        }
    }

    /// The level its row asks on the repository (a push's ref updates may
    /// need more, checked per ref).
    pub fn needed_access(self) -> Access {
        row_level(self.verb(), |_| None)
    }

    /// The `git` subcommand.
    pub fn subcommand(self) -> &'static str {
        match self {
            GitService::UploadPack => "upload-pack",
            GitService::ReceivePack => "receive-pack",
            GitService::UploadArchive => "upload-archive",
        }
    }
}

/// What a `git-lfs-transfer` session does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LfsOperation {
    /// Store objects; take and give back locks (write).
    Upload,
    /// Fetch objects; list locks (read).
    Download,
}

impl LfsOperation {
    /// The word on the command line.
    pub fn word(self) -> &'static str {
        match self {
            LfsOperation::Upload => "upload",
            LfsOperation::Download => "download",
        }
    }

    /// The level `git-lfs-transfer`'s row asks for this operation.
    pub fn needed_access(self) -> Access {
        row_level("git-lfs-transfer", |arg| {
            (arg == "operation").then_some(self.word())
        })
    }
}

/// `collab-repo` subcommands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepoCmd {
    Create {
        name: String,
    },
    List,
    /// Show (`text: None`, Read) or set (Rewind) the description.
    Describe {
        repo: String,
        text: Option<String>,
    },
    /// Show (`public: None`, Read) or set (Rewind) anonymous HTTP read.
    Visibility {
        repo: String,
        public: Option<bool>,
    },
    SetHead {
        repo: String,
        branch: String,
    },
    Rename {
        repo: String,
        new_name: String,
    },
    /// `confirm` must repeat the repository's name.
    Delete {
        repo: String,
        confirm: String,
    },
    /// Maintenance now (needs Rewind on the repository).
    Gc {
        name: String,
    },
}

/// `collab-repo mirror …` (see `super::mirror`; administrators only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorCmd {
    /// `interval` as given (`10m`), checked by the handler against
    /// `mirrors.min_interval_secs`; `credential` names the file whose
    /// contents come on stdin.
    Add {
        repo: String,
        url: String,
        interval: Option<String>,
        credential: Option<String>,
        push: bool,
    },
    List {
        repo: String,
    },
    Sync {
        repo: String,
        id: Option<String>,
    },
    Remove {
        repo: String,
        id: String,
    },
}

impl RepoCmd {
    /// The verb (its row's name).
    pub fn verb(&self) -> &'static str {
        match self {
            RepoCmd::Create { .. } => "collab-repo create",
            RepoCmd::List => "collab-repo list",
            RepoCmd::Describe { .. } => "collab-repo describe",
            RepoCmd::Visibility { .. } => "collab-repo visibility",
            RepoCmd::SetHead { .. } => "collab-repo set-head",
            RepoCmd::Rename { .. } => "collab-repo rename",
            RepoCmd::Delete { .. } => "collab-repo delete",
            RepoCmd::Gc { .. } => "collab-repo gc",
        }
    }

    /// The level its row asks on the repository: a setting shown needs
    /// less than one set (`describe`'s `text`, `visibility`'s word).
    pub fn needed_access(&self) -> Access {
        let given = match self {
            RepoCmd::Describe { text, .. } => text.as_deref().map(|_| "text"),
            RepoCmd::Visibility { public, .. } => public.map(|_| "visibility"),
            _ => None,
        };
        row_level(self.verb(), |arg| given.filter(|g| *g == arg))
    }
}

impl MirrorCmd {
    pub fn repo(&self) -> &str {
        match self {
            MirrorCmd::Add { repo, .. }
            | MirrorCmd::List { repo }
            | MirrorCmd::Sync { repo, .. }
            | MirrorCmd::Remove { repo, .. } => repo,
        }
    }

    pub fn verb(&self) -> &'static str {
        match self {
            MirrorCmd::Add { .. } => "collab-repo mirror add",
            MirrorCmd::List { .. } => "collab-repo mirror list",
            MirrorCmd::Sync { .. } => "collab-repo mirror sync",
            MirrorCmd::Remove { .. } => "collab-repo mirror remove",
        }
    }

    /// The level its row asks on the repository (administrators only; see
    /// `verbs::Need::Admin`).
    pub fn needed_access(&self) -> Access {
        row_level(self.verb(), |_| None)
    }

    fn from_invocation(inv: &Invocation<'_>) -> Option<MirrorCmd> {
        let repo = inv.arg("repo").to_string();
        Some(match inv.verb.action {
            "mirror add" => MirrorCmd::Add {
                repo,
                url: inv.arg("url").to_string(),
                interval: inv.flag("--interval").map(str::to_string),
                credential: inv
                    .flag("--credential-file")
                    .map(str::to_string)
                    .or_else(|| inv.has("--credential-stdin").then(|| "-".to_string())),
                push: inv.has("--push"),
            },
            "mirror list" => MirrorCmd::List { repo },
            "mirror sync" => MirrorCmd::Sync {
                repo,
                id: inv.opt_arg("id").map(str::to_string),
            },
            "mirror remove" => MirrorCmd::Remove {
                repo,
                id: inv.arg("id").to_string(),
            },
            _ => return None,
        })
    }
}

/// `collab-lease` subcommands (see `super::lease`). `ttl_secs` is a positive
/// number of seconds, at most `collab_proto::limits::MAX_TTL_SECS`, the
/// verb table's bound on `--ttl` (longer is an open-ended claim, which is
/// what leaving `--ttl` out means); the configured `leases.max_ttl` is
/// checked when the command runs. `wait_secs` at most
/// [`MAX_WAIT_SECS`]; a note or reason at most [`MAX_NOTE_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseCmd {
    Acquire {
        repo: String,
        issue: String,
        ttl_secs: Option<i64>,
        note: Option<String>,
        wait_secs: Option<u64>,
    },
    Renew {
        repo: String,
        issue: String,
        ttl_secs: i64,
        note: Option<String>,
    },
    Release {
        repo: String,
        issue: String,
    },
    Break {
        repo: String,
        issue: String,
        reason: String,
    },
    List {
        repo: String,
    },
    Show {
        repo: String,
        issue: String,
    },
    /// The work queue: take the first ready issue.
    Next {
        repo: String,
        labels: Vec<String>,
        ttl_secs: Option<i64>,
        note: Option<String>,
        wait_secs: Option<u64>,
    },
}

impl LeaseCmd {
    /// The repository named.
    pub fn repo(&self) -> &str {
        match self {
            LeaseCmd::Acquire { repo, .. }
            | LeaseCmd::Renew { repo, .. }
            | LeaseCmd::Release { repo, .. }
            | LeaseCmd::Break { repo, .. }
            | LeaseCmd::List { repo }
            | LeaseCmd::Show { repo, .. }
            | LeaseCmd::Next { repo, .. } => repo,
        }
    }

    /// The subcommand's name.
    pub fn name(&self) -> &'static str {
        match self {
            LeaseCmd::Acquire { .. } => "acquire",
            LeaseCmd::Renew { .. } => "renew",
            LeaseCmd::Release { .. } => "release",
            LeaseCmd::Break { .. } => "break",
            LeaseCmd::List { .. } => "list",
            LeaseCmd::Show { .. } => "show",
            LeaseCmd::Next { .. } => "next",
        }
    }

    /// The verb (its row's name).
    pub fn verb(&self) -> &'static str {
        match self {
            LeaseCmd::Acquire { .. } => "collab-lease acquire",
            LeaseCmd::Renew { .. } => "collab-lease renew",
            LeaseCmd::Release { .. } => "collab-lease release",
            LeaseCmd::Break { .. } => "collab-lease break",
            LeaseCmd::List { .. } => "collab-lease list",
            LeaseCmd::Show { .. } => "collab-lease show",
            LeaseCmd::Next { .. } => "collab-lease next",
        }
    }

    /// The level its row asks on the repository (reads Read, claims
    /// Write, breaking another's lease Rewind).
    pub fn needed_access(&self) -> Access {
        row_level(self.verb(), |_| None)
    }
}

/// `collab-release` subcommands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseCmd {
    Create {
        repo: String,
        tag: String,
        file: String,
    },
    List {
        repo: String,
    },
    Download {
        repo: String,
        tag: String,
        file: String,
    },
    Delete {
        repo: String,
        tag: String,
        file: Option<String>,
    },
}

impl ReleaseCmd {
    /// The repository named.
    pub fn repo(&self) -> &str {
        match self {
            ReleaseCmd::Create { repo, .. }
            | ReleaseCmd::List { repo }
            | ReleaseCmd::Download { repo, .. }
            | ReleaseCmd::Delete { repo, .. } => repo,
        }
    }

    /// The verb (its row's name).
    pub fn verb(&self) -> &'static str {
        match self {
            ReleaseCmd::Create { .. } => "collab-release create",
            ReleaseCmd::List { .. } => "collab-release list",
            ReleaseCmd::Download { .. } => "collab-release download",
            ReleaseCmd::Delete { .. } => "collab-release delete",
        }
    }

    /// The level its row asks on the repository.
    pub fn needed_access(&self) -> Access {
        row_level(self.verb(), |_| None)
    }
}

/// `collab-events watch ['<repo>'...] [--since SEQ] [--type PATTERN]...
/// [--no-follow]` (see `super::events`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchCmd {
    /// Only these repositories; empty = every repository the caller reads.
    pub repos: Vec<String>,
    /// Replay events after this seq first; `None` = only what comes next.
    pub since: Option<i64>,
    /// Type patterns (`lease.*`); empty = every type.
    pub types: Vec<String>,
    /// Keep following after the replay (the default).
    pub follow: bool,
}

/// `collab-hook` subcommands (see `super::webhook`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookCmd {
    Add {
        repo_glob: String,
        url: String,
        events: Vec<String>,
        secret_stdin: bool,
    },
    List,
    Remove {
        id: String,
    },
    Enable {
        id: String,
    },
    Approve {
        id: String,
    },
    Test {
        id: String,
    },
    Deliveries {
        id: String,
        limit: i64,
    },
    Redeliver {
        message_id: String,
    },
}

/// A parsed exec request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecCommand {
    /// `git-upload-pack '<repo>'`, `git-receive-pack '<repo>'` (or `git upload-pack …`).
    Git { service: GitService, repo: String },
    /// `git-lfs-transfer '<repo>' upload|download`: git-lfs's SSH transfer.
    LfsTransfer {
        repo: String,
        operation: LfsOperation,
    },
    /// `git-lfs-authenticate '<repo>' …`: refused with one line, the same
    /// for every repository (the HTTP endpoint older git-lfs asks for is
    /// not served).
    LfsAuthenticate { repo: String },
    /// `collab-whoami`
    Whoami,
    /// `collab-mcp`: an MCP session on the channel (`crate::mcp`).
    Mcp,
    /// `help`: the verbs available to the caller.
    Help,
    /// `info [--json]`: what the caller may read, gitolite-style.
    Info { json: bool },
    /// `tui`: the terminal UI (needs a pty).
    Tui,
    /// `collab-repo create|list|gc|describe|visibility|set-head|rename|delete`
    Repo(RepoCmd),
    /// `collab-lease acquire|renew|release|list …`
    Lease(LeaseCmd),
    /// `collab-release create|download '<repo>' '<tag>' '<file>'`,
    /// `list '<repo>'`, `delete '<repo>' '<tag>' ['<file>']`
    Release(ReleaseCmd),
    /// `collab-issue open|show|list|comment|edit|label|close|reopen|link|unlink …`
    Issue(IssueCmd),
    /// `collab-patch list|show|diff|interdiff|review|comment|close|reopen|merge …`
    Patch(super::patch::PatchCmd),
    /// `collab-events watch …`
    Events(WatchCmd),
    /// `collab-hook add|list|remove|enable|test|deliveries|redeliver …`
    Hook(HookCmd),
    /// `collab-repo mirror add|list|sync|remove …`
    Mirror(MirrorCmd),
    /// `collab-check set|list …`
    Check(super::check::CheckCmd),
    /// `collab-queue show …`
    Queue(super::queue::QueueCmd),
    /// `collab-search '<query>' …`
    Search(super::search::SearchCmd),
}

impl ExecCommand {
    /// The repository the command names, if any.
    pub fn repo(&self) -> Option<&str> {
        match self {
            ExecCommand::Git { repo, .. }
            | ExecCommand::LfsTransfer { repo, .. }
            | ExecCommand::LfsAuthenticate { repo } => Some(repo),
            ExecCommand::Repo(RepoCmd::Create { name } | RepoCmd::Gc { name }) => Some(name),
            ExecCommand::Repo(
                RepoCmd::Describe { repo, .. }
                | RepoCmd::Visibility { repo, .. }
                | RepoCmd::SetHead { repo, .. }
                | RepoCmd::Rename { repo, .. }
                | RepoCmd::Delete { repo, .. },
            ) => Some(repo),
            ExecCommand::Lease(cmd) => Some(cmd.repo()),
            ExecCommand::Release(cmd) => Some(cmd.repo()),
            ExecCommand::Issue(cmd) => Some(cmd.repo()),
            ExecCommand::Patch(cmd) => Some(cmd.repo()),
            ExecCommand::Events(watch) => watch.repos.first().map(String::as_str),
            ExecCommand::Hook(_) | ExecCommand::Search(_) => None,
            ExecCommand::Mirror(cmd) => Some(cmd.repo()),
            ExecCommand::Check(cmd) => Some(cmd.repo()),
            ExecCommand::Queue(cmd) => Some(cmd.repo()),
            ExecCommand::Whoami
            | ExecCommand::Mcp
            | ExecCommand::Help
            | ExecCommand::Info { .. }
            | ExecCommand::Tui
            | ExecCommand::Repo(RepoCmd::List) => None,
        }
    }

    /// The verb, for logs.
    pub fn verb(&self) -> &'static str {
        match self {
            ExecCommand::Git { service, .. } => service.verb(),
            ExecCommand::LfsTransfer { .. } => "git-lfs-transfer",
            ExecCommand::LfsAuthenticate { .. } => "git-lfs-authenticate",
            ExecCommand::Whoami => "collab-whoami",
            ExecCommand::Mcp => "collab-mcp",
            ExecCommand::Repo(cmd) => cmd.verb(),
            ExecCommand::Help => "help",
            ExecCommand::Info { .. } => "info",
            ExecCommand::Tui => "tui",
            ExecCommand::Lease(cmd) => cmd.verb(),
            ExecCommand::Release(cmd) => cmd.verb(),
            ExecCommand::Issue(cmd) => cmd.verb(),
            ExecCommand::Patch(cmd) => cmd.verb(),
            ExecCommand::Events(_) => "collab-events watch",
            ExecCommand::Hook(HookCmd::Add { .. }) => "collab-hook add",
            ExecCommand::Hook(HookCmd::List) => "collab-hook list",
            ExecCommand::Hook(HookCmd::Remove { .. }) => "collab-hook remove",
            ExecCommand::Hook(HookCmd::Enable { .. }) => "collab-hook enable",
            ExecCommand::Hook(HookCmd::Approve { .. }) => "collab-hook approve",
            ExecCommand::Hook(HookCmd::Test { .. }) => "collab-hook test",
            ExecCommand::Hook(HookCmd::Deliveries { .. }) => "collab-hook deliveries",
            ExecCommand::Hook(HookCmd::Redeliver { .. }) => "collab-hook redeliver",
            ExecCommand::Mirror(cmd) => cmd.verb(),
            ExecCommand::Check(cmd) => cmd.verb(),
            ExecCommand::Queue(cmd) => cmd.verb(),
            ExecCommand::Search(_) => "collab-search",
        }
    }

    /// The level on its repository its row asks, for a command whose row
    /// asks one (`verbs::Need::level`); `None` for the others (any key, or
    /// a rule its handler applies: creating a repository, hooks over a
    /// glob, reads filtered per repository).
    pub fn needed_access(&self) -> Option<Access> {
        Some(match self {
            ExecCommand::Git { service, .. } => service.needed_access(),
            ExecCommand::LfsTransfer { operation, .. } => operation.needed_access(),
            ExecCommand::Repo(RepoCmd::Create { .. } | RepoCmd::List) => return None,
            ExecCommand::Repo(cmd) => cmd.needed_access(),
            ExecCommand::Lease(cmd) => cmd.needed_access(),
            ExecCommand::Release(cmd) => cmd.needed_access(),
            ExecCommand::Issue(cmd) => cmd.needed_access(),
            ExecCommand::Patch(cmd) => cmd.needed_access(),
            ExecCommand::Mirror(cmd) => cmd.needed_access(),
            ExecCommand::Check(cmd) => cmd.needed_access(),
            ExecCommand::Queue(cmd) => cmd.needed_access(),
            ExecCommand::LfsAuthenticate { .. }
            | ExecCommand::Whoami
            | ExecCommand::Mcp
            | ExecCommand::Help
            | ExecCommand::Info { .. }
            | ExecCommand::Tui
            | ExecCommand::Events(_)
            | ExecCommand::Hook(_)
            | ExecCommand::Search(_) => return None,
        })
    }
}

/// Parse an exec command line. `None` for anything that is not exactly one
/// known verb with its arguments (unknown verb, missing or extra arguments,
/// empty arguments, bad quoting); [`refusal`] says which error it gets.
pub fn parse_exec_command(command: &str) -> Option<ExecCommand> {
    let tokens = shell_tokens(command).ok()?;
    let invocation = verbs::parse(&tokens).ok()?;
    ExecCommand::from_invocation(&invocation)
}

/// The one-line error for a command line [`parse_exec_command`] refused.
pub fn refusal(command: &str) -> String {
    let tokens = match shell_tokens(command) {
        Ok(tokens) => tokens,
        Err(e) => return format!("error: invalid command: {e}"),
    };
    match verbs::parse(&tokens) {
        // The table took it, its handler did not: a value only it checks.
        Ok(invocation) => format!(
            "error: usage: {}",
            verbs::family_usage(invocation.verb.family)
        ),
        Err(refusal) => refusal.line(),
    }
}

impl ExecCommand {
    /// The typed command for a row of the verb table; `None` when a value
    /// fails a check only the server can make (label syntax, cursors,
    /// patterns, note length), or for a row no arm builds (then
    /// `every_verb_has_a_handler` fails). The command names its row (its
    /// `verb()` finds that very row), which is what its handler's access
    /// is read from ([`row_level`]).
    pub fn from_invocation(inv: &Invocation<'_>) -> Option<ExecCommand> {
        let command = Self::typed(inv)?;
        verbs::named(command.verb())
            .is_some_and(|row| std::ptr::eq(row, inv.verb))
            .then_some(command)
    }

    fn typed(inv: &Invocation<'_>) -> Option<ExecCommand> {
        let git = |service| ExecCommand::Git {
            service,
            repo: inv.arg("repo").to_string(),
        };
        Some(match inv.verb.family {
            "git-upload-pack" => git(GitService::UploadPack),
            "git-receive-pack" => git(GitService::ReceivePack),
            "git-upload-archive" => git(GitService::UploadArchive),
            "git-lfs-transfer" => ExecCommand::LfsTransfer {
                repo: inv.arg("repo").to_string(),
                operation: match inv.arg("operation") {
                    "upload" => LfsOperation::Upload,
                    _ => LfsOperation::Download,
                },
            },
            "git-lfs-authenticate" => ExecCommand::LfsAuthenticate {
                repo: inv.arg("repo").to_string(),
            },
            "collab-whoami" => ExecCommand::Whoami,
            "collab-mcp" => ExecCommand::Mcp,
            "help" => ExecCommand::Help,
            "info" => ExecCommand::Info {
                json: inv.has("--json"),
            },
            "collab-repo" if inv.verb.action.starts_with("mirror ") => {
                ExecCommand::Mirror(MirrorCmd::from_invocation(inv)?)
            }
            "tui" => ExecCommand::Tui,
            "collab-repo" => ExecCommand::Repo(RepoCmd::from_invocation(inv)?),
            "collab-lease" => ExecCommand::Lease(LeaseCmd::from_invocation(inv)?),
            "collab-release" => ExecCommand::Release(ReleaseCmd::from_invocation(inv)?),
            "collab-issue" => ExecCommand::Issue(IssueCmd::from_invocation(inv)?),
            "collab-patch" => ExecCommand::Patch(super::patch::PatchCmd::from_invocation(inv)?),
            "collab-events" => ExecCommand::Events(WatchCmd::from_invocation(inv)?),
            "collab-hook" => ExecCommand::Hook(HookCmd::from_invocation(inv)?),
            "collab-check" => ExecCommand::Check(super::check::CheckCmd::from_invocation(inv)?),
            "collab-queue" => ExecCommand::Queue(super::queue::QueueCmd::from_invocation(inv)?),
            "collab-search" => ExecCommand::Search(super::search::SearchCmd::from_invocation(inv)),
            // A row without a handler; `every_verb_has_a_handler` fails.
            _ => return None,
        })
    }
}

impl RepoCmd {
    fn from_invocation(inv: &Invocation<'_>) -> Option<RepoCmd> {
        let repo = || inv.arg("repo").to_string();
        Some(match inv.verb.action {
            "create" => RepoCmd::Create {
                name: inv.arg("name").to_string(),
            },
            "list" => RepoCmd::List,
            "gc" => RepoCmd::Gc { name: repo() },
            "describe" => RepoCmd::Describe {
                repo: repo(),
                text: inv.opt_arg("text").map(str::to_string),
            },
            "visibility" => RepoCmd::Visibility {
                repo: repo(),
                public: inv.opt_arg("visibility").map(|v| v == "public"),
            },
            "set-head" => RepoCmd::SetHead {
                repo: repo(),
                branch: inv.arg("branch").to_string(),
            },
            "rename" => RepoCmd::Rename {
                repo: repo(),
                new_name: inv.arg("new-name").to_string(),
            },
            "delete" => RepoCmd::Delete {
                repo: repo(),
                confirm: inv.flag("--confirm").unwrap_or_default().to_string(),
            },
            _ => return None,
        })
    }
}

/// `--note` / `--reason`: non-blank, at most `MAX_NOTE_BYTES` (the
/// tokenizer already refused control characters).
fn lease_text(value: Option<&str>) -> Option<Option<String>> {
    match value {
        None => Some(None),
        Some(v) if !v.trim().is_empty() && v.len() <= MAX_NOTE_BYTES => Some(Some(v.to_string())),
        Some(_) => None,
    }
}

impl LeaseCmd {
    fn from_invocation(inv: &Invocation<'_>) -> Option<LeaseCmd> {
        let repo = inv.arg("repo").to_string();
        let issue = || inv.arg("issue").to_string();
        let ttl_secs = || inv.int("--ttl");
        let wait_secs = || inv.int("--wait").map(|w| w as u64);
        let note = || lease_text(inv.flag("--note"));
        Some(match inv.verb.action {
            "acquire" => LeaseCmd::Acquire {
                repo,
                issue: issue(),
                ttl_secs: ttl_secs(),
                note: note()?,
                wait_secs: wait_secs(),
            },
            "renew" => LeaseCmd::Renew {
                repo,
                issue: issue(),
                ttl_secs: ttl_secs()?,
                note: note()?,
            },
            "release" => LeaseCmd::Release {
                repo,
                issue: issue(),
            },
            "break" => LeaseCmd::Break {
                repo,
                issue: issue(),
                reason: lease_text(inv.flag("--reason"))??,
            },
            "list" => LeaseCmd::List { repo },
            "show" => LeaseCmd::Show {
                repo,
                issue: issue(),
            },
            "next" => {
                let labels = inv.flags("--label");
                if labels.len() > collab_store::queue::MAX_LABELS
                    || labels
                        .iter()
                        .any(|l| collab_store::issues::check_label(l).is_err())
                {
                    return None;
                }
                LeaseCmd::Next {
                    repo,
                    labels: labels.into_iter().map(str::to_string).collect(),
                    ttl_secs: ttl_secs(),
                    note: note()?,
                    wait_secs: wait_secs(),
                }
            }
            _ => return None,
        })
    }
}

impl ReleaseCmd {
    fn from_invocation(inv: &Invocation<'_>) -> Option<ReleaseCmd> {
        let repo = inv.arg("repo").to_string();
        let tag = || inv.arg("tag").to_string();
        Some(match inv.verb.action {
            "create" => ReleaseCmd::Create {
                repo,
                tag: tag(),
                file: inv.arg("file").to_string(),
            },
            "list" => ReleaseCmd::List { repo },
            "download" => ReleaseCmd::Download {
                repo,
                tag: tag(),
                file: inv.arg("file").to_string(),
            },
            "delete" => ReleaseCmd::Delete {
                repo,
                tag: tag(),
                file: inv.opt_arg("file").map(str::to_string),
            },
            _ => return None,
        })
    }
}

/// Event type patterns (`--type`, `--event`): each valid, at most
/// `MAX_PATTERNS`.
fn type_patterns(values: Vec<&str>) -> Option<Vec<String>> {
    use crate::events::filter::{valid_pattern, MAX_PATTERNS};
    (values.len() <= MAX_PATTERNS && values.iter().all(|p| valid_pattern(p)))
        .then(|| values.into_iter().map(str::to_string).collect())
}

impl WatchCmd {
    fn from_invocation(inv: &Invocation<'_>) -> Option<WatchCmd> {
        Some(WatchCmd {
            repos: inv.args("repo").into_iter().map(str::to_string).collect(),
            since: inv.int("--since"),
            types: type_patterns(inv.flags("--type"))?,
            follow: !inv.has("--no-follow"),
        })
    }
}

impl HookCmd {
    fn from_invocation(inv: &Invocation<'_>) -> Option<HookCmd> {
        let id = || inv.arg("id").to_string();
        Some(match inv.verb.action {
            "add" => HookCmd::Add {
                repo_glob: inv.arg("repo-glob").to_string(),
                url: inv.arg("url").to_string(),
                events: type_patterns(inv.flags("--event"))?,
                secret_stdin: inv.has("--secret-stdin"),
            },
            "list" => HookCmd::List,
            "remove" => HookCmd::Remove { id: id() },
            "enable" => HookCmd::Enable { id: id() },
            "approve" => HookCmd::Approve { id: id() },
            "test" => HookCmd::Test { id: id() },
            "deliveries" => HookCmd::Deliveries {
                id: id(),
                limit: inv.int("--limit").unwrap_or(50),
            },
            "redeliver" => HookCmd::Redeliver {
                message_id: inv.arg("webhook-id").to_string(),
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collab_proto::tokens::shell_quote;
    use proptest::prelude::*;

    const MAX_LEASE_TTL_SECS: i64 = collab_proto::limits::MAX_TTL_SECS as i64;

    fn git(service: GitService, repo: &str) -> Option<ExecCommand> {
        Some(ExecCommand::Git {
            service,
            repo: repo.into(),
        })
    }

    #[test]
    fn parses_git_verbs() {
        use GitService::*;
        assert_eq!(
            parse_exec_command("git-upload-pack 'r.git'"),
            git(UploadPack, "r.git")
        );
        assert_eq!(
            parse_exec_command("git-upload-pack '/r.git'"),
            git(UploadPack, "/r.git")
        );
        assert_eq!(
            parse_exec_command("git upload-pack 'a/b'"),
            git(UploadPack, "a/b")
        );
        assert_eq!(
            parse_exec_command("git-receive-pack r"),
            git(ReceivePack, "r")
        );
        assert_eq!(
            parse_exec_command("git receive-pack \"r\""),
            git(ReceivePack, "r")
        );
    }

    #[test]
    fn parses_collab_verbs() {
        assert_eq!(
            parse_exec_command("collab-whoami"),
            Some(ExecCommand::Whoami)
        );
        assert_eq!(
            parse_exec_command("collab-repo create 'x/y'"),
            Some(ExecCommand::Repo(RepoCmd::Create { name: "x/y".into() }))
        );
        assert_eq!(
            parse_exec_command("collab-repo list"),
            Some(ExecCommand::Repo(RepoCmd::List))
        );
        assert_eq!(parse_exec_command("help"), Some(ExecCommand::Help));
        assert_eq!(
            parse_exec_command("collab-repo describe r 'A forge'"),
            Some(ExecCommand::Repo(RepoCmd::Describe {
                repo: "r".into(),
                text: Some("A forge".into())
            }))
        );
        assert_eq!(
            parse_exec_command("collab-repo visibility r public"),
            Some(ExecCommand::Repo(RepoCmd::Visibility {
                repo: "r".into(),
                public: Some(true)
            }))
        );
        assert_eq!(parse_exec_command("collab-repo visibility r maybe"), None);
        assert_eq!(
            parse_exec_command("collab-repo delete r --confirm r"),
            Some(ExecCommand::Repo(RepoCmd::Delete {
                repo: "r".into(),
                confirm: "r".into()
            }))
        );
        assert_eq!(parse_exec_command("collab-repo delete r"), None);
        assert_eq!(
            parse_exec_command("collab-repo set-head r trunk"),
            Some(ExecCommand::Repo(RepoCmd::SetHead {
                repo: "r".into(),
                branch: "trunk".into()
            }))
        );
        assert_eq!(
            parse_exec_command("collab-repo rename r team/r2"),
            Some(ExecCommand::Repo(RepoCmd::Rename {
                repo: "r".into(),
                new_name: "team/r2".into()
            }))
        );
        assert_eq!(
            parse_exec_command("collab-repo gc 'team/app'"),
            Some(ExecCommand::Repo(RepoCmd::Gc {
                name: "team/app".into()
            }))
        );
    }

    #[test]
    fn parses_release_verbs() {
        let s = |v: &str| v.to_string();
        assert_eq!(
            parse_exec_command("collab-release create 'team/app' 'v1.0' 'app.tar.gz'"),
            Some(ExecCommand::Release(ReleaseCmd::Create {
                repo: s("team/app"),
                tag: s("v1.0"),
                file: s("app.tar.gz"),
            }))
        );
        assert_eq!(
            parse_exec_command("collab-release list r"),
            Some(ExecCommand::Release(ReleaseCmd::List { repo: s("r") }))
        );
        assert_eq!(
            parse_exec_command("collab-release download 'r' \"v 1\" f"),
            Some(ExecCommand::Release(ReleaseCmd::Download {
                repo: s("r"),
                tag: s("v 1"),
                file: s("f"),
            }))
        );
        assert_eq!(
            parse_exec_command("collab-release delete 'r' 'v1'"),
            Some(ExecCommand::Release(ReleaseCmd::Delete {
                repo: s("r"),
                tag: s("v1"),
                file: None,
            }))
        );
        assert_eq!(
            parse_exec_command("collab-release delete 'r' 'v1' 'f'"),
            Some(ExecCommand::Release(ReleaseCmd::Delete {
                repo: s("r"),
                tag: s("v1"),
                file: Some(s("f")),
            }))
        );
        let parsed = parse_exec_command("collab-release create 'r' 'v1' 'f'").unwrap();
        assert_eq!(
            (parsed.verb(), parsed.repo()),
            ("collab-release create", Some("r"))
        );
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            "",
            "ls",
            "git-upload-pack",
            "git-upload-pack ''",
            "git-upload-pack 'r.git' extra",
            "git-upload-pack 'r.git'; touch x",
            "git-upload-pack 'r.git",
            "git-upload-pack 'r\0.git'",
            "collab-whoami now",
            "collab-repo create",
            "collab-repo delete 'r'",
            "collab-release",
            "collab-release create 'r' 'v1'",
            "collab-release create 'r' 'v1' ''",
            "collab-release create 'r' 'v1' 'f' 'g'",
            "collab-release list",
            "collab-release list 'r' 'v1'",
            "collab-release delete 'r'",
            "collab-release delete 'r' 'v1' 'f' 'g'",
            "collab-release download 'r' 'v1'",
            "collab-release upload 'r' 'v1' 'f'",
            "sh -c 'id'",
        ] {
            assert_eq!(parse_exec_command(bad), None, "{bad:?}");
        }
        assert!(refusal("collab-repo create").starts_with("error: usage: collab-repo"));
        assert!(
            refusal("collab-release create 'r'").starts_with("error: usage: collab-release create")
        );
        assert_eq!(refusal("rm -rf"), "error: unknown command");
        assert!(refusal("git-upload-pack 'r").starts_with("error: invalid command: "));
    }

    #[test]
    fn parses_events_watch() {
        let s = |v: &str| v.to_string();
        assert_eq!(
            parse_exec_command("collab-events watch"),
            Some(ExecCommand::Events(WatchCmd {
                repos: vec![],
                since: None,
                types: vec![],
                follow: true
            }))
        );
        assert_eq!(
            parse_exec_command(
                "collab-events watch 'a' --since 12 b --type 'lease.*' --type ref.updated --no-follow"
            ),
            Some(ExecCommand::Events(WatchCmd {
                repos: vec![s("a"), s("b")],
                since: Some(12),
                types: vec![s("lease.*"), s("ref.updated")],
                follow: false
            }))
        );
        for bad in [
            "collab-events",
            "collab-events tail",
            "collab-events watch --since",
            "collab-events watch --since -1",
            "collab-events watch --since 1 --since 2",
            "collab-events watch --since 1x",
            "collab-events watch --since 9999999999999999999",
            "collab-events watch --type",
            "collab-events watch --type 'a b'",
            "collab-events watch --follow",
            "collab-events watch --no-follow --no-follow",
            "collab-events watch -x",
        ] {
            assert_eq!(parse_exec_command(bad), None, "{bad:?}");
        }
        assert!(
            refusal("collab-events watch --since").starts_with("error: usage: collab-events watch")
        );
    }

    #[test]
    fn parses_hook_verbs() {
        let s = |v: &str| v.to_string();
        assert_eq!(
            parse_exec_command(
                "collab-hook add 'team/*' 'https://x/h' --event 'lease.*' --event ref.updated --secret-stdin"
            ),
            Some(ExecCommand::Hook(HookCmd::Add {
                repo_glob: s("team/*"),
                url: s("https://x/h"),
                events: vec![s("lease.*"), s("ref.updated")],
                secret_stdin: true,
            }))
        );
        assert_eq!(
            parse_exec_command("collab-hook deliveries wh1 --limit 5"),
            Some(ExecCommand::Hook(HookCmd::Deliveries {
                id: s("wh1"),
                limit: 5
            }))
        );
        for bad in [
            "collab-hook",
            "collab-hook add 'x'",
            "collab-hook add x y --event",
            "collab-hook add x y --secret-stdin --secret-stdin",
            "collab-hook add x y --secret",
            "collab-hook list x",
            "collab-hook deliveries wh1 --limit 0",
            "collab-hook deliveries wh1 --limit +5",
            "collab-hook redeliver",
        ] {
            assert_eq!(parse_exec_command(bad), None, "{bad:?}");
        }
    }

    fn lease(cmd: LeaseCmd) -> Option<ExecCommand> {
        Some(ExecCommand::Lease(cmd))
    }

    #[test]
    fn parse_lease_acquire() {
        assert_eq!(
            parse_exec_command("collab-lease acquire 'r.git' 'a1b2c3d4'"),
            lease(LeaseCmd::Acquire {
                repo: "r.git".into(),
                issue: "a1b2c3d4".into(),
                ttl_secs: None,
                note: None,
                wait_secs: None,
            })
        );
        assert_eq!(
            parse_exec_command("collab-lease acquire \"team/r\" a1b2"),
            lease(LeaseCmd::Acquire {
                repo: "team/r".into(),
                issue: "a1b2".into(),
                ttl_secs: None,
                note: None,
                wait_secs: None,
            })
        );
    }

    #[test]
    fn parse_lease_acquire_with_ttl() {
        let cmd = parse_exec_command("collab-lease acquire 'r.git' 'a1b2c3d4' --ttl 300");
        assert_eq!(
            cmd,
            lease(LeaseCmd::Acquire {
                repo: "r.git".into(),
                issue: "a1b2c3d4".into(),
                ttl_secs: Some(300),
                note: None,
                wait_secs: None,
            })
        );
        assert_eq!(cmd.unwrap().repo(), Some("r.git"));
        assert!(parse_exec_command(&format!(
            "collab-lease acquire r i --ttl {MAX_LEASE_TTL_SECS}"
        ))
        .is_some());
    }

    #[test]
    fn parse_lease_renew_requires_ttl() {
        assert_eq!(
            parse_exec_command("collab-lease renew 'r.git' 'a1b2c3d4' --ttl 300"),
            lease(LeaseCmd::Renew {
                repo: "r.git".into(),
                issue: "a1b2c3d4".into(),
                ttl_secs: 300,
                note: None,
            })
        );
        assert_eq!(
            parse_exec_command("collab-lease renew 'r.git' 'a1b2c3d4'"),
            None
        );
    }

    #[test]
    fn parse_lease_release() {
        assert_eq!(
            parse_exec_command("collab-lease release 'r.git' 'a1b2c3d4'"),
            lease(LeaseCmd::Release {
                repo: "r.git".into(),
                issue: "a1b2c3d4".into()
            })
        );
    }

    #[test]
    fn parse_lease_list() {
        let cmd = parse_exec_command("collab-lease list 'r.git'");
        assert_eq!(
            cmd,
            lease(LeaseCmd::List {
                repo: "r.git".into()
            })
        );
        assert_eq!(cmd.unwrap().verb(), "collab-lease list");
    }

    #[test]
    fn parse_lease_options_in_any_order() {
        assert_eq!(
            parse_exec_command("collab-lease acquire r i --wait 30 --note 'fixing it' --ttl 60"),
            lease(LeaseCmd::Acquire {
                repo: "r".into(),
                issue: "i".into(),
                ttl_secs: Some(60),
                note: Some("fixing it".into()),
                wait_secs: Some(30),
            })
        );
        assert_eq!(
            parse_exec_command("collab-lease renew r i --note n --ttl 5"),
            lease(LeaseCmd::Renew {
                repo: "r".into(),
                issue: "i".into(),
                ttl_secs: 5,
                note: Some("n".into()),
            })
        );
        assert_eq!(
            parse_exec_command("collab-lease break r i --reason 'agent died'"),
            lease(LeaseCmd::Break {
                repo: "r".into(),
                issue: "i".into(),
                reason: "agent died".into(),
            })
        );
        assert_eq!(
            parse_exec_command("collab-lease show r i"),
            lease(LeaseCmd::Show {
                repo: "r".into(),
                issue: "i".into(),
            })
        );
        let longest = "n".repeat(MAX_NOTE_BYTES);
        assert!(
            parse_exec_command(&format!("collab-lease acquire r i --note {longest}")).is_some()
        );
        assert!(
            parse_exec_command(&format!("collab-lease acquire r i --wait {MAX_WAIT_SECS}"))
                .is_some()
        );
    }

    #[test]
    fn parse_lease_next() {
        assert_eq!(
            parse_exec_command("collab-lease next r --label bug --ttl 60 --label easy --wait 5"),
            lease(LeaseCmd::Next {
                repo: "r".into(),
                labels: vec!["bug".into(), "easy".into()],
                ttl_secs: Some(60),
                note: None,
                wait_secs: Some(5),
            })
        );
        assert_eq!(
            parse_exec_command("collab-lease next r"),
            lease(LeaseCmd::Next {
                repo: "r".into(),
                labels: vec![],
                ttl_secs: None,
                note: None,
                wait_secs: None,
            })
        );
        let many = (0..17)
            .map(|i| format!("--label l{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        for bad in [
            "collab-lease next".to_string(),
            "collab-lease next r --label".to_string(),
            "collab-lease next r --label 'a b'".to_string(),
            "collab-lease next r --reason x".to_string(),
            "collab-lease next r i".to_string(),
            format!("collab-lease next r {many}"),
        ] {
            assert_eq!(parse_exec_command(&bad), None, "{bad}");
        }
    }

    #[test]
    fn parse_lease_rejects_bad_commands() {
        for bad in [
            "collab-lease",
            "collab-lease steal 'r.git' 'a1b2'",
            "collab-lease ACQUIRE 'r.git' 'a1b2'",
            "collab-lease acquire '' 'a1b2'",
            "collab-lease acquire 'r.git' ''",
            "collab-lease acquire 'r.git'",
            "collab-lease acquire 'r.git' 'a1b2' --ttl",
            "collab-lease acquire 'r.git' 'a1b2' --ttl abc",
            "collab-lease acquire 'r.git' 'a1b2' --ttl 0",
            "collab-lease acquire 'r.git' 'a1b2' --ttl -5",
            "collab-lease acquire 'r.git' 'a1b2' --ttl +5",
            "collab-lease acquire 'r.git' 'a1b2' --ttl 1.5",
            "collab-lease acquire 'r.git' 'a1b2' --ttl ''",
            "collab-lease acquire 'r.git' 'a1b2' --ttl 99999999999999999999",
            "collab-lease acquire 'r.git' 'a1b2' --ttl 315360001",
            "collab-lease acquire 'r.git' 'a1b2' --ttl 300 extra",
            "collab-lease acquire 'r.git' 'a1b2' extra",
            "collab-lease acquire 'r.git' 'a1b2' --TTL 300",
            "collab-lease acquire 'r.git' 'a1b2' --ttl 300 --ttl 300",
            "collab-lease renew 'r.git' 'a1b2' --ttl 0",
            "collab-lease renew 'r.git' 'a1b2' --ttl",
            "collab-lease release 'r.git'",
            "collab-lease release 'r.git' 'a1b2' --ttl 300",
            "collab-lease list",
            "collab-lease list ''",
            "collab-lease list 'r.git' 'a1b2'",
            "collab-lease list 'r.git",
            "collab-lease acquire 'r.git' 'a1b2",
            "collab-lease acquire 'r.git' a1b2\x01",
            "collab-lease acquire r i --note",
            "collab-lease acquire r i --note ''",
            "collab-lease acquire r i --note '   '",
            "collab-lease acquire r i --note a --note b",
            "collab-lease acquire r i --wait -1",
            "collab-lease acquire r i --wait 3601",
            "collab-lease acquire r i --wait 1.5",
            "collab-lease acquire r i --reason x",
            "collab-lease renew r i --wait 5 --ttl 5",
            "collab-lease release r i --note x",
            "collab-lease break r i",
            "collab-lease break r i --reason",
            "collab-lease break r i --reason ''",
            "collab-lease break r i --reason x --ttl 5",
            "collab-lease show r",
            "collab-lease show r i j",
        ] {
            assert_eq!(parse_exec_command(bad), None, "{bad:?}");
        }
        assert!(refusal("collab-lease renew r i").contains("collab-lease renew"));
        let long = "n".repeat(MAX_NOTE_BYTES + 1);
        assert_eq!(
            parse_exec_command(&format!("collab-lease acquire r i --note {long}")),
            None
        );
    }

    /// A command line the table takes for `verb`: sample values of each
    /// kind, its required flags, one flag of each group that needs one.
    fn sample_line(verb: &verbs::Verb) -> String {
        use collab_proto::verbs::{Arity, Kind, Rule};
        let sample = |kind: Kind| match kind {
            Kind::Int { min, .. } => min.max(1).to_string(),
            Kind::Choice(words) => words[0].to_string(),
            Kind::Id => "abcd".to_string(),
            _ => "x".to_string(),
        };
        let mut line = verb.name();
        for arg in verb.args.iter().filter(|a| a.arity == Arity::One) {
            line.push(' ');
            line.push_str(&sample(arg.kind));
        }
        let mut wanted: Vec<&str> = verb
            .flags
            .iter()
            .filter(|f| f.required)
            .map(|f| f.long)
            .collect();
        for rule in verb.rules {
            if let Rule::OneOf(group) | Rule::AtLeastOne(group) = rule {
                wanted.push(group[0]);
            }
        }
        for long in wanted {
            let flag = verb.flag(long).unwrap();
            line.push(' ');
            line.push_str(long);
            if let Some((_, kind)) = flag.value {
                line.push(' ');
                line.push_str(&sample(kind));
            }
        }
        line
    }

    /// Every row of the verb table reaches a handler, with the name and
    /// (for repository verbs) the repository the table says.
    #[test]
    fn every_verb_has_a_handler() {
        for verb in verbs::VERBS {
            let line = sample_line(verb);
            let command = parse_exec_command(&line)
                .unwrap_or_else(|| panic!("{line}: no handler ({})", refusal(&line)));
            assert!(
                command.verb() == verb.name()
                    || (verb.family.starts_with("git-") && command.verb() == verb.family),
                "{line}: runs as {}",
                command.verb()
            );
            if verb.names_repo() {
                assert_eq!(command.repo(), Some("x"), "{line}");
            }
        }
    }

    /// The level a command asks on its repository is its row's, for every
    /// row (no skip list): a row with a level gives its command that level,
    /// raised where an argument raises it; a row without one (any key, a
    /// rule its handler applies) gives its command none.
    #[test]
    fn needed_access_is_the_tables() {
        let mut lines: Vec<String> = verbs::VERBS.iter().map(sample_line).collect();
        // The arguments that raise a row's level.
        lines.extend(
            [
                "collab-repo describe x 'new text'",
                "collab-repo visibility x public",
                "git-lfs-transfer x upload",
                "git-lfs-transfer x download",
            ]
            .map(String::from),
        );
        for line in lines {
            let tokens = shell_tokens(&line).unwrap();
            let invocation = verbs::parse(&tokens).unwrap();
            let row = invocation.verb;
            // A level on the repository the row names (an administrators'
            // verb that names none, `collab-hook approve`, asks none).
            let wanted = row
                .need
                .level(|arg| row.arg(arg).and_then(|_| invocation.opt_arg(arg)))
                .filter(|_| row.names_repo());
            let command = parse_exec_command(&line).unwrap();
            assert_eq!(command.needed_access(), wanted, "{line}");
        }
        let level = |line: &str| parse_exec_command(line).unwrap().needed_access();
        assert_eq!(level("collab-repo describe x"), Some(Access::Read));
        assert_eq!(level("collab-repo describe x t"), Some(Access::Rewind));
        assert_eq!(level("collab-repo visibility x"), Some(Access::Read));
        assert_eq!(
            level("collab-repo visibility x private"),
            Some(Access::Rewind)
        );
        assert_eq!(level("git-lfs-transfer x upload"), Some(Access::Write));
        assert_eq!(level("git-lfs-transfer x download"), Some(Access::Read));
        assert_eq!(
            level("collab-lease break x i --reason r"),
            Some(Access::Rewind)
        );
        assert_eq!(level("collab-repo mirror list x"), Some(Access::Rewind));
        assert_eq!(level("collab-hook list"), None);
    }

    /// A name that is no row asks the most, not nothing.
    #[test]
    fn a_name_that_is_no_row_asks_rewind() {
        assert_eq!(row_level("collab-lease steal", |_| None), Access::Rewind);
        assert_eq!(row_level("collab-hook list", |_| None), Access::Rewind);
        assert_eq!(row_level("collab-lease show", |_| None), Access::Read);
    }

    proptest! {
        #[test]
        fn lease_args_round_trip(repo in "[^\\p{Cc}]{1,30}", issue in "[^\\p{Cc}]{1,30}", ttl in 1i64..=MAX_LEASE_TTL_SECS) {
            let line = format!("collab-lease acquire {} {} --ttl {ttl}", shell_quote(&repo), shell_quote(&issue));
            prop_assert_eq!(
                parse_exec_command(&line),
                lease(LeaseCmd::Acquire { repo: repo.clone(), issue: issue.clone(), ttl_secs: Some(ttl), note: None, wait_secs: None })
            );
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,80}|[ '\"\\\\a-z\\-\\x00-\\x1f]{0,64}") {
            let _ = parse_exec_command(&s);
        }

        #[test]
        fn quoted_repo_names_round_trip(repo in "[^\\p{Cc}]{1,40}") {
            let line = format!("git-receive-pack {}", shell_quote(&repo));
            prop_assert_eq!(parse_exec_command(&line), git(GitService::ReceivePack, &repo));
        }
    }
}
