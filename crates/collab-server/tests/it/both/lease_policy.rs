//! Lease policy, expiry and waiting, end to end: the real server (with
//! `leases.*` set through its environment), the real `ssh`, issues pushed
//! with the real CLI, and the event rows read back from the real
//! `collab.db`.
//!
//! - tenure details: note, acquired/renewed/expires, transitions in `list`
//!   and `show`;
//! - `break` needs Rewind and records who and why;
//! - `leases.max_ttl`, `leases.max_lifetime`, `leases.lock_delay`;
//! - the expiry timer ends a lease within about a second of `expires_at`
//!   and wakes a waiter (asserted generously: a few seconds);
//! - waiters are served in arrival order, a dropped waiter leaves the
//!   queue, a stopping server cancels waits with a clear error.
use collab_testkit as common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::DateTime;
use common::{fingerprint, HarnessOptions, ServerHarness, SshOutput, NOT_FOUND};
use serde_json::Value;

/// Hang guard for polls (not a performance bound).
const LIMIT: Duration = Duration::from_secs(60);

/// A server (with `env` set) holding repository `r.git` with `n` open
/// issues; their full ids.
fn setup(env: &[(&str, &str)], n: usize) -> (ServerHarness, Vec<String>) {
    let h = ServerHarness::start_with(HarnessOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    });
    h.create_repo("r");
    let ids: Vec<String> = (0..n)
        .map(|i| h.open_server_issue("r", &format!("Issue {i}")))
        .collect();
    (h, ids)
}

fn lease(h: &ServerHarness, key: &Path, args: &str) -> SshOutput {
    h.ssh_exec_as(key, &format!("collab-lease {args}"), b"")
}

fn ok_json(out: &SshOutput) -> Value {
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    out.json()
}

fn conflict_json(out: &SshOutput, status: &str) -> Value {
    assert_eq!(out.code, 4, "{out:?}");
    let v = out.json();
    assert_eq!(v["status"], status, "{out:?}");
    v
}

fn secs(v: &Value) -> i64 {
    let text = v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}"));
    DateTime::parse_from_rfc3339(text).unwrap().timestamp()
}

/// `(type, object_id, actor, payload)` of every lease event so far, from the
/// server's own database file.
fn events(h: &ServerHarness) -> Vec<(String, String, Option<String>, Value)> {
    let conn = collab_store::open_reader(collab_store::Location::parse(&h.db_setting())).unwrap();
    let mut stmt = conn
        .prepare("SELECT type, object_id, actor, payload FROM events WHERE type LIKE 'lease.%' ORDER BY seq")
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            let payload: String = r.get(3)?;
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                serde_json::from_str(&payload).unwrap(),
            ))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// Poll `check` until it holds (hang guard: LIMIT).
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < LIMIT, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `ssh … collab-lease <args>` as a background process.
fn spawn_lease(h: &ServerHarness, key: &Path, args: &str) -> Child {
    Command::new("ssh")
        .args(h.ssh_options(key))
        .args(["git@127.0.0.1", &format!("collab-lease {args}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ssh")
}

fn finish(child: Child) -> SshOutput {
    let out = child.wait_with_output().unwrap();
    SshOutput::from_output(out)
}

/// Wait for a background process to exit (hang guard: LIMIT).
fn wait_exit(mut child: Child) -> SshOutput {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < LIMIT, "waiter never returned");
        std::thread::sleep(Duration::from_millis(20));
    }
    finish(child)
}

fn still_waiting(child: &mut Child) -> bool {
    child.try_wait().unwrap().is_none()
}

/// Wait until the server has queued `n` waiters in total.
fn queued(h: &ServerHarness, n: usize) {
    eventually(&format!("{n} waiters queued"), || {
        h.log().matches("lease wait queued").count() >= n
    });
}

fn keys(h: &ServerHarness, names: &[&str]) -> Vec<(PathBuf, String)> {
    names
        .iter()
        .map(|name| {
            let key = h.authorized_key(name);
            let fp = fingerprint(&key);
            (key, fp)
        })
        .collect()
}

