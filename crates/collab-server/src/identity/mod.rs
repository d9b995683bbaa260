//! Who is connecting: the `ssh.authorized_keys` file (parsed, and re-read
//! whenever it changes, without a restart) and the `Identity` of a key that
//! has completed public-key authentication.
//!
//! Admins are the keys whose authorized_keys line carries the option
//! `environment="GIT_COLLAB_ROLE=admin"` (`setup` writes it for
//! `initial_admin_keys`). The other OpenSSH options are honoured or refuse
//! the line (`options`). A key may appear on several lines: it is admitted
//! when one of them admits it for this client address at this time. This
//! module admits keys; what a key may do is `authz`'s business.
//!
//! SSH user certificates (`certs`: trusted CAs, the checks; `krl`: the
//! revocation list) make an identity of a certificate principal instead.

pub mod certs;
mod fingerprint;
pub mod krl;
pub mod options;
mod stamp;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use russh::keys::ssh_key::PublicKey;

pub use fingerprint::fingerprint;
pub use options::ADMIN_OPTION;
use options::{split_options, KeyOptions, Refused};
use stamp::{stamp, FileStamp};

/// A key that completed authentication (its signature was verified).
#[derive(Debug, Clone)]
pub struct Identity {
    /// `SHA256:…`, as `ssh-keygen -lf` prints it.
    pub fingerprint: String,
    /// The key itself.
    pub key: PublicKey,
    /// Marked admin in authorized_keys.
    pub admin: bool,
    /// The client's address, for `from=`.
    pub peer: IpAddr,
    /// Set when the login was an SSH certificate: then the certificate's
    /// principal, not the key, is who this is (`authz::Caller::principal`).
    pub certificate: Option<certs::CertLogin>,
}

impl Identity {
    /// What the per-principal shares (connections, watchers, waiters) count
    /// by: the certificate principal, so that many short-lived
    /// certificates of one principal share one allowance; else the key.
    pub fn share_key(&self) -> String {
        match &self.certificate {
            Some(cert) => format!("cert:{}", cert.principal),
            None => self.fingerprint.clone(),
        }
    }
}

/// One authorized_keys line split into its options text and key (what
/// `setup` edits); says nothing about whether the options can be honoured.
#[derive(Debug, Clone)]
pub struct AuthorizedLine {
    pub options: String,
    pub fingerprint: String,
    /// The key's comment (the text after the key), as written.
    pub comment: String,
    /// The options text carries [`ADMIN_OPTION`].
    pub admin: bool,
}

/// A line that can admit its key: its 1-based number and honoured options.
#[derive(Debug, Clone)]
pub struct AuthorizedKey {
    pub line: usize,
    pub fingerprint: String,
    pub options: KeyOptions,
    /// The key's comment (`alice@laptop`), as written; may be empty.
    pub comment: String,
}

impl AuthorizedKey {
    pub fn admin(&self) -> bool {
        self.options.admin
    }
}

/// Every line of one key: those that can admit, and those refused for an
/// option the server cannot honour (they admit nothing, but they show the
/// key is meant to be restricted).
#[derive(Debug, Clone, Default)]
pub struct KeyLines {
    pub usable: Vec<AuthorizedKey>,
    pub refused: Vec<usize>,
}

/// What authorized_keys says about one key for one connection.
#[derive(Debug, Clone)]
pub enum Admission {
    /// The key has no line at all.
    Unlisted,
    /// The first line that admits the key here and now.
    Admitted(AuthorizedKey),
    /// The key is listed but no line admits it; the reason is loggable.
    Refused(String),
}

/// Split a line into its options and key. Quote-aware, because option values
/// may contain spaces (`command="echo hi"`); `ssh_key::AuthorizedKeys`
/// cannot parse those.
pub fn parse_authorized_line(line: &str) -> Option<AuthorizedLine> {
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
    let comment = key.comment().as_str_lossy().trim().to_string();
    Some(AuthorizedLine {
        options,
        fingerprint,
        comment,
        admin,
    })
}

/// Parse a whole authorized_keys text. Returns every key's lines by
/// fingerprint, and the 1-based numbers of lines that admit nothing with
/// the reason: not a key line, or an option that cannot be honoured.
pub fn parse_authorized_keys(text: &str) -> (HashMap<String, KeyLines>, Vec<(usize, String)>) {
    let mut keys: HashMap<String, KeyLines> = HashMap::new();
    let mut bad = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let number = n + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some(parsed) = parse_authorized_line(trimmed) else {
            bad.push((number, "not an OpenSSH public key line".to_string()));
            continue;
        };
        let entry = keys.entry(parsed.fingerprint.clone()).or_default();
        match KeyOptions::parse(&parsed.options) {
            Ok(options) => entry.usable.push(AuthorizedKey {
                line: number,
                fingerprint: parsed.fingerprint,
                options,
                comment: parsed.comment,
            }),
            Err(reason) => {
                entry.refused.push(number);
                bad.push((number, reason));
            }
        }
    }
    (keys, bad)
}

