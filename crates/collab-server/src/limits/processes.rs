//! The git process gate: how many git child processes (`upload-pack`,
//! `receive-pack`, the web's raw-file streams) run at once, server-wide
//! and per principal (an SSH principal, or `http <client>` for anonymous
//! HTTP).
//!
//! A request waits up to `git.queue_timeout` for a slot of its principal's
//! and then a server-wide one, so a burst (a CI farm behind one key)
//! queues instead of failing. A waiting request holds no process, only the
//! SSH channel or HTTP connection it came on, which are capped themselves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Why no process slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// The principal kept running its share for the whole wait.
    Principal { limit: usize },
    /// The server kept running its maximum for the whole wait.
    Server { limit: usize },
}

impl Busy {
    /// The one line a client sees (without the `error: ` prefix).
    pub fn message(self) -> String {
        match self {
            Busy::Principal { limit } => format!(
                "too many git operations running for you ({limit} at once); try again when one finishes"
            ),
            Busy::Server { limit } => format!(
                "the server is busy ({limit} git operations running); try again shortly"
            ),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Busy::Principal { .. } => "per_principal",
            Busy::Server { .. } => "max_processes",
        }
    }
}

/// One principal's slots, and how many requests hold or wait for one.
#[derive(Debug)]
struct Principal {
    slots: Arc<Semaphore>,
    users: usize,
}

type Principals = Arc<Mutex<HashMap<String, Principal>>>;

/// Shared gate; clone freely.
#[derive(Debug, Clone)]
pub struct ProcessGate {
    total: Arc<Semaphore>,
    total_limit: usize,
    per_principal: usize,
    wait: Duration,
    principals: Principals,
}

/// A running (or about to run) git process; dropping it frees its slots.
#[derive(Debug)]
pub struct ProcessPermit {
    _total: OwnedSemaphorePermit,
    _mine: OwnedSemaphorePermit,
    _user: User,
}

/// A request counted in its principal's `users` (forgotten at zero).
#[derive(Debug)]
struct User {
    principal: String,
    principals: Principals,
}

impl Drop for User {
    fn drop(&mut self) {
        let mut map = self.principals.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = map.get_mut(&self.principal) {
            entry.users -= 1;
            if entry.users == 0 {
                map.remove(&self.principal);
            }
        }
    }
}

impl ProcessGate {
    pub fn new(total: usize, per_principal: usize, wait: Duration) -> ProcessGate {
        ProcessGate {
            total: Arc::new(Semaphore::new(total)),
            total_limit: total,
            per_principal,
            wait,
            principals: Arc::default(),
        }
    }

    /// Slots for `principal`: its own, then a server-wide one, waiting at
    /// most the queue timeout for both together.
    pub async fn acquire(&self, principal: &str) -> Result<ProcessPermit, Busy> {
        let deadline = Instant::now() + self.wait;
        let (slots, user) = {
            let mut map = self.principals.lock().unwrap_or_else(|e| e.into_inner());
            let entry = map
                .entry(principal.to_string())
                .or_insert_with(|| Principal {
                    slots: Arc::new(Semaphore::new(self.per_principal)),
                    users: 0,
                });
            entry.users += 1;
            let user = User {
                principal: principal.to_string(),
                principals: self.principals.clone(),
            };
            (entry.slots.clone(), user)
        };
        let Ok(Ok(mine)) = tokio::time::timeout_at(deadline, slots.acquire_owned()).await else {
            return Err(Busy::Principal {
                limit: self.per_principal,
            });
        };
        let Ok(Ok(total)) =
            tokio::time::timeout_at(deadline, self.total.clone().acquire_owned()).await
        else {
            return Err(Busy::Server {
                limit: self.total_limit,
            });
        };
        Ok(ProcessPermit {
            _total: total,
            _mine: mine,
            _user: user,
        })
    }

    /// Processes running now, server-wide.
    pub fn running(&self) -> usize {
        self.total_limit - self.total.available_permits()
    }

    /// Principals holding or waiting for a slot now.
    pub fn principals(&self) -> usize {
        self.principals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn principals_and_the_server_queue_then_refuse() {
        let gate = ProcessGate::new(2, 1, Duration::from_secs(10));
        let a = gate.acquire("alice").await.unwrap();
        // alice's second waits the whole queue timeout, then is refused.
        assert_eq!(
            gate.acquire("alice").await.unwrap_err(),
            Busy::Principal { limit: 1 }
        );
        let _b = gate.acquire("bob").await.unwrap();
        assert_eq!(gate.running(), 2);
        assert_eq!(
            gate.acquire("carol").await.unwrap_err(),
            Busy::Server { limit: 2 }
        );
        // A waiter gets the slot as soon as one is freed.
        let waiter = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.acquire("carol").await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(a);
        assert!(waiter.await.unwrap().is_ok());
        // Nobody left holding or waiting: alice is forgotten.
        assert_eq!(gate.principals(), 1);
        assert!(Busy::Server { limit: 2 }.message().contains("busy"));
    }
}
