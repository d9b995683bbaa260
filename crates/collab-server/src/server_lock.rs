//! The state directory's server lock: an advisory `flock(2)` on
//! `<state_dir>/server.lock`. A serving server holds it shared for its
//! whole life; the offline commands that must not run beside one
//! (`db migrate`: every write after its copy would be lost at the switch)
//! take it exclusively, without waiting, and refuse while a server holds
//! it. A server that starts while such a command runs refuses too. The
//! kernel drops the lock when its holder exits, however it exits (SIGKILL
//! included), so a stale lock cannot outlive a crash.

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};

use crate::flock::{self, Mode};

/// The lock file's name in the state directory.
pub const LOCK_FILE: &str = "server.lock";

/// A held lock; released when dropped.
#[derive(Debug)]
pub struct ServerLock {
    _file: File,
}

/// Who holds the lock in the way that refused us.
#[derive(Debug, thiserror::Error)]
pub enum Held {
    #[error(
        "a server is running on {state_dir} (pid {pid}, holding {lock}); stop it first: \
         writes made after this command read the database would be lost"
    )]
    ByServer {
        state_dir: String,
        pid: String,
        lock: String,
    },
    #[error("another command holds {lock} (pid {pid}); wait for it to finish")]
    ByCommand { lock: String, pid: String },
    #[error("{lock}: {source}")]
    Io {
        lock: String,
        #[source]
        source: io::Error,
    },
}

fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(LOCK_FILE)
}

/// The pid the last holder wrote, for messages.
fn holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.rewind();
    let _ = file.read_to_string(&mut text);
    let pid = text.trim();
    if pid.is_empty() {
        "unknown".into()
    } else {
        pid.chars().take(16).collect()
    }
}

impl ServerLock {
    /// For a serving server: shared (several processes of one deployment
    /// may serve one state directory's repositories), refused while an
    /// offline command holds it.
    pub fn serve(state_dir: &Path) -> Result<ServerLock, Held> {
        Self::take(state_dir, Mode::Shared, |pid, lock| Held::ByCommand {
            lock,
            pid,
        })
    }

    /// For an offline command: exclusive, refused while a server runs.
    pub fn offline(state_dir: &Path) -> Result<ServerLock, Held> {
        Self::take(state_dir, Mode::Exclusive, |pid, lock| Held::ByServer {
            state_dir: state_dir.display().to_string(),
            pid,
            lock,
        })
    }

    /// Take the lock in `mode` without waiting and record this process as
    /// its holder; `refused` (the holder's pid, the lock's path) says who
    /// is in the way.
    fn take(
        state_dir: &Path,
        mode: Mode,
        refused: impl FnOnce(String, String) -> Held,
    ) -> Result<ServerLock, Held> {
        let lock = path(state_dir).display().to_string();
        let io = |source| Held::Io {
            lock: lock.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path(state_dir))
            .map_err(io)?;
        if !flock::lock(&file, mode, false).map_err(io)? {
            return Err(refused(holder(&mut file), lock));
        }
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = write!(file, "{}", std::process::id());
        Ok(ServerLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_shuts_out_offline_commands_and_the_reverse() {
        let dir = tempfile::tempdir().unwrap();
        let server = ServerLock::serve(dir.path()).unwrap();
        // A second node on the same directory may serve beside it.
        let second = ServerLock::serve(dir.path()).unwrap();
        let refused = ServerLock::offline(dir.path()).unwrap_err();
        assert!(matches!(refused, Held::ByServer { .. }), "{refused}");
        assert!(refused
            .to_string()
            .contains(&std::process::id().to_string()));
        drop((server, second));
        let offline = ServerLock::offline(dir.path()).unwrap();
        let refused = ServerLock::serve(dir.path()).unwrap_err();
        assert!(matches!(refused, Held::ByCommand { .. }), "{refused}");
        drop(offline);
        ServerLock::serve(dir.path()).unwrap();
    }
}
