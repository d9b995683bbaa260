//! The work queue under a fleet: 64 agents draining 2,000 ready issues
//! with `next` then `release`, through the real lease store (`Writer`,
//! group commit, `synchronous=FULL`, on the target directory's disk), and
//! the same agents doing `acquire` then `release` of known issues for
//! comparison. Reports operations per second, p50/p99 latency of `next`
//! and `acquire`, and fairness (most / fewest issues per agent).
//!
//! Run: `cargo bench --bench work_queue`. `QUEUE_BENCH_ISSUES` and
//! `QUEUE_BENCH_AGENTS` override the counts. The table is printed and
//! written to docs/benchmarks.md under "## Work queue".
use collab_testkit::bench as support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use collab_store::issues::{self, NewIssue, Person, WriteCtx};
use collab_store::leases::{Acquire, Claim};
use collab_store::queue::{Next, NextRequest};
use collab_store::writer::Writer;

const REPO: &str = "bench/queue.git";
const TTL: Option<i64> = Some(600);

struct Run {
    name: &'static str,
    /// Operations (each take and each release counts one).
    ops: u64,
    elapsed: Duration,
    /// Latency of the take (`next` or `acquire`), sorted.
    takes: Vec<Duration>,
    /// Issues each agent got.
    per_agent: Vec<u64>,
}

impl Run {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        let last = self.takes.len().saturating_sub(1);
        self.takes
            .get(((last as f64) * p).round() as usize)
            .copied()
            .unwrap_or_default()
    }

    fn fairness(&self) -> (u64, u64) {
        let most = self.per_agent.iter().copied().max().unwrap_or(0);
        let fewest = self.per_agent.iter().copied().min().unwrap_or(0);
        (most, fewest)
    }
}

fn main() -> anyhow::Result<()> {
    let issues = support::env_usize("QUEUE_BENCH_ISSUES", 2000);
    let agents = support::env_usize("QUEUE_BENCH_AGENTS", 64);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let runs = runtime.block_on(async {
        let next = drain_with_next(&dir.path().join("next.db"), issues, agents).await?;
        let acquire = drain_with_acquire(&dir.path().join("acquire.db"), issues, agents).await?;
        anyhow::Ok(vec![next, acquire])
    })?;
    let table = render(&runs, issues, agents);
    println!("{table}");
    let doc = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md");
    support::write_section(&doc, &format!("## Work queue\n\n{table}"));
    Ok(())
}

/// A lease store with `n` open issues in `REPO`; their ids, oldest first.
async fn seeded(path: &Path, n: usize) -> anyhow::Result<(Writer, Vec<String>)> {
    let service = Writer::open(path)?;
    let mut ids = Vec::with_capacity(n);
    for chunk in 0..n.div_ceil(500) {
        let count = (n - chunk * 500).min(500);
        let made = service
            .write("bench: open issues", move |conn, now| {
                let actor = Person {
                    principal: "bench".into(),
                    name: "bench".into(),
                    key: None,
                };
                let w = WriteCtx {
                    repo: REPO,
                    actor: &actor,
                    fence: None,
                    max_body: 1024,
                    now,
                };
                let mut ids = Vec::new();
                for i in 0..count {
                    let new = NewIssue {
                        title: format!("Task {}", chunk * 500 + i),
                        body: String::new(),
                        labels: Vec::new(),
                    };
                    ids.push(issues::open(conn, &w, &new)?.issue);
                }
                Ok(ids)
            })
            .await?;
        ids.extend(made);
    }
    Ok((service, ids))
}

/// Every agent: `next`, then `release` what it got, until `next` says
/// the queue is empty.
async fn drain_with_next(path: &Path, issues: usize, agents: usize) -> anyhow::Result<Run> {
    let (service, _) = seeded(path, issues).await?;
    let start = Instant::now();
    let tasks: Vec<_> = (0..agents)
        .map(|agent| {
            let service = service.clone();
            tokio::spawn(async move {
                let holder = format!("agent-{agent}");
                let mut takes = Vec::new();
                // A released issue would be ready again at once, so the
                // agent finishes its work as a real one does: it closes the
                // issue, which ends (releases) its lease in the same write.
                loop {
                    let req = NextRequest {
                        repo: REPO.into(),
                        labels: Vec::new(),
                        holder: holder.clone(),
                        ttl_secs: TTL,
                        note: None,
                    };
                    let sent = Instant::now();
                    let got = service.next(req).await?;
                    let Next::Acquired { lease, .. } = got else {
                        break;
                    };
                    takes.push(sent.elapsed());
                    finish(&service, &lease.issue_id, &holder).await?;
                }
                anyhow::Ok(takes)
            })
        })
        .collect();
    collect("`next` then finish (close + release)", start, tasks).await
}

