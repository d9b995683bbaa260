//! First-start and every-start preparation of the state directory: the
//! directories, the SSH host key (generated once), the authorized_keys file
//! (created empty), `initial_admin_keys` merged into it and marked admin, and
//! the server hooks directory whose scripts run this binary (`hooks::HOOK_NAMES`).
//!
//! Nothing here serves requests; `serve::serve` calls `prepare` once.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

use anyhow::{bail, Context as _};
use russh::keys::ssh_key::certificate::CertType;
use russh::keys::ssh_key::{Certificate, LineEnding, PublicKey};
use russh::keys::{Algorithm, PrivateKey};

use crate::config::ServerConfig;
use crate::identity::{parse_authorized_line, ADMIN_OPTION};

/// What `prepare` hands to the server.
pub struct Prepared {
    pub host_key: PrivateKey,
    /// RSA and ECDSA host keys, when `ssh.legacy_host_keys` is on.
    pub legacy_host_keys: Vec<PrivateKey>,
    /// `ssh.host_certificate`, checked against the host keys.
    pub host_certificates: Vec<Certificate>,
}

impl Prepared {
    /// Every host key to serve, Ed25519 first.
    pub fn host_keys(&self) -> Vec<PrivateKey> {
        std::iter::once(self.host_key.clone())
            .chain(self.legacy_host_keys.iter().cloned())
            .collect()
    }
}

/// Create or check everything the server needs on disk.
pub fn prepare(config: &ServerConfig) -> anyhow::Result<Prepared> {
    // The state directory holds the keys and the database: created 0700
    // whatever the umask (an existing one is the operator's to set).
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&config.state_dir)
        .with_context(|| format!("creating {}", config.state_dir.display()))?;
    std::fs::create_dir_all(&config.repos_dir)
        .with_context(|| format!("creating {}", config.repos_dir.display()))?;
    let host_key = load_or_generate_host_key(&config.ssh.host_key)?;
    let mut legacy_host_keys = Vec::new();
    if config.ssh.legacy_host_keys {
        // Beside the Ed25519 key, named as OpenSSH names its own.
        let dir = config.ssh.host_key.parent().unwrap_or(&config.state_dir);
        for (file, algorithm) in [
            ("ssh_host_rsa_key", Algorithm::Rsa { hash: None }),
            (
                "ssh_host_ecdsa_key",
                Algorithm::Ecdsa {
                    curve: russh::keys::EcdsaCurve::NistP256,
                },
            ),
        ] {
            legacy_host_keys.push(load_or_generate_key(&dir.join(file), algorithm)?);
        }
    }
    ensure_authorized_keys(&config.ssh.authorized_keys)?;
    merge_admin_keys(&config.ssh.authorized_keys, &config.initial_admin_keys)?;
    write_hooks(&config.hooks_dir())?;
    let mut prepared = Prepared {
        host_key,
        legacy_host_keys,
        host_certificates: Vec::new(),
    };
    if let Some(path) = &config.ssh.host_certificate {
        let cert = load_host_certificate(path, &prepared.host_keys())?;
        prepared.host_certificates.push(cert);
    }
    Ok(prepared)
}

/// Read `ssh.host_certificate` and refuse to start with one that clients
/// would reject: not a host certificate, or not of one of our host keys.
/// (Its validity window and principals are the CA's business: an expired
/// one is logged, and clients fall back to the plain host key.)
pub fn load_host_certificate(path: &Path, host_keys: &[PrivateKey]) -> anyhow::Result<Certificate> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("ssh.host_certificate: cannot read {}", path.display()))?;
    let cert = Certificate::from_openssh(text.trim()).with_context(|| {
        format!(
            "ssh.host_certificate: {} is not an OpenSSH certificate",
            path.display()
        )
    })?;
    if cert.cert_type() != CertType::Host {
        bail!(
            "ssh.host_certificate: {} is a user certificate, not a host certificate",
            path.display()
        );
    }
    if !host_keys
        .iter()
        .any(|k| k.public_key().key_data() == cert.public_key())
    {
        bail!(
            "ssh.host_certificate: {} certifies another key, not ssh.host_key",
            path.display()
        );
    }
    let now = crate::identity::unix_now().max(0) as u64;
    if now < cert.valid_after() || now >= cert.valid_before() {
        tracing::warn!(
            "ssh.host_certificate: {} is outside its validity window; clients will not accept it",
            path.display()
        );
    }
    tracing::info!(
        "presenting host certificate {} (key id {:?}, serial {})",
        path.display(),
        cert.key_id(),
        cert.serial()
    );
    Ok(cert)
}

