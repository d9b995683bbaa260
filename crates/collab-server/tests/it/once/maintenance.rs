//! Repository maintenance end to end: the real server repacking while real
//! `git` clients clone and push over real `ssh`, the push-count and idle
//! triggers, `collab-repo gc` and its access rule, leftovers of killed
//! pushes, and what `/metrics` shows (and hides).
//!
//! The tests that run clients beside maintenance run under a watchdog
//! (`watched`): past its limit it kills the server, so every client and
//! `collab-repo gc` in flight fails at once, and the test fails saying what
//! was still running instead of hanging until nextest's timeout. They run
//! without retries (.config/nextest.toml): a retried pass once hid a push
//! that maintenance failed.

use collab_testkit as common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use common::web::metrics;
use common::{HarnessOptions, ServerHarness, NOT_FOUND};

/// Clients cloning and pushing at once.
const CLIENTS: usize = 8;
/// Clone-and-push rounds per client.
const ROUNDS: usize = 3;
/// Hang guard for waiting on background runs (not a performance bound).
const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// Hang guard for a whole test body run beside maintenance (normally
/// 10-30 s; not a performance bound).
const TEST_LIMIT: Duration = Duration::from_secs(200);

/// What each thread of a test is doing, for the watchdog's report.
struct Status(Vec<Mutex<String>>);

impl Status {
    fn new(threads: usize) -> Status {
        Status(
            (0..threads)
                .map(|_| Mutex::new("not started".into()))
                .collect(),
        )
    }

    fn set(&self, thread: usize, doing: String) {
        *self.0[thread].lock().unwrap_or_else(|e| e.into_inner()) = doing;
    }

