//! `collab-mcp` over real OpenSSH: the official MCP Python SDK runs an
//! agent's loop (tests/mcp/agent_loop.py), and raw JSON-RPC lines check
//! the framing, the errors, the limits, cancellation, and what a key that
//! may not see a repository or a tool is shown.
//!
//! The SDK lives in a virtualenv outside the clone
//! (scripts/install-deps.sh makes it; `GIT_COLLAB_MCP_PYTHON` names
//! another interpreter). Without it the SDK test skips with a message,
//! unless `GIT_COLLAB_REQUIRE_MCP_TESTS=1`, as CI sets.

use collab_testkit as common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::web::commands_running;
use common::{HarnessOptions, ServerHarness};
use serde_json::{json, Value};

/// Where scripts/install-deps.sh puts the SDK.
const VENV_PYTHON: &str = "/var/cache/git-collab-ci/mcp-venv/bin/python";

/// The Python with the `mcp` SDK, or `None` (the test skips) unless it is
/// required.
fn sdk_python() -> Option<PathBuf> {
    let python = std::env::var_os("GIT_COLLAB_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(VENV_PYTHON));
    let works = Command::new(&python)
        .args(["-c", "import mcp.client.stdio"])
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(python);
    }
    let required = std::env::var("GIT_COLLAB_REQUIRE_MCP_TESTS").as_deref() == Ok("1");
    assert!(
        !required,
        "GIT_COLLAB_REQUIRE_MCP_TESTS=1 but {} cannot import mcp (run scripts/install-deps.sh)",
        python.display()
    );
    eprintln!(
        "skipping: no MCP Python SDK at {} (run scripts/install-deps.sh); set GIT_COLLAB_REQUIRE_MCP_TESTS=1 to make this a failure",
        python.display()
    );
    None
}

fn mcp_argv(h: &ServerHarness, key: &Path) -> Vec<String> {
    let mut argv = h.ssh_options(key);
    argv.push("git@127.0.0.1".into());
    argv.push("collab-mcp".into());
    argv
}

#[test]
fn the_python_sdk_runs_an_agents_loop() {
    let Some(python) = sdk_python() else {
        return;
    };
    let h = ServerHarness::start();
    h.create_repo("agents");
    let other = h.authorized_key("other-agent");
    let script =
        collab_testkit::workspace_root().join("crates/collab-server/tests/mcp/agent_loop.py");
    let out = Command::new(python)
        .arg(&script)
        .env(
            "MCP_SSH_A",
            serde_json::to_string(&mcp_argv(&h, &h.ssh_client_key())).unwrap(),
        )
        .env(
            "MCP_SSH_B",
            serde_json::to_string(&mcp_argv(&h, &other)).unwrap(),
        )
        .env("MCP_REPO", "agents")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("agent loop: ok"),
        "agent loop failed ({}):\n{stdout}\n{stderr}\nserver log:\n{}",
        out.status,
        h.log()
    );
}

/// A raw MCP session: `ssh … collab-mcp` with lines in and out.
struct Raw {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Raw {
    fn open(h: &ServerHarness, key: &Path) -> Raw {
        let mut child = Command::new("ssh")
            .args(mcp_argv(h, key))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Raw {
            child,
            stdin,
            lines,
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).unwrap();
        self.stdin.flush().unwrap();
    }

    fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.send_raw(line.as_bytes());
    }

