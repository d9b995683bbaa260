//! Every SSH exec request is parsed here.
//!
//! `parse_exec_command` turns the command line (split by `shell_tokens`, no
//! shell ever runs) into an `ExecCommand`, and `usage` gives a known verb's
//! usage line. `exec::run_exec` runs a request: it parses it here,
//! dispatches to the verb's module (`git`, `admin`, …) and makes sure every
//! path ends in exactly one reply. Replies go through
//! `reply::reply_and_close`: success is one JSON object on stdout, an error
//! is one `error: …` line on stderr; exit 0 success, 1 error (4 is reserved
//! for lease conflicts).
//!
//! Adding a verb: a variant in `ExecCommand`, an arm in `parse_exec_command`
//! and `usage`, an arm in `exec::dispatch`, and a module for the work.

pub use super::issue::IssueCmd;
#[allow(unused_imports)] // re-exported for verbs that report token errors
pub use super::tokens::{shell_tokens, TokenError};

/// Which git transport service to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitService {
    UploadPack,
    ReceivePack,
    /// `git archive --remote` (readers).
    UploadArchive,
}

impl GitService {
    /// The `git` subcommand.
    pub fn subcommand(self) -> &'static str {
        match self {
            GitService::UploadPack => "upload-pack",
            GitService::ReceivePack => "receive-pack",
            GitService::UploadArchive => "upload-archive",
        }
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

/// `collab-lease` subcommands (see `super::lease`). `ttl_secs` is a positive
/// number of seconds, at most [`MAX_LEASE_TTL_SECS`] (the configured
/// `leases.max_ttl` is checked when the command runs); `wait_secs` at most
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
}

/// The longest lease TTL accepted (ten years; shared with the client).
/// Longer is an assignment, which is what leaving out `--ttl` means.
pub const MAX_LEASE_TTL_SECS: i64 = collab_proto::limits::MAX_TTL_SECS as i64;

/// The longest `--wait` (one hour): a waiting command holds its connection.
pub const MAX_WAIT_SECS: u64 = 3600;

/// The longest `--note` or `--reason`, in bytes.
pub const MAX_NOTE_BYTES: usize = 500;

/// `--ttl <secs>`: decimal digits only, `1..=MAX_LEASE_TTL_SECS`.
fn parse_ttl(value: &str) -> Option<i64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ttl: i64 = value.parse().ok()?;
    (1..=MAX_LEASE_TTL_SECS).contains(&ttl).then_some(ttl)
}

/// `--wait <secs>`: decimal digits only, `0..=MAX_WAIT_SECS`.
fn parse_wait(value: &str) -> Option<u64> {
    if value.is_empty() || value.len() > 10 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = value.parse().ok()?;
    (secs <= MAX_WAIT_SECS).then_some(secs)
}

/// `--note` / `--reason`: non-blank, at most `MAX_NOTE_BYTES` (the
/// tokenizer already refused control characters).
fn parse_text(value: &str) -> Option<String> {
    (!value.trim().is_empty() && value.len() <= MAX_NOTE_BYTES).then(|| value.to_string())
}

/// The `--flag value` options after a subcommand's positional arguments:
/// each flag at most once, only the flags `allowed`.
#[derive(Debug, Default)]
struct LeaseOpts {
    ttl: Option<i64>,
    note: Option<String>,
    wait: Option<u64>,
    reason: Option<String>,
    /// `--label`, repeatable (at most `queue::MAX_LABELS`, each a valid
    /// label).
    labels: Vec<String>,
}

