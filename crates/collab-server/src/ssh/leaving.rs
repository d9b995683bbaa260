//! A verb ends with its caller (issue 44). Every running command watches
//! a [`Left`] whose trigger its caller's side holds, in [`Callers`] by
//! channel: the trigger is dropped (and the `Left` fires) when the client
//! closes the channel (`channel_close`: russh reports only closes the
//! client starts) or when the connection is gone (the map goes with the
//! `Connection`, or with the MCP session's loopback handler).
//! `exec::run_exec` then drops a verb that only reads
//! (`service::STOPPED_AT_ONCE`: a diff, a download, a fetch, the MCP session),
//! which frees its buffers, files and slots at once: without this a verb
//! writing a large reply to a closed channel waits forever for window
//! space that cannot come. Any other verb runs its bounded work to the
//! end, and its reply gives up instead of waiting
//! (`reply::unless_caller_left`).
//!
//! Dropping a reading verb is safe: what a read imports into the collab
//! database goes through the writer task, committed whole or not at all;
//! git children are killed on drop (`kill_on_drop`, `GitChild`); work
//! already handed to `spawn_blocking` (a diff, a file lookup) runs to its
//! end, bounded by the verb's own limits, and is then dropped with nobody
//! waiting.

use std::collections::HashMap;

use russh::ChannelId;

use crate::shutdown::{stop_pair, Stop, StopTrigger};

/// Fires when the caller of one command has left (closed its channel, or
/// its connection is gone).
pub type Left = Stop;

/// The running commands of one connection, by channel.
#[derive(Default)]
pub struct Callers {
    running: HashMap<ChannelId, StopTrigger>,
}

impl Callers {
    /// A command starts on channel `id`: what tells it its caller left.
    pub fn arrive(&mut self, id: ChannelId) -> Left {
        // Commands that ended without their channel being closed by the
        // client (a client that never answers our close) are forgotten
        // here, so the map stays as small as what runs.
        self.running.retain(|_, trigger| trigger.is_watched());
        let (trigger, left) = stop_pair();
        self.running.insert(id, trigger);
        left
    }

    /// The client closed channel `id`: its command, if any, is stopped.
    pub fn leave(&mut self, id: ChannelId) {
        if let Some(trigger) = self.running.remove(&id) {
            trigger.trigger();
        }
    }
}

// Dropping `Callers` (the connection is gone) drops every trigger, which
// fires every `Left`: `Stop::wait` resolves when its trigger is dropped.