    /// The next line, as JSON; `None` when the session ended.
    fn next(&self) -> Option<Value> {
        let line = self.lines.recv_timeout(Duration::from_secs(60)).ok()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}")))
    }

    /// The response to request `id` (notifications before it are skipped).
    fn response(&self, id: i64) -> Value {
        loop {
            let msg = self.next().expect("the session ended");
            if msg["id"] == json!(id) {
                return msg;
            }
        }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(id)
    }

    fn initialize(&mut self, version: &str) -> Value {
        let reply = self.request(
            0,
            "initialize",
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        reply
    }

    fn call(&mut self, id: i64, tool: &str, arguments: Value) -> Value {
        self.request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
        )["result"]
            .clone()
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn malformed_messages_get_json_rpc_errors_and_the_session_goes_on() {
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_MCP__MAX_MESSAGE_SIZE".into(), "4KiB".into())],
        ..Default::default()
    });
    let mut s = Raw::open(&h, &h.ssh_client_key());
    // Before initialize only ping is served.
    let early = s.request(1, "tools/list", json!({}));
    assert_eq!(early["error"]["code"], -32600, "{early}");
    assert_eq!(s.request(2, "ping", json!({}))["result"], json!({}));

    // Version negotiation: a revision we speak comes back; another gets
    // our newest.
    for v in ["2025-06-18", "2025-03-26", "2025-11-25"] {
        let mut t = Raw::open(&h, &h.ssh_client_key());
        assert_eq!(t.initialize(v)["result"]["protocolVersion"], v);
    }
    let init = s.initialize("2099-01-01");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"],
        false
    );

    s.send_raw(b"{not json\n");
    let parse = s.next().unwrap();
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert_eq!(parse["id"], Value::Null);
    s.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}]\n");
    assert_eq!(s.next().unwrap()["error"]["code"], -32600);
    s.send_raw(b"{\"jsonrpc\":\"1.0\",\"id\":10,\"method\":\"ping\"}\n");
    let old = s.next().unwrap();
    assert_eq!(
        (old["id"].clone(), old["error"]["code"].clone()),
        (json!(10), json!(-32600))
    );
    // A line past mcp.max_message_size is skipped whole, with one error.
    let mut big =
        b"{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"ping\",\"params\":{\"x\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 64 * 1024));
    big.extend_from_slice(b"\"}}\n");
    s.send_raw(&big);
    let too_long = s.next().unwrap();
    assert_eq!(too_long["error"]["code"], -32600, "{too_long}");
    assert!(
        too_long["error"]["message"]
            .as_str()
            .unwrap()
            .contains("mcp.max_message_size"),
        "{too_long}"
    );
    let unknown = s.request(12, "resources/list", json!({}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let discover = s.request(13, "server/discover", json!({}));
    assert_eq!(discover["error"]["code"], -32601, "{discover}");
    let no_tool = s.request(14, "tools/call", json!({"name": "rm_rf", "arguments": {}}));
    assert_eq!(no_tool["error"]["code"], -32602, "{no_tool}");
    // And the session is still there.
    assert_eq!(s.request(15, "ping", json!({}))["result"], json!({}));
    let who = s.call(16, "whoami", json!({}));
    assert_eq!(who["isError"], false, "{who}");
    assert_eq!(
        who["structuredContent"]["fingerprint"],
        common::fingerprint(&h.ssh_client_key()).as_str()
    );
    // Another session of the same key was never disturbed.
    let mut other = Raw::open(&h, &h.ssh_client_key());
    other.initialize("2025-06-18");
    assert_eq!(other.request(1, "ping", json!({}))["result"], json!({}));
}

#[test]
fn tools_follow_the_callers_access() {
    let h = ServerHarness::start();
    h.create_repo("open");
    let secret = h.create_repo("secret");
    collab_testkit::write_live(
        &secret.join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    );
    let issue = h.open_server_issue("secret", "hidden work");
    let user = h.authorized_key("user");

    let names = |s: &mut Raw| -> Vec<String> {
        let listed = s.request(1, "tools/list", json!({}));
        listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let mut admin = Raw::open(&h, &h.ssh_client_key());
    admin.initialize("2025-06-18");
    let admin_tools = names(&mut admin);
    let mut u = Raw::open(&h, &user);
    u.initialize("2025-06-18");
    let user_tools = names(&mut u);
    for shared in [
        "issue_open",
        "lease_next",
        "repo_list",
        "events_read",
        "whoami",
    ] {
        assert!(
            user_tools.iter().any(|t| t == shared),
            "{shared}: {user_tools:?}"
        );
    }
    // Admin-only and rewind-only tools are the admin's alone.
    for admin_only in [
        "hook_approve",
        "hook_add",
        "repo_create",
        "repo_delete",
        "lease_break",
        "repo_gc",
    ] {
        assert!(admin_tools.iter().any(|t| t == admin_only), "{admin_only}");
        assert!(
            !user_tools.iter().any(|t| t == admin_only),
            "{admin_only}: {user_tools:?}"
        );
    }

    // A private repository answers exactly as a missing one.
    let hidden = u.call(2, "issue_show", json!({"repo": "secret", "issue": issue}));
    let missing = u.call(3, "issue_show", json!({"repo": "nothing", "issue": issue}));
    assert_eq!(hidden, missing);
    assert_eq!(hidden["isError"], true);
    assert_eq!(
        hidden["structuredContent"]["error"],
        "error: repository not found"
    );
    // Calling a tool that is not listed gets the verb's own refusal.
    let approve = u.call(4, "hook_approve", json!({"id": "1"}));
    assert_eq!(approve["isError"], true, "{approve}");
    let admin_view = admin.call(2, "issue_show", json!({"repo": "secret", "issue": issue}));
    assert_eq!(admin_view["isError"], false, "{admin_view}");
    assert_eq!(admin_view["structuredContent"]["title"], "hidden work");
    // Events of the private repository are not in the user's pages.
    let page = u.call(5, "events_read", json!({"since": 0}));
    assert_eq!(page["isError"], false, "{page}");
    let types: Vec<&Value> = page["structuredContent"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert!(types.iter().all(|e| e["repo"] != "secret.git"), "{page}");
    let admin_page = admin.call(3, "events_read", json!({"since": 0}));
    assert!(
        admin_page["structuredContent"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["repo"] == "secret.git"),
        "{admin_page}"
    );
}

#[test]
fn calls_in_flight_are_bounded_and_cancellation_ends_a_wait() {
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_MCP__MAX_CALLS_IN_FLIGHT".into(), "2".into())],
        ..Default::default()
    });
    h.create_repo("q");
    let a = h.open_server_issue("q", "a");
    let b = h.open_server_issue("q", "b");
    let holder = h.authorized_key("holder");
    for issue in [&a, &b] {
        let out = h.ssh_exec_as(&holder, &format!("collab-lease acquire 'q' '{issue}'"), b"");
        assert_eq!(out.code, 0, "{out:?}");
    }
    let mut s = Raw::open(&h, &h.ssh_client_key());
    s.initialize("2025-11-25");
    let wait = |id: i64, issue: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "lease_acquire", "arguments": {"repo": "q", "issue": issue, "wait": 120}}})
    };
    s.send(wait(1, &a));
    s.send(wait(2, &b));
    s.send(wait(3, &a));
    let third = s.response(3);
    assert_eq!(third["error"]["code"], -32000, "{third}");
    assert!(
        third["error"]["message"]
            .as_str()
            .unwrap()
            .contains("mcp.max_calls_in_flight"),
        "{third}"
    );
    // Cancel call 1: its waiter goes, so when the holder lets `a` go
    // nobody takes it. Call 2 still waits and wins `b`.
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "test"}}));
    assert_eq!(s.request(4, "ping", json!({}))["result"], json!({}));
    // The cancelled call leaves its slot once its wait has ended: then
    // one more call is taken.
    let started = std::time::Instant::now();
    let mut id = 5;
    let who = loop {
        let reply = s.request(id, "tools/call", json!({"name": "whoami", "arguments": {}}));
        if reply["error"]["code"] != -32000 {
            break reply["result"].clone();
        }
        assert!(started.elapsed() < Duration::from_secs(15), "{reply}");
        std::thread::sleep(Duration::from_millis(50));
        id += 1;
    };
    assert_eq!(who["isError"], false, "{who}");
    for issue in [&a, &b] {
        let out = h.ssh_exec_as(&holder, &format!("collab-lease release 'q' '{issue}'"), b"");
        assert_eq!(out.code, 0, "{out:?}");
    }
    let won = s.response(2);
    assert_eq!(
        won["result"]["structuredContent"]["status"], "acquired",
        "{won}"
    );
    let show = h.ssh_exec(&format!("collab-lease show 'q' '{a}'"));
    assert_eq!(show.json()["status"], "free", "{show:?}");
}

