//! `collab-repo describe|visibility|set-head|rename|delete`, `help`,
//! push-to-create, `git archive --remote` and HEAD after a first push whose
//! branch is not `main` (issue #19), with the real server, `ssh` and `git`.

use collab_testkit as common;

use common::{HarnessOptions, ServerHarness, NOT_FOUND};

/// A fresh local repository in the temp dir with one commit on `branch`.
fn local_repo(h: &ServerHarness, dir: &str, branch: &str) -> std::path::PathBuf {
    let path = h.temp_dir().join(dir);
    std::fs::create_dir_all(&path).unwrap();
    h.git(&path, &["init", "-q", "-b", branch]);
    h.commit_file(&path, "README.md", b"# hello\n", "first");
    path
}

#[test]
fn a_master_only_push_makes_head_master_so_clones_check_out() {
    let h = ServerHarness::start();
    h.create_repo("legacy");
    let local = local_repo(&h, "legacy-local", "master");
    h.git(
        &local,
        &["remote", "add", "origin", &h.repo_url("legacy.git")],
    );
    h.ssh_push(&local, &["master"]);

    let head = std::fs::read_to_string(h.repos_dir().join("legacy.git/HEAD")).unwrap();
    assert_eq!(head.trim(), "ref: refs/heads/master");
    let out = h.git_as(
        &h.ssh_client_key(),
        h.temp_dir(),
        &[
            "clone",
            "--depth",
            "1",
            &h.repo_url("legacy.git"),
            "legacy-copy",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("nonexistent ref"),
        "{out:?}"
    );
    assert!(h.temp_dir().join("legacy-copy/README.md").is_file());

    // An explicit choice is respected afterwards: HEAD is only repaired
    // when it names a branch that does not exist.
    h.commit_file(&local, "b.txt", b"b", "b");
    h.git(&local, &["push", "-q", "origin", "master:trunk"]);
    let set = h.ssh_exec("collab-repo set-head legacy trunk");
    assert!(set.success(), "{set:?}");
    assert_eq!(set.json()["head"], "trunk");
    h.git(&local, &["push", "-q", "origin", "master"]);
    let head = std::fs::read_to_string(h.repos_dir().join("legacy.git/HEAD")).unwrap();
    assert_eq!(head.trim(), "ref: refs/heads/trunk");
    let missing = h.ssh_exec("collab-repo set-head legacy nope");
    assert_eq!(missing.code, 1);
    assert!(missing.stderr.contains("no branch"), "{missing:?}");
}

#[test]
fn describe_and_visibility_need_rewind_to_change_and_show_on_the_web() {
    let h = ServerHarness::start();
    h.create_repo("site");
    let writer = h.authorized_key("writer");

    let set = h.ssh_exec("collab-repo describe site 'A small forge'");
    assert!(set.success(), "{set:?}");
    let shown = h.ssh_exec_as(&writer, "collab-repo describe site", b"");
    assert_eq!(shown.json()["description"], "A small forge");
    let refused = h.ssh_exec_as(&writer, "collab-repo describe site 'mine now'", b"");
    assert_eq!(refused.code, 1);
    assert!(refused.stderr.contains("permission denied"), "{refused:?}");
    let bad = h.ssh_exec(&format!("collab-repo describe site '{}'", "x".repeat(1100)));
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.stderr.contains("at most 1024"), "{bad:?}");

    let page = |path: &str| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("{}{path}", h.http_url()))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert_eq!(page("/site"), "404");
    let public = h.ssh_exec("collab-repo visibility site public");
    assert!(public.success(), "{public:?}");
    assert_eq!(public.json()["visibility"], "public");
    assert_eq!(page("/site"), "200");
    let policy =
        std::fs::read_to_string(h.repos_dir().join("site.git/collab-policy.toml")).unwrap();
    assert!(policy.contains("public = true"), "{policy}");
    let refused = h.ssh_exec_as(&writer, "collab-repo visibility site private", b"");
    assert_eq!(refused.code, 1);
    assert_eq!(page("/site"), "200");
    let private = h.ssh_exec("collab-repo visibility site private");
    assert_eq!(private.json()["visibility"], "private");
    assert_eq!(page("/site"), "404");
}

