//! A raw MCP client for benches: `ssh … collab-mcp` with JSON-RPC lines in
//! and out, request by request, as any MCP client sends them (no SDK, so
//! the bench measures the server and OpenSSH, not a client library).

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

use crate::harness::ServerHarness;

/// One MCP session over `ssh git@127.0.0.1 collab-mcp` as `key`,
/// initialized; the `ssh` process is killed on drop.
pub struct McpSession {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: i64,
}

impl McpSession {
    /// Connect as `key` and run the `initialize` handshake.
    pub fn open(h: &ServerHarness, key: &Path) -> McpSession {
        let mut child = Command::new("ssh")
            .args(h.ssh_options(key))
            .args(["git@127.0.0.1", "collab-mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("ssh");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut mcp = McpSession {
            child,
            stdin,
            stdout,
            next_id: 1,
        };
        let init = mcp.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}),
        );
        assert!(init["result"]["protocolVersion"].is_string(), "{init}");
        writeln!(
            mcp.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        mcp
    }

    /// Send one request and read lines up to its reply (notifications and
    /// progress in between are skipped); `Value::Null` when the session
    /// ended first.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if writeln!(self.stdin, "{line}")
            .and_then(|()| self.stdin.flush())
            .is_err()
        {
            return Value::Null;
        }
        loop {
            let mut reply = String::new();
            if self.stdout.read_line(&mut reply).unwrap_or(0) == 0 {
                return Value::Null;
            }
            let v: Value = serde_json::from_str(&reply).unwrap_or(Value::Null);
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// A tool call's result (`None`: no result at all, a JSON-RPC error or
    /// the session gone).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Option<Value> {
        let reply = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        reply.get("result").cloned()
    }
}

impl Drop for McpSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
