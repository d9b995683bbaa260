//! Webhook signing secrets at rest: sealed (ChaCha20-Poly1305) with a key
//! kept outside the database, in `{state_dir}/webhook-secrets.key` (0600,
//! created at first start). A copy of `collab.db` (or a PostgreSQL dump)
//! alone no longer holds the secrets. A stored value is
//! `sealed1:<base64 of nonce ‖ ciphertext ‖ tag>`; one without the prefix
//! was written by an older server and is sealed at the next start.
//!
//! Every node of a PostgreSQL cluster needs the same key file (copy it);
//! a node with another key cannot sign, and says so in its log.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use anyhow::{bail, Context as _};
use base64::Engine as _;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};

const PREFIX: &str = "sealed1:";
/// Binds a sealed value to its use.
const AAD: &[u8] = b"git-collab webhook secret v1";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The key that seals and opens stored webhook secrets.
pub struct SecretBox {
    key: LessSafeKey,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox")
    }
}

impl SecretBox {
    /// Read the key file (64 hex digits), or create it (0600) if missing.
    pub fn load_or_create(path: &Path) -> anyhow::Result<SecretBox> {
        let hex_key = match std::fs::read_to_string(path) {
            Ok(text) => text.trim().to_string(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let fresh = hex::encode(rand::random::<[u8; 32]>());
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .with_context(|| format!("creating {}", path.display()))?;
                file.write_all(format!("{fresh}\n").as_bytes())?;
                file.sync_all()?;
                tracing::info!("generated the webhook secrets key {}", path.display());
                fresh
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let bytes = hex::decode(&hex_key).ok().filter(|b| b.len() == 32);
        let Some(bytes) = bytes else {
            bail!("{}: not a key (64 hex digits)", path.display());
        };
        Ok(SecretBox::from_bytes(&bytes))
    }

    fn from_bytes(bytes: &[u8]) -> SecretBox {
        let key = UnboundKey::new(&CHACHA20_POLY1305, bytes).expect("a 32-byte key");
        SecretBox {
            key: LessSafeKey::new(key),
        }
    }

    /// Whether `stored` is sealed (rather than written by an older server).
    pub fn is_sealed(stored: &str) -> bool {
        stored.starts_with(PREFIX)
    }

    /// Seal `plain` for storage (a fresh random nonce each time).
    pub fn seal(&self, plain: &str) -> String {
        self.seal_for(AAD, plain)
    }

    /// The secret `stored` holds: opened if sealed, as is if an older server
    /// wrote it in plain text.
    pub fn open(&self, stored: &str) -> Result<String, String> {
        self.open_for(AAD, stored)
    }

    /// Seal `plain` bound to the use `aad` (another use's value does not
    /// open with it): mirror credentials use their own.
    pub fn seal_for(&self, aad: &'static [u8], plain: &str) -> String {
        let nonce_bytes = rand::random::<[u8; NONCE_LEN]>();
        let mut data = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce_bytes),
                Aad::from(aad),
                &mut data,
            )
            .expect("sealing cannot fail for small inputs");
        let mut out = nonce_bytes.to_vec();
        out.extend_from_slice(&data);
        format!("{PREFIX}{}", B64.encode(out))
    }

    /// Open what [`seal_for`](Self::seal_for) sealed for `aad`; a value
    /// without the prefix is returned as it is.
    pub fn open_for(&self, aad: &'static [u8], stored: &str) -> Result<String, String> {
        let Some(b64) = stored.strip_prefix(PREFIX) else {
            return Ok(stored.to_string());
        };
        let bytes = B64
            .decode(b64)
            .map_err(|_| "a sealed webhook secret is not base64".to_string())?;
        if bytes.len() < NONCE_LEN {
            return Err("a sealed webhook secret is truncated".into());
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| "bad nonce".to_string())?;
        let mut sealed = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(aad), &mut sealed)
            .map_err(|_| {
                "the webhook secret cannot be opened with webhook-secrets.key (another key?)"
                    .to_string()
            })?;
        String::from_utf8(plain.to_vec()).map_err(|_| "a webhook secret is not UTF-8".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_secrets_open_with_their_key_only() {
        let a = SecretBox::from_bytes(&[7; 32]);
        let b = SecretBox::from_bytes(&[8; 32]);
        let secret = "whsec_c2VjcmV0c2VjcmV0c2VjcmV0";
        let sealed = a.seal(secret);
        assert!(SecretBox::is_sealed(&sealed));
        assert!(!sealed.contains(secret));
        assert_ne!(sealed, a.seal(secret), "a fresh nonce each time");
        assert_eq!(a.open(&sealed).unwrap(), secret);
        assert!(b.open(&sealed).is_err());
        // A tampered value does not open.
        let mut bytes = B64.decode(sealed.strip_prefix(PREFIX).unwrap()).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(a.open(&format!("{PREFIX}{}", B64.encode(bytes))).is_err());
        // Plain text from an older server reads as it is.
        assert_eq!(a.open(secret).unwrap(), secret);
    }

    #[test]
    fn the_key_file_is_created_owner_only_and_read_back() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("webhook-secrets.key");
        let sealed = SecretBox::load_or_create(&path).unwrap().seal("x");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            SecretBox::load_or_create(&path)
                .unwrap()
                .open(&sealed)
                .unwrap(),
            "x"
        );
        std::fs::write(&path, "short\n").unwrap();
        assert!(SecretBox::load_or_create(&path).is_err());
    }
}
