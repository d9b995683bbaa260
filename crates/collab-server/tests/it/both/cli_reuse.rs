//! `git-collab` reuses one SSH connection across commands (issue 26):
//! OpenSSH multiplexing set up by the CLI, counted on the server as SSH
//! sessions opened (`git_collab_ssh_sessions_total`). Switched off, every
//! command logs in again; with the user's own ControlMaster, theirs is
//! used and ours is not added; two keys in one home never share one.

use collab_testkit as common;
use collab_testkit::cli_bin;
use collab_testkit::web as web_support;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{fingerprint, ServerHarness, SshOutput};
use serde_json::Value;

/// SSH sessions the server has opened so far.
fn sessions(h: &ServerHarness) -> u64 {
    let metrics = web_support::get(h, "/metrics").text();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("git_collab_ssh_sessions_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no session count in\n{metrics}"))
}

/// `git-collab ARGS` in `dir` as `key`, with `env` on top.
fn collab(
    h: &ServerHarness,
    key: &Path,
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> SshOutput {
    let out = h
        .client_command(cli_bin(), key, dir)
        .env_remove("XDG_RUNTIME_DIR")
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = SshOutput::from_output(out);
    assert_eq!(out.code, 0, "{args:?}: {out:?}");
    assert_eq!(out.stderr, "", "{args:?}: {out:?}");
    out
}

/// The sockets in the CLI's own socket directory (under the test's HOME).
fn our_sockets(h: &ServerHarness) -> Vec<PathBuf> {
    let dir = h.temp_dir().join("home/.ssh/git-collab");
    std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

/// Stop every master the CLI started (they would otherwise linger until
/// the server goes).
fn stop_masters(h: &ServerHarness, key: &Path) {
    for socket in our_sockets(h) {
        let _ = std::process::Command::new("ssh")
            .args([
                "-o",
                &format!("ControlPath={}", socket.display()),
                "-O",
                "exit",
                "x",
            ])
            .stderr(Stdio::null())
            .status();
    }
    let _ = key;
}

#[test]
fn cli_commands_share_one_connection_unless_switched_off() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "work");
    let key = h.ssh_client_key();

    // Reuse on (the default): one login for every command.
    let before = sessions(&h);
    for i in 0..5 {
        collab(
            &h,
            &key,
            &clone,
            &["issue", "open", "-t", &format!("t{i}")],
            &[],
        );
    }
    let listed = collab(&h, &key, &clone, &["issue", "list", "--json"], &[]);
    let rows: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 5, "{rows}");
    assert_eq!(sessions(&h) - before, 1, "six commands, one connection");
    assert_eq!(our_sockets(&h).len(), 1, "{:?}", our_sockets(&h));

    // Switched off by the environment or git config: a login each.
    let before = sessions(&h);
    for _ in 0..3 {
        collab(
            &h,
            &key,
            &clone,
            &["issue", "list"],
            &[("GIT_COLLAB_SSH_REUSE", "0")],
        );
    }
    assert_eq!(sessions(&h) - before, 3);
    h.git(&clone, &["config", "collab.sshReuse", "false"]);
    let before = sessions(&h);
    for _ in 0..2 {
        collab(&h, &key, &clone, &["issue", "list"], &[]);
    }
    assert_eq!(sessions(&h) - before, 2);
    h.git(&clone, &["config", "--unset", "collab.sshReuse"]);

    // Another key in the same home gets its own connection, as itself.
    let other = h.authorized_key("other");
    let before = sessions(&h);
    let opened = collab(
        &h,
        &other,
        &clone,
        &["issue", "open", "-t", "mine", "--json"],
        &[],
    );
    let id = serde_json::from_str::<Value>(&opened.stdout).unwrap()["issue"]
        .as_str()
        .unwrap()
        .to_string();
    collab(&h, &other, &clone, &["issue", "list"], &[]);
    assert_eq!(sessions(&h) - before, 1);
    let shown = h.ssh_exec(&format!("collab-issue show 'r' '{id}'"));
    assert_eq!(
        shown.json()["author"]["principal"],
        fingerprint(&other).as_str(),
        "{shown:?}"
    );
    assert_eq!(our_sockets(&h).len(), 2);
    stop_masters(&h, &key);
}

#[test]
fn a_users_own_control_master_is_left_alone() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "work");
    let key = h.ssh_client_key();
    let theirs = h.temp_dir().join("theirs");
    std::fs::create_dir_all(&theirs).unwrap();
    let config = h.temp_dir().join("ssh_config");
    std::fs::write(
        &config,
        format!(
            "Host *\n  ControlMaster auto\n  ControlPath {}/%C\n  ControlPersist 30\n",
            theirs.display()
        ),
    )
    .unwrap();
    let ssh = h
        .git_ssh_command(&key)
        .replacen("/dev/null", &config.display().to_string(), 1);
    assert!(ssh.contains("ssh_config"), "{ssh}");
    let before = sessions(&h);
    for _ in 0..3 {
        collab(
            &h,
            &key,
            &clone,
            &["issue", "list"],
            &[("GIT_COLLAB_SSH_COMMAND", &ssh)],
        );
    }
    // Their socket, their persistence: one connection, and none of ours.
    assert_eq!(sessions(&h) - before, 1);
    assert!(our_sockets(&h).is_empty(), "{:?}", our_sockets(&h));
    let sockets: Vec<_> = std::fs::read_dir(&theirs).unwrap().collect();
    assert_eq!(sockets.len(), 1);
    let socket = sockets[0].as_ref().unwrap().path();
    let _ = std::process::Command::new("ssh")
        .args([
            "-o",
            &format!("ControlPath={}", socket.display()),
            "-O",
            "exit",
            "x",
        ])
        .stderr(Stdio::null())
        .status();
}
