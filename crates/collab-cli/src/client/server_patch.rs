//! Patches on a git-collab server, from a clone: the `collab-patch` verb
//! over SSH (list, show, diff, interdiff, review, comment, close, merge)
//! and the `refs/for/<base>` push that opens a patch or adds a revision.
//!
//! The CLI (`git-collab patch …`) uses this when the remote's server holds
//! patches (`mode`); the replies are the server's JSON (docs/ssh-verbs.md).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::client::remote::SshRemote;
use crate::client::remote_ssh::{self, RemoteOutput};
use crate::client::server_issue::Error;
use collab_proto::verbs::Call;
use collab_record::refs;

/// Rows asked for per `list` page, and most pages followed.
const PAGE: usize = 200;
const MAX_PAGES: usize = 1000;

/// `collab-patch <sub> '<repo>'` for the server's repository behind
/// `remote`, from the verb table's row; the caller adds the rest.
pub fn call(remote: &SshRemote, sub: &str) -> Call {
    Call::new("collab-patch", sub).arg(&remote.path)
}

/// Run `call` on the server behind `remote`; `stdin` is a body.
pub fn run(remote: &SshRemote, call: Call, stdin: Option<&[u8]>) -> Result<RemoteOutput, Error> {
    Ok(remote_ssh::run_remote_retrying(
        remote,
        &call.line(),
        stdin.unwrap_or_default(),
    )?)
}

/// `'<id>'` for the command line: hex digits only, so nothing else reaches
/// the server's tokenizer.
pub fn id_arg(id: &str) -> Result<String, Error> {
    let id = id.trim();
    if id.is_empty() || id.len() > 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Reply(format!(
            "invalid patch id '{}': expected 4 to 40 hex digits",
            id.escape_default()
        )));
    }
    Ok(id.to_string())
}

/// What `list_all` ended with.
#[derive(Debug)]
pub enum Listed {
    All(Vec<Value>),
    Failed(RemoteOutput),
}

/// Every patch in `state` (`open`, `merged`, `closed`, `all`), newest
/// first, following the server's cursor.
pub fn list_all(remote: &SshRemote, state: &str) -> Result<Listed, Error> {
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let call = call(remote, "list")
            .choice("--state", state)
            .int("--limit", PAGE)
            .flag_opt("--after", after.take().as_deref());
        let out = run(remote, call, None)?;
        if !out.success() {
            return Ok(Listed::Failed(out));
        }
        let bad = |e: String| Error::Reply(format!("unexpected reply to collab-patch list: {e}"));
        let mut page: Value =
            serde_json::from_slice(&out.stdout).map_err(|e| bad(e.to_string()))?;
        match page.get_mut("patches").map(Value::take) {
            Some(Value::Array(rows)) => all.extend(rows),
            _ => return Err(bad("no patches array".into())),
        }
        match page.get("next").and_then(Value::as_str) {
            Some(cursor) if !cursor.is_empty() => after = Some(cursor.to_string()),
            _ => return Ok(Listed::All(all)),
        }
    }
    Err(Error::Reply(format!(
        "the server's patch list did not end after {MAX_PAGES} pages"
    )))
}

/// A `refs/for/<base>` push.
#[derive(Debug, Clone, Default)]
pub struct ReviewPush<'a> {
    /// The git remote's name.
    pub remote: &'a str,
    /// What to propose (a commit-ish; `HEAD` by default).
    pub head: &'a str,
    pub base: &'a str,
    /// Add a revision to this patch (id or prefix) instead of opening one.
    pub patch: Option<&'a str>,
    pub issues: &'a [String],
    pub title: Option<&'a str>,
    pub description: Option<&'a str>,
}

/// What the server recorded for a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The full patch id.
    pub patch: String,
    pub revision: u32,
    /// The server's `remote:` lines (patch id, web address, hints).
    pub remote_lines: Vec<String>,
}

/// Why a review push did not record a revision.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("{0}")]
    Invalid(String),
    /// git failed or the server refused: git's own stderr.
    #[error("{0}")]
    Refused(String),
    #[error("running git: {0}")]
    Io(#[from] std::io::Error),
}

/// Push `p.head` to `refs/for/<base>` of `p.remote` with git (so the
/// user's ssh and credential setup apply) and read back which patch and
/// revision the server recorded (git reports the update under the
/// revision ref's name).
pub fn push_for_review(workdir: &Path, p: &ReviewPush<'_>) -> Result<Pushed, PushError> {
    let mut options: Vec<String> = Vec::new();
    let one_line = |what: &str, v: &str| -> Result<(), PushError> {
        if v.contains('\n') || v.contains('\r') || v.contains('\0') {
            return Err(PushError::Invalid(format!(
                "{what} must be one line for a refs/for push; put a longer description in the head commit's message"
            )));
        }
        Ok(())
    };
    if let Some(id) = p.patch {
        id_arg(id).map_err(|e| PushError::Invalid(e.to_string()))?;
        options.push(format!("patch={id}"));
    }
    for issue in p.issues {
        one_line("an issue id", issue)?;
        options.push(format!("issue={issue}"));
    }
    if let Some(t) = p.title {
        one_line("the title", t)?;
        options.push(format!("title={t}"));
    }
    if let Some(d) = p.description {
        one_line("the description", d)?;
        options.push(format!("description={d}"));
    }
    if p.base.is_empty() || p.base.starts_with('-') || p.head.starts_with('-') {
        return Err(PushError::Invalid("invalid base branch or head".into()));
    }
    let mut cmd = Command::new("git");
    cmd.current_dir(workdir).args(["push", "--porcelain"]);
    for o in &options {
        cmd.arg("-o").arg(o);
    }
    cmd.arg("--end-of-options")
        .arg(p.remote)
        .arg(format!("{}:refs/for/{}", p.head, p.base));
    let out = cmd.output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let remote_lines: Vec<String> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("remote: "))
        .map(str::to_string)
        .collect();
    let pinned = stdout
        .split(|c: char| c.is_whitespace() || c == ':')
        .find_map(refs::revision_of)
        .map(|(id, n)| (id.to_string(), n));
    match pinned {
        Some((patch, revision)) if out.status.success() => Ok(Pushed {
            patch,
            revision,
            remote_lines,
        }),
        _ => {
            // git's porcelain `!` line carries the server's reason.
            let reason = stdout
                .lines()
                .find(|l| l.starts_with('!'))
                .map(|l| l.split('\t').next_back().unwrap_or(l).to_string());
            let mut message = match reason {
                Some(r) => format!("the server refused the push: {}", r.trim()),
                None => "the push to refs/for did not record a revision".to_string(),
            };
            let errors: Vec<&str> = stderr
                .lines()
                .filter(|l| l.starts_with("error:") || l.starts_with("fatal:"))
                .collect();
            if !errors.is_empty() {
                message.push_str(&format!(" ({})", errors.join("; ")));
            }
            Err(PushError::Refused(message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_hex_only() {
        assert_eq!(id_arg(" abcd1234 ").unwrap(), "abcd1234");
        assert!(id_arg("abcd;rm -rf").is_err());
        assert!(id_arg("").is_err());
        assert!(id_arg(&"a".repeat(41)).is_err());
    }

    #[test]
    fn push_options_are_one_line() {
        let p = ReviewPush {
            remote: "origin",
            head: "HEAD",
            base: "main",
            description: Some("two\nlines"),
            ..Default::default()
        };
        let err = push_for_review(Path::new("/nonexistent"), &p).unwrap_err();
        assert!(err.to_string().contains("one line"), "{err}");
    }
}
