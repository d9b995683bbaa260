//! The server's own Ed25519 signing key, `{state_dir}/collab_signing_key`
//! (OpenSSH format, mode 0600, generated on first start). It is the one key
//! the server signs with: webhook deliveries (`v1a,` signatures, see
//! `webhooks::sign`) and anything else the server vouches for. Its public
//! half is published as `server_key` by `collab-whoami`, so receivers can
//! verify without a shared secret. Distinct from the SSH host key, which
//! only authenticates the transport.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use collab_record::sign::SigningKey;

/// Load the key at `path`, or generate it there when it does not exist.
pub fn load_or_generate(path: &Path) -> anyhow::Result<Arc<SigningKey>> {
    let key = if path.exists() {
        SigningKey::load(path).with_context(|| format!("server signing key {}", path.display()))?
    } else {
        let key = SigningKey::generate(path, "git-collab-server", false)
            .with_context(|| format!("generating server signing key {}", path.display()))?;
        tracing::info!(
            "generated server signing key {} ({})",
            path.display(),
            key.fingerprint()
        );
        key
    };
    Ok(Arc::new(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_once_then_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("collab_signing_key");
        let first = load_or_generate(&path).unwrap();
        let second = load_or_generate(&path).unwrap();
        assert_eq!(first.public_key_line(), second.public_key_line());
        let sig = second.sign(b"hello");
        let key = collab_record::sign::verifying_key(&first.public_key_line()).unwrap();
        let text = collab_record::sign::encode_signature(&sig);
        collab_record::sign::verify_with(&key, b"hello", text.as_bytes()).unwrap();
    }
}
