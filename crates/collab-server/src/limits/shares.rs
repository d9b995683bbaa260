//! Fair shares: how much of one scarce resource (authenticated SSH
//! connections, event watchers, lease waiters) a single principal may hold
//! at once, so one key — even a read-only one — can never take the whole
//! server-wide pool and deny everyone else.
//!
//! The principal here is the key's `SHA256:` fingerprint, the thing
//! admission is decided on: a fleet of agents each with its own key gets a
//! share per agent, and a governed name with many keys cannot be starved
//! by one of them. Shares are counted, not reserved: a principal holding
//! little costs nothing, and an entry is forgotten when its count is zero.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Counts = Arc<Mutex<HashMap<String, usize>>>;

/// Per-principal counters for one resource, each capped at `limit`.
/// Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct Shares {
    limit: usize,
    counts: Counts,
}

/// One unit of a principal's share; dropping it gives the unit back.
#[derive(Debug)]
pub struct Share {
    principal: String,
    counts: Counts,
}

impl Shares {
    pub fn new(limit: usize) -> Shares {
        Shares {
            limit,
            counts: Arc::default(),
        }
    }

    /// One more unit for `principal`, or `None` when it holds its share.
    pub fn try_take(&self, principal: &str) -> Option<Share> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let held = counts.get(principal).copied().unwrap_or(0);
        if held >= self.limit {
            return None;
        }
        counts.insert(principal.to_string(), held + 1);
        Some(Share {
            principal: principal.to_string(),
            counts: self.counts.clone(),
        })
    }

    /// [`try_take`](Self::try_take), with a refusal counted and logged
    /// ([`note_refusal`] as `what`, `detail` given the limit); `Err` is the
    /// limit, for the caller's message.
    pub fn take(
        &self,
        what: &'static str,
        principal: &str,
        detail: impl FnOnce(usize) -> String,
    ) -> Result<Share, usize> {
        self.try_take(principal).ok_or_else(|| {
            note_refusal(what, principal, || detail(self.limit));
            self.limit
        })
    }

    /// Units `principal` holds now.
    pub fn held(&self, principal: &str) -> usize {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(principal).copied().unwrap_or(0)
    }

    /// Principals holding at least one unit now.
    pub fn principals(&self) -> usize {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.principal);
            }
        }
    }
}

/// Count a share refusal in `/metrics` (`what`, `per_principal`: the
/// principal is never a label, its cardinality is the attacker's) and log
/// it at most once a minute per principal and resource.
fn note_refusal(what: &'static str, principal: &str, detail: impl FnOnce() -> String) {
    crate::metrics::refused(what, "per_principal");
    let due = LOG
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .due(what, principal, Instant::now());
    if due {
        tracing::warn!(
            principal,
            "{what}: share per principal reached: {} (logged at most once a minute per principal)",
            detail()
        );
    } else {
        tracing::debug!(
            principal,
            "{what}: share per principal reached: {}",
            detail()
        );
    }
}

/// When each (resource, principal) was last logged. Bounded: past
/// [`RefusalLog::MAX`] entries the stale ones are dropped, and if a
/// key-cycling flood still fills it, it starts over (a few extra lines,
/// never unbounded memory).
static LOG: std::sync::LazyLock<Mutex<RefusalLog>> = std::sync::LazyLock::new(Mutex::default);

#[derive(Debug, Default)]
struct RefusalLog {
    last: HashMap<(&'static str, String), Instant>,
}

impl RefusalLog {
    const MAX: usize = 4096;
    const EVERY: Duration = Duration::from_secs(60);

    fn due(&mut self, what: &'static str, principal: &str, now: Instant) -> bool {
        let key = (what, principal.to_string());
        if self
            .last
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < Self::EVERY)
        {
            return false;
        }
        if self.last.len() >= Self::MAX {
            self.last
                .retain(|_, at| now.duration_since(*at) < Self::EVERY);
            if self.last.len() >= Self::MAX {
                self.last.clear();
            }
        }
        self.last.insert(key, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_holds_at_most_its_share_and_others_are_unaffected() {
        let shares = Shares::new(2);
        let a1 = shares.try_take("SHA256:a").unwrap();
        let _a2 = shares.try_take("SHA256:a").unwrap();
        assert!(shares.try_take("SHA256:a").is_none());
        let _b = shares.try_take("SHA256:b").unwrap();
        assert_eq!((shares.held("SHA256:a"), shares.principals()), (2, 2));
        drop(a1);
        assert!(shares.try_take("SHA256:a").is_some());
        drop(_b);
        assert_eq!(shares.held("SHA256:b"), 0);
        assert_eq!(shares.principals(), 1);
    }

    #[test]
    fn refusals_are_logged_once_a_minute_per_principal_and_resource() {
        let mut log = RefusalLog::default();
        let t0 = Instant::now();
        assert!(log.due("ssh", "a", t0));
        assert!(!log.due("ssh", "a", t0 + Duration::from_secs(59)));
        assert!(log.due("ssh", "b", t0));
        assert!(log.due("watch", "a", t0));
        assert!(log.due("ssh", "a", t0 + Duration::from_secs(60)));
        // A flood of distinct principals stays bounded.
        for i in 0..3 * RefusalLog::MAX {
            log.due("ssh", &format!("k{i}"), t0 + Duration::from_secs(61));
        }
        assert!(log.last.len() <= RefusalLog::MAX);
    }
}
