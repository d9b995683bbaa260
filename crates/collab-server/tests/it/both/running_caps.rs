//! Caps on running commands (issue 44, item 3): one key, even a read-only
//! one, runs at most its share of commands, of heavy ones (diffs, release
//! downloads), of terminal UI and `collab-mcp` sessions, and is then
//! refused with one line while other keys are served; a terminal UI asked
//! for a huge pty is drawn at most 300x100; idle protocol v2 conversations
//! hold no git process slot. Real server, real OpenSSH `ssh`, real git and
//! tmux, every key on 127.0.0.1.

use collab_testkit as common;
use collab_testkit::web as web_support;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{HarnessOptions, ServerHarness};
use serde_json::{json, Value};

fn server(env: &[(&str, &str)]) -> ServerHarness {
    ServerHarness::start_with(HarnessOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    })
}

/// Background `ssh` processes, killed and reaped however the test ends.
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
    /// `ssh` as `key` with `args`; stdin and stdout are pipes the test
    /// holds (a command reading stdin keeps running, one writing more than
    /// the window stalls), stderr is dropped.
    fn ssh(&mut self, h: &ServerHarness, key: &Path, args: &[&str]) -> usize {
        let child = Command::new("ssh")
            .args(h.ssh_options(key))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn ssh");
        self.children.push(child);
        self.children.len() - 1
    }

    fn running(&mut self, i: usize) -> bool {
        self.children[i].try_wait().unwrap().is_none()
    }
}

