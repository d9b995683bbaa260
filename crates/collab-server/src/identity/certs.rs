//! SSH user certificates: `ssh.trusted_user_ca_keys` (OpenSSH's
//! `TrustedUserCAKeys`: CA public keys, one a line) and `ssh.revoked_keys`
//! (`RevokedKeys`: a KRL or a list of keys, `krl`), both re-read when the
//! file changes, and the check a certificate must pass to log in.
//!
//! russh has already verified the certificate's signature, its validity
//! window, and that the client holds the certified key. `check` decides
//! at login, each refusal with its own reason for the log (the client only
//! ever sees the answer an unknown key gets): the signature (again), a
//! trusted CA, type user, within its validity window, not revoked, a
//! usable principal, `source-address` matching the client, and no critical
//! option we do not honour (`force-command` included: a forge cannot run
//! someone else's command). `recheck` repeats what can change while a
//! connection is open (the files, the clock) before each command.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ipnet::IpNet;
use russh::keys::ssh_key::certificate::CertType;
use russh::keys::ssh_key::public::KeyData;
use russh::keys::ssh_key::{Certificate, PublicKey};

use super::fingerprint::fingerprint;
use super::krl::Revoked;
use super::stamp::{stamp, FileStamp};

/// Largest trusted-CA or revocation file read; a bigger one is refused
/// (and a refused revocation file revokes everything).
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Most CA keys one `ssh.trusted_user_ca_keys` file may name.
pub const MAX_CA_KEYS: usize = 1024;

/// What a certificate that passed `check` says about its holder.
#[derive(Debug, Clone)]
pub struct CertLogin {
    /// The certificate principal this login is (see `choose_principal`).
    pub principal: String,
    pub key_id: String,
    pub serial: u64,
    /// `SHA256:…` of the CA that signed it.
    pub ca: String,
    /// The certificate itself, checked again before each command.
    pub certificate: Arc<Certificate>,
}

/// A file re-read when its stamp changes.
#[derive(Debug)]
struct Live<T> {
    path: Option<PathBuf>,
    snapshot: Mutex<(Option<FileStamp>, bool, Arc<T>)>,
}

impl<T: Default> Live<T> {
    fn new(path: Option<PathBuf>) -> Self {
        Live {
            path,
            snapshot: Mutex::new((None, false, Arc::new(T::default()))),
        }
    }

    /// The parsed file, re-read (with `parse`) if it changed. `None` when
    /// no path is configured.
    fn current(&self, parse: impl FnOnce(&Path, Option<Vec<u8>>) -> T) -> Option<Arc<T>> {
        let path = self.path.as_deref()?;
        let now = stamp(path);
        let mut snap = self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        if !snap.1 || snap.0 != now {
            let data = read_bounded(path);
            *snap = (now, true, Arc::new(parse(path, data)));
        }
        Some(snap.2.clone())
    }
}

/// The file's bytes, or `None` (logged) when it cannot be read or is
/// larger than [`MAX_FILE_BYTES`].
fn read_bounded(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!("cannot read {}: {e}", path.display());
            return None;
        }
    };
    let mut data = Vec::new();
    match file.take(MAX_FILE_BYTES + 1).read_to_end(&mut data) {
        Ok(_) if data.len() as u64 > MAX_FILE_BYTES => {
            tracing::warn!(
                "{} is larger than {MAX_FILE_BYTES} bytes; not read",
                path.display()
            );
            None
        }
        Ok(_) => Some(data),
        Err(e) => {
            tracing::warn!("cannot read {}: {e}", path.display());
            None
        }
    }
}

/// The trusted CA keys, by SHA256 fingerprint.
#[derive(Debug, Default)]
pub struct TrustedCas {
    fingerprints: Vec<String>,
}

impl TrustedCas {
    /// Parse `TrustedUserCAKeys` text: one public key a line, `#` comments.
    /// Lines that are not keys are skipped with a warning (as sshd does).
    pub fn parse(text: &str, origin: &Path) -> TrustedCas {
        let mut fingerprints = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match PublicKey::from_openssh(line) {
                Ok(key) if fingerprints.len() < MAX_CA_KEYS => fingerprints.push(fingerprint(&key)),
                Ok(_) => {
                    tracing::warn!(
                        "{}:{}: more than {MAX_CA_KEYS} CA keys; the rest are ignored",
                        origin.display(),
                        n + 1
                    );
                    break;
                }
                Err(_) => tracing::warn!(
                    "{}:{}: not an OpenSSH public key; this line trusts no CA",
                    origin.display(),
                    n + 1
                ),
            }
        }
        TrustedCas { fingerprints }
    }

    pub fn trusts(&self, ca_fingerprint: &str) -> bool {
        self.fingerprints.iter().any(|f| f == ca_fingerprint)
    }

    pub fn len(&self) -> usize {
        self.fingerprints.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fingerprints.is_empty()
    }
}

