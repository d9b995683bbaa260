//! Ed25519 signing keys in OpenSSH format: where the key lives, generating
//! it, signing event bytes and verifying a signature against an author's
//! public key line. `event.sig` holds the 64-byte raw Ed25519 signature of
//! the exact `event.json` bytes, as standard base64 (with padding) and a
//! trailing newline.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use ed25519_dalek::{Signer as _, Verifier as _};
use ssh_key::{Algorithm, HashAlg, LineEnding, PrivateKey, PublicKey};

use crate::error::{Error, Result};

/// Git config key naming the signing key file.
pub const SIGNING_KEY_CONFIG: &str = "collab.signingKey";

/// A loaded Ed25519 signing key.
pub struct SigningKey {
    secret: ed25519_dalek::SigningKey,
    public: PublicKey,
    path: PathBuf,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("path", &self.path)
            .field("public", &self.public_key_line())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Reads an unencrypted Ed25519 private key in OpenSSH format.
    pub fn load(path: &Path) -> Result<SigningKey> {
        let key_err = |reason: String| Error::Key {
            path: path.to_path_buf(),
            reason,
        };
        let text = fs::read_to_string(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                key_err("not found (run `git-collab key generate`)".into())
            }
            _ => key_err(e.to_string()),
        })?;
        let private = PrivateKey::from_openssh(text.trim_start())
            .map_err(|e| key_err(format!("not an OpenSSH private key ({e})")))?;
        if private.is_encrypted() {
            return Err(key_err(
                "is encrypted; git-collab needs an unencrypted key".into(),
            ));
        }
        Self::from_private(&private, path)
    }

    fn from_private(private: &PrivateKey, path: &Path) -> Result<SigningKey> {
        let pair = private.key_data().ed25519().ok_or_else(|| Error::Key {
            path: path.to_path_buf(),
            reason: format!("is {}, not ssh-ed25519", private.algorithm()),
        })?;
        Ok(SigningKey {
            secret: ed25519_dalek::SigningKey::from_bytes(&pair.private.to_bytes()),
            public: private.public_key().clone(),
            path: path.to_path_buf(),
        })
    }

    /// Generates a new key and writes it to `path` (mode 0600) and
    /// `path.pub`. Refuses to replace an existing key unless `force`.
    pub fn generate(path: &Path, comment: &str, force: bool) -> Result<SigningKey> {
        let key_err = |reason: String| Error::Key {
            path: path.to_path_buf(),
            reason,
        };
        if !force && path.exists() {
            return Err(key_err("already exists (use --force to replace it)".into()));
        }
        let mut private = PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519)
            .map_err(|e| key_err(e.to_string()))?;
        private.set_comment(comment);
        let pem = private
            .to_openssh(LineEnding::LF)
            .map_err(|e| key_err(e.to_string()))?;
        let public_line = private
            .public_key()
            .to_openssh()
            .map_err(|e| key_err(e.to_string()))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            create_private_dir(dir)?;
        }
        write_private_file(path, pem.as_bytes())?;
        let pub_path = public_path(path);
        fs::write(&pub_path, format!("{public_line}\n")).map_err(|e| Error::io(&pub_path, e))?;
        Self::from_private(&private, path)
    }

    /// The file this key was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `ssh-ed25519 AAAA...` without a comment: the `author.key` of events.
    pub fn public_key_line(&self) -> String {
        let mut public = self.public.clone();
        public.set_comment("");
        public.to_openssh().expect("an Ed25519 public key encodes")
    }

    /// The comment stored with the key (may be empty).
    pub fn comment(&self) -> String {
        self.public.comment().to_string()
    }

    /// `SHA256:...`, as `ssh-keygen -lf` prints it.
    pub fn fingerprint(&self) -> String {
        self.public.fingerprint(HashAlg::Sha256).to_string()
    }

    /// Signs `message`, returning the raw 64-byte signature.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.secret.sign(message).to_bytes()
    }
}

/// Why a signature did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("author key is not an OpenSSH public key")]
    BadKey,
    #[error("author key is not ssh-ed25519")]
    NotEd25519,
    #[error("event.sig is not a base64 Ed25519 signature")]
    Malformed,
    #[error("signature does not match event.json and the author key")]
    Mismatch,
}

