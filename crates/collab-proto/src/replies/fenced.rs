//! The reply of a write refused by fencing (exit status
//! [`crate::exit::FENCED`]): the caller's lease token is not the live
//! tenure of the issue, so nothing was written. `collab-issue`,
//! `collab-patch merge` and `collab-check set` answer with it.

use serde::{Deserialize, Serialize};

/// `{"status":"fenced",…}`: who holds the issue now, with which token
/// (`null` when nobody does), and for merges and checks why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fenced {
    /// Always `fenced`.
    pub status: String,
    pub repo: String,
    /// The issue whose tenure fenced the write (`null`: no issue applies).
    #[serde(default)]
    pub issue: Option<String>,
    #[serde(default)]
    pub holder: Option<String>,
    #[serde(default)]
    pub token: Option<i64>,
    /// Why, in words: who holds the issue now, or why nobody does (an
    /// issue write on a closed issue says it is closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The holder's display name, which the server adds to every reply
    /// that names a holder (`holder` stays the full principal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_name: Option<String>,
}

impl Fenced {
    pub fn new(
        repo: &str,
        issue: Option<String>,
        holder: Option<String>,
        token: Option<i64>,
        message: Option<String>,
    ) -> Fenced {
        Fenced {
            status: "fenced".into(),
            repo: repo.into(),
            issue,
            holder,
            token,
            message,
            holder_name: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_shapes_round_trip() {
        for line in [
            r#"{"holder":"SHA256:abc","issue":"4f2a","repo":"r","status":"fenced","token":3}"#,
            r#"{"holder":"SHA256:abc","holder_name":"Alice","issue":"4f2a","repo":"r","status":"fenced","token":3}"#,
            r#"{"holder":null,"issue":null,"message":"no lease","repo":"r","status":"fenced","token":null}"#,
        ] {
            let fenced: Fenced = serde_json::from_str(line).unwrap();
            assert_eq!(fenced.status, "fenced");
            assert_eq!(
                serde_json::to_value(&fenced).unwrap(),
                serde_json::from_str::<serde_json::Value>(line).unwrap()
            );
        }
    }
}
