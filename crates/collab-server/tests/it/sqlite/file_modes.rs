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
