//! PostgreSQL against SQLite (issue 17), in one run on one machine:
//!
//! - in process, durable lease acquires per second with 64 concurrent
//!   callers, each acquiring then releasing distinct issues through
//!   `Writer` (the group-commit writer): (a) on a SQLite file
//!   (`synchronous=FULL`), the baseline; (b) on PostgreSQL through one
//!   service, as one server node has; (c) on one PostgreSQL database
//!   through three services (three writer threads, three connections),
//!   what three server nodes have, the callers spread over them; (b) and
//!   (c) once more with `GIT_COLLAB_PG_LEASE_STATEMENTS=1`, each lease
//!   operation's statements sent one by one instead of one call of its
//!   function (docs/postgres.md, "One statement per lease operation");
//! - over SSH, p50 and p99 of one `collab-lease acquire` and one
//!   `collab-lease release` against the real server on SQLite and on
//!   PostgreSQL, sequential, each a fresh `ssh` process.
//!
//! Needs `GIT_COLLAB_TEST_POSTGRES` (an admin URL, e.g. from
//! `scripts/ci-postgres.sh`); every PostgreSQL scenario gets a fresh
//! database there, dropped at the end. Without it the bench says so and
//! stops. `PG_BENCH_SECS` sets the seconds per in-process scenario (default
//! 6, in interleaved rounds), `PG_BENCH_SSH_SAMPLES` the SSH samples per
//! row (default 200).
//!
//! Run: `cargo bench --bench postgres` (release build). The tables are
//! printed and written to docs/benchmarks.md under "## PostgreSQL".
use collab_testkit::bench as support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use collab_store::leases;
use collab_store::writer::Writer;
use collab_store::Location;
use collab_testkit::pg::{self, TestDatabase};
use collab_testkit::{HarnessOptions, ServerHarness};
use support::{env_usize, timed, write_section};

const SECTION: &str = "## PostgreSQL";
const TTL: Option<i64> = Some(3600);
const CALLERS: usize = 64;
/// The disk is shared and its speed drifts, so the scenarios take turns in
/// this many rounds instead of running one after the other.
const ROUNDS: u32 = 6;

/// One in-process scenario: where the database is and how many writers
/// (services, i.e. server nodes) share it.
struct Scenario {
    name: &'static str,
    location: Location,
    nodes: usize,
    /// Lease operations send their statements one by one
    /// (`GIT_COLLAB_PG_LEASE_STATEMENTS=1`) instead of one function call.
    statements: bool,
    /// acquire + release cycles completed (each two durable writes).
    cycles: u64,
    elapsed: Duration,
    /// Latency of each acquire, sorted after the last round.
    acquires: Vec<Duration>,
    groups: u64,
    writes: u64,
}

impl Scenario {
    fn new(name: &'static str, location: Location, nodes: usize) -> Scenario {
        Scenario {
            name,
            location,
            nodes,
            statements: false,
            cycles: 0,
            elapsed: Duration::ZERO,
            acquires: Vec::new(),
            groups: 0,
            writes: 0,
        }
    }

    fn by_statements(mut self) -> Scenario {
        self.statements = true;
        self
    }

    fn acquires_per_sec(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }
}

