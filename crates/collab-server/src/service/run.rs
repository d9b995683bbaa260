//! The two steps every door takes ([`authorize`], then [`run`]), the
//! running-verb admission ([`admit`], by [`weight`]) and what a door does
//! with an answer it could not deliver ([`undelivered`]).

use super::command::{ExecCommand, HookCmd, LeaseCmd, ReleaseCmd};
use super::context::Context;
use super::patch::PatchCmd;
use super::reply::Answer;
use crate::limits::running::{Admitted, Runner, Weight};
use crate::repos::RepoEntry;

/// A request let in: its admission units (held until it is dropped) and,
/// for a verb authorized before its body is read, the repository.
pub struct Authorized {
    command: ExecCommand,
    entry: Option<RepoEntry>,
    _admitted: Admitted,
}

impl Authorized {
    /// What the verb reads on standard input, if anything: the door reads
    /// it to EOF within [`Stdin::max`] and passes it to [`run`].
    pub fn stdin(&self, ctx: &Context) -> Option<Stdin> {
        let body = || Stdin {
            max: ctx.app.config.max_issue_body,
            too_long: format!(
                "error: body is larger than max_issue_body ({} bytes); nothing was written",
                ctx.app.config.max_issue_body
            ),
            trimmed: false,
        };
        match &self.command {
            ExecCommand::Issue(cmd) if cmd.reads_stdin() => Some(body()),
            ExecCommand::Patch(cmd) if cmd.reads_stdin() => Some(body()),
            ExecCommand::Hook(HookCmd::Add {
                secret_stdin: true, ..
            }) => Some(Stdin {
                max: super::webhook::MAX_SECRET as u64,
                too_long: "error: the secret is too long".to_string(),
                trimmed: true,
            }),
            ExecCommand::Mirror(cmd) if super::mirror::reads_stdin(cmd) => Some(Stdin {
                max: super::mirror::MAX_CREDENTIAL as u64,
                too_long: "error: the credential is too long (16 KiB at most)".to_string(),
                trimmed: true,
            }),
            _ => None,
        }
    }

    pub fn verb(&self) -> &'static str {
        self.command.verb()
    }

    /// The door could not read the body (too large, not UTF-8): `line` is
    /// the answer, counted as the others are.
    pub fn refuse(self, line: String) -> Answer {
        let answer = Answer::new(line, 1);
        count(self.command.verb(), &answer);
        answer
    }
}

/// What a verb reads on standard input, and how.
#[derive(Debug, Clone)]
pub struct Stdin {
    /// The most bytes taken; past it, `too_long` is the answer.
    pub max: u64,
    pub too_long: String,
    /// Taken as text with its ends trimmed (a secret, a credential); else
    /// whole, and refused when not UTF-8 (a body).
    pub trimmed: bool,
}

impl Stdin {
    /// The text of `bytes` read to EOF, or the `error:` line.
    pub fn text(&self, bytes: Vec<u8>) -> Result<String, String> {
        if bytes.len() as u64 > self.max {
            return Err(self.too_long.clone());
        }
        if self.trimmed {
            return Ok(String::from_utf8_lossy(&bytes).trim().to_string());
        }
        String::from_utf8(bytes).map_err(|_| "error: body is not UTF-8".to_string())
    }
}

/// Whether the service answers `command` (else it is a stream, or a family
/// its door still answers itself).
pub fn serves(command: &ExecCommand) -> bool {
    matches!(
        command,
        ExecCommand::Issue(_)
            | ExecCommand::Lease(_)
            | ExecCommand::Patch(_)
            | ExecCommand::Search(_)
            | ExecCommand::Check(_)
            | ExecCommand::Queue(_)
            | ExecCommand::Whoami
            | ExecCommand::Help
            | ExecCommand::Info { .. }
            | ExecCommand::Repo(_)
            | ExecCommand::Hook(_)
            | ExecCommand::Mirror(_)
            | ExecCommand::Release(ReleaseCmd::List { .. } | ReleaseCmd::Delete { .. })
    )
}

/// What `command` holds while it runs (`limits::running`).
pub fn weight(command: &ExecCommand) -> Weight {
    match command {
        // The git process gate counts git, the watchers' share watchers,
        // the waiters' share a `--wait` (which may wait minutes).
        ExecCommand::Git { .. } | ExecCommand::Events(_) => Weight::Own,
        ExecCommand::Lease(
            LeaseCmd::Acquire {
                wait_secs: Some(_), ..
            }
            | LeaseCmd::Next {
                wait_secs: Some(_), ..
            },
        ) => Weight::Own,
        ExecCommand::Patch(PatchCmd::Diff { .. } | PatchCmd::Interdiff { .. })
        | ExecCommand::Release(ReleaseCmd::Download { .. }) => Weight::Heavy,
        ExecCommand::Tui => Weight::Tui,
        // Light, although it streams objects: git-lfs opens one session
        // per transfer worker (`lfs.concurrenttransfers`, 8 by default),
        // more than the heavy share of one key (4) would let in.
        ExecCommand::LfsTransfer { .. } => Weight::Light,
        ExecCommand::Mcp => Weight::Mcp,
        _ => Weight::Light,
    }
}

