//! Push-to-review end to end: `git push origin HEAD:refs/for/main` against
//! the real server, its `proc-receive` hook and `collab.db`, with real
//! `git` and `ssh`.
//!
//! Agent A opens a patch with one push; the push prints the patch id, the
//! revision number and the web address, stores no `refs/for/main`, and the
//! server pins the revision at `refs/collab/revisions/<id>/1`. Agent B
//! moves `main` meanwhile; A rebases onto it with a stale local `main` and
//! pushes revision 2 with `-o patch=<id>`: its base is the server's `main`,
//! not A's. A third revision names its patch in a `Patch-Id:` trailer. A
//! client push to a server-held revision ref is refused; so are proposals
//! against a missing branch or of commits already in the base.

use collab_testkit as common;
use collab_testkit::review as review_support;

use common::{ServerHarness, SshOutput};
use review_support::{commit, git, ok, setup, Agent};

/// The server's refs of `r`, as `refname -> oid`.
fn remote_refs(h: &ServerHarness, a: &Agent) -> Vec<(String, String)> {
    let out = h.ls_remote_as(&a.key, "r");
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout
        .lines()
        .filter_map(|l| {
            let (oid, name) = l.split_once('\t')?;
            Some((name.to_string(), oid.to_string()))
        })
        .collect()
}

/// The server's collab database (either backend), for reading.
fn db(h: &ServerHarness) -> collab_store::sql::Connection {
    collab_store::open_reader(collab_store::Location::parse(&h.db_setting())).unwrap()
}

