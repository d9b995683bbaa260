//! Review integrity (issue 25), end to end with real `git` and `ssh`: a
//! writer cannot push a revision onto someone else's patch unless the merge
//! rule says `others_may_revise = true` (a maintainer with Rewind always
//! may), and whoever pushed a revision of a patch is no approver of it.

use collab_testkit as common;
use collab_testkit::review as review_support;

use common::{ServerHarness, SshOutput};
use review_support::{agent, commit, git, ok, setup, Agent};

fn patch(h: &ServerHarness, a: &Agent, args: &str) -> SshOutput {
    h.ssh_exec_as(&a.key, &format!("collab-patch {args}"), b"")
}

fn patch_ok(h: &ServerHarness, a: &Agent, args: &str) -> serde_json::Value {
    let out = patch(h, a, args);
    assert_eq!(out.code, 0, "collab-patch {args}: {out:?}");
    out.json()
}

fn set_policy(h: &ServerHarness, text: &str) {
    collab_testkit::write_live(
        &h.repos_dir().join("r.git").join("collab-policy.toml"),
        text,
    );
}

/// Alice opens a patch; its short id.
fn alice_opens(h: &ServerHarness, a: &Agent) -> String {
    ok(h, a, &["switch", "-q", "-c", "feature"]);
    commit(h, a, "a.txt", "alice\n", "Add a.txt");
    let out = ok(h, a, &["push", "origin", "HEAD:refs/for/main"]);
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("remote: patch "))
        .unwrap_or_else(|| panic!("no patch line: {out:?}"));
    line.split("remote: patch ").nth(1).unwrap()[..8].to_string()
}

/// `b` builds on the patch's head and pushes it as a revision of `id8`.
fn push_revision(h: &ServerHarness, b: &Agent, id8: &str, text: &str) -> SshOutput {
    let head = patch_ok(h, b, &format!("show 'r' {id8}"))["revisions"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["head"]
        .as_str()
        .unwrap()
        .to_string();
    fetch_commit(h, b, &head);
    ok(h, b, &["checkout", "-q", "-B", "take-over", &head]);
    commit(h, b, "a.txt", text, "Take it over");
    git(
        h,
        b,
        &[
            "push",
            "-o",
            &format!("patch={id8}"),
            "origin",
            "HEAD:refs/for/main",
        ],
    )
}

/// Fetch a revision's head into `a`'s clone (revision refs are not
/// advertised to pushers, but fetching reads them).
fn fetch_commit(h: &ServerHarness, a: &Agent, head: &str) {
    if git(h, a, &["cat-file", "-e", head]).code != 0 {
        let out = git(
            h,
            a,
            &[
                "fetch",
                "-q",
                "origin",
                "refs/collab/revisions/*:refs/remotes/rev/*",
            ],
        );
        assert_eq!(out.code, 0, "{out:?}");
    }
}

#[test]
fn a_writer_cannot_revise_anothers_patch_by_default() {
    let (h, a, b) = setup();
    set_policy(&h, "merge = { approvals = 1 }\n");
    let id8 = alice_opens(&h, &a);

    // Bob's revision is refused with one line naming the rule.
    let out = push_revision(&h, &b, &id8, "bob\n");
    assert_ne!(out.code, 0, "{out:?}");
    let rejected: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("[remote rejected]"))
        .collect();
    assert_eq!(rejected.len(), 1, "{out:?}");
    assert!(
        rejected[0].contains(&format!("patch {id8} belongs to "))
            && rejected[0].contains(
                "only its author may push a revision (the repository's merge rule has \
                 others_may_revise = false)"
            ),
        "{out:?}"
    );
    let shown = patch_ok(&h, &a, &format!("show 'r' {id8}"));
    assert_eq!(shown["revisions"].as_array().unwrap().len(), 1, "{shown}");

    // Alice's own flow is unchanged: she revises, bob approves, it merges.
    commit(&h, &a, "a.txt", "alice\ntwo\n", "Second line");
    ok(
        &h,
        &a,
        &[
            "push",
            "-o",
            &format!("patch={id8}"),
            "origin",
            "HEAD:refs/for/main",
        ],
    );
    patch_ok(&h, &b, &format!("review 'r' {id8} --approve"));
    let merged = patch_ok(&h, &b, &format!("merge 'r' {id8}"));
    assert_eq!(merged["status"], "merged", "{merged}");
}

#[test]
fn when_others_may_revise_a_reviser_is_no_approver() {
    let (h, a, b) = setup();
    set_policy(&h, "merge = { approvals = 1, others_may_revise = true }\n");
    let id8 = alice_opens(&h, &a);

    let out = push_revision(&h, &b, &id8, "bob\n");
    assert_eq!(out.code, 0, "{out:?}");
    let shown = patch_ok(&h, &a, &format!("show 'r' {id8}"));
    assert_eq!(shown["revisions"].as_array().unwrap().len(), 2, "{shown}");

    // Bob approves his own revision and tries to merge: refused, saying why.
    patch_ok(&h, &b, &format!("review 'r' {id8} --approve"));
    let refused = patch(&h, &b, &format!("merge 'r' {id8}"));
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("needs 1 more approval on revision 2 (0 of 1)")
            && refused.stderr.contains("approval does not count: ")
            && refused.stderr.contains("pushed a revision of this patch"),
        "{refused:?}"
    );
    assert_eq!(refused.stderr.trim().lines().count(), 1, "{refused:?}");
    // Alice's approval does not count either (the author's, by default).
    patch_ok(&h, &a, &format!("review 'r' {id8} --approve"));
    assert_eq!(patch(&h, &b, &format!("merge 'r' {id8}")).code, 1);

    // A third person's approval does.
    let c = agent(&h, "carol");
    patch_ok(&h, &c, &format!("review 'r' {id8} --approve"));
    let merged = patch_ok(&h, &b, &format!("merge 'r' {id8}"));
    assert_eq!(merged["status"], "merged", "{merged}");
}

#[test]
fn a_maintainer_may_always_revise_and_is_then_no_approver() {
    let (h, a, _b) = setup();
    set_policy(&h, "merge = { approvals = 1 }\n");
    let id8 = alice_opens(&h, &a);
    // The harness's own key is an admin: Rewind everywhere.
    let admin = Agent {
        key: h.ssh_client_key(),
        clone: h.clone_as(&h.ssh_client_key(), "r", "maintainer"),
    };
    let out = push_revision(&h, &admin, &id8, "fixed up by a maintainer\n");
    assert_eq!(out.code, 0, "{out:?}");
    patch_ok(&h, &admin, &format!("review 'r' {id8} --approve"));
    let refused = patch(&h, &admin, &format!("merge 'r' {id8}"));
    assert!(
        refused.code == 1 && refused.stderr.contains("pushed a revision of this patch"),
        "{refused:?}"
    );
}
