//! A lease storm interrupted by SIGKILL. Several clients (each its own key)
//! acquire, renew and release three issues over real SSH while the server
//! is killed with SIGKILL mid-storm, then restarted on the same state
//! directory. Afterwards:
//!
//! - the database opens and is consistent: at most one live holder per
//!   issue, every holder one of the clients;
//! - no fencing token was ever handed to two holders for the same issue,
//!   judged from the clients' own records of successful replies, before and
//!   after the crash;
//! - every acknowledged token survived: a new tenure after the restart gets
//!   a token larger than any token a client was told about before the kill.

use collab_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use common::{fingerprint, ServerHarness};
use rand::{RngExt, SeedableRng};
use serde_json::Value;

const CLIENTS: usize = 6;
const ISSUES: usize = 3;
/// Successful replies before the kill (enough that every kind of op ran).
const OPS_BEFORE_KILL: usize = 60;
/// Ops per client after the restart.
const OPS_AFTER: usize = 12;

/// One acknowledged tenure: a client was told it holds `token` on `issue`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Ack {
    issue: String,
    token: i64,
    holder: String,
}

struct Client {
    key: PathBuf,
    fp: String,
}

/// Run one random op as `client`; record successful acquire/renew replies
/// in `acks`. Returns the exit code (255: the server is gone).
fn random_op(
    h: &ServerHarness,
    client: &Client,
    issues: &[String],
    rng: &mut rand::rngs::StdRng,
    acks: &Mutex<Vec<Ack>>,
) -> i32 {
    let issue = &issues[rng.random_range(0..issues.len())];
    let cmd = match rng.random_range(0..5) {
        0 | 1 => format!("collab-lease acquire 'r.git' '{issue}' --ttl 3600"),
        2 => format!("collab-lease acquire 'r.git' '{issue}'"),
        3 => format!("collab-lease renew 'r.git' '{issue}' --ttl 3600"),
        _ => format!("collab-lease release 'r.git' '{issue}'"),
    };
    let out = h.ssh_exec_as(&client.key, &cmd, b"");
    match out.code {
        0 => {
            let v = out.json();
            if let Some(token) = v["token"].as_i64() {
                assert_eq!(v["holder"], client.fp.as_str(), "{out:?}");
                acks.lock().unwrap().push(Ack {
                    issue: v["issue"].as_str().unwrap().to_string(),
                    token,
                    holder: client.fp.clone(),
                });
            }
        }
        4 => assert_eq!(out.json()["status"], "held", "{out:?}"),
        // The connection died with the server: ssh's own failure, or a
        // reply cut short. Neither tells the client anything.
        255 => {}
        _ => panic!("{cmd}: {out:?}"),
    }
    out.code
}

/// No `(issue, token)` was acknowledged to two different holders.
fn assert_tokens_unique(acks: &[Ack]) {
    let mut owner: BTreeMap<(&str, i64), &str> = BTreeMap::new();
    for ack in acks {
        let prev = owner.insert((&ack.issue, ack.token), &ack.holder);
        assert!(
            prev.is_none() || prev == Some(ack.holder.as_str()),
            "token {} of issue {} was handed to {} and to {}",
            ack.token,
            ack.issue,
            prev.unwrap(),
            ack.holder
        );
    }
}

fn live_leases(h: &ServerHarness) -> Vec<Value> {
    let out = h.ssh_exec("collab-lease list 'r.git'");
    assert_eq!(out.code, 0, "{out:?}");
    out.json()["leases"].as_array().unwrap().clone()
}

