//! `collab-repo mirror` replies (docs/ssh-verbs.md, "`collab-repo
//! mirror`"). Times are RFC 3339 in UTC, to the second.

use serde::{Deserialize, Serialize};

/// A mirror as the replies show it: never the credential, only whether
/// there is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorShown {
    pub id: String,
    /// `pull` or `push`.
    pub direction: String,
    pub url: String,
    pub interval_secs: i64,
    /// Whether a credential is stored for it.
    pub credential: bool,
    /// The principal that added it.
    pub created_by: String,
    pub created_at: String,
    #[serde(default)]
    pub last_attempt_at: Option<String>,
    #[serde(default)]
    pub last_success_at: Option<String>,
    /// The last failure (redacted), `null` after a success.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Failures in a row.
    pub failures: i64,
    pub next_sync_at: String,
    /// git-lfs objects are not mirrored: `not mirrored`, or a sentence
    /// saying so when the repository's `.gitattributes` uses git-lfs
    /// (docs/lfs.md). Absent from older servers.
    #[serde(default)]
    pub lfs: String,
}

/// `add`: the mirror, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorAdded {
    pub repo: String,
    pub mirror: MirrorShown,
}

/// `list`: the repository's mirrors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorList {
    pub repo: String,
    pub mirrors: Vec<MirrorShown>,
}

/// One mirror's outcome of `sync`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncOutcome {
    pub id: String,
    pub direction: String,
    /// `synced` (a failed or busy mirror makes the reply an `error:`
    /// line naming it).
    pub outcome: String,
    /// A pull: how many refs moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refs_updated: Option<u64>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `sync`: every mirror synced (or the one named).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorSynced {
    pub repo: String,
    pub synced: Vec<SyncOutcome>,
}

/// `remove`: the id of the mirror removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorRemoved {
    pub repo: String,
    pub removed: String,
}

#[cfg(test)]
mod tests {
    use super::super::round_trip;
    use super::*;

    /// The shapes docs/ssh-verbs.md shows.
    #[test]
    fn doc_shapes_round_trip() {
        let mirror = r#"{"id":"mr3f1c0d9a2b7e","direction":"pull","url":"https://git.example.com/acme/app.git",
 "interval_secs":3600,"credential":true,"created_by":"alice","created_at":"2026-12-05T12:00:00Z","last_attempt_at":null,
 "last_success_at":null,"last_error":null,"failures":0,"next_sync_at":"2026-12-05T12:00:00Z","lfs":"not mirrored"}"#;
        let added: MirrorAdded =
            round_trip(&format!(r#"{{"repo":"team/app.git","mirror":{mirror}}}"#));
        assert_eq!(added.mirror.interval_secs, 3600);
        round_trip::<MirrorList>(&format!(
            r#"{{"repo":"team/app.git","mirrors":[{mirror}]}}"#
        ));
        let synced: MirrorSynced = round_trip(
            r#"{"repo":"team/app.git","synced":[{"id":"mr3f1c0d9a2b7e","direction":"pull","outcome":"synced","refs_updated":2}]}"#,
        );
        assert_eq!(synced.synced[0].refs_updated, Some(2));
        round_trip::<MirrorRemoved>(r#"{"repo":"team/app.git","removed":"mr3f1c0d9a2b7e"}"#);
    }
}