#[test]
fn an_idle_session_is_closed() {
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_MCP__IDLE_TIMEOUT".into(), "2s".into())],
        ..Default::default()
    });
    let mut s = Raw::open(&h, &h.ssh_client_key());
    s.initialize("2025-06-18");
    // No message, no call: the server ends the session (stdout closes).
    loop {
        match s.lines.recv_timeout(Duration::from_secs(60)) {
            Ok(_) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("the idle session was not closed"),
        }
    }
    let status = s.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// Wait until `n` commands run (the MCP session itself is one).
fn running_settles_at(h: &ServerHarness, n: u64, what: &str) {
    let start = std::time::Instant::now();
    loop {
        let running = commands_running(h);
        if running == n {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{what}: {running} commands running, not {n}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 44: a cancelled call's verb stops (here a diff whose reply waits
/// on its channel), and the call keeps its slot and its id until it has;
/// a reply cut at the session's cap stops its verb too.
#[test]
fn a_cancelled_call_stops_its_verb_and_keeps_its_slot_until_then() {
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_MCP__MAX_CALLS_IN_FLIGHT".into(), "1".into())],
        ..Default::default()
    });
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    let alice = common::review::agent(&h, "alice");
    // 7 MB of diff text: 14 MB of JSON, past the 8 MiB a call passes on.
    let id = common::review::big_patch(&h, &alice, 7_000_000);
    let mut s = Raw::open(&h, &h.ssh_client_key());
    s.initialize("2025-11-25");
    running_settles_at(&h, 1, "the session alone");

    let call = |id: i64, tool: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": tool, "arguments": arguments}})
    };
    let cancel = |id: i64| {
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": id, "reason": "test"}})
    };
    let diff = json!({"repo": "r", "patch": id});
    let one_write = |s: &mut Raw, messages: &[Value]| {
        let text: String = messages.iter().map(|m| format!("{m}\n")).collect();
        s.send_raw(text.as_bytes());
    };

    // The call, its cancellation and the next call arrive together: the
    // cancelled diff still holds the one slot.
    one_write(
        &mut s,
        &[
            call(1, "patch_diff", diff.clone()),
            cancel(1),
            call(2, "whoami", json!({})),
        ],
    );
    let second = s.response(2);
    assert_eq!(second["error"]["code"], -32000, "{second}");
    // Its verb stops, and then the slot is free.
    running_settles_at(&h, 1, "a cancelled diff");
    let who = s.call(3, "whoami", json!({}));
    assert_eq!(who["isError"], false, "{who}");

    // A cancelled call's id stays taken until its verb has stopped: the
    // reuse is refused (the cancelled call itself gets no response).
    one_write(
        &mut s,
        &[
            call(4, "patch_diff", diff.clone()),
            cancel(4),
            call(4, "whoami", json!({})),
        ],
    );
    let reused = s.response(4);
    assert_eq!(reused["error"]["code"], -32600, "{reused}");
    assert!(
        reused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("running"),
        "{reused}"
    );
    running_settles_at(&h, 1, "a cancelled diff whose id was reused");

    // A reply past the cap is refused, and its verb stops.
    let cut = s.call(5, "patch_diff", diff);
    assert_eq!(cut["isError"], true, "{cut}");
    assert!(
        cut["structuredContent"]["error"]
            .as_str()
            .unwrap()
            .contains("larger than"),
        "{cut}"
    );
    running_settles_at(&h, 1, "a diff cut at the cap");
    let who = s.call(6, "whoami", json!({}));
    assert_eq!(who["isError"], false, "{who}");
}

