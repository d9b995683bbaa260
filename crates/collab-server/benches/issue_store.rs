//! Issues in the collab database, in process (no SSH): how many durable
//! comments per second the server can acknowledge, one transaction per
//! comment versus the group-commit writer with 64 concurrent writers; and
//! what one page of `collab-issue list` costs the database over 10,000
//! issues (the server time of that verb, without the SSH round trip).
//!
//! Run: `cargo bench --bench issue_store` (release build).
//! `ISSUE_BENCH_SECS` sets the seconds per write scenario (default 6),
//! `BENCH_ISSUES` the issues of the list scenario (default 10000). Writes
//! docs/benchmarks.md under "## Issue store".
use collab_testkit::bench as support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use collab_store::issues::{self, ListQuery, NewIssue, Person, StateFilter, WriteCtx};
use collab_store::leases;
use collab_store::writer::Writer;

const SECTION: &str = "## Issue store";
const REPO: &str = "bench.git";
/// The scenarios take turns in this many rounds (the disk is shared and
/// its speed drifts).
const ROUNDS: u32 = 6;
const WRITERS: usize = 64;
const MAX_BODY: usize = 256 * 1024;

fn actor(n: usize) -> Person {
    Person {
        principal: format!("SHA256:agent{n}"),
        name: format!("agent {n}"),
        key: None,
    }
}

struct Scenario {
    name: &'static str,
    /// `None`: one transaction per comment; `Some(n)`: n writers through the writer.
    writers: Option<usize>,
    db: PathBuf,
    ops: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    groups: u64,
}

impl Scenario {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        let last = self.latencies.len().saturating_sub(1);
        self.latencies
            .get(((last as f64) * p).round() as usize)
            .copied()
            .unwrap_or_default()
    }
}

/// One open issue per writer in a fresh database; returns their ids.
fn prepare(path: &Path, writers: usize) -> anyhow::Result<Vec<String>> {
    let conn = leases::open(path)?;
    let tx = conn.unchecked_transaction()?;
    let mut ids = Vec::new();
    for n in 0..writers {
        let who = actor(n);
        let w = WriteCtx {
            repo: REPO,
            actor: &who,
            fence: None,
            max_body: MAX_BODY,
            now: chrono::Utc::now().timestamp(),
        };
        let new = NewIssue {
            title: format!("Issue of writer {n}"),
            body: String::new(),
            labels: vec![],
        };
        ids.push(issues::open(&tx, &w, &new)?.issue);
    }
    tx.commit()?;
    Ok(ids)
}

/// (a) `issues::comment` in a loop, each in its own `BEGIN IMMEDIATE` ...
/// `COMMIT` with `synchronous=FULL`: one fsync per comment.
fn sequential(s: &mut Scenario, ids: &[String], slice: Duration) -> anyhow::Result<()> {
    let conn = leases::open(&s.db)?;
    let who = actor(0);
    let start = Instant::now();
    while start.elapsed() < slice {
        let sent = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let w = WriteCtx {
            repo: REPO,
            actor: &who,
            fence: None,
            max_body: MAX_BODY,
            now: chrono::Utc::now().timestamp(),
        };
        issues::comment(&conn, &w, &ids[0], &format!("comment {}", s.ops))?;
        conn.execute_batch("COMMIT")?;
        s.latencies.push(sent.elapsed());
        s.ops += 1;
    }
    s.elapsed += start.elapsed();
    Ok(())
}

/// (b) `writers` tasks commenting back to back, each on its own issue,
/// through the one writer (group commit); a comment counts once its reply
/// arrived, i.e. once it is durable.
async fn through_writer(
    s: &mut Scenario,
    ids: &[String],
    writers: usize,
    slice: Duration,
) -> anyhow::Result<()> {
    let service = Writer::open(&s.db)?;
    let start = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|n| {
            let service = service.clone();
            let id = ids[n].clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while start.elapsed() < slice {
                    let (id, body) = (id.clone(), format!("comment {}", latencies.len()));
                    let sent = Instant::now();
                    service
                        .write("bench comment", move |conn, now| {
                            let who = actor(n);
                            let w = WriteCtx {
                                repo: REPO,
                                actor: &who,
                                fence: None,
                                max_body: MAX_BODY,
                                now,
                            };
                            Ok(issues::comment(conn, &w, &id, &body)?)
                        })
                        .await?;
                    latencies.push(sent.elapsed());
                }
                anyhow::Ok(latencies)
            })
        })
        .collect();
    for task in tasks {
        let latencies = task.await??;
        s.ops += latencies.len() as u64;
        s.latencies.extend(latencies);
    }
    s.elapsed += start.elapsed();
    s.groups += service.stats().groups;
    Ok(())
}

