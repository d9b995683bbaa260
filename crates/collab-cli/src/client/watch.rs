//! The client side of `collab-events watch`: `git-collab events`. Builds
//! the remote command for the clone's server repository (or every
//! repository with `--all`), streams the server's JSON lines through ssh,
//! and renders each one as it arrives: unchanged with `--json`, else as a
//! line of text. Heartbeats are dropped from the text form. The exit status
//! is the server's (0 after a `--no-follow` replay; 1 when cut off, with
//! the server's `error:` line on stderr).

use std::io::Write;

use serde_json::Value;

use crate::client::remote::{self, SshRemote};
use crate::client::remote_ssh::{self, RemoteInput, RemoteOutput};
use collab_proto::verbs::Call;

/// What the user asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watch {
    /// Every repository the key can read, not just the remote's.
    pub all: bool,
    pub since: Option<u64>,
    /// Keep following after the replay.
    pub follow: bool,
    pub types: Vec<String>,
}

/// The remote command line for `watch` against `repo_path`, from the verb
/// table's row.
pub fn remote_command(repo_path: &str, watch: &Watch) -> String {
    let call = Call::new("collab-events", "watch").when(!watch.all, |c| c.arg(repo_path));
    let call = match watch.since {
        Some(since) => call.int("--since", since),
        None => call,
    };
    watch
        .types
        .iter()
        .fold(call, |c, pattern| c.flag("--type", pattern))
        .switch("--no-follow", !watch.follow)
        .line()
}

/// One server line as text: `seq  time  type  repo  object  actor`; `None`
/// for heartbeats (and for anything that is not an event line).
pub fn text_line(line: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line).ok()?;
    let kind = v["type"].as_str()?;
    if kind == "heartbeat" {
        return None;
    }
    let field = |name: &str| v[name].as_str().unwrap_or("-").to_string();
    let object = v["object_id"]
        .as_str()
        .map(|o| {
            if o.len() == 40 && o.bytes().all(|b| b.is_ascii_hexdigit()) {
                o[..8].to_string()
            } else {
                o.to_string()
            }
        })
        .unwrap_or_else(|| "-".into());
    Some(format!(
        "{:>6}  {}  {:<22} {}  {}  {}",
        v["seq"].as_i64().unwrap_or(0),
        field("at"),
        kind,
        field("repo"),
        object,
        // The display name where the server sends one (older servers: the
        // principal).
        v["actor_name"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| field("actor"))
    ))
}

/// Splits the stream into lines and renders each as soon as it is whole.
struct Renderer<'a> {
    json: bool,
    pending: Vec<u8>,
    out: &'a mut dyn Write,
}

impl Write for Renderer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end();
            if self.json {
                writeln!(self.out, "{text}")?;
            } else if let Some(rendered) = text_line(text) {
                writeln!(self.out, "{rendered}")?;
            }
            self.out.flush()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Run the watch against `remote`, rendering into `out` as lines arrive.
/// An incomplete last line (a cut-off stream) is dropped.
pub fn run(
    remote: &SshRemote,
    watch: &Watch,
    json: bool,
    out: &mut dyn Write,
) -> Result<RemoteOutput, remote::Error> {
    let cmd = remote_command(&remote.path, watch);
    let mut renderer = Renderer {
        json,
        pending: Vec::new(),
        out,
    };
    remote_ssh::run_remote_into(remote, &cmd, RemoteInput::Empty, &mut renderer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines() {
        let w = Watch {
            since: Some(5),
            types: vec!["lease.*".into()],
            ..Default::default()
        };
        assert_eq!(
            remote_command("team/app.git", &w),
            "collab-events watch 'team/app.git' --since 5 --type 'lease.*' --no-follow"
        );
        let all = Watch {
            all: true,
            follow: true,
            ..Default::default()
        };
        assert_eq!(remote_command("x", &all), "collab-events watch");
    }

    #[test]
    fn text_and_heartbeats() {
        let line = r#"{"schema":1,"seq":7,"at":"2026-01-01T00:00:00Z","type":"ref.updated","repo":"r.git","object_id":"refs/heads/main","actor":"alice","payload":{}}"#;
        let text = text_line(line).unwrap();
        assert!(
            text.contains("ref.updated") && text.contains("refs/heads/main"),
            "{text}"
        );
        assert!(text.ends_with("alice"), "{text}");
        let named = r#"{"schema":1,"seq":8,"at":"2026-01-01T00:00:00Z","type":"ref.updated","repo":"r.git","object_id":"refs/heads/main","actor":"SHA256:GlgxX2CwAbCdEfGhIjKlMnOpQrStUvWxYz0123456789a","actor_name":"Build Bot","payload":{}}"#;
        let text = text_line(named).unwrap();
        assert!(
            text.ends_with("Build Bot") && !text.contains("SHA256:"),
            "{text}"
        );
        assert!(text_line(r#"{"type":"heartbeat","seq":7}"#).is_none());
        assert!(text_line("not json").is_none());
    }
}
