//! Resource limits: what a stranger (or a runaway client) can make the
//! server hold at once. This module owns the counters and gates; the
//! listeners and handlers ask them before they spend anything:
//!
//! - `conns`: open connections in total and per client address, for HTTP
//!   (a plain cap) and SSH (a cap on all connections, plus OpenSSH's
//!   `MaxStartups` random early drop on the unauthenticated ones, and the
//!   queue of connections waiting for their address's handshake place);
//! - `processes`: git child processes server-wide and per principal;
//! - `priority`: the CPU niceness of the git processes serving clones and
//!   fetches (`git.nice`), so a storm yields to short requests;
//! - `shares`: fair shares per principal (key) of authenticated SSH
//!   connections, event watchers and lease waiters, so one key cannot take
//!   a whole pool;
//! - `running`: exec commands running at once, per key and server-wide,
//!   heavy ones (diffs, release downloads) in a smaller pool of their own,
//!   terminal UI and `collab-mcp` sessions in theirs;
//! - `idle`: idle authenticated SSH connections closed after
//!   `ssh.idle_timeout`, sooner when the server is near its cap;
//! - the page semaphore: expensive anonymous web pages rendered at once;
//! - `fds`: the open-file budget. The soft `RLIMIT_NOFILE` is raised to the
//!   hard limit at start, and the connection caps are lowered to fit in it,
//!   so an HTTP flood can never run the process out of descriptors and take
//!   SSH down with it.
//!
//! The values come from `ServerConfig` (`ssh.*`, `http.*`, `git.*`); the
//! table of every limit and its default is in docs/security.md.

pub mod conns;
pub mod fds;
pub mod idle;
pub mod priority;
pub mod processes;
pub mod running;
pub mod shares;

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::config::ServerConfig;
pub use conns::{ConnLimiter, ConnPermit};
pub use processes::{Busy, ProcessGate, ProcessPermit};
pub use running::{Running, Weight};
pub use shares::{Share, Shares};

/// Every limiter, shared through `App`.
#[derive(Debug)]
pub struct Limits {
    /// HTTP connections (after the descriptor budget).
    pub http_conns: ConnLimiter,
    /// SSH connections, authenticated or not (after the descriptor budget).
    pub ssh_conns: ConnLimiter,
    /// SSH connections that have not authenticated yet.
    pub ssh_startups: ConnLimiter,
    /// SSH connections queued for one of their address's handshake places
    /// (`ssh_startups`' per-address cap), per address.
    pub ssh_queued: ConnLimiter,
    /// git child processes.
    pub git: ProcessGate,
    /// Expensive anonymous pages rendered at once.
    pub pages: Arc<Semaphore>,
    /// Authenticated SSH connections per key.
    pub ssh_per_principal: Shares,
    /// When idle authenticated SSH connections are closed.
    pub ssh_idle: idle::IdlePolicy,
    /// `collab-events watch` streams per key.
    pub watchers_per_principal: Shares,
    /// `collab-lease … --wait` callers per key.
    pub waiters_per_principal: Shares,
    /// Exec commands running, terminal UI and `collab-mcp` sessions, per
    /// key and server-wide.
    pub running: Running,
    /// The effective connection caps, for the log and docs.
    pub budget: fds::Budget,
}

impl Limits {
    /// Limiters for `config`, with connection caps fitted into
    /// `open_files` descriptors.
    pub fn new(config: &ServerConfig, open_files: u64) -> Limits {
        let budget = fds::Budget::fit(config, open_files);
        Limits {
            http_conns: ConnLimiter::capped(budget.http, config.http.max_connections_per_ip),
            ssh_conns: ConnLimiter::capped(budget.ssh, usize::MAX),
            ssh_startups: ConnLimiter::startups(
                config.ssh.max_startups,
                config.ssh.max_startups_per_ip,
            ),
            // At most half of the (fitted) cap, so one address queueing
            // can never keep the others out.
            ssh_queued: ConnLimiter::capped(
                usize::MAX,
                config.ssh.max_queued_per_ip.min((budget.ssh / 2).max(1)),
            ),
            git: ProcessGate::new(
                config.git.max_processes,
                config.git.max_processes_per_principal,
                config.git.queue_timeout,
            ),
            pages: Arc::new(Semaphore::new(config.http.max_concurrent_pages)),
            // At most a quarter of the (fitted) cap, so one key alone can
            // never bring the server to the pressure threshold, let alone
            // fill it, whatever the configured share.
            ssh_per_principal: Shares::new(
                config
                    .ssh
                    .max_connections_per_principal
                    .min((budget.ssh / 4).max(1)),
            ),
            ssh_idle: idle::IdlePolicy::new(
                config.ssh.idle_timeout,
                config.ssh.pressure_idle_timeout,
                config.ssh.pressure_percent,
                budget.ssh,
            ),
            watchers_per_principal: Shares::new(
                config
                    .events
                    .max_watchers_per_principal
                    .min(usize::MAX as u64) as usize,
            ),
            waiters_per_principal: Shares::new(config.leases.max_waiters_per_principal),
            running: Running::new(config),
            budget,
        }
    }
}

/// Count a refusal and log it, at most once a minute per `what` (a flood
/// must not flood the log too).
pub fn note_refusal(what: &'static str, limit: &'static str, detail: impl FnOnce() -> String) {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    static LAST: Mutex<Option<HashMap<&'static str, Instant>>> = Mutex::new(None);
    crate::metrics::refused(what, limit);
    let now = Instant::now();
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let last = last.get_or_insert_with(HashMap::new);
    let due = last
        .get(what)
        .is_none_or(|at| now.duration_since(*at) >= Duration::from_secs(60));
    if due {
        last.insert(what, now);
        tracing::warn!(
            "{what}: {limit} reached: {} (logged at most once a minute)",
            detail()
        );
    } else {
        tracing::debug!("{what}: {limit} reached: {}", detail());
    }
}

/// The principal anonymous HTTP requests count against in the git process
/// gate: the client's address (IPv6: its /64).
pub fn http_principal(peer: std::net::SocketAddr) -> String {
    match conns::ClientKey::of(peer.ip()) {
        conns::ClientKey::V4(o) => format!("http {}.{}.{}.{}", o[0], o[1], o[2], o[3]),
        conns::ClientKey::V6Prefix(p) => format!("http {}::/64", hex::encode(p)),
    }
}

/// A uniform roll in `0..100` for `MaxStartups`' early drop.
pub fn roll() -> u32 {
    rand::random_range(0..100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_principals_group_ipv6_by_64() {
        let a = "[2001:db8:1:2::1]:9".parse().unwrap();
        let b = "[2001:db8:1:2::ff]:9".parse().unwrap();
        assert_eq!(http_principal(a), http_principal(b));
        assert_eq!(
            http_principal("192.0.2.1:80".parse().unwrap()),
            "http 192.0.2.1"
        );
    }
}