fn main() -> anyhow::Result<()> {
    let Some(admin) = pg::admin_url() else {
        eprintln!("postgres bench skipped: set GIT_COLLAB_TEST_POSTGRES to an admin URL");
        return Ok(());
    };
    // The SQLite server below must be on SQLite whatever the test backend.
    std::env::remove_var("GIT_COLLAB_TEST_BACKEND");
    let secs = env_usize("PG_BENCH_SECS", 6).max(1) as u64;
    let samples = env_usize("PG_BENCH_SSH_SAMPLES", 200).max(2);
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    let settings = PgSettings::read(&admin)?;

    // On the target directory's disk, not a tmpfs: fsync must be real.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let one_node = TestDatabase::create();
    let three_nodes = TestDatabase::create();
    let one_node_statements = TestDatabase::create();
    let three_nodes_statements = TestDatabase::create();
    let mut scenarios = vec![
        Scenario::new(
            "(a) SQLite, one `Writer` (baseline)",
            Location::Sqlite(dir.path().join("sqlite.db")),
            1,
        ),
        Scenario::new(
            "(b) PostgreSQL, one node (one `Writer`)",
            Location::Postgres(one_node.url.clone()),
            1,
        ),
        Scenario::new(
            "(c) PostgreSQL, three nodes (three `Writer`s, one database)",
            Location::Postgres(three_nodes.url.clone()),
            3,
        ),
        Scenario::new(
            "(b) with the statements one by one (`GIT_COLLAB_PG_LEASE_STATEMENTS=1`)",
            Location::Postgres(one_node_statements.url.clone()),
            1,
        )
        .by_statements(),
        Scenario::new(
            "(c) with the statements one by one (`GIT_COLLAB_PG_LEASE_STATEMENTS=1`)",
            Location::Postgres(three_nodes_statements.url.clone()),
            3,
        )
        .by_statements(),
    ];
    let same_disk = same_device(&settings.data_directory, dir.path());
    let round_trip = select_one_round_trip(&one_node.url)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let slice = Duration::from_secs(secs) / ROUNDS;
    for round in 0..ROUNDS as usize {
        let count = scenarios.len();
        for turn in 0..count {
            let scenario = &mut scenarios[(round + turn) % count];
            // Opening and closing a PostgreSQL connection blocks: both
            // happen outside the runtime, as the server does. A connection
            // reads the switch when it is made.
            if scenario.statements {
                std::env::set_var(collab_store::sql::LEASE_STATEMENTS_ENV, "1");
            }
            let services = (0..scenario.nodes)
                .map(|_| Writer::open(scenario.location.clone()))
                .collect::<anyhow::Result<Vec<_>>>();
            std::env::remove_var(collab_store::sql::LEASE_STATEMENTS_ENV);
            let services = services?;
            runtime.block_on(run_scenario(scenario, &services, slice))?;
            for service in services {
                let stats = service.stats();
                scenario.groups += stats.groups;
                scenario.writes += stats.ops;
            }
        }
    }
    for scenario in &mut scenarios {
        scenario.acquires.sort_unstable();
    }
    drop(runtime);

    let ssh = over_ssh(samples);

    let section = render(&Report {
        scenarios: &scenarios,
        ssh: &ssh,
        settings: &settings,
        same_disk,
        round_trip,
        secs,
        samples,
        load,
    });
    println!("{section}");
    write_section(
        &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md"),
        &section,
    );
    drop(one_node);
    drop(three_nodes);
    drop(one_node_statements);
    drop(three_nodes_statements);
    Ok(())
}

/// One slice of a scenario: 64 callers over its services (one per node)
/// for `slice`, each acquiring a distinct issue and then releasing it; an
/// acquire counts once its reply arrived, i.e. once it is durable.
async fn run_scenario(
    scenario: &mut Scenario,
    services: &[Writer],
    slice: Duration,
) -> anyhow::Result<()> {
    let first_issue = scenario.cycles;
    let start = Instant::now();
    let tasks: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let service = services[caller % services.len()].clone();
            tokio::spawn(async move {
                let holder = format!("caller-{caller}");
                let mut latencies = Vec::new();
                while start.elapsed() < slice {
                    let issue = issue_id(caller, first_issue + latencies.len() as u64);
                    let sent = Instant::now();
                    let outcome = service.acquire("bench/pg", &issue, &holder, TTL).await?;
                    latencies.push(sent.elapsed());
                    anyhow::ensure!(
                        matches!(
                            outcome,
                            leases::Acquire::Acquired { ref lease, .. } if lease.token == 1
                        ),
                        "acquire of a fresh issue: {outcome:?}"
                    );
                    let released = service.release("bench/pg", &issue, &holder).await?;
                    anyhow::ensure!(
                        matches!(released, leases::Release::Released),
                        "release of our own lease: {released:?}"
                    );
                }
                anyhow::Ok(latencies)
            })
        })
        .collect();
    for task in tasks {
        let latencies = task.await??;
        scenario.cycles += latencies.len() as u64;
        scenario.acquires.extend(latencies);
    }
    scenario.elapsed += start.elapsed();
    Ok(())
}

/// A distinct issue id shaped like a real one: 40 hex digits, scattered over
/// the key space (sequential keys would let every write hit the same pages).
fn issue_id(caller: usize, n: u64) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{caller}/{n}"));
    hex::encode(&digest[..20])
}

