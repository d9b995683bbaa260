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
    // `export_behind` says how far the export trails the writes: a moment's
    // state, not data the copy carries.
    let without_lag = |mut v: serde_json::Value| {
        v.as_object_mut().unwrap().remove("export_behind");
        v
    };
    assert_eq!(
        without_lag(h.ssh_exec("collab-issue list 'r.git'").json()),
        without_lag(before_list)
    );
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

    // The SQLite file `db migrate` left behind is stale now. A backup
    // neither takes it nor reports its counts as the server's (issue 32:
    // it did, `--verify` called it sound, and restore wrote it back while
    // PostgreSQL stayed empty); it dumps PostgreSQL instead (issue 28).
    assert!(
        h.repos_dir().join("collab.db").exists(),
        "the leftover is there"
    );
    let backup_dir = h.temp_dir().join("backup");
    let out = host(
        &h,
        &db.url,
        &["backup", "--to", &backup_dir.display().to_string()],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(!text.contains("NOT in this backup"), "{text}");
    assert!(!backup_dir.join("collab.db").exists());
    assert!(backup_dir.join("collab.pgdump").is_file());
    let found = walk(&backup_dir);
    assert!(
        !found.iter().any(|p| p.ends_with("collab.db")),
        "the stale SQLite file was copied: {found:?}"
    );
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(backup_dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["database_dump"], "pg_dump-custom", "{manifest}");
    assert!(manifest["database_elsewhere"].is_null(), "{manifest}");
    // The census is PostgreSQL's, not the leftover file's: the acquire made
    // after the move is counted.
    assert!(
        manifest["database"]["tables"]["events"].as_u64().unwrap() >= after_events.len() as u64,
        "{manifest}"
    );
    // The fingerprint it printed: "signed by the server key SHA256:… (…)".
    let fingerprint = text
        .split("signed by the server key ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no key in {text}"))
        .to_string();
    let shown = backup_dir.display().to_string();
    let verify = ["backup", "--verify", &shown, "--key", &fingerprint];
    let out = host(&h, &db.url, &verify);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("is sound"), "{text}");
}

/// `git-collab-server` on the host with this harness's state directory and
/// `collab_db` = `url`.
fn host(h: &ServerHarness, url: &str, args: &[&str]) -> std::process::Output {
    collab_testkit::host_cli(h.state_dir(), Some(url), args)
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path.clone());
            }
            found.push(path);
        }
    }
    found
}

/// A SQLite backup restored under a PostgreSQL `collab_db` would be a file
/// nobody reads, reported as restored: refused, nothing written.
#[test]
fn a_sqlite_backup_is_not_restored_beside_a_postgres_database() {
    if admin_url().is_none() {
        return;
    }
    std::env::remove_var("GIT_COLLAB_TEST_BACKEND");
    let mut h = ServerHarness::start();
    h.create_repo("r");
    h.open_server_issue("r", "One");
    let backup_dir = h.temp_dir().join("backup");
    let out = Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
        .env_remove("GIT_COLLAB_COLLAB_DB")
        .arg("--state-dir")
        .arg(h.state_dir())
        .args([
            "backup",
            "--to",
            &backup_dir.display().to_string(),
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let key = serde_json::from_slice::<Value>(&out.stdout).unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();
    h.stop();
    let db = TestDatabase::create();
    let fresh = h.temp_dir().join("fresh-state");
    let out = Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
        .env("GIT_COLLAB_COLLAB_DB", &db.url)
        .arg("--state-dir")
        .arg(&fresh)
        .args([
            "restore",
            "--from",
            &backup_dir.display().to_string(),
            "--key",
            &key,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("collab_db is PostgreSQL"), "{stderr}");
    assert!(!fresh.join("repos").exists(), "nothing was restored");
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
