//! The merge queue against serial merging (issue 27, "Measure"): 32
//! patches queued at once against one branch, one of them broken, and a
//! simulated CI. Serial is the same queue with `max_batch = 1`: one patch
//! at a time, each tested on the base its predecessor moved. The queue
//! batches (`max_batch = 32`) and finds the breaker either by bisection
//! (`max_parallel = 1`, one group at a time) or by rounds of exclusion
//! groups tested at once (`max_parallel = 8`, the default).
//!
//! The simulated CI is a real HTTP receiver subscribed to
//! `merge_group.checks_requested` webhooks: for each group, concurrently
//! (a thread per delivery, as a CI with free runners), it waits a fixed
//! delay (its "run") and posts `ci/test` on the group's commit over `ssh`:
//! `failure` when the group holds the broken patch, else `success`.
//! Measured per mode: the CI runs, the time to drain the queue (from the
//! queue being switched on to every patch merged or dropped), which
//! patches were evicted, merges whose group was not green (must be 0), and
//! the latency from a green `set` returning to a watcher (connected
//! before) reading the group's `merge_group.merged`.
//!
//! Run: `cargo bench --bench merge_queue`. `BENCH_PATCHES` (default 32),
//! `BENCH_CI_DELAY_MS` (default 500). Writes docs/benchmarks.md under
//! "## Merge queue". With `BENCH_TRAIN=1` it measures the merge train
//! instead (one group at a time against `train = true`, groups of
//! `max_batch = 4`, `BENCH_TRAIN_CI_MS` runs, default 2000) and writes
//! "## Merge train".

use collab_testkit::bench as support;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{BufRead as _, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use collab_testkit::{HarnessOptions, ServerHarness};
use support::{env_usize, fmt, write_section};

const SECTION: &str = "## Merge queue";

fn git(h: &ServerHarness, key: &Path, dir: &Path, args: &[&str]) -> String {
    let out = h.git_command(key, dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// What the simulated CI shares with the bench.
#[derive(Default)]
struct Ci {
    /// Full ids of the broken patches.
    bad: HashSet<String>,
    /// Commits it posted `success` on, and when the `set` returned.
    green: HashMap<String, Instant>,
    /// Groups it ran, per repository.
    runs: HashMap<String, usize>,
    /// How long one run takes now.
    delay: Duration,
}

/// The simulated CI (see the module doc); its webhook URL.
fn simulated_ci(h: &ServerHarness, ci: Arc<Mutex<Ci>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/ci", listener.local_addr().unwrap());
    let ssh_args = h.ssh_options(&h.ssh_client_key());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (ssh_args, ci) = (ssh_args.clone(), ci.clone());
            std::thread::spawn(move || {
                let Some((_, body)) = support::take_http_request(stream) else {
                    return;
                };
                let Ok(event) = serde_json::from_slice::<serde_json::Value>(&body) else {
                    return;
                };
                let payload = &event["data"]["payload"];
                let (Some(repo), Some(commit)) =
                    (payload["repo"].as_str(), payload["commit"].as_str())
                else {
                    return;
                };
                let (broken, delay) = {
                    let mut ci = ci.lock().unwrap();
                    *ci.runs.entry(repo.to_string()).or_default() += 1;
                    let broken = payload["patches"].as_array().is_some_and(|ps| {
                        ps.iter()
                            .any(|p| p["patch"].as_str().is_some_and(|id| ci.bad.contains(id)))
                    });
                    (broken, ci.delay)
                };
                std::thread::sleep(delay);
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
                assert!(out.status.success(), "{out:?}");
                if !broken {
                    ci.lock()
                        .unwrap()
                        .green
                        .insert(commit.to_string(), Instant::now());
                }
            });
        }
    });
    url
}