/// Read the Ed25519 host key, or generate it (mode 0600) on first start.
pub fn load_or_generate_host_key(path: &Path) -> anyhow::Result<PrivateKey> {
    load_or_generate_key(path, Algorithm::Ed25519)
}

/// Read a host key, or generate one of `algorithm` (mode 0600).
fn load_or_generate_key(path: &Path, algorithm: Algorithm) -> anyhow::Result<PrivateKey> {
    if path.exists() {
        return russh::keys::load_secret_key(path, None)
            .with_context(|| format!("ssh.host_key: cannot read {}", path.display()));
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let key = match algorithm {
        // 3072 bits, what ssh-keygen makes by default.
        Algorithm::Rsa { .. } => {
            russh::keys::ssh_key::private::RsaKeypair::random(&mut rand::rng(), 3072)
                .map(PrivateKey::from)
                .map_err(anyhow::Error::from)
        }
        other => PrivateKey::random(&mut rand::rng(), other).map_err(anyhow::Error::from),
    }
    .context("generating the host key")?;
    let pem = key
        .to_openssh(LineEnding::LF)
        .context("encoding the host key")?;
    write_new_file(path, pem.as_bytes(), 0o600)
        .with_context(|| format!("ssh.host_key: writing {}", path.display()))?;
    tracing::info!(
        "generated host key {} ({})",
        path.display(),
        key.public_key().fingerprint(russh::keys::HashAlg::Sha256)
    );
    Ok(key)
}

/// Write a file that must not exist yet, with `mode`, durably.
fn write_new_file(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Replace a file atomically (temp file beside it, then rename).
fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", rand::random::<u32>()));
    let result = write_new_file(&tmp, bytes, mode).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn ensure_authorized_keys(path: &Path) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    write_new_file(
        path,
        b"# git-collab-server: one OpenSSH public key per line.\n",
        0o600,
    )
    .with_context(|| format!("ssh.authorized_keys: creating {}", path.display()))
}

/// Merge `initial_admin_keys` into the authorized_keys file: a key already
/// there gains the admin option, a new one is appended with it. A line that
/// does not parse is an error that names it.
pub fn merge_admin_keys(path: &Path, admin_keys: &[String]) -> anyhow::Result<()> {
    let mut wanted: Vec<(PublicKey, String)> = Vec::new();
    for (i, entry) in admin_keys.iter().enumerate() {
        for line in entry.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let key = PublicKey::from_openssh(line).map_err(|e| {
                anyhow::anyhow!(
                    "initial_admin_keys[{i}]: {line:?} is not an OpenSSH public key line ({e})"
                )
            })?;
            wanted.push((key, line.to_string()));
        }
    }
    if wanted.is_empty() {
        return Ok(());
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("ssh.authorized_keys: reading {}", path.display()))?;
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut changed = false;
    for (key, line) in wanted {
        let fp = crate::identity::fingerprint(&key);
        let mut found = false;
        for existing in lines.iter_mut() {
            let Some(parsed) = parse_authorized_line(existing) else {
                continue;
            };
            if parsed.fingerprint != fp {
                continue;
            }
            found = true;
            if !parsed.admin {
                let rest = existing.trim()[parsed.options.len()..]
                    .trim_start()
                    .to_string();
                let options = if parsed.options.is_empty() {
                    ADMIN_OPTION.to_string()
                } else {
                    format!("{},{ADMIN_OPTION}", parsed.options)
                };
                *existing = format!("{options} {rest}");
                changed = true;
            }
        }
        if !found {
            lines.push(format!("{ADMIN_OPTION} {line}"));
            changed = true;
        }
    }
    if changed {
        let mode = std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0o600);
        let mut out = lines.join("\n");
        out.push('\n');
        replace_file(path, out.as_bytes(), mode)
            .with_context(|| format!("ssh.authorized_keys: writing {}", path.display()))?;
    }
    Ok(())
}

