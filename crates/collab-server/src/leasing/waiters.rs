//! Callers waiting for a lease (`collab-lease acquire … --wait SECS`) or
//! for work (`collab-lease next … --wait SECS`), served first come, first
//! served.
//!
//! Each waiter holds a ticket, numbered in arrival order. One dispatcher
//! task makes passes: on a new ticket and whenever the writer reports that
//! work may have become available (`Writer::changes`: a release,
//! break, expiry, lock delay ending, or any other write such as an issue
//! closing), it queues one attempt per ticket, in ticket order, on the
//! single writer. The writer decides in queue order, so among waiters the
//! oldest ticket wins; the winner's ticket leaves the queue and its caller
//! is answered with the durable result. A caller that arrives without
//! `--wait` while an issue is free may still take it first, as it could
//! without waiters.
//!
//! A waiter whose time runs out, whose connection drops or whose server is
//! stopping takes its ticket back. If an attempt for it succeeded in the
//! meantime, a timed-out waiter keeps the lease (it is answered with it);
//! a gone one gets it released again, so no lease is left to a caller that
//! never heard of it.
//!
//! Waiters live in this process only: a restart drops them and their
//! clients get an error telling them to try again. Their number is bounded
//! (`leases.max_waiters`; each key's share, `leases.max_waiters_per_principal`,
//! is taken by the SSH verb before it queues).

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};

use crate::shutdown::Stop;
use collab_store::leases::{Acquire, Claim, Lease};
use collab_store::queue::{Next, NextRequest, ReadyIssue};
use collab_store::writer::Writer;

/// What a waiter waits for.
#[derive(Debug, Clone)]
pub enum Want {
    /// One issue (`acquire --wait`).
    Acquire(Claim),
    /// Whatever becomes ready first (`next --wait`).
    Next(NextRequest),
}

/// What a waiter got.
#[derive(Debug, Clone, PartialEq)]
pub enum Won {
    Acquired(Lease),
    Next {
        lease: Lease,
        issue: Box<ReadyIssue>,
    },
}

impl Won {
    fn lease(&self) -> &Lease {
        match self {
            Won::Acquired(lease) | Won::Next { lease, .. } => lease,
        }
    }
}

/// How a wait ended.
#[derive(Debug, PartialEq)]
pub enum Waited {
    Won(Won),
    /// The time ran out first.
    TimedOut,
    /// The caller went away.
    Gone,
    /// The server is stopping.
    Stopped,
    /// Too many callers are waiting already.
    Full,
}

/// The queue of waiters and its dispatcher.
pub struct Waiters {
    service: Writer,
    /// Most callers waiting at once, server-wide.
    max: usize,
    state: Mutex<State>,
    kick: Notify,
}

#[derive(Default)]
struct State {
    next_ticket: u64,
    tickets: BTreeMap<u64, Ticket>,
}

struct Ticket {
    want: Want,
    reply: oneshot::Sender<Won>,
}

impl Waiters {
    pub fn new(service: Writer, max: usize) -> Arc<Waiters> {
        Arc::new(Waiters {
            service,
            max,
            state: Mutex::new(State::default()),
            kick: Notify::new(),
        })
    }

    /// Callers waiting right now.
    pub fn len(&self) -> usize {
        self.state.lock().unwrap().tickets.len()
    }

