//! A storm of concurrent `collab-issue comment`s over real SSH, interrupted
//! by SIGKILL, then a restart on the same state directory. Afterwards:
//!
//! - every comment a client was told about (exit 0, its `seq`) is there,
//!   exactly once, with the event row of that `seq`;
//! - no comment is there twice (an unacknowledged one may or may not be);
//! - the event log's `seq` runs 1..=N with no gap and no duplicate.

use collab_testkit as common;

use common::ServerHarness;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

const CLIENTS: usize = 8;
/// Acknowledged comments before the kill.
const ACKS_BEFORE_KILL: usize = 80;

#[test]
fn sigkill_mid_comment_storm_keeps_every_acknowledged_comment_and_a_gap_free_log() {
    let mut h = ServerHarness::start();
    h.create_repo("r");
    let out = h.ssh_exec("collab-issue open r --title 'Busy issue'");
    assert_eq!(out.code, 0, "{out:?}");
    let issue = out.json()["issue"].as_str().unwrap().to_string();
    let keys: Vec<_> = (0..CLIENTS)
        .map(|i| h.authorized_key(&format!("agent{i}")))
        .collect();

    // body -> (seq, comment id) of every acknowledged comment.
    let acked: Mutex<BTreeMap<String, (i64, String)>> = Mutex::new(BTreeMap::new());
    let acks = AtomicUsize::new(0);
    let killed = AtomicBool::new(false);
    std::thread::scope(|s| {
        for (c, key) in keys.iter().enumerate() {
            let (h, issue, acked, acks, killed) = (&h, &issue, &acked, &acks, &killed);
            s.spawn(move || {
                for n in 0.. {
                    let body = format!("agent{c}-comment{n}");
                    let out = h.ssh_exec_as(
                        key,
                        &format!("collab-issue comment r {issue} --body '{body}'"),
                        b"",
                    );
                    match out.code {
                        0 => {
                            let v = out.json();
                            let seq = v["seq"].as_i64().unwrap();
                            let id = v["event"].as_str().unwrap().to_string();
                            acked.lock().unwrap().insert(body, (seq, id));
                            acks.fetch_add(1, Ordering::SeqCst);
                        }
                        // The server died under this request: no answer, no promise.
                        _ if killed.load(Ordering::SeqCst) => break,
                        _ => panic!("comment failed before the kill: {out:?}"),
                    }
                }
            });
        }
        while acks.load(Ordering::SeqCst) < ACKS_BEFORE_KILL {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        killed.store(true, Ordering::SeqCst);
        // SAFETY: plain kill(2) of the server process this test started.
        assert_eq!(unsafe { libc::kill(h.pid() as i32, libc::SIGKILL) }, 0);
    });
    let status = h.wait_exit();
    assert!(!status.success(), "the server was killed: {status:?}");
    let acked = acked.into_inner().unwrap();
    assert!(acked.len() >= ACKS_BEFORE_KILL);

    h.start_again();
    let out = h.ssh_exec(&format!("collab-issue show r {issue}"));
    assert_eq!(out.code, 0, "{out:?}");
    let shown = out.json();
    let comments = shown["comments"].as_array().unwrap();
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for c in comments {
        let body = c["body"].as_str().unwrap();
        let prev = seen.insert(body, c["id"].as_str().unwrap());
        assert!(prev.is_none(), "comment {body:?} is there twice");
    }
    for (body, (_, id)) in &acked {
        assert_eq!(
            seen.get(body.as_str()).copied(),
            Some(id.as_str()),
            "acknowledged comment {body:?} survived"
        );
    }

    let conn = collab_store::open_reader(collab_store::Location::parse(&h.db_setting())).unwrap();
    let seqs: Vec<i64> = conn
        .prepare("SELECT seq FROM events ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
    assert_eq!(seqs, expected, "seq is gap-free and unique");
    let commented: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM events WHERE type = 'issue.commented'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        commented as usize,
        comments.len(),
        "one event per comment kept"
    );
    let mut by_seq = conn
        .prepare("SELECT payload FROM events WHERE seq = ?1 AND type = 'issue.commented'")
        .unwrap();
    for (body, (seq, id)) in &acked {
        let payload: String = by_seq.query_row([*seq], |r| r.get(0)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&payload).unwrap();
        assert_eq!(v["comment"]["id"], id.as_str(), "seq {seq}");
        assert_eq!(v["comment"]["body"], body.as_str(), "seq {seq}");
    }
}
