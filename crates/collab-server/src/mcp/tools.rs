//! The tools of an MCP session: which the caller sees (`list`), and how a
//! call runs (`call`): the arguments become the verb's words
//! (`collab_proto::verbs::tools::command_words`, from the table), the
//! typed request parsed from them runs through the service as the caller
//! (`service::call`: no channel, no SSH), and the verb's answer becomes
//! the tool result: `structuredContent` is its JSON reply
//! and `content` its text; a refusal is `isError: true` with the verb's
//! refusal fields (a fencing refusal's `holder` and `token`) and its one
//! error line as `error`. A busy answer (`collab_proto::exit::BUSY`:
//! nothing written) runs again first, as the CLI does, up to
//! `BUSY_ATTEMPTS` runs.
//!
//! Authorization is the verb's own: a tool is hidden when the caller could
//! not use it, but calling a hidden one still only reaches the handler,
//! which answers as it answers over ssh (an unreadable repository is
//! `repository not found`, whatever the reason).

use std::sync::Arc;
use std::time::Duration;

use collab_proto::verbs::tools as generated;
use collab_proto::verbs::{Need, Verb};
use serde_json::{json, Map, Value};
use tokio::sync::Notify;

use super::session::{Running, Session};
use crate::authz::{self, Access, Regime};
use crate::service::command::{ExecCommand, WatchCmd};
use crate::service::{self, events};

/// The largest reply a call passes on (a diff, a long list).
const MAX_REPLY: usize = 8 * 1024 * 1024;

/// How often a long call reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How long a long poll (`events_read` with `wait`) keeps reading after
/// an event, for the ones right behind it.
const GATHER: Duration = Duration::from_millis(100);

/// How long `events_subscribe` waits for its stream to be refused before
/// it answers that it is running.
const SUBSCRIBE_SETTLE: Duration = Duration::from_millis(300);

pub enum CallError {
    UnknownTool,
    /// `notifications/cancelled` (or the session ending) stopped it.
    Cancelled,
    Internal(anyhow::Error),
}

impl From<anyhow::Error> for CallError {
    fn from(e: anyhow::Error) -> Self {
        CallError::Internal(e)
    }
}

/// The tools the caller may use: a row needing a repository level shows
/// only when the caller has that level somewhere (webhooks: rewind); an
/// admin-only row only to administrators; repository creation as `help`
/// shows it; a key governance closes out sees only what any key may run.
pub async fn list(session: &Arc<Session>) -> anyhow::Result<Vec<Value>> {
    let app = session.ctx.app.clone();
    let caller = session.ctx.caller.clone();
    tokio::task::spawn_blocking(move || {
        let closed = matches!(caller.regime, Regime::Closed);
        let admin = authz::is_server_admin(&app, &caller);
        let best = crate::repos::list_repos(&app.config.repos_dir)
            .iter()
            .filter_map(|entry| authz::repo_access(&app, &caller, entry))
            .max();
        let may_create = match &caller.regime {
            Regime::Ungoverned { admin } => *admin,
            Regime::Governed { .. } => true,
            Regime::Closed => false,
        };
        let shows = |verb: &Verb| match verb.need {
            Need::Anyone => true,
            _ if closed => false,
            Need::Repo(level) | Need::RepoAtLeast { level, .. } => {
                admin || best.is_some_and(|b| b >= level)
            }
            Need::RepoBy { base, .. } => admin || best.is_some_and(|b| b >= base),
            Need::Admin => admin,
            Need::Rule(_) if verb.family == "collab-repo" && verb.action == "create" => may_create,
            // Webhooks need rewind on every repository their glob matches.
            Need::Rule(_) if verb.family == "collab-hook" => {
                admin || best.is_some_and(|b| b >= Access::Rewind)
            }
            Need::Rule(text) if text.starts_with("read") && verb.names_repo() => {
                admin || best.is_some()
            }
            Need::Rule(_) => true,
        };
        let mut tools: Vec<Value> = generated::tool_verbs()
            .filter(|v| shows(v))
            .map(generated::tool)
            .collect();
        if !closed {
            tools.extend(generated::session_tools());
        }
        tools
    })
    .await
    .map_err(Into::into)
}

