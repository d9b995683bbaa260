//! Running verbs (issue 44): how many exec commands one key, and the whole
//! server, run at once. Channels are cheap until a command runs on them,
//! and a key may open 640 (64 connections of 10 channels): without these
//! caps 120 `collab-patch diff`s of one read-only key held 2.35 GB.
//!
//! What a command holds decides the pools it counts in ([`Weight`], given
//! by `ssh::exec` from the parsed command):
//!
//! - a light verb (most: `collab-issue show`, `collab-lease acquire`, …)
//!   holds one unit of the verbs pool (`ssh.max_verbs_per_principal`
//!   per key, `ssh.max_verbs` server-wide);
//! - a heavy verb holds one unit of the verbs pool and one of the heavy
//!   pool (`ssh.max_heavy_verbs_per_principal`, `ssh.max_heavy_verbs`):
//!   `collab-patch diff` and `interdiff` build their whole reply in memory
//!   (up to `service::patch::MAX_DIFF_BYTES`, several times that while git
//!   computes it), `collab-release download` holds a file and a stream for
//!   as long as the client takes to read it. A separate, smaller cap rather
//!   than a byte weight: the cost is known only once the work is done;
//! - the long-lived sessions have pools of their own and never count as
//!   verbs, so a key's open sessions cannot use up the share its short
//!   commands need: `tui` (`ssh.max_tui_per_principal`,
//!   `ssh.max_tui_sessions`) and `collab-mcp` (`mcp.max_sessions_per_principal`,
//!   `mcp.max_sessions`) here; `collab-events watch` (`events.max_watchers*`,
//!   `ssh::watch`) and `collab-lease … --wait` (`leases.max_waiters*`,
//!   `service::lease`) keep theirs;
//! - git transport is counted by the git process gate (`processes`), only
//!   while a git process runs.
//!
//! A `collab-mcp` session's tool calls run through the same dispatcher. They
//! are bounded by the session's own `mcp.max_calls_in_flight`, so in the
//! verbs pool they count under the session, not the key (its sessions then
//! never take its CLI's share, nor its CLI the session's), and in the
//! server-wide cap; a heavy call counts in the key's heavy share like any
//! other heavy verb.
//!
//! A refusal is at once, never queued: nothing waits while holding a unit,
//! so no session can deadlock on its own calls. The client gets one line
//! and exit status 1; the refusal is counted in `/metrics`
//! (`git_collab_limit_refusals_total{what, limit}`, `limit` being
//! `per_principal` or the server-wide key's name) and logged at most once
//! a minute.

use super::shares::{Full, Share, Shares};
use crate::config::ServerConfig;

/// What a command holds while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// A short verb with a bounded reply.
    Light,
    /// A verb whose reply or stream is large: a diff, an interdiff, a
    /// release download.
    Heavy,
    /// The terminal UI, for as long as it is open.
    Tui,
    /// A `collab-mcp` session, for as long as it is open.
    Mcp,
    /// Counted by a gate of its own (git processes, event watchers, lease
    /// waiters).
    Own,
}

/// The pools of running commands. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Running {
    verbs: Shares,
    heavy: Shares,
    tui: Shares,
    mcp: Shares,
}

/// Who runs a command: the key (its share key), and the MCP session whose
/// tool call it is, if it is one.
#[derive(Debug, Clone, Copy)]
pub struct Runner<'a> {
    pub key: &'a str,
    pub mcp_session: Option<u64>,
}

/// The units a running command holds; dropping it gives them back.
#[derive(Debug)]
pub struct Admitted {
    _units: Vec<Share>,
}

/// Which pool refused a command, and at which cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub weight: Weight,
    pub pool: Pool,
    pub full: Full,
}

/// The pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    Verbs,
    Heavy,
    Tui,
    Mcp,
}

impl Pool {
    /// What the client is told is running, plural.
    fn things(self) -> &'static str {
        match self {
            Pool::Verbs => "commands",
            Pool::Heavy => "diffs and downloads",
            Pool::Tui => "terminal UI sessions",
            Pool::Mcp => "collab-mcp sessions",
        }
    }

    /// `what` in `/metrics`.
    fn what(self) -> &'static str {
        match self {
            Pool::Verbs => "verb",
            Pool::Heavy => "heavy_verb",
            Pool::Tui => "tui",
            Pool::Mcp => "mcp_session",
        }
    }

    /// `limit` in `/metrics` for the server-wide cap: its key's name.
    fn server_limit(self) -> &'static str {
        match self {
            Pool::Verbs => "max_verbs",
            Pool::Heavy => "max_heavy_verbs",
            Pool::Tui => "max_tui_sessions",
            Pool::Mcp => "max_sessions",
        }
    }
}

impl Refused {
    /// The one line the client sees.
    pub fn message(self) -> String {
        let things = self.pool.things();
        match self.full {
            Full::Principal(n) => format!(
                "error: too many {things} running with this key ({n}); wait for one to finish"
            ),
            Full::Server(n) => {
                format!("error: the server is busy ({n} {things} running); try again shortly")
            }
        }
    }
}

impl Running {
    pub fn new(config: &ServerConfig) -> Running {
        let ssh = &config.ssh;
        Running {
            verbs: Shares::with_total(ssh.max_verbs_per_principal, ssh.max_verbs),
            heavy: Shares::with_total(ssh.max_heavy_verbs_per_principal, ssh.max_heavy_verbs),
            tui: Shares::with_total(ssh.max_tui_per_principal, ssh.max_tui_sessions),
            mcp: Shares::with_total(
                config.mcp.max_sessions_per_principal,
                config.mcp.max_sessions,
            ),
        }
    }

