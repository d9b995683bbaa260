//! Downloads made by a `git` child process and streamed to the client as
//! git writes them: archives (`git archive`), a commit's `.patch` and
//! `.diff`, a patch revision's. The caller holds a git process slot (the
//! same limits as clone and fetch); the stream keeps it, and the child,
//! until the client has the last byte or goes away (then git is killed).

use std::path::Path;
use std::pin::Pin;
use std::process::Stdio;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse as _, Response};
use futures_util::StreamExt as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, ReadBuf};

use crate::limits::ProcessPermit;

/// Read buffer of a streamed download.
const CHUNK: usize = 64 * 1024;

/// git-args: a builder; every caller ends its options with
/// `--end-of-options` before the commits it names.
/// `git -C <repo_dir> <args>` with a clean environment (no `GIT_*`
/// variables of the server's), stdout piped, stdin and stderr closed.
pub fn git(repo_dir: &Path, args: &[String]) -> tokio::process::Command {
    let mut cmd = crate::maintenance::git::git(repo_dir);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    cmd
}

/// The output of a git child, holding the child and its process slot.
struct GitOutput {
    stdout: tokio::process::ChildStdout,
    _child: tokio::process::Child,
    _slot: ProcessPermit,
}

impl AsyncRead for GitOutput {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stdout).poll_read(cx, buf)
    }
}

/// Start `cmd` and answer 200 with its output as the body, typed
/// `content_type`, as an attachment named `filename` when given. git's
/// first bytes are read before answering: a git that fails before writing
/// anything is a 500, not an empty download.
pub async fn respond(
    mut cmd: tokio::process::Command,
    slot: ProcessPermit,
    content_type: &'static str,
    filename: Option<&str>,
) -> anyhow::Result<Response> {
    let mut child = cmd.spawn()?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("git: no stdout"))?;
    let mut head = vec![0u8; CHUNK];
    let n = stdout.read(&mut head).await?;
    if n == 0 {
        let status = child.wait().await?;
        if !status.success() {
            anyhow::bail!("git {:?} failed: {status}", cmd.as_std().get_args());
        }
    }
    head.truncate(n);
    let rest = GitOutput {
        stdout,
        _child: child,
        _slot: slot,
    };
    let head = futures_util::stream::once(async move {
        Ok::<_, std::io::Error>(axum::body::Bytes::from(head))
    });
    let body =
        Body::from_stream(head.chain(tokio_util::io::ReaderStream::with_capacity(rest, CHUNK)));
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    if let Some(name) = filename {
        let value = format!("attachment; filename=\"{}\"", safe_filename(name));
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(header::CONTENT_DISPOSITION, value);
        }
    }
    Ok(response)
}

/// `name` with every byte but ASCII letters, digits, `.`, `-` and `_`
/// replaced by `-`, so it is safe inside a quoted header value.
pub fn safe_filename(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::safe_filename;

    #[test]
    fn filenames_keep_only_safe_characters() {
        assert_eq!(
            safe_filename("app-feature/x.tar.gz"),
            "app-feature-x.tar.gz"
        );
        assert_eq!(safe_filename("a\"b\r\n.zip"), "a-b--.zip");
    }
}
