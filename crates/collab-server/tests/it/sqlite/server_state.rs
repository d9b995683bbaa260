//! The server's own state survives damage loudly, with the real binary:
//!
//! - a `collab.db` truncated to 0 bytes or deleted, in a state directory
//!   used before, stops the start with one clear error (fencing tokens must
//!   never restart at 1 silently); `serve --allow-empty-db` starts anyway;
//! - a database with corrupt pages fails the start (`PRAGMA quick_check`),
//!   and, corrupted while the server runs, makes `/readyz` answer 503;
//! - the quarantine of a push whose git processes were SIGKILLed (and other
//!   stale leftovers) is removed when the server starts; fresh ones stay;
//! - the quarantine of a push whose *client* was SIGKILLed mid-transfer is
//!   gone promptly, not an hour later (issue 25).
//!
//! Regressions for issue 12.

use collab_testkit as common;
use collab_testkit::web as web_support;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::ServerHarness;

/// Hang guard for waits (not a performance assertion).
const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// How one start of the server on `state_dir` went.
#[derive(Debug)]
enum Start {
    /// It printed its `listening` line (and was then stopped).
    Listening,
    /// It exited first, with this stderr.
    Failed(String),
}

/// Start the server once on `state_dir` with `serve_args` after `serve`.
fn start_once(state_dir: &Path, serve_args: &[&str]) -> Start {
    let mut child = Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
        .arg("--state-dir")
        .arg(state_dir)
        .args([
            "--ssh-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "serve",
        ])
        .args(serve_args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.starts_with("listening ssh=") {
            // SAFETY: kill(2) on the child we spawned.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            child.wait().unwrap();
            return Start::Listening;
        }
        stderr.push_str(&line);
        stderr.push('\n');
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "exited 0 without listening: {stderr}");
    Start::Failed(stderr)
}

fn db_path(h: &ServerHarness) -> PathBuf {
    h.repos_dir().join("collab.db")
}

/// One `error: collab_db: …` line naming the problem.
fn assert_refused(start: Start, problem: &str) {
    let Start::Failed(stderr) = start else {
        panic!("the server started; expected it to refuse ({problem})")
    };
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].starts_with("error: collab_db: "), "{stderr}");
    assert!(errors[0].contains(problem), "{stderr}");
}

#[test]
fn a_lost_collab_db_refuses_to_start_unless_allowed() {
    let mut h = ServerHarness::start();
    // The first start marks the state directory as used.
    assert!(h.state_dir().join(".git-collab-state").exists());
    let status = h.stop();
    assert!(status.success(), "{status}: {}", h.log());

    // Truncated to 0 bytes.
    std::fs::write(db_path(&h), b"").unwrap();
    assert_refused(start_once(h.state_dir(), &[]), "is empty (0 bytes)");
    assert_eq!(
        std::fs::metadata(db_path(&h)).unwrap().len(),
        0,
        "left as it was"
    );
    // Deleted.
    std::fs::remove_file(db_path(&h)).unwrap();
    let _ = std::fs::remove_file(h.repos_dir().join("collab.db-wal"));
    assert_refused(start_once(h.state_dir(), &[]), "is missing");
    assert!(!db_path(&h).exists(), "nothing created");

    // The operator's explicit flag starts a new database; later starts are
    // normal again.
    assert!(matches!(
        start_once(h.state_dir(), &["--allow-empty-db"]),
        Start::Listening
    ));
    assert!(db_path(&h).exists());
    h.start_again();
    assert_eq!(web_support::get(&h, "/readyz").status, 200);
}

#[test]
fn a_corrupt_collab_db_fails_the_start_or_readyz() {
    let mut h = ServerHarness::start();
    h.create_repo("r");
    assert_eq!(web_support::get(&h, "/readyz").status, 200);

    // Corrupted while the server runs: /readyz says so.
    corrupt_pages_after_the_header(&db_path(&h));
    let ready = web_support::get(&h, "/readyz");
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert_eq!(ready.text(), "not ready: collab_db does not answer\n");
    h.stop();

    // Corrupted while stopped: the next start fails.
    corrupt_pages_after_the_header(&db_path(&h));
    assert_refused(start_once(h.state_dir(), &[]), "fails its integrity check");
}

