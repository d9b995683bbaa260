//! Busy is never an internal error (issue 45, item 3), on PostgreSQL with
//! the real server over real `ssh`: a `collab-lease next` whose ready
//! issue another transaction decides for longer than the server defers it
//! (the fleet run's `lease_next`) answers the busy exit status
//! (`collab_proto::exit::BUSY`) and one line saying so, never `error:
//! internal error`, and claims nothing; and the CLI and the MCP tools
//! run such a command again by themselves. The lock is held the way another node's writer holds
//! it: a transaction-scoped advisory lock with the server's own key, from
//! a connection of the test's.
//!
//! (A repository write cannot be held busy past its bound this way: the
//! webhook claim pass every 5 seconds is a generic write, whose group
//! excludes every other node's repository writes by the generic writes'
//! key, and so writes the repository itself: a lock holder that takes only
//! the repository's key is no other node's writer.)
//!
//! PostgreSQL only (SQLite has one writer and no busy lock): they skip
//! without `GIT_COLLAB_TEST_POSTGRES` as `multi_node` does, and fail
//! without it under `GIT_COLLAB_REQUIRE_POSTGRES_TESTS=1`.

use collab_testkit as common;
use collab_testkit::cli_bin;

use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::web::metrics;
use common::{HarnessOptions, ServerHarness, SshOutput};

/// The busy reply line (`ssh::reply::BUSY`).
const BUSY_LINE: &str =
    "error: busy: another writer held this issue or repository too long; nothing was written, try again\n";

/// The busy exit status.
const BUSY: i32 = collab_proto::exit::BUSY as i32;

/// Another transaction holding the advisory lock `key` (an SQL
/// expression) on the server's database until the returned sender is
/// dropped or sent to.
fn hold(url: &str, key: &str) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (url, key) = (url.to_string(), key.to_string());
    let (held_tx, held) = mpsc::channel();
    let (end, end_rx) = mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut tx = client.transaction().unwrap();
        tx.batch_execute(&format!("SELECT pg_advisory_xact_lock({key})"))
            .unwrap();
        held_tx.send(()).unwrap();
        let _ = end_rx.recv();
        tx.commit().unwrap();
    });
    held.recv().expect("the lock is held");
    (end, holder)
}

/// The key of an issue's lock (`sql::pg`, `lock_issue`).
fn issue_key(repo: &str, issue: &str) -> String {
    format!("hashtextextended(length('{repo}') || ':' || '{repo}' || '{issue}', 0)")
}

fn server() -> Option<ServerHarness> {
    let h = ServerHarness::start_on_postgres(HarnessOptions::default())?;
    h.create_repo("r");
    Some(h)
}

fn assert_busy(out: &SshOutput) {
    assert_eq!(out.code, BUSY, "{out:?}");
    assert_eq!(out.stderr, BUSY_LINE, "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
}

/// `collab-lease next` whose only ready issue another transaction is
/// deciding for longer than the writer defers it: busy, not "internal
/// error" (the fleet run's `lease_next`), and not "empty" either (an issue
/// is ready). Once the lock is gone the same call claims it.
#[test]
fn next_on_an_issue_held_elsewhere_past_the_wait_answers_busy() {
    let Some(h) = server() else { return };
    let issue = h.open_server_issue("r", "the only one");
    let url = h.db_setting();
    let (end, holder) = hold(&url, &issue_key("r.git", &issue));
    let started = Instant::now();
    let out = h.ssh_exec("collab-lease next 'r'");
    assert_busy(&out);
    // The writer deferred it (2000 groups) before answering so.
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    drop(end);
    holder.join().unwrap();
    let out = h.ssh_exec("collab-lease next 'r'");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["issue"], issue.as_str());
    let text = metrics(&h);
    assert!(
        text.contains(
            "git_collab_ssh_verbs_total{verb=\"collab-lease next\",outcome=\"busy\"} 1\n"
        ),
        "{text}"
    );
}

