//! `git-collab issue ...`: runs the parsed `IssueCmd` (`cli.rs`) in the
//! mode that holds the remote's issues (`collab_cli::client::mode`):
//! against the git-collab server over `collab-issue`
//! (`client::server_issue`), or on the signed DAGs of this clone
//! (`client::issue`, `record::state`). Both print the same text and the
//! same `--json` shapes (docs/cli.md); the server's replies may carry more
//! fields, which `--json` passes on. `--offline` reads the server's export
//! fetched into this clone (`record::export`). The claim commands always
//! talk to the server (`client::lease`).

use std::process::ExitCode;

use anyhow::{bail, Result};
use git2::Repository;
use serde::Serialize;
use serde_json::Value;

use crate::cli::{IssueCmd, IssueTarget};
use crate::cmd_io::{print_json, text_arg};
use collab_cli::client::lease::{self, LeaseOp};
use collab_cli::client::mode::{self, Mode};
use collab_cli::client::remote::SshRemote;
use collab_cli::client::remote_ssh::{self, RemoteOutput};
use collab_cli::client::server_issue::{self as server, Listed, Request, StateFilter};
use collab_cli::client::sync;
use collab_cli::client::terminal;
use collab_record::export;
use collab_record::issue::{self, short_id, Identity, Written};
use collab_record::state::{self, Author, Comment, IssueState, IssueStatus};

/// One row of `issue list --json`.
#[derive(Serialize)]
struct IssueSummary<'a> {
    id: &'a str,
    title: &'a str,
    status: IssueStatus,
    author: &'a state::Author,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
    labels: &'a [String],
    comments: usize,
}

#[derive(Serialize)]
struct WrittenJson<'a> {
    issue: &'a str,
    event: String,
}

/// `issue fetch --json`.
#[derive(Serialize)]
struct FetchedJson<'a> {
    remote: &'a str,
    issues: usize,
    /// Issues whose last writes the fetched export did not show yet
    /// (`null`: the server does not say).
    behind: Option<u64>,
}

