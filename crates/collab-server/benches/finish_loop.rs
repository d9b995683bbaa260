//! A fleet finishes its work, claim to merge (issue 45, "Measure"). One
//! `git-collab-server`; AGENTS agents, each with its own key and one MCP
//! session over `ssh … collab-mcp` (raw JSON-RPC lines), loop as a fleet
//! does: `lease_next` (with a short `wait`), a real `git` fetch, commit and
//! `git push -o issue=… -o collab-lease=… HEAD:refs/for/main`, then
//! `patch_merge` with the lease's token, which queues the patch on `main`'s
//! merge queue; the queue holds the claim from then on, and the agent goes
//! on to its next issue without waiting for the merge.
//!
//! `main` requires `ci/test` with `queue = true`, `max_batch = 8`,
//! `max_parallel = 8`. A simulated CI is a real HTTP receiver of the signed
//! `merge_group.checks_requested` webhooks: it verifies the `v1,` HMAC
//! signature and the timestamp, looks at the group's commit in the
//! repository (a patch for a broken issue carries a file under `broken/`),
//! and after D seconds posts `ci/test` on that commit over `ssh`: `failure`
//! when the group holds a broken patch, else `success`. One issue in 32 is
//! broken (its title ends in "(broken)"): the queue evicts its patch, the
//! issue is ready again at once (`leases.eviction_grace = 0`) labelled
//! `queue-evicted`, and the agent that takes it next commits the fix.
//!
//! Rows, each on a repository of its own, in the same run: the train off
//! (one group at a time) with agents that renew their claims, the train on
//! (`train = true`) with the same agents, and the train on with agents
//! that never renew (a TTL shorter than the queue's wait: the queued tenure
//! keeps their claims); with `GIT_COLLAB_TEST_POSTGRES` (an admin URL, e.g.
//! from `scripts/ci-postgres.sh`) the train-on row again on PostgreSQL.
//! Measured: issues landed per minute, claim (the first `lease_next` of the
//! issue) to merged (a watcher connected before reads `patch.merged`)
//! p50/p95, CI runs per landed patch and groups thrown away; asserted at
//! the end, after the table is written: 0 internal errors, 0 failed pushes,
//! 0 merges whose group was not green, 0 double hand-outs, every issue
//! landed once, no row out of time.
//!
//! Also measured per row: the server's CPU time per landed issue, its own
//! and with the processes it waited for (its `git` and their hooks), and
//! the queue's rounds: the landings a watcher read within half a CI run of
//! each other are one round, set against the patches that were waiting
//! when its groups were built (one D before) and `max_parallel` x
//! `max_batch` (printed; the D = 30 s row of docs/benchmarks.md).
//!
//! Run: `cargo bench --bench finish_loop`. `BENCH_AGENTS` (64),
//! `BENCH_ISSUES` (256), `BENCH_CI_DELAY_MS` (2000), `BENCH_ROW_LIMIT_SECS`
//! (600: a row stops there, and the bench fails), `BENCH_ROWS` (the rows to
//! run by repository, comma-separated: `off,on,never,pg-train`; all by
//! default), `BENCH_NO_BROKEN=1` (no broken issue). Writes docs/benchmarks.md under "## A fleet finishes: claim to
//! merge" (`BENCH_NO_DOCS=1`: print only).