#[test]
fn list_and_show_report_holder_note_times_and_transitions() {
    let (h, ids) = setup(&[], 1);
    let id = &ids[0];
    let ks = keys(&h, &["alice", "bob"]);
    let (alice, bob) = (&ks[0], &ks[1]);
    let v = ok_json(&lease(
        &h,
        &alice.0,
        &format!("acquire 'r.git' '{id}' --ttl 600 --note 'fixing the parser'"),
    ));
    assert_eq!(v["note"], "fixing the parser");
    assert_eq!(v["renewed_at"], Value::Null);
    let acquired_at = secs(&v["acquired_at"]);
    let v = ok_json(&lease(
        &h,
        &alice.0,
        &format!("renew 'r.git' '{id}' --ttl 900 --note 'tests pass'"),
    ));
    assert_eq!(v["status"], "renewed");
    assert_eq!(v["note"], "tests pass");
    assert!(secs(&v["renewed_at"]) >= acquired_at);
    ok_json(&lease(&h, &alice.0, &format!("release 'r.git' '{id}'")));
    ok_json(&lease(
        &h,
        &bob.0,
        &format!("acquire 'r.git' '{id}' --note 'take two'"),
    ));

    let list = ok_json(&lease(&h, &alice.0, "list 'r.git'"));
    let row = &list["leases"][0];
    assert_eq!(row["holder"], bob.1.as_str());
    assert_eq!(row["note"], "take two");
    assert_eq!(row["token"], 2);
    assert_eq!(row["transitions"], 1, "alice -> bob");
    assert_eq!(row["expires_at"], Value::Null);
    for field in ["acquired_at", "renewed_at"] {
        assert!(row.get(field).is_some(), "{field} in {row}");
    }

    let show = ok_json(&lease(
        &h,
        &alice.0,
        &format!("show 'r.git' '{}'", &id[..8]),
    ));
    assert_eq!(show["issue"], id.as_str());
    assert_eq!(show["status"], "held");
    assert_eq!(show["holder"], bob.1.as_str());
    assert_eq!(show["note"], "take two");
    assert_eq!(
        (show["token"].clone(), show["last_token"].clone()),
        (2.into(), 2.into())
    );
    assert_eq!(show["transitions"], 1);

    // Every change left its event, in order.
    let kinds: Vec<String> = events(&h).into_iter().map(|e| e.0).collect();
    assert_eq!(
        kinds,
        [
            "lease.acquired",
            "lease.renewed",
            "lease.released",
            "lease.acquired"
        ]
    );
    // A note is bounded.
    let long = "n".repeat(501);
    let out = lease(
        &h,
        &alice.0,
        &format!("acquire 'r.git' '{id}' --note {long}"),
    );
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.starts_with("error: usage: collab-lease"),
        "{out:?}"
    );
}

#[test]
fn break_needs_rewind_and_records_who_and_why() {
    let (h, ids) = setup(&[], 1);
    let id = &ids[0];
    let writer = &keys(&h, &["writer"])[0];
    let admin = h.ssh_client_key();
    ok_json(&lease(
        &h,
        &writer.0,
        &format!("acquire 'r.git' '{id}' --ttl 600"),
    ));
    // The holder itself cannot break (it has Write, not Rewind): the reply
    // is the one every refused verb gets.
    let out = lease(
        &h,
        &writer.0,
        &format!("break 'r.git' '{id}' --reason mine"),
    );
    assert_eq!((out.code, out.stderr.as_str()), (1, NOT_FOUND), "{out:?}");
    let v = ok_json(&lease(
        &h,
        &admin,
        &format!("break 'r.git' '{id}' --reason 'agent is stuck'"),
    ));
    assert_eq!(v["status"], "broken");
    assert_eq!(v["holder"], writer.1.as_str());
    assert_eq!(v["token"], 1);
    assert_eq!(v["by"], fingerprint(&admin).as_str());
    assert_eq!(v["reason"], "agent is stuck");
    // Nothing left to break; the issue is free for the next tenure.
    let v = ok_json(&lease(
        &h,
        &admin,
        &format!("break 'r.git' '{id}' --reason again"),
    ));
    assert_eq!(v["status"], "free");
    let show = ok_json(&lease(&h, &writer.0, &format!("show 'r.git' '{id}'")));
    assert_eq!(show["status"], "free");
    let v = ok_json(&lease(&h, &writer.0, &format!("acquire 'r.git' '{id}'")));
    assert_eq!(v["token"], 2);
    let broken = events(&h)
        .into_iter()
        .find(|e| e.0 == "lease.broken")
        .expect("a lease.broken event");
    assert_eq!(broken.2.as_deref(), Some(fingerprint(&admin).as_str()));
    assert_eq!(broken.3["reason"], "agent is stuck");
    assert_eq!(broken.3["holder"], writer.1.as_str());
}

