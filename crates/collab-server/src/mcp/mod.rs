//! `collab-mcp`: the Model Context Protocol's stdio transport on an SSH
//! exec channel (newline-delimited JSON-RPC 2.0, one message a line), so
//! `ssh -p 2222 git@host collab-mcp` is an MCP server whose identity is the
//! key that opened it. docs/mcp.md is the user's side.
//!
//! - `mod` (this file): the session: reading bounded lines, JSON-RPC
//!   framing and errors, `initialize` with version negotiation, `ping`,
//!   `tools/list`, `tools/call` (each in its own task, at most
//!   `mcp.max_calls_in_flight`), `notifications/cancelled`, the idle
//!   timeout, and one writer for every line sent.
//! - `tools`: what the tools are (generated from the verb table by
//!   `collab_proto::verbs::tools`), which the caller sees, and how a call
//!   runs and becomes a tool result; the event tools.
//! - `session`: the state a session's calls share (the caller as a
//!   `service::Context`, no transport), so the same calls can serve MCP
//!   over HTTP later.
//!
//! Every call runs through the service (`crate::service`) as the caller:
//! no in-process SSH session, no command line.
//!
//! A malformed message gets a JSON-RPC error and the session goes on; it
//! never affects another session.

mod session;
mod tools;

use std::sync::{Arc, Mutex};

use russh::server::Msg;
use russh::{Channel, ChannelMsg};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};

use crate::ssh::context::ExecContext;
use crate::ssh::reply::note_exit_status;

use session::{Calls, Refusal, Running, Session};

/// Protocol revisions this server speaks, newest first. The newest is
/// the newest the official SDKs reach through `initialize` (their 2026
/// per-request era starts with `server/discover`, which is answered
/// "method not found", so they fall back to `initialize`).
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// JSON-RPC error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
/// Server-defined: a limit of the session refused the request.
const LIMITED: i64 = -32000;

/// Lines queued for the client before a call's task waits.
const OUTBOX: usize = 256;

fn response(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// Serve one MCP session on `channel` until the client closes it, the
/// idle timeout passes, or the server stops; every tool call runs through
/// the service as the caller.
pub async fn serve(ctx: ExecContext, channel: Channel<Msg>) {
    let (mut read, write) = channel.split();
    // Numbers only tell this process's sessions apart.
    static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(principal = ctx.caller.principal(), "mcp session opened");
    let config = ctx.app.config.mcp.clone();
    let stopping = ctx.app.stopping.clone();
    let (out, mut outbox) = mpsc::channel::<String>(OUTBOX);
    // One writer: lines never interleave, and a client that stops reading
    // stalls only its own session (the channel's window).
    let writer = tokio::spawn(async move {
        while let Some(mut line) = outbox.recv().await {
            line.push('\n');
            if write.data_bytes(line.into_bytes()).await.is_err() {
                break;
            }
        }
        write
    });
    let session = Arc::new(Session {
        ctx: ctx.call.clone(),
        number,
        out,
        calls: Mutex::new(Calls::default()),
        subscription: Mutex::new(None),
    });
    // However this ends, early too: dropped when the caller leaves.
    let _stops = StopsSession {
        session: Arc::downgrade(&session),
        writer: writer.abort_handle(),
    };
    let max = usize::try_from(config.max_message_size).unwrap_or(usize::MAX);
    let mut lines = Lines::new(max);
    let mut initialized = false;
    let mut last_activity = tokio::time::Instant::now();
    let mut client_gone = false;
    'session: loop {
        let idle_due = last_activity + config.idle_timeout;
        let msg = tokio::select! {
            msg = read.wait() => msg,
            _ = tokio::time::sleep_until(idle_due) => {
                if session.busy() {
                    last_activity = tokio::time::Instant::now();
                    continue;
                }
                tracing::info!("mcp session idle for {:?}; closing", config.idle_timeout);
                break;
            }
            _ = stopping.clone().wait() => break,
        };
        last_activity = tokio::time::Instant::now();
        let data = match msg {
            Some(ChannelMsg::Data { data }) => data,
            // The client has said everything: answer what it asked.
            Some(ChannelMsg::Eof) => {
                finish_calls(&session, config.idle_timeout).await;
                break;
            }
            Some(ChannelMsg::Close) | None => {
                client_gone = true;
                break;
            }
            Some(_) => continue,
        };
        for item in lines.push(&data) {
            let line = match item {
                Line::Complete(line) => line,
                Line::TooLong => {
                    let message =
                        format!("message larger than mcp.max_message_size ({max} bytes); skipped");
                    if !session
                        .send(error(&Value::Null, INVALID_REQUEST, &message))
                        .await
                    {
                        break 'session;
                    }
                    continue;
                }
            };
            if !handle_line(&session, &line, &mut initialized).await {
                break 'session;
            }
        }
    }
    // Stop what still runs: calls, and the subscription.
    session
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .cancel_all();
    let subscription = session
        .subscription
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(sub) = &subscription {
        sub.cancel();
    }
    finish_calls(&session, std::time::Duration::from_secs(2)).await;
    // Past that, the calls still running are aborted, which drops their
    // verbs.
    session
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .abort_all();
    if let Some(sub) = subscription {
        sub.task.abort();
    }
    let principal = session.ctx.caller.principal().to_string();
    drop(session);
    // The writer may wait for window space a client that has gone (or
    // stopped reading) will never give: it is not waited for then.
    let stop_writer = writer.abort_handle();
    if client_gone {
        stop_writer.abort();
    }
    let written = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
    if written.is_err() {
        stop_writer.abort();
    }
    if let Ok(Ok(write)) = written {
        note_exit_status(0);
        let _ = write.exit_status(0).await;
        let _ = write.eof().await;
        let _ = write.close().await;
    }
    tracing::info!(principal, "mcp session closed");
}

