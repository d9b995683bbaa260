//! Clone storms with the pack cache on and off (issue 29): N concurrent
//! identical clones over SSH (and smart HTTP) of a generated repository of
//! realistic size (a few thousand commits of history, tens of MB of text
//! and binary files), on one server, in one run.
//!
//! Measured per storm: the server's CPU seconds, process and children
//! (`utime+stime+cutime+cstime` of the server from /proc: every
//! `upload-pack`, hook and `pack-objects` it ran has been reaped by then),
//! split into the server process itself (SSH encryption, HTTP), the hook
//! processes and the `pack-objects` they ran (the hook's own counters, at
//! /metrics) and `upload-pack` (the rest of the children); and each
//! client's wall time (p50, p99). Ratios are against the 1-clone storm of
//! the same mode in the same run. "cold": the cache's entries are removed
//! before the storm (the default `git.pack_cache_min_occurrences` of 2
//! applies); "warm": the entry of an earlier storm is there (hits only).
//! The peer without a cache: OpenSSH `sshd` + `git upload-pack` on a
//! loopback port serving the same repository (needs root and
//! /usr/sbin/sshd; skipped otherwise).
//!
//! Then fetches after a push: every client has a clone at the old tip, one
//! commit is pushed, and N clients fetch it at once.
//!
//! Writes docs/benchmarks.md "## Clone storms (pack cache)".
//! Run: `cargo bench --bench pack_cache` (BENCH_MB sizes the repository,
//! BENCH_STORMS the storm sizes, e.g. `1,8,32`; BENCH_FETCHES the fetch
//! storms, e.g. `1,64`; BENCH_HTTP=0 skips HTTP, BENCH_SSHD=0 the sshd
//! peer).

use collab_testkit::bench as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use collab_testkit::{HarnessOptions, ServerHarness};
use support::{env_usize, run_ok, write_section, Sshd};

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

/// The server's CPU seconds so far: (its own, its reaped children's).
fn server_cpu(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // After the comm: state ppid ... utime(14) stime(15) cutime(16) cstime(17),
    // 1-based over the whole line, so 11..=14 here.
    let t = |i: usize| fields[i].parse::<f64>().unwrap() / ticks_per_sec();
    (t(11) + t(12), t(13) + t(14))
}

/// A counter from the server's /metrics (0 when absent).
fn metric(h: &ServerHarness, name: &str) -> f64 {
    collab_testkit::web::get(h, "/metrics")
        .text()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// CPU seconds of one storm, by process.
#[derive(Clone, Copy, Default)]
struct Cpu {
    /// The server process itself (or sshd's processes, reaped).
    server: f64,
    /// upload-pack (children minus the hooks and their pack-objects).
    upload_pack: f64,
    hook: f64,
    pack_objects: f64,
    /// The clients' own CPU (every `git clone`/`fetch` and its children,
    /// reaped by this process), on the same cores.
    clients: f64,
    /// Whether the split by process is known (not for sshd: its session
    /// processes and upload-pack are all its children).
    split: bool,
}

impl Cpu {
    fn total(&self) -> f64 {
        self.server + self.upload_pack + self.hook + self.pack_objects
    }
}

/// What is measured: the server's pid, and where its hook counters are
/// (`None` for sshd).
struct Target<'a> {
    pid: u32,
    harness: Option<&'a ServerHarness>,
}

impl Target<'_> {
    fn snapshot(&self) -> (f64, f64, f64, f64, f64) {
        let (own, children) = server_cpu(self.pid);
        let (_, clients) = server_cpu(std::process::id());
        let (hook, po) = self.harness.map_or((0.0, 0.0), |h| {
            (
                metric(h, "git_collab_pack_cache_hook_cpu_seconds_total"),
                metric(h, "git_collab_pack_objects_cpu_seconds_total"),
            )
        });
        (own, children, hook, po, clients)
    }

    fn since(&self, before: (f64, f64, f64, f64, f64)) -> Cpu {
        let now = self.snapshot();
        let hook = now.2 - before.2;
        let pack_objects = now.3 - before.3;
        Cpu {
            server: now.0 - before.0,
            upload_pack: (now.1 - before.1 - hook - pack_objects).max(0.0),
            hook,
            pack_objects,
            clients: now.4 - before.4,
            split: self.harness.is_some(),
        }
    }
}

