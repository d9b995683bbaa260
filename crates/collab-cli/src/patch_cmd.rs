//! `git-collab patch ...`: runs the parsed `PatchCmd` (`cli.rs`) on the
//! remote's git-collab server (`patch_server_cmd`, when the server holds
//! patches) or through the library on this clone's DAGs
//! (`collab_record::patch`, `diff`), and prints text or `--json`
//! (shapes in docs/patches.md). Errors propagate to `main`, which prints
//! one `error: ...` line.

use std::process::ExitCode;

use anyhow::{bail, Result};
use git2::Repository;
use serde::Serialize;

use crate::cli::{IssueTarget, PatchCmd};
use crate::cmd_io::{print_json, text_arg};
use crate::patch_shared::{list_row, verdict_of, verdict_verb};
use collab_cli::client::mode::{self, Mode};
use collab_cli::client::remote_ssh;
use collab_cli::client::terminal;
use collab_record::diff;
use collab_record::event::{Author, Verdict};
use collab_record::issue::{short_id, Identity};
use collab_record::patch::{self, MergeKind, NewPatch, PatchState, PatchStatus, Written};

/// One row of `patch list --json`.
#[derive(Serialize)]
struct PatchSummary<'a> {
    id: &'a str,
    title: &'a str,
    status: PatchStatus,
    author: &'a Author,
    base: &'a str,
    /// Number of revisions.
    revisions: usize,
    /// The latest revision's head.
    head: &'a str,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
    /// Current votes on the latest revision.
    approvals: usize,
    changes_requested: usize,
}

#[derive(Serialize)]
struct WrittenJson<'a> {
    patch: &'a str,
    event: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    revision: Option<u32>,
}

#[derive(Serialize)]
struct MergedJson<'a> {
    patch: &'a str,
    event: String,
    branch: &'a str,
    commit: String,
    kind: MergeKind,
}

/// Run `cmd` where the remote's patches live: on its git-collab server
/// (`patch_server_cmd`) or in this clone's signed DAGs.
pub fn run(repo: &Repository, target: IssueTarget, cmd: PatchCmd) -> Result<ExitCode> {
    let flag = target.mode.as_deref().and_then(Mode::parse);
    match mode::choose(repo, &target.remote, flag)?.mode {
        Mode::Server => {
            let remote = remote_ssh::ssh_remote(repo, &target.remote)?;
            crate::patch_server_cmd::run(repo, &target.remote, &remote, cmd)
        }
        Mode::Local => local(repo, cmd),
    }
}

