//! `git-collab`: the client CLI (also `git collab ...`). This file turns the
//! parsed command line (`cli.rs`) into library calls and prints the result
//! as text or `--json`. Every failure is one `error: ...` line on stderr and
//! exit status 1; the claim commands pass the server's exit status through
//! (4 = the issue is claimed by someone else).

mod check_cmd;
mod cli;
mod cmd_io;
mod issue_cmd;
mod patch_cmd;
mod patch_server_cmd;
mod patch_shared;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
use git2::Repository;
use serde::Serialize;

use cli::{Cli, Command, KeyCmd, ReleaseCmd, TrustCmd};
use cmd_io::print_json;
use collab_cli::client::mode::{self, Mode};
use collab_cli::client::sync;
use collab_cli::client::terminal;
use collab_record::issue::{short_id, Identity};
use collab_record::{refs, sign, trust, verify};

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
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // No subcommand: the usage, not an error line.
            let _ = e.print();
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("error: {}", clap_error_line(&e.to_string()));
            return ExitCode::FAILURE;
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // Errors can quote a server's reply or an event's fields.
            eprintln!("error: {}", terminal::line(&error_line(&e)));
            ExitCode::FAILURE
        }
    }
}

/// clap's message spans lines (details, tip, usage, "For more
/// information"); keep what comes before the usage, on one line, and point
/// at --help once.
fn clap_error_line(text: &str) -> String {
    let message: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let message = message.join(" ");
    let message = message.trim_start_matches("error: ");
    if message.contains("--help") {
        message.to_string()
    } else {
        format!("{message} (see --help)")
    }
}

