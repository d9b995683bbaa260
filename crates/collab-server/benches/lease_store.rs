//! Lease store throughput: how many durable acquires per second the server
//! can acknowledge, one transaction per operation versus the group-commit
//! writer of `lease_service`. Every acquire takes a fresh tenure on a
//! distinct issue, so every one of them is a write that must reach the disk.
//!
//! Run: `cargo bench --bench lease_store` (release build). `LEASE_BENCH_SECS`
//! sets the seconds per scenario (default 5). The table is printed and
//! written to docs/benchmarks.md under "## Lease store".
use collab_testkit::bench as support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use collab_store::leases;
use collab_store::writer::Writer;

const TTL: Option<i64> = Some(3600);

/// The disk is shared and its speed drifts, so the scenarios take turns in
/// this many rounds instead of running one after the other.
const ROUNDS: u32 = 8;

enum Kind {
    /// (a) `leases::acquire` in a loop: one transaction, one fsync, per acquire.
    Sequential,
    /// (b), (c) this many concurrent callers through one `Writer`.
    Service(usize),
}

struct Scenario {
    name: String,
    kind: Kind,
    db: PathBuf,
    ops: u64,
    elapsed: Duration,
    /// Per-operation latency, sorted after the last round.
    latencies: Vec<Duration>,
    /// Transactions the writer committed (service scenarios).
    groups: u64,
}

impl Scenario {
    fn new(name: &str, kind: Kind, db: PathBuf) -> Scenario {
        Scenario {
            name: name.into(),
            kind,
            db,
            ops: 0,
            elapsed: Duration::ZERO,
            latencies: Vec::new(),
            groups: 0,
        }
    }

    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    fn ops_per_commit(&self) -> Option<f64> {
        match self.kind {
            Kind::Sequential => None,
            Kind::Service(_) => Some(self.ops as f64 / self.groups.max(1) as f64),
        }
    }

    fn percentile(&self, p: f64) -> Option<Duration> {
        let last = self.latencies.len().checked_sub(1)?;
        Some(self.latencies[((last as f64) * p).round() as usize])
    }
}