/// Local mode: the patch DAGs of this clone, shared with `sync`.
fn local(repo: &Repository, cmd: PatchCmd) -> Result<ExitCode> {
    let identity = || -> Result<Identity> { Ok(Identity::load(&repo.config()?)?) };
    let (text, written, json) = match cmd {
        PatchCmd::List { all, out } => {
            let patches: Vec<PatchState> = patch::list_patches(repo)?
                .into_iter()
                .filter(|p| all || p.status == PatchStatus::Open)
                .collect();
            if out.json {
                print_json(&patches.iter().map(summary).collect::<Vec<_>>())?;
            } else {
                for p in &patches {
                    println!("{}", list_line(p));
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        PatchCmd::Show { id, out } => {
            let p = PatchState::load(repo, &id)?;
            if out.json {
                print_json(&p)?;
            } else {
                print_patch(&p);
            }
            return Ok(ExitCode::SUCCESS);
        }
        PatchCmd::Diff { id, rev, out } => {
            let p = PatchState::load(repo, &id)?;
            let d = diff::revision_diff(repo, &p, rev)?;
            if out.json {
                print_json(&d)?;
            } else {
                print!("{}", terminal::text(&d.diff.text));
            }
            return Ok(ExitCode::SUCCESS);
        }
        PatchCmd::Interdiff { id, from, to, out } => {
            let p = PatchState::load(repo, &id)?;
            let d = diff::interdiff(repo, &p, from, to)?;
            if out.json {
                print_json(&d)?;
            } else {
                // Notes go to stderr so stdout stays a diff.
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
                print!("{}", terminal::text(&d.diff.text));
            }
            return Ok(ExitCode::SUCCESS);
        }
        PatchCmd::Checkout { id, rev, out } => {
            let c = patch::checkout(repo, &id, rev)?;
            if out.json {
                print_json(&c)?;
            } else {
                println!(
                    "switched to branch {} at revision {} ({})",
                    c.branch,
                    c.revision,
                    short_id(&c.head)
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        PatchCmd::Push { .. } => {
            bail!("patch push needs a git-collab server remote (server mode); here use patch create and sync")
        }
        PatchCmd::Merge {
            id,
            fence,
            out,
            when_green,
            cancel,
        } => {
            if when_green || cancel {
                bail!(
                    "--when-green and --cancel queue merges on a git-collab server (server mode)"
                );
            }
            if fence.lease_token.is_some() {
                bail!("--lease-token applies to merges on a git-collab server (server mode)");
            }
            let m = patch::merge(repo, &identity()?, &id)?;
            if out.json {
                print_json(&MergedJson {
                    patch: &m.written.patch,
                    event: m.written.event.to_string(),
                    branch: &m.branch,
                    commit: m.commit.to_string(),
                    kind: m.kind,
                })?;
            } else {
                let how = match m.kind {
                    MergeKind::FastForward => "fast-forward".to_string(),
                    MergeKind::MergeCommit => {
                        format!("merge commit {}", short_id(&m.commit.to_string()))
                    }
                    MergeKind::AlreadyMerged => {
                        format!("already there, in {}", short_id(&m.commit.to_string()))
                    }
                };
                println!(
                    "merged patch {} into {} ({how}); push {} to publish it",
                    short_id(&m.written.patch),
                    m.branch,
                    m.branch
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        PatchCmd::Create {
            base,
            head,
            title,
            body,
            out,
        } => {
            let body = body.map(text_arg).transpose()?;
            let new = NewPatch {
                base: base.as_deref(),
                head: Some(&head),
                title: title.as_deref(),
                body: body.as_deref(),
            };
            let w = patch::create(repo, &identity()?, &new)?;
            ("created patch", w, out.json)
        }
        PatchCmd::Revise { id, head, out } => (
            "revised",
            patch::revise(repo, &identity()?, &id, Some(&head))?,
            out.json,
        ),
        PatchCmd::Review {
            id,
            verdict,
            message,
            rev,
            out,
        } => {
            let message = text_arg(message)?;
            let verdict = verdict_of(verdict);
            let verb = verdict_verb(verdict);
            (
                verb,
                patch::review(repo, &identity()?, &id, rev, verdict, &message)?,
                out.json,
            )
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
            (
                "commented on",
                patch::comment(
                    repo,
                    &identity()?,
                    &id,
                    &message,
                    rev,
                    path.as_deref(),
                    line,
                )?,
                out.json,
            )
        }
        PatchCmd::Close { id, out } => ("closed", patch::close(repo, &identity()?, &id)?, out.json),
    };
    report_written(text, &written, json)?;
    Ok(ExitCode::SUCCESS)
}

fn report_written(verb: &str, w: &Written, json: bool) -> Result<()> {
    if json {
        return print_json(&WrittenJson {
            patch: &w.patch,
            event: w.event.to_string(),
            revision: w.revision,
        });
    }
    match w.revision {
        Some(n) => println!("{verb} {} (revision {n})", short_id(&w.patch)),
        None => println!("{verb} {}", short_id(&w.patch)),
    }
    Ok(())
}

fn summary(p: &PatchState) -> PatchSummary<'_> {
    let latest = p.latest();
    let count = |v: Verdict| p.reviews_of(latest.n).filter(|r| r.verdict == v).count();
    PatchSummary {
        id: &p.id,
        title: &p.title,
        status: p.status,
        author: &p.author,
        base: &p.base,
        revisions: p.revisions.len(),
        head: &latest.head,
        created_at: p.created_at,
        updated_at: p.updated_at,
        approvals: count(Verdict::Approve),
        changes_requested: count(Verdict::RequestChanges),
    }
}

fn list_line(p: &PatchState) -> String {
    let s = summary(p);
    list_row(
        &p.id,
        &p.status.to_string(),
        s.revisions,
        &p.title,
        &p.base,
        s.approvals,
        s.changes_requested,
    )
}

// Patch fields are other people's text: every one goes through `terminal`.
fn print_patch(p: &PatchState) {
    println!("{} {}", short_id(&p.id), terminal::line(&p.title));
    println!("status: {}", p.status);
    if let Some(m) = &p.merge {
        println!(
            "merged in: {} (recorded by {})",
            terminal::line(&m.commit.to_string()),
            terminal::line(&m.author.name)
        );
    }
    println!("base: {}", terminal::line(&p.base));
    println!("author: {}", terminal::line(&p.author.name));
    println!("created: {}", p.created_at.to_rfc3339());
    println!("updated: {}", p.updated_at.to_rfc3339());
    if !p.body.is_empty() {
        println!();
        println!("{}", terminal::text(p.body.trim_end()));
    }
    println!();
    println!("revisions:");
    for r in &p.revisions {
        let votes: Vec<String> = p
            .reviews_of(r.n)
            .map(|v| format!("{} {}", terminal::line(&v.author.name), v.verdict.as_str()))
            .collect();
        println!(
            "  {:>2}  {}  {}  {}{}",
            r.n,
            terminal::line(short_id(&r.head)),
            r.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            terminal::line(&r.author.name),
            if votes.is_empty() {
                String::new()
            } else {
                format!("  [{}]", votes.join(", "))
            }
        );
    }
    println!();
    println!("timeline:");
    for entry in &p.timeline {
        println!("  {}", terminal::line(&entry.headline()));
        for line in terminal::text(entry.body().trim_end()).lines() {
            println!("    {line}");
        }
    }
}