fn parse_lease_opts(args: &[&str], allowed: &[&str]) -> Option<LeaseOpts> {
    let mut opts = LeaseOpts::default();
    let mut rest = args;
    while let [flag, value, tail @ ..] = rest {
        if !allowed.contains(flag) {
            return None;
        }
        let fresh = match *flag {
            "--ttl" => opts.ttl.replace(parse_ttl(value)?).is_none(),
            "--note" => opts.note.replace(parse_text(value)?).is_none(),
            "--wait" => opts.wait.replace(parse_wait(value)?).is_none(),
            "--reason" => opts.reason.replace(parse_text(value)?).is_none(),
            "--label" => {
                crate::db::issues::check_label(value).ok()?;
                opts.labels.push(value.to_string());
                opts.labels.len() <= crate::db::queue::MAX_LABELS
            }
            _ => return None,
        };
        if !fresh {
            return None;
        }
        rest = tail;
    }
    rest.is_empty().then_some(opts)
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

/// The most repositories one watcher may name.
pub const MAX_WATCH_REPOS: usize = 64;

/// `collab-events watch …` after `watch`.
fn parse_watch(args: &[&str]) -> Option<WatchCmd> {
    let mut cmd = WatchCmd {
        repos: Vec::new(),
        since: None,
        types: Vec::new(),
        follow: true,
    };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match *arg {
            "--since" if cmd.since.is_none() => {
                let value = rest.next()?;
                if value.is_empty()
                    || value.len() > 18
                    || !value.bytes().all(|b| b.is_ascii_digit())
                {
                    return None;
                }
                cmd.since = Some(value.parse().ok()?);
            }
            "--type" => {
                let value = rest.next()?;
                if !crate::events::filter::valid_pattern(value)
                    || cmd.types.len() >= crate::events::filter::MAX_PATTERNS
                {
                    return None;
                }
                cmd.types.push(value.to_string());
            }
            "--no-follow" if cmd.follow => cmd.follow = false,
            repo if !repo.starts_with('-') && cmd.repos.len() < MAX_WATCH_REPOS => {
                cmd.repos.push(repo.to_string())
            }
            _ => return None,
        }
    }
    Some(cmd)
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

/// `collab-hook <sub> <args…>` after the verb.
fn parse_hook(sub: &str, args: &[&str]) -> Option<HookCmd> {
    let owned = |s: &str| s.to_string();
    Some(match (sub, args) {
        ("add", [glob, url, rest @ ..]) => {
            let mut events = Vec::new();
            let mut secret_stdin = false;
            let mut rest = rest.iter();
            while let Some(arg) = rest.next() {
                match *arg {
                    "--event" => {
                        let p = rest.next()?;
                        if !crate::events::filter::valid_pattern(p)
                            || events.len() >= crate::events::filter::MAX_PATTERNS
                        {
                            return None;
                        }
                        events.push(owned(p));
                    }
                    "--secret-stdin" if !secret_stdin => secret_stdin = true,
                    _ => return None,
                }
            }
            HookCmd::Add {
                repo_glob: owned(glob),
                url: owned(url),
                events,
                secret_stdin,
            }
        }
        ("list", []) => HookCmd::List,
        ("remove", [id]) => HookCmd::Remove { id: owned(id) },
        ("enable", [id]) => HookCmd::Enable { id: owned(id) },
        ("test", [id]) => HookCmd::Test { id: owned(id) },
        ("deliveries", [id]) => HookCmd::Deliveries {
            id: owned(id),
            limit: 50,
        },
        ("deliveries", [id, "--limit", n]) => {
            let limit: i64 = n.parse().ok().filter(|n| (1..=1000).contains(n))?;
            if !n.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            HookCmd::Deliveries {
                id: owned(id),
                limit,
            }
        }
        ("redeliver", [message_id]) => HookCmd::Redeliver {
            message_id: owned(message_id),
        },
        _ => return None,
    })
}

/// A parsed exec request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecCommand {
    /// `git-upload-pack '<repo>'`, `git-receive-pack '<repo>'` (or `git upload-pack …`).
    Git { service: GitService, repo: String },
    /// `collab-whoami`
    Whoami,
    /// `help`: the verbs available to the caller.
    Help,
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
}

impl ExecCommand {
    /// The repository the command names, if any.
    pub fn repo(&self) -> Option<&str> {
        match self {
            ExecCommand::Git { repo, .. } => Some(repo),
            ExecCommand::Repo(RepoCmd::Create { name } | RepoCmd::Gc { name }) => Some(name),
            ExecCommand::Repo(
                RepoCmd::Describe { repo, .. }
                | RepoCmd::Visibility { repo, .. }
                | RepoCmd::SetHead { repo, .. }
                | RepoCmd::Rename { repo, .. }
                | RepoCmd::Delete { repo, .. },
            ) => Some(repo),
            ExecCommand::Lease(cmd) => Some(cmd.repo()),
            ExecCommand::Release(
                ReleaseCmd::Create { repo, .. }
                | ReleaseCmd::List { repo }
                | ReleaseCmd::Download { repo, .. }
                | ReleaseCmd::Delete { repo, .. },
            ) => Some(repo),
            ExecCommand::Issue(cmd) => Some(cmd.repo()),
            ExecCommand::Patch(cmd) => Some(cmd.repo()),
            ExecCommand::Events(watch) => watch.repos.first().map(String::as_str),
            ExecCommand::Hook(_) => None,
            ExecCommand::Whoami | ExecCommand::Help | ExecCommand::Repo(RepoCmd::List) => None,
        }
    }