/// The command's units of the running pools, or the refusal's one line
/// (`tui`: ended with `\r` too, the client's terminal is raw). Counted
/// when refused.
pub fn admit(ctx: &Context, command: &ExecCommand) -> Result<Admitted, Answer> {
    let weight = weight(command);
    let key = ctx.caller.identity.share_key();
    let runner = Runner {
        key: &key,
        mcp_session: ctx.mcp_session,
    };
    ctx.app
        .limits
        .running
        .admit(weight, runner)
        .map_err(|refused| {
            let mut message = refused.message();
            if weight == Weight::Tui {
                message.push('\r');
            }
            let answer = Answer::new(message, 1);
            count(command.verb(), &answer);
            answer
        })
}

/// Step one: admit `command`, and authorize a verb that reads a body on
/// its repository before the body is read.
pub async fn authorize(ctx: &Context, command: ExecCommand) -> Result<Authorized, Answer> {
    let admitted = admit(ctx, &command)?;
    let verb = command.verb();
    let entry = match &command {
        ExecCommand::Issue(cmd) if cmd.reads_stdin() => {
            let needed = cmd.needed_access();
            super::issue::authorized_entry(ctx, cmd.repo().to_string(), needed)
                .await
                .map(Some)
        }
        ExecCommand::Patch(cmd) if cmd.reads_stdin() => {
            let needed = cmd.needed_access();
            super::issue::authorized_entry(ctx, cmd.repo().to_string(), needed)
                .await
                .map(Some)
        }
        ExecCommand::Mirror(cmd) => super::mirror::authorized(ctx, cmd).map(Some),
        _ => Ok(None),
    };
    match entry {
        Ok(entry) => Ok(Authorized {
            command,
            entry,
            _admitted: admitted,
        }),
        Err(reply) => {
            let answer = Answer::from(reply);
            count(verb, &answer);
            Err(answer)
        }
    }
}

/// Step two: the verb's work, `stdin` its body when it reads one.
pub async fn run(ctx: &Context, authorized: Authorized, stdin: Option<String>) -> Answer {
    let Authorized {
        command,
        entry,
        _admitted,
    } = authorized;
    let verb = command.verb();
    let answer = match (command, entry) {
        (ExecCommand::Issue(cmd), Some(entry)) => {
            super::issue::authorized_reply(ctx, entry.name, cmd, stdin)
                .await
                .into()
        }
        (ExecCommand::Issue(cmd), None) => super::issue::reply(ctx, cmd, stdin).await.into(),
        (ExecCommand::Patch(cmd), Some(entry)) => {
            super::patch::authorized_reply(ctx, &entry, cmd, stdin)
                .await
                .into()
        }
        (ExecCommand::Patch(cmd), None) => super::patch::reply(ctx, cmd, stdin).await.into(),
        (ExecCommand::Lease(cmd), _) => match super::lease::reply(ctx, cmd).await {
            Some(answer) => answer,
            // Its caller left while it waited: nobody to answer.
            None => {
                crate::metrics::verb_finished(verb, "disconnected");
                return Answer::new("error: the caller left", 1);
            }
        },
        (ExecCommand::Search(cmd), _) => super::search::reply(ctx, cmd).await.into(),
        (ExecCommand::Check(cmd), _) => super::check::reply(ctx, cmd).await.into(),
        (ExecCommand::Queue(cmd), _) => super::queue::reply(ctx, cmd).await.into(),
        (ExecCommand::Whoami, _) => super::admin::whoami(ctx).await.into(),
        (ExecCommand::Help, _) => super::admin::help(ctx).await.into(),
        (ExecCommand::Info { json }, _) => super::admin::info(ctx, json).await.into(),
        (ExecCommand::Repo(cmd), _) => super::admin::repo(ctx, cmd).await.into(),
        (ExecCommand::Hook(cmd), _) => super::webhook::reply(ctx, cmd, stdin).await.into(),
        (ExecCommand::Release(cmd), _) => {
            // The level its row of the verb table asks.
            let needed = cmd.needed_access();
            match cmd {
                ReleaseCmd::List { repo } => super::release::list(ctx, needed, &repo).await.into(),
                ReleaseCmd::Delete { repo, tag, file } => {
                    super::release::delete(ctx, needed, &repo, &tag, file.as_deref())
                        .await
                        .into()
                }
                // Upload and download stream: their door's (`serves`).
                other => {
                    tracing::error!(verb = other.verb(), "the service was asked for a stream");
                    Answer::new("error: internal error", 1)
                }
            }
        }
        (ExecCommand::Mirror(cmd), Some(entry)) => {
            super::mirror::reply(ctx, entry, cmd, stdin).await.into()
        }
        (other, _) => {
            tracing::error!(verb = other.verb(), "the service was asked for a stream");
            Answer::new("error: internal error", 1)
        }
    };
    count(verb, &answer);
    answer
}