fn events(h: &ServerHarness, repo: &str, kind: &str) -> Vec<serde_json::Value> {
    h.ssh_exec(&format!(
        "collab-events watch '{repo}' --since 1 --no-follow"
    ))
    .stdout
    .lines()
    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    .filter(|v| v["type"] == kind)
    .collect()
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

/// One measured mode.
struct Row {
    /// The mode, also the repository's name.
    mode: String,
    label: String,
    /// One CI run.
    delay: Duration,
    runs: usize,
    drain: Duration,
    evicted: usize,
    evicted_right: bool,
    merged: usize,
    not_green: usize,
    latencies: Vec<Duration>,
}

/// Run one mode in a repository of its own.
#[allow(clippy::too_many_arguments)]
fn run_mode(
    h: &ServerHarness,
    ci: &Arc<Mutex<Ci>>,
    url: &str,
    merged_at: &Arc<Mutex<HashMap<String, Instant>>>,
    repo: &str,
    label: &str,
    n: usize,
    rule: &str,
    broken: Option<usize>,
    delay: Duration,
) -> Row {
    ci.lock().unwrap().delay = delay;
    h.create_repo(repo);
    let seed = h.clone_repo(repo, &format!("{repo}-seed"));
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    let policy = h.repos_dir().join(format!("{repo}.git/collab-policy.toml"));
    // Queued as plain merges first (no check is ever posted on a head), so
    // the queue takes all of them at once when it is switched on.
    std::fs::write(&policy, "merge = { required_checks = [\"ci/test\"] }\n").unwrap();
    let added = h.ssh_exec(&format!(
        "collab-hook add '{repo}' '{url}' --event 'merge_group.checks_requested'"
    ));
    assert_eq!(added.code, 0, "{added:?}");
    let key = h.ssh_client_key();
    let dir = h.clone_as(&key, repo, &format!("{repo}-agent"));
    let mut ids = Vec::new();
    for i in 0..n {
        git(
            h,
            &key,
            &dir,
            &["switch", "-q", "-C", &format!("p{i}"), "origin/main"],
        );
        std::fs::write(dir.join(format!("p{i}.txt")), format!("{i}\n")).unwrap();
        git(h, &key, &dir, &["add", "-A"]);
        git(h, &key, &dir, &["commit", "-q", "-m", &format!("Add p{i}")]);
        let out = git(h, &key, &dir, &["push", "origin", "HEAD:refs/for/main"]);
        let short = out
            .lines()
            .find_map(|l| l.split("remote: patch ").nth(1))
            .map(|s| s[..8].to_string())
            .expect("a patch line");
        let out = h.ssh_exec(&format!("collab-patch merge '{repo}' {short} --when-green"));
        assert_eq!(out.code, 0, "{out:?}");
        ids.push(out.json()["patch"].as_str().unwrap().to_string());
    }
    let bad = broken.map(|i| ids[i].clone());
    if let Some(b) = &bad {
        ci.lock().unwrap().bad.insert(b.clone());
    }
    let start = Instant::now();
    std::fs::write(
        &policy,
        format!("merge = {{ required_checks = [\"ci/test\"], queue = true, {rule} }}\n"),
    )
    .unwrap();
    let deadline = start + Duration::from_secs(1800);
    let drain = loop {
        let done =
            events(h, repo, "patch.merged").len() + events(h, repo, "patch.merge_dequeued").len();
        if done >= n {
            break start.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{label}: the queue did not drain"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let merged = events(h, repo, "patch.merged");
    let dropped: BTreeSet<String> = events(h, repo, "patch.merge_dequeued")
        .iter()
        .map(|e| e["object_id"].as_str().unwrap().to_string())
        .collect();
    let ci = ci.lock().unwrap();
    let not_green = merged
        .iter()
        .filter(|e| {
            e["payload"]["queue"]["commit"]
                .as_str()
                .is_none_or(|c| !ci.green.contains_key(c))
        })
        .count();
    let groups: BTreeSet<String> = merged
        .iter()
        .filter_map(|e| e["payload"]["queue"]["commit"].as_str().map(str::to_string))
        .collect();
    // Wait for the watcher to have read every group's merge.
    let seen = Instant::now() + Duration::from_secs(10);
    while groups
        .iter()
        .any(|g| !merged_at.lock().unwrap().contains_key(g))
        && Instant::now() < seen
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let latencies = groups
        .iter()
        .filter_map(|g| {
            let merged = *merged_at.lock().unwrap().get(g)?;
            Some(merged.saturating_duration_since(*ci.green.get(g)?))
        })
        .collect();
    Row {
        mode: repo.to_string(),
        label: label.to_string(),
        delay,
        runs: ci.runs.get(&format!("{repo}.git")).copied().unwrap_or(0),
        drain,
        evicted: dropped.len(),
        evicted_right: match &bad {
            Some(b) => dropped.len() == 1 && dropped.contains(b),
            None => dropped.is_empty(),
        },
        merged: merged.len(),
        not_green,
        latencies,
    }
}

fn main() {
    let n = env_usize("BENCH_PATCHES", 32);
    let delay = Duration::from_millis(env_usize("BENCH_CI_DELAY_MS", 500) as u64);
    // A longer CI run, closer to a real one, for the queue's modes (0: none).
    let long = Duration::from_millis(env_usize("BENCH_CI_LONG_MS", 5000) as u64);
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![(
            "GIT_COLLAB_WEBHOOKS__ALLOWED_HOSTS".into(),
            "127.0.0.1".into(),
        )],
        ..Default::default()
    });
    let ci: Arc<Mutex<Ci>> = Arc::default();
    let url = simulated_ci(&h, ci.clone());

    // The watcher of landed groups, connected before anything is queued.
    let key = h.ssh_client_key();
    let mut watcher = Command::new("ssh")
        .args(h.ssh_options(&key))
        .arg("git@127.0.0.1")
        .arg("collab-events watch --type merge_group.merged")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let merged_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let watched = merged_at.clone();
    {
        let (stdout, merged_at) = (watcher.stdout.take().unwrap(), merged_at.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                if let Some(commit) = v["payload"]["commit"].as_str() {
                    merged_at
                        .lock()
                        .unwrap()
                        .insert(commit.to_string(), Instant::now());
                }
            }
        });
    }
    std::thread::sleep(Duration::from_millis(500));
    if std::env::var_os("BENCH_TRAIN").is_some() {
        let d = Duration::from_millis(env_usize("BENCH_TRAIN_CI_MS", 2000) as u64);
        let section = train_section(&h, &ci, &url, &watched, n, d);
        println!("{section}");
        write_section(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/benchmarks.md"),
            &section,
        );
        let _ = watcher.kill();
        let _ = watcher.wait();
        return;
    }

    let broken = Some(n / 3);
    let rows = [
        run_mode(
            &h,
            &ci,
            &url,
            &merged_at,
            "serial",
            "serial (`max_batch = 1`), one broken patch",
            n,
            "max_batch = 1",
            broken,
            delay,
        ),
        run_mode(
            &h,
            &ci,
            &url,
            &merged_at,
            "bisect",
            &format!("queue, bisection (`max_batch = {n}`, `max_parallel = 1`), one broken patch"),
            n,
            &format!("max_batch = {n}, max_parallel = 1"),
            broken,
            delay,
        ),
        run_mode(
            &h,
            &ci,
            &url,
            &merged_at,
            "queue",
            &format!(
                "queue, exclusion rounds (`max_batch = {n}`, `max_parallel = 8`), one broken patch"
            ),
            n,
            &format!("max_batch = {n}, max_parallel = 8"),
            broken,
            delay,
        ),
        run_mode(
            &h,
            &ci,
            &url,
            &merged_at,
            "speculate",
            "queue, speculative rounds (`max_parallel = 8`, `speculate = true`), one broken patch",
            n,
            &format!("max_batch = {n}, max_parallel = 8, speculate = true"),
            broken,
            delay,
        ),
        run_mode(
            &h,
            &ci,
            &url,
            &merged_at,
            "green",
            &format!("queue (`max_batch = {n}`), none broken"),
            n,
            &format!("max_batch = {n}"),
            None,
            delay,
        ),
    ];
    let mut rows = Vec::from(rows);
    if !long.is_zero() {
        let s = long.as_secs_f64();
        rows.push(run_mode(
            &h,
            &ci,
            &url,
            &merged_at,
            "bisect-long",
            &format!("queue, bisection (`max_parallel = 1`), one broken patch, {s} s runs"),
            n,
            &format!("max_batch = {n}, max_parallel = 1"),
            broken,
            long,
        ));
        rows.push(run_mode(
            &h,
            &ci,
            &url,
            &merged_at,
            "queue-long",
            &format!("queue, exclusion rounds (`max_parallel = 8`), one broken patch, {s} s runs"),
            n,
            &format!("max_batch = {n}, max_parallel = 8"),
            broken,
            long,
        ));
        rows.push(run_mode(
            &h,
            &ci,
            &url,
            &merged_at,
            "speculate-long",
            &format!(
                "queue, speculative rounds (`speculate = true`), one broken patch, {s} s runs"
            ),
            n,
            &format!("max_batch = {n}, max_parallel = 8, speculate = true"),
            broken,
            long,
        ));
        rows.push(run_mode(
            &h,
            &ci,
            &url,
            &merged_at,
            "speculate-green-long",
            &format!("queue, speculative rounds, none broken, {s} s runs"),
            n,
            &format!("max_batch = {n}, max_parallel = 8, speculate = true"),
            None,
            long,
        ));
        rows.push(run_mode(
            &h,
            &ci,
            &url,
            &merged_at,
            "green-long",
            &format!("queue, none broken, {s} s runs"),
            n,
            &format!("max_batch = {n}"),
            None,
            long,
        ));
    }
    let _ = watcher.kill();
    let _ = watcher.wait();

    let runs_time = |r: &Row| r.drain.as_secs_f64() / r.delay.as_secs_f64();
    let serial = runs_time(&rows[0]);
    let mut table = String::from(
        "| mode | CI runs | drain time | in CI runs' time | vs serial | evicted | merged | merged not green | merge after green p50 | p99 |\n\
         |---|---:|---:|---:|---:|---|---:|---:|---:|---:|\n",
    );
    for r in &rows {
        table.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.2}x | {}{} | {} | {} | {} | {} |\n",
            r.label,
            r.runs,
            fmt(r.drain),
            runs_time(r),
            runs_time(r) / serial,
            r.evicted,
            match (r.evicted_right, r.evicted) {
                (true, 0) => "",
                (true, _) => " (the broken one)",
                (false, _) => " (WRONG)",
            },
            r.merged,
            r.not_green,
            fmt(percentile(r.latencies.clone(), 0.5)),
            fmt(percentile(r.latencies.clone(), 0.99)),
        ));
    }
    // The goal, met or not, from the exclusion rounds' rows (3 rounds)
    // and the speculative ones (2 rounds).
    let verdict = |r: &Row, rounds: f64| {
        let t = runs_time(r);
        let overhead = (r.drain.as_secs_f64() - rounds * r.delay.as_secs_f64()) / rounds;
        format!(
            "{t:.1} runs' time with {} s runs ({}: about {overhead:.2} s of overhead per round, \
             the queue's and the simulated CI's `ssh` post, on top of {rounds} rounds of runs)",
            r.delay.as_secs_f64(),
            if t <= 3.0 { "goal met" } else { "goal not met" },
        )
    };
    let row = |mode: &str| rows.iter().find(|r| r.mode == mode);
    let result = format!(
        "Result: exclusion rounds drained the queue with one broken patch in {}{}; speculative \
         rounds in {}{}; {}. Exclusion rounds take 3 rounds one after another, so their drain \
         is 3 runs plus 3 rounds' overhead and meets the goal strictly only when runs are long \
         against the overhead; speculative rounds take 2 (the batch and its round together, \
         then the chunk), for 8 more CI runs per batch, thrown away when the batch passes.",
        row("queue").map(|r| verdict(r, 3.0)).unwrap_or_default(),
        row("queue-long")
            .map(|r| format!(" and in {}", verdict(r, 3.0)))
            .unwrap_or_default(),
        row("speculate")
            .map(|r| verdict(r, 2.0))
            .unwrap_or_default(),
        row("speculate-long")
            .map(|r| format!(" and in {}", verdict(r, 2.0)))
            .unwrap_or_default(),
        if rows.iter().all(|r| r.evicted_right && r.not_green == 0) {
            "in every row exactly the broken patch was evicted and no merge was of a group not green"
        } else {
            "SOME ROW EVICTED THE WRONG PATCHES OR MERGED A GROUP NOT GREEN (see the table)"
        },
    );
    let section = format!(
        "{SECTION}\n\n\
         `cargo bench --bench merge_queue` ({build} build), one run on {date}, {cores} CPUs shared \
         with other work, loopback, SQLite. {n} patches (one new file each, off `main`) queued at \
         once against `main`, whose merge rule requires `ci/test` with `queue = true`. A simulated \
         CI (a real HTTP receiver of `merge_group.checks_requested` webhooks) runs each merge group \
         for {delay_ms} ms, all groups announced at once concurrently, then posts `ci/test` on the group's commit over `ssh`: `failure` when \
         the group holds the broken patch (patch {broken_at} of {n}), else `success`. Serial is \
         the queue with `max_batch = 1`: one patch at a time, each tested on the base its \
         predecessor moved. Drain time runs from the queue being switched on to every patch \
         merged or dropped; \"in CI runs' time\" is it divided by one run's time, and \
         \"vs serial\" compares that with serial's. The last rows run the queue's modes again \
         with {long_s} s runs, closer to a real CI, where the queue's own overhead weighs less. \
         \"merge after green\" is from the green `set` returning to a watcher connected before \
         reading the group's `merge_group.merged`.\n\n\
         {table}\n\
         Goals (issue 27): the queue drains in at most 3 CI runs' time where serial takes {n}; \
         exactly the broken patch evicted; no merge whose required check is not green; merge \
         latency after the last green check p99 < 1 s. Without a broken patch the whole queue is \
         one group and one CI run. With one, bisection runs one group at a time (about \
         1 + 2·log2(batch) runs one after another); exclusion rounds (docs/checks.md, \
         \"Finding the patch that broke a group\") test up to `max_parallel` groups at once: \
         3 rounds for {n} patches and 8 at once (1 + 8 + 4 runs); with `speculate = true` the \
         batch's round is built beside the batch: 2 rounds (1 + 8, then 4 runs). Each round costs one CI run \
         plus the queue's own overhead (the driver's look, building the groups, the webhook, \
         the landing), which the \"none broken\" row shows for one round.\n\n\
         {result}\n",
        date = chrono::Utc::now().format("%Y-%m-%d"),
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        delay_ms = delay.as_millis(),
        long_s = long.as_secs_f64(),
        broken_at = n / 3 + 1,
        build = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    );
    println!("{section}");
    write_section(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/benchmarks.md"),
        &section,
    );
}

