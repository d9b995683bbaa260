//! `git-collab patch …` in server mode: the remote's git-collab server
//! holds the patches. Opening and revising are a `refs/for/<base>` push;
//! everything else is one `collab-patch` call
//! (`collab_cli::client::server_patch`). Text output follows the local
//! mode's; `--json` prints the server's objects (docs/ssh-verbs.md).

use std::process::ExitCode;

use anyhow::{bail, Result};
use git2::Repository;
use serde_json::{json, Value};

use crate::cli::{PatchCmd, VerdictFlags};
use crate::cmd_io::{print_json, text_arg};
use crate::patch_shared;
use collab_cli::client::remote_ssh::{RemoteOutput, SshRemote};
use collab_cli::client::server_issue::EXIT_CONFLICT;
use collab_cli::client::server_patch::{self as server, id_arg, Listed, ReviewPush};
use collab_cli::client::terminal;
use collab_record::event::Verdict;
use collab_record::issue::short_id;
use collab_record::patch;

pub fn run(
    repo: &Repository,
    remote_name: &str,
    remote: &SshRemote,
    cmd: PatchCmd,
) -> Result<ExitCode> {
    match cmd {
        PatchCmd::List { all, out } => {
            let state = if all { "all" } else { "open" };
            match server::list_all(remote, state)? {
                Listed::Failed(reply) => Ok(pass_through(&reply, out.json)),
                Listed::All(rows) => {
                    if out.json {
                        print_json(&rows)?;
                    } else {
                        for row in &rows {
                            println!("{}", list_line(row));
                        }
                    }
                    Ok(ExitCode::SUCCESS)
                }
            }
        }
        PatchCmd::Show { id, out } => {
            let reply = server::run(
                remote,
                server::call(remote, "show").arg(&id_arg(&id)?),
                None,
            )?;
            read_reply(&reply, out.json, print_patch)
        }
        PatchCmd::Diff { id, rev, out } => {
            let call = server::call(remote, "diff").arg(&id_arg(&id)?);
            let call = call.when(rev.is_some(), |c| c.int("--rev", rev.unwrap_or_default()));
            let reply = server::run(remote, call, None)?;
            read_reply(&reply, out.json, |v| {
                print!("{}", terminal::text(v["text"].as_str().unwrap_or_default()))
            })
        }
        PatchCmd::Interdiff { id, from, to, out } => {
            let call = server::call(remote, "interdiff")
                .arg(&id_arg(&id)?)
                .arg(&from.to_string())
                .arg(&to.to_string());
            let reply = server::run(remote, call, None)?;
            read_reply(&reply, out.json, |v| {
                if v["rebased"] == true {
                    eprintln!(
                        "note: revision {from} was replayed onto revision {to}'s base before comparing"
                    );
                }
                if let Some(paths) = v["conflicts"].as_array().filter(|c| !c.is_empty()) {
                    let paths: Vec<&str> = paths.iter().filter_map(Value::as_str).collect();
                    eprintln!(
                        "note: that replay conflicted in {}; those files are compared as revision {from} has them",
                        terminal::line(&paths.join(", "))
                    );
                }
                print!("{}", terminal::text(v["text"].as_str().unwrap_or_default()));
            })
        }
        PatchCmd::Review {
            id,
            verdict,
            message,
            rev,
            out,
        } => {
            let message = text_arg(message)?;
            let (flag, verb) = verdict_flag(verdict);
            let stdin = (!message.is_empty()).then(|| message.into_bytes());
            let call = server::call(remote, "review")
                .arg(&id_arg(&id)?)
                .switch(flag, true)
                .when(rev.is_some(), |c| c.int("--rev", rev.unwrap_or_default()))
                .switch("--body-stdin", stdin.is_some());
            let reply = server::run(remote, call, stdin.as_deref())?;
            written(&reply, verb, out.json)
        }
        PatchCmd::Comment {
            id,
            message,
            path,
            line,
            rev,
            out,
        } => {
            let message = text_arg(message)?;
            let call = server::call(remote, "comment")
                .arg(&id_arg(&id)?)
                .switch("--body-stdin", true)
                .flag_opt("--path", path.as_deref())
                .when(line.is_some(), |c| {
                    c.int("--line", line.unwrap_or_default())
                })
                .when(rev.is_some(), |c| c.int("--rev", rev.unwrap_or_default()));
            let reply = server::run(remote, call, Some(message.as_bytes()))?;
            written(&reply, "commented on", out.json)
        }
        PatchCmd::Close { id, out } => {
            let reply = server::run(
                remote,
                server::call(remote, "close").arg(&id_arg(&id)?),
                None,
            )?;
            written(&reply, "closed", out.json)
        }
        PatchCmd::Merge {
            id,
            fence,
            out,
            when_green,
            cancel,
        } => {
            let call = server::call(remote, "merge")
                .arg(&id_arg(&id)?)
                .switch("--when-green", when_green)
                .switch("--cancel", cancel)
                .when(fence.lease_token.is_some(), |c| {
                    c.int("--lease-token", fence.lease_token.unwrap_or_default())
                });
            let reply = server::run(remote, call, None)?;
            read_reply(&reply, out.json, |v| {
                match v["status"].as_str() {
                    Some("queued") => {
                        match v["queue"].as_str() {
                            Some(branch) => println!(
                                "queued: patch {} (revision {}) is in the merge queue of {}; it merges with its group once the group's checks are green",
                                short_id(v["patch"].as_str().unwrap_or_default()),
                                v["revision"],
                                terminal::line(branch)
                            ),
                            None => println!(
                                "queued: the server merges patch {} (revision {}) when the merge rule allows",
                                short_id(v["patch"].as_str().unwrap_or_default()),
                                v["revision"]
                            ),
                        }
                        if let Some(why) = v["waiting_for"].as_str() {
                            println!("waiting for: {}", terminal::line(why));
                        }
                        return;
                    }
                    Some("dequeued") => {
                        println!(
                            "dropped the queued merge of patch {}",
                            short_id(v["patch"].as_str().unwrap_or_default())
                        );
                        return;
                    }
                    _ => {}
                }
                let commit = v["commit"].as_str().unwrap_or_default();
                let how = match v["kind"].as_str().unwrap_or_default() {
                    "fast_forward" => "fast-forward".to_string(),
                    "merge_commit" => format!("merge commit {}", short_id(commit)),
                    _ => format!("already there, in {}", short_id(commit)),
                };
                println!(
                    "merged patch {} into {} on the server ({how})",
                    short_id(v["patch"].as_str().unwrap_or_default()),
                    terminal::line(v["branch"].as_str().unwrap_or_default())
                );
                for c in v["closed_issues"].as_array().into_iter().flatten() {
                    println!(
                        "closed issue {} (fixed by {})",
                        short_id(c["issue"].as_str().unwrap_or_default()),
                        short_id(c["commit"].as_str().unwrap_or_default())
                    );
                }
            })
        }
        PatchCmd::Create {
            base,
            head,
            title,
            body,
            out,
        } => {
            let body = body.map(text_arg).transpose()?;
            push(
                repo,
                remote_name,
                PushArgs {
                    base,
                    head,
                    patch: None,
                    issues: Vec::new(),
                    title,
                    body,
                },
                out.json,
            )
        }
        PatchCmd::Revise { id, head, out } => push(
            repo,
            remote_name,
            PushArgs {
                base: None,
                head,
                patch: Some(id),
                issues: Vec::new(),
                title: None,
                body: None,
            },
            out.json,
        ),
        PatchCmd::Push {
            base,
            head,
            patch,
            issues,
            title,
            body,
            out,
        } => {
            let body = body.map(text_arg).transpose()?;
            push(
                repo,
                remote_name,
                PushArgs {
                    base,
                    head,
                    patch,
                    issues,
                    title,
                    body,
                },
                out.json,
            )
        }
        PatchCmd::Checkout { id, rev, out } => {
            checkout(repo, remote_name, remote, &id, rev, out.json)
        }
    }
}

