//! Repository maintenance end to end: the real server repacking while real
//! `git` clients clone and push over real `ssh`, the push-count and idle
//! triggers, `collab-repo gc` and its access rule, leftovers of killed
//! pushes, and what `/metrics` shows (and hides).

use collab_testkit as common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{HarnessOptions, ServerHarness, NOT_FOUND};

/// Clients cloning and pushing at once.
const CLIENTS: usize = 8;
/// Clone-and-push rounds per client.
const ROUNDS: usize = 3;
/// Hang guard for waiting on background runs (not a performance bound).
const WAIT_LIMIT: Duration = Duration::from_secs(120);

fn with_env(pairs: &[(&str, &str)]) -> ServerHarness {
    ServerHarness::start_with(HarnessOptions {
        env: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..HarnessOptions::default()
    })
}

fn metrics(h: &ServerHarness) -> String {
    let addr = h.http_addr;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    use std::io::{Read as _, Write as _};
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

/// The value of one sample line (`name{labels} value`) in `/metrics`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn wait_for_runs(h: &ServerHarness, trigger: &str, at_least: f64) {
    let series =
        format!("git_collab_maintenance_runs_total{{trigger=\"{trigger}\",outcome=\"ok\"}}");
    let start = Instant::now();
    loop {
        let text = metrics(h);
        if sample(&text, &series).unwrap_or(0.0) >= at_least {
            return;
        }
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "no {trigger} run came; metrics:\n{text}\nlog:\n{}",
            h.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn gc(h: &ServerHarness, repo: &str) -> serde_json::Value {
    let out = h.ssh_exec(&format!("collab-repo gc '{repo}'"));
    assert_eq!(out.code, 0, "{out:?}");
    out.json()
}

fn fsck(repo: &Path) {
    let out = Command::new("git")
        .args(["-c", "safe.directory=*", "-C"])
        .arg(repo)
        .args(["fsck", "--no-dangling"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        repo.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn maintenance_in_a_loop_never_fails_a_concurrent_clone_or_push() {
    // Pushes trigger runs too, besides the gc loop below.
    let h = with_env(&[("GIT_COLLAB_MAINTENANCE__AFTER_PUSHES", "4")]);
    h.create_repo("busy");
    let seed = h.clone_repo("busy", "seed");
    for i in 0..20 {
        h.commit_file(
            &seed,
            &format!("f{i}"),
            format!("{i}\n").repeat(100).as_bytes(),
            "seed",
        );
    }
    assert!(h
        .ssh_push(&seed, &["HEAD:refs/heads/main"])
        .status
        .success());

    let stop = AtomicBool::new(false);
    let runs = AtomicUsize::new(0);
    let mut last_pushed: Vec<String> = Vec::new();
    std::thread::scope(|s| {
        let maintainer = {
            let (h, stop, runs) = (&h, &stop, &runs);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let reply = gc(h, "busy");
                    assert_eq!(reply["status"], "done", "{reply}");
                    runs.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let h = &h;
                s.spawn(move || {
                    let work = h.clone_repo("busy", &format!("work{c}"));
                    let mut last = String::new();
                    for round in 0..ROUNDS {
                        // A full clone from scratch...
                        let fresh = h.clone_repo("busy", &format!("fresh{c}-{round}"));
                        assert!(fresh.join("f0").exists());
                        std::fs::remove_dir_all(&fresh).unwrap();
                        // ...and a push to the client's own branch.
                        last = h.commit_file(
                            &work,
                            &format!("c{c}/r{round}"),
                            format!("client {c} round {round}\n").as_bytes(),
                            "load",
                        );
                        let out = h.ssh_push(&work, &[&format!("HEAD:refs/heads/c{c}")]);
                        assert!(
                            out.status.success(),
                            "client {c} round {round} push failed: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        let fetched =
                            h.git_as(&h.ssh_client_key(), &work, &["fetch", "-q", "origin"]);
                        assert!(
                            fetched.status.success(),
                            "client {c} fetch failed: {}",
                            String::from_utf8_lossy(&fetched.stderr)
                        );
                    }
                    last
                })
            })
            .collect();
        // Stop the maintainer before looking at the clients: a failed
        // client must fail the test, not leave the gc loop running forever
        // (which held the scope open and hung the test in one CI run).
        let results: Vec<_> = clients.into_iter().map(|c| c.join()).collect();
        stop.store(true, Ordering::Relaxed);
        maintainer.join().expect("a maintenance run failed");
        for result in results {
            last_pushed.push(result.expect("a client failed"));
        }
    });
    assert!(
        runs.load(Ordering::Relaxed) >= 2,
        "maintenance never overlapped the clients"
    );

    let repo = h.repos_dir().join("busy.git");
    fsck(&repo);
    let listed = h.ls_remote_as(&h.ssh_client_key(), "busy");
    for (c, commit) in last_pushed.iter().enumerate() {
        assert!(
            listed
                .stdout
                .contains(&format!("{commit}\trefs/heads/c{c}\n")),
            "client {c}'s last push is not the tip:\n{}",
            listed.stdout
        );
    }
    // After a final run: no loose objects, few packs, a bitmap, a graph.
    let reply = gc(&h, "busy");
    assert_eq!(reply["loose_after"], 0, "{reply}");
    assert!(reply["packs_after"].as_u64().unwrap() <= 3, "{reply}");
    let packs = std::fs::read_dir(repo.join("objects/pack")).unwrap();
    assert!(
        packs
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".bitmap")),
        "no reachability bitmap"
    );
    assert!(repo
        .join("objects/info/commit-graphs/commit-graph-chain")
        .is_file());
    let packed = std::fs::read_to_string(repo.join("packed-refs")).unwrap();
    assert!(packed.contains("refs/heads/main"), "{packed}");
}

/// A public and a private repository, each pushed to `pushes` times.
fn two_repos_pushed(h: &ServerHarness, pushes: usize) {
    h.create_repo("open");
    h.create_repo("secret-plans");
    std::fs::write(
        h.repos_dir().join("open.git/collab-policy.toml"),
        "public = true\n",
    )
    .unwrap();
    for name in ["open", "secret-plans"] {
        let clone = h.clone_repo(name, &format!("{name}-work"));
        for i in 0..pushes {
            h.commit_file(&clone, "f", format!("{i}").as_bytes(), "small");
            assert!(h
                .ssh_push(&clone, &["HEAD:refs/heads/main"])
                .status
                .success());
        }
    }
}

fn loose_objects(repo: &Path) -> usize {
    std::fs::read_dir(repo.join("objects"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().len() == 2)
        .map(|e| std::fs::read_dir(e.path()).map_or(0, |d| d.count()))
        .sum()
}

/// After the runs: both repositories fsck-clean with no loose objects,
/// and `/metrics` names the public one only.
fn check_maintained(h: &ServerHarness) {
    let text = metrics(h);
    assert!(
        text.contains("git_collab_repo_packs{repo=\"open.git\"}"),
        "{text}"
    );
    assert!(
        !text.contains("secret-plans"),
        "a private name leaked:\n{text}"
    );
    assert_eq!(
        sample(&text, "git_collab_maintenance_repos"),
        Some(2.0),
        "{text}"
    );
    for name in ["open", "secret-plans"] {
        let repo = h.repos_dir().join(format!("{name}.git"));
        fsck(&repo);
        assert_eq!(
            loose_objects(&repo),
            0,
            "{name}: loose objects left after the run"
        );
    }
}

#[test]
fn every_nth_push_triggers_a_run_and_metrics_name_only_public_repos() {
    let h = with_env(&[
        ("GIT_COLLAB_MAINTENANCE__AFTER_PUSHES", "3"),
        ("GIT_COLLAB_MAINTENANCE__IDLE_SECS", "0"),
    ]);
    two_repos_pushed(&h, 3);
    wait_for_runs(&h, "pushes", 2.0);
    check_maintained(&h);
}

#[test]
fn an_idle_repository_gets_its_run() {
    let h = with_env(&[
        ("GIT_COLLAB_MAINTENANCE__AFTER_PUSHES", "0"),
        ("GIT_COLLAB_MAINTENANCE__IDLE_SECS", "1"),
    ]);
    two_repos_pushed(&h, 2);
    wait_for_runs(&h, "idle", 2.0);
    // A repository may have had a run between its two pushes: wait until
    // both have had one after their last push.
    let start = Instant::now();
    while ["open", "secret-plans"]
        .iter()
        .any(|name| loose_objects(&h.repos_dir().join(format!("{name}.git"))) > 0)
    {
        assert!(start.elapsed() < WAIT_LIMIT, "idle runs never caught up");
        std::thread::sleep(Duration::from_millis(100));
    }
    check_maintained(&h);
}

#[test]
fn gc_needs_rewind_and_hides_what_the_caller_cannot_see() {
    let h = ServerHarness::start();
    h.create_repo("mine");
    std::fs::write(
        h.repos_dir().join("mine.git/collab-policy.toml"),
        "read = [\"*\"]\nwrite = [\"*\"]\n",
    )
    .unwrap();
    h.create_repo("hidden");
    let writer = h.authorized_key("writer");
    std::fs::write(
        h.repos_dir().join("hidden.git/collab-policy.toml"),
        "read = [\"nobody\"]\nwrite = [\"nobody\"]\n",
    )
    .unwrap();

    let out = h.ssh_exec_as(&writer, "collab-repo gc 'mine'", b"");
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr,
        "error: permission denied: collab-repo gc needs rewind access\n"
    );
    for repo in ["hidden", "no-such-repo"] {
        let out = h.ssh_exec_as(&writer, &format!("collab-repo gc '{repo}'"), b"");
        assert_eq!((out.code, out.stderr.as_str()), (1, NOT_FOUND), "{repo}");
    }
    let out = h.ssh_exec("collab-repo gc");
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with("error: "), "{out:?}");
    // The admin may.
    assert_eq!(gc(&h, "mine")["status"], "done");
}

#[test]
fn gc_removes_the_quarantine_a_killed_push_left() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let repo = h.repos_dir().join("r.git");
    let stale = repo.join("objects/tmp_objdir-incoming-dead");
    let fresh = repo.join("objects/tmp_objdir-incoming-live");
    std::fs::create_dir_all(stale.join("pack")).unwrap();
    std::fs::create_dir_all(&fresh).unwrap();
    std::fs::write(stale.join("pack/tmp_pack_x"), b"half a pack").unwrap();
    std::fs::write(fresh.join("obj"), b"still arriving").unwrap();
    for path in [
        stale.join("pack/tmp_pack_x"),
        stale.join("pack"),
        stale.clone(),
    ] {
        let out = Command::new("touch")
            .args(["-d", "3 hours ago"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    let reply = gc(&h, "r");
    assert_eq!(reply["leftovers_removed"], 1, "{reply}");
    assert!(!stale.exists());
    assert!(fresh.exists(), "a live push's quarantine was removed");
}
