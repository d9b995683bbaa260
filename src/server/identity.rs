//! Who is connecting: the `ssh.authorized_keys` file (parsed, and re-read
//! whenever it changes, without a restart) and the `Identity` of a key that
//! has completed public-key authentication.
//!
//! Admins are the keys whose authorized_keys line carries the option
//! `environment="GIT_COLLAB_ROLE=admin"` (`setup` writes it for
//! `initial_admin_keys`). Other OpenSSH options on a line are accepted and
//! ignored. This module admits keys; what a key may do is `authz`'s business.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use russh::keys::ssh_key::PublicKey;
use russh::keys::HashAlg;

/// The authorized_keys option that marks a server admin.
pub const ADMIN_OPTION: &str = "environment=\"GIT_COLLAB_ROLE=admin\"";

/// A key that completed authentication (its signature was verified).
#[derive(Debug, Clone)]
pub struct Identity {
    /// `SHA256:…`, as `ssh-keygen -lf` prints it.
    pub fingerprint: String,
    /// The key itself.
    pub key: PublicKey,
    /// Marked admin in authorized_keys.
    pub admin: bool,
}

/// The SHA256 fingerprint of a key: `SHA256:<base64, no padding>`.
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// One parsed authorized_keys line.
#[derive(Debug, Clone)]
pub struct AuthorizedKey {
    pub options: String,
    pub fingerprint: String,
    pub admin: bool,
}

/// Split a line into its options and key. Quote-aware, because option values
/// may contain spaces (`command="echo hi"`); `ssh_key::AuthorizedKeys`
/// cannot parse those.
pub fn parse_authorized_line(line: &str) -> Option<AuthorizedKey> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (options, key) = match PublicKey::from_openssh(line) {
        Ok(k) => (String::new(), k),
        Err(_) => {
            let (mut in_quotes, mut escaped) = (false, false);
            let mut found = None;
            for (i, c) in line.char_indices() {
                match c {
                    '\\' if in_quotes && !escaped => {
                        escaped = true;
                        continue;
                    }
                    '"' if !escaped => in_quotes = !in_quotes,
                    ' ' | '\t' if !in_quotes => {
                        let key = PublicKey::from_openssh(line[i..].trim_start()).ok()?;
                        found = Some((line[..i].to_string(), key));
                        break;
                    }
                    _ => {}
                }
                escaped = false;
            }
            found?
        }
    };
    let admin = split_options(&options).any(|o| o == ADMIN_OPTION);
    let fingerprint = fingerprint(&key);
    Some(AuthorizedKey {
        options,
        fingerprint,
        admin,
    })
}

/// Split `a,b="x,y",c` at commas outside quotes.
fn split_options(options: &str) -> impl Iterator<Item = &str> {
    let mut parts = Vec::new();
    let (mut start, mut in_quotes, mut escaped) = (0, false, false);
    for (i, c) in options.char_indices() {
        match c {
            '\\' if in_quotes && !escaped => {
                escaped = true;
                continue;
            }
            '"' if !escaped => in_quotes = !in_quotes,
            ',' if !in_quotes => {
                parts.push(&options[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        escaped = false;
    }
    if start < options.len() {
        parts.push(&options[start..]);
    }
    parts.into_iter().map(str::trim)
}

/// Parse a whole authorized_keys text. Returns the keys by fingerprint and
/// the 1-based numbers of lines that are neither blank, comments nor keys.
pub fn parse_authorized_keys(text: &str) -> (HashMap<String, AuthorizedKey>, Vec<usize>) {
    let mut keys: HashMap<String, AuthorizedKey> = HashMap::new();
    let mut bad = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match parse_authorized_line(trimmed) {
            Some(k) => {
                // The same key twice: admin if any of its lines says so.
                let admin = k.admin || keys.get(&k.fingerprint).is_some_and(|o| o.admin);
                keys.insert(k.fingerprint.clone(), AuthorizedKey { admin, ..k });
            }
            None => bad.push(n + 1),
        }
    }
    (keys, bad)
}

/// What identifies one version of the file on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode: meta.ino(),
    })
}

#[derive(Debug, Default)]
struct Snapshot {
    stamp: Option<FileStamp>,
    keys: Arc<HashMap<String, AuthorizedKey>>,
}

/// The live view of `ssh.authorized_keys`. Each lookup compares the file's
/// mtime, size and inode with the last read and re-reads it when they
/// differ, so edits (including atomic replace-by-rename) apply to the next
/// connection without a restart.
#[derive(Debug)]
pub struct AuthorizedKeys {
    path: PathBuf,
    snapshot: Mutex<Snapshot>,
}

impl AuthorizedKeys {
    pub fn new(path: PathBuf) -> Self {
        AuthorizedKeys {
            path,
            snapshot: Mutex::new(Snapshot::default()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current keys, re-read if the file changed.
    pub fn current(&self) -> Arc<HashMap<String, AuthorizedKey>> {
        let now = stamp(&self.path);
        let mut snap = self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        if snap.stamp.is_none() || snap.stamp != now {
            let keys = match std::fs::read_to_string(&self.path) {
                Ok(text) => {
                    let (keys, bad) = parse_authorized_keys(&text);
                    for line in bad {
                        tracing::warn!(
                            "{}:{line}: not an OpenSSH public key line; ignored",
                            self.path.display()
                        );
                    }
                    keys
                }
                Err(e) => {
                    tracing::warn!("cannot read {}: {e}", self.path.display());
                    HashMap::new()
                }
            };
            snap.keys = Arc::new(keys);
            snap.stamp = now;
        }
        snap.keys.clone()
    }

    /// The entry for a fingerprint, if the key is listed.
    pub fn lookup(&self, fingerprint: &str) -> Option<AuthorizedKey> {
        self.current().get(fingerprint).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICtQ/RYc3WhAmSKhGYkTZDTD1K+ATpny91Oy682hu+Dg a b c";

    #[test]
    fn parses_plain_and_optioned_lines() {
        let plain = parse_authorized_line(KEY).unwrap();
        assert!(plain.options.is_empty() && !plain.admin);
        assert!(plain.fingerprint.starts_with("SHA256:"));
        let line = format!("no-pty,command=\"echo a, b\",{ADMIN_OPTION} {KEY}");
        let opt = parse_authorized_line(&line).unwrap();
        assert!(opt.admin);
        assert_eq!(opt.fingerprint, plain.fingerprint);
        assert!(parse_authorized_line("# comment").is_none());
        assert!(parse_authorized_line("ssh-ed25519 notbase64").is_none());
        let (keys, bad) = parse_authorized_keys(&format!("{KEY}\n\ngarbage\n{line}\n"));
        assert_eq!(keys.len(), 1);
        assert!(keys.values().next().unwrap().admin);
        assert_eq!(bad, vec![3]);
    }

    #[test]
    fn rereads_when_the_file_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("authorized_keys");
        let keys = AuthorizedKeys::new(path.clone());
        assert!(keys.current().is_empty());
        std::fs::write(&path, format!("{KEY}\n")).unwrap();
        assert_eq!(keys.current().len(), 1);
        std::fs::write(&path, "").unwrap();
        assert!(keys.current().is_empty());
    }
}
