//! The state one MCP session's calls share ([`Session`]), the calls
//! running ([`Calls`]) and a running call ([`Running`]); the session loop
//! (`mod`) and the tools (`tools`) both work on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{mpsc, Notify};
use tokio::task::AbortHandle;

use crate::service::Context;

/// The session state the calls share: no transport in it, so the same
/// calls serve MCP over an SSH channel (`mod`) and, later, over HTTP.
pub(crate) struct Session {
    /// The caller that opened the session (re-checked at every call).
    pub(super) ctx: Context,
    /// This session's number: its calls are counted under it
    /// (`service::Context::mcp_session`).
    pub(super) number: u64,
    pub(super) out: mpsc::Sender<String>,
    /// Calls running, by request id (its JSON text), for cancellation.
    pub(super) calls: Mutex<Calls>,
    /// The running `events_subscribe` stream, if any.
    pub(super) subscription: Mutex<Option<Running>>,
}

/// A task that runs one call. Told to stop, it drops a verb that only
/// reads, or tells any other that its caller left (a lease waiter gives
/// its ticket up) and lets it end (`tools::run_verb`); abort is only the
/// fallback.
pub(crate) struct Running {
    pub stop: Arc<Notify>,
    pub task: AbortHandle,
}

impl Running {
    pub fn cancel(&self) {
        self.stop.notify_one();
    }
}

/// The calls of a session, by request id (its JSON text). An entry is
/// the call's slot under `mcp.max_calls_in_flight`: it stays until the
/// call's task has ended (a cancelled call's verb has stopped, see
/// `tools::run_verb`), and only that task takes it out: each entry has
/// its own generation, so a task ending late never takes out a newer call
/// that reuses its id.
#[derive(Default)]
pub(crate) struct Calls {
    running: HashMap<String, (u64, Running)>,
    generations: u64,
}

/// Why a call was not admitted.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A call with this id is still running (or stopping).
    IdRunning,
    /// The session has `mcp.max_calls_in_flight` calls running.
    Full,
}

impl Calls {
    /// Whether a call `key` may start now, with at most `max` running: the
    /// generation it is to be registered with.
    pub fn admit(&mut self, key: &str, max: usize) -> Result<u64, Refusal> {
        if self.running.contains_key(key) {
            return Err(Refusal::IdRunning);
        }
        if self.running.len() >= max {
            return Err(Refusal::Full);
        }
        self.generations += 1;
        Ok(self.generations)
    }

    /// Register the call admitted as `generation`.
    pub fn insert(&mut self, key: String, generation: u64, call: Running) {
        self.running.insert(key, (generation, call));
    }

    /// The call `key` of `generation` has ended: its slot is free.
    pub fn finish(&mut self, key: &str, generation: u64) {
        if self.running.get(key).is_some_and(|(g, _)| *g == generation) {
            self.running.remove(key);
        }
    }

    /// Tell call `key` to stop; it keeps its slot until it has. False when
    /// no such call runs.
    pub fn cancel(&self, key: &str) -> bool {
        self.running
            .get(key)
            .map(|(_, call)| call.cancel())
            .is_some()
    }

    pub fn cancel_all(&self) {
        for (_, call) in self.running.values() {
            call.cancel();
        }
    }

    pub fn abort_all(&self) {
        for (_, call) in self.running.values() {
            call.task.abort();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }
}

impl Session {
    /// Queue one message; false when the client is gone.
    pub(super) async fn send(&self, message: Value) -> bool {
        self.out.send(message.to_string()).await.is_ok()
    }

    pub(super) fn busy(&self) -> bool {
        let calls = !self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        let subscribed = self
            .subscription
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|s| !s.task.is_finished());
        calls || subscribed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> Running {
        let task = tokio::spawn(std::future::pending::<()>());
        Running {
            stop: Arc::new(Notify::new()),
            task: task.abort_handle(),
        }
    }

    #[tokio::test]
    async fn a_cancelled_call_keeps_its_slot_and_its_id() {
        let mut calls = Calls::default();
        let first = calls.admit("1", 1).unwrap();
        calls.insert("1".into(), first, running());
        assert!(calls.cancel("1"));
        assert_eq!(calls.admit("1", 2), Err(Refusal::IdRunning));
        assert_eq!(calls.admit("2", 1), Err(Refusal::Full));
        calls.finish("1", first);
        assert!(calls.is_empty());
        assert!(!calls.cancel("1"));
        calls.abort_all();
    }

    #[tokio::test]
    async fn a_late_end_takes_out_only_its_own_call() {
        let mut calls = Calls::default();
        let old = calls.admit("7", 4).unwrap();
        calls.insert("7".into(), old, running());
        calls.finish("7", old);
        let new = calls.admit("7", 4).unwrap();
        calls.insert("7".into(), new, running());
        // The old call's task ends again (twice, late): the new call stays.
        calls.finish("7", old);
        assert_eq!(calls.admit("7", 4), Err(Refusal::IdRunning));
        calls.finish("7", new);
        assert!(calls.is_empty());
    }
}
