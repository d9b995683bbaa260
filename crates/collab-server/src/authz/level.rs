//! The access levels `authz` decides between, ordered Read < Write < Rewind.
//! They live apart from the decision, which reads the server's shared state
//! (`App`), so that what only names a level (governance grants, the hooks'
//! environment) does not depend on that state.

use serde::{Deserialize, Serialize};

/// An access level. `Ord`: a higher level includes every lower one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
    Rewind,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Rewind => "rewind",
        }
    }
}
