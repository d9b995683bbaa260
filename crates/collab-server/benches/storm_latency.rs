//! Latency of other users during a clone storm (issue 29, item 2: "lease,
//! issue and SSH login latency for other users stays within 2x of an idle
//! server during a storm").
//!
//! One server per configuration: the pack cache on or off, and `git.nice`
//! 0 (upload-pack at the server's priority) or 10 (the default). A
//! repository of realistic size (`collab_testkit::bench::storm_source`) is
//! cloned over and over by N concurrent clients (the storm, one key) while
//! another key, an agent, times its own calls, each a fresh `ssh` process
//! as an agent's CLI makes them: `collab-whoami` (a login and nothing
//! else), `collab-lease acquire` and `release`, `collab-issue comment`
//! (durable writes). First on the idle server, then during the storm; the
//! ratio is storm over idle, per configuration, in the same run.
//!
//! The storm's clients run at niceness 19: on one 2-core machine they
//! would otherwise take most of the CPU themselves (each `git clone`
//! indexes the whole pack; clients use about six times the server's CPU in
//! a storm, docs/benchmarks.md "Clone storms"), which a real fleet spends
//! on its own machines. The agent's `ssh` runs at normal priority.
//!
//! Writes docs/benchmarks.md "## Latency of other users during a clone
//! storm". Run: `cargo bench --bench storm_latency` (BENCH_MB sizes the
//! repository, default 24; BENCH_STORM the clients, default 32;
//! BENCH_SAMPLES the agent's calls of each kind per phase, default 60;
//! BENCH_WINDOW_SECS how long at least the agent keeps calling during the
//! storm, default 20).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use collab_testkit::bench::{self as support, env_usize, fmt, run_ok, timed, write_section};
use collab_testkit::{HarnessOptions, ServerHarness};

/// What the agent does, in the order it does it each round.
const CALLS: [&str; 4] = [
    "login (`collab-whoami`)",
    "lease acquire",
    "lease release",
    "issue comment",
];

fn server(cache: bool, nice: u64) -> ServerHarness {
    let env = [
        ("GIT_COLLAB_GIT__PACK_CACHE", cache.to_string()),
        ("GIT_COLLAB_GIT__NICE", nice.to_string()),
        ("GIT_COLLAB_GIT__MAX_PROCESSES", "256".into()),
        ("GIT_COLLAB_GIT__MAX_PROCESSES_PER_PRINCIPAL", "256".into()),
        ("GIT_COLLAB_GIT__QUEUE_TIMEOUT", "10m".into()),
        ("GIT_COLLAB_SSH__MAX_STARTUPS_PER_IP", "256".into()),
    ];
    ServerHarness::start_with(HarnessOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        ..Default::default()
    })
}

/// One round of the agent's calls: how long each took, in `CALLS` order.
fn agent_round(h: &ServerHarness, key: &Path, issue: &str) -> [Duration; 4] {
    let ssh = |command: String| {
        let mut cmd = Command::new("ssh");
        cmd.args(h.ssh_options(key))
            .arg("git@127.0.0.1")
            .arg(command)
            .stdin(Stdio::null());
        timed(&mut cmd)
    };
    let target = format!("'work' '{issue}'");
    [
        ssh("collab-whoami".into()),
        ssh(format!("collab-lease acquire {target} --ttl 300")),
        ssh(format!("collab-lease release {target}")),
        ssh(format!(
            "collab-issue comment {target} --body 'still on it'"
        )),
    ]
}

/// At least `samples` rounds, and rounds until `window` has passed: each
/// call's durations.
fn agent_phase(
    h: &ServerHarness,
    key: &Path,
    issue: &str,
    samples: usize,
    window: Duration,
) -> Vec<Vec<Duration>> {
    let mut by_call = vec![Vec::new(); CALLS.len()];
    let start = Instant::now();
    let mut rounds = 0;
    while rounds < samples || start.elapsed() < window {
        for (i, d) in agent_round(h, key, issue).into_iter().enumerate() {
            by_call[i].push(d);
        }
        rounds += 1;
    }
    by_call
}

