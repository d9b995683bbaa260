//! Issue writes per repository on PostgreSQL (issue 28, item 1), in one
//! run on one machine: 64 in-process callers comment on issues of 8
//! repositories (each caller its own issue, round robin over the
//! repositories) through `Writer`, durable comments per second:
//!
//! - (a) SQLite, one writer: the baseline;
//! - (b) PostgreSQL, one node, the comments as generic writes
//!   (`Writer::write`: the "writes" key exclusive, as every issue write was
//!   before), and (c) as repository writes (`Writer::write_in`: the key
//!   shared and the repository's own key);
//! - (d) and (e): the same on three nodes (three writers, one database).
//!
//! The closure is the same in every row (`issues::comment`, what
//! `collab-issue comment` runs). Needs `GIT_COLLAB_TEST_POSTGRES`;
//! `REPO_WRITES_SECS` sets the seconds per scenario (default 6, in
//! interleaved rounds). Run: `cargo bench --bench repo_writes` (release
//! build); the table is printed and written to docs/benchmarks.md under
//! "## PostgreSQL: writes per repository".
use collab_testkit::bench as support;

use std::path::Path;
use std::time::{Duration, Instant};

use collab_store::issues::{self, NewIssue, WriteCtx};
use collab_store::objects::Person;
use collab_store::writer::Writer;
use collab_store::Location;
use collab_testkit::pg::{self, TestDatabase};
use support::{env_usize, percentile, write_section};

const SECTION: &str = "## PostgreSQL: writes per repository";
const CALLERS: usize = 64;
const REPOS: usize = 8;
const ROUNDS: u32 = 6;

/// How the comment reaches the writer.
#[derive(Clone, Copy, PartialEq)]
enum Scope {
    /// `Writer::write`: the generic writes' key, exclusive.
    Generic,
    /// `Writer::write_in`: the repository's key.
    Repository,
}

struct Scenario {
    name: &'static str,
    location: Location,
    nodes: usize,
    scope: Scope,
    comments: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    /// Each caller's issue, made on first use.
    issues: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let Some(_admin) = pg::admin_url() else {
        eprintln!("repo_writes bench skipped: set GIT_COLLAB_TEST_POSTGRES to an admin URL");
        return Ok(());
    };
    std::env::remove_var("GIT_COLLAB_TEST_BACKEND");
    let secs = env_usize("REPO_WRITES_SECS", 6).max(1) as u64;
    let load = support::load_average();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let databases: Vec<TestDatabase> = (0..4).map(|_| TestDatabase::create()).collect();
    let pg = |i: usize| Location::Postgres(databases[i].url.clone());
    let scenario = |name, location, nodes, scope| Scenario {
        name,
        location,
        nodes,
        scope,
        comments: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
        issues: Vec::new(),
    };
    let mut scenarios = vec![
        scenario(
            "(a) SQLite, one writer (baseline)",
            Location::Sqlite(dir.path().join("sqlite.db")),
            1,
            Scope::Repository,
        ),
        scenario(
            "(b) PostgreSQL, one node, generic writes",
            pg(0),
            1,
            Scope::Generic,
        ),
        scenario(
            "(c) PostgreSQL, one node, repository writes",
            pg(1),
            1,
            Scope::Repository,
        ),
        scenario(
            "(d) PostgreSQL, three nodes, generic writes",
            pg(2),
            3,
            Scope::Generic,
        ),
        scenario(
            "(e) PostgreSQL, three nodes, repository writes",
            pg(3),
            3,
            Scope::Repository,
        ),
    ];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let slice = Duration::from_secs(secs) / ROUNDS;
    for round in 0..ROUNDS as usize {
        let count = scenarios.len();
        for turn in 0..count {
            let scenario = &mut scenarios[(round + turn) % count];
            // Connections open and close outside the runtime, as in the server.
            let services = (0..scenario.nodes)
                .map(|_| Writer::open(scenario.location.clone()))
                .collect::<anyhow::Result<Vec<_>>>()?;
            runtime.block_on(run(scenario, &services, slice))?;
        }
    }
    drop(runtime);
    let section = render(&scenarios, secs, &load);
    println!("{section}");
    write_section(
        &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md"),
        &section,
    );
    drop(databases);
    Ok(())
}

fn repo_of(caller: usize) -> String {
    format!("bench/r{}.git", caller % REPOS)
}

fn actor() -> Person {
    Person {
        principal: "bench".into(),
        name: "bench".into(),
        key: None,
    }
}