    /// Whether no caller is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Start the dispatcher; it ends when `stop` fires or the store goes.
    pub fn spawn(self: &Arc<Self>, stop: Stop) -> tokio::task::JoinHandle<()> {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let mut changes = me.service.changes();
            let stopped = stop.wait();
            tokio::pin!(stopped);
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    _ = me.kick.notified() => {}
                    changed = changes.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
                me.pass().await;
            }
        })
    }

    /// Wait up to `limit` for `want`, while `gone` has not resolved (the
    /// caller's connection) and `stop` has not fired.
    pub async fn wait(
        &self,
        want: Want,
        limit: Duration,
        gone: impl Future<Output = ()>,
        stop: Stop,
    ) -> Waited {
        let (reply, won) = oneshot::channel();
        let (repo, issue, holder) = match &want {
            Want::Acquire(c) => (c.repo.clone(), c.issue_id.clone(), c.holder.clone()),
            Want::Next(r) => (r.repo.clone(), "(next)".to_string(), r.holder.clone()),
        };
        let ticket = {
            let mut state = self.state.lock().unwrap();
            if state.tickets.len() >= self.max {
                return Waited::Full;
            }
            let id = state.next_ticket;
            state.next_ticket += 1;
            state.tickets.insert(id, Ticket { want, reply });
            id
        };
        tracing::info!(repo, issue, holder, ticket, "lease wait queued");
        // However the wait ends (even cancelled), the guard takes the
        // ticket back and gives back a win nobody will hear of.
        let mut guard = TicketGuard {
            waiters: self,
            ticket,
            won: Some(won),
        };
        self.kick.notify_one();
        let ended = tokio::select! {
            got = guard.won.as_mut().expect("the receiver is kept until the wait ends") => {
                guard.won = None;
                return match got {
                    Ok(w) => Waited::Won(w),
                    Err(_) => Waited::Stopped,
                };
            }
            _ = tokio::time::sleep(limit) => Waited::TimedOut,
            _ = gone => Waited::Gone,
            _ = stop.wait() => Waited::Stopped,
        };
        match (guard.take_back(), ended) {
            // Won just as the time ran out: the lease is the caller's.
            (Some(w), Waited::TimedOut) => Waited::Won(w),
            (Some(w), ended) => {
                self.undo(w);
                ended
            }
            (None, ended) => ended,
        }
    }

    /// One pass: an attempt per ticket, queued in ticket order.
    async fn pass(&self) {
        let batch: Vec<(u64, Want)> = {
            let state = self.state.lock().unwrap();
            state
                .tickets
                .iter()
                .map(|(id, t)| (*id, t.want.clone()))
                .collect()
        };
        let mut attempts = Vec::with_capacity(batch.len());
        for (ticket, want) in batch {
            let queued = match want {
                Want::Acquire(claim) => self
                    .service
                    .queue_acquire(claim)
                    .await
                    .map(|f| Attempt::Acquire(Box::pin(f))),
                Want::Next(req) => self
                    .service
                    .queue_next(req)
                    .await
                    .map(|f| Attempt::Next(Box::pin(f))),
            };
            match queued {
                Ok(attempt) => attempts.push((ticket, attempt)),
                Err(e) => {
                    tracing::warn!("waiters: cannot queue an attempt: {e:#}");
                    break;
                }
            }
        }
        let mut delivered = HashSet::new();
        let mut orphans = Vec::new();
        for (ticket, attempt) in attempts {
            let outcome = match attempt {
                Attempt::Acquire(f) => f.await.map(|a| match a {
                    Acquire::Acquired { lease, .. } => Some(Won::Acquired(lease)),
                    Acquire::Held { .. } | Acquire::Locked { .. } => None,
                }),
                Attempt::Next(f) => f.await.map(|n| match n {
                    Next::Acquired { lease, issue } => Some(Won::Next { lease, issue }),
                    Next::Empty => None,
                }),
            };
            let won = match outcome {
                Ok(Some(won)) => won,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!("waiters: attempt failed: {e:#}");
                    continue;
                }
            };
            let key = tenure_key(won.lease());
            match self.deliver(ticket, won) {
                None => {
                    delivered.insert(key);
                }
                Some(won) => orphans.push((key, won)),
            }
        }
        // A win whose waiter left is given back, unless another waiter of
        // the same holder was handed the same tenure in this pass.
        for (key, won) in orphans {
            if !delivered.contains(&key) {
                self.undo(won);
            }
        }
    }

    /// Hand `won` to the ticket's waiter, under the lock so that a waiter
    /// taking its ticket back finds either the ticket or the win. Returns
    /// the win when nobody took it.
    fn deliver(&self, ticket: u64, won: Won) -> Option<Won> {
        let mut state = self.state.lock().unwrap();
        match state.tickets.remove(&ticket) {
            Some(t) => t.reply.send(won).err(),
            None => Some(won),
        }
    }

    /// Give back a lease nobody will hear of.
    fn undo(&self, won: Won) {
        let lease = won.lease().clone();
        let service = self.service.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            tracing::info!(
                repo = lease.repo,
                issue = lease.issue_id,
                holder = lease.holder,
                "releasing a lease won by a waiter that left"
            );
            if let Err(e) = service
                .release(&lease.repo, &lease.issue_id, &lease.holder)
                .await
            {
                tracing::warn!("waiters: giving back a lease: {e:#}");
            }
        });
    }
}

type Pending<T> = std::pin::Pin<Box<dyn Future<Output = anyhow::Result<T>> + Send>>;

/// One queued attempt of a pass.
enum Attempt {
    Acquire(Pending<Acquire>),
    Next(Pending<Next>),
}

fn tenure_key(lease: &Lease) -> (String, String, String, i64) {
    (
        lease.repo.clone(),
        lease.issue_id.clone(),
        lease.holder.clone(),
        lease.token,
    )
}

/// Removes a waiter's ticket when the wait ends or is cancelled.
struct TicketGuard<'a> {
    waiters: &'a Waiters,
    ticket: u64,
    won: Option<oneshot::Receiver<Won>>,
}

impl TicketGuard<'_> {
    /// Remove the ticket; a win already delivered for it is returned.
    fn take_back(&mut self) -> Option<Won> {
        let removed = {
            let mut state = self.waiters.state.lock().unwrap();
            state.tickets.remove(&self.ticket).is_some()
        };
        if removed {
            return None;
        }
        self.won.take()?.try_recv().ok()
    }
}

impl Drop for TicketGuard<'_> {
    fn drop(&mut self) {
        if let Some(won) = self.take_back() {
            self.waiters.undo(won);
        }
    }
}
