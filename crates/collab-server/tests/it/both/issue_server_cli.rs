//! `git-collab issue ...` in server mode, end to end: the real CLI in a
//! clone made over SSH, talking to the real server's `collab-issue` through
//! the real `ssh` (`GIT_COLLAB_SSH_COMMAND` picks the key). Covers every
//! issue subcommand, mode detection (once, remembered, forced either way),
//! fencing with `--lease-token`, claiming without a sync, a read-only
//! principal, `--offline` over the fetched export, and `verify` of the
//! export once the server's key is trusted.

use collab_testkit as common;
use collab_testkit::cli_bin;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use collab_record::event::{Action, Author, Event, IssueComment};
use collab_record::sign::SigningKey;
use collab_record::store;
use common::{fingerprint, ServerHarness, SshOutput};
use serde_json::Value;

struct Fixture {
    h: ServerHarness,
    clone: PathBuf,
    key: PathBuf,
}

fn setup() -> Fixture {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "work");
    let key = h.ssh_client_key();
    Fixture { h, clone, key }
}

/// Run `git-collab ARGS` in `dir` as `key`, feeding `stdin`.
fn collab_in(h: &ServerHarness, key: &Path, dir: &Path, args: &[&str], stdin: &[u8]) -> SshOutput {
    let mut child = h
        .client_command(cli_bin(), key, dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run git-collab");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    SshOutput::from_output(out)
}

impl Fixture {
    fn run(&self, args: &[&str]) -> SshOutput {
        collab_in(&self.h, &self.key, &self.clone, args, b"")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(out.code, 0, "{args:?}: {out:?}");
        assert_eq!(out.stderr, "", "{args:?}: {out:?}");
        out.stdout
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&self.ok(&args)).unwrap()
    }

    /// Opens an issue over the server; returns its full id.
    fn open(&self, title: &str) -> String {
        let v = self.json(&["issue", "open", "-t", title]);
        v["issue"].as_str().unwrap().to_string()
    }

    fn git(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.h.git(&self.clone, args).stdout)
            .trim()
            .to_string()
    }

    fn config(&self, key: &str) -> Option<String> {
        let out = self.h.git_as(&self.key, &self.clone, &["config", key]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

#[test]
fn every_issue_subcommand_goes_to_the_server() {
    let f = setup();
    // open, body from stdin, labels.
    let out = collab_in(
        &f.h,
        &f.key,
        &f.clone,
        &[
            "issue",
            "open",
            "-t",
            "Crash on start",
            "-b",
            "-",
            "-l",
            "bug",
            "-l",
            "ui",
        ],
        b"it crashes\nat start\n",
    );
    assert_eq!(out.code, 0, "{out:?}");
    let short = out
        .stdout
        .strip_prefix("opened ")
        .unwrap_or_else(|| panic!("{out:?}"))
        .trim()
        .to_string();
    assert_eq!(short.len(), 8);
    // Nothing was written to this clone: the server holds the issue.
    assert_eq!(f.git(&["for-each-ref", "refs/collab/"]), "");

    let listed = f.ok(&["issue", "list"]);
    assert_eq!(
        listed,
        format!("{short}  open    Crash on start  [bug, ui]\n")
    );
    let rows = f.json(&["issue", "list"]);
    let row = &rows[0];
    let id = row["id"].as_str().unwrap().to_string();
    assert!(id.starts_with(&short) && id.len() == 40, "{row}");
    assert_eq!(row["title"], "Crash on start");
    assert_eq!(row["status"], "open");
    assert_eq!(row["labels"], serde_json::json!(["bug", "ui"]));
    assert_eq!(row["comments"], 0);
    assert!(row["created_at"].as_str().unwrap().ends_with('Z'), "{row}");

    let v = f.json(&["issue", "comment", &short, "-m", "me too"]);
    assert_eq!(v["issue"], id.as_str());
    assert_eq!(
        f.ok(&["issue", "edit", &id[..6], "-t", "Crash at start"]),
        format!("edited {short}\n")
    );
    assert_eq!(
        f.ok(&["issue", "label", &short, "--add", "p1", "--remove", "ui"]),
        format!("labelled {short}\n")
    );
    assert_eq!(
        f.ok(&["issue", "close", &short, "-r", "fixed"]),
        format!("closed {short}\n")
    );
    assert_eq!(f.ok(&["issue", "list"]), "");
    assert_eq!(
        f.json(&["issue", "list", "--closed"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        f.ok(&["issue", "reopen", &short]),
        format!("reopened {short}\n")
    );

    let other = f.open("Needs the crash fixed");
    // The typed prefix is echoed as the issue it resolved to (issue 32).
    assert_eq!(
        f.ok(&["issue", "link", &short, "blocks", &other[..5]]),
        format!("linked {short} blocks {}\n", &other[..8])
    );
    let shown = f.ok(&["issue", "show", &short]);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[0], format!("{short} Crash at start"));
    assert_eq!(lines[1], "status: open");
    // Ungoverned, the server names an author by the key's comment.
    let me = "client";
    assert_eq!(lines[2], format!("author: {me}"));
    assert!(lines[3].starts_with("created: "), "{shown}");
    assert_eq!(lines[5], "labels: bug, p1");
    assert!(
        lines[6].starts_with("blocks: ") && lines[6].contains(&other[..8]),
        "{shown}"
    );
    assert!(shown.contains("\nit crashes\nat start\n"), "{shown}");
    assert!(
        shown.contains(&format!(" {me} at ")) && shown.ends_with("\nme too\n"),
        "{shown}"
    );
    let shown_other = f.ok(&["issue", "show", &other[..8]]);
    assert!(shown_other.contains("\nblocked by: "), "{shown_other}");

    let v = f.json(&["issue", "show", &id]);
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["status"], "open");
    assert_eq!(v["closed_reason"], Value::Null);
    assert_eq!(v["body"], "it crashes\nat start\n");
    assert_eq!(v["comments"].as_array().unwrap().len(), 1);
    assert_eq!(v["comments"][0]["body"], "me too");
    assert_eq!(v["links"]["blocks"].as_array().unwrap().len(), 1);

    f.ok(&["issue", "unlink", &short, "blocks", &other]);
    let v = f.json(&["issue", "show", &id]);
    assert_eq!(v["links"]["blocks"], serde_json::json!([]));

    // The server's errors pass through: one line, exit 1.
    let out = f.run(&["issue", "show", "ffff"]);
    assert_eq!((out.code, out.stdout.as_str()), (1, ""), "{out:?}");
    assert_eq!(out.stderr, "error: no issue matches 'ffff'\n");
    let out = f.run(&["issue", "comment", "zz", "-m", "x"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.starts_with("error: invalid issue id 'zz'"),
        "{out:?}"
    );
}

/// An ssh command that logs every remote command to `log`, then runs the
/// harness's ssh with `key`.
fn logging_ssh(h: &ServerHarness, key: &Path, log: &Path) -> String {
    format!(
        "f() {{ echo \"$*\" >> '{}'; {} \"$@\"; }}; f",
        log.display(),
        h.git_ssh_command(key)
    )
}

#[test]
fn the_mode_is_detected_once_remembered_and_can_be_forced() {
    let f = setup();
    let log = f.h.temp_dir().join("ssh.log");
    let run_logged = |args: &[&str]| {
        let out =
            f.h.client_command(cli_bin(), &f.key, &f.clone)
                .env("GIT_COLLAB_SSH_COMMAND", logging_ssh(&f.h, &f.key, &log))
                .args(args)
                .output()
                .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run_logged(&["issue", "open", "-t", "one"]);
    run_logged(&["issue", "list"]);
    run_logged(&["issue", "list", "--all"]);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        logged.matches("--limit 1\n").count(),
        1,
        "detection runs once: {logged}"
    );
    assert_eq!(logged.matches("collab-issue").count(), 4, "{logged}");
    assert_eq!(
        f.config("remote.origin.collabMode").as_deref(),
        Some("server")
    );
    assert_eq!(
        f.config("remote.origin.collabModeUrl"),
        Some(f.h.repo_url("r"))
    );

    // --mode local: the DAGs of this clone, as with a plain git remote.
    f.ok(&["key", "generate"]);
    let out = f.ok(&["issue", "--mode", "local", "open", "-t", "local one"]);
    assert!(out.starts_with("opened "), "{out}");
    assert_eq!(
        f.git(&["for-each-ref", "--count=9", "refs/collab/issues/"])
            .lines()
            .count(),
        1
    );
    let titles = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["title"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(titles(f.json(&["issue", "list"])), ["one"]);
    assert_eq!(
        titles(f.json(&["issue", "list", "--mode", "local"])),
        ["local one"]
    );
    // collab.mode forces it for every command, and `auto` gives it back.
    f.h.git(&f.clone, &["config", "collab.mode", "local"]);
    assert_eq!(titles(f.json(&["issue", "list"])), ["local one"]);
    assert_eq!(
        titles(f.json(&["issue", "list", "--mode", "server"])),
        ["one"]
    );
    f.h.git(&f.clone, &["config", "collab.mode", "auto"]);
    assert_eq!(titles(f.json(&["issue", "list"])), ["one"]);
    f.h.git(&f.clone, &["config", "collab.mode", "sometimes"]);
    let out = f.run(&["issue", "list"]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr
            .starts_with("error: invalid collab.mode 'sometimes'"),
        "{out:?}"
    );
    f.h.git(&f.clone, &["config", "--unset", "collab.mode"]);

    // Sync in server mode pushes no issue DAG (the server owns issues).
    f.ok(&["sync"]);
    let remote_refs = f.h.ls_remote_as(&f.key, "r");
    assert!(
        !remote_refs.stdout.contains("refs/collab/issues/"),
        "{remote_refs:?}"
    );

    // A remote URL that moved is detected again: the server's repository
    // as a plain path carries its issue export, so the issues are the
    // server's, reached over ssh only: the command says so (issue 32)
    // instead of listing this clone's DAGs as if they were all there is.
    let bare = f.h.repos_dir().join("r.git");
    // The signed export follows the server's writes; wait until it is there.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while f
        .h
        .git(
            &f.clone,
            &[
                "ls-remote",
                &bare.display().to_string(),
                "refs/collab/export/*",
            ],
        )
        .stdout
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no issue export in {}",
            bare.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    f.h.git(
        &f.clone,
        &["remote", "set-url", "origin", &bare.display().to_string()],
    );
    let out = f.run(&["issue", "list"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("is a git-collab server"), "{out:?}");
    assert_eq!(
        titles(f.json(&["issue", "list", "--mode", "local"])),
        ["local one"]
    );

    // An unreachable server decides nothing and says how to choose.
    let g = setup();
    let out =
        g.h.client_command(cli_bin(), &g.key, &g.clone)
            .env(
                "GIT_COLLAB_SSH_COMMAND",
                "f() { echo 'ssh: connect to host: Connection refused' >&2; exit 255; }; f",
            )
            .args(["issue", "list"])
            .output()
            .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: cannot tell whether remote 'origin' is a git-collab server")
            && stderr.contains("--mode server|local"),
        "{stderr}"
    );
    assert_eq!(g.config("remote.origin.collabMode"), None);
}

#[test]
fn lease_tokens_fence_writes_and_claims_need_no_sync() {
    let f = setup();
    let id = f.open("Fence me");
    // The server resolves the new issue at once: no sync in between.
    let claim = f.json(&["issue", "claim", &id[..8], "--ttl", "600"]);
    let token = claim["token"].as_i64().unwrap();
    let token_arg = token.to_string();
    f.ok(&[
        "issue",
        "comment",
        &id[..8],
        "-m",
        "mine",
        "--lease-token",
        &token_arg,
    ]);

    let stale = (token + 1).to_string();
    let out = f.run(&[
        "issue",
        "comment",
        &id[..8],
        "-m",
        "stale",
        "--lease-token",
        &stale,
    ]);
    assert_eq!(out.code, 4, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        format!(
            "lease token refused: issue {} is held by client with token {token}; nothing was written\n",
            &id[..8],
        )
    );
    let out = f.run(&[
        "issue",
        "close",
        &id[..8],
        "--lease-token",
        &stale,
        "--json",
    ]);
    assert_eq!(out.code, 4, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (v["status"].as_str(), v["token"].as_i64()),
        (Some("fenced"), Some(token))
    );
    let v = f.json(&["issue", "show", &id]);
    assert_eq!(v["comments"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["status"], "open");

    // Closing ends the lease.
    f.ok(&["issue", "close", &id[..8], "--lease-token", &token_arg]);
    assert_eq!(f.ok(&["issue", "claims"]), "");
    // A token on a read is refused before anything is sent.
    let out = f.run(&["issue", "show", &id[..8], "--lease-token", "1"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with("error: "), "{out:?}");
}

#[test]
fn a_read_only_principal_lists_but_cannot_comment() {
    let f = setup();
    let id = f.open("Read me");
    let reader = f.h.authorized_key("reader");
    std::fs::write(
        f.h.repos_dir().join("r.git").join("collab-policy.toml"),
        format!("read = [\"*\"]\nwrite = [\"{}\"]\n", fingerprint(&f.key)),
    )
    .unwrap();
    let as_reader = |args: &[&str]| collab_in(&f.h, &reader, &f.clone, args, b"");
    let out = as_reader(&["issue", "list", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(&id), "{out:?}");
    let out = as_reader(&["issue", "comment", &id[..8], "-m", "let me in"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with("error: "), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert_eq!(
        f.json(&["issue", "show", &id])["comments"],
        serde_json::json!([])
    );
}

/// `issue fetch` until the export holds `want` issues whose comment counts
/// match (the server exports shortly after each write); a hang guard, not
/// a timing assertion.
fn fetch_export_until(f: &Fixture, want: &Value) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        f.ok(&["issue", "fetch"]);
        let out = f.run(&["issue", "list", "--offline", "--all", "--json"]);
        if out.code == 0 {
            let got: Value = serde_json::from_str(&out.stdout).unwrap();
            if summary(&got) == summary(want) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "export never caught up: {out:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// What the export must agree on with the server: ids, titles, status,
/// labels and comment counts.
fn summary(rows: &Value) -> Vec<(String, String, String, Value, Value)> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["title"].as_str().unwrap().to_string(),
                r["status"].as_str().unwrap().to_string(),
                r["labels"].clone(),
                r["comments"].clone(),
            )
        })
        .collect()
}

#[test]
fn offline_reads_and_verify_use_the_signed_export() {
    let f = setup();
    let a = f.open("First");
    let b = f.open("Second");
    f.ok(&["issue", "comment", &a[..8], "-m", "hello"]);
    f.ok(&["issue", "label", &b[..8], "--add", "bug"]);
    f.ok(&["issue", "close", &b[..8], "-r", "dup"]);

    // Before any fetch there is nothing to read offline.
    let out = f.run(&["issue", "list", "--offline"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("git collab issue fetch"), "{out:?}");

    let online = f.json(&["issue", "list", "--all"]);
    fetch_export_until(&f, &online);
    let shown = f.json(&["issue", "show", &a[..8], "--offline"]);
    assert_eq!(shown["id"], a.as_str());
    assert_eq!(shown["comments"][0]["body"], "hello");
    let shown = f.json(&["issue", "show", &b[..8], "--offline"]);
    assert_eq!(
        (shown["status"].as_str(), shown["closed_reason"].as_str()),
        (Some("closed"), Some("dup"))
    );
    assert!(f.ok(&["issue", "list", "--offline"]).contains("First"));
    // The export records the author by fingerprint: text shows it short.
    let me = fingerprint(&f.key);
    let text = f.ok(&["issue", "show", &a[..8], "--offline"]);
    assert!(
        text.contains(&format!("\nauthor: {}\u{2026}\n", &me[..15])) && !text.contains(&me),
        "{text}"
    );

    // Without an allowlist the export is only signature-checked.
    let v = f.json(&["verify"]);
    assert_eq!(v["exports"][0]["remote"], "origin");
    assert_eq!(v["exports"][0]["checked"], false);
    assert_eq!(v["exports"][0]["issues"], 2);

    // Trust the server's key (as collab-whoami publishes it): checked, ok.
    let whoami = f.h.ssh_exec("collab-whoami").json();
    let server_key = whoami["server_key"].as_str().unwrap().to_string();
    f.ok(&["trust", "add", &server_key]);
    let v = f.json(&["verify"]);
    assert_eq!(
        (v["ok"].as_bool(), v["exports"][0]["checked"].as_bool()),
        (Some(true), Some(true)),
        "{v}"
    );
    assert!(f
        .ok(&["issue", "list", "--offline", "--all"])
        .contains("Second"));

    // A forged event on top of the export (validly signed, by a key that
    // is not the server's) is dropped and reported, and never shown.
    let export_ref = format!("refs/collab-remotes/origin/export/issues/{a}");
    let repo = git2::Repository::open(&f.clone).unwrap();
    let tip = repo.refname_to_id(&export_ref).unwrap();
    let forger = SigningKey::generate(&f.h.temp_dir().join("forger"), "forger", false).unwrap();
    let event = Event::new(
        Author {
            name: "Mallory".into(),
            key: forger.public_key_line(),
        },
        chrono::Utc::now(),
        Action::IssueComment(IssueComment {
            body: "forged".into(),
        }),
    );
    let forged = store::write_event_commit(&repo, &[tip], &event, &forger).unwrap();
    repo.reference(&export_ref, forged, true, "forge").unwrap();
    let out = f.run(&["verify", "--json"]);
    assert_eq!(out.code, 1, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let dropped = &v["exports"][0]["dropped"];
    assert_eq!(dropped.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(dropped[0]["reason"], "untrusted");
    assert_eq!(dropped[0]["commit"], forged.to_string().as_str());
    let shown = f.json(&["issue", "show", &a[..8], "--offline"]);
    assert_eq!(shown["comments"].as_array().unwrap().len(), 1, "{shown}");

    // A tampered event (bytes changed under its signature) is dropped as a
    // bad signature.
    let tampered = tamper(&repo, tip);
    repo.reference(&export_ref, tampered, true, "tamper")
        .unwrap();
    let out = f.run(&["verify", "--json"]);
    assert_eq!(out.code, 1, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let dropped = &v["exports"][0]["dropped"];
    assert_eq!(dropped[0]["reason"], "bad_signature", "{v}");
    assert_eq!(dropped[0]["commit"], tampered.to_string().as_str());
}

/// A copy of the event commit `oid` whose `event.json` says another time
/// (still canonical JSON) under the same signature.
fn tamper(repo: &git2::Repository, oid: git2::Oid) -> git2::Oid {
    let commit = repo.find_commit(oid).unwrap();
    let tree = commit.tree().unwrap();
    let json = repo
        .find_blob(tree.get_name("event.json").unwrap().id())
        .unwrap()
        .content()
        .to_vec();
    let text = String::from_utf8(json).unwrap();
    let at = text.find("\"at\":\"").unwrap() + 6;
    let mut changed = text.clone();
    let digit = if &text[at + 3..at + 4] == "9" {
        "8"
    } else {
        "9"
    };
    changed.replace_range(at + 3..at + 4, digit);
    let mut builder = repo.treebuilder(Some(&tree)).unwrap();
    builder
        .insert(
            "event.json",
            repo.blob(changed.as_bytes()).unwrap(),
            0o100644,
        )
        .unwrap();
    let new_tree = repo.find_tree(builder.write().unwrap()).unwrap();
    let parents: Vec<git2::Commit> = commit.parents().collect();
    let parent_refs: Vec<&git2::Commit> = parents.iter().collect();
    let sig = commit.author();
    repo.commit(None, &sig, &sig, "tampered\n", &new_tree, &parent_refs)
        .unwrap()
}
