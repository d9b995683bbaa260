//! The client side of `collab-lease` and the work queue: `git-collab issue
//! claim|unclaim|renew|claims|next|ready|break`. Leases live on the server
//! (in `collab.db`, never in git, so they need no sync); this module builds
//! the remote command, runs it over the user's ssh with
//! [`crate::client::remote_ssh`], and turns the server's JSON reply into the
//! text the CLI prints. It makes no lease decision itself: the exit status
//! is the server's (0 success, 1 error, 3 nothing ready, 4 lease conflict).
//!
//! It also remembers, in the clone's git config, the fencing token of each
//! tenure the user took through this clone (`remote.<name>.collabLease =
//! <issue>:<token>`), so `git collab push` can add
//! `-o collab-lease=<issue>:<token>` for every one of them.
//!
//! Issue ids are checked here (4 to 40 hex digits) before anything is sent;
//! the server resolves the prefix and always answers with the full id.

use git2::Repository;
use serde::Deserialize;

use crate::client::remote::{self, SshRemote};
use crate::client::remote_ssh::{self, RemoteOutput};
use collab_proto::verbs::Call;
use collab_record::issue::short_id;

/// The exit status of a lease conflict.
pub const EXIT_CONFLICT: i32 = collab_proto::exit::CONFLICT as i32;

/// The exit status of `next` when nothing is ready.
pub const EXIT_EMPTY: i32 = collab_proto::exit::EMPTY as i32;

pub use collab_proto::limits::{MAX_NOTE_BYTES, MAX_TTL_SECS, MAX_WAIT_SECS};

/// What the user asked the server to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOp {
    /// `issue claim ID [--ttl SECS] [--note TEXT] [--wait SECS]`: acquire;
    /// no TTL is an open-ended assignment.
    Claim {
        issue: String,
        ttl_secs: Option<u64>,
        note: Option<String>,
        wait_secs: Option<u64>,
    },
    /// `issue unclaim ID`: release.
    Unclaim { issue: String },
    /// `issue renew ID --ttl SECS`.
    Renew { issue: String, ttl_secs: u64 },
    /// `issue claims`: the repository's live leases.
    Claims,
    /// `issue next [--label L]... [--ttl SECS] [--note TEXT] [--wait SECS]`:
    /// take the first ready issue.
    Next {
        labels: Vec<String>,
        ttl_secs: Option<u64>,
        note: Option<String>,
        wait_secs: Option<u64>,
    },
    /// `issue ready [--label L]...`: the ready list, in `next`'s order.
    Ready { labels: Vec<String> },
    /// `issue break ID --reason R`: end someone's tenure (rewind access).
    Break { issue: String, reason: String },
}

/// Why a lease command could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid issue id '{0}': expected 4 to 40 hex digits")]
    InvalidIssueId(String),
    #[error("invalid {what}: {problem}")]
    InvalidArgument {
        what: &'static str,
        problem: &'static str,
    },
    #[error(transparent)]
    Remote(#[from] remote::Error),
}

/// The remote command line for `op` on the server's repository `repo_path`,
/// from the verb table's row (`collab_proto::verbs::Call`).
pub fn remote_command(repo_path: &str, op: &LeaseOp) -> Result<String, Error> {
    let lease = |action| Call::new("collab-lease", action).arg(repo_path);
    Ok(match op {
        LeaseOp::Claim {
            issue,
            ttl_secs,
            note,
            wait_secs,
        } => claim_options(
            lease("acquire").arg(&issue_arg(issue)?),
            *ttl_secs,
            note.as_deref(),
            *wait_secs,
        )?,
        LeaseOp::Unclaim { issue } => lease("release").arg(&issue_arg(issue)?),
        LeaseOp::Renew { issue, ttl_secs } => lease("renew")
            .arg(&issue_arg(issue)?)
            .int("--ttl", ttl_secs),
        LeaseOp::Claims => lease("list"),
        LeaseOp::Next {
            labels,
            ttl_secs,
            note,
            wait_secs,
        } => claim_options(
            with_labels(lease("next"), labels)?,
            *ttl_secs,
            note.as_deref(),
            *wait_secs,
        )?,
        LeaseOp::Ready { labels } => {
            with_labels(Call::new("collab-issue", "ready").arg(repo_path), labels)?
        }
        LeaseOp::Break { issue, reason } => lease("break")
            .arg(&issue_arg(issue)?)
            .flag("--reason", &text_arg("--reason", reason)?),
    }
    .line())
}