/// Run the tool `name`.
pub async fn call(
    session: &Arc<Session>,
    name: &str,
    arguments: Map<String, Value>,
    progress: Value,
    stop: &Arc<Notify>,
) -> Result<Value, CallError> {
    match name {
        "events_read" => return events_read(session, arguments, progress, stop).await,
        "events_subscribe" => return events_subscribe(session, arguments).await,
        "events_unsubscribe" => {
            let was = session
                .subscription
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            let ended = was.is_some_and(|s| {
                s.cancel();
                true
            });
            let reply = json!({ "status": if ended { "unsubscribed" } else { "none" } });
            return Ok(result(&reply.to_string(), reply, false));
        }
        _ => {}
    }
    let verb = generated::tool_verb(name).ok_or(CallError::UnknownTool)?;
    let (words, stdin) = match generated::command_words(verb, &arguments) {
        Ok(built) => built,
        Err(why) => return Ok(refused(&format!("error: {why}"), Map::new(), None)),
    };
    // The typed request, parsed from the words with the table as the SSH
    // door parses its line (no quoting round trip).
    let command = match service::parse(&words) {
        Ok(command) if service::serves(&command) => command,
        Ok(_) => {
            let line = "error: this verb is not a tool call";
            return Ok(refused(line, Map::new(), None));
        }
        Err(line) => return Ok(refused(&line, Map::new(), None)),
    };
    // A busy answer (a lock held elsewhere past the server's wait, nothing
    // written) runs again, as the CLI does: up to `BUSY_ATTEMPTS` runs.
    let mut attempt = 1;
    let mut n = 0u64;
    let answer = loop {
        let run = run_verb(session, command.clone(), stdin.clone(), stop);
        let answer = if progress.is_null() {
            run.await?.ok_or(CallError::Cancelled)?
        } else {
            // A long call (a lease --wait) reports that it is still waiting.
            let total = arguments.get("wait").and_then(Value::as_i64);
            let mut run = std::pin::pin!(run);
            let mut tick = tokio::time::interval(PROGRESS_EVERY);
            tick.tick().await;
            loop {
                tokio::select! {
                    answer = &mut run => break answer?.ok_or(CallError::Cancelled)?,
                    _ = tick.tick() => {
                        n += 1;
                        let mut params = json!({
                            "progressToken": progress,
                            "progress": n,
                            "message": format!("{} running for {n}s", verb.name()),
                        });
                        if let Some(total) = total {
                            params["total"] = json!(total.max(n as i64));
                        }
                        session.send(json!({
                            "jsonrpc": "2.0",
                            "method": "notifications/progress",
                            "params": params,
                        })).await;
                    }
                }
            }
        };
        if answer.exit_status == Some(collab_proto::exit::BUSY)
            && attempt < collab_proto::exit::BUSY_ATTEMPTS
        {
            attempt += 1;
            let pause = collab_proto::exit::busy_backoff_ms(attempt, rand::random());
            tokio::time::sleep(Duration::from_millis(pause)).await;
            continue;
        }
        break answer;
    };
    Ok(tool_result(answer))
}

/// What one verb answered, as the tool result is made from it.
#[derive(Debug, Default)]
struct Output {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit_status: Option<u32>,
    /// The reply is past `MAX_REPLY`.
    truncated: bool,
}

