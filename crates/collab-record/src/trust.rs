//! The trust allowlist `$GIT_DIR/collab/trusted_keys` (authorized_keys
//! format: one public key per line, optional leading options, `#` comments).
//! When the file exists, replay counts only events signed by keys listed in
//! it; when it does not exist, every validly signed event counts. This
//! module reads and edits the file; replay asks [`TrustList::allows`].

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use ssh_key::PublicKey;

use crate::error::{Error, Result};
use crate::sign;

/// One key in the allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// `SHA256:...`
    pub fingerprint: String,
    /// The key as `type base64 [comment]`, without options.
    pub key: String,
}

/// The parsed allowlist.
#[derive(Debug, Clone, Default)]
pub struct TrustList {
    keys: Vec<TrustedKey>,
    fingerprints: HashSet<String>,
}

/// Where the allowlist lives for `repo` (`$GIT_DIR/collab/trusted_keys`;
/// for a bare repository, `$GIT_DIR` is the repository itself; linked
/// worktrees share their main repository's file).
pub fn trust_path(repo: &git2::Repository) -> PathBuf {
    collab_dir(repo).join("trusted_keys")
}

/// `$GIT_DIR/collab`: git-collab's per-repository directory.
pub fn collab_dir(repo: &git2::Repository) -> PathBuf {
    repo.commondir().join("collab")
}

impl TrustList {
    /// Loads the allowlist of `repo`; `None` when the file does not exist
    /// (trust every valid signature).
    pub fn load(repo: &git2::Repository) -> Result<Option<TrustList>> {
        Self::load_path(&trust_path(repo))
    }

    /// Loads an allowlist file; `None` when it does not exist.
    pub fn load_path(path: &Path) -> Result<Option<TrustList>> {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(path, e)),
        };
        let mut list = TrustList::default();
        for (n, line) in text.lines().enumerate() {
            if is_blank(line) {
                continue;
            }
            let key = parse_authorized_line(line).ok_or_else(|| Error::Trust {
                path: path.to_path_buf(),
                reason: format!("line {} is not a public key", n + 1),
            })?;
            list.push(&key);
        }
        Ok(Some(list))
    }

    fn push(&mut self, key: &PublicKey) -> bool {
        let fingerprint = sign::fingerprint(key);
        if !self.fingerprints.insert(fingerprint.clone()) {
            return false;
        }
        self.keys.push(TrustedKey {
            fingerprint,
            key: key.to_openssh().unwrap_or_default(),
        });
        true
    }

    /// The listed keys, in file order.
    pub fn keys(&self) -> &[TrustedKey] {
        &self.keys
    }

    /// True when an event whose `author.key` is `key_line` counts.
    pub fn allows(&self, key_line: &str) -> bool {
        PublicKey::from_openssh(key_line)
            .map(|k| self.fingerprints.contains(&sign::fingerprint(&k)))
            .unwrap_or(false)
    }
}

/// Adds every public key found in `input` (a file path, or a key line) to
/// the allowlist of `repo`, creating the file if needed. Returns the keys
/// that were newly added (keys already listed are skipped).
pub fn add(repo: &git2::Repository, input: &str) -> Result<Vec<TrustedKey>> {
    let candidates = keys_from_input(input)?;
    let path = trust_path(repo);
    let mut list = TrustList::load_path(&path)?.unwrap_or_default();
    let mut added = Vec::new();
    let mut text = String::new();
    for key in &candidates {
        if key.key_data().ed25519().is_none() {
            return Err(Error::PublicKey(format!(
                "{} is {}; events are signed with ssh-ed25519 keys only",
                sign::fingerprint(key),
                key.algorithm()
            )));
        }
        if list.push(key) {
            let entry = list.keys.last().expect("just pushed").clone();
            text.push_str(&entry.key);
            text.push('\n');
            added.push(entry);
        }
    }
    if !added.is_empty() {
        append(&path, &text)?;
    }
    Ok(added)
}

