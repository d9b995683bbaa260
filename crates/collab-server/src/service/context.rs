//! Who calls a verb and from where (`Context`): the shared state, the
//! caller, and the call's environment that changes how it is counted (the
//! MCP session whose tool call it is). No door's handle is in it: a verb
//! run through the service cannot reach a russh channel, an HTTP request
//! or a terminal.

use std::sync::Arc;

use crate::app::App;
use crate::authz::Caller;

/// Everything a verb needs of its caller.
#[derive(Clone)]
pub struct Context {
    pub app: Arc<App>,
    pub caller: Caller,
    /// Set by the MCP door, never by a client: this call is one tool call
    /// of that `collab-mcp` session, which bounds its own calls
    /// (`limits::running` counts them per session, not per key).
    pub mcp_session: Option<u64>,
    /// Fires when the caller has left (an SSH client closed its channel,
    /// an MCP call was cancelled): a verb that waits (`collab-lease
    /// --wait`) stops waiting and answers nobody. `None`: the caller stays
    /// as long as the call's future is polled (dropping it is the other
    /// way to cancel).
    pub left: Option<crate::shutdown::Stop>,
}

impl Context {
    pub fn new(app: Arc<App>, caller: Caller) -> Context {
        Context {
            app,
            caller,
            mcp_session: None,
            left: None,
        }
    }
}

impl Context {
    /// Resolves once the caller has left ([`Context::left`]); never when
    /// nothing says so.
    pub fn caller_left(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let left = self.left.clone();
        async move {
            match left {
                Some(left) => left.wait().await,
                None => std::future::pending().await,
            }
        }
    }
}

/// Resolve `repo` with at least `needed` for a verb, or the answer that
/// refuses it. A caller who cannot read the repository gets the one
/// not-found reply (existence stays secret); a reader who lacks the level
/// learns only that: `error: permission denied: {what_needs} {level}
/// access` (`what_needs` like "releases need").
pub fn authorize_repo(
    ctx: &Context,
    repo: &str,
    needed: crate::authz::Access,
    what_needs: &str,
) -> Result<crate::repos::RepoEntry, (String, u32)> {
    use crate::authz::{authorize, Access};
    match authorize(&ctx.app, &ctx.caller, repo, needed) {
        Ok((entry, _)) => Ok(entry),
        Err(_)
            if needed > Access::Read
                && authorize(&ctx.app, &ctx.caller, repo, Access::Read).is_ok() =>
        {
            Err((
                format!(
                    "error: permission denied: {what_needs} {} access",
                    needed.as_str()
                ),
                1,
            ))
        }
        Err(_) => Err((super::reply::NOT_FOUND.to_string(), 1)),
    }
}