/// N clients cloning `url` again and again (at niceness 19) until `stop`;
/// the count of finished clones.
fn start_storm(
    h: &ServerHarness,
    url: &str,
    n: usize,
    stop: &Arc<AtomicBool>,
) -> (Vec<std::thread::JoinHandle<()>>, Arc<AtomicUsize>) {
    let done = Arc::new(AtomicUsize::new(0));
    let threads = (0..n)
        .map(|i| {
            let dest = h.temp_dir().join(format!("storm-{i}"));
            let mut cmd = h.client_command("nice", &h.ssh_client_key(), h.temp_dir());
            cmd.args(["-n", "19", "git", "clone", "-q", "--no-checkout", url])
                .arg(&dest)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let (stop, done) = (stop.clone(), done.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let ok = cmd.status().map(|s| s.success()).unwrap_or(false);
                    let _ = std::fs::remove_dir_all(&dest);
                    if ok {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    (threads, done)
}

struct Row {
    config: String,
    call: &'static str,
    idle: Vec<Duration>,
    storm: Vec<Duration>,
}

fn main() {
    let mb = env_usize("BENCH_MB", 24);
    let clients = env_usize("BENCH_STORM", 32);
    let samples = env_usize("BENCH_SAMPLES", 60);
    let window = Duration::from_secs(env_usize("BENCH_WINDOW_SECS", 20) as u64);
    let load = support::load_average();

    let mut rows = Vec::new();
    let mut storms = Vec::new();
    for (cache, nice) in [(false, 0), (false, 10), (true, 0), (true, 10)] {
        let config = format!(
            "cache {}, `git.nice = {nice}`",
            if cache { "on" } else { "off" }
        );
        eprintln!("{config}");
        let h = server(cache, nice);
        h.create_repo("fleet");
        h.create_repo("work");
        let src = support::storm_source(&h, mb);
        let url = h.repo_url("fleet");
        run_ok(
            h.git_command(&h.ssh_client_key(), &src)
                .args(["push", "-q", &url, "main:main"]),
        );
        let issue = h.open_server_issue("work", "Agent task");
        let agent = h.authorized_key("agent");
        // Warm up both (first connection, page cache, the cache's entry).
        agent_phase(&h, &agent, &issue, 2, Duration::ZERO);
        let idle = agent_phase(&h, &agent, &issue, samples, Duration::ZERO);

        let stop = Arc::new(AtomicBool::new(false));
        let (threads, done) = start_storm(&h, &url, clients, &stop);
        // Let every client get going before the agent starts timing.
        std::thread::sleep(Duration::from_secs(2));
        let start = Instant::now();
        let during = agent_phase(&h, &agent, &issue, samples, window);
        let window = start.elapsed();
        let clones = done.load(Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        storms.push((config.clone(), clones, window));
        for (i, call) in CALLS.iter().enumerate() {
            rows.push(Row {
                config: config.clone(),
                call,
                idle: idle[i].clone(),
                storm: during[i].clone(),
            });
        }
    }

    let mut md = String::from("## Latency of other users during a clone storm\n\n");
    md.push_str(&format!(
        "`cargo bench --bench storm_latency` (release build), {}, 2 CPUs, git {}, load average {load} at start. \
         One repository of 3000 commits plus {mb} MiB of text and random binary; {clients} clients clone it \
         (`git clone --no-checkout` over SSH, one key) again and again, at niceness 19 so that their own \
         indexing stands for machines of their own; meanwhile another key (an agent) makes rounds \
         of calls for at least {secs} s ({samples} rounds at least), each call a fresh `ssh` process: a \
         login (`collab-whoami`), `collab-lease acquire` and `release`, `collab-issue comment`. \
         {samples} rounds on the idle server first. \"vs idle\" is the storm's over the idle phase of \
         the same server. One server per row \
         group: pack cache on or off, `git.nice` 0 (upload-pack and pack-objects at the server's priority) or \
         10 (the default).\n\n",
        support::cpu_name(),
        git_version(),
        secs = window.as_secs(),
    ));
    md.push_str("| configuration | call | idle p50 | storm p50 | p50 vs idle | idle p95 | storm p95 | p95 vs idle | storm max |\n");
    md.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in &rows {
        let (i50, s50) = (
            support::percentile(r.idle.clone(), 0.5),
            support::percentile(r.storm.clone(), 0.5),
        );
        let (i95, s95) = (
            support::percentile(r.idle.clone(), 0.95),
            support::percentile(r.storm.clone(), 0.95),
        );
        md.push_str(&format!(
            "| {} | {} | {} | {} | {:.2}x | {} | {} | {:.2}x | {} |\n",
            r.config,
            r.call,
            fmt(i50),
            fmt(s50),
            s50.as_secs_f64() / i50.as_secs_f64(),
            fmt(i95),
            fmt(s95),
            s95.as_secs_f64() / i95.as_secs_f64(),
            fmt(support::percentile(r.storm.clone(), 1.0)),
        ));
    }
    md.push_str("\nClones finished while the agent was timing (the storm's own progress):\n\n");
    md.push_str("| configuration | clones | window | clones/s |\n|---|---:|---:|---:|\n");
    for (config, clones, window) in &storms {
        md.push_str(&format!(
            "| {config} | {clones} | {} | {:.2} |\n",
            fmt(*window),
            *clones as f64 / window.as_secs_f64()
        ));
    }
    print!("{md}");
    write_section(
        &collab_testkit::workspace_root().join("docs/benchmarks.md"),
        &md,
    );
}

fn git_version() -> String {
    Command::new("git")
        .arg("--version")
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .trim_start_matches("git version ")
                .to_string()
        })
        .unwrap_or_else(|| "unknown".into())
}
