//! The `git-collab` issue commands end to end: the real binary on a real
//! clone. Covers the issue lifecycle and its JSON shapes, id prefixes
//! (unknown, ambiguous, invalid), key generation, and that failing commands
//! leave every ref as it was.

use collab_testkit::cli as cli_support;

use cli_support::{cli_bin, World};
use serde_json::{json, Value};

#[test]
fn issue_lifecycle_and_json_shapes() {
    let w = World::new();
    let a = w.clone("a");
    let id = a.open(
        "Crash on start",
        &["-b", "It crashes.", "-l", "bug", "-l", "p1"],
    );
    assert_eq!(id.len(), 40);
    let other = a.open("Second", &[]);

    let list = a.json(&["issue", "list", "--json"]);
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let row = rows.iter().find(|r| r["id"] == id.as_str()).unwrap();
    let mut keys: Vec<&str> = row
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "author",
            "comments",
            "created_at",
            "id",
            "labels",
            "status",
            "title",
            "updated_at"
        ]
    );
    assert_eq!(row["labels"], json!(["bug", "p1"]));
    assert_eq!(row["status"], "open");
    assert_eq!(row["author"]["name"], "a");
    assert_eq!(row["author"]["key"], a.public_key().as_str());

    let human = a.ok(&["issue", "list"]);
    assert!(
        human.contains(&format!("{}  open    Crash on start  [bug, p1]", &id[..8])),
        "{human}"
    );

    a.ok_stdin(
        &["issue", "comment", &id[..5], "-m", "-"],
        "from stdin\nline two\n",
    );
    a.ok(&[
        "issue",
        "edit",
        &id,
        "-t",
        "Crash on start-up",
        "-b",
        "Details.",
    ]);
    a.ok(&["issue", "label", &id, "--add", "ui", "--remove", "p1"]);
    let closed = a.json(&["issue", "close", &id, "-r", "duplicate", "--json"]);
    assert_eq!(closed["issue"], id.as_str());
    assert_eq!(closed["event"].as_str().unwrap().len(), 40);

    let show = a.json(&["issue", "show", &id, "--json"]);
    let mut keys: Vec<&str> = show
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "author",
            "body",
            "closed_reason",
            "comments",
            "created_at",
            "id",
            "labels",
            "status",
            "title",
            "updated_at"
        ]
    );
    assert_eq!(show["title"], "Crash on start-up");
    assert_eq!(show["body"], "Details.");
    assert_eq!(show["labels"], json!(["bug", "ui"]));
    assert_eq!(show["status"], "closed");
    assert_eq!(show["closed_reason"], "duplicate");
    assert_eq!(show["comments"][0]["body"], "from stdin\nline two\n");
    assert_eq!(show["comments"][0]["author"]["name"], "a");
    assert!(show["updated_at"].as_str().unwrap() >= show["created_at"].as_str().unwrap());
    assert!(show["created_at"].as_str().unwrap().ends_with('Z'));

    let ids = |args: &[&str]| -> Vec<String> {
        a.json(args)
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&["issue", "list", "--json"]), vec![other.clone()]);
    assert_eq!(
        ids(&["issue", "list", "--closed", "--json"]),
        vec![id.clone()]
    );
    assert_eq!(ids(&["issue", "list", "--all", "--json"]).len(), 2);
    assert_eq!(
        ids(&["issue", "list", "--all", "--label", "ui", "--json"]),
        vec![id.clone()]
    );
    assert!(
        ids(&["issue", "list", "--all", "--label", "ui", "--label", "p1", "--json"]).is_empty()
    );

    a.ok(&["issue", "reopen", &id]);
    let text = a.ok(&["issue", "show", &id]);
    assert!(
        text.starts_with(&format!("{} Crash on start-up\nstatus: open\n", &id[..8])),
        "{text}"
    );
    assert!(text.contains("from stdin"), "{text}");
}

