//! Read-only git over HTTP (the "smart" protocol): `GET
//! /{repo}/info/refs?service=git-upload-pack` and `POST
//! /{repo}/git-upload-pack` run `git upload-pack --stateless-rpc` (with
//! `--advertise-refs` for the first), the request body streamed to its stdin
//! (gunzipped when git compressed it) and its stdout streamed back.
//! Protocol v2 is passed through: the `Git-Protocol` header becomes
//! `GIT_PROTOCOL`. Pushing (`git-receive-pack`) is refused with 403 and a
//! message git shows to the user. A repository anonymous HTTP may not read
//! answers exactly like a missing one (404, `repository not found`).
//!
//! Limits. Every `git upload-pack` takes a slot from the git process gate
//! (per client address, and server-wide), or the client gets 503 with
//! `Retry-After`. The request body, after gunzipping, may be at most
//! `http.max_request_body` bytes: it is inflated a kilobyte of input at a
//! time, so memory stays small whatever the compression ratio, and a body
//! that grows past the limit before git has answered gets 413 (git answers
//! only once it has read the whole request).

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{FutureExt as _, StreamExt as _};
use serde::Deserialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::ChildStdin;

use super::state::AppState;
use crate::app::App;
use crate::limits::{self, http_principal, Busy, ProcessPermit};
use crate::repos::RepoEntry;
use crate::upload_pack::{self, answers};

/// Gzip input inflated per step: bounds the output of one step (deflate
/// expands at most ~1032:1) whatever the chunk sizes the client sends.
const INFLATE_STEP: usize = 1024;

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
    tokio::task::spawn_blocking(move || super::state::visible_repo(&app, &requested))
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
            super::state::ssh_clone_url(st, headers, entry)
        ),
    )
}

/// `Git-Protocol` passed on only if it looks like `version=2`.
fn git_protocol(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("git-protocol")?.to_str().ok()?;
    upload_pack::sane_protocol(value).then(|| value.to_string())
}

/// A git process slot for `peer`, or the 503 to answer.
pub(super) async fn process_slot(app: &App, peer: SocketAddr) -> Result<ProcessPermit, Response> {
    let principal = http_principal(peer);
    app.limits.git.acquire(&principal).await.map_err(|busy| {
        limits::note_refusal("git_process", busy.label(), || {
            format!("refused HTTP git for {principal}")
        });
        busy_response(busy)
    })
}

pub(super) fn busy_response(busy: Busy) -> Response {
    let mut response = plain(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{}\n", busy.message()),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
    response
}

fn too_large(limit: u64) -> Response {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "request too large: the request body may be at most {limit} bytes (after gunzip)\n"
        ),
    )
}

/// Why the request body stopped flowing into git.
#[derive(Debug, PartialEq, Eq)]
enum BodyEnd {
    /// All of it was written.
    Complete,
    /// It grew past `http.max_request_body`.
    TooLarge,
    /// The client's stream broke, the gzip data was corrupt, or git
    /// stopped reading: git reports a truncated request itself.
    Cut,
}

/// Stream `body` into git's stdin, gunzipping when asked, counting both
/// the bytes received and the bytes written against `limit`. Dropping
/// `stdin` at the end closes it: upload-pack sees the end of the request.
async fn feed_body(body: Body, gzipped: bool, limit: u64, mut stdin: ChildStdin) -> BodyEnd {
    let mut chunks = body.into_data_stream();
    let mut inflater = gzipped.then(|| flate2::write::GzDecoder::new(Vec::new()));
    let (mut received, mut written) = (0u64, 0u64);
    while let Some(chunk) = chunks.next().await {
        let Ok(chunk) = chunk else {
            return BodyEnd::Cut;
        };
        received += chunk.len() as u64;
        if received > limit {
            return BodyEnd::TooLarge;
        }
        let Some(decoder) = inflater.as_mut() else {
            written += chunk.len() as u64;
            if stdin.write_all(&chunk).await.is_err() {
                return BodyEnd::Cut;
            }
            continue;
        };
        for piece in chunk.chunks(INFLATE_STEP) {
            if decoder.write_all(piece).is_err() {
                return BodyEnd::Cut;
            }
            let out = std::mem::take(decoder.get_mut());
            written += out.len() as u64;
            if written > limit {
                return BodyEnd::TooLarge;
            }
            if stdin.write_all(&out).await.is_err() {
                return BodyEnd::Cut;
            }
        }
    }
    if let Some(decoder) = inflater {
        let Ok(rest) = decoder.finish() else {
            return BodyEnd::Cut;
        };
        if written + rest.len() as u64 > limit {
            return BodyEnd::TooLarge;
        }
        if stdin.write_all(&rest).await.is_err() {
            return BodyEnd::Cut;
        }
    }
    BodyEnd::Complete
}

