//! A long transaction held open elsewhere on the collab database (issue 28,
//! item 5): 16 in-process callers acquire and release leases through one
//! `Writer` on PostgreSQL, cycling over a fixed set of 256 issues (so the
//! live rows stay constant and whatever grows is dead row versions and the
//! event log), in three phases: before, while another connection holds a
//! `REPEATABLE READ` transaction open (its snapshot keeps every row version
//! it might see: neither vacuum nor page pruning may remove them), and
//! after it ends. Every `PG_LONG_TX_SAMPLE` seconds it records the
//! acquires per second of the interval and, from `pg_stat_user_tables`,
//! the dead tuples and size of the hot tables.
//!
//! Needs `GIT_COLLAB_TEST_POSTGRES` (an admin URL, e.g. from
//! `scripts/ci-postgres.sh`); the run gets a fresh database there. Phase
//! lengths in seconds: `PG_LONG_TX_BEFORE` (default 30), `PG_LONG_TX_SECS`
//! (the open transaction, default 180), `PG_LONG_TX_AFTER` (default 60).
//!
//! Run: `cargo bench --bench pg_long_tx` (release build). The table is
//! printed and written to docs/benchmarks.md under "## PostgreSQL: a long
//! transaction held open".
use collab_testkit::bench as support;

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use collab_store::leases;
use collab_store::writer::Writer;
use collab_store::Location;
use collab_testkit::pg::{self, TestDatabase};
use support::{env_usize, write_section};

const SECTION: &str = "## PostgreSQL: a long transaction held open";
const CALLERS: usize = 16;
const ISSUES_PER_CALLER: u64 = 16;
const TABLES: [&str; 4] = ["leases", "lease_tokens", "counters", "events"];

struct Sample {
    phase: &'static str,
    at: Duration,
    per_sec: f64,
    /// (dead tuples, live tuples, size in kB) per table of `TABLES`.
    tables: Vec<(i64, i64, i64)>,
    autovacuums: i64,
}

