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
    // The cancelled call left a slot: one more call is taken.
    let who = s.call(5, "whoami", json!({}));
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