/// A pkt-line: four hex digits of length (including themselves), then data.
fn pkt_line(data: &str) -> String {
    format!("{:04x}{data}", data.len() + 4)
}

pub async fn info_refs(
    State(st): State<AppState>,
    Path(repo): Path<String>,
    Query(query): Query<InfoRefsQuery>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
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
    // Protocol v0/v1 clients expect the service announcement first; v2
    // answers with its capability advertisement directly.
    let protocol = git_protocol(&headers).unwrap_or_default();
    let v2 = protocol.contains("version=2");
    // Kept before, in this ref state: sent by the server itself.
    let mut keep = None;
    if let Some(settings) = st.app.config.pack_cache_settings(&entry.path) {
        match upload_pack::kept_advertisement(&settings, &entry.path, &protocol).await {
            Ok(bytes) => return advertisement(v2, &bytes),
            Err(k) => keep = k,
        }
    }
    let slot = match process_slot(&st.app, peer).await {
        Ok(slot) => slot,
        Err(busy) => return busy,
    };
    let printed = upload_pack::advertise(
        &entry.path,
        git_protocol(&headers).as_deref(),
        st.app.config.git.nice,
        keep,
    )
    .await;
    drop(slot);
    let printed = match printed {
        Ok(printed) => printed,
        Err(e) => {
            tracing::error!(
                "git upload-pack --advertise-refs {}: {e:#}",
                entry.path.display()
            );
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "git failed\n".into());
        }
    };
    advertisement(v2, &printed)
}

