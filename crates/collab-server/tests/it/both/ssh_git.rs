//! Git over SSH against the real server with real `git` and `ssh`: clone,
//! fetch and push, protocol v2, the Rewind rule for force-pushes and
//! deletions, large transfers, and a clean stop on SIGTERM.

use collab_testkit as common;

use common::{fingerprint, ServerHarness};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn clone_fetch_and_push_round_trip() {
    let h = ServerHarness::start();
    h.create_repo("team/app");

    let a = h.clone_repo("team/app", "a");
    let first = h.commit_file(&a, "README.md", b"hello\n", "first");
    h.ssh_push(&a, &["HEAD:main"]);

    // The scp-less ssh:// URL with `.git` finds the same repository.
    let b = h.clone_repo("team/app.git", "b");
    assert_eq!(h.rev_parse(&b, "HEAD"), first);
    assert_eq!(std::fs::read(b.join("README.md")).unwrap(), b"hello\n");

    let second = h.commit_file(&b, "src/lib.rs", b"// lib\n", "second");
    h.ssh_push(&b, &["HEAD:main"]);
    h.git(&a, &["fetch", "origin"]);
    assert_eq!(h.rev_parse(&a, "origin/main"), second);

    // Other refs (tags, the collab namespace outside the server's own
    // records) travel too.
    h.git(&a, &["tag", "v1", &first]);
    h.git(&a, &["update-ref", "refs/collab/drafts/x", &first]);
    h.ssh_push(&a, &["refs/tags/v1", "refs/collab/drafts/x"]);
    let refs = h.ls_remote_as(&h.ssh_client_key(), "team/app");
    assert!(refs.stdout.contains("refs/tags/v1"), "{refs:?}");
    assert!(refs.stdout.contains("refs/collab/drafts/x"), "{refs:?}");
}

#[test]
fn protocol_v2_is_negotiated_when_asked() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let a = h.clone_repo("r", "a");
    h.commit_file(&a, "f", b"x", "one");
    h.ssh_push(&a, &["HEAD:main"]);

    let ls = |version: &str| {
        let out = h
            .git_command(&h.ssh_client_key(), h.temp_dir())
            .env("GIT_TRACE_PACKET", "1")
            .args(["-c", &format!("protocol.version={version}"), "ls-remote"])
            .arg(h.repo_url("r"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr(&out),
        )
    };
    let (refs_v2, trace_v2) = ls("2");
    assert!(trace_v2.contains("< version 2"), "{trace_v2}");
    assert!(trace_v2.contains("command=ls-refs"), "{trace_v2}");
    assert!(refs_v2.contains("refs/heads/main"));
    let (refs_v0, trace_v0) = ls("0");
    assert!(!trace_v0.contains("< version 2"), "{trace_v0}");
    assert_eq!(refs_v0, refs_v2);
}

#[test]
fn force_push_and_delete_need_rewind() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let writer = h.authorized_key("writer");
    let admin = h.ssh_client_key();

    let clone = h.clone_as(&writer, "r", "w");
    h.commit_file(&clone, "f", b"1", "one");
    let pushed = h.git_as(
        &writer,
        &clone,
        &["push", "origin", "HEAD:main", "HEAD:refs/heads/topic"],
    );
    assert!(pushed.status.success(), "{}", stderr(&pushed));
    let before = h.ls_remote_as(&writer, "r").stdout;

    // Rewrite history and try to force it.
    h.git(&clone, &["commit", "-q", "--amend", "-m", "rewritten"]);
    let forced = h.git_as(&writer, &clone, &["push", "--force", "origin", "HEAD:main"]);
    assert!(!forced.status.success());
    assert!(
        stderr(&forced)
            .contains("error: refs/heads/main: a non-fast-forward update needs rewind access"),
        "{}",
        stderr(&forced)
    );
    let deleted = h.git_as(&writer, &clone, &["push", "origin", ":topic"]);
    assert!(!deleted.status.success());
    assert!(
        stderr(&deleted).contains("error: refs/heads/topic: deleting a ref needs rewind access"),
        "{}",
        stderr(&deleted)
    );
    assert_eq!(
        h.ls_remote_as(&writer, "r").stdout,
        before,
        "refused pushes changed refs"
    );

    // A fast-forward is fine for a writer.
    h.git(&clone, &["reset", "-q", "--hard", "origin/main"]);
    h.commit_file(&clone, "g", b"2", "two");
    let ff = h.git_as(&writer, &clone, &["push", "origin", "HEAD:main"]);
    assert!(ff.status.success(), "{}", stderr(&ff));
    h.git(&clone, &["commit", "-q", "--amend", "-m", "two, rewritten"]);

    // The admin (Rewind everywhere) may do both.
    let forced = h.git_as(&admin, &clone, &["push", "--force", "origin", "HEAD:main"]);
    assert!(forced.status.success(), "{}", stderr(&forced));
    let deleted = h.git_as(&admin, &clone, &["push", "origin", ":topic"]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    let after = h.ls_remote_as(&admin, "r").stdout;
    assert!(!after.contains("refs/heads/topic"), "{after}");
    assert!(after.contains(&h.rev_parse(&clone, "HEAD")), "{after}");
}

