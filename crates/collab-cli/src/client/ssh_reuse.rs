//! Connection reuse for the server commands: OpenSSH multiplexing
//! (`ControlMaster=auto`, `ControlPersist`), so a loop of `git-collab`
//! issue, lease and patch commands pays one TCP connection, key exchange
//! and login, not one each. The first command starts a master connection
//! that stays for [`PERSIST`] after the last use; the next ones open a
//! channel on it.
//!
//! It is added only when it cannot surprise anyone: the ssh program is
//! OpenSSH's (the `ssh` variant, and `ssh -G` answers), the user's own
//! configuration sets no `ControlMaster` or `ControlPath` of its own (then
//! theirs applies, untouched), and it is not switched off
//! (`GIT_COLLAB_SSH_REUSE=0`, or git config `collab.sshReuse false`).
//!
//! The socket lives in a directory only its user may enter
//! (`$XDG_RUNTIME_DIR/git-collab/`, else `~/.ssh/git-collab/`), named by
//! a hash of the ssh command, the destination and the port: two commands
//! with different keys (`ssh -i a`, `ssh -i b`) never share a connection,
//! and so never each other's identity. While that socket is live, the
//! `ssh -G` check is not run again.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use sha2::{Digest as _, Sha256};

use super::remote::{ssh_process, SshRemote, SshVariant};

/// How long a master connection stays after its last command.
pub const PERSIST: &str = "60s";

/// The environment switch (`0`, `false`, `no`, `off` turn reuse off).
pub const ENV: &str = "GIT_COLLAB_SSH_REUSE";

/// Whether reuse is switched on: `GIT_COLLAB_SSH_REUSE`, else git config
/// `collab.sshReuse`, else on.
pub fn enabled(config: &git2::Config) -> bool {
    if let Ok(value) = std::env::var(ENV) {
        return !matches!(
            value.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        );
    }
    config.get_bool("collab.sshReuse").unwrap_or(true)
}

/// The options that make `remote`'s ssh reuse one connection, or none.
pub fn options(remote: &SshRemote, config: &git2::Config) -> Vec<String> {
    if remote.variant != SshVariant::Ssh || !enabled(config) {
        return Vec::new();
    }
    let Some(dir) = socket_dir() else {
        return Vec::new();
    };
    let path = dir.join(socket_name(remote));
    // A live socket of ours means the question below was answered when
    // its master started: skip a process per command.
    let live = std::fs::symlink_metadata(&path).is_ok_and(|m| {
        use std::os::unix::fs::FileTypeExt as _;
        m.file_type().is_socket()
    });
    if !live && !user_leaves_it_to_us(remote) {
        return Vec::new();
    }
    vec![
        "-o".into(),
        "ControlMaster=auto".into(),
        "-o".into(),
        // `%` would be read as one of ssh's tokens.
        format!(
            "ControlPath={}",
            path.display().to_string().replace('%', "%%")
        ),
        "-o".into(),
        format!("ControlPersist={PERSIST}"),
    ]
}

/// The socket's name: a hash of everything that picks the connection and
/// its identity (the ssh command with its key options, the destination,
/// the port), so different keys or servers never share one.
fn socket_name(remote: &SshRemote) -> String {
    let mut hash = Sha256::new();
    for part in [
        remote.ssh_command.as_str(),
        &remote.destination(),
        &remote.port.map(|p| p.to_string()).unwrap_or_default(),
    ] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    hex::encode(&hash.finalize()[..8])
}

/// Whether the user's ssh, as configured for this destination, sets
/// neither `ControlMaster` nor `ControlPath` (`ssh -G` prints the
/// configuration it would use). A command that does not answer `-G` is
/// not OpenSSH, or not plainly: no reuse then.
fn user_leaves_it_to_us(remote: &SshRemote) -> bool {
    let mut args = vec!["-G".to_string()];
    if let Some(port) = remote.port {
        args.push("-p".into());
        args.push(port.to_string());
    }
    args.push(remote.destination());
    let out = ssh_process(&remote.ssh_command)
        .args(&args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let Ok(out) = out else { return false };
    if !out.status.success() {
        return false;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(' ')))
            .map(str::trim)
            .map(str::to_string)
    };
    let master = value("controlmaster");
    let path = value("controlpath");
    // `ssh -G` always prints `controlmaster` (no line: not OpenSSH), and
    // `controlpath` only when it is set.
    master.as_deref() == Some("false") && path.as_deref().is_none_or(|p| p == "none")
}

