//! `ssh.revoked_keys`: what OpenSSH's `RevokedKeys` takes, either a key
//! revocation list (KRL, the binary format `ssh-keygen -k` writes,
//! OpenSSH's PROTOCOL.krl) or a text file of public keys and certificates,
//! one a line.
//!
//! ssh-key does not read KRLs, so this module does, for every section
//! `ssh-keygen -k` emits: certificate serial lists, ranges and bitmaps and
//! key ids (per CA, or for any CA), explicit keys, and SHA1 and SHA256
//! fingerprints of keys. Parsing is bounded by the input: every length is
//! checked against the bytes left, a bitmap is kept as given (never
//! expanded), and nothing is allocated that the input did not hold.
//! Anything the format allows that we do not understand (a signature
//! section, a critical extension, an unknown section) refuses the whole
//! file, and a refused file revokes everything (fail closed, as sshd does).

use std::collections::{BTreeSet, HashSet};

use russh::keys::ssh_key::public::KeyData;
use russh::keys::ssh_key::{Certificate, PublicKey};

/// The first eight bytes of every KRL.
pub const MAGIC: &[u8; 8] = b"SSHKRL\n\0";

const FORMAT_VERSION: u32 = 1;

const SECTION_CERTIFICATES: u8 = 1;
const SECTION_EXPLICIT_KEY: u8 = 2;
const SECTION_FINGERPRINT_SHA1: u8 = 3;
const SECTION_SIGNATURE: u8 = 4;
const SECTION_FINGERPRINT_SHA256: u8 = 5;
const SECTION_EXTENSION: u8 = 255;

const CERT_SERIAL_LIST: u8 = 0x20;
const CERT_SERIAL_RANGE: u8 = 0x21;
const CERT_SERIAL_BITMAP: u8 = 0x22;
const CERT_KEY_ID: u8 = 0x23;
const CERT_EXTENSION: u8 = 0x39;

/// Revoked certificates of one CA (`ca` is its key blob), or of any CA
/// (`ca` is `None`: the KRL gave an empty CA key).
#[derive(Debug, Default, Clone)]
struct CaRevocations {
    ca: Option<Vec<u8>>,
    serials: BTreeSet<u64>,
    /// Inclusive `(min, max)`.
    ranges: Vec<(u64, u64)>,
    /// `(offset, bitmap)`: bit N (from the least significant bit of the
    /// big-endian bytes) revokes serial `offset + N`.
    bitmaps: Vec<(u64, Vec<u8>)>,
    key_ids: HashSet<String>,
}

impl CaRevocations {
    fn revokes_serial(&self, serial: u64) -> bool {
        if self.serials.contains(&serial) {
            return true;
        }
        if self
            .ranges
            .iter()
            .any(|&(lo, hi)| lo <= serial && serial <= hi)
        {
            return true;
        }
        self.bitmaps.iter().any(|(offset, bits)| {
            let Some(n) = serial.checked_sub(*offset) else {
                return false;
            };
            let byte = n / 8;
            if byte >= bits.len() as u64 {
                return false;
            }
            let b = bits[bits.len() - 1 - byte as usize];
            b & (1 << (n % 8)) != 0
        })
    }
}

/// What `ssh.revoked_keys` revokes.
#[derive(Debug, Default, Clone)]
pub struct Revoked {
    /// Key blobs (the SSH wire form of plain keys).
    keys: HashSet<Vec<u8>>,
    sha1: HashSet<Vec<u8>>,
    sha256: HashSet<Vec<u8>>,
    certs: Vec<CaRevocations>,
}

/// Why a revocation file was refused (the whole file then revokes
/// everything).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KrlError(pub String);

fn bad(msg: impl Into<String>) -> KrlError {
    KrlError(msg.into())
}

/// A cursor over SSH wire data; every read checks the bytes left.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], KrlError> {
        if self.0.len() < n {
            return Err(bad(format!("truncated {what}")));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &str) -> Result<u8, KrlError> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, KrlError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, KrlError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// `string`: a u32 length, then that many bytes (bounded by what is
    /// left, so a hostile length cannot make us allocate).
    fn string(&mut self, what: &str) -> Result<&'a [u8], KrlError> {
        let len = self.u32(what)? as usize;
        self.take(len, what)
    }
}