#[test]
fn rename_moves_the_repository_with_its_leases_and_tokens() {
    let h = ServerHarness::start();
    h.create_repo("old");
    let local = local_repo(&h, "old-local", "main");
    h.git(&local, &["remote", "add", "origin", &h.repo_url("old.git")]);
    h.ssh_push(&local, &["main"]);
    let issue = h.open_server_issue("old", "Move me");
    let first = h.ssh_exec(&format!("collab-lease acquire old {issue} --ttl 600"));
    assert_eq!(first.json()["token"], 1, "{first:?}");

    let renamed = h.ssh_exec("collab-repo rename old team/new");
    assert!(renamed.success(), "{renamed:?}");
    assert_eq!(renamed.json()["repo"], "team/new.git");
    assert!(!h.repos_dir().join("old.git").exists());
    assert_eq!(h.ssh_exec("collab-lease list old").stderr, NOT_FOUND);
    let listed = h.ssh_exec("collab-lease list team/new").json();
    assert_eq!(listed["leases"][0]["token"], 1, "{listed}");
    // The token sequence continues under the new name: never 1 twice.
    h.ssh_exec(&format!("collab-lease release team/new {issue}"));
    let again = h.ssh_exec(&format!("collab-lease acquire team/new {issue}"));
    assert_eq!(again.json()["token"], 2, "{again:?}");
    // The issue moved with the repository.
    let shown = h.ssh_exec(&format!("collab-issue show team/new {issue}"));
    assert_eq!(shown.json()["title"], "Move me", "{shown:?}");
    let out = h.git_as(
        &h.ssh_client_key(),
        h.temp_dir(),
        &["ls-remote", &h.repo_url("team/new.git")],
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("refs/heads/main"));

    h.create_repo("taken");
    let clash = h.ssh_exec("collab-repo rename team/new taken");
    assert_eq!(clash.code, 1);
    assert!(clash.stderr.contains("already exists"), "{clash:?}");
    let writer = h.authorized_key("writer");
    let refused = h.ssh_exec_as(&writer, "collab-repo rename taken mine", b"");
    assert_eq!(refused.code, 1);
    assert!(h.repos_dir().join("taken.git").exists());
}

#[test]
fn delete_needs_the_name_repeated_and_rewind() {
    let h = ServerHarness::start();
    h.create_repo("doomed");
    let writer = h.authorized_key("writer");
    let unconfirmed = h.ssh_exec("collab-repo delete doomed --confirm other");
    assert_eq!(unconfirmed.code, 1);
    assert!(
        unconfirmed.stderr.contains("repeat its name"),
        "{unconfirmed:?}"
    );
    let refused = h.ssh_exec_as(&writer, "collab-repo delete doomed --confirm doomed", b"");
    assert_eq!(refused.code, 1);
    assert!(h.repos_dir().join("doomed.git").exists());
    let missing = h.ssh_exec("collab-repo delete ghost --confirm ghost");
    assert_eq!(missing.stderr, NOT_FOUND);

    let deleted = h.ssh_exec("collab-repo delete doomed --confirm doomed");
    assert!(deleted.success(), "{deleted:?}");
    assert!(!h.repos_dir().join("doomed.git").exists());
    assert_eq!(h.ssh_exec("collab-repo describe doomed").stderr, NOT_FOUND);
    let listed = h.ssh_exec("collab-repo list").json();
    assert_eq!(listed["repos"].as_array().unwrap().len(), 0, "{listed}");
}

#[test]
fn private_repositories_answer_admin_verbs_like_missing_ones() {
    let h = ServerHarness::start();
    let path = h.create_repo("secret");
    collab_testkit::write_live(&path.join("collab-policy.toml"), "read = []\nwrite = []\n");
    let stranger = h.authorized_key("stranger");
    for verb in [
        "collab-repo describe secret",
        "collab-repo describe secret 'x'",
        "collab-repo visibility secret",
        "collab-repo visibility secret public",
        "collab-repo set-head secret main",
        "collab-repo rename secret mine",
        "collab-repo delete secret --confirm secret",
    ] {
        let out = h.ssh_exec_as(&stranger, verb, b"");
        let ghost = h.ssh_exec_as(&stranger, &verb.replace("secret", "ghost"), b"");
        assert_eq!(out.stderr, NOT_FOUND, "{verb}: {out:?}");
        assert_eq!(out, ghost, "{verb}");
    }
}

