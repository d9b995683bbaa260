//! `git-collab`: the client CLI (also `git collab ...`). This file turns the
//! parsed command line (`cli.rs`) into library calls and prints the result
//! as text or `--json`. Every failure is one `error: ...` line on stderr and
//! exit status 1; the claim commands pass the server's exit status through
//! (4 = the issue is claimed by someone else).

mod cli;
mod patch_cmd;

use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
use git2::Repository;
use serde::Serialize;

use cli::{Cli, Command, IssueCmd, KeyCmd, ReleaseCmd, TrustCmd};
use git_collab::client::issue::{self, short_id, Identity, Written};
use git_collab::client::lease::{self, LeaseOp};
use git_collab::client::sync;
use git_collab::client::terminal;
use git_collab::record::state::{self, IssueState, IssueStatus};
use git_collab::record::{refs, sign, trust, verify};

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`git-collab patch diff ID | head`), as
    // git does, instead of panicking in `println!`.
    // SAFETY: resetting a signal disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's message spans lines (details, usage, hint); keep what
            // comes before the usage, on one line.
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.starts_with("Usage:"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!(
                "error: {} (see --help)",
                message.join(" ").trim_start_matches("error: ")
            );
            return ExitCode::FAILURE;
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let message = format!("{e:#}").replace('\n', " ");
            // Errors can quote a server's reply or an event's fields.
            eprintln!("error: {}", terminal::line(&message));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Init => init(&open_repo()?),
        Command::Key { cmd } => key(cmd),
        Command::Trust { cmd } => trust_cmd(&open_repo()?, cmd),
        Command::Issue { cmd } => issue_cmd(&open_repo()?, cmd),
        Command::Patch { cmd } => patch_cmd::run(&open_repo()?, cmd),
        Command::Release { cmd } => release_cmd(&open_repo()?, cmd),
        Command::Sync { remote } => {
            let repo = open_repo()?;
            // The merge scan records merges with the signing key, if any.
            let who = Identity::load(&repo.config()?).ok();
            let report = sync::sync_as(&repo, &remote, who.as_ref())?;
            println!(
                "synced with {remote}: {} new, {} fast-forwarded, {} merged{}",
                report.created.len(),
                report.fast_forwarded.len(),
                report.merged.len(),
                if report.retried {
                    " (remote moved; retried)"
                } else {
                    ""
                }
            );
            for name in &report.diverged {
                eprintln!("warning: {name} diverged from {remote} and was left as it is");
            }
            for m in &report.patches_merged {
                println!(
                    "patch {} merged in {} (found on {})",
                    short_id(&m.patch),
                    short_id(&m.commit),
                    m.branch
                );
            }
            for m in &report.merges_unrecorded {
                eprintln!(
                    "warning: patch {} is merged in {} but no trusted signing key is set up to record it",
                    short_id(&m.patch),
                    short_id(&m.commit)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify { out } => {
            let report = verify::verify(&open_repo()?)?;
            if out.json {
                print_json(&report)?;
            } else {
                for p in &report.dropped {
                    println!(
                        "dropped {} in issue {}: {} ({}{})",
                        short_id(&p.event.commit),
                        short_id(&p.issue),
                        terminal::line(&p.event.detail),
                        terminal::line(p.event.kind.as_deref().unwrap_or("unreadable event")),
                        p.event
                            .author_fingerprint
                            .as_deref()
                            .map(|f| format!(", key {f}"))
                            .unwrap_or_default()
                    );
                }
                for i in &report.invalid_issues {
                    println!(
                        "invalid issue {}: {}",
                        short_id(&i.issue),
                        terminal::line(&i.reason)
                    );
                }
                println!(
                    "{}: {} issues, {} events, {} dropped, {} invalid issues",
                    if report.ok { "ok" } else { "FAILED" },
                    report.issues,
                    report.events,
                    report.dropped.len(),
                    report.invalid_issues.len()
                );
            }
            Ok(if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

/// Opens the repository git would use here (honours GIT_DIR).
fn open_repo() -> Result<Repository> {
    Repository::open_from_env().map_err(|e| match e.code() {
        git2::ErrorCode::NotFound => anyhow::anyhow!("not a git repository (or any parent)"),
        _ => e.into(),
    })
}

/// The config of the current repository if there is one, else the user's.
fn config() -> Result<git2::Config> {
    match Repository::open_from_env() {
        Ok(repo) => Ok(repo.config()?),
        Err(_) => Ok(git2::Config::open_default()?),
    }
}

fn init(repo: &Repository) -> Result<ExitCode> {
    let dir = trust::collab_dir(repo);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut config = repo.config()?;
    let remotes = repo.remotes()?;
    for remote in remotes.iter().flatten().flatten() {
        let key = format!("remote.{remote}.fetch");
        // Replaces an earlier collab refspec, or adds one.
        config.set_multivar(&key, r"^\+refs/collab/", &refs::tracking_refspec(remote))?;
        println!(
            "remote {remote}: fetches refs/collab/* into {}",
            refs::tracking_prefix(remote)
        );
    }
    println!("collab directory: {}", dir.display());
    let trust_file = trust::trust_path(repo);
    if trust_file.exists() {
        println!("trust allowlist: {} (active)", trust_file.display());
    } else {
        println!("trust allowlist: none (every validly signed event counts)");
    }
    match sign::key_path(&config) {
        Ok(path) if path.exists() => println!("signing key: {}", path.display()),
        _ => println!("signing key: none yet; run `git-collab key generate`"),
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct KeyJson {
    path: String,
    public_key: String,
    fingerprint: String,
}

fn key(cmd: KeyCmd) -> Result<ExitCode> {
    let config = config()?;
    let path = sign::key_path(&config)?;
    let (key, out) = match cmd {
        KeyCmd::Generate { force, out } => {
            let comment = config
                .get_string("user.email")
                .or_else(|_| config.get_string("user.name"))
                .unwrap_or_else(|_| "git-collab".into());
            let key = sign::SigningKey::generate(&path, &comment, force)?;
            if !out.json {
                println!("wrote {}", path.display());
            }
            (key, out)
        }
        KeyCmd::Show { out } => (sign::SigningKey::load(&path)?, out),
    };
    if out.json {
        print_json(&KeyJson {
            path: path.display().to_string(),
            public_key: key.public_key_line(),
            fingerprint: key.fingerprint(),
        })?;
    } else {
        println!("{}", key.public_key_line());
        println!("{}", key.fingerprint());
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct TrustJson<'a> {
    allowlist: bool,
    keys: Vec<TrustKeyJson<'a>>,
}

#[derive(Serialize)]
struct TrustKeyJson<'a> {
    fingerprint: &'a str,
    key: &'a str,
}

fn trust_cmd(repo: &Repository, cmd: TrustCmd) -> Result<ExitCode> {
    match cmd {
        TrustCmd::Add { key } => {
            let existed = trust::trust_path(repo).exists();
            let added = trust::add(repo, &key)?;
            if added.is_empty() {
                println!("already trusted");
            }
            for k in &added {
                println!("trusted {}", k.fingerprint);
            }
            if !existed && !added.is_empty() {
                println!(
                    "note: the allowlist is now active; events signed by other keys are ignored"
                );
            }
        }
        TrustCmd::List { out } => {
            let list = trust::TrustList::load(repo)?;
            let keys = list.as_ref().map(|l| l.keys()).unwrap_or_default();
            if out.json {
                print_json(&TrustJson {
                    allowlist: list.is_some(),
                    keys: keys
                        .iter()
                        .map(|k| TrustKeyJson {
                            fingerprint: &k.fingerprint,
                            key: &k.key,
                        })
                        .collect(),
                })?;
            } else if list.is_none() {
                println!("no allowlist: every validly signed event counts");
            } else {
                for k in keys {
                    println!("{}  {}", k.fingerprint, k.key);
                }
            }
        }
        TrustCmd::Remove { key } => {
            for k in trust::remove(repo, &key)? {
                println!("removed {}", k.fingerprint);
            }
            if trust::TrustList::load(repo)?.is_some_and(|l| l.keys().is_empty()) {
                println!(
                    "note: the allowlist is empty, so no event counts; delete {} to trust every signature",
                    trust::trust_path(repo).display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

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

fn issue_cmd(repo: &Repository, cmd: IssueCmd) -> Result<ExitCode> {
    let identity = || -> Result<Identity> { Ok(Identity::load(&repo.config()?)?) };
    let (verb, written, json) = match cmd {
        IssueCmd::Claim {
            id,
            ttl,
            remote,
            out,
        } => {
            let op = LeaseOp::Claim {
                issue: id,
                ttl_secs: ttl,
            };
            return lease_cmd(repo, &remote.remote, &op, out.json);
        }
        IssueCmd::Unclaim { id, remote, out } => {
            return lease_cmd(
                repo,
                &remote.remote,
                &LeaseOp::Unclaim { issue: id },
                out.json,
            )
        }
        IssueCmd::Renew {
            id,
            ttl,
            remote,
            out,
        } => {
            let op = LeaseOp::Renew {
                issue: id,
                ttl_secs: ttl,
            };
            return lease_cmd(repo, &remote.remote, &op, out.json);
        }
        IssueCmd::Claims { remote, out } => {
            return lease_cmd(repo, &remote.remote, &LeaseOp::Claims, out.json)
        }
        IssueCmd::List {
            all,
            closed,
            labels,
            out,
        } => {
            let issues: Vec<IssueState> = state::list_issues(repo)?
                .into_iter()
                .filter(|i| all || (closed == (i.status == IssueStatus::Closed)))
                .filter(|i| labels.iter().all(|l| i.labels.contains(l)))
                .collect();
            if out.json {
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
                for i in &issues {
                    println!("{}", list_line(i));
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        IssueCmd::Show { id, out } => {
            let (ref_name, full_id) = state::resolve_issue_ref(repo, &id)?;
            let issue = IssueState::from_ref(repo, &ref_name, &full_id)?;
            if out.json {
                print_json(&issue)?;
            } else {
                print_issue(&issue);
            }
            return Ok(ExitCode::SUCCESS);
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
        IssueCmd::Comment { id, message, out } => {
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
            out,
        } => {
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
            out,
        } => {
            if add.is_empty() && remove.is_empty() {
                bail!("nothing to do: give --add or --remove");
            }
            (
                "labelled",
                issue::label(repo, &identity()?, &id, &add, &remove)?,
                out.json,
            )
        }
        IssueCmd::Close { id, reason, out } => (
            "closed",
            issue::close(repo, &identity()?, &id, reason.as_deref())?,
            out.json,
        ),
        IssueCmd::Reopen { id, out } => (
            "reopened",
            issue::reopen(repo, &identity()?, &id)?,
            out.json,
        ),
    };
    report_written(verb, &written, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Run a lease command on the server behind `remote` and print its answer;
/// the exit status is the server's (0, 1, or 4 for a lease conflict).
fn lease_cmd(repo: &Repository, remote: &str, op: &LeaseOp, json: bool) -> Result<ExitCode> {
    let out = lease::run(repo, remote, op)?;
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

// Issue fields are other people's text: every one goes through `terminal`.
fn list_line(i: &IssueState) -> String {
    let labels = if i.labels.is_empty() {
        String::new()
    } else {
        format!("  [{}]", terminal::line(&i.labels.join(", ")))
    };
    format!(
        "{}  {:<6}  {}{}",
        short_id(&i.id),
        i.status,
        terminal::line(&i.title),
        labels
    )
}

fn print_issue(i: &IssueState) {
    println!("{} {}", short_id(&i.id), terminal::line(&i.title));
    println!(
        "status: {}{}",
        i.status,
        i.closed_reason
            .as_deref()
            .map(|r| format!(" ({})", terminal::line(r)))
            .unwrap_or_default()
    );
    println!("author: {}", terminal::line(&i.author.name));
    println!("created: {}", i.created_at.to_rfc3339());
    println!("updated: {}", i.updated_at.to_rfc3339());
    if !i.labels.is_empty() {
        println!("labels: {}", terminal::line(&i.labels.join(", ")));
    }
    if !i.body.is_empty() {
        println!();
        println!("{}", terminal::text(i.body.trim_end()));
    }
    for c in &i.comments {
        println!();
        println!(
            "--- {} {} at {}",
            short_id(&c.id),
            terminal::line(&c.author.name),
            c.at.to_rfc3339()
        );
        println!("{}", terminal::text(c.body.trim_end()));
    }
}

/// A text argument, where `-` means "read standard input".
fn text_arg(value: String) -> Result<String> {
    if value != "-" {
        return Ok(value);
    }
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprintln!("reading text from stdin; end with Ctrl-D");
    }
    let mut text = String::new();
    stdin
        .read_to_string(&mut text)
        .context("reading standard input")?;
    Ok(text)
}

fn release_cmd(repo: &Repository, cmd: ReleaseCmd) -> Result<ExitCode> {
    use git_collab::client::release;
    use git_collab::client::remote_ssh::ssh_remote;
    match cmd {
        ReleaseCmd::Create {
            tag,
            files,
            remote,
            out,
        } => {
            let created = release::create(&ssh_remote(repo, &remote)?, &tag, &files)?;
            if out.json {
                print_json(&created)?;
            } else {
                for f in &created.files {
                    println!(
                        "uploaded {} to {tag} ({} bytes, sha256 {})",
                        f.name, f.size, f.sha256
                    );
                }
            }
        }
        ReleaseCmd::List { remote, out } => {
            let listing = release::list(&ssh_remote(repo, &remote)?)?;
            if out.json {
                print_json(&listing)?;
            } else if listing.releases.is_empty() {
                println!("no releases");
            } else {
                for r in &listing.releases {
                    let created = r
                        .created_at
                        .map(|t| t.format(" %Y-%m-%d %H:%M UTC").to_string())
                        .unwrap_or_default();
                    println!("{}{created}", terminal::line(&r.tag));
                    for f in &r.files {
                        println!(
                            "  {}  {} bytes  sha256 {}",
                            terminal::line(&f.name),
                            f.size,
                            terminal::line(&f.sha256)
                        );
                    }
                }
            }
        }
        ReleaseCmd::Download {
            tag,
            file,
            dir,
            remote,
            out,
        } => {
            let got = release::download(&ssh_remote(repo, &remote)?, &tag, file.as_deref(), &dir)?;
            if out.json {
                print_json(&serde_json::json!({ "tag": tag, "files": got }))?;
            } else {
                for d in &got {
                    println!(
                        "downloaded {} ({} bytes, sha256 {} verified)",
                        d.path.display(),
                        d.size,
                        d.sha256
                    );
                }
            }
        }
        ReleaseCmd::Delete {
            tag,
            file,
            remote,
            out,
        } => {
            let deleted = release::delete(&ssh_remote(repo, &remote)?, &tag, file.as_deref())?;
            if out.json {
                print_json(&deleted)?;
            } else {
                for name in &deleted.files {
                    println!("deleted {} from {tag}", terminal::line(name));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--json` output: serde_json escapes C0 in strings but not DEL or C1.
fn print_json<T: Serialize>(value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    println!("{}", terminal::json(&text));
    Ok(())
}
