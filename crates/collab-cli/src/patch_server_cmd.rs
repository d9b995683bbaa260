//! `git-collab patch …` in server mode: the remote's git-collab server
//! holds the patches. Opening and revising are a `refs/for/<base>` push;
//! everything else is one `collab-patch` call
//! (`collab_cli::client::server_patch`). Text output follows the local
//! mode's; `--json` prints the server's objects (docs/ssh-verbs.md).

use std::process::ExitCode;

use anyhow::{bail, Result};
use collab_proto::replies::issue::Person;
use collab_proto::replies::patch::{
    Interdiff, MergeDequeued, MergeQueued, Merged, Merger, PatchShown, PatchSummary, PatchWritten,
    RevisionDiff,
};
use git2::Repository;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::cli::{PatchCmd, VerdictFlags};
use crate::cmd_io::{pass_through, print_json, read_value, text_arg};
use crate::patch_shared;
use collab_cli::client::remote::SshRemote;
use collab_cli::client::remote_ssh::RemoteOutput;
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
                        for row in rows {
                            let row: PatchSummary = serde_json::from_value(row)?;
                            println!("{}", list_line(&row));
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
            read_reply(&reply, out.json, |d: &RevisionDiff| {
                print!("{}", terminal::text(&d.text))
            })
        }
        PatchCmd::Interdiff { id, from, to, out } => {
            let call = server::call(remote, "interdiff")
                .arg(&id_arg(&id)?)
                .arg(&from.to_string())
                .arg(&to.to_string());
            let reply = server::run(remote, call, None)?;
            read_reply(&reply, out.json, |d: &Interdiff| {
                if d.rebased {
                    eprintln!(
                        "note: revision {from} was replayed onto revision {to}'s base before comparing"
                    );
                }
                if !d.conflicts.is_empty() {
                    eprintln!(
                        "note: that replay conflicted in {}; those files are compared as revision {from} has them",
                        terminal::line(&d.conflicts.join(", "))
                    );
                }
                print!("{}", terminal::text(&d.text));
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
            read_value(&reply, out.json, |v| {
                match v["status"].as_str() {
                    Some("queued") => {
                        let q = MergeQueued::deserialize(v)?;
                        let patch = short_id(&q.patch);
                        match q.queue.as_deref() {
                            Some(branch) => println!(
                                "queued: patch {patch} (revision {}) is in the merge queue of {}; it merges with its group once the group's checks are green",
                                q.revision,
                                terminal::line(branch)
                            ),
                            None => println!(
                                "queued: the server merges patch {patch} (revision {}) when the merge rule allows",
                                q.revision
                            ),
                        }
                        if let Some(why) = &q.waiting_for {
                            println!("waiting for: {}", terminal::line(why));
                        }
                        return Ok(());
                    }
                    Some("dequeued") => {
                        let d = MergeDequeued::deserialize(v)?;
                        println!("dropped the queued merge of patch {}", short_id(&d.patch));
                        return Ok(());
                    }
                    _ => {}
                }
                let m = Merged::deserialize(v)?;
                let how = match m.kind.as_str() {
                    "fast_forward" => "fast-forward".to_string(),
                    "merge_commit" => format!("merge commit {}", short_id(&m.commit)),
                    _ => format!("already there, in {}", short_id(&m.commit)),
                };
                println!(
                    "merged patch {} into {} on the server ({how})",
                    short_id(&m.patch),
                    terminal::line(&m.branch)
                );
                for c in &m.closed_issues {
                    println!(
                        "closed issue {} (fixed by {})",
                        short_id(&c.issue),
                        short_id(&c.commit)
                    );
                }
                Ok(())
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
    let shown: PatchShown = serde_json::from_slice(&reply.stdout)?;
    let full = shown.id;
    let n = rev.map(u64::from).unwrap_or(shown.revisions.len() as u64);
    let Some(r) = shown
        .revisions
        .iter()
        .find(|r| u64::try_from(r.n).ok() == Some(n))
    else {
        bail!("patch {} has no revision {n}", short_id(&full));
    };
    let head = r.head.clone();
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

/// Print a successful reply as the server's JSON (`--json`) or, read
/// as its shared reply type (`collab_proto::replies::patch`), through
/// `text`; or pass a failed one through.
fn read_reply<T: DeserializeOwned>(
    reply: &RemoteOutput,
    json: bool,
    text: impl FnOnce(&T),
) -> Result<ExitCode> {
    read_value(reply, json, |v| {
        text(&T::deserialize(v)?);
        Ok(())
    })
}

/// A write's reply: `{verb} <id8> (revision n)`, or the local mode's JSON
/// shape (`patch`, `event`, `revision`).
fn written(reply: &RemoteOutput, verb: &str, json: bool) -> Result<ExitCode> {
    if !reply.success() {
        return Ok(pass_through(reply, json));
    }
    let w: PatchWritten = serde_json::from_slice(&reply.stdout)?;
    if json {
        print_json(&json!({ "patch": w.patch, "event": w.event, "revision": w.revision }))?;
    } else {
        match w.revision {
            Some(n) => println!("{verb} {} (revision {n})", short_id(&w.patch)),
            None => println!("{verb} {}", short_id(&w.patch)),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn list_line(row: &PatchSummary) -> String {
    let n = |v: i64| usize::try_from(v).unwrap_or(0);
    let line = patch_shared::list_row(
        &row.id,
        &row.status,
        n(row.revisions),
        &row.title,
        &row.base,
        n(row.approvals),
        n(row.changes_requested),
    );
    match &row.depends_on {
        Some(below) => format!("{line}  (on {})", short_id(&terminal::line(below))),
        None => line,
    }
}

// Patch fields are other people's text: every one goes through `terminal`.
fn print_patch(v: &PatchShown) {
    fn s(text: &str) -> String {
        terminal::line(text).into_owned()
    }
    fn at(time: &Option<String>) -> String {
        s(time.as_deref().unwrap_or_default())
    }
    /// A person by display name (older servers send only `name`).
    fn name(p: &Person) -> String {
        s(p.display_name.as_deref().unwrap_or(&p.name))
    }
    fn merger(m: &Merger) -> String {
        s(m.display_name.as_deref().unwrap_or(&m.name))
    }
    println!("{} {}", short_id(&v.id), s(&v.title));
    println!("status: {}", s(&v.status));
    if let Some(m) = &v.merge {
        println!("merged in: {} (by {})", s(&m.commit), merger(&m.author));
    }
    println!("base: {}", s(&v.base));
    if let Some(change) = &v.change_id {
        println!("change id: {}", s(change));
    }
    if let Some(below) = &v.depends_on {
        println!("depends on: {}", short_id(&s(below)));
    }
    println!("author: {}", name(&v.author));
    println!("created: {}", at(&v.created_at));
    println!("updated: {}", at(&v.updated_at));
    if !v.body.is_empty() {
        println!();
        println!("{}", terminal::text(v.body.trim_end()));
    }
    println!();
    println!("revisions:");
    for r in &v.revisions {
        let votes: Vec<String> = v
            .reviews
            .iter()
            .filter(|x| x.revision == r.n)
            .map(|x| format!("{} {}", name(&x.author), s(&x.verdict)))
            .collect();
        println!(
            "  {:>2}  {}  {}  {}{}",
            // As a JSON number, as before (`{:>2}` pads no JSON value).
            Value::from(r.n),
            short_id(&r.head),
            at(&r.at),
            name(&r.author),
            if votes.is_empty() {
                String::new()
            } else {
                format!("  [{}]", votes.join(", "))
            }
        );
    }
    let issues: Vec<&str> = v.issues.iter().map(String::as_str).map(short_id).collect();
    if !issues.is_empty() {
        println!();
        println!("issues: {}", issues.join(", "));
    }
    if !v.checks.is_empty() {
        println!();
        println!("checks:");
        for c in &v.checks {
            let said = c
                .description
                .as_deref()
                .map(|d| format!("  {}", s(d)))
                .unwrap_or_default();
            println!("  {:<8} {}{said}", s(&c.state), s(&c.name));
        }
    }
    if v.status == "open" {
        println!();
        match &v.merge_rule.reason {
            None => println!("merge: ready (the merge rule allows it)"),
            Some(reason) => println!("merge: not yet: {}", terminal::line(reason)),
        }
        let missing: Vec<&str> = v
            .merge_rule
            .required_checks
            .iter()
            .filter(|name| !v.checks.iter().any(|c| &c.name == *name))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            println!(
                "required checks not reported yet: {}",
                s(&missing.join(", "))
            );
        }
        if let Some(q) = &v.queued_merge {
            let queue = if v.merge_rule.queue {
                "in the merge queue"
            } else {
                "when green"
            };
            println!(
                "queued: revision {} merges {queue} (queued {})",
                q.revision,
                at(&q.queued_at)
            );
        }
    }
    if !v.reviews.is_empty() || !v.comments.is_empty() {
        println!();
        println!("timeline:");
    }
    for r in &v.reviews {
        println!(
            "  {} {} revision {}: {}",
            at(&r.at),
            name(&r.author),
            r.revision,
            s(&r.verdict)
        );
        for line in terminal::text(r.body.trim_end()).lines() {
            println!("    {line}");
        }
    }
    for c in &v.comments {
        let place = match (&c.path, c.line) {
            (Some(p), Some(l)) => format!(" on {}:{l}", terminal::line(p)),
            (Some(p), None) => format!(" on {}", terminal::line(p)),
            _ => String::new(),
        };
        println!("  {} {} commented{place}", at(&c.at), name(&c.author));
        for line in terminal::text(c.body.trim_end()).lines() {
            println!("    {line}");
        }
    }
}
