//! `git-collab patch ...` in one clone of a bare remote, with the real
//! binary and real git: create, revise, review (a later vote replaces the
//! earlier), inline comments, diff and interdiff across a rebase, merge
//! (fast-forward and merge commit), checkout, and bad input that must
//! write nothing.

use collab_testkit::cli as cli_support;

use cli_support::{Clone, World};
use serde_json::Value;

/// Writes `path` and commits it on the current branch; returns the commit.
fn commit(c: &Clone, path: &str, content: &str, message: &str) -> String {
    std::fs::write(c.dir.join(path), content).unwrap();
    c.git(&["add", path]);
    c.git(&["commit", "-q", "-m", message]);
    rev(c, "HEAD")
}

fn rev(c: &Clone, what: &str) -> String {
    c.git(&["rev-parse", what]).trim().to_string()
}

/// A clone whose `main` has two files and is pushed, now on branch
/// `feature`.
fn setup(w: &World) -> Clone {
    let a = w.clone("a");
    std::fs::write(a.dir.join("lib.txt"), "one\ntwo\n").unwrap();
    commit(&a, "app.txt", "app\n", "Initial");
    a.git(&["push", "-q", "origin", "main"]);
    a.git(&["checkout", "-q", "-b", "feature"]);
    a
}

fn create(c: &Clone, extra: &[&str]) -> String {
    let mut args = vec!["patch", "create", "--json"];
    args.extend_from_slice(extra);
    let out = c.json(&args);
    assert_eq!(out["revision"], 1);
    out["patch"].as_str().unwrap().to_string()
}

fn show(c: &Clone, id: &str) -> Value {
    c.json(&["patch", "show", id, "--json"])
}

