//! The client side of `collab-issue`: `git-collab issue ...` against a
//! git-collab server that holds the issues (server mode, see `mode.rs`).
//! This module builds the remote command line (from the verb table's row,
//! every argument quoted; bodies always travel on stdin with `--body-stdin`, since
//! the server caps a command line at 4 KiB), runs it with the user's ssh
//! ([`crate::client::remote_ssh`]) and reads the server's JSON replies into
//! the shared reply types ([`IssueShown`], [`IssueSummary`],
//! [`IssueWritten`]) for the text output.
//! It decides nothing: ids are resolved, input checked and writes fenced by
//! the server; the exit status is the server's (0, 1, 4 lease conflict).

use collab_proto::replies::fenced::Fenced;
use serde::Deserialize;
use serde_json::Value;

use crate::client::remote::{self, SshRemote};
use crate::client::remote_ssh::{self, RemoteOutput};
use collab_proto::verbs::Call;

/// The exit status of a refused lease token (and of lease conflicts).
pub const EXIT_CONFLICT: i32 = collab_proto::exit::FENCED as i32;

/// How many issues one `list` call asks for while paging through all.
pub const PAGE: usize = 500;

/// The most pages `list_all` follows (a bound against a server whose
/// cursor never ends).
pub const MAX_PAGES: usize = 10_000;

/// Which issues `list` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFilter {
    Open,
    Closed,
    All,
}

impl StateFilter {
    fn as_str(self) -> &'static str {
        match self {
            StateFilter::Open => "open",
            StateFilter::Closed => "closed",
            StateFilter::All => "all",
        }
    }
}

/// One `collab-issue` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Open {
        title: String,
        body: String,
        labels: Vec<String>,
    },
    Show {
        id: String,
    },
    List {
        state: StateFilter,
        labels: Vec<String>,
        limit: Option<usize>,
        after: Option<String>,
    },
    Comment {
        id: String,
        body: String,
    },
    Edit {
        id: String,
        title: Option<String>,
        body: Option<String>,
    },
    Label {
        id: String,
        add: Vec<String>,
        remove: Vec<String>,
    },
    Close {
        id: String,
        reason: Option<String>,
    },
    Reopen {
        id: String,
    },
    Link {
        id: String,
        kind: String,
        other: String,
    },
    Unlink {
        id: String,
        kind: String,
        other: String,
    },
}

impl Request {
    /// The subcommand's name.
    pub fn verb(&self) -> &'static str {
        match self {
            Request::Open { .. } => "open",
            Request::Show { .. } => "show",
            Request::List { .. } => "list",
            Request::Comment { .. } => "comment",
            Request::Edit { .. } => "edit",
            Request::Label { .. } => "label",
            Request::Close { .. } => "close",
            Request::Reopen { .. } => "reopen",
            Request::Link { .. } => "link",
            Request::Unlink { .. } => "unlink",
        }
    }

    /// True for requests that change something (and so take a lease token).
    pub fn is_write(&self) -> bool {
        !matches!(self, Request::Show { .. } | Request::List { .. })
    }
}

/// Why a request could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid issue id '{0}': expected 4 to 40 hex digits")]
    InvalidIssueId(String),
    #[error("--lease-token applies only to writes")]
    TokenOnRead,
    #[error("{0}")]
    Reply(String),
    #[error(transparent)]
    Remote(#[from] remote::Error),
}

/// An issue id, after checking it is 4 to 40 hex digits (the server
/// checks again; this keeps junk off the wire and gives the CLI's own
/// message).
fn id_arg(id: &str) -> Result<String, Error> {
    let trimmed = id.trim();
    if !(4..=40).contains(&trimmed.len()) || !trimmed.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::InvalidIssueId(id.to_string()));
    }
    Ok(trimmed.to_ascii_lowercase())
}

