//! Benchmark: materializing every issue of a large repository.
//!
//! Builds a bare repository with `BENCH_ISSUES` issues (default 10,000) of
//! `BENCH_EVENTS` events each (default 10: one open, then comments, labels
//! and a close), written straight through the `store` API into an in-memory
//! object backend and then one pack (as a repository looks after `git gc`).
//! Then times, each as the median of a few runs:
//! - the baseline `git for-each-ref refs/collab/issues`;
//! - `state::list_issues` in process (what the web UI calls), with a cold
//!   and a warm replay cache;
//! - `git-collab issue list --all --json` (the CLI, end to end), likewise;
//! - `verify::verify`, which always replays and verifies everything;
//! - `IssueState::from_ref` of one issue (an issue page).
//!
//! Prints a markdown table; with `GIT_COLLAB_BENCH_DOCS=docs/benchmarks.md`
//! it also replaces that file's "## Issue list" section with the results.
//! Run: `cargo bench --bench issue_list` (release profile).

use collab_testkit::bench as support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use collab_record::sign::SigningKey;
use collab_record::{cache, refs, state};
use git2::Repository;
use support::{build, env_usize, fmt, git, median, write_section};

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        last = Some(f());
        times.push(start.elapsed());
    }
    (median(times), last.expect("at least one run"))
}

fn main() {
    let issues = env_usize("BENCH_ISSUES", 10_000);
    let events = env_usize("BENCH_EVENTS", 10).max(1);
    let runs = env_usize("BENCH_RUNS", 3).max(1);
    let tmp = tempfile::tempdir().unwrap();
    let key = SigningKey::generate(&tmp.path().join("key"), "bench", false).unwrap();
    let git_dir = tmp.path().join("bench.git");
    let repo = Repository::init_bare(&git_dir).unwrap();

    eprintln!("building {issues} issues x {events} events ...");
    let start = Instant::now();
    build(&repo, &key, issues, events);
    git(&git_dir, &["pack-refs", "--all"]);
    let build_time = start.elapsed();
    eprintln!("built in {}", fmt(build_time));

    let (t_refs, out) = time(runs.max(5), || {
        git(&git_dir, &["for-each-ref", refs::ISSUES_GLOB])
    });
    assert_eq!(out.stdout.iter().filter(|&&b| b == b'\n').count(), issues);

    let repo = Repository::open(&git_dir).unwrap();
    let cache_file = cache::cache_path(&repo);
    let drop_cache = || {
        let _ = std::fs::remove_file(&cache_file);
    };
    let (t_list_cold, listed) = time(runs, || {
        drop_cache();
        state::list_issues(&repo).unwrap()
    });
    assert_eq!(listed.len(), issues);
    let (t_list_warm, warm) = time(runs, || state::list_issues(&repo).unwrap());
    assert_eq!(warm, listed, "the cache returns what replay computed");

    let cli = collab_testkit::cli_bin();
    let list_cli = || {
        let out = Command::new(cli)
            .args(["issue", "list", "--all", "--json"])
            .env("GIT_DIR", &git_dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let (t_cli_cold, out) = time(runs, || {
        drop_cache();
        list_cli()
    });
    let rows: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), issues);
    let (t_cli_warm, warm_out) = time(runs, list_cli);
    assert_eq!(warm_out, out);
    let (t_verify, report) = time(1, || collab_record::verify::verify(&repo).unwrap());
    assert!(report.ok);

    let one = &listed[issues / 2].id;
    let show = |id: &str| {
        let (name, id) = state::resolve_issue_ref(&repo, id).unwrap();
        state::IssueState::from_ref(&repo, &name, &id).unwrap()
    };
    let (t_show, shown) = time(runs.max(20), || show(one));
    assert_eq!(&shown.id, one);
    let (t_show_prefix, shown) = time(runs.max(20), || show(&one[..8]));
    assert_eq!(&shown.id, one);

    let per = |d: Duration| format!("{:.1} µs", d.as_secs_f64() * 1e6 / issues as f64);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let table = format!(
        "{issues} issues x {events} events ({} event commits), one pack, packed refs; \
         median of {runs} runs (5 for for-each-ref, 20 for one issue); release build; \
         {cpu}, {cores} cores available (shared with other jobs).\n\n\
         | operation | time | per issue |\n\
         |---|---:|---:|\n\
         | baseline: `git for-each-ref refs/collab/issues/*` | {} | {} |\n\
         | `state::list_issues`, cold cache (every signature verified) | {} | {} |\n\
         | `state::list_issues`, warm cache (no ref moved) | {} | {} |\n\
         | `git-collab issue list --all --json`, cold cache (CLI, end to end) | {} | {} |\n\
         | `git-collab issue list --all --json`, warm cache | {} | {} |\n\
         | `git-collab verify` equivalent (`verify::verify`, never cached; 1 run) | {} | {} |\n\
         | `resolve_issue_ref` + `IssueState::from_ref`, one issue by full id | {} | - |\n\
         | the same by an 8-hex prefix (scans the issue refs) | {} | - |\n\
         | building the repository (not a measurement of git-collab) | {} | {} |\n",
        issues * events,
        fmt(t_refs),
        per(t_refs),
        fmt(t_list_cold),
        per(t_list_cold),
        fmt(t_list_warm),
        per(t_list_warm),
        fmt(t_cli_cold),
        per(t_cli_cold),
        fmt(t_cli_warm),
        per(t_cli_warm),
        fmt(t_verify),
        per(t_verify),
        fmt(t_show),
        fmt(t_show_prefix),
        fmt(build_time),
        per(build_time),
    );
    println!("{table}");

    if let Ok(path) = std::env::var("GIT_COLLAB_BENCH_DOCS") {
        write_section(Path::new(&path), &section(&table));
    }
}

/// The "## Issue list" section of docs/benchmarks.md around `table`.
fn section(table: &str) -> String {
    format!(
        "## Issue list\n\nMeasured by `benches/issue_list.rs` \
         (`GIT_COLLAB_BENCH_DOCS=docs/benchmarks.md cargo bench --bench issue_list`; \
         `BENCH_ISSUES`, `BENCH_EVENTS` and `BENCH_RUNS` override the counts).\n\n{table}\n\
         A cold listing verifies one Ed25519 signature per event and re-checks that each \
         `event.json` is canonical, on as many threads as there are cores; that is the \
         price of a record anyone can check. The replay cache \
         (`$GIT_DIR/collab/cache/issues-v1.json`, keyed by each issue ref's tip and the \
         allowlist) then limits the work to the issues whose ref moved, so a warm listing \
         costs about reading the cache file. The machine was shared with other builds \
         while measuring, so absolute times are noisy.\n"
    )
}
