//! `collab-release` replies (docs/releases.md). Times are RFC 3339 in
//! UTC, to the second. `download`'s success is the file's bytes, not JSON.

use serde::{Deserialize, Serialize};

/// One stored file of a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseFile {
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    pub uploaded_at: String,
    /// The principal that uploaded it.
    pub uploader: String,
}

/// A release: the files attached to one tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    pub tag: String,
    /// When its oldest file was uploaded (`null`: no files).
    #[serde(default)]
    pub created_at: Option<String>,
    /// Total bytes.
    pub size: u64,
    /// Sorted by name.
    pub files: Vec<ReleaseFile>,
}

/// `list`: every release of the repository, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseList {
    pub repo: String,
    pub releases: Vec<Release>,
}

/// `create`: the file stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseCreated {
    /// Always `created`.
    pub status: String,
    pub repo: String,
    pub tag: String,
    pub file: ReleaseFile,
}

/// `delete`: the names of the files removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseDeleted {
    /// Always `deleted`.
    pub status: String,
    pub repo: String,
    pub tag: String,
    pub files: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::super::round_trip;
    use super::*;

    /// The shapes docs/releases.md shows (the list's file in full).
    #[test]
    fn doc_shapes_round_trip() {
        let file = r#"{"name":"app.tar.gz","size":5242880,"sha256":"9f86d0…","uploaded_at":"2026-12-03T08:40:37Z","uploader":"SHA256:…"}"#;
        let created: ReleaseCreated = round_trip(&format!(
            r#"{{"status":"created","repo":"app.git","tag":"v1.0","file":{file}}}"#
        ));
        assert_eq!(created.file.size, 5242880);
        let list: ReleaseList = round_trip(&format!(
            r#"{{"repo":"app.git","releases":[{{"tag":"v1.0","created_at":"2026-12-03T08:40:37Z","size":5242880,"files":[{file}]}}]}}"#
        ));
        assert_eq!(list.releases[0].files.len(), 1);
        round_trip::<ReleaseDeleted>(
            r#"{"status":"deleted","repo":"app.git","tag":"v1.0","files":["app.tar.gz"]}"#,
        );
    }
}
