//! Change-ids and stacks end to end (docs/patches.md, "Stacks"), with the
//! real server, its `proc-receive` hook, `git` and `ssh`: a push of commits
//! carrying Gerrit `Change-Id:` trailers opens one patch per commit, each
//! on the patch below it; pushed again it revises only the patches whose
//! commit changed, follows a reorder, and replaces a closed middle patch.
//! A Jujutsu `change-id` commit header names a patch the same way. A
//! malformed change id is ignored with a note, a stack deeper than the
//! bound is refused with one line and nothing written; a patch cannot
//! merge before the patch below it: merging the top of a stack takes the
//! open ones below it first, each by its own rule.

use collab_testkit as common;
use collab_testkit::review as review_support;

use common::{ServerHarness, SshOutput};
use review_support::{commit, git, ok, patch, setup, Agent};
use serde_json::Value;

/// Gerrit's change id number `n`.
fn change_id(n: u32) -> String {
    format!("I{n:040x}")
}

/// Commit `file` with a `Change-Id:` trailer; the commit's id.
fn change(h: &ServerHarness, a: &Agent, file: &str, text: &str, n: u32) -> String {
    commit(
        h,
        a,
        file,
        text,
        &format!(
            "Change {file}\n\nWhat {file} does.\n\nChange-Id: {}",
            change_id(n)
        ),
    )
}

fn push(h: &ServerHarness, a: &Agent) -> SshOutput {
    ok(h, a, &["push", "origin", "HEAD:refs/for/main"])
}

fn patch_ok(h: &ServerHarness, a: &Agent, args: &str) -> Value {
    let out = patch(h, a, args);
    assert_eq!(out.code, 0, "collab-patch {args}: {out:?}");
    out.json()
}

/// Every patch of `r` (any state), as `list` shows it.
fn listed(h: &ServerHarness, a: &Agent) -> Vec<Value> {
    patch_ok(h, a, "list 'r' --state all --limit 100")["patches"]
        .as_array()
        .unwrap()
        .clone()
}

/// The open patch of `r` whose change id is `cid`: `(id, depends_on,
/// revisions, head)`, from `list`.
fn by_change(h: &ServerHarness, a: &Agent, cid: &str) -> (String, Option<String>, i64, String) {
    let rows: Vec<Value> = listed(h, a)
        .into_iter()
        .filter(|p| p["change_id"] == cid && p["status"] == "open")
        .collect();
    assert_eq!(rows.len(), 1, "one open patch for {cid}: {rows:?}");
    let p = &rows[0];
    (
        p["id"].as_str().unwrap().to_string(),
        p["depends_on"].as_str().map(str::to_string),
        p["revisions"].as_i64().unwrap(),
        p["head"].as_str().unwrap().to_string(),
    )
}

fn head(h: &ServerHarness, a: &Agent) -> String {
    ok(h, a, &["rev-parse", "HEAD"]).stdout.trim().to_string()
}

