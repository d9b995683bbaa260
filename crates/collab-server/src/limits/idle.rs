//! Reclaiming idle authenticated SSH connections.
//!
//! A connection is idle while it has no channel open: nothing runs on it,
//! it only holds a connection slot (an `ssh -N`, or a ControlMaster whose
//! last command ended). Keepalives do not make it busy, so a client
//! cannot keep an empty connection forever by pinging.
//!
//! An idle connection is closed after `ssh.idle_timeout`. When the server
//! is near its cap (`ssh.pressure_percent` of `ssh.max_connections` open)
//! the timeout drops to `ssh.pressure_idle_timeout`, and connections idle
//! that long are closed, those of the principal holding the most
//! connections first (then the longest idle), until the count is back
//! under the threshold. So the key that took the most gives back first,
//! a busy connection is never cut, and a quiet server keeps its clients'
//! long-lived connections (ControlPersist, an agent's session) as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Channels open on one connection, and since when the count last changed.
#[derive(Debug)]
pub struct Activity {
    channels: AtomicUsize,
    since: Mutex<Instant>,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            channels: AtomicUsize::new(0),
            since: Mutex::new(Instant::now()),
        }
    }
}

impl Activity {
    pub fn channels(&self) -> usize {
        self.channels.load(Ordering::Acquire)
    }

    pub fn opened(&self) {
        self.channels.fetch_add(1, Ordering::AcqRel);
        self.touch();
    }

    pub fn closed(&self) {
        self.channels.fetch_sub(1, Ordering::AcqRel);
        self.touch();
    }

    /// How long the connection has had no channel open (`None`: busy).
    pub fn idle_for(&self, now: Instant) -> Option<Duration> {
        if self.channels() > 0 {
            return None;
        }
        let since = *self.since.lock().unwrap_or_else(|e| e.into_inner());
        Some(now.saturating_duration_since(since))
    }

    fn touch(&self) {
        *self.since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

/// When idle connections are closed.
#[derive(Debug, Clone, Copy)]
pub struct IdlePolicy {
    pub idle_timeout: Duration,
    pub pressure_idle_timeout: Duration,
    /// Open connections at which the server is under pressure.
    pub pressure_at: usize,
}

impl IdlePolicy {
    /// `percent` of `cap` (at least one connection).
    pub fn new(
        idle_timeout: Duration,
        pressure_idle_timeout: Duration,
        percent: usize,
        cap: usize,
    ) -> IdlePolicy {
        IdlePolicy {
            idle_timeout,
            // Never longer than the normal timeout.
            pressure_idle_timeout: pressure_idle_timeout.min(idle_timeout),
            pressure_at: (cap * percent / 100).max(1),
        }
    }

    /// How often the reaper looks: often enough to honour the short
    /// timeout within a quarter of it, never busier than 4 times a second.
    pub fn tick(&self) -> Duration {
        (self.pressure_idle_timeout / 4).clamp(Duration::from_millis(250), Duration::from_secs(5))
    }
}

/// One idle authenticated connection, as the reaper sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleConn {
    pub id: u64,
    /// Connections its principal holds now.
    pub principal_holds: usize,
    pub idle_for: Duration,
}

/// Why a connection is closed: also the client's disconnect message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaim {
    Idle,
    Pressure,
}

impl Reclaim {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Reclaim::Idle => "idle_timeout",
            Reclaim::Pressure => "pressure",
        }
    }

    pub fn message(self, policy: &IdlePolicy) -> String {
        match self {
            Reclaim::Idle => format!(
                "idle connection closed: no command for {}s",
                policy.idle_timeout.as_secs()
            ),
            Reclaim::Pressure => format!(
                "idle connection closed: the server is near its connection limit \
                 (no command for {}s)",
                policy.pressure_idle_timeout.as_secs()
            ),
        }
    }
}

/// The connections to close now, given `open` connections (all of them,
/// authenticated or not) and the idle ones.
pub fn victims(policy: &IdlePolicy, open: usize, mut idle: Vec<IdleConn>) -> Vec<(u64, Reclaim)> {
    let mut out: Vec<(u64, Reclaim)> = Vec::new();
    idle.retain(|c| {
        if c.idle_for >= policy.idle_timeout {
            out.push((c.id, Reclaim::Idle));
            false
        } else {
            true
        }
    });
    let mut open = open.saturating_sub(out.len());
    if open < policy.pressure_at {
        return out;
    }
    idle.retain(|c| c.idle_for >= policy.pressure_idle_timeout);
    idle.sort_by(|a, b| {
        b.principal_holds
            .cmp(&a.principal_holds)
            .then(b.idle_for.cmp(&a.idle_for))
    });
    for c in idle {
        if open < policy.pressure_at {
            break;
        }
        out.push((c.id, Reclaim::Pressure));
        open -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(id: u64, principal_holds: usize, idle_secs: u64) -> IdleConn {
        IdleConn {
            id,
            principal_holds,
            idle_for: Duration::from_secs(idle_secs),
        }
    }

    fn policy() -> IdlePolicy {
        IdlePolicy::new(Duration::from_secs(3600), Duration::from_secs(60), 80, 10)
    }

    #[test]
    fn quiet_server_closes_only_past_the_long_timeout() {
        let p = policy();
        assert_eq!(p.pressure_at, 8);
        let idle = vec![conn(1, 5, 3600), conn(2, 5, 3599), conn(3, 1, 600)];
        assert_eq!(victims(&p, 7, idle), vec![(1, Reclaim::Idle)]);
    }

    #[test]
    fn under_pressure_the_biggest_holder_gives_back_first_down_to_the_threshold() {
        let p = policy();
        // 10 open, threshold 8: three must go to be under it. Candidates
        // idle >= 60 s only; the small user's connection is left.
        let idle = vec![
            conn(1, 1, 3000), // the lone connection of a small user
            conn(2, 6, 61),
            conn(3, 6, 120),
            conn(4, 6, 59), // not idle long enough
            conn(5, 6, 500),
        ];
        assert_eq!(
            victims(&p, 10, idle),
            vec![
                (5, Reclaim::Pressure),
                (3, Reclaim::Pressure),
                (2, Reclaim::Pressure)
            ]
        );
        // Busy connections are never listed; with too few idle ones the
        // reaper closes what it may and stops.
        assert_eq!(
            victims(&p, 10, vec![conn(1, 1, 61)]),
            vec![(1, Reclaim::Pressure)]
        );
        assert!(victims(&p, 10, vec![conn(1, 9, 30)]).is_empty());
    }

    #[test]
    fn the_pressure_timeout_never_exceeds_the_normal_one() {
        let p = IdlePolicy::new(Duration::from_secs(30), Duration::from_secs(60), 80, 512);
        assert_eq!(p.pressure_idle_timeout, Duration::from_secs(30));
        assert_eq!(p.pressure_at, 409);
        assert_eq!(
            p.tick(),
            Duration::from_millis(7500).min(Duration::from_secs(5))
        );
    }
}
