//! Benchmark: the web log and summary pages of a big history against
//! `git log` on the same repository.
//!
//! Builds a linear history of `BENCH_COMMITS` commits (default 20,000)
//! with `git fast-import` in a public repository of a real
//! `git-collab-server` (release build), then times, each against the
//! `git log` that lists the same commits:
//! - `GET /big/-/log/main` (page 1) against `git log -50 main`;
//! - a deep page, `?page=N` skipping half the history, against
//!   `git log -50 --skip=<same> main`;
//! - `GET /big` (the summary: README lookup, branches, 10 commits)
//!   against `git log -50 main`;
//!
//! twice: as fast-import leaves the repository (one pack, no
//! commit-graph), then after `git commit-graph write --reachable --split`
//! (what maintenance writes). Each request is timed from connect to the
//! last byte (HTTP/1.0 over loopback), each `git log` from spawn to exit.
//! Prints a markdown table; with `GIT_COLLAB_BENCH_DOCS=docs/benchmarks.md`
//! it also replaces that file's "## Web log on a big history" section.
//! Run: `cargo bench --bench web_log`.

use collab_testkit::bench as support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{env_usize, fmt, git, median, write_section, HttpServer};

/// `git log <args>` on `git_dir`, timed from spawn to exit.
fn git_log(git_dir: &Path, args: &[&str]) -> Duration {
    let start = Instant::now();
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .arg("log")
        .args(args)
        .output()
        .unwrap();
    let elapsed = start.elapsed();
    assert!(out.status.success());
    elapsed
}

struct Row {
    what: String,
    time: Duration,
    baseline: Duration,
    baseline_name: String,
}

fn measure(server: &HttpServer, git_dir: &Path, commits: usize, runs: usize) -> Vec<Row> {
    let deep_page = commits / 2 / 50 + 1;
    let skip = (deep_page - 1) * 50;
    let newest = format!("Commit number {commits}");
    let deep_first = format!("Commit number {}", commits - skip);
    // Warm the page cache and the server once.
    server.page("/big/-/log/main", &newest);
    git_log(git_dir, &["-50", "main"]);
    let sample = |f: &dyn Fn() -> Duration| median((0..runs).map(|_| f()).collect());
    let log50 = sample(&|| git_log(git_dir, &["-50", "main"]));
    let skip_arg = format!("--skip={skip}");
    let log_skip = sample(&|| git_log(git_dir, &["-50", &skip_arg, "main"]));
    let page1 = sample(&|| server.page("/big/-/log/main", &newest));
    let deep_url = format!("/big/-/log/main?page={deep_page}");
    let deep = sample(&|| server.page(&deep_url, &deep_first));
    let summary = sample(&|| server.page("/big", &newest));
    vec![
        Row {
            what: "log page 1 (`/big/-/log/main`)".into(),
            time: page1,
            baseline: log50,
            baseline_name: "`git log -50 main`".into(),
        },
        Row {
            what: format!("log page {deep_page} (`?page={deep_page}`, {skip} commits skipped)"),
            time: deep,
            baseline: log_skip,
            baseline_name: format!("`git log -50 --skip={skip} main`"),
        },
        Row {
            what: "summary page (`/big`)".into(),
            time: summary,
            baseline: log50,
            baseline_name: "`git log -50 main`".into(),
        },
    ]
}

fn main() {
    let commits = env_usize("BENCH_COMMITS", 20_000).max(200);
    let runs = env_usize("BENCH_RUNS", 15).max(1);
    let tmp = tempfile::tempdir().unwrap();
    let state_dir = tmp.path().join("state");
    let git_dir = state_dir.join("repos").join("big.git");
    std::fs::create_dir_all(&git_dir).unwrap();
    git(&git_dir, &["init", "-q", "--bare", "-b", "main"]);
    std::fs::write(git_dir.join("collab-policy.toml"), "public = true\n").unwrap();
    eprintln!("building {commits} commits with git fast-import ...");
    let start = Instant::now();
    collab_testkit::synthetic_history(&git_dir, "main", commits);
    eprintln!("built in {}", fmt(start.elapsed()));

    let server = HttpServer::start(&state_dir);
    let plain = measure(&server, &git_dir, commits, runs);
    git(
        &git_dir,
        &["commit-graph", "write", "--reachable", "--split"],
    );
    let graph = measure(&server, &git_dir, commits, runs);
    drop(server);

    let cpu = support::cpu_name();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let profile = if cfg!(debug_assertions) {
        "an unoptimized dev build (`--profile dev`): a release build is faster"
    } else {
        "release build"
    };
    let mut table = format!(
        "A linear history of {commits} commits (`git fast-import`, one pack) in a public \
         repository of a running `git-collab-server` ({profile}); each page timed from \
         connect to last byte over loopback HTTP/1.0, each `git log` from spawn to exit \
         (`--git-dir`, output to a pipe); median of {runs} runs; {cpu}, {cores} cores \
         available (shared with other jobs). The ratio is the page's time over the `git log` \
         that lists the same commits, measured in the same run.\n\n\
         | repository | page | time | baseline | baseline time | ratio |\n\
         |---|---|---:|---|---:|---:|\n"
    );
    for (label, rows) in [
        ("no commit-graph", &plain),
        ("split commit-graph (as maintenance writes)", &graph),
    ] {
        for r in rows {
            table.push_str(&format!(
                "| {label} | {} | {} | {} | {} | {:.1}x |\n",
                r.what,
                fmt(r.time),
                r.baseline_name,
                fmt(r.baseline),
                r.time.as_secs_f64() / r.baseline.as_secs_f64()
            ));
        }
    }
    println!("{table}");
    if let Ok(path) = std::env::var("GIT_COLLAB_BENCH_DOCS") {
        let section = format!(
            "## Web log on a big history\n\nMeasured by `benches/web_log.rs` \
             (`GIT_COLLAB_BENCH_DOCS=docs/benchmarks.md cargo bench --bench web_log`).\n\n\
             {table}"
        );
        write_section(Path::new(&path), &section);
    }
}
