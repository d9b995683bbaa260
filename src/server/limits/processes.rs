//! The git process gate: how many git child processes (`upload-pack`,
//! `receive-pack`, the web's raw-file streams) run at once, server-wide
//! and per principal (an SSH principal, or `http <client>` for anonymous
//! HTTP).
//!
//! A principal over its own share is refused at once (it is its own load).
//! A principal within its share waits a bounded time for a server-wide
//! slot, so a short burst queues instead of failing; while it waits it
//! already counts against its share, so nobody can queue without bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why no process slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// The principal already runs its share.
    Principal { limit: usize },
    /// The server runs its maximum and none finished in time.
    Server { limit: usize },
}

impl Busy {
    /// The one line a client sees (without the `error: ` prefix).
    pub fn message(self) -> String {
        match self {
            Busy::Principal { limit } => format!(
                "too many git operations running for you ({limit} at once); wait for one to finish"
            ),
            Busy::Server { limit } => {
                format!("the server is busy ({limit} git operations running); try again shortly")
            }
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Busy::Principal { .. } => "per_principal",
            Busy::Server { .. } => "max_processes",
        }
    }
}

/// Shared gate; clone freely.
#[derive(Debug, Clone)]
pub struct ProcessGate {
    total: Arc<Semaphore>,
    total_limit: usize,
    per_principal: usize,
    running: Arc<Mutex<HashMap<String, usize>>>,
}

/// A running (or about to run) git process; dropping it frees the slot.
#[derive(Debug)]
pub struct ProcessPermit {
    _slot: OwnedSemaphorePermit,
    _share: Share,
}

/// One unit of a principal's share.
#[derive(Debug)]
struct Share {
    principal: String,
    running: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = running.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.principal);
            }
        }
    }
}

impl ProcessGate {
    pub fn new(total: usize, per_principal: usize) -> ProcessGate {
        ProcessGate {
            total: Arc::new(Semaphore::new(total)),
            total_limit: total,
            per_principal,
            running: Arc::default(),
        }
    }

    /// A slot for `principal`, waiting at most `wait` for a server-wide one.
    pub async fn acquire(&self, principal: &str, wait: Duration) -> Result<ProcessPermit, Busy> {
        let share = {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            let n = running.entry(principal.to_string()).or_insert(0);
            if *n >= self.per_principal {
                return Err(Busy::Principal {
                    limit: self.per_principal,
                });
            }
            *n += 1;
            Share {
                principal: principal.to_string(),
                running: self.running.clone(),
            }
        };
        let busy = Busy::Server {
            limit: self.total_limit,
        };
        match tokio::time::timeout(wait, self.total.clone().acquire_owned()).await {
            Ok(Ok(slot)) => Ok(ProcessPermit {
                _slot: slot,
                _share: share,
            }),
            // Timed out, or the semaphore was closed (never happens).
            _ => Err(busy),
        }
    }

    /// Processes running now, server-wide.
    pub fn running(&self) -> usize {
        self.total_limit - self.total.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn per_principal_refuses_at_once_and_total_waits() {
        let gate = ProcessGate::new(2, 1);
        let short = Duration::from_millis(20);
        let a = gate.acquire("alice", short).await.unwrap();
        assert_eq!(
            gate.acquire("alice", short).await.unwrap_err(),
            Busy::Principal { limit: 1 }
        );
        let _b = gate.acquire("bob", short).await.unwrap();
        assert_eq!(gate.running(), 2);
        assert_eq!(
            gate.acquire("carol", short).await.unwrap_err(),
            Busy::Server { limit: 2 }
        );
        // carol's failed wait gave her share back.
        let waiter = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.acquire("carol", Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(a);
        assert!(waiter.await.unwrap().is_ok());
        assert!(Busy::Server { limit: 2 }.message().contains("busy"));
    }
}