/// The merge train against one group at a time (issue 45): the same queue
/// of `n` patches, one broken, groups of 4, CI runs of `delay`.
fn train_section(
    h: &ServerHarness,
    ci: &Arc<Mutex<Ci>>,
    url: &str,
    merged_at: &Arc<Mutex<HashMap<String, Instant>>>,
    n: usize,
    delay: Duration,
) -> String {
    let broken = Some(n / 3);
    let rows = [
        run_mode(
            h,
            ci,
            url,
            merged_at,
            "one-at-a-time",
            "one group at a time (`max_batch = 4`, `max_parallel = 8`)",
            n,
            "max_batch = 4, max_parallel = 8",
            broken,
            delay,
        ),
        run_mode(
            h,
            ci,
            url,
            merged_at,
            "train",
            "merge train (`max_batch = 4`, `max_parallel = 8`, `train = true`)",
            n,
            "max_batch = 4, max_parallel = 8, train = true",
            broken,
            delay,
        ),
    ];
    let mut table = String::from(
        "| mode | CI runs | drain time | in CI runs' time | patches per minute | evicted | merged | merged not green |\n\
         |---|---:|---:|---:|---:|---|---:|---:|\n",
    );
    for r in &rows {
        table.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.0} | {}{} | {} | {} |\n",
            r.label,
            r.runs,
            fmt(r.drain),
            r.drain.as_secs_f64() / delay.as_secs_f64(),
            r.merged as f64 * 60.0 / r.drain.as_secs_f64(),
            r.evicted,
            if r.evicted_right {
                " (the broken one)"
            } else {
                " (WRONG)"
            },
            r.merged,
            r.not_green,
        ));
    }
    format!(
        "## Merge train\n\n\
         `cargo bench --bench merge_queue` with `BENCH_TRAIN=1` ({build} build), one run on {date}, \
         {cores} CPUs shared with other work, loopback, SQLite. The same simulated CI as \
         [the merge queue's](#merge-queue), {d} s per run, all groups run at once; {n} patches \
         queued at once, patch {broken_at} broken; groups of `max_batch = 4`. One group at a time \
         tests a batch, lands it, builds the next; the train (docs/checks.md, \"The merge \
         train\") keeps up to 8 groups under test, each on the one before, throws away those \
         after the failed group and rebuilds them after the search.\n\n\
         {table}\n\
         Result: the train drained the queue {ratio:.1}x faster than one group at a time, for \
         {extra} more CI runs (the groups thrown away after the failed one). With one broken \
         patch the train takes three rounds of CI one after another (the train, the search's \
         round, the train rebuilt) where one group at a time takes one per group; each of the \
         train's rounds carries more of the queue's own overhead (every group of it built, \
         announced, posted over `ssh` and landed one by one, on the same 2 CPUs), so the gain \
         grows with the length of a CI run.\n",
        build = if cfg!(debug_assertions) { "debug" } else { "release" },
        date = chrono::Utc::now().format("%Y-%m-%d"),
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        d = delay.as_secs_f64(),
        broken_at = n / 3 + 1,
        ratio = rows[0].drain.as_secs_f64() / rows[1].drain.as_secs_f64(),
        extra = rows[1].runs as i64 - rows[0].runs as i64,
    )
}