/// A door could not deliver `answer` (its caller has gone): a lease won
/// by waiting is given back rather than left to nobody.
pub async fn undelivered(ctx: &Context, answer: Answer) {
    let Some(lease) = answer.won else { return };
    tracing::info!(
        repo = lease.repo,
        issue = lease.issue_id,
        "releasing a lease its waiter never heard of"
    );
    if let Err(e) = ctx
        .app
        .writer
        .release(&lease.repo, &lease.issue_id, &lease.holder)
        .await
    {
        tracing::warn!("collab-lease: giving back a lease: {e:#}");
    }
}

fn count(verb: &str, answer: &Answer) {
    crate::metrics::verb_finished(verb, crate::metrics::outcome_of_exit(answer.status));
}

/// The typed request for `words` (as `ssh HOST words…` would send them,
/// without the shell quoting round trip), or the one `error:` line that
/// refuses them, as the SSH door would.
pub fn parse(words: &[String]) -> Result<ExecCommand, String> {
    let invocation = collab_proto::verbs::parse(words).map_err(|refusal| refusal.line())?;
    ExecCommand::from_invocation(&invocation).ok_or_else(|| {
        format!(
            "error: usage: {}",
            collab_proto::verbs::family_usage(invocation.verb.family)
        )
    })
}

/// [`authorize`], the body given, then [`run`]: a whole call for a door
/// that has the body in hand already (the terminal UI, MCP).
pub async fn call(ctx: &Context, command: ExecCommand, stdin: Option<String>) -> Answer {
    let authorized = match authorize(ctx, command).await {
        Ok(authorized) => authorized,
        Err(answer) => return answer,
    };
    let stdin = match authorized.stdin(ctx) {
        Some(rule) => match rule.text(stdin.unwrap_or_default().into_bytes()) {
            Ok(text) => Some(text),
            Err(line) => return authorized.refuse(line),
        },
        None => None,
    };
    run(ctx, authorized, stdin).await
}

/// The verbs stopped where they are when their caller leaves: they only
/// read (what a read may import into the collab database is written
/// through the writer, whole or not at all, in work handed to
/// `spawn_blocking` that runs to its end), and they are the ones with
/// large replies (a diff, a release file, a pack) or long lives (the
/// MCP session, whose calls go with it: `mcp::serve`). Every other verb
/// writes something: a push past its quarantine moves refs, a release's
/// file is stored before its event is recorded, a lease won by waiting
/// is given back when its reply fails. Those run their bounded work to
/// the end and only their reply gives up. `collab-events watch` and the
/// terminal UI end on their client's close themselves. Every door keeps
/// it: the MCP door drops a cancelled call of these at once.
pub const STOPPED_AT_ONCE: &[&str] = &[
    "git-upload-pack",
    "git-upload-archive",
    "collab-whoami",
    "help",
    "info",
    "collab-mcp",
    "collab-repo list",
    "collab-release list",
    "collab-release download",
    "collab-issue show",
    "collab-issue list",
    "collab-issue ready",
    "collab-patch list",
    "collab-patch show",
    "collab-patch diff",
    "collab-patch interdiff",
    "collab-check list",
    "collab-queue show",
    "collab-search",
    "collab-hook list",
    "collab-hook deliveries",
];

/// Whether `verb` is stopped where it is when its caller leaves
/// ([`STOPPED_AT_ONCE`]).
pub fn stops_at_once(verb: &str) -> bool {
    STOPPED_AT_ONCE.contains(&verb)
}

#[cfg(test)]
mod tests {
    use super::STOPPED_AT_ONCE;

    /// A misspelt name would silently leave its verb to run on.
    #[test]
    fn every_verb_stopped_at_once_is_one_there_is() {
        let names: Vec<String> = collab_proto::verbs::VERBS
            .iter()
            .map(|v| v.name())
            .collect();
        for verb in STOPPED_AT_ONCE {
            assert!(
                names.iter().any(|n| n == verb) || ["help", "info"].contains(verb),
                "{verb} is not in the verb table"
            );
        }
    }

    #[test]
    fn words_parse_as_the_line_does() {
        use super::super::command::parse_exec_command;
        let words: Vec<String> = ["collab-issue", "show", "my repo", "abc"]
            .iter()
            .map(|w| w.to_string())
            .collect();
        assert_eq!(
            super::parse(&words).ok(),
            parse_exec_command("collab-issue show 'my repo' abc")
        );
        let bad: Vec<String> = vec!["collab-issue".into(), "nope".into()];
        assert!(super::parse(&bad).unwrap_err().starts_with("error: "));
    }
}
