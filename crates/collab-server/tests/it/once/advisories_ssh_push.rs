//! Advisory replays of issue 44's third round, at the SSH and push level
//! (beside `advisories`, which holds the earlier rounds): russh's 2026
//! advisories played with a raw socket or a crafted paramiko client, push
//! options carrying hostile bytes, a read-only key pushing for review and
//! one push judged ref by ref. docs/security.md's advisory table names the
//! test covering each row.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use collab_testkit as common;
use common::{fingerprint, HarnessOptions, ServerHarness};

/// The server's resident set, in KiB (Linux `/proc`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// Debian's python3-paramiko, which lets a client craft the messages
/// OpenSSH never sends. `None` (outside CI) when it is missing.
fn python_with_paramiko() -> Option<&'static str> {
    let python = "/usr/bin/python3";
    let has_paramiko = Command::new(python)
        .args(["-c", "import paramiko"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_paramiko {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3-paramiko is missing (scripts/install-deps.sh installs it)"
        );
        eprintln!("skipped: no python3-paramiko");
        return None;
    }
    Some(python)
}

/// What every paramiko script starts with: an authenticated transport `t`
/// as the admin key, and `Message` and the message numbers at hand.
const PARAMIKO_PRELUDE: &str = r#"
import sys, time, paramiko
from paramiko.message import Message
from paramiko import common as c
port, key = int(sys.argv[1]), sys.argv[2]
t = paramiko.Transport(("127.0.0.1", port))
t.connect(username="git", pkey=paramiko.Ed25519Key.from_private_key_file(key))

def whoami():
    ch = t.open_session(timeout=10)
    ch.settimeout(10)
    ch.exec_command("collab-whoami")
    out = b""
    while True:
        part = ch.recv(65536)
        if not part:
            break
        out += part
    return ch.recv_exit_status(), out
"#;