/// The remote command line for `req` on the server's repository
/// `repo_path`, and the bytes to send on its stdin (a body), if any. Built
/// from the verb table's row (`collab_proto::verbs::Call`), so it has the
/// shape the server parses.
pub fn remote_command(
    repo_path: &str,
    req: &Request,
    lease_token: Option<i64>,
) -> Result<(String, Option<Vec<u8>>), Error> {
    if lease_token.is_some() && !req.is_write() {
        return Err(Error::TokenOnRead);
    }
    let call = Call::new("collab-issue", req.verb()).arg(repo_path);
    let mut stdin = None;
    let call = match req {
        Request::Open {
            title,
            body,
            labels,
        } => {
            let mut call = call.flag("--title", title);
            if !body.is_empty() {
                call = call.switch("--body-stdin", true);
                stdin = Some(body.clone().into_bytes());
            }
            labels.iter().fold(call, |c, l| c.flag("--label", l))
        }
        Request::Show { id } | Request::Reopen { id } => call.arg(&id_arg(id)?),
        Request::List {
            state,
            labels,
            limit,
            after,
        } => {
            let call = call.choice("--state", state.as_str());
            let call = labels.iter().fold(call, |c, l| c.flag("--label", l));
            let call = match limit {
                Some(n) => call.int("--limit", n),
                None => call,
            };
            call.flag_opt("--after", after.as_deref())
        }
        Request::Comment { id, body } => {
            stdin = Some(body.clone().into_bytes());
            call.arg(&id_arg(id)?).switch("--body-stdin", true)
        }
        Request::Edit { id, title, body } => {
            let call = call.arg(&id_arg(id)?).flag_opt("--title", title.as_deref());
            if let Some(b) = body {
                stdin = Some(b.clone().into_bytes());
            }
            call.switch("--body-stdin", body.is_some())
        }
        Request::Label { id, add, remove } => {
            let call = add
                .iter()
                .fold(call.arg(&id_arg(id)?), |c, l| c.flag("--add", l));
            remove.iter().fold(call, |c, l| c.flag("--remove", l))
        }
        Request::Close { id, reason } => call
            .arg(&id_arg(id)?)
            .flag_opt("--reason", reason.as_deref()),
        Request::Link { id, kind, other } | Request::Unlink { id, kind, other } => {
            call.arg(&id_arg(id)?).arg(kind).arg(other)
        }
    };
    let call = match lease_token {
        Some(token) => call.int("--lease-token", token),
        None => call,
    };
    Ok((call.line(), stdin))
}

/// Runs `req` on the server behind `remote`.
pub fn run(
    remote: &SshRemote,
    req: &Request,
    lease_token: Option<i64>,
) -> Result<RemoteOutput, Error> {
    let (cmd, stdin) = remote_command(&remote.path, req, lease_token)?;
    Ok(remote_ssh::run_remote_retrying(
        remote,
        &cmd,
        stdin.as_deref().unwrap_or_default(),
    )?)
}

/// The server's replies (`collab_proto::replies::issue`): `show`
/// ([`IssueShown`]), the rows of `list` ([`IssueSummary`]) and every write
/// ([`IssueWritten`]); they read leniently (absent optional fields are
/// empty, unknown ones ignored).
pub use collab_proto::replies::issue::{
    IssueRef, IssueShown, IssueSummary, IssueWritten, Links, Person,
};

/// One page of `list`: the rows as the server sent them, and the cursor of
/// the next page (`None` on the last).
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub issues: Vec<Value>,
    pub next: Option<String>,
}

/// Reads a `list` reply: `{"issues": [...], "next": CURSOR|null}`, or a
/// bare array (one page, the last).
pub fn parse_page(stdout: &[u8]) -> Result<Page, Error> {
    let bad = |e: String| Error::Reply(format!("unexpected reply from the server to list: {e}"));
    let value: Value = serde_json::from_slice(stdout).map_err(|e| bad(e.to_string()))?;
    match value {
        Value::Array(issues) => Ok(Page { issues, next: None }),
        Value::Object(mut map) => {
            let issues = match map.remove("issues") {
                Some(Value::Array(rows)) => rows,
                _ => return Err(bad("no issues array".into())),
            };
            let next = match map.remove("next") {
                Some(Value::String(c)) if !c.is_empty() => Some(c),
                _ => None,
            };
            Ok(Page { issues, next })
        }
        _ => Err(bad("not a JSON object".into())),
    }
}

