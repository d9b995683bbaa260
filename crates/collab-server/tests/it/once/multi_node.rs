//! Several server processes on one PostgreSQL database and one state
//! directory (`collab_db = "postgres://…"`), driven by the real `ssh`:
//! 48 racers spread over three nodes get exactly one winner per issue (for
//! one issue, and for four at once over three rounds, tokens growing), 64
//! `next` callers over three nodes drain 48 ready issues without handing one
//! out twice (16 find the queue empty), a node killed mid-storm loses nothing acknowledged and repeats no
//! token, a watcher on one node sees what another node wrote, and a watcher
//! on each node sees every event of 72 racing write calls over three nodes once,
//! in `seq` order, with no gap (comments on two repositories, which take
//! their repositories' locks, racing lease operations), every acknowledged
//! comment in the log; one merge queue driven by three nodes
//! builds each group once, and one merge train driven by two nodes lands
//! each patch once when one of them is killed mid-train; six webhook subscriptions are claimed per
//! row by all three nodes, delivered in order without gaps, and taken over
//! when a node holding claims is killed. Needs
//! `GIT_COLLAB_TEST_POSTGRES` (skips without it, fails without it under
//! `GIT_COLLAB_REQUIRE_POSTGRES_TESTS=1`).

use collab_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Barrier};
use std::time::Duration;

use common::{fingerprint, HarnessOptions, ServerHarness, SshOutput};

const NODES: usize = 3;

/// Three nodes on one fresh database, or `None` without PostgreSQL.
fn cluster() -> Option<Vec<ServerHarness>> {
    // Many handshakes at once from one address.
    let options = HarnessOptions {
        env: vec![("GIT_COLLAB_SSH__MAX_STARTUPS_PER_IP".into(), "200".into())],
        ..Default::default()
    };
    ServerHarness::start_cluster_on_postgres(options, NODES)
}

fn keys(h: &ServerHarness, n: usize) -> Vec<(PathBuf, String)> {
    (0..n)
        .map(|i| {
            let key = h.authorized_key(&format!("agent{i}"));
            let fp = fingerprint(&key);
            (key, fp)
        })
        .collect()
}

