//! The terminal UI driven like a person: tmux runs the real `ssh -tt`
//! against the real server, `send-keys` types and `capture-pane` reads the
//! screen. Navigate to an issue, comment, claim it and see the events
//! appear (one of them written by someone else, live); resize; a private
//! repository is never listed; hostile text is shown, never acted on;
//! `NO_COLOR`, `TERM=dumb` and a session without a pty.

use collab_testkit as common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::ServerHarness;

/// Hang guard for a screen to show something (not a speed assertion).
const SCREEN_LIMIT: Duration = Duration::from_secs(60);

/// One tmux server of its own (its own socket) with one session running
/// `ssh -tt` into the harness.
struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    fn start(h: &ServerHarness, key: &Path, extra: &[&str], cols: u16, rows: u16) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("tmux.sock");
        let mut ssh = vec!["ssh".to_string()];
        ssh.extend(h.ssh_options(key));
        ssh.extend(extra.iter().map(|s| s.to_string()));
        ssh.extend(["-tt".to_string(), "git@127.0.0.1".to_string()]);
        let line = ssh
            .iter()
            .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
            .collect::<Vec<_>>()
            .join(" ");
        // `remain-on-exit` keeps the pane (and its last screen) after ssh exits.
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

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "tui"];
        args.extend(keys);
        self.run(&args);
    }

    fn type_text(&self, text: &str) {
        self.run(&["send-keys", "-t", "tui", "-l", text]);
    }

    /// The screen as text (`colors`: with tmux's SGR sequences).
    fn screen(&self, colors: bool) -> String {
        let mut args = vec!["capture-pane", "-p", "-t", "tui"];
        if colors {
            args.push("-e");
        }
        String::from_utf8_lossy(&self.run(&args).stdout).into_owned()
    }

    /// Wait until the screen shows `needle`; the screen then.
    fn wait_for(&self, needle: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen(false);
            if screen.contains(needle) {
                return screen;
            }
            assert!(
                start.elapsed() < SCREEN_LIMIT,
                "the screen never showed {needle:?}:\n{screen}"
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

/// A repository with an issue, and a private one the user may not read.
fn setup(h: &ServerHarness) -> (PathBuf, String) {
    let repo = h.create_repo("team/app");
    std::fs::write(repo.join("description"), "The app\n").unwrap();
    let secret = h.create_repo("hidden-vault");
    collab_testkit::write_live(
        &secret.join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    );
    let opened = h.ssh_exec("collab-issue open 'team/app' --title 'Crash on start' --body 'boom'");
    assert_eq!(opened.code, 0, "{opened:?}");
    let id = opened.json()["issue"].as_str().unwrap().to_string();
    let user = h.authorized_key("user");
    (user, id)
}

#[test]
fn navigate_comment_claim_and_see_events_live() {
    let h = ServerHarness::start();
    let (user, id) = setup(&h);
    let tmux = Tmux::start(&h, &user, &[], 80, 24);

    // The repositories the user can read, and only those.
    let screen = tmux.wait_for("team/app");
    assert!(screen.contains("The app"), "{screen}");
    assert!(!screen.contains("hidden-vault"), "{screen}");
    assert!(screen.contains("events (live)"), "{screen}");

    // Enter: the issues; Enter: the issue.
    tmux.keys(&["Enter"]);
    tmux.wait_for("Crash on start");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("lease: none");
    assert!(screen.contains("boom"), "{screen}");

    // Comment: through collab-issue comment, as the user.
    tmux.keys(&["c"]);
    tmux.wait_for("comment:");
    tmux.type_text("Looks like a null deref");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("commented");
    assert!(screen.contains("Looks like a null deref"), "{screen}");
    let shown = h.ssh_exec(&format!("collab-issue show 'team/app' '{id}'"));
    let comment = &shown.json()["comments"][0];
    assert_eq!(comment["body"], "Looks like a null deref");
    assert_eq!(comment["author"]["principal"], common::fingerprint(&user));

    // Claim: collab-lease acquire, the user's lease.
    tmux.keys(&["a"]);
    tmux.wait_for("claimed");
    tmux.wait_for("lease: held by");
    let lease = h.ssh_exec(&format!("collab-lease show 'team/app' '{id}'"));
    assert_eq!(lease.json()["status"], "held", "{lease:?}");
    assert_eq!(lease.json()["holder"], common::fingerprint(&user));

    // The events pane shows the user's writes ...
    tmux.wait_for("issue.commented");
    tmux.wait_for("lease.acquired");
    // ... and someone else's, live, without a key press.
    let labeled = h.ssh_exec(&format!(
        "collab-issue label 'team/app' '{id}' --add urgent"
    ));
    assert_eq!(labeled.code, 0, "{labeled:?}");
    tmux.wait_for("issue.labeled");

    // Label, release and close from the keyboard, each the verb's write.
    tmux.keys(&["l"]);
    tmux.wait_for("labels (+add -remove):");
    tmux.type_text("+p1 -urgent");
    tmux.keys(&["Enter"]);
    tmux.wait_for("labels changed");
    let shown = h
        .ssh_exec(&format!("collab-issue show 'team/app' '{id}'"))
        .json();
    assert_eq!(shown["labels"], serde_json::json!(["p1"]), "{shown:#}");
    tmux.keys(&["r"]);
    tmux.wait_for("released");
    tmux.wait_for("lease: none");
    tmux.keys(&["x"]);
    tmux.wait_for("closed");
    let shown = h
        .ssh_exec(&format!("collab-issue show 'team/app' '{id}'"))
        .json();
    assert_eq!(shown["status"], "closed", "{shown:#}");

    tmux.keys(&["q", "q"]);
    tmux.wait_for("repositories");

    // Resize: the next frame fills the new window.
    tmux.run(&["resize-window", "-t", "tui", "-x", "100", "-y", "30"]);
    let start = Instant::now();
    loop {
        let screen = tmux.screen(false);
        let lines: Vec<&str> = screen.lines().collect();
        if lines.len() >= 30 && lines[29].contains("q quit") {
            break;
        }
        assert!(
            start.elapsed() < SCREEN_LIMIT,
            "not redrawn at 100x30:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // q at the top quits: ssh exits 0 and the screen is given back.
    tmux.keys(&["q"]);
    let start = Instant::now();
    while tmux.screen(false).contains("events (live)") {
        assert!(start.elapsed() < SCREEN_LIMIT, "the UI did not quit");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn hostile_text_is_inert_and_colour_follows_no_color() {
    let h = ServerHarness::start();
    let (user, _) = setup(&h);
    // A description written on the host: an OSC title change, a screen
    // clear, a colour, a C1 CSI, a bell.
    let repo = h.repos_dir().join("team/app.git");
    std::fs::write(
        repo.join("description"),
        "evil\x1b]2;pwned\x07\x1b[2J\x1b[31mred\u{9b}1mbold\x07 end\n",
    )
    .unwrap();

    let tmux = Tmux::start(&h, &user, &[], 120, 24);
    let screen = tmux.wait_for("team/app");
    // Shown as escapes, never acted on.
    assert!(
        screen.contains("evil\\x1b]2;pwned\\x07\\x1b[2J"),
        "{screen}"
    );
    assert!(screen.contains("\\u{9b}1mbold"), "{screen}");
    let title = tmux.run(&["display-message", "-p", "-t", "tui", "#{pane_title}"]);
    assert!(!String::from_utf8_lossy(&title.stdout).contains("pwned"));
    // With colour, the screen has colour.
    let coloured = tmux.screen(true);
    assert!(has_colour(&coloured), "{coloured:?}");
    drop(tmux);

    // NO_COLOR (sent with SetEnv): the same screen without a colour.
    let tmux = Tmux::start(&h, &user, &["-o", "SetEnv=NO_COLOR=1"], 120, 24);
    tmux.wait_for("team/app");
    let plain = tmux.screen(true);
    assert!(!has_colour(&plain), "{plain:?}");
    assert!(
        plain.contains("\x1b[7m"),
        "reverse video still marks the selection: {plain:?}"
    );
}

/// Whether any SGR sequence in `screen` sets a foreground or background
/// colour (30-38, 40-48, 90-97, 100-107; 39 and 49 are the defaults).
fn has_colour(screen: &str) -> bool {
    screen.split("\x1b[").skip(1).any(|rest| {
        let Some(end) = rest.find(|c: char| !(c.is_ascii_digit() || c == ';')) else {
            return false;
        };
        if !rest[end..].starts_with('m') {
            return false;
        }
        rest[..end]
            .split(';')
            .filter_map(|p| p.parse::<u32>().ok())
            .any(|p| matches!(p, 30..=38 | 40..=48 | 90..=97 | 100..=107))
    })
}

#[test]
fn no_pty_and_dumb_terminals_get_one_clear_line() {
    let h = ServerHarness::start();
    let key = h.ssh_client_key();

    // `tui` without a pty, and a shell without one.
    let tui = h.ssh_raw(&key, &["-T", "git@127.0.0.1", "tui"], b"");
    assert_eq!(tui.code, 1, "{tui:?}");
    assert!(
        tui.stderr
            .contains("needs a terminal: run `ssh -t HOST tui`"),
        "{tui:?}"
    );
    let shell = h.ssh_raw(&key, &["-T", "git@127.0.0.1"], b"");
    assert_eq!(shell.code, 1, "{shell:?}");
    assert!(shell.stderr.contains("ssh -t HOST"), "{shell:?}");

    // TERM=dumb on a pty: the message, exit 1, no screen drawn.
    let out = Command::new("ssh")
        .args(h.ssh_options(&key))
        .args(["-tt", "git@127.0.0.1"])
        .env("TERM", "dumb")
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("TERM is dumb"), "{all:?}");
    assert!(!all.contains("\x1b[?1049h"), "{all:?}");
}

/// A client that stops reading (its SSH window stays full) is dropped
/// after `ssh.tui_stall_timeout`: the session holds one frame, not a
/// growing buffer, and no task outlives it.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_stops_reading_is_dropped() {
    use common::client;
    use std::sync::Arc;

    let h = ServerHarness::start_with(common::HarnessOptions {
        env: vec![("GIT_COLLAB_SSH__TUI_STALL_TIMEOUT".into(), "2s".into())],
        ..Default::default()
    });
    let opened = h.ssh_exec("collab-repo create 'team/app'");
    assert_eq!(opened.code, 0, "{opened:?}");
    // A small window, and a one-message queue this test never reads: once
    // it is full the client's session stops reading the socket and sends
    // no more window adjustments.
    let config = Arc::new(russh::client::Config {
        window_size: 4096,
        channel_buffer_size: 1,
        ..Default::default()
    });
    let mut conn = russh::client::connect(config, h.ssh_addr, client::AcceptAnyHost)
        .await
        .expect("connect");
    let key = client::load_key(&h.ssh_client_key());
    assert!(client::authenticate(&mut conn, &key).await.success());
    let channel = conn.channel_open_session().await.expect("session");
    channel
        .request_pty(false, "xterm-256color", 200, 60, 0, 0, &[])
        .await
        .unwrap();
    channel.request_shell(false).await.unwrap();

    // Every write redraws the events pane: frames keep coming.
    let start = Instant::now();
    let mut n = 0;
    while !h.log().contains("tui: the client stopped reading") {
        assert!(
            start.elapsed() < SCREEN_LIMIT,
            "never dropped:\n{}",
            h.log()
        );
        n += 1;
        let title = format!("issue {n} with a title long enough to fill the events pane");
        let out = tokio::task::block_in_place(|| {
            h.ssh_exec(&format!("collab-issue open 'team/app' --title '{title}'"))
        });
        assert_eq!(out.code, 0, "{out:?}");
    }
    // The server closed its end: the stuck client's socket waits in
    // CLOSE_WAIT (the client, blocked by its own full queue, never looks).
    let start = Instant::now();
    while !closed_by_server(h.ssh_port()) {
        assert!(
            start.elapsed() < SCREEN_LIMIT,
            "the server kept the connection"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(channel);
    drop(conn);
}

/// Whether a local TCP connection to `port` is in CLOSE_WAIT: its peer (the
/// server) closed it (/proc/net/tcp, state 08).
fn closed_by_server(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let remote = format!(":{port:04X}");
    table.lines().skip(1).any(|row| {
        let cols: Vec<&str> = row.split_whitespace().collect();
        cols.len() > 3 && cols[2].ends_with(&remote) && cols[3] == "08"
    })
}

/// No key press for `ssh.tui_idle_timeout`: the session ends with one line.
#[test]
fn an_idle_session_is_closed() {
    let h = ServerHarness::start_with(common::HarnessOptions {
        env: vec![("GIT_COLLAB_SSH__TUI_IDLE_TIMEOUT".into(), "2s".into())],
        ..Default::default()
    });
    let key = h.ssh_client_key();
    let tmux = Tmux::start(&h, &key, &[], 80, 24);
    tmux.wait_for("repositories");
    let screen = tmux.wait_for("closed after ssh.tui_idle_timeout");
    assert!(
        !screen.contains("events (live)"),
        "the screen was given back:\n{screen}"
    );
}

/// A patch: its diff, a review requesting changes and an approval made in
/// the UI are the reviewer's (read back through `collab-patch show`); a
/// write the policy refuses shows the verb's own refusal.
#[test]
fn review_a_patch_and_see_the_verbs_refusals() {
    use common::review;
    let (h, alice, bob) = review::setup();
    review::commit(
        &h,
        &alice,
        "lib.rs",
        "pub fn answer() -> u32 {\n    42\n}\n",
        "Add the answer",
    );
    let pushed = review::ok(&h, &alice, &["push", "origin", "HEAD:refs/for/main"]);
    assert!(pushed.stderr.contains("remote: patch "), "{pushed:?}");
    let listed = h.ssh_exec("collab-patch list 'r'").json();
    let id = listed["patches"][0]["id"].as_str().unwrap().to_string();

    let tmux = Tmux::start(&h, &bob.key, &[], 100, 30);
    tmux.wait_for("r.git");
    tmux.keys(&["p"]);
    tmux.wait_for("Add the answer");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("diff r1");
    assert!(screen.contains("pub fn answer"), "{screen}");

    tmux.keys(&["R"]);
    tmux.wait_for("request changes, saying why:");
    tmux.type_text("Please add a test");
    tmux.keys(&["Enter"]);
    tmux.wait_for("changes requested");
    let shown = h.ssh_exec(&format!("collab-patch show 'r' '{id}'")).json();
    let review = shown["reviews"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["author"]["principal"] == common::fingerprint(&bob.key))
        .unwrap_or_else(|| panic!("no review by bob: {shown:#}"));
    assert_eq!(review["verdict"], "request_changes", "{review:#}");
    assert_eq!(review["body"], "Please add a test");

    tmux.keys(&["A"]);
    tmux.wait_for("approve, with a comment (optional):");
    tmux.keys(&["Enter"]);
    tmux.wait_for("approved");
    let shown = h.ssh_exec(&format!("collab-patch show 'r' '{id}'")).json();
    assert!(
        shown["reviews"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["verdict"] == "approve"
                && r["author"]["principal"] == common::fingerprint(&bob.key)),
        "{shown:#}"
    );

    // Bob may read but no longer write: the UI says what the verb says.
    std::fs::write(
        h.repos_dir().join("r.git/collab-policy.toml"),
        "write = []\n",
    )
    .unwrap();
    let refused = h.ssh_exec_as(
        &bob.key,
        &format!("collab-patch comment 'r' '{id}' --body 'hi'"),
        b"",
    );
    assert_eq!(refused.code, 1, "{refused:?}");
    let words = refused
        .stderr
        .trim()
        .trim_start_matches("error: ")
        .to_string();
    tmux.keys(&["c"]);
    tmux.wait_for("comment:");
    tmux.type_text("hi");
    tmux.keys(&["Enter"]);
    tmux.wait_for(&words);
    let shown = h.ssh_exec(&format!("collab-patch show 'r' '{id}'")).json();
    assert!(
        shown["comments"].as_array().is_none_or(|c| c.is_empty()),
        "nothing written: {shown:#}"
    );
}

/// A session lasts until it goes idle, so a key taken out of
/// authorized_keys while its session is open is cut at its next action,
/// as its next `ssh` command would be refused.
#[test]
fn a_key_removed_while_its_session_is_open_is_cut_at_the_next_action() {
    let h = ServerHarness::start();
    let (user, _) = setup(&h);
    let tmux = Tmux::start(&h, &user, &[], 80, 24);
    tmux.wait_for("team/app");

    let blob = common::public_key_line(&user)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();
    let keys = std::fs::read_to_string(h.authorized_keys_path()).unwrap();
    let kept: String = keys
        .lines()
        .filter(|l| !l.contains(&blob))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(kept, keys, "the user's line was in authorized_keys");
    std::fs::write(h.authorized_keys_path(), kept).unwrap();
    // The server reads the file live: wait until a new login is refused.
    let start = Instant::now();
    while h.ssh_exec_as(&user, "collab-whoami", b"").code == 0 {
        assert!(start.elapsed() < SCREEN_LIMIT, "the removal never took");
        std::thread::sleep(Duration::from_millis(200));
    }

    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("this key is no longer admitted");
    assert!(!screen.contains("Crash on start"), "{screen}");
}
