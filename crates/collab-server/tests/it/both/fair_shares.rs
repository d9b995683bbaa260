//! Fair shares per key (issue 25, items 1 and 7): one admitted key, even a
//! read-only one, fills its own share of authenticated SSH connections,
//! event watchers and lease waiters, and is then refused with one clear
//! line, while other keys from the same address are served. Idle
//! connections are reclaimed near the connection cap, the biggest holder
//! first. Real server, real OpenSSH `ssh` processes, all on 127.0.0.1 (a
//! fleet behind one address is the normal case, so nothing here may rely
//! on the address to tell keys apart).

use collab_testkit as common;
use collab_testkit::web as web_support;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{HarnessOptions, ServerHarness};

fn server(env: &[(&str, &str)]) -> ServerHarness {
    ServerHarness::start_with(HarnessOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    })
}

/// Background `ssh` processes, killed and reaped however the test ends
/// (a failed assertion included), so none outlives it.
#[derive(Default)]
struct Background {
    children: Vec<Child>,
}

impl Drop for Background {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Background {
    /// `ssh` as `key` with the harness options (log level `log_level`),
    /// then `args`; stdin is kept open (a closed stdin is not a leaving
    /// client, but keep the channel's side as a real user's would be),
    /// stderr goes to `stderr`.
    fn ssh(
        &mut self,
        h: &ServerHarness,
        key: &Path,
        log_level: &str,
        args: &[&str],
        stderr: &Path,
    ) -> usize {
        let options: Vec<String> = h
            .ssh_options(key)
            .into_iter()
            .map(|o| {
                if o == "LogLevel=ERROR" {
                    format!("LogLevel={log_level}")
                } else {
                    o
                }
            })
            .collect();
        let child = Command::new("ssh")
            .args(options)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(stderr).unwrap())
            .spawn()
            .expect("spawn ssh");
        self.children.push(child);
        self.children.len() - 1
    }

    /// Whether child `i` is still running.
    fn running(&mut self, i: usize) -> bool {
        self.children[i].try_wait().unwrap().is_none()
    }
}

/// Poll `check` every 50 ms until it holds or `limit` passes.
fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Open `n` idle (`ssh -N`: no channel) connections as `key` and wait
/// until each has logged in; returns their indices in `bg`.
fn idle_connections(
    h: &ServerHarness,
    bg: &mut Background,
    key: &Path,
    tag: &str,
    n: usize,
) -> Vec<(usize, PathBuf)> {
    let opened: Vec<(usize, PathBuf)> = (0..n)
        .map(|i| {
            let log = h.temp_dir().join(format!("{tag}-{i}.log"));
            let id = bg.ssh(h, key, "DEBUG1", &["-N", "git@127.0.0.1"], &log);
            (id, log)
        })
        .collect();
    for (id, log) in &opened {
        assert!(
            eventually(Duration::from_secs(20), || read(log)
                .contains("Authenticated to")),
            "{tag} connection {id} did not log in: {}\n{}",
            read(log),
            h.log()
        );
    }
    opened
}

/// Start `collab-events watch --since 0` as `key` and wait for its first
/// line (replayed events or a heartbeat): the watcher holds its slot then.
fn watcher(h: &ServerHarness, bg: &mut Background, key: &Path, tag: &str) -> usize {
    let log = h.temp_dir().join(format!("{tag}.log"));
    let id = bg.ssh(
        h,
        key,
        "ERROR",
        &["git@127.0.0.1", "collab-events watch --since 0"],
        &log,
    );
    let stdout = bg.children[id].stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{tag}: no line from the watcher: {}", read(&log)));
    assert!(line.starts_with('{'), "{tag}: {line:?} {}", read(&log));
    id
}