/// Run one verb through the service as the session's caller, re-checked
/// at every call exactly as `ssh::Connection` checks an exec request (a
/// key taken out of authorized_keys or governance loses its MCP session's
/// calls at once); `None` when `stop` was notified first. A verb that only
/// reads (`service::STOPPED_AT_ONCE`) is dropped then; any other is told
/// its caller left (a lease waiter gives its ticket up) and runs to its
/// end, a lease it won given back. Either way its work has ended when
/// this returns, so the call's slot is free only then.
async fn run_verb(
    session: &Arc<Session>,
    command: ExecCommand,
    stdin: Option<String>,
    stop: &Notify,
) -> anyhow::Result<Option<Output>> {
    let app = session.ctx.app.clone();
    let identity = session.ctx.caller.identity.clone();
    let refusal = if app.stopping.is_stopped() {
        Some("error: the server is shutting down")
    } else if !authz::is_admitted(&app, &identity) {
        Some("error: this key is no longer admitted")
    } else {
        None
    };
    if let Some(line) = refusal {
        return Ok(Some(output(service::Answer::new(line, 1))));
    }
    let _working = app.work.track();
    let (trigger, left) = crate::shutdown::stop_pair();
    let mut ctx = service::Context::new(app.clone(), authz::caller_for(&app, identity));
    ctx.mcp_session = Some(session.number);
    ctx.left = Some(left);
    let verb = command.verb();
    let work = service::call(&ctx, command, stdin);
    tokio::pin!(work);
    tokio::select! {
        answer = &mut work => Ok(Some(output(answer))),
        _ = stop.notified() => {
            if service::stops_at_once(verb) {
                crate::metrics::verb_finished(verb, "disconnected");
            } else {
                trigger.trigger();
                let answer = work.await;
                service::undelivered(&ctx, answer).await;
            }
            Ok(None)
        }
    }
}

fn output(answer: service::Answer) -> Output {
    let truncated = answer.line.len() > MAX_REPLY;
    let line = answer.line.into_bytes();
    let (stdout, stderr) = if line.starts_with(b"error:") {
        (Vec::new(), line)
    } else if truncated {
        (Vec::new(), Vec::new())
    } else {
        (line, Vec::new())
    };
    Output {
        stdout,
        stderr,
        exit_status: Some(answer.status),
        truncated,
    }
}

/// A verb's answer as a tool result.
fn tool_result(answer: Output) -> Value {
    if answer.truncated {
        return refused(
            &format!(
                "error: the reply is larger than {} MiB; run the verb over ssh",
                MAX_REPLY >> 20
            ),
            Map::new(),
            None,
        );
    }
    let stdout = String::from_utf8_lossy(&answer.stdout);
    let stdout = stdout.trim_end();
    let stderr = String::from_utf8_lossy(&answer.stderr);
    let stderr = stderr.trim_end();
    let code = answer.exit_status.unwrap_or(1);
    let parsed: Option<Value> = serde_json::from_str(stdout).ok();
    let fields = match parsed {
        Some(Value::Object(map)) => map,
        Some(other) => Map::from_iter([("result".to_string(), other)]),
        None if !stdout.is_empty() => Map::from_iter([("text".to_string(), json!(stdout))]),
        None => Map::new(),
    };
    // 0, and 3 (`lease next`: nothing ready, a normal answer).
    if code == 0 || code == collab_proto::exit::EMPTY {
        let text = if stdout.is_empty() { "{}" } else { stdout };
        return result(text, Value::Object(fields), false);
    }
    let line = if stderr.is_empty() {
        match fields.get("status").and_then(Value::as_str) {
            Some(status) => refusal_line(status, &fields),
            None => format!("error: exit status {code}"),
        }
    } else {
        stderr.to_string()
    };
    refused(&line, fields, (!stdout.is_empty()).then_some(stdout))
}

/// The one-line reason of a refusal the verb answered in JSON only (a
/// fencing refusal, a lease `held` or `locked`): its status and why, from
/// the reply's own words or its holder, so a model need not read fields.
fn refusal_line(status: &str, fields: &Map<String, Value>) -> String {
    let text = |key: &str| fields.get(key).and_then(Value::as_str);
    if let Some(why) = text("message") {
        return format!("error: {status}: {why}");
    }
    let issue: Option<String> = text("issue").map(|id| id.chars().take(12).collect());
    let holder = text("holder_name").or(text("holder"));
    let why = match (status, issue.as_deref(), holder) {
        ("locked", Some(issue), _) => format!(
            "issue {issue} is in its lock delay after a lease expired, until {}",
            text("locked_until").unwrap_or("?")
        ),
        (_, Some(issue), Some(holder)) => {
            let mut why = format!("issue {issue} is held by {holder}");
            if let Some(token) = fields.get("token").and_then(Value::as_i64) {
                why += &format!(" with token {token}");
            }
            if let Some(until) = text("expires_at") {
                why += &format!(" until {until}");
            }
            why
        }
        ("held", Some(issue), None) => format!("issue {issue} is not held by you"),
        ("fenced", Some(issue), None) => format!("issue {issue} has no live lease"),
        _ => return format!("error: {status}"),
    };
    format!("error: {status}: {why}")
}

