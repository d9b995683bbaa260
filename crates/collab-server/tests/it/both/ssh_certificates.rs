//! SSH user certificates with real OpenSSH: `ssh-keygen -s` makes the CA
//! and the certificates, `ssh -o CertificateFile=…` logs in, and every
//! certificate that must not log in gets exactly what an unknown key gets
//! (`Permission denied (publickey)`) while the server log says why. A KRL
//! rewritten by `ssh-keygen -k -u` while the server runs applies to the
//! next login. Host certificates: a client that trusts only the host CA
//! (`@cert-authority`) connects with strict host key checking.

use collab_testkit as common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{client, fingerprint, public_key_line, HarnessOptions, ServerHarness, SshOutput};

fn keygen(dir: &Path, args: &[&str]) {
    let out = Command::new("ssh-keygen")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run ssh-keygen");
    assert!(
        out.status.success(),
        "ssh-keygen {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a second CA nobody trusts, and one user key (not in
/// authorized_keys), in a directory of their own.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        for name in ["ca", "other-ca", "agent"] {
            keygen(
                dir.path(),
                &["-q", "-t", "ed25519", "-N", "", "-C", name, "-f", name],
            );
        }
        std::fs::write(
            dir.path().join("trusted"),
            format!(
                "# the fleet CA\n{}\n",
                public_key_line(&dir.path().join("ca"))
            ),
        )
        .unwrap();
        let pki = Pki { dir };
        pki.write_krl(&[]);
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Sign `agent.pub` with `ca` (and `extra` ssh-keygen flags) into the
    /// certificate file `name`.
    fn sign(&self, name: &str, ca: &str, extra: &[&str]) -> PathBuf {
        let mut args = vec!["-q", "-s", ca];
        args.extend_from_slice(extra);
        args.push("agent.pub");
        keygen(self.dir.path(), &args);
        let to = self.path(name);
        std::fs::rename(self.path("agent-cert.pub"), &to).unwrap();
        to
    }

    /// A KRL of the fleet CA revoking `serials` (a fresh file each time, as
    /// an operator's tooling would write it).
    fn write_krl(&self, serials: &[u64]) {
        let spec: String = if serials.is_empty() {
            "id: nobody-at-all\n".into()
        } else {
            serials.iter().map(|s| format!("serial: {s}\n")).collect()
        };
        std::fs::write(self.path("krl.spec"), spec).unwrap();
        keygen(
            self.dir.path(),
            &["-q", "-k", "-f", "krl.new", "-s", "ca.pub", "krl.spec"],
        );
        // Replaced by rename: a reader never sees half a file.
        std::fs::rename(self.path("krl.new"), self.path("revoked.krl")).unwrap();
    }

    fn options(&self) -> HarnessOptions {
        HarnessOptions {
            env: vec![
                (
                    "GIT_COLLAB_SSH__TRUSTED_USER_CA_KEYS".into(),
                    self.path("trusted").display().to_string(),
                ),
                (
                    "GIT_COLLAB_SSH__REVOKED_KEYS".into(),
                    self.path("revoked.krl").display().to_string(),
                ),
            ],
            ..Default::default()
        }
    }
}

/// `collab-whoami` with the agent key and `cert`.
fn whoami_with(h: &ServerHarness, pki: &Pki, cert: &Path) -> SshOutput {
    let cert_option = format!("CertificateFile={}", cert.display());
    h.ssh_raw(
        &pki.path("agent"),
        &["-o", &cert_option, "git@127.0.0.1", "collab-whoami"],
        b"",
    )
}

/// What an unknown key gets: ssh's own failure, nothing from us.
fn assert_refused_like_an_unknown_key(out: &SshOutput, what: &str) {
    assert_eq!(out.code, 255, "{what}: {out:?}");
    assert!(
        out.stderr.contains("Permission denied (publickey)"),
        "{what}: {out:?}"
    );
    assert!(out.stdout.is_empty(), "{what}: {out:?}");
}