fn main() -> anyhow::Result<()> {
    let secs: u64 = std::env::var("LEASE_BENCH_SECS")
        .ok()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(8);
    let slice = Duration::from_secs(secs) / ROUNDS;
    // On the target directory's disk, not a tmpfs: fsync must be real.
    // `LEASE_BENCH_DIR=/dev/shm` measures the other end, a disk whose flush
    // costs nothing, where only the writer's own work is left.
    let base = std::env::var_os("LEASE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    let dir = tempfile::tempdir_in(base)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;

    let db = |name: &str| dir.path().join(name);
    let mut scenarios = vec![
        Scenario::new(
            "(a) baseline: one transaction per acquire, sequential",
            Kind::Sequential,
            db("a.db"),
        ),
        Scenario::new("(b) Writer, 1 caller", Kind::Service(1), db("b.db")),
        Scenario::new(
            "(c) Writer, 8 concurrent callers",
            Kind::Service(8),
            db("c8.db"),
        ),
        Scenario::new(
            "(c) Writer, 64 concurrent callers",
            Kind::Service(64),
            db("c64.db"),
        ),
    ];
    for round in 0..ROUNDS as usize {
        // Rotate who goes first: closing a database checkpoints it, and the
        // disk is still busy with that when the next scenario starts.
        let count = scenarios.len();
        for turn in 0..count {
            let scenario = &mut scenarios[(round + turn) % count];
            match scenario.kind {
                Kind::Sequential => sequential(scenario, slice)?,
                Kind::Service(callers) => {
                    runtime.block_on(through_service(scenario, callers, slice))?
                }
            }
        }
    }
    for scenario in &mut scenarios {
        scenario.latencies.sort_unstable();
    }

    let table = render(&scenarios, secs);
    println!("{table}");
    let doc = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md");
    support::write_section(&doc, &format!("## Lease store\n\n{table}"));
    Ok(())
}

/// (a) The disk's limit for this transaction: `leases::acquire` in a loop,
/// each call its own `BEGIN IMMEDIATE` / read / insert / `COMMIT` with
/// `synchronous=FULL`, i.e. one fsync per acquire.
fn sequential(scenario: &mut Scenario, slice: Duration) -> anyhow::Result<()> {
    let conn = leases::open(&scenario.db)?;
    let now = chrono::Utc::now().timestamp();
    let start = Instant::now();
    while start.elapsed() < slice {
        let issue = issue_id(0, scenario.ops);
        let sent = Instant::now();
        let outcome = leases::acquire(&conn, "bench/raw", &issue, "bench", TTL, now)?;
        scenario.latencies.push(sent.elapsed());
        anyhow::ensure!(matches!(
            outcome,
            leases::Acquire::Acquired { ref lease, .. } if lease.token == 1
        ));
        scenario.ops += 1;
    }
    scenario.elapsed += start.elapsed();
    Ok(())
}

/// (b), (c) `callers` tasks, each acquiring distinct issues back to back
/// through one `Writer`; an acquire counts once its reply arrived,
/// i.e. once it is durable.
async fn through_service(
    scenario: &mut Scenario,
    callers: usize,
    slice: Duration,
) -> anyhow::Result<()> {
    let service = Writer::open(&scenario.db)?;
    let first_issue = scenario.ops;
    let start = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let service = service.clone();
            tokio::spawn(async move {
                let holder = format!("caller-{caller}");
                let mut latencies = Vec::new();
                while start.elapsed() < slice {
                    let issue = issue_id(caller, first_issue + latencies.len() as u64);
                    let sent = Instant::now();
                    let outcome = service
                        .acquire("bench/service", &issue, &holder, TTL)
                        .await?;
                    latencies.push(sent.elapsed());
                    anyhow::ensure!(matches!(
                        outcome,
                        leases::Acquire::Acquired { ref lease, .. } if lease.token == 1
                    ));
                }
                anyhow::Ok(latencies)
            })
        })
        .collect();
    for task in tasks {
        let latencies = task.await??;
        scenario.ops += latencies.len() as u64;
        scenario.latencies.extend(latencies);
    }
    scenario.elapsed += start.elapsed();
    scenario.groups += service.stats().groups;
    Ok(())
}

/// A distinct issue id shaped like a real one: 40 hex digits, scattered over
/// the key space (sequential keys would let every write hit the same pages).
fn issue_id(caller: usize, n: u64) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{caller}/{n}"));
    hex::encode(&digest[..20])
}

fn render(results: &[Scenario], secs: u64) -> String {
    let baseline = results.first().map(Scenario::ops_per_sec).unwrap_or(0.0);
    let ms = |d: Option<Duration>| {
        d.map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0))
            .unwrap_or_else(|| "-".into())
    };
    let mut out = String::new();
    out.push_str(&format!(
        "Durable lease acquires per second on one SQLite file (WAL, `synchronous=FULL`), \
         {secs} s per scenario in {ROUNDS} interleaved rounds, measured in one run of \
         `cargo bench --bench lease_store` on {} (SQLite {}, {} CPUs, a disk shared with \
         other builds). Every acquire is a new tenure on a distinct issue (random-looking \
         40-hex ids), appends its `lease.acquired` event row in the same transaction, and is \
         counted once its reply arrived, i.e. once it is durable.\n\n",
        chrono::Utc::now().format("%Y-%m-%d"),
        rusqlite::version(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
    ));
    out.push_str("| scenario | acquires | ops/s | vs (a) | ops per commit | p50 ms | p99 ms |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    for s in results {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.1}x | {} | {} | {} |\n",
            s.name,
            s.ops,
            s.ops_per_sec(),
            s.ops_per_sec() / baseline,
            s.ops_per_commit()
                .map(|g| format!("{g:.1}"))
                .unwrap_or_else(|| "1".into()),
            ms(s.percentile(0.50)),
            ms(s.percentile(0.99)),
        ));
    }
    out
}
