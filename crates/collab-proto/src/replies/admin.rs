//! Replies of the identity and administration verbs: `collab-whoami`,
//! `info --json`, `help` and `collab-repo` (docs/ssh-verbs.md).

use serde::{Deserialize, Serialize};

/// The SSH certificate a login used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateShown {
    /// The certificate principal the login is.
    pub principal: String,
    pub key_id: String,
    pub serial: u64,
    /// `SHA256:…` of the CA that signed it.
    pub ca: String,
    /// Unix seconds.
    pub valid_before: u64,
}

/// `collab-whoami`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whoami {
    /// The governed name if governed, else the fingerprint (or a
    /// certificate's principal).
    pub principal: String,
    /// `ungoverned`, `governed` or `closed`.
    pub regime: String,
    /// The governed name, `null` when not governed.
    #[serde(default)]
    pub name: Option<String>,
    pub fingerprint: String,
    pub admin: bool,
    /// The OpenSSH line of the key, to enroll in governance.
    #[serde(default)]
    pub key: Option<String>,
    /// The server's Ed25519 signing key (webhook `v1a,` signatures).
    pub server_key: String,
    /// After a certificate login: which certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertificateShown>,
    /// `false` for a key governance has not enrolled (`closed`); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enrolled: Option<bool>,
    /// How to get enrolled (with `enrolled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// The server part of `info --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerShown {
    pub version: String,
    pub features: Vec<String>,
}

/// A repository of `info --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfoRepo {
    pub name: String,
    /// `read`, `checks`, `write` or `rewind`.
    pub access: String,
    /// gitolite's letters (`R`, `RC`, `RW`, `RW+`).
    pub letters: String,
    pub open_issues: i64,
    pub open_patches: i64,
    /// git-lfs objects the repository holds, and their bytes (0 from a
    /// server that does not say).
    #[serde(default)]
    pub lfs_objects: u64,
    #[serde(default)]
    pub lfs_bytes: u64,
}

/// One of the caller's own live leases in `info --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfoLease {
    /// Without `.git`.
    pub repo: String,
    pub issue: String,
    pub token: i64,
    /// Unix seconds, `null` for open-ended.
    #[serde(default)]
    pub expires_at: Option<i64>,
    #[serde(default)]
    pub note: Option<String>,
}

/// `info --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Info {
    pub principal: String,
    pub regime: String,
    pub server: ServerShown,
    pub repos: Vec<InfoRepo>,
    pub leases: Vec<InfoLease>,
    /// More repositories than the reply lists.
    pub truncated: bool,
}

/// One line of `help`: verbs of one family that need the same access.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelpVerb {
    pub verb: String,
    pub access: String,
}

/// `help`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Help {
    pub principal: String,
    pub regime: String,
    pub verbs: Vec<HelpVerb>,
    /// Where the verbs are documented.
    pub docs: String,
}

/// `collab-repo create` and `delete`: `{"status": "created" | "deleted",
/// "repo"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoChanged {
    pub status: String,
    pub repo: String,
}

/// `collab-repo rename`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoRenamed {
    /// Always `renamed`.
    pub status: String,
    pub from: String,
    pub repo: String,
}

/// `collab-repo describe`: the description (`null`: none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoDescription {
    pub repo: String,
    #[serde(default)]
    pub description: Option<String>,
}

/// `collab-repo visibility`: `public` or `private`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoVisibility {
    pub repo: String,
    pub visibility: String,
}

/// `collab-repo set-head`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoHead {
    pub repo: String,
    pub head: String,
}

/// One repository of `collab-repo list`, with the caller's access.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoAccess {
    pub name: String,
    pub access: String,
}

/// `collab-repo list`: the repositories the caller can read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoList {
    pub repos: Vec<RepoAccess>,
}

