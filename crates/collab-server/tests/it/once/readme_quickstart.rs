//! README's quick start, run as written (issue #19): the first fenced block
//! under "## Quick start" is executed by bash in a scratch directory with a
//! fresh HOME. Only what a test machine must differ in is substituted: the
//! binary under test for `cargo run --release ...`, and free ports for 2222
//! and 8080 (other tests may hold those).

use std::net::TcpListener;
use std::process::{Command, Stdio};

fn quick_start_block() -> String {
    let readme = std::fs::read_to_string(concat!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
        "/README.md"
    ))
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

#[test]
fn the_readme_quick_start_works_as_written() {
    let block = quick_start_block();
    let run = "cargo run --release --bin git-collab-server --";
    assert!(
        block.contains(run),
        "the quick start runs the server with cargo:\n{block}"
    );
    let (ssh_port, http_port) = (free_port(), free_port());
    let script = block
        .replace(run, env!("CARGO_BIN_EXE_git-collab-server"))
        .replace("2222", &ssh_port.to_string())
        .replace("8080", &http_port.to_string());

    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    // A user's first connection asks to trust the host key; a test cannot
    // answer, so that (and only that) is configured ahead. OpenSSH reads
    // the passwd home, not $HOME, hence a `ssh` first on PATH that points
    // it at the test's config and key.
    let config = home.join(".ssh/config");
    std::fs::write(
        &config,
        format!(
            "Host 127.0.0.1\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  \
             LogLevel ERROR\n  IdentitiesOnly yes\n  IdentityFile {}\n",
            home.join(".ssh/id_ed25519").display()
        ),
    )
    .unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let shim = bin.join("ssh");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\nexec /usr/bin/ssh -F '{}' \"$@\"\n",
            config.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();

    // The server runs in the background of the script; stop it at the end
    // whatever happened, so the test leaves no process behind. A file, not
    // stdin: `ssh` in the script would read the rest of it.
    let script_path = tmp.path().join("quickstart.sh");
    std::fs::write(
        &script_path,
        format!("trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n{script}\n"),
    )
    .unwrap();
    // `timeout` bounds the whole run: the readiness loop would otherwise
    // wait forever for a server that did not start.
    let mut bash = Command::new("timeout");
    bash.args(["300", "bash"]);
    for (key, _) in std::env::vars_os() {
        let key_text = key.to_string_lossy();
        if key_text.starts_with("GIT_") || key_text.starts_with("SSH_") {
            bash.env_remove(&key);
        }
    }
    let child = bash
        .args(["-euo", "pipefail"])
        .arg(&script_path)
        .env("PATH", &path)
        .current_dir(&work)
        .env("HOME", &home)
        .env("GIT_COLLAB_SSH__LISTEN", format!("127.0.0.1:{ssh_port}"))
        .env("GIT_COLLAB_HTTP__LISTEN", format!("127.0.0.1:{http_port}"))
        .env("GIT_AUTHOR_NAME", "Quick Start")
        .env("GIT_AUTHOR_EMAIL", "quick@example.com")
        .env("GIT_COMMITTER_NAME", "Quick Start")
        .env("GIT_COMMITTER_EMAIL", "quick@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "quick start failed\n{script}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    // Step 3 printed who we are: an admin.
    let whoami: serde_json::Value = stdout
        .lines()
        .find_map(|l| {
            serde_json::from_str(l)
                .ok()
                .filter(|v: &serde_json::Value| v.get("principal").is_some())
        })
        .unwrap_or_else(|| panic!("no whoami JSON in:\n{stdout}"));
    assert_eq!(whoami["admin"], true, "{whoami}");
    // Step 4 cloned the pushed commit back.
    let log = Command::new("git")
        .args(["-C", "demo-copy", "log", "-1", "--format=%s"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .current_dir(&work)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).trim(),
        "First commit",
        "{log:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
}
