//! Faults of the database (docs/postgres.md, "Faults of the database"),
//! with real PostgreSQL clusters and the real server over `ssh`:
//! `pg_ctl restart -m fast` and `-m immediate` under a load of writers, the
//! server's backends terminated while writes run, and a failover to a
//! second cluster at the URL's second address. Each time: every write a
//! client was told succeeded is there afterwards (read back over ssh), an
//! error is one clear line with a non-zero exit (never `internal error`),
//! the server serves again within seconds without being restarted, a
//! watcher attached before the fault sees every event after it once, in
//! order, and a lease waiter attached before it still gets its lease.
//!
//! The restart and failover tests start clusters of their own (initdb and
//! pg_ctl found as scripts/ci-postgres.sh finds them); the terminate test
//! uses the shared one. All need `GIT_COLLAB_TEST_POSTGRES` (they skip
//! without it exactly as `multi_node` does, and fail without it under
//! `GIT_COLLAB_REQUIRE_POSTGRES_TESTS=1`).

use collab_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use common::{pg, HarnessOptions, ServerHarness, SshOutput};

/// The two lines a client may get for a fault of the database
/// (`ssh::reply::UNAVAILABLE`, `ssh::reply::COMMIT_UNKNOWN`).
const UNAVAILABLE: &str =
    "error: the collab database is unavailable; nothing was written, try again in a few seconds";
const COMMIT_UNKNOWN: &str = "error: the collab database connection was lost during commit; \
     the write may or may not have been recorded: check before trying again";

/// How soon the server must serve again after the database is back
/// (generous for a loaded CI machine; the writer retries every second at
/// most).
const RECOVERY: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------- clusters

/// A PostgreSQL cluster of the test's own (initdb, pg_ctl), on loopback,
/// stopped (immediately) when dropped.
struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// PostgreSQL refuses to run as root: as root, it runs as `postgres`.
    owner: Option<&'static str>,
    port: u16,
}

