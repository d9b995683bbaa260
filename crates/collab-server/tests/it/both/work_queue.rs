//! The work queue end to end: `collab-lease next`, `collab-issue ready`,
//! `show`'s "blocked by"/"held by", `edit --priority`, against the real
//! server over OpenSSH, with issues held by the server (`collab-issue`).
//!
//! - 64 concurrent `next` callers (64 keys) over 64 ready issues get 64
//!   distinct issues; over 10 ready issues exactly 10 win and 54 exit 3;
//!   in rounds.
//! - An issue blocked by an open issue (here or in another repository) is
//!   never handed out; closing the blockers makes it ready; `next --wait`
//!   returns once it does.
//! - Priority then age orders the queue; labels filter it.
//! - SIGKILL during a `next` storm, restart: no issue held by two live
//!   tenures, no token handed out twice, every acknowledged tenure kept.

use collab_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use common::{fingerprint, HarnessOptions, ServerHarness, SshOutput};
use serde_json::Value;

/// Hang guard for polls (not a performance bound).
const LIMIT: Duration = Duration::from_secs(120);

/// A server that lets a fleet on one host log in at once: the default
/// `ssh.max_startups_per_ip` (10) would drop most of 64 simultaneous
/// handshakes from 127.0.0.1, as it should for strangers.
fn fleet_server() -> ServerHarness {
    ServerHarness::start_with(HarnessOptions {
        env: vec![
            ("GIT_COLLAB_SSH__MAX_STARTUPS".into(), "200:30:400".into()),
            ("GIT_COLLAB_SSH__MAX_STARTUPS_PER_IP".into(), "200".into()),
        ],
        ..Default::default()
    })
}

fn ok(out: SshOutput) -> Value {
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    out.json()
}

fn open(h: &ServerHarness, repo: &str, title: &str, labels: &[&str]) -> String {
    let labels: String = labels.iter().map(|l| format!(" --label {l}")).collect();
    let v = ok(h.ssh_exec(&format!(
        "collab-issue open '{repo}' --title '{title}'{labels}"
    )));
    v["issue"].as_str().unwrap().to_string()
}

fn keys(h: &ServerHarness, prefix: &str, n: usize) -> Vec<(PathBuf, String)> {
    (0..n)
        .map(|i| {
            let key = h.authorized_key(&format!("{prefix}{i}"));
            let fp = fingerprint(&key);
            (key, fp)
        })
        .collect()
}