    fn report(&self) -> String {
        self.0
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!(
                    "  thread {i}: {}",
                    s.lock().unwrap_or_else(|e| e.into_inner())
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Run `body`; if it has not returned within `limit`, SIGKILL the server
/// (which ends every ssh and git client of the body) and fail the test with
/// `status` and the server log. A panic of `body` is passed on as it is.
fn watched<T>(h: &ServerHarness, limit: Duration, status: &Status, body: impl FnOnce() -> T) -> T {
    let timed_out = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        let (done, wait) = mpsc::channel::<()>();
        let timed_out = &timed_out;
        s.spawn(move || {
            // Disconnected (the body returned or panicked): nothing to do.
            if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
                timed_out.store(true, Ordering::SeqCst);
                h.sigkill();
            }
        });
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
        drop(done);
        result
    });
    if timed_out.load(Ordering::SeqCst) {
        let log = h.log();
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        panic!(
            "hung: still running after {limit:?}, the server was killed; what each thread \
             was doing:\n{}\nlast lines of the server log:\n{}",
            status.report(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

fn with_env(pairs: &[(&str, &str)]) -> ServerHarness {
    ServerHarness::start_with(HarnessOptions {
        env: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..HarnessOptions::default()
    })
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
    // Thread 0 is the maintainer, 1..=CLIENTS the clients.
    let status = Status::new(CLIENTS + 1);
    watched(&h, TEST_LIMIT, &status, || {
        std::thread::scope(|s| {
            let maintainer = {
                let (h, stop, runs, status) = (&h, &stop, &runs, &status);
                s.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let n = runs.load(Ordering::Relaxed);
                        status.set(0, format!("collab-repo gc, run {n}"));
                        let reply = gc(h, "busy");
                        assert_eq!(reply["status"], "done", "{reply}");
                        runs.fetch_add(1, Ordering::Relaxed);
                    }
                })
            };
            let clients: Vec<_> = (0..CLIENTS)
                .map(|c| {
                    let (h, status) = (&h, &status);
                    s.spawn(move || {
                        status.set(c + 1, "first clone".into());
                        let work = h.clone_repo("busy", &format!("work{c}"));
                        let mut last = String::new();
                        for round in 0..ROUNDS {
                            status.set(c + 1, format!("round {round}: clone"));
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
                            status.set(c + 1, format!("round {round}: push"));
                            let out = h.ssh_push(&work, &[&format!("HEAD:refs/heads/c{c}")]);
                            assert!(
                                out.status.success(),
                                "client {c} round {round} push failed: {}",
                                String::from_utf8_lossy(&out.stderr)
                            );
                            status.set(c + 1, format!("round {round}: fetch"));
                            let fetched =
                                h.git_as(&h.ssh_client_key(), &work, &["fetch", "-q", "origin"]);
                            assert!(
                                fetched.status.success(),
                                "client {c} fetch failed: {}",
                                String::from_utf8_lossy(&fetched.stderr)
                            );
                        }
                        status.set(c + 1, "done".into());
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
        })
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
    // Every push is a pack of its own (receive.unpackLimit=1); the
    // geometric progression (each pack at least twice all smaller ones
    // together) leaves a number of packs logarithmic in the repository's
    // size: a few KiB of pushes on a seed pack fit in 6.
    let reply = gc(&h, "busy");
    assert_eq!(reply["loose_after"], 0, "{reply}");
    assert!(reply["packs_after"].as_u64().unwrap() <= 6, "{reply}");
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

/// Pushers in the stress test, and pushes each.
const PUSHERS: usize = 6;
const PUSHES: usize = 20;

/// The race of issue 25 item 9: small pushes (three objects, far under
/// git's `unpackLimit` of 100, so by git's default unpacked into loose
/// objects) while maintenance runs back to back, from two `collab-repo gc`
/// loops and from every push (`after_pushes = 1`). `repack -d` removes the
/// loose-object fan-out directories it empties; a push moving its loose
/// objects out of quarantine into one of them failed with `unable to write
/// file ./objects/xx/…`. Every push must succeed, and land.
#[test]
fn small_pushes_never_fail_while_maintenance_runs_back_to_back() {
    let h = with_env(&[
        ("GIT_COLLAB_MAINTENANCE__AFTER_PUSHES", "1"),
        ("GIT_COLLAB_MAINTENANCE__IDLE_SECS", "1"),
    ]);
    h.create_repo("hot");
    let seed = h.clone_repo("hot", "seed");
    h.commit_file(&seed, "seed", b"seed\n", "seed");
    assert!(h
        .ssh_push(&seed, &["HEAD:refs/heads/main"])
        .status
        .success());
    let works: Vec<_> = (0..PUSHERS)
        .map(|p| h.clone_repo("hot", &format!("pusher{p}")))
        .collect();

    let stop = AtomicBool::new(false);
    let runs = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::<String>::new());
    // Threads 0 and 1 run gc, 2.. push.
    let status = Status::new(PUSHERS + 2);
    let tips: Vec<String> = watched(&h, TEST_LIMIT, &status, || {
        std::thread::scope(|s| {
            let maintainers: Vec<_> = (0..2)
                .map(|m| {
                    let (h, stop, runs, status) = (&h, &stop, &runs, &status);
                    s.spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            status.set(
                                m,
                                format!(
                                    "collab-repo gc after {} runs",
                                    runs.load(Ordering::Relaxed)
                                ),
                            );
                            let reply = gc(h, "hot");
                            assert_eq!(reply["status"], "done", "{reply}");
                            runs.fetch_add(1, Ordering::Relaxed);
                        }
                        status.set(m, "stopped".into());
                    })
                })
                .collect();
            let pushers: Vec<_> = works
                .iter()
                .enumerate()
                .map(|(p, work)| {
                    let (h, failures, status) = (&h, &failures, &status);
                    s.spawn(move || {
                        let mut last = String::new();
                        for n in 0..PUSHES {
                            last = h.commit_file(
                                work,
                                &format!("p{p}/{n}"),
                                format!("pusher {p} push {n}\n").as_bytes(),
                                "small",
                            );
                            status.set(p + 2, format!("push {n}"));
                            // Not `ssh_push`, which panics: every failure is counted.
                            let refspec = format!("HEAD:refs/heads/p{p}");
                            let out = h.git_as(
                                &h.ssh_client_key(),
                                work,
                                &["push", "-q", "origin", &refspec],
                            );
                            if !out.status.success() {
                                failures.lock().unwrap().push(format!(
                                    "pusher {p} push {n}: {}",
                                    String::from_utf8_lossy(&out.stderr).trim()
                                ));
                            }
                        }
                        status.set(p + 2, "done".into());
                        last
                    })
                })
                .collect();
            let tips: Vec<_> = pushers.into_iter().map(|p| p.join()).collect();
            stop.store(true, Ordering::Relaxed);
            for m in maintainers {
                m.join().expect("a maintenance run failed");
            }
            tips.into_iter()
                .map(|t| t.expect("a pusher panicked"))
                .collect()
        })
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} pushes failed beside maintenance:\n{}",
        failures.len(),
        PUSHERS * PUSHES,
        failures.join("\n")
    );
    let runs = runs.load(Ordering::Relaxed);
    assert!(runs >= 4, "only {runs} gc runs overlapped the pushes");
    let repo = h.repos_dir().join("hot.git");
    fsck(&repo);
    let listed = h.ls_remote_as(&h.ssh_client_key(), "hot");
    for (p, tip) in tips.iter().enumerate() {
        assert!(
            listed.stdout.contains(&format!("{tip}\trefs/heads/p{p}\n")),
            "pusher {p}'s last push is not the tip:\n{}",
            listed.stdout
        );
    }
}

/// Pushes for review (each opening a patch, so the server writes a new
/// `refs/collab/revisions/<patch>/1`) while maintenance runs back to back.
/// `git pack-refs --all` prunes the loose refs it packed and removes the
/// directories they leave empty, `refs/collab/revisions` among them; the
/// proc-receive hook making `revisions/<patch>` below it failed with
/// `failed to make directory …` (issue 45: 2 pushes in 360 of a fleet run
/// with `collab-repo gc` looping). Every push must open its patch.
#[test]
fn pushes_for_review_never_fail_while_maintenance_runs_back_to_back() {
    const REVIEW_PUSHERS: usize = 4;
    const REVIEW_PUSHES: usize = 25;
    let h = with_env(&[
        ("GIT_COLLAB_MAINTENANCE__AFTER_PUSHES", "1"),
        ("GIT_COLLAB_MAINTENANCE__IDLE_SECS", "1"),
    ]);
    h.create_repo("review");
    let seed = h.clone_repo("review", "seed");
    h.commit_file(&seed, "seed", b"seed\n", "seed");
    assert!(h
        .ssh_push(&seed, &["HEAD:refs/heads/main"])
        .status
        .success());
    let works: Vec<_> = (0..REVIEW_PUSHERS)
        .map(|p| h.clone_repo("review", &format!("reviewer{p}")))
        .collect();

    let stop = AtomicBool::new(false);
    let runs = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::<String>::new());
    // Threads 0 and 1 run gc, 2.. push.
    let status = Status::new(REVIEW_PUSHERS + 2);
    watched(&h, TEST_LIMIT, &status, || {
        std::thread::scope(|s| {
            let maintainers: Vec<_> = (0..2)
                .map(|m| {
                    let (h, stop, runs, status) = (&h, &stop, &runs, &status);
                    s.spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            status.set(
                                m,
                                format!(
                                    "collab-repo gc after {} runs",
                                    runs.load(Ordering::Relaxed)
                                ),
                            );
                            let reply = gc(h, "review");
                            assert_eq!(reply["status"], "done", "{reply}");
                            runs.fetch_add(1, Ordering::Relaxed);
                        }
                        status.set(m, "stopped".into());
                    })
                })
                .collect();
            let pushers: Vec<_> = works
                .iter()
                .enumerate()
                .map(|(p, work)| {
                    let (h, failures, status) = (&h, &failures, &status);
                    s.spawn(move || {
                        for n in 0..REVIEW_PUSHES {
                            h.commit_file(
                                work,
                                &format!("r{p}/{n}"),
                                format!("reviewer {p} change {n}\n").as_bytes(),
                                &format!("change {p}.{n}"),
                            );
                            status.set(p + 2, format!("push {n} for review"));
                            let out = h.git_as(
                                &h.ssh_client_key(),
                                work,
                                &["push", "-q", "origin", "HEAD:refs/for/main"],
                            );
                            if !out.status.success() {
                                failures.lock().unwrap().push(format!(
                                    "reviewer {p} push {n}: {}",
                                    String::from_utf8_lossy(&out.stderr).trim()
                                ));
                            }
                        }
                        status.set(p + 2, "done".into());
                    })
                })
                .collect();
            for p in pushers {
                p.join().expect("a pusher panicked");
            }
            stop.store(true, Ordering::Relaxed);
            for m in maintainers {
                m.join().expect("a maintenance run failed");
            }
        })
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} pushes for review failed beside maintenance:\n{}",
        failures.len(),
        REVIEW_PUSHERS * REVIEW_PUSHES,
        failures.join("\n")
    );
    let runs = runs.load(Ordering::Relaxed);
    assert!(runs >= 4, "only {runs} gc runs overlapped the pushes");
    let repo = h.repos_dir().join("review.git");
    fsck(&repo);
    // Every push opened its patch and has its revision ref.
    let out = Command::new("git")
        .args(["-c", "safe.directory=*", "-C"])
        .arg(&repo)
        .args([
            "for-each-ref",
            "--format=%(refname)",
            "refs/collab/revisions/",
        ])
        .output()
        .unwrap();
    let pins = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(pins, REVIEW_PUSHERS * REVIEW_PUSHES);
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