/// `events_read` without `since` starts at the head, as `collab-events
/// watch --no-follow` does: no events, and the head's seq as
/// `next_since`, so an agent following the cursor sees only what is new
/// (with `next_since: 0` it replayed the whole history as new).
#[test]
fn events_read_without_since_starts_at_the_head() {
    let h = ServerHarness::start();
    h.create_repo("cursor");
    h.open_server_issue("cursor", "old one");
    h.open_server_issue("cursor", "old two");
    let mut s = Raw::open(&h, &h.ssh_client_key());
    s.initialize("2025-06-18");
    let history = s.call(1, "events_read", json!({"since": 0}));
    let head = history["structuredContent"]["events"]
        .as_array()
        .and_then(|events| events.last())
        .and_then(|last| last["seq"].as_i64())
        .unwrap_or_else(|| panic!("no history: {history}"));
    assert_eq!(
        history["structuredContent"]["next_since"], head,
        "{history}"
    );

    let fresh = s.call(2, "events_read", json!({}));
    assert_eq!(fresh["isError"], false, "{fresh}");
    assert_eq!(fresh["structuredContent"]["events"], json!([]), "{fresh}");
    assert_eq!(fresh["structuredContent"]["next_since"], head, "{fresh}");
    assert_eq!(fresh["structuredContent"]["more"], false, "{fresh}");

    // Following the cursor gets the new event only.
    h.open_server_issue("cursor", "new one");
    let next = s.call(3, "events_read", json!({"since": head}));
    let events = next["structuredContent"]["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{next}");
    assert_eq!(events[0]["type"], "issue.opened", "{next}");
    assert_eq!(events[0]["payload"]["title"], "new one", "{next}");

    // A long poll without `since` waits for what comes after the head.
    let now = next["structuredContent"]["next_since"].as_i64().unwrap();
    s.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "events_read", "arguments": {"wait": 30},
                   "_meta": {"progressToken": "poll"}}}));
    // Its first progress report says it is waiting.
    loop {
        let msg = s.next().expect("the session ended");
        assert!(msg["id"] != json!(4), "answered before waiting: {msg}");
        if msg["method"] == "notifications/progress" {
            break;
        }
    }
    h.open_server_issue("cursor", "newer one");
    let polled = s.response(4)["result"].clone();
    let events = polled["structuredContent"]["events"].as_array().unwrap();
    assert!(
        !events.is_empty() && events.iter().all(|e| e["seq"].as_i64() > Some(now)),
        "{polled}"
    );
}