fn result(text: &str, structured: Value, is_error: bool) -> Value {
    json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": structured,
        "isError": is_error,
    })
}

/// A refusal: the error line, with the verb's refusal fields beside it.
fn refused(line: &str, mut fields: Map<String, Value>, json_text: Option<&str>) -> Value {
    fields.insert("error".into(), json!(line));
    let text = match json_text {
        Some(reply) => format!("{line}\n{reply}"),
        None => line.to_string(),
    };
    result(&text, Value::Object(fields), true)
}

/// The `collab-events watch` request for the event tools' arguments.
fn watch_cmd(arguments: &Map<String, Value>, follow: bool) -> Result<WatchCmd, String> {
    let watch = collab_proto::verbs::find("collab-events", "watch").expect("in the table");
    let mut given = arguments.clone();
    given.remove("limit");
    if given.contains_key("no_follow") {
        return Err("unknown argument `no_follow`".into());
    }
    if !follow {
        given.insert("no_follow".into(), json!(true));
    }
    let (words, _) = generated::command_words(watch, &given)?;
    match service::parse(&words) {
        Ok(ExecCommand::Events(cmd)) => Ok(cmd),
        Ok(_) => Err("not an event watch".into()),
        Err(line) => Err(line.trim_start_matches("error: ").to_string()),
    }
}

/// What a watch sends its reader.
enum Msg {
    /// Some of its JSON lines.
    Data(Vec<u8>),
    /// It ended caught up (`--no-follow`).
    Done,
    /// It was refused or cut off, with this line.
    Refused(String),
}

/// A watch of the event log (`service::events`) run for one tool call as
/// the session's caller, its lines read from a pipe. [`Watching::close`]
/// stops it and returns once it has ended.
struct Watching {
    reader: tokio::io::DuplexStream,
    task: tokio::task::JoinHandle<Result<events::End, String>>,
    gone: Option<tokio::sync::oneshot::Sender<()>>,
    eof: bool,
    finished: bool,
}

impl Watching {
    fn start(session: &Arc<Session>, cmd: WatchCmd) -> Watching {
        let (reader, mut writer) = tokio::io::duplex(64 * 1024);
        let (gone_tx, mut gone) = tokio::sync::oneshot::channel::<()>();
        let app = session.ctx.app.clone();
        let identity = session.ctx.caller.identity.clone();
        let number = session.number;
        let task = tokio::spawn(async move {
            // The same checks as a tool call's (`run_verb`).
            if app.stopping.is_stopped() {
                return Err("error: the server is shutting down".to_string());
            }
            if !authz::is_admitted(&app, &identity) {
                return Err("error: this key is no longer admitted".to_string());
            }
            let _working = app.work.track();
            let mut ctx = service::Context::new(app.clone(), authz::caller_for(&app, identity));
            ctx.mcp_session = Some(number);
            let watch = events::open(&ctx, cmd).await?;
            Ok(watch.run(&ctx, &mut writer, &mut gone).await)
        });
        Watching {
            reader,
            task,
            gone: Some(gone_tx),
            eof: false,
            finished: false,
        }
    }

    /// The next lines, or how the watch ended; `None` after that.
    async fn wait(&mut self) -> Option<Msg> {
        use tokio::io::AsyncReadExt as _;
        if self.finished {
            return None;
        }
        if !self.eof {
            let mut buf = vec![0u8; 32 * 1024];
            match self.reader.read(&mut buf).await {
                Ok(n) if n > 0 => {
                    buf.truncate(n);
                    return Some(Msg::Data(buf));
                }
                _ => self.eof = true,
            }
        }
        // Its writer is gone: it has ended.
        self.finished = true;
        match (&mut self.task).await {
            Ok(Ok(events::End::CaughtUp)) => Some(Msg::Done),
            Ok(Ok(events::End::Cut(line)) | Err(line)) => Some(Msg::Refused(line)),
            Ok(Ok(events::End::ClientGone)) | Err(_) => None,
        }
    }

