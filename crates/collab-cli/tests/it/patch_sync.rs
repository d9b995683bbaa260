//! Patches across two clones of a bare remote (file://), each with its own
//! signing key, driven by the real binary and real git: concurrent
//! revisions and reviews converge to identical `patch show --json` with
//! every revision head pinned everywhere; a second vote by the same author
//! replaces the first after sync; patches merged by plain git (merge and
//! push, squash with a `Patch:` trailer, a local merge) are found by the
//! merge scan at sync.

use collab_testkit::cli as cli_support;

use std::collections::BTreeSet;

use cli_support::{Clone, World};
use serde_json::Value;

fn commit(c: &Clone, path: &str, content: &str, message: &str) -> String {
    std::fs::write(c.dir.join(path), content).unwrap();
    c.git(&["add", path]);
    c.git(&["commit", "-q", "-m", message]);
    rev(c, "HEAD")
}

fn rev(c: &Clone, what: &str) -> String {
    c.git(&["rev-parse", what]).trim().to_string()
}

/// Clone `a` with a pushed `main`, then clone `b` of that remote.
fn two_clones(w: &World) -> (Clone, Clone) {
    let a = w.clone("a");
    std::fs::write(a.dir.join("lib.txt"), "lib\n").unwrap();
    commit(&a, "app.txt", "app\n", "Initial");
    a.git(&["push", "-q", "origin", "main"]);
    let b = w.clone("b");
    (a, b)
}

fn create(c: &Clone, title: &str) -> String {
    c.json(&["patch", "create", "-t", title, "--json"])["patch"]
        .as_str()
        .unwrap()
        .to_string()
}

fn show(c: &Clone, id: &str) -> Value {
    c.json(&["patch", "show", id, "--json"])
}

/// `patch list --all --json` plus `patch show --json` of every patch.
fn snapshot(c: &Clone) -> String {
    let list = c.ok(&["patch", "list", "--all", "--json"]);
    let mut out = list.clone();
    for p in serde_json::from_str::<Value>(&list)
        .unwrap()
        .as_array()
        .unwrap()
    {
        out.push_str(&c.ok(&["patch", "show", p["id"].as_str().unwrap(), "--json"]));
    }
    out
}

