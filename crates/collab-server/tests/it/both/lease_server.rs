//! `collab-lease` end to end: the real server, the real `ssh`, issues made
//! with the real `git-collab` and pushed over SSH. Every test checks the
//! JSON reply and the exit code of the contract (0 success, 1 error, 4 lease
//! conflict).

use collab_testkit as common;

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use common::{fingerprint, public_key_line, ServerHarness, SshOutput, NOT_FOUND};
use serde_json::Value;

/// A server with repository `r.git` holding one open issue.
struct Fixture {
    h: ServerHarness,
    clone: PathBuf,
    /// The full id of the open issue.
    issue: String,
}

fn setup() -> Fixture {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "work");
    let issue = open_on_server(&h, &clone, "Fix the frobnicator");
    Fixture { h, clone, issue }
}

/// Open an issue on the server with the CLI in `clone`; its full id.
fn open_on_server(h: &ServerHarness, clone: &Path, title: &str) -> String {
    h.open_issue(clone, title)
}

fn lease(h: &ServerHarness, key: &Path, args: &str) -> SshOutput {
    h.ssh_exec_as(key, &format!("collab-lease {args}"), b"")
}

/// A successful reply: exit 0, one JSON object on stdout, nothing on stderr.
fn ok_json(out: &SshOutput) -> Value {
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    out.json()
}

/// A conflict: exit 4 with the `held` JSON.
fn held_json(out: &SshOutput) -> Value {
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let v = out.json();
    assert_eq!(v["status"], "held", "{out:?}");
    v
}

/// An error: exit 1, exactly `line` on stderr, nothing on stdout.
fn assert_error(out: &SshOutput, line: &str) {
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.stdout, "", "{out:?}");
    assert_eq!(out.stderr, format!("{line}\n"), "{out:?}");
}

fn timestamp(v: &Value) -> i64 {
    let text = v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}"));
    assert!(text.ends_with('Z'), "UTC RFC3339: {text}");
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .timestamp()
}

fn now() -> i64 {
    Utc::now().timestamp()
}

#[test]
fn acquire_open_issue_succeeds() {
    let f = setup();
    let key = f.h.ssh_client_key();
    let v = ok_json(&lease(
        &f.h,
        &key,
        &format!("acquire 'r.git' '{}'", f.issue),
    ));
    assert_eq!(v["status"], "acquired");
    assert_eq!(v["repo"], "r.git");
    assert_eq!(v["issue"], f.issue.as_str());
    assert_eq!(v["holder"], fingerprint(&key).as_str());
    assert_eq!(v["token"], 1);
    assert_eq!(v["expires_at"], Value::Null);
    // The nine fields, and the holder's display name (the key's comment).
    assert_eq!(v.as_object().unwrap().len(), 10, "{v}");
    assert_eq!(v["holder_name"], "client", "{v}");
    assert_eq!(v["note"], Value::Null);
    assert_eq!(v["renewed_at"], Value::Null);
}

#[test]
fn acquire_with_ttl_reports_expiry() {
    let f = setup();
    let key = f.h.ssh_client_key();
    let before = now();
    let out = lease(
        &f.h,
        &key,
        &format!("acquire 'r.git' '{}' --ttl 300", f.issue),
    );
    let after = now();
    let v = ok_json(&out);
    assert_eq!(v["status"], "acquired");
    let expires = timestamp(&v["expires_at"]);
    assert!(
        (before + 300..=after + 300).contains(&expires),
        "expires_at is now + ttl: {before} {expires} {after}"
    );
}

#[test]
fn acquire_conflict_reports_holder() {
    let f = setup();
    let first = f.h.ssh_client_key();
    let second = f.h.authorized_key("second");
    let mine = ok_json(&lease(
        &f.h,
        &first,
        &format!("acquire 'r.git' '{}' --ttl 600", f.issue),
    ));
    let v = held_json(&lease(
        &f.h,
        &second,
        &format!("acquire 'r.git' '{}'", f.issue),
    ));
    assert_eq!(v["holder"], fingerprint(&first).as_str());
    assert_eq!(v["repo"], "r.git");
    assert_eq!(v["issue"], f.issue.as_str());
    assert_eq!(v["expires_at"], mine["expires_at"]);
    assert!(v.get("token").is_none(), "a loser learns no token: {v}");
}