#[test]
fn help_lists_the_verbs_open_to_the_caller() {
    let h = ServerHarness::start();
    let admin = h.ssh_exec("help").json();
    let verbs = admin["verbs"].to_string();
    assert!(verbs.contains("collab-repo create"), "{admin}");
    assert!(verbs.contains("collab-lease"), "{admin}");
    let writer = h.authorized_key("writer");
    let plain = h.ssh_exec_as(&writer, "help", b"").json();
    assert!(
        !plain["verbs"].to_string().contains("collab-repo create"),
        "{plain}"
    );
    assert!(
        plain["verbs"].to_string().contains("collab-lease"),
        "{plain}"
    );
    // Every verb family, each with the access it needs.
    let entries = plain["verbs"].as_array().unwrap();
    let access_of = |prefix: &str| -> Vec<String> {
        entries
            .iter()
            .filter(|v| v["verb"].as_str().unwrap().starts_with(prefix))
            .map(|v| v["access"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(access_of("collab-issue show"), ["read"], "{plain}");
    assert_eq!(access_of("collab-issue open"), ["write"], "{plain}");
    assert_eq!(access_of("collab-events watch").len(), 1, "{plain}");
    // The owner's verbs, and `approve` (administrators).
    assert_eq!(access_of("collab-hook").len(), 2, "{plain}");
}

#[test]
fn create_refusal_says_how_to_get_access() {
    let h = ServerHarness::start();
    let writer = h.authorized_key("writer");
    let out = h.ssh_exec_as(&writer, "collab-repo create demo", b"");
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("needs rewind access"), "{out:?}");
    assert!(out.stderr.contains("initial_admin_keys"), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
}

#[test]
fn push_to_create_is_opt_in_and_for_creators_only() {
    let off = ServerHarness::start();
    let local = local_repo(&off, "l", "main");
    let out = off.git_as(
        &off.ssh_client_key(),
        &local,
        &["push", &off.repo_url("fresh.git"), "main"],
    );
    assert!(!out.status.success());
    assert!(!off.repos_dir().join("fresh.git").exists());

    let on = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_PUSH_TO_CREATE".into(), "true".into())],
        ..Default::default()
    });
    let local = local_repo(&on, "l", "trunk");
    let writer = on.authorized_key("writer");
    let refused = on.git_as(&writer, &local, &["push", &on.repo_url("byw.git"), "trunk"]);
    assert!(!refused.status.success());
    assert!(!on.repos_dir().join("byw.git").exists());
    let pushed = on.git_as(
        &on.ssh_client_key(),
        &local,
        &["push", &on.repo_url("team/fresh.git"), "trunk"],
    );
    assert!(pushed.status.success(), "{pushed:?}");
    let head = std::fs::read_to_string(on.repos_dir().join("team/fresh.git/HEAD")).unwrap();
    assert_eq!(head.trim(), "ref: refs/heads/trunk");
}

#[test]
fn git_archive_remote_works_for_readers_only() {
    let h = ServerHarness::start();
    h.create_repo("arch");
    let local = local_repo(&h, "arch-local", "main");
    h.git(
        &local,
        &["remote", "add", "origin", &h.repo_url("arch.git")],
    );
    h.ssh_push(&local, &["main"]);
    let out = h.git_as(
        &h.ssh_client_key(),
        h.temp_dir(),
        &[
            "archive",
            "--format=tar",
            "--remote",
            &h.repo_url("arch.git"),
            "main",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.windows(9).any(|w| w == b"README.md"));

    let path = h.repos_dir().join("arch.git");
    collab_testkit::write_live(&path.join("collab-policy.toml"), "read = []\nwrite = []\n");
    let stranger = h.authorized_key("stranger");
    let refused = h.git_as(
        &stranger,
        h.temp_dir(),
        &["archive", "--remote", &h.repo_url("arch.git"), "main"],
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("repository not found"),
        "{refused:?}"
    );
}

/// `ssh` as `key` with extra `-o` options; exit code and stderr.
fn ssh_with(h: &ServerHarness, key: &std::path::Path, options: &[&str]) -> common::SshOutput {
    let mut args: Vec<&str> = Vec::new();
    for o in options {
        args.push("-o");
        args.push(o);
    }
    args.extend(["git@127.0.0.1", "collab-whoami"]);
    h.ssh_raw(key, &args, b"")
}

#[test]
fn sha1_rsa_signatures_are_refused_unless_enabled_and_aes128_gcm_is_offered() {
    let h = ServerHarness::start();
    let rsa = h.temp_dir().join("keys/rsa");
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "rsa", "-b", "2048", "-N", "", "-f"])
        .arg(&rsa)
        .output()
        .unwrap();
    assert!(out.status.success());
    h.authorize_key(&rsa, false);
    let sha2 = ssh_with(&h, &rsa, &["PubkeyAcceptedAlgorithms=rsa-sha2-256"]);
    assert!(sha2.success(), "{sha2:?}");
    let sha1 = ssh_with(&h, &rsa, &["PubkeyAcceptedAlgorithms=ssh-rsa"]);
    assert_ne!(sha1.code, 0, "{sha1:?}");
    let gcm = ssh_with(&h, &h.ssh_client_key(), &["Ciphers=aes128-gcm@openssh.com"]);
    assert!(gcm.success(), "{gcm:?}");
    let ecdsa_host = ssh_with(
        &h,
        &h.ssh_client_key(),
        &["HostKeyAlgorithms=ecdsa-sha2-nistp256"],
    );
    assert_ne!(
        ecdsa_host.code, 0,
        "no legacy host keys unless enabled: {ecdsa_host:?}"
    );

    let legacy = ServerHarness::start_with(HarnessOptions {
        env: vec![
            ("GIT_COLLAB_SSH__ALLOW_SHA1_RSA".into(), "true".into()),
            ("GIT_COLLAB_SSH__LEGACY_HOST_KEYS".into(), "true".into()),
        ],
        ..Default::default()
    });
    legacy.authorize_key(&rsa, false);
    let sha1 = ssh_with(&legacy, &rsa, &["PubkeyAcceptedAlgorithms=ssh-rsa"]);
    assert!(sha1.success(), "{sha1:?}");
    for algorithm in ["ecdsa-sha2-nistp256", "rsa-sha2-512", "ssh-ed25519"] {
        let out = ssh_with(
            &legacy,
            &legacy.ssh_client_key(),
            &[&format!("HostKeyAlgorithms={algorithm}")],
        );
        assert!(out.success(), "{algorithm}: {out:?}");
    }
}

