//! How the server runs `git` on a repository of its own for housekeeping
//! (maintenance, backup, restore checks): a clean environment (none of the
//! server's `GIT_*` variables), the repository given explicitly, and
//! `safe.directory` open because the paths are the server's own choice
//! (a backup copy may be owned by another user than the one checking it).

use std::path::Path;
use std::process::Command;

/// `git -C <repo_dir>` with a clean environment; add arguments and run.
/// git-args: a builder; its callers pass fixed housekeeping arguments
/// (maintenance steps, `fsck`), never a value from a user.
pub fn git(repo_dir: &Path) -> Command {
    let mut cmd = clean();
    cmd.args(["-c", "safe.directory=*", "-C"])
        .arg(repo_dir)
        .stdin(std::process::Stdio::null());
    cmd
}

/// `git` with none of the server's own `GIT_*` variables (they would
/// point git at the server's files, not the repository it is run on):
/// where the git commands the server runs on its own repositories begin
/// (a mirror's git, which talks to other hosts, clears more: `mirrors::git`).
/// git-args: a builder; its callers add the arguments.
pub fn clean() -> Command {
    let mut cmd = Command::new("git");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(&key);
        }
    }
    cmd
}

/// Run `cmd` and return its stdout; a failure carries git's stderr.
pub fn output(cmd: &mut Command) -> anyhow::Result<Vec<u8>> {
    let out = cmd
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run git: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        anyhow::bail!(
            "{:?} failed ({}): {first}",
            cmd.get_args().collect::<Vec<_>>(),
            out.status
        );
    }
    Ok(out.stdout)
}