/// Stops what a session runs besides its own task: its calls, its
/// subscription and its writer. `serve` is dropped where it is when its
/// caller leaves (`ssh::leaving`); then the call tasks are aborted,
/// which drops the verbs still running, and the writer lets go of the channel and the lines
/// still queued. After a clean end there is nothing left to stop.
struct StopsSession {
    session: std::sync::Weak<Session>,
    writer: tokio::task::AbortHandle,
}

impl Drop for StopsSession {
    fn drop(&mut self) {
        self.writer.abort();
        let Some(session) = self.session.upgrade() else {
            return;
        };
        session
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .abort_all();
        let subscription = session
            .subscription
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(sub) = subscription {
            sub.task.abort();
        }
    }
}

/// Wait for the running calls to answer, at most `limit`.
async fn finish_calls(session: &Session, limit: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline
        && !session
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// One line of input: a whole message, or the note that one was too long.
enum Line {
    Complete(Vec<u8>),
    TooLong,
}

/// Newline-delimited framing with a bound: a line longer than `max` is
/// dropped as it arrives (never held whole) and reported once.
struct Lines {
    max: usize,
    buf: Vec<u8>,
    skipping: bool,
}

impl Lines {
    fn new(max: usize) -> Lines {
        Lines {
            max,
            buf: Vec::new(),
            skipping: false,
        }
    }

    fn push(&mut self, mut data: &[u8]) -> Vec<Line> {
        let mut out = Vec::new();
        while !data.is_empty() {
            match data.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    if self.skipping {
                        self.skipping = false;
                    } else if self.buf.len() + end > self.max {
                        out.push(Line::TooLong);
                    } else {
                        self.buf.extend_from_slice(&data[..end]);
                        out.push(Line::Complete(std::mem::take(&mut self.buf)));
                    }
                    self.buf.clear();
                    data = &data[end + 1..];
                }
                None => {
                    if !self.skipping {
                        if self.buf.len() + data.len() > self.max {
                            self.buf = Vec::new();
                            self.skipping = true;
                            out.push(Line::TooLong);
                        } else {
                            self.buf.extend_from_slice(data);
                        }
                    }
                    data = &[];
                }
            }
        }
        out
    }
}