#[test]
fn refusals_say_why_in_their_error_line() {
    let h = ServerHarness::start();
    h.create_repo("why");
    let issue = h.open_server_issue("why", "work");
    let other = h.authorized_key("other");
    let mut s = Raw::open(&h, &h.ssh_client_key());
    s.initialize("2025-06-18");
    let claim = s.call(
        1,
        "lease_acquire",
        json!({"repo": "why", "issue": issue, "ttl": 600}),
    );
    let token = claim["structuredContent"]["token"]
        .as_i64()
        .unwrap_or_else(|| panic!("{claim}"));

    // Another key asking for the claimed issue is told who holds it.
    let mut o = Raw::open(&h, &other);
    o.initialize("2025-06-18");
    let held = o.call(1, "lease_acquire", json!({"repo": "why", "issue": issue}));
    assert_eq!(held["isError"], true, "{held}");
    let line = held["structuredContent"]["error"].as_str().unwrap();
    assert!(
        line.starts_with("error: held: issue ") && line.contains(" is held by "),
        "{held}"
    );

    // A token whose lease the close ended: the issue is closed, in words.
    let closed = s.call(
        2,
        "issue_close",
        json!({"repo": "why", "issue": issue, "lease_token": token}),
    );
    assert_eq!(closed["isError"], false, "{closed}");
    let again = s.call(
        3,
        "issue_close",
        json!({"repo": "why", "issue": issue, "lease_token": token}),
    );
    assert_eq!(again["isError"], true, "{again}");
    assert_eq!(again["structuredContent"]["status"], "fenced", "{again}");
    assert_eq!(again["structuredContent"]["holder"], Value::Null, "{again}");
    assert_eq!(
        again["structuredContent"]["error"],
        "error: fenced: the issue is closed, which ended its lease",
        "{again}"
    );

    // The same over ssh: the CLI's line and the reply's message say it.
    let out = h.ssh_exec(&format!(
        "collab-issue comment why {issue} --body late --lease-token {token}"
    ));
    assert_eq!(out.code, collab_proto::exit::FENCED as i32, "{out:?}");
    assert_eq!(
        out.json()["message"],
        "the issue is closed, which ended its lease",
        "{out:?}"
    );
}

