//! SSH transport benchmark: git-collab-server (russh) against OpenSSH sshd
//! running `git-upload-pack`/`git-receive-pack`, in one run, same client,
//! same machine, loopback.
//!
//! - push and clone of a ~50 MB repository (incompressible blobs);
//! - the round trip of one exec request with a fresh connection:
//!   `ssh host collab-whoami` (git-collab) vs `ssh host true` (sshd).
//!
//! Writes the medians and ratios to docs/benchmarks.md under
//! "## SSH transport". Needs /usr/sbin/sshd and root (for sshd's privilege
//! separation); without them only the git-collab numbers are printed.
//!
//! Run: `cargo bench --bench ssh_transport` (BENCH_MB, BENCH_RUNS and
//! BENCH_RTT_RUNS override the size and repetitions).

use collab_testkit::bench as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use collab_testkit::ServerHarness;
use support::{env_usize, median, run_ok, timed, write_section, Sshd};

/// A local repository with `mb` MiB of incompressible data in one commit.
fn make_source(h: &ServerHarness, mb: usize) -> PathBuf {
    let src = h.temp_dir().join("src");
    std::fs::create_dir_all(&src).unwrap();
    run_ok(
        h.git_command(&h.ssh_client_key(), &src)
            .args(["init", "-q"]),
    );
    let mut seed = 0x2545f4914f6cdd1du64;
    for i in 0..mb.div_ceil(4) {
        let mut blob = vec![0u8; 4 * 1024 * 1024];
        for chunk in blob.chunks_mut(8) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            chunk.copy_from_slice(&seed.to_le_bytes()[..chunk.len()]);
        }
        std::fs::write(src.join(format!("blob{i:03}")), blob).unwrap();
    }
    run_ok(h.git_command(&h.ssh_client_key(), &src).args(["add", "."]));
    run_ok(
        h.git_command(&h.ssh_client_key(), &src)
            .args(["commit", "-q", "-m", "data"]),
    );
    src
}

struct Row {
    what: String,
    collab: Duration,
    sshd: Option<Duration>,
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    let mb = env_usize("BENCH_MB", 50);
    let runs = env_usize("BENCH_RUNS", 3).max(1);
    let rtt_runs = env_usize("BENCH_RTT_RUNS", 20).max(1);

    // Other work on the machine skews everything: record how busy it was.
    let load = support::load_average();
    let h = ServerHarness::start();
    let key = h.ssh_client_key();
    let sshd = Sshd::start(&h.temp_dir().join("sshd"), &key);
    let src = make_source(&h, mb);
    let sshd_repos = h.temp_dir().join("sshd-repos");
    std::fs::create_dir_all(&sshd_repos).unwrap();
    let sshd_url = |name: &str| {
        let s = sshd.as_ref().unwrap();
        format!(
            "ssh://{}@127.0.0.1:{}{}",
            s.user,
            s.port,
            sshd_repos.join(name).display()
        )
    };

    let mut rows = Vec::new();

    // Push into a fresh empty repository each time.
    let (mut collab_push, mut sshd_push) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let name = format!("push{i}");
        h.create_repo(&name);
        collab_push.push(timed(
            h.git_command(&key, &src)
                .args(["push", "-q"])
                .arg(h.repo_url(&name))
                .arg("HEAD:main"),
        ));
        if sshd.is_some() {
            run_ok(
                Command::new("git")
                    .args(["init", "-q", "--bare"])
                    .arg(sshd_repos.join(format!("{name}.git"))),
            );
            sshd_push.push(timed(
                h.git_command(&key, &src)
                    .args(["push", "-q"])
                    .arg(sshd_url(&format!("{name}.git")))
                    .arg("HEAD:main"),
            ));
        }
    }
    rows.push(Row {
        what: format!("push {mb} MiB"),
        collab: median(collab_push),
        sshd: sshd.as_ref().map(|_| median(sshd_push)),
    });

    // Clone the pushed repository.
    let (mut collab_clone, mut sshd_clone) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let dest = h.temp_dir().join(format!("clone-collab-{i}"));
        collab_clone.push(timed(
            h.git_command(&key, h.temp_dir())
                .args(["clone", "-q"])
                .arg(h.repo_url("push0"))
                .arg(&dest),
        ));
        let _ = std::fs::remove_dir_all(&dest);
        if sshd.is_some() {
            let dest = h.temp_dir().join(format!("clone-sshd-{i}"));
            sshd_clone.push(timed(
                h.git_command(&key, h.temp_dir())
                    .args(["clone", "-q"])
                    .arg(sshd_url("push0.git"))
                    .arg(&dest),
            ));
            let _ = std::fs::remove_dir_all(&dest);
        }
    }
    rows.push(Row {
        what: format!("clone {mb} MiB"),
        collab: median(collab_clone),
        sshd: sshd.as_ref().map(|_| median(sshd_clone)),
    });

    // One exec request on a fresh connection (handshake + auth + command).
    let collab_rtt: Vec<Duration> = (0..rtt_runs)
        .map(|_| {
            timed(
                Command::new("ssh")
                    .args(h.ssh_options(&key))
                    .args(["git@127.0.0.1", "collab-whoami"])
                    .stdout(Stdio::null()),
            )
        })
        .collect();
    let sshd_rtt = sshd.as_ref().map(|s| {
        let mut opts = h.ssh_options(&key);
        let p = opts.iter().position(|o| o == "-p").unwrap();
        opts[p + 1] = s.port.to_string();
        let samples: Vec<Duration> = (0..rtt_runs)
            .map(|_| {
                timed(
                    Command::new("ssh")
                        .args(&opts)
                        .arg(format!("{}@127.0.0.1", s.user))
                        .arg("true"),
                )
            })
            .collect();
        median(samples)
    });
    rows.push(Row {
        what: "exec round trip (`collab-whoami` vs `true`)".into(),
        collab: median(collab_rtt),
        sshd: sshd_rtt,
    });

    let mut table = String::from(
        "| operation | git-collab-server | OpenSSH sshd | ratio (collab / sshd) |\n|---|---|---|---|\n",
    );
    for r in &rows {
        let sshd = r
            .sshd
            .map(|d| format!("{:.0} ms", d.as_secs_f64() * 1000.0))
            .unwrap_or_else(|| "n/a".into());
        let ratio = r
            .sshd
            .map(|d| format!("{:.2}", r.collab.as_secs_f64() / d.as_secs_f64()))
            .unwrap_or_else(|| "n/a".into());
        table.push_str(&format!(
            "| {} | {:.0} ms | {} | {} |\n",
            r.what,
            r.collab.as_secs_f64() * 1000.0,
            sshd,
            ratio
        ));
    }
    println!("{table}");

    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let git = String::from_utf8_lossy(
        &Command::new("git")
            .arg("--version")
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string();
    let section = format!(
        "## SSH transport\n\n\
         `cargo bench --bench ssh_transport` ({profile} build), {}. Medians of {runs} \
         pushes/clones and {rtt_runs} round trips; same OpenSSH client, loopback, one machine \
         ({} CPUs, load average {load} at start: shared with other work, so treat the ratios as \
         rough). OpenSSH sshd runs \
         `git-upload-pack`/`git-receive-pack` through the account's shell, with its \
         `~/.bashrc` masked so shell start-up files do not count; git-collab-server runs \
         `git upload-pack|receive-pack` under russh. A ratio above 1 means git-collab-server \
         is slower.\n\n{table}",
        git,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    write_section(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("docs/benchmarks.md")
            .as_path(),
        &section,
    );
}
