//! Issue 44: every verb ends with its caller. A client that closes its
//! channel (SSH_MSG_CHANNEL_CLOSE, which any SSH library sends) before a
//! large reply has gone out, or drops its connection, stops the verb: it
//! holds no buffer, file, socket or slot afterwards, `/metrics` counts nothing
//! running, and a graceful shutdown finds nothing to wait for. paramiko
//! (Debian's python3-paramiko) sends the close OpenSSH only sends when
//! asked; a small window makes each verb wait on its client at once.

use std::process::Command;
use std::time::{Duration, Instant};

use collab_testkit as common;
use common::review;
use common::web::commands_running;
use common::ServerHarness;

const PYTHON: &str = "/usr/bin/python3";

/// Channels a test leaves behind: a key's whole share of heavy commands
/// (`ssh.max_heavy_verbs_per_principal`, 4).
const CHANNELS: usize = 4;

/// How long the server has to let go of what a caller left.
const SETTLE: Duration = Duration::from_secs(15);

fn has_paramiko() -> bool {
    let ok = Command::new(PYTHON)
        .args(["-c", "import paramiko"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3-paramiko is missing (scripts/install-deps.sh installs it)"
        );
        eprintln!("skipped: no python3-paramiko");
    }
    ok
}

/// Open `CHANNELS` channels running `command` with a 32 KiB window, wait
/// until each has started its reply, then leave: `close` closes each
/// channel and then the connection politely; `drop` shuts the socket
/// with every channel still open.
const LEAVER: &str = r#"
import socket, sys, time, paramiko
port, key, how, n, command = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
t = paramiko.Transport(("127.0.0.1", port))
t.connect(username="git", pkey=paramiko.Ed25519Key.from_private_key_file(key))
channels = []
for _ in range(n):
    ch = t.open_session(window_size=32768, max_packet_size=32768)
    ch.exec_command(command)
    channels.append(ch)
started = 0
deadline = time.time() + 120
for ch in channels:
    while not ch.recv_ready() and time.time() < deadline:
        time.sleep(0.01)
    if ch.recv_ready():
        started += 1
print("started", started, flush=True)
if how == "close":
    for ch in channels:
        ch.close()
    time.sleep(0.5)
    t.close()
else:
    t.sock.shutdown(socket.SHUT_RDWR)
    t.sock.close()
"#;

fn leave(h: &ServerHarness, how: &str, command: &str) {
    let out = Command::new(PYTHON)
        .args(["-c", LEAVER])
        .arg(h.ssh_port().to_string())
        .arg(h.ssh_client_key())
        .arg(how)
        .arg(CHANNELS.to_string())
        .arg(command)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("started {CHANNELS}")),
        "not every channel started its reply: {said}{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        h.log()
    );
}

/// What the server's descriptors (`/proc/<pid>/fd`) point at.
fn open_fds(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|target| target.display().to_string())
        .collect()
}

/// What a verb could leave open: its connection's socket, a release
/// file. (The collab database's read pool grows with concurrent readers
/// and keeps its files: not counted.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    sockets: usize,
    release_files: usize,
}

fn held(h: &ServerHarness) -> Held {
    let fds = open_fds(h.pid());
    Held {
        sockets: fds.iter().filter(|t| t.starts_with("socket:")).count(),
        release_files: fds.iter().filter(|t| t.contains("/releases/")).count(),
    }
}

