//! Lease round trip over SSH: what one `git-collab issue claim` costs a
//! client, measured as `ssh host collab-lease acquire …` against
//! git-collab-server, next to OpenSSH's `ssh host true` against a local
//! sshd, in one run with the same client on loopback.
//!
//! Rows, each the median of BENCH_RTT_RUNS (default 30) fresh `ssh`
//! processes: `true` on sshd (the floor: handshake, auth, one exec),
//! `collab-whoami` (the same on git-collab-server, no lease work),
//! `collab-lease acquire` (a new tenure, durable before the reply),
//! `collab-lease release` and `collab-lease list`. The same again over one
//! shared connection (OpenSSH ControlMaster), which leaves only the exec
//! and the verb's own work. And the fresh rows once more against a server
//! with `GIT_COLLAB_SSH_QUICK_ACK=0` (ACKs left to the kernel's timer).
//!
//! Writes the table to docs/benchmarks.md under "## Lease round trip"
//! (only that section). Needs /usr/sbin/sshd and root for the sshd rows.
//!
//! Run: `cargo bench --bench lease_ssh`.

use collab_testkit::bench as support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use collab_testkit::{HarnessOptions, ServerHarness};
use support::{env_usize, median, timed, write_section, Sshd};

const SECTION: &str = "## Lease round trip";

/// How to reach one server with `ssh`: options and destination.
struct Target {
    options: Vec<String>,
    destination: String,
}

impl Target {
    fn ssh(&self, remote_cmd: &str, extra: &[String]) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.args(&self.options)
            .args(extra)
            .arg(&self.destination)
            .arg(remote_cmd)
            .stdin(Stdio::null());
        cmd
    }
}

/// OpenSSH connection sharing: the first command opens a master connection
/// that stays up; the later ones only open a channel on it.
fn control_options(dir: &Path, name: &str) -> Vec<String> {
    vec![
        "-o".into(),
        "ControlMaster=auto".into(),
        "-o".into(),
        format!("ControlPath={}", dir.join(format!("cm-{name}")).display()),
        "-o".into(),
        "ControlPersist=120".into(),
    ]
}

fn stop_master(target: &Target, extra: &[String]) {
    let _ = Command::new("ssh")
        .args(&target.options)
        .args(extra)
        .args(["-O", "exit"])
        .arg(&target.destination)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

struct Row {
    what: &'static str,
    median: Duration,
    floor: Option<Duration>,
}

/// Medians for one connection mode (`extra` ssh options): the sshd floor,
/// then the git-collab verbs.
fn measure(
    collab: &Target,
    sshd: Option<&Target>,
    issues: &[String],
    runs: usize,
    extra_collab: &[String],
    extra_sshd: &[String],
) -> Vec<(&'static str, Duration)> {
    let mut rows = Vec::new();
    if let Some(sshd) = sshd {
        // Warm-up (and, with connection sharing, opening the master).
        timed(&mut sshd.ssh("true", extra_sshd));
        let samples = (0..runs)
            .map(|_| timed(&mut sshd.ssh("true", extra_sshd)))
            .collect();
        rows.push(("sshd: `ssh host true`", median(samples)));
    }
    timed(&mut collab.ssh("collab-whoami", extra_collab));
    let samples = (0..runs)
        .map(|_| timed(&mut collab.ssh("collab-whoami", extra_collab)))
        .collect();
    rows.push(("git-collab: `collab-whoami`", median(samples)));
    let (mut acquire, mut release) = (Vec::new(), Vec::new());
    for i in 0..runs {
        // A new tenure each time: acquire, then release, alternating issues.
        let issue = &issues[i % issues.len()];
        acquire.push(timed(&mut collab.ssh(
            &format!("collab-lease acquire 'r.git' '{issue}' --ttl 600"),
            extra_collab,
        )));
        release.push(timed(&mut collab.ssh(
            &format!("collab-lease release 'r.git' '{issue}'"),
            extra_collab,
        )));
    }
    rows.push(("git-collab: `collab-lease acquire`", median(acquire)));
    rows.push(("git-collab: `collab-lease release`", median(release)));
    let samples = (0..runs)
        .map(|_| timed(&mut collab.ssh("collab-lease list 'r.git'", extra_collab)))
        .collect();
    rows.push(("git-collab: `collab-lease list`", median(samples)));
    rows
}

/// A server (with `env`) holding repository `r` with four open issues.
fn server(env: &[(&str, &str)]) -> (ServerHarness, Vec<String>) {
    let h = ServerHarness::start_with(HarnessOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    });
    h.create_repo("r");
    let issues: Vec<String> = (0..4)
        .map(|i| h.open_server_issue("r", &format!("Bench {i}")))
        .collect();
    (h, issues)
}