/// `(n, head, base_commit, base_tip)` of every revision of `patch`.
fn revisions(h: &ServerHarness, patch: &str) -> Vec<(i64, String, String, String)> {
    let conn = db(h);
    let mut stmt = conn
        .prepare(
            "SELECT n, head, base_commit, base_tip FROM patch_revisions
             WHERE patch_id = ?1 ORDER BY n",
        )
        .unwrap();
    stmt.query_map([patch], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// The 8-hex patch id the push printed (`remote: patch <id8> opened: ...`).
fn printed_id(out: &SshOutput) -> String {
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("remote: patch "))
        .unwrap_or_else(|| panic!("no patch line: {out:?}"));
    line.split("remote: patch ").nth(1).unwrap()[..8].to_string()
}

fn full_id(h: &ServerHarness, short: &str) -> String {
    db(h)
        .query_row(
            "SELECT id FROM patches WHERE id LIKE ?1",
            [format!("{short}%")],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn a_push_to_refs_for_opens_a_patch_and_revisions_follow_the_servers_base() {
    let (h, a, b) = setup();
    let main0 = ok(&h, &a, &["rev-parse", "origin/main"])
        .stdout
        .trim()
        .to_string();

    // A opens a patch with one push.
    ok(&h, &a, &["switch", "-q", "-c", "feature"]);
    let v1 = commit(
        &h,
        &a,
        "a.txt",
        "one\n",
        "Add a.txt\n\nThe body of the patch.",
    );
    let out = ok(&h, &a, &["push", "origin", "HEAD:refs/for/main"]);
    let short = printed_id(&out);
    assert!(
        out.stderr.contains("opened: revision 1 against main"),
        "{out:?}"
    );
    let url = format!("{}/r/-/patches/{short}", h.http_url().trim_end_matches('/'));
    assert!(out.stderr.contains(&url), "no {url} in {out:?}");
    let id = full_id(&h, &short);

    let refs = remote_refs(&h, &a);
    assert!(
        !refs.iter().any(|(name, _)| name.starts_with("refs/for/")),
        "refs/for/* stored: {refs:?}"
    );
    let pin1 = format!("refs/collab/revisions/{id}/1");
    assert!(refs.contains(&(pin1.clone(), v1.clone())), "{refs:?}");
    let (title, body, base, status): (String, String, String, String) = db(&h)
        .query_row(
            "SELECT title, body, base, status FROM patches WHERE id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        (
            title.as_str(),
            body.as_str(),
            base.as_str(),
            status.as_str()
        ),
        ("Add a.txt", "The body of the patch.", "main", "open")
    );
    assert_eq!(
        revisions(&h, &id),
        vec![(1, v1.clone(), main0.clone(), main0.clone())]
    );

    // B moves main; A's local main stays stale.
    let b_main = commit(&h, &b, "b.txt", "bee\n", "B's upstream change");
    ok(&h, &b, &["push", "-q", "origin", "HEAD:main"]);

    // A rebases onto the new main (fetched, local main untouched) and
    // pushes revision 2.
    ok(&h, &a, &["fetch", "-q", "origin"]);
    ok(&h, &a, &["rebase", "-q", "origin/main"]);
    assert_eq!(ok(&h, &a, &["rev-parse", "main"]).stdout.trim(), main0);
    let v2 = ok(&h, &a, &["rev-parse", "HEAD"]).stdout.trim().to_string();
    let out = ok(
        &h,
        &a,
        &[
            "push",
            "-o",
            &format!("patch={short}"),
            "origin",
            "HEAD:refs/for/main",
        ],
    );
    assert!(
        out.stderr
            .contains(&format!("patch {short} updated: revision 2")),
        "{out:?}"
    );
    let revs = revisions(&h, &id);
    assert_eq!(revs[1], (2, v2.clone(), b_main.clone(), b_main.clone()));

    // Revision 3, named by a trailer.
    commit(
        &h,
        &a,
        "a.txt",
        "one\ntwo\n",
        &format!("More\n\nPatch-Id: {short}"),
    );
    let v3 = ok(&h, &a, &["rev-parse", "HEAD"]).stdout.trim().to_string();
    let out = ok(&h, &a, &["push", "origin", "HEAD:refs/for/main"]);
    assert!(out.stderr.contains("updated: revision 3"), "{out:?}");
    assert_eq!(revisions(&h, &id).len(), 3);
    assert!(remote_refs(&h, &a).contains(&(format!("refs/collab/revisions/{id}/3"), v3)));

    // The same head again is refused with the reason.
    let out = git(&h, &a, &["push", "origin", "HEAD:refs/for/main"]);
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("already proposes"), "{out:?}");

    // The events, in order.
    let kinds: Vec<String> = db(&h)
        .prepare("SELECT type FROM events WHERE object_id = ?1 ORDER BY seq")
        .unwrap()
        .query_map([&id], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        kinds,
        vec!["patch.opened", "patch.revised", "patch.revised"]
    );
    // No ref.updated event for the refs/for/* pseudo-ref.
    let phantom: i64 = db(&h)
        .query_row(
            "SELECT COUNT(*) FROM events WHERE type = 'ref.updated' AND object_id LIKE 'refs/for/%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(phantom, 0);
    // The revision refs the server wrote are recorded under their names.
    let pins: i64 = db(&h)
        .query_row(
            "SELECT COUNT(*) FROM events WHERE type = 'ref.updated' AND object_id LIKE ?1",
            [format!("refs/collab/revisions/{id}/%")],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(pins, 3);

    // Clients cannot write the server's revision refs.
    let out = git(
        &h,
        &b,
        &[
            "push",
            "origin",
            &format!("HEAD:refs/collab/revisions/{id}/9"),
        ],
    );
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("maintained by the server"), "{out:?}");
    assert!(!remote_refs(&h, &b)
        .iter()
        .any(|(name, _)| name.ends_with(&format!("{id}/9"))));
}

#[test]
fn options_set_title_body_and_issue_and_bad_proposals_are_refused() {
    let (h, a, _b) = setup();
    let issue = h.open_server_issue("r", "The bug");

    ok(&h, &a, &["switch", "-q", "-c", "fix"]);
    commit(&h, &a, "fix.txt", "fixed\n", "wip");
    let out = ok(
        &h,
        &a,
        &[
            "push",
            "-o",
            "title=Fix the bug",
            "-o",
            "description=Closes the bug.",
            "-o",
            &format!("issue={}", &issue[..8]),
            "origin",
            "HEAD:refs/for/main",
        ],
    );
    let id = full_id(&h, &printed_id(&out));
    let conn = db(&h);
    let (title, body): (String, String) = conn
        .query_row(
            "SELECT title, body FROM patches WHERE id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (title.as_str(), body.as_str()),
        ("Fix the bug", "Closes the bug.")
    );
    let linked: String = conn
        .query_row(
            "SELECT issue_id FROM patch_issues WHERE patch_id = ?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(linked, issue);

    // A missing base branch, a commit already in the base, an unknown
    // patch: refused with the reason, nothing recorded.
    let refused = |args: &[&str], why: &str| {
        let out = git(&h, &a, args);
        assert_ne!(out.code, 0, "{args:?}: {out:?}");
        assert!(out.stderr.contains(why), "{args:?}: no {why:?} in {out:?}");
    };
    refused(
        &["push", "origin", "HEAD:refs/for/nope"],
        "no branch 'nope'",
    );
    refused(
        &["push", "origin", "origin/main:refs/for/main"],
        "nothing to propose",
    );
    commit(&h, &a, "fix.txt", "fixed again\n", "more");
    refused(
        &[
            "push",
            "-o",
            "patch=abcdef12",
            "origin",
            "HEAD:refs/for/main",
        ],
        "no patch matches",
    );
    let count: i64 = db(&h)
        .query_row("SELECT COUNT(*) FROM patch_revisions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 1);
}

/// The same commit pushed to `refs/for/main` again without `-o patch=`
/// (an agent retrying a push whose answer it lost) opened a duplicate
/// patch (issue 32). Now the push says which patch already has it and adds
/// nothing; a new commit still opens a new patch.
#[test]
fn pushing_the_same_commit_again_opens_no_duplicate() {
    let (h, a, _b) = setup();
    ok(&h, &a, &["switch", "-q", "-c", "feature"]);
    commit(&h, &a, "a.txt", "one\n", "Add a.txt");
    let first = ok(&h, &a, &["push", "origin", "HEAD:refs/for/main"]);
    let short = printed_id(&first);
    let count = || -> i64 {
        db(&h)
            .query_row("SELECT count(*) FROM patches", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(count(), 1);
    for _ in 0..2 {
        let again = ok(&h, &a, &["push", "origin", "HEAD:refs/for/main"]);
        assert!(
            again
                .stderr
                .contains(&format!("remote: patch {short} already has")),
            "{again:?}"
        );
        assert!(again.stderr.contains("nothing new"), "{again:?}");
        assert_eq!(count(), 1, "{again:?}");
    }
    assert_eq!(revisions(&h, &full_id(&h, &short)).len(), 1);
    // Another base is another proposal; a new commit is a new patch.
    commit(&h, &a, "b.txt", "two\n", "Add b.txt");
    let other = ok(&h, &a, &["push", "origin", "HEAD:refs/for/main"]);
    assert_ne!(printed_id(&other), short, "{other:?}");
    assert_eq!(count(), 2);
}
