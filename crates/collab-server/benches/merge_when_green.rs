//! Merge latency after the last green check (issue 27): how long after a
//! CI's `collab-check set … --state success` returns does the patch land
//! on `main`, when it was queued with `collab-patch merge --when-green`
//! (the server merges, no client connected) — against the baseline of a
//! client that stayed connected and runs `collab-patch merge` itself the
//! moment its check call returns (one more SSH round trip and the merge).
//!
//! A simulated CI: a real HTTP receiver subscribed to `patch.opened`
//! webhooks posts `success` for each patch's head after a fixed delay, as
//! a CI would after its run. Latency of a queued merge is timed from that
//! `set` returning to a watcher (`collab-events watch --type patch.merged`,
//! connected before) reading the patch's `patch.merged` line.
//!
//! Run: `cargo bench --bench merge_when_green` (release build).
//! `BENCH_PATCHES` (default 24) patches per mode, `BENCH_CI_DELAY_MS`
//! (default 300) the CI's run time. Writes docs/benchmarks.md under
//! "## Merge when green".

use collab_testkit::bench as support;

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use collab_testkit::{HarnessOptions, ServerHarness};
use support::{env_usize, fmt, write_section};

const SECTION: &str = "## Merge when green";

fn git(h: &ServerHarness, key: &Path, dir: &Path, args: &[&str]) -> String {
    let out = h.git_command(key, dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// Push `n` independent one-file commits off `main` for review; their
/// (short id, head) in push order.
fn push_patches(
    h: &ServerHarness,
    key: &Path,
    dir: &Path,
    tag: &str,
    n: usize,
) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            git(
                h,
                key,
                dir,
                &["switch", "-q", "-C", &format!("{tag}{i}"), "origin/main"],
            );
            std::fs::write(dir.join(format!("{tag}{i}.txt")), format!("{i}\n")).unwrap();
            git(h, key, dir, &["add", "-A"]);
            git(
                h,
                key,
                dir,
                &["commit", "-q", "-m", &format!("Add {tag}{i}")],
            );
            let head = git(h, key, dir, &["rev-parse", "HEAD"]);
            let head = head.lines().next().unwrap().to_string();
            let out = git(h, key, dir, &["push", "origin", "HEAD:refs/for/main"]);
            let short = out
                .lines()
                .find_map(|l| l.split("remote: patch ").nth(1))
                .map(|s| s[..8].to_string())
                .expect("a patch line");
            (short, head)
        })
        .collect()
}