/// The directory of `initdb` and `pg_ctl`, as scripts/ci-postgres.sh finds
/// it: on PATH, else the newest `/usr/lib/postgresql/*/bin`.
fn pg_bin() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .find(|d| d.join("pg_ctl").exists() && d.join("initdb").exists())
    });
    if let Some(dir) = on_path {
        return dir;
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("pg_ctl").exists() && bin.join("initdb").exists()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .expect(
            "GIT_COLLAB_TEST_POSTGRES is set but initdb/pg_ctl are neither on PATH nor under \
             /usr/lib/postgresql/*/bin (scripts/install-deps.sh installs them)",
        )
        .1
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("id -u");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

impl Cluster {
    /// A new cluster, started.
    fn new() -> Cluster {
        let cluster = Cluster::empty(pg_bin());
        run(cluster
            .as_owner("initdb")
            .args([
                "-U",
                "collab",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "-D",
            ])
            .arg(cluster.data()));
        cluster.configure();
        cluster.start();
        cluster
    }

    fn empty(bin: PathBuf) -> Cluster {
        let cluster = Cluster {
            dir: tempfile::tempdir().unwrap(),
            bin,
            owner: is_root().then_some("postgres"),
            port: free_port(),
        };
        if let Some(user) = cluster.owner {
            run(Command::new("chown").arg(user).arg(cluster.dir.path()));
        }
        cluster
    }

    /// A copy of this cluster's data directory (taken while it is
    /// stopped), started on `port`: a standby that had every commit
    /// (synchronous replication), promoted when this one failed.
    fn copy(&self, port: u16) -> Cluster {
        let mut copy = Cluster::empty(self.bin.clone());
        copy.port = port;
        run(Command::new("cp")
            .arg("-a")
            .arg(self.data())
            .arg(copy.data()));
        let _ = std::fs::remove_file(copy.data().join("postmaster.pid"));
        copy.configure();
        copy.start();
        copy
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Its own port and socket directory (later lines of postgresql.conf
    /// win, so a copy is configured by appending again).
    fn configure(&self) {
        use std::io::Write as _;
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(self.data().join("postgresql.conf"))
            .unwrap();
        write!(
            conf,
            "\nlisten_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n\
             max_connections = 100\nfsync = on\n",
            self.port,
            self.dir.path().display()
        )
        .unwrap();
    }

    fn as_owner(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut cmd = match self.owner {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(path);
                c
            }
            None => Command::new(path),
        };
        cmd.current_dir("/");
        cmd
    }

    fn ctl(&self, args: &[&str]) {
        run(self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("log"))
            .args(["-w", "-t", "60"])
            .args(args));
    }

    fn start(&self) {
        self.ctl(&["start"]);
    }

    fn restart(&self, mode: &str) {
        self.ctl(&["-m", mode, "restart"]);
    }

    fn stop(&self, mode: &str) {
        self.ctl(&["-m", mode, "stop"]);
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn admin_url(&self) -> String {
        format!("postgres://collab@{}/postgres", self.host())
    }

    /// A new database `name` on this cluster, as the server wants it.
    fn create_database(&self, name: &str) {
        pg::run(
            &self.admin_url(),
            &format!(
                "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' \
                 LC_COLLATE 'C' LC_CTYPE 'C'"
            ),
        )
        .expect("creating the test database");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

// ------------------------------------------------------------------- load

/// One write a client made, and what it was told.
#[derive(Debug)]
enum Write {
    Comment { body: String },
    Acquire { issue: String },
    Release,
}

#[derive(Debug)]
struct Done {
    write: Write,
    out: SshOutput,
}

/// Writers over ssh, each with a key and an issue of its own, looping
/// until stopped: a comment on the shared issue, an acquire of its issue,
/// a release of it.
struct Load {
    stop: AtomicBool,
    done: Mutex<Vec<Done>>,
}

impl Load {
    fn new() -> Load {
        Load {
            stop: AtomicBool::new(false),
            done: Mutex::new(Vec::new()),
        }
    }

    fn writer(&self, h: &ServerHarness, w: usize, key: &Path, issue: &str, shared: &str) {
        let mut n = 0;
        while !self.stop.load(Ordering::Relaxed) {
            let (write, cmd) = match n % 3 {
                0 => {
                    let body = format!("w{w}-{n}");
                    let cmd = format!("collab-issue comment r.git {shared} --body '{body}'");
                    (Write::Comment { body }, cmd)
                }
                1 => (
                    Write::Acquire {
                        issue: issue.to_string(),
                    },
                    format!("collab-lease acquire r.git {issue} --ttl 600"),
                ),
                _ => (
                    Write::Release,
                    format!("collab-lease release r.git {issue}"),
                ),
            };
            let out = h.ssh_exec_as(key, &cmd, b"");
            self.done.lock().unwrap().push(Done { write, out });
            n += 1;
        }
    }
}

/// A write that succeeded after `since`: the server serves again. Returns
/// how long it took.
fn serves_again(h: &ServerHarness, shared: &str, label: &str) -> Duration {
    let start = Instant::now();
    let mut k = 0;
    loop {
        let out = h.ssh_exec(&format!(
            "collab-issue comment r.git {shared} --body 'probe {label} {k}'"
        ));
        if out.code == 0 {
            return start.elapsed();
        }
        assert_clear(&out);
        assert!(
            start.elapsed() < RECOVERY,
            "{label}: the server did not serve again within {RECOVERY:?}: {out:?}\nlog:\n{}",
            h.log()
        );
        k += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A failed call's error is one clear line with a non-zero exit: one of
/// the two fault lines, never `internal error`.
fn assert_clear(out: &SshOutput) {
    assert_ne!(out.code, 0, "{out:?}");
    let line = out.stderr.trim_end();
    assert!(
        !line.contains('\n') && (line == UNAVAILABLE || line == COMMIT_UNKNOWN),
        "not one clear fault line: {out:?}"
    );
}

/// Every event after `since`, in one snapshot read over ssh.
fn events_after(h: &ServerHarness, since: i64) -> Vec<serde_json::Value> {
    let out = h.ssh_exec(&format!("collab-events watch --since {since} --no-follow"));
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] != "heartbeat")
        .collect()
}

fn head(h: &ServerHarness) -> i64 {
    events_after(h, 0)
        .iter()
        .filter_map(|v| v["seq"].as_i64())
        .max()
        .unwrap_or(0)
}

/// A repository, the shared issue the writers comment on, and one issue
/// and key per writer.
struct Scene {
    shared: String,
    writers: Vec<(PathBuf, String)>,
}

fn scene(h: &ServerHarness, writers: usize) -> Scene {
    h.create_repo("r");
    let shared = h.open_server_issue("r", "Comments")[..8].to_string();
    let writers = (0..writers)
        .map(|w| {
            let key = h.authorized_key(&format!("w{w}"));
            let issue = h.open_server_issue("r", &format!("Lease {w}"))[..8].to_string();
            (key, issue)
        })
        .collect();
    Scene { shared, writers }
}

/// Run the writers while `fault` runs, then stop them.
fn under_load(h: &ServerHarness, scene: &Scene, fault: impl FnOnce()) -> Vec<Done> {
    let load = Load::new();
    std::thread::scope(|s| {
        for (w, (key, issue)) in scene.writers.iter().enumerate() {
            let (load, shared) = (&load, &scene.shared);
            s.spawn(move || load.writer(h, w, key, issue, shared));
        }
        // Some writes before the fault.
        std::thread::sleep(Duration::from_secs(2));
        fault();
        // And some after.
        std::thread::sleep(Duration::from_secs(2));
        load.stop.store(true, Ordering::Relaxed);
    });
    load.done.into_inner().unwrap()
}

/// Every acknowledged write is there, read back over ssh; every failure
/// was one clear line; the event log after `since` has no gap and the
/// watcher saw exactly it. Returns (acknowledged, failed as unavailable,
/// failed as perhaps committed).
fn check(
    h: &ServerHarness,
    scene: &Scene,
    done: &[Done],
    since: i64,
    watcher: (Child, mpsc::Receiver<i64>),
) -> (usize, usize, usize) {
    let events = events_after(h, since);
    let seqs: Vec<i64> = events.iter().filter_map(|v| v["seq"].as_i64()).collect();
    let last = *seqs.last().expect("events were written");
    assert_eq!(
        seqs,
        ((since + 1)..=last).collect::<Vec<_>>(),
        "the log has a gap or a duplicate"
    );
    // Acquires: (issue prefix, token) of each lease.acquired event.
    let acquired: BTreeSet<(String, i64)> = events
        .iter()
        .filter(|v| v["type"] == "lease.acquired")
        .map(|v| {
            (
                v["object_id"].as_str().unwrap()[..8].to_string(),
                v["payload"]["token"].as_i64().unwrap(),
            )
        })
        .collect();
    let shown = h.ssh_exec(&format!("collab-issue show r.git {}", scene.shared));
    assert_eq!(shown.code, 0, "{shown:?}");
    let mut bodies: BTreeMap<String, usize> = BTreeMap::new();
    for c in shown.json()["comments"].as_array().unwrap() {
        *bodies
            .entry(c["body"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    let (mut acked, mut unavailable, mut unknown) = (0, 0, 0);
    for d in done {
        if d.out.code != 0 {
            assert_clear(&d.out);
            if d.out.stderr.trim_end() == UNAVAILABLE {
                unavailable += 1;
            } else {
                unknown += 1;
            }
            continue;
        }
        acked += 1;
        match &d.write {
            Write::Comment { body } => assert_eq!(
                bodies.get(body),
                Some(&1),
                "an acknowledged comment is missing or repeated: {d:?}"
            ),
            Write::Acquire { issue } => {
                let v = d.out.json();
                assert_eq!(v["status"], "acquired", "{d:?}");
                let token = v["token"].as_i64().unwrap();
                assert!(
                    acquired.contains(&(issue.clone(), token)),
                    "an acknowledged acquire is not in the log: {d:?}"
                );
            }
            Write::Release => {}
        }
    }
    let (mut child, rx) = watcher;
    let mut seen = Vec::new();
    // Hang guard, not a timing assertion.
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.last() != Some(&last) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(seq) => seen.push(seq),
            Err(_) => panic!(
                "the watcher stopped at {:?} of {last}; log:\n{}",
                seen.last(),
                h.log()
            ),
        }
    }
    assert_eq!(
        seen, seqs,
        "the watcher saw a gap, a duplicate or a reordering"
    );
    let _ = child.kill();
    let _ = child.wait();
    (acked, unavailable, unknown)
}

/// A waiter for `issue` (held by `holder`) attached now; returns its
/// answer once the lease is released.
fn waiter<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    h: &'s ServerHarness,
    key: &'s Path,
    issue: &'s str,
) -> std::thread::ScopedJoinHandle<'s, SshOutput> {
    s.spawn(move || {
        h.ssh_exec_as(
            key,
            &format!("collab-lease acquire r.git {issue} --wait 60"),
            b"",
        )
    })
}

// ------------------------------------------------------------------ tests

/// `pg_ctl restart -m fast`, then `-m immediate`, while six writers run
/// over ssh: nothing acknowledged is lost, errors are clear, the server
/// serves again within seconds, the watcher and the waiter carry on.
#[test]
fn restarts_fast_and_immediate_under_load_lose_no_acknowledged_write() {
    let Some(_) = pg::admin_url() else { return };
    let cluster = Cluster::new();
    cluster.create_database("faults");
    let url = format!("postgres://collab@{}/faults", cluster.host());
    let h = ServerHarness::start_on_url(HarnessOptions::default(), &url);
    let scene = scene(&h, 6);
    let since = head(&h);
    let watch = h.event_watcher(since);
    // A lease held by `a`, `b` waiting for it across both restarts.
    let (a, b) = (h.authorized_key("a"), h.authorized_key("b"));
    let contested = h.open_server_issue("r", "Contested")[..8].to_string();
    let held = h.ssh_exec_as(&a, &format!("collab-lease acquire r.git {contested}"), b"");
    assert_eq!(held.code, 0, "{held:?}");
    let mut recovered = Vec::new();
    let (done, waited) = std::thread::scope(|s| {
        let waiting = waiter(s, &h, &b, &contested);
        std::thread::sleep(Duration::from_millis(500));
        let done = under_load(&h, &scene, || {
            for mode in ["fast", "immediate"] {
                cluster.restart(mode);
                recovered.push((mode, serves_again(&h, &scene.shared, mode)));
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        let released = h.ssh_exec_as(&a, &format!("collab-lease release r.git {contested}"), b"");
        assert_eq!(released.code, 0, "{released:?}");
        (done, waiting.join().unwrap())
    });
    assert_eq!(waited.code, 0, "the waiter lost its wait: {waited:?}");
    assert_eq!(waited.json()["status"], "acquired", "{waited:?}");
    let (acked, unavailable, unknown) = check(&h, &scene, &done, since, watch);
    assert!(acked >= 30, "too little load to mean anything: {acked}");
    eprintln!("restarts: {acked} writes acknowledged, {unavailable} unavailable, {unknown} perhaps committed; served again after {recovered:?}");
}

/// The server's backends terminated (`pg_terminate_backend`) every 150 ms
/// for five seconds while writers run: connections cut mid-transaction and
/// at COMMIT. Nothing acknowledged is lost, errors are clear, and the
/// server serves again at once.
#[test]
fn connections_cut_mid_transaction_lose_no_acknowledged_write() {
    let Some(admin) = pg::admin_url() else { return };
    let h = ServerHarness::start_on_postgres(HarnessOptions::default()).expect("PostgreSQL");
    let url = h.db_setting();
    let name = url
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_string();
    let scene = scene(&h, 6);
    let since = head(&h);
    let watch = h.event_watcher(since);
    let mut cut = 0;
    let done = under_load(&h, &scene, || {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            cut += pg::query_i64(
                &admin,
                &format!(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = '{name}' AND pid <> pg_backend_pid()) t"
                ),
            )
            .expect("terminating backends");
            std::thread::sleep(Duration::from_millis(150));
        }
    });
    let after = serves_again(&h, &scene.shared, "after the cuts");
    let (acked, unavailable, unknown) = check(&h, &scene, &done, since, watch);
    assert!(cut >= 20, "too few connections cut to mean anything: {cut}");
    assert!(acked >= 30, "too little load to mean anything: {acked}");
    eprintln!(
        "cuts: {cut} backends terminated; {acked} writes acknowledged, {unavailable} unavailable, {unknown} perhaps committed; served after {after:?}"
    );
}

/// The URL names two hosts (`host1:port1,host2:port2`) and asks for a
/// read-write session; the first cluster stops, a copy of its data (a
/// promoted standby that had every commit) starts at the second address:
/// the server serves again within seconds, through the second, with
/// everything acknowledged before.
#[test]
fn failover_to_the_second_address_serves_again_with_every_acknowledged_write() {
    let Some(_) = pg::admin_url() else { return };
    let primary = Cluster::new();
    primary.create_database("faults");
    // The standby's address, free until it takes over.
    let standby_port = free_port();
    let url = format!(
        "postgres://collab@{},127.0.0.1:{standby_port}/faults?target_session_attrs=read-write",
        primary.host()
    );
    let h = ServerHarness::start_on_url(HarnessOptions::default(), &url);
    let scene = scene(&h, 4);
    let since = head(&h);
    let watch = h.event_watcher(since);
    let mut standby = None;
    let mut recovered = None;
    let done = under_load(&h, &scene, || {
        primary.stop("immediate");
        standby = Some(primary.copy(standby_port));
        recovered = Some(serves_again(&h, &scene.shared, "failover"));
    });
    let standby = standby.unwrap();
    // The writes after the failover are in the second cluster.
    let comments = pg::query_i64(
        &format!("postgres://collab@{}/faults", standby.host()),
        "SELECT count(*) FROM issue_comments",
    );
    let (acked, unavailable, unknown) = check(&h, &scene, &done, since, watch);
    assert!(acked >= 20, "too little load to mean anything: {acked}");
    eprintln!(
        "failover: {acked} writes acknowledged, {unavailable} unavailable, {unknown} perhaps committed; served again after {recovered:?}; \
         {comments:?} comments on the standby"
    );
}

/// Readers over ssh while the database is stopped for a second and started
/// again: a read that finds it unreachable waits for it (the read pool's
/// backoff, at most `DB_WAIT`) instead of failing at once, so every read
/// succeeds, and some of them took the outage's length.
#[test]
fn reads_wait_out_a_short_outage() {
    let Some(_) = pg::admin_url() else { return };
    let cluster = Cluster::new();
    cluster.create_database("faults");
    let url = format!("postgres://collab@{}/faults", cluster.host());
    let h = ServerHarness::start_on_url(HarnessOptions::default(), &url);
    h.create_repo("r");
    let shared = h.open_server_issue("r", "Read me")[..8].to_string();
    let outage = Duration::from_millis(1500);
    let stop = AtomicBool::new(false);
    let reads: Mutex<Vec<(Duration, SshOutput)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (stop, reads, shared, h) = (&stop, &reads, &shared, &h);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    let out = h.ssh_exec(&format!("collab-issue show r.git {shared}"));
                    reads.lock().unwrap().push((start.elapsed(), out));
                }
            });
        }
        std::thread::sleep(Duration::from_secs(1));
        cluster.stop("fast");
        std::thread::sleep(outage);
        cluster.start();
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
    });
    let reads = reads.into_inner().unwrap();
    for (_, out) in &reads {
        assert_eq!(out.code, 0, "a read failed during a short outage: {out:?}");
        assert_eq!(out.json()["title"], "Read me", "{out:?}");
    }
    // The reads in flight when the database stopped waited for it.
    let waited = reads.iter().filter(|(took, _)| *took >= outage / 2).count();
    assert!(
        waited >= 1,
        "no read met the outage: {:?}",
        reads.iter().map(|(t, _)| t).collect::<Vec<_>>()
    );
}
