//! README's quick start, run as written (issues #19 and 32): the first
//! fenced block under "## Quick start" is executed by bash from a copy of
//! the repository root, with a fresh home directory that has no `~/.ssh`
//! and no git identity, and a clean environment. Only what a test machine
//! must differ in is substituted: the build step (the binaries under test
//! are put where it would leave them), and free ports for 2222 and 8080
//! (other tests may hold those).
//!
//! As root (CI), it runs twice, as a new user would paste it: as a fresh
//! normal user made for the test (`useradd`, removed after), and as root
//! with an empty `/root` (a tmpfs in a mount namespace of its own), so
//! OpenSSH's own idea of home (the passwd entry, not `$HOME`) is fresh too.
//! Not as root, it runs once with `HOME` pointing at a fresh directory
//! and a `ssh` first on PATH that reads that home's key.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BUILD: &str = "cargo build --release --bin git-collab-server --bin git-collab";

fn quick_start_block() -> String {
    let readme = std::fs::read_to_string(collab_testkit::workspace_root().join("README.md"))
        .expect("README.md");
    let section = readme
        .split("## Quick start")
        .nth(1)
        .expect("a Quick start section");
    let start = section.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let end = start + section[start..].find("```").expect("end of block");
    section[start..end].to_string()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A directory standing in for the repository root: `target/release`
/// holds the binaries under test, readable by any user.
fn fake_checkout(tmp: &Path) -> PathBuf {
    let root = tmp.join("checkout");
    let release = root.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    for (name, from) in [
        ("git-collab-server", env!("CARGO_BIN_EXE_git-collab-server")),
        ("git-collab", collab_testkit::bin("git-collab")),
    ] {
        std::fs::copy(from, release.join(name)).unwrap();
        std::fs::set_permissions(release.join(name), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    // tempfile makes its directory 0700; another user must get through.
    for dir in [tmp, &root, &root.join("target"), &release] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    root
}

/// The script: the README block with the build and ports substituted,
/// the server stopped at exit whatever happened, and what the test checks
/// printed after the block (a namespace's tmpfs home is gone afterwards).
fn script(ssh_port: u16, http_port: u16) -> String {
    let block = quick_start_block();
    assert!(
        block.contains(BUILD),
        "the quick start builds with cargo:\n{block}"
    );
    assert!(
        block.contains("mkdir -p -m 700 ~/.ssh"),
        "the quick start makes ~/.ssh (a fresh machine has none):\n{block}"
    );
    let block = block
        .replace(BUILD, ": the test built the binaries into target/release")
        .replace("2222", &ssh_port.to_string())
        .replace("8080", &http_port.to_string());
    format!(
        "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n{block}\n\
         echo \"copied: $(git -C demo-copy log -1 --format=%s)\"\n"
    )
}

/// The clean environment the script starts with.
fn clean_env(cmd: &mut Command, home: &Path, path: &str, ssh_port: u16, http_port: u16) {
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", path)
        .env("LANG", "C.UTF-8")
        .env("GIT_COLLAB_SSH__LISTEN", format!("127.0.0.1:{ssh_port}"))
        .env("GIT_COLLAB_HTTP__LISTEN", format!("127.0.0.1:{http_port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
}

fn check(who: &str, script: &str, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "quick start failed {who}\n{script}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    // Step 5 printed who we are: an admin.
    let whoami: serde_json::Value = stdout
        .lines()
        .find_map(|l| {
            serde_json::from_str(l)
                .ok()
                .filter(|v: &serde_json::Value| v.get("principal").is_some())
        })
        .unwrap_or_else(|| panic!("no whoami JSON {who} in:\n{stdout}"));
    assert_eq!(whoami["admin"], true, "{who}: {whoami}");
    // Step 6 cloned the pushed commit back.
    assert!(
        stdout.contains("copied: First commit"),
        "{who}: stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    // The backgrounded server's log went to its file, not between the
    // output of the commands that followed it (issue 50).
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(
            !line.contains(" INFO ") && !line.starts_with("listening ssh="),
            "{who}: the server's log is in the terminal: {line}\nstderr:\n{stderr}"
        );
    }
}

const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A user made for one run, removed with its home when dropped.
struct TestUser(String);

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-KILL", "-u", &self.0])
            .status();
        let _ = Command::new("userdel").args(["-r", &self.0]).output();
    }
}

#[test]
fn the_readme_quick_start_works_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = fake_checkout(tmp.path());
    if !is_root() {
        return run_with_home_shim(tmp.path(), &checkout);
    }

    // As a fresh normal user.
    let name = format!("qs{}", std::process::id());
    let home = tmp.path().join("home-user");
    let made = Command::new("useradd")
        .args(["-m", "-s", "/bin/bash", "-d"])
        .arg(&home)
        .arg(&name)
        .output()
        .unwrap();
    assert!(made.status.success(), "useradd: {made:?}");
    let _user = TestUser(name.clone());
    let (ssh_port, http_port) = (free_port(), free_port());
    let text = script(ssh_port, http_port);
    let path = home.join("quickstart.sh");
    std::fs::write(&path, &text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cmd = Command::new("timeout");
    cmd.args([
        "300", "runuser", "-u", &name, "--", "bash", "-euo", "pipefail",
    ])
    .arg(&path)
    .current_dir(&checkout);
    clean_env(&mut cmd, &home, SYSTEM_PATH, ssh_port, http_port);
    cmd.env("USER", &name);
    check("as a normal user", &text, &cmd.output().unwrap());

    // As root, with an empty /root of its own.
    let (ssh_port, http_port) = (free_port(), free_port());
    let text = script(ssh_port, http_port);
    let path = tmp.path().join("quickstart-root.sh");
    std::fs::write(&path, &text).unwrap();
    let mut cmd = Command::new("timeout");
    cmd.args([
        "300",
        "unshare",
        "-m",
        "sh",
        "-c",
        "mount -t tmpfs -o mode=700 tmpfs /root && exec bash -euo pipefail \"$0\"",
    ])
    .arg(&path)
    .current_dir(&checkout);
    clean_env(
        &mut cmd,
        Path::new("/root"),
        SYSTEM_PATH,
        ssh_port,
        http_port,
    );
    cmd.env("USER", "root");
    check("as root", &text, &cmd.output().unwrap());
}

/// Not root: `HOME` is fresh, but OpenSSH reads the passwd home for
/// `~/.ssh`; a `ssh` first on PATH points it at `$HOME/.ssh`.
fn run_with_home_shim(tmp: &Path, checkout: &Path) {
    let home = tmp.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let bin = tmp.join("shim");
    std::fs::create_dir_all(&bin).unwrap();
    let shim = bin.join("ssh");
    std::fs::write(
        &shim,
        "#!/bin/sh\nexec /usr/bin/ssh -i \"$HOME/.ssh/id_ed25519\" \
         -o UserKnownHostsFile=\"$HOME/.ssh/known_hosts\" -o IdentitiesOnly=yes \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (ssh_port, http_port) = (free_port(), free_port());
    let text = script(ssh_port, http_port);
    let path = tmp.join("quickstart.sh");
    std::fs::write(&path, &text).unwrap();
    let mut cmd = Command::new("timeout");
    cmd.args(["300", "bash", "-euo", "pipefail"])
        .arg(&path)
        .current_dir(checkout);
    let search = format!("{}:{SYSTEM_PATH}", bin.display());
    clean_env(&mut cmd, &home, &search, ssh_port, http_port);
    check("with a fresh HOME", &text, &cmd.output().unwrap());
}
