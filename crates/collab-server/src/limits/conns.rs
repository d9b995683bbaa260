//! Counting open connections, in total and per client address, and
//! deciding whether one more may be admitted: a plain cap (HTTP, SSH
//! connections) or OpenSSH's `MaxStartups` random early drop (SSH
//! connections that have not authenticated yet).
//!
//! A permit is taken when a connection is accepted and released when it
//! is dropped, so the counts are exact whatever way a connection ends.
//! Addresses are grouped as an attacker controls them: one IPv4 address,
//! or one IPv6 /64 (a single host commonly holds a whole /64).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::config::MaxStartups;

/// The unit per-address caps count: an IPv4 address or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    V4([u8; 4]),
    V6Prefix([u8; 8]),
}

impl ClientKey {
    pub fn of(ip: IpAddr) -> ClientKey {
        match ip.to_canonical() {
            IpAddr::V4(v4) => ClientKey::V4(v4.octets()),
            IpAddr::V6(v6) => {
                let mut prefix = [0u8; 8];
                prefix.copy_from_slice(&v6.octets()[..8]);
                ClientKey::V6Prefix(prefix)
            }
        }
    }
}

/// Why a connection was not admitted (also the metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The server-wide cap is reached.
    Total,
    /// This client's address (or /64) has its share.
    PerClient,
    /// Between `start` and `full` of `MaxStartups`, the early-drop dice said no.
    EarlyDrop,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Total => "max_connections",
            Refusal::PerClient => "per_ip",
            Refusal::EarlyDrop => "early_drop",
        }
    }
}

/// How the server-wide count decides.
#[derive(Debug, Clone, Copy)]
enum Policy {
    /// Refuse at `max` open.
    Cap(usize),
    /// OpenSSH's MaxStartups.
    Startups(MaxStartups),
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_client: HashMap<ClientKey, usize>,
}

/// A counter of open connections with a server-wide policy and a
/// per-client cap. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct ConnLimiter {
    policy: Policy,
    per_client: usize,
    counts: Arc<Mutex<Counts>>,
    /// Told whenever a place is freed, for `admit_waiting`.
    freed: Arc<tokio::sync::Notify>,
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct ConnPermit {
    key: ClientKey,
    counts: Arc<Mutex<Counts>>,
    freed: Arc<tokio::sync::Notify>,
}

impl ConnLimiter {
    /// At most `total` open, at most `per_client` from one client.
    pub fn capped(total: usize, per_client: usize) -> ConnLimiter {
        ConnLimiter::new(Policy::Cap(total), per_client)
    }

    /// `MaxStartups` for the server-wide count, at most `per_client` from
    /// one client.
    pub fn startups(policy: MaxStartups, per_client: usize) -> ConnLimiter {
        ConnLimiter::new(Policy::Startups(policy), per_client)
    }

    fn new(policy: Policy, per_client: usize) -> ConnLimiter {
        ConnLimiter {
            policy,
            per_client,
            counts: Arc::default(),
            freed: Arc::default(),
        }
    }

    /// Whether a connection from `ip` would find its client's place free
    /// now (the server-wide policy aside).
    pub fn client_has_room(&self, ip: IpAddr) -> bool {
        let key = ClientKey::of(ip);
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.per_client.get(&key).copied().unwrap_or(0) < self.per_client
    }

