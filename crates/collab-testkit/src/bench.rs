//! What the benchmarks share: reading counts from the environment, timing
//! commands and taking medians, formatting durations, building a repository
//! of N issues x M events through `git_collab`'s store API, a local OpenSSH
//! sshd on loopback to compare against, and replacing one `## ` section of
//! docs/benchmarks.md. Each bench uses it as
//! `collab_testkit::bench`.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use collab_record::event::{
    Action, Author, Event, IssueClose, IssueComment, IssueLabel, IssueOpen,
};
use collab_record::sign::SigningKey;
use collab_record::{refs, store};
use git2::Repository;

/// The number in environment variable `name`, or `default` when it is unset
/// or not a number.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The middle sample (the upper one of the two for an even count).
pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The `p` quantile of `samples` (nearest rank: the smallest sample with at
/// least `p` of them at or below it; `p = 1.0` is the largest).
pub fn percentile(mut samples: Vec<Duration>, p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
    samples[i]
}

/// The 1-minute load average from /proc/loadavg, as written there, or
/// `unknown`: what the tables' headers say the machine was doing.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Run `cmd`, require exit 0, return how long it took.
pub fn timed(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    let out = cmd.output().expect("run");
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

/// Run `cmd` and require exit 0.
pub fn run_ok(cmd: &mut Command) {
    timed(cmd);
}

/// `12.3 ms` below a second, `1.23 s` from one second up.
pub fn fmt(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        format!("{ms:.1} ms")
    }
}

/// `git --git-dir <git_dir> <args>`, required to succeed.
pub fn git(git_dir: &Path, args: &[&str]) -> Output {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Write `issues` issues of `events` events each into `repo` (one open,
/// then comments, labels and, for every other issue, a close), through an
/// in-memory object backend dumped as one pack at the end, as a repository
/// looks after `git gc`. Returns the author, for events written later.
pub fn build(repo: &Repository, key: &SigningKey, issues: usize, events: usize) -> Author {
    let author = Author {
        name: "bench".into(),
        key: key.public_key_line(),
    };
    let odb = repo.odb().unwrap();
    let mempack = odb.add_new_mempack_backend(1000).unwrap();
    let base = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    for i in 0..issues {
        let at = |k: usize| base + chrono::Duration::seconds((i * events + k) as i64);
        let open = Event::new(
            author.clone(),
            at(0),
            Action::IssueOpen(IssueOpen {
                title: format!("Issue number {i}"),
                body: format!("Body of issue {i}.\n\nSome more text to make it realistic."),
                labels: vec!["bench".into()],
                nonce: format!("{i:032x}"),
            }),
        );
        let root = store::write_event_commit(repo, &[], &open, key).unwrap();
        let mut tip = root;
        for k in 1..events {
            let action = if k == events - 1 && i % 2 == 0 {
                Action::IssueClose(IssueClose { reason: None })
            } else if k % 3 == 0 {
                Action::IssueLabel(IssueLabel {
                    add: vec![format!("l{k}")],
                    remove: vec![],
                })
            } else {
                Action::IssueComment(IssueComment {
                    body: format!("Comment {k} on issue {i}."),
                })
            };
            let event = Event::new(author.clone(), at(k), action);
            tip = store::write_event_commit(repo, &[tip], &event, key).unwrap();
        }
        store::compare_and_swap(
            repo,
            &refs::issue_ref(&root.to_string()),
            None,
            tip,
            "bench",
        )
        .unwrap();
    }
    let mut buf = git2::Buf::new();
    mempack.dump(repo, &mut buf).unwrap();
    let mut writer = odb.packwriter().unwrap();
    writer.write_all(&buf).unwrap();
    writer.commit().unwrap();
    mempack.reset().unwrap();
    author
}

/// OpenSSH sshd on a loopback port with its own host key and
/// authorized_keys, killed on drop.
pub struct Sshd {
    child: Child,
    pub port: u16,
    /// The account sshd logs clients in as (the one running the bench).
    pub user: String,
}

impl Sshd {
    /// Start sshd in `dir`, letting in `client_key`. `None` (with a note on
    /// stderr) without /usr/sbin/sshd or root, which its privilege
    /// separation needs.
    pub fn start(dir: &Path, client_key: &Path) -> Option<Sshd> {
        Sshd::start_with(dir, client_key, "")
    }

    /// [`Sshd::start`] with more `sshd_config` lines (e.g. `MaxStartups`
    /// for a storm of logins: OpenSSH drops unauthenticated connections
    /// past 10 by default).
    pub fn start_with(dir: &Path, client_key: &Path, extra_config: &str) -> Option<Sshd> {
        let sshd = Path::new("/usr/sbin/sshd");
        // SAFETY: geteuid has no preconditions.
        if !sshd.exists() || unsafe { libc::geteuid() } != 0 {
            eprintln!("sshd comparison skipped: needs /usr/sbin/sshd and root");
            return None;
        }
        std::fs::create_dir_all(dir).unwrap();
        std::fs::create_dir_all("/run/sshd").ok();
        let host_key = dir.join("host_key");
        crate::harness::generate_key(&host_key, "sshd-host");
        let auth = dir.join("authorized_keys");
        std::fs::write(
            &auth,
            format!("{}\n", crate::harness::public_key_line(client_key)),
        )
        .unwrap();
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
                 AcceptEnv GIT_PROTOCOL\nPrintMotd no\nPrintLastLog no\nUseDNS no\n{extra_config}",
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
        let mut cmd = if bashrc.exists() && Path::new("/usr/bin/unshare").exists() {
            let script = format!(
                "mount --bind '{}' '{}' 2>/dev/null || echo 'warning: ~/.bashrc not masked' >&2; \
                 exec /usr/sbin/sshd -D -f '{}'",
                empty_rc.display(),
                bashrc.display(),
                config.display()
            );
            let mut c = Command::new("/usr/bin/unshare");
            c.args(["-m", "sh", "-c", &script]);
            c
        } else {
            let mut c = Command::new(sshd);
            c.arg("-D").arg("-f").arg(&config);
            c
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .ok()?;
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

impl Sshd {
    /// sshd's process id (its sessions and their commands are its children).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Replace (or append) one section of the markdown file at `path`: `section`
/// starts with its `## ` heading line and runs up to the next `## ` heading.
/// Every other section is left as it is; the file is replaced atomically.
pub fn write_section(path: &Path, section: &str) {
    let heading = section.lines().next().unwrap_or_default().trim();
    assert!(heading.starts_with("## "), "a section starts with `## `");
    let existing = std::fs::read_to_string(path).unwrap_or_else(|_| "# Benchmarks\n".into());
    let mut out = String::new();
    let mut skipping = false;
    let mut replaced = false;
    for line in existing.lines() {
        if line.starts_with("## ") {
            skipping = line.trim() == heading;
            if skipping {
                out.push_str(section.trim_end());
                out.push_str("\n\n");
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
        out.push_str(section.trim_end());
        out.push('\n');
    }
    let tmp = path.with_extension("md.tmp");
    std::fs::write(&tmp, out.trim_end().to_string() + "\n").unwrap();
    std::fs::rename(&tmp, path).unwrap();
    eprintln!("wrote the \"{heading}\" section of {}", path.display());
}

/// One HTTP request read off `stream`, as a simulated CI receives a
/// webhook: its headers (names in lower case) and body. The request is
/// answered `204` and the connection closed before the caller does its
/// work, so the server may send its next delivery meanwhile, on a new
/// connection (one kept alive would wait for the caller's run). `None`
/// when the connection ended before the headers did.
pub fn take_http_request(
    mut stream: std::net::TcpStream,
) -> Option<(std::collections::HashMap<String, String>, Vec<u8>)> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut headers = std::collections::HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let len = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0usize);
    let mut body = vec![0u8; len];
    let _ = reader.read_exact(&mut body);
    let _ = stream
        .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Some((headers, body))
}

/// The CPU model from /proc/cpuinfo, for the tables.
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// A running `git-collab-server` on ephemeral loopback ports, for timing
/// web pages; killed on drop.
pub struct HttpServer {
    child: Child,
    http: SocketAddr,
}

impl HttpServer {
    pub fn start(state_dir: &Path) -> HttpServer {
        let mut child = Command::new(crate::bins::bin("git-collab-server"))
            .arg("--state-dir")
            .arg(state_dir)
            .args([
                "--ssh-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
            ])
            // The repositories were made before the server's first start.
            .args(["--log-level", "warn", "serve", "--allow-empty-db"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start git-collab-server");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let http = loop {
            let line = lines
                .next()
                .expect("the server exited before listening")
                .unwrap();
            eprintln!("server: {line}");
            if let Some(rest) = line.strip_prefix("listening ") {
                let http = rest.split_whitespace().nth(1).unwrap();
                break http.trim_start_matches("http=").parse().unwrap();
            }
        };
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("server: {line}");
            }
        });
        HttpServer { child, http }
    }

    /// `GET path`: (status, body, time from connect to the last byte).
    pub fn get(&self, path: &str) -> (u16, String, Duration) {
        let start = Instant::now();
        let mut stream = std::net::TcpStream::connect(self.http).unwrap();
        write!(stream, "GET {path} HTTP/1.0\r\nHost: bench\r\n\r\n").unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        let elapsed = start.elapsed();
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body, elapsed)
    }

    /// `get`, asserting a 200 whose body contains `needle`.
    pub fn page(&self, path: &str, needle: &str) -> Duration {
        let (status, body, elapsed) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {body}");
        assert!(body.contains(needle), "GET {path} lacks {needle:?}");
        elapsed
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A clone-storm source repository in `h`'s temp dir: 3000 commits of
/// history plus `mb` MiB split between compressible text and random
/// binary, in a few commits on `main`; its work tree.
pub fn storm_source(h: &crate::harness::ServerHarness, mb: usize) -> PathBuf {
    let src = h.temp_dir().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let git = |args: &[&str]| run_ok(h.git_command(&h.ssh_client_key(), &src).args(args));
    git(&["init", "-q", "-b", "main"]);
    crate::harness::synthetic_history(&src.join(".git"), "main", 3000);
    git(&["reset", "-q", "--hard", "main"]);
    let mut seed = 0x2545f4914f6cdd1du64;
    let per = mb.max(2) / 2;
    for i in 0..per {
        let mut blob = vec![0u8; 1024 * 1024];
        for chunk in blob.chunks_mut(8) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            chunk.copy_from_slice(&seed.to_le_bytes()[..chunk.len()]);
        }
        std::fs::write(src.join(format!("blob{i:03}.bin")), blob).unwrap();
        let text: String = (0..24_000)
            .map(|l| {
                format!(
                    "{i}:{l} the quick brown fox {} jumps\n",
                    seed.wrapping_mul(l)
                )
            })
            .collect();
        std::fs::write(src.join(format!("text{i:03}.txt")), text).unwrap();
        if i % 4 == 3 || i + 1 == per {
            git(&["add", "."]);
            git(&["commit", "-q", "-m", &format!("data {i}")]);
        }
    }
    src
}