    /// The verb, for logs.
    pub fn verb(&self) -> &'static str {
        match self {
            ExecCommand::Git {
                service: GitService::UploadPack,
                ..
            } => "git-upload-pack",
            ExecCommand::Git {
                service: GitService::ReceivePack,
                ..
            } => "git-receive-pack",
            ExecCommand::Git {
                service: GitService::UploadArchive,
                ..
            } => "git-upload-archive",
            ExecCommand::Whoami => "collab-whoami",
            ExecCommand::Repo(RepoCmd::Create { .. }) => "collab-repo create",
            ExecCommand::Repo(RepoCmd::List) => "collab-repo list",
            ExecCommand::Repo(RepoCmd::Describe { .. }) => "collab-repo describe",
            ExecCommand::Repo(RepoCmd::Visibility { .. }) => "collab-repo visibility",
            ExecCommand::Repo(RepoCmd::SetHead { .. }) => "collab-repo set-head",
            ExecCommand::Repo(RepoCmd::Rename { .. }) => "collab-repo rename",
            ExecCommand::Repo(RepoCmd::Delete { .. }) => "collab-repo delete",
            ExecCommand::Help => "help",
            ExecCommand::Repo(RepoCmd::Gc { .. }) => "collab-repo gc",
            ExecCommand::Lease(LeaseCmd::Acquire { .. }) => "collab-lease acquire",
            ExecCommand::Lease(LeaseCmd::Renew { .. }) => "collab-lease renew",
            ExecCommand::Lease(LeaseCmd::Release { .. }) => "collab-lease release",
            ExecCommand::Lease(LeaseCmd::Break { .. }) => "collab-lease break",
            ExecCommand::Lease(LeaseCmd::List { .. }) => "collab-lease list",
            ExecCommand::Lease(LeaseCmd::Show { .. }) => "collab-lease show",
            ExecCommand::Lease(LeaseCmd::Next { .. }) => "collab-lease next",
            ExecCommand::Release(ReleaseCmd::Create { .. }) => "collab-release create",
            ExecCommand::Release(ReleaseCmd::List { .. }) => "collab-release list",
            ExecCommand::Release(ReleaseCmd::Download { .. }) => "collab-release download",
            ExecCommand::Release(ReleaseCmd::Delete { .. }) => "collab-release delete",
            ExecCommand::Issue(cmd) => cmd.verb(),
            ExecCommand::Patch(cmd) => cmd.verb(),
            ExecCommand::Events(_) => "collab-events watch",
            ExecCommand::Hook(HookCmd::Add { .. }) => "collab-hook add",
            ExecCommand::Hook(HookCmd::List) => "collab-hook list",
            ExecCommand::Hook(HookCmd::Remove { .. }) => "collab-hook remove",
            ExecCommand::Hook(HookCmd::Enable { .. }) => "collab-hook enable",
            ExecCommand::Hook(HookCmd::Test { .. }) => "collab-hook test",
            ExecCommand::Hook(HookCmd::Deliveries { .. }) => "collab-hook deliveries",
            ExecCommand::Hook(HookCmd::Redeliver { .. }) => "collab-hook redeliver",
        }
    }
}