/// A simulated CI: an HTTP receiver that, for each `patch.opened` webhook,
/// sets `ci/test` to success on the patch's head after `delay`, and
/// reports (head, the instant the `set` returned).
fn simulated_ci(h: &ServerHarness, delay: Duration) -> (String, mpsc::Receiver<(String, Instant)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/ci", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    let ssh_args = h.ssh_options(&h.ssh_client_key());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (tx, ssh_args) = (tx.clone(), ssh_args.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0u8; len];
                let _ = reader.read_exact(&mut body);
                let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n");
                let Ok(event) = serde_json::from_slice::<serde_json::Value>(&body) else {
                    return;
                };
                let Some(head) = event
                    .pointer("/data/payload/revision/head")
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
                else {
                    return;
                };
                std::thread::sleep(delay);
                let out = Command::new("ssh")
                    .args(&ssh_args)
                    .arg("git@127.0.0.1")
                    .arg(format!(
                        "collab-check set 'r' {head} ci/test --state success"
                    ))
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{out:?}");
                let _ = tx.send((head, Instant::now()));
            });
        }
    });
    (url, rx)
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn main() {
    let n = env_usize("BENCH_PATCHES", 24);
    let delay = Duration::from_millis(env_usize("BENCH_CI_DELAY_MS", 300) as u64);
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![(
            "GIT_COLLAB_WEBHOOKS__ALLOWED_HOSTS".into(),
            "127.0.0.1".into(),
        )],
        ..Default::default()
    });
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    std::fs::write(
        h.repos_dir().join("r.git/collab-policy.toml"),
        "merge = { required_checks = [\"ci/test\"] }\n",
    )
    .unwrap();
    let key = h.ssh_client_key();
    let dir: PathBuf = h.clone_as(&key, "r", "agent");
    let (url, greens) = simulated_ci(&h, delay);
    let added = h.ssh_exec(&format!(
        "collab-hook add 'r' '{url}' --event 'patch.opened'"
    ));
    assert_eq!(added.code, 0, "{added:?}");

    // The watcher of merges, connected before anything is queued.
    let mut watcher = Command::new("ssh")
        .args(h.ssh_options(&key))
        .arg("git@127.0.0.1")
        .arg("collab-events watch 'r' --type patch.merged")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let merged_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    {
        let (stdout, merged_at) = (watcher.stdout.take().unwrap(), merged_at.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                if v["type"] == "patch.merged" {
                    let id = v["object_id"].as_str().unwrap_or_default()[..8].to_string();
                    merged_at.lock().unwrap().insert(id, Instant::now());
                }
            }
        });
    }
    std::thread::sleep(Duration::from_millis(500));

    // Queued: every patch queued as soon as it is pushed; CI turns each
    // green after its run; the server merges.
    let queued = push_patches(&h, &key, &dir, "q", n);
    for (id, _) in &queued {
        let out = h.ssh_exec(&format!("collab-patch merge 'r' {id} --when-green"));
        assert_eq!(out.code, 0, "{out:?}");
    }
    let mut green_at = HashMap::new();
    while green_at.len() < n {
        let (head, at) = greens
            .recv_timeout(Duration::from_secs(120))
            .expect("CI reports");
        green_at.insert(head, at);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while merged_at.lock().unwrap().len() < n {
        assert!(Instant::now() < deadline, "not every queued patch merged");
        std::thread::sleep(Duration::from_millis(20));
    }
    let server_side: Vec<Duration> = queued
        .iter()
        .map(|(id, head)| {
            let merged = merged_at.lock().unwrap()[id];
            merged.saturating_duration_since(green_at[head])
        })
        .collect();

    // Baseline: a connected client merges itself when its check returns.
    let direct = push_patches(&h, &key, &dir, "d", n);
    let mut client_side = Vec::new();
    let mut pending: HashMap<String, String> = direct
        .iter()
        .map(|(id, head)| (head.clone(), id.clone()))
        .collect();
    while !pending.is_empty() {
        let (head, at) = greens
            .recv_timeout(Duration::from_secs(120))
            .expect("CI reports");
        let Some(id) = pending.remove(&head) else {
            continue;
        };
        let out = h.ssh_exec(&format!("collab-patch merge 'r' {id}"));
        assert_eq!(out.code, 0, "{out:?}");
        client_side.push(at.elapsed());
    }
    let _ = watcher.kill();
    let _ = watcher.wait();

    let (q50, q99) = (
        percentile(server_side.clone(), 0.5),
        percentile(server_side, 0.99),
    );
    let (d50, d99) = (
        percentile(client_side.clone(), 0.5),
        percentile(client_side, 0.99),
    );
    let ratio = |a: Duration, b: Duration| format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64());
    let section = format!(
        "{SECTION}\n\n\
         `cargo bench --bench merge_when_green` ({build} build), one run on {date}, {cores} CPUs \
         shared with other work, loopback, SQLite. {n} patches per row, each one new file off \
         `main` pushed to `refs/for/main`; the merge rule requires `ci/test`. A simulated CI (a \
         real HTTP receiver of `patch.opened` webhooks) sets `ci/test` to success {delay_ms} ms \
         after it hears of a patch, as the CI key, over `ssh`. Latency is timed from that `set` \
         returning to the patch landing: for a queued merge, to a watcher connected before \
         (`collab-events watch --type patch.merged`) reading the merge; for the baseline, to \
         `collab-patch merge` returning for a client that stayed connected and merged the moment \
         its check call returned.\n\n\
         | merge after the last green check | p50 | p99 | p99 vs baseline | target |\n\
         |---|---:|---:|---:|---|\n\
         | baseline: a connected client runs `collab-patch merge` | {} | {} | 1.00x | |\n\
         | queued (`--when-green`), the server merges, no client | {} | {} | {} | p99 < 1 s |\n\n\
         The driver looks when the event log moves (at most every 200 ms) and every second; \
         patches queued together merge one after another (one merge at a time per repository), \
         each a merge commit once `main` has moved.\n",
        fmt(d50),
        fmt(d99),
        fmt(q50),
        fmt(q99),
        ratio(q99, d99),
        date = chrono::Utc::now().format("%Y-%m-%d"),
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        delay_ms = delay.as_millis(),
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