use collab_testkit::bench as support;
use collab_testkit::mcp::McpSession;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{BufRead as _, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use collab_testkit::{HarnessOptions, ServerHarness};
use hmac::{Hmac, Mac as _};
use serde_json::{json, Value};
use sha2::Sha256;
use support::{env_usize, fmt, percentile, write_section};

const SECTION: &str = "## A fleet finishes: claim to merge";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// One issue in this many is broken: the ones at this offset in each run
/// of them (so a scaled-down run of 16 has one too).
const BROKEN_EVERY: usize = 32;
const BROKEN_AT: usize = 5;

/// The merge rule of every row but its `train`.
const RULE: &str = "required_checks = [\"ci/test\"], queue = true, max_batch = 8, max_parallel = 8";

/// `max_parallel` x `max_batch` of [`RULE`]: what one round of a train
/// can land.
const ROUND_CEILING: usize = 8 * 8;

/// A claim's TTL for agents that renew (every third of it), and for those
/// that never do: far shorter than a patch waits in the queue.
const TTL_SECS: u64 = 30;

/// How long one `lease_next` waits for work (or for the caller's queued
/// merges to settle) before the agent looks at the clock again.
const NEXT_WAIT_SECS: u64 = 2;

/// What the simulated CI shares with the bench.
#[derive(Default)]
struct Ci {
    /// How long one run takes.
    delay: Duration,
    /// Groups it ran, per repository (`name.git`).
    runs: HashMap<String, usize>,
    /// Commits it posted `success` on.
    green: HashSet<String>,
    /// Deliveries refused: a bad or missing signature, a stale timestamp.
    bad_signatures: usize,
    /// `collab-check set` calls that failed.
    failed_posts: usize,
}

/// Verify a delivery the way a Standard Webhooks receiver does: the
/// `v1,` HMAC-SHA256 of `{id}.{timestamp}.{body}` with the subscription's
/// secret, and a timestamp within five minutes.
fn verify(key: &[u8], headers: &HashMap<String, String>, body: &[u8]) -> bool {
    let (Some(id), Some(ts), Some(sigs)) = (
        headers.get("webhook-id"),
        headers.get("webhook-timestamp"),
        headers.get("webhook-signature"),
    ) else {
        return false;
    };
    let Ok(at) = ts.parse::<i64>() else {
        return false;
    };
    if (chrono::Utc::now().timestamp() - at).abs() > 300 {
        return false;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    let expected = B64.encode(mac.finalize().into_bytes());
    sigs.split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|s| s == expected)
}

/// The simulated CI (see the module doc), verifying with `key`; its
/// webhook URL.
fn simulated_ci(h: &ServerHarness, key: Vec<u8>, ci: Arc<Mutex<Ci>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/ci", listener.local_addr().unwrap());
    let ssh_args = h.ssh_options(&h.ssh_client_key());
    let repos = h.repos_dir();
    let key = Arc::new(key);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (ssh_args, ci, repos, key) =
                (ssh_args.clone(), ci.clone(), repos.clone(), key.clone());
            std::thread::spawn(move || {
                let received = Instant::now();
                let Some((headers, body)) = support::take_http_request(stream) else {
                    return;
                };
                if !verify(&key, &headers, &body) {
                    ci.lock().unwrap().bad_signatures += 1;
                    return;
                }
                let Ok(event) = serde_json::from_slice::<Value>(&body) else {
                    return;
                };
                let payload = &event["data"]["payload"];
                let (Some(repo), Some(commit)) =
                    (payload["repo"].as_str(), payload["commit"].as_str())
                else {
                    return;
                };
                // The run: does the group's tree hold a broken patch?
                let tree = Command::new("git")
                    .arg("--git-dir")
                    .arg(repos.join(repo))
                    .args(["ls-tree", "-r", "--name-only", commit, "--", "broken"])
                    .output()
                    .unwrap();
                let broken = !tree.status.success() || !tree.stdout.is_empty();
                let delay = {
                    let mut ci = ci.lock().unwrap();
                    *ci.runs.entry(repo.to_string()).or_default() += 1;
                    ci.delay
                };
                std::thread::sleep(delay.saturating_sub(received.elapsed()));
                let state = if broken { "failure" } else { "success" };
                let out = Command::new("ssh")
                    .args(&ssh_args)
                    .arg("git@127.0.0.1")
                    .arg(format!(
                        "collab-check set '{repo}' {commit} ci/test --state {state}"
                    ))
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                let mut ci = ci.lock().unwrap();
                if !out.status.success() {
                    eprintln!("ci: set failed: {}", String::from_utf8_lossy(&out.stderr));
                    ci.failed_posts += 1;
                } else if !broken {
                    ci.green.insert(commit.to_string());
                }
            });
        }
    });
    url
}

/// A `patch.merged` the watcher read.
struct Merged {
    at: Instant,
    repo: String,
    /// The merge group's commit (`payload.queue.commit`).
    group: Option<String>,
}

/// Follow `collab-events watch --type patch.merged` (every repository)
/// into `merged`, by patch id; the `ssh` child, to kill at the end.
fn watch_merges(h: &ServerHarness, merged: Arc<Mutex<HashMap<String, Merged>>>) -> Child {
    let mut watcher = Command::new("ssh")
        .args(h.ssh_options(&h.ssh_client_key()))
        .arg("git@127.0.0.1")
        .arg("collab-events watch --type patch.merged")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watcher.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let (Some(patch), Some(repo)) = (v["object_id"].as_str(), v["repo"].as_str()) else {
                continue;
            };
            merged.lock().unwrap().insert(
                patch.to_string(),
                Merged {
                    at: Instant::now(),
                    repo: repo.to_string(),
                    group: v["payload"]["queue"]["commit"].as_str().map(str::to_string),
                },
            );
        }
    });
    watcher
}

/// What one agent did.
#[derive(Default)]
struct AgentLog {
    /// Each claim `lease_next` handed it, and when.
    claims: Vec<(String, Instant)>,
    /// Each patch it queued, its issue, and when it was queued.
    patches: Vec<(String, String, Instant)>,
    /// Replies that were internal errors or no reply at all.
    internal: usize,
    /// Other refusals (each one's error line).
    refusals: Vec<String>,
    failed_pushes: usize,
    /// Pushes run again after a busy answer.
    busy_pushes: usize,
    renewals: usize,
}

