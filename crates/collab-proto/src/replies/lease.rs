//! `collab-lease` replies. Times are RFC 3339 in UTC, to the second; an
//! open-ended lease has no `expires_at` (`null`). The server always writes
//! every field; the client reads an absent optional one as empty.

use serde::{Deserialize, Serialize};

/// A tenure as `acquire`, `renew` and `next` report it (`status` is
/// `acquired` or `renewed`; `next` adds the issue's `title`, `labels` and
/// `priority`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenure {
    pub status: String,
    pub repo: String,
    pub issue: String,
    pub holder: String,
    /// The fencing token: grows with every new tenure of the issue.
    pub token: i64,
    pub acquired_at: String,
    #[serde(default)]
    pub renewed_at: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
}

/// One live lease of `collab-lease list`. Fields an older server may leave
/// out read as empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRow {
    pub issue: String,
    pub holder: String,
    pub token: i64,
    pub acquired_at: String,
    #[serde(default)]
    pub renewed_at: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
    /// How many times the issue's lease changed hands or state.
    #[serde(default)]
    pub transitions: i64,
    /// The holder's display name (the server adds it to every reply that
    /// names a holder); `holder` stays the full principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_name: Option<String>,
}

/// `collab-lease list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseList {
    pub leases: Vec<LeaseRow>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape docs/ssh-verbs.md shows, parsed and written back.
    #[test]
    fn list_round_trips() {
        let line = r#"{"leases":[{"acquired_at":"2026-12-04T10:00:00Z","expires_at":null,"holder":"alice","issue":"4f2a","note":null,"renewed_at":null,"token":3,"transitions":1}]}"#;
        let list: LeaseList = serde_json::from_str(line).unwrap();
        assert_eq!(list.leases[0].token, 3);
        assert_eq!(list.leases[0].expires_at, None);
        let back = serde_json::to_value(&list).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(line).unwrap()
        );
    }

    #[test]
    fn tenure_round_trips() {
        let line = r#"{"acquired_at":"2026-12-04T10:00:00Z","expires_at":"2026-12-04T10:05:00Z","holder":"SHA256:abc","issue":"4f2a","note":"on it","renewed_at":null,"repo":"team/app","status":"acquired","token":7}"#;
        let tenure: Tenure = serde_json::from_str(line).unwrap();
        assert_eq!((tenure.status.as_str(), tenure.token), ("acquired", 7));
        let back = serde_json::to_value(&tenure).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(line).unwrap()
        );
    }
}