#[test]
fn unknown_ambiguous_and_invalid_ids_are_clear_errors() {
    let w = World::new();
    let a = w.clone("a");
    // Open issues through the library (fast) until two ids share their
    // first four hex digits.
    let repo = git2::Repository::open(&a.dir).unwrap();
    let key = collab_record::sign::SigningKey::load(&a.home.join(".config/git-collab/signing_key"))
        .unwrap();
    let who = collab_record::issue::Identity {
        key,
        name: "a".into(),
    };
    let mut seen = std::collections::HashMap::new();
    let (first, second) = loop {
        let id = collab_record::issue::open(&repo, &who, "t", "", &[])
            .unwrap()
            .issue;
        if let Some(prev) = seen.insert(id[..4].to_string(), id.clone()) {
            break (prev, id);
        }
        assert!(seen.len() < 50_000, "no prefix collision");
    };
    let prefix = &first[..4];
    let err = a.fails(&["issue", "show", prefix]);
    assert!(
        err.starts_with(&format!(
            "error: issue id '{prefix}' is ambiguous; candidates: "
        )),
        "{err}"
    );
    assert!(err.contains(&first) && err.contains(&second), "{err}");

    // A longer prefix that tells them apart resolves (upper case too).
    let n = (0..40)
        .find(|&i| first.as_bytes()[i] != second.as_bytes()[i])
        .unwrap()
        + 1;
    let unique = first[..n.max(4)].to_ascii_uppercase();
    let shown = a.json(&["issue", "show", &unique, "--json"]);
    assert_eq!(shown["id"], first.as_str());

    let missing = (0..u32::MAX)
        .map(|i| format!("{i:08x}"))
        .find(|p| !seen.values().any(|id| id.starts_with(p.as_str())))
        .unwrap();
    assert_eq!(
        a.fails(&["issue", "show", &missing]),
        format!("error: no issue matches '{missing}'")
    );
    assert_eq!(
        a.fails(&["issue", "comment", "abc", "-m", "x"]),
        "error: invalid issue id 'abc': expected 4 to 40 hex digits"
    );
    assert_eq!(
        a.fails(&["issue", "close", "not-hex"]),
        "error: invalid issue id 'not-hex': expected 4 to 40 hex digits"
    );
}

#[test]
fn failing_commands_leave_no_half_written_ref() {
    let w = World::new();
    let a = w.clone("a");
    let id = a.open("Existing", &[]);
    a.ok(&["issue", "close", &id]);
    let before = a.refs();
    let objects_before = a.git(&["count-objects"]);

    for (args, want) in [
        (vec!["issue", "close", &id], "already closed"),
        (vec!["issue", "open", "-t", "  "], "title is empty"),
        (vec!["issue", "open", "-t", "two\nlines"], "one line"),
        (
            vec!["issue", "open", "-t", "x", "-l", "has space"],
            "invalid label",
        ),
        (
            vec!["issue", "comment", &id, "-m", ""],
            "comment body is empty",
        ),
        (vec!["issue", "edit", &id], "nothing to edit"),
        (vec!["issue", "label", &id], "give --add or --remove"),
        (
            vec!["issue", "label", &id, "--remove", "absent"],
            "already as requested",
        ),
        (vec!["issue", "open"], "--title"),
    ] {
        let err = a.fails(&args);
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(a.refs(), before, "{args:?} changed a ref");
    }
    assert_eq!(
        a.git(&["count-objects"]),
        objects_before,
        "nothing was written"
    );

    // Without a signing key nothing can be written.
    std::fs::remove_file(a.home.join(".config/git-collab/signing_key")).unwrap();
    let err = a.fails(&["issue", "open", "-t", "no key"]);
    assert!(err.contains("run `git-collab key generate`"), "{err}");
    let err = a.fails(&["issue", "reopen", &id]);
    assert!(err.contains("signing_key"), "{err}");
    assert_eq!(a.refs(), before);
    a.ok(&["key", "generate"]);

    // A concurrent writer holding the ref's lock: the write fails cleanly
    // and the ref keeps its value.
    let lock = a.dir.join(format!(".git/refs/collab/issues/{id}.lock"));
    std::fs::write(&lock, "").unwrap();
    let err = a.fails(&["issue", "reopen", &id]);
    assert!(err.contains("changed concurrently"), "{err}");
    assert!(lock.exists(), "another writer's lock is left alone");
    std::fs::remove_file(&lock).unwrap();
    assert_eq!(a.refs(), before);
    a.ok(&["issue", "reopen", &id]);
    assert_ne!(a.refs(), before);
}

