//! Standard Webhooks signatures. The signed content is
//! `{webhook-id}.{webhook-timestamp}.{body}`; the `webhook-signature` header
//! holds space-separated `version,base64` entries:
//!
//! - `v1a,` Ed25519 with the server's signing key (always; receivers verify
//!   with `server_key` from `collab-whoami`, no shared secret needed);
//! - `v1,` HMAC-SHA256 with the subscription's `whsec_…` secret (when set).

use base64::Engine as _;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use collab_record::sign::SigningKey;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The decoded key of a `whsec_<base64>` secret, or why it is not one.
pub fn secret_key(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret
        .strip_prefix("whsec_")
        .ok_or("a webhook secret starts with whsec_ (Standard Webhooks)")?;
    let key = B64
        .decode(encoded.trim())
        .map_err(|_| "the part after whsec_ must be base64")?;
    if !(16..=64).contains(&key.len()) {
        return Err("a webhook secret holds 16 to 64 bytes".into());
    }
    Ok(key)
}

/// The three Standard Webhooks headers for one delivery.
pub fn headers(
    message_id: &str,
    timestamp: i64,
    body: &[u8],
    server_key: &SigningKey,
    secret: Option<&str>,
) -> [(&'static str, String); 3] {
    let mut signed = format!("{message_id}.{timestamp}.").into_bytes();
    signed.extend_from_slice(body);
    let mut signatures = Vec::new();
    if let Some(key) = secret.and_then(|s| secret_key(s).ok()) {
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
        mac.update(&signed);
        signatures.push(format!("v1,{}", B64.encode(mac.finalize().into_bytes())));
    }
    signatures.push(format!("v1a,{}", B64.encode(server_key.sign(&signed))));
    [
        ("webhook-id", message_id.to_string()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", signatures.join(" ")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_signatures_verify() {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::generate(&dir.path().join("k"), "k", false).unwrap();
        let secret = format!("whsec_{}", B64.encode([7u8; 32]));
        let [id, ts, sig] = headers("wh1-5", 1_700_000_000, b"{}", &key, Some(&secret));
        assert_eq!((id.1.as_str(), ts.1.as_str()), ("wh1-5", "1700000000"));
        let (v1, v1a) = sig.1.split_once(' ').unwrap();
        let mut mac = Hmac::<Sha256>::new_from_slice(&[7u8; 32]).unwrap();
        mac.update(b"wh1-5.1700000000.{}");
        assert_eq!(
            v1,
            format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
        );
        let sig = B64.decode(v1a.strip_prefix("v1a,").unwrap()).unwrap();
        let verifying = collab_record::sign::verifying_key(&key.public_key_line()).unwrap();
        let text = collab_record::sign::encode_signature(&sig.try_into().unwrap());
        collab_record::sign::verify_with(&verifying, b"wh1-5.1700000000.{}", text.as_bytes())
            .unwrap();
        // Without a secret: only v1a.
        let [_, _, sig] = headers("x", 1, b"", &key, None);
        assert!(sig.1.starts_with("v1a,") && !sig.1.contains(' '));
        assert!(secret_key("nope").is_err() && secret_key("whsec_AAAA").is_err());
    }
}
