//! The one spelling of a key's fingerprint, shared by the authorized keys
//! and the certificate checks (`certs`).

use russh::keys::ssh_key::PublicKey;
use russh::keys::HashAlg;

/// The SHA256 fingerprint of a key: `SHA256:<base64, no padding>`.
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}