fn kinds(p: &Value) -> Vec<String> {
    p["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn create_revise_review_and_comment() {
    let w = World::new();
    let a = setup(&w);
    let v1 = commit(
        &a,
        "app.txt",
        "app\nfeature v1\n",
        "Add the feature\n\nWhy it helps.",
    );
    let id = create(&a, &[]);
    let p = show(&a, &id);
    assert_eq!(p["title"], "Add the feature", "title from the head commit");
    assert_eq!(p["body"], "Why it helps.");
    assert_eq!(p["base"], "main");
    assert_eq!(p["status"], "open");
    assert_eq!(p["revisions"][0]["head"], v1.as_str());
    assert_eq!(p["revisions"][0]["base_commit"], rev(&a, "main").as_str());
    assert_eq!(rev(&a, &format!("refs/collab/revisions/{id}/1")), v1);

    let v2 = commit(&a, "app.txt", "app\nfeature v2\n", "Polish");
    let out = a.json(&["patch", "revise", &id[..8], "--json"]);
    assert_eq!(out["revision"], 2);
    assert_eq!(rev(&a, &format!("refs/collab/revisions/{id}/2")), v2);

    a.ok(&[
        "patch",
        "review",
        &id,
        "--approve",
        "--rev",
        "1",
        "-m",
        "v1 is fine",
    ]);
    a.ok(&["patch", "review", &id, "--request-changes", "-m", "typo"]);
    a.ok(&["patch", "review", &id, "--approve", "-m", "fixed"]);
    a.ok(&[
        "patch",
        "comment",
        &id,
        "-m",
        "why two lines?",
        "--path",
        "app.txt",
        "--line",
        "2",
    ]);
    a.ok(&["patch", "comment", &id, "-m", "general remark"]);

    let p = show(&a, &id);
    let votes: Vec<(u64, &str, &str)> = p["reviews"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["revision"].as_u64().unwrap(),
                r["verdict"].as_str().unwrap(),
                r["body"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        votes,
        vec![(1, "approve", "v1 is fine"), (2, "approve", "fixed")],
        "the second vote on revision 2 replaced the first"
    );
    assert_eq!(
        kinds(&p),
        vec![
            "opened",
            "revised",
            "reviewed",
            "reviewed",
            "reviewed",
            "commented",
            "commented"
        ]
    );
    let replaced = &p["timeline"][4];
    assert_eq!(replaced["replaces"], p["timeline"][3]["event"]);
    let inline = &p["comments"][0];
    assert_eq!(
        (&inline["path"], &inline["line"], &inline["revision"]),
        (&Value::from("app.txt"), &Value::from(2), &Value::from(2))
    );
    assert_eq!(p["comments"][1]["revision"], Value::Null);

    let list = a.json(&["patch", "list", "--json"]);
    assert_eq!(list[0]["id"], id.as_str());
    assert_eq!(list[0]["revisions"], 2);
    assert_eq!(list[0]["approvals"], 1);
    assert_eq!(list[0]["changes_requested"], 0);
    let text = a.ok(&["patch", "show", &id[..6]]);
    assert!(text.contains("requested changes on revision 2"), "{text}");
    assert!(text.contains("(replacing an earlier vote)"), "{text}");
    assert!(a
        .ok(&["patch", "list"])
        .contains("r2  Add the feature -> main  +1"));
}

#[test]
fn bad_input_is_refused_and_writes_nothing() {
    let w = World::new();
    let a = setup(&w);
    // On main itself there is nothing to propose.
    a.git(&["checkout", "-q", "main"]);
    let before = a.refs();
    for (args, expect) in [
        (vec!["patch", "create"], "already in 'main'"),
        (
            vec!["patch", "create", "--head", "feature"],
            "already in 'main'",
        ),
        (
            vec!["patch", "create", "--base", "nope", "--head", "main"],
            "base branch 'nope' not found",
        ),
        (
            vec!["patch", "create", "--head", "no-such-rev"],
            "unknown revision 'no-such-rev'",
        ),
        (
            vec!["patch", "show", "abcdef12"],
            "no patch matches 'abcdef12'",
        ),
        (vec!["patch", "show", "xyz"], "invalid patch id"),
    ] {
        let err = a.fails(&args);
        assert!(err.contains(expect), "{args:?}: {err}");
        assert_eq!(a.refs(), before, "{args:?} changed a ref");
    }

    a.git(&["checkout", "-q", "feature"]);
    commit(&a, "app.txt", "app\nmore\n", "More");
    let id = create(&a, &["-t", "Proposal"]);
    let before = a.refs();
    let id8 = &id[..8];
    for (args, expect) in [
        (
            vec!["patch", "review", id8, "--approve", "--rev", "9"],
            "has no revision 9 (it has 1 to 1)",
        ),
        (
            vec!["patch", "diff", id8, "--rev", "2"],
            "has no revision 2",
        ),
        (
            vec!["patch", "interdiff", id8, "1", "3"],
            "has no revision 3",
        ),
        (
            vec!["patch", "comment", id8, "-m", "x", "--path", "nofile.txt"],
            "no file 'nofile.txt'",
        ),
        (
            vec!["patch", "comment", id8, "-m", " "],
            "comment body is empty",
        ),
        (
            vec!["patch", "comment", id8, "-m", "x", "--line", "3"],
            "--path",
        ),
        (
            vec![
                "patch", "comment", id8, "-m", "x", "--path", "app.txt", "--line", "0",
            ],
            "numbered from 1",
        ),
        (vec!["patch", "review", id8], "required"),
        (
            vec!["patch", "review", id8, "--approve", "--comment"],
            "cannot be used with",
        ),
        (vec!["patch", "revise", id8], "already proposes"),
        (
            vec!["patch", "revise", id8, "--head", "main"],
            "already in 'main'",
        ),
        (vec!["patch", "create", "-t", "two\nlines"], "one line"),
    ] {
        let err = a.fails(&args);
        assert!(err.contains(expect), "{args:?}: {err}");
        assert_eq!(a.refs(), before, "{args:?} changed a ref");
    }

    a.ok(&["patch", "close", id8]);
    assert_eq!(show(&a, &id)["status"], "closed");
    let before = a.refs();
    commit(&a, "app.txt", "app\nlater\n", "Later");
    let before_commit = a.refs();
    assert_ne!(before, before_commit);
    for (args, expect) in [
        (
            vec!["patch", "review", id8, "--approve"],
            "is closed; cannot review it",
        ),
        (vec!["patch", "revise", id8], "is closed; cannot revise it"),
        (vec!["patch", "close", id8], "is closed; cannot close it"),
        (vec!["patch", "merge", id8], "is closed; cannot merge it"),
    ] {
        let err = a.fails(&args);
        assert!(err.contains(expect), "{args:?}: {err}");
        assert_eq!(a.refs(), before_commit, "{args:?} changed a ref");
    }
    // Discussion stays possible on a closed patch.
    a.ok(&["patch", "comment", id8, "-m", "closing because ..."]);
}

#[test]
fn interdiff_across_a_rebase_shows_only_the_authors_changes() {
    let w = World::new();
    let a = setup(&w);
    commit(&a, "app.txt", "app\nfeature v1\n", "Feature");
    let id = create(&a, &[]);

    // The base moves on in a file the patch does not touch...
    a.git(&["checkout", "-q", "main"]);
    commit(&a, "lib.txt", "one\ntwo\nupstream change\n", "Upstream");
    // ...and the author rebases onto it and reworks the feature.
    a.git(&["checkout", "-q", "feature"]);
    a.git(&["rebase", "-q", "main"]);
    commit(&a, "app.txt", "app\nfeature v2\n", "Rework");
    a.ok(&["patch", "revise", &id]);

    let plain = a.git(&[
        "diff",
        &format!("refs/collab/revisions/{id}/1"),
        &format!("refs/collab/revisions/{id}/2"),
    ]);
    assert!(
        plain.contains("upstream change"),
        "the base did move: {plain}"
    );

    let out = a.collab(&["patch", "interdiff", &id, "1", "2"]);
    assert!(out.status.success());
    let inter = String::from_utf8(out.stdout).unwrap();
    assert!(inter.contains("-feature v1\n+feature v2\n"), "{inter}");
    assert!(!inter.contains("upstream"), "{inter}");
    assert!(!inter.contains("lib.txt"), "{inter}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("replayed onto revision 2's base"));

    let json = a.json(&["patch", "interdiff", &id, "1", "2", "--json"]);
    assert_eq!(json["rebased"], true);
    assert_eq!(json["files"].as_array().unwrap().len(), 1);
    assert_eq!(json["files"][0]["path"], "app.txt");

    // Each revision's diff is against its own base: no upstream change.
    for n in ["1", "2"] {
        let d = a.json(&["patch", "diff", &id, "--rev", n, "--json"]);
        let files: Vec<&str> = d["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap())
            .collect();
        assert_eq!(files, vec!["app.txt"], "revision {n}");
    }
    let d2 = a.ok(&["patch", "diff", &id]);
    assert!(d2.starts_with("diff --git a/app.txt b/app.txt"), "{d2}");
    assert!(d2.contains("+feature v2"), "{d2}");
}

#[test]
fn merge_fast_forwards_or_writes_a_merge_commit() {
    let w = World::new();
    let a = setup(&w);
    let head = commit(&a, "app.txt", "app\nfirst\n", "First");
    let first = create(&a, &[]);
    // main is not checked out: the branch alone moves.
    let out = a.json(&["patch", "merge", &first, "--json"]);
    assert_eq!(out["kind"], "fast_forward");
    assert_eq!(out["commit"], head.as_str());
    assert_eq!(rev(&a, "main"), head);
    let p = show(&a, &first);
    assert_eq!(p["status"], "merged");
    assert_eq!(p["merge"]["commit"], head.as_str());
    assert_eq!(kinds(&p).last().unwrap(), "merged");

    // A second patch from before the first landed needs a merge commit;
    // now main is checked out, so the worktree follows.
    a.git(&["checkout", "-q", "-b", "second", "HEAD~1"]);
    let second_head = commit(&a, "lib.txt", "one\ntwo\nsecond\n", "Second");
    let second = create(&a, &["-t", "Second"]);
    a.git(&["checkout", "-q", "main"]);
    let out = a.json(&["patch", "merge", &second[..8], "--json"]);
    assert_eq!(out["kind"], "merge_commit");
    let merge = rev(&a, "main");
    assert_eq!(out["commit"], merge.as_str());
    assert_eq!(rev(&a, "main^1"), head);
    assert_eq!(rev(&a, "main^2"), second_head);
    let message = a.git(&["log", "-1", "--format=%B", "main"]);
    assert!(message.contains(&format!("Patch: {second}")), "{message}");
    assert_eq!(
        std::fs::read_to_string(a.dir.join("lib.txt")).unwrap(),
        "one\ntwo\nsecond\n"
    );
    assert_eq!(a.git(&["status", "--porcelain"]), "");
    assert_eq!(show(&a, &second)["merge"]["commit"], merge.as_str());
}

#[test]
fn merge_refuses_conflicts_and_a_dirty_worktree() {
    let w = World::new();
    let a = setup(&w);
    commit(&a, "app.txt", "app\nmine\n", "Mine");
    let id = create(&a, &[]);
    a.git(&["checkout", "-q", "main"]);
    commit(&a, "app.txt", "app\ntheirs\n", "Theirs");
    let before = a.refs();
    let err = a.fails(&["patch", "merge", &id]);
    assert!(err.contains("conflicts with 'main' in app.txt"), "{err}");
    assert_eq!(a.refs(), before);

    a.git(&["checkout", "-q", "-b", "clean", "main~1"]);
    commit(&a, "other.txt", "x\n", "Other");
    let other = create(&a, &[]);
    a.git(&["checkout", "-q", "main"]);
    let before = a.refs();
    std::fs::write(a.dir.join("app.txt"), "edited\n").unwrap();
    let err = a.fails(&["patch", "merge", &other]);
    assert!(err.contains("uncommitted changes"), "{err}");
    assert_eq!(a.refs(), before);
    assert_eq!(
        std::fs::read_to_string(a.dir.join("app.txt")).unwrap(),
        "edited\n"
    );
}

#[test]
fn checkout_makes_a_local_branch_per_patch() {
    let w = World::new();
    let a = setup(&w);
    let v1 = commit(&a, "app.txt", "app\nv1\n", "V1");
    let id = create(&a, &[]);
    let v2 = commit(&a, "app.txt", "app\nv2\n", "V2");
    a.ok(&["patch", "revise", &id]);
    a.git(&["checkout", "-q", "main"]);

    let out = a.json(&["patch", "checkout", &id, "--rev", "1", "--json"]);
    let branch = format!("patch/{}", &id[..8]);
    assert_eq!(out["branch"], branch.as_str());
    assert_eq!(
        a.git(&["symbolic-ref", "HEAD"]).trim(),
        format!("refs/heads/{branch}")
    );
    assert_eq!(rev(&a, "HEAD"), v1);
    assert_eq!(
        std::fs::read_to_string(a.dir.join("app.txt")).unwrap(),
        "app\nv1\n"
    );

    // The latest revision fast-forwards the same branch.
    a.ok(&["patch", "checkout", &id]);
    assert_eq!(rev(&a, "HEAD"), v2);

    // Local work on the branch is never thrown away.
    commit(&a, "app.txt", "app\nv2\nlocal\n", "Local");
    let before = a.refs();
    let err = a.fails(&["patch", "checkout", &id, "--rev", "1"]);
    assert!(
        err.contains("has commits that are not in revision 1"),
        "{err}"
    );
    assert_eq!(a.refs(), before);
}
