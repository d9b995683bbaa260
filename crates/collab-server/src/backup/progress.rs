//! Progress of a long backup or restore, on one line of stderr, only when
//! stderr is a terminal (scripts and logs get nothing but the final report).

use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

/// How often the line is redrawn at most.
const EVERY: Duration = Duration::from_millis(100);

pub struct Progress {
    enabled: bool,
    last: Option<Instant>,
    drawn: bool,
}

impl Progress {
    /// Progress that draws only if stderr is a terminal.
    pub fn for_terminal() -> Progress {
        Progress {
            enabled: std::io::stderr().is_terminal(),
            last: None,
            drawn: false,
        }
    }

    /// Progress that never draws (tests, `--json`).
    pub fn hidden() -> Progress {
        Progress {
            enabled: false,
            last: None,
            drawn: false,
        }
    }

    /// Show `what`: `done` of `total` (throttled).
    pub fn step(&mut self, what: &str, done: usize, total: usize) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if done < total && self.last.is_some_and(|t| now - t < EVERY) {
            return;
        }
        self.last = Some(now);
        self.drawn = true;
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{what}: {done}/{total}");
        let _ = err.flush();
    }

    /// Clear the line before the final report.
    pub fn finish(&mut self) {
        if self.enabled && self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
