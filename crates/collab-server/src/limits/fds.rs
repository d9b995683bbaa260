//! The open-file budget. Every connection, git child (its three pipes and
//! a pidfd) and open repository costs descriptors; when the process runs
//! out, `accept` fails for every listener at once. So the soft
//! `RLIMIT_NOFILE` is raised to the hard limit at start, and the HTTP and
//! SSH connection caps are lowered (with a warning) until connections,
//! git processes, page renders and a fixed reserve all fit.

use crate::config::ServerConfig;

/// Descriptors kept for everything that is not a connection: the
/// listeners, the database and its WAL files, logs, host key and
/// authorized_keys reads, `git` spawns in flight.
pub const RESERVED: u64 = 64;
/// Per git child: stdin, stdout and stderr pipes plus a pidfd.
pub const PER_PROCESS: u64 = 4;
/// Per page render: the repository's pack and index files libgit2 keeps open.
pub const PER_PAGE: u64 = 8;
/// A connection cap is never fitted below this (the server would be
/// useless); the warning then says the limit is too low.
pub const FLOOR: usize = 8;

/// The connection caps in effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub open_files: u64,
    pub http: usize,
    pub ssh: usize,
    /// Set when a configured cap was lowered to fit.
    pub warning: Option<String>,
}

impl Budget {
    /// Fit `http.max_connections` and `ssh.max_connections` into
    /// `open_files`, halving what is left after processes, pages and the
    /// reserve between the two listeners.
    pub fn fit(config: &ServerConfig, open_files: u64) -> Budget {
        let fixed = RESERVED
            + PER_PROCESS * config.git.max_processes as u64
            + PER_PAGE * config.http.max_concurrent_pages as u64;
        let share = (open_files.saturating_sub(fixed) / 2).min(usize::MAX as u64) as usize;
        let http = config.http.max_connections.min(share).max(FLOOR);
        let ssh = config.ssh.max_connections.min(share).max(FLOOR);
        let lowered = http < config.http.max_connections || ssh < config.ssh.max_connections;
        let warning = lowered.then(|| {
            format!(
                "open file limit {open_files} is too low for http.max_connections={} and \
                 ssh.max_connections={} (with git.max_processes={}); using {http} and {ssh}. \
                 Raise the limit (LimitNOFILE=, ulimit -n) or lower the caps",
                config.http.max_connections, config.ssh.max_connections, config.git.max_processes
            )
        });
        Budget {
            open_files,
            http,
            ssh,
            warning,
        }
    }
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit; returns the soft
/// limit in effect afterwards.
pub fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            // An unlimited hard limit cannot be the soft one on Linux
            // (fs.nr_open caps it); stay within a sane number then.
            let target = if limit.rlim_max == libc::RLIM_INFINITY {
                1 << 20
            } else {
                limit.rlim_max
            };
            let raised = libc::rlimit {
                rlim_cur: target,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = target;
            }
        }
    }
    limit.rlim_cur
}

/// The soft `RLIMIT_NOFILE` now.
pub fn open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid pointer to a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    if limit.rlim_cur == libc::RLIM_INFINITY {
        return 1 << 20;
    }
    limit.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn caps_fit_in_the_descriptor_limit() {
        let config = ServerConfig::with_state_dir(PathBuf::from("/x"));
        let roomy = Budget::fit(&config, 1 << 20);
        assert_eq!(roomy.http, config.http.max_connections);
        assert_eq!(roomy.ssh, config.ssh.max_connections);
        assert!(roomy.warning.is_none());

        let tight = Budget::fit(&config, 1024);
        let fixed = RESERVED + PER_PROCESS * 32 + PER_PAGE * 8;
        assert_eq!(tight.http, ((1024 - fixed) / 2) as usize);
        assert!(
            tight.http as u64 + tight.ssh as u64 + fixed <= 1024,
            "{tight:?}"
        );
        assert!(tight.warning.as_deref().unwrap().contains("1024"));

        let tiny = Budget::fit(&config, 100);
        assert_eq!((tiny.http, tiny.ssh), (FLOOR, FLOOR));
    }

    #[test]
    fn raising_keeps_a_usable_limit() {
        assert!(raise_open_file_limit() >= 64);
    }
}