#[test]
fn reacquire_same_key_is_idempotent() {
    let f = setup();
    let key = f.h.ssh_client_key();
    let cmd = format!("acquire 'r.git' '{}'", f.issue);
    let first = ok_json(&lease(&f.h, &key, &cmd));
    let mut again = ok_json(&lease(&f.h, &key, &cmd));
    assert!(
        again["renewed_at"].is_string(),
        "a re-acquire renews: {again}"
    );
    again["renewed_at"] = Value::Null;
    assert_eq!(again, first, "same reply, same token");
    // Re-acquiring with a TTL keeps the tenure and sets the new expiry.
    let with_ttl = ok_json(&lease(&f.h, &key, &format!("{cmd} --ttl 120")));
    assert_eq!(with_ttl["token"], 1);
    assert!(with_ttl["expires_at"].is_string());
}

#[test]
fn renew_extends() {
    let f = setup();
    let key = f.h.ssh_client_key();
    let acquired = ok_json(&lease(
        &f.h,
        &key,
        &format!("acquire 'r.git' '{}' --ttl 60", f.issue),
    ));
    let v = ok_json(&lease(
        &f.h,
        &key,
        &format!("renew 'r.git' '{}' --ttl 3600", f.issue),
    ));
    assert_eq!(v["status"], "renewed");
    assert_eq!(v["issue"], f.issue.as_str());
    assert_eq!(v["holder"], fingerprint(&key).as_str());
    assert_eq!(v["token"], acquired["token"]);
    assert!(timestamp(&v["expires_at"]) >= timestamp(&acquired["expires_at"]) + 3600 - 60);
}

#[test]
fn renew_wrong_key_exit_4() {
    let f = setup();
    let holder = f.h.ssh_client_key();
    let other = f.h.authorized_key("other");
    let renew = format!("renew 'r.git' '{}' --ttl 60", f.issue);
    // Nobody holds it: not the holder, and no holder to name.
    let v = held_json(&lease(&f.h, &other, &renew));
    assert_eq!(v["holder"], Value::Null);
    ok_json(&lease(
        &f.h,
        &holder,
        &format!("acquire 'r.git' '{}' --ttl 600", f.issue),
    ));
    let v = held_json(&lease(&f.h, &other, &renew));
    assert_eq!(v["holder"], fingerprint(&holder).as_str());
    assert!(v["expires_at"].is_string(), "{v}");
    // The refused renew changed nothing.
    let list = ok_json(&lease(&f.h, &holder, "list 'r.git'"));
    assert_eq!(list["leases"][0]["holder"], fingerprint(&holder).as_str());
}

#[test]
fn release_then_other_key_can_acquire() {
    let f = setup();
    let first = f.h.ssh_client_key();
    let second = f.h.authorized_key("second");
    let acquire = format!("acquire 'r.git' '{}'", f.issue);
    let release = format!("release 'r.git' '{}'", f.issue);
    assert_eq!(ok_json(&lease(&f.h, &first, &acquire))["token"], 1);
    // Someone else cannot release it.
    let v = held_json(&lease(&f.h, &second, &release));
    assert_eq!(v["holder"], fingerprint(&first).as_str());
    let v = ok_json(&lease(&f.h, &first, &release));
    assert_eq!(
        v,
        serde_json::json!({"status": "released", "repo": "r.git", "issue": f.issue})
    );
    // Releasing again (a retry after a lost reply) still succeeds.
    assert_eq!(
        ok_json(&lease(&f.h, &first, &release))["status"],
        "released"
    );
    let v = ok_json(&lease(&f.h, &second, &acquire));
    assert_eq!(v["holder"], fingerprint(&second).as_str());
    assert_eq!(v["token"], 2, "the token only grows");
    ok_json(&lease(&f.h, &second, &release));
    assert_eq!(ok_json(&lease(&f.h, &first, &acquire))["token"], 3);
}

