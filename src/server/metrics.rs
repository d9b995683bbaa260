//! Process-wide counters, exposed at `/metrics` in the Prometheus text
//! format (version 0.0.4). A tiny registry of atomics and label maps: SSH
//! sessions opened, exec verbs finished by outcome, lease operations by
//! outcome, HTTP responses by status. Anyone may count (`ssh_session_opened`,
//! `verb_finished`, `lease_op`, `http_request`); only `render` reads.
//!
//! Label values come from the server's own vocabulary (verb names, outcome
//! words, status codes), never from client input, so the label sets stay
//! small; they are escaped anyway.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

static SSH_SESSIONS: AtomicU64 = AtomicU64::new(0);
static VERBS: Mutex<BTreeMap<(String, String), u64>> = Mutex::new(BTreeMap::new());
static LEASE_OPS: Mutex<BTreeMap<(String, String), u64>> = Mutex::new(BTreeMap::new());
static HTTP_REQUESTS: Mutex<BTreeMap<u16, u64>> = Mutex::new(BTreeMap::new());
static WATCHERS: AtomicU64 = AtomicU64::new(0);

/// The number of `collab-events watch` streams connected now.
pub fn set_watchers(n: u64) {
    WATCHERS.store(n, Ordering::Relaxed);
}

/// An SSH connection completed its handshake.
pub fn ssh_session_opened() {
    SSH_SESSIONS.fetch_add(1, Ordering::Relaxed);
}

/// An exec verb (`git-upload-pack`, `collab-lease acquire`, ...) finished
/// with `outcome` (`ok`, `error`, `refused`, ...).
pub fn verb_finished(verb: &str, outcome: &str) {
    bump(&VERBS, (verb.to_string(), outcome.to_string()));
}

/// A lease operation (`acquire`, `renew`, `release`, `list`) finished with
/// `outcome` (`acquired`, `held`, `error`, ...).
pub fn lease_op(op: &str, outcome: &str) {
    bump(&LEASE_OPS, (op.to_string(), outcome.to_string()));
}

/// The HTTP server answered a request with `status`.
/// The outcome label of an exec verb's exit status: 0 ok, 4 conflict (a
/// lease held by someone else), anything else error.
pub fn outcome_of_exit(code: u32) -> &'static str {
    match code {
        0 => "ok",
        4 => "conflict",
        _ => "error",
    }
}

pub fn http_request(status: u16) {
    bump(&HTTP_REQUESTS, status);
}

fn bump<K: Ord>(map: &Mutex<BTreeMap<K, u64>>, key: K) {
    // A poisoned map only means a panic elsewhere mid-increment: keep counting.
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    *map.entry(key).or_insert(0) += 1;
}

fn snapshot<K: Ord + Clone>(map: &Mutex<BTreeMap<K, u64>>) -> BTreeMap<K, u64> {
    map.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// A label value with `\`, `"` and newlines escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Every counter in the Prometheus text exposition format.
pub fn render() -> String {
    let mut out = String::new();
    let header = |out: &mut String, name: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    };
    header(
        &mut out,
        "git_collab_ssh_sessions_total",
        "SSH connections that completed the handshake.",
    );
    let _ = writeln!(
        out,
        "git_collab_ssh_sessions_total {}",
        SSH_SESSIONS.load(Ordering::Relaxed)
    );
    header(
        &mut out,
        "git_collab_ssh_verbs_total",
        "SSH exec verbs finished, by verb and outcome.",
    );
    for ((verb, outcome), n) in snapshot(&VERBS) {
        let _ = writeln!(
            out,
            "git_collab_ssh_verbs_total{{verb=\"{}\",outcome=\"{}\"}} {n}",
            label(&verb),
            label(&outcome)
        );
    }
    header(
        &mut out,
        "git_collab_lease_operations_total",
        "Lease operations, by operation and outcome.",
    );
    for ((op, outcome), n) in snapshot(&LEASE_OPS) {
        let _ = writeln!(
            out,
            "git_collab_lease_operations_total{{op=\"{}\",outcome=\"{}\"}} {n}",
            label(&op),
            label(&outcome)
        );
    }
    header(
        &mut out,
        "git_collab_http_requests_total",
        "HTTP responses, by status code.",
    );
    for (status, n) in snapshot(&HTTP_REQUESTS) {
        let _ = writeln!(
            out,
            "git_collab_http_requests_total{{status=\"{status}\"}} {n}"
        );
    }
    let gauge = |out: &mut String, name: &str, help: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    gauge(
        &mut out,
        "git_collab_event_watchers",
        "collab-events watch streams connected now.",
        WATCHERS.load(Ordering::Relaxed),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_renders_prometheus_text() {
        // Labels no other test uses: tests share the process-wide registry.
        ssh_session_opened();
        verb_finished("test-verb", "ok");
        verb_finished("test-verb", "ok");
        lease_op("test-op", "held");
        http_request(418);
        verb_finished("odd\"verb", "a\\b");
        let text = render();
        assert!(text.contains("# TYPE git_collab_ssh_sessions_total counter\n"));
        assert!(text.contains("git_collab_ssh_verbs_total{verb=\"test-verb\",outcome=\"ok\"} 2\n"));
        assert!(
            text.contains("git_collab_lease_operations_total{op=\"test-op\",outcome=\"held\"} 1\n")
        );
        assert!(text.contains("git_collab_http_requests_total{status=\"418\"} 1\n"));
        assert!(text.contains("{verb=\"odd\\\"verb\",outcome=\"a\\\\b\"}"));
        // Every sample line is `name{labels} value` or `name value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<u64>().is_ok(), "{line}");
        }
    }
}