/// Median time of one `issues::list` page (the verb's default 50, newest
/// first) over `count` issues, from the first page and from a cursor deep
/// in the list, on a read-only connection as the server's read pool uses.
fn list_page(dir: &Path, count: usize) -> anyhow::Result<(Duration, usize, Duration, Duration)> {
    let path = dir.join("list.db");
    {
        let conn = leases::open(&path)?;
        let tx = conn.unchecked_transaction()?;
        let who = actor(0);
        let base = 1_800_000_000;
        for i in 0..count {
            let w = WriteCtx {
                repo: REPO,
                actor: &who,
                fence: None,
                max_body: MAX_BODY,
                now: base + i as i64,
            };
            let new = NewIssue {
                title: format!("Issue number {i}"),
                body: format!("Body of issue {i}."),
                labels: vec!["bench".into(), format!("l{}", i % 7)],
            };
            let written = issues::open(&tx, &w, &new)?;
            if i % 2 == 0 {
                issues::close(&tx, &w, &written.issue, None)?;
            }
        }
        tx.commit()?;
    }
    let conn = collab_store::open_reader(&path)?;
    let query = |after| ListQuery {
        state: StateFilter::Open,
        limit: issues::DEFAULT_PAGE,
        after,
        ..ListQuery::default()
    };
    let time = |q: &ListQuery| -> anyhow::Result<Duration> {
        let mut samples = Vec::new();
        for _ in 0..101 {
            let start = Instant::now();
            let page = issues::list(&conn, REPO, q)?;
            samples.push(start.elapsed());
            anyhow::ensure!(!page.issues.is_empty());
        }
        Ok(support::median(samples))
    };
    let first = time(&query(None))?;
    // A cursor half way down the open issues.
    let skipped = count / 2 / 2 / issues::DEFAULT_PAGE;
    let mut after = None;
    for _ in 0..skipped {
        after = issues::list(&conn, REPO, &query(after))?.next;
    }
    let deep = time(&query(after))?;
    let labelled = time(&ListQuery {
        labels: vec!["l3".into()],
        ..query(None)
    })?;
    Ok((first, skipped + 1, deep, labelled))
}

fn main() -> anyhow::Result<()> {
    let secs = support::env_usize("ISSUE_BENCH_SECS", 6) as u64;
    let count = support::env_usize("BENCH_ISSUES", 10_000);
    let slice = Duration::from_secs(secs) / ROUNDS;
    // On the target directory's disk, not a tmpfs: fsync must be real.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut scenarios = vec![
        Scenario {
            name: "(a) baseline: one transaction per comment, sequential",
            writers: None,
            db: dir.path().join("a.db"),
            ops: 0,
            elapsed: Duration::ZERO,
            latencies: Vec::new(),
            groups: 0,
        },
        Scenario {
            name: "(b) the writer, 64 concurrent writers",
            writers: Some(WRITERS),
            db: dir.path().join("b.db"),
            ops: 0,
            elapsed: Duration::ZERO,
            latencies: Vec::new(),
            groups: 0,
        },
    ];
    let ids: Vec<Vec<String>> = scenarios
        .iter()
        .map(|s| prepare(&s.db, WRITERS))
        .collect::<anyhow::Result<_>>()?;
    for round in 0..ROUNDS as usize {
        for turn in 0..scenarios.len() {
            let i = (round + turn) % scenarios.len();
            let s = &mut scenarios[i];
            match s.writers {
                None => sequential(s, &ids[i], slice)?,
                Some(n) => runtime.block_on(through_writer(s, &ids[i], n, slice))?,
            }
        }
    }
    for s in &mut scenarios {
        s.latencies.sort_unstable();
    }
    let (first, deep_page, deep, labelled) = list_page(dir.path(), count)?;

    let baseline = scenarios[0].ops_per_sec();
    let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1000.0);
    let mut table = String::from(
        "| scenario | comments | comments/s | vs (a) | comments per commit | p50 ms | p99 ms |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    for s in &scenarios {
        table.push_str(&format!(
            "| {} | {} | {:.0} | {:.1}x | {} | {} | {} |\n",
            s.name,
            s.ops,
            s.ops_per_sec(),
            s.ops_per_sec() / baseline,
            match s.writers {
                None => "1".to_string(),
                Some(_) => format!("{:.1}", s.ops as f64 / s.groups.max(1) as f64),
            },
            ms(s.percentile(0.50)),
            ms(s.percentile(0.99)),
        ));
    }
    let list = format!(
        "| `issues::list`, one page of {page} open issues | median ms (101 runs) | target |\n\
         |---|---:|---:|\n\
         | first page | {} | 10 ms |\n\
         | page {deep_page} (from a cursor, half way down) | {} | 10 ms |\n\
         | first page, filtered by one label | {} | 10 ms |\n",
        ms(first),
        ms(deep),
        ms(labelled),
        page = issues::DEFAULT_PAGE,
    );
    let section = format!(
        "{SECTION}\n\n\
         In process, on one SQLite file (WAL, `synchronous=FULL`) on the target \
         directory's disk, measured in one run of `cargo bench --bench issue_store` on {} \
         (SQLite {}, {} CPUs, shared with other builds).\n\n\
         Durable comments per second: {secs} s per scenario in {ROUNDS} interleaved rounds. \
         (a) is `collab_store::issues::comment` in its own transaction, one fsync each; (b) is \
         {WRITERS} tasks commenting back to back, each on its own issue, through the one \
         writer thread that group-commits (`Writer::write`). A comment counts once \
         its reply arrived, i.e. once it is durable, and appends its `issue.commented` \
         event row in the same transaction.\n\n{table}\n\
         The database side of `collab-issue list` (what the server spends besides the SSH \
         exec round trip) over {count} issues, half of them open, each with two labels, \
         on a read-only connection as the server's read pool uses:\n\n{list}",
        chrono::Utc::now().format("%Y-%m-%d"),
        rusqlite::version(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
    );
    println!("{section}");
    support::write_section(
        &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md"),
        &section,
    );
    Ok(())
}
