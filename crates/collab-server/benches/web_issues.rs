//! Benchmark: the web issues page of a repository with many issues.
//!
//! Builds a bare repository with `BENCH_ISSUES` issues (default 10,000) of
//! `BENCH_EVENTS` events each (default 10), written through the `store` API
//! into one pack with packed refs (as `benches/issue_list.rs` does), inside
//! the state directory of a real `git-collab-server` (release build), made
//! public. Then times, against `git for-each-ref refs/collab/issues` on the
//! same repository:
//! - the first start: the server imports the DAGs into `collab.db`; from
//!   spawning it to the first `GET /big/-/issues` that lists them all;
//! - `GET /big/-/issues` as the first request of a restarted server;
//! - warm: the same page again, a page in the middle of the list, and one
//!   issue page.
//!
//! Each request is timed from connect to the last byte of the answer
//! (HTTP/1.0 over loopback). Prints a markdown table; with
//! `GIT_COLLAB_BENCH_DOCS=docs/benchmarks.md` it also replaces that file's
//! "## Web issues page" section. Run: `cargo bench --bench web_issues`.

use collab_testkit::bench as support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use collab_record::refs;
use collab_record::sign::SigningKey;
use git2::Repository;
use support::{build, env_usize, fmt, git, median, write_section, HttpServer};

fn main() {
    let issues = env_usize("BENCH_ISSUES", 10_000);
    let events = env_usize("BENCH_EVENTS", 10).max(1);
    let runs = env_usize("BENCH_RUNS", 3).max(1);
    let tmp = tempfile::tempdir().unwrap();
    let state_dir = tmp.path().join("state");
    let git_dir: PathBuf = state_dir.join("repos").join("big.git");
    std::fs::create_dir_all(&git_dir).unwrap();
    let key = SigningKey::generate(&tmp.path().join("key"), "bench", false).unwrap();
    let repo = Repository::init_bare(&git_dir).unwrap();
    std::fs::write(git_dir.join("collab-policy.toml"), "public = true\n").unwrap();

    eprintln!("building {issues} issues x {events} events ...");
    let start = Instant::now();
    build(&repo, &key, issues, events);
    git(&git_dir, &["pack-refs", "--all"]);
    drop(repo);
    eprintln!("built in {}", fmt(start.elapsed()));

    let mut times = Vec::new();
    for _ in 0..runs.max(5) {
        let start = Instant::now();
        let out = git(&git_dir, &["for-each-ref", refs::ISSUES_GLOB]);
        times.push(start.elapsed());
        assert_eq!(out.stdout.iter().filter(|&&b| b == b'\n').count(), issues);
    }
    let t_refs = median(times);

    let open_count = format!("{} open", issues - issues.div_ceil(2));
    let list = "/big/-/issues";

    // First start: the server imports the repository's DAGs into
    // collab.db (every event verified); timed from spawning the server to
    // the first page that lists them all.
    let first = {
        let start = Instant::now();
        let server = HttpServer::start(&state_dir);
        loop {
            let (status, body, _) = server.get(list);
            if status == 200 && body.contains(&open_count) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(1800),
                "the import never finished"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        start.elapsed()
    };

    // Right after a restart: a new process, the issues in collab.db.
    let mut restarted = Vec::new();
    for _ in 0..runs.max(5) {
        let server = HttpServer::start(&state_dir);
        restarted.push(server.page(list, &open_count));
    }
    let t_restart = median(restarted);

    // Warm: one process, repeated requests.
    let server = HttpServer::start(&state_dir);
    server.page(list, &open_count);
    let warm_runs = runs.max(20);
    let t_warm = median(
        (0..warm_runs)
            .map(|_| server.page(list, &open_count))
            .collect(),
    );
    // A page in the middle of the whole list (page 100 of 200 for 10,000).
    let middle = (issues / 50 / 2).max(1);
    let t_middle = median(
        (0..warm_runs)
            .map(|_| {
                server.page(
                    &format!("{list}?state=all&page={middle}"),
                    &format!("page {middle}"),
                )
            })
            .collect(),
    );
    let one_ref = git(
        &git_dir,
        &[
            "for-each-ref",
            "--count=1",
            "--format=%(refname)",
            refs::ISSUES_GLOB,
        ],
    );
    let one_ref = String::from_utf8(one_ref.stdout)
        .unwrap()
        .trim()
        .to_string();
    let one_id = refs::issue_id_of(&one_ref).unwrap().to_string();
    let detail = format!("{list}/{}", &one_id[..8]);
    let t_detail = median(
        (0..warm_runs)
            .map(|_| server.page(&detail, "Body of issue"))
            .collect(),
    );
    drop(server);

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
    let ratio = |d: Duration| format!("{:.1}x", d.as_secs_f64() / t_refs.as_secs_f64());
    let table = format!(
        "{issues} issues x {events} events, one pack, packed refs, in a public repository of a \
         running `git-collab-server` (release build); since issue 13 the server imports the \
         DAGs into `collab.db` once and the pages read the database. Each page timed from \
         connect to last byte over loopback HTTP/1.0; median of {restart_runs} restarts \
         ({warm_runs} for warm pages, 5 for for-each-ref); {cpu}, {cores} cores available \
         (shared with other jobs). The list shows 50 issues a page; the \"vs\" column is the \
         time over `git for-each-ref`'s on the same refs (target for the page right after a \
         restart: ≤ 1x).\n\n\
         | operation | time | per issue | vs for-each-ref |\n\
         |---|---:|---:|---:|\n\
         | baseline: `git for-each-ref refs/collab/issues/*` | {} | {} | 1.0x |\n\
         | first start: import of every DAG, then the issues page (once) | {} | {} | {} |\n\
         | issues page right after a restart (first request of a new process) | {} | {} | {} |\n\
         | issues page, warm | {} | {} | {} |\n\
         | issues page {middle} of all (`?state=all&page={middle}`), warm | {} | {} | {} |\n\
         | one issue page (`/-/issues/<prefix>`), warm | {} | - | {} |\n",
        fmt(t_refs),
        per(t_refs),
        fmt(first),
        per(first),
        ratio(first),
        fmt(t_restart),
        per(t_restart),
        ratio(t_restart),
        fmt(t_warm),
        per(t_warm),
        ratio(t_warm),
        fmt(t_middle),
        per(t_middle),
        ratio(t_middle),
        fmt(t_detail),
        ratio(t_detail),
        restart_runs = runs.max(5),
    );
    println!("{table}");

    if let Ok(path) = std::env::var("GIT_COLLAB_BENCH_DOCS") {
        let section = format!(
            "## Web issues page\n\nMeasured by `benches/web_issues.rs` \
             (`GIT_COLLAB_BENCH_DOCS=docs/benchmarks.md cargo bench --bench web_issues`).\n\n\
             {table}"
        );
        write_section(Path::new(&path), &section);
    }
}