/// `(name, is_critical)` of an extension (section or subsection); the
/// contents are skipped.
fn extension<'a>(data: &'a [u8], what: &str) -> Result<(&'a [u8], bool), KrlError> {
    let mut r = Reader(data);
    let name = r.string(what)?;
    let critical = r.u8(what)? != 0;
    r.string(what)?;
    if !r.is_empty() {
        return Err(bad(format!("{what}: trailing bytes")));
    }
    Ok((name, critical))
}

impl Revoked {
    /// Whether `data` is a KRL (by its magic), not a text list.
    pub fn is_krl(data: &[u8]) -> bool {
        data.starts_with(MAGIC)
    }

    /// Read a revocation file: a KRL, or a text list of keys and
    /// certificates (`#` comments and blank lines allowed; any other line
    /// refuses the file, since a revocation that silently did not apply is
    /// worse than none).
    pub fn parse(data: &[u8]) -> Result<Revoked, KrlError> {
        if Revoked::is_krl(data) {
            return Revoked::parse_krl(data);
        }
        let text = std::str::from_utf8(data)
            .map_err(|_| bad("neither a KRL nor a text list of keys (not UTF-8)"))?;
        let mut revoked = Revoked::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // A certificate line revokes its key, and so every certificate
            // of that key (what sshd does with a plain list).
            let key = match Certificate::from_openssh(line) {
                Ok(cert) => cert.public_key().clone(),
                Err(_) => PublicKey::from_openssh(line)
                    .map_err(|_| {
                        bad(format!(
                            "line {}: not an OpenSSH public key or certificate",
                            n + 1
                        ))
                    })?
                    .key_data()
                    .clone(),
            };
            revoked.keys.insert(key_blob(&key));
        }
        Ok(revoked)
    }

    /// Read a KRL (PROTOCOL.krl).
    pub fn parse_krl(data: &[u8]) -> Result<Revoked, KrlError> {
        let mut r = Reader(data);
        if r.take(8, "magic")? != MAGIC {
            return Err(bad("not a KRL"));
        }
        let version = r.u32("format version")?;
        if version != FORMAT_VERSION {
            return Err(bad(format!(
                "KRL format version {version} is not supported"
            )));
        }
        r.u64("krl_version")?;
        r.u64("generated_date")?;
        r.u64("flags")?;
        r.string("reserved")?;
        r.string("comment")?;
        let mut revoked = Revoked::default();
        while !r.is_empty() {
            let kind = r.u8("section type")?;
            match kind {
                SECTION_CERTIFICATES => {
                    let data = r.string("certificate section")?;
                    revoked.certs.push(parse_cert_section(data)?);
                }
                SECTION_EXPLICIT_KEY => {
                    let mut s = Reader(r.string("explicit key section")?);
                    while !s.is_empty() {
                        // Compared as bytes: a key of a type we cannot
                        // read is still revoked.
                        let blob = s.string("explicit key")?;
                        if blob.is_empty() {
                            return Err(bad("explicit key section: an empty key"));
                        }
                        revoked.keys.insert(blob.to_vec());
                    }
                }
                SECTION_FINGERPRINT_SHA1 | SECTION_FINGERPRINT_SHA256 => {
                    let (len, set) = if kind == SECTION_FINGERPRINT_SHA1 {
                        (20, &mut revoked.sha1)
                    } else {
                        (32, &mut revoked.sha256)
                    };
                    let mut s = Reader(r.string("fingerprint section")?);
                    while !s.is_empty() {
                        let hash = s.string("fingerprint")?;
                        if hash.len() != len {
                            return Err(bad("fingerprint section: a hash of the wrong length"));
                        }
                        set.insert(hash.to_vec());
                    }
                }
                SECTION_SIGNATURE => {
                    // OpenSSH >= 9.4 refuses these too.
                    return Err(bad("KRL signatures are not supported"));
                }
                SECTION_EXTENSION => {
                    let (name, critical) = extension(r.string("extension")?, "extension")?;
                    if critical {
                        return Err(bad(format!(
                            "unsupported critical KRL extension {:?}",
                            String::from_utf8_lossy(name)
                        )));
                    }
                }
                other => return Err(bad(format!("unknown KRL section type {other}"))),
            }
        }
        Ok(revoked)
    }

    /// Whether the plain key `key` is revoked (explicitly or by hash).
    pub fn revokes_key(&self, key: &KeyData) -> bool {
        let blob = key_blob(key);
        self.keys.contains(&blob)
            || (!self.sha256.is_empty() && self.sha256.contains(&sha256(&blob)))
            || (!self.sha1.is_empty() && self.sha1.contains(&sha1(&blob)))
    }

    /// Why `cert` is revoked, if it is: its key, its CA's key, its serial
    /// or its key id (for its CA or for any CA).
    pub fn revokes_certificate(&self, cert: &Certificate) -> Option<&'static str> {
        if self.revokes_key(cert.public_key()) {
            return Some("its key is revoked");
        }
        if self.revokes_key(cert.signature_key()) {
            return Some("its CA key is revoked");
        }
        let ca = key_blob(cert.signature_key());
        for section in &self.certs {
            if section.ca.as_ref().is_some_and(|c| *c != ca) {
                continue;
            }
            // As in sshd: serial 0 means "no serial" and cannot be revoked
            // by serial, and serials only count with a named CA.
            if section.ca.is_some() && cert.serial() != 0 && section.revokes_serial(cert.serial()) {
                return Some("its serial is revoked");
            }
            if section.key_ids.contains(cert.key_id()) {
                return Some("its key id is revoked");
            }
        }
        None
    }

    /// Entries of every kind, for the log line after a (re)read.
    pub fn summary(&self) -> String {
        let serials: usize = self
            .certs
            .iter()
            .map(|c| c.serials.len() + c.ranges.len() + c.bitmaps.len())
            .sum();
        let ids: usize = self.certs.iter().map(|c| c.key_ids.len()).sum();
        format!(
            "{} keys, {} fingerprints, {} serial entries, {} key ids",
            self.keys.len(),
            self.sha1.len() + self.sha256.len(),
            serials,
            ids
        )
    }
}