/// Parse an exec command line. `None` for anything that is not exactly one
/// known verb with its arguments (unknown verb, missing or extra arguments,
/// empty arguments, bad quoting).
pub fn parse_exec_command(command: &str) -> Option<ExecCommand> {
    let tokens = shell_tokens(command).ok()?;
    let args: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let git = |service, repo: &str| {
        Some(ExecCommand::Git {
            service,
            repo: repo.to_string(),
        })
    };
    match args.as_slice() {
        ["git-upload-pack", repo] | ["git", "upload-pack", repo] => {
            git(GitService::UploadPack, repo)
        }
        ["git-receive-pack", repo] | ["git", "receive-pack", repo] => {
            git(GitService::ReceivePack, repo)
        }
        ["git-upload-archive", repo] | ["git", "upload-archive", repo] => {
            git(GitService::UploadArchive, repo)
        }
        ["collab-whoami"] => Some(ExecCommand::Whoami),
        ["collab-repo", "create", name] => Some(ExecCommand::Repo(RepoCmd::Create {
            name: name.to_string(),
        })),
        ["collab-repo", "list"] => Some(ExecCommand::Repo(RepoCmd::List)),
        ["collab-repo", "gc", name] => Some(ExecCommand::Repo(RepoCmd::Gc {
            name: name.to_string(),
        })),
        ["collab-repo", sub, rest @ ..] => parse_repo_admin(sub, rest).map(ExecCommand::Repo),
        ["help"] | ["collab-help"] => Some(ExecCommand::Help),
        ["collab-lease", sub, rest @ ..] => parse_lease(sub, rest).map(ExecCommand::Lease),
        ["collab-issue", sub, rest @ ..] => super::issue::parse(sub, rest).map(ExecCommand::Issue),
        ["collab-patch", sub, rest @ ..] => super::patch::parse(sub, rest).map(ExecCommand::Patch),
        ["collab-events", "watch", rest @ ..] => parse_watch(rest).map(ExecCommand::Events),
        ["collab-hook", sub, rest @ ..] => parse_hook(sub, rest).map(ExecCommand::Hook),
        ["collab-release", "create", repo, tag, file] => {
            Some(ExecCommand::Release(ReleaseCmd::Create {
                repo: repo.to_string(),
                tag: tag.to_string(),
                file: file.to_string(),
            }))
        }
        ["collab-release", "list", repo] => Some(ExecCommand::Release(ReleaseCmd::List {
            repo: repo.to_string(),
        })),
        ["collab-release", "download", repo, tag, file] => {
            Some(ExecCommand::Release(ReleaseCmd::Download {
                repo: repo.to_string(),
                tag: tag.to_string(),
                file: file.to_string(),
            }))
        }
        ["collab-release", "delete", repo, tag, rest @ ..] if rest.len() <= 1 => {
            Some(ExecCommand::Release(ReleaseCmd::Delete {
                repo: repo.to_string(),
                tag: tag.to_string(),
                file: rest.first().map(|f| f.to_string()),
            }))
        }
        _ => None,
    }
}

/// `collab-repo <sub> <args…>` for the administration subcommands.
fn parse_repo_admin(sub: &str, args: &[&str]) -> Option<RepoCmd> {
    let owned = |s: &str| s.to_string();
    Some(match (sub, args) {
        ("describe", [repo]) => RepoCmd::Describe {
            repo: owned(repo),
            text: None,
        },
        ("describe", [repo, text]) => RepoCmd::Describe {
            repo: owned(repo),
            text: Some(owned(text)),
        },
        ("visibility", [repo]) => RepoCmd::Visibility {
            repo: owned(repo),
            public: None,
        },
        ("visibility", [repo, "public"]) => RepoCmd::Visibility {
            repo: owned(repo),
            public: Some(true),
        },
        ("visibility", [repo, "private"]) => RepoCmd::Visibility {
            repo: owned(repo),
            public: Some(false),
        },
        ("set-head", [repo, branch]) => RepoCmd::SetHead {
            repo: owned(repo),
            branch: owned(branch),
        },
        ("rename", [repo, new_name]) => RepoCmd::Rename {
            repo: owned(repo),
            new_name: owned(new_name),
        },
        ("delete", [repo, "--confirm", confirm]) => RepoCmd::Delete {
            repo: owned(repo),
            confirm: owned(confirm),
        },
        _ => return None,
    })
}

