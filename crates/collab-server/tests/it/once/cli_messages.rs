//! What the CLI says (issue #19): usage without arguments, one error line
//! without repeated causes, `git -c collab.signingKey=…` honoured, `sync`
//! reporting what it pushed, a man page for `git collab --help`.

use collab_testkit as common;

use std::path::Path;
use std::process::Command;

use common::ServerHarness;

fn cli() -> Command {
    let mut cmd = Command::new(collab_testkit::bin("git-collab"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(&k);
        }
    }
    cmd
}

/// `git` with the directory of the built `git-collab` first on PATH, so
/// `git collab …` runs it.
fn git_with_cli(h: &ServerHarness, dir: &Path) -> Command {
    let bin = Path::new(collab_testkit::bin("git-collab"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = h.git_command(&h.ssh_client_key(), dir);
    cmd.env("PATH", path);
    cmd
}

#[test]
fn no_arguments_prints_the_usage_and_fails() {
    let out = cli().output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Usage: git-collab <COMMAND>"), "{stderr}");
    assert!(!stderr.starts_with("error:"), "{stderr}");
}

#[test]
fn an_error_is_one_line_without_repeated_causes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = cli()
        .args(["release", "create", "v1", "/nonexistent/file.tar.gz"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let bad_flag = cli().args(["issue", "list", "--bogus"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&bad_flag.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(stderr.matches("--help").count(), 1, "{stderr}");
}

#[test]
fn git_dash_c_signing_key_is_honoured() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "clone");
    let key = h.temp_dir().join("elsewhere/agent_key");
    let out = git_with_cli(&h, &clone)
        .arg("-c")
        .arg(format!("collab.signingKey={}", key.display()))
        .args(["collab", "key", "generate"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(key.is_file(), "the key went where -c said");
    let opened = git_with_cli(&h, &clone)
        .arg("-c")
        .arg(format!("collab.signingKey={}", key.display()))
        .args([
            "collab",
            "issue",
            "open",
            "-t",
            "Signed elsewhere",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(opened.status.success(), "{opened:?}");
    let shown = cli()
        .args(["key", "show"])
        .env("HOME", h.temp_dir().join("home"))
        .output();
    // Without -c the default key is used (and does not exist here).
    assert!(shown.map(|o| !o.status.success()).unwrap_or(true));
}

#[test]
fn sync_reports_what_it_pushed() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "clone");
    h.commit_file(&clone, "a.txt", b"a", "a");
    h.git(&clone, &["push", "-q", "origin", "main"]);
    h.git(&clone, &["checkout", "-q", "-b", "feature"]);
    h.commit_file(&clone, "b.txt", b"b", "b");
    // Issues and patches are the server's; a patch is still a local DAG
    // that sync pushes to a plain git remote.
    let key = h.ssh_client_key();
    let cli = collab_testkit::bin("git-collab");
    let generated = h
        .client_command(cli, &key, &clone)
        .args(["key", "generate"])
        .output()
        .unwrap();
    assert!(generated.status.success(), "{generated:?}");
    let created = h
        .client_command(cli, &key, &clone)
        .args(["patch", "--mode", "local", "create", "-t", "Pushed by sync"])
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    let plain = h.temp_dir().join("plain.git");
    let init = Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(&plain)
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    h.git(&clone, &["remote", "add", "plain", plain.to_str().unwrap()]);
    let out = git_with_cli(&h, &clone)
        .args(["collab", "sync", "plain"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // One line per pushed ref (the patch and its revision), counted in the
    // summary.
    let pushed = stdout
        .lines()
        .filter(|l| l.starts_with("pushed refs/"))
        .count();
    assert!(pushed >= 1, "{stdout}");
    assert!(stdout.contains(&format!(", {pushed} pushed")), "{stdout}");
    assert!(stdout.contains("pushed refs/collab/patches/"), "{stdout}");
    let again = git_with_cli(&h, &clone)
        .args(["collab", "sync", "plain"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&again.stdout).contains(", 0 pushed"));
}

#[test]
fn man_pages_are_generated_and_git_collab_help_finds_them() {
    let tmp = tempfile::tempdir().unwrap();
    let man1 = tmp.path().join("man/man1");
    let out = cli().arg("man").arg(&man1).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let page = std::fs::read_to_string(man1.join("git-collab.1")).unwrap();
    assert!(page.contains(".TH git-collab"), "{page}");
    assert!(man1.join("git-collab-issue.1").is_file());
    // `git collab --help` is `man git-collab`: with MANPATH pointing at the
    // pages, man renders ours (where man is installed).
    if Command::new("man").arg("--version").output().is_ok() {
        let shown = Command::new("man")
            .args(["-P", "cat", "git-collab"])
            .env("MANPATH", tmp.path().join("man"))
            .env("MANWIDTH", "80")
            .output()
            .unwrap();
        assert!(shown.status.success(), "{shown:?}");
        assert!(String::from_utf8_lossy(&shown.stdout).contains("issue"));
    }
}
