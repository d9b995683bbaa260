//! What a check of the `pre-receive` pipeline is ([`Check`]) and what it
//! answers when it refuses ([`Refusal`]). Every concern module writes
//! against these; `hooks` runs them.

use super::context::HookContext;
use super::updates::RefUpdate;

/// Why a check refused the push: one line per problem, each printed as
/// `error: <line>` (git shows them to the pusher prefixed with `remote:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub Vec<String>);

impl Refusal {
    pub fn one(line: impl Into<String>) -> Self {
        Refusal(vec![line.into()])
    }
}

/// One concern of the `pre-receive` pipeline.
pub type Check = fn(&HookContext, &[RefUpdate]) -> Result<(), Refusal>;