/// Parses an OpenSSH public key line (`ssh-ed25519 AAAA... [comment]`).
pub fn parse_public_key(line: &str) -> Result<PublicKey> {
    PublicKey::from_openssh(line.trim()).map_err(|e| Error::PublicKey(format!("{e}")))
}

/// The `SHA256:` fingerprint of a public key.
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// Verifies `event.sig` contents `sig_text` over `message` for the public
/// key line `key_line`.
pub fn verify(key_line: &str, message: &[u8], sig_text: &[u8]) -> Result<(), VerifyError> {
    verify_with(&verifying_key(key_line)?, message, sig_text)
}

/// Parses an author key line into an Ed25519 verifying key (worth caching:
/// decoding the curve point is a good part of a verification's cost).
pub fn verifying_key(key_line: &str) -> Result<ed25519_dalek::VerifyingKey, VerifyError> {
    let key = PublicKey::from_openssh(key_line).map_err(|_| VerifyError::BadKey)?;
    let public = key.key_data().ed25519().ok_or(VerifyError::NotEd25519)?;
    ed25519_dalek::VerifyingKey::from_bytes(&public.0).map_err(|_| VerifyError::BadKey)
}

/// Verifies `event.sig` contents `sig_text` over `message` with `key`.
pub fn verify_with(
    key: &ed25519_dalek::VerifyingKey,
    message: &[u8],
    sig_text: &[u8],
) -> Result<(), VerifyError> {
    let sig = decode_signature(sig_text).ok_or(VerifyError::Malformed)?;
    key.verify(message, &ed25519_dalek::Signature::from_bytes(&sig))
        .map_err(|_| VerifyError::Mismatch)
}

/// The text stored in `event.sig`: base64 of the raw signature plus `\n`.
pub fn encode_signature(sig: &[u8; 64]) -> String {
    format!(
        "{}\n",
        base64::engine::general_purpose::STANDARD.encode(sig)
    )
}

/// Reads `event.sig` contents; trailing whitespace is ignored.
pub fn decode_signature(text: &[u8]) -> Option<[u8; 64]> {
    let trimmed = text.trim_ascii_end();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(trimmed)
        .ok()?;
    bytes.try_into().ok()
}

/// A value given to git on its command line (`git -c key=value collab …`):
/// git hands those to the commands it runs in `GIT_CONFIG_PARAMETERS`
/// (`'key'='value' …`, shell-quoted) and `GIT_CONFIG_COUNT` /
/// `GIT_CONFIG_KEY_<n>` / `GIT_CONFIG_VALUE_<n>`, which libgit2 does not
/// read. Section and variable names compare case-insensitively; the last
/// setting wins, as in git.
pub fn command_line_config(key: &str) -> Option<String> {
    let mut found = None;
    if let Ok(params) = std::env::var("GIT_CONFIG_PARAMETERS") {
        for (k, v) in parse_config_parameters(&params) {
            if k.eq_ignore_ascii_case(key) {
                found = v;
            }
        }
    }
    let count: usize = std::env::var("GIT_CONFIG_COUNT")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    for i in 0..count.min(1000) {
        let k = std::env::var(format!("GIT_CONFIG_KEY_{i}")).unwrap_or_default();
        if k.eq_ignore_ascii_case(key) {
            found = std::env::var(format!("GIT_CONFIG_VALUE_{i}")).ok();
        }
    }
    found
}

/// Split `'a.b'='v' 'c.d'` into pairs (a value may be absent).
fn parse_config_parameters(text: &str) -> Vec<(String, Option<String>)> {
    // Each item is a single-quoted word, `'\''` escaping a quote, then
    // optionally `=` and another quoted word.
    fn quoted(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<String> {
        let mut out = String::new();
        if chars.next()? != '\'' {
            return None;
        }
        loop {
            match chars.next()? {
                '\'' => {
                    // `'\''`: a literal quote inside the word.
                    if chars.peek() == Some(&'\\') {
                        chars.next();
                        if chars.next()? != '\'' || chars.next()? != '\'' {
                            return None;
                        }
                        out.push('\'');
                    } else {
                        return Some(out);
                    }
                }
                c => out.push(c),
            }
        }
    }
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let Some(word) = quoted(&mut chars) else {
            break;
        };
        if chars.peek() == Some(&'=') {
            chars.next();
            pairs.push((word, quoted(&mut chars)));
        } else if let Some((k, v)) = word.split_once('=') {
            // Older git: `'key=value'` in one word.
            pairs.push((k.to_string(), Some(v.to_string())));
        } else {
            pairs.push((word, None));
        }
    }
    pairs
}