    /// Stop the watch (its caller has left) and wait until it has ended.
    async fn close(mut self) {
        drop(self.gone.take());
        if !self.finished {
            let _ = (&mut self.task).await;
        }
    }
}

/// `events_read`: one bounded page of the log after `since`.
async fn events_read(
    session: &Arc<Session>,
    mut arguments: Map<String, Value>,
    progress: Value,
    stop: &Notify,
) -> Result<Value, CallError> {
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => generated::MAX_EVENTS_PAGE,
        Some(v) => match v.as_i64() {
            Some(n) if (1..=generated::MAX_EVENTS_PAGE).contains(&n) => n,
            _ => {
                let why = format!(
                    "error: `limit` must be an integer from 1 to {}",
                    generated::MAX_EVENTS_PAGE
                );
                return Ok(refused(&why, Map::new(), None));
            }
        },
    } as usize;
    let max_wait = collab_proto::limits::MAX_WAIT_SECS;
    let wait = match arguments.remove("wait") {
        None | Some(Value::Null) => 0,
        Some(v) => match v.as_u64() {
            Some(n) if n <= max_wait => n,
            _ => {
                let why = format!("error: `wait` must be an integer from 0 to {max_wait}");
                return Ok(refused(&why, Map::new(), None));
            }
        },
    };
    // Without `since` the page starts at the head, as `collab-events
    // watch` does, and its `next_since` is the head's seq: a cursor of 0
    // would make the next call replay the whole log as new.
    let since = match arguments.get("since") {
        None | Some(Value::Null) => {
            let head = *session.ctx.app.writer.subscribe_event_head().borrow();
            arguments.insert("since".into(), json!(head));
            head
        }
        Some(given) => given.as_i64().unwrap_or(0),
    };
    // A long poll follows the log; a plain page stops at its end.
    let cmd = match watch_cmd(&arguments, wait > 0) {
        Ok(cmd) => cmd,
        Err(why) => return Ok(refused(&format!("error: {why}"), Map::new(), None)),
    };
    let mut channel = Watching::start(session, cmd);
    let mut events: Vec<Value> = Vec::new();
    let mut more = false;
    let mut partial: Vec<u8> = Vec::new();
    let mut stderr: Vec<u8> = Vec::new();
    let mut code = None;
    let started = tokio::time::Instant::now();
    // Following, the page ends at `wait` with nothing, or once what is
    // there has been read: no new line for `GATHER` after the first.
    let mut due = started + Duration::from_secs(wait);
    let mut tick = tokio::time::interval_at(started + PROGRESS_EVERY, PROGRESS_EVERY);
    let mut ticks = 0u64;
    'read: loop {
        let msg = tokio::select! {
            msg = channel.wait() => msg,
            _ = stop.notified() => {
                channel.close().await;
                return Err(CallError::Cancelled);
            }
            _ = tokio::time::sleep_until(due), if wait > 0 => {
                code = Some(0);
                break 'read;
            }
            _ = tick.tick(), if wait > 0 && !progress.is_null() => {
                ticks += 1;
                session.send(json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {
                        "progressToken": progress,
                        "progress": ticks,
                        "total": wait.max(ticks),
                        "message": format!("waiting for events for {ticks}s"),
                    },
                })).await;
                continue;
            }
        };
        let Some(msg) = msg else { break };
        match msg {
            Msg::Data(data) => {
                partial.extend_from_slice(&data);
                while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = partial.drain(..=end).collect();
                    let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                        continue;
                    };
                    if event["type"] == "heartbeat" {
                        continue;
                    }
                    if events.len() == limit {
                        more = true;
                        break 'read;
                    }
                    events.push(event);
                    if wait > 0 {
                        due = tokio::time::Instant::now() + GATHER;
                    }
                }
                // One event is far below this; a line that is not is cut.
                if partial.len() > MAX_REPLY {
                    break;
                }
            }
            Msg::Done => code = Some(0),
            Msg::Refused(line) => {
                stderr.extend_from_slice(line.as_bytes());
                code = Some(1);
            }
        }
    }
    // Ends the watch early when the page is full.
    channel.close().await;
    if !more && code != Some(0) {
        let line = String::from_utf8_lossy(&stderr).trim_end().to_string();
        let line = if line.is_empty() {
            "error: the event stream ended early".to_string()
        } else {
            line
        };
        return Ok(refused(&line, Map::new(), None));
    }
    let next = events
        .last()
        .and_then(|e| e["seq"].as_i64())
        .unwrap_or(since);
    let reply = json!({ "events": events, "next_since": next, "more": more });
    Ok(result(&reply.to_string(), reply, false))
}