/// Every key runs `cmd` at once (released together by a barrier).
fn all_at_once(
    h: &ServerHarness,
    keys: &[(PathBuf, String)],
    cmd: &str,
) -> Vec<(String, SshOutput)> {
    let start = Barrier::new(keys.len());
    std::thread::scope(|s| {
        let runs: Vec<_> = keys
            .iter()
            .map(|(key, fp)| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    (fp.clone(), h.ssh_exec_as(key, cmd, b""))
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

/// Check a round of `next` replies: winners get distinct issues from
/// `issues`, tokens as expected, the rest exit 3 with the `empty` JSON.
/// Returns the issues handed out.
fn judge_round(
    replies: &[(String, SshOutput)],
    issues: &BTreeSet<String>,
    winners: usize,
) -> BTreeSet<String> {
    let mut got = BTreeSet::new();
    let mut empty = 0;
    for (fp, out) in replies {
        match out.code {
            0 => {
                let v = out.json();
                assert_eq!(v["status"], "acquired", "{out:?}");
                assert_eq!(v["holder"], fp.as_str(), "{out:?}");
                let issue = v["issue"].as_str().unwrap().to_string();
                assert!(issues.contains(&issue), "{issue} was ready");
                assert!(got.insert(issue.clone()), "{issue} handed out twice");
                assert!(v["title"].is_string(), "{v}");
            }
            3 => {
                assert_eq!(out.json()["status"], "empty", "{out:?}");
                assert!(out.stderr.is_empty(), "{out:?}");
                empty += 1;
            }
            other => panic!("unexpected exit {other}: {out:?}"),
        }
    }
    assert_eq!(got.len(), winners, "winners");
    assert_eq!(empty, replies.len() - winners, "nothing-ready exits");
    got
}

#[test]
fn sixty_four_next_callers_never_share_an_issue() {
    let h = fleet_server();
    h.create_repo("r");
    let agents = keys(&h, "agent", 64);
    let cmd = "collab-lease next 'r' --ttl 600";
    // Round 1: 64 ready issues, 64 callers: 64 distinct issues.
    let many: BTreeSet<String> = (0..64)
        .map(|i| open(&h, "r", &format!("Task {i}"), &[]))
        .collect();
    let got = judge_round(&all_at_once(&h, &agents, cmd), &many, 64);
    assert_eq!(got, many);
    // Rounds 2 and 3: 10 ready issues each, 64 callers: exactly 10 winners.
    for round in 0..2 {
        let few: BTreeSet<String> = (0..10)
            .map(|i| open(&h, "r", &format!("Round {round} task {i}"), &[]))
            .collect();
        let got = judge_round(&all_at_once(&h, &agents, cmd), &few, 10);
        assert_eq!(got, few);
    }
    // Nothing is ready now; the queue agrees.
    let ready = ok(h.ssh_exec("collab-issue ready 'r'"));
    assert_eq!(ready["issues"].as_array().unwrap().len(), 0, "{ready}");
    let out = h.ssh_exec("collab-lease next 'r'");
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(
        out.json(),
        serde_json::json!({"status": "empty", "repo": "r.git", "labels": []})
    );
    // The store holds one lease per issue handed out.
    let live = ok(h.ssh_exec("collab-lease list 'r'"));
    assert_eq!(live["leases"].as_array().unwrap().len(), 84);
}

#[test]
fn blockers_priority_and_labels_decide_what_is_ready() {
    let h = ServerHarness::start();
    h.create_repo("r");
    h.create_repo("lib");
    let blocked = open(&h, "r", "Ship it", &["release"]);
    let blocker_here = open(&h, "r", "Write docs", &[]);
    let blocker_lib = open(&h, "lib", "Fix the library", &[]);
    let low = open(&h, "r", "Polish", &["release"]);
    ok(h.ssh_exec(&format!(
        "collab-issue link 'r' '{blocker_here}' blocks '{blocked}'"
    )));
    ok(h.ssh_exec(&format!(
        "collab-issue link 'lib' '{blocker_lib}' blocks 'r#{blocked}'"
    )));
    ok(h.ssh_exec(&format!("collab-issue edit 'r' '{low}' --priority 9")));
    ok(h.ssh_exec(&format!(
        "collab-issue edit 'r' '{blocker_here}' --priority 0"
    )));

    // The ready list: priority first (0, 9), then the unprioritized; the
    // blocked issue is not there.
    let ready = ok(h.ssh_exec("collab-issue ready 'r'"));
    let ids: Vec<&str> = ready["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [blocker_here.as_str(), low.as_str()]);
    let show = ok(h.ssh_exec(&format!("collab-issue show 'r' '{}'", &blocked[..8])));
    assert_eq!(show["ready"], false);
    let reasons: Vec<&str> = show["not_ready"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        [
            format!("blocked by lib#{}", &blocker_lib[..8]),
            format!("blocked by r#{}", &blocker_here[..8]),
        ]
    );

    // Labels: only "release" issues; the blocked one is not ready.
    let worker = &keys(&h, "worker", 1)[0];
    let v = ok(h.ssh_exec_as(
        &worker.0,
        "collab-lease next 'r' --label release --note 'polishing'",
        b"",
    ));
    assert_eq!(v["issue"], low.as_str());
    assert_eq!(v["labels"], serde_json::json!(["release"]));
    assert_eq!(v["priority"], 9);
    assert_eq!(v["note"], "polishing");
    let show = ok(h.ssh_exec(&format!("collab-issue show 'r' '{low}'")));
    assert_eq!(show["lease"]["holder"], worker.1.as_str());
    // Why it is not ready names the holder as every text does: by its
    // display name, never the full fingerprint.
    let holder_name = show["lease"]["holder_name"].as_str().unwrap();
    assert_ne!(holder_name, worker.1.as_str());
    assert_eq!(
        show["not_ready"],
        serde_json::json!([format!("held by {holder_name} (no expiry)")])
    );
    let out = h.ssh_exec_as(&worker.0, "collab-lease next 'r' --label release", b"");
    assert_eq!(out.code, 3, "{out:?}");

    // A waiting next gets the blocked issue as soon as its last blocker
    // closes (here: one closed while it waits).
    ok(h.ssh_exec(&format!("collab-issue close 'r' '{blocker_here}'")));
    let start = Instant::now();
    let waiter = Command::new("ssh")
        .args(h.ssh_options(&worker.0))
        .args([
            "git@127.0.0.1",
            "collab-lease next 'r' --label release --wait 90",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_log(&h, "lease wait queued");
    let mut waiter = waiter;
    assert!(waiter.try_wait().unwrap().is_none(), "still blocked by lib");
    ok(h.ssh_exec(&format!("collab-issue close 'lib' '{blocker_lib}'")));
    let out = finish(waiter);
    let v = ok(out);
    assert_eq!(v["issue"], blocked.as_str());
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "the waiter returned when the issue became ready, not at its deadline"
    );
}

fn wait_for_log(h: &ServerHarness, needle: &str) {
    let start = Instant::now();
    while !h.log().contains(needle) {
        assert!(start.elapsed() < LIMIT, "{needle:?} never logged");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn finish(mut child: Child) -> SshOutput {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < LIMIT, "the waiter never returned");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    SshOutput::from_output(out)
}

/// One acknowledged tenure from a `next` reply.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Ack {
    issue: String,
    token: i64,
    holder: String,
}

#[test]
fn sigkill_during_a_next_storm_hands_out_nothing_twice() {
    const CLIENTS: usize = 8;
    const ISSUES: usize = 40;
    let mut h = fleet_server();
    h.create_repo("r");
    let issues: BTreeSet<String> = (0..ISSUES)
        .map(|i| open(&h, "r", &format!("Storm {i}"), &[]))
        .collect();
    let clients = keys(&h, "client", CLIENTS);
    let acks = Mutex::new(Vec::<Ack>::new());
    let done = AtomicUsize::new(0);
    let killed = AtomicBool::new(false);
    // Each client: next, then release what it got half of the time, until
    // the server is gone.
    std::thread::scope(|s| {
        for (key, fp) in &clients {
            let (h, acks, done, killed) = (&h, &acks, &done, &killed);
            s.spawn(move || {
                let mut n = 0u32;
                loop {
                    let out = h.ssh_exec_as(key, "collab-lease next 'r' --ttl 3600", b"");
                    match out.code {
                        0 => {
                            let v = out.json();
                            let issue = v["issue"].as_str().unwrap().to_string();
                            acks.lock().unwrap().push(Ack {
                                issue: issue.clone(),
                                token: v["token"].as_i64().unwrap(),
                                holder: fp.clone(),
                            });
                            n += 1;
                            if n.is_multiple_of(2) {
                                let out = h.ssh_exec_as(
                                    key,
                                    &format!("collab-lease release 'r' '{issue}'"),
                                    b"",
                                );
                                if out.code == 255 && killed.load(Ordering::SeqCst) {
                                    break;
                                }
                            }
                        }
                        3 => {}
                        255 if killed.load(Ordering::SeqCst) => break,
                        other => panic!("unexpected exit {other}: {out:?}"),
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        let start = Instant::now();
        while done.load(Ordering::SeqCst) < 30 {
            assert!(start.elapsed() < LIMIT, "the storm never got going");
            std::thread::sleep(Duration::from_millis(10));
        }
        killed.store(true, Ordering::SeqCst);
        // SAFETY: plain kill(2) of the server process this test started.
        assert_eq!(unsafe { libc::kill(h.pid() as i32, libc::SIGKILL) }, 0);
    });
    assert!(!h.wait_exit().success());
    h.start_again();
    // Right after the restart: one tenure per issue (a `next` committed
    // just before the kill may be live without its reply having arrived).
    let live_then = live_acks(&h);

    // Drain the rest after the restart, one client after another.
    for (key, fp) in &clients {
        loop {
            let out = h.ssh_exec_as(key, "collab-lease next 'r' --ttl 3600", b"");
            if out.code == 3 {
                break;
            }
            let v = ok(out);
            acks.lock().unwrap().push(Ack {
                issue: v["issue"].as_str().unwrap().to_string(),
                token: v["token"].as_i64().unwrap(),
                holder: fp.clone(),
            });
        }
    }
    let all = acks.into_inner().unwrap();
    // No (issue, token) was handed to two callers, before or after the kill.
    let mut owners: BTreeMap<(String, i64), String> = BTreeMap::new();
    for ack in &all {
        if let Some(prev) = owners.insert((ack.issue.clone(), ack.token), ack.holder.clone()) {
            panic!("{ack:?}: token also handed to {prev}");
        }
    }
    // A tenure live after the restart that nobody was told of must not
    // share its token with one that somebody was.
    for ack in &live_then {
        if !all.contains(ack) {
            let told = owners.get(&(ack.issue.clone(), ack.token));
            assert!(told.is_none(), "{ack:?} also handed to {told:?}");
        }
    }
    // Every issue is held exactly once now, by a tenure someone was told
    // of (or one that was live, unanswered, when the server died).
    let live = live_acks(&h);
    let held: BTreeSet<&str> = live.iter().map(|a| a.issue.as_str()).collect();
    assert_eq!(held.len(), live.len(), "one live tenure per issue");
    assert_eq!(held.len(), ISSUES, "every issue is taken after the drain");
    assert!(held.iter().all(|i| issues.contains(*i)));
    for ack in &live {
        assert!(
            all.contains(ack) || live_then.contains(ack),
            "live lease {ack:?} was acknowledged"
        );
    }
}

/// The live leases of `r` as tenures.
fn live_acks(h: &ServerHarness) -> Vec<Ack> {
    let live = ok(h.ssh_exec("collab-lease list 'r'"));
    let acks: Vec<Ack> = live["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| Ack {
            issue: l["issue"].as_str().unwrap().to_string(),
            token: l["token"].as_i64().unwrap(),
            holder: l["holder"].as_str().unwrap().to_string(),
        })
        .collect();
    let issues: BTreeSet<&str> = acks.iter().map(|a| a.issue.as_str()).collect();
    assert_eq!(
        issues.len(),
        acks.len(),
        "one live tenure per issue: {acks:?}"
    );
    acks
}
