//! Benchmark: what hostile load costs the server, with the default limits
//! against the same binary with the limits opened up (the baseline: what
//! the server did before issue 12, as far as configuration can bring it
//! back). Three attacks, each against a fresh `git-collab-server`
//! (release build) on loopback:
//!
//! - **big file**: 20 clients at once each fetch a 60 MiB text file raw,
//!   its commit page and its blob page (retrying on 503). Baseline:
//!   `http.max_file_shown = 1GiB` (files read whole, diffed whole),
//!   `http.max_concurrent_pages` and the git process caps at 100000.
//!   Measured: the server's peak RSS growth (VmHWM) and the wall time.
//! - **gzip bomb**: 5 concurrent `git-upload-pack` POSTs of a ~3 MB gzip
//!   body that inflates to 512 MiB of `want` lines. Baseline:
//!   `http.max_request_body = 1GiB`. Measured: time until all answered,
//!   peak RSS growth of the server and of its children.
//! - **slowloris**: 300 connections from one address trickling a header
//!   line a second for 15 s. Baseline: `http.header_read_timeout = 1h`,
//!   per-address cap 100000. Measured: connections the server still holds
//!   after 15 s.
//!
//! Prints a markdown table; with `GIT_COLLAB_BENCH_DOCS=docs/benchmarks.md`
//! it also replaces that file's "## Resource limits under attack" section.
//! Run: `cargo bench --bench limits`.

use collab_testkit::bench as support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use collab_testkit::{HarnessOptions, ServerHarness};
use support::{fmt, write_section};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const FILE_SIZE: usize = 60 * 1024 * 1024;

fn server(env: &[(&str, &str)]) -> ServerHarness {
    ServerHarness::start_with(HarnessOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        args: vec!["--log-level".into(), "warn".into()],
        ..Default::default()
    })
}

/// Peak resident memory (VmHWM) of a process, in MiB.
fn peak_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Text lines of pseudo-random hex: big, not binary.
fn big_text(size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 80);
    let mut seed = 0x9e3779b97f4a7c15u64;
    while out.len() < size {
        for _ in 0..4 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            out.extend_from_slice(format!("{seed:016x}").as_bytes());
        }
        out.push(b'\n');
    }
    out.truncate(size);
    out
}

/// A public repository `name` holding `files`, pushed from a local
/// repository straight into the server's directory; the commit id.
fn fill(h: &ServerHarness, name: &str, files: &[(&str, &[u8])]) -> String {
    let server_repo = h.create_repo(name);
    let work = h.temp_dir().join(format!("local-{name}"));
    std::fs::create_dir_all(&work).unwrap();
    let git = |args: &[&str]| {
        let out = h
            .git_command(&h.ssh_client_key(), &work)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    for (path, content) in files {
        std::fs::write(work.join(path), content).unwrap();
        git(&["add", path]);
    }
    git(&["commit", "-q", "-m", "files"]);
    git(&["push", "-q", server_repo.to_str().unwrap(), "HEAD:main"]);
    std::fs::write(
        h.repos_dir()
            .join(format!("{name}.git"))
            .join("collab-policy.toml"),
        "public = true\n",
    )
    .unwrap();
    git(&["rev-parse", "HEAD"])
}

/// `curl` until not 503; the status and the number of requests.
fn fetch(url: &str) -> (u16, u32) {
    for attempt in 1..=200 {
        let out = Command::new("curl")
            .args([
                "-s",
                "--max-time",
                "300",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                url,
            ])
            .output()
            .expect("curl");
        let code: u16 = String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0);
        if code != 503 {
            return (code, attempt);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{url} stayed busy");
}

struct Measured {
    wall: Duration,
    peak_growth_mib: f64,
    requests: u32,
}

fn big_file(env: &[(&str, &str)], content: &[u8]) -> Measured {
    let h = server(env);
    let commit = fill(&h, "big", &[("big.txt", content)]);
    let base = h.http_url();
    fetch(&format!("{base}/big/-/tree/main"));
    let before = peak_mib(h.pid());
    let started = Instant::now();
    let clients: Vec<_> = (0..20)
        .map(|_| {
            let base = base.clone();
            let commit = commit.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                for path in [
                    "/big/-/raw/main/big.txt".to_string(),
                    format!("/big/-/commit/{commit}"),
                    "/big/-/blob/main/big.txt".to_string(),
                ] {
                    let (code, tries) = fetch(&format!("{base}{path}"));
                    assert_eq!(code, 200, "{path}");
                    n += tries;
                }
                n
            })
        })
        .collect();
    let requests = clients.into_iter().map(|c| c.join().unwrap()).sum();
    Measured {
        wall: started.elapsed(),
        peak_growth_mib: peak_mib(h.pid()) - before,
        requests,
    }
}

fn gzip_bomb(env: &[(&str, &str)]) -> (Measured, String) {
    let h = server(env);
    let commit = fill(&h, "r", &[("f.txt", b"x\n")]);
    let bomb = h.temp_dir().join("bomb.gz");
    let made = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "yes '0032want {commit}' | head -c 536870912 | gzip -1 > '{}'",
            bomb.display()
        ))
        .status()
        .unwrap();
    assert!(made.success());
    let url = format!("{}/r.git/git-upload-pack", h.http_url());
    let before = peak_mib(h.pid());
    let started = Instant::now();
    let posts: Vec<_> = (0..5)
        .map(|_| {
            let url = url.clone();
            let bomb = bomb.clone();
            std::thread::spawn(move || {
                let out = Command::new("curl")
                    .args([
                        "-s",
                        "-o",
                        "/dev/null",
                        "--max-time",
                        "300",
                        "-w",
                        "%{http_code}",
                    ])
                    .args(["-H", "Content-Type: application/x-git-upload-pack-request"])
                    .args(["-H", "Content-Encoding: gzip", "--data-binary"])
                    .arg(format!("@{}", bomb.display()))
                    .arg(&url)
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout).to_string()
            })
        })
        .collect();
    let mut codes: Vec<String> = posts.into_iter().map(|p| p.join().unwrap()).collect();
    codes.sort();
    codes.dedup();
    (
        Measured {
            wall: started.elapsed(),
            peak_growth_mib: peak_mib(h.pid()) - before,
            requests: 5,
        },
        codes.join("/"),
    )
}