fn with_labels(mut call: Call, labels: &[String]) -> Result<Call, Error> {
    for label in labels {
        if label.is_empty() || label.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::InvalidArgument {
                what: "--label",
                problem: "a label is not empty and has no spaces or control characters",
            });
        }
        call = call.flag("--label", label);
    }
    Ok(call)
}

fn claim_options(
    mut call: Call,
    ttl_secs: Option<u64>,
    note: Option<&str>,
    wait_secs: Option<u64>,
) -> Result<Call, Error> {
    if let Some(ttl) = ttl_secs {
        call = call.int("--ttl", ttl);
    }
    if let Some(note) = note {
        call = call.flag("--note", &text_arg("--note", note)?);
    }
    if let Some(wait) = wait_secs {
        if wait > MAX_WAIT_SECS {
            return Err(Error::InvalidArgument {
                what: "--wait",
                problem: "at most 3600 seconds",
            });
        }
        call = call.int("--wait", wait);
    }
    Ok(call)
}

/// A note or reason: one line, not blank, at most [`MAX_NOTE_BYTES`].
fn text_arg(what: &'static str, text: &str) -> Result<String, Error> {
    if text.trim().is_empty() || text.len() > MAX_NOTE_BYTES || text.chars().any(char::is_control) {
        return Err(Error::InvalidArgument {
            what,
            problem: "one line of 1 to 500 bytes",
        });
    }
    Ok(text.to_string())
}

/// An issue id, after checking it is 4 to 40 hex digits.
fn issue_arg(issue: &str) -> Result<String, Error> {
    let id = issue.trim();
    if !(4..=40).contains(&id.len()) || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::InvalidIssueId(issue.to_string()));
    }
    Ok(id.to_ascii_lowercase())
}

/// Run `op` against the server behind git remote `remote_name`.
pub fn run(repo: &Repository, remote_name: &str, op: &LeaseOp) -> Result<RemoteOutput, Error> {
    let remote = remote_ssh::ssh_remote(repo, remote_name)?;
    run_on(&remote, op)
}

/// Run `op` against an already resolved remote.
pub fn run_on(remote: &SshRemote, op: &LeaseOp) -> Result<RemoteOutput, Error> {
    let cmd = remote_command(&remote.path, op)?;
    Ok(remote_ssh::run_remote_retrying(remote, &cmd, b"")?)
}

/// The server's reply to acquire, renew and release (`held` on a conflict).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LeaseReply {
    pub status: String,
    pub repo: String,
    #[serde(default)]
    pub issue: String,
    #[serde(default)]
    pub holder: Option<String>,
    /// The holder's display name (`holder` is the full principal).
    #[serde(default)]
    pub holder_name: Option<String>,
    #[serde(default)]
    pub token: Option<i64>,
    #[serde(default)]
    pub expires_at: Option<String>,
    /// `locked`: the end of the lock delay.
    #[serde(default)]
    pub locked_until: Option<String>,
    /// `next`: the issue's title.
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
    /// `broken`: why.
    #[serde(default)]
    pub reason: Option<String>,
    /// `empty` (next): the labels asked for.
    #[serde(default)]
    pub labels: Vec<String>,
    /// `settled` (next --wait): the caller's queued merges that settled.
    #[serde(default)]
    pub settled: Vec<collab_proto::replies::lease::SettledPatch>,
}

/// One row of the ready list (`collab-issue ready`).
pub use collab_proto::replies::issue::ReadyIssue as ReadyRow;
use collab_proto::replies::issue::ReadyList;