/// An error and its causes on one line, `outer: inner: …`, leaving out a
/// cause whose text the line already holds (library errors often print
/// their source in their own message too).
fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string().replace('\n', " ");
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Init => init(&open_repo()?),
        Command::Man { dir } => write_man_pages(&dir),
        Command::Key { cmd } => key(cmd),
        Command::Trust { cmd } => trust_cmd(&open_repo()?, cmd),
        Command::Issue { target, cmd } => issue_cmd::run(&open_repo()?, target, cmd),
        Command::Patch { target, cmd } => patch_cmd::run(&open_repo()?, target, cmd),
        Command::Check { cmd } => check_cmd::run(&open_repo()?, cmd),
        Command::Release { cmd } => release_cmd(&open_repo()?, cmd),
        Command::Push { remote, args } => push(&open_repo()?, &remote, &args),
        Command::Events {
            remote,
            all,
            since,
            follow,
            types,
            json,
        } => {
            use collab_cli::client::watch;
            let repo = open_repo()?;
            let remote = collab_cli::client::remote_ssh::ssh_remote(&repo, &remote)?;
            let spec = watch::Watch {
                all,
                // Without --follow and --since: everything still retained.
                since: since.or(if follow { None } else { Some(0) }),
                follow,
                types,
            };
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let result = watch::run(&remote, &spec, json, &mut out)?;
            eprint!("{}", result.stderr_text());
            Ok(ExitCode::from(result.code.clamp(0, 255) as u8))
        }
        Command::Search {
            query,
            remote,
            all,
            repos,
            kind,
            state,
            limit,
            after,
            out,
        } => {
            use collab_cli::client::search;
            let repo = open_repo()?;
            let remote = collab_cli::client::remote_ssh::ssh_remote(&repo, &remote)?;
            let spec = search::Search {
                query,
                all,
                repos,
                kind,
                state,
                limit,
                after,
            };
            let page = match search::run(&remote, &spec)? {
                search::Outcome::Found(page) => page,
                search::Outcome::Refused { stderr, code } => {
                    eprint!("{}", terminal::text(&stderr));
                    return Ok(ExitCode::from(code.clamp(1, 255) as u8));
                }
            };
            if out.json {
                print_json(&page)?;
            } else {
                for r in &page.results {
                    println!(
                        "{:<6} {:<5} {}  {}  {}",
                        terminal::line(&r.state),
                        terminal::line(&r.kind),
                        short_id(&r.id),
                        terminal::line(&r.repo),
                        terminal::line(&r.title)
                    );
                }
                if let Some(next) = &page.next {
                    eprintln!("more: --after {}", terminal::line(next));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Sync { remote } => {
            let repo = open_repo()?;
            // The merge scan records merges with the signing key, if any.
            let who = Identity::load(&repo.config()?).ok();
            // A server that holds the issues refuses pushes of their DAGs.
            let server = mode::choose(&repo, &remote, None)?.mode == Mode::Server;
            let report = sync::sync_with(&repo, &remote, who.as_ref(), !server)?;
            println!(
                "synced with {remote}: {} new, {} fast-forwarded, {} merged, {} pushed{}",
                report.created.len(),
                report.fast_forwarded.len(),
                report.merged.len(),
                report.pushed.len(),
                if report.retried {
                    " (remote moved; retried)"
                } else {
                    ""
                }
            );
            for name in &report.pushed {
                println!("pushed {name}");
            }
            for name in &report.diverged {
                // A ref name from the remote: git allows C1 characters in it.
                eprintln!(
                    "warning: {} diverged from {remote} and was left as it is",
                    terminal::line(name)
                );
            }
            for m in &report.patches_merged {
                println!(
                    "patch {} merged in {} (found on {})",
                    short_id(&m.patch),
                    short_id(&m.commit),
                    terminal::line(&m.branch)
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
                for e in &report.exports {
                    for p in &e.dropped {
                        println!(
                            "dropped {} in the export of issue {} from {}: {} ({}{})",
                            short_id(&p.event.commit),
                            short_id(&p.issue),
                            e.remote,
                            terminal::line(&p.event.detail),
                            terminal::line(p.event.kind.as_deref().unwrap_or("unreadable event")),
                            p.event
                                .author_fingerprint
                                .as_deref()
                                .map(|f| format!(", key {f}"))
                                .unwrap_or_default()
                        );
                    }
                    for i in &e.invalid_issues {
                        println!(
                            "invalid export of issue {} from {}: {}",
                            short_id(&i.issue),
                            e.remote,
                            terminal::line(&i.reason)
                        );
                    }
                    for p in &e.dropped_patch_events {
                        println!(
                            "dropped {} in the export of patch {} from {}: {} ({})",
                            short_id(&p.event.commit),
                            short_id(&p.issue),
                            e.remote,
                            terminal::line(&p.event.detail),
                            terminal::line(p.event.kind.as_deref().unwrap_or("unreadable event")),
                        );
                    }
                    for i in &e.invalid_patches {
                        println!(
                            "invalid export of patch {} from {}: {}",
                            short_id(&i.issue),
                            e.remote,
                            terminal::line(&i.reason)
                        );
                    }
                    if e.patches > 0 {
                        println!(
                            "export of {}: {}, {} dropped, {}",
                            e.remote,
                            terminal::count(e.patches, "patch", "patches"),
                            e.dropped_patch_events.len(),
                            terminal::count(
                                e.invalid_patches.len(),
                                "invalid patch",
                                "invalid patches"
                            )
                        );
                    }
                    println!(
                        "export of {}: {}, {}, {} dropped, {}{}",
                        e.remote,
                        terminal::count(e.issues, "issue", "issues"),
                        terminal::count(e.events, "event", "events"),
                        e.dropped.len(),
                        terminal::count(e.invalid_issues.len(), "invalid issue", "invalid issues"),
                        if e.checked {
                            ""
                        } else {
                            " (not checked against the server's key: trust its server_key first)"
                        }
                    );
                }
                println!(
                    "{}: {}, {}, {} dropped, {}",
                    if report.ok { "ok" } else { "FAILED" },
                    terminal::count(report.issues, "issue", "issues"),
                    terminal::count(report.events, "event", "events"),
                    report.dropped.len(),
                    terminal::count(
                        report.invalid_issues.len(),
                        "invalid issue",
                        "invalid issues"
                    )
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
/// `git collab push`: `git push` with the fencing option of every tenure
/// this clone remembers for `remote`; git's output and exit status pass
/// through.
fn push(repo: &Repository, remote: &str, args: &[String]) -> Result<ExitCode> {
    use collab_cli::client::lease;
    let tokens = lease::remembered_tokens(repo, remote)?;
    let dir = repo.workdir().unwrap_or_else(|| repo.path());
    // git-args: the user's own `git push` arguments, passed through as
    // `git push` itself would take them (options included).
    let status = std::process::Command::new("git")
        .current_dir(dir)
        .arg("push")
        .args(lease::push_options(&tokens))
        .arg(remote)
        .args(args)
        .status()
        .context("running git push")?;
    Ok(ExitCode::from(
        status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(1),
    ))
}

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

/// `git-collab man DIR`: `git-collab.1`, and `git-collab-<sub>.1` for each
/// subcommand (the names `git help collab-issue`-style lookups use).
fn write_man_pages(dir: &std::path::Path) -> Result<ExitCode> {
    use clap::CommandFactory;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let root = Cli::command();
    let mut pages = vec![("git-collab".to_string(), root.clone())];
    for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("git-collab-{}", sub.get_name());
        // A clap name is a &'static str; this command runs once and exits.
        let static_name: &'static str = Box::leak(name.clone().into_boxed_str());
        pages.push((name, sub.clone().name(static_name)));
    }
    for (name, cmd) in pages {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut page)?;
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
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

fn release_cmd(repo: &Repository, cmd: ReleaseCmd) -> Result<ExitCode> {
    use collab_cli::client::release;
    use collab_cli::client::remote_ssh::ssh_remote;
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
                        .as_deref()
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
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

#[cfg(test)]
mod error_line_tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let lib = collab_record::Error::io("/x/key", io);
        let e = anyhow::Error::new(lib).context("reading the key");
        let line = error_line(&e);
        assert_eq!(line.matches("entity not found").count(), 1, "{line}");
        assert!(line.starts_with("reading the key: /x/key: "), "{line}");
    }

    #[test]
    fn the_help_hint_is_given_once() {
        let hinted = "error: unexpected argument '--x' found\n\n  tip: to pass '--x' as a value, use '-- --x'\n\nUsage: git-collab issue list\n\nFor more information, try '--help'.\n";
        assert_eq!(
            clap_error_line(hinted),
            "unexpected argument '--x' found tip: to pass '--x' as a value, use '-- --x' (see --help)"
        );
    }
}