#[test]
fn max_ttl_refuses_longer_ttls() {
    let (h, ids) = setup(&[("GIT_COLLAB_LEASES__MAX_TTL", "60")], 1);
    let id = &ids[0];
    let key = h.ssh_client_key();
    for args in [
        format!("acquire 'r.git' '{id}' --ttl 61"),
        format!("renew 'r.git' '{id}' --ttl 61"),
    ] {
        let out = lease(&h, &key, &args);
        assert_eq!(out.code, 1, "{out:?}");
        assert_eq!(
            out.stderr,
            "error: --ttl 61 is longer than this server allows (leases.max_ttl = 60)\n"
        );
    }
    ok_json(&lease(
        &h,
        &key,
        &format!("acquire 'r.git' '{id}' --ttl 60"),
    ));
    assert!(events(&h).len() == 1, "the refusals recorded nothing");
}

#[test]
fn max_lifetime_ends_a_tenure_that_keeps_renewing() {
    let (h, ids) = setup(&[("GIT_COLLAB_LEASES__MAX_LIFETIME", "3")], 1);
    let id = &ids[0];
    let ks = keys(&h, &["stuck", "next"]);
    let v = ok_json(&lease(
        &h,
        &ks[0].0,
        &format!("acquire 'r.git' '{id}' --ttl 600"),
    ));
    let acquired_at = secs(&v["acquired_at"]);
    assert_eq!(
        secs(&v["expires_at"]),
        acquired_at + 3,
        "capped at the lifetime"
    );
    // Renewing cannot stretch it.
    let v = lease(&h, &ks[0].0, &format!("renew 'r.git' '{id}' --ttl 600"));
    if v.code == 0 {
        assert_eq!(secs(&v.json()["expires_at"]), acquired_at + 3);
    }
    // Keep renewing: once the lifetime is up, the renewals fail and another
    // agent takes over with the next token.
    eventually("the stuck agent loses its lease", || {
        let out = lease(&h, &ks[0].0, &format!("renew 'r.git' '{id}' --ttl 600"));
        out.code == 4
    });
    let v = ok_json(&lease(
        &h,
        &ks[1].0,
        &format!("acquire 'r.git' '{id}' --ttl 600"),
    ));
    assert_eq!(v["token"], 2);
    let expired = events(&h)
        .into_iter()
        .find(|e| e.0 == "lease.expired")
        .expect("a lease.expired event");
    assert_eq!(expired.3["reason"], "max_lifetime");
    assert_eq!(expired.3["holder"], ks[0].1.as_str());
}

#[test]
fn lock_delay_follows_an_expiry_but_not_a_release() {
    let (h, ids) = setup(&[("GIT_COLLAB_LEASES__LOCK_DELAY", "5")], 2);
    let ks = keys(&h, &["first", "second"]);
    let (first, second) = (&ks[0], &ks[1]);
    // Expiry: the issue is locked for the delay, naming the last holder.
    let v = ok_json(&lease(
        &h,
        &first.0,
        &format!("acquire 'r.git' '{}' --ttl 1", ids[0]),
    ));
    let expires_at = secs(&v["expires_at"]);
    eventually("the lease expires into its lock delay", || {
        ok_json(&lease(&h, &second.0, &format!("show 'r.git' '{}'", ids[0])))["status"] == "locked"
    });
    let out = lease(&h, &second.0, &format!("acquire 'r.git' '{}'", ids[0]));
    if out.code == 4 {
        let v = conflict_json(&out, "locked");
        assert_eq!(v["holder"], first.1.as_str());
        assert_eq!(secs(&v["locked_until"]), expires_at + 5);
    }
    // A waiter gets it once the delay has run out, not before.
    let v = ok_json(&lease(
        &h,
        &second.0,
        &format!("acquire 'r.git' '{}' --wait 30", ids[0]),
    ));
    assert!(secs(&v["acquired_at"]) >= expires_at + 5, "{v}");
    assert_eq!(v["token"], 2);
    // Release: no delay.
    ok_json(&lease(
        &h,
        &first.0,
        &format!("acquire 'r.git' '{}'", ids[1]),
    ));
    ok_json(&lease(
        &h,
        &first.0,
        &format!("release 'r.git' '{}'", ids[1]),
    ));
    ok_json(&lease(
        &h,
        &second.0,
        &format!("acquire 'r.git' '{}'", ids[1]),
    ));
    let expired = events(&h)
        .into_iter()
        .find(|e| e.0 == "lease.expired")
        .unwrap();
    assert_eq!(secs(&expired.3["locked_until"]), expires_at + 5);
}