/// The answer to `GET info/refs`: what `upload-pack --advertise-refs`
/// printed, after the service announcement v0/v1 clients expect first (v2
/// clients get the capability advertisement directly).
fn advertisement(v2: bool, printed: &[u8]) -> Response {
    let mut body = Vec::with_capacity(printed.len() + 40);
    if !v2 {
        body.extend_from_slice(pkt_line("# service=git-upload-pack\n").as_bytes());
        body.extend_from_slice(b"0000");
    }
    body.extend_from_slice(printed);
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
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(entry) = visible(&app, repo).await else {
        return not_found();
    };
    let limit = app.config.http.max_request_body;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return too_large(limit);
    }
    let gzipped = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip") || v.eq_ignore_ascii_case("x-gzip"));
    let settings = app.config.pack_cache_settings(&entry.path);
    // A protocol v2 fetch or ls-refs answered before, in this ref state:
    // sent from the cache by the server itself (see git_cached.rs).
    let mut body = body;
    let mut fill: Option<upload_pack::Fill> = None;
    let protocol = git_protocol(&headers).filter(|p| upload_pack::is_v2(p));
    if let (Some(settings), Some(protocol)) = (settings.clone(), protocol) {
        let (chunks, rest) = buffer_body(body, answers::MAX_CACHED_REQUEST).await;
        let whole = rest.is_none();
        body = rebuild_body(chunks.clone(), rest);
        let request = whole
            .then(|| inflate_whole(&chunks, gzipped, answers::MAX_CACHED_REQUEST))
            .flatten()
            .and_then(|r| Some((answers::v2_command(&r)?, r)));
        if let Some((command, request)) = request {
            match upload_pack::cached_or_fill(&settings, &entry.path, &protocol, command, request)
                .await
            {
                Ok((file, len)) => return cached_answer(file, len),
                Err(f) => fill = f,
            }
        }
    }
    let slot = match process_slot(&app, peer).await {
        Ok(slot) => slot,
        Err(busy) => return busy,
    };
    // The same pack cache as SSH's (`visible` authorized the reader).
    let mut cmd = upload_pack::stateless(
        &entry.path,
        git_protocol(&headers).as_deref(),
        false,
        app.config.git.nice,
        settings.as_ref(),
    );
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            tracing::error!("cannot run git upload-pack: {e}");
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "git failed\n".into());
        }
    };
    let (Some(stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "git failed\n".into());
    };

    // Request body -> stdin, while waiting for git's first bytes: git
    // answers only after reading the whole request, so a body that is too
    // large is known before any response header is sent.
    let mut feeder = tokio::spawn(feed_body(body, gzipped, limit, stdin)).fuse();
    let mut fed: Option<BodyEnd> = None;
    let mut first = vec![0u8; 16 * 1024];
    let first_read = loop {
        tokio::select! {
            biased;
            end = &mut feeder => {
                let end = end.unwrap_or(BodyEnd::Cut);
                if end == BodyEnd::TooLarge {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    return too_large(limit);
                }
                fed = Some(end);
            }
            read = stdout.read(&mut first) => break read,
        }
    };
    let first_len = match first_read {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("reading git upload-pack: {e}");
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "git failed\n".into());
        }
    };
    if first_len == 0 && fed.is_none() {
        // git ended without a word; the body may have just gone over.
        if let Ok(Ok(BodyEnd::TooLarge)) =
            tokio::time::timeout(Duration::from_secs(2), &mut feeder).await
        {
            return too_large(limit);
        }
    }
    first.truncate(first_len);

    // Reap the child and log what it said on stderr (bounded); the process
    // slot is held until git has exited.
    let path = entry.path.clone();
    let (exited, exit) = tokio::sync::oneshot::channel::<bool>();
    tokio::spawn(async move {
        let mut said = Vec::new();
        let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut said).await;
        let status = child.wait().await;
        let _ = exited.send(status.as_ref().is_ok_and(|s| s.success()));
        match status {
            Ok(status) if status.success() => {}
            Ok(status) => tracing::info!(
                "git upload-pack {} over HTTP exited with {status}: {}",
                path.display(),
                String::from_utf8_lossy(&said).trim()
            ),
            Err(e) => tracing::warn!("waiting for git upload-pack: {e}"),
        }
        drop(slot);
    });

    let head = futures_util::stream::once(async move {
        Ok::<_, std::io::Error>(axum::body::Bytes::from(first))
    });
    let rest = tokio_util::io::ReaderStream::with_capacity(stdout, READ_CHUNK);
    let answer = head.chain(rest);
    let Some(fill) = fill else {
        return git_answer(Body::from_stream(answer));
    };
    // Keep a copy of the answer; it becomes an entry once all of it has
    // gone out, git exited 0 and the refs did not move meanwhile.
    let upload_pack::Fill { writer, check } = fill;
    let writer = Arc::new(std::sync::Mutex::new(Some(writer)));
    let tee = writer.clone();
    let answer = answer.map(move |chunk| {
        let mut w = tee.lock().unwrap_or_else(|e| e.into_inner());
        match &chunk {
            Ok(bytes) => {
                if w.as_mut().is_some_and(|w| w.write(bytes).is_err()) {
                    *w = None;
                }
            }
            Err(_) => *w = None,
        }
        chunk
    });
    let repo = entry.path.clone();
    let finish = futures_util::stream::once(async move {
        let ok = exit.await.unwrap_or(false);
        let w = writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        match (ok, w) {
            (true, Some(w)) => {
                let _ = tokio::task::spawn_blocking(move || check.keep(w)).await;
            }
            (false, _) => tracing::debug!(
                "pack cache: answer for {} not kept: upload-pack failed",
                repo.display()
            ),
            (true, None) => tracing::debug!(
                "pack cache: answer for {} not kept: it was not copied whole",
                repo.display()
            ),
        }
        None::<Result<axum::body::Bytes, std::io::Error>>
    })
    .filter_map(|x| async move { x });
    git_answer(Body::from_stream(answer.chain(finish)))
}

/// Read size of an answer streamed from git or from the cache.
const READ_CHUNK: usize = 64 * 1024;

