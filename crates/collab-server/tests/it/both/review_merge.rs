//! The push-time merge scan end to end, with the real server, `git` and
//! `ssh`: a patch opened with `refs/for/main` is marked merged by the plain
//! `git push` that brings its revision to `main` (fast-forward, or a merge
//! commit), or by a pushed commit naming it in a `Patch:` trailer; a commit
//! with `Fixes: <issue-id8>` reaching the default branch closes the issue
//! and ends its lease.

use collab_testkit as common;
use collab_testkit::review as review_support;

use common::ServerHarness;
// `git` here must succeed.
use review_support::{commit, ok as git, setup, Agent};

/// The server's collab database (either backend), for reading.
fn db(h: &ServerHarness) -> collab_store::sql::Connection {
    collab_store::open_reader(collab_store::Location::parse(&h.db_setting())).unwrap()
}

/// Push for review; returns the full patch id.
fn propose(h: &ServerHarness, a: &Agent) -> String {
    let out = git(h, a, &["push", "origin", "HEAD:refs/for/main"]);
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("remote: patch "))
        .unwrap_or_else(|| panic!("{out:?}"));
    let short = &line.split("remote: patch ").nth(1).unwrap()[..8];
    db(h)
        .query_row(
            "SELECT id FROM patches WHERE id LIKE ?1",
            [format!("{short}%")],
            |r| r.get(0),
        )
        .unwrap()
}

/// `(status, merged_commit)` of a patch.
fn merged(h: &ServerHarness, id: &str) -> (String, Option<String>) {
    db(h)
        .query_row(
            "SELECT status, merged_commit FROM patches WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

#[test]
fn plain_pushes_to_the_base_merge_patches() {
    let (h, a, b) = setup();

    // Fast-forward: A pushes the revision itself to main.
    git(&h, &a, &["switch", "-q", "-c", "one"]);
    let v1 = commit(&h, &a, "one.txt", "1\n", "One");
    let p1 = propose(&h, &a);
    let out = git(&h, &a, &["push", "origin", "HEAD:main"]);
    assert!(
        out.stderr
            .contains(&format!("patch {} merged in {}", &p1[..8], &v1[..8])),
        "{out:?}"
    );
    assert_eq!(merged(&h, &p1), ("merged".into(), Some(v1.clone())));
    let payload: String = db(&h)
        .query_row(
            "SELECT payload FROM events WHERE type = 'patch.merged' AND object_id = ?1",
            [&p1],
            |r| r.get(0),
        )
        .unwrap();
    let payload: serde_json::Value = serde_json::from_str(&payload).unwrap();
    assert_eq!(payload["by"], "push");
    assert_eq!(payload["how"], "reachable");
    assert_eq!(payload["push"]["ref"], "refs/heads/main");

    // A merge commit: B merges A's second revision with --no-ff.
    git(&h, &a, &["switch", "-q", "-c", "two"]);
    let v2 = commit(&h, &a, "two.txt", "2\n", "Two");
    let p2 = propose(&h, &a);
    git(&h, &b, &["pull", "-q", "--ff-only", "origin", "main"]);
    git(
        &h,
        &b,
        &[
            "fetch",
            "-q",
            "origin",
            &format!("refs/collab/revisions/{p2}/1"),
        ],
    );
    git(
        &h,
        &b,
        &["merge", "-q", "--no-ff", "-m", "Merge two", "FETCH_HEAD"],
    );
    let merge = git(&h, &b, &["rev-parse", "HEAD"])
        .stdout
        .trim()
        .to_string();
    assert_ne!(merge, v2);
    git(&h, &b, &["push", "-q", "origin", "HEAD:main"]);
    assert_eq!(merged(&h, &p2), ("merged".into(), Some(merge)));

    // A squash named by a trailer.
    git(&h, &a, &["switch", "-q", "-c", "three", "origin/main"]);
    git(&h, &a, &["pull", "-q", "--ff-only", "origin", "main"]);
    commit(&h, &a, "three.txt", "3\n", "Three");
    let p3 = propose(&h, &a);
    git(&h, &b, &["pull", "-q", "--ff-only", "origin", "main"]);
    let squash = commit(
        &h,
        &b,
        "three.txt",
        "3\n",
        &format!("Three, squashed\n\nPatch: {}", &p3[..8]),
    );
    git(&h, &b, &["push", "-q", "origin", "HEAD:main"]);
    assert_eq!(merged(&h, &p3), ("merged".into(), Some(squash)));
}

#[test]
fn fixes_trailers_on_the_default_branch_close_issues_and_end_leases() {
    let (h, a, _b) = setup();
    let issue = h.open_server_issue("r", "The bug");
    let held = h.ssh_exec(&format!("collab-lease acquire r {issue} --ttl 600"));
    assert_eq!(held.code, 0, "{held:?}");

    // A trailer on another branch changes nothing.
    git(&h, &a, &["switch", "-q", "-c", "side"]);
    commit(
        &h,
        &a,
        "x.txt",
        "x\n",
        &format!("Side\n\nFixes: {}", &issue[..8]),
    );
    git(&h, &a, &["push", "-q", "origin", "HEAD:side"]);
    let status = |h: &ServerHarness| -> String {
        db(h)
            .query_row("SELECT status FROM issues WHERE id = ?1", [&issue], |r| {
                r.get(0)
            })
            .unwrap()
    };
    assert_eq!(status(&h), "open");

    // On main it closes the issue and ends the lease.
    let fix = git(&h, &a, &["rev-parse", "HEAD"])
        .stdout
        .trim()
        .to_string();
    let out = git(&h, &a, &["push", "origin", "HEAD:main"]);
    assert!(
        out.stderr
            .contains(&format!("issue {} closed by {}", &issue[..8], &fix[..8])),
        "{out:?}"
    );
    assert_eq!(status(&h), "closed");
    let leases: i64 = db(&h)
        .query_row(
            "SELECT COUNT(*) FROM leases WHERE issue_id = ?1",
            [&issue],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(leases, 0);
    let kinds: Vec<String> = db(&h)
        .prepare("SELECT type FROM events WHERE object_id = ?1 ORDER BY seq")
        .unwrap()
        .query_map([&issue], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        &kinds[kinds.len() - 2..],
        ["issue.closed", "lease.released"],
        "{kinds:?}"
    );
}