/// How an agent treats its claims.
#[derive(Clone, Copy, PartialEq)]
enum Renewing {
    /// Renews every claim it holds (queued ones too) every third of the TTL.
    Always,
    /// Never renews: the queue's tenure has to hold the claim.
    Never,
}

/// A tool result that is an internal error (or no result at all).
fn internal(result: &Option<Value>) -> bool {
    match result {
        None => true,
        Some(r) => r["isError"] == true && r.to_string().contains("internal"),
    }
}

/// One agent's loop over `repo` until `done` or `deadline`.
#[allow(clippy::too_many_arguments)]
fn agent(
    h: &ServerHarness,
    key: &Path,
    clone: &Path,
    repo: &str,
    renewing: Renewing,
    ready: &Barrier,
    done: &AtomicBool,
    deadline: Instant,
) -> AgentLog {
    let mut log = AgentLog::default();
    let mut mcp = McpSession::open(h, key);
    // Claims it holds that it queued, and when it last renewed each.
    let mut held: HashMap<String, Instant> = HashMap::new();
    let git = |args: &[&str]| h.git_as(key, clone, args);
    ready.wait();
    while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
        if renewing == Renewing::Always {
            let due: Vec<String> = held
                .iter()
                .filter(|(_, at)| at.elapsed() >= Duration::from_secs(TTL_SECS / 3))
                .map(|(issue, _)| issue.clone())
                .collect();
            for issue in due {
                let r = mcp.call(
                    "lease_renew",
                    json!({"repo": repo, "issue": issue, "ttl": TTL_SECS}),
                );
                if internal(&r) {
                    log.internal += 1;
                }
                match r {
                    Some(r) if r["isError"] == false => {
                        log.renewals += 1;
                        held.insert(issue, Instant::now());
                    }
                    // Landed (the issue closed with its claim) or evicted.
                    _ => {
                        held.remove(&issue);
                    }
                }
            }
        }
        let r = mcp.call(
            "lease_next",
            json!({"repo": repo, "ttl": TTL_SECS, "wait": NEXT_WAIT_SECS}),
        );
        if internal(&r) {
            log.internal += 1;
            eprintln!("agent: lease_next: {r:?}");
            if r.is_none() {
                break;
            }
            continue;
        }
        let r = r.unwrap();
        let s = &r["structuredContent"];
        if s["status"] == "empty" || s["status"] == "settled" {
            continue;
        }
        if r["isError"] != false {
            log.refusals.push(format!("lease_next: {}", s["error"]));
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let issue = s["issue"].as_str().unwrap_or_default().to_string();
        let token = s["token"].as_i64().unwrap_or(0);
        log.claims.push((issue.clone(), Instant::now()));
        let evicted = s["labels"]
            .as_array()
            .is_some_and(|l| l.iter().any(|l| l == "queue-evicted"));
        let title = s["title"].as_str().unwrap_or_default();
        // The agent's work: a file of its own, under broken/ for a broken
        // issue the first time (the CI fails the group), fixed once the
        // queue sent it back.
        let dir = if title.ends_with("(broken)") && !evicted {
            "broken"
        } else {
            "done"
        };
        let short = &issue[..8];
        let fetched = git(&["fetch", "-q", "origin", "main"]);
        let switched = git(&["switch", "-q", "-C", "work", "FETCH_HEAD"]);
        assert!(
            fetched.status.success() && switched.status.success(),
            "fetch: {fetched:?} {switched:?}"
        );
        std::fs::create_dir_all(clone.join(dir)).unwrap();
        std::fs::write(
            clone.join(dir).join(format!("{short}.txt")),
            format!("{title}\n"),
        )
        .unwrap();
        let committed = git(&["add", "-A"]).status.success()
            && git(&[
                "commit",
                "-q",
                "-m",
                &format!("Do {title}\n\nFixes: {issue}"),
            ])
            .status
            .success();
        assert!(committed, "commit in {}", clone.display());
        let mut pushed = None;
        for _ in 0..5 {
            let out = git(&[
                "push",
                "-o",
                &format!("issue={short}"),
                "-o",
                &format!("collab-lease={issue}:{token}"),
                "origin",
                "HEAD:refs/for/main",
            ]);
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            if !out.status.success() && stderr.contains("busy") {
                log.busy_pushes += 1;
                std::thread::sleep(Duration::from_millis(400));
                continue;
            }
            pushed = Some((out.status.success(), stderr));
            break;
        }
        let patch = match pushed {
            Some((true, stderr)) => stderr
                .lines()
                .find_map(|l| l.split("remote: patch ").nth(1))
                .map(|s| s[..8].to_string()),
            Some((false, stderr)) => {
                eprintln!("agent: push failed: {stderr}");
                None
            }
            None => None,
        };
        let Some(patch) = patch else {
            log.failed_pushes += 1;
            continue;
        };
        let r = mcp.call(
            "patch_merge",
            json!({"repo": repo, "patch": patch, "lease_token": token}),
        );
        if internal(&r) {
            log.internal += 1;
            eprintln!("agent: patch_merge: {r:?}");
            continue;
        }
        let r = r.unwrap();
        if r["isError"] != false {
            log.refusals
                .push(format!("patch_merge: {}", r["structuredContent"]["error"]));
            continue;
        }
        let full = r["structuredContent"]["patch"]
            .as_str()
            .unwrap_or(&patch)
            .to_string();
        log.patches.push((full, issue.clone(), Instant::now()));
        held.insert(issue, Instant::now());
    }
    log
}

