//! The client side of `collab-lease`: `git-collab issue claim|unclaim|renew|
//! claims`. Leases live on the server (in `collab.db`, never in git, so they
//! need no sync); this module builds the remote command, runs it over the
//! user's ssh with [`crate::client::remote_ssh`], and turns the server's JSON reply
//! into the text the CLI prints. It makes no lease decision itself: the exit
//! status is the server's (0 success, 1 error, 4 lease conflict).
//!
//! Issue ids are checked here (4 to 40 hex digits) before anything is sent;
//! the server resolves the prefix and always answers with the full id.

use git2::Repository;
use serde::Deserialize;

use crate::client::issue::short_id;
use crate::client::remote_ssh::{self, quote_arg, RemoteInput, RemoteOutput, SshRemote};

/// The exit status of a lease conflict.
pub const EXIT_CONFLICT: i32 = 4;

/// The longest TTL the server accepts (ten years); longer is what an
/// open-ended claim is for.
pub const MAX_TTL_SECS: u64 = 10 * 365 * 24 * 60 * 60;

/// What the user asked the server to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOp {
    /// `issue claim ID [--ttl SECS]`: acquire; no TTL is an open-ended
    /// assignment.
    Claim {
        issue: String,
        ttl_secs: Option<u64>,
    },
    /// `issue unclaim ID`: release.
    Unclaim { issue: String },
    /// `issue renew ID --ttl SECS`.
    Renew { issue: String, ttl_secs: u64 },
    /// `issue claims`: the repository's live leases.
    Claims,
}

/// Why a lease command could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid issue id '{0}': expected 4 to 40 hex digits")]
    InvalidIssueId(String),
    #[error(transparent)]
    Remote(#[from] remote_ssh::Error),
}

/// The remote command line for `op` on the server's repository `repo_path`.
pub fn remote_command(repo_path: &str, op: &LeaseOp) -> Result<String, Error> {
    let repo = quote_arg(repo_path);
    Ok(match op {
        LeaseOp::Claim { issue, ttl_secs } => {
            let mut cmd = format!("collab-lease acquire {repo} {}", issue_arg(issue)?);
            if let Some(ttl) = ttl_secs {
                cmd.push_str(&format!(" --ttl {ttl}"));
            }
            cmd
        }
        LeaseOp::Unclaim { issue } => {
            format!("collab-lease release {repo} {}", issue_arg(issue)?)
        }
        LeaseOp::Renew { issue, ttl_secs } => format!(
            "collab-lease renew {repo} {} --ttl {ttl_secs}",
            issue_arg(issue)?
        ),
        LeaseOp::Claims => format!("collab-lease list {repo}"),
    })
}

/// A quoted issue id, after checking it is 4 to 40 hex digits.
fn issue_arg(issue: &str) -> Result<String, Error> {
    let id = issue.trim();
    if !(4..=40).contains(&id.len()) || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::InvalidIssueId(issue.to_string()));
    }
    Ok(quote_arg(&id.to_ascii_lowercase()))
}

/// Run `op` against the server behind git remote `remote_name`.
pub fn run(repo: &Repository, remote_name: &str, op: &LeaseOp) -> Result<RemoteOutput, Error> {
    let remote = remote_ssh::ssh_remote(repo, remote_name)?;
    run_on(&remote, op)
}

/// Run `op` against an already resolved remote.
pub fn run_on(remote: &SshRemote, op: &LeaseOp) -> Result<RemoteOutput, Error> {
    let cmd = remote_command(&remote.path, op)?;
    Ok(remote_ssh::run_remote(remote, &cmd, RemoteInput::Empty)?)
}

/// The server's reply to acquire, renew and release (`held` on a conflict).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LeaseReply {
    pub status: String,
    pub repo: String,
    pub issue: String,
    #[serde(default)]
    pub holder: Option<String>,
    #[serde(default)]
    pub token: Option<i64>,
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// One row of the server's reply to list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ListedLease {
    pub issue: String,
    pub holder: String,
    pub token: i64,
    pub acquired_at: String,
    pub expires_at: Option<String>,
}

#[derive(Debug, Deserialize)]
struct LeaseList {
    leases: Vec<ListedLease>,
}

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
        (_, 0 | EXIT_CONFLICT) => serde_json::from_str::<LeaseReply>(&body)
            .ok()
            .map(|reply| reply_line(op, &reply)),
        _ => None,
    };
    match text {
        Some(text) if out.code == EXIT_CONFLICT => rendered.stderr.insert_str(0, &text),
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
    let line = match (reply.status.as_str(), &reply.holder) {
        ("acquired", _) => format!("claimed {id} ({})", expiry(&reply.expires_at)),
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

fn claims_line(lease: &ListedLease) -> String {
    format!(
        "{}  {}  token {}  since {}  {}\n",
        short_id(&lease.issue),
        lease.holder,
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