    /// `try_admit` for a connection that waits its turn: while the
    /// client's own cap or the server-wide `full` refuses, it waits for a
    /// place to free, until `deadline`. It is never early-dropped: it has
    /// shown itself a client, and its address's queue is bounded already.
    pub async fn admit_waiting(
        &self,
        ip: IpAddr,
        deadline: tokio::time::Instant,
    ) -> Result<ConnPermit, Refusal> {
        loop {
            // Registered before the try, so a place freed in between
            // is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            // A roll of 100 is under no drop percentage.
            let refusal = match self.try_admit(ip, 100) {
                Ok(permit) => return Ok(permit),
                Err(refusal) => refusal,
            };
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(refusal);
            }
        }
    }

    /// Admit a connection from `ip`, or say why not. `roll` is a uniform
    /// random number in `0..100` (only the early drop uses it).
    pub fn try_admit(&self, ip: IpAddr, roll: u32) -> Result<ConnPermit, Refusal> {
        let key = ClientKey::of(ip);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        match self.policy {
            Policy::Cap(max) if counts.total >= max => return Err(Refusal::Total),
            Policy::Startups(s) if counts.total >= s.full => return Err(Refusal::Total),
            Policy::Startups(s)
                if counts.total >= s.start && roll < drop_percent(s, counts.total) =>
            {
                return Err(Refusal::EarlyDrop)
            }
            _ => {}
        }
        let mine = counts.per_client.get(&key).copied().unwrap_or(0);
        if mine >= self.per_client {
            return Err(Refusal::PerClient);
        }
        counts.total += 1;
        counts.per_client.insert(key, mine + 1);
        Ok(ConnPermit {
            key,
            counts: self.counts.clone(),
            freed: self.freed.clone(),
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

/// OpenSSH's formula: `rate`% at `start`, rising linearly to 100% at
/// `full` (sshd.c `should_drop_connection`).
fn drop_percent(s: MaxStartups, open: usize) -> u32 {
    if s.full <= s.start {
        return 100;
    }
    let span = (s.full - s.start) as u64;
    let past = (open.saturating_sub(s.start)) as u64;
    let rate = u64::from(s.rate);
    (rate + (100 - rate) * past / span).min(100) as u32
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_client.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                counts.per_client.remove(&self.key);
            }
        }
        drop(counts);
        self.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cap_and_per_client() {
        let l = ConnLimiter::capped(3, 2);
        let a1 = l.try_admit(ip("10.0.0.1"), 0).unwrap();
        let _a2 = l.try_admit(ip("10.0.0.1"), 0).unwrap();
        assert_eq!(
            l.try_admit(ip("10.0.0.1"), 0).unwrap_err(),
            Refusal::PerClient
        );
        let _b = l.try_admit(ip("10.0.0.2"), 0).unwrap();
        assert_eq!(l.try_admit(ip("10.0.0.3"), 0).unwrap_err(), Refusal::Total);
        drop(a1);
        assert_eq!(l.open(), 2);
        let _c = l.try_admit(ip("10.0.0.3"), 0).unwrap();
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_v4_as_v4() {
        let l = ConnLimiter::capped(10, 1);
        let _a = l.try_admit(ip("2001:db8:1:2::1"), 0).unwrap();
        assert_eq!(
            l.try_admit(ip("2001:db8:1:2:ffff::9"), 0).unwrap_err(),
            Refusal::PerClient
        );
        let _b = l.try_admit(ip("2001:db8:1:3::1"), 0).unwrap();
        let _c = l.try_admit(ip("192.0.2.7"), 0).unwrap();
        assert_eq!(
            l.try_admit(ip("::ffff:192.0.2.7"), 0).unwrap_err(),
            Refusal::PerClient
        );
    }

    #[tokio::test]
    async fn a_waiting_admission_gets_the_next_free_place() {
        let l = ConnLimiter::startups(
            MaxStartups {
                start: 100,
                rate: 30,
                full: 200,
            },
            2,
        );
        let a = l.try_admit(ip("10.0.0.1"), 0).unwrap();
        let _b = l.try_admit(ip("10.0.0.1"), 0).unwrap();
        assert!(!l.client_has_room(ip("10.0.0.1")));
        assert!(l.client_has_room(ip("10.0.0.2")));
        // Nothing frees a place: refused at the deadline.
        let soon = tokio::time::Instant::now() + std::time::Duration::from_millis(50);
        assert_eq!(
            l.admit_waiting(ip("10.0.0.1"), soon).await.unwrap_err(),
            Refusal::PerClient
        );
        // A place freed while waiting is taken.
        let waiting = {
            let l = l.clone();
            tokio::spawn(async move {
                let later = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
                l.admit_waiting(ip("10.0.0.1"), later).await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        drop(a);
        let permit = waiting.await.unwrap().unwrap();
        assert_eq!(l.open(), 2);
        drop(permit);
        assert_eq!(l.open(), 1);
    }

    #[test]
    fn startups_drop_early_then_refuse_at_full() {
        let policy = MaxStartups {
            start: 2,
            rate: 50,
            full: 4,
        };
        assert_eq!(drop_percent(policy, 2), 50);
        assert_eq!(drop_percent(policy, 3), 75);
        assert_eq!(drop_percent(policy, 4), 100);
        let l = ConnLimiter::startups(policy, 100);
        let mut held = Vec::new();
        // Below start nothing is dropped, whatever the dice say.
        held.push(l.try_admit(ip("10.0.0.1"), 0).unwrap());
        held.push(l.try_admit(ip("10.0.0.1"), 0).unwrap());
        // At 2 open: dropped when the roll is under 50.
        assert_eq!(
            l.try_admit(ip("10.0.0.1"), 49).unwrap_err(),
            Refusal::EarlyDrop
        );
        held.push(l.try_admit(ip("10.0.0.1"), 50).unwrap());
        // At 3 open: dropped under 75.
        held.push(l.try_admit(ip("10.0.0.1"), 99).unwrap());
        // Full: always refused.
        assert_eq!(l.try_admit(ip("10.0.0.1"), 99).unwrap_err(), Refusal::Total);
        held.clear();
        assert_eq!(l.open(), 0);
    }
}