fn metric(h: &ServerHarness, what: &str) -> u64 {
    let text = web_support::get(h, "/metrics").text();
    let prefix =
        format!("git_collab_limit_refusals_total{{what=\"{what}\",limit=\"per_principal\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|n| n.trim().parse().unwrap())
        .unwrap_or(0)
}

#[test]
fn one_key_fills_only_its_own_share_of_connections_watchers_and_waiters() {
    let h = server(&[
        ("GIT_COLLAB_SSH__MAX_CONNECTIONS_PER_PRINCIPAL", "8"),
        ("GIT_COLLAB_EVENTS__MAX_WATCHERS_PER_PRINCIPAL", "3"),
        ("GIT_COLLAB_EVENTS__HEARTBEAT_SECS", "1"),
        ("GIT_COLLAB_LEASES__MAX_WAITERS_PER_PRINCIPAL", "2"),
    ]);
    let issue = web_support::public_repo_with_issue(&h);
    // The hogs: K1 (read-only) takes connections, K3 (read-only) watchers,
    // K4 (a writer: an admin) lease waiters. K2, the default admin key, is
    // everybody else; all from 127.0.0.1.
    let k1 = h.authorized_key("k1");
    let k3 = h.authorized_key("k3");
    let k4 = h.named_key("k4");
    h.authorize_key(&k4, true);
    let k5 = h.named_key("k5");
    h.authorize_key(&k5, true);
    let k2 = h.ssh_client_key();
    let mut bg = Background::default();

    // Connections: K1 holds its 8; the 9th is disconnected with the reason.
    let held = idle_connections(&h, &mut bg, &k1, "k1", 8);
    let refused = h.ssh_exec_as(&k1, "collab-whoami", b"");
    assert_eq!(refused.code, 255, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("too many connections with this key (8 open); close one and try again"),
        "{refused:?}"
    );
    assert_eq!(refused.stderr.trim().lines().count(), 1, "{refused:?}");
    let again = h.ssh_exec_as(&k1, "collab-whoami", b"");
    assert_eq!(again.code, 255, "{again:?}");
    assert_eq!(metric(&h, "ssh"), 2);
    // Logged once for the two refusals (at most once a minute per key).
    let logged = |h: &ServerHarness, what: &str| {
        h.log()
            .lines()
            .filter(|l| {
                l.contains(&format!("{what}: share per principal reached"))
                    && l.contains("logged at most once a minute per principal")
            })
            .count()
    };
    assert_eq!(logged(&h, "ssh"), 1, "{}", h.log());

    // Everyone else, from the same address, is served meanwhile.
    let whoami = h.ssh_exec_as(&k2, "collab-whoami", b"");
    assert_eq!(whoami.code, 0, "{whoami:?}");
    let clone = h.clone_as(&k2, "r", "k2-clone");
    assert!(clone.join("README.md").is_file());
    let lease = h.ssh_exec_as(&k2, &format!("collab-lease acquire 'r.git' '{issue}'"), b"");
    assert_eq!(lease.code, 0, "{lease:?}");
    assert_eq!(lease.json()["status"], "acquired", "{lease:?}");

    // Ending one of K1's connections gives its place back.
    let (first, _) = &held[0];
    let _ = bg.children[*first].kill();
    let _ = bg.children[*first].wait();
    assert!(
        eventually(Duration::from_secs(10), || h
            .ssh_exec_as(&k1, "collab-whoami", b"")
            .success()),
        "K1 never got its place back: {}",
        h.log()
    );
    for (id, _) in &held[1..] {
        assert!(
            bg.running(*id),
            "a K1 connection within its share was closed"
        );
    }

    // Watchers: K3 holds its 3; the 4th is refused with one line, exit 1.
    for i in 0..3 {
        watcher(&h, &mut bg, &k3, &format!("k3-watch-{i}"));
    }
    let refused = h.ssh_exec_as(&k3, "collab-events watch --since 0", b"");
    assert_eq!(refused.code, 1, "{refused:?}");
    assert_eq!(
        refused.stderr,
        "error: too many event watchers with this key (3 connected); stop one and try again\n"
    );
    assert_eq!(metric(&h, "watch"), 1);
    // Another key watches meanwhile.
    watcher(&h, &mut bg, &k2, "k2-watch");

    // Lease waiters: K2 holds the lease; K4 queues its 2 waits, the 3rd is
    // refused at once; K5 still queues (and times out: exit 4, held).
    let before = h.log().matches("lease wait queued").count();
    for i in 0..2 {
        let log = h.temp_dir().join(format!("k4-wait-{i}.log"));
        bg.ssh(
            &h,
            &k4,
            "ERROR",
            &[
                "git@127.0.0.1",
                &format!("collab-lease acquire 'r.git' '{issue}' --wait 120"),
            ],
            &log,
        );
    }
    assert!(
        eventually(Duration::from_secs(20), || h
            .log()
            .matches("lease wait queued")
            .count()
            >= before + 2),
        "{}",
        h.log()
    );
    let started = Instant::now();
    let refused = h.ssh_exec_as(
        &k4,
        &format!("collab-lease acquire 'r.git' '{issue}' --wait 120"),
        b"",
    );
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused
            .stdout
            .contains("too many lease waits with this key (2 waiting); try again when one ends")
            || refused.stderr.contains(
                "too many lease waits with this key (2 waiting); try again when one ends"
            ),
        "{refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "refused only after waiting"
    );
    assert_eq!(metric(&h, "lease_wait"), 1);
    let other = h.ssh_exec_as(
        &k5,
        &format!("collab-lease acquire 'r.git' '{issue}' --wait 1"),
        b"",
    );
    assert_eq!(other.code, 4, "{other:?}");
    assert_eq!(other.json()["status"], "held", "{other:?}");
    assert_eq!(logged(&h, "watch"), 1, "{}", h.log());
    assert_eq!(logged(&h, "lease_wait"), 1, "{}", h.log());
}

