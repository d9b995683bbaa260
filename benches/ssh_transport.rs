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

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{public_key_line, ServerHarness};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn timed(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    run_ok(cmd);
    start.elapsed()
}

/// OpenSSH sshd on a loopback port with its own host key and authorized_keys.
struct Sshd {
    child: Child,
    port: u16,
    user: String,
}

impl Sshd {
    fn start(dir: &Path, client_key: &Path) -> Option<Sshd> {
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.exists() || unsafe { libc::geteuid() } != 0 {
            eprintln!("sshd comparison skipped: needs /usr/sbin/sshd and root");
            return None;
        }
        std::fs::create_dir_all(dir).unwrap();
        std::fs::create_dir_all("/run/sshd").ok();
        let host_key = dir.join("host_key");
        common::generate_key(&host_key, "sshd-host");
        let auth = dir.join("authorized_keys");
        std::fs::write(&auth, format!("{}\n", public_key_line(client_key))).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
                 PidFile {}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PubkeyAuthentication yes\nUsePAM no\nStrictModes no\nPermitRootLogin yes\n\
                 AcceptEnv GIT_PROTOCOL\nPrintMotd no\nPrintLastLog no\nUseDNS no\n",
                host_key.display(),
                auth.display(),
                dir.join("sshd.pid").display()
            ),
        )
        .unwrap();
        // bash sources ~/.bashrc for commands run by sshd; mask it in a
        // private mount namespace so the account's shell start-up files
        // (which may be slow on a dev machine) are not what we measure.
        let empty_rc = dir.join("empty_bashrc");
        std::fs::write(&empty_rc, "").unwrap();
        let bashrc =
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".bashrc");
        let script = format!(
            "mount --bind '{}' '{}' 2>/dev/null || echo 'warning: ~/.bashrc not masked' >&2; exec /usr/sbin/sshd -D -f '{}'",
            empty_rc.display(),
            bashrc.display(),
            config.display()
        );
        let child = if bashrc.exists() && Path::new("/usr/bin/unshare").exists() {
            Command::new("/usr/bin/unshare")
                .args(["-m", "sh", "-c", &script])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .ok()?
        } else {
            Command::new(sshd)
                .arg("-D")
                .arg("-f")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .ok()?
        };
        let user = String::from_utf8(Command::new("id").arg("-un").output().ok()?.stdout)
            .ok()?
            .trim()
            .to_string();
        // Wait until it accepts connections.
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(Sshd { child, port, user });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("sshd did not start");
        None
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
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
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs/benchmarks.md")
            .as_path(),
        &section,
    );
}

/// Replace (or append) the "## SSH transport" section of docs/benchmarks.md.
fn write_section(path: &Path, section: &str) {
    let existing = std::fs::read_to_string(path).unwrap_or_else(|_| "# Benchmarks\n".into());
    let mut out = String::new();
    let mut skipping = false;
    let mut replaced = false;
    for line in existing.lines() {
        if line.starts_with("## ") {
            skipping = line.trim() == "## SSH transport";
            if skipping {
                out.push_str(section);
                out.push('\n');
                replaced = true;
            }
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !replaced {
        if !out.ends_with("\n\n") {
            out.push('\n');
        }
        out.push_str(section);
    }
    std::fs::write(path, out).unwrap();
    eprintln!("wrote {}", path.display());
}
