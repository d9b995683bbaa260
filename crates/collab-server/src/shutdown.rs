//! Clean shutdown: the signal that starts it (SIGTERM or SIGINT), a flag the
//! listeners and verbs watch, and a count of in-flight work so the server can
//! let running commands finish (for a bounded time) before it exits.

use std::time::Duration;

use tokio::sync::watch;

/// How long running commands may take to finish after a stop signal. With
/// the session close-out after it, shutdown stays below the 10 s a container
/// runtime waits before it kills.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(7);

/// Resolves on the first SIGTERM or SIGINT. The handlers are installed
/// when this is called, not when the future is first polled: call it
/// before announcing that the server listens, or a SIGTERM sent right
/// after the announcement kills the process instead of stopping it.
pub fn signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        let (mut term, mut int) = match (term, int) {
            (Ok(term), Ok(int)) => (term, int),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!("cannot listen for SIGTERM or SIGINT: {e}");
                std::future::pending::<()>().await;
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}

/// A one-way "stop now" flag: cheap to clone and to wait on.
#[derive(Debug, Clone)]
pub struct Stop {
    rx: watch::Receiver<bool>,
}

/// The trigger side of `Stop`.
#[derive(Debug)]
pub struct StopTrigger {
    tx: watch::Sender<bool>,
}

pub fn stop_pair() -> (StopTrigger, Stop) {
    let (tx, rx) = watch::channel(false);
    (StopTrigger { tx }, Stop { rx })
}

impl StopTrigger {
    pub fn trigger(&self) {
        let _ = self.tx.send(true);
    }

    /// Whether anyone still holds a `Stop` of this pair (false once the
    /// work that watched it has ended).
    pub fn is_watched(&self) -> bool {
        self.tx.receiver_count() > 0
    }
}

impl Stop {
    pub fn is_stopped(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once the trigger fires (or is dropped).
    pub async fn wait(mut self) {
        let _ = self.rx.wait_for(|stopped| *stopped).await;
    }
}

/// Counts in-flight units of work (one per running exec command).
#[derive(Debug)]
pub struct WorkTracker {
    count: watch::Sender<usize>,
}

/// Held while a unit of work runs; dropping it marks the work done.
#[derive(Debug)]
pub struct WorkGuard {
    count: watch::Sender<usize>,
}

impl Default for WorkTracker {
    fn default() -> Self {
        WorkTracker {
            count: watch::channel(0).0,
        }
    }
}

impl WorkTracker {
    pub fn track(&self) -> WorkGuard {
        self.count.send_modify(|n| {
            *n += 1;
            crate::metrics::set_commands_running(*n as u64);
        });
        WorkGuard {
            count: self.count.clone(),
        }
    }

    pub fn in_flight(&self) -> usize {
        *self.count.borrow()
    }

    /// Wait until no work is in flight, or `limit` passes. Returns whether
    /// everything finished.
    pub async fn wait_idle(&self, limit: Duration) -> bool {
        let mut rx = self.count.subscribe();
        let idle = tokio::time::timeout(limit, rx.wait_for(|n| *n == 0)).await;
        idle.is_ok()
    }
}

impl Drop for WorkGuard {
    fn drop(&mut self) {
        self.count.send_modify(|n| {
            *n = n.saturating_sub(1);
            crate::metrics::set_commands_running(*n as u64);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_guards() {
        let t = WorkTracker::default();
        assert!(t.wait_idle(Duration::from_millis(1)).await);
        let g = t.track();
        assert_eq!(t.in_flight(), 1);
        assert!(!t.wait_idle(Duration::from_millis(10)).await);
        drop(g);
        assert!(t.wait_idle(Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn stop_fires_once_triggered() {
        let (trigger, stop) = stop_pair();
        assert!(!stop.is_stopped());
        let waiter = tokio::spawn(stop.clone().wait());
        trigger.trigger();
        waiter.await.unwrap();
        assert!(stop.is_stopped());
    }
}