#[test]
fn compare_and_swap_refuses_a_moved_ref() {
    let w = World::new();
    let a = w.clone("a");
    let id = a.open("Raced", &[]);
    a.ok(&["issue", "comment", &id, "-m", "moves the tip"]);
    let repo = git2::Repository::open(&a.dir).unwrap();
    let name = collab_record::refs::issue_ref(&id);
    let tip = collab_record::store::ref_tip(&repo, &name)
        .unwrap()
        .unwrap();
    let root = git2::Oid::from_str(&id).unwrap();
    let err = collab_record::store::compare_and_swap(&repo, &name, Some(root), root, "stale")
        .unwrap_err();
    assert!(
        matches!(err, collab_record::Error::Concurrent { .. }),
        "{err}"
    );
    let err =
        collab_record::store::compare_and_swap(&repo, &name, None, root, "exists").unwrap_err();
    assert!(
        matches!(err, collab_record::Error::Concurrent { .. }),
        "{err}"
    );
    assert_eq!(
        collab_record::store::ref_tip(&repo, &name).unwrap(),
        Some(tip)
    );
}

#[test]
fn key_generate_and_show() {
    let w = World::new();
    let a = w.clone("a");
    let path = a.home.join(".config/git-collab/signing_key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let shown = a.json(&["key", "show", "--json"]);
    assert_eq!(shown["path"], path.to_str().unwrap());
    assert!(shown["fingerprint"]
        .as_str()
        .unwrap()
        .starts_with("SHA256:"));

    // ssh-keygen agrees on the fingerprint.
    let keygen = std::process::Command::new("ssh-keygen")
        .arg("-lf")
        .arg(path.with_extension("pub"))
        .output();
    if let Ok(out) = keygen {
        if out.status.success() {
            let text = String::from_utf8(out.stdout).unwrap();
            assert!(
                text.contains(shown["fingerprint"].as_str().unwrap()),
                "{text}"
            );
        }
    }

    let err = a.fails(&["key", "generate"]);
    assert!(err.contains("already exists (use --force"), "{err}");
    assert_eq!(a.json(&["key", "show", "--json"]), shown);
    a.ok(&["key", "generate", "--force"]);
    assert_ne!(
        a.json(&["key", "show", "--json"])["public_key"],
        shown["public_key"]
    );

    // collab.signingKey names another key file.
    let other = w.tmp.path().join("agent_key");
    a.git(&["config", "collab.signingKey", other.to_str().unwrap()]);
    a.ok(&["key", "generate"]);
    let agent: Value = a.json(&["key", "show", "--json"]);
    assert_eq!(agent["path"], other.to_str().unwrap());
    let id = a.open("By the agent key", &[]);
    let show = a.json(&["issue", "show", &id, "--json"]);
    assert_eq!(show["author"]["key"], agent["public_key"]);
}

#[test]
fn runs_as_a_git_subcommand() {
    let w = World::new();
    let a = w.clone("a");
    let id = a.open("Via git", &[]);
    let bin_dir = std::path::Path::new(cli_bin()).parent().unwrap();
    let mut cmd = std::process::Command::new("git");
    cmd.args(["collab", "issue", "list", "--json"]);
    a.env(&mut cmd);
    cmd.env(
        "PATH",
        format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap()),
    );
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[0]["id"], id.as_str());
}