    /// The units a command of `weight` run by `runner` holds, or the
    /// refusal (counted and logged).
    pub fn admit(&self, weight: Weight, runner: Runner<'_>) -> Result<Admitted, Refused> {
        let mut units = Vec::with_capacity(2);
        let mut take = |pool: Pool, shares: &Shares, principal: &str| match shares.take_within(
            pool.what(),
            pool.server_limit(),
            principal,
        ) {
            Ok(unit) => {
                units.push(unit);
                Ok(())
            }
            Err(full) => Err(Refused { weight, pool, full }),
        };
        // An MCP tool call counts in the verbs pool under its session.
        let session;
        let verbs_principal = match runner.mcp_session {
            Some(id) => {
                session = format!("mcp session {id} of {}", runner.key);
                session.as_str()
            }
            None => runner.key,
        };
        match weight {
            Weight::Own => {}
            Weight::Light => take(Pool::Verbs, &self.verbs, verbs_principal)?,
            Weight::Heavy => {
                take(Pool::Verbs, &self.verbs, verbs_principal)?;
                take(Pool::Heavy, &self.heavy, runner.key)?;
            }
            Weight::Tui => take(Pool::Tui, &self.tui, runner.key)?,
            Weight::Mcp => take(Pool::Mcp, &self.mcp, runner.key)?,
        }
        Ok(Admitted { _units: units })
    }

    /// Units held now, server-wide, in `pool` (for tests and `/metrics`).
    pub fn held(&self, pool: Pool) -> usize {
        match pool {
            Pool::Verbs => &self.verbs,
            Pool::Heavy => &self.heavy,
            Pool::Tui => &self.tui,
            Pool::Mcp => &self.mcp,
        }
        .held_in_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(verbs: (usize, usize), heavy: (usize, usize)) -> Running {
        Running {
            verbs: Shares::with_total(verbs.0, verbs.1),
            heavy: Shares::with_total(heavy.0, heavy.1),
            tui: Shares::with_total(1, 2),
            mcp: Shares::with_total(1, 2),
        }
    }

    fn key(key: &str) -> Runner<'_> {
        Runner {
            key,
            mcp_session: None,
        }
    }

    #[test]
    fn heavy_verbs_hold_a_verb_and_a_heavy_unit_and_refuse_past_either() {
        let running = pools((3, 100), (2, 100));
        let d1 = running.admit(Weight::Heavy, key("a")).unwrap();
        let _d2 = running.admit(Weight::Heavy, key("a")).unwrap();
        let refused = running.admit(Weight::Heavy, key("a")).unwrap_err();
        assert_eq!(
            (refused.pool, refused.full),
            (Pool::Heavy, Full::Principal(2))
        );
        assert_eq!(
            refused.message(),
            "error: too many diffs and downloads running with this key (2); wait for one to finish"
        );
        // The refused one gave its verb unit back: one light verb fits.
        assert_eq!(running.held(Pool::Verbs), 2);
        let _l = running.admit(Weight::Light, key("a")).unwrap();
        let refused = running.admit(Weight::Light, key("a")).unwrap_err();
        assert_eq!(
            (refused.pool, refused.full),
            (Pool::Verbs, Full::Principal(3))
        );
        // Another key is not affected.
        let _b = running.admit(Weight::Heavy, key("b")).unwrap();
        drop(d1);
        assert!(running.admit(Weight::Heavy, key("a")).is_ok());
    }

    #[test]
    fn the_server_wide_cap_refuses_every_key() {
        let running = pools((10, 2), (10, 10));
        let _a = running.admit(Weight::Light, key("a")).unwrap();
        let _b = running.admit(Weight::Light, key("b")).unwrap();
        let refused = running.admit(Weight::Light, key("c")).unwrap_err();
        assert_eq!(refused.full, Full::Server(2));
        assert_eq!(
            refused.message(),
            "error: the server is busy (2 commands running); try again shortly"
        );
    }

    #[test]
    fn sessions_have_their_own_pools_and_mcp_calls_count_per_session() {
        let running = pools((2, 100), (1, 100));
        let _t = running.admit(Weight::Tui, key("a")).unwrap();
        let _m = running.admit(Weight::Mcp, key("a")).unwrap();
        assert_eq!(
            running.admit(Weight::Tui, key("a")).unwrap_err().message(),
            "error: too many terminal UI sessions running with this key (1); wait for one to finish"
        );
        assert_eq!(
            running.admit(Weight::Mcp, key("a")).unwrap_err().pool,
            Pool::Mcp
        );
        // Sessions take no verb unit; watchers and git count elsewhere.
        assert_eq!(running.held(Pool::Verbs), 0);
        let _own = running.admit(Weight::Own, key("a")).unwrap();
        // The key's share of verbs is full ...
        let v1 = running.admit(Weight::Light, key("a")).unwrap();
        let _v2 = running.admit(Weight::Light, key("a")).unwrap();
        assert!(running.admit(Weight::Light, key("a")).is_err());
        // ... and its MCP session's calls still run, bounded per session.
        let call = Runner {
            key: "a",
            mcp_session: Some(7),
        };
        let _c1 = running.admit(Weight::Light, call).unwrap();
        let _c2 = running.admit(Weight::Light, call).unwrap();
        assert!(running.admit(Weight::Light, call).is_err());
        // A heavy call counts in the key's heavy share (the key's own
        // heavy command is then refused by it, with a verb place free).
        drop(v1);
        let other_session = Runner {
            key: "a",
            mcp_session: Some(8),
        };
        let _h = running.admit(Weight::Heavy, other_session).unwrap();
        assert_eq!(
            running.admit(Weight::Heavy, key("a")).unwrap_err().pool,
            Pool::Heavy
        );
    }
}