/// Connections of 300 slowloris clients still open after 15 s.
fn slowloris(env: &[(&str, &str)]) -> usize {
    let h = server(env);
    let to = h.http_addr;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let from = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let tasks: Vec<_> = (0..300)
            .map(|_| {
                tokio::spawn(async move {
                    let socket = tokio::net::TcpSocket::new_v4().unwrap();
                    socket.bind(SocketAddr::new(from, 0)).unwrap();
                    let Ok(mut s) = socket.connect(to).await else {
                        return false;
                    };
                    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await;
                    let started = Instant::now();
                    let mut buf = [0u8; 512];
                    let mut tick = tokio::time::interval(Duration::from_secs(1));
                    while started.elapsed() < Duration::from_secs(15) {
                        tokio::select! {
                            r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return false },
                            _ = tick.tick() => if s.write_all(b"X-a: b\r\n").await.is_err() { return false },
                        }
                    }
                    true
                })
            })
            .collect();
        let mut held = 0;
        for t in tasks {
            held += usize::from(t.await.unwrap());
        }
        held
    })
}

fn main() {
    let unlimited_pages: &[(&str, &str)] = &[
        ("GIT_COLLAB_HTTP__MAX_FILE_SHOWN", "1GiB"),
        ("GIT_COLLAB_HTTP__MAX_CONCURRENT_PAGES", "100000"),
        ("GIT_COLLAB_GIT__MAX_PROCESSES", "100000"),
        ("GIT_COLLAB_GIT__MAX_PROCESSES_PER_PRINCIPAL", "100000"),
    ];
    let content = big_text(FILE_SIZE);
    let limited = big_file(&[], &content);
    let open = big_file(unlimited_pages, &content);
    let (bomb_limited, codes_limited) = gzip_bomb(&[]);
    let (bomb_open, codes_open) = gzip_bomb(&[("GIT_COLLAB_HTTP__MAX_REQUEST_BODY", "1GiB")]);
    let held_limited = slowloris(&[]);
    let held_open = slowloris(&[
        ("GIT_COLLAB_HTTP__HEADER_READ_TIMEOUT", "1h"),
        ("GIT_COLLAB_HTTP__MAX_CONNECTIONS_PER_IP", "100000"),
        ("GIT_COLLAB_HTTP__MAX_CONNECTIONS", "100000"),
    ]);

    let ratio = |a: f64, b: f64| {
        if b > 0.0 {
            format!("{:.2}", a / b)
        } else {
            "-".into()
        }
    };
    let table = format!(
        "| attack | measure | default limits | limits opened (baseline) | ratio (default / baseline) |\n\
         |---|---|---:|---:|---:|\n\
         | 20 clients: 60 MiB raw + commit page + blob page | server peak RSS growth | {:.0} MiB | {:.0} MiB | {} |\n\
         | | wall time (requests incl. 503 retries) | {} ({}) | {} ({}) | {} |\n\
         | 5 gzip bombs (512 MiB inflated each) | answers | {codes_limited} | {codes_open} | |\n\
         | | time until all answered | {} | {} | {} |\n\
         | | server peak RSS growth | {:.0} MiB | {:.0} MiB | |\n\
         | 300 slowloris connections, one address | still held after 15 s | {held_limited} | {held_open} | {} |\n",
        limited.peak_growth_mib,
        open.peak_growth_mib,
        ratio(limited.peak_growth_mib, open.peak_growth_mib),
        fmt(limited.wall),
        limited.requests,
        fmt(open.wall),
        open.requests,
        ratio(limited.wall.as_secs_f64(), open.wall.as_secs_f64()),
        fmt(bomb_limited.wall),
        fmt(bomb_open.wall),
        ratio(bomb_limited.wall.as_secs_f64(), bomb_open.wall.as_secs_f64()),
        bomb_limited.peak_growth_mib,
        bomb_open.peak_growth_mib,
        ratio(held_limited as f64, held_open as f64),
    );
    println!("{table}");
    if let Ok(path) = std::env::var("GIT_COLLAB_BENCH_DOCS") {
        let section = format!(
            "## Resource limits under attack\n\n\
             Measured by `benches/limits.rs` \
             (`GIT_COLLAB_BENCH_DOCS=docs/benchmarks.md cargo bench --bench limits`), release build, \
             loopback, 2 CPUs shared with other work. Each attack runs against a fresh server with the \
             default limits, then against the same binary with the limits opened up by configuration \
             (files read and diffed whole, no page or process caps, a 1 GiB request body, a 1 h header \
             timeout): the baseline, close to the server before the limits existed. Peak RSS growth is \
             the server's VmHWM after the attack minus before it (git children not included). \
             See [security.md](security.md#limits) for the limits.\n\n{table}"
        );
        write_section(Path::new(&path), &section);
    }
}