/// Wait until nothing runs and the server holds no more sockets than
/// `baseline` (one more at most: the metrics request) and no release file.
fn settles(h: &ServerHarness, baseline: Held, what: &str) {
    let start = Instant::now();
    loop {
        let running = commands_running(h);
        let now = held(h);
        if running == 0 && now.sockets <= baseline.sockets + 1 && now.release_files == 0 {
            return;
        }
        assert!(
            start.elapsed() < SETTLE,
            "{what}: {running} commands still running and {now:?} open (baseline {baseline:?}) \
             {SETTLE:?} after their callers left; descriptors: {:?}",
            open_fds(h.pid())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stop the server gracefully: it must find nothing still running.
fn stops_with_nothing_running(mut h: ServerHarness) {
    let status = h.stop();
    assert!(status.success(), "{status}\n{}", h.log());
    assert!(
        !h.log().contains("commands still running"),
        "shutdown waited for commands:\n{}",
        h.log()
    );
}

/// The diff's text stays under `MAX_DIFF_BYTES` (8 MiB); its JSON is
/// twice that.
const DIFF_BYTES: usize = 7_000_000;

/// A release `v1`/`big.bin` of 8 MiB in `r`.
fn big_release(h: &ServerHarness) {
    let clone = h.clone_repo("r", "tagger");
    let tagged = h.git(&clone, &["tag", "v1"]);
    assert!(tagged.status.success(), "{tagged:?}");
    let pushed = h.ssh_push(&clone, &["refs/tags/v1"]);
    assert!(pushed.status.success(), "{pushed:?}");
    let bytes: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let made = h.ssh_exec_with_stdin("collab-release create 'r' 'v1' 'big.bin'", &bytes);
    assert_eq!(made.code, 0, "{made:?}");
}

/// Run each command once to the end: what the server holds afterwards.
fn warm(h: &ServerHarness, commands: &[&str]) -> Held {
    for command in commands {
        let out = h.ssh_exec(command);
        assert_eq!(out.code, 0, "{command}: {}", out.stderr);
    }
    assert_eq!(commands_running(h), 0);
    let baseline = held(h);
    assert_eq!(baseline.release_files, 0, "{:?}", open_fds(h.pid()));
    baseline
}

#[test]
fn closed_channels_stop_a_diff_and_a_download() {
    if !has_paramiko() {
        return;
    }
    let (h, a, _b) = review::setup();
    let id = review::big_patch(&h, &a, DIFF_BYTES);
    big_release(&h);
    let diff = format!("collab-patch diff 'r' {}", &id[..8]);
    let download = "collab-release download 'r' 'v1' 'big.bin'";
    let baseline = warm(&h, &[&diff, download]);

    leave(&h, "close", &diff);
    settles(&h, baseline, "closed diff channels");
    leave(&h, "close", download);
    settles(&h, baseline, "closed download channels");

    // The server still serves, and the same verbs run to the end.
    let again = h.ssh_exec(download);
    assert_eq!(again.code, 0, "{}", again.stderr);
    stops_with_nothing_running(h);
}

#[test]
fn a_dropped_connection_stops_its_verbs() {
    if !has_paramiko() {
        return;
    }
    let (h, a, _b) = review::setup();
    let id = review::big_patch(&h, &a, DIFF_BYTES);
    big_release(&h);
    let diff = format!("collab-patch diff 'r' {}", &id[..8]);
    let download = "collab-release download 'r' 'v1' 'big.bin'";
    let baseline = warm(&h, &[&diff, download]);

    leave(&h, "drop", &diff);
    // The dropped diffs give their places in the key's share back.
    settles(&h, baseline, "diffs of a dropped connection");
    leave(&h, "drop", download);
    settles(&h, baseline, "downloads of a dropped connection");
    stops_with_nothing_running(h);
}

/// Open one channel with a `window`-byte window, run `command` (a pty
/// `shell` when `command` is `tui`), wait until `ready` says the server
/// has answered something (`exec`: nothing, close at once), then close
/// the channel and say whether the connection is still up a moment later.
const CLOSER: &str = r#"
import hashlib, struct, sys, time, paramiko
port, key, command, window = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
extra = sys.argv[5:]
# paramiko raises any window below 32 KiB to 32 KiB; a smaller one makes
# even a short reply wait for the client.
paramiko.transport.MIN_WINDOW_SIZE = 1
t = paramiko.Transport(("127.0.0.1", port))
t.connect(username="git", pkey=paramiko.Ed25519Key.from_private_key_file(key))
ch = t.open_session(window_size=window, max_packet_size=32768)
assert ch.in_window_size == window, ch.in_window_size
deadline = time.time() + 120

def wait_ready():
    while not ch.recv_ready() and time.time() < deadline:
        time.sleep(0.01)
    return ch.recv_ready()

def pkt(line):
    return b"%04x" % (len(line) + 4) + line

if command == "tui":
    ch.get_pty(term="xterm", width=300, height=100)
    ch.invoke_shell()
    print("answered", wait_ready(), flush=True)
elif command == "push":
    # Protocol v0 receive-pack: read the advertisement, create one branch
    # per name at `oid` (no new objects: an empty pack), and leave once the
    # report (one line per branch, larger than the window) has begun.
    oid, n = extra[0].encode(), int(extra[1])
    ch.exec_command("git-receive-pack 'r'")
    buf = b""
    while not buf.endswith(b"0000") and time.time() < deadline:
        buf += ch.recv(65536)
    zero = b"0" * 40
    lines = b""
    for i in range(n):
        caps = b"\0report-status" if i == 0 else b""
        lines += pkt(b"%s %s refs/heads/b%05d%s\n" % (zero, oid, i, caps))
    ch.sendall(lines + b"0000")
    header = b"PACK" + struct.pack(">II", 2, 0)
    ch.sendall(header + hashlib.sha1(header).digest())
    print("answered", wait_ready(), flush=True)
else:
    ch.exec_command(command)
    print("answered", True, flush=True)
ch.close()
time.sleep(3)
print("connected", t.is_active(), flush=True)
t.close()
"#;

/// Run [`CLOSER`] as the administrator: what it printed.
fn close_early(h: &ServerHarness, command: &str, window: u32, extra: &[&str]) -> String {
    let out = Command::new(PYTHON)
        .args(["-c", CLOSER])
        .arg(h.ssh_port().to_string())
        .arg(h.ssh_client_key())
        .arg(command)
        .arg(window.to_string())
        .args(extra)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        said.contains("answered True"),
        "the server never answered: {said}{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        h.log()
    );
    said
}

/// Wait until nothing runs any more, within [`SETTLE`].
fn nothing_runs(h: &ServerHarness, what: &str) {
    let start = Instant::now();
    while commands_running(h) != 0 {
        assert!(
            start.elapsed() < SETTLE,
            "{what}: still running {SETTLE:?} after its caller closed the channel\n{}",
            h.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A writing verb whose client closed the channel before its reply: the
/// write is done all the same, and the reply (larger than the 64-byte
/// window) gives up rather than wait for a window that cannot open.
#[test]
fn a_writing_verb_whose_caller_left_writes_and_does_not_wait() {
    if !has_paramiko() {
        return;
    }
    let h = ServerHarness::start();
    h.create_repo("r");
    close_early(
        &h,
        "collab-issue open 'r' --title 'written after the caller left'",
        64,
        &[],
    );
    let start = Instant::now();
    loop {
        let list = h.ssh_exec("collab-issue list 'r'");
        assert_eq!(list.code, 0, "{list:?}");
        if list.stdout.contains("written after the caller left") {
            break;
        }
        assert!(
            start.elapsed() < SETTLE,
            "the issue was never written: {list:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    nothing_runs(&h, "collab-issue open");
    stops_with_nothing_running(h);
}

/// The terminal UI at 300x100 behind a 1 KiB window: its first frame
/// waits for window space when the client closes the channel. The session
/// ends at once (not after `ssh.tui_stall_timeout`), and the connection
/// stays up.
#[test]
fn a_closed_terminal_ui_channel_ends_its_session_at_once() {
    if !has_paramiko() {
        return;
    }
    let h = ServerHarness::start_with(common::HarnessOptions {
        env: vec![("GIT_COLLAB_SSH__TUI_STALL_TIMEOUT".into(), "600s".into())],
        ..Default::default()
    });
    h.create_repo("r");
    let said = close_early(&h, "tui", 1024, &[]);
    assert!(
        said.contains("connected True"),
        "the connection was dropped: {said}"
    );
    nothing_runs(&h, "the terminal UI");
    stops_with_nothing_running(h);
}

/// A push whose client closes the channel while receive-pack's report
/// (one line per branch, more than the window) is on its way: the push is
/// in, and the rest of the report is thrown away, not waited for.
#[test]
fn a_push_whose_caller_left_after_its_refs_moved_does_not_wait() {
    if !has_paramiko() {
        return;
    }
    let h = ServerHarness::start();
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    let main = review::server_tip(&h, "main");
    const BRANCHES: usize = 3000;
    close_early(&h, "push", 32768, &[&main, &BRANCHES.to_string()]);
    nothing_runs(&h, "git-receive-pack");
    let refs = Command::new("git")
        .arg("-C")
        .arg(h.repos_dir().join("r.git"))
        .args(["for-each-ref", "--format=%(refname)", "refs/heads/"])
        .output()
        .unwrap();
    let count = String::from_utf8_lossy(&refs.stdout).lines().count();
    assert_eq!(count, BRANCHES + 1, "the push is not in");
    stops_with_nothing_running(h);
}
