//! Upgrade equality: issues kept as signed DAGs in a repository (as the
//! previous release kept them, including events by a key the repository's
//! allowlist does not trust, an issue whose root is untrusted, and a
//! tampered event) show the same through the new server after import as
//! the DAG replay showed them before. "Before" is `git-collab issue list|show
//! --json` in local mode run on the repository itself (`GIT_DIR`), which is
//! the previous CLI's code path, unchanged; "after" is the same commands in
//! server mode from a clone, over `collab-issue`. The server's replies may
//! carry more fields (principals, links, ...): every field the previous
//! output had must be there with the same value, and nothing more or less
//! in any list. A restart imports nothing twice.

use collab_testkit as common;
use collab_testkit::cli_bin;

use std::path::{Path, PathBuf};
use std::process::Command;

use collab_record::event::{Action, Author, Event, IssueComment};
use collab_record::sign::SigningKey;
use collab_record::{refs, store};
use common::ServerHarness;
use serde_json::Value;

const SERVER: &str = env!("CARGO_BIN_EXE_git-collab-server");

/// The CLI in `dir` with the harness's environment, signing with the key
/// under `xdg`, as `name`.
fn cli(h: &ServerHarness, dir: &Path, xdg: &Path, args: &[&str]) -> String {
    let out = h
        .client_command(cli_bin(), &h.ssh_client_key(), dir)
        .env("XDG_CONFIG_HOME", xdg)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// `old` with each field replaced by the same field of `new` (recursively),
/// so that `project(old, new) == old` says "new has every field of old with
/// the same value"; arrays must have the same length.
fn project(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => Value::Object(
            o.keys()
                .map(|k| (k.clone(), project(&o[k], n.get(k).unwrap_or(&Value::Null))))
                .collect(),
        ),
        (Value::Array(o), Value::Array(n)) if o.len() == n.len() => {
            Value::Array(o.iter().zip(n).map(|(o, n)| project(o, n)).collect())
        }
        _ => new.clone(),
    }
}

struct Before {
    list: Value,
    shows: Vec<(String, Value)>,
}