/// `events_subscribe`: follow the log on a channel of its own and send
/// each event as a `notifications/message`; replaces a running one.
async fn events_subscribe(
    session: &Arc<Session>,
    arguments: Map<String, Value>,
) -> Result<Value, CallError> {
    if arguments.contains_key("limit") {
        return Ok(refused("error: unknown argument `limit`", Map::new(), None));
    }
    let cmd = match watch_cmd(&arguments, true) {
        Ok(cmd) => cmd,
        Err(why) => return Ok(refused(&format!("error: {why}"), Map::new(), None)),
    };
    if let Some(old) = session
        .subscription
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        old.cancel();
    }
    let mut channel = Watching::start(session, cmd);
    let (refusal_tx, refusal_rx) = tokio::sync::oneshot::channel::<String>();
    let task_session = session.clone();
    let stop = Arc::new(Notify::new());
    let task_stop = stop.clone();
    let task = tokio::spawn(async move {
        let mut refusal_tx = Some(refusal_tx);
        let mut partial: Vec<u8> = Vec::new();
        let mut stderr: Vec<u8> = Vec::new();
        loop {
            let msg = tokio::select! {
                msg = channel.wait() => msg,
                _ = task_stop.notified() => {
                    channel.close().await;
                    return;
                }
            };
            let Some(msg) = msg else { break };
            match msg {
                Msg::Data(data) => {
                    partial.extend_from_slice(&data);
                    while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = partial.drain(..=end).collect();
                        let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                            continue;
                        };
                        if event["type"] == "heartbeat" {
                            continue;
                        }
                        let note = json!({
                            "jsonrpc": "2.0",
                            "method": "notifications/message",
                            "params": { "level": "info", "logger": "collab-events", "data": event },
                        });
                        if !task_session.send(note).await {
                            return;
                        }
                    }
                    if partial.len() > MAX_REPLY {
                        partial.clear();
                    }
                }
                Msg::Refused(line) => stderr.extend_from_slice(line.as_bytes()),
                Msg::Done => {}
            }
        }
        let line = String::from_utf8_lossy(&stderr).trim_end().to_string();
        let line = if line.is_empty() {
            "error: the event stream ended".to_string()
        } else {
            line
        };
        // Refused at once: the call answers with it. Cut later (the
        // server stopping, a stalled client): a notification says so.
        let told = refusal_tx
            .take()
            .is_some_and(|tx| tx.send(line.clone()).is_ok());
        match told {
            true => {}
            false => {
                task_session
                    .send(json!({
                        "jsonrpc": "2.0",
                        "method": "notifications/message",
                        "params": { "level": "error", "logger": "collab-events", "data": { "error": line } },
                    }))
                    .await;
            }
        }
    });
    *session
        .subscription
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(Running {
        stop,
        task: task.abort_handle(),
    });
    match tokio::time::timeout(SUBSCRIBE_SETTLE, refusal_rx).await {
        Ok(Ok(line)) => Ok(refused(&line, Map::new(), None)),
        _ => {
            let reply = json!({ "status": "subscribed", "logger": "collab-events" });
            Ok(result(&reply.to_string(), reply, false))
        }
    }
}
