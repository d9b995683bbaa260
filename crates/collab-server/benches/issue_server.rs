//! Issues on the server, over SSH, as clients see them: what one
//! `git collab issue comment` costs against a bare `collab-whoami` round
//! trip; `collab-issue list` of one page over 10,000 issues; the fleet
//! scenario (16 clones with their own keys commenting on one issue at
//! once, 3 rounds); and `git-collab-server import` of 10,000 issues x 10
//! events against replaying the same DAGs in process.
//!
//! Run: `cargo bench --bench issue_server` (release build).
//! `BENCH_RTT_RUNS` (default 30) round trips per row, `BENCH_ISSUES`
//! (default 10000) issues for the list and import rows, `BENCH_EVENTS`
//! (default 10) events per imported issue. Writes docs/benchmarks.md
//! under "## Issues on the server".
use collab_testkit::bench as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use collab_record::sign::SigningKey;
use collab_store::issues::{self, NewIssue, Person, WriteCtx};
use collab_testkit::ServerHarness;
use support::{env_usize, fmt, median, timed, write_section};

const SECTION: &str = "## Issues on the server";

const SERVER: &str = env!("CARGO_BIN_EXE_git-collab-server");
const AGENTS: usize = 16;
const ROUNDS: usize = 3;

fn ssh(h: &ServerHarness, key: &Path, remote_cmd: &str) -> Command {
    let mut cmd = Command::new("ssh");
    cmd.args(h.ssh_options(key))
        .arg("git@127.0.0.1")
        .arg(remote_cmd)
        .stdin(Stdio::null());
    cmd
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `runs` samples of `make()` after one warm-up; the median.
fn sample(runs: usize, mut make: impl FnMut(usize) -> Command) -> Duration {
    timed(&mut make(runs));
    median((0..runs).map(|i| timed(&mut make(i))).collect())
}

/// Inserts `count` issues into `repo` directly in the stopped server's
/// collab.db (one transaction), as a busy repository would hold them.
fn seed(db_path: &Path, repo: &str, count: usize) {
    let conn = collab_store::leases::open(db_path).unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    let who = Person {
        principal: "SHA256:seed".into(),
        name: "seed".into(),
        key: None,
    };
    let base = 1_800_000_000;
    for i in 0..count {
        let w = WriteCtx {
            repo,
            actor: &who,
            fence: None,
            max_body: 1 << 18,
            now: base + i as i64,
        };
        let new = NewIssue {
            title: format!("Issue number {i}"),
            body: format!("Body of issue {i}."),
            labels: vec!["bench".into(), format!("l{}", i % 7)],
        };
        let written = issues::open(&tx, &w, &new).unwrap();
        if i % 2 == 0 {
            issues::close(&tx, &w, &written.issue, None).unwrap();
        }
    }
    tx.commit().unwrap();
}

struct Fleet {
    latencies: Vec<Duration>,
    failures: Vec<String>,
    wall: Duration,
}

/// 16 clones, each with its own authorized key, comment on `id` at once,
/// `ROUNDS` times; every command's latency and every failure.
fn fleet(h: &ServerHarness, repo: &str, id: &str) -> Fleet {
    let agents: Vec<(String, PathBuf, PathBuf)> = (0..AGENTS)
        .map(|i| {
            let name = format!("agent{i:02}");
            let key = h.authorized_key(&name);
            let clone = h.clone_as(&key, repo, &name);
            (name, key, clone)
        })
        .collect();
    let mut result = Fleet {
        latencies: Vec::new(),
        failures: Vec::new(),
        wall: Duration::ZERO,
    };
    let start = Instant::now();
    for round in 0..ROUNDS {
        let barrier = Arc::new(Barrier::new(AGENTS));
        let outcomes: Vec<(Duration, Output)> = std::thread::scope(|scope| {
            let handles: Vec<_> = agents
                .iter()
                .map(|(name, key, clone)| {
                    let barrier = barrier.clone();
                    scope.spawn(move || {
                        let mut cmd = h.client_command(collab_testkit::cli_bin(), key, clone);
                        cmd.args(["issue", "comment", &id[..8], "-m"])
                            .arg(format!("{name} round {round}"))
                            .stdin(Stdio::null());
                        barrier.wait();
                        let sent = Instant::now();
                        let out = cmd.output().unwrap();
                        (sent.elapsed(), out)
                    })
                })
                .collect();
            handles.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for (took, out) in outcomes {
            result.latencies.push(took);
            if !out.status.success() {
                result
                    .failures
                    .push(String::from_utf8_lossy(&out.stderr).trim().to_string());
            }
        }
    }
    result.wall = start.elapsed();
    result.latencies.sort_unstable();
    result
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let last = sorted.len().saturating_sub(1);
    sorted[((last as f64) * p).round() as usize]
}

/// `git-collab-server import` of a repository of `issues` x `events`
/// against `state::list_issues` replaying the same DAGs in process (every
/// signature verified, no cache): `None` when this server has no importer.
fn import(
    h: &mut ServerHarness,
    issues: usize,
    events: usize,
) -> Option<(Duration, Duration, String)> {
    let help = Command::new(SERVER)
        .args(["import", "--help"])
        .output()
        .ok()?;
    if !help.status.success() {
        eprintln!("import rows skipped: this git-collab-server has no `import`");
        return None;
    }
    h.create_repo("imported");
    h.stop();
    let bare = h.repos_dir().join("imported.git");
    let repo = git2::Repository::open_bare(&bare).unwrap();
    let key = SigningKey::generate(&h.temp_dir().join("import-signer"), "bench", false).unwrap();
    let built = Instant::now();
    support::build(&repo, &key, issues, events);
    support::git(&bare, &["pack-refs", "--all"]);
    eprintln!("built {issues} x {events} in {}", fmt(built.elapsed()));
    let replay = {
        let start = Instant::now();
        let states = collab_record::state::replay_all(&repo).unwrap();
        assert_eq!(states.len(), issues);
        start.elapsed()
    };
    let start = Instant::now();
    let out = Command::new(SERVER)
        .arg("--state-dir")
        .arg(h.state_dir())
        .args(["import", "imported", "--json"])
        .output()
        .unwrap();
    let took = start.elapsed();
    assert!(out.status.success(), "{out:?}");
    h.start_again();
    // The report, on one line for the table's note.
    let report = serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| {
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .replace('\n', " ")
        });
    Some((took, replay, report))
}

fn main() {
    let runs = env_usize("BENCH_RTT_RUNS", 30).max(1);
    let count = env_usize("BENCH_ISSUES", 10_000);
    let events = env_usize("BENCH_EVENTS", 10).max(1);
    let mut h = ServerHarness::start();
    let key = h.ssh_client_key();
    h.create_repo("bench");
    h.create_repo("big");

    // One issue in each repository through the verb, which also tells the
    // repository's name in the database.
    let opened = json(
        &ssh(&h, &key, "collab-issue open 'bench' --title 'Bench'")
            .output()
            .unwrap(),
    );
    let id = opened["issue"].as_str().unwrap().to_string();
    let big = json(
        &ssh(&h, &key, "collab-issue open 'big' --title 'Big'")
            .output()
            .unwrap(),
    );
    let big_repo = big["repo"].as_str().unwrap().to_string();
    h.stop();
    let seeded = Instant::now();
    seed(
        &h.repos_dir().join("collab.db"),
        &big_repo,
        count.saturating_sub(1),
    );
    eprintln!("seeded {count} issues in {}", fmt(seeded.elapsed()));
    // A restart listens on new ports: clone after it.
    h.start_again();
    let clone = h.clone_repo("bench", "work");

    // The CLI detects the mode once; the samples below run with it known.
    let cli = |args: &[&str]| {
        let mut cmd = h.client_command(collab_testkit::cli_bin(), &key, &clone);
        cmd.args(args).stdin(Stdio::null());
        cmd
    };
    timed(&mut cli(&["issue", "list"]));

    let whoami = sample(runs, |_| ssh(&h, &key, "collab-whoami"));
    let raw_comment = sample(runs, |i| {
        ssh(
            &h,
            &key,
            &format!("collab-issue comment 'bench' '{id}' --body 'raw {i}'"),
        )
    });
    let cli_comment = sample(runs, |i| {
        cli(&["issue", "comment", &id[..8], "-m", &format!("cli {i}")])
    });
    let cli_show = sample(runs, |_| cli(&["issue", "show", &id[..8]]));
    let list_page = sample(runs, |_| {
        ssh(&h, &key, "collab-issue list 'big' --limit 50")
    });
    let list_deep = {
        // A cursor half way down the open issues.
        let mut after = String::new();
        for _ in 0..(count / 4 / 50) {
            let cmd = if after.is_empty() {
                "collab-issue list 'big' --limit 50".to_string()
            } else {
                format!("collab-issue list 'big' --limit 50 --after '{after}'")
            };
            let page = json(&ssh(&h, &key, &cmd).output().unwrap());
            after = page["next"].as_str().unwrap_or_default().to_string();
        }
        sample(runs, |_| {
            ssh(
                &h,
                &key,
                &format!("collab-issue list 'big' --limit 50 --after '{after}'"),
            )
        })
    };

    let fleet = fleet(&h, "bench", &id);
    let imported = import(&mut h, count, events);

    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    let vs = |d: Duration| format!("{:.2}x", d.as_secs_f64() / whoami.as_secs_f64());
    let over = |d: Duration| ms(d.saturating_sub(whoami));
    let mut table = String::from(
        "| operation (fresh `ssh` each) | median | vs `collab-whoami` | above `collab-whoami` | target |\n\
         |---|---:|---:|---:|---|\n",
    );
    for (what, d, target) in [
        ("baseline: `ssh host collab-whoami`", whoami, ""),
        (
            "`ssh host collab-issue comment … --body …`",
            raw_comment,
            "",
        ),
        (
            "`git collab issue comment ID -m …` (the CLI, server mode)",
            cli_comment,
            "≤ 1.3x",
        ),
        (
            "`git collab issue show ID` (the CLI, server mode)",
            cli_show,
            "",
        ),
        (
            "`ssh host collab-issue list` first page (50 of the open issues)",
            list_page,
            "≤ 10 ms above",
        ),
        (
            "`ssh host collab-issue list --after …` half way down",
            list_deep,
            "≤ 10 ms above",
        ),
    ] {
        table.push_str(&format!(
            "| {what} | {} | {} | {} | {target} |\n",
            ms(d),
            vs(d),
            over(d)
        ));
    }
    let p50 = percentile(&fleet.latencies, 0.50);
    let p99 = percentile(&fleet.latencies, 0.99);
    let fleet_table = format!(
        "| fleet: {AGENTS} clones x {ROUNDS} rounds of `git collab issue comment` | value |\n\
         |---|---:|\n\
         | commands | {} |\n\
         | failures | {} |\n\
         | p50 latency | {} ({}) |\n\
         | p99 latency | {} ({}) |\n\
         | wall time, all rounds | {} |\n",
        fleet.latencies.len(),
        fleet.failures.len(),
        ms(p50),
        vs(p50),
        ms(p99),
        vs(p99),
        fmt(fleet.wall),
    );
    let import_table = match &imported {
        Some((took, replay, report)) => format!(
            "\n`git-collab-server import` of {count} issues x {events} events ({} event commits, \
             one pack), by hand on the stopped server, against replaying the same DAGs in \
             process (`state::replay_all`: every signature verified, no cache), which the \
             import has to do anyway:\n\n\
             | operation | time | per issue | vs replay |\n|---|---:|---:|---:|\n\
             | baseline: `state::replay_all` | {} | {:.0} µs | 1.00x |\n\
             | `git-collab-server import imported` | {} | {:.0} µs | {:.2}x |\n\n\
             Its report: `{}`\n",
            count * events,
            fmt(*replay),
            replay.as_secs_f64() * 1e6 / count.max(1) as f64,
            fmt(*took),
            took.as_secs_f64() * 1e6 / count.max(1) as f64,
            took.as_secs_f64() / replay.as_secs_f64(),
            report.chars().take(300).collect::<String>(),
        ),
        None => String::new(),
    };
    for f in fleet.failures.iter().take(5) {
        eprintln!("fleet failure: {f}");
    }
    let section = format!(
        "{SECTION}\n\n\
         `cargo bench --bench issue_server` (release build), one run on {}, {} CPUs shared \
         with other work, loopback, OpenSSH client. Medians of {runs} runs; every run is a \
         fresh `ssh` (or CLI) process that pays the TCP and SSH handshakes and public-key \
         authentication, as agents do. `collab-whoami` is the floor: the same handshakes and \
         one exec that does no work. The list rows run over {count} issues (half open, two \
         labels each) seeded into `collab.db`; \"above `collab-whoami`\" estimates the \
         server's own time (the in-process database time is in *Issue store*).\n\n{table}\n\
         The fleet scenario of issue 13 (before: 42 of 48 `comment && sync` failed, about \
         670 ms a write): {AGENTS} clones, each with its own SSH key, start `git collab issue \
         comment` together, {ROUNDS} rounds; latency is each CLI process from start to exit, \
         mode detection included on its first run.\n\n{fleet_table}{import_table}",
        chrono::Utc::now().format("%Y-%m-%d"),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
    );
    println!("{section}");
    write_section(
        &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md"),
        &section,
    );
}
