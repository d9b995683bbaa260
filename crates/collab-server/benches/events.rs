//! Events out (issue 15), three measurements in one run:
//!
//! 1. What the event rows cost the lease writer: durable lease acquires per
//!    second with their `lease.acquired` row against the same acquires on a
//!    database where a trigger drops the row (the `seq` counter is still
//!    bumped, so "without" still pays that one-row update), sequentially
//!    (one transaction per acquire) and through the group-commit writer
//!    with 8 concurrent callers. In process, on the target dir's disk.
//! 2. Fan-out: a real server, 32 `ssh … collab-events watch` processes, and
//!    a writer commenting on an issue over a shared SSH connection; for
//!    every comment, when each watcher's line arrived, from the moment the
//!    writer's command started and from the moment its (durable) reply
//!    arrived. The writer's own round trip is the baseline.
//! 3. Webhook deliveries per second: one subscription to an HTTP receiver
//!    on loopback (in this process), a push of `BENCH_HOOK_EVENTS` tags
//!    (default 1000: as many `ref.updated` events in one transaction), time
//!    until the receiver has them all; against the same number of POSTs of
//!    the same body sent back to back by one HTTP client in this process.
//!
//! Run: `cargo bench --bench events` (release build). `EVENTS_BENCH_SECS`
//! (default 8) seconds per lease scenario, `BENCH_FANOUT_RUNS` (default 50)
//! comments. Writes docs/benchmarks.md under "## Events".
use collab_testkit::bench as support;

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use collab_store::leases;
use collab_store::writer::Writer;
use collab_testkit::{HarnessOptions, ServerHarness};
use support::{env_usize, write_section};

const SECTION: &str = "## Events";
const TTL: Option<i64> = Some(3600);
const ROUNDS: u32 = 8;
const WATCHERS: usize = 32;
/// Hang guard (not a measurement).
const WAIT_LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------- 1. leases

struct LeaseScenario {
    name: &'static str,
    events: bool,
    callers: usize,
    db: PathBuf,
    ops: u64,
    elapsed: Duration,
}

impl LeaseScenario {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

/// A migrated database; without events, a trigger drops every event row.
fn prepare(path: &Path, events: bool) {
    let conn = leases::open(path).unwrap();
    if !events {
        conn.execute_batch(
            "CREATE TRIGGER bench_no_event_rows BEFORE INSERT ON events
             BEGIN SELECT RAISE(IGNORE); END;",
        )
        .unwrap();
    }
}

fn issue_id(caller: usize, n: u64) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{caller}/{n}"));
    hex::encode(&digest[..20])
}

fn sequential(s: &mut LeaseScenario, slice: Duration) {
    let conn = leases::open(&s.db).unwrap();
    let now = chrono::Utc::now().timestamp();
    let start = Instant::now();
    while start.elapsed() < slice {
        let issue = issue_id(0, s.ops);
        let outcome = leases::acquire(&conn, "bench/raw", &issue, "bench", TTL, now).unwrap();
        assert!(matches!(outcome, leases::Acquire::Acquired { .. }));
        s.ops += 1;
    }
    s.elapsed += start.elapsed();
}

async fn through_service(s: &mut LeaseScenario, slice: Duration) {
    let service = Writer::open(&s.db).unwrap();
    let first = s.ops;
    let start = Instant::now();
    let tasks: Vec<_> = (0..s.callers)
        .map(|caller| {
            let service = service.clone();
            tokio::spawn(async move {
                let holder = format!("caller-{caller}");
                let mut n = 0u64;
                while start.elapsed() < slice {
                    let issue = issue_id(caller, first + n);
                    let outcome = service
                        .acquire("bench/service", &issue, &holder, TTL)
                        .await
                        .unwrap();
                    assert!(matches!(outcome, leases::Acquire::Acquired { .. }));
                    n += 1;
                }
                n
            })
        })
        .collect();
    for task in tasks {
        s.ops += task.await.unwrap();
    }
    s.elapsed += start.elapsed();
}

fn event_rows(path: &Path) -> i64 {
    let conn = leases::open(path).unwrap();
    conn.query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
        .unwrap()
}