/// Poll `check` every 100 ms until it holds or `limit` passes.
fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn refusals(h: &ServerHarness, what: &str, limit: &str) -> u64 {
    let text = web_support::get(h, "/metrics").text();
    let prefix = format!("git_collab_limit_refusals_total{{what=\"{what}\",limit=\"{limit}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|n| n.trim().parse().unwrap())
        .unwrap_or(0)
}

/// Public repository `r` with one commit on main tagged `v1`, and a
/// release file `big.bin` of `size` bytes on it; its bytes.
fn repo_with_release(h: &ServerHarness, size: usize) -> Vec<u8> {
    h.create_repo("r");
    let clone = h.clone_repo("r", "seed");
    h.commit_file(&clone, "README.md", b"hello\n", "first");
    h.git(&clone, &["tag", "v1"]);
    h.ssh_push(&clone, &["HEAD:refs/heads/main", "refs/tags/v1"]);
    web_support::make_public(h, "r");
    // Text, so that a download reads back as a string.
    let bytes: Vec<u8> = (0..size).map(|i| b'a' + (i * 7 % 26) as u8).collect();
    let created = h.ssh_exec_with_stdin("collab-release create r v1 big.bin", &bytes);
    assert_eq!(created.code, 0, "{created:?}");
    bytes
}

const DOWNLOAD: &str = "collab-release download r v1 big.bin";

/// Start a download as `key` that stalls: its first bytes are read (the
/// verb is running), the rest never (the release is larger than the SSH
/// window and the pipe together, so the server holds the stream).
fn stalled_download(h: &ServerHarness, bg: &mut Background, key: &Path) -> usize {
    let id = bg.ssh(h, key, &["git@127.0.0.1", DOWNLOAD]);
    let mut stdout = bg.children[id].stdout.take().unwrap();
    let mut first = [0u8; 4096];
    stdout
        .read_exact(&mut first)
        .expect("the download sent nothing");
    // Kept open, and unread, for as long as the child lives.
    bg.children[id].stdout = Some(stdout);
    id
}

#[test]
fn one_key_past_its_share_of_heavy_and_other_commands_is_refused_while_others_run() {
    let h = server(&[
        ("GIT_COLLAB_SSH__MAX_HEAVY_VERBS_PER_PRINCIPAL", "2"),
        ("GIT_COLLAB_SSH__MAX_VERBS_PER_PRINCIPAL", "4"),
    ]);
    // 6 MiB: past OpenSSH's 2 MiB channel window and a pipe's 64 KiB.
    let release = repo_with_release(&h, 6 << 20);
    let k1 = h.authorized_key("k1");
    let k2 = h.authorized_key("k2");
    let mut bg = Background::default();

    // K1 (read-only) holds its 2 heavy commands; the 3rd is refused at once.
    let held: Vec<usize> = (0..2).map(|_| stalled_download(&h, &mut bg, &k1)).collect();
    let started = Instant::now();
    let refused = h.ssh_exec_as(&k1, DOWNLOAD, b"");
    assert_eq!(refused.code, 1, "{refused:?}");
    assert_eq!(
        refused.stderr,
        "error: too many diffs and downloads running with this key (2); wait for one to finish\n"
    );
    assert!(refused.stdout.is_empty(), "{refused:?}");
    assert!(started.elapsed() < Duration::from_secs(20), "not at once");
    assert_eq!(refusals(&h, "heavy_verb", "per_principal"), 1);
    // Its light commands still run (2 of its 4 are taken), and another
    // key downloads the whole release meanwhile.
    let whoami = h.ssh_exec_as(&k1, "collab-whoami", b"");
    assert_eq!(whoami.code, 0, "{whoami:?}");
    let other = h.ssh_raw(&k2, &["git@127.0.0.1", DOWNLOAD], b"");
    assert_eq!(other.code, 0, "{:?}", other.stderr);
    assert!(other.stdout.as_bytes() == release, "K2's download was cut");
    // One of K1's finishing (read to its end) gives its place back.
    let mut rest = Vec::new();
    let mut stdout = bg.children[held[0]].stdout.take().unwrap();
    stdout.read_to_end(&mut rest).unwrap();
    assert_eq!(rest.len() + 4096, release.len(), "a held download was cut");
    assert!(bg.children[held[0]].wait().unwrap().success());
    assert!(
        eventually(Duration::from_secs(20), || h
            .ssh_raw(&k1, &["git@127.0.0.1", DOWNLOAD], b"")
            .code
            == 0),
        "K1 never got its heavy place back: {}",
        h.log()
    );
    assert!(bg.running(held[1]), "a download within the share was cut");

    // Light commands: the admin key holds its 4 (comments waiting for
    // their stdin); the 5th command is refused, another key is served.
    let issue = h.open_server_issue("r", "Something to say");
    let admin = h.ssh_client_key();
    let comment = format!("collab-issue comment r '{issue}' --body-stdin");
    let waiting: Vec<usize> = (0..4)
        .map(|_| bg.ssh(&h, &admin, &["git@127.0.0.1", &comment]))
        .collect();
    let mut last = None;
    assert!(
        eventually(Duration::from_secs(30), || {
            let out = h.ssh_exec_as(&admin, "collab-whoami", b"");
            let refused = out.code == 1;
            last = Some(out);
            refused
        }),
        "the 5th command was never refused: {last:?}"
    );
    let last = last.unwrap();
    assert_eq!(
        last.stderr,
        "error: too many commands running with this key (4); wait for one to finish\n"
    );
    assert_eq!(refusals(&h, "verb", "per_principal"), 1);
    let whoami = h.ssh_exec_as(&k2, "collab-whoami", b"");
    assert_eq!(whoami.code, 0, "{whoami:?}");
    // The held comments were never cut: each is written once its body ends.
    for id in waiting {
        let child = &mut bg.children[id];
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"said at last").unwrap();
        drop(stdin);
        let status = child.wait().unwrap();
        assert!(status.success(), "a held comment failed: {status:?}");
    }
    let shown = h.ssh_exec(&format!("collab-issue show r '{issue}'")).json();
    let comments = shown["comments"].as_array().unwrap();
    assert_eq!(comments.len(), 4, "{shown:#}");
}