/// What ended a paged `list` early: the server's own reply (an error or
/// an ssh failure) to show as it is.
#[derive(Debug)]
pub enum Listed {
    All(Vec<Value>),
    Failed(RemoteOutput),
}

/// Every issue `state` and `labels` select, following the server's
/// cursor page by page (at most [`MAX_PAGES`]).
pub fn list_all(
    remote: &SshRemote,
    state: StateFilter,
    labels: &[String],
) -> Result<Listed, Error> {
    let mut all = Vec::new();
    let mut after = None;
    for _ in 0..MAX_PAGES {
        let req = Request::List {
            state,
            labels: labels.to_vec(),
            limit: Some(PAGE),
            after: after.take(),
        };
        let out = run(remote, &req, None)?;
        if !out.success() {
            return Ok(Listed::Failed(out));
        }
        let page = parse_page(&out.stdout)?;
        all.extend(page.issues);
        match page.next {
            Some(cursor) => after = Some(cursor),
            None => return Ok(Listed::All(all)),
        }
    }
    Err(Error::Reply(format!(
        "the server's issue list did not end after {MAX_PAGES} pages"
    )))
}

/// How many of the repository's issues have writes the server's signed
/// export does not show yet (`list`'s `export_behind`); `None` from a
/// server that does not say.
pub fn export_behind(remote: &SshRemote) -> Result<Option<u64>, Error> {
    let req = Request::List {
        state: StateFilter::All,
        labels: Vec::new(),
        limit: Some(1),
        after: None,
    };
    let out = run(remote, &req, None)?;
    if !out.success() {
        return Err(Error::Reply(format!(
            "the server refused to list issues: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let value: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::Reply(format!("unexpected reply from the server to list: {e}")))?;
    Ok(value.get("export_behind").and_then(Value::as_u64))
}

/// The one line a refused `--lease-token` is told in, from the server's
/// `fenced` reply (`collab_proto::replies::fenced`).
pub fn fenced_line(stdout: &[u8]) -> Option<String> {
    let fenced: Fenced = serde_json::from_slice(stdout).ok()?;
    if fenced.status != "fenced" {
        return None;
    }
    let issue = collab_record::issue::short_id(fenced.issue.as_deref().unwrap_or("?"));
    Some(match (fenced.holder_name.or(fenced.holder), fenced.token) {
        (Some(holder), Some(token)) => format!(
            "lease token refused: issue {issue} is held by {holder} with token {token}; nothing was written"
        ),
        // The server says why nobody holds it (the issue is closed, say).
        _ => match fenced.message {
            Some(why) => format!("lease token refused: issue {issue}: {why}; nothing was written"),
            None => format!(
                "lease token refused: issue {issue} has no live lease; nothing was written"
            ),
        },
    })
}

/// A write reply (`issue`, which an older server called `id`), if it
/// reads as one.
pub fn written(reply: &Value) -> Option<IssueWritten> {
    IssueWritten::deserialize(reply).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";

    fn cmd(req: Request, token: Option<i64>) -> (String, Option<String>) {
        let (c, stdin) = remote_command("team/r.git", &req, token).unwrap();
        (c, stdin.map(|b| String::from_utf8(b).unwrap()))
    }

    #[test]
    fn bodies_go_on_stdin_and_arguments_are_quoted() {
        let (c, stdin) = cmd(
            Request::Open {
                title: "it's broken".into(),
                body: "a\nb".into(),
                labels: vec!["bug".into()],
            },
            None,
        );
        assert_eq!(
            c,
            "collab-issue open 'team/r.git' --title 'it'\\''s broken' --body-stdin --label 'bug'"
        );
        assert_eq!(stdin.as_deref(), Some("a\nb"));
        let (c, stdin) = cmd(
            Request::Comment {
                id: "A1B2".into(),
                body: "hi".into(),
            },
            Some(7),
        );
        assert_eq!(
            c,
            "collab-issue comment 'team/r.git' 'a1b2' --body-stdin --lease-token 7"
        );
        assert_eq!(stdin.as_deref(), Some("hi"));
        let (c, stdin) = cmd(
            Request::Open {
                title: "t".into(),
                body: String::new(),
                labels: vec![],
            },
            None,
        );
        assert_eq!(
            (c.as_str(), stdin),
            ("collab-issue open 'team/r.git' --title 't'", None)
        );
    }

    #[test]
    fn every_verb_has_its_command_line() {
        let id = || ID.to_string();
        let cases = [
            (Request::Show { id: id() }, format!("show 'r' '{ID}'")),
            (
                Request::List {
                    state: StateFilter::Closed,
                    labels: vec!["a b".into()],
                    limit: Some(5),
                    after: Some("c1".into()),
                },
                "list 'r' --state closed --label 'a b' --limit 5 --after 'c1'".to_string(),
            ),
            (
                Request::Edit {
                    id: id(),
                    title: Some("T".into()),
                    body: None,
                },
                format!("edit 'r' '{ID}' --title 'T'"),
            ),
            (
                Request::Label {
                    id: id(),
                    add: vec!["x".into()],
                    remove: vec!["y".into()],
                },
                format!("label 'r' '{ID}' --add 'x' --remove 'y'"),
            ),
            (
                Request::Close {
                    id: id(),
                    reason: Some("done".into()),
                },
                format!("close 'r' '{ID}' --reason 'done'"),
            ),
            (Request::Reopen { id: id() }, format!("reopen 'r' '{ID}'")),
            (
                Request::Link {
                    id: id(),
                    kind: "blocks".into(),
                    other: "lib#abcd1234".into(),
                },
                format!("link 'r' '{ID}' 'blocks' 'lib#abcd1234'"),
            ),
            (
                Request::Unlink {
                    id: id(),
                    kind: "relates".into(),
                    other: "abcd".into(),
                },
                format!("unlink 'r' '{ID}' 'relates' 'abcd'"),
            ),
        ];
        for (req, want) in cases {
            let (c, _) = remote_command("r", &req, None).unwrap();
            assert_eq!(c, format!("collab-issue {want}"));
        }
    }

    #[test]
    fn bad_ids_and_read_tokens_never_reach_the_server() {
        for bad in [
            "",
            "abc",
            "xyz1",
            "a1b2'; rm -rf /",
            "-abcd",
            &"a".repeat(41),
        ] {
            let req = Request::Show { id: bad.into() };
            assert!(
                matches!(
                    remote_command("r", &req, None),
                    Err(Error::InvalidIssueId(_))
                ),
                "{bad:?}"
            );
        }
        let req = Request::Show { id: ID.into() };
        assert!(matches!(
            remote_command("r", &req, Some(1)),
            Err(Error::TokenOnRead)
        ));
    }

    #[test]
    fn pages_parse_with_or_without_a_cursor() {
        let page = parse_page(br#"{"issues":[{"id":"x"}],"next":"c2"}"#).unwrap();
        assert_eq!((page.issues.len(), page.next.as_deref()), (1, Some("c2")));
        let page = parse_page(br#"{"issues":[],"next":null}"#).unwrap();
        assert_eq!((page.issues.len(), page.next), (0, None));
        let page = parse_page(br#"[{"id":"x"},{"id":"y"}]"#).unwrap();
        assert_eq!((page.issues.len(), page.next), (2, None));
        assert!(parse_page(b"oops").is_err());
    }

    #[test]
    fn show_replies_read_leniently() {
        let reply = format!(
            r#"{{"id":"{ID}","title":"T","body":"","author":{{"principal":"alice","name":"Alice","key":null}},
            "created_at":"2026-12-03T07:55:58.114Z","updated_at":"2026-12-03T07:55:58.114Z",
            "status":"open","closed_reason":null,"labels":[],"comments":[],"new_field":1,
            "links":{{"blocks":["lib#abcd1234"],"blocked_by":[],"relates":[]}}}}"#
        );
        let issue: IssueShown = serde_json::from_str(&reply).unwrap();
        assert_eq!(issue.author.principal, "alice");
        assert_eq!(issue.links.blocks.len(), 1);
    }
}