fn parse_cert_section(data: &[u8]) -> Result<CaRevocations, KrlError> {
    let mut r = Reader(data);
    let ca = r.string("certificate section CA key")?;
    r.string("certificate section reserved")?;
    // Compared as bytes with the certificate's CA; empty = any CA.
    let ca = (!ca.is_empty()).then(|| ca.to_vec());
    let mut out = CaRevocations {
        ca,
        ..Default::default()
    };
    while !r.is_empty() {
        let kind = r.u8("certificate subsection type")?;
        let mut s = Reader(r.string("certificate subsection")?);
        match kind {
            CERT_SERIAL_LIST => {
                while !s.is_empty() {
                    out.serials.insert(s.u64("serial")?);
                }
            }
            CERT_SERIAL_RANGE => {
                let lo = s.u64("serial range")?;
                let hi = s.u64("serial range")?;
                if lo > hi || !s.is_empty() {
                    return Err(bad("certificate serial range: malformed"));
                }
                out.ranges.push((lo, hi));
            }
            CERT_SERIAL_BITMAP => {
                let offset = s.u64("serial bitmap offset")?;
                let bits = s.string("serial bitmap")?;
                if !s.is_empty() {
                    return Err(bad("certificate serial bitmap: trailing bytes"));
                }
                out.bitmaps.push((offset, bits.to_vec()));
            }
            CERT_KEY_ID => {
                while !s.is_empty() {
                    let id = s.string("key id")?;
                    let id = std::str::from_utf8(id)
                        .map_err(|_| bad("certificate key id: not UTF-8"))?;
                    out.key_ids.insert(id.to_string());
                }
            }
            CERT_EXTENSION => {
                let (name, critical) = extension(s.0, "certificate extension")?;
                if critical {
                    return Err(bad(format!(
                        "unsupported critical KRL certificate extension {:?}",
                        String::from_utf8_lossy(name)
                    )));
                }
            }
            other => {
                return Err(bad(format!(
                    "unknown KRL certificate subsection type {other:#x}"
                )))
            }
        }
    }
    Ok(out)
}