#[test]
fn a_stack_with_change_id_trailers_is_one_patch_per_commit_revised_where_it_changed() {
    let (h, a, _b) = setup();
    ok(&h, &a, &["switch", "-q", "-c", "stack"]);
    let c1 = change(&h, &a, "one.txt", "1\n", 1);
    let c2 = change(&h, &a, "two.txt", "2\n", 2);
    let c3 = change(&h, &a, "three.txt", "3\n", 3);
    let out = push(&h, &a);
    assert!(
        out.stderr
            .contains("remote: stack of 3 patches against main"),
        "{out:?}"
    );
    let (p1, below1, n1, h1) = by_change(&h, &a, &change_id(1));
    let (p2, below2, n2, h2) = by_change(&h, &a, &change_id(2));
    let (p3, below3, n3, h3) = by_change(&h, &a, &change_id(3));
    assert_eq!((below1, n1, h1), (None, 1, c1.clone()));
    assert_eq!((below2, n2, h2), (Some(p1.clone()), 1, c2.clone()));
    assert_eq!((below3, n3, h3), (Some(p2.clone()), 1, c3.clone()));
    assert_eq!(listed(&h, &a).len(), 3);
    // `show` says the same, with each commit's own title.
    let shown = patch_ok(&h, &a, &format!("show 'r' {}", &p2[..8]));
    assert_eq!(shown["change_id"], change_id(2));
    assert_eq!(shown["depends_on"], p1.as_str());
    assert_eq!(shown["title"], "Change two.txt");
    let shown = patch_ok(&h, &a, &format!("show 'r' {}", &p1[..8]));
    assert_eq!(shown["depends_on"], Value::Null);

    // The same stack again: nothing new.
    let out = push(&h, &a);
    assert_eq!(
        out.stderr
            .matches("unchanged: revision 1 already has it")
            .count(),
        3,
        "{out:?}"
    );
    assert_eq!(listed(&h, &a).len(), 3);
    assert_eq!(by_change(&h, &a, &change_id(1)).2, 1);

    // The middle commit amended, the top replayed on it: the bottom keeps
    // its one revision, the other two get a second.
    ok(&h, &a, &["reset", "-q", "--hard", &c1]);
    let c2b = change(&h, &a, "two.txt", "2, better\n", 2);
    ok(&h, &a, &["cherry-pick", &c3]);
    let c3b = head(&h, &a);
    push(&h, &a);
    assert_eq!(
        by_change(&h, &a, &change_id(1)),
        (p1.clone(), None, 1, c1.clone())
    );
    assert_eq!(
        by_change(&h, &a, &change_id(2)),
        (p2.clone(), Some(p1.clone()), 2, c2b.clone())
    );
    assert_eq!(
        by_change(&h, &a, &change_id(3)),
        (p3.clone(), Some(p2.clone()), 2, c3b.clone())
    );
    // The interdiff of the amended patch is its own change.
    let inter = patch_ok(&h, &a, &format!("interdiff 'r' {} 1 2", &p2[..8]));
    assert!(
        inter["text"].as_str().unwrap().contains("+2, better"),
        "{inter}"
    );
    let pins = h.ls_remote_as(&a.key, "r").stdout;
    assert!(
        pins.contains(&format!("{c2b}\trefs/collab/revisions/{p2}/2")),
        "{pins}"
    );
    assert!(
        !pins.contains(&format!("refs/collab/revisions/{p1}/2")),
        "{pins}"
    );

    // Reordered: three below two. Both move; each names its new lower.
    ok(&h, &a, &["reset", "-q", "--hard", &c1]);
    ok(&h, &a, &["cherry-pick", &c3b]);
    let c3c = head(&h, &a);
    ok(&h, &a, &["cherry-pick", &c2b]);
    let c2c = head(&h, &a);
    push(&h, &a);
    assert_eq!(by_change(&h, &a, &change_id(1)), (p1.clone(), None, 1, c1));
    assert_eq!(
        by_change(&h, &a, &change_id(3)),
        (p3.clone(), Some(p1.clone()), 3, c3c)
    );
    assert_eq!(
        by_change(&h, &a, &change_id(2)),
        (p2.clone(), Some(p3.clone()), 3, c2c)
    );
    assert_eq!(listed(&h, &a).len(), 3);
}

#[test]
fn a_jujutsu_change_id_header_names_the_patch_and_a_malformed_change_id_is_ignored() {
    let (h, a, _b) = setup();
    let jj = "zyxwvutsrqponmlkzyxwvutsrqponmlk";
    // A commit with a `change-id` header, as Jujutsu writes it.
    let with_header = |file: &str, text: &str| -> String {
        commit(&h, &a, file, text, &format!("Header {file}"));
        let raw = ok(&h, &a, &["cat-file", "commit", "HEAD"]).stdout;
        let (headers, message) = raw.split_once("\n\n").unwrap();
        let object = a.clone.parent().unwrap().join("jj-commit");
        std::fs::write(&object, format!("{headers}\nchange-id {jj}\n\n{message}")).unwrap();
        let oid = ok(
            &h,
            &a,
            &[
                "hash-object",
                "-t",
                "commit",
                "-w",
                "--literally",
                object.to_str().unwrap(),
            ],
        )
        .stdout
        .trim()
        .to_string();
        ok(&h, &a, &["reset", "-q", "--hard", &oid]);
        oid
    };
    ok(&h, &a, &["switch", "-q", "-c", "jj"]);
    let v1 = with_header("jj.txt", "one\n");
    push(&h, &a);
    let (id, below, n, head1) = by_change(&h, &a, jj);
    assert_eq!((below, n, head1), (None, 1, v1.clone()));
    // Rewritten (jj's amend keeps the change id): the same patch's
    // revision 2.
    ok(&h, &a, &["reset", "-q", "--hard", "HEAD~1"]);
    let v2 = with_header("jj.txt", "two\n");
    assert_ne!(v1, v2);
    push(&h, &a);
    assert_eq!(by_change(&h, &a, jj), (id, None, 2, v2));
    assert_eq!(listed(&h, &a).len(), 1);

    // A malformed trailer: a note, and the push is an ordinary one.
    ok(&h, &a, &["switch", "-q", "-c", "bad", "main"]);
    commit(
        &h,
        &a,
        "bad.txt",
        "x\n",
        "Bad change id\n\nChange-Id: I12345-not-hex",
    );
    let out = push(&h, &a);
    assert!(
        out.stderr
            .contains("remote: note: ignoring the change id of")
            && out.stderr.contains("is not I and 40 hex digits"),
        "{out:?}"
    );
    assert!(
        out.stderr.contains("opened: revision 1 against main"),
        "{out:?}"
    );
    let rows = listed(&h, &a);
    assert_eq!(rows.len(), 2);
    let bad = rows.iter().find(|p| p["title"] == "Bad change id").unwrap();
    assert_eq!(
        (&bad["change_id"], &bad["depends_on"]),
        (&Value::Null, &Value::Null)
    );
}