use collab_proto::replies::lease::LeaseList;
/// One row of the server's reply to list.
pub use collab_proto::replies::lease::LeaseRow as ListedLease;

/// What the CLI prints and its exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

/// Turn the server's answer into the CLI's output. With `json`, the
/// server's stdout is passed through as it is; otherwise success and
/// conflict replies become one line of text. Errors (the server's `error:`
/// line, or ssh's own messages) go to stderr unchanged, and the exit
/// status is always the remote one.
pub fn render(op: &LeaseOp, out: &RemoteOutput, json: bool) -> Rendered {
    let mut rendered = Rendered {
        stdout: String::new(),
        stderr: out.stderr_text(),
        code: out.code,
    };
    if json {
        rendered.stdout = out.stdout_text();
        return rendered;
    }
    let body = out.stdout_text();
    if body.trim().is_empty() {
        return rendered;
    }
    let text = match (op, out.code) {
        (LeaseOp::Claims, 0) => serde_json::from_str::<LeaseList>(&body)
            .ok()
            .map(|list| list.leases.iter().map(claims_line).collect::<String>()),
        (LeaseOp::Ready { .. }, 0) => serde_json::from_str::<ReadyList>(&body)
            .ok()
            .map(|list| list.issues.iter().map(ready_line).collect::<String>()),
        (_, 0 | EXIT_CONFLICT | EXIT_EMPTY) => serde_json::from_str::<LeaseReply>(&body)
            .ok()
            .map(|reply| reply_line(op, &reply)),
        _ => None,
    };
    match text {
        Some(text) if matches!(out.code, EXIT_CONFLICT | EXIT_EMPTY) => {
            rendered.stderr.insert_str(0, &text)
        }
        Some(text) => rendered.stdout = text,
        // Not a reply we know: show it rather than lose it.
        None => rendered.stdout = body,
    }
    rendered
}

fn expiry(expires_at: &Option<String>) -> String {
    match expires_at {
        Some(at) => format!("expires {at}"),
        None => "no expiry".to_string(),
    }
}

fn reply_line(op: &LeaseOp, reply: &LeaseReply) -> String {
    let id = short_id(&reply.issue);
    // People by their display name; an older server sends only `holder`.
    let holder = reply.holder_name.as_ref().or(reply.holder.as_ref());
    let line = match (reply.status.as_str(), holder) {
        ("acquired", _) => match &reply.title {
            Some(title) => format!("claimed {id} {title} ({})", expiry(&reply.expires_at)),
            None => format!("claimed {id} ({})", expiry(&reply.expires_at)),
        },
        ("empty", _) if reply.labels.is_empty() => "nothing is ready".to_string(),
        ("empty", _) => format!("nothing is ready with labels {}", reply.labels.join(", ")),
        ("settled", _) => {
            let each: Vec<String> = reply
                .settled
                .iter()
                .map(|p| match &p.reason {
                    Some(why) => format!("{} {} ({why})", short_id(&p.patch), p.state),
                    None => format!("{} {}", short_id(&p.patch), p.state),
                })
                .collect();
            format!(
                "nothing claimed: your queued patches settled: {}",
                each.join(", ")
            )
        }
        ("locked", Some(holder)) => format!(
            "issue {id} is in its lock delay after {holder}'s lease expired (until {})",
            reply.locked_until.as_deref().unwrap_or("?")
        ),
        ("broken", Some(holder)) => format!(
            "broke {holder}'s claim on {id} (token {})",
            reply.token.unwrap_or_default()
        ),
        ("free", _) => format!("issue {id} was not claimed"),
        ("renewed", _) => format!("renewed {id} ({})", expiry(&reply.expires_at)),
        ("released", _) => format!("unclaimed {id}"),
        ("held", Some(holder)) => format!("issue {id} is claimed by {holder}"),
        ("held", None) if matches!(op, LeaseOp::Renew { .. }) => {
            format!("issue {id} is not claimed by you (claim it again)")
        }
        ("held", None) => format!("issue {id} is not claimed by you"),
        (other, _) => format!("{other} {id}"),
    };
    line + "\n"
}