/// One measured row.
struct Row {
    label: String,
    issues: usize,
    /// From the agents connected to the last merge read.
    elapsed: Duration,
    out_of_time: bool,
    /// Issues that landed (one merged patch each).
    landed: usize,
    /// Issues with more than one merged patch.
    landed_twice: usize,
    /// Claim (the issue's first hand-out) to its patch's `patch.merged`.
    latencies: Vec<Duration>,
    runs: usize,
    /// Groups that landed.
    groups: usize,
    evictions: usize,
    internal: usize,
    failed_pushes: usize,
    busy_pushes: usize,
    not_green: usize,
    doubles: usize,
    refusals: Vec<String>,
    renewals: usize,
    /// The machine's CPUs busy over the row, 0 to 1.
    cpu_busy: f64,
    /// CPU seconds the server used over the row.
    server_cpu: f64,
    /// The same with the processes it waited for (`git`, hooks).
    server_cpu_with_children: f64,
    /// The queue's rounds: (patches landed, patches waiting one D before).
    rounds: Vec<(usize, usize)>,
}

impl Row {
    fn rate(&self) -> f64 {
        self.landed as f64 * 60.0 / self.elapsed.as_secs_f64().max(0.001)
    }

    fn p(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        percentile(self.latencies.clone(), q)
    }
}

/// What every row needs from the bench.
struct Bench {
    ci: Arc<Mutex<Ci>>,
    url: String,
    secret: String,
    merged: Arc<Mutex<HashMap<String, Merged>>>,
    agents: usize,
    issues: usize,
    limit: Duration,
}

/// Events of `kind` in `repo` so far.
fn events(h: &ServerHarness, repo: &str, kind: &str) -> Vec<Value> {
    h.ssh_exec(&format!(
        "collab-events watch '{repo}' --type '{kind}' --since 1 --no-follow"
    ))
    .stdout
    .lines()
    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    .collect()
}

/// The machine's CPU time so far, in clock ticks: (busy, all), from the
/// first line of /proc/stat.
fn machine_cpu() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let all: u64 = ticks.iter().sum();
    // idle and iowait
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (all - idle, all)
}

/// CPU seconds process `pid` has used (user and system): its own, and
/// with its children it waited for (`cutime`, `cstime`).
fn process_cpu(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // utime, stime, cutime, cstime: fields 14 to 17 of stat, 12 to 15
    // after the name.
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    let own = field(10) + field(11);
    let children = field(12) + field(13);
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (own as f64 / tck, (own + children) as f64 / tck)
}

/// The queue's rounds from when patches were queued and when they landed
/// (`delay`: D): landings within D/2 of the one before are one round; its
/// groups were built about D before its first landing, when the patches
/// queued by then and not landed yet were waiting. (landed, waiting).
fn rounds(queued: &[Instant], landed: &[Instant], delay: Duration) -> Vec<(usize, usize)> {
    let mut landed = landed.to_vec();
    landed.sort();
    let mut out: Vec<(Instant, usize)> = Vec::new();
    for at in &landed {
        match out.last_mut() {
            Some((last, n)) if at.saturating_duration_since(*last) <= delay / 2 => {
                *last = *at;
                *n += 1;
            }
            _ => out.push((*at, 1)),
        }
    }
    let mut first = Vec::new();
    let mut i = 0;
    for (_, n) in &out {
        first.push(landed[i]);
        i += n;
    }
    out.iter()
        .zip(first)
        .map(|((_, n), start)| {
            let built = start.checked_sub(delay).unwrap_or(start);
            let queued_by = queued.iter().filter(|q| **q <= built).count();
            let landed_by = landed.iter().filter(|l| **l < built).count();
            (*n, queued_by.saturating_sub(landed_by))
        })
        .collect()
}