fn main() {
    let runs = env_usize("BENCH_RTT_RUNS", 30).max(1);
    let (h, issues) = server(&[]);
    let key = h.ssh_client_key();
    let collab = Target {
        options: h.ssh_options(&key),
        destination: "git@127.0.0.1".into(),
    };
    // The same server but ACKs left to the kernel's delayed-ACK timer
    // (ssh/quick_ack.rs), for comparison.
    let (slow_h, slow_issues) = server(&[("GIT_COLLAB_SSH_QUICK_ACK", "0")]);
    let slow = Target {
        options: slow_h.ssh_options(&slow_h.ssh_client_key()),
        destination: "git@127.0.0.1".into(),
    };
    let sshd_server = Sshd::start(&h.temp_dir().join("sshd"), &key);
    let sshd = sshd_server.as_ref().map(|s| {
        let mut options = h.ssh_options(&key);
        let p = options.iter().position(|o| o == "-p").unwrap();
        options[p + 1] = s.port.to_string();
        Target {
            options,
            destination: format!("{}@127.0.0.1", s.user),
        }
    });

    let fresh = measure(&collab, sshd.as_ref(), &issues, runs, &[], &[]);
    let delayed = measure(&slow, None, &slow_issues, runs, &[], &[]);
    let control_dir = tempfile::tempdir().unwrap();
    let cm_collab = control_options(control_dir.path(), "collab");
    let cm_sshd = control_options(control_dir.path(), "sshd");
    let shared = measure(&collab, sshd.as_ref(), &issues, runs, &cm_collab, &cm_sshd);
    stop_master(&collab, &cm_collab);
    if let Some(sshd) = &sshd {
        stop_master(sshd, &cm_sshd);
    }

    let table = render(&fresh, &delayed, &shared);
    println!("{table}");
    let command = if cfg!(debug_assertions) {
        "`cargo bench --profile dev --bench lease_ssh` (debug build)"
    } else {
        "`cargo bench --bench lease_ssh` (release build)"
    };
    let ssh_version = String::from_utf8_lossy(
        &Command::new("ssh")
            .arg("-V")
            .output()
            .map(|o| o.stderr)
            .unwrap_or_default(),
    )
    .trim()
    .to_string();
    let section = format!(
        "{SECTION}\n\n\
         {command}, {ssh_version}, {} CPUs, \
         loopback, one run on {}. Medians of {runs} runs per row; each run is one `ssh` \
         process. \"Fresh connection\" pays the TCP and SSH handshake and public-key \
         authentication every time, as `git-collab issue claim` does; \"shared \
         connection\" reuses one OpenSSH ControlMaster connection, so only the exec \
         channel and the verb's own work remain. An acquire and a release each start or \
         end a tenure and are answered only after their write is durable (fsync). \
         \"fresh, delayed ACKs\" is a second server \
         with `GIT_COLLAB_SSH_QUICK_ACK=0`: without the quick ACK after each read \
         (`ssh/quick_ack.rs`), an OpenSSH client's small packet sent right after another \
         waits for the kernel's delayed ACK. \
         \"vs sshd `true`\" is the row's time divided by OpenSSH's `ssh host true` in the \
         same mode (fresh for both fresh modes).\n\n{table}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        chrono::Utc::now().format("%Y-%m-%d"),
    );
    write_section(
        &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md"),
        &section,
    );
    drop(sshd_server);
}

fn render(
    fresh: &[(&'static str, Duration)],
    delayed: &[(&'static str, Duration)],
    shared: &[(&'static str, Duration)],
) -> String {
    let floor_of = |set: &[(&'static str, Duration)]| {
        set.iter()
            .find(|(what, _)| what.starts_with("sshd"))
            .map(|(_, d)| *d)
    };
    let rows = |set: &[(&'static str, Duration)], floor: Option<Duration>| -> Vec<Row> {
        set.iter()
            .map(|(what, median)| Row {
                what,
                median: *median,
                floor,
            })
            .collect()
    };
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    let mut table =
        String::from("| connection | command | median | vs sshd `true` |\n|---|---|---:|---:|\n");
    for (mode, set, floor) in [
        ("fresh", fresh, floor_of(fresh)),
        ("fresh, delayed ACKs", delayed, floor_of(fresh)),
        ("shared", shared, floor_of(shared)),
    ] {
        for row in rows(set, floor) {
            let ratio = row
                .floor
                .map(|f| format!("{:.2}x", row.median.as_secs_f64() / f.as_secs_f64()))
                .unwrap_or_else(|| "n/a".into());
            table.push_str(&format!(
                "| {mode} | {} | {} | {ratio} |\n",
                row.what,
                ms(row.median)
            ));
        }
    }
    table
}