#[test]
fn a_refused_key_is_logged_with_its_fingerprint() {
    let h = ServerHarness::start();
    let stranger = h.named_key("stranger");
    let out = h.ssh_exec_as(&stranger, "collab-whoami", b"");
    assert_ne!(out.code, 0);
    let fp = common::fingerprint(&stranger);
    h.wait_for_log(&fp);
    assert!(h.log().contains("key refused"), "{}", h.log());
}

#[test]
fn the_web_falls_back_to_an_existing_branch_when_head_dangles() {
    let h = ServerHarness::start();
    let path = h.create_repo("old");
    collab_testkit::write_live(&path.join("collab-policy.toml"), "public = true\n");
    let local = local_repo(&h, "old-local", "master");
    h.git(&local, &["remote", "add", "origin", &h.repo_url("old.git")]);
    h.ssh_push(&local, &["master"]);
    // As a repository pushed before HEAD was repaired on push.
    let out = std::process::Command::new("git")
        .args(["symbolic-ref", "HEAD", "refs/heads/main"])
        .current_dir(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let get = |p: &str| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-w", "\n%{http_code} %{redirect_url}"])
            .arg(format!("{}{p}", h.http_url()))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let summary = get("/old");
    assert!(!summary.contains("This repository is empty"), "{summary}");
    assert!(summary.contains("README.md"), "{summary}");
    let tree = get("/old/-/tree");
    assert!(tree.trim_end().ends_with("/old/-/tree/master"), "{tree}");
}