/// One tmux server of its own running `ssh -tt` into the harness.
struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    fn start(h: &ServerHarness, key: &Path, cols: u16, rows: u16) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("tmux.sock");
        let mut ssh = vec!["ssh".to_string()];
        ssh.extend(h.ssh_options(key));
        ssh.extend(["-tt".to_string(), "git@127.0.0.1".to_string()]);
        let line = ssh
            .iter()
            .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
            .collect::<Vec<_>>()
            .join(" ");
        let t = Tmux { socket, _dir: dir };
        t.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "tui",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            &format!("TERM=xterm-256color {line}; sleep 600"),
        ]);
        t
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("tmux (scripts/install-deps.sh installs it)");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        out
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "tui"]).stdout).into_owned()
    }

    /// Wait until the screen shows `needle`; the screen then.
    fn wait_for(&self, needle: &str) -> String {
        self.wait_for_either(needle, needle).1
    }

    /// Wait until the screen shows `a` or `b`; whether it was `a`, and the
    /// screen then.
    fn wait_for_either(&self, a: &str, b: &str) -> (bool, String) {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(a) || screen.contains(b) {
                return (screen.contains(a), screen);
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the screen never showed {a:?} or {b:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

#[test]
fn terminal_ui_sessions_past_the_key_share_are_refused_and_a_huge_pty_is_clamped() {
    let h = server(&[("GIT_COLLAB_SSH__MAX_TUI_PER_PRINCIPAL", "2")]);
    h.create_repo("r");
    let k1 = h.authorized_key("k1");
    let k2 = h.authorized_key("k2");

    // A 400x150 window is drawn at 300x100: the hint line, the screen's
    // last, is on row 100 and nothing is drawn below it or right of 300.
    let big = Tmux::start(&h, &k1, 400, 150);
    let screen = big.wait_for("q quit");
    let rows: Vec<&str> = screen.lines().collect();
    let hints = rows.iter().position(|r| r.contains("q quit")).unwrap();
    assert_eq!(hints, 99, "the hint line is not on row 100:\n{screen}");
    assert!(
        rows[100..].iter().all(|r| r.trim().is_empty()),
        "drawn below row 100:\n{screen}"
    );
    assert!(
        rows.iter().all(|r| r.trim_end().chars().count() <= 300),
        "drawn right of column 300:\n{screen}"
    );
    let second = Tmux::start(&h, &k1, 80, 24);
    second.wait_for("q quit");

    // The third of K1 is refused with one line; K2 gets its UI.
    let refused = h.ssh_raw(&k1, &["-tt", "git@127.0.0.1", "tui"], b"");
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains(
            "error: too many terminal UI sessions running with this key (2); wait for one to finish"
        ),
        "{refused:?}"
    );
    assert_eq!(refusals(&h, "tui", "per_principal"), 1);
    let other = Tmux::start(&h, &k2, 80, 24);
    other.wait_for("q quit");
    // Ending one gives K1 its place back (once the server has seen its
    // channel close).
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let third = Tmux::start(&h, &k1, 80, 24);
        let (served, screen) = third.wait_for_either("q quit", "too many terminal UI sessions");
        if served {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "K1 never got its place back:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Read pkt-lines from `from` up to the first flush packet.
fn read_to_flush(from: &mut impl std::io::Read) -> std::io::Result<Vec<u8>> {
    let mut all = Vec::new();
    loop {
        let mut header = [0u8; 4];
        from.read_exact(&mut header)?;
        all.extend_from_slice(&header);
        let len = usize::from_str_radix(std::str::from_utf8(&header).unwrap(), 16).unwrap();
        if len == 0 {
            return Ok(all);
        }
        let mut body = vec![0u8; len.saturating_sub(4)];
        from.read_exact(&mut body)?;
        all.extend_from_slice(&body);
    }
}

#[test]
fn idle_protocol_v2_conversations_hold_no_git_slot() {
    // The default caps (32 git processes, 8 per key); a short queue so a
    // clone kept waiting fails fast.
    let h = server(&[("GIT_COLLAB_GIT__QUEUE_TIMEOUT", "3s")]);
    h.create_repo("r");
    let clone = h.clone_repo("r", "seed");
    let head = h.commit_file(&clone, "README.md", b"hello\n", "first");
    h.ssh_push(&clone, &["HEAD:main"]);
    web_support::make_public(&h, "r");
    let mut bg = Background::default();
    // 4 read-only keys open 8 v2 conversations each, read the capability
    // advertisement, and then say nothing: 32, every git slot there is.
    let keys: Vec<PathBuf> = (0..4)
        .map(|i| h.authorized_key(&format!("idle{i}")))
        .collect();
    let mut idle: Vec<(usize, ChildStdin)> = Vec::new();
    for key in &keys {
        for _ in 0..8 {
            let id = bg.ssh(
                &h,
                key,
                &[
                    "-o",
                    "SetEnv=GIT_PROTOCOL=version=2",
                    "git@127.0.0.1",
                    "git-upload-pack 'r.git'",
                ],
            );
            let child = &mut bg.children[id];
            let stdin = child.stdin.take().unwrap();
            idle.push((id, stdin));
        }
    }
    for (id, _) in &idle {
        let mut stdout = bg.children[*id].stdout.take().unwrap();
        let advertisement = read_to_flush(&mut stdout).expect("no advertisement");
        assert!(
            advertisement.starts_with(b"000eversion 2\n"),
            "{}",
            String::from_utf8_lossy(&advertisement)
        );
        bg.children[*id].stdout = Some(stdout);
    }
    // Another key clones, and so does one of the idle keys: neither waits
    // out the queue for a slot (it would be refused after 3 s).
    let other = h.authorized_key("other");
    let cloned = h.clone_as(&other, "r", "other-clone");
    assert_eq!(h.rev_parse(&cloned, "HEAD"), head);
    let cloned = h.clone_as(&keys[0], "r", "idle-clone");
    assert_eq!(h.rev_parse(&cloned, "HEAD"), head);
    assert_eq!(refusals(&h, "git_process", "per_principal"), 0);
    assert_eq!(refusals(&h, "git_process", "max_processes"), 0);
    // The idle conversations are still served: a request, then the end.
    let pkt = |line: &str| format!("{:04x}{line}", line.len() + 4);
    let (id, stdin) = idle.pop().unwrap();
    let mut stdin = stdin;
    let request = pkt("command=ls-refs\n") + "0001" + &pkt("ref-prefix refs/heads/main\n") + "0000";
    stdin.write_all(request.as_bytes()).unwrap();
    stdin.write_all(b"0000").unwrap();
    drop(stdin);
    let out = bg.children.remove(id).wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let refs = String::from_utf8_lossy(&out.stdout);
    assert!(refs.contains(&format!("{head} refs/heads/main")), "{refs}");
}

/// A raw MCP session: `ssh … collab-mcp` with lines in and out.
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Mcp {
    fn open(h: &ServerHarness, key: &Path) -> Mcp {
        let mut child = Command::new("ssh")
            .args(h.ssh_options(key))
            .args(["git@127.0.0.1", "collab-mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Mcp {
            child,
            stdin,
            lines,
        }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("the session ended");
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == json!(id) {
                return msg;
            }
        }
    }

    fn initialize(&mut self) {
        let reply = self.request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
        );
        assert!(reply["result"].is_object(), "{reply}");
        let line = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn mcp_sessions_have_their_own_share_and_their_calls_are_not_held_by_the_keys() {
    let h = server(&[
        ("GIT_COLLAB_MCP__MAX_SESSIONS_PER_PRINCIPAL", "2"),
        ("GIT_COLLAB_SSH__MAX_VERBS_PER_PRINCIPAL", "2"),
    ]);
    h.create_repo("r");
    let issue = h.open_server_issue("r", "Something to say");
    let key = h.ssh_client_key();
    let mut first = Mcp::open(&h, &key);
    first.initialize();
    let mut second = Mcp::open(&h, &key);
    second.initialize();
    // The third session of the key is refused with one line; the two
    // sessions do not count as commands: its commands still run.
    let refused = h.ssh_exec_as(&key, "collab-mcp", b"");
    assert_eq!(refused.code, 1, "{refused:?}");
    assert_eq!(
        refused.stderr,
        "error: too many collab-mcp sessions running with this key (2); wait for one to finish\n"
    );
    assert_eq!(refusals(&h, "mcp_session", "per_principal"), 1);
    let whoami = h.ssh_exec_as(&key, "collab-whoami", b"");
    assert_eq!(whoami.code, 0, "{whoami:?}");

    // The key's commands fill its share (comments waiting for stdin) ...
    let mut bg = Background::default();
    let comment = format!("collab-issue comment r '{issue}' --body-stdin");
    for _ in 0..2 {
        bg.ssh(&h, &key, &["git@127.0.0.1", &comment]);
    }
    assert!(
        eventually(Duration::from_secs(30), || h
            .ssh_exec_as(&key, "collab-whoami", b"")
            .code
            == 1),
        "the key's share of commands never filled"
    );
    // ... and its MCP sessions' calls still run, bounded by the session.
    for (id, session) in [(1, &mut first), (2, &mut second)] {
        let reply = session.request(id, "tools/call", json!({"name": "whoami", "arguments": {}}));
        assert_eq!(reply["result"]["isError"], json!(false), "{reply}");
    }
}