/// Decide one key's admission from its lines, for a client at `peer` at
/// `now` (unix seconds).
pub fn admit(lines: Option<&KeyLines>, peer: IpAddr, now: i64) -> Admission {
    let Some(lines) = lines else {
        return Admission::Unlisted;
    };
    let mut why = Vec::new();
    for key in &lines.usable {
        match key.options.admits(peer, now) {
            Ok(()) => return Admission::Admitted(key.clone()),
            Err(Refused::From) => {
                why.push(format!("line {}: from= does not match {peer}", key.line))
            }
            Err(Refused::Expired) => why.push(format!("line {}: expiry-time has passed", key.line)),
        }
    }
    for line in &lines.refused {
        why.push(format!(
            "line {line}: has an option the server cannot honour"
        ));
    }
    Admission::Refused(why.join("; "))
}

#[derive(Debug, Default)]
struct Snapshot {
    stamp: Option<FileStamp>,
    keys: Arc<HashMap<String, KeyLines>>,
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

/// Seconds since the epoch, for expiry checks.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
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
    pub fn current(&self) -> Arc<HashMap<String, KeyLines>> {
        let now = stamp(&self.path);
        let mut snap = self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        if snap.stamp.is_none() || snap.stamp != now {
            let keys = match std::fs::read_to_string(&self.path) {
                Ok(text) => {
                    let (keys, bad) = parse_authorized_keys(&text);
                    for (line, reason) in bad {
                        tracing::warn!(
                            "{}:{line}: {reason}; this line admits no key",
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

    /// Whether the file admits the key `fingerprint` for a client at
    /// `peer` at `now`.
    pub fn admit(&self, fingerprint: &str, peer: IpAddr, now: i64) -> Admission {
        admit(self.current().get(fingerprint), peer, now)
    }

    /// The first line of `fingerprint` that has not expired, wherever the
    /// client is: for decisions made without a connection (the owner of a
    /// webhook subscription). A key listed only with a refused option, or
    /// only on expired lines, is not found.
    pub fn lookup(&self, fingerprint: &str) -> Option<AuthorizedKey> {
        let now = unix_now();
        let keys = self.current();
        keys.get(fingerprint)?
            .usable
            .iter()
            .find(|k| k.options.expires_at.is_none_or(|t| now <= t))
            .cloned()
    }

    /// The first line of `fingerprint` that would let it act with no
    /// connection at all: not expired and without `from=`. What a key
    /// left to happen later (its webhook subscriptions, its queued merges)
    /// acts by: no source address can match a `from=` when nobody is
    /// connected, so a key limited to some addresses acts only while it is
    /// connected from one of them (docs/security.md, "Who acts later").
    pub fn lookup_unattended(&self, fingerprint: &str) -> Option<AuthorizedKey> {
        let now = unix_now();
        let keys = self.current();
        keys.get(fingerprint)?
            .usable
            .iter()
            .find(|k| k.options.from.is_none() && k.options.expires_at.is_none_or(|t| now <= t))
            .cloned()
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
        let line = format!("no-pty,environment=\"A=a, b\",{ADMIN_OPTION} {KEY}");
        let opt = parse_authorized_line(&line).unwrap();
        assert!(opt.admin);
        assert_eq!(opt.fingerprint, plain.fingerprint);
        assert!(parse_authorized_line("# comment").is_none());
        assert!(parse_authorized_line("ssh-ed25519 notbase64").is_none());
        let (keys, bad) = parse_authorized_keys(&format!("{KEY}\n\ngarbage\n{line}\n"));
        assert_eq!(keys.len(), 1);
        let lines = keys.values().next().unwrap();
        assert_eq!(
            lines.usable.len(),
            1,
            "the line with environment=A is refused"
        );
        assert_eq!(lines.refused, vec![4]);
        assert_eq!(bad.iter().map(|b| b.0).collect::<Vec<_>>(), vec![3, 4]);
        assert!(bad[1].1.contains("environment"), "{bad:?}");
    }

    #[test]
    fn a_key_is_admitted_by_any_line_that_admits_it_here_and_now() {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.1".parse().unwrap();
        let text =
            format!("from=\"10.0.0.0/8\" {KEY}\n{ADMIN_OPTION},expiry-time=\"20000101Z\" {KEY}\n");
        let (keys, bad) = parse_authorized_keys(&text);
        assert!(bad.is_empty(), "{bad:?}");
        let lines = keys.values().next();
        match admit(lines, other, unix_now()) {
            Admission::Admitted(k) => assert!(k.line == 1 && !k.admin()),
            a => panic!("{a:?}"),
        }
        match admit(lines, local, unix_now()) {
            Admission::Refused(why) => {
                assert!(why.contains("from=") && why.contains("expiry"), "{why}")
            }
            a => panic!("{a:?}"),
        }
        // Before its expiry the admin line admits from anywhere.
        assert!(matches!(admit(lines, local, 0), Admission::Admitted(k) if k.admin()));
        assert!(matches!(admit(None, local, 0), Admission::Unlisted));
        // A cert-authority line is never a user key.
        let (keys, bad) = parse_authorized_keys(&format!("cert-authority {KEY}\n"));
        assert!(matches!(
            admit(keys.values().next(), local, 0),
            Admission::Refused(_)
        ));
        assert!(bad[0].1.contains("cert-authority"), "{bad:?}");
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