/// The revocation file as read: its entries, or why it was refused (then
/// every key counts as revoked).
#[derive(Debug, Default)]
pub enum Revocations {
    #[default]
    None,
    List(Revoked),
    Refused(String),
}

/// The live `ssh.trusted_user_ca_keys` and `ssh.revoked_keys`.
#[derive(Debug)]
pub struct CertAuthority {
    cas: Live<TrustedCas>,
    revoked: Live<Revocations>,
}

impl CertAuthority {
    pub fn new(trusted_user_ca_keys: Option<PathBuf>, revoked_keys: Option<PathBuf>) -> Self {
        CertAuthority {
            cas: Live::new(trusted_user_ca_keys),
            revoked: Live::new(revoked_keys),
        }
    }

    /// Read both files now (they are read on use anyway; this puts what
    /// they hold, or what is wrong with them, in the log at start). The
    /// number of trusted CA keys.
    pub fn load_now(&self) -> usize {
        if self.revoked.path.is_some() {
            self.revocations();
        }
        if self.enabled() {
            self.cas().len()
        } else {
            0
        }
    }

    /// Whether certificates may log in at all (a CA file is configured).
    pub fn enabled(&self) -> bool {
        self.cas.path.is_some()
    }

    fn cas(&self) -> Arc<TrustedCas> {
        self.cas
            .current(|path, data| {
                let cas = match data.map(String::from_utf8) {
                    Some(Ok(text)) => TrustedCas::parse(&text, path),
                    Some(Err(_)) => {
                        tracing::warn!("{} is not UTF-8; no CA trusted", path.display());
                        TrustedCas::default()
                    }
                    None => TrustedCas::default(),
                };
                tracing::info!(
                    "ssh.trusted_user_ca_keys: {} CA keys from {}",
                    cas.len(),
                    path.display()
                );
                cas
            })
            .unwrap_or_default()
    }

    fn revocations(&self) -> Arc<Revocations> {
        self.revoked
            .current(|path, data| {
                let Some(data) = data else {
                    return Revocations::Refused(format!("cannot read {}", path.display()));
                };
                match Revoked::parse(&data) {
                    Ok(list) => {
                        tracing::info!(
                            "ssh.revoked_keys: {} from {}",
                            list.summary(),
                            path.display()
                        );
                        Revocations::List(list)
                    }
                    Err(e) => {
                        tracing::warn!(
                            "ssh.revoked_keys: {}: {e}; every key is refused until it is fixed",
                            path.display()
                        );
                        Revocations::Refused(e.0)
                    }
                }
            })
            .unwrap_or_default()
    }

    /// Why the plain key `key` is refused by `ssh.revoked_keys`, if it is.
    pub fn key_revoked(&self, key: &KeyData) -> Option<String> {
        match self.revocations().as_ref() {
            Revocations::None => None,
            Revocations::List(list) => list
                .revokes_key(key)
                .then(|| "revoked in ssh.revoked_keys".to_string()),
            Revocations::Refused(why) => Some(format!(
                "ssh.revoked_keys is unreadable ({why}): fail closed"
            )),
        }
    }

    /// Decide whether `cert` logs in for a client at `peer` at `now` (unix
    /// seconds) as SSH user `user`. `Err` is the reason for the log.
    pub fn check(
        &self,
        cert: &Certificate,
        user: &str,
        peer: IpAddr,
        now: u64,
    ) -> Result<CertLogin, String> {
        // russh checked the signature already; checked again here so this
        // function alone decides (a certificate is small, this is cheap).
        cert.verify_signature()
            .map_err(|_| "the CA signature does not verify".to_string())?;
        let ca = self.admits(cert, peer, now)?;
        let principal = choose_principal(cert.valid_principals(), user)?;
        Ok(CertLogin {
            principal,
            key_id: cert.key_id().to_string(),
            serial: cert.serial(),
            ca,
            certificate: Arc::new(cert.clone()),
        })
    }

    /// Whether a login's certificate still admits it (before each command):
    /// what can change while a connection is open, the CA file, the
    /// revocation file and the clock. The signature is not verified again:
    /// these are the very bytes verified at login.
    pub fn recheck(&self, login: &CertLogin, peer: IpAddr, now: u64) -> Result<(), String> {
        self.admits(&login.certificate, peer, now).map(|_| ())
    }