/// Run one row on repository `repo` of `h`, whose agents are `keys`.
fn run_row(
    b: &Bench,
    h: &ServerHarness,
    keys: &[PathBuf],
    repo: &str,
    label: &str,
    train: bool,
    renewing: Renewing,
) -> Row {
    h.create_repo(repo);
    let seed = h.clone_repo(repo, &format!("{repo}-seed"));
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    collab_testkit::write_live(
        &h.repos_dir().join(format!("{repo}.git/collab-policy.toml")),
        format!("merge = {{ {RULE}, train = {train} }}\n"),
    );
    let added = h.ssh_exec_with_stdin(
        &format!(
            "collab-hook add '{repo}' '{}' --event 'merge_group.checks_requested' --secret-stdin",
            b.url
        ),
        b.secret.as_bytes(),
    );
    assert_eq!(added.code, 0, "{added:?}");
    {
        let mut mcp = McpSession::open(h, &h.ssh_client_key());
        for i in 0..b.issues {
            // `BENCH_NO_BROKEN=1`: none broken (the queue's ceiling).
            let broken = std::env::var_os("BENCH_NO_BROKEN").is_none();
            let title = if broken && i % BROKEN_EVERY == BROKEN_AT {
                format!("task {i} (broken)")
            } else {
                format!("task {i}")
            };
            let r = mcp
                .call("issue_open", json!({"repo": repo, "title": title}))
                .expect("issue_open");
            assert_eq!(r["isError"], false, "{r}");
        }
    }
    let clones: Vec<PathBuf> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| h.clone_as(key, repo, &format!("{repo}-agent-{i}")))
        .collect();
    let full = format!("{repo}.git");
    let landed_here = || {
        b.merged
            .lock()
            .unwrap()
            .values()
            .filter(|m| m.repo == full)
            .count()
    };

    let done = AtomicBool::new(false);
    let barrier = Barrier::new(keys.len() + 1);
    let mut start = Instant::now();
    let (mut cpu_start, mut server_start) = ((0, 0), (0.0, 0.0));
    let mut out_of_time = false;
    let (mut cpu_busy, mut server_cpu) = (0.0, (0.0, 0.0));
    let deadline = Instant::now() + b.limit;
    let logs: Vec<AgentLog> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..keys.len())
            .map(|i| {
                let (key, clone, barrier, done) = (&keys[i], &clones[i], &barrier, &done);
                s.spawn(move || agent(h, key, clone, repo, renewing, barrier, done, deadline))
            })
            .collect();
        barrier.wait();
        start = Instant::now();
        (cpu_start, server_start) = (machine_cpu(), process_cpu(h.pid()));
        while landed_here() < b.issues {
            if Instant::now() >= deadline {
                out_of_time = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        done.store(true, Ordering::Relaxed);
        let (busy, all) = machine_cpu();
        cpu_busy = (busy - cpu_start.0) as f64 / (all - cpu_start.1).max(1) as f64;
        let server_end = process_cpu(h.pid());
        server_cpu = (server_end.0 - server_start.0, server_end.1 - server_start.1);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    let merged = b.merged.lock().unwrap();
    let mine: Vec<(&String, &Merged)> = merged.iter().filter(|(_, m)| m.repo == full).collect();
    let elapsed = mine
        .iter()
        .map(|(_, m)| m.at.saturating_duration_since(start))
        .max()
        .unwrap_or_else(|| start.elapsed());
    let mut first_claim: HashMap<&str, Instant> = HashMap::new();
    let mut handed: HashMap<&str, usize> = HashMap::new();
    let mut issue_of: HashMap<&str, &str> = HashMap::new();
    for log in &logs {
        for (issue, at) in &log.claims {
            let first = first_claim.entry(issue).or_insert(*at);
            *first = (*first).min(*at);
            *handed.entry(issue).or_default() += 1;
        }
        for (patch, issue, _) in &log.patches {
            issue_of.insert(patch, issue);
        }
    }
    let mut landings: HashMap<&str, usize> = HashMap::new();
    let mut latencies = Vec::new();
    for (patch, m) in &mine {
        let Some(issue) = issue_of.get(patch.as_str()) else {
            continue;
        };
        *landings.entry(issue).or_default() += 1;
        if let Some(claimed) = first_claim.get(issue) {
            latencies.push(m.at.saturating_duration_since(*claimed));
        }
    }
    let ci = b.ci.lock().unwrap();
    let not_green = mine
        .iter()
        .filter(|(_, m)| m.group.as_ref().is_none_or(|g| !ci.green.contains(g)))
        .count();
    let groups: BTreeSet<&String> = mine.iter().filter_map(|(_, m)| m.group.as_ref()).collect();
    // An issue may be handed out once, and once more per eviction of its
    // patch (then it is ready again); any other hand-out is a double.
    let mut evicted: HashMap<String, usize> = HashMap::new();
    for e in events(h, repo, "lease.evicted") {
        *evicted
            .entry(e["object_id"].as_str().unwrap_or_default().to_string())
            .or_default() += 1;
    }
    let doubles = handed
        .iter()
        .map(|(issue, n)| n.saturating_sub(1 + evicted.get(*issue).copied().unwrap_or(0)))
        .sum();
    Row {
        label: label.to_string(),
        issues: b.issues,
        elapsed,
        out_of_time,
        landed: landings.len(),
        landed_twice: landings.values().filter(|n| **n > 1).count(),
        latencies,
        runs: ci.runs.get(&full).copied().unwrap_or(0),
        groups: groups.len(),
        evictions: evicted.values().sum(),
        internal: logs.iter().map(|l| l.internal).sum(),
        failed_pushes: logs.iter().map(|l| l.failed_pushes).sum(),
        busy_pushes: logs.iter().map(|l| l.busy_pushes).sum(),
        not_green,
        doubles,
        refusals: logs.iter().flat_map(|l| l.refusals.clone()).collect(),
        renewals: logs.iter().map(|l| l.renewals).sum(),
        cpu_busy,
        server_cpu: server_cpu.0,
        server_cpu_with_children: server_cpu.1,
        rounds: rounds(
            &logs
                .iter()
                .flat_map(|l| l.patches.iter().map(|(_, _, at)| *at))
                .collect::<Vec<_>>(),
            &mine.iter().map(|(_, m)| m.at).collect::<Vec<_>>(),
            ci.delay,
        ),
    }
}

/// A server for rows: webhooks to loopback allowed, evicted issues ready
/// at once; `None` for PostgreSQL without a server to use.
fn server(postgres: bool) -> Option<ServerHarness> {
    let options = HarnessOptions {
        env: vec![
            (
                "GIT_COLLAB_WEBHOOKS__ALLOWED_HOSTS".into(),
                "127.0.0.1".into(),
            ),
            ("GIT_COLLAB_LEASES__EVICTION_GRACE".into(), "0".into()),
        ],
        args: vec!["--log-level".into(), "warn".into()],
        ..Default::default()
    };
    if postgres {
        ServerHarness::start_on_postgres(options)
    } else {
        Some(ServerHarness::start_with(options))
    }
}

fn main() {
    let agents = env_usize("BENCH_AGENTS", 64);
    let issues = env_usize("BENCH_ISSUES", 256);
    let delay = Duration::from_millis(env_usize("BENCH_CI_DELAY_MS", 2000) as u64);
    let limit = Duration::from_secs(env_usize("BENCH_ROW_LIMIT_SECS", 600) as u64);
    let raw: [u8; 32] = rand::random();
    let secret = format!("whsec_{}", B64.encode(raw));
    let load_before = support::load_average();

    let wanted: Option<Vec<String>> = std::env::var("BENCH_ROWS")
        .ok()
        .map(|v| v.split(',').map(|r| r.trim().to_string()).collect());
    let runs = |repo: &str| wanted.as_ref().is_none_or(|w| w.iter().any(|r| r == repo));

    let mut rows = Vec::new();
    for postgres in [false, true] {
        let here: &[&str] = if postgres {
            &["pg-train"]
        } else {
            &["off", "on", "never"]
        };
        if !here.iter().any(|r| runs(r)) {
            continue;
        }
        let Some(h) = server(postgres) else {
            eprintln!("PostgreSQL row skipped: GIT_COLLAB_TEST_POSTGRES is not set");
            continue;
        };
        let ci = Arc::new(Mutex::new(Ci {
            delay,
            ..Default::default()
        }));
        let merged: Arc<Mutex<HashMap<String, Merged>>> = Arc::default();
        let mut watcher = watch_merges(&h, merged.clone());
        let b = Bench {
            url: simulated_ci(&h, raw.to_vec(), ci.clone()),
            ci,
            secret: secret.clone(),
            merged,
            agents,
            issues,
            limit,
        };
        let keys: Vec<PathBuf> = (0..b.agents)
            .map(|i| h.authorized_key(&format!("agent-{i}")))
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        if postgres {
            rows.push(run_row(
                &b,
                &h,
                &keys,
                "pg-train",
                "train on, agents renew, PostgreSQL",
                true,
                Renewing::Always,
            ));
            print_row(rows.last().unwrap());
        } else {
            for (repo, label, train, renewing) in [
                ("off", "train off, agents renew", false, Renewing::Always),
                ("on", "train on, agents renew", true, Renewing::Always),
                (
                    "never",
                    "train on, agents never renew",
                    true,
                    Renewing::Never,
                ),
            ] {
                if !runs(repo) {
                    continue;
                }
                rows.push(run_row(&b, &h, &keys, repo, label, train, renewing));
                print_row(rows.last().unwrap());
            }
        }
        let bad = b.ci.lock().unwrap().bad_signatures;
        let failed_posts = b.ci.lock().unwrap().failed_posts;
        let _ = watcher.kill();
        let _ = watcher.wait();
        assert_eq!(bad, 0, "deliveries whose signature did not verify");
        assert_eq!(failed_posts, 0, "the CI's `collab-check set` failed");
    }

    let section = render(&rows, agents, issues, delay, &load_before);
    println!("{section}");
    if std::env::var_os("BENCH_NO_DOCS").is_none() {
        write_section(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/benchmarks.md"),
            &section,
        );
    }
    for r in &rows {
        for refusal in &r.refusals {
            eprintln!("{}: refused: {refusal}", r.label);
        }
        assert!(!r.out_of_time, "{}: out of time", r.label);
        assert_eq!(r.internal, 0, "{}: internal errors", r.label);
        assert_eq!(r.failed_pushes, 0, "{}: failed pushes", r.label);
        assert_eq!(r.not_green, 0, "{}: merges without green", r.label);
        assert_eq!(r.doubles, 0, "{}: double hand-outs", r.label);
        assert_eq!(r.landed_twice, 0, "{}: issues landed twice", r.label);
        assert_eq!(r.landed, r.issues, "{}: issues not landed", r.label);
    }
}

/// A row's rate, its server CPU per landed issue and its rounds, on
/// stderr as it ends.
fn print_row(r: &Row) {
    eprintln!(
        "{}: {:.0} issues/min; server CPU per landed issue {:.1} ms, {:.1} ms with its git \
         and hooks",
        r.label,
        r.rate(),
        r.server_cpu * 1000.0 / r.landed.max(1) as f64,
        r.server_cpu_with_children * 1000.0 / r.landed.max(1) as f64,
    );
    eprintln!(
        "{}: rounds (landed, waiting), ceiling {ROUND_CEILING}: {:?}",
        r.label, r.rounds
    );
}

/// Where the train-on row's time went, from what it measured.
fn why(t: &Row, delay: Duration) -> String {
    // At most `max_batch` x `max_parallel` patches are under test per D,
    // plus each round's own overhead: the queue's ceiling at this D.
    let ceiling = 64.0 * 60.0 / delay.as_secs_f64();
    format!(
        " Why: the CPUs were {:.0} % busy over the train-on row and the server alone used {} of \
         CPU per landed issue; every issue costs two `ssh` logins for `git` (fetch, push), the \
         push with its hooks, four or more MCP calls, its share of the groups built, merged, \
         announced and posted, and the agent's own `git`, all on the same machine as the \
         server. {}",
        t.cpu_busy * 100.0,
        fmt(Duration::from_secs_f64(
            t.server_cpu / t.landed.max(1) as f64
        )),
        if t.cpu_busy >= 0.85 {
            format!(
                "The fleet is bound by CPU here, not by the CI: the train alone could take up \
                 to {ceiling:.0} patches per minute at D = {} s (8 groups of 8 per run).",
                delay.as_secs_f64()
            )
        } else {
            "The CPUs were not saturated: the rest is waiting (the CI's D, the queue's rounds, \
             the agents' `wait`)."
                .to_string()
        }
    )
}

fn render(
    rows: &[Row],
    agents: usize,
    issues: usize,
    delay: Duration,
    load_before: &str,
) -> String {
    let base = rows[0].rate();
    let mut table = String::from(
        "| row | landed | time | issues/min | vs train off | claim→merged p50 | p95 | CI runs | per landed patch | groups thrown away | evictions | renewals | CPUs busy | server CPU per issue | with its git and hooks | internal errors | failed pushes | busy pushes retried | merged not green | double hand-outs |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        table.push_str(&format!(
            "| {}{} | {}/{} | {} | {:.0} | {:.2}× | {} | {} | {} | {:.2} | {} | {} | {} | {:.0} % | {} | {} | {} | {} | {} | {} | {} |\n",
            r.label,
            if r.out_of_time { " (OUT OF TIME)" } else { "" },
            r.landed,
            r.issues,
            fmt(r.elapsed),
            r.rate(),
            r.rate() / base,
            fmt(r.p(0.5)),
            fmt(r.p(0.95)),
            r.runs,
            r.runs as f64 / r.landed.max(1) as f64,
            r.runs.saturating_sub(r.groups),
            r.evictions,
            r.renewals,
            r.cpu_busy * 100.0,
            fmt(Duration::from_secs_f64(r.server_cpu / r.landed.max(1) as f64)),
            fmt(Duration::from_secs_f64(
                r.server_cpu_with_children / r.landed.max(1) as f64
            )),
            r.internal,
            r.failed_pushes,
            r.busy_pushes,
            r.not_green,
            r.doubles,
        ));
    }
    let train = rows.iter().find(|r| r.label == "train on, agents renew");
    let never = rows
        .iter()
        .find(|r| r.label == "train on, agents never renew");
    let verdict = |ok: bool| if ok { "met" } else { "not met" };
    let goals = match train {
        Some(t) => {
            format!(
            "Goals (issue 45), from the train-on row: ≥ 300 issues/min from 64 agents at D = 2 s \
             ({}: {:.0}/min with {agents} agents, D = {} s); claim→merged p50 ≤ 20 s ({}: {}).{}",
            verdict(t.rate() >= 300.0 && agents >= 64),
            t.rate(),
            delay.as_secs_f64(),
            verdict(t.p(0.5) <= Duration::from_secs(20)),
            fmt(t.p(0.5)),
            never
                .map(|n| format!(
                    " Agents that never renew their {TTL_SECS} s claims landed at {:.2}× the \
                     rate of those that do, p50 {} against {}: the queue holds a queued \
                     patch's claim.",
                    n.rate() / t.rate(),
                    fmt(n.p(0.5)),
                    fmt(t.p(0.5)),
                ))
                .unwrap_or_default(),
        ) + &why(t, delay)
        }
        None => String::new(),
    };
    format!(
        "{SECTION}\n\n\
         `cargo bench --bench finish_loop` ({build} build), one run on {date} UTC, {cpu} \
         ({cores} CPUs, 1-minute load {load_before} at the start, shared with other work), \
         loopback, OpenSSH. {agents} agents, each with its own key and one MCP session over \
         `ssh … collab-mcp`, finish {issues} issues per row as a fleet does: `lease_next` \
         (TTL {TTL_SECS} s, `wait` {NEXT_WAIT_SECS} s), a real `git` fetch, commit and `git push \
         -o issue=… -o collab-lease=… HEAD:refs/for/main`, `patch_merge` with the lease's token \
         (the patch joins `main`'s merge queue, which holds the claim from then on), next. \
         `main` requires `ci/test` with `queue = true`, `max_batch = 8`, `max_parallel = 8`. A \
         simulated CI (a real HTTP receiver of the signed `merge_group.checks_requested` \
         webhooks; it verifies the `v1,` HMAC and the timestamp) runs each group for D = {d} s, \
         all at once, then posts `ci/test` on the group's commit over `ssh`: `failure` when the \
         group's tree holds a broken patch. One issue in {BROKEN_EVERY} is broken: its first \
         patch is evicted, the issue is ready again at once (`leases.eviction_grace = 0`) \
         labelled `queue-evicted`, and the agent that takes it next commits the fix. Agents \
         that renew renew each claim they queued every {renew} s; agents that never renew \
         leave the queue to hold it. Each row has its own repository, on the same server \
         (SQLite; the PostgreSQL row on a database of `scripts/ci-postgres.sh`). \"time\" runs \
         from all agents connected to the last `patch.merged` a watcher read; claim→merged is \
         from an issue's first hand-out to its patch's `patch.merged`; \"groups thrown away\" \
         are CI runs whose group did not land (the failed groups, their search, and with the \
         train the groups built on a failed one). \"CPUs busy\" is the whole machine's (other \
         work on it included); \"server CPU per issue\" is the server process's CPU time over \
         the row per landed issue, \"with its git and hooks\" adds the processes it ran and \
         waited for (`git receive-pack`/`upload-pack` and the hooks they ran). The correctness columns are assertions of the bench.\n\n\
         {table}\n\
         {goals}\n\n\
         Reading the table: claim→merged includes the wait in the queue's backlog. With every \
         agent queueing a patch every few seconds, the fleet queues faster than this machine \
         lands, so the p50 follows the backlog (issues over the landing rate), not D. The \
         renewing agents' `lease_renew` calls (each queued claim every {renew} s) are work on a \
         machine bound by CPU, work the agents that never renew do not do. The rows run one \
         after another in one run, with the machine's other load shifting between them: \
         compare the ratios, and expect a few tens of percent of noise between runs.\n",
        build = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        date = chrono::Utc::now().format("%Y-%m-%d %H:%M"),
        cpu = support::cpu_name(),
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        d = delay.as_secs_f64(),
        renew = TTL_SECS / 3,
    )
}
