//! The CPU priority of the git processes that serve clones and fetches.
//!
//! A clone storm is CPU work the server can defer a little (`upload-pack`,
//! and the `pack-objects` and pack-cache hook it runs, which inherit the
//! niceness), while a login, a lease call or an issue comment is someone
//! waiting on a short answer. `git.nice` (default 10) is added to the
//! server's own niceness for those processes only, so under a storm the
//! kernel's scheduler gives the server's threads the CPU first, and git
//! still gets all of it when nothing else wants it. The server's own
//! relaying and encryption of the pack stay at its priority.
//!
//! Not lowered: `receive-pack` (its hooks hold the repository's lock and
//! take leases; a lowered pusher would hold others up) and maintenance
//! (it runs under the repository's lock too), nor the web's short reads.

/// Run `cmd`'s process `nice` steps below the server (0 leaves it as is).
pub fn lower(cmd: &mut tokio::process::Command, nice: u64) {
    let Ok(steps) = libc::c_int::try_from(nice) else {
        return;
    };
    if steps == 0 {
        return;
    }
    // SAFETY: between fork and exec only `nice(2)`, a system call that is
    // async-signal-safe; an error (none is possible for a positive step
    // but the ceiling, which it clamps to) is ignored, the process runs.
    unsafe {
        cmd.pre_exec(move || {
            libc::nice(steps);
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The niceness of a process, from its `/proc/<pid>/stat` (field 19).
    fn niceness(stat: &str) -> i64 {
        let after_comm = stat.rsplit_once(')').unwrap().1;
        after_comm
            .split_whitespace()
            .nth(16)
            .unwrap()
            .parse()
            .unwrap()
    }

    async fn child_niceness(nice: u64) -> i64 {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args(["-c", "cat /proc/$$/stat"]);
        lower(&mut cmd, nice);
        let out = cmd.output().await.unwrap();
        assert!(out.status.success());
        niceness(&String::from_utf8(out.stdout).unwrap())
    }

    #[tokio::test]
    async fn a_lowered_child_runs_that_many_steps_below_the_server() {
        let own = niceness(&std::fs::read_to_string("/proc/self/stat").unwrap());
        assert_eq!(child_niceness(0).await, own);
        assert_eq!(child_niceness(7).await, (own + 7).min(19));
        // The ceiling clamps (and is not an error).
        assert_eq!(child_niceness(19).await, 19);
    }
}
