//! Stacks (issue 48, item 2): a `git push origin HEAD:refs/for/main` of 10
//! commits each carrying a `Change-Id:` trailer (opens 10 patches, each on
//! the one below, in one transaction) against the same push of 10 commits
//! without change ids (opens one patch for the tip), over SSH with the real
//! `git`. Interleaved, so both rows see the same machine.
//!
//! Run: `cargo bench --bench review_stack` (release build). `BENCH_RUNS`
//! (default 20) pushes per row, `BENCH_DEPTH` (default 10) commits per
//! push. Writes docs/benchmarks.md under "## Stacks".
use collab_testkit::bench as support;

use std::path::{Path, PathBuf};
use std::process::Command;

use collab_testkit::ServerHarness;
use support::{env_usize, fmt, median, run_ok, timed, write_section};

const SECTION: &str = "## Stacks";

fn clone(h: &ServerHarness, repo: &str, dir: &str) -> PathBuf {
    let key = h.ssh_client_key();
    h.clone_as(&key, repo, dir)
}

fn git(h: &ServerHarness, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = h.git_command(&h.ssh_client_key(), dir);
    cmd.args(args);
    cmd
}

/// `depth` new commits on a fresh branch off `origin/main`, each changing
/// one small file; with change ids numbered from `first` when `stacked`.
fn commits(h: &ServerHarness, dir: &Path, run: usize, depth: usize, stacked: bool) {
    run_ok(&mut git(
        h,
        dir,
        &["checkout", "-q", "-B", &format!("run-{run}"), "origin/main"],
    ));
    for k in 0..depth {
        std::fs::write(
            dir.join(format!("f{k}.txt")),
            format!("run {run} change {k}\n"),
        )
        .unwrap();
        run_ok(&mut git(h, dir, &["add", "-A"]));
        let mut message = format!("Change {run}.{k}");
        if stacked {
            message.push_str(&format!("\n\nChange-Id: I{:040x}", run * 1000 + k + 1));
        }
        run_ok(&mut git(h, dir, &["commit", "-q", "-m", &message]));
    }
}

fn main() {
    let runs = env_usize("BENCH_RUNS", 20).max(1);
    let depth = env_usize("BENCH_DEPTH", 10).max(1);
    let h = ServerHarness::start();
    for name in ["plain", "stack"] {
        h.create_repo(name);
        let seed = clone(&h, name, &format!("seed-{name}"));
        h.commit_file(&seed, "README", b"hello\n", "Initial commit");
        h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    }
    let plain_dir = clone(&h, "plain", "plain");
    let stack_dir = clone(&h, "stack", "stack");
    let push = |dir: &Path, run: usize, stacked: bool| {
        commits(&h, dir, run, depth, stacked);
        timed(&mut git(
            &h,
            dir,
            &["push", "-q", "origin", "HEAD:refs/for/main"],
        ))
    };
    push(&plain_dir, 10_000, false);
    push(&stack_dir, 10_000, true);
    let (mut plain_samples, mut stack_samples) = (Vec::new(), Vec::new());
    for run in 0..runs {
        plain_samples.push(push(&plain_dir, run, false));
        stack_samples.push(push(&stack_dir, run, true));
    }
    let (plain, stack) = (median(plain_samples), median(stack_samples));
    let list = |repo: &str| -> usize {
        let conn = rusqlite::Connection::open(h.repos_dir().join("collab.db")).unwrap();
        conn.query_row(
            "SELECT COUNT(*) FROM patches WHERE repo = ?1",
            [format!("{repo}.git")],
            |r| r.get::<_, i64>(0),
        )
        .unwrap() as usize
    };
    let (plain_patches, stack_patches) = (list("plain"), list("stack"));
    assert_eq!(plain_patches, runs + 1);
    assert_eq!(stack_patches, (runs + 1) * depth);
    let section = format!(
        "{SECTION}\n\n\
         `cargo bench --bench review_stack` ({build}), one run on {date}, {cores} CPUs \
         shared with other work, loopback, OpenSSH client, real `git push`. Medians of {runs} \
         pushes per row, interleaved; each push sends {depth} new commits (one small file each) \
         off `main` to `refs/for/main` over a fresh SSH connection, timed from `git push` \
         starting to it exiting (the hooks included).\n\n\
         | push of {depth} commits to `refs/for/main` | median | vs baseline | target |\n\
         |---|---:|---:|---|\n\
         | baseline: no change ids (one patch for the tip) | {} | 1.00x | |\n\
         | each with a `Change-Id:` trailer ({depth} patches, each on the one below, one transaction) | {} | {:.2}x | ≤ 1.5x |\n\n\
         Patches when the run ended: {plain_patches} and {stack_patches}.\n",
        fmt(plain),
        fmt(stack),
        stack.as_secs_f64() / plain.as_secs_f64(),
        build = if cfg!(debug_assertions) {
            "`--profile dev`: debug builds of the bench and the server"
        } else {
            "release build"
        },
        date = chrono::Utc::now().format("%Y-%m-%d"),
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
    );
    println!("{section}");
    write_section(
        &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md"),
        &section,
    );
}
