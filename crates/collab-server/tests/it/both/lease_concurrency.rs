//! Racing acquirers over real SSH: sixteen `ssh … collab-lease acquire`
//! processes, each with its own key, started together on one free issue.
//! Exactly one gets `acquired`; the other fifteen exit 4 naming the winner.
//! Repeated on fresh issues, with and without a TTL.

use collab_testkit as common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Barrier;

use common::{fingerprint, HarnessOptions, ServerHarness, SshOutput};

const RACERS: usize = 16;
const ROUNDS: usize = 3;

#[test]
fn sixteen_concurrent_acquirers_exactly_one_wins() {
    // Sixteen handshakes at once from one address: above the default
    // `ssh.max_startups_per_ip` (10), which would drop some of them.
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_SSH__MAX_STARTUPS_PER_IP".into(), "100".into())],
        ..Default::default()
    });
    h.create_repo("r");
    let issues: Vec<String> = (0..ROUNDS)
        .map(|round| h.open_server_issue("r", &format!("Race {round}"))[..8].to_string())
        .collect();
    let keys: Vec<(PathBuf, String)> = (0..RACERS)
        .map(|i| {
            let key = h.authorized_key(&format!("racer{i}"));
            let fp = fingerprint(&key);
            (key, fp)
        })
        .collect();

    for (round, issue) in issues.iter().enumerate() {
        let ttl = if round % 2 == 0 { "" } else { " --ttl 600" };
        let cmd = format!("collab-lease acquire 'r.git' '{issue}'{ttl}");
        let start = Barrier::new(RACERS);
        let replies: Vec<(String, SshOutput)> = std::thread::scope(|s| {
            let racers: Vec<_> = keys
                .iter()
                .map(|(key, fp)| {
                    let (h, cmd, start) = (&h, &cmd, &start);
                    s.spawn(move || {
                        start.wait();
                        (fp.clone(), h.ssh_exec_as(key, cmd, b""))
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });

        let mut winners = Vec::new();
        let mut named: BTreeMap<String, usize> = BTreeMap::new();
        let mut full_ids = Vec::new();
        for (fp, out) in &replies {
            assert!(out.stderr.is_empty(), "round {round}: {out:?}");
            let v = out.json();
            full_ids.push(v["issue"].as_str().unwrap().to_string());
            match out.code {
                0 => {
                    assert_eq!(v["status"], "acquired", "{out:?}");
                    assert_eq!(v["holder"], fp.as_str());
                    assert_eq!(v["token"], 1);
                    winners.push(fp.clone());
                }
                4 => {
                    assert_eq!(v["status"], "held", "{out:?}");
                    *named
                        .entry(v["holder"].as_str().unwrap().to_string())
                        .or_default() += 1;
                }
                other => panic!("round {round}: unexpected exit {other}: {out:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one winner");
        let winner = &winners[0];
        assert_eq!(
            named,
            BTreeMap::from([(winner.clone(), RACERS - 1)]),
            "round {round}: all fifteen losers name the winner"
        );
        full_ids.dedup();
        assert_eq!(full_ids.len(), 1, "every reply names the same full id");

        // The store agrees: one live lease on the issue, the winner's.
        let list = h.ssh_exec("collab-lease list 'r.git'").json();
        let rows: Vec<_> = list["leases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["issue"] == full_ids[0].as_str())
            .collect();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["holder"], winner.as_str());
        assert_eq!(rows[0]["token"], 1);
    }
    let all = h.ssh_exec("collab-lease list 'r.git'").json();
    assert_eq!(all["leases"].as_array().unwrap().len(), ROUNDS);
}