/// `collab-lease <sub> <args…>` after the verb.
fn parse_lease(sub: &str, args: &[&str]) -> Option<LeaseCmd> {
    let owned = |s: &str| s.to_string();
    Some(match (sub, args) {
        ("acquire", [repo, issue, opts @ ..]) => {
            let o = parse_lease_opts(opts, &["--ttl", "--note", "--wait"])?;
            LeaseCmd::Acquire {
                repo: owned(repo),
                issue: owned(issue),
                ttl_secs: o.ttl,
                note: o.note,
                wait_secs: o.wait,
            }
        }
        ("renew", [repo, issue, opts @ ..]) => {
            let o = parse_lease_opts(opts, &["--ttl", "--note"])?;
            LeaseCmd::Renew {
                repo: owned(repo),
                issue: owned(issue),
                ttl_secs: o.ttl?,
                note: o.note,
            }
        }
        ("release", [repo, issue]) => LeaseCmd::Release {
            repo: owned(repo),
            issue: owned(issue),
        },
        ("break", [repo, issue, opts @ ..]) => LeaseCmd::Break {
            repo: owned(repo),
            issue: owned(issue),
            reason: parse_lease_opts(opts, &["--reason"])?.reason?,
        },
        ("list", [repo]) => LeaseCmd::List { repo: owned(repo) },
        ("show", [repo, issue]) => LeaseCmd::Show {
            repo: owned(repo),
            issue: owned(issue),
        },
        ("next", [repo, opts @ ..]) => {
            let o = parse_lease_opts(opts, &["--label", "--ttl", "--note", "--wait"])?;
            LeaseCmd::Next {
                repo: owned(repo),
                labels: o.labels,
                ttl_secs: o.ttl,
                note: o.note,
                wait_secs: o.wait,
            }
        }
        _ => return None,
    })
}

/// The usage line of a known verb, shown when its arguments are wrong.
pub fn usage(tokens: &[String]) -> Option<&'static str> {
    let first = tokens.first()?.as_str();
    let second = tokens.get(1).map(String::as_str);
    Some(match (first, second) {
        ("git-upload-pack", _) | ("git", Some("upload-pack")) => "git-upload-pack '<repo>'",
        ("git-receive-pack", _) | ("git", Some("receive-pack")) => "git-receive-pack '<repo>'",
        ("git-upload-archive", _) | ("git", Some("upload-archive")) => {
            "git-upload-archive '<repo>'"
        }
        ("collab-whoami", _) => "collab-whoami",
        ("collab-repo", _) => {
            "collab-repo create '<name>' | list | gc '<repo>' | describe '<repo>' ['<text>'] | \
             visibility '<repo>' [public|private] | set-head '<repo>' '<branch>' | \
             rename '<repo>' '<new-name>' | delete '<repo>' --confirm '<repo>'"
        }
        ("collab-lease", _) => {
            "collab-lease acquire '<repo>' '<issue>' [--ttl <secs>] [--note <text>] [--wait <secs>] | \
             collab-lease renew '<repo>' '<issue>' --ttl <secs> [--note <text>] | \
             collab-lease release '<repo>' '<issue>' | \
             collab-lease break '<repo>' '<issue>' --reason <text> | \
             collab-lease list '<repo>' | collab-lease show '<repo>' '<issue>' | \
             collab-lease next '<repo>' [--label <label>]... [--ttl <secs>] [--note <text>] [--wait <secs>]"
        }
        ("collab-hook", _) => {
            "collab-hook add '<repo-glob>' '<url>' [--event <pattern>]... [--secret-stdin] | list | \
             remove '<id>' | enable '<id>' | test '<id>' | deliveries '<id>' [--limit <n>] | \
             redeliver '<webhook-id>'"
        }
        ("collab-issue", _) => super::issue::USAGE,
        ("collab-patch", _) => super::patch::USAGE,
        ("collab-events", _) => {
            "collab-events watch ['<repo>'...] [--since <seq>] [--type <pattern>]... [--no-follow]"
        }
        ("collab-release", _) => {
            "collab-release create|download '<repo>' '<tag>' '<file>' | list '<repo>' | delete '<repo>' '<tag>' ['<file>']"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssh::tokens::shell_quote;
    use proptest::prelude::*;

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
        let tokens = shell_tokens("collab-repo create").unwrap();
        assert!(usage(&tokens).is_some());
        let tokens = shell_tokens("collab-release create 'r'").unwrap();
        assert!(usage(&tokens).unwrap().starts_with("collab-release create"));
        assert!(usage(&shell_tokens("rm -rf").unwrap()).is_none());
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
        let tokens = shell_tokens("collab-events watch --since").unwrap();
        assert!(usage(&tokens).unwrap().starts_with("collab-events watch"));
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
        let tokens = shell_tokens("collab-lease renew r i").unwrap();
        assert!(usage(&tokens).unwrap().contains("collab-lease renew"));
        let long = "n".repeat(MAX_NOTE_BYTES + 1);
        assert_eq!(
            parse_exec_command(&format!("collab-lease acquire r i --note {long}")),
            None
        );
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