#[test]
fn repo_policy_grants_rewind_and_hides_repos() {
    let h = ServerHarness::start();
    let path = h.create_repo("r");
    let writer = h.authorized_key("writer");
    let reader = h.authorized_key("reader");
    let stranger = h.authorized_key("stranger");
    std::fs::write(
        path.join("collab-policy.toml"),
        format!(
            "read = [\"{}\"]\nwrite = []\nrewind = [\"{}\"]\n",
            fingerprint(&reader),
            fingerprint(&writer)
        ),
    )
    .unwrap();

    let clone = h.clone_as(&writer, "r", "w");
    h.commit_file(&clone, "f", b"1", "one");
    assert!(h
        .git_as(&writer, &clone, &["push", "origin", "HEAD:main"])
        .status
        .success());
    h.git(&clone, &["commit", "-q", "--amend", "-m", "again"]);
    let forced = h.git_as(&writer, &clone, &["push", "-f", "origin", "HEAD:main"]);
    assert!(forced.status.success(), "{}", stderr(&forced));

    // The reader clones but cannot push.
    let rclone = h.clone_as(&reader, "r", "rd");
    h.commit_file(&rclone, "g", b"2", "two");
    let refused = h.git_as(&reader, &rclone, &["push", "origin", "HEAD:main"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("repository not found"),
        "{}",
        stderr(&refused)
    );

    // The stranger does not see it at all.
    let hidden = h.ls_remote_as(&stranger, "r");
    assert_ne!(hidden.code, 0);
    assert!(hidden.stderr.contains("repository not found"), "{hidden:?}");
}

#[test]
fn large_push_and_clone_complete() {
    let h = ServerHarness::start();
    h.create_repo("big");
    let a = h.clone_repo("big", "a");
    // Incompressible data, so the pack is as big as the files.
    let mut seed = 0x9e3779b97f4a7c15u64;
    for i in 0..4 {
        let mut blob = vec![0u8; 32 * 1024 * 1024];
        for chunk in blob.chunks_mut(8) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            chunk.copy_from_slice(&seed.to_le_bytes()[..chunk.len()]);
        }
        std::fs::write(a.join(format!("blob{i}")), &blob).unwrap();
    }
    h.git(&a, &["add", "."]);
    h.git(&a, &["commit", "-q", "-m", "big"]);
    h.ssh_push(&a, &["HEAD:main"]);
    let b = h.clone_repo("big", "b");
    assert_eq!(h.rev_parse(&b, "HEAD"), h.rev_parse(&a, "HEAD"));
    let original = std::fs::read(a.join("blob3")).unwrap();
    assert_eq!(std::fs::read(b.join("blob3")).unwrap(), original);
}

#[test]
fn sigterm_stops_cleanly_and_state_survives() {
    let mut h = ServerHarness::start();
    h.create_repo("r");
    let a = h.clone_repo("r", "a");
    let head = h.commit_file(&a, "f", b"1", "one");
    h.ssh_push(&a, &["HEAD:main"]);
    let host_key = std::fs::read(h.state_dir().join("ssh_host_ed25519_key")).unwrap();

    let status = h.stop();
    assert!(status.success(), "exit {status}; log:\n{}", h.log());
    assert!(h.log().contains("stopped"), "{}", h.log());

    h.start_again();
    assert_eq!(
        std::fs::read(h.state_dir().join("ssh_host_ed25519_key")).unwrap(),
        host_key,
        "host key regenerated"
    );
    let refs = h.ls_remote_as(&h.ssh_client_key(), "r");
    assert!(refs.stdout.contains(&head), "{refs:?}");
}

#[test]
fn sigterm_lets_a_running_command_finish() {
    use std::io::{Read as _, Write as _};
    let mut h = ServerHarness::start();
    h.create_repo("r");
    let a = h.clone_repo("r", "a");
    h.commit_file(&a, "f", b"1", "one");
    h.ssh_push(&a, &["HEAD:main"]);

    // A fetch that has read the ref advertisement and now waits for us.
    let mut ssh = std::process::Command::new("ssh")
        .args(h.ssh_options(&h.ssh_client_key()))
        .args(["git@127.0.0.1", "git-upload-pack 'r'"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = ssh.stdout.take().unwrap();
    let mut advertisement = Vec::new();
    loop {
        let mut len = [0u8; 4];
        stdout.read_exact(&mut len).unwrap();
        let len = usize::from_str_radix(std::str::from_utf8(&len).unwrap(), 16).unwrap();
        if len == 0 {
            break;
        }
        let mut line = vec![0u8; len - 4];
        stdout.read_exact(&mut line).unwrap();
        advertisement.extend_from_slice(&line);
    }
    assert!(String::from_utf8_lossy(&advertisement).contains("refs/heads/main"));

    h.terminate();
    h.wait_for_log("stopping");
    // New connections are no longer accepted...
    assert_eq!(h.ssh_exec("collab-whoami").code, 255);
    // ... but the running command finishes normally.
    let mut stdin = ssh.stdin.take().unwrap();
    stdin.write_all(b"0000").unwrap();
    drop(stdin);
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    let status = ssh.wait().unwrap();
    assert!(
        status.success(),
        "fetch ended with {status}; log:\n{}",
        h.log()
    );
    let exit = h.wait_exit();
    assert!(
        exit.success(),
        "server exited with {exit}; log:\n{}",
        h.log()
    );
}