/// Send one issue write of `repo` the scenario's way.
async fn write<T, F>(service: &Writer, scope: Scope, repo: &str, f: F) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: Fn(&collab_store::sql::Connection, i64) -> anyhow::Result<T> + Send + 'static,
{
    match scope {
        Scope::Generic => service.write("comment", f).await,
        Scope::Repository => service.write_in(repo, "comment", f).await,
    }
}

/// One slice: every caller comments on its own issue until the slice ends;
/// a comment counts once its reply arrived, i.e. once it is durable.
async fn run(scenario: &mut Scenario, services: &[Writer], slice: Duration) -> anyhow::Result<()> {
    if scenario.issues.is_empty() {
        for caller in 0..CALLERS {
            let repo = repo_of(caller);
            let service = &services[0];
            let r = repo.clone();
            let written = write(service, scenario.scope, &repo, move |conn, now| {
                let actor = actor();
                let w = ctx(&r, &actor, now);
                let new = NewIssue {
                    title: format!("issue of caller {caller}"),
                    body: String::new(),
                    labels: Vec::new(),
                };
                Ok(issues::open(conn, &w, &new)?)
            })
            .await?;
            scenario.issues.push(written.issue);
        }
    }
    let start = Instant::now();
    let scope = scenario.scope;
    let tasks: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let service = services[caller % services.len()].clone();
            let issue = scenario.issues[caller].clone();
            tokio::spawn(async move {
                let repo = repo_of(caller);
                let mut latencies = Vec::new();
                while start.elapsed() < slice {
                    let (r, id) = (repo.clone(), issue.clone());
                    let sent = Instant::now();
                    write(&service, scope, &repo, move |conn, now| {
                        let actor = actor();
                        Ok(issues::comment(
                            conn,
                            &ctx(&r, &actor, now),
                            &id,
                            "a comment",
                        )?)
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
        scenario.comments += latencies.len() as u64;
        scenario.latencies.extend(latencies);
    }
    scenario.elapsed += start.elapsed();
    Ok(())
}

fn ctx<'a>(repo: &'a str, actor: &'a Person, now: i64) -> WriteCtx<'a> {
    WriteCtx {
        repo,
        actor,
        fence: None,
        max_body: 65536,
        now,
    }
}

fn per_sec(s: &Scenario) -> f64 {
    s.comments as f64 / s.elapsed.as_secs_f64()
}

fn render(scenarios: &[Scenario], secs: u64, load: &str) -> String {
    let base = per_sec(&scenarios[0]);
    let mut out = format!(
        "{SECTION}\n\n\
         `cargo bench --bench repo_writes` ({} UTC, load average {load} at the start): \
         {CALLERS} in-process callers, each commenting on its own issue, the issues \
         spread over {REPOS} repositories, through `Writer` for {secs} s per scenario \
         in {ROUNDS} interleaved rounds. The same closure (`issues::comment`) in every \
         row; \"generic\" sends it with `Writer::write` (the \"writes\" key exclusive, \
         as every issue write was before issue 28's repository keys), \"repository\" \
         with `Writer::write_in` (docs/postgres.md, \"Writes per repository\").\n\n\
         | scenario | comments/s | vs (a) | p50 | p99 |\n|---|---:|---:|---:|---:|\n",
        chrono::Utc::now().format("%Y-%m-%d %H:%M"),
    );
    for s in scenarios {
        out.push_str(&format!(
            "| {} | {:.0} | {:.2}x | {:.1} ms | {:.1} ms |\n",
            s.name,
            per_sec(s),
            per_sec(s) / base,
            percentile(s.latencies.clone(), 0.5).as_secs_f64() * 1e3,
            percentile(s.latencies.clone(), 0.99).as_secs_f64() * 1e3,
        ));
    }
    let ratio = |a: usize, b: usize| per_sec(&scenarios[a]) / per_sec(&scenarios[b]);
    out.push_str(&format!(
        "\nRepository writes against generic writes: {:.2}x on one node, {:.2}x on three; \
         three nodes against one: {:.2}x with repository writes, {:.2}x with generic ones.\n",
        ratio(2, 1),
        ratio(4, 3),
        ratio(4, 2),
        ratio(3, 1),
    ));
    out.push_str(
        "\nWhat the rows measure: on one node a group of comments is one transaction \
         either way, so the repository keys cannot win there; they cost the try of \
         the key in each comment's savepoint round trip. Across nodes generic writes \
         take turns on one key, each node's group waiting for the others' COMMITs, \
         while repository writes of different repositories overlap. On PostgreSQL a \
         comment is two round trips (docs/postgres.md, \"One statement per issue \
         comment\"). All of it shares 2 CPUs with PostgreSQL and the 64 callers, which \
         bounds what three nodes can add.\n",
    );
    out
}