fn expand_tilde(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// `$XDG_CONFIG_HOME/git-collab/signing_key`, falling back to
/// `~/.config/git-collab/signing_key`.
pub fn default_key_path() -> Option<PathBuf> {
    let config_home = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config_home.join("git-collab").join("signing_key"))
}

/// The signing key path: `git -c collab.signingKey=PATH collab …` if
/// given, else git config `collab.signingKey` (with `~` expansion), else
/// [`default_key_path`].
pub fn key_path(config: &git2::Config) -> Result<PathBuf> {
    if let Some(path) = command_line_config(SIGNING_KEY_CONFIG) {
        return Ok(expand_tilde(&path));
    }
    match config.get_path(SIGNING_KEY_CONFIG) {
        Ok(path) => Ok(path),
        Err(e) if e.code() == git2::ErrorCode::NotFound => default_key_path().ok_or_else(|| {
            Error::Invalid(
                "cannot locate the signing key: set HOME, XDG_CONFIG_HOME or collab.signingKey"
                    .into(),
            )
        }),
        Err(e) => Err(e.into()),
    }
}

fn public_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

fn create_private_dir(dir: &Path) -> Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|e| Error::io(dir, e))
}

/// Writes the private key through a temporary file in the same directory,
/// created with mode 0600, then renames it into place: a failure never
/// leaves a truncated key behind.
fn write_private_file(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("key"),
        std::process::id()
    ));
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let result = options
        .open(&tmp)
        .and_then(|mut f| f.write_all(contents).and_then(|_| f.sync_all()))
        .and_then(|_| fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(path, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_git_config_parameters() {
        assert_eq!(
            parse_config_parameters("'collab.signingkey'='/k/a b' 'core.x' 'old.style=v'"),
            vec![
                ("collab.signingkey".to_string(), Some("/k/a b".to_string())),
                ("core.x".to_string(), None),
                ("old.style".to_string(), Some("v".to_string())),
            ]
        );
        assert_eq!(
            parse_config_parameters("'a.b'='it'\\''s'"),
            vec![("a.b".to_string(), Some("it's".to_string()))]
        );
        assert_eq!(parse_config_parameters("garbage"), vec![]);
    }

    use super::*;

    fn key(dir: &Path) -> SigningKey {
        SigningKey::generate(&dir.join("k"), "test", false).unwrap()
    }

    #[test]
    fn sign_then_verify() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path());
        let sig = encode_signature(&k.sign(b"hello"));
        assert_eq!(
            verify(&k.public_key_line(), b"hello", sig.as_bytes()),
            Ok(())
        );
    }

    #[test]
    fn verify_rejects_other_bytes_other_key_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path());
        let other = SigningKey::generate(&dir.path().join("o"), "other", false).unwrap();
        let sig = encode_signature(&k.sign(b"hello"));
        assert_eq!(
            verify(&k.public_key_line(), b"hellO", sig.as_bytes()),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&other.public_key_line(), b"hello", sig.as_bytes()),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&k.public_key_line(), b"hello", &sig.as_bytes()[..40]),
            Err(VerifyError::Malformed)
        );
        assert_eq!(
            verify("ssh-ed25519 nope", b"hello", sig.as_bytes()),
            Err(VerifyError::BadKey)
        );
    }

    #[test]
    fn generated_key_reloads_with_mode_0600_and_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/signing_key");
        let k = SigningKey::generate(&path, "me", false).unwrap();
        let again = SigningKey::load(&path).unwrap();
        assert_eq!(k.public_key_line(), again.public_key_line());
        assert_eq!(again.comment(), "me");
        assert!(k.public_key_line().starts_with("ssh-ed25519 "));
        assert_eq!(k.public_key_line().split(' ').count(), 2, "no comment");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let err = SigningKey::generate(&path, "me", false).unwrap_err();
        assert!(err.to_string().contains("--force"), "{err}");
        let replaced = SigningKey::generate(&path, "me", true).unwrap();
        assert_ne!(replaced.public_key_line(), k.public_key_line());
        let pub_line = fs::read_to_string(public_path(&path)).unwrap();
        assert!(pub_line.starts_with(&replaced.public_key_line()));
    }
}