/// A server with the pack cache on or off; `by_upload_pack`: protocol v2
/// over SSH goes through one upload-pack per conversation, as before the
/// server answered it itself (`GIT_COLLAB_SSH_V2_IN_SERVER=0`).
fn server(cache: bool, by_upload_pack: bool) -> ServerHarness {
    let env = [
        (
            "GIT_COLLAB_SSH_V2_IN_SERVER",
            if by_upload_pack { "0" } else { "1" },
        ),
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

/// N concurrent clones of `url`: (server CPU, client walls).
fn storm(
    h: &ServerHarness,
    target: &Target,
    env: &[(String, String)],
    url: &str,
    n: usize,
    tag: &str,
) -> (Cpu, Vec<Duration>) {
    std::thread::sleep(Duration::from_millis(300));
    let before = target.snapshot();
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let dest = h.temp_dir().join(format!("{tag}-{n}-{i}"));
            let mut cmd = h.git_command(&h.ssh_client_key(), h.temp_dir());
            cmd.envs(env.iter().cloned())
                .args(["clone", "-q", "--no-checkout", url])
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
    std::thread::sleep(Duration::from_millis(500));
    (target.since(before), walls)
}

/// N clients each with a clone at the current tip (copies of one clone);
/// one commit is pushed; all fetch it at once: (server CPU, walls).
fn fetch_storm(
    h: &ServerHarness,
    target: &Target,
    env: &[(String, String)],
    src: &Path,
    url: &str,
    n: usize,
    tag: &str,
) -> (Cpu, Vec<Duration>) {
    let first = h.temp_dir().join(format!("fetch-{tag}-{n}-0"));
    let mut cmd = h.git_command(&h.ssh_client_key(), h.temp_dir());
    run_ok(
        cmd.envs(env.iter().cloned())
            .args(["clone", "-q", "--no-checkout", url])
            .arg(&first),
    );
    let dests: Vec<PathBuf> = (0..n)
        .map(|i| {
            let d = h.temp_dir().join(format!("fetch-{tag}-{n}-{i}"));
            if i > 0 {
                run_ok(Command::new("cp").arg("-a").arg(&first).arg(&d));
            }
            d
        })
        .collect();
    // One fetch is under /proc's 10 ms tick: alone, it is measured as the
    // mean of several rounds.
    let rounds = if n == 1 { 10 } else { 1 };
    let mut cpu = Cpu::default();
    let mut walls = Vec::new();
    for round in 0..rounds {
        // One new commit on main, pushed over SSH to the server.
        std::fs::write(
            src.join(format!("{tag}-{n}-{round}.txt")),
            format!("{tag} {n} {round}\n"),
        )
        .unwrap();
        let git = |args: &[&str]| run_ok(h.git_command(&h.ssh_client_key(), src).args(args));
        git(&["add", "."]);
        git(&["commit", "-q", "-m", &format!("after {tag} {n} {round}")]);
        git(&["push", "-q", &h.repo_url("fleet"), "main:main"]);
        std::thread::sleep(Duration::from_millis(300));
        let before = target.snapshot();
        let handles: Vec<_> = dests
            .iter()
            .map(|d| {
                let mut cmd = h.git_command(&h.ssh_client_key(), d);
                cmd.envs(env.iter().cloned())
                    .args(["fetch", "-q", "origin"])
                    .stdout(Stdio::null());
                std::thread::spawn(move || {
                    let start = Instant::now();
                    let out = cmd.output().unwrap();
                    let wall = start.elapsed();
                    assert!(out.status.success(), "{out:?}");
                    wall
                })
            })
            .collect();
        walls.extend(handles.into_iter().map(|t| t.join().unwrap()));
        std::thread::sleep(Duration::from_millis(500));
        let c = target.since(before);
        cpu.server += c.server / rounds as f64;
        cpu.upload_pack += c.upload_pack / rounds as f64;
        cpu.hook += c.hook / rounds as f64;
        cpu.pack_objects += c.pack_objects / rounds as f64;
        cpu.clients += c.clients / rounds as f64;
        cpu.split = c.split;
    }
    for d in dests {
        let _ = std::fs::remove_dir_all(d);
    }
    (cpu, walls)
}

/// What a row's ratios are against: the 1-client storm of the same kind
/// (CPU, p50), the CPU of one client without the cache, and the smallest
/// base that is a measurement (/proc counts in 10 ms ticks).
struct Base {
    cpu: f64,
    p50: Duration,
    one: f64,
    min: f64,
}

/// One table row.
fn row(
    what: &str,
    transport: &str,
    n: usize,
    cpu: Cpu,
    walls: Vec<Duration>,
    base: Base,
) -> String {
    let Base {
        cpu: base_cpu,
        p50: base_p50,
        one,
        min: min_base,
    } = base;
    let p50 = support::percentile(walls.clone(), 0.5);
    let p99 = support::percentile(walls, 0.99);
    eprintln!(
        "{what} {transport} n={n}: cpu {:.3}s (server {:.3} upload-pack {:.3} hook {:.3} pack-objects {:.3}) clients {:.2}s p50 {p50:?} p99 {p99:?}",
        cpu.total(), cpu.server, cpu.upload_pack, cpu.hook, cpu.pack_objects, cpu.clients
    );
    let split = |v: f64| {
        if cpu.split {
            format!("{v:.3}")
        } else {
            "–".to_string()
        }
    };
    // /proc counts in 10 ms ticks: a ratio to a base measured as less than
    // two of them (`min_base`: 20 ms, or 2 ms for a mean of 10 rounds) is
    // noise, not a measurement.
    let ratio = |of: f64, to: f64| {
        if to < min_base {
            "–".to_string()
        } else {
            format!("{:.2}", of / to)
        }
    };
    format!(
        "| {what} | {transport} | {n} | {:.3} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
        cpu.total(),
        ratio(cpu.total(), base_cpu),
        ratio(cpu.total(), one),
        split(cpu.server),
        split(cpu.upload_pack),
        split(cpu.hook),
        split(cpu.pack_objects),
        cpu.clients,
        p50.as_secs_f64(),
        p99.as_secs_f64(),
        p99.as_secs_f64() / base_p50.as_secs_f64().max(0.001),
    )
}

fn main() {
    let mb = env_usize("BENCH_MB", 40);
    let storms: Vec<usize> = std::env::var("BENCH_STORMS")
        .unwrap_or_else(|_| "1,8,32".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let http = env_usize("BENCH_HTTP", 1) == 1;
    let load = support::load_average();

    let fetches: Vec<usize> = std::env::var("BENCH_FETCHES")
        .unwrap_or_else(|_| "1,64".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let with_sshd = env_usize("BENCH_SSHD", 1) == 1;

    let mut rows = Vec::new();
    let mut fetch_rows = Vec::new();
    // One client's CPU without the cache, per kind and transport.
    let mut one_off: std::collections::HashMap<String, f64> = Default::default();
    let mut size = 0u64;
    // "off", "on", and "on" with SSH conversations held by upload-pack.
    for (cache, by_upload_pack) in [(false, false), (true, false), (true, true)] {
        let h = server(cache, by_upload_pack);
        h.create_repo("fleet");
        let src = support::storm_source(&h, mb);
        let url = h.repo_url("fleet");
        run_ok(
            h.git_command(&h.ssh_client_key(), &src)
                .args(["push", "-q", &url, "main:main"]),
        );
        collab_testkit::web::make_public(&h, "fleet");
        let repo_dir = h.repos_dir().join("fleet.git");
        size = dir_size(&repo_dir);
        let target = Target {
            pid: h.pid(),
            harness: Some(&h),
        };
        let none: Vec<(String, String)> = Vec::new();
        let mut transports = vec![("ssh", url.clone())];
        if http && !by_upload_pack {
            transports.push(("http", format!("{}/fleet.git", h.http_url())));
        }
        let temps: &[&str] = if cache { &["cold", "warm"] } else { &[""] };
        for (transport, url) in &transports {
            for temp in temps {
                let what = if by_upload_pack {
                    format!("on, {temp}, SSH by upload-pack")
                } else if cache {
                    format!("on, {temp}")
                } else {
                    "off".to_string()
                };
                let mut base: Option<(f64, Duration)> = None;
                for &n in &storms {
                    if *temp != "warm" {
                        clear_cache(&h);
                    }
                    let (cpu, walls) = storm(&h, &target, &none, url, n, transport);
                    let b =
                        *base.get_or_insert((cpu.total(), support::percentile(walls.clone(), 0.5)));
                    let one = *one_off.entry(format!("clone {transport}")).or_insert(b.0);
                    rows.push(row(
                        &what,
                        transport,
                        n,
                        cpu,
                        walls,
                        Base {
                            cpu: b.0,
                            p50: b.1,
                            one,
                            min: 0.02,
                        },
                    ));
                }
            }
        }
        // What SSH encryption costs: the warm storms again with clients
        // asking for AES-GCM (AES-NI) instead of OpenSSH's default,
        // chacha20-poly1305.
        if cache && !by_upload_pack {
            let gcm = vec![(
                "GIT_SSH_COMMAND".to_string(),
                format!(
                    "{} -c aes128-gcm@openssh.com",
                    h.git_ssh_command(&h.ssh_client_key())
                ),
            )];
            let mut base: Option<(f64, Duration)> = None;
            for &n in &storms {
                let (cpu, walls) = storm(&h, &target, &gcm, &url, n, "gcm");
                let b = *base.get_or_insert((cpu.total(), support::percentile(walls.clone(), 0.5)));
                let one = one_off.get("clone ssh").copied().unwrap_or(b.0);
                rows.push(row(
                    "on, warm, client cipher aes128-gcm",
                    "ssh",
                    n,
                    cpu,
                    walls,
                    Base {
                        cpu: b.0,
                        p50: b.1,
                        one,
                        min: 0.02,
                    },
                ));
            }
        }
        // The peer without a cache, once: OpenSSH sshd + git upload-pack on
        // the same repository.
        let sshd = (!cache && with_sshd)
            .then(|| {
                Sshd::start_with(
                    &h.temp_dir().join("sshd"),
                    &h.ssh_client_key(),
                    "MaxStartups 256\nMaxSessions 256\n",
                )
            })
            .flatten();
        if let Some(sshd) = &sshd {
            let sshd_url = format!(
                "ssh://{}@127.0.0.1:{}{}",
                sshd.user,
                sshd.port,
                repo_dir.display()
            );
            let target = Target {
                pid: sshd.pid(),
                harness: None,
            };
            let mut base: Option<(f64, Duration)> = None;
            for &n in &storms {
                let (cpu, walls) = storm(&h, &target, &none, &sshd_url, n, "sshd");
                let b = *base.get_or_insert((cpu.total(), support::percentile(walls.clone(), 0.5)));
                rows.push(row(
                    "OpenSSH sshd",
                    "ssh",
                    n,
                    cpu,
                    walls,
                    Base {
                        cpu: b.0,
                        p50: b.1,
                        one: b.0,
                        min: 0.02,
                    },
                ));
            }
        }
        // Fetches after a push of one commit (cold: the entries of the
        // clones above do not match a fetch's request anyway).
        for (transport, url) in &transports {
            let mut base: Option<(f64, Duration)> = None;
            for &n in &fetches {
                let (cpu, walls) = fetch_storm(&h, &target, &none, &src, url, n, transport);
                let b = *base.get_or_insert((cpu.total(), support::percentile(walls.clone(), 0.5)));
                let one = *one_off.entry(format!("fetch {transport}")).or_insert(b.0);
                fetch_rows.push(row(
                    match (cache, by_upload_pack) {
                        (false, _) => "off",
                        (true, false) => "on",
                        (true, true) => "on, SSH by upload-pack",
                    },
                    transport,
                    n,
                    cpu,
                    walls,
                    Base {
                        cpu: b.0,
                        p50: b.1,
                        one,
                        min: 0.002,
                    },
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
         SSH and smart HTTP. \"cold\": the cache's entries are removed before each storm (default \
         `git.pack_cache_min_occurrences` = 2, so pack-objects runs about twice); \"warm\": the entry \
         of the storm before is there (every request a hit). \"OpenSSH sshd\": `sshd` + \
         `git upload-pack` on a loopback port serving the same repository (no cache). \
         \"SSH by upload-pack\": a server started with `GIT_COLLAB_SSH_V2_IN_SERVER=0`, so one \
         upload-pack holds each SSH conversation and a hit goes through it and the hook, as before \
         the server answered protocol v2 over SSH itself (the other \"on\" rows). Server CPU is \
         the server process and all its reaped children, split into the server process itself \
         (SSH encryption, HTTP; for sshd: all its processes but upload-pack), `upload-pack`, the hook \
         processes and the `pack-objects` they ran (the hook's own counters); the CPU ratio is against \
         the 1-clone storm of the same row kind, \"vs 1 uncached\" against one client with the cache off (the issue's \
         \"one clone's server CPU\"; for sshd its own 1-clone storm), the p99 ratio against the \
         1-client storm's p50. \"clients CPU s\": the clients' own CPU (every `git clone` or \
         `fetch` and its children), on the same cores.\n\n\
         | cache | transport | N | server CPU s | CPU vs 1 | vs 1 uncached | server process s | upload-pack s | hook s | pack-objects s | clients CPU s | p50 s | p99 s | p99 vs 1 |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n{}\n\n\
         Fetches after a push: N clients at the same commit (copies of one clone), one commit \
         pushed, then all fetch it at once; N = 1 is the mean of 10 rounds (one fetch is about \
         one 10 ms tick of `/proc`). A ratio is \"–\" where its base is under 20 ms.\n\n\
         | cache | transport | N | server CPU s | CPU vs 1 | vs 1 uncached | server process s | upload-pack s | hook s | pack-objects s | clients CPU s | p50 s | p99 s | p99 vs 1 |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n{}\n",
        if cfg!(debug_assertions) {
            " (run with `--profile dev`: a debug build of the server; git is the system's)"
        } else {
            " (release build)"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        support::cpu_name(),
        size as f64 / 1048576.0,
        rows.join("\n"),
        fetch_rows.join("\n")
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