fn main() -> anyhow::Result<()> {
    let Some(_admin) = pg::admin_url() else {
        eprintln!("pg_long_tx bench skipped: set GIT_COLLAB_TEST_POSTGRES to an admin URL");
        return Ok(());
    };
    let before = env_usize("PG_LONG_TX_BEFORE", 30) as u64;
    let during = env_usize("PG_LONG_TX_SECS", 180) as u64;
    let after = env_usize("PG_LONG_TX_AFTER", 60) as u64;
    let every = env_usize("PG_LONG_TX_SAMPLE", 15).max(1) as u64;
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    let database = TestDatabase::create();
    let writer = Writer::open(Location::Postgres(database.url.clone()))?;
    let mut stats = postgres::Client::connect(&database.url, postgres::NoTls)?;
    let version: String = stats.query_one("SHOW server_version", &[])?.get(0);
    let autovacuum: String = stats.query_one("SHOW autovacuum", &[])?.get(0);
    let naptime: String = stats.query_one("SHOW autovacuum_naptime", &[])?.get(0);

    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let callers: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let (writer, done, stop) = (writer.clone(), done.clone(), stop.clone());
            runtime.spawn(async move {
                let holder = format!("caller-{caller}");
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let issue = format!("{caller:02}-{:02}", n % ISSUES_PER_CALLER);
                    let outcome = writer
                        .acquire("bench/long-tx", &issue, &holder, Some(3600))
                        .await?;
                    anyhow::ensure!(
                        matches!(outcome, leases::Acquire::Acquired { .. }),
                        "acquire: {outcome:?}"
                    );
                    writer.release("bench/long-tx", &issue, &holder).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                anyhow::Ok(())
            })
        })
        .collect();

    let start = Instant::now();
    let mut samples = Vec::new();
    let mut holder: Option<postgres::Client> = None;
    let phases = [("before", before), ("during", during), ("after", after)];
    for (phase, secs) in phases {
        if phase == "during" {
            let mut client = postgres::Client::connect(&database.url, postgres::NoTls)?;
            // The snapshot is taken by the first statement and held to COMMIT.
            client.batch_execute(
                "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM events",
            )?;
            holder = Some(client);
        }
        if phase == "after" {
            if let Some(mut client) = holder.take() {
                client.batch_execute("COMMIT")?;
            }
        }
        let phase_start = Instant::now();
        while phase_start.elapsed() < Duration::from_secs(secs) {
            let before_count = done.load(Ordering::Relaxed);
            let t0 = Instant::now();
            std::thread::sleep(
                Duration::from_secs(every)
                    .min(Duration::from_secs(secs).saturating_sub(phase_start.elapsed())),
            );
            let per_sec =
                (done.load(Ordering::Relaxed) - before_count) as f64 / t0.elapsed().as_secs_f64();
            // The statistics are flushed about once a second.
            let mut tables = Vec::new();
            let mut autovacuums = 0;
            for table in TABLES {
                let row = stats.query_one(
                    "SELECT n_dead_tup, n_live_tup, pg_total_relation_size(relid) / 1024, \
                            autovacuum_count \
                     FROM pg_stat_user_tables WHERE relname = $1",
                    &[&table],
                )?;
                tables.push((row.get(0), row.get(1), row.get(2)));
                autovacuums += row.get::<_, i64>(3);
            }
            let sample = Sample {
                phase,
                at: start.elapsed(),
                per_sec,
                tables,
                autovacuums,
            };
            eprintln!(
                "{:>6} {:>5.0}s {:>7.0}/s {:?} autovacuums {}",
                sample.phase,
                sample.at.as_secs_f64(),
                sample.per_sec,
                sample.tables,
                sample.autovacuums
            );
            samples.push(sample);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        runtime.block_on(caller)??;
    }
    drop(runtime);
    drop(writer);

    let mean = |phase: &str| {
        let rates: Vec<f64> = samples
            .iter()
            .filter(|s| s.phase == phase)
            .map(|s| s.per_sec)
            .collect();
        rates.iter().sum::<f64>() / rates.len().max(1) as f64
    };
    let mut out = String::new();
    writeln!(out, "{SECTION}\n")?;
    writeln!(
        out,
        "`cargo bench --bench pg_long_tx` (crates/collab-server/benches/pg_long_tx.rs), \
         PostgreSQL {version} (autovacuum {autovacuum}, naptime {naptime}), \
         load average {load} at the start, {CALLERS} in-process callers acquiring and \
         releasing leases on {} issues through one `Writer` (one node). A second \
         connection holds `BEGIN ISOLATION LEVEL REPEATABLE READ` open for the \
         middle phase ({during} s). Dead tuples, live tuples and total size (kB, with \
         indexes) of the hot tables from `pg_stat_user_tables`, sampled every {every} s.\n",
        CALLERS as u64 * ISSUES_PER_CALLER
    )?;
    writeln!(
        out,
        "Mean acquire+release cycles per second: before {:.0}, during {:.0} ({:.2}x), after {:.0}.\n",
        mean("before"),
        mean("during"),
        mean("during") / mean("before").max(1.0),
        mean("after")
    )?;
    write!(out, "| phase | at | cycles/s |")?;
    for table in TABLES {
        write!(out, " {table} dead / live / kB |")?;
    }
    writeln!(out, " autovacuums |")?;
    write!(out, "|---|---:|---:|")?;
    for _ in TABLES {
        write!(out, "---:|")?;
    }
    writeln!(out, "---:|")?;
    for s in &samples {
        write!(
            out,
            "| {} | {:.0} s | {:.0} |",
            s.phase,
            s.at.as_secs_f64(),
            s.per_sec
        )?;
        for (dead, live, kb) in &s.tables {
            write!(out, " {dead} / {live} / {kb} |")?;
        }
        writeln!(out, " {} |", s.autovacuums)?;
    }
    println!("{out}");
    write_section(
        &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md"),
        &out,
    );
    Ok(())
}