/// The value of one sample line (`name{labels} value`) of `/metrics`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The CLI runs a busy command again by itself: the only ready issue is
/// held elsewhere for longer than the server defers a `next` (so the first
/// run must answer busy) and let go during the CLI's later runs; the
/// claim then lands, once.
#[test]
fn the_cli_runs_a_busy_command_again() {
    let Some(h) = server() else { return };
    let issue = h.open_server_issue("r", "the only one");
    let clone = h.clone_repo("r", "work");
    let key = h.ssh_client_key();
    // Mode detection first, so the held lock meets `next` itself.
    let probe = h
        .client_command(cli_bin(), &key, &clone)
        .args(["issue", "list", "--json"])
        .output()
        .unwrap();
    assert!(probe.status.success(), "{probe:?}");
    let (end, holder) = hold(&h.db_setting(), &issue_key("r.git", &issue));
    let started = Instant::now();
    let child = h
        .client_command(cli_bin(), &key, &clone)
        .args(["issue", "next", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Longer than one run's bound (2000 deferred groups, two seconds and
    // more), shorter than five runs and their pauses.
    std::thread::sleep(Duration::from_secs(8));
    drop(end);
    holder.join().unwrap();
    let out = SshOutput::from_output(child.wait_with_output().unwrap());
    assert_eq!(out.code, 0, "{out:?}");
    assert!(started.elapsed() >= Duration::from_secs(8));
    assert_eq!(out.json()["issue"], issue.as_str(), "{out:?}");
    let text = metrics(&h);
    let busy = sample(
        &text,
        "git_collab_ssh_verbs_total{verb=\"collab-lease next\",outcome=\"busy\"}",
    );
    let ok = sample(
        &text,
        "git_collab_ssh_verbs_total{verb=\"collab-lease next\",outcome=\"ok\"}",
    );
    assert!(
        (1.0..=4.0).contains(&busy) && ok == 1.0,
        "busy {busy}, ok {ok}:\n{text}"
    );
    let leases = h.ssh_exec("collab-lease list 'r'");
    assert_eq!(leases.json()["leases"].as_array().map(Vec::len), Some(1));
}

/// The MCP tools run a busy call again by themselves (`mcp::tools`, as
/// the CLI does): `lease_next` whose only ready issue is held elsewhere
/// for longer than one run's bound, and let go during the later runs,
/// answers one tool result that claimed it, not an error; /metrics counts
/// the busy runs behind it and one that claimed.
#[test]
fn an_mcp_tool_runs_a_busy_call_again() {
    let Some(h) = server() else { return };
    let issue = h.open_server_issue("r", "the only one");
    let mut mcp = collab_testkit::mcp::McpSession::open(&h, &h.ssh_client_key());
    let (end, holder) = hold(&h.db_setting(), &issue_key("r.git", &issue));
    let started = Instant::now();
    let call = std::thread::spawn(move || {
        mcp.call("lease_next", serde_json::json!({"repo": "r", "ttl": 600}))
    });
    // Longer than one run's bound, shorter than five runs and their pauses.
    std::thread::sleep(Duration::from_secs(8));
    drop(end);
    holder.join().unwrap();
    let result = call.join().unwrap().expect("a tool result");
    assert!(started.elapsed() >= Duration::from_secs(8));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"]["issue"],
        issue.as_str(),
        "{result}"
    );
    let text = metrics(&h);
    let busy = sample(
        &text,
        "git_collab_ssh_verbs_total{verb=\"collab-lease next\",outcome=\"busy\"}",
    );
    let ok = sample(
        &text,
        "git_collab_ssh_verbs_total{verb=\"collab-lease next\",outcome=\"ok\"}",
    );
    assert!(
        (1.0..=4.0).contains(&busy) && ok == 1.0,
        "busy {busy}, ok {ok}:\n{text}"
    );
}