/// Write the server hooks. They are rewritten at every start so they always
/// run the binary that is serving.
pub fn write_hooks(hooks_dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(hooks_dir)
        .with_context(|| format!("creating {}", hooks_dir.display()))?;
    let exe = std::env::current_exe().context("locating the server binary")?;
    let Some(exe) = exe.to_str() else {
        bail!("the server binary path {} is not UTF-8", exe.display());
    };
    let quoted = format!("'{}'", exe.replace('\'', "'\\''"));
    for name in crate::hooks::HOOK_NAMES {
        let script = format!(
            "#!/bin/sh\n# Written by git-collab-server at start; edits are overwritten.\nexec {quoted} hook {name}\n"
        );
        let path = hooks_dir.join(name);
        replace_file(&path, script.as_bytes(), 0o755)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICtQ/RYc3WhAmSKhGYkTZDTD1K+ATpny91Oy682hu+Dg admin";
    const OTHER: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN3QmJ0vwcw0ie88/iXLtsBJjbfPedY+frkLSCrD/NGf bob";

    #[test]
    fn a_host_certificate_must_be_a_host_certificate_of_a_host_key() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let keygen = |args: &[&str]| {
            let out = std::process::Command::new("ssh-keygen")
                .args(args)
                .current_dir(d)
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {out:?}");
        };
        for name in ["ca", "host", "other"] {
            keygen(&["-q", "-t", "ed25519", "-N", "", "-f", name]);
        }
        keygen(&["-q", "-s", "ca", "-h", "-I", "h", "-n", "forge", "host.pub"]);
        std::fs::rename(d.join("host-cert.pub"), d.join("host-cert")).unwrap();
        keygen(&["-q", "-s", "ca", "-I", "u", "-n", "forge", "host.pub"]);
        std::fs::rename(d.join("host-cert.pub"), d.join("user-cert")).unwrap();
        keygen(&[
            "-q",
            "-s",
            "ca",
            "-h",
            "-I",
            "o",
            "-n",
            "forge",
            "other.pub",
        ]);
        let host = load_or_generate_host_key(&d.join("host")).unwrap();
        let keys = [host];
        let cert = load_host_certificate(&d.join("host-cert"), &keys).unwrap();
        assert_eq!(cert.key_id(), "h");
        let err = |file: &str| {
            format!(
                "{:#}",
                load_host_certificate(&d.join(file), &keys).unwrap_err()
            )
        };
        assert!(err("user-cert").contains("not a host certificate"));
        assert!(err("other-cert.pub").contains("another key"));
        assert!(err("host.pub").contains("not an OpenSSH certificate"));
        assert!(err("missing").contains("cannot read"));
    }

    #[test]
    fn prepare_creates_state_and_keeps_host_key() {
        let tmp = tempfile::tempdir().unwrap();
        let config = ServerConfig::with_state_dir(tmp.path().join("state"));
        let first = prepare(&config).unwrap();
        let second = prepare(&config).unwrap();
        assert_eq!(
            first.host_key.public_key().key_data(),
            second.host_key.public_key().key_data()
        );
        let mode = std::fs::metadata(&config.ssh.host_key)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(config.ssh.authorized_keys.is_file());
        assert!(config.hooks_dir().join("pre-receive").is_file());
        assert!(config.repos_dir.is_dir());
    }

    #[test]
    fn admin_keys_are_merged_and_marked() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("authorized_keys");
        std::fs::write(&path, format!("{OTHER}\n{KEY}\n")).unwrap();
        merge_admin_keys(&path, &[KEY.to_string()]).unwrap();
        merge_admin_keys(&path, &[KEY.to_string(), OTHER.to_string()]).unwrap();
        let (keys, bad) =
            crate::identity::parse_authorized_keys(&std::fs::read_to_string(&path).unwrap());
        assert!(bad.is_empty());
        assert_eq!(keys.len(), 2);
        assert!(keys.values().all(|k| k.usable.iter().all(|l| l.admin())));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");

        let err = merge_admin_keys(&path, &["ssh-ed25519 garbage".into()]).unwrap_err();
        assert!(err.to_string().contains("initial_admin_keys[0]"), "{err}");
    }
}
