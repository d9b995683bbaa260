//! The state one MCP session's calls share ([`Session`]) and a running
//! call ([`Running`]); the session loop (`mod`) and the tools (`tools`)
//! both work on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{mpsc, Notify};
use tokio::task::AbortHandle;

use super::loopback;
use crate::ssh::context::ExecContext;

/// The session state the calls share.
pub(crate) struct Session {
    pub(super) ctx: ExecContext,
    pub(super) verbs: loopback::Verbs,
    pub(super) out: mpsc::Sender<String>,
    /// Calls running, by request id (its JSON text), for cancellation.
    pub(super) calls: Mutex<HashMap<String, Running>>,
    /// The running `events_subscribe` stream, if any.
    pub(super) subscription: Mutex<Option<Running>>,
}

/// A task that runs a verb on a loopback channel. Told to stop, it closes
/// its channel, which the verb sees as its client leaving (a lease waiter
/// gives its ticket up); abort is only the fallback, as a dropped channel
/// is not a closed one.
pub(crate) struct Running {
    pub stop: Arc<Notify>,
    pub task: AbortHandle,
}

impl Running {
    pub fn cancel(&self) {
        self.stop.notify_one();
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