/// How long `issue fetch` waits for the server's export to show the
/// writes made before it (it follows each write within about a second).
const EXPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How often `issue fetch` asks whether the export caught up.
const EXPORT_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Runs one `issue` subcommand.
pub fn run(repo: &Repository, target: IssueTarget, cmd: IssueCmd) -> Result<ExitCode> {
    let remote = target.remote.as_str();
    let flag = target.mode.as_deref().and_then(Mode::parse);
    match cmd {
        IssueCmd::Claim {
            id,
            ttl,
            note,
            wait,
            out,
        } => {
            let op = LeaseOp::Claim {
                issue: id,
                ttl_secs: ttl,
                note,
                wait_secs: wait,
            };
            lease_cmd(repo, remote, &op, out.json)
        }
        IssueCmd::Next {
            labels,
            ttl,
            note,
            wait,
            out,
        } => {
            let op = LeaseOp::Next {
                labels,
                ttl_secs: ttl,
                note,
                wait_secs: wait,
            };
            lease_cmd(repo, remote, &op, out.json)
        }
        IssueCmd::Ready { labels, out } => {
            lease_cmd(repo, remote, &LeaseOp::Ready { labels }, out.json)
        }
        IssueCmd::Break { id, reason, out } => lease_cmd(
            repo,
            remote,
            &LeaseOp::Break { issue: id, reason },
            out.json,
        ),
        IssueCmd::Unclaim { id, out } => {
            lease_cmd(repo, remote, &LeaseOp::Unclaim { issue: id }, out.json)
        }
        IssueCmd::Renew { id, ttl, out } => {
            let op = LeaseOp::Renew {
                issue: id,
                ttl_secs: ttl,
            };
            lease_cmd(repo, remote, &op, out.json)
        }
        IssueCmd::Claims { out } => lease_cmd(repo, remote, &LeaseOp::Claims, out.json),
        IssueCmd::Fetch { out } => {
            // Read your own writes: a write just made shows in the export
            // once it has caught up, so wait for that (bounded) first.
            let behind = match mode::choose(repo, remote, flag)?.mode {
                Mode::Server => export_caught_up(&remote_ssh::ssh_remote(repo, remote)?)?,
                Mode::Local => None,
            };
            let issues = sync::fetch_export(repo, remote)?;
            if out.json {
                print_json(&FetchedJson {
                    remote,
                    issues,
                    behind,
                })?;
            } else {
                println!("fetched the issue export of {remote}: {issues} issues");
            }
            if let Some(n @ 1..) = behind {
                eprintln!(
                    "note: the export of {remote} is still behind the server by {n} issues \
                     (it follows each write within seconds); fetch again shortly"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        cmd @ (IssueCmd::List { offline: true, .. } | IssueCmd::Show { offline: true, .. }) => {
            match offline_mode(repo, remote, flag)? {
                Mode::Local => local_cmd(repo, cmd),
                Mode::Server => export_cmd(repo, remote, cmd),
            }
        }
        cmd => match mode::choose(repo, remote, flag)?.mode {
            Mode::Server => server_cmd(&remote_ssh::ssh_remote(repo, remote)?, cmd),
            Mode::Local => local_cmd(repo, cmd),
        },
    }
}

/// Wait until the server's export shows every write (at most
/// [`EXPORT_WAIT`]); returns how many issues it is still behind by
/// (`None`: the server does not say).
fn export_caught_up(ssh: &SshRemote) -> Result<Option<u64>> {
    let started = std::time::Instant::now();
    loop {
        match server::export_behind(ssh)? {
            Some(n) if n > 0 && started.elapsed() < EXPORT_WAIT => std::thread::sleep(EXPORT_POLL),
            behind => return Ok(behind),
        }
    }
}

/// The mode `--offline` reads in, without asking the network: the flag,
/// the config or the remembered detection; failing those, server mode when
/// an export of `remote` is here.
fn offline_mode(repo: &Repository, remote: &str, flag: Option<Mode>) -> Result<Mode> {
    if let Some(mode) = flag {
        return Ok(mode);
    }
    Ok(match mode::known(repo, remote)? {
        Some(mode) => mode,
        None if export::export_refs(repo, remote)?.is_empty() => Mode::Local,
        None => Mode::Server,
    })
}

/// `list|show --offline` in server mode: the server's export fetched into
/// this clone, replayed like any issue DAG.
fn export_cmd(repo: &Repository, remote: &str, cmd: IssueCmd) -> Result<ExitCode> {
    // Fetched and empty is a server with no issues, not a missing export.
    if export::export_refs(repo, remote)?.is_empty() && !sync::export_fetched(repo, remote)? {
        bail!(
            "the issue export of {remote} was never fetched into this clone; \
             `git collab issue fetch` (or sync) brings it"
        );
    }
    match cmd {
        IssueCmd::List {
            all,
            closed,
            labels,
            out,
            ..
        } => print_list(
            &filter(export::list_issues(repo, remote)?, all, closed, &labels),
            out.json,
        ),
        IssueCmd::Show { id, out, .. } => {
            print_shown(&export::show_issue(repo, remote, &id)?, out.json)
        }
        _ => unreachable!("only list and show read offline"),
    }
}

fn filter(issues: Vec<IssueState>, all: bool, closed: bool, labels: &[String]) -> Vec<IssueState> {
    issues
        .into_iter()
        .filter(|i| all || (closed == (i.status == IssueStatus::Closed)))
        .filter(|i| labels.iter().all(|l| i.labels.contains(l)))
        .collect()
}

fn print_list(issues: &[IssueState], json: bool) -> Result<ExitCode> {
    if json {
        let rows: Vec<IssueSummary> = issues
            .iter()
            .map(|i| IssueSummary {
                id: &i.id,
                title: &i.title,
                status: i.status,
                author: &i.author,
                created_at: i.created_at,
                updated_at: i.updated_at,
                labels: &i.labels,
                comments: i.comments.len(),
            })
            .collect();
        print_json(&rows)?;
    } else {
        for i in issues {
            println!(
                "{}",
                list_line(&i.id, &i.status.to_string(), &i.title, &i.labels)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_shown(issue: &IssueState, json: bool) -> Result<ExitCode> {
    if json {
        print_json(issue)?;
    } else {
        print_issue(issue, &[]);
    }
    Ok(ExitCode::SUCCESS)
}

/// Local mode: the DAGs of this clone, as before the server held issues.
fn local_cmd(repo: &Repository, cmd: IssueCmd) -> Result<ExitCode> {
    let identity = || -> Result<Identity> { Ok(Identity::load(&repo.config()?)?) };
    let no_fence = |fence: crate::cli::FenceFlag| -> Result<()> {
        if fence.lease_token.is_some() {
            bail!("--lease-token needs a git-collab server (this remote's issues are local; see --mode)");
        }
        Ok(())
    };
    let (verb, written, json) = match cmd {
        IssueCmd::List {
            all,
            closed,
            labels,
            out,
            ..
        } => {
            return print_list(
                &filter(state::list_issues(repo)?, all, closed, &labels),
                out.json,
            )
        }
        IssueCmd::Show { id, out, .. } => {
            let (ref_name, full_id) = state::resolve_issue_ref(repo, &id)?;
            return print_shown(&IssueState::from_ref(repo, &ref_name, &full_id)?, out.json);
        }
        IssueCmd::Open {
            title,
            body,
            labels,
            out,
        } => {
            let body = text_arg(body)?;
            (
                "opened",
                issue::open(repo, &identity()?, &title, &body, &labels)?,
                out.json,
            )
        }
        IssueCmd::Comment {
            id,
            message,
            fence,
            out,
        } => {
            no_fence(fence)?;
            let message = text_arg(message)?;
            (
                "commented on",
                issue::comment(repo, &identity()?, &id, &message)?,
                out.json,
            )
        }
        IssueCmd::Edit {
            id,
            title,
            body,
            fence,
            out,
        } => {
            no_fence(fence)?;
            let body = body.map(text_arg).transpose()?;
            (
                "edited",
                issue::edit(repo, &identity()?, &id, title.as_deref(), body.as_deref())?,
                out.json,
            )
        }
        IssueCmd::Label {
            id,
            add,
            remove,
            fence,
            out,
        } => {
            no_fence(fence)?;
            if add.is_empty() && remove.is_empty() {
                bail!("nothing to do: give --add or --remove");
            }
            (
                "labelled",
                issue::label(repo, &identity()?, &id, &add, &remove)?,
                out.json,
            )
        }
        IssueCmd::Close {
            id,
            reason,
            fence,
            out,
        } => {
            no_fence(fence)?;
            (
                "closed",
                issue::close(repo, &identity()?, &id, reason.as_deref())?,
                out.json,
            )
        }
        IssueCmd::Reopen { id, fence, out } => {
            no_fence(fence)?;
            (
                "reopened",
                issue::reopen(repo, &identity()?, &id)?,
                out.json,
            )
        }
        IssueCmd::Link { .. } | IssueCmd::Unlink { .. } => bail!(
            "issue links need a git-collab server (this remote's issues are local; see --mode)"
        ),
        IssueCmd::Claim { .. }
        | IssueCmd::Unclaim { .. }
        | IssueCmd::Renew { .. }
        | IssueCmd::Claims { .. }
        | IssueCmd::Next { .. }
        | IssueCmd::Ready { .. }
        | IssueCmd::Break { .. }
        | IssueCmd::Fetch { .. } => unreachable!("handled by run"),
    };
    report_written(verb, &written, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Server mode: one `collab-issue` call (list: one per page).
fn server_cmd(remote: &SshRemote, cmd: IssueCmd) -> Result<ExitCode> {
    let (req, token, json) = match cmd {
        IssueCmd::List {
            all,
            closed,
            labels,
            out,
            ..
        } => {
            let state = match (all, closed) {
                (true, _) => StateFilter::All,
                (false, true) => StateFilter::Closed,
                (false, false) => StateFilter::Open,
            };
            return match server::list_all(remote, state, &labels)? {
                Listed::Failed(reply) => Ok(pass_through(&reply, out.json)),
                Listed::All(rows) => {
                    if out.json {
                        print_json(&rows)?;
                    } else {
                        for row in rows {
                            let row: server::IssueSummary = serde_json::from_value(row)?;
                            println!(
                                "{}",
                                list_line(&row.id, &row.status, &row.title, &row.labels)
                            );
                        }
                    }
                    Ok(ExitCode::SUCCESS)
                }
            };
        }
        IssueCmd::Show { id, out, .. } => {
            let reply = server::run(remote, &Request::Show { id }, None)?;
            if !reply.success() {
                return Ok(pass_through(&reply, out.json));
            }
            let value: Value = serde_json::from_slice(&reply.stdout)?;
            if out.json {
                print_json(&value)?;
            } else {
                let shown: server::IssueShown = serde_json::from_value(value)?;
                let links = link_lines(&shown.links);
                print_issue(&as_state(shown)?, &links);
            }
            return Ok(ExitCode::SUCCESS);
        }
        IssueCmd::Open {
            title,
            body,
            labels,
            out,
        } => (
            Request::Open {
                title,
                body: text_arg(body)?,
                labels,
            },
            None,
            out.json,
        ),
        IssueCmd::Comment {
            id,
            message,
            fence,
            out,
        } => (
            Request::Comment {
                id,
                body: text_arg(message)?,
            },
            fence.lease_token,
            out.json,
        ),
        IssueCmd::Edit {
            id,
            title,
            body,
            fence,
            out,
        } => {
            if title.is_none() && body.is_none() {
                bail!("nothing to change: give --title and/or --body");
            }
            (
                Request::Edit {
                    id,
                    title,
                    body: body.map(text_arg).transpose()?,
                },
                fence.lease_token,
                out.json,
            )
        }
        IssueCmd::Label {
            id,
            add,
            remove,
            fence,
            out,
        } => {
            if add.is_empty() && remove.is_empty() {
                bail!("nothing to do: give --add or --remove");
            }
            (
                Request::Label { id, add, remove },
                fence.lease_token,
                out.json,
            )
        }
        IssueCmd::Close {
            id,
            reason,
            fence,
            out,
        } => (Request::Close { id, reason }, fence.lease_token, out.json),
        IssueCmd::Reopen { id, fence, out } => {
            (Request::Reopen { id }, fence.lease_token, out.json)
        }
        IssueCmd::Link {
            id,
            kind,
            other,
            fence,
            out,
        } => (
            Request::Link { id, kind, other },
            fence.lease_token,
            out.json,
        ),
        IssueCmd::Unlink {
            id,
            kind,
            other,
            fence,
            out,
        } => (
            Request::Unlink { id, kind, other },
            fence.lease_token,
            out.json,
        ),
        IssueCmd::Claim { .. }
        | IssueCmd::Unclaim { .. }
        | IssueCmd::Renew { .. }
        | IssueCmd::Claims { .. }
        | IssueCmd::Next { .. }
        | IssueCmd::Ready { .. }
        | IssueCmd::Break { .. }
        | IssueCmd::Fetch { .. } => unreachable!("handled by run"),
    };
    let reply = server::run(remote, &req, token)?;
    if !reply.success() {
        return Ok(pass_through(&reply, json));
    }
    let value: Value = serde_json::from_slice(&reply.stdout)?;
    if json {
        print_json(&value)?;
    } else {
        let written = server::written(&value);
        let id = written.as_ref().map_or("", |w| w.issue.as_str());
        // The issue the server resolved the typed prefix to (`repo#id8`),
        // not the prefix as typed.
        let target = |other: &str| -> String {
            let resolved = written.as_ref().and_then(|w| {
                let target = &w.link.as_ref()?.target;
                let repo = target.repo.strip_suffix(".git").unwrap_or(&target.repo);
                let ours = w.repo.strip_suffix(".git").unwrap_or(&w.repo);
                Some(if repo.is_empty() || repo == ours {
                    short_id(&target.id).to_string()
                } else {
                    format!("{repo}#{}", short_id(&target.id))
                })
            });
            resolved.unwrap_or_else(|| other.to_string())
        };
        match &req {
            Request::Link { kind, other, .. } => println!(
                "linked {} {kind} {}",
                terminal::line(short_id(id)),
                terminal::line(&target(other))
            ),
            Request::Unlink { kind, other, .. } => println!(
                "unlinked {} {kind} {}",
                terminal::line(short_id(id)),
                terminal::line(&target(other))
            ),
            _ => println!("{} {}", written_verb(&req), terminal::line(short_id(id))),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The past tense the text output uses, as in local mode.
fn written_verb(req: &Request) -> &'static str {
    match req {
        Request::Open { .. } => "opened",
        Request::Comment { .. } => "commented on",
        Request::Edit { .. } => "edited",
        Request::Label { .. } => "labelled",
        Request::Close { .. } => "closed",
        Request::Reopen { .. } => "reopened",
        Request::Link { .. } => "linked",
        Request::Unlink { .. } => "unlinked",
        Request::Show { .. } | Request::List { .. } => "read",
    }
}

/// A failed server reply shown as the server (or ssh) gave it, with its
/// exit status: 1 for an error, 4 for a refused lease token, 255 for ssh.
/// A refused token's JSON reply is passed on with `--json`, else told in
/// one line on stderr.
fn pass_through(reply: &RemoteOutput, json: bool) -> ExitCode {
    let fenced = (reply.code == server::EXIT_CONFLICT && !json)
        .then(|| server::fenced_line(&reply.stdout))
        .flatten();
    match fenced {
        Some(line) => eprintln!("{}", terminal::line(&line)),
        None if json => print!("{}", terminal::json(&reply.stdout_text())),
        None => print!("{}", terminal::text(&reply.stdout_text())),
    }
    eprint!("{}", terminal::text(&reply.stderr_text()));
    ExitCode::from(u8::try_from(reply.code).unwrap_or(1))
}

/// The server's issue as the local `IssueState`, for the shared text output.
fn as_state(s: server::IssueShown) -> Result<IssueState> {
    let author = |p: server::Person| Author {
        name: p.display_name.unwrap_or(p.name),
        key: p.key.unwrap_or_default(),
    };
    let comments = s
        .comments
        .into_iter()
        .map(|c| {
            Ok(Comment {
                id: c.id,
                author: author(c.author),
                at: reply_time(c.at)?,
                body: c.body,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(IssueState {
        id: s.id,
        title: s.title,
        body: s.body,
        author: author(s.author),
        created_at: reply_time(s.created_at)?,
        updated_at: reply_time(s.updated_at)?,
        status: match s.status.as_str() {
            "closed" => IssueStatus::Closed,
            "open" => IssueStatus::Open,
            other => bail!("unexpected issue status '{other}' from the server"),
        },
        closed_reason: s.closed_reason,
        labels: s.labels,
        comments,
    })
}

/// A time of the server's reply (RFC 3339).
fn reply_time(at: Option<String>) -> Result<chrono::DateTime<chrono::Utc>> {
    let Some(at) = at else {
        bail!("unexpected reply from the server: a time is missing");
    };
    match chrono::DateTime::parse_from_rfc3339(&at) {
        Ok(t) => Ok(t.with_timezone(&chrono::Utc)),
        Err(e) => bail!("unexpected time '{at}' from the server: {e}"),
    }
}

/// `blocks: …`, `blocked by: …`, `relates: …` lines (only those with links).
fn link_lines(links: &server::Links) -> Vec<String> {
    [
        ("blocks", &links.blocks),
        ("blocked by", &links.blocked_by),
        ("relates", &links.relates),
    ]
    .into_iter()
    .filter(|(_, l)| !l.is_empty())
    .map(|(what, l)| {
        let names: Vec<String> = l.iter().map(link_text).collect();
        format!("{what}: {}", names.join(", "))
    })
    .collect()
}

/// One link end as text: the server's `text` (`repo#id8`, or the plain
/// string an older server sent), else `{repo, id}` written that way.
fn link_text(r: &server::IssueRef) -> String {
    if !r.text.is_empty() {
        return r.text.clone();
    }
    let id = if r.id.is_empty() { "?" } else { r.id.as_str() };
    if r.repo.is_empty() {
        short_id(id).to_string()
    } else {
        format!("{}#{}", r.repo, short_id(id))
    }
}

/// Run a lease command on the server behind `remote` and print its answer;
/// the exit status is the server's (0, 1, or 4 for a lease conflict).
fn lease_cmd(repo: &Repository, remote: &str, op: &LeaseOp, json: bool) -> Result<ExitCode> {
    let out = lease::run(repo, remote, op)?;
    remember_tenure(repo, remote, op, &out);
    let shown = lease::render(op, &out, json);
    // What the server sent: shown, never acted on by the terminal.
    if json {
        print!("{}", terminal::json(&shown.stdout));
    } else {
        print!("{}", terminal::text(&shown.stdout));
    }
    eprint!("{}", terminal::text(&shown.stderr));
    Ok(ExitCode::from(u8::try_from(shown.code).unwrap_or(1)))
}

/// Keep the token of a tenure taken through this clone (for `git collab
/// push`), and drop it once the claim is given up. Best effort: a clone
/// whose config cannot be written still gets the server's answer.
fn remember_tenure(repo: &Repository, remote: &str, op: &LeaseOp, out: &RemoteOutput) {
    if out.code != 0 {
        return;
    }
    let Ok(reply) = serde_json::from_slice::<lease::LeaseReply>(&out.stdout) else {
        return;
    };
    let kept = match (op, reply.status.as_str(), reply.token) {
        (LeaseOp::Claim { .. } | LeaseOp::Next { .. }, "acquired", Some(token)) => {
            lease::remember_token(repo, remote, &reply.issue, token)
        }
        (LeaseOp::Unclaim { .. }, "released", _) => lease::forget_token(repo, remote, &reply.issue),
        _ => Ok(()),
    };
    if let Err(e) = kept {
        eprintln!("warning: cannot remember the lease token in this clone: {e}");
    }
}

fn report_written(verb: &str, written: &Written, json: bool) -> Result<()> {
    if json {
        print_json(&WrittenJson {
            issue: &written.issue,
            event: written.event.to_string(),
        })
    } else {
        println!("{verb} {}", short_id(&written.issue));
        Ok(())
    }
}

// Issue fields are other people's text (and, in server mode, a server's
// reply): every one goes through `terminal`.
fn list_line(id: &str, status: &str, title: &str, labels: &[String]) -> String {
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!("  [{}]", terminal::line(&labels.join(", ")))
    };
    format!(
        "{}  {:<6}  {}{}",
        terminal::line(short_id(id)),
        terminal::line(status),
        terminal::line(title),
        labels
    )
}

/// A name as text output shows it: a bare `SHA256:` fingerprint (what an
/// ungoverned server records, and what `--offline` reads back from its
/// export) as its short form `SHA256:GlgxX2Cw…`, as the server's display
/// names do; `--json` keeps it whole.
fn person(name: &str) -> String {
    match name.strip_prefix("SHA256:") {
        Some(rest)
            if rest.len() == 43
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/') =>
        {
            format!("SHA256:{}\u{2026}", &rest[..8])
        }
        _ => name.to_string(),
    }
}

fn print_issue(i: &IssueState, links: &[String]) {
    println!(
        "{} {}",
        terminal::line(short_id(&i.id)),
        terminal::line(&i.title)
    );
    println!(
        "status: {}{}",
        i.status,
        i.closed_reason
            .as_deref()
            .map(|r| format!(" ({})", terminal::line(r)))
            .unwrap_or_default()
    );
    println!("author: {}", terminal::line(&person(&i.author.name)));
    println!("created: {}", i.created_at.to_rfc3339());
    println!("updated: {}", i.updated_at.to_rfc3339());
    if !i.labels.is_empty() {
        println!("labels: {}", terminal::line(&i.labels.join(", ")));
    }
    for line in links {
        println!("{}", terminal::line(line));
    }
    if !i.body.is_empty() {
        println!();
        println!("{}", terminal::text(i.body.trim_end()));
    }
    for c in &i.comments {
        println!();
        println!(
            "--- {} {} at {}",
            terminal::line(short_id(&c.id)),
            terminal::line(&person(&c.author.name)),
            c.at.to_rfc3339()
        );
        println!("{}", terminal::text(c.body.trim_end()));
    }
}