fn ready_line(row: &ReadyRow) -> String {
    let priority = row
        .priority
        .map(|p| format!("P{p}"))
        .unwrap_or_else(|| "-".into());
    let labels = if row.labels.is_empty() {
        String::new()
    } else {
        format!("  [{}]", row.labels.join(", "))
    };
    format!("{}  {priority}  {}{labels}\n", short_id(&row.id), row.title)
}

/// The git config key holding the remembered tokens for `remote`.
fn token_key(remote: &str) -> String {
    format!("remote.{remote}.collabLease")
}

/// Remember in the clone that `issue`'s tenure under `remote` has `token`
/// (replacing an older token of that issue).
pub fn remember_token(
    repo: &Repository,
    remote: &str,
    issue: &str,
    token: i64,
) -> Result<(), git2::Error> {
    let mut config = repo.config()?.open_level(git2::ConfigLevel::Local)?;
    forget_in(&mut config, remote, issue)?;
    config.set_multivar(&token_key(remote), "^$", &format!("{issue}:{token}"))
}

/// Forget `issue`'s remembered token under `remote` (after an unclaim).
pub fn forget_token(repo: &Repository, remote: &str, issue: &str) -> Result<(), git2::Error> {
    let mut config = repo.config()?.open_level(git2::ConfigLevel::Local)?;
    forget_in(&mut config, remote, issue)
}

fn forget_in(config: &mut git2::Config, remote: &str, issue: &str) -> Result<(), git2::Error> {
    // The issue id is hex, so it needs no escaping in the pattern.
    match config.remove_multivar(&token_key(remote), &format!("^{issue}:")) {
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(()),
        other => other,
    }
}

/// Every `(issue, token)` remembered for `remote`.
pub fn remembered_tokens(
    repo: &Repository,
    remote: &str,
) -> Result<Vec<(String, i64)>, git2::Error> {
    let config = repo.config()?;
    let mut found = Vec::new();
    let mut entries = config.multivar(&token_key(remote), None)?;
    while let Some(entry) = entries.next() {
        let entry = entry?;
        if let Some((issue, token)) = entry.value().ok().and_then(|v| v.split_once(':')) {
            if let Ok(token) = token.parse() {
                found.push((issue.to_string(), token));
            }
        }
    }
    Ok(found)
}

/// The `git push` options that fence a push on the remembered tenures.
pub fn push_options(tokens: &[(String, i64)]) -> Vec<String> {
    tokens
        .iter()
        .flat_map(|(issue, token)| ["-o".to_string(), format!("collab-lease={issue}:{token}")])
        .collect()
}