fn lease_table(secs: u64) -> String {
    let slice = Duration::from_secs(secs) / ROUNDS;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut scenarios: Vec<LeaseScenario> = [
        ("one transaction per acquire, sequential", 1, true),
        ("one transaction per acquire, sequential", 1, false),
        ("group-commit writer, 8 concurrent callers", 8, true),
        ("group-commit writer, 8 concurrent callers", 8, false),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (name, callers, events))| {
        let db = dir.path().join(format!("{i}.db"));
        prepare(&db, events);
        LeaseScenario {
            name,
            events,
            callers: if i < 2 { 0 } else { callers },
            db,
            ops: 0,
            elapsed: Duration::ZERO,
        }
    })
    .collect();
    for round in 0..ROUNDS as usize {
        let count = scenarios.len();
        for turn in 0..count {
            let s = &mut scenarios[(round + turn) % count];
            if s.callers == 0 {
                sequential(s, slice);
            } else {
                runtime.block_on(through_service(s, slice));
            }
        }
    }
    let mut out = String::from(
        "| lease acquires | event rows | acquires | ops/s | with / without |\n|---|---|---:|---:|---:|\n",
    );
    for pair in scenarios.chunks(2) {
        let (with, without) = (&pair[0], &pair[1]);
        assert_eq!(event_rows(&with.db) as u64, with.ops);
        assert_eq!(event_rows(&without.db), 0);
        for s in pair {
            out.push_str(&format!(
                "| {} | {} | {} | {:.0} | {} |\n",
                s.name,
                if s.events {
                    "written"
                } else {
                    "dropped by a trigger"
                },
                s.ops,
                s.ops_per_sec(),
                if s.events {
                    format!("{:.2}x", with.ops_per_sec() / without.ops_per_sec())
                } else {
                    "1.00x".into()
                },
            ));
        }
    }
    out
}

// ---------------------------------------------------------------- 2. fan-out

struct Watcher {
    child: Child,
}

