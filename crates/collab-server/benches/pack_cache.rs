//! Clone storms with the pack cache on and off (issue 29): N concurrent
//! identical clones over SSH (and smart HTTP) of a generated repository of
//! realistic size (a few thousand commits of history, tens of MB of text
//! and binary files), on one server, in one run.
//!
//! Measured per storm: the server's CPU seconds, process and children
//! (`utime+stime+cutime+cstime` of the server from /proc: every
//! `upload-pack`, hook and `pack-objects` it ran has been reaped by then),
//! and each client's wall time (p50, p99). Ratios are against the 1-clone
//! storm of the same mode in the same run. The cache's entries are removed
//! before every storm, so each one starts cold (the default
//! `git.pack_cache_min_occurrences` of 2 applies).
//!
//! Writes docs/benchmarks.md "## Clone storms (pack cache)".
//! Run: `cargo bench --bench pack_cache` (BENCH_MB sizes the repository,
//! BENCH_STORMS the storm sizes, e.g. `1,8,32`; BENCH_HTTP=0 skips HTTP).

use collab_testkit::bench as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use collab_testkit::{HarnessOptions, ServerHarness};
use support::{env_usize, run_ok, write_section};

/// Clock ticks per second of /proc's times (USER_HZ).
fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The server's CPU seconds so far, its own and its reaped children's.
fn server_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // After the comm: state ppid ... utime(14) stime(15) cutime(16) cstime(17),
    // 1-based over the whole line, so 11..=14 here.
    let sum: f64 = fields[11..=14]
        .iter()
        .map(|f| f.parse::<f64>().unwrap())
        .sum();
    sum / ticks_per_sec()
}

fn server(cache: bool) -> ServerHarness {
    let env = [
        (
            "GIT_COLLAB_GIT__PACK_CACHE",
            if cache { "true" } else { "false" },
        ),
        ("GIT_COLLAB_GIT__MAX_PROCESSES", "256"),
        ("GIT_COLLAB_GIT__MAX_PROCESSES_PER_PRINCIPAL", "256"),
        ("GIT_COLLAB_GIT__QUEUE_TIMEOUT", "10m"),
        ("GIT_COLLAB_SSH__MAX_STARTUPS_PER_IP", "256"),
        ("GIT_COLLAB_HTTP__MAX_CONNECTIONS_PER_IP", "256"),
    ];
    ServerHarness::start_with(HarnessOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    })
}

/// History plus `mb` MiB split between compressible text and random binary.
fn make_source(h: &ServerHarness, mb: usize) -> PathBuf {
    let src = h.temp_dir().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let git = |args: &[&str]| run_ok(h.git_command(&h.ssh_client_key(), &src).args(args));
    git(&["init", "-q", "-b", "main"]);
    collab_testkit::synthetic_history(&src.join(".git"), "main", 3000);
    git(&["reset", "-q", "--hard", "main"]);
    let mut seed = 0x2545f4914f6cdd1du64;
    let per = mb.max(2) / 2;
    for i in 0..per {
        let mut blob = vec![0u8; 1024 * 1024];
        for chunk in blob.chunks_mut(8) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            chunk.copy_from_slice(&seed.to_le_bytes()[..chunk.len()]);
        }
        std::fs::write(src.join(format!("blob{i:03}.bin")), blob).unwrap();
        let text: String = (0..24_000)
            .map(|l| {
                format!(
                    "{i}:{l} the quick brown fox {} jumps\n",
                    seed.wrapping_mul(l)
                )
            })
            .collect();
        std::fs::write(src.join(format!("text{i:03}.txt")), text).unwrap();
        if i % 4 == 3 || i + 1 == per {
            git(&["add", "."]);
            git(&["commit", "-q", "-m", &format!("data {i}")]);
        }
    }
    src
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