/// Removes every line whose key matches `needle` (a `SHA256:` fingerprint,
/// or a key line / key file). Returns the removed keys; errors if none
/// matched.
pub fn remove(repo: &git2::Repository, needle: &str) -> Result<Vec<TrustedKey>> {
    let path = trust_path(repo);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Trust {
                path,
                reason: "does not exist; nothing to remove".into(),
            })
        }
        Err(e) => return Err(Error::io(&path, e)),
    };
    let wanted: HashSet<String> = if needle.starts_with("SHA256:") {
        [needle.to_string()].into()
    } else {
        keys_from_input(needle)?
            .iter()
            .map(sign::fingerprint)
            .collect()
    };
    let mut kept = String::new();
    let mut removed = Vec::new();
    for line in text.lines() {
        let matched = (!is_blank(line))
            .then(|| parse_authorized_line(line))
            .flatten()
            .filter(|k| wanted.contains(&sign::fingerprint(k)));
        match matched {
            Some(k) => removed.push(TrustedKey {
                fingerprint: sign::fingerprint(&k),
                key: k.to_openssh().unwrap_or_default(),
            }),
            None => {
                kept.push_str(line);
                kept.push('\n');
            }
        }
    }
    if removed.is_empty() {
        return Err(Error::Trust {
            path,
            reason: format!("no key matches '{needle}'"),
        });
    }
    replace(&path, &kept)?;
    Ok(removed)
}

/// Reads keys from a file path if `input` names an existing file, else
/// parses `input` as one key line.
fn keys_from_input(input: &str) -> Result<Vec<PublicKey>> {
    let path = Path::new(input);
    if path.is_file() {
        let text = fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let keys: Vec<PublicKey> = text
            .lines()
            .filter(|l| !is_blank(l))
            .map(|l| {
                parse_authorized_line(l).ok_or_else(|| {
                    Error::PublicKey(format!("{}: not a public key file", path.display()))
                })
            })
            .collect::<Result<_>>()?;
        if keys.is_empty() {
            return Err(Error::PublicKey(format!(
                "{}: no key found",
                path.display()
            )));
        }
        return Ok(keys);
    }
    parse_authorized_line(input)
        .map(|k| vec![k])
        .ok_or_else(|| {
            Error::PublicKey(format!(
                "'{input}' is neither a key file nor an OpenSSH public key line"
            ))
        })
}

fn is_blank(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// Parses one authorized_keys line, with or without leading options (which
/// may contain quoted spaces).
pub fn parse_authorized_line(line: &str) -> Option<PublicKey> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    if let Ok(k) = PublicKey::from_openssh(line) {
        return Some(k);
    }
    let (mut in_quotes, mut escaped) = (false, false);
    for (i, c) in line.char_indices() {
        match c {
            '\\' if in_quotes && !escaped => {
                escaped = true;
                continue;
            }
            '"' if !escaped => in_quotes = !in_quotes,
            ' ' | '\t' if !in_quotes => {
                return PublicKey::from_openssh(line[i..].trim_start()).ok();
            }
            _ => {}
        }
        escaped = false;
    }
    None
}

fn ensure_dir(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    Ok(())
}

fn append(path: &Path, text: &str) -> Result<()> {
    ensure_dir(path)?;
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    f.write_all(text.as_bytes()).map_err(|e| Error::io(path, e))
}

/// Rewrites the file through a temporary file and a rename, so a failure
/// never leaves a half-written allowlist.
fn replace(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, text)
        .and_then(|_| fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = fs::remove_file(&tmp);
            Error::io(path, e)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

    #[test]
    fn parses_lines_with_options_and_comments() {
        assert!(parse_authorized_line(KEY).is_some());
        assert!(parse_authorized_line(&format!("{KEY} alice@example")).is_some());
        assert!(
            parse_authorized_line(&format!("no-pty,command=\"echo hi there\" {KEY} a b")).is_some()
        );
        assert!(parse_authorized_line("# comment").is_none());
        assert!(parse_authorized_line("garbage").is_none());
    }

    #[test]
    fn load_and_allows_ignore_comments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trusted_keys");
        assert!(TrustList::load_path(&path).unwrap().is_none());
        fs::write(&path, format!("# team\n\n{KEY} alice\n")).unwrap();
        let list = TrustList::load_path(&path).unwrap().unwrap();
        assert_eq!(list.keys().len(), 1);
        assert!(list.allows(KEY));
        assert!(!list.allows("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample"));
        fs::write(&path, "not a key\n").unwrap();
        assert!(TrustList::load_path(&path).is_err());
    }
}