/// The PostgreSQL server's version and the settings that decide what a
/// COMMIT costs.
struct PgSettings {
    version: String,
    fsync: String,
    synchronous_commit: String,
    wal_sync_method: String,
    full_page_writes: String,
    commit_delay: String,
    shared_buffers: String,
    data_directory: String,
}

impl PgSettings {
    fn read(admin: &str) -> anyhow::Result<PgSettings> {
        let mut client = postgres::Client::connect(admin, postgres::NoTls)?;
        let mut show = |name: &str| -> anyhow::Result<String> {
            Ok(client
                .query_one(&format!("SHOW {name}"), &[])?
                .get::<_, String>(0))
        };
        Ok(PgSettings {
            version: show("server_version")?,
            fsync: show("fsync")?,
            synchronous_commit: show("synchronous_commit")?,
            wal_sync_method: show("wal_sync_method")?,
            full_page_writes: show("full_page_writes")?,
            commit_delay: show("commit_delay")?,
            shared_buffers: show("shared_buffers")?,
            // Needs superuser or pg_read_all_settings; the admin URL has it.
            data_directory: show("data_directory").unwrap_or_default(),
        })
    }
}

/// Whether the PostgreSQL data directory and the SQLite file are on the
/// same filesystem (`None`: the data directory is not visible here).
fn same_device(data_directory: &str, sqlite_dir: &Path) -> Option<bool> {
    use std::os::unix::fs::MetadataExt as _;
    let pg = std::fs::metadata(data_directory).ok()?;
    let here = std::fs::metadata(sqlite_dir).ok()?;
    Some(pg.dev() == here.dev())
}

/// Median of 1000 `SELECT 1` on one connection: the price of one statement
/// that does nothing, i.e. of a round trip to the server.
fn select_one_round_trip(url: &str) -> anyhow::Result<Duration> {
    let mut client = postgres::Client::connect(url, postgres::NoTls)?;
    let statement = client.prepare("SELECT 1")?;
    let mut samples = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let start = Instant::now();
        client.query_one(&statement, &[])?;
        samples.push(start.elapsed());
    }
    Ok(support::median(samples))
}

/// Sorted SSH latencies of one verb on one backend.
struct SshRow {
    backend: &'static str,
    verb: &'static str,
    samples: Vec<Duration>,
}

/// The real server, once on SQLite and once on a fresh PostgreSQL
/// database, each with one repository and four open issues; then
/// `samples` rounds of acquire + release on each, the backends taking
/// turns so that load on the machine falls on both alike.
fn over_ssh(samples: usize) -> Vec<SshRow> {
    struct Server {
        name: &'static str,
        harness: ServerHarness,
        issues: Vec<String>,
        acquire: Vec<Duration>,
        release: Vec<Duration>,
    }
    let setup = |name: &'static str, harness: ServerHarness| {
        harness.create_repo("r");
        let issues = (0..4)
            .map(|i| harness.open_server_issue("r", &format!("Bench {i}")))
            .collect();
        Server {
            name,
            harness,
            issues,
            acquire: Vec::with_capacity(samples),
            release: Vec::with_capacity(samples),
        }
    };
    // SQLite first: the PostgreSQL harness exports its URL to this process
    // for host commands (`repo create`).
    let sqlite = setup("SQLite", ServerHarness::start());
    let postgres = setup(
        "PostgreSQL",
        ServerHarness::start_on_postgres(HarnessOptions::default())
            .expect("GIT_COLLAB_TEST_POSTGRES was checked"),
    );
    let mut servers = [sqlite, postgres];
    let ssh = |server: &Server, remote: &str| {
        let mut cmd = Command::new("ssh");
        let harness = &server.harness;
        cmd.args(harness.ssh_options(&harness.ssh_client_key()))
            .arg("git@127.0.0.1")
            .arg(remote)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        cmd
    };
    for server in &servers {
        // Warm-up: the first exec pays for cold caches.
        timed(&mut ssh(server, "collab-whoami"));
    }
    for i in 0..samples {
        for server in &mut servers {
            // A new tenure each time: acquire, then release, alternating issues.
            let issue = server.issues[i % server.issues.len()].clone();
            let acquire = timed(&mut ssh(
                server,
                &format!("collab-lease acquire 'r' '{issue}' --ttl 600"),
            ));
            let release = timed(&mut ssh(
                server,
                &format!("collab-lease release 'r' '{issue}'"),
            ));
            server.acquire.push(acquire);
            server.release.push(release);
        }
    }
    let mut rows = Vec::new();
    for verb in ["acquire", "release"] {
        for server in &mut servers {
            let mut samples = if verb == "acquire" {
                std::mem::take(&mut server.acquire)
            } else {
                std::mem::take(&mut server.release)
            };
            samples.sort_unstable();
            rows.push(SshRow {
                backend: server.name,
                verb,
                samples,
            });
        }
    }
    rows
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let last = sorted.len().saturating_sub(1);
    sorted
        .get(((last as f64) * p).round() as usize)
        .copied()
        .unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