/// Handle one message; false when the client is gone.
async fn handle_line(session: &Arc<Session>, line: &[u8], initialized: &mut bool) -> bool {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return true;
    }
    let message: Value = match serde_json::from_slice(trimmed) {
        Ok(v) => v,
        Err(_) => {
            return session
                .send(error(&Value::Null, PARSE_ERROR, "Parse error"))
                .await
        }
    };
    let Value::Object(message) = message else {
        let why = if message.is_array() {
            "batches are not supported"
        } else {
            "a message is a JSON object"
        };
        return session
            .send(error(&Value::Null, INVALID_REQUEST, why))
            .await;
    };
    let id = message.get("id").cloned();
    let valid_id = matches!(&id, None | Some(Value::String(_) | Value::Number(_)));
    if message.get("jsonrpc") != Some(&json!("2.0")) || !valid_id {
        let id = id.filter(|_| valid_id).unwrap_or(Value::Null);
        return session
            .send(error(&id, INVALID_REQUEST, "not a JSON-RPC 2.0 message"))
            .await;
    }
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        // A response to a request of ours (we send none), or nonsense.
        if message.contains_key("result") || message.contains_key("error") {
            return true;
        }
        let id = id.unwrap_or(Value::Null);
        return session.send(error(&id, INVALID_REQUEST, "no method")).await;
    };
    let params = message.get("params").cloned().unwrap_or(json!({}));
    let Some(id) = id else {
        notification(session, method, &params);
        return true;
    };
    if !*initialized && !matches!(method, "initialize" | "ping") {
        return session
            .send(error(&id, INVALID_REQUEST, "send initialize first"))
            .await;
    }
    let reply = match method {
        "initialize" => {
            *initialized = true;
            response(&id, initialize(&params))
        }
        "ping" => response(&id, json!({})),
        "tools/list" => match tools::list(session).await {
            Ok(list) => response(&id, json!({ "tools": list })),
            Err(e) => {
                tracing::error!("collab-mcp: tools/list: {e:#}");
                error(&id, INTERNAL_ERROR, "internal error")
            }
        },
        "tools/call" => return start_call(session, id, params).await,
        "logging/setLevel" => response(&id, json!({})),
        _ => error(
            &id,
            METHOD_NOT_FOUND,
            &format!("Method not found: {method}"),
        ),
    };
    session.send(reply).await
}

/// The `initialize` result: the client's revision when we speak it, else
/// our newest (the spec's negotiation).
fn initialize(params: &Value) -> Value {
    let asked = params["protocolVersion"].as_str().unwrap_or_default();
    let version = PROTOCOL_VERSIONS
        .iter()
        .find(|v| **v == asked)
        .unwrap_or(&PROTOCOL_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": { "listChanged": false },
            "logging": {},
        },
        "serverInfo": {
            "name": "git-collab",
            "title": "git-collab forge",
            "version": env!("CARGO_PKG_VERSION"),
        },
        "instructions": "Tools are git-collab's SSH verbs, run as the SSH key that opened this session. \
            Claim work with lease_next (or lease_acquire); pass the lease's `token` as `lease_token` to \
            issue_comment, issue_close and other writes, so a write from a lease you lost is refused. \
            events_read pages through the event log; events_subscribe sends each new event as a \
            notifications/message.",
    })
}

fn notification(session: &Arc<Session>, method: &str, params: &Value) {
    if method == "notifications/cancelled" {
        let key = params["requestId"].to_string();
        // Its channel is closed, which is what a client leaving looks like
        // to the verb: it stops (a waiting lease gives up its ticket). The
        // call keeps its slot, and its id, until the verb has stopped.
        if session
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cancel(&key)
        {
            tracing::debug!("mcp call {key} cancelled");
        }
    }
    // `notifications/initialized` and the rest need nothing.
}

