//! What the CLI says (issue #19): usage without arguments, one error line
//! without repeated causes, `git -c collab.signingKey=…` honoured, `sync`
//! reporting what it pushed, a man page for `git collab --help`; and the
//! server saying where it listens once (issue 50).

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

/// `events --help` says what `--follow` does (issue 32: it said the
/// replay came first, while without `--since` only new events are shown,
/// as docs/cli.md says).
#[test]
fn events_help_says_follow_shows_only_new_events() {
    let out = cli().args(["events", "--help"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(help.contains("without --since, only new ones"), "{help}");
    assert!(!help.contains("then with --follow"), "{help}");
    let docs =
        std::fs::read_to_string(collab_testkit::workspace_root().join("docs/cli.md")).unwrap();
    let docs = docs.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        docs.contains("(without `--since`, only new ones)"),
        "docs/cli.md and --help disagree"
    );
}

/// A clone made from the web page's HTTP URL, or from the repository's
/// path on the server's disk, of a server that holds 3 issues: `git collab
/// issue list` used to print nothing and succeed (issue 32). Now it fails
/// and says to use the server's ssh URL; a plain git remote without the
/// export stays local.
#[test]
fn an_http_or_path_clone_of_a_collab_server_says_to_use_ssh() {
    let h = ServerHarness::start();
    let repo = h.create_repo("r");
    collab_testkit::write_live(&repo.join("collab-policy.toml"), "public = true\n");
    let work = h.clone_repo("r", "seed");
    h.commit_file(&work, "f", b"1", "one");
    h.ssh_push(&work, &["HEAD:main"]);
    for n in 0..3 {
        h.open_server_issue("r", &format!("issue {n}"));
    }
    let http_url = format!("{}/r.git", h.http_url());
    // The signed export follows the writes; wait until git can see it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = Command::new("git")
            .args(["ls-remote", &http_url, "refs/collab/export/*"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).lines().count() >= 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no export over http: {out:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for (name, url) in [
        ("http", http_url.clone()),
        ("path", repo.display().to_string()),
    ] {
        let dir = h.temp_dir().join(format!("clone-{name}"));
        let out = Command::new("git")
            .args(["clone", "-q", &url])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let listed = git_with_cli(&h, &dir)
            .args(["collab", "issue", "list"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&listed.stderr);
        assert_eq!(listed.status.code(), Some(1), "{name}: {listed:?}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("is a git-collab server"), "{stderr}");
        assert!(stderr.contains("ssh://"), "{stderr}");
        // Forcing local mode still works (the DAGs in this clone).
        let local = git_with_cli(&h, &dir)
            .args(["collab", "issue", "list", "--mode", "local"])
            .output()
            .unwrap();
        assert!(local.status.success(), "{local:?}");
    }
    // A plain git repository (no export) as the remote: local, as before.
    let plain = h.temp_dir().join("plain.git");
    assert!(Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(&plain)
        .status()
        .unwrap()
        .success());
    let dir = h.temp_dir().join("clone-plain");
    assert!(Command::new("git")
        .args(["clone", "-q"])
        .arg(&plain)
        .arg(&dir)
        .status()
        .unwrap()
        .success());
    let listed = git_with_cli(&h, &dir)
        .args(["collab", "issue", "list"])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
}

/// PuTTY's plink takes the port as `-P` (issue 32: the CLI always passed
/// OpenSSH's `-p`). The CLI follows git's rules: the variant from
/// GIT_SSH_VARIANT, else `ssh.variant`, else the program's name. A stand-in
/// `plink` logs its arguments and hands them to OpenSSH translated back.
#[test]
fn plink_and_the_other_ssh_variants_get_their_own_options() {
    use std::os::unix::fs::PermissionsExt as _;
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "c");
    let bin = h.temp_dir().join("putty-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = h.temp_dir().join("plink.log");
    let mut options = h.ssh_options(&h.ssh_client_key());
    let p = options.iter().position(|o| o == "-p").unwrap();
    options.drain(p..p + 2);
    let quoted: Vec<String> = options
        .iter()
        .map(|o| collab_proto::tokens::shell_quote(o))
        .collect();
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> {log}\n\
         for a; do shift; case \"$a\" in -P) set -- \"$@\" -p;; -batch) ;; *) set -- \"$@\" \"$a\";; esac; done\n\
         exec ssh {} \"$@\"\n",
        quoted.join(" "),
        log = log.display()
    );
    for name in ["plink", "tortoiseplink", "ssh-wrapper"] {
        let path = bin.join(name);
        std::fs::write(&path, &script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let port = h.ssh_port().to_string();
    let run = |program: &str, variant: Option<&str>| {
        let _ = std::fs::remove_file(&log);
        let mut cmd = h.client_command(collab_testkit::cli_bin(), &h.ssh_client_key(), &clone);
        cmd.env("GIT_COLLAB_SSH_COMMAND", bin.join(program))
            .args(["issue", "list", "--json"]);
        if let Some(variant) = variant {
            cmd.env("GIT_SSH_VARIANT", variant);
        }
        let out = cmd.output().unwrap();
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        (out, logged)
    };
    let (out, logged) = run("plink", None);
    assert!(out.status.success(), "{out:?}");
    assert!(logged.contains(&format!("-P {port} ")), "{logged}");
    assert!(!logged.contains(" -p "), "{logged}");
    let (out, logged) = run("tortoiseplink", None);
    assert!(out.status.success(), "{out:?}");
    assert!(
        logged.starts_with(&format!("-batch -P {port} ")),
        "{logged}"
    );
    // PuTTY has no OpenSSH connection sharing: the CLI never offers it one.
    assert!(!logged.contains("ControlMaster"), "{logged}");
    // Any other name is OpenSSH-compatible (and gets connection reuse, so
    // the command is the last line logged, after `-G`'s probe);
    // GIT_SSH_VARIANT overrides.
    let (out, logged) = run("ssh-wrapper", None);
    assert!(out.status.success(), "{out:?}");
    let command = logged.lines().last().unwrap_or_default();
    assert!(command.contains(&format!("-p {port} git@")), "{logged}");
    assert!(!logged.contains("-P "), "{logged}");
    let (out, logged) = run("ssh-wrapper", Some("plink"));
    assert!(out.status.success(), "{out:?}");
    assert!(logged.starts_with(&format!("-P {port} ")), "{logged}");
    // `simple` takes no options: a port it cannot pass is a clear error.
    let (out, logged) = run("ssh-wrapper", Some("simple"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr.contains("ssh variant 'simple' does not support setting port"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(logged.is_empty(), "nothing ran: {logged}");
    let (out, _) = run("ssh-wrapper", Some("openssh"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("GIT_SSH_VARIANT is 'openssh'"),
        "{out:?}"
    );
}

#[test]
fn the_server_says_where_it_listens_once() {
    let h = ServerHarness::start();
    let log = h.log();
    assert_eq!(
        log.lines().filter(|l| l.contains("listening ssh=")).count(),
        1,
        "{log}"
    );
}
