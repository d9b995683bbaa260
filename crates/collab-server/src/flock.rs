//! `flock(2)` on a file held open: the advisory locks of each repository
//! (`maintenance::lock`, shared by maintenance runs and backups) and of
//! the state directory (`server_lock`, shared by servers and `db
//! migrate`). File locks rather than in-process mutexes because the other
//! holder may be another process; the kernel drops them when the holder
//! exits, however it exits.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd as _;

/// Whether to share the lock or hold it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Shared,
    Exclusive,
}

/// Lock `file` in `mode`, waiting for other holders when `wait`; without
/// waiting, `Ok(false)` when another holder is in the way.
pub fn lock(file: &File, mode: Mode, wait: bool) -> io::Result<bool> {
    let mut op = match mode {
        Mode::Shared => libc::LOCK_SH,
        Mode::Exclusive => libc::LOCK_EX,
    };
    if !wait {
        op |= libc::LOCK_NB;
    }
    loop {
        // SAFETY: flock on a descriptor the caller owns for the call's
        // duration.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if !wait => return Ok(false),
            _ => return Err(err),
        }
    }
}