/// `$XDG_RUNTIME_DIR/git-collab`, else `~/.ssh/git-collab`, created with
/// mode 0700 (and refused when it is not ours alone).
fn socket_dir() -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    let base = match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(runtime) => PathBuf::from(runtime),
        None => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".ssh"),
    };
    let dir = base.join("git-collab");
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir);
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    let private = meta.is_dir() && meta.uid() == me && meta.permissions().mode() & 0o077 == 0;
    // Unix socket paths are short (108 bytes); OpenSSH adds a suffix
    // while it binds.
    (private && dir.as_os_str().len() < 80).then_some(dir)
}

/// True when ssh failed at its control socket before it ran anything on
/// the server (a master that refused a new session, e.g. past the
/// server's `ssh.max_sessions`, or a socket it could not use): the
/// command may then run again without reuse.
pub fn failed_before_exec(code: i32, stderr: &str) -> bool {
    code == 255
        && (stderr.contains("mux_client")
            || stderr.contains("ControlSocket")
            || stderr.contains("control socket")
            || stderr.contains("Control socket"))
}

/// `stderr` without OpenSSH's notice that two first commands raced to
/// start the master (the loser runs on a connection of its own, and the
/// command is not affected).
pub fn without_mux_notices(stderr: Vec<u8>) -> Vec<u8> {
    let notice = |line: &[u8]| {
        let line = String::from_utf8_lossy(line);
        line.starts_with("ControlSocket ") && line.contains("disabling multiplexing")
    };
    if !stderr.split(|&b| b == b'\n').any(notice) {
        return stderr;
    }
    let mut kept = Vec::with_capacity(stderr.len());
    for line in stderr.split_inclusive(|&b| b == b'\n') {
        if !notice(line) {
            kept.extend_from_slice(line);
        }
    }
    kept
}

/// `ssh -O exit` for `remote`'s master, if reuse made one (tests, and
/// `git-collab` callers that want to hang up now).
pub fn stop_master(remote: &SshRemote) -> bool {
    if remote.reuse.is_empty() {
        return false;
    }
    let mut args: Vec<String> = remote.reuse.clone();
    args.extend(["-O".into(), "exit".into()]);
    if let Some(port) = remote.port {
        args.push("-p".into());
        args.push(port.to_string());
    }
    args.push(remote.destination());
    let mut cmd: Command = ssh_process(&remote.ssh_command);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mux_failures_are_told_from_other_failures() {
        assert!(failed_before_exec(
            255,
            "mux_client_request_session: session request failed: Session open refused by peer\n"
        ));
        assert!(failed_before_exec(
            255,
            "ControlSocket /x/y already exists, disabling multiplexing\n"
        ));
        assert!(!failed_before_exec(
            255,
            "Connection to h closed by remote host.\n"
        ));
        assert!(!failed_before_exec(1, "error: mux_client in a reply\n"));
    }

    #[test]
    fn sockets_are_per_command_destination_and_port() {
        let mut a = super::super::remote_ssh::parse_ssh_remote("ssh://git@h:2222/r.git").unwrap();
        a.ssh_command = "ssh -i /k/a".into();
        let mut b = a.clone();
        b.ssh_command = "ssh -i /k/b".into();
        let mut c = a.clone();
        c.port = Some(2223);
        let names = [socket_name(&a), socket_name(&b), socket_name(&c)];
        assert_ne!(names[0], names[1]);
        assert_ne!(names[0], names[2]);
        assert_eq!(socket_name(&a.clone()), names[0]);
        assert_eq!(names[0].len(), 16);
    }

    #[test]
    fn the_master_race_notice_is_dropped() {
        let stderr = b"ControlSocket /h/.ssh/git-collab/x already exists, disabling multiplexing\r\nerror: not found\n".to_vec();
        assert_eq!(without_mux_notices(stderr), b"error: not found\n");
        assert_eq!(without_mux_notices(b"error: x\n".to_vec()), b"error: x\n");
    }
}