/// An upload-pack answer to a POST.
fn git_answer(body: Body) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/x-git-upload-pack-result"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// A cached answer, `len` bytes from the start of `file`, read on a
/// blocking thread a chunk at a time.
fn cached_answer(file: std::fs::File, len: u64) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<axum::body::Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        use std::io::Read as _;
        let mut from = file.take(len);
        loop {
            // Read into fresh capacity (no zeroing); hyper frees it once
            // written.
            let mut buf = Vec::with_capacity(4 * READ_CHUNK);
            match (&mut from)
                .take(4 * READ_CHUNK as u64)
                .read_to_end(&mut buf)
            {
                Ok(0) => break,
                Ok(_) => {
                    if tx.blocking_send(Ok(buf.into())).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    break;
                }
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    git_answer(Body::from_stream(stream))
}

/// The body's chunks up to `cap` bytes; the rest of the stream when there
/// is more (or it broke: the rest then yields the error).
async fn buffer_body(
    body: Body,
    cap: usize,
) -> (Vec<axum::body::Bytes>, Option<axum::body::BodyDataStream>) {
    let mut stream = body.into_data_stream();
    let mut chunks = Vec::new();
    let mut total = 0usize;
    loop {
        match stream.next().await {
            None => return (chunks, None),
            Some(Ok(chunk)) => {
                total += chunk.len();
                chunks.push(chunk);
                if total > cap {
                    return (chunks, Some(stream));
                }
            }
            Some(Err(_)) => {
                // Leave the break to feed_body: an empty broken stream.
                return (
                    chunks,
                    Some(
                        Body::from_stream(futures_util::stream::once(async {
                            Err::<axum::body::Bytes, _>(std::io::Error::other("request body broke"))
                        }))
                        .into_data_stream(),
                    ),
                );
            }
        }
    }
}

/// A body of `chunks` then `rest`.
fn rebuild_body(chunks: Vec<axum::body::Bytes>, rest: Option<axum::body::BodyDataStream>) -> Body {
    let head = futures_util::stream::iter(chunks.into_iter().map(Ok::<_, axum::Error>));
    match rest {
        None => Body::from_stream(head),
        Some(rest) => Body::from_stream(head.chain(rest)),
    }
}

/// The whole request, gunzipped when it was sent so; `None` when it is
/// not valid gzip or inflates to more than `cap` bytes.
fn inflate_whole(chunks: &[axum::body::Bytes], gzipped: bool, cap: usize) -> Option<Vec<u8>> {
    let raw: Vec<u8> = chunks.concat();
    if !gzipped {
        return (raw.len() <= cap).then_some(raw);
    }
    use std::io::Read as _;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&raw[..])
        .take(cap as u64 + 1)
        .read_to_end(&mut out)
        .ok()?;
    (out.len() <= cap).then_some(out)
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
    use std::process::Stdio;
    use tokio::process::Command;

    /// A stdin whose reader is a `cat` into /dev/null (a real pipe).
    fn sink() -> (tokio::process::Child, ChildStdin) {
        let mut child = Command::new("sh")
            .args(["-c", "cat >/dev/null"])
            .stdin(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        (child, stdin)
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[tokio::test]
    async fn inflated_bodies_are_bounded() {
        let small = gzip(&[b'a'; 1000]);
        let (_c, stdin) = sink();
        assert_eq!(
            feed_body(Body::from(small), true, 4096, stdin).await,
            BodyEnd::Complete
        );
        // 8 MiB of zeros in ~8 KiB: refused once 256 KiB have come out.
        let bomb = gzip(&vec![0u8; 8 << 20]);
        assert!(bomb.len() < 64 << 10);
        let (_c, stdin) = sink();
        assert_eq!(
            feed_body(Body::from(bomb), true, 256 << 10, stdin).await,
            BodyEnd::TooLarge
        );
        let (_c, stdin) = sink();
        assert_eq!(
            feed_body(Body::from(vec![0u8; 5000]), false, 4096, stdin).await,
            BodyEnd::TooLarge
        );
        let (_c, stdin) = sink();
        assert_eq!(
            feed_body(Body::from(b"not gzip at all".to_vec()), true, 4096, stdin).await,
            BodyEnd::Cut
        );
    }

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