fn clear_cache(h: &ServerHarness) {
    if let Ok(dir) = std::fs::read_dir(h.state_dir().join("pack-cache")) {
        for e in dir.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "pack" || x == "seen") {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// N concurrent clones of `url`: (server CPU s, client walls).
fn storm(h: &ServerHarness, url: &str, n: usize, tag: &str) -> (f64, Vec<Duration>) {
    clear_cache(h);
    std::thread::sleep(Duration::from_millis(300));
    let before = server_cpu(h.pid());
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let dest = h.temp_dir().join(format!("{tag}-{n}-{i}"));
            let mut cmd = h.git_command(&h.ssh_client_key(), h.temp_dir());
            cmd.args(["clone", "-q", "--no-checkout", url])
                .arg(&dest)
                .stdout(Stdio::null());
            std::thread::spawn(move || {
                let start = Instant::now();
                let out = cmd.output().unwrap();
                let wall = start.elapsed();
                assert!(out.status.success(), "{out:?}");
                let _ = std::fs::remove_dir_all(&dest);
                wall
            })
        })
        .collect();
    let walls: Vec<Duration> = handles.into_iter().map(|t| t.join().unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    (server_cpu(h.pid()) - before, walls)
}

fn main() {
    let mb = env_usize("BENCH_MB", 40);
    let storms: Vec<usize> = std::env::var("BENCH_STORMS")
        .unwrap_or_else(|_| "1,8,32".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let http = env_usize("BENCH_HTTP", 1) == 1;
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());

    let mut rows = Vec::new();
    let mut size = 0u64;
    for cache in [false, true] {
        let h = server(cache);
        h.create_repo("fleet");
        let src = make_source(&h, mb);
        let url = h.repo_url("fleet");
        run_ok(
            h.git_command(&h.ssh_client_key(), &src)
                .args(["push", "-q", &url, "main:main"]),
        );
        collab_testkit::web::make_public(&h, "fleet");
        size = dir_size(&h.repos_dir().join("fleet.git"));
        let mut transports = vec![("ssh", url.clone())];
        if http {
            transports.push(("http", format!("{}/fleet.git", h.http_url())));
        }
        for (transport, url) in transports {
            let mut base: Option<(f64, Duration)> = None;
            for &n in &storms {
                let (cpu, walls) = storm(&h, &url, n, transport);
                let p50 = percentile(walls.clone(), 0.5);
                let p99 = percentile(walls, 0.99);
                let (cpu1, wall1) = *base.get_or_insert((cpu, p50));
                eprintln!("cache={cache} {transport} n={n}: cpu {cpu:.2}s p50 {p50:?} p99 {p99:?}");
                rows.push(format!(
                    "| {} | {transport} | {n} | {cpu:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    if cache { "on" } else { "off" },
                    cpu / cpu1.max(0.01),
                    p50.as_secs_f64(),
                    p99.as_secs_f64(),
                    p99.as_secs_f64() / wall1.as_secs_f64().max(0.001),
                ));
            }
        }
    }
    let git_version = Command::new("git")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let section = format!(
        "## Clone storms (pack cache)\n\n\
         `cargo bench --bench pack_cache`{}, {git_version}, {} CPUs ({}), load average {load} at start. \
         One repository: 3000 commits of history plus {mb} MiB of files (half random binary, half text) \
         in a few commits, {:.1} MiB on disk. N identical `git clone --no-checkout` at once over \
         SSH and smart HTTP; the cache's entries are removed before each storm (cold start, default \
         `git.pack_cache_min_occurrences` = 2). Server CPU is the server process and all its reaped \
         children (upload-pack, the hook, pack-objects); the CPU ratio is against the 1-clone storm of \
         the same mode and transport, the p99 ratio against that storm's wall time.\n\n\
         | cache | transport | N | server CPU s | CPU vs 1 | p50 s | p99 s | p99 vs 1 |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n{}\n",
        if cfg!(debug_assertions) {
            " (run with `--profile dev`: a debug build of the server; git is the system's)"
        } else {
            ""
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        support::cpu_name(),
        size as f64 / 1048576.0,
        rows.join("\n")
    );
    let doc = collab_testkit::workspace_root().join("docs/benchmarks.md");
    write_section(&doc, &section);
}

fn dir_size(p: &Path) -> u64 {
    let Ok(dir) = std::fs::read_dir(p) else {
        return std::fs::metadata(p).map_or(0, |m| m.len());
    };
    dir.flatten().map(|e| dir_size(&e.path())).sum()
}
