//! Read-only git over HTTP (the "smart" protocol): `GET
//! /{repo}/info/refs?service=git-upload-pack` and `POST
//! /{repo}/git-upload-pack` run `git upload-pack --stateless-rpc` (with
//! `--advertise-refs` for the first), the request body streamed to its stdin
//! (gunzipped when git compressed it) and its stdout streamed back.
//! Protocol v2 is passed through: the `Git-Protocol` header becomes
//! `GIT_PROTOCOL`. Pushing (`git-receive-pack`) is refused with 403 and a
//! message git shows to the user. A repository anonymous HTTP may not read
//! answers exactly like a missing one (404, `repository not found`).

use std::io::Write as _;
use std::process::Stdio;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde::Deserialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::Command;

use super::AppState;
use crate::app::App;
use crate::repos::RepoEntry;

/// The body of every "no such repository" answer, visible or not.
const NOT_FOUND_BODY: &str = "repository not found\n";

#[derive(Debug, Deserialize)]
pub struct InfoRefsQuery {
    service: Option<String>,
}

/// The visible repository, or `None` (blocking filesystem work is tiny:
/// a few `stat`s and the policy file).
async fn visible(app: &Arc<App>, requested: String) -> Option<RepoEntry> {
    let app = app.clone();
    tokio::task::spawn_blocking(move || super::visible_repo(&app, &requested))
        .await
        .ok()
        .flatten()
}

fn not_found() -> Response {
    plain(StatusCode::NOT_FOUND, NOT_FOUND_BODY.to_string())
}

/// A `text/plain` answer: git prints such bodies as `remote: ...` lines.
fn plain(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

fn push_refused(st: &AppState, headers: &HeaderMap, entry: &RepoEntry) -> Response {
    plain(
        StatusCode::FORBIDDEN,
        format!(
            "push over HTTP is not supported: HTTP is read-only.\n\
             Push over SSH instead: git push {}\n",
            super::ssh_clone_url(st, headers, entry)
        ),
    )
}

/// `Git-Protocol` passed on only if it looks like `version=2`.
fn git_protocol(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("git-protocol")?.to_str().ok()?;
    let sane = value.len() <= 128
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'=' | b':' | b'.' | b'_' | b'-'));
    sane.then(|| value.to_string())
}

/// `git upload-pack --stateless-rpc [extra] <dir>` with a clean
/// environment.
fn upload_pack(entry: &RepoEntry, headers: &HeaderMap, advertise: bool) -> Command {
    let mut cmd = Command::new("git");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(&key);
        }
    }
    cmd.args([
        "-c",
        "uploadpack.allowFilter=true",
        "upload-pack",
        "--stateless-rpc",
    ]);
    if advertise {
        cmd.arg("--advertise-refs");
    }
    cmd.arg(&entry.path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(protocol) = git_protocol(headers) {
        cmd.env("GIT_PROTOCOL", protocol);
    }
    cmd
}

/// A pkt-line: four hex digits of length (including themselves), then data.
fn pkt_line(data: &str) -> String {
    format!("{:04x}{data}", data.len() + 4)
}

pub async fn info_refs(
    State(st): State<AppState>,
    Path(repo): Path<String>,
    Query(query): Query<InfoRefsQuery>,
    headers: HeaderMap,
) -> Response {
    let Some(entry) = visible(&st.app, repo).await else {
        return not_found();
    };
    match query.service.as_deref() {
        Some("git-upload-pack") => {}
        Some("git-receive-pack") => return push_refused(&st, &headers, &entry),
        _ => {
            return plain(
                StatusCode::FORBIDDEN,
                "only git's smart HTTP protocol is served here\n".into(),
            )
        }
    }
    let output = match upload_pack(&entry, &headers, true).output().await {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            tracing::error!(
                "git upload-pack --advertise-refs {}: {}",
                entry.path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "git failed\n".into());
        }
        Err(e) => {
            tracing::error!("cannot run git upload-pack: {e}");
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "git failed\n".into());
        }
    };
    // Protocol v0/v1 clients expect the service announcement first; v2
    // answers with its capability advertisement directly.
    let v2 = git_protocol(&headers).is_some_and(|p| p.contains("version=2"));
    let mut body = Vec::with_capacity(output.stdout.len() + 40);
    if !v2 {
        body.extend_from_slice(pkt_line("# service=git-upload-pack\n").as_bytes());
        body.extend_from_slice(b"0000");
    }
    body.extend_from_slice(&output.stdout);
    (
        [
            (
                header::CONTENT_TYPE,
                "application/x-git-upload-pack-advertisement",
            ),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub async fn upload_pack_post(
    State(app): State<Arc<App>>,
    Path(repo): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(entry) = visible(&app, repo).await else {
        return not_found();
    };
    let gzipped = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip") || v.eq_ignore_ascii_case("x-gzip"));
    let mut child = match upload_pack(&entry, &headers, false).spawn() {
        Ok(child) => child,
        Err(e) => {
            tracing::error!("cannot run git upload-pack: {e}");
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "git failed\n".into());
        }
    };
    let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "git failed\n".into());
    };

    // Request body -> stdin, gunzipping on the way when needed.
    tokio::spawn(async move {
        let mut chunks = body.into_data_stream();
        let mut gunzip = gzipped.then(|| flate2::write::GzDecoder::new(Vec::new()));
        while let Some(chunk) = chunks.next().await {
            let Ok(chunk) = chunk else { return };
            let data = match gunzip.as_mut() {
                Some(decoder) => {
                    if decoder.write_all(&chunk).is_err() {
                        return;
                    }
                    std::mem::take(decoder.get_mut())
                }
                None => chunk.to_vec(),
            };
            if stdin.write_all(&data).await.is_err() {
                return;
            }
        }
        // A corrupt gzip stream ends the request early; upload-pack then
        // reports the truncated request itself.
        if let Some(Ok(rest)) = gunzip.map(|d| d.finish()) {
            let _ = stdin.write_all(&rest).await;
        }
        // Dropping stdin closes it: upload-pack sees the end of the request.
    });

    // Reap the child and log what it said on stderr (bounded).
    let path = entry.path.clone();
    tokio::spawn(async move {
        let mut said = Vec::new();
        let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut said).await;
        match child.wait().await {
            Ok(status) if status.success() => {}
            Ok(status) => tracing::info!(
                "git upload-pack {} over HTTP exited with {status}: {}",
                path.display(),
                String::from_utf8_lossy(&said).trim()
            ),
            Err(e) => tracing::warn!("waiting for git upload-pack: {e}"),
        }
    });

    (
        [
            (header::CONTENT_TYPE, "application/x-git-upload-pack-result"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(tokio_util::io::ReaderStream::new(stdout)),
    )
        .into_response()
}

pub async fn receive_pack_post(
    State(st): State<AppState>,
    Path(repo): Path<String>,
    headers: HeaderMap,
) -> Response {
    match visible(&st.app, repo).await {
        Some(entry) => push_refused(&st, &headers, &entry),
        None => not_found(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkt_lines_and_protocol_header() {
        assert_eq!(
            pkt_line("# service=git-upload-pack\n"),
            "001e# service=git-upload-pack\n"
        );
        let mut h = HeaderMap::new();
        assert_eq!(git_protocol(&h), None);
        h.insert("git-protocol", "version=2".parse().unwrap());
        assert_eq!(git_protocol(&h).as_deref(), Some("version=2"));
        h.insert("git-protocol", "version=2; rm -rf /".parse().unwrap());
        assert_eq!(git_protocol(&h), None);
    }
}