/// `collab-repo gc`: the maintenance run's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GcDone {
    /// Always `done`.
    pub status: String,
    pub repo: String,
    /// Unix seconds when the run started.
    pub started_at: i64,
    pub seconds: f64,
    pub packs_before: u64,
    pub packs_after: u64,
    pub loose_before: u64,
    pub loose_after: u64,
    /// Quarantine and temporary-pack leftovers removed.
    pub leftovers_removed: u64,
    /// Whether the run wrote a reachability bitmap.
    pub bitmap: bool,
    /// git-lfs objects no ref points at any more, older than
    /// `lfs.gc_grace`, removed (and their bytes). Absent from older servers.
    #[serde(default)]
    pub lfs_objects_removed: u64,
    #[serde(default)]
    pub lfs_bytes_removed: u64,
}

#[cfg(test)]
mod tests {
    use super::super::round_trip;
    use super::*;

    /// The shapes docs/ssh-verbs.md shows.
    #[test]
    fn doc_shapes_round_trip() {
        let me: Whoami = round_trip(
            r#"{"principal":"SHA256:…","regime":"ungoverned","name":null,"fingerprint":"SHA256:…","admin":true,"key":"ssh-ed25519 AAAA…","server_key":"ssh-ed25519 AAAA…"}"#,
        );
        assert_eq!((me.certificate, me.enrolled), (None, None));
        round_trip::<Whoami>(
            r#"{"principal":"ci","regime":"closed","name":null,"fingerprint":"SHA256:…","admin":false,"key":"ssh-ed25519 AAAA…","server_key":"ssh-ed25519 AAAA…","certificate":{"principal":"ci","key_id":"ci-1","serial":7,"ca":"SHA256:…","valid_before":1796000000},"enrolled":false,"hint":"ask"}"#,
        );
        let info: Info = round_trip(
            r#"{"principal":"agent-7","regime":"ungoverned","server":{"version":"0.1.0","features":["issues","patches","leases","work-queue","releases","events","webhooks","ssh-certificates"]},"repos":[{"name":"open","access":"write","letters":"RW","open_issues":2,"open_patches":0,"lfs_objects":3,"lfs_bytes":3145728}],"leases":[{"repo":"open","issue":"4f2a…","token":3,"expires_at":1796000000,"note":null}],"truncated":false}"#,
        );
        assert_eq!(info.leases[0].expires_at, Some(1796000000));
        // A server from before git-lfs says nothing: none held.
        let older: Info = serde_json::from_str(
            r#"{"principal":"p","regime":"ungoverned","server":{"version":"0.1.0","features":[]},"repos":[{"name":"open","access":"write","letters":"RW","open_issues":2,"open_patches":0}],"leases":[],"truncated":false}"#,
        )
        .unwrap();
        assert_eq!(
            (older.repos[0].lfs_objects, older.repos[0].lfs_bytes),
            (0, 0)
        );
        round_trip::<Help>(
            r#"{"principal":"…","regime":"ungoverned","verbs":[{"verb":"collab-whoami","access":"none"}],"docs":"docs/ssh-verbs.md"}"#,
        );
        round_trip::<RepoChanged>(r#"{"status":"created","repo":"team/app.git"}"#);
        round_trip::<RepoList>(r#"{"repos":[{"name":"team/app.git","access":"rewind"}]}"#);
        round_trip::<RepoDescription>(r#"{"repo":"team/app.git","description":null}"#);
        round_trip::<RepoDescription>(r#"{"repo":"team/app.git","description":"The app"}"#);
        round_trip::<RepoVisibility>(r#"{"repo":"team/app.git","visibility":"public"}"#);
        round_trip::<RepoHead>(r#"{"repo":"team/app.git","head":"trunk"}"#);
        round_trip::<RepoRenamed>(
            r#"{"status":"renamed","from":"team/app.git","repo":"team/core.git"}"#,
        );
        round_trip::<RepoChanged>(r#"{"status":"deleted","repo":"team/core.git"}"#);
        let gc: GcDone = round_trip(
            r#"{"status":"done","repo":"team/app.git","started_at":1796302871,"seconds":0.35,"packs_before":14,"packs_after":1,
 "loose_before":60,"loose_after":0,"leftovers_removed":0,"bitmap":true,"lfs_objects_removed":2,"lfs_bytes_removed":4096}"#,
        );
        assert!(gc.bitmap);
    }
}