#[test]
fn the_expiry_timer_ends_a_lease_on_time_and_wakes_a_waiter() {
    let (h, ids) = setup(&[], 2);
    let ks = keys(&h, &["holder", "waiter"]);
    // Nobody touches issue 1 after acquiring it: the timer alone records
    // its end.
    let v = ok_json(&lease(
        &h,
        &ks[0].0,
        &format!("acquire 'r.git' '{}' --ttl 1", ids[1]),
    ));
    let lone_expiry = secs(&v["expires_at"]);
    let v = ok_json(&lease(
        &h,
        &ks[0].0,
        &format!("acquire 'r.git' '{}' --ttl 2", ids[0]),
    ));
    let expires_at = secs(&v["expires_at"]);
    let waiter = spawn_lease(
        &h,
        &ks[1].0,
        &format!("acquire 'r.git' '{}' --wait 30", ids[0]),
    );
    let out = wait_exit(waiter);
    let v = ok_json(&out);
    assert_eq!(v["holder"], ks[1].1.as_str());
    assert_eq!(v["token"], 2);
    // Designed to be within one second; asserted generously.
    let late = secs(&v["acquired_at"]) - expires_at;
    assert!((0..5).contains(&late), "woken {late} s after the expiry");
    eventually("the timer records the untouched lease's end", || {
        events(&h)
            .iter()
            .any(|e| e.0 == "lease.expired" && e.1 == ids[1])
    });
    let conn = collab_store::open_reader(collab_store::Location::parse(&h.db_setting())).unwrap();
    let at: i64 = conn
        .query_row(
            "SELECT at FROM events WHERE type = 'lease.expired' AND object_id = ?1",
            [&ids[1]],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        (0..5).contains(&(at - lone_expiry)),
        "recorded {} s late",
        at - lone_expiry
    );
    let rows: i64 = conn
        .query_row(
            "SELECT count(*) FROM leases WHERE issue_id = ?1",
            [&ids[1]],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 0, "the ended tenure is gone from the table");
}

#[test]
fn waiters_are_served_in_arrival_order_and_a_dropped_one_leaves_the_queue() {
    let (h, ids) = setup(&[], 1);
    let id = &ids[0];
    let ks = keys(&h, &["owner", "w1", "w2", "w3", "w4"]);
    ok_json(&lease(&h, &ks[0].0, &format!("acquire 'r.git' '{id}'")));
    let cmd = format!("acquire 'r.git' '{id}' --ttl 600 --wait 120");
    let mut waiting: Vec<Child> = Vec::new();
    for (n, key) in ks[1..].iter().enumerate() {
        waiting.push(spawn_lease(&h, &key.0, &cmd));
        queued(&h, n + 1);
    }
    // w2 gives up: its connection drops.
    let mut w2 = waiting.remove(1);
    w2.kill().unwrap();
    let _ = w2.wait();
    eventually("the server notices w2 left", || {
        h.log().contains("lease waiter left")
    });
    // Each release hands the issue to the oldest remaining waiter.
    let order = [(1usize, 0usize), (3, 1), (4, 2)];
    let mut previous = 0;
    for (key_index, child_index) in order {
        ok_json(&lease(
            &h,
            &ks[previous].0,
            &format!("release 'r.git' '{id}'"),
        ));
        let child = std::mem::replace(
            &mut waiting[child_index],
            Command::new("true").spawn().unwrap(),
        );
        let v = ok_json(&wait_exit(child));
        assert_eq!(v["holder"], ks[key_index].1.as_str(), "served in order");
        for later in waiting.iter_mut().skip(child_index + 1) {
            assert!(still_waiting(later), "a later waiter is still queued");
        }
        previous = key_index;
    }
    let show = ok_json(&lease(&h, &ks[0].0, &format!("show 'r.git' '{id}'")));
    assert_eq!(show["holder"], ks[4].1.as_str());
    assert_eq!(show["last_token"], 4, "w2 never held it");
}

#[test]
fn a_wait_that_runs_out_names_the_holder_and_a_stop_cancels_waits() {
    let (mut h, ids) = setup(&[], 1);
    let id = &ids[0];
    let ks = keys(&h, &["owner", "waiter"]);
    ok_json(&lease(&h, &ks[0].0, &format!("acquire 'r.git' '{id}'")));
    let out = lease(&h, &ks[1].0, &format!("acquire 'r.git' '{id}' --wait 1"));
    let v = conflict_json(&out, "held");
    assert_eq!(v["holder"], ks[0].1.as_str());
    // --wait 0 is a plain acquire.
    conflict_json(
        &lease(&h, &ks[1].0, &format!("acquire 'r.git' '{id}' --wait 0")),
        "held",
    );
    let waiter = spawn_lease(&h, &ks[1].0, &format!("acquire 'r.git' '{id}' --wait 120"));
    queued(&h, 2);
    h.terminate();
    let out = wait_exit(waiter);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr,
        "error: the server is shutting down; the wait was cancelled, try again\n"
    );
    assert!(h.wait_exit().success());
}