    /// Every check but the signature and the principal; `Ok` is the CA's
    /// fingerprint.
    fn admits(&self, cert: &Certificate, peer: IpAddr, now: u64) -> Result<String, String> {
        let ca = fingerprint(&PublicKey::new(cert.signature_key().clone(), ""));
        if !self.enabled() {
            return Err("certificates are not accepted (no ssh.trusted_user_ca_keys)".into());
        }
        if !self.cas().trusts(&ca) {
            return Err(format!("signed by {ca}, not a trusted CA"));
        }
        if cert.cert_type() != CertType::User {
            return Err("a host certificate, not a user certificate".into());
        }
        if now < cert.valid_after() {
            return Err("not yet valid".into());
        }
        if now >= cert.valid_before() {
            return Err("expired".into());
        }
        match self.revocations().as_ref() {
            Revocations::None => {}
            Revocations::List(list) => {
                if let Some(why) = list.revokes_certificate(cert) {
                    return Err(format!("revoked in ssh.revoked_keys: {why}"));
                }
            }
            Revocations::Refused(why) => {
                return Err(format!(
                    "ssh.revoked_keys is unreadable ({why}): fail closed"
                ))
            }
        }
        for (name, value) in cert.critical_options().iter() {
            match name.as_str() {
                "source-address" => {
                    if !source_address_allows(value, peer)? {
                        return Err(format!("source-address {value:?} does not match {peer}"));
                    }
                }
                other => {
                    return Err(format!("critical option {other:?} is not supported"));
                }
            }
        }
        Ok(ca)
    }
}

/// `source-address`: a comma-separated list of addresses and CIDRs. A
/// list we cannot read refuses the certificate.
fn source_address_allows(value: &str, peer: IpAddr) -> Result<bool, String> {
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    let mut any = false;
    for item in value.split(',') {
        let item = item.trim();
        let net: IpNet = match item.parse::<IpNet>() {
            Ok(net) => net,
            Err(_) => match item.parse::<IpAddr>() {
                Ok(ip) => IpNet::from(ip),
                Err(_) => return Err(format!("source-address {value:?} is not a list of CIDRs")),
            },
        };
        any |= net.contains(&peer);
    }
    Ok(any)
}

/// Whether `name` may be a principal: what governance allows for names
/// (letters, digits, `.`, `_`, `-`, at most 64). This keeps a certificate
/// from naming itself after a key's `SHA256:` fingerprint or a group.
pub fn valid_principal(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The certificate principal a login is: the SSH user name when the
/// certificate lists it (as sshd requires), else the first principal the
/// certificate lists. A certificate with no principal (which OpenSSH
/// would take as "anyone") is refused, and so is one whose chosen name is
/// not a valid principal name.
pub fn choose_principal(principals: &[String], user: &str) -> Result<String, String> {
    if principals.is_empty() {
        return Err("no principal (a certificate for anyone is not accepted)".into());
    }
    let chosen = principals
        .iter()
        .find(|p| *p == user)
        .unwrap_or(&principals[0]);
    if !valid_principal(chosen) {
        return Err(format!(
            "principal {chosen:?} is not a valid principal name"
        ));
    }
    Ok(chosen.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_addresses() {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(source_address_allows("127.0.0.1", local).unwrap());
        assert!(source_address_allows("10.0.0.0/8,127.0.0.0/8", local).unwrap());
        assert!(!source_address_allows("10.0.0.0/8", local).unwrap());
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert!(source_address_allows("127.0.0.1/32", mapped).unwrap());
        assert!(source_address_allows("nonsense", local).is_err());
    }

    #[test]
    fn principals() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(choose_principal(&p(&["a", "b"]), "git").unwrap(), "a");
        assert_eq!(choose_principal(&p(&["a", "b"]), "b").unwrap(), "b");
        assert!(choose_principal(&[], "git").is_err());
        assert!(choose_principal(&p(&["SHA256:abc"]), "git").is_err());
        assert!(choose_principal(&p(&["@group"]), "git").is_err());
    }

    #[test]
    fn ca_file() {
        let key =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICtQ/RYc3WhAmSKhGYkTZDTD1K+ATpny91Oy682hu+Dg ca";
        let cas = TrustedCas::parse(&format!("# ca\n\n{key}\nnot a key\n"), Path::new("f"));
        assert_eq!(cas.len(), 1);
        let fp = super::super::fingerprint(&PublicKey::from_openssh(key).unwrap());
        assert!(cas.trusts(&fp));
        assert!(!cas.trusts("SHA256:other"));
    }
}
