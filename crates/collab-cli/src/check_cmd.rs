//! `git-collab check set|list`: commit checks (CI results) on the remote's
//! git-collab server, one `collab-check` call each. A CI step says
//! `git collab check set HEAD ci/test --state failure --description "2
//! tests failed"` without knowing how ssh re-splits words: the CLI quotes
//! every value for the server's tokenizer (`collab_proto::verbs::Call`).

use std::process::ExitCode;

use anyhow::{Context, Result};
use collab_proto::replies::check::{CheckList, CheckSet};
use collab_proto::verbs::Call;
use git2::Repository;

use crate::cli::CheckCmd;
use crate::cmd_io::read_value;
use collab_cli::client::remote_ssh::{run_remote_retrying, ssh_remote};
use collab_cli::client::terminal;
use collab_record::issue::short_id;

pub fn run(repo: &Repository, cmd: CheckCmd) -> Result<ExitCode> {
    match cmd {
        CheckCmd::Set {
            commit,
            name,
            state,
            description,
            url,
            remote,
            out,
        } => {
            let remote = ssh_remote(repo, &remote)?;
            let commit = full_id(repo, &commit)?;
            let mut call = Call::new("collab-check", "set")
                .arg(&remote.path)
                .arg(&commit)
                .arg(&name)
                .flag("--state", &state);
            if let Some(d) = &description {
                call = call.flag("--description", d);
            }
            if let Some(u) = &url {
                call = call.flag("--url", u);
            }
            let reply = run_remote_retrying(&remote, &call.line(), b"")?;
            read_value(&reply, out.json, |v| {
                let set: CheckSet = serde_json::from_value(v.clone())?;
                println!(
                    "{} {} on {}",
                    terminal::line(&set.name),
                    terminal::line(&set.state),
                    short_id(&set.commit)
                );
                Ok(())
            })
        }
        CheckCmd::List {
            target,
            remote,
            out,
        } => {
            let remote = ssh_remote(repo, &remote)?;
            let target = target.unwrap_or_else(|| "HEAD".into());
            // A revision this clone knows is sent as its full id; anything
            // else (a patch id) goes as written, for the server to resolve.
            let target = full_id(repo, &target).unwrap_or(target);
            let call = Call::new("collab-check", "list")
                .arg(&remote.path)
                .arg(&target);
            let reply = run_remote_retrying(&remote, &call.line(), b"")?;
            read_value(&reply, out.json, |v| {
                let list: CheckList = serde_json::from_value(v.clone())?;
                if list.checks.is_empty() {
                    println!("no checks on {}", short_id(&list.commit));
                }
                for c in &list.checks {
                    let said = c
                        .description
                        .as_deref()
                        .map(|d| format!("  {}", terminal::line(d)))
                        .unwrap_or_default();
                    println!(
                        "{:<8} {}{said}",
                        terminal::line(&c.state),
                        terminal::line(&c.name)
                    );
                }
                Ok(())
            })
        }
    }
}

/// The full id of a revision this clone knows (`HEAD`, a branch, a short
/// id), peeled to its commit.
fn full_id(repo: &Repository, rev: &str) -> Result<String> {
    let commit = repo
        .revparse_single(rev)
        .and_then(|o| o.peel_to_commit())
        .with_context(|| format!("no commit '{}' in this clone", terminal::line(rev)))?;
    Ok(commit.id().to_string())
}