struct Report<'a> {
    scenarios: &'a [Scenario],
    ssh: &'a [SshRow],
    settings: &'a PgSettings,
    same_disk: Option<bool>,
    round_trip: Duration,
    secs: u64,
    samples: usize,
    load: String,
}

fn render(r: &Report<'_>) -> String {
    let s = r.settings;
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let disk = match r.same_disk {
        Some(true) => "on the same disk as the SQLite file",
        Some(false) => "on a different filesystem from the SQLite file",
        None => "on a disk this process cannot see",
    };
    let build = if cfg!(debug_assertions) {
        "`cargo bench --profile dev --bench postgres` (debug build)"
    } else {
        "`cargo bench --bench postgres` (release build)"
    };
    let mut out = format!("{SECTION}\n\n");
    out.push_str(&format!(
        "{build}, one run on {date}: {cpus} CPUs shared with other builds and a CI run \
         (load average {load} at start), SQLite {sqlite}, PostgreSQL {version} on loopback \
         TCP, {disk}, with `fsync = {fsync}`, `synchronous_commit = {sync}`, \
         `wal_sync_method = {method}`, `full_page_writes = {fpw}`, `commit_delay = {delay}`, \
         `shared_buffers = {buffers}` (the cluster of `scripts/ci-postgres.sh`; durability \
         as on SQLite with `synchronous=FULL`: every acknowledged write was flushed). \
         One `SELECT 1` round trip to it takes {rtt} µs (median of 1000).\n\n",
        date = chrono::Utc::now().format("%Y-%m-%d"),
        load = r.load,
        sqlite = rusqlite::version(),
        version = s.version,
        fsync = s.fsync,
        sync = s.synchronous_commit,
        method = s.wal_sync_method,
        fpw = s.full_page_writes,
        delay = s.commit_delay,
        buffers = s.shared_buffers,
        rtt = r.round_trip.as_micros(),
    ));
    out.push_str(&format!(
        "**Durable lease acquires per second, in process.** {CALLERS} concurrent callers, \
         each acquiring a distinct issue (a new tenure, random-looking 40-hex ids, its \
         `lease.acquired` event row in the same transaction) and then releasing it; \
         {secs} s per scenario in {ROUNDS} interleaved rounds. An acquire counts once its \
         reply arrived, i.e. once it is durable; a release is a second durable write. \
         Every PostgreSQL scenario has a fresh database; three nodes are three \
         `Writer`s (three writer threads, three connections) on one database, \
         what three server processes have, with the callers spread over them.\n\n",
        secs = r.secs,
    ));
    out.push_str(
        "| scenario | acquires | acquires/s | vs SQLite | writes per commit | \
         acquire p50 ms | acquire p99 ms |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let baseline = r.scenarios[0].acquires_per_sec();
    for sc in r.scenarios {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.2}x | {:.1} | {} | {} |\n",
            sc.name,
            sc.cycles,
            sc.acquires_per_sec(),
            sc.acquires_per_sec() / baseline,
            sc.writes as f64 / sc.groups.max(1) as f64,
            ms(percentile(&sc.acquires, 0.50)),
            ms(percentile(&sc.acquires, 0.99)),
        ));
    }
    out.push_str(&format!(
        "\n**One acquire over SSH.** The real server (the same build) on a SQLite \
         `collab.db` and on a fresh PostgreSQL database (`GIT_COLLAB_COLLAB_DB`), one \
         repository with four open issues each; {n} rounds, in each one `ssh … \
         collab-lease acquire` (a new tenure) and one `collab-lease release` on each \
         server in turn, sequential, every one a fresh `ssh` process (TCP and SSH \
         handshake, public-key authentication), as `git-collab issue claim` does. \
         The ratio is PostgreSQL's over SQLite's at the same percentile.\n\n",
        n = r.samples,
    ));
    out.push_str(
        "| verb | backend | p50 ms | p99 ms | p50 vs SQLite | p99 vs SQLite |\n\
         |---|---|---:|---:|---:|---:|\n",
    );
    for pair in r.ssh.chunks(2) {
        let base = &pair[0].samples;
        for row in pair {
            let (p50, p99) = (
                percentile(&row.samples, 0.50),
                percentile(&row.samples, 0.99),
            );
            out.push_str(&format!(
                "| `collab-lease {}` | {} | {} | {} | {:.2}x | {:.2}x |\n",
                row.verb,
                row.backend,
                ms(p50),
                ms(p99),
                p50.as_secs_f64() / percentile(base, 0.50).as_secs_f64(),
                p99.as_secs_f64() / percentile(base, 0.99).as_secs_f64(),
            ));
        }
    }
    let one = &r.scenarios[1];
    let three = &r.scenarios[2];
    // Writer time per durable write: an acquire and a release are two.
    let per_write = |sc: &Scenario| format!("{:.2}", 1000.0 / (2.0 * sc.acquires_per_sec()));
    let per_commit = |sc: &Scenario| sc.writes as f64 / sc.groups.max(1) as f64;
    out.push_str(&format!(
        "\nOne writer on PostgreSQL spends about {pg} ms per durable write against \
         {lite} ms on SQLite. The flush is not the difference: the group commit shares \
         one WAL flush among {pg_group:.0} writes on PostgreSQL as it shares one fsync \
         among {lite_group:.0} on SQLite. The statements are: SQLite runs each in \
         process, while on PostgreSQL every operation is executed by the server \
         process (a group's lease operations in one prepared call of \
         `collab_lease_group`, one round trip; with the statements one by one, a round \
         trip per statement) ({rtt} µs for a `SELECT 1` on an idle connection) \
         plus its execution there, \
         on the same {cpus} busy CPUs as the callers. Three nodes reach {ratio:.2}x \
         one node: lease groups no longer take turns on one global lock but lock \
         each issue they decide, and take the event numbers in the COMMIT's round \
         trip (docs/postgres.md, \"Without a global write lock\"), so the three \
         writers' transactions overlap, each with a third of the callers and so \
         smaller groups ({three_group:.0} writes per commit). Over SSH the handshakes and \
         the server's own work dominate one acquire: PostgreSQL changes its median by \
         {added:+.1} ms.\n",
        pg = per_write(one),
        lite = per_write(&r.scenarios[0]),
        pg_group = per_commit(one),
        lite_group = per_commit(&r.scenarios[0]),
        three_group = per_commit(three),
        rtt = r.round_trip.as_micros(),
        ratio = three.acquires_per_sec() / one.acquires_per_sec(),
        added = (percentile(&r.ssh[1].samples, 0.50).as_secs_f64()
            - percentile(&r.ssh[0].samples, 0.50).as_secs_f64())
            * 1000.0,
    ));
    if let [_, b, c, b_old, c_old, ..] = r.scenarios {
        out.push_str(&format!(
            "\nA lease group's operations on PostgreSQL go in one prepared call of \
             `collab_lease_group` (schema version 16; with the statements one by one a new \
             tenure is 5 round trips, a release 4): one node {one:.2}x and three nodes {three:.2}x what the \
             same code did with the statements one by one in this run \
             (`GIT_COLLAB_PG_LEASE_STATEMENTS=1`: {one_old:.2}x and {three_old:.2}x SQLite).\n",
            one = b.acquires_per_sec() / b_old.acquires_per_sec(),
            three = c.acquires_per_sec() / c_old.acquires_per_sec(),
            one_old = b_old.acquires_per_sec() / r.scenarios[0].acquires_per_sec(),
            three_old = c_old.acquires_per_sec() / r.scenarios[0].acquires_per_sec(),
        ));
    }
    out
}