fn ssh(h: &ServerHarness, key: &Path, extra: &[String], remote: &str) -> Command {
    let mut cmd = Command::new("ssh");
    cmd.args(h.ssh_options(key))
        .args(extra)
        .arg("git@127.0.0.1")
        .arg(remote);
    cmd
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn fanout_table(runs: usize) -> String {
    let h = ServerHarness::start();
    let key = h.ssh_client_key();
    h.create_repo("r");
    let id = h.open_server_issue("r", "fan-out");
    // seq -> arrival instants, one per watcher.
    let arrivals: Arc<Mutex<HashMap<i64, Vec<Instant>>>> = Arc::default();
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let mut child = ssh(
            &h,
            &key,
            &[],
            "collab-events watch 'r' --type 'issue.commented'",
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        let stdout = child.stdout.take().unwrap();
        let arrivals = arrivals.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let at = Instant::now();
                let v: serde_json::Value = match serde_json::from_str(&line) {
                    Ok(v) => v,
                    Err(_) => continue,
                };
                if let Some(seq) = v["seq"].as_i64() {
                    if v["type"] == "issue.commented" {
                        arrivals.lock().unwrap().entry(seq).or_default().push(at);
                    }
                }
            }
        });
        watchers.push(Watcher { child });
        // Do not hit the unauthenticated-connection limit all at once.
        std::thread::sleep(Duration::from_millis(100));
    }
    let control = h.temp_dir().join("cm-%C");
    let shared = vec![
        "-o".to_string(),
        "ControlMaster=auto".to_string(),
        "-o".to_string(),
        format!("ControlPath={}", control.display()),
        "-o".to_string(),
        "ControlPersist=120".to_string(),
    ];
    let comment = |i: usize| -> (i64, Instant, Instant) {
        let start = Instant::now();
        let out = ssh(
            &h,
            &key,
            &shared,
            &format!("collab-issue comment 'r' '{id}' --body 'fan-out {i}'"),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
        let acked = Instant::now();
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (v["seq"].as_i64().expect("seq in the reply"), start, acked)
    };
    let wait_all = |seq: i64| {
        let start = Instant::now();
        loop {
            if arrivals
                .lock()
                .unwrap()
                .get(&seq)
                .is_some_and(|v| v.len() >= WATCHERS)
            {
                return;
            }
            assert!(start.elapsed() < WAIT_LIMIT, "watchers never got seq {seq}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    // Warm up: every watcher is connected once it has seen one comment.
    for i in 0..3 {
        let (seq, _, _) = comment(i);
        wait_all(seq);
    }
    let mut from_start = Vec::new();
    let mut from_ack = Vec::new();
    let mut round_trips = Vec::new();
    for i in 0..runs {
        let (seq, start, acked) = comment(1000 + i);
        wait_all(seq);
        round_trips.push(acked.duration_since(start).as_secs_f64() * 1000.0);
        for at in &arrivals.lock().unwrap()[&seq] {
            from_start.push(at.duration_since(start).as_secs_f64() * 1000.0);
            // Signed: a watcher may get the line before the writer's reply.
            let ms = if *at >= acked {
                at.duration_since(acked).as_secs_f64() * 1000.0
            } else {
                -(acked.duration_since(*at).as_secs_f64() * 1000.0)
            };
            from_ack.push(ms);
        }
        // Let the watchers' queues drain between comments.
        std::thread::sleep(Duration::from_millis(20));
    }
    for mut w in watchers {
        let _ = w.child.kill();
        let _ = w.child.wait();
    }
    let _ = Command::new("ssh")
        .args([
            "-o",
            &format!("ControlPath={}", control.display()),
            "-O",
            "exit",
            "x",
        ])
        .stderr(Stdio::null())
        .status();
    for v in [&mut from_start, &mut from_ack, &mut round_trips] {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    }
    let base = percentile(&round_trips, 0.5);
    format!(
        "| fan-out, {runs} comments x {WATCHERS} watchers ({} lines) | p50 | p99 | p50 vs baseline |\n\
         |---|---:|---:|---:|\n\
         | baseline: the writer's `collab-issue comment` round trip (shared SSH connection; reply after COMMIT) | {:.1} ms | {:.1} ms | 1.00x |\n\
         | a watcher's line, from the start of the writer's command | {:.1} ms | {:.1} ms | {:.2}x |\n\
         | a watcher's line, from the writer's reply (negative: before it) | {:.1} ms | {:.1} ms | - |\n",
        from_start.len(),
        base,
        percentile(&round_trips, 0.99),
        percentile(&from_start, 0.5),
        percentile(&from_start, 0.99),
        percentile(&from_start, 0.5) / base,
        percentile(&from_ack, 0.5),
        percentile(&from_ack, 0.99),
    )
}

// ---------------------------------------------------------------- 3. webhooks

#[derive(Default)]
struct Received {
    ids: std::collections::HashSet<String>,
    last_at: Option<Instant>,
    body: Option<Vec<u8>>,
    posts: usize,
}

/// An HTTP receiver on 127.0.0.1 that answers 204 and counts distinct
/// `webhook-id`s.
fn receiver(runtime: &tokio::runtime::Runtime) -> (std::net::SocketAddr, Arc<Mutex<Received>>) {
    let seen: Arc<Mutex<Received>> = Arc::default();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let state = seen.clone();
    let app = axum::Router::new().fallback(
        move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let state = state.clone();
            async move {
                let mut s = state.lock().unwrap();
                s.posts += 1;
                if let Some(id) = headers.get("webhook-id").and_then(|v| v.to_str().ok()) {
                    s.ids.insert(id.to_string());
                }
                s.last_at = Some(Instant::now());
                if s.body.is_none() {
                    s.body = Some(body.to_vec());
                }
                axum::http::StatusCode::NO_CONTENT
            }
        },
    );
    runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

fn webhook_table(events: usize) -> String {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (addr, seen) = receiver(&runtime);
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![(
            "GIT_COLLAB_WEBHOOKS__ALLOWED_HOSTS".into(),
            "127.0.0.1".into(),
        )],
        ..Default::default()
    });
    h.create_repo("r");
    let clone = h.clone_repo("r", "work");
    h.commit_file(&clone, "a", b"a", "a");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let added = h.ssh_exec_with_stdin(
        &format!("collab-hook add 'r' 'http://{addr}/hook' --event 'ref.updated' --secret-stdin"),
        secret.as_bytes(),
    );
    assert_eq!(added.code, 0, "{added:?}");

    let head = h.rev_parse(&clone, "HEAD");
    let script: String = (0..events)
        .map(|i| format!("create refs/tags/t{i:05} {head}\n"))
        .collect();
    let mut update = h
        .git_command(&h.ssh_client_key(), &clone)
        .args(["update-ref", "--stdin"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(update.stdin.as_mut().unwrap(), script.as_bytes()).unwrap();
    drop(update.stdin.take());
    assert!(update.wait().unwrap().success());
    let out = h.ssh_push(&clone, &["--tags"]);
    assert!(out.status.success());
    // The events are committed once the push returned.
    let pushed = Instant::now();
    let start = Instant::now();
    while seen.lock().unwrap().ids.len() < events {
        assert!(start.elapsed() < WAIT_LIMIT * 5, "deliveries never arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (delivered, posts, body) = {
        let s = seen.lock().unwrap();
        (
            s.last_at.unwrap().duration_since(pushed),
            s.posts,
            s.body.clone().unwrap(),
        )
    };

    // Baseline: the same number of POSTs of a delivery's body, back to back
    // over one keep-alive connection.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/baseline");
    let baseline = runtime.block_on(async {
        let start = Instant::now();
        for i in 0..events {
            let status = client
                .post(&url)
                .header("content-type", "application/json")
                .header("webhook-id", format!("baseline-{i}"))
                .body(body.clone())
                .send()
                .await
                .unwrap()
                .status();
            assert!(status.is_success());
        }
        start.elapsed()
    });
    let rate = |d: Duration| events as f64 / d.as_secs_f64();
    format!(
        "| webhooks: {events} `ref.updated` events (one push), one subscription | time | per second | vs baseline |\n\
         |---|---:|---:|---:|\n\
         | baseline: {events} POSTs of the same {} byte body from one client, back to back | {} | {:.0} | 1.00x |\n\
         | deliveries, push done to the last one received ({posts} POSTs) | {} | {:.0} | {:.2}x |\n",
        body.len(),
        support::fmt(baseline),
        rate(baseline),
        support::fmt(delivered),
        rate(delivered),
        rate(delivered) / rate(baseline),
    )
}

fn main() {
    let secs = env_usize("EVENTS_BENCH_SECS", 8) as u64;
    let runs = env_usize("BENCH_FANOUT_RUNS", 50).max(1);
    let hook_events = env_usize("BENCH_HOOK_EVENTS", 1000).max(1);
    let leases = lease_table(secs);
    println!("{leases}");
    let fanout = fanout_table(runs);
    println!("{fanout}");
    let hooks = webhook_table(hook_events);
    println!("{hooks}");
    let section = format!(
        "{SECTION}\n\n\
         `cargo bench {}--bench events` ({} build), one run on {} (SQLite {}, {} CPUs \
         shared with other builds, loopback).\n\n\
         **Event rows and lease throughput.** Durable lease acquires (each a new tenure on a \
         distinct issue, `synchronous=FULL`), {secs} s per scenario in {ROUNDS} interleaved \
         rounds, with the `lease.acquired` row written in the same transaction against a \
         database where a trigger drops it (the `seq` counter row is still bumped there). \
         Target: with events no more than 10 % slower (≥ 0.90x).\n\n{leases}\n\
         **Fan-out to watchers.** {WATCHERS} `ssh … collab-events watch` processes on one \
         server, each on its own connection; a writer comments on one issue over a shared SSH \
         connection, one comment at a time; for every comment, the time each watcher's line \
         arrived.\n\n{fanout}\n\
         **Webhook deliveries.** One subscription (HMAC secret and Ed25519, so both signatures \
         are computed) to a receiver on loopback that answers 204; deliveries of one \
         subscription go one at a time, in order, each moving the cursor through the writer.\n\n{hooks}",
        if cfg!(debug_assertions) { "--profile dev " } else { "" },
        if cfg!(debug_assertions) { "debug" } else { "release" },
        chrono::Utc::now().format("%Y-%m-%d"),
        rusqlite::version(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
    );
    write_section(
        &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md"),
        &section,
    );
}
