//! Secrets at rest (issue 25): under the usual umask 022, a real server
//! creates its state directory 0700 and the collab database (in the
//! repositories directory inside it, by default) with its
//! `-wal` and `-shm` 0600 (they hold webhook secrets and every private
//! issue), the keys 0600; a backup is a 0700 directory whose database copy
//! is 0600; a database an older server left 0644 is tightened at start.

use collab_testkit as common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use common::{HarnessOptions, ServerHarness};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn the_state_directory_database_and_backups_are_owner_only_under_umask_022() {
    // SAFETY: umask(2) of this test's own process (nextest runs each test
    // in a process of its own); the server inherits it.
    unsafe {
        libc::umask(0o022);
    }
    let base = tempfile::tempdir().unwrap();
    let key = base.path().join("client");
    common::generate_key(&key, "client");
    let state = base.path().join("srv").join("state");
    assert!(!state.exists());
    let mut h = ServerHarness::start_in_with(
        state.clone(),
        key.clone(),
        HarnessOptions {
            env: vec![(
                "GIT_COLLAB_INITIAL_ADMIN_KEYS".into(),
                format!("[\"{}\"]", common::public_key_line(&key).trim()),
            )],
            ..Default::default()
        },
    );
    // Write through the server, so the database and its WAL exist.
    let out = h.ssh_exec("collab-repo create 'r'");
    assert_eq!(out.code, 0, "{out:?}\n{}", h.log());
    let out = h.ssh_exec("collab-issue open 'r' --title 'private words'");
    assert_eq!(out.code, 0, "{out:?}");

    assert_eq!(mode(&state), 0o700, "the state directory");
    for file in [
        "repos/collab.db",
        "repos/collab.db-wal",
        "repos/collab.db-shm",
        "collab_signing_key",
        "ssh_host_ed25519_key",
    ] {
        assert_eq!(mode(&state.join(file)), 0o600, "{file}");
    }

    let backup = base.path().join("backups").join("b1");
    let out = Command::new(common::bin("git-collab-server"))
        .arg("--state-dir")
        .arg(&state)
        .args(["backup", "--to"])
        .arg(&backup)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mode(&backup), 0o700, "the backup directory");
    assert_eq!(
        mode(&backup.join("collab.db")),
        0o600,
        "the backup's database"
    );

    // A database an older server left readable by everyone is tightened.
    h.stop();
    for file in [
        "repos/collab.db",
        "repos/collab.db-wal",
        "repos/collab.db-shm",
    ] {
        let path = state.join(file);
        if path.exists() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    h.start_again();
    let out = h.ssh_exec("collab-issue list 'r'");
    assert_eq!(out.code, 0, "{out:?}");
    for file in [
        "repos/collab.db",
        "repos/collab.db-wal",
        "repos/collab.db-shm",
    ] {
        let path = state.join(file);
        if path.exists() {
            assert_eq!(mode(&path), 0o600, "{file} after a restart");
        }
    }
}

/// Webhook signing secrets are sealed with `webhook-secrets.key` (0600,
/// outside the database): the database file never holds the plain secret,
/// and the subscription still signs with it (the server opens it), also
/// after a restart.
#[test]
fn webhook_secrets_are_sealed_with_a_key_outside_the_database() {
    let mut h = ServerHarness::start_with(HarnessOptions {
        env: vec![(
            "GIT_COLLAB_WEBHOOKS__ALLOWED_HOSTS".into(),
            "127.0.0.1".into(),
        )],
        ..Default::default()
    });
    h.create_repo("r");
    let secret = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    let added = h.ssh_exec_with_stdin(
        "collab-hook add 'r' 'http://127.0.0.1:9/hook' --secret-stdin",
        secret.as_bytes(),
    );
    assert_eq!(added.code, 0, "{added:?}");
    let key = h.state_dir().join("webhook-secrets.key");
    assert_eq!(mode(&key), 0o600);
    let stored = |h: &ServerHarness| -> String {
        let db = rusqlite::Connection::open_with_flags(
            h.repos_dir().join("collab.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        db.query_row("SELECT secret FROM webhooks", [], |r| r.get(0))
            .unwrap()
    };
    let sealed = stored(&h);
    assert!(sealed.starts_with("sealed1:"), "{sealed}");
    // The secret's key material appears nowhere in the database files.
    h.stop();
    let needle = &secret.as_bytes()["whsec_".len()..];
    for file in ["collab.db", "collab.db-wal"] {
        let path = h.repos_dir().join(file);
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{file} holds the plain secret"
            );
        }
    }
    h.start_again();
    assert_eq!(
        stored(&h),
        sealed,
        "a restart does not re-seal a sealed secret"
    );

    // A secret an older server stored in plain text is sealed at start.
    h.stop();
    {
        let db = rusqlite::Connection::open(h.repos_dir().join("collab.db")).unwrap();
        db.execute("UPDATE webhooks SET secret = ?1", [secret])
            .unwrap();
    }
    h.start_again();
    let start = std::time::Instant::now();
    while !stored(&h).starts_with("sealed1:") {
        assert!(start.elapsed().as_secs() < 60, "never sealed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