#[test]
fn idle_connections_are_reclaimed_near_the_cap_biggest_holder_first() {
    // Cap 20, so a key's share is at most 5 (a quarter); pressure from 10
    // open (50 %), when connections idle 2 s are closed until under 10.
    let h = server(&[
        ("GIT_COLLAB_SSH__MAX_CONNECTIONS", "20"),
        ("GIT_COLLAB_SSH__PRESSURE_PERCENT", "50"),
        ("GIT_COLLAB_SSH__PRESSURE_IDLE_TIMEOUT", "2s"),
    ]);
    let ka = h.authorized_key("ka");
    let kb = h.authorized_key("kb");
    let kc = h.authorized_key("kc");
    let mut bg = Background::default();
    let a = idle_connections(&h, &mut bg, &ka, "ka", 5);
    // The 6th of KA is past its quarter share.
    let refused = h.ssh_exec_as(&ka, "collab-whoami", b"");
    assert!(
        refused
            .stderr
            .contains("too many connections with this key (5 open)"),
        "{refused:?}"
    );
    // Below the threshold nothing is reclaimed, however long idle.
    let b = idle_connections(&h, &mut bg, &kb, "kb", 3);
    let c1 = idle_connections(&h, &mut bg, &kc, "kc", 1);
    std::thread::sleep(Duration::from_secs(4));
    let all: Vec<(usize, PathBuf)> = a.iter().chain(&b).chain(&c1).cloned().collect();
    for (id, log) in &all {
        assert!(bg.running(*id), "closed below the threshold: {}", read(log));
    }
    // The 10th connection brings pressure: one connection goes, KA's (it
    // holds the most), and the count stays under the threshold after.
    let c2 = idle_connections(&h, &mut bg, &kc, "kc2", 1);
    let closed = |bg: &mut Background| {
        all.iter()
            .chain(&c2)
            .filter(|(id, _)| !bg.running(*id))
            .map(|(id, log)| (*id, read(log)))
            .collect::<Vec<_>>()
    };
    assert!(
        eventually(Duration::from_secs(15), || !closed(&mut bg).is_empty()),
        "nothing reclaimed under pressure: {}",
        h.log()
    );
    std::thread::sleep(Duration::from_secs(4));
    let gone = closed(&mut bg);
    assert_eq!(gone.len(), 1, "{gone:?}");
    let (id, log) = &gone[0];
    assert!(a.iter().any(|(x, _)| x == id), "not KA's: {log}");
    assert!(
        log.contains("idle connection closed: the server is near its connection limit"),
        "{log}"
    );
    let text = web_support::get(&h, "/metrics").text();
    assert!(
        text.contains("git_collab_ssh_idle_closed_total{why=\"pressure\"} 1\n"),
        "{text}"
    );
    // A busy connection is not idle: a command still runs for everyone.
    let whoami = h.ssh_exec_as(&kb, "collab-whoami", b"");
    assert_eq!(whoami.code, 0, "{whoami:?}");
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout_but_a_busy_one_is_not() {
    let h = server(&[
        ("GIT_COLLAB_SSH__IDLE_TIMEOUT", "2s"),
        ("GIT_COLLAB_EVENTS__HEARTBEAT_SECS", "1"),
    ]);
    let key = h.authorized_key("k");
    let mut bg = Background::default();
    // Keepalives every second are not use: nothing runs on it.
    let log = h.temp_dir().join("pinging.log");
    let pinging = bg.ssh(
        &h,
        &key,
        "DEBUG1",
        &["-N", "-o", "ServerAliveInterval=1", "git@127.0.0.1"],
        &log,
    );
    let busy = watcher(&h, &mut bg, &key, "busy-watch");
    assert!(
        eventually(Duration::from_secs(15), || !bg.running(pinging)),
        "the idle connection was not closed: {}",
        read(&log)
    );
    assert!(
        read(&log).contains("idle connection closed: no command for 2s"),
        "{}",
        read(&log)
    );
    // The watcher has been connected past the timeout and still runs.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        bg.running(busy),
        "a connection with a command running was closed"
    );
    let text = web_support::get(&h, "/metrics").text();
    assert!(
        text.contains("git_collab_ssh_idle_closed_total{why=\"idle_timeout\"} 1\n"),
        "{text}"
    );
}