#[test]
fn a_stack_deeper_than_the_bound_is_refused_and_one_at_the_bound_opens() {
    let (h, a, _b) = setup();
    ok(&h, &a, &["switch", "-q", "-c", "deep"]);
    for n in 1..=65 {
        ok(
            &h,
            &a,
            &[
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                &format!("Step {n}\n\nChange-Id: {}", change_id(n)),
            ],
        );
    }
    let out = git(&h, &a, &["push", "origin", "HEAD:refs/for/main"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr
            .contains("a stack of more than 64 commits with change ids is refused"),
        "{out:?}"
    );
    assert!(listed(&h, &a).is_empty());
    let pins = h.ls_remote_as(&a.key, "r").stdout;
    assert!(!pins.contains("refs/collab/revisions/"), "{pins}");

    ok(&h, &a, &["reset", "-q", "--hard", "HEAD~1"]);
    let out = push(&h, &a);
    assert!(
        out.stderr
            .contains("remote: stack of 64 patches against main"),
        "{out:?}"
    );
    assert_eq!(listed(&h, &a).len(), 64);
    let (_, below, _, _) = by_change(&h, &a, &change_id(64));
    let (lower, ..) = by_change(&h, &a, &change_id(63));
    assert_eq!(below, Some(lower));
}

#[test]
fn a_closed_middle_patch_is_replaced_and_merging_the_top_takes_the_stack_below_it() {
    let (h, a, b) = setup();
    ok(&h, &a, &["switch", "-q", "-c", "stack"]);
    let c1 = change(&h, &a, "one.txt", "1\n", 1);
    let c2 = change(&h, &a, "two.txt", "2\n", 2);
    let c3 = change(&h, &a, "three.txt", "3\n", 3);
    push(&h, &a);
    let (p1, ..) = by_change(&h, &a, &change_id(1));
    let (p2, ..) = by_change(&h, &a, &change_id(2));
    let (p3, ..) = by_change(&h, &a, &change_id(3));

    // The middle one closed: the top cannot merge, it names why.
    patch_ok(&h, &a, &format!("close 'r' {}", &p2[..8]));
    let refused = patch(&h, &b, &format!("merge 'r' {}", &p3[..8]));
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains(&format!(
            "it depends on patch {}, which is closed: push the stack again",
            &p2[..8]
        )),
        "{refused:?}"
    );
    assert_eq!(refused.stderr.trim().lines().count(), 1, "{refused:?}");

    // Pushed again: a new patch for the middle commit, and the top (its
    // commit unchanged) now stands on it.
    push(&h, &a);
    let (p2b, below2b, n2b, head2b) = by_change(&h, &a, &change_id(2));
    assert_ne!(p2b, p2);
    assert_eq!((below2b, n2b, head2b), (Some(p1.clone()), 1, c2.clone()));
    assert_eq!(
        by_change(&h, &a, &change_id(3)),
        (p3.clone(), Some(p2b.clone()), 1, c3.clone())
    );
    assert_eq!(listed(&h, &a).len(), 4);
    let shown = patch_ok(&h, &a, &format!("show 'r' {}", &p3[..8]));
    assert_eq!(shown["merge_rule"]["ready"], false, "{shown}");

    // Merging the top takes the open patches below it, bottom up, each
    // by its own rule: with one approval needed and only the top approved,
    // the bottom one refuses and nothing merges.
    review_support::write_policy(&h, "merge = { approvals = 1 }\n");
    patch_ok(&h, &b, &format!("review 'r' {} --approve", &p3[..8]));
    let refused = patch(&h, &b, &format!("merge 'r' {}", &p3[..8]));
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains(&format!(
            "merging patch {} below it in its stack first: merge refused: needs 1 more approval",
            &p1[..8]
        )),
        "{refused:?}"
    );
    assert_eq!(refused.stderr.trim().lines().count(), 1, "{refused:?}");
    let open = |id: &str| patch_ok(&h, &a, &format!("show 'r' {}", &id[..8]))["status"] == "open";
    assert!(open(&p1) && open(&p2b) && open(&p3));
    patch_ok(&h, &b, &format!("review 'r' {} --approve", &p1[..8]));
    patch_ok(&h, &b, &format!("review 'r' {} --approve", &p2b[..8]));
    let merged = patch_ok(&h, &b, &format!("merge 'r' {}", &p3[..8]));
    assert_eq!(merged["patch"], p3.as_str());
    assert_eq!(merged["commit"], c3.as_str());
    let taken: Vec<(&str, &str, &str)> = merged["also_merged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["patch"].as_str().unwrap(),
                m["commit"].as_str().unwrap(),
                m["how"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        taken,
        [
            (p1.as_str(), c1.as_str(), "below it in its stack"),
            (p2b.as_str(), c2.as_str(), "below it in its stack")
        ],
        "{merged}"
    );
    for id in [&p1, &p2b, &p3] {
        let shown = patch_ok(&h, &a, &format!("show 'r' {}", &id[..8]));
        assert_eq!(shown["status"], "merged", "{shown}");
    }
    assert_eq!(review_support::server_tip(&h, "main"), c3);
}