#[test]
fn imported_issues_show_as_the_previous_cli_showed_them() {
    let mut h = ServerHarness::start();
    let bare = h.create_repo("old");
    let work = h.temp_dir().join("work");
    let out = Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .arg(&work)
        .output()
        .unwrap();
    assert!(out.status.success());
    let (ada, bob) = (h.temp_dir().join("xdg-ada"), h.temp_dir().join("xdg-bob"));
    let as_ada = |args: &[&str]| cli(&h, &work, &ada, args);
    let as_bob = |args: &[&str]| cli(&h, &work, &bob, args);
    let local = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["issue".to_string(), "--mode".into(), "local".into()];
        all.extend(args.iter().map(|s| s.to_string()));
        all
    };
    let run = |who: &dyn Fn(&[&str]) -> String, args: &[&str]| -> String {
        let all = local(args);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        who(&refs)
    };
    let opened = |out: String| -> String {
        let v: Value = serde_json::from_str(&out).unwrap();
        v["issue"].as_str().unwrap().to_string()
    };
    h.git(&work, &["config", "user.name", "Ada"]);
    as_ada(&["key", "generate"]);
    h.git(&work, &["config", "user.name", "Bob"]);
    as_bob(&["key", "generate"]);

    h.git(&work, &["config", "user.name", "Ada"]);
    let one = opened(run(
        &as_ada,
        &[
            "open",
            "-t",
            "Crash on start",
            "-b",
            "boom",
            "-l",
            "bug",
            "-l",
            "ui",
            "--json",
        ],
    ));
    run(&as_ada, &["comment", &one, "-m", "reproduced"]);
    let two = opened(run(&as_ada, &["open", "-t", "Second", "--json"]));
    h.git(&work, &["config", "user.name", "Bob"]);
    run(&as_bob, &["comment", &one, "-m", "untrusted voice"]);
    run(&as_bob, &["edit", &two, "-t", "Hijacked"]);
    let three = opened(run(&as_bob, &["open", "-t", "Bob's own", "--json"]));
    h.git(&work, &["config", "user.name", "Ada"]);
    run(&as_ada, &["label", &one, "--add", "p1", "--remove", "ui"]);
    run(&as_ada, &["close", &one, "-r", "fixed in 9c1e0d2"]);
    run(&as_ada, &["comment", &two, "-m", "still open"]);

    // A tampered event: Ada's signature over other bytes than those stored.
    let repo = git2::Repository::open(&work).unwrap();
    let ada_key = SigningKey::load(&ada.join("git-collab").join("signing_key")).unwrap();
    let event = Event::new(
        Author {
            name: "Ada".into(),
            key: ada_key.public_key_line(),
        },
        chrono::Utc::now(),
        Action::IssueComment(IssueComment {
            body: "signed words".into(),
        }),
    );
    let signed = event.to_canonical_json();
    let sig = collab_record::sign::encode_signature(&ada_key.sign(&signed));
    let stored = String::from_utf8(signed)
        .unwrap()
        .replace("signed words", "forged words");
    let ref_name = refs::issue_ref(&two);
    let tip = repo.refname_to_id(&ref_name).unwrap();
    let tampered =
        store::write_raw_event_commit(&repo, &[tip], &event, stored.as_bytes(), sig.as_bytes())
            .unwrap();
    store::compare_and_swap(&repo, &ref_name, Some(tip), tampered, "tamper").unwrap();

    // The server's copy of the repository, as the previous release left
    // it: the DAGs, and an allowlist that trusts Ada only.
    h.stop();
    let fetched = Command::new("git")
        .arg("--git-dir")
        .arg(&bare)
        .args(["fetch", "-q"])
        .arg(&work)
        .arg("+refs/collab/*:refs/collab/*")
        .output()
        .unwrap();
    assert!(fetched.status.success(), "{fetched:?}");
    std::fs::create_dir_all(bare.join("collab")).unwrap();
    std::fs::write(
        bare.join("collab").join("trusted_keys"),
        format!("{}\n", ada_key.public_key_line()),
    )
    .unwrap();

    // Before: the DAG replay, run on the repository itself.
    let on_bare = |args: &[&str]| -> Value {
        let out = h
            .client_command(cli_bin(), &h.ssh_client_key(), h.temp_dir())
            .env("GIT_DIR", &bare)
            .args(["issue", "--mode", "local"])
            .args(args)
            .arg("--json")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let list = on_bare(&["list", "--all"]);
    let ids: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2, "Bob's issue is invalid here: {list}");
    assert!(!ids.contains(&three));
    let before = Before {
        shows: ids
            .iter()
            .map(|id| (id.clone(), on_bare(&["show", id])))
            .collect(),
        list,
    };
    // The untrusted comment and edit and the tampered event did not count.
    assert_eq!(
        before.shows.iter().find(|(id, _)| *id == two).unwrap().1["title"],
        "Second"
    );

    // Import by hand on the stopped server, then start it.
    let out = Command::new(SERVER)
        .arg("--state-dir")
        .arg(h.state_dir())
        .args(["import", "old", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    h.start_again();
    let clone = h.clone_repo("old", "after");
    let after = |clone: &PathBuf, h: &ServerHarness, args: &[&str]| -> Value {
        let out = h
            .client_command(cli_bin(), &h.ssh_client_key(), clone)
            .args(["issue", "--mode", "server"])
            .args(args)
            .arg("--json")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let check = |h: &ServerHarness, clone: &PathBuf| {
        let list = after(clone, h, &["list", "--all"]);
        assert_eq!(project(&before.list, &list), before.list, "list: {list}");
        for (id, shown) in &before.shows {
            let now = after(clone, h, &["show", id]);
            assert_eq!(&project(shown, &now), shown, "show {id}: {now}");
        }
    };
    check(&h, &clone);
    // A restart imports nothing twice: the same again, comments not doubled.
    h.restart();
    let clone = h.clone_repo("old", "after-restart");
    check(&h, &clone);
}
