//! Hostile exec requests are refused cleanly: one `error: …` line, exit 1,
//! nothing run, nothing written, nothing outside `repos_dir` served. Path
//! escapes (`..`, absolute paths, symlinks), shell metacharacters, broken
//! quoting, NUL and control characters, very long arguments, unknown verbs.

use collab_testkit as common;

use common::{client, ServerHarness, NOT_FOUND};

/// Paths that must never reach a repository outside repos_dir.
#[test]
fn path_escapes_are_not_found() {
    let h = ServerHarness::start();
    h.create_repo("r");
    // A real repository outside repos_dir, and a symlink to it inside.
    let outside = h.temp_dir().join("outside.git");
    git2_free_init_bare(&h, &outside);
    std::os::unix::fs::symlink(&outside, h.repos_dir().join("link.git")).unwrap();
    std::os::unix::fs::symlink(h.temp_dir(), h.repos_dir().join("up")).unwrap();
    let abs = outside.display().to_string();

    let attempts = [
        "../outside.git".to_string(),
        "../outside".to_string(),
        "r.git/../../outside.git".to_string(),
        "./r.git".to_string(),
        abs.clone(),
        format!("/{abs}"),
        format!("{abs}/"),
        "link.git".to_string(),
        "link".to_string(),
        "up/outside.git".to_string(),
        "~/outside.git".to_string(),
        "--help".to_string(),
        "--upload-pack=touch pwned".to_string(),
        "r.git/".to_string(),
        "r//".to_string(),
    ];
    for verb in ["git-upload-pack", "git-receive-pack"] {
        for name in &attempts {
            let out = h.ssh_exec(&format!("{verb} '{name}'"));
            assert_eq!(out.stderr, NOT_FOUND, "{verb} {name:?}: {out:?}");
            assert_eq!(out.code, 1);
            assert!(out.stdout.is_empty());
        }
    }
    // The admin can still use the real one.
    let real = h.ssh_exec_with_stdin("git-upload-pack 'r'", b"0000");
    assert_eq!(real.code, 0, "{real:?}");
    assert!(!h.temp_dir().join("pwned").exists());
}

fn git2_free_init_bare(h: &ServerHarness, path: &std::path::Path) {
    let out = h
        .git_command(&h.ssh_client_key(), h.temp_dir())
        .args(["init", "-q", "--bare"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn shell_metacharacters_are_never_interpreted() {
    let h = ServerHarness::start();
    h.create_repo("r");
    for cmd in [
        "git-upload-pack 'r.git'; touch x",
        "git-upload-pack 'r.git' && touch x",
        "git-upload-pack 'r.git' | touch x",
        "git-upload-pack $(touch x)",
        "git-upload-pack `touch x`",
        "touch x",
        "sh -c 'touch x'",
        "collab-whoami; touch x",
        "collab-whoami > x",
    ] {
        let out = h.ssh_exec(cmd);
        assert_eq!(out.code, 1, "{cmd}: {out:?}");
        assert!(out.stderr.starts_with("error: "), "{cmd}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{cmd}: {out:?}");
        assert!(out.stdout.is_empty(), "{cmd}: {out:?}");
    }
    for dir in [
        h.temp_dir().to_path_buf(),
        h.state_dir().to_path_buf(),
        h.repos_dir(),
    ] {
        assert!(
            !dir.join("x").exists(),
            "a command ran in {}",
            dir.display()
        );
    }
}

#[test]
fn broken_quoting_and_long_arguments_are_refused() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let cases = [
        (
            "git-upload-pack 'r.git",
            "error: invalid command: unclosed quote\n",
        ),
        (
            "git-upload-pack \"r.git",
            "error: invalid command: unclosed quote\n",
        ),
        (
            "git-upload-pack r.git\\",
            "error: invalid command: trailing backslash\n",
        ),
        (
            "git-upload-pack ''",
            "error: invalid command: empty argument\n",
        ),
        (
            "git-upload-pack",
            "error: usage: git-upload-pack '<repo>'\n",
        ),
        (
            "git-upload-pack 'r' 'extra'",
            "error: unexpected argument 'extra' for git-upload-pack; usage: git-upload-pack '<repo>'\n",
        ),
        ("frobnicate 'r'", "error: unknown command\n"),
        ("GIT-UPLOAD-PACK 'r'", "error: unknown command\n"),
    ];
    for (cmd, expected) in cases {
        let out = h.ssh_exec(cmd);
        assert_eq!((out.stderr.as_str(), out.code), (expected, 1), "{cmd}");
    }
    let long_name = "a".repeat(600);
    let out = h.ssh_exec(&format!("git-upload-pack '{long_name}'"));
    assert_eq!((out.stderr.as_str(), out.code), (NOT_FOUND, 1));
    let huge = "a".repeat(20_000);
    let out = h.ssh_exec(&format!("git-upload-pack '{huge}'"));
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .starts_with("error: invalid command: command longer than"),
        "{out:?}"
    );
    // Still serving.
    assert_eq!(h.ssh_exec("collab-whoami").code, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn nul_control_characters_and_bad_utf8_are_refused() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let key = client::load_key(&h.ssh_client_key());
    let mut conn = client::connect(h.ssh_addr).await;
    assert!(client::authenticate(&mut conn, &key).await.success());
    let cases: [&[u8]; 7] = [
        b"git-upload-pack 'r\0.git'",
        b"git-upload-pack 'r.git'\0; touch x",
        b"git-upload-pack 'r.git'\ntouch x",
        b"git-upload-pack\t'r.git'",
        b"git-upload-pack '\x1b[31mr'",
        b"collab-whoami\r",
        b"git-upload-pack '\xff\xfe'",
    ];
    for cmd in cases {
        let out = client::exec(&conn, cmd).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.exit_status, Some(1), "{cmd:?}: {out:?}");
        assert!(
            stderr.starts_with("error: invalid command: "),
            "{cmd:?}: {stderr}"
        );
        assert!(out.stdout.is_empty());
    }
    assert!(!h.temp_dir().join("x").exists());
    // The same connection still works for a good command.
    assert_eq!(
        client::exec(&conn, b"collab-whoami").await.exit_status,
        Some(0)
    );
}

#[test]
fn only_git_protocol_is_taken_from_the_client_environment() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "c");
    h.commit_file(&clone, "f", b"1", "one");
    h.ssh_push(&clone, &["HEAD:main"]);
    // OpenSSH sends these with SetEnv; if the server passed them on, git
    // would hide every branch (and GIT_DIR could point it elsewhere).
    let out = h.ssh_raw(
        &h.ssh_client_key(),
        &[
            "-o",
            "SetEnv=GIT_CONFIG_PARAMETERS='uploadpack.hideRefs=refs/heads' GIT_DIR=/etc",
            "git@127.0.0.1",
            "git-upload-pack 'r'",
        ],
        b"0000",
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("refs/heads/main"), "{out:?}");
}