/// Every agent: `acquire` of known issues (agent i takes issues i, i+64,
/// …), then the same finish.
async fn drain_with_acquire(path: &Path, issues: usize, agents: usize) -> anyhow::Result<Run> {
    let (service, ids) = seeded(path, issues).await?;
    let ids = Arc::new(ids);
    let start = Instant::now();
    let tasks: Vec<_> = (0..agents)
        .map(|agent| {
            let (service, ids) = (service.clone(), Arc::clone(&ids));
            tokio::spawn(async move {
                let holder = format!("agent-{agent}");
                let mut takes = Vec::new();
                for id in ids.iter().skip(agent).step_by(agents) {
                    let claim = Claim::new(REPO, id, &holder, TTL);
                    let sent = Instant::now();
                    let got = service.acquire_claim(claim).await?;
                    anyhow::ensure!(matches!(got, Acquire::Acquired { .. }), "{got:?}");
                    takes.push(sent.elapsed());
                    finish(&service, id, &holder).await?;
                }
                anyhow::Ok(takes)
            })
        })
        .collect();
    collect("`acquire` of a known issue then finish", start, tasks).await
}

/// Finished work: the agent closes the issue (which ends its lease, as a
/// close does) — one durable write, like a `release`.
async fn finish(service: &Writer, issue: &str, holder: &str) -> anyhow::Result<()> {
    let (issue, holder) = (issue.to_string(), holder.to_string());
    service
        .write("bench: close", move |conn, now| {
            let actor = Person {
                principal: holder.clone(),
                name: holder,
                key: None,
            };
            let w = WriteCtx {
                repo: REPO,
                actor: &actor,
                fence: None,
                max_body: 1024,
                now,
            };
            issues::close(conn, &w, &issue, None)?;
            Ok(())
        })
        .await
}

async fn collect(
    name: &'static str,
    start: Instant,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<Vec<Duration>>>>,
) -> anyhow::Result<Run> {
    let mut run = Run {
        name,
        ops: 0,
        elapsed: Duration::ZERO,
        takes: Vec::new(),
        per_agent: Vec::new(),
    };
    for task in tasks {
        let takes = task.await??;
        run.per_agent.push(takes.len() as u64);
        run.ops += 2 * takes.len() as u64;
        run.takes.extend(takes);
    }
    run.elapsed = start.elapsed();
    run.takes.sort_unstable();
    Ok(run)
}

fn render(runs: &[Run], issues: usize, agents: usize) -> String {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
    let mut out = format!(
        "{agents} agents drain {issues} ready issues through one `Writer` (in process, \
         group commit, WAL with `synchronous=FULL` on the target directory's disk), measured in \
         one run of `cargo bench --bench work_queue` on {} ({} CPUs, shared with other builds). \
         Each agent loops: take an issue, then finish it (close it, which ends its lease): two \
         durable writes per issue, each counted as one operation. \"take\" is `next` (the \
         server picks the first ready issue) or `acquire` of an issue the agent was assigned \
         in advance. Fairness is the most and fewest issues one agent got.\n\n",
        chrono::Utc::now().format("%Y-%m-%d"),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
    );
    out.push_str("| run | issues | ops/s | take p50 ms | take p99 ms | most / fewest per agent | vs acquire (ops/s) |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    let acquire = runs.last().map(Run::ops_per_sec).unwrap_or(1.0);
    for run in runs {
        let (most, fewest) = run.fairness();
        out.push_str(&format!(
            "| {} | {} | {:.0} | {} | {} | {most} / {fewest} | {:.2}x |\n",
            run.name,
            run.takes.len(),
            run.ops_per_sec(),
            ms(run.percentile(0.50)),
            ms(run.percentile(0.99)),
            run.ops_per_sec() / acquire,
        ));
    }
    out
}