/// Run a `tools/call` in its own task, within the session's limit.
async fn start_call(session: &Arc<Session>, id: Value, params: Value) -> bool {
    let key = id.to_string();
    let max = session.ctx.app.config.mcp.max_calls_in_flight;
    // The session loop admits calls one at a time, and tasks only take
    // theirs out: what is admitted here is still admissible at `insert`.
    let admitted = session
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .admit(&key, max);
    let generation = match admitted {
        Ok(generation) => generation,
        Err(Refusal::IdRunning) => {
            let message = "a call with this id is running";
            return session.send(error(&id, INVALID_REQUEST, message)).await;
        }
        Err(Refusal::Full) => {
            crate::limits::note_refusal("mcp", "max_calls_in_flight", || {
                format!("a session asked for more than {max} calls at once")
            });
            let message = format!(
                "too many calls in flight ({max}, mcp.max_calls_in_flight); wait for one to finish"
            );
            return session.send(error(&id, LIMITED, &message)).await;
        }
    };
    let Some(name) = params["name"].as_str().map(str::to_string) else {
        return session
            .send(error(&id, INVALID_PARAMS, "tools/call needs a `name`"))
            .await;
    };
    let arguments = match &params["arguments"] {
        Value::Null => serde_json::Map::new(),
        Value::Object(map) => map.clone(),
        _ => {
            return session
                .send(error(&id, INVALID_PARAMS, "`arguments` must be an object"))
                .await
        }
    };
    let progress = params["_meta"]["progressToken"].clone();
    let task_session = session.clone();
    let task_key = key.clone();
    // Registered before it can finish, so its own removal always finds it.
    let stop = Arc::new(Notify::new());
    let task_stop = stop.clone();
    let mut calls = session.calls.lock().unwrap_or_else(|e| e.into_inner());
    let task = tokio::spawn(async move {
        let reply = match tools::call(&task_session, &name, arguments, progress, &task_stop).await {
            Ok(result) => Some(response(&id, result)),
            // A cancelled request gets no response (the spec).
            Err(tools::CallError::Cancelled) => None,
            Err(tools::CallError::UnknownTool) => {
                Some(error(&id, INVALID_PARAMS, &format!("Unknown tool: {name}")))
            }
            Err(tools::CallError::Internal(e)) => {
                tracing::error!("collab-mcp: {name}: {e:#}");
                Some(error(&id, INTERNAL_ERROR, "internal error"))
            }
        };
        // Only now, the verb stopped: this call's slot, and nobody else's.
        task_session
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .finish(&task_key, generation);
        if let Some(reply) = reply {
            task_session.send(reply).await;
        }
    });
    calls.insert(
        key,
        generation,
        Running {
            stop,
            task: task.abort_handle(),
        },
    );
    drop(calls);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(lines: Vec<Line>) -> Vec<String> {
        lines
            .into_iter()
            .map(|l| match l {
                Line::Complete(b) => String::from_utf8(b).unwrap(),
                Line::TooLong => "<too long>".into(),
            })
            .collect()
    }

    #[test]
    fn lines_are_framed_and_bounded() {
        let mut lines = Lines::new(8);
        assert_eq!(complete(lines.push(b"{\"a\":1}\n{\"b")), ["{\"a\":1}"]);
        assert_eq!(complete(lines.push(b"\":2}\n")), ["{\"b\":2}"]);
        // Too long in one piece, then across pieces: reported once each,
        // and the line after is whole again.
        assert_eq!(
            complete(lines.push(b"0123456789\nok\n")),
            ["<too long>", "ok"]
        );
        assert_eq!(complete(lines.push(b"01234")), Vec::<String>::new());
        assert_eq!(complete(lines.push(b"56789")), ["<too long>"]);
        assert_eq!(complete(lines.push(b"more\nfine\n")), ["fine"]);
        assert!(lines.buf.is_empty());
    }

    #[test]
    fn versions_are_negotiated() {
        for v in ["2025-06-18", "2025-03-26", "2025-11-25"] {
            assert_eq!(
                initialize(&json!({ "protocolVersion": v }))["protocolVersion"],
                v
            );
        }
        assert_eq!(
            initialize(&json!({ "protocolVersion": "1999-01-01" }))["protocolVersion"],
            PROTOCOL_VERSIONS[0]
        );
    }
}