#[test]
fn sigkill_mid_storm_loses_no_acknowledged_lease_and_reuses_no_token() {
    let mut h = ServerHarness::start();
    h.create_repo("r");
    let issues: Vec<String> = (0..ISSUES)
        .map(|i| h.open_server_issue("r", &format!("Storm {i}")))
        .collect();
    let clients: Vec<Client> = (0..CLIENTS)
        .map(|i| {
            let key = h.authorized_key(&format!("client{i}"));
            let fp = fingerprint(&key);
            Client { key, fp }
        })
        .collect();
    let fingerprints: BTreeSet<&str> = clients.iter().map(|c| c.fp.as_str()).collect();

    // Phase 1: the storm, and SIGKILL in the middle of it.
    let acks = Mutex::new(Vec::new());
    let done = AtomicUsize::new(0);
    let server_gone = AtomicBool::new(false);
    std::thread::scope(|s| {
        for (seed, client) in clients.iter().enumerate() {
            let (h, issues, acks, done, server_gone) = (&h, &issues, &acks, &done, &server_gone);
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed as u64);
                // Keep going until this client sees the server gone (a
                // 255 after the kill); each op is a fresh ssh process.
                loop {
                    let code = random_op(h, client, issues, &mut rng, acks);
                    if code == 255 && server_gone.load(Ordering::SeqCst) {
                        break;
                    }
                    assert_ne!(code, 255, "ssh failed before the kill");
                    done.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        while done.load(Ordering::SeqCst) < OPS_BEFORE_KILL {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        server_gone.store(true, Ordering::SeqCst);
        // SAFETY: plain kill(2) of the server process this test started.
        let killed = unsafe { libc::kill(h.pid() as i32, libc::SIGKILL) };
        assert_eq!(killed, 0);
    });
    let status = h.wait_exit();
    assert!(!status.success(), "the server was killed: {status:?}");
    let before_kill = acks.lock().unwrap().clone();
    assert!(
        before_kill.len() >= 5,
        "the storm acquired leases: {before_kill:?}"
    );
    assert_tokens_unique(&before_kill);
    let max_acked: BTreeMap<String, i64> = before_kill.iter().fold(BTreeMap::new(), |mut m, a| {
        let e = m.entry(a.issue.clone()).or_insert(0);
        *e = (*e).max(a.token);
        m
    });

    // Phase 2: the same state directory, a new process.
    h.start_again();
    let live = live_leases(&h);
    let mut per_issue: BTreeMap<String, usize> = BTreeMap::new();
    for lease in &live {
        let issue = lease["issue"].as_str().unwrap();
        assert!(issues.iter().any(|i| i == issue), "{lease}");
        *per_issue.entry(issue.to_string()).or_default() += 1;
        assert!(
            fingerprints.contains(lease["holder"].as_str().unwrap()),
            "{lease}"
        );
        let token = lease["token"].as_i64().unwrap();
        assert!(token >= 1);
    }
    assert!(
        per_issue.values().all(|&n| n == 1),
        "one holder per issue: {live:?}"
    );

    // Every acknowledged token survived the kill: free each issue (its
    // holder releases), take it again, and the new token is above every
    // token any client was told about.
    let by_fp: BTreeMap<&str, &Client> = clients.iter().map(|c| (c.fp.as_str(), c)).collect();
    for lease in &live {
        let holder = by_fp[lease["holder"].as_str().unwrap()];
        let issue = lease["issue"].as_str().unwrap();
        let out = h.ssh_exec_as(
            &holder.key,
            &format!("collab-lease release 'r.git' '{issue}'"),
            b"",
        );
        assert_eq!(out.code, 0, "{out:?}");
    }
    let taker = &clients[0];
    for issue in &issues {
        let out = h.ssh_exec_as(
            &taker.key,
            &format!("collab-lease acquire 'r.git' '{issue}'"),
            b"",
        );
        assert_eq!(out.code, 0, "{out:?}");
        let token = out.json()["token"].as_i64().unwrap();
        let acked = max_acked.get(issue).copied().unwrap_or(0);
        assert!(
            token > acked,
            "issue {issue}: new tenure got token {token}, but {acked} was acknowledged before the kill"
        );
        acks.lock().unwrap().push(Ack {
            issue: issue.clone(),
            token,
            holder: taker.fp.clone(),
        });
        let out = h.ssh_exec_as(
            &taker.key,
            &format!("collab-lease release 'r.git' '{issue}'"),
            b"",
        );
        assert_eq!(out.code, 0, "{out:?}");
    }

    // A second storm on the restarted server: still no token reused,
    // counting every reply from before and after the kill.
    std::thread::scope(|s| {
        for (seed, client) in clients.iter().enumerate() {
            let (h, issues, acks) = (&h, &issues, &acks);
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(1000 + seed as u64);
                for _ in 0..OPS_AFTER {
                    let code = random_op(h, client, issues, &mut rng, acks);
                    assert_ne!(code, 255, "the restarted server answers");
                }
            });
        }
    });
    let all = acks.into_inner().unwrap();
    assert_tokens_unique(&all);
    let live = live_leases(&h);
    let issues_live: BTreeSet<&str> = live.iter().map(|l| l["issue"].as_str().unwrap()).collect();
    assert_eq!(
        issues_live.len(),
        live.len(),
        "one holder per issue: {live:?}"
    );
    for lease in &live {
        // The live tenure is one a client was told about.
        let ack = Ack {
            issue: lease["issue"].as_str().unwrap().to_string(),
            token: lease["token"].as_i64().unwrap(),
            holder: lease["holder"].as_str().unwrap().to_string(),
        };
        assert!(all.contains(&ack), "live lease {lease} was acknowledged");
    }
}
