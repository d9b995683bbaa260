//! `collab-check` replies (docs/checks.md). Times are RFC 3339 in UTC, to
//! the second.

use serde::{Deserialize, Serialize};

/// One check on a commit, as `list` (and `collab-patch show`) report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckRow {
    pub name: String,
    /// `pending`, `success`, `failure`, `error` or `skipped`.
    pub state: String,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// The principal that set it last.
    pub updated_by: String,
    pub updated_at: String,
}

/// `collab-check set`: the check as written, and its event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckSet {
    /// Always `set`.
    pub status: String,
    pub repo: String,
    pub commit: String,
    pub name: String,
    pub state: String,
    /// The state it replaced (`null`: a new check).
    #[serde(default)]
    pub previous_state: Option<String>,
    /// Always `check.updated`.
    pub event: String,
    pub seq: i64,
}

/// `collab-check list`: the checks of a commit, or of a patch's latest
/// revision's head (`patch` is then the patch's id, else `null`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckList {
    pub repo: String,
    pub commit: String,
    #[serde(default)]
    pub patch: Option<String>,
    pub checks: Vec<CheckRow>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_list_round_trip() {
        let set = r#"{"commit":"1a2b","event":"check.updated","name":"ci/test","previous_state":"pending","repo":"r","seq":9,"state":"success","status":"set"}"#;
        let list = r#"{"checks":[{"description":null,"name":"ci/test","state":"success","updated_at":"2026-12-06T04:00:00Z","updated_by":"ci","url":"https://ci.example/1"}],"commit":"1a2b","patch":null,"repo":"r"}"#;
        let parsed: CheckSet = serde_json::from_str(set).unwrap();
        assert_eq!(parsed.previous_state.as_deref(), Some("pending"));
        assert_eq!(
            serde_json::to_value(&parsed).unwrap(),
            serde_json::from_str::<serde_json::Value>(set).unwrap()
        );
        let parsed: CheckList = serde_json::from_str(list).unwrap();
        assert_eq!(parsed.checks[0].state, "success");
        assert_eq!(
            serde_json::to_value(&parsed).unwrap(),
            serde_json::from_str::<serde_json::Value>(list).unwrap()
        );
    }
}