#[test]
fn a_certificate_logs_in_as_its_principal_and_bad_ones_are_refused_each_with_its_reason() {
    let pki = Pki::new();
    let h = ServerHarness::start_with(pki.options());

    // The bare key is unknown: the baseline every refusal must look like.
    let unknown = h.ssh_exec_as(&pki.path("agent"), "collab-whoami", b"");
    assert_refused_like_an_unknown_key(&unknown, "the plain key");

    let valid = pki.sign(
        "valid",
        "ca",
        &[
            "-I",
            "agent-7 task 42",
            "-n",
            "agent-7",
            "-z",
            "7",
            "-V",
            "-5m:+1h",
        ],
    );
    let who = whoami_with(&h, &pki, &valid);
    assert_eq!(who.code, 0, "{who:?}\n{}", h.log());
    let v = who.json();
    assert_eq!(v["principal"], "agent-7");
    assert_eq!(v["regime"], "ungoverned");
    assert_eq!(v["admin"], false);
    assert_eq!(v["fingerprint"], fingerprint(&pki.path("agent")).as_str());
    assert_eq!(v["certificate"]["key_id"], "agent-7 task 42");
    assert_eq!(v["certificate"]["serial"], 7);
    assert_eq!(
        v["certificate"]["ca"],
        fingerprint(&pki.path("ca.pub")).as_str()
    );
    let log = h.log();
    assert!(
        log.contains("ssh certificate login")
            && log.contains("key_id=\"agent-7 task 42\"")
            && log.contains("serial=7"),
        "{log}"
    );
    // Each command it runs names the certificate too.
    assert!(
        log.lines().any(|l| l.contains("exec")
            && l.contains("verb=\"collab-whoami\"")
            && l.contains("key_id=\"agent-7 task 42\"")),
        "{log}"
    );

    // The user name picks among several principals; otherwise the first.
    let two = pki.sign("two", "ca", &["-I", "two", "-n", "first,second", "-z", "9"]);
    let cert_option = format!("CertificateFile={}", two.display());
    let second = h.ssh_raw(
        &pki.path("agent"),
        &["-o", &cert_option, "second@127.0.0.1", "collab-whoami"],
        b"",
    );
    assert_eq!(second.json()["principal"], "second", "{second:?}");
    assert_eq!(whoami_with(&h, &pki, &two).json()["principal"], "first");

    let matching = pki.sign(
        "source-ok",
        "ca",
        &[
            "-I",
            "src-ok",
            "-n",
            "agent-7",
            "-O",
            "source-address=10.0.0.0/8,127.0.0.1/32",
        ],
    );
    assert_eq!(whoami_with(&h, &pki, &matching).code, 0);

    // Each bad certificate: refused like an unknown key, and its own line.
    let cases: Vec<(&str, Vec<&str>, &str, &str)> = vec![
        (
            "expired",
            vec!["-I", "old", "-n", "agent-7", "-V", "20200101:20200102"],
            "ca",
            "Certificate is expired or not yet valid",
        ),
        (
            "future",
            vec!["-I", "later", "-n", "agent-7", "-V", "+1d:+2d"],
            "ca",
            "Certificate is expired or not yet valid",
        ),
        (
            "other-ca",
            vec!["-I", "stranger", "-n", "agent-7"],
            "other-ca",
            "not a trusted CA",
        ),
        ("no-principal", vec!["-I", "anyone"], "ca", "no principal"),
        (
            "source-other",
            vec![
                "-I",
                "src-bad",
                "-n",
                "agent-7",
                "-O",
                "source-address=10.9.8.7/32",
            ],
            "ca",
            "does not match 127.0.0.1",
        ),
        (
            "force-command",
            vec![
                "-I",
                "forced",
                "-n",
                "agent-7",
                "-O",
                "force-command=/bin/true",
            ],
            "ca",
            "critical option \"force-command\" is not supported",
        ),
        (
            "bad-principal",
            vec!["-I", "spoof", "-n", "SHA256:abcdef"],
            "ca",
            "is not a valid principal name",
        ),
    ];
    for (name, flags, ca, reason) in cases {
        let cert = pki.sign(name, ca, &flags);
        let before = h.log().len();
        let out = whoami_with(&h, &pki, &cert);
        assert_refused_like_an_unknown_key(&out, name);
        // This refusal's own line, written after `before`.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !h.log()[before..].contains(reason) {
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: no {reason:?} in the log:\n{}",
                h.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    let log = h.log();
    assert!(log.contains("ssh certificate refused: signed by"), "{log}");
    assert!(log.contains("key_id=\"forced\""), "{log}");

    // OpenSSH's client does not offer a host certificate as a user one; a
    // library client does, and is refused, as a control the valid
    // certificate goes through the same client.
    let host_type = pki.sign("host-type", "ca", &["-I", "host", "-h", "-n", "agent-7"]);
    let key = client::load_key(&pki.path("agent"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut conn = client::connect(h.ssh_addr).await;
        let refused = client::authenticate_with_certificate(&mut conn, &key, &host_type).await;
        assert!(!refused.success());
        let accepted = client::authenticate_with_certificate(&mut conn, &key, &valid).await;
        assert!(accepted.success());
        let who = client::exec(&conn, b"collab-whoami").await;
        let v: serde_json::Value = serde_json::from_slice(&who.stdout).unwrap();
        assert_eq!(v["principal"], "agent-7");
    });
    assert!(
        h.log()
            .contains("a host certificate, not a user certificate"),
        "{}",
        h.log()
    );
}

#[test]
fn a_krl_rewritten_while_the_server_runs_revokes_at_the_next_login() {
    let pki = Pki::new();
    let h = ServerHarness::start_with(pki.options());
    let seven = pki.sign("seven", "ca", &["-I", "seven", "-n", "agent-7", "-z", "7"]);
    let eight = pki.sign("eight", "ca", &["-I", "eight", "-n", "agent-8", "-z", "8"]);
    assert_eq!(whoami_with(&h, &pki, &seven).code, 0, "{}", h.log());
    assert_eq!(whoami_with(&h, &pki, &eight).code, 0);
    // A connection logged in with serial 8 before the revocation.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let key = client::load_key(&pki.path("agent"));
    let mut open = rt.block_on(client::connect(h.ssh_addr));
    rt.block_on(async {
        let auth = client::authenticate_with_certificate(&mut open, &key, &eight).await;
        assert!(auth.success());
        let who = client::exec(&open, b"collab-whoami").await;
        assert_eq!(who.exit_status, Some(0), "{who:?}");
    });

    pki.write_krl(&[8]);
    // Its next command is refused: the certificate is checked again.
    let after = rt.block_on(client::exec(&open, b"collab-whoami"));
    assert_eq!(after.exit_status, Some(1), "{after:?}");
    assert_eq!(
        String::from_utf8_lossy(&after.stderr),
        "error: this key is no longer admitted\n"
    );
    assert_eq!(whoami_with(&h, &pki, &seven).code, 0, "{}", h.log());
    let out = whoami_with(&h, &pki, &eight);
    assert_refused_like_an_unknown_key(&out, "serial 8 revoked");
    assert!(
        h.log()
            .contains("revoked in ssh.revoked_keys: its serial is revoked"),
        "{}",
        h.log()
    );

    // A broken revocation file fails closed: nothing logs in until fixed.
    std::fs::write(pki.path("revoked.krl"), b"SSHKRL\n\0garbage").unwrap();
    assert_refused_like_an_unknown_key(&whoami_with(&h, &pki, &seven), "broken KRL");
    assert!(h.log().contains("fail closed"), "{}", h.log());
    pki.write_krl(&[]);
    assert_eq!(whoami_with(&h, &pki, &eight).code, 0, "{}", h.log());
}

#[test]
fn governance_maps_certificate_principals_and_unmapped_ones_are_closed() {
    let pki = Pki::new();
    let h = ServerHarness::start_with(pki.options());
    let admin = h.ssh_client_key();
    assert_eq!(h.ssh_exec("collab-repo create '_governance'").code, 0);
    assert_eq!(h.ssh_exec("collab-repo create 'team/app'").code, 0);
    let clone = h.clone_repo("_governance", "gov");
    let conf = format!(
        "[principals.alice]\nkeys = [\"{}\"]\n\n\
         [principals.fleet]\ncertificate_principals = [\"agent-7\"]\n\n\
         [[grants]]\nrepos = [\"**\"]\nto = [\"alice\"]\naccess = \"rewind\"\n\n\
         [[grants]]\nrepos = [\"team/*\"]\nto = [\"fleet\"]\naccess = \"write\"\n",
        public_key_line(&admin)
    );
    std::fs::write(clone.join("governance.toml"), conf).unwrap();
    h.git(&clone, &["add", "governance.toml"]);
    h.git(&clone, &["commit", "-q", "-m", "governance"]);
    let pushed = h.git_as(&admin, &clone, &["push", "origin", "HEAD:main"]);
    assert!(pushed.status.success(), "{pushed:?}");

    let mapped = pki.sign("mapped", "ca", &["-I", "a7", "-n", "agent-7"]);
    let v = whoami_with(&h, &pki, &mapped).json();
    assert_eq!(v["principal"], "fleet");
    assert_eq!(v["regime"], "governed");
    let listed = h.ssh_raw(
        &pki.path("agent"),
        &[
            "-o",
            &format!("CertificateFile={}", mapped.display()),
            "git@127.0.0.1",
            "collab-repo list",
        ],
        b"",
    );
    assert!(listed.stdout.contains("team/app"), "{listed:?}");

    // A principal governance does not know is admitted but closed.
    let unmapped = pki.sign("unmapped", "ca", &["-I", "x", "-n", "someone-else"]);
    let v = whoami_with(&h, &pki, &unmapped).json();
    assert_eq!(v["regime"], "closed");
    assert_eq!(v["enrolled"], false);

    // Certificates stay in their lane: with a list in the file, the CA
    // trusted for the fleet cannot mint the admin by her own name.
    let forged = pki.sign("forged", "ca", &["-I", "x", "-n", "alice"]);
    let v = whoami_with(&h, &pki, &forged).json();
    assert_eq!(v["regime"], "closed", "{v}");
    assert_eq!(
        (&v["enrolled"], &v["admin"]),
        (&false.into(), &false.into()),
        "{v}"
    );
    let gov = h.ssh_raw(
        &pki.path("agent"),
        &[
            "-o",
            &format!("CertificateFile={}", forged.display()),
            "git@127.0.0.1",
            "git-upload-pack '_governance'",
        ],
        b"",
    );
    assert_ne!(gov.code, 0, "{gov:?}");
}

#[test]
fn a_host_certificate_lets_a_client_that_trusts_only_the_host_ca_connect_strictly() {
    let pki = Pki::new();
    let d = pki.dir.path();
    keygen(
        d,
        &[
            "-q", "-t", "ed25519", "-N", "", "-C", "host-ca", "-f", "host-ca",
        ],
    );
    keygen(
        d,
        &["-q", "-t", "ed25519", "-N", "", "-C", "host", "-f", "host"],
    );
    keygen(
        d,
        &[
            "-q",
            "-s",
            "host-ca",
            "-h",
            "-I",
            "forge",
            "-n",
            "127.0.0.1",
            "host.pub",
        ],
    );
    let mut options = pki.options();
    options.env.push((
        "GIT_COLLAB_SSH__HOST_KEY".into(),
        pki.path("host").display().to_string(),
    ));
    options.env.push((
        "GIT_COLLAB_SSH__HOST_CERTIFICATE".into(),
        pki.path("host-cert.pub").display().to_string(),
    ));
    let h = ServerHarness::start_with(options);
    let known_hosts = pki.path("known_hosts");
    std::fs::write(
        &known_hosts,
        format!(
            "@cert-authority * {}\n",
            public_key_line(&pki.path("host-ca"))
        ),
    )
    .unwrap();
    let strict = |known: &Path| {
        let out = Command::new("ssh")
            .args(["-F", "/dev/null", "-i"])
            .arg(h.ssh_client_key())
            .args(["-p", &h.ssh_port().to_string()])
            .args(["-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known.display()))
            .args([
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "GlobalKnownHostsFile=/dev/null",
            ])
            .args(["git@127.0.0.1", "collab-whoami"])
            .output()
            .unwrap();
        SshOutput::from_output(out)
    };
    let out = strict(&known_hosts);
    assert_eq!(out.code, 0, "{out:?}\n{}", h.log());
    assert!(
        h.log().contains("presenting host certificate"),
        "{}",
        h.log()
    );
    // The control: a client that does not trust the host CA refuses.
    let empty = pki.path("known_hosts.empty");
    std::fs::write(&empty, "").unwrap();
    let out = strict(&empty);
    assert_eq!(out.code, 255, "{out:?}");
    assert!(
        out.stderr.contains("Host key verification failed"),
        "{out:?}"
    );
}