struct PushArgs {
    base: Option<String>,
    head: String,
    patch: Option<String>,
    issues: Vec<String>,
    title: Option<String>,
    body: Option<String>,
}

fn push(repo: &Repository, remote_name: &str, a: PushArgs, json: bool) -> Result<ExitCode> {
    let base = match (a.base, &a.patch) {
        (Some(b), _) => b,
        // A revision goes to the base its patch already has: ask git-free
        // defaults only for new patches; the server checks the base.
        _ => patch::default_base(repo)?,
    };
    let workdir = repo.workdir().unwrap_or(repo.path());
    let pushed = server::push_for_review(
        workdir,
        &ReviewPush {
            remote: remote_name,
            head: &a.head,
            base: &base,
            patch: a.patch.as_deref(),
            issues: &a.issues,
            title: a.title.as_deref(),
            description: a.body.as_deref().map(str::trim_end),
        },
    )?;
    for line in &pushed.remote_lines {
        eprintln!("{}", terminal::line(line));
    }
    if json {
        print_json(&json!({
            "patch": pushed.patch,
            "event": null,
            "revision": pushed.revision,
        }))?;
    } else {
        let verb = if a.patch.is_some() {
            "revised"
        } else {
            "created patch"
        };
        println!(
            "{verb} {} (revision {})",
            short_id(&pushed.patch),
            pushed.revision
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Fetch revision `rev` (default: the latest) and check it out on
/// `patch/<id8>`, as the local mode does.
fn checkout(
    repo: &Repository,
    remote_name: &str,
    remote: &SshRemote,
    id: &str,
    rev: Option<u32>,
    json: bool,
) -> Result<ExitCode> {
    let reply = server::run(remote, server::call(remote, "show").arg(&id_arg(id)?), None)?;
    if !reply.success() {
        return Ok(pass_through(&reply, json));
    }
    let shown: Value = serde_json::from_slice(&reply.stdout)?;
    let full = shown["id"].as_str().unwrap_or_default().to_string();
    let revisions = shown["revisions"].as_array().cloned().unwrap_or_default();
    let n = rev.map(u64::from).unwrap_or(revisions.len() as u64);
    let Some(r) = revisions.iter().find(|r| r["n"].as_u64() == Some(n)) else {
        bail!("patch {} has no revision {n}", short_id(&full));
    };
    let head = r["head"].as_str().unwrap_or_default().to_string();
    let pin = collab_record::refs::revision_ref(&full, n as u32);
    let workdir = repo.workdir().unwrap_or(repo.path());
    // git-args: every caller puts `--end-of-options` before the remote,
    // refs and commits it passes (the server's reply is not trusted to name
    // only commits).
    let git = |args: &[&str]| -> Result<()> {
        let out = std::process::Command::new("git")
            .current_dir(workdir)
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "git {}: {}",
                args.join(" "),
                terminal::line(String::from_utf8_lossy(&out.stderr).trim())
            );
        }
        Ok(())
    };
    git(&["fetch", "-q", "--end-of-options", remote_name, &pin])?;
    let branch = format!("patch/{}", short_id(&full));
    git(&["switch", "-q", "-C", &branch, "--end-of-options", &head])?;
    if json {
        print_json(&json!({ "patch": full, "revision": n, "head": head, "branch": branch }))?;
    } else {
        println!(
            "switched to branch {branch} at revision {n} ({})",
            short_id(&head)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `collab-patch review`'s flag for the vote, and what the report says.
fn verdict_flag(v: VerdictFlags) -> (&'static str, &'static str) {
    let verdict = patch_shared::verdict_of(v);
    let flag = match verdict {
        Verdict::Approve => "--approve",
        Verdict::RequestChanges => "--request-changes",
        Verdict::Comment => "--comment",
    };
    (flag, patch_shared::verdict_verb(verdict))
}

/// The server's reply to show as it is (an error, or an ssh failure).
fn pass_through(reply: &RemoteOutput, json: bool) -> ExitCode {
    if reply.code == EXIT_CONFLICT && !json {
        if let Ok(v) = serde_json::from_slice::<Value>(&reply.stdout) {
            if let Some(message) = v["message"].as_str() {
                eprintln!("error: {}", terminal::line(message));
                return ExitCode::from(u8::try_from(reply.code).unwrap_or(1));
            }
        }
    }
    if json {
        print!("{}", terminal::json(&reply.stdout_text()));
    } else {
        print!("{}", terminal::text(&reply.stdout_text()));
    }
    eprint!("{}", terminal::text(&reply.stderr_text()));
    ExitCode::from(u8::try_from(reply.code).unwrap_or(1))
}

/// Print a successful reply as JSON or through `text`, or pass a failed
/// one through.
fn read_reply(reply: &RemoteOutput, json: bool, text: impl FnOnce(&Value)) -> Result<ExitCode> {
    read_reply_raw(reply, json, |v| {
        if json {
            print_json(v).ok();
        } else {
            text(v);
        }
    })
}

/// A write's reply: `{verb} <id8> (revision n)`, or the local mode's JSON
/// shape (`patch`, `event`, `revision`).
fn written(reply: &RemoteOutput, verb: &str, json: bool) -> Result<ExitCode> {
    read_reply_raw(reply, json, |v| {
        let patch = v["patch"].as_str().unwrap_or_default();
        if json {
            print_json(&json!({ "patch": patch, "event": v["event"], "revision": v["revision"] }))
                .ok();
        } else {
            match v["revision"].as_u64() {
                Some(n) => println!("{verb} {} (revision {n})", short_id(patch)),
                None => println!("{verb} {}", short_id(patch)),
            }
        }
    })
}

fn read_reply_raw(reply: &RemoteOutput, json: bool, f: impl FnOnce(&Value)) -> Result<ExitCode> {
    if !reply.success() {
        return Ok(pass_through(reply, json));
    }
    let value: Value = serde_json::from_slice(&reply.stdout)?;
    f(&value);
    Ok(ExitCode::SUCCESS)
}

fn list_line(row: &Value) -> String {
    let s = |k: &str| row[k].as_str().unwrap_or_default();
    let n = |k: &str| row[k].as_u64().unwrap_or(0) as usize;
    patch_shared::list_row(
        s("id"),
        s("status"),
        n("revisions"),
        s("title"),
        s("base"),
        n("approvals"),
        n("changes_requested"),
    )
}

// Patch fields are other people's text: every one goes through `terminal`.
fn print_patch(v: &Value) {
    fn s(v: &Value, k: &str) -> String {
        terminal::line(v[k].as_str().unwrap_or_default()).into_owned()
    }
    /// A person by display name (older servers send only `name`).
    fn name(v: &Value) -> String {
        let shown = v["display_name"].as_str().or(v["name"].as_str());
        terminal::line(shown.unwrap_or_default()).into_owned()
    }
    println!(
        "{} {}",
        short_id(v["id"].as_str().unwrap_or_default()),
        s(v, "title")
    );
    println!("status: {}", s(v, "status"));
    if let Some(m) = v["merge"].as_object() {
        let m = Value::Object(m.clone());
        println!("merged in: {} (by {})", s(&m, "commit"), name(&m["author"]));
    }
    println!("base: {}", s(v, "base"));
    println!("author: {}", name(&v["author"]));
    println!("created: {}", s(v, "created_at"));
    println!("updated: {}", s(v, "updated_at"));
    let body = v["body"].as_str().unwrap_or_default();
    if !body.is_empty() {
        println!();
        println!("{}", terminal::text(body.trim_end()));
    }
    println!();
    println!("revisions:");
    let reviews = v["reviews"].as_array().cloned().unwrap_or_default();
    for r in v["revisions"].as_array().into_iter().flatten() {
        let votes: Vec<String> = reviews
            .iter()
            .filter(|x| x["revision"] == r["n"])
            .map(|x| format!("{} {}", name(&x["author"]), s(x, "verdict")))
            .collect();
        println!(
            "  {:>2}  {}  {}  {}{}",
            r["n"],
            short_id(r["head"].as_str().unwrap_or_default()),
            s(r, "at"),
            name(&r["author"]),
            if votes.is_empty() {
                String::new()
            } else {
                format!("  [{}]", votes.join(", "))
            }
        );
    }
    let issues: Vec<&str> = v["issues"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(short_id)
        .collect();
    if !issues.is_empty() {
        println!();
        println!("issues: {}", issues.join(", "));
    }
    let rule = &v["merge_rule"];
    if v["status"] == "open" {
        println!();
        match rule["reason"].as_str() {
            None => println!("merge: ready (the merge rule allows it)"),
            Some(reason) => println!("merge: not yet: {}", terminal::line(reason)),
        }
    }
    let comments = v["comments"].as_array().cloned().unwrap_or_default();
    if !reviews.is_empty() || !comments.is_empty() {
        println!();
        println!("timeline:");
    }
    for r in &reviews {
        println!(
            "  {} {} revision {}: {}",
            s(r, "at"),
            name(&r["author"]),
            r["revision"],
            s(r, "verdict")
        );
        for line in terminal::text(r["body"].as_str().unwrap_or_default().trim_end()).lines() {
            println!("    {line}");
        }
    }
    for c in &comments {
        let place = match (c["path"].as_str(), c["line"].as_u64()) {
            (Some(p), Some(l)) => format!(" on {}:{l}", terminal::line(p)),
            (Some(p), None) => format!(" on {}", terminal::line(p)),
            _ => String::new(),
        };
        println!("  {} {} commented{place}", s(c, "at"), name(&c["author"]));
        for line in terminal::text(c["body"].as_str().unwrap_or_default().trim_end()).lines() {
            println!("    {line}");
        }
    }
}
