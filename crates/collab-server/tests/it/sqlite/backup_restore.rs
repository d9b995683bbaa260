//! Backup and verified restore of the SQLite file itself (the drill under a
//! storm runs on both backends: `both::backup_drill`). A damaged backup
//! fails `--verify` and is never restored; a non-empty target is refused. A backup is signed by the
//! server key `backup` prints: a re-sealed, re-signed or unsigned backup,
//! or one holding a symbolic link or a FIFO, is refused (never followed),
//! and what a backup writes is private (0600 files, 0700 directories).

use collab_testkit as common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{stdout_json, ServerHarness, SshOutput};
use serde_json::Value;

/// `git-collab-server ARGS` (no server configuration from the test's
/// environment).
fn server_cli(args: &[&str]) -> Output {
    common::server_cli(None, args)
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

fn lease(h: &ServerHarness, args: &str) -> SshOutput {
    h.ssh_exec(&format!("collab-lease {args}"))
}

/// Copy a directory tree (the backup) with `cp -a`.
fn copy_tree(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(out.status.success());
}

/// Flip one bit of one byte in the middle of `file`.
fn flip_byte(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(file, bytes).unwrap();
}

/// A small backup of a server with one pushed repository and one lease,
/// and the key line `backup` printed as the one that signed it.
fn small_backup(h: &ServerHarness) -> (PathBuf, String) {
    h.create_repo("one");
    let clone = h.clone_repo("one", "one-work");
    h.commit_file(&clone, "a.txt", &vec![b'a'; 10_000], "first");
    assert!(h
        .ssh_push(&clone, &["HEAD:refs/heads/main"])
        .status
        .success());
    let issue = h.open_server_issue("one", "leased");
    assert_eq!(lease(h, &format!("acquire 'one' '{issue}'")).code, 0);
    let dir = h.temp_dir().join("small-backup");
    let out = server_cli(&[
        "--state-dir",
        path_str(h.state_dir()),
        "backup",
        "--to",
        path_str(&dir),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The text report names the key: `signed by the server key SHA256:… (ssh-ed25519 …)`.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("signed by the server key "))
        .unwrap_or_else(|| panic!("backup printed no key: {stdout}"));
    let key = line
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(key, _)| key.to_string())
        .unwrap();
    assert!(key.starts_with("ssh-ed25519 "), "{line}");
    (dir, key)
}

#[test]
fn a_flipped_byte_fails_verify_and_is_never_restored() {
    let h = ServerHarness::start();
    let (good, key) = small_backup(&h);
    let verify = |dir: &Path| server_cli(&["backup", "--verify", path_str(dir), "--key", &key]);
    assert!(verify(&good).status.success());

    // One flipped bit in any part: an object, the database, the manifest.
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(good.join("manifest.json")).unwrap()).unwrap();
    let object = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .find(|p| p.starts_with("repos/one.git/objects/") && !p.contains("/info/"))
        .expect("an object file");
    for (n, victim) in [object.as_str(), "collab.db", "manifest.json"]
        .into_iter()
        .enumerate()
    {
        let bad = h.temp_dir().join(format!("bad-{n}"));
        copy_tree(&good, &bad);
        flip_byte(&bad.join(victim));
        let out = verify(&bad);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{victim}: a flipped byte passed"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.lines().last().unwrap().starts_with("error: backup"),
            "{stderr}"
        );
        let target = h.temp_dir().join(format!("restore-{n}"));
        let out = server_cli(&[
            "--state-dir",
            path_str(&target),
            "restore",
            "--from",
            path_str(&bad),
            "--key",
            &key,
        ]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{victim}: restored a bad backup"
        );
        assert!(!target.exists(), "{victim}: a failed restore left files");
    }

    // The good one restores, keys and all.
    let target = h.temp_dir().join("restore-good");
    let out = server_cli(&[
        "--state-dir",
        path_str(&target),
        "restore",
        "--from",
        path_str(&good),
        "--key",
        &key,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(target.join("ssh_host_ed25519_key")).unwrap(),
        std::fs::read(h.state_dir().join("ssh_host_ed25519_key")).unwrap()
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(target.join("ssh_host_ed25519_key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// `restore --from DIR --key KEY` into the missing directory `target`.
fn restore_into(target: &Path, from: &Path, trust: &[&str]) -> Output {
    let mut args = vec![
        "--state-dir",
        path_str(target),
        "restore",
        "--from",
        path_str(from),
    ];
    args.extend_from_slice(trust);
    server_cli(&args)
}

/// The one `error: …` line a refused command printed last.
fn last_error(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or("").to_string();
    assert!(last.starts_with("error: "), "{stderr}");
    last
}

/// Rewrite `manifest.json` with `edit`, and re-seal `manifest.sha256` as
/// anyone who can write the backup can.
fn edit_and_reseal(dir: &Path, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    edit(&mut manifest);
    let mut json = serde_json::to_vec_pretty(&manifest).unwrap();
    json.push(b'\n');
    use sha2::Digest as _;
    let sum = hex::encode(sha2::Sha256::digest(&json));
    std::fs::write(dir.join("manifest.json"), &json).unwrap();
    std::fs::write(
        dir.join("manifest.sha256"),
        format!("{sum}  manifest.json\n"),
    )
    .unwrap();
    json
}

/// The manifest entry of `path` updated to the file's new content.
fn relist(manifest: &mut Value, path: &str, content: &[u8]) {
    use sha2::Digest as _;
    let entry = manifest["files"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} is not in the manifest"));
    entry["size"] = serde_json::json!(content.len());
    entry["sha256"] = serde_json::json!(hex::encode(sha2::Sha256::digest(content)));
}

#[test]
fn a_resealed_re_signed_unsigned_or_linked_backup_is_refused_and_never_followed() {
    let h = ServerHarness::start();
    let (good, key) = small_backup(&h);
    let verify =
        |dir: &Path, key: &str| server_cli(&["backup", "--verify", path_str(dir), "--key", key]);
    // The key as `backup` printed it, its fingerprint, or its .pub file.
    let pub_file = h.temp_dir().join("server.pub");
    std::fs::write(&pub_file, format!("{key}\n")).unwrap();
    let fingerprint = common::fingerprint(&pub_file);
    for named in [key.as_str(), fingerprint.as_str(), path_str(&pub_file)] {
        let out = verify(&good, named);
        assert!(
            out.status.success(),
            "--key {named}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Naming no key is refused, not a silent checksum-only pass.
    let out = server_cli(&["backup", "--verify", path_str(&good)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(last_error(&out).contains("--key is required"));
    let out = restore_into(&h.temp_dir().join("no-key"), &good, &[]);
    assert_eq!(out.status.code(), Some(2), "restore without --key");
    assert!(!h.temp_dir().join("no-key").exists());

    // The backup never holds the private key that signs it, and all of it
    // is private to its owner.
    use std::os::unix::fs::PermissionsExt as _;
    let mut stack = vec![good.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            let mode = meta.permissions().mode() & 0o777;
            let name = entry.file_name().to_string_lossy().into_owned();
            assert!(
                !name.starts_with("collab_signing_key"),
                "{:?}",
                entry.path()
            );
            if meta.is_dir() {
                assert_eq!(mode, 0o700, "{:?}", entry.path());
                stack.push(entry.path());
            } else {
                assert_eq!(mode, 0o600, "{:?}", entry.path());
            }
        }
    }
    assert_eq!(
        std::fs::metadata(&good).unwrap().permissions().mode() & 0o777,
        0o700
    );

    // 1. An attacker's admin key in authorized_keys, the manifest entry and
    //    its checksum updated to match: the signature no longer does.
    let mallory = h.named_key("mallory");
    let attacker = common::public_key_line(&mallory);
    let resealed = h.temp_dir().join("resealed");
    copy_tree(&good, &resealed);
    let keys_file = resealed.join("keys/authorized_keys");
    let mut keys = std::fs::read(&keys_file).unwrap();
    keys.extend_from_slice(format!("{attacker}\n").as_bytes());
    std::fs::write(&keys_file, &keys).unwrap();
    let json = edit_and_reseal(&resealed, |m| relist(m, "keys/authorized_keys", &keys));
    let out = verify(&resealed, &key);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("changed after it was signed"), "{stderr}");
    let target = h.temp_dir().join("restore-resealed");
    let out = restore_into(&target, &resealed, &["--key", &key]);
    assert_eq!(out.status.code(), Some(1));
    assert!(last_error(&out).contains("changed after it was signed"));
    assert!(!target.exists(), "a refused restore wrote {target:?}");
    // --trust-unsigned is for a backup with no signature, never a way past
    // a bad one.
    let out = server_cli(&[
        "backup",
        "--verify",
        path_str(&resealed),
        "--trust-unsigned",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("changed after it was signed"), "{stderr}");
    let out = restore_into(&target, &resealed, &["--trust-unsigned"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(last_error(&out).contains("changed after it was signed"));
    assert!(!target.exists(), "a refused restore wrote {target:?}");

    // 2. The same, re-signed with the attacker's own key (and its public
    //    line in manifest.sig): the key is not the one the operator named.
    let forger_path = h.temp_dir().join("forger_key");
    let forger = collab_record::sign::SigningKey::generate(&forger_path, "forger", false).unwrap();
    let mut signed = collab_server::backup::manifest::SIG_CONTEXT.to_vec();
    signed.extend_from_slice(&json);
    std::fs::write(
        resealed.join("manifest.sig"),
        format!(
            "{}\n{}",
            forger.public_key_line(),
            collab_record::sign::encode_signature(&forger.sign(&signed))
        ),
    )
    .unwrap();
    for named in [key.as_str(), fingerprint.as_str()] {
        let out = verify(&resealed, named);
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "signed by {}, not by the key",
                forger.fingerprint()
            )),
            "{stderr}"
        );
        let out = restore_into(&target, &resealed, &["--key", named]);
        assert_eq!(out.status.code(), Some(1));
        assert!(last_error(&out).contains("not by the key given with --key"));
        assert!(!target.exists());
    }
    // The forger's key verifies its own forgery: the signature is sound,
    // only the pinned key tells the two apart.
    assert!(verify(&resealed, &forger.public_key_line())
        .status
        .success());
    // So the key never comes from the backup itself: its manifest.sig (the
    // forger's key line first), a link to it, or any file of the snapshot.
    let link = h.temp_dir().join("looks-apart.pub");
    std::os::unix::fs::symlink(resealed.join("manifest.sig"), &link).unwrap();
    let dotted = resealed.join("keys/../manifest.sig");
    let snapshot_file = resealed.join("keys/authorized_keys");
    for inside in [resealed.join("manifest.sig"), link, dotted, snapshot_file] {
        let out = verify(&resealed, path_str(&inside));
        assert_eq!(out.status.code(), Some(1), "--key {inside:?}");
        let error = last_error(&out);
        assert!(error.contains("is inside the backup"), "{error}");
        assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
        let out = restore_into(&target, &resealed, &["--key", path_str(&inside)]);
        assert_eq!(out.status.code(), Some(1));
        assert!(last_error(&out).contains("is inside the backup"));
        assert!(!target.exists());
    }
    // Soundly signed, but by whom only --key can say: --trust-unsigned
    // refuses it too.
    let out = server_cli(&[
        "backup",
        "--verify",
        path_str(&resealed),
        "--trust-unsigned",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the backup is signed: verify it with --key"),
        "{stderr}"
    );
    assert!(!stderr.contains(&forger.fingerprint()), "{stderr}");
    let out = restore_into(&target, &resealed, &["--trust-unsigned"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(last_error(&out).contains("the backup is signed"));
    assert!(!target.exists());

    // 3. An old (unsigned) backup: refused with --key, restored only with
    //    the explicit --trust-unsigned.
    let unsigned = h.temp_dir().join("unsigned");
    copy_tree(&good, &unsigned);
    std::fs::remove_file(unsigned.join("manifest.sig")).unwrap();
    let out = verify(&unsigned, &key);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not signed"));
    let out = restore_into(&target, &unsigned, &["--key", &key]);
    assert_eq!(out.status.code(), Some(1));
    assert!(last_error(&out).contains("--trust-unsigned"));
    assert!(!target.exists());
    let out = server_cli(&[
        "backup",
        "--verify",
        path_str(&unsigned),
        "--trust-unsigned",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("NOT authenticated"));
    let unsigned_target = h.temp_dir().join("restore-unsigned");
    let out = restore_into(&unsigned_target, &unsigned, &["--trust-unsigned"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // 4. Links and FIFOs: refused, never followed or opened. A listed file
    //    replaced by a link to /etc/passwd (a size oracle and a restored
    //    copy of it, before), an unlisted link, a FIFO (a hang, before).
    let passwd_size = std::fs::metadata("/etc/passwd").unwrap().len().to_string();
    for (n, plant) in ["listed-link", "unlisted-link", "linked-dir", "fifo"]
        .into_iter()
        .enumerate()
    {
        let bad = h.temp_dir().join(format!("planted-{n}"));
        copy_tree(&good, &bad);
        let victim = bad.join("keys/authorized_keys");
        match plant {
            "listed-link" => {
                std::fs::remove_file(&victim).unwrap();
                std::os::unix::fs::symlink("/etc/passwd", &victim).unwrap();
            }
            "unlisted-link" => {
                std::os::unix::fs::symlink("/etc/passwd", bad.join("state-passwd")).unwrap()
            }
            "linked-dir" => {
                // keys/ → a directory outside holding the same file.
                let outside = h.temp_dir().join(format!("outside-{n}"));
                std::fs::rename(bad.join("keys"), &outside).unwrap();
                std::os::unix::fs::symlink(&outside, bad.join("keys")).unwrap();
            }
            _ => {
                std::fs::remove_file(&victim).unwrap();
                let status = Command::new("mkfifo").arg(&victim).status().unwrap();
                assert!(status.success());
            }
        }
        let started = Instant::now();
        let out = verify(&bad, &key);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{plant}: verify hung"
        );
        assert_eq!(out.status.code(), Some(1), "{plant}: passed");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let what = if plant == "fifo" {
            "a FIFO"
        } else {
            "a symbolic link"
        };
        assert!(
            stderr.contains(&format!(
                "{what}, not a regular file: refused, not followed"
            )),
            "{plant}: {stderr}"
        );
        assert!(
            !stderr.contains(&format!("size {passwd_size}")),
            "{plant}: the size of /etc/passwd leaked: {stderr}"
        );
        let target = h.temp_dir().join(format!("restore-planted-{n}"));
        let out = restore_into(&target, &bad, &["--key", &key]);
        assert_eq!(out.status.code(), Some(1), "{plant}: restored");
        assert!(
            last_error(&out).contains("refused, not followed"),
            "{plant}"
        );
        assert!(!target.exists(), "{plant}: a refused restore wrote files");
    }

    // 5. The untampered backup restores into a fresh state directory with
    //    the printed key and, given the signing key file, keeps the
    //    server's identity (a wrong key file is refused).
    let fresh = tempfile::tempdir().unwrap();
    let new_state = fresh.path().join("state");
    let wrong = restore_into(
        &new_state,
        &good,
        &["--key", &key, "--signing-key", path_str(&forger_path)],
    );
    assert_eq!(wrong.status.code(), Some(1));
    assert!(last_error(&wrong).contains("but the backup was signed by"));
    assert!(!new_state.exists());
    let signing_key = h.state_dir().join("collab_signing_key");
    let out = restore_into(
        &new_state,
        &good,
        &[
            "--key",
            &key,
            "--signing-key",
            path_str(&signing_key),
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply = stdout_json(&out);
    assert_eq!(reply["signed_by"], fingerprint.as_str(), "{reply}");
    assert_eq!(reply["signing_key_restored"], true, "{reply}");
    assert_eq!(
        std::fs::read(new_state.join("collab_signing_key")).unwrap(),
        std::fs::read(&signing_key).unwrap()
    );
    let r = ServerHarness::start_in(new_state.clone(), h.ssh_client_key());
    let who = r.ssh_exec("collab-whoami");
    assert_eq!(who.code, 0, "{who:?}");
    assert_eq!(who.json()["server_key"], key.as_str());
    // The attacker's key was never admitted.
    let out = r.ssh_exec_as(&mallory, "collab-whoami", b"");
    assert_ne!(out.code, 0, "{out:?}");
}

#[test]
fn backup_refuses_a_non_empty_target_or_one_inside_the_state_directory() {
    let h = ServerHarness::start();
    let busy = h.temp_dir().join("busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("keep-me"), b"x").unwrap();
    let inside = h.state_dir().join("backups/today");
    for (dir, expect) in [(&busy, "not empty"), (&inside, "inside")] {
        let out = server_cli(&[
            "--state-dir",
            path_str(h.state_dir()),
            "backup",
            "--to",
            path_str(dir),
        ]);
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("error: refusing"), "{stderr}");
        assert!(stderr.contains(expect), "{stderr}");
    }
    assert_eq!(std::fs::read(busy.join("keep-me")).unwrap(), b"x");
    assert!(!inside.exists(), "a refused backup left its directory");
}

#[test]
fn keep_prunes_only_older_backups() {
    let h = ServerHarness::start();
    h.create_repo("kept");
    let parent = h.temp_dir().join("backups");
    std::fs::create_dir_all(parent.join("notes")).unwrap();
    std::fs::write(parent.join("README"), b"not a backup").unwrap();
    std::fs::create_dir_all(parent.join("unfinished")).unwrap();
    let mut last = Value::Null;
    for name in ["b1", "b2", "b3"] {
        let out = server_cli(&[
            "--state-dir",
            path_str(h.state_dir()),
            "backup",
            "--to",
            path_str(&parent.join(name)),
            "--keep",
            "2",
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        last = stdout_json(&out);
    }
    assert_eq!(
        last["pruned"],
        serde_json::json!([path_str(&parent.join("b1"))]),
        "{last}"
    );
    let mut left: Vec<String> = std::fs::read_dir(&parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["README", "b2", "b3", "notes", "unfinished"]);
    let key = last["key"].as_str().unwrap();
    let out = server_cli(&[
        "backup",
        "--verify",
        path_str(&parent.join("b3")),
        "--key",
        key,
    ]);
    assert!(out.status.success());
    // --keep needs a positive count and --to.
    let out = server_cli(&[
        "backup",
        "--verify",
        path_str(&parent.join("b3")),
        "--keep",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2));
}