#[test]
fn expired_lease_is_taken_over_with_the_next_token() {
    let f = setup();
    let first = f.h.ssh_client_key();
    let second = f.h.authorized_key("second");
    let v = ok_json(&lease(
        &f.h,
        &first,
        &format!("acquire 'r.git' '{}' --ttl 1", f.issue),
    ));
    let expires = timestamp(&v["expires_at"]);
    // Wait for the wall clock to pass the expiry (no timing is asserted).
    while now() <= expires {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let v = ok_json(&lease(
        &f.h,
        &second,
        &format!("acquire 'r.git' '{}'", f.issue),
    ));
    assert_eq!(v["holder"], fingerprint(&second).as_str());
    assert_eq!(v["token"], 2);
    // The first holder's lease is gone: renewing names the new holder.
    let v = held_json(&lease(
        &f.h,
        &first,
        &format!("renew 'r.git' '{}' --ttl 60", f.issue),
    ));
    assert_eq!(v["holder"], fingerprint(&second).as_str());
}

#[test]
fn acquire_by_issue_id_prefix() {
    let f = setup();
    let key = f.h.ssh_client_key();
    let prefix = &f.issue[..6];
    let v = ok_json(&lease(&f.h, &key, &format!("acquire 'r' '{prefix}'")));
    assert_eq!(
        v["issue"],
        f.issue.as_str(),
        "the reply carries the full id"
    );
    assert_eq!(v["repo"], "r.git", "the canonical repository name");
    // Upper case and a longer prefix name the same lease.
    let upper = f.issue[..10].to_ascii_uppercase();
    let v = ok_json(&lease(
        &f.h,
        &key,
        &format!("renew '/r.git' '{upper}' --ttl 60"),
    ));
    assert_eq!(v["issue"], f.issue.as_str());
    assert_eq!(v["token"], 1);
    let v = ok_json(&lease(&f.h, &key, &format!("release 'r.git' '{prefix}'")));
    assert_eq!(v["issue"], f.issue.as_str());
    let list = ok_json(&lease(&f.h, &key, "list 'r.git'"));
    assert_eq!(list["leases"], serde_json::json!([]));
}

#[test]
fn acquire_unknown_issue_exit_1() {
    let f = setup();
    let key = f.h.ssh_client_key();
    let unknown = "0123456789abcdef0123456789abcdef01234567";
    let unknown = if f.issue == unknown {
        "fedcba98"
    } else {
        unknown
    };
    assert_error(
        &lease(&f.h, &key, &format!("acquire 'r.git' '{unknown}'")),
        "error: issue not found",
    );
    assert_error(
        &lease(&f.h, &key, "acquire 'r.git' 'not-hex'"),
        "error: invalid issue id 'not-hex': expected 4 to 40 hex digits",
    );
    assert_error(
        &lease(&f.h, &key, "acquire 'r.git' 'abc'"),
        "error: invalid issue id 'abc': expected 4 to 40 hex digits",
    );
    // Nothing was written.
    let list = ok_json(&lease(&f.h, &key, "list 'r.git'"));
    assert_eq!(list["leases"], serde_json::json!([]));
}

#[test]
fn acquire_closed_issue_exit_1() {
    let f = setup();
    let key = f.h.ssh_client_key();
    ok_json(&lease(
        &f.h,
        &key,
        &format!("acquire 'r.git' '{}'", f.issue),
    ));
    let out =
        f.h.client_command(collab_testkit::bin("git-collab"), &key, &f.clone)
            .args(["issue", "close", &f.issue])
            .output()
            .unwrap();
    assert!(out.status.success(), "{out:?}");
    // Closing ended the lease.
    assert_eq!(
        ok_json(&lease(&f.h, &key, "list 'r.git'"))["leases"],
        serde_json::json!([])
    );
    let second = f.h.authorized_key("second");
    assert_error(
        &lease(&f.h, &second, &format!("acquire 'r.git' '{}'", f.issue)),
        "error: issue is closed",
    );
    // Even the holder cannot re-acquire a closed issue ...
    assert_error(
        &lease(&f.h, &key, &format!("acquire 'r.git' '{}'", f.issue)),
        "error: issue is closed",
    );
    // ... renewing the ended lease is a conflict with nobody, and
    // releasing it is the usual idempotent success.
    let renew = lease(&f.h, &key, &format!("renew 'r.git' '{}' --ttl 60", f.issue));
    assert_eq!(renew.code, 4, "{renew:?}");
    assert_eq!(renew.json()["holder"], Value::Null);
    ok_json(&lease(
        &f.h,
        &key,
        &format!("release 'r.git' '{}'", f.issue),
    ));
}

#[test]
fn unknown_repo_and_unauthorized_are_identical() {
    let f = setup();
    std::fs::write(
        f.h.repos_dir().join("r.git").join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    )
    .unwrap();
    let user = f.h.authorized_key("user");
    let id = &f.issue;
    for (hidden, missing) in [
        (
            format!("acquire 'r.git' '{id}'"),
            format!("acquire 'nope.git' '{id}'"),
        ),
        (
            format!("acquire 'r' '{id}' --ttl 60"),
            format!("acquire 'nope' '{id}' --ttl 60"),
        ),
        (
            format!("renew 'r.git' '{id}' --ttl 60"),
            format!("renew 'nope.git' '{id}' --ttl 60"),
        ),
        (
            format!("release '/r.git' '{id}'"),
            format!("release '/nope.git' '{id}'"),
        ),
        (
            "acquire 'r.git' 'ffff'".into(),
            "acquire 'nope.git' 'ffff'".into(),
        ),
        ("list 'r.git'".into(), "list 'nope.git'".into()),
        ("list '../r.git'".into(), "list '../nope.git'".into()),
    ] {
        let a = lease(&f.h, &user, &hidden);
        let b = lease(&f.h, &user, &missing);
        assert_eq!(a, b, "{hidden} vs {missing}");
        assert_eq!(a.stderr, NOT_FOUND);
        assert_eq!((a.code, a.stdout.as_str()), (1, ""));
    }
    // The admin does see the repository (so something real was hidden).
    let admin = f.h.ssh_client_key();
    ok_json(&lease(&f.h, &admin, &format!("acquire 'r.git' '{id}'")));
}

#[test]
fn list_shows_live_leases_json() {
    let f = setup();
    let first = f.h.ssh_client_key();
    let second = f.h.authorized_key("second");
    let other = open_on_server(&f.h, &f.clone, "Second issue");
    let third = open_on_server(&f.h, &f.clone, "Third issue");
    assert_eq!(
        ok_json(&lease(&f.h, &first, "list 'r.git'")),
        serde_json::json!({"leases": []})
    );
    let before = now();
    ok_json(&lease(
        &f.h,
        &first,
        &format!("acquire 'r.git' '{}'", f.issue),
    ));
    ok_json(&lease(
        &f.h,
        &second,
        &format!("acquire 'r' '{other}' --ttl 900"),
    ));
    ok_json(&lease(&f.h, &second, &format!("acquire 'r' '{third}'")));
    ok_json(&lease(&f.h, &second, &format!("release 'r' '{third}'")));
    let after = now();
    let v = ok_json(&lease(&f.h, &second, "list '/r.git'"));
    assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    let rows = v["leases"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "the released lease is not listed: {v}");
    let row = |id: &str| rows.iter().find(|r| r["issue"] == id).unwrap().clone();
    let a = row(&f.issue);
    assert_eq!(a["holder"], fingerprint(&first).as_str());
    assert_eq!(a["token"], 1);
    assert_eq!(a["expires_at"], Value::Null);
    assert!((before..=after).contains(&timestamp(&a["acquired_at"])));
    assert_eq!(a.as_object().unwrap().len(), 9, "{a}");
    assert_eq!(a["holder_name"], "client", "{a}");
    assert_eq!(a["transitions"], 0);
    assert_eq!(a["note"], Value::Null);
    let b = row(&other);
    assert_eq!(b["holder"], fingerprint(&second).as_str());
    assert_eq!(
        timestamp(&b["expires_at"]) - timestamp(&b["acquired_at"]),
        900
    );
}

#[test]
fn read_only_principal_cannot_acquire() {
    let f = setup();
    let reader = f.h.authorized_key("reader");
    std::fs::write(
        f.h.repos_dir().join("r.git").join("collab-policy.toml"),
        format!("read = [\"{}\"]\nwrite = []\n", fingerprint(&reader)),
    )
    .unwrap();
    let id = &f.issue;
    for cmd in [
        format!("acquire 'r.git' '{id}'"),
        format!("renew 'r.git' '{id}' --ttl 60"),
        format!("release 'r.git' '{id}'"),
    ] {
        let out = lease(&f.h, &reader, &cmd);
        assert_eq!(out.stderr, NOT_FOUND, "{cmd}: {out:?}");
        assert_eq!(out.code, 1);
    }
    // Reading is allowed, and shows the holder.
    let admin = f.h.ssh_client_key();
    ok_json(&lease(&f.h, &admin, &format!("acquire 'r.git' '{id}'")));
    let v = ok_json(&lease(&f.h, &reader, "list 'r.git'"));
    assert_eq!(v["leases"][0]["holder"], fingerprint(&admin).as_str());
}

#[test]
fn bad_arguments_get_a_usage_line() {
    let f = setup();
    let key = f.h.ssh_client_key();
    for args in [
        "acquire 'r.git'".to_string(),
        format!("acquire 'r.git' '{}' --ttl 0", f.issue),
        format!("renew 'r.git' '{}'", f.issue),
        "steal 'r.git' 'abcd'".to_string(),
    ] {
        let out = lease(&f.h, &key, &args);
        assert_eq!(out.code, 1, "{args}: {out:?}");
        assert!(
            out.stderr.starts_with("error: usage: collab-lease acquire"),
            "{args}: {out:?}"
        );
        assert_eq!(out.stderr.lines().count(), 1);
    }
}

#[test]
fn leases_survive_a_restart() {
    let mut f = setup();
    let key = f.h.ssh_client_key();
    ok_json(&lease(
        &f.h,
        &key,
        &format!("acquire 'r.git' '{}'", f.issue),
    ));
    ok_json(&lease(
        &f.h,
        &key,
        &format!("release 'r.git' '{}'", f.issue),
    ));
    ok_json(&lease(
        &f.h,
        &key,
        &format!("acquire 'r.git' '{}' --ttl 3600", f.issue),
    ));
    f.h.restart();
    let v = ok_json(&lease(&f.h, &key, "list 'r.git'"));
    assert_eq!(v["leases"][0]["token"], 2);
    assert_eq!(v["leases"][0]["holder"], fingerprint(&key).as_str());
    ok_json(&lease(
        &f.h,
        &key,
        &format!("release 'r.git' '{}'", f.issue),
    ));
    let v = ok_json(&lease(
        &f.h,
        &key,
        &format!("acquire 'r.git' '{}'", f.issue),
    ));
    assert_eq!(v["token"], 3, "the high-water mark survived the restart");
}

#[test]
fn governed_holder_is_the_principal_name() {
    let f = setup();
    let admin = f.h.ssh_client_key();
    let bob = f.h.named_key("bob");
    assert_eq!(f.h.ssh_exec("collab-repo create '_governance'").code, 0);
    let gov = f.h.clone_repo("_governance", "gov");
    let conf = format!(
        "[principals.alice]\nkeys = [\"{}\"]\n\n[principals.bob]\nkeys = [\"{}\"]\n\n\
         [[grants]]\nrepos = [\"**\"]\nto = [\"alice\"]\naccess = \"rewind\"\n\n\
         [[grants]]\nrepos = [\"r\"]\nto = [\"bob\"]\naccess = \"write\"\n",
        public_key_line(&admin),
        public_key_line(&bob)
    );
    std::fs::write(gov.join("governance.toml"), conf).unwrap();
    f.h.git(&gov, &["add", "governance.toml"]);
    f.h.git(&gov, &["commit", "-q", "-m", "governance"]);
    f.h.git(&gov, &["push", "-q", "origin", "HEAD:main"]);

    let v = ok_json(&lease(
        &f.h,
        &bob,
        &format!("acquire 'r.git' '{}'", f.issue),
    ));
    assert_eq!(v["holder"], "bob");
    let v = held_json(&lease(
        &f.h,
        &admin,
        &format!("acquire 'r.git' '{}'", f.issue),
    ));
    assert_eq!(v["holder"], "bob");
    let v = ok_json(&lease(&f.h, &admin, "list 'r.git'"));
    assert_eq!(v["leases"][0]["holder"], "bob");
}

/// `/metrics` counts lease operations and exec verbs by outcome.
#[test]
fn lease_outcomes_are_counted_in_metrics() {
    let f = setup();
    let first = f.h.ssh_client_key();
    let second = f.h.authorized_key("second");
    ok_json(&lease(
        &f.h,
        &first,
        &format!("acquire 'r.git' '{}'", f.issue),
    ));
    held_json(&lease(
        &f.h,
        &second,
        &format!("acquire 'r.git' '{}'", f.issue),
    ));
    // Nothing ready for `next` (the one issue is held): exit 3, an answer
    // counted as `empty`, not as an error.
    let empty = lease(&f.h, &second, "next 'r.git'");
    assert_eq!(empty.code, 3, "{empty:?}");
    let text = http_get_text(&f.h.http_url(), "/metrics");
    for line in [
        "git_collab_lease_operations_total{op=\"acquire\",outcome=\"ok\"} 1\n",
        "git_collab_lease_operations_total{op=\"acquire\",outcome=\"conflict\"} 1\n",
        "git_collab_ssh_verbs_total{verb=\"collab-lease acquire\",outcome=\"conflict\"} 1\n",
        "git_collab_lease_operations_total{op=\"next\",outcome=\"empty\"} 1\n",
        "git_collab_ssh_verbs_total{verb=\"collab-lease next\",outcome=\"empty\"} 1\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(
        !text.contains("verb=\"collab-lease next\",outcome=\"error\""),
        "{text}"
    );
}

/// A plain HTTP/1.0 GET against the harness's web listener.
fn http_get_text(base: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the web listener");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(
        response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"),
        "{response}"
    );
    response
}