/// Run `cmd` once per key, all at once, agent `i` on node `i % NODES`.
fn storm(
    nodes: &[ServerHarness],
    keys: &[(PathBuf, String)],
    cmd: &str,
) -> Vec<(String, SshOutput)> {
    let start = Barrier::new(keys.len());
    std::thread::scope(|s| {
        let racers: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, (key, fp))| {
                let (node, start) = (&nodes[i % nodes.len()], &start);
                s.spawn(move || {
                    start.wait();
                    (fp.clone(), node.ssh_exec_as(key, cmd, b""))
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

#[test]
fn racers_over_three_nodes_get_exactly_one_winner() {
    let Some(nodes) = cluster() else { return };
    nodes[0].create_repo("r");
    let agents = keys(&nodes[0], 48);
    for round in 0..2 {
        let issue = nodes[round % NODES].open_server_issue("r", &format!("Race {round}"));
        let replies = storm(
            &nodes,
            &agents,
            &format!("collab-lease acquire 'r.git' '{}' --ttl 600", &issue[..8]),
        );
        let mut winners = Vec::new();
        let mut named: BTreeMap<String, usize> = BTreeMap::new();
        for (fp, out) in &replies {
            let v = out.json();
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
                        .entry(v["holder"].as_str().unwrap().into())
                        .or_default() += 1;
                }
                other => panic!("round {round}: exit {other}: {out:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one winner");
        assert_eq!(
            named,
            BTreeMap::from([(winners[0].clone(), 47)]),
            "round {round}: every loser names the winner"
        );
        // Every node reads the same holder.
        for node in &nodes {
            let v = node
                .ssh_exec(&format!("collab-lease show 'r.git' '{}'", &issue[..8]))
                .json();
            assert_eq!(v["holder"], winners[0].as_str(), "{v}");
        }
    }
}

/// 48 racers over three nodes race for four issues at once (12 each, on
/// every node), three rounds: each round every issue has exactly one
/// winner, whom its losers name, with the round's token (tokens grow by
/// one per tenure, on whichever node it was decided); the winner releases
/// through another node.
#[test]
fn racers_for_several_issues_over_three_nodes_get_one_winner_each_and_growing_tokens() {
    let Some(nodes) = cluster() else { return };
    nodes[0].create_repo("r");
    let agents = keys(&nodes[0], 48);
    let issues: Vec<String> = (0..4)
        .map(|i| {
            nodes[i % NODES].open_server_issue("r", &format!("Contended {i}"))[..8].to_string()
        })
        .collect();
    for round in 1..=3i64 {
        let start = Barrier::new(agents.len());
        let replies: Vec<(usize, SshOutput)> = std::thread::scope(|s| {
            let racers: Vec<_> = agents
                .iter()
                .enumerate()
                .map(|(i, (key, _))| {
                    let (node, start, issue) = (&nodes[i % NODES], &start, &issues[i % 4]);
                    s.spawn(move || {
                        start.wait();
                        let cmd = format!("collab-lease acquire 'r.git' '{issue}' --ttl 600");
                        (i, node.ssh_exec_as(key, &cmd, b""))
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let mut winners: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut named: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
        for (i, out) in &replies {
            let v = out.json();
            match out.code {
                0 => {
                    assert_eq!(v["status"], "acquired", "{out:?}");
                    assert_eq!(v["token"], round, "round {round}: {out:?}");
                    winners.entry(i % 4).or_default().push(*i);
                }
                4 => {
                    assert_eq!(v["status"], "held", "{out:?}");
                    named
                        .entry(i % 4)
                        .or_default()
                        .insert(v["holder"].as_str().unwrap().to_string());
                }
                other => panic!("round {round}: exit {other}: {out:?}"),
            }
        }
        for (n, issue) in issues.iter().enumerate() {
            let won = &winners[&n];
            assert_eq!(won.len(), 1, "round {round}, {issue}: one winner: {won:?}");
            let (key, fp) = &agents[won[0]];
            assert_eq!(
                named[&n],
                BTreeSet::from([fp.clone()]),
                "round {round}, {issue}: every loser names the winner"
            );
            let out = nodes[(won[0] + 1) % NODES].ssh_exec_as(
                key,
                &format!("collab-lease release 'r.git' '{issue}'"),
                b"",
            );
            assert_eq!(out.code, 0, "{out:?}");
        }
    }
}

#[test]
fn next_callers_over_three_nodes_never_share_an_issue() {
    let Some(nodes) = cluster() else { return };
    nodes[0].create_repo("r");
    let agents = keys(&nodes[0], 64);
    let mut opened = BTreeSet::new();
    for i in 0..48 {
        opened.insert(nodes[i % NODES].open_server_issue("r", &format!("Task {i}")));
    }
    let replies = storm(&nodes, &agents, "collab-lease next 'r.git' --ttl 600");
    let mut handed = BTreeSet::new();
    let mut empty = 0;
    for (fp, out) in &replies {
        match out.code {
            0 => {
                let v = out.json();
                assert_eq!(v["holder"], fp.as_str(), "{out:?}");
                let id = v["issue"].as_str().unwrap().to_string();
                assert!(handed.insert(id.clone()), "{id} handed out twice");
            }
            3 => empty += 1,
            other => panic!(
                "exit {other}: {out:?}\n{}",
                nodes
                    .iter()
                    .map(|n| n.log())
                    .collect::<Vec<_>>()
                    .join("\n---\n")
            ),
        }
    }
    assert_eq!(handed, opened, "every ready issue handed out once");
    assert_eq!(empty, 16);
}

#[test]
fn a_node_killed_mid_storm_loses_nothing_acknowledged_and_repeats_no_token() {
    let Some(mut nodes) = cluster() else { return };
    nodes[0].create_repo("r");
    let issues: Vec<String> = (0..8)
        .map(|i| nodes[0].open_server_issue("r", &format!("Churn {i}"))[..8].to_string())
        .collect();
    let agents = keys(&nodes[0], 12);
    // Each agent acquires and releases its issue in a loop through its node;
    // node 2 is SIGKILLed while they run.
    let acknowledged: Vec<(String, i64)> = std::thread::scope(|s| {
        let workers: Vec<_> = agents
            .iter()
            .enumerate()
            .map(|(i, (key, _))| {
                let node = &nodes[i % NODES];
                let issue = &issues[i % issues.len()];
                s.spawn(move || {
                    let mut tokens = Vec::new();
                    for _ in 0..6 {
                        let out = node.ssh_exec_as(
                            key,
                            &format!("collab-lease acquire 'r.git' '{issue}' --ttl 600"),
                            b"",
                        );
                        if out.code == 0 {
                            tokens.push((issue.clone(), out.json()["token"].as_i64().unwrap()));
                            node.ssh_exec_as(
                                key,
                                &format!("collab-lease release 'r.git' '{issue}'"),
                                b"",
                            );
                        }
                    }
                    tokens
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1500));
        nodes[2].sigkill();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    assert!(!acknowledged.is_empty(), "some acquires were acknowledged");
    let mut seen = BTreeSet::new();
    for pair in &acknowledged {
        assert!(seen.insert(pair.clone()), "token {pair:?} handed out twice");
    }
    // What was acknowledged is in the database: each issue's last token is
    // at least every token acknowledged for it, on the surviving nodes and
    // on a node started after the kill.
    nodes[2].kill();
    nodes[2] = nodes[0].start_node();
    for issue in &issues {
        let highest = acknowledged
            .iter()
            .filter(|(i, _)| i == issue)
            .map(|(_, t)| *t)
            .max()
            .unwrap_or(0);
        for node in &nodes {
            let v = node
                .ssh_exec(&format!("collab-lease acquire 'r.git' '{issue}' --ttl 60"))
                .json();
            if let Some(token) = v["token"].as_i64() {
                assert!(
                    token > highest,
                    "{issue}: token {token} after {highest}: {v}"
                );
            }
            node.ssh_exec(&format!("collab-lease release 'r.git' '{issue}'"));
        }
    }
}

#[test]
fn a_watcher_on_one_node_sees_a_comment_written_through_another() {
    let Some(nodes) = cluster() else { return };
    nodes[0].create_repo("r");
    let issue = nodes[1].open_server_issue("r", "Watched");
    // Watch from the log's head as it is now, so the comment below is in
    // the stream however late the watcher attaches.
    let head = nodes[0]
        .ssh_exec("collab-events watch --since 1 --no-follow")
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["seq"].as_i64())
        .max()
        .expect("events so far");
    let mut watcher = Command::new("ssh")
        .args(nodes[0].ssh_options(&nodes[0].client_key()))
        .arg("git@127.0.0.1")
        .arg(format!(
            "collab-events watch 'r.git' --type 'issue.commented' --since {head}"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ssh");
    let stdout = watcher.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let out = nodes[2].ssh_exec(&format!(
        "collab-issue comment 'r.git' '{}' --body 'from node 3'",
        &issue[..8]
    ));
    assert_eq!(out.code, 0, "{out:?}");
    // Hang guard, not a timing assertion (heartbeat lines keep coming).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let seen = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = lines.recv_timeout(left).unwrap_or_else(|_| {
            panic!(
                "the comment never reached the watcher on node 1; node 1 log:\n{}",
                nodes[0].log()
            )
        });
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["type"] == "issue.commented" {
            break v;
        }
    };
    assert_eq!(seen["object_id"], issue.as_str(), "{seen}");
    let _ = watcher.kill();
    let _ = watcher.wait();
}

#[test]
fn waiters_and_expiry_work_across_nodes() {
    let Some(nodes) = cluster() else { return };
    nodes[0].create_repo("r");
    let issue = nodes[0].open_server_issue("r", "Shared")[..8].to_string();
    let agents = keys(&nodes[0], 3);
    let ((a, _), (b, b_fp), (c, c_fp)) = (&agents[0], &agents[1], &agents[2]);
    let acquire = |node: &ServerHarness, key: &PathBuf, extra: &str| {
        node.ssh_exec_as(
            key,
            &format!("collab-lease acquire 'r.git' '{issue}'{extra}"),
            b"",
        )
    };

    // A holds through node 2; B waits on node 1; A releases through node 3.
    assert_eq!(acquire(&nodes[1], a, "").code, 0);
    let waited = std::thread::scope(|s| {
        let waiter = s.spawn(|| acquire(&nodes[0], b, " --wait 120"));
        // Let the waiter queue first (if it has not, it simply wins later).
        std::thread::sleep(Duration::from_millis(500));
        let released =
            nodes[2].ssh_exec_as(a, &format!("collab-lease release 'r.git' '{issue}'"), b"");
        assert_eq!(released.code, 0, "{released:?}");
        waiter.join().unwrap()
    });
    assert_eq!(waited.code, 0, "{waited:?}");
    assert_eq!(waited.json()["holder"], b_fp.as_str());
    assert_eq!(waited.json()["token"], 2);
    let released = nodes[0].ssh_exec_as(b, &format!("collab-lease release 'r.git' '{issue}'"), b"");
    assert_eq!(released.code, 0, "{released:?}");

    // A takes it through node 2 with a short TTL and node 2 dies: the
    // expiry is noticed by another node's timer, which hands it to C,
    // waiting on node 1.
    assert_eq!(acquire(&nodes[1], a, " --ttl 2").code, 0);
    nodes[1].sigkill();
    let waited = acquire(&nodes[0], c, " --wait 120");
    assert_eq!(waited.code, 0, "{waited:?}");
    assert_eq!(waited.json()["holder"], c_fp.as_str());
    assert_eq!(waited.json()["token"], 4);
}

/// A pull mirror due at once on three nodes is synced by exactly one of
/// them (the row claim), and its refs arrive once; a node that sees it
/// claimed leaves it.
#[test]
fn one_node_syncs_a_mirror_at_a_time() {
    let options = HarnessOptions {
        env: vec![
            (
                "GIT_COLLAB_MIRRORS__ALLOWED_HOSTS".into(),
                "127.0.0.1".into(),
            ),
            ("GIT_COLLAB_MIRRORS__MIN_INTERVAL_SECS".into(), "1".into()),
        ],
        ..Default::default()
    };
    let Some(first) = ServerHarness::start_on_postgres(options) else {
        return;
    };
    let nodes = [first.start_node(), first.start_node()];
    let tmp = tempfile::tempdir().unwrap();
    let daemon = common::git_daemon::GitDaemon::start(&tmp.path().join("daemon"));
    let upstream = daemon.bare("up.git");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(&work)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["-c", "user.name=Up", "-c", "user.email=up@example.com"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["commit", "-q", "--allow-empty", "-m", "one"]);
    git(&["push", "-q", upstream.to_str().unwrap(), "main"]);

    first.create_repo("down");
    // An hour's interval: after the first sync nothing is due again.
    let add = nodes[0].ssh_exec(&format!(
        "collab-repo mirror add down '{}' --interval 1h",
        daemon.url("up.git")
    ));
    assert_eq!(add.code, 0, "{add:?}");
    let synced = || {
        [&first, &nodes[0], &nodes[1]]
            .iter()
            .map(|n| n.log().matches("mirror synced").count())
            .sum::<usize>()
    };
    let started = std::time::Instant::now();
    while synced() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no node synced"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Every node's scheduler looks at least twice more in this time.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(synced(), 1, "one sync, on one node");
    let listed = nodes[1].ssh_exec("collab-repo mirror list down");
    let m = &listed.json()["mirrors"][0];
    assert!(m["last_success_at"].is_string(), "{listed:?}");
    let events =
        first.ssh_exec("collab-events watch down --since 0 --no-follow --type ref.updated");
    assert_eq!(events.stdout.lines().count(), 1, "{events:?}");
}

/// The event stream as watchers see it while writers on every node commit
/// at once: each node's watcher must get every event exactly once, in `seq`
/// order, with no gap. This is the guarantee a write path without one global
/// lock must keep (docs/postgres.md): a reader that moved past `n` must never
/// find a later commit with a number below `n`.
#[test]
fn watchers_on_three_nodes_see_racing_writers_events_once_and_in_order() {
    let Some(nodes) = cluster() else { return };
    // Two repositories: their comments take two repository locks, so they
    // race each other as well as the lease operations.
    let repos = ["r", "s"];
    for repo in repos {
        nodes[0].create_repo(repo);
    }
    let issues: Vec<(&str, String)> = (0..4)
        .map(|i| {
            let repo = repos[i % 2];
            let id = nodes[i % NODES].open_server_issue(repo, &format!("Busy {i}"));
            (repo, id[..8].to_string())
        })
        .collect();
    let head = nodes[0]
        .ssh_exec("collab-events watch --since 1 --no-follow")
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["seq"].as_i64())
        .max()
        .expect("events so far");
    // One following watcher per node, attached before the writers start.
    let watchers: Vec<_> = nodes.iter().map(|node| node.event_watcher(head)).collect();
    // Writers on all three nodes at once: comments and lease tenures, each
    // its own transaction with its own events.
    let agents = keys(&nodes[0], 24);
    let mut comments_acknowledged = 0;
    for round in 0..3 {
        let cmd = |i: usize| {
            let (repo, id) = &issues[i % issues.len()];
            match (i + round) % 3 {
                0 => format!("collab-issue comment {repo}.git {id} --body 'round {round}'"),
                1 => format!("collab-lease acquire {repo}.git {id}"),
                _ => format!("collab-lease release {repo}.git {id}"),
            }
        };
        let start = Barrier::new(agents.len());
        comments_acknowledged += std::thread::scope(|s| {
            let writers: Vec<_> = agents
                .iter()
                .enumerate()
                .map(|(i, (key, _))| {
                    let (node, start, cmd) = (&nodes[i % NODES], &start, cmd(i));
                    s.spawn(move || {
                        start.wait();
                        // Conflicts (a lease held by another agent) are fine:
                        // only what committed is in the log.
                        let out = node.ssh_exec_as(key, &cmd, b"");
                        if cmd.starts_with("collab-issue comment") {
                            assert!(out.success(), "{cmd}: {}", out.stderr);
                        }
                        cmd.starts_with("collab-issue comment") && out.success()
                    })
                })
                .collect();
            writers
                .into_iter()
                .map(|w| w.join().unwrap())
                .filter(|&acknowledged| acknowledged)
                .count()
        });
    }
    // The truth: the log as one snapshot read, after every writer returned.
    let log: Vec<serde_json::Value> = nodes[1]
        .ssh_exec(&format!("collab-events watch --since {head} --no-follow"))
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] != "heartbeat")
        .collect();
    let all: Vec<i64> = log.iter().filter_map(|v| v["seq"].as_i64()).collect();
    let commented = log
        .iter()
        .filter(|v| v["type"] == "issue.commented")
        .count();
    assert_eq!(
        commented, comments_acknowledged,
        "every acknowledged comment is in the log, once"
    );
    let last = *all.last().expect("the writers wrote events");
    assert_eq!(
        all,
        ((head + 1)..=last).collect::<Vec<_>>(),
        "the log itself has a gap or a duplicate"
    );
    assert!(all.len() >= 24, "too few events to race: {}", all.len());
    for (n, (mut child, rx)) in watchers.into_iter().enumerate() {
        let mut seen = Vec::new();
        // Hang guard, not a timing assertion.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while seen.last() != Some(&last) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(seq) => seen.push(seq),
                Err(_) => panic!(
                    "watcher on node {} stopped at {:?} of {last}; node log:\n{}",
                    n + 1,
                    seen.last(),
                    nodes[n].log()
                ),
            }
        }
        assert_eq!(
            seen,
            all,
            "watcher on node {} saw a gap, a duplicate or a reordering",
            n + 1
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Repository `r` on the cluster (`main`: one commit) whose merge rule
/// requires `ci/test`, and `n` patches of alice's (one new file each, off
/// `main`), each queued with `--when-green` through node `i % nodes.len()`:
/// (alice, [(patch id8, head)], the policy file).
fn queued_merges(
    nodes: &[ServerHarness],
    n: usize,
) -> (
    collab_testkit::review::Agent,
    Vec<(String, String)>,
    PathBuf,
) {
    use collab_testkit::review::{self as review_support, commit, ok};
    let h = &nodes[0];
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    let policy = h.repos_dir().join("r.git/collab-policy.toml");
    collab_testkit::write_live(&policy, "merge = { required_checks = [\"ci/test\"] }\n");
    let a = review_support::agent(h, "alice");
    let mut patches = Vec::new();
    for i in 0..n {
        ok(
            h,
            &a,
            &["switch", "-q", "-c", &format!("f{i}"), "origin/main"],
        );
        let head = commit(h, &a, &format!("f{i}.txt"), "x\n", &format!("Add f{i}"));
        let out = ok(h, &a, &["push", "origin", "HEAD:refs/for/main"]);
        let short = out
            .stderr
            .lines()
            .find_map(|l| l.split("remote: patch ").nth(1))
            .map(|s| s[..8].to_string())
            .unwrap_or_else(|| panic!("no patch line: {out:?}"));
        patches.push((short, head));
    }
    for (i, (id, _)) in patches.iter().enumerate() {
        let out = nodes[i % nodes.len()].ssh_exec_as(
            &a.key,
            &format!("collab-patch merge 'r' {id} --when-green"),
            b"",
        );
        assert_eq!(out.code, 0, "{out:?}");
    }
    (a, patches, policy)
}

/// Queued merges over three nodes: eight patches queued through different
/// nodes, their required checks turned green through others; every node's
/// driver sees every intent, and each patch is merged exactly once (one
/// `patch.merged`, no drop), all eight onto `main`.
#[test]
fn queued_merges_over_three_nodes_merge_each_patch_once() {
    let Some(nodes) = cluster() else { return };
    let h = &nodes[0];
    let (_, patches, _) = queued_merges(&nodes, 8);
    std::thread::scope(|s| {
        for (i, (_, head)) in patches.iter().enumerate() {
            let node = &nodes[(i + 1) % NODES];
            s.spawn(move || {
                let out = node.ssh_exec(&format!(
                    "collab-check set 'r' {head} ci/test --state success"
                ));
                assert_eq!(out.code, 0, "{out:?}");
            });
        }
    });
    let events = |kind: &str| -> Vec<serde_json::Value> {
        nodes[2]
            .ssh_exec("collab-events watch --since 1 --no-follow")
            .stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["type"] == kind)
            .collect()
    };
    // Hang guard, not a timing assertion.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while events("patch.merged").len() < patches.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "not all merged: {:?}; dropped: {:?}",
            events("patch.merged"),
            events("patch.merge_dequeued")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Let every driver look again: nothing is merged twice or dropped.
    std::thread::sleep(Duration::from_secs(2));
    let merged: Vec<String> = events("patch.merged")
        .iter()
        .map(|e| e["object_id"].as_str().unwrap().to_string())
        .collect();
    let distinct: BTreeSet<&String> = merged.iter().collect();
    assert_eq!(merged.len(), patches.len(), "{merged:?}");
    assert_eq!(distinct.len(), patches.len(), "{merged:?}");
    assert!(events("patch.merge_dequeued").is_empty());
    let tree = Command::new("git")
        .arg("-C")
        .arg(h.repos_dir().join("r.git"))
        .args(["ls-tree", "--name-only", "main"])
        .output()
        .unwrap();
    let files = String::from_utf8_lossy(&tree.stdout);
    for i in 0..8 {
        assert!(files.contains(&format!("f{i}.txt")), "{files}");
    }
}

/// One merge queue over three nodes: eight patches queued through
/// different nodes, a queue of `max_batch = 3`, CI's checks on each group
/// posted through another node. Every node runs the queue's driver, but
/// one drives the branch at a time (the claim): the groups are built one
/// after another (3, 3, 2 patches, numbered 1 to 3, none built twice or
/// gone stale), and each patch is merged exactly once, by its group.
#[test]
fn one_merge_queue_over_three_nodes_builds_each_group_once() {
    let Some(nodes) = cluster() else { return };
    // Queued as plain merges first, so the queue takes them all at once
    // when it is switched on.
    let (_, queued, policy) = queued_merges(&nodes, 8);
    let patches: Vec<String> = queued.into_iter().map(|(id, _)| id).collect();
    collab_testkit::write_live(
        &policy,
        "merge = { required_checks = [\"ci/test\"], queue = true, max_batch = 3 }\n",
    );
    let events = |kind: &str| -> Vec<serde_json::Value> {
        nodes[2]
            .ssh_exec("collab-events watch --since 1 --no-follow")
            .stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["type"] == kind)
            .collect()
    };
    // A simulated CI posting green on each group, through another node.
    let mut ran = BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while events("patch.merged").len() < patches.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "not all merged: {:?}; dropped: {:?}",
            events("patch.merged"),
            events("patch.merge_dequeued")
        );
        for e in events("merge_group.checks_requested") {
            let n = e["payload"]["group"].as_i64().unwrap();
            if ran.insert(n) {
                let commit = e["payload"]["commit"].as_str().unwrap();
                let node = &nodes[usize::try_from(n).unwrap() % NODES];
                let out = node.ssh_exec(&format!(
                    "collab-check set 'r' {commit} ci/test --state success"
                ));
                assert_eq!(out.code, 0, "{out:?}");
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Let every driver look again: nothing more happens.
    std::thread::sleep(Duration::from_secs(2));
    let requested = events("merge_group.checks_requested");
    let numbers: Vec<i64> = requested
        .iter()
        .map(|e| e["payload"]["group"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3], "{requested:?}");
    let sizes: Vec<usize> = requested
        .iter()
        .map(|e| e["payload"]["patches"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, [3, 3, 2], "{requested:?}");
    assert!(events("merge_group.stale").is_empty());
    assert_eq!(events("merge_group.merged").len(), 3);
    let merged: Vec<String> = events("patch.merged")
        .iter()
        .map(|e| e["object_id"].as_str().unwrap().to_string())
        .collect();
    let distinct: BTreeSet<&String> = merged.iter().collect();
    assert_eq!(merged.len(), patches.len(), "{merged:?}");
    assert_eq!(distinct.len(), patches.len(), "{merged:?}");
    assert!(events("patch.merge_dequeued").is_empty());
}

/// One merge train over two nodes under load (issue 45: "two nodes on
/// PostgreSQL driving one train, one driver at a time"): twelve patches
/// queued through both nodes, then the queue switched on as a train of
/// three groups of two; a simulated CI posts each announced group's green
/// through one node or the other, and node 1 is SIGKILLed once the first
/// train is under test, its greens being posted. Node 0 carries on alone:
/// every group is built once (each number announced once, none stale, no
/// patch in two groups), every group that landed had its green before
/// (in the event log's order), each patch is merged exactly once, by a
/// group that landed and holds it, and `main` holds all twelve.
#[test]
fn a_merge_train_over_two_nodes_lands_each_patch_once_when_a_node_is_killed() {
    const PATCHES: usize = 12;
    let options = HarnessOptions {
        env: vec![("GIT_COLLAB_SSH__MAX_STARTUPS_PER_IP".into(), "200".into())],
        ..Default::default()
    };
    let Some(nodes) = ServerHarness::start_cluster_on_postgres(options, 2) else {
        return;
    };
    let (_, queued, policy) = queued_merges(&nodes, PATCHES);
    let patches: BTreeSet<String> = queued.into_iter().map(|(id, _)| id).collect();
    collab_testkit::write_live(
        &policy,
        "merge = { required_checks = [\"ci/test\"], queue = true, max_batch = 2, \
         max_parallel = 3, train = true }\n",
    );
    // Read through node 0, the one that lives.
    let events = |kind: &str| -> Vec<serde_json::Value> {
        nodes[0]
            .ssh_exec("collab-events watch --since 1 --no-follow")
            .stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["type"] == kind)
            .collect()
    };
    let merged_ids = |events: &[serde_json::Value]| -> BTreeSet<String> {
        events
            .iter()
            .map(|e| e["object_id"].as_str().unwrap()[..8].to_string())
            .collect()
    };
    let mut ran = BTreeSet::new();
    // Groups whose green went through node 0 (node 1's may be lost).
    let mut through_0 = BTreeSet::new();
    let mut killed = false;
    // Hang guard, not a timing assertion (a dead node's claim lapses
    // after `merge_queue::CLAIM_SECS`). One CI run on a loaded machine
    // saw the first train built only about 230 s after the queue was
    // switched on, then land at once: the guard leaves room for that,
    // and its message carries both nodes' logs should it recur.
    let deadline = std::time::Instant::now() + Duration::from_secs(420);
    while merged_ids(&events("patch.merged")).len() < PATCHES {
        assert!(
            std::time::Instant::now() < deadline,
            "not all merged: {:?}; dropped: {:?}; groups: {:?}\n\
             node 0's log ends:\n{}\nnode 1's log ends:\n{}",
            events("patch.merged"),
            events("patch.merge_dequeued"),
            events("merge_group.checks_requested"),
            log_tail(&nodes[0]),
            log_tail(&nodes[1]),
        );
        let announced: Vec<(i64, String)> = events("merge_group.checks_requested")
            .iter()
            .map(|e| {
                let n = e["payload"]["group"].as_i64().unwrap();
                (n, e["payload"]["commit"].as_str().unwrap().to_string())
            })
            .collect();
        if !killed {
            // The CI's greens on the first train race the kill: node 1
            // dies while they are posted and land.
            std::thread::scope(|s| {
                for (n, commit) in &announced {
                    if !ran.insert(*n) {
                        continue;
                    }
                    let node = &nodes[*n as usize % 2];
                    if *n % 2 == 0 {
                        through_0.insert(*n);
                    }
                    s.spawn(move || {
                        node.ssh_exec(&format!(
                            "collab-check set 'r' {commit} ci/test --state success"
                        ))
                    });
                }
                if ran.len() >= 3 {
                    std::thread::sleep(Duration::from_millis(300));
                    nodes[1].sigkill();
                    killed = true;
                }
            });
        } else {
            // Greens posted through node 1 may be lost with it: node 0
            // posts every other one (success again changes nothing).
            for (n, commit) in &announced {
                if through_0.insert(*n) {
                    let out = nodes[0].ssh_exec(&format!(
                        "collab-check set 'r' {commit} ci/test --state success"
                    ));
                    assert_eq!(out.code, 0, "{out:?}");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(killed, "node 1 was killed mid-train");
    // Let node 0's driver look again: nothing more happens.
    std::thread::sleep(Duration::from_secs(3));
    let requested = events("merge_group.checks_requested");
    let mut numbers = BTreeSet::new();
    let mut grouped: BTreeMap<String, i64> = BTreeMap::new();
    for e in &requested {
        let n = e["payload"]["group"].as_i64().unwrap();
        assert!(numbers.insert(n), "group {n} built twice: {requested:?}");
        for p in e["payload"]["patches"].as_array().unwrap() {
            let id = p["patch"].as_str().unwrap()[..8].to_string();
            assert_eq!(
                grouped.insert(id.clone(), n),
                None,
                "{id} in two groups: {requested:?}"
            );
        }
    }
    assert!(events("merge_group.stale").is_empty(), "{requested:?}");
    assert!(events("merge_group.failed").is_empty());
    assert!(events("patch.merge_dequeued").is_empty());
    // Every landing was green first: the group's commit has a success
    // check with a lower `seq` than its `merge_group.merged`.
    let greens = events("check.updated");
    let landed = events("merge_group.merged");
    for g in &landed {
        let commit = g["payload"]["commit"].as_str().unwrap();
        assert!(
            greens.iter().any(|c| c["payload"]["commit"] == commit
                && c["payload"]["state"] == "success"
                && c["seq"].as_i64() < g["seq"].as_i64()),
            "group landed before its green: {g}"
        );
    }
    let landed_groups: BTreeSet<i64> = landed
        .iter()
        .map(|g| g["payload"]["group"].as_i64().unwrap())
        .collect();
    assert_eq!(landed_groups.len(), landed.len(), "a group landed twice");
    let merged = events("patch.merged");
    assert_eq!(merged.len(), PATCHES, "each patch merged once: {merged:?}");
    assert_eq!(merged_ids(&merged), patches);
    for e in &merged {
        let id = &e["object_id"].as_str().unwrap()[..8];
        let group = e["payload"]["queue"]["group"].as_i64().unwrap();
        assert!(landed_groups.contains(&group), "{e}");
        assert_eq!(grouped.get(id), Some(&group), "{e}");
    }
    let tree = Command::new("git")
        .arg("-C")
        .arg(nodes[0].repos_dir().join("r.git"))
        .args(["ls-tree", "--name-only", "main"])
        .output()
        .unwrap();
    let files = String::from_utf8_lossy(&tree.stdout);
    for i in 0..PATCHES {
        assert!(files.contains(&format!("f{i}.txt")), "{files}");
    }
}

/// The last lines of a node's log, for a hang guard's message.
fn log_tail(node: &ServerHarness) -> String {
    let log = node.log();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

/// A webhook receiver on loopback speaking plain HTTP/1.1 (keep-alive
/// included): it records, per request path, the `seq` of every delivery in
/// arrival order, and answers 204.
struct HookReceiver {
    addr: std::net::SocketAddr,
    seen: std::sync::Arc<std::sync::Mutex<BTreeMap<String, Vec<i64>>>>,
}

impl HookReceiver {
    fn start() -> HookReceiver {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: std::sync::Arc<std::sync::Mutex<BTreeMap<String, Vec<i64>>>> = Default::default();
        let shared = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let seen = shared.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut writer = stream;
                    loop {
                        let mut request = String::new();
                        if reader.read_line(&mut request).unwrap_or(0) == 0 {
                            return;
                        }
                        let path = request.split(' ').nth(1).unwrap_or("").to_string();
                        let mut length = 0usize;
                        loop {
                            let mut line = String::new();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            let line = line.trim_end();
                            if line.is_empty() {
                                break;
                            }
                            if let Some((k, v)) = line.split_once(':') {
                                if k.eq_ignore_ascii_case("content-length") {
                                    length = v.trim().parse().unwrap();
                                }
                            }
                        }
                        let mut body = vec![0u8; length];
                        if reader.read_exact(&mut body).is_err() {
                            return;
                        }
                        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        if let Some(seq) = value["data"]["seq"].as_i64() {
                            seen.lock().unwrap().entry(path).or_default().push(seq);
                        }
                        if writer
                            .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        HookReceiver { addr, seen }
    }

    fn seen(&self) -> BTreeMap<String, Vec<i64>> {
        self.seen.lock().unwrap().clone()
    }
}

/// Each node's claims, by the pid in the claim's name (`host-pid-random`).
fn webhook_claims(node: &ServerHarness) -> BTreeMap<String, u32> {
    let conn =
        collab_store::open_reader(collab_store::Location::parse(&node.db_setting())).unwrap();
    let mut stmt = conn
        .prepare("SELECT id, claimed_by FROM webhooks WHERE claimed_by IS NOT NULL")
        .unwrap();
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .unwrap();
    rows.map(|r| {
        let (id, by) = r.unwrap();
        let pid = by.rsplit('-').nth(1).unwrap().parse().unwrap();
        (id, pid)
    })
    .collect()
}

/// Webhook deliveries claimed per subscription row: six subscriptions over
/// three nodes are delivered by more than one node; each subscription gets
/// every matching event, in `seq` order, with no gap (a repeat is allowed:
/// at least once); after SIGKILL of a node holding claims, the other nodes
/// take its subscriptions over once the claims lapse
/// (`webhooks.claim_secs`), and nothing is skipped.
#[test]
fn webhook_subscriptions_are_claimed_per_row_spread_over_nodes_and_taken_over() {
    let receiver = HookReceiver::start();
    let env = vec![
        (
            "GIT_COLLAB_WEBHOOKS__ALLOWED_HOSTS".into(),
            "127.0.0.1".into(),
        ),
        ("GIT_COLLAB_WEBHOOKS__CLAIM_SECS".into(), "10".into()),
        ("GIT_COLLAB_WEBHOOKS__RETRY_BASE_SECS".into(), "1".into()),
    ];
    let options = HarnessOptions {
        env,
        ..Default::default()
    };
    let Some(mut nodes) = ServerHarness::start_cluster_on_postgres(options, NODES) else {
        return;
    };
    nodes[0].create_repo("r");
    let mut starts = BTreeMap::new();
    for i in 0..6 {
        let url = format!("http://{}/s{i}", receiver.addr);
        let added = nodes[i % NODES].ssh_exec(&format!(
            "collab-hook add 'r' '{url}' --event 'issue.opened'"
        ));
        assert_eq!(added.code, 0, "{added:?}");
        let cursor = added.json()["webhook"]["cursor"].as_i64().unwrap();
        starts.insert(format!("/s{i}"), cursor);
    }
    let opened = |nodes: &[&ServerHarness], n: usize, tag: &str| {
        for i in 0..n {
            nodes[i % nodes.len()].open_server_issue("r", &format!("{tag} {i}"));
        }
    };
    // Every subscription got exactly the `issue.opened` events after its
    // start, in order: the first delivery of each seq in increasing order,
    // and nothing missing.
    let check = |node: &ServerHarness, what: &str| {
        let expected: Vec<i64> = node
            .ssh_exec("collab-events watch r --since 0 --no-follow --type issue.opened")
            .stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["seq"].as_i64())
            .collect();
        let started = std::time::Instant::now();
        loop {
            let seen = receiver.seen();
            let complete = starts.iter().all(|(path, start)| {
                let want: BTreeSet<i64> = expected.iter().copied().filter(|s| s > start).collect();
                let got: BTreeSet<i64> = seen.get(path).into_iter().flatten().copied().collect();
                want.is_subset(&got)
            });
            if complete {
                for (path, start) in &starts {
                    let mut firsts = Vec::new();
                    for seq in &seen[path] {
                        if !firsts.contains(seq) {
                            firsts.push(*seq);
                        }
                    }
                    let want: Vec<i64> = expected.iter().copied().filter(|s| s > start).collect();
                    assert_eq!(
                        firsts, want,
                        "{what}: {path} in order, no gap, nothing else"
                    );
                }
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{what}: not every event delivered: {seen:?}, expected {expected:?} after {starts:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    opened(&[&nodes[0], &nodes[1], &nodes[2]], 12, "before");
    check(&nodes[0], "three nodes");
    // The claims spread: more than one node delivers (each takes its share
    // of six at its next passes).
    let pids: Vec<u32> = nodes.iter().map(|n| n.pid()).collect();
    let started = std::time::Instant::now();
    let claims = loop {
        let claims = webhook_claims(&nodes[0]);
        let holders: BTreeSet<u32> = claims.values().copied().collect();
        if claims.len() == 6 && holders.len() == NODES {
            break claims;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "claims never spread over the nodes: {claims:?} (pids {pids:?})"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(claims.values().all(|pid| pids.contains(pid)), "{claims:?}");
    // SIGKILL node 3 while it holds claims: the others take them over once
    // they lapse, and every event still arrives, in order.
    let victim = pids[2];
    let its: Vec<String> = claims
        .iter()
        .filter(|(_, pid)| **pid == victim)
        .map(|(id, _)| id.clone())
        .collect();
    assert!(!its.is_empty());
    // SAFETY: plain kill(2) on the server child this test owns.
    unsafe {
        libc::kill(victim as i32, libc::SIGKILL);
    }
    nodes[2].wait_exit();
    opened(&[&nodes[0], &nodes[1]], 8, "after");
    check(&nodes[1], "after the kill");
    let claims = webhook_claims(&nodes[0]);
    for id in &its {
        assert!(
            claims.get(id).is_some_and(|pid| *pid != victim),
            "{id} taken over: {claims:?}"
        );
    }
}