/// Move everything into the database file (checkpoint), then overwrite
/// every page after the first (the header and schema) with garbage: the
/// lease tables' pages are gone.
fn corrupt_pages_after_the_header(db: &Path) {
    {
        // On a database corrupted before, this may fail: nothing to move.
        let conn = rusqlite::Connection::open(db).unwrap();
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
    let mut bytes = std::fs::read(db).unwrap();
    let page = match u16::from_be_bytes([bytes[16], bytes[17]]) {
        1 => 65536,
        n => n as usize,
    };
    assert!(bytes.len() > page, "the database has more than one page");
    for b in &mut bytes[page..] {
        *b = 0xa5;
    }
    std::fs::write(db, &bytes).unwrap();
}

/// Processes whose parent is `pid`, with their command lines.
fn children_of(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            out.push((child, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    out
}

fn quarantines(repo: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(repo.join("objects"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("tmp_objdir-incoming-"))
        })
        .collect();
    found.sort();
    found
}

/// Set the modification time of `path` and everything under it to two
/// hours ago (past the sweep's one-hour age).
fn age(path: &Path) {
    let out = Command::new("find")
        .arg(path)
        .args(["-exec", "touch", "-h", "-d", "2 hours ago", "{}", "+"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Commit a big incompressible file in `clone`, so that pushing it takes a
/// while.
/// `git push -q origin HEAD:refs/heads/main` from `clone`, in the
/// background, its output discarded.
fn spawn_push(h: &ServerHarness, clone: &Path) -> std::process::Child {
    h.git_command(&h.ssh_client_key(), clone)
        .args(["push", "-q", "origin", "HEAD:refs/heads/main"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn commit_big_file(h: &ServerHarness, clone: &Path) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let data: Vec<u8> = (0..48 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(clone.join("big.bin"), &data).unwrap();
    h.git(clone, &["add", "big.bin"]);
    h.git(clone, &["commit", "-q", "-m", "big"]);
}

#[test]
fn quarantines_of_killed_pushes_are_removed_at_start() {
    let mut h = ServerHarness::start();
    let repo = h.create_repo("r");
    let clone = h.clone_repo("r", "work");
    commit_big_file(&h, &clone);

    // Push, and SIGKILL the server's git processes once the push's
    // quarantine exists: git gets no chance to clean up.
    let mut push = spawn_push(&h, &clone);
    let start = Instant::now();
    while quarantines(&repo).is_empty() {
        assert!(start.elapsed() < WAIT_LIMIT, "no quarantine appeared");
        assert!(push.try_wait().unwrap().is_none(), "the push ended first");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut killed = 0;
    for (pid, cmd) in children_of(h.pid()) {
        if cmd.contains("receive-pack") {
            // Stopped first, so it cannot start its index-pack between the
            // listing of its children and its death (an orphan that then
            // kept writing into the quarantine made the sweep skip it).
            // SAFETY: kill(2) on a process of this test's server.
            unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
            for (grandchild, _) in children_of(pid) {
                // SAFETY: kill(2) on a process of this test's server.
                unsafe { libc::kill(grandchild as i32, libc::SIGKILL) };
            }
            // SAFETY: as above.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            killed += 1;
        }
    }
    assert_eq!(killed, 1, "one receive-pack to kill");
    let _ = push.wait();
    let left = quarantines(&repo);
    assert_eq!(
        left.len(),
        1,
        "the killed push left its quarantine: {left:?}"
    );

    // Two more: an old one, and one a push could still be writing.
    let stale = repo.join("objects/tmp_objdir-incoming-stale");
    std::fs::create_dir_all(stale.join("pack")).unwrap();
    std::fs::write(stale.join("pack/tmp_pack_x"), b"partial").unwrap();
    let fresh = repo.join("objects/tmp_objdir-incoming-fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    std::fs::write(fresh.join("obj"), b"in progress").unwrap();
    age(&left[0]);
    age(&stale);

    h.restart();
    h.wait_for_log("removed 2 leftovers of killed git processes");
    assert_eq!(quarantines(&repo), [fresh]);
    // The repository is still usable: the same push now succeeds.
    h.git(&clone, &["remote", "set-url", "origin", &h.repo_url("r")]);
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    assert_eq!(quarantines(&repo).len(), 1);
}

/// A client killed in the middle of its push (network gone, laptop lid
/// closed) leaves no quarantine behind until the hourly sweep: the server
/// ends that push's receive-pack so that git removes it. The pre-receive
/// hook is made slow (it blocks), so the push is cut off while its objects
/// sit in quarantine: before, receive-pack waited for the hook, and then
/// was SIGKILLed on its first keepalive to the gone client, which left the
/// quarantine. The wait is a bounded poll, not a timing assertion.
#[test]
fn a_push_whose_client_is_killed_leaves_no_quarantine() {
    let h = ServerHarness::start();
    let repo = h.create_repo("r");
    let clone = h.clone_repo("r", "work");
    h.commit_file(&clone, "a.txt", b"hello\n", "First");
    // A pre-receive that says where it is, then blocks.
    let hooks = h.state_dir().join("hooks");
    let blocked = h.temp_dir().join("blocked-hook.pid");
    let real_hook = std::fs::read_to_string(hooks.join("pre-receive")).unwrap();
    std::fs::write(
        hooks.join("pre-receive"),
        format!(
            "#!/bin/sh\necho $$ > {}.tmp && mv {0}.tmp {0}\nexec sleep 600\n",
            blocked.display()
        ),
    )
    .unwrap();

    let mut push = spawn_push(&h, &clone);
    let start = Instant::now();
    while !blocked.exists() {
        assert!(start.elapsed() < WAIT_LIMIT, "the hook never ran");
        assert!(push.try_wait().unwrap().is_none(), "the push ended first");
        std::thread::sleep(Duration::from_millis(20));
    }
    let hook_pid: i32 = std::fs::read_to_string(&blocked)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(quarantines(&repo).len(), 1, "the push is in quarantine");

    // SIGKILL the client's ssh (git may run it through `sh -c`, so look
    // through git push's descendants).
    let mut ssh = Vec::new();
    let mut parents = vec![push.id()];
    while let Some(parent) = parents.pop() {
        for (pid, cmd) in children_of(parent) {
            if cmd.starts_with("ssh ") {
                ssh.push(pid);
            } else {
                parents.push(pid);
            }
        }
    }
    assert_eq!(ssh.len(), 1, "one ssh under git push");
    // SAFETY: kill(2) on the ssh process this test started.
    unsafe { libc::kill(ssh[0] as i32, libc::SIGKILL) };
    assert!(!push.wait().unwrap().success(), "the push was not cut off");

    let start = Instant::now();
    let mut left = quarantines(&repo);
    while !left.is_empty() && start.elapsed() < WAIT_LIMIT {
        std::thread::sleep(Duration::from_millis(50));
        left = quarantines(&repo);
    }
    // SAFETY: kill(2) on the blocked hook this test's script started.
    unsafe { libc::kill(hook_pid, libc::SIGKILL) };
    assert!(
        left.is_empty(),
        "the killed push's quarantine stayed: {left:?}\n{}",
        h.log()
    );

    // Nothing of the cut-off push landed, and the repository takes it whole.
    std::fs::write(hooks.join("pre-receive"), real_hook).unwrap();
    let refs = h.ls_remote_as(&h.ssh_client_key(), "r");
    assert!(!refs.stdout.contains("refs/heads/main"), "{refs:?}");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    assert!(quarantines(&repo).is_empty());
}