/// Run `body` after the prelude against `h`; its output.
fn paramiko(python: &str, h: &ServerHarness, body: &str) -> Output {
    let script = format!("{PARAMIKO_PRELUDE}\n{body}");
    let out = Command::new("timeout")
        .arg("180")
        .arg(python)
        .args(["-c", &script])
        .arg(h.ssh_port().to_string())
        .arg(h.ssh_client_key())
        .output()
        .unwrap();
    eprintln!(
        "paramiko said: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Read until the server closes the connection; whether it did before
/// `by` (a read error such as a reset counts as closed).
fn closed_by(stream: &mut TcpStream, by: Instant) -> bool {
    let mut sink = [0u8; 4096];
    loop {
        let left = by.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// russh 2026 (unbounded input before the banner): clients that send
/// megabytes of lines that are not an SSH version line, or drip bytes
/// without ever ending a line, are dropped: after a few hundred bytes
/// (russh reads one line of at most 255 bytes, and takes no line before
/// the client's version from a client) or after `ssh.login_grace_time`;
/// the server's memory stays flat and it serves everyone else.
#[test]
fn input_before_the_ssh_banner_is_bounded_in_bytes_and_time() {
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_SSH__LOGIN_GRACE_TIME".into(), "3s".into())],
        ..Default::default()
    });
    let before = rss_kib(h.pid());
    let line = format!("{}\r\n", "x".repeat(78));
    let block = line.repeat(8 * 1024);
    let mut floods = Vec::new();
    for _ in 0..8 {
        floods.push(std::thread::spawn({
            let (addr, block) = (h.ssh_addr, block.clone());
            move || {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream
                    .set_write_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                // Up to 8 MiB; the server stops reading long before.
                let mut sent = 0usize;
                while sent < 8 << 20 {
                    if stream.write_all(block.as_bytes()).is_err() {
                        break;
                    }
                    sent += block.len();
                }
                let closed = closed_by(&mut stream, Instant::now() + Duration::from_secs(10));
                (sent, closed)
            }
        }));
    }
    // A client that drips a line that never ends holds its connection
    // only for the login grace time.
    let mut drip = TcpStream::connect(h.ssh_addr).unwrap();
    let started = Instant::now();
    let mut dripped_until_closed = false;
    while started.elapsed() < Duration::from_secs(15) {
        if drip.write_all(b"S").is_err() {
            dripped_until_closed = true;
            break;
        }
        drip.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut sink = [0u8; 256];
        match drip.read(&mut sink) {
            Ok(0) => {
                dripped_until_closed = true;
                break;
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => {
                dripped_until_closed = true;
                break;
            }
        }
    }
    let dripped_for = started.elapsed();
    let peak = rss_kib(h.pid());
    for flood in floods {
        let (sent, closed) = flood.join().unwrap();
        assert!(closed, "a flooding client was kept open after {sent} bytes");
        assert!(
            sent < 8 << 20,
            "the server took all 8 MiB of pre-banner lines from one client"
        );
    }
    assert!(dripped_until_closed, "a dripping client was kept open");
    assert!(
        dripped_for < Duration::from_secs(10),
        "a dripping client was kept {dripped_for:?} (login grace time 3 s)"
    );
    assert!(
        peak < before + 32 * 1024,
        "server RSS grew from {before} KiB to {peak} KiB under pre-banner floods"
    );
    let who = h.ssh_exec("collab-whoami");
    assert_eq!(who.code, 0, "others are still served: {who:?}");
}

/// russh 2026 (repeated EXT_INFO): a client sending thousands of EXT_INFO
/// messages (RFC 8308 lets a server send two; a client none after its
/// first) before and after authenticating changes nothing: they are
/// ignored, memory stays flat, and the connection still runs commands.
#[test]
fn repeated_ext_info_messages_change_nothing() {
    let Some(python) = python_with_paramiko() else {
        return;
    };
    let h = ServerHarness::start();
    let before = rss_kib(h.pid());
    let out = paramiko(
        python,
        &h,
        r#"
for i in range(5000):
    m = Message()
    m.add_byte(c.cMSG_EXT_INFO)
    m.add_int(2)
    m.add_string("server-sig-algs")
    m.add_string("ssh-ed25519," * 200)
    m.add_string("ext-%d" % i)
    m.add_string("x" * 1000)
    t._send_message(m)
code, out = whoami()
print("whoami", code, out.decode())
"#,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("whoami 0"), "{out:?}");
    assert!(said.contains("\"principal\""), "{out:?}");
    let after = rss_kib(h.pid());
    assert!(
        after < before + 32 * 1024,
        "server RSS grew from {before} KiB to {after} KiB under repeated EXT_INFO"
    );
    assert!(!h.log().contains("panicked"), "{}", h.log());
}

/// russh 2026 (channel open with maximum packet size 0): such a channel
/// can never carry a byte back, and a writer waiting for room would hold
/// its command forever. russh 0.65.2 refuses the open as a protocol error
/// (`OpenChannelMessage::parse`) and drops that connection before any
/// handler of ours runs: the client is cut off, no command runs, and the
/// server serves the next connection.
#[test]
fn a_channel_with_maximum_packet_size_0_drops_only_its_connection() {
    let Some(python) = python_with_paramiko() else {
        return;
    };
    let h = ServerHarness::start();
    let out = paramiko(
        python,
        &h,
        r#"
t._sanitize_packet_size = lambda size: 0
try:
    ch = t.open_session(timeout=10)
    ch.settimeout(5)
    ch.exec_command("collab-whoami")
    print("accepted; got", repr(ch.recv(1000)))
except paramiko.ChannelException as e:
    print("refused", e.code)
except (EOFError, paramiko.SSHException) as e:
    print("dropped", type(e).__name__)
print("active", t.is_active())
"#,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("dropped") || said.contains("refused"),
        "a channel with maximum packet size 0 was accepted: {said}"
    );
    assert!(!said.contains("accepted"), "{said}");
    let who = h.ssh_exec("collab-whoami");
    assert_eq!(who.code, 0, "the server still serves: {who:?}");
    assert!(!h.log().contains("panicked"), "{}", h.log());
}

/// russh 2026 (CHANNEL_DATA for a channel never opened): data, extended
/// data, EOF, window adjustments and requests naming channel ids the
/// client never opened are ignored; the connection goes on, and a
/// channel opened afterwards gets none of them.
#[test]
fn data_for_a_channel_never_opened_is_ignored() {
    let Some(python) = python_with_paramiko() else {
        return;
    };
    let h = ServerHarness::start();
    let before = rss_kib(h.pid());
    let out = paramiko(
        python,
        &h,
        r#"
for chan in [0, 1, 7, 0x7fffffff, 0xffffffff]:
    for i in range(200):
        m = Message(); m.add_byte(c.cMSG_CHANNEL_DATA); m.add_int(chan); m.add_string(b"y" * 30000)
        t._send_message(m)
    m = Message(); m.add_byte(c.cMSG_CHANNEL_EXTENDED_DATA); m.add_int(chan); m.add_int(1); m.add_string(b"z" * 1000)
    t._send_message(m)
    m = Message(); m.add_byte(c.cMSG_CHANNEL_WINDOW_ADJUST); m.add_int(chan); m.add_int(0xffffffff)
    t._send_message(m)
    m = Message(); m.add_byte(c.cMSG_CHANNEL_REQUEST); m.add_int(chan); m.add_string("exec"); m.add_boolean(True); m.add_string("collab-whoami")
    t._send_message(m)
    m = Message(); m.add_byte(c.cMSG_CHANNEL_EOF); m.add_int(chan)
    t._send_message(m)
    m = Message(); m.add_byte(c.cMSG_CHANNEL_CLOSE); m.add_int(chan)
    t._send_message(m)
code, out = whoami()
print("whoami", code, out.decode())
"#,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("whoami 0"), "{out:?}");
    assert!(said.contains("\"principal\""), "{out:?}");
    let after = rss_kib(h.pid());
    assert!(
        after < before + 32 * 1024,
        "server RSS grew from {before} KiB to {after} KiB under data for unopened channels"
    );
    assert!(!h.log().contains("panicked"), "{}", h.log());
}

/// `git push` as `key` from `clone` with `options` (each `-o`) and
/// `refspecs`.
fn push_with(
    h: &ServerHarness,
    key: &std::path::Path,
    clone: &std::path::Path,
    options: &[String],
    refspecs: &[&str],
) -> Output {
    let mut args: Vec<&str> = vec!["push"];
    for option in options {
        args.push("-o");
        args.push(option);
    }
    args.push("origin");
    args.extend_from_slice(refspecs);
    h.git_as(key, clone, &args)
}

/// The server's patches of `repo`, as `collab-patch list` says.
fn patches(h: &ServerHarness, repo: &str) -> Vec<serde_json::Value> {
    let list = h.ssh_exec(&format!("collab-patch list '{repo}'"));
    assert_eq!(list.code, 0, "{list:?}");
    list.json()["patches"].as_array().unwrap().clone()
}

/// GitHub 2026 (push-option values carried into internal headers and log
/// lines): `git push -o` values with a CR, terminal escapes, 60 KB of
/// text, or a hundred options at once refuse the push with one short line
/// that does not echo them: nothing raw reaches the pusher's terminal, the
/// server's log or a record. A value that reads like another option
/// (`title=Second patch=<id>`) stays the value of its own.
#[test]
fn push_option_values_are_never_echoed_raw_nor_read_as_other_options() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "c");
    h.commit_file(&clone, "a", b"a\n", "first");
    h.ssh_push(&clone, &["HEAD:main"]);
    h.commit_file(&clone, "b", b"b\n", "second");
    let key = h.ssh_client_key();
    let hostile: Vec<Vec<String>> = vec![
        vec!["patch=\u{1b}[31mred\u{1b}]0;pwn3d\u{7}".into()],
        vec!["issue=12ab\rremote: error: f0rged-line".into()],
        vec!["title=\u{1b}[2Jcleared".into()],
        vec![format!("description=ok\u{1b}[8m{}", "d".repeat(100))],
        vec![format!("patch={}", "a".repeat(60_000))],
        vec![format!("title={}", "t".repeat(60_000))],
        (0..100).map(|i| format!("x{i}=1")).collect(),
    ];
    for options in &hostile {
        let out = push_with(&h, &key, &clone, options, &["HEAD:refs/for/main"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let shown: String = stderr.chars().take(300).collect();
        assert!(!out.status.success(), "{shown}");
        assert!(
            !stderr.contains('\u{1b}') && !stderr.contains('\r') && !stderr.contains('\u{7}'),
            "a push option's control characters reached the pusher's terminal: {shown:?}"
        );
        assert!(
            stderr.len() < 2048,
            "a push option's value was echoed ({} bytes of stderr): {shown}",
            stderr.len()
        );
        assert!(
            !stderr.contains("f0rged-line") && !stderr.contains("ddddd"),
            "{shown:?}"
        );
    }
    assert_eq!(patches(&h, "r"), Vec::<serde_json::Value>::new());
    let log = h.log();
    assert!(
        !log.contains('\u{1b}') && !log.contains("pwn3d") && !log.contains("f0rged-line"),
        "a push option reached the server's log: {log}"
    );

    // A value that reads like another option is its own option's value.
    let first = push_with(
        &h,
        &key,
        &clone,
        &["title=First".into()],
        &["HEAD:refs/for/main"],
    );
    assert!(first.status.success(), "{first:?}");
    let id = patches(&h, "r")[0]["id"].as_str().unwrap().to_string();
    h.commit_file(&clone, "c", b"c\n", "third");
    let tricky = format!("title=Second patch={}", &id[..8]);
    let second = push_with(&h, &key, &clone, &[tricky], &["HEAD:refs/for/main"]);
    assert!(second.status.success(), "{second:?}");
    let all = patches(&h, "r");
    assert_eq!(
        all.len(),
        2,
        "the `patch=` inside a title revised a patch: {all:?}"
    );
    assert!(
        all.iter()
            .any(|p| p["title"] == format!("Second patch={}", &id[..8])),
        "{all:?}"
    );
}

/// Gitea 2026 (a read-only or deploy key opening a review): a key that
/// may only read a repository cannot open a patch by pushing to
/// `refs/for/<base>`; the refusal is one line, and no patch exists.
#[test]
fn a_read_only_key_cannot_open_a_patch_through_refs_for() {
    let h = ServerHarness::start();
    let repo = h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "a", b"a\n", "first");
    h.ssh_push(&seed, &["HEAD:main"]);
    let reader = h.authorized_key("deploy");
    collab_testkit::write_live(
        &repo.join("collab-policy.toml"),
        format!("read = [\"{}\"]\nwrite = []\n", fingerprint(&reader)),
    );
    let clone = h.clone_as(&reader, "r", "reader");
    h.commit_file(&clone, "b", b"b\n", "a review from a deploy key");
    for options in [vec![], vec!["title=Sneaky".to_string()]] {
        let out = push_with(&h, &reader, &clone, &options, &["HEAD:refs/for/main"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.lines().any(|l| l.contains("error:")),
            "the refusal says why: {stderr}"
        );
    }
    assert_eq!(patches(&h, "r"), Vec::<serde_json::Value>::new());
    // The same key still reads.
    let fetched = h.git_as(&reader, &clone, &["fetch", "-q", "origin"]);
    assert!(fetched.status.success(), "{fetched:?}");
}

/// Gitea 2026 (a per-ref permission cached across the refs of one push):
/// one push updating several refs is judged ref by ref. A writer creating
/// a branch and moving a tag (which needs rewind) in one push is refused
/// for the tag alone, in either order; a lease holder pushing its issue's
/// fenced branch beside another issue's is refused for the other one.
/// Nothing moves; each allowed ref pushed alone goes in.
#[test]
fn one_push_of_several_refs_is_judged_ref_by_ref() {
    let h = ServerHarness::start();
    let seed = h.create_fenced_repo("r");
    let admin = h.ssh_client_key();
    h.git(&seed, &["tag", "v1"]);
    h.ssh_push(&seed, &["refs/tags/v1:refs/tags/v1"]);
    let writer = h.authorized_key("writer");
    let clone = h.clone_as(&writer, "r", "writer");
    let tip = h.commit_file(&clone, "w", b"w\n", "writer's work");
    let remote = |name: &str| {
        let out = h.ls_remote_as(&admin, "r");
        out.stdout
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(_, n)| *n == name)
            .map(|(oid, _)| oid.to_string())
    };
    let v1 = remote("refs/tags/v1").unwrap();
    for refspecs in [
        ["HEAD:refs/heads/feature", "+HEAD:refs/tags/v1"],
        ["+HEAD:refs/tags/v1", "HEAD:refs/heads/feature"],
    ] {
        let out = push_with(&h, &writer, &clone, &[], &refspecs);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{refspecs:?}: {stderr}");
        assert!(
            stderr.contains("refs/tags/v1: moving a tag needs rewind access"),
            "{refspecs:?}: {stderr}"
        );
        assert!(
            !stderr.contains("refs/heads/feature:"),
            "the allowed ref was refused too: {stderr}"
        );
        assert_eq!(remote("refs/heads/feature"), None, "{refspecs:?}");
        assert_eq!(remote("refs/tags/v1").as_deref(), Some(v1.as_str()));
    }
    let out = push_with(&h, &writer, &clone, &[], &["HEAD:refs/heads/feature"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(remote("refs/heads/feature"), Some(tip));

    // Fenced refs tied to issues: the lease of one does not carry over
    // to the other's branch within the same push.
    let short_a = h.open_issue(&seed, "Issue A");
    let short_b = h.open_issue(&seed, "Issue B");
    let lease = h.ssh_exec_as(
        &writer,
        &format!("collab-lease acquire 'r' '{short_a}' --ttl 600"),
        b"",
    );
    assert_eq!(lease.code, 0, "{lease:?}");
    let lease = lease.json();
    let issue_a = lease["issue"].as_str().unwrap().to_string();
    let token = lease["token"].as_i64().unwrap();
    let option = vec![format!("collab-lease={issue_a}:{token}")];
    let branch_a = format!("refs/heads/issue/{short_a}");
    let branch_b = format!("refs/heads/issue/{short_b}");
    for refspecs in [
        [format!("HEAD:{branch_a}"), format!("HEAD:{branch_b}")],
        [format!("HEAD:{branch_b}"), format!("HEAD:{branch_a}")],
    ] {
        let refspecs: Vec<&str> = refspecs.iter().map(String::as_str).collect();
        let out = push_with(&h, &writer, &clone, &option, &refspecs);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{refspecs:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{branch_b}: fenced ref")),
            "{refspecs:?}: {stderr}"
        );
        assert_eq!(remote(&branch_a), None, "{refspecs:?}");
        assert_eq!(remote(&branch_b), None, "{refspecs:?}");
    }
    let out = push_with(
        &h,
        &writer,
        &clone,
        &option,
        &[format!("HEAD:{branch_a}").as_str()],
    );
    assert!(out.status.success(), "{out:?}");
}

/// A tmux server of its own running `ssh -tt` into the harness (as
/// `both::tui` drives the terminal UI).
struct Tmux {
    socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    fn start(h: &ServerHarness) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("tmux.sock");
        let mut ssh = vec!["ssh".to_string()];
        ssh.extend(h.ssh_options(&h.ssh_client_key()));
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
            "100",
            "-y",
            "30",
            &format!("TERM=xterm-256color {line}; sleep 600"),
        ]);
        t
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("tmux (scripts/install-deps.sh installs it)");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        out
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "tui"]).stdout).into_owned()
    }

    /// Wait up to `limit` for the screen to show `needle`.
    fn shows_within(&self, needle: &str, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.screen().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
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

/// Issue 44 ("one key press resets the TUI idle timeout"): the idle
/// timeout counts key presses only, and a session ends
/// `ssh.tui_max_lifetime` after it opened however many keys are pressed.
/// One session gets a key (`j`) every second and is closed at its
/// lifetime; another gets only bytes that are no key (focus reports) and
/// is closed as idle.
#[test]
fn a_key_press_per_interval_does_not_hold_a_tui_session_forever() {
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![
            ("GIT_COLLAB_SSH__TUI_IDLE_TIMEOUT".into(), "3s".into()),
            ("GIT_COLLAB_SSH__TUI_MAX_LIFETIME".into(), "8s".into()),
        ],
        ..Default::default()
    });
    h.create_repo("r");
    let pressing = Tmux::start(&h);
    let fidgeting = Tmux::start(&h);
    for tmux in [&pressing, &fidgeting] {
        assert!(
            tmux.shows_within("repositories", Duration::from_secs(60)),
            "{}",
            tmux.screen()
        );
    }
    let opened = Instant::now();
    let (mut pressing_closed, mut fidgeting_closed) = (None, None);
    while opened.elapsed() < Duration::from_secs(30)
        && (pressing_closed.is_none() || fidgeting_closed.is_none())
    {
        if pressing_closed.is_none() {
            if pressing.screen().contains("closed after") {
                pressing_closed = Some((opened.elapsed(), pressing.screen()));
            } else {
                // `j` (down), sent the way the other session's bytes are:
                // that this session outlives the idle timeout shows they
                // arrive.
                pressing.run(&["send-keys", "-t", "tui", "-H", "6a"]);
            }
        }
        if fidgeting_closed.is_none() {
            if fidgeting.screen().contains("closed after") {
                fidgeting_closed = Some((opened.elapsed(), fidgeting.screen()));
            } else {
                // A focus-in report: bytes, but no key.
                fidgeting.run(&["send-keys", "-t", "tui", "-H", "1b", "5b", "49"]);
            }
        }
        std::thread::sleep(Duration::from_millis(1000));
    }
    let (after, screen) =
        pressing_closed.expect("a session pressing a key every second was never closed");
    assert!(
        screen.contains("closed after ssh.tui_max_lifetime"),
        "after {after:?}:\n{screen}"
    );
    assert!(
        after >= Duration::from_secs(5),
        "closed early ({after:?}):\n{screen}"
    );
    let (after, screen) = fidgeting_closed.expect("a session sending no key was never closed");
    assert!(
        screen.contains("closed after ssh.tui_idle_timeout"),
        "after {after:?}:\n{screen}"
    );
    assert!(
        after < Duration::from_secs(8),
        "closed only after {after:?}:\n{screen}"
    );
}