/// One service, many doors (issue 46): a verb answers alike over ssh and
/// as a tool, in process (a body on standard input, a read, a refusal,
/// a verb of the admin family), since both run the same service function.
#[test]
fn a_verb_answers_alike_over_ssh_and_mcp() {
    let h = ServerHarness::start();
    h.create_repo("alike");
    let mut s = Raw::open(&h, &h.ssh_client_key());
    s.initialize("2025-06-18");
    // Written as a tool with a body of two lines (standard input), read
    // back over ssh and as a tool: the same reply.
    let opened = s.call(
        1,
        "issue_open",
        json!({"repo": "alike", "title": "both doors", "body": "line one\nline two"}),
    );
    assert_eq!(opened["isError"], false, "{opened}");
    let id = opened["structuredContent"]["issue"]
        .as_str()
        .unwrap_or_else(|| panic!("{opened}"))
        .to_string();
    let over_ssh = h.ssh_exec(&format!("collab-issue show alike {id}"));
    assert_eq!(over_ssh.code, 0, "{over_ssh:?}");
    let shown = s.call(2, "issue_show", json!({"repo": "alike", "issue": id}));
    assert_eq!(shown["isError"], false, "{shown}");
    assert_eq!(shown["structuredContent"], over_ssh.json(), "{shown}");
    assert_eq!(shown["structuredContent"]["body"], "line one\nline two");
    // A refusal: the same one line.
    let refused_ssh = h.ssh_exec("collab-issue show nowhere 0123abcd");
    assert_eq!(refused_ssh.code, 1, "{refused_ssh:?}");
    let refused = s.call(
        3,
        "issue_show",
        json!({"repo": "nowhere", "issue": "0123abcd"}),
    );
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(
        refused["structuredContent"]["error"],
        refused_ssh.stderr.trim_end(),
        "{refused}"
    );
    // The admin family too.
    let whoami_ssh = h.ssh_exec("collab-whoami");
    let whoami = s.call(4, "whoami", json!({}));
    assert_eq!(whoami["structuredContent"], whoami_ssh.json(), "{whoami}");
}

/// docs/mcp.md's Python example, run as written with the SDK (issue 50):
/// the key is only in an ssh-agent, as on a developer's machine, so the
/// example works only if it hands `SSH_AUTH_SOCK` on to `ssh` (the SDK
/// passes the child a few variables of its own choosing). Substituted: the
/// port, the repository, and the host with the options a test machine
/// needs (no known_hosts, no user ssh config).
#[test]
fn the_docs_python_example_works_with_a_key_in_ssh_agent() {
    let Some(python) = sdk_python() else {
        return;
    };
    let h = ServerHarness::start();
    h.create_repo("docs");
    h.open_server_issue("docs", "something ready");
    let docs =
        std::fs::read_to_string(collab_testkit::workspace_root().join("docs/mcp.md")).unwrap();
    let block = docs
        .split("The official Python SDK")
        .nth(1)
        .and_then(|rest| rest.split("```python\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("a python block after \"The official Python SDK\"");
    for needed in ["\"2222\"", "\"git@forge.example.com\"", "\"team/app\""] {
        assert!(block.contains(needed), "{needed} in:\n{block}");
    }
    let port = format!("\"{}\"", h.ssh_port());
    let block = block
        .replace("\"2222\"", &port)
        .replace(
            "\"git@forge.example.com\"",
            "\"-F\", \"/dev/null\", \"-o\", \"UserKnownHostsFile=/dev/null\", \
             \"-o\", \"StrictHostKeyChecking=no\", \"git@127.0.0.1\"",
        )
        .replace("\"team/app\"", "\"docs\"");
    let body: String = block.lines().map(|l| format!("    {l}\n")).collect();
    let script = format!(
        "import anyio\n\nasync def main():\n{body}    print(\"token\", token)\n\nanyio.run(main)\n"
    );

    // An agent holding the key; no key file where ssh looks by default.
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("agent.sock");
    let mut agent = Command::new("ssh-agent")
        .arg("-D")
        .arg("-a")
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !sock.exists() {
        assert!(started.elapsed() < Duration::from_secs(10), "no agent");
        std::thread::sleep(Duration::from_millis(50));
    }
    let added = Command::new("ssh-add")
        .arg(h.ssh_client_key())
        .env("SSH_AUTH_SOCK", &sock)
        .output()
        .unwrap();
    assert!(added.status.success(), "{added:?}");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new(python)
        .arg("-c")
        .arg(&script)
        .env("HOME", &home)
        .env("SSH_AUTH_SOCK", &sock)
        .output()
        .unwrap();
    let _ = agent.kill();
    let _ = agent.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.starts_with("token "),
        "the example failed ({}):\n{script}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
