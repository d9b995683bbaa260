//! Files the tests change under a running server.

/// Write a file a running server may read at any moment (a repository's
/// `collab-policy.toml`): beside it, then renamed into place, so the
/// server sees the old content or the new, never an empty or half-written
/// file.
pub fn write_live(path: &std::path::Path, text: impl AsRef<[u8]>) {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