/// The commits pinned under `refs/collab/revisions/<id>/` in `git_dir`.
fn pinned(w: &World, git_dir: &std::path::Path, id: &str) -> BTreeSet<String> {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args([
            "for-each-ref",
            "--format=%(objectname)",
            &format!("refs/collab/revisions/{id}/"),
        ])
        .current_dir(w.tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn concurrent_revisions_and_reviews_converge() {
    let w = World::new();
    let (a, b) = two_clones(&w);
    a.git(&["checkout", "-q", "-b", "feature"]);
    let v1 = commit(&a, "app.txt", "app\nv1\n", "Feature");
    let id = create(&a, "Feature");
    a.ok(&["sync"]);
    b.ok(&["sync"]);
    assert_eq!(
        snapshot(&a),
        snapshot(&b),
        "the first sync hands the patch over"
    );

    // b takes the patch over and pushes a revision of its own...
    b.ok(&["patch", "checkout", &id[..8]]);
    let b_head = commit(&b, "app.txt", "app\nv1\nfrom b\n", "B's fix");
    b.ok(&["patch", "revise", &id]);
    b.ok(&[
        "patch",
        "review",
        &id,
        "--request-changes",
        "--rev",
        "1",
        "-m",
        "needs work",
    ]);
    b.ok(&[
        "patch",
        "comment",
        &id,
        "-m",
        "is this line needed?",
        "--path",
        "app.txt",
        "--line",
        "3",
    ]);
    // ...while a pushes another one and votes.
    let a_head = commit(&a, "app.txt", "app\nv2\n", "A's rework");
    a.ok(&["patch", "revise", &id]);
    a.ok(&["patch", "review", &id, "--approve", "--rev", "1"]);
    a.ok(&["patch", "review", &id, "--approve", "-m", "mine is ready"]);

    a.ok(&["sync"]);
    b.ok(&["sync"]);
    a.ok(&["sync"]);
    let snap = snapshot(&a);
    assert_eq!(snap, snapshot(&b), "both clones materialize the same patch");

    let p = show(&a, &id);
    let heads: Vec<&str> = p["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["head"].as_str().unwrap())
        .collect();
    assert_eq!(heads.len(), 3);
    assert_eq!(heads[0], v1);
    assert_eq!(
        heads[1..].iter().collect::<BTreeSet<_>>(),
        [a_head.as_str(), b_head.as_str()]
            .iter()
            .collect::<BTreeSet<_>>()
    );
    let number_of = |head: &str| heads.iter().position(|h| *h == head).unwrap() as u64 + 1;
    let votes: BTreeSet<(String, u64, String)> = p["reviews"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["author"]["name"].as_str().unwrap().to_string(),
                r["revision"].as_u64().unwrap(),
                r["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: BTreeSet<(String, u64, String)> = [
        ("a".to_string(), 1, "approve".to_string()),
        ("b".to_string(), 1, "request_changes".to_string()),
        ("a".to_string(), number_of(&a_head), "approve".to_string()),
    ]
    .into_iter()
    .collect();
    assert_eq!(votes, expected);
    // b's inline comment still names b's revision, whatever its number now.
    assert_eq!(p["comments"][0]["revision"], number_of(&b_head));

    // Every revision head is pinned in both clones and on the remote, so
    // both can diff every revision.
    let all: BTreeSet<String> = [v1, a_head, b_head].into_iter().collect();
    for dir in [a.dir.join(".git"), b.dir.join(".git"), w.remote.clone()] {
        assert_eq!(pinned(&w, &dir, &id), all, "{}", dir.display());
    }
    for c in [&a, &b] {
        for n in ["1", "2", "3"] {
            c.ok(&["patch", "diff", &id, "--rev", n]);
        }
    }
    // Another round changes nothing.
    a.ok(&["sync"]);
    b.ok(&["sync"]);
    assert_eq!(snapshot(&b), snap);
}

#[test]
fn a_second_vote_replaces_the_first_after_sync() {
    let w = World::new();
    let (a, b) = two_clones(&w);
    a.git(&["checkout", "-q", "-b", "feature"]);
    commit(&a, "app.txt", "app\nv1\n", "Feature");
    let id = create(&a, "Feature");
    a.ok(&["patch", "review", &id, "--approve", "-m", "first thought"]);
    a.ok(&["sync"]);
    b.ok(&["sync"]);
    assert_eq!(show(&b, &id)["reviews"][0]["verdict"], "approve");

    a.ok(&[
        "patch",
        "review",
        &id,
        "--request-changes",
        "-m",
        "second thought",
    ]);
    a.ok(&["sync"]);
    b.ok(&["sync"]);
    let p = show(&b, &id);
    let reviews = p["reviews"].as_array().unwrap();
    assert_eq!(reviews.len(), 1, "{reviews:?}");
    assert_eq!(reviews[0]["verdict"], "request_changes");
    assert_eq!(reviews[0]["body"], "second thought");
    assert_eq!(snapshot(&a), snapshot(&b));
}

#[test]
fn patches_merged_by_plain_git_are_found_at_sync() {
    let w = World::new();
    let (a, b) = two_clones(&w);
    a.git(&["checkout", "-q", "-b", "one"]);
    commit(&a, "one.txt", "1\n", "One");
    let one = create(&a, "One");
    a.git(&["checkout", "-q", "-b", "two", "main"]);
    commit(&a, "two.txt", "2\n", "Two");
    let two = create(&a, "Two");
    a.git(&["checkout", "-q", "-b", "three", "main"]);
    commit(&a, "three.txt", "3\n", "Three");
    let three = create(&a, "Three");
    a.git(&["checkout", "-q", "-b", "four", "main"]);
    commit(&a, "four.txt", "4\n", "Four");
    let four = create(&a, "Four");
    a.ok(&["sync"]);
    b.ok(&["sync"]);

    // b merges one with plain git, squashes two with a trailer, pushes.
    let pin = |id: &str| format!("refs/collab/revisions/{id}/1");
    b.git(&["merge", "-q", "--no-ff", "-m", "Merge one", &pin(&one)]);
    let merge_one = rev(&b, "HEAD");
    b.git(&["merge", "-q", "--squash", &pin(&two)]);
    b.git(&[
        "commit",
        "-q",
        "-m",
        &format!("Two, squashed\n\nPatch: {}", &two[..8]),
    ]);
    let squash_two = rev(&b, "HEAD");
    b.git(&["push", "-q", "origin", "main"]);

    // a never fetched main: its sync does, and records both merges.
    let out = a.ok(&["sync"]);
    assert!(
        out.contains(&format!(
            "patch {} merged in {} (found on refs/remotes/origin/main)",
            &one[..8],
            &merge_one[..8]
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("patch {} merged in", &two[..8])),
        "{out}"
    );
    let p = show(&a, &one);
    assert_eq!(p["status"], "merged");
    assert_eq!(p["merge"]["commit"], merge_one.as_str());
    assert_eq!(p["merge"]["author"]["name"], "a");
    assert_eq!(show(&a, &two)["merge"]["commit"], squash_two.as_str());
    for open in [&three, &four] {
        assert_eq!(show(&a, open)["status"], "open");
    }

    // b merges three locally only: its own sync finds it on refs/heads/main.
    b.git(&["merge", "-q", "--no-ff", "-m", "Merge three", &pin(&three)]);
    let merge_three = rev(&b, "HEAD");
    let out = b.ok(&["sync"]);
    assert!(
        out.contains("(found on refs/heads/main)") && out.contains(&three[..8]),
        "{out}"
    );
    assert!(
        !out.contains(&one[..8]),
        "one was recorded by a already: {out}"
    );
    a.ok(&["sync"]);
    assert_eq!(snapshot(&a), snapshot(&b));
    let p = show(&a, &three);
    assert_eq!(p["merge"]["commit"], merge_three.as_str());
    let merged_entries = show(&b, &one)["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "merged")
        .count();
    assert_eq!(merged_entries, 1, "one merge is recorded once");
    assert_eq!(show(&b, &four)["status"], "open");
}

#[test]
fn without_a_trusted_key_sync_reports_merges_but_records_nothing() {
    let w = World::new();
    let (a, b) = two_clones(&w);
    b.git(&["checkout", "-q", "-b", "one"]);
    commit(&b, "one.txt", "1\n", "One");
    let one = create(&b, "One");
    b.ok(&["sync"]);
    a.ok(&["sync"]);
    b.git(&["checkout", "-q", "main"]);
    b.git(&["merge", "-q", "--no-ff", "-m", "Merge one", "one"]);
    b.git(&["push", "-q", "origin", "main"]);

    // a trusts only b: a merge record signed by a would be dropped (and
    // written again at every sync), so none is written.
    a.ok(&["trust", "add", &b.public_key()]);
    let before = a.refs();
    let out = a.collab(&["sync"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("warning: patch {} is merged in", &one[..8]))
            && stderr.contains("no trusted signing key"),
        "{stderr}"
    );
    assert_eq!(show(&a, &one)["status"], "open");
    let collab_refs = |r: String| -> Vec<String> {
        r.lines()
            .filter(|l| l.contains("refs/collab/"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        collab_refs(a.refs()),
        collab_refs(before),
        "no event was written"
    );

    // b's sync records the merge, and a trusts b.
    assert!(b
        .ok(&["sync"])
        .contains(&format!("patch {} merged in", &one[..8])));
    a.ok(&["sync"]);
    assert_eq!(show(&a, &one)["status"], "merged");
    assert_eq!(show(&a, &one)["merge"]["author"]["name"], "b");
}