fn claims_line(lease: &ListedLease) -> String {
    format!(
        "{}  {}  token {}  since {}  {}\n",
        short_id(&lease.issue),
        lease.holder_name.as_deref().unwrap_or(&lease.holder),
        lease.token,
        lease.acquired_at,
        expiry(&lease.expires_at)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";

    fn output(stdout: &str, stderr: &str, code: i32) -> RemoteOutput {
        RemoteOutput {
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            code,
        }
    }

    fn claim(issue: &str, ttl_secs: Option<u64>) -> LeaseOp {
        LeaseOp::Claim {
            issue: issue.into(),
            ttl_secs,
            note: None,
            wait_secs: None,
        }
    }

    #[test]
    fn remote_commands_are_quoted() {
        assert_eq!(
            remote_command("team/r.git", &claim("A1B2", None)).unwrap(),
            "collab-lease acquire 'team/r.git' 'a1b2'"
        );
        assert_eq!(
            remote_command("r", &claim(ID, Some(300))).unwrap(),
            format!("collab-lease acquire 'r' '{ID}' --ttl 300")
        );
        assert_eq!(
            remote_command(
                "r",
                &LeaseOp::Renew {
                    issue: "abcd".into(),
                    ttl_secs: 60
                }
            )
            .unwrap(),
            "collab-lease renew 'r' 'abcd' --ttl 60"
        );
        assert_eq!(
            remote_command(
                "it's",
                &LeaseOp::Unclaim {
                    issue: "abcd".into()
                }
            )
            .unwrap(),
            "collab-lease release 'it'\\''s' 'abcd'"
        );
        assert_eq!(
            remote_command("r", &LeaseOp::Claims).unwrap(),
            "collab-lease list 'r'"
        );
    }

    #[test]
    fn bad_issue_ids_never_reach_the_server() {
        for bad in [
            "",
            "abc",
            "xyz1",
            "a1b2'; rm -rf /",
            "-abcd",
            &"a".repeat(41),
        ] {
            assert!(
                matches!(
                    remote_command("r", &claim(bad, None)),
                    Err(Error::InvalidIssueId(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn claim_renders_expiry_or_none() {
        let reply = format!(
            r#"{{"status":"acquired","repo":"r.git","issue":"{ID}","holder":"SHA256:x","token":1,"expires_at":"2026-09-05T12:05:00Z"}}"#
        );
        let r = render(&claim("a1b2", None), &output(&reply, "", 0), false);
        assert_eq!(
            r,
            Rendered {
                stdout: "claimed a1b2c3d4 (expires 2026-09-05T12:05:00Z)\n".into(),
                stderr: String::new(),
                code: 0
            }
        );
        let reply = reply.replace("\"2026-09-05T12:05:00Z\"", "null");
        let r = render(&claim("a1b2", None), &output(&reply, "", 0), false);
        assert_eq!(r.stdout, "claimed a1b2c3d4 (no expiry)\n");
    }

    #[test]
    fn conflict_goes_to_stderr_with_exit_4() {
        let reply = format!(
            r#"{{"status":"held","repo":"r.git","issue":"{ID}","holder":"alice","expires_at":null}}"#
        );
        let r = render(&claim("a1b2", None), &output(&reply, "", 4), false);
        assert_eq!(r.stdout, "");
        assert_eq!(r.stderr, "issue a1b2c3d4 is claimed by alice\n");
        assert_eq!(r.code, 4);
        // --json passes the server's JSON through, exit code included.
        let r = render(&claim("a1b2", None), &output(&reply, "", 4), true);
        assert_eq!((r.stdout.as_str(), r.code), (reply.as_str(), 4));
    }

    #[test]
    fn errors_pass_through() {
        let out = output("", "error: issue not found\n", 1);
        let r = render(&claim("a1b2", None), &out, false);
        assert_eq!(
            r,
            Rendered {
                stdout: String::new(),
                stderr: "error: issue not found\n".into(),
                code: 1
            }
        );
        let ssh = output(
            "",
            "ssh: connect to host x port 22: Connection refused\n",
            255,
        );
        assert_eq!(render(&LeaseOp::Claims, &ssh, false).code, 255);
    }

    #[test]
    fn queue_commands_are_quoted_and_checked() {
        let next = LeaseOp::Next {
            labels: vec!["bug".into(), "it's".into()],
            ttl_secs: Some(60),
            note: Some("on it".into()),
            wait_secs: Some(30),
        };
        assert_eq!(
            remote_command("r", &next).unwrap(),
            "collab-lease next 'r' --label 'bug' --label 'it'\\''s' --ttl 60 --note 'on it' --wait 30"
        );
        assert_eq!(
            remote_command("r", &LeaseOp::Ready { labels: vec![] }).unwrap(),
            "collab-issue ready 'r'"
        );
        let brk = LeaseOp::Break {
            issue: "ABCD".into(),
            reason: "agent died".into(),
        };
        assert_eq!(
            remote_command("r", &brk).unwrap(),
            "collab-lease break 'r' 'abcd' --reason 'agent died'"
        );
        for bad in [
            LeaseOp::Next {
                labels: vec!["a b".into()],
                ttl_secs: None,
                note: None,
                wait_secs: None,
            },
            LeaseOp::Next {
                labels: vec![],
                ttl_secs: None,
                note: Some("two\nlines".into()),
                wait_secs: None,
            },
            LeaseOp::Next {
                labels: vec![],
                ttl_secs: None,
                note: None,
                wait_secs: Some(3601),
            },
            LeaseOp::Break {
                issue: "abcd".into(),
                reason: " ".into(),
            },
        ] {
            assert!(
                matches!(
                    remote_command("r", &bad),
                    Err(Error::InvalidArgument { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn next_and_ready_render() {
        let next = LeaseOp::Next {
            labels: vec!["bug".into()],
            ttl_secs: None,
            note: None,
            wait_secs: None,
        };
        let reply = format!(
            r#"{{"status":"acquired","repo":"r.git","issue":"{ID}","holder":"a","token":3,"expires_at":null,"title":"Fix it","labels":["bug"],"priority":1}}"#
        );
        let r = render(&next, &output(&reply, "", 0), false);
        assert_eq!(r.stdout, "claimed a1b2c3d4 Fix it (no expiry)\n");
        let r = render(
            &next,
            &output(
                r#"{"status":"empty","repo":"r.git","labels":["bug"]}"#,
                "",
                3,
            ),
            false,
        );
        assert_eq!((r.stdout.as_str(), r.code), ("", 3));
        assert_eq!(r.stderr, "nothing is ready with labels bug\n");
        let ready = format!(
            r#"{{"repo":"r.git","issues":[{{"id":"{ID}","title":"Fix it","labels":["bug"],"priority":0,"created_at":"x"}}]}}"#
        );
        let r = render(
            &LeaseOp::Ready { labels: vec![] },
            &output(&ready, "", 0),
            false,
        );
        assert_eq!(r.stdout, "a1b2c3d4  P0  Fix it  [bug]\n");
        let locked = format!(
            r#"{{"status":"locked","repo":"r.git","issue":"{ID}","holder":"bob","locked_until":"T"}}"#
        );
        let r = render(&claim("a1b2", None), &output(&locked, "", 4), false);
        assert_eq!(
            r.stderr,
            "issue a1b2c3d4 is in its lock delay after bob's lease expired (until T)\n"
        );
    }

    #[test]
    fn tokens_are_remembered_per_issue_and_become_push_options() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        remember_token(&repo, "origin", ID, 1).unwrap();
        remember_token(&repo, "origin", "ffff0000", 7).unwrap();
        remember_token(&repo, "origin", ID, 2).unwrap();
        remember_token(&repo, "other", ID, 9).unwrap();
        let mut tokens = remembered_tokens(&repo, "origin").unwrap();
        tokens.sort();
        assert_eq!(tokens, [(ID.to_string(), 2), ("ffff0000".to_string(), 7)]);
        forget_token(&repo, "origin", "ffff0000").unwrap();
        forget_token(&repo, "origin", "ffff0000").unwrap();
        let tokens = remembered_tokens(&repo, "origin").unwrap();
        assert_eq!(
            push_options(&tokens),
            ["-o".to_string(), format!("collab-lease={ID}:2")]
        );
        assert_eq!(
            remembered_tokens(&repo, "other").unwrap(),
            [(ID.to_string(), 9)]
        );
    }

    #[test]
    fn claims_render_one_line_each() {
        let reply = format!(
            r#"{{"leases":[{{"issue":"{ID}","holder":"bob","token":2,"acquired_at":"2026-09-05T12:00:00Z","expires_at":null}}]}}"#
        );
        let r = render(&LeaseOp::Claims, &output(&reply, "", 0), false);
        assert_eq!(
            r.stdout,
            "a1b2c3d4  bob  token 2  since 2026-09-05T12:00:00Z  no expiry\n"
        );
        let r = render(&LeaseOp::Claims, &output(r#"{"leases":[]}"#, "", 0), false);
        assert_eq!(r.stdout, "");
    }
}
