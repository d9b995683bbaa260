//! `git-collab-server db migrate --to postgres://…`: a server's SQLite
//! database, with issues, comments, leases whose tokens have grown and the
//! event log, copied into an empty PostgreSQL database by the real binary;
//! the server then starts on PostgreSQL and carries on where it was (same
//! issues, same holder, the next token above every token handed out, the
//! same events). A second copy into the now non-empty target is refused
//! and writes nothing; a bad target gets one clear line. Needs
//! `GIT_COLLAB_TEST_POSTGRES` (skips without it, fails without it under
//! `GIT_COLLAB_REQUIRE_POSTGRES_TESTS=1`).

use collab_testkit as common;

use std::process::Command;

use common::pg::{admin_url, TestDatabase};
use common::ServerHarness;
use serde_json::Value;

fn migrate(h: &ServerHarness, to: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
        .env_remove("GIT_COLLAB_COLLAB_DB")
        .arg("--state-dir")
        .arg(h.state_dir())
        .args(["db", "migrate", "--to", to, "--json"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn events(h: &ServerHarness) -> Vec<Value> {
    h.ssh_exec("collab-events watch --since 1 --no-follow")
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] != "heartbeat")
        .collect()
}

#[test]
fn a_sqlite_server_moves_to_postgres_and_carries_on() {
    if admin_url().is_none() {
        return;
    }
    // Always SQLite here, whatever the backend of the run.
    std::env::remove_var("GIT_COLLAB_TEST_BACKEND");
    let mut h = ServerHarness::start();
    assert!(h.pg.is_none());
    h.create_repo("r");
    let one = h.open_server_issue("r", "First");
    let two = h.open_server_issue("r", "Second");
    let out = h.ssh_exec(&format!(
        "collab-issue comment 'r.git' '{}' --body 'hello'",
        &one[..8]
    ));
    assert_eq!(out.code, 0, "{out:?}");
    // Tokens grow to 3 on `one`; `two` stays held.
    for _ in 0..3 {
        let out = h.ssh_exec(&format!("collab-lease acquire 'r.git' '{}'", &one[..8]));
        assert_eq!(out.code, 0, "{out:?}");
        h.ssh_exec(&format!("collab-lease release 'r.git' '{}'", &one[..8]));
    }
    let held = h.ssh_exec(&format!(
        "collab-lease acquire 'r.git' '{}' --note 'mine'",
        &two[..8]
    ));
    assert_eq!(held.code, 0, "{held:?}");
    let before_events = events(&h);
    let before_list = h.ssh_exec("collab-issue list 'r.git'").json();

    // While the server runs, the copy is refused (issue 32: it ran, and
    // every write after its snapshot was lost at the switch) and the
    // target is left empty.
    let early = TestDatabase::create();
    let (code, stdout, stderr) = migrate(&h, &early.url);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("a server is running on"), "{stderr}");
    assert!(stderr.contains(&h.pid().to_string()), "{stderr}");
    let (code, _, stderr) = migrate(&h, &early.url);
    assert_eq!(code, 1, "still refused, still nothing written: {stderr}");
    assert!(stderr.contains("a server is running on"), "{stderr}");
    h.stop();

    let db = TestDatabase::create();
    let (code, stdout, stderr) = migrate(&h, &db.url);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["tables"]["issues"], 2, "{report}");
    assert_eq!(report["tables"]["issue_comments"], 1, "{report}");
    assert_eq!(report["token_max"], 3, "{report}");
    assert_eq!(
        report["counters"]["events"],
        before_events.last().unwrap()["seq"],
        "{report}"
    );

    // A second copy would merge two histories: refused, nothing written.
    let (code, stdout, stderr) = migrate(&h, &db.url);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not empty"), "{stderr}");

    h.use_database(&db.url);
    h.start_again();
    assert_eq!(h.ssh_exec("collab-issue list 'r.git'").json(), before_list);
    let shown = h
        .ssh_exec(&format!("collab-lease show 'r.git' '{}'", &two[..8]))
        .json();
    assert_eq!(shown["holder"], held.json()["holder"], "{shown}");
    assert_eq!(shown["note"], "mine", "{shown}");
    let next = h.ssh_exec(&format!("collab-lease acquire 'r.git' '{}'", &one[..8]));
    assert_eq!(next.code, 0, "{next:?}");
    assert_eq!(
        next.json()["token"],
        4,
        "tokens go on from the copied high-water mark"
    );
    let after_events = events(&h);
    assert_eq!(after_events[..before_events.len()], before_events[..]);
    assert!(
        after_events.len() > before_events.len(),
        "the new acquire appended its event"
    );
}

#[test]
fn a_bad_target_gets_one_line_and_no_copy() {
    let mut h = ServerHarness::start();
    h.create_repo("r");
    // Stopped: a running server would be the first refusal.
    h.stop();
    let (code, _, stderr) = migrate(&h, "/tmp/not-a-url.db");
    assert_eq!(code, 1);
    assert_eq!(stderr.trim(), "error: --to must be a postgres:// URL");
    // Nothing listens on port 1: a clear connection error, not a panic.
    let (code, _, stderr) = migrate(&h, "postgres://collab@127.0.0.1:1/nowhere");
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: db migrate to postgres://collab@127.0.0.1:1/nowhere"),
        "{stderr}"
    );
}
