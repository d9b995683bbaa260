//! The KRL reader against OpenSSH itself: `ssh-keygen -k` writes the
//! lists and `ssh-keygen -Q` is the oracle for what they revoke.

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
        assert_eq!(ours, openssh_revokes(d, "krl", path), "serial {}", c.serial());
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
    assert!(read(d, "krl3").revokes_certificate(&cert(&w.certs[0])).is_none());
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
    assert!(Revoked::parse_krl(&unknown).unwrap_err().0.contains("unknown"));
    let mut signed = good.clone();
    signed.extend_from_slice(&[4, 0, 0, 0, 0]);
    assert!(Revoked::parse_krl(&signed).unwrap_err().0.contains("signature"));
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