/// The SSH wire form of a plain key (what KRLs list and hash).
fn key_blob(key: &KeyData) -> Vec<u8> {
    PublicKey::new(key.clone(), "")
        .to_bytes()
        .unwrap_or_default()
}

fn sha256(data: &[u8]) -> Vec<u8> {
    use sha2::Digest as _;
    sha2::Sha256::digest(data).to_vec()
}

fn sha1(data: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, data)
        .as_ref()
        .to_vec()
}

// The KRL reader against OpenSSH itself: `ssh-keygen -k` writes the
// lists and `ssh-keygen -Q` is the oracle for what they revoke.
#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use proptest::prelude::*;

    use super::*;

    fn keygen(args: &[&str], dir: &Path) -> std::process::Output {
        let out = Command::new("ssh-keygen")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run ssh-keygen");
        out
    }

    fn ok(args: &[&str], dir: &Path) {
        let out = keygen(args, dir);
        assert!(
            out.status.success(),
            "ssh-keygen {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A CA and `n` user keys, each with a certificate of serial `serials[i]`
    /// and key id `id-<i>`.
    struct World {
        dir: tempfile::TempDir,
        certs: Vec<PathBuf>,
    }

    fn world(serials: &[u64]) -> World {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        ok(&["-q", "-t", "ed25519", "-N", "", "-f", "ca"], d);
        let mut certs = Vec::new();
        for (i, serial) in serials.iter().enumerate() {
            let name = format!("user{i}");
            ok(&["-q", "-t", "ed25519", "-N", "", "-f", &name], d);
            ok(
                &[
                    "-q",
                    "-s",
                    "ca",
                    "-I",
                    &format!("id-{i}"),
                    "-n",
                    "alice",
                    "-z",
                    &serial.to_string(),
                    &format!("{name}.pub"),
                ],
                d,
            );
            certs.push(d.join(format!("{name}-cert.pub")));
        }
        World { dir, certs }
    }

    fn cert(path: &Path) -> Certificate {
        Certificate::from_openssh(std::fs::read_to_string(path).unwrap().trim()).unwrap()
    }

    /// What `ssh-keygen -Q` says about `file` in the KRL `krl`.
    fn openssh_revokes(dir: &Path, krl: &str, file: &Path) -> bool {
        let out = keygen(&["-Q", "-f", krl, file.to_str().unwrap()], dir);
        // Exit 1 and "REVOKED" when revoked, 0 and "ok" otherwise.
        String::from_utf8_lossy(&out.stdout).contains("REVOKED")
    }

    fn read(dir: &Path, name: &str) -> Revoked {
        Revoked::parse(&std::fs::read(dir.join(name)).unwrap()).unwrap()
    }

    #[test]
    fn serial_lists_ranges_and_bitmaps_agree_with_openssh() {
        // Dense runs make ssh-keygen pick ranges and bitmaps, sparse ones lists.
        let serials = [1, 2, 3, 7, 64, 65, 66, 200, 1000, 1001, 5000, 70_000];
        let w = world(&serials);
        let d = w.dir.path();
        std::fs::write(
            d.join("spec"),
            "serial: 1-3\nserial: 64\nserial: 66\nserial: 130\nserial: 132\nserial: 134\nserial: 150-160\nserial: 195\nserial: 200\nserial: 999-1001\nserial: 70000\n",
        )
        .unwrap();
        ok(&["-q", "-k", "-f", "krl", "-s", "ca.pub", "spec"], d);
        let revoked = read(d, "krl");
        for path in &w.certs {
            let c = cert(path);
            assert_eq!(
                revoked.revokes_certificate(&c).is_some(),
                openssh_revokes(d, "krl", path),
                "serial {}",
                c.serial()
            );
        }
        assert!(revoked.revokes_certificate(&cert(&w.certs[0])).is_some());
        assert!(revoked.revokes_certificate(&cert(&w.certs[3])).is_none());
    }

    #[test]
    fn many_serials_use_bitmaps_and_still_agree() {
        let serials: Vec<u64> = (0..12).map(|i| 300 + i * 3).collect();
        let w = world(&serials);
        let d = w.dir.path();
        // Every other serial in a dense block: cheapest as a bitmap.
        let spec: String = (300..400)
            .step_by(2)
            .map(|s| format!("serial: {s}\n"))
            .collect();
        std::fs::write(d.join("spec"), spec).unwrap();
        ok(&["-q", "-k", "-f", "krl", "-s", "ca.pub", "spec"], d);
        let revoked = read(d, "krl");
        assert!(
            revoked.certs.iter().any(|c| !c.bitmaps.is_empty()),
            "expected ssh-keygen to write a bitmap: {revoked:?}"
        );
        let mut seen = (0, 0);
        for path in &w.certs {
            let c = cert(path);
            let ours = revoked.revokes_certificate(&c).is_some();
            assert_eq!(
                ours,
                openssh_revokes(d, "krl", path),
                "serial {}",
                c.serial()
            );
            if ours {
                seen.0 += 1
            } else {
                seen.1 += 1
            }
        }
        assert!(seen.0 > 0 && seen.1 > 0, "{seen:?}");
    }

    #[test]
    fn key_ids_keys_and_hashes() {
        let w = world(&[10, 11, 12, 13, 14]);
        let d = w.dir.path();
        let key1 = std::fs::read_to_string(d.join("user1.pub")).unwrap();
        let key2 = std::fs::read_to_string(d.join("user2.pub")).unwrap();
        let fp3 = String::from_utf8(keygen(&["-lf", "user3.pub"], d).stdout).unwrap();
        let fp3 = fp3.split_whitespace().nth(1).unwrap().to_string();
        let key4 = std::fs::read_to_string(d.join("user4.pub")).unwrap();
        std::fs::write(
            d.join("spec"),
            format!("id: id-0\nkey: {key1}hash: {fp3}\nsha1: {key4}"),
        )
        .unwrap();
        ok(&["-q", "-k", "-f", "krl", "-s", "ca.pub", "spec"], d);
        // A plain key given with -k (no spec) goes in as an explicit key / hash.
        ok(&["-q", "-k", "-f", "krl2", "user2.pub"], d);
        let revoked = read(d, "krl");
        let why: Vec<Option<&str>> = w
            .certs
            .iter()
            .map(|p| revoked.revokes_certificate(&cert(p)))
            .collect();
        assert_eq!(why[0], Some("its key id is revoked"));
        assert_eq!(why[1], Some("its key is revoked"));
        assert_eq!(why[2], None);
        assert_eq!(why[3], Some("its key is revoked"));
        assert_eq!(why[4], Some("its key is revoked"));
        assert!(!revoked.sha1.is_empty() && !revoked.sha256.is_empty());
        for p in &w.certs {
            assert_eq!(
                revoked.revokes_certificate(&cert(p)).is_some(),
                openssh_revokes(d, "krl", p)
            );
        }
        let revoked2 = read(d, "krl2");
        let k2 = PublicKey::from_openssh(key2.trim()).unwrap();
        assert!(revoked2.revokes_key(k2.key_data()));
        assert!(revoked2.revokes_certificate(&cert(&w.certs[2])).is_some());
        assert!(revoked2.revokes_certificate(&cert(&w.certs[1])).is_none());
    }

    #[test]
    fn a_revoked_ca_revokes_its_certificates_and_other_cas_are_untouched() {
        let w = world(&[5]);
        let d = w.dir.path();
        ok(&["-q", "-k", "-f", "krl", "ca.pub"], d);
        assert_eq!(
            read(d, "krl").revokes_certificate(&cert(&w.certs[0])),
            Some("its CA key is revoked")
        );
        // Serial 5 of another CA does not revoke serial 5 of ours.
        ok(&["-q", "-t", "ed25519", "-N", "", "-f", "ca2"], d);
        std::fs::write(d.join("spec"), "serial: 5\n").unwrap();
        ok(&["-q", "-k", "-f", "krl3", "-s", "ca2.pub", "spec"], d);
        assert!(read(d, "krl3")
            .revokes_certificate(&cert(&w.certs[0]))
            .is_none());
        assert!(!openssh_revokes(d, "krl3", &w.certs[0]));
    }

    #[test]
    fn text_lists_revoke_keys_and_the_keys_of_certificates() {
        let w = world(&[1, 2]);
        let d = w.dir.path();
        let cert0 = std::fs::read_to_string(&w.certs[0]).unwrap();
        let revoked = Revoked::parse(format!("# revoked\n\n{cert0}").as_bytes()).unwrap();
        assert!(revoked.revokes_certificate(&cert(&w.certs[0])).is_some());
        assert!(revoked.revokes_certificate(&cert(&w.certs[1])).is_none());
        let user0 = std::fs::read_to_string(d.join("user0.pub")).unwrap();
        let k0 = PublicKey::from_openssh(user0.trim()).unwrap();
        assert!(revoked.revokes_key(k0.key_data()));
        let err = Revoked::parse(b"ssh-ed25519 garbage\n").unwrap_err();
        assert!(err.0.contains("line 1"), "{err}");
        assert!(Revoked::parse(b"").unwrap().summary().starts_with("0 keys"));
    }

    #[test]
    fn malformed_krls_are_refused_not_half_read() {
        let w = world(&[1]);
        let d = w.dir.path();
        std::fs::write(d.join("spec"), "serial: 1\nid: x\n").unwrap();
        ok(&["-q", "-k", "-f", "krl", "-s", "ca.pub", "spec"], d);
        let good = std::fs::read(d.join("krl")).unwrap();
        // Every truncation is refused (or, at a section boundary, reads fewer
        // sections), never a panic.
        for n in 0..good.len() {
            let _ = Revoked::parse_krl(&good[..n]);
        }
        assert!(Revoked::parse_krl(&good[..good.len() - 1]).is_err());
        let mut unknown = good.clone();
        unknown.extend_from_slice(&[9, 0, 0, 0, 0]);
        assert!(Revoked::parse_krl(&unknown)
            .unwrap_err()
            .0
            .contains("unknown"));
        let mut signed = good.clone();
        signed.extend_from_slice(&[4, 0, 0, 0, 0]);
        assert!(Revoked::parse_krl(&signed)
            .unwrap_err()
            .0
            .contains("signature"));
        // A huge length claims more than is there.
        let mut huge = good[..good.len()].to_vec();
        huge.extend_from_slice(&[2, 0xff, 0xff, 0xff, 0xff]);
        assert!(Revoked::parse_krl(&huge).is_err());
        // A non-critical extension is skipped, a critical one refuses.
        let ext = |critical: u8| {
            let mut body = Vec::new();
            body.extend_from_slice(&3u32.to_be_bytes());
            body.extend_from_slice(b"x@y");
            body.push(critical);
            body.extend_from_slice(&0u32.to_be_bytes());
            let mut k = good.clone();
            k.push(255);
            k.extend_from_slice(&(body.len() as u32).to_be_bytes());
            k.extend_from_slice(&body);
            k
        };
        assert!(Revoked::parse_krl(&ext(0)).is_ok());
        assert!(Revoked::parse_krl(&ext(1)).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Arbitrary bytes after the magic: a result, never a panic.
        #[test]
        fn arbitrary_input_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut data = MAGIC.to_vec();
            data.extend_from_slice(&1u32.to_be_bytes());
            data.extend_from_slice(&tail);
            let _ = Revoked::parse(&data);
            let _ = Revoked::parse(&tail);
        }

        /// Bitmap lookups at any offset and serial stay in bounds.
        #[test]
        fn bitmap_lookups_stay_in_bounds(offset in any::<u64>(), serial in any::<u64>(),
                                         bits in proptest::collection::vec(any::<u8>(), 0..16)) {
            let section = CaRevocations { bitmaps: vec![(offset, bits)], ..Default::default() };
            let _ = section.revokes_serial(serial);
        }
    }
}
