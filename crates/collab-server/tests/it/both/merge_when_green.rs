//! `collab-patch merge --when-green` end to end (issue 27, items 3 and 5):
//! the merge is queued in the database and the server merges it, with no
//! client connected, once the last required check turns green; a failing
//! check, a new revision, `--cancel` or a lost lease drops it with a
//! `patch.merge_dequeued` event naming the reason; queued merges survive a
//! crash of the server; and the holder of a linked issue's lease counts as
//! an author of the revisions pushed while it held it, and so does the
//! holder (or last holder) of an issue linked after the push.

use collab_testkit as common;
use collab_testkit::review as review_support;

use std::time::Duration;

use common::{fingerprint, ServerHarness};
use review_support::{
    check_set, commit, events, ok, patch, push_for_review, server_tip, wait_until, Agent,
};
use serde_json::Value;

fn show(h: &ServerHarness, a: &Agent, id: &str) -> Value {
    let out = patch(h, a, &format!("show 'r' {}", &id[..8]));
    assert_eq!(out.code, 0, "{out:?}");
    out.json()
}

/// A server with repository `r` whose merge rule is `policy`'s, and alice
/// with a feature commit pushed for review: (server, alice, patch, head).
fn setup(policy: &str) -> (ServerHarness, Agent, String, String) {
    let h = ServerHarness::start();
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    review_support::write_policy(&h, policy);
    let a = review_support::agent(&h, "alice");
    ok(&h, &a, &["switch", "-q", "-c", "feature"]);
    let head = commit(&h, &a, "a.txt", "one\n", "Add a.txt");
    let id = push_for_review(&h, &a, &[]);
    (h, a, id, head)
}

const CI_RULE: &str = "merge = { required_checks = [\"ci/test\"] }\n";

#[test]
fn a_queued_merge_lands_when_the_last_required_check_turns_green() {
    let (h, a, id, head) = setup(CI_RULE);
    let queued = patch(&h, &a, &format!("merge 'r' {} --when-green", &id[..8]));
    assert_eq!(queued.code, 0, "{queued:?}");
    let v = queued.json();
    assert_eq!(v["status"], "queued");
    assert_eq!(v["patch"], id.as_str());
    assert_eq!(v["revision"], 1);
    assert!(
        v["waiting_for"]
            .as_str()
            .is_some_and(|w| w.contains("ci/test is missing")),
        "{v}"
    );
    let shown = show(&h, &a, &id);
    assert_eq!(shown["queued_merge"]["revision"], 1, "{shown}");
    assert_eq!(
        shown["queued_merge"]["requested_by"],
        fingerprint(&a.key).as_str()
    );

    // Pending is not green: after the driver has looked several times
    // (each second at least), the patch is still open and main unmoved.
    check_set(&h, &head, "ci/test", "pending");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(show(&h, &a, &id)["status"], "open");
    assert_ne!(server_tip(&h, "main"), head);

    // Green: the server merges, alice long gone.
    check_set(&h, &head, "ci/test", "success");
    wait_until("the queued merge", || {
        show(&h, &a, &id)["status"] == "merged"
    });
    assert_eq!(server_tip(&h, "main"), head, "a fast-forward to the head");
    let shown = show(&h, &a, &id);
    assert_eq!(
        shown["merge"]["author"]["principal"],
        fingerprint(&a.key).as_str(),
        "{shown}"
    );
    assert_eq!(shown["queued_merge"], Value::Null);
    let merged = events(&h, "patch.merged");
    assert_eq!(merged.len(), 1);
    assert_eq!(merged[0]["payload"]["queued"], true);
    assert_eq!(merged[0]["actor"], fingerprint(&a.key).as_str());
    assert_eq!(events(&h, "patch.merge_queued").len(), 1);
    assert!(events(&h, "patch.merge_dequeued").is_empty());
}

#[test]
fn a_failing_check_a_new_revision_or_cancel_drops_the_queued_merge() {
    let (h, a, id, head) = setup(CI_RULE);
    let queue = || patch(&h, &a, &format!("merge 'r' {} --when-green", &id[..8]));
    assert_eq!(queue().code, 0);

    // A failing required check: dropped, with the check named.
    check_set(&h, &head, "ci/test", "failure");
    wait_until("the drop", || {
        !events(&h, "patch.merge_dequeued").is_empty()
    });
    let dropped = events(&h, "patch.merge_dequeued");
    assert!(
        dropped[0]["payload"]["reason"]
            .as_str()
            .unwrap()
            .contains("ci/test is failure"),
        "{dropped:?}"
    );
    assert_eq!(show(&h, &a, &id)["queued_merge"], Value::Null);
    // Queueing behind a failed check is refused at once.
    let refused = queue();
    assert!(
        refused.code == 1 && refused.stderr.contains("ci/test is failure"),
        "{refused:?}"
    );
    assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");

    // A re-run that passes lets it queue again; a new revision drops it in
    // the push's own transaction, before its checks could count.
    check_set(&h, &head, "ci/test", "success");
    check_set(&h, &head, "lint", "pending");
    review_support::write_policy(
        &h,
        "merge = { required_checks = [\"ci/test\", \"lint\"] }\n",
    );
    assert_eq!(queue().code, 0);
    std::fs::write(a.clone.join("a.txt"), "one\ntwo\n").unwrap();
    ok(&h, &a, &["commit", "-q", "-a", "--amend", "--no-edit"]);
    ok(
        &h,
        &a,
        &[
            "push",
            "-o",
            &format!("patch={}", &id[..8]),
            "origin",
            "HEAD:refs/for/main",
        ],
    );
    let dropped = events(&h, "patch.merge_dequeued");
    assert_eq!(dropped.len(), 2, "{dropped:?}");
    assert!(
        dropped[1]["payload"]["reason"]
            .as_str()
            .unwrap()
            .contains("revision 2 was pushed"),
        "{dropped:?}"
    );
    // The old head's green checks do not merge revision 2.
    check_set(&h, &head, "lint", "success");
    assert_eq!(show(&h, &a, &id)["status"], "open");

    // --cancel drops it; a second cancel finds nothing.
    assert_eq!(queue().code, 0);
    let cancelled = patch(&h, &a, &format!("merge 'r' {} --cancel", &id[..8]));
    assert_eq!(cancelled.code, 0, "{cancelled:?}");
    assert_eq!(cancelled.json()["status"], "dequeued");
    let again = patch(&h, &a, &format!("merge 'r' {} --cancel", &id[..8]));
    assert!(
        again.code == 1 && again.stderr.contains("has no queued merge"),
        "{again:?}"
    );
    let dropped = events(&h, "patch.merge_dequeued");
    assert!(
        dropped
            .last()
            .unwrap()
            .pointer("/payload/reason")
            .and_then(Value::as_str)
            .is_some_and(|r| r.starts_with("cancelled by")),
        "{dropped:?}"
    );
    // Both flags at once, and a queue of a missing patch: one-line errors.
    let both = patch(
        &h,
        &a,
        &format!("merge 'r' {} --when-green --cancel", &id[..8]),
    );
    assert_eq!(both.code, 1, "{both:?}");
    let missing = patch(&h, &a, "merge 'r' 00000000 --when-green");
    assert_eq!(missing.code, 1, "{missing:?}");
    assert_eq!(missing.stderr.lines().count(), 1, "{missing:?}");
}

/// Queued merges live in the database: a SIGKILLed server comes back and
/// merges what was queued before it died.
#[test]
fn queued_merges_survive_a_crash_of_the_server() {
    let (mut h, a, id, head) = setup(CI_RULE);
    assert_eq!(
        patch(&h, &a, &format!("merge 'r' {} --when-green", &id[..8])).code,
        0
    );
    h.kill();
    h.start_again();
    assert_eq!(show(&h, &a, &id)["queued_merge"]["revision"], 1);
    check_set(&h, &head, "ci/test", "success");
    wait_until("the queued merge after a restart", || {
        show(&h, &a, &id)["status"] == "merged"
    });
    assert_eq!(server_tip(&h, "main"), head);
}

/// Fencing applies at merge time: a queued merge on a fenced base with a
/// lease token merges while the lease is live, and is dropped with the
/// reason when the lease is gone by the time the checks are green.
#[test]
fn fencing_is_checked_when_the_queued_merge_runs() {
    let (h, a, _unused, _) = setup(&format!("fenced_refs = [\"refs/heads/main\"]\n{CI_RULE}"));
    let issue = h.open_server_issue("r", "Add b.txt");
    ok(&h, &a, &["switch", "-q", "-c", "fenced", "origin/main"]);
    let head = commit(&h, &a, "b.txt", "b\n", "Add b.txt");
    let id = push_for_review(&h, &a, &["-o", &format!("issue={}", &issue[..8])]);

    // Without a token, a fenced base refuses at once (as a merge would).
    let refused = patch(&h, &a, &format!("merge 'r' {} --when-green", &id[..8]));
    assert_eq!(refused.code, 4, "{refused:?}");
    let lease = h.ssh_exec_as(
        &a.key,
        &format!("collab-lease acquire 'r' '{issue}' --ttl 600"),
        b"",
    );
    assert_eq!(lease.code, 0, "{lease:?}");
    let token = lease.json()["token"].as_i64().unwrap();
    let queued = patch(
        &h,
        &a,
        &format!("merge 'r' {} --when-green --lease-token {token}", &id[..8]),
    );
    assert_eq!(queued.code, 0, "{queued:?}");

    // The lease ends before CI is done: the merge is dropped, fenced.
    let released = h.ssh_exec_as(&a.key, &format!("collab-lease release 'r' '{issue}'"), b"");
    assert_eq!(released.code, 0, "{released:?}");
    check_set(&h, &head, "ci/test", "success");
    wait_until("the fenced drop", || {
        !events(&h, "patch.merge_dequeued").is_empty()
    });
    let dropped = events(&h, "patch.merge_dequeued");
    let reason = dropped[0]["payload"]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains(&format!("lease token {token} is not live")),
        "{reason}"
    );
    assert_eq!(show(&h, &a, &id)["status"], "open");
    assert_ne!(server_tip(&h, "main"), head);

    // A live lease again: queued with its token, it merges.
    let lease = h.ssh_exec_as(
        &a.key,
        &format!("collab-lease acquire 'r' '{issue}' --ttl 600"),
        b"",
    );
    let token = lease.json()["token"].as_i64().unwrap();
    let queued = patch(
        &h,
        &a,
        &format!("merge 'r' {} --when-green --lease-token {token}", &id[..8]),
    );
    assert_eq!(queued.code, 0, "{queued:?}");
    wait_until("the fenced merge", || {
        show(&h, &a, &id)["status"] == "merged"
    });
    assert_eq!(server_tip(&h, "main"), head);
}

/// Item 5: the principal holding a linked issue's lease when a revision
/// was pushed is an author of it: its approval counts only when the rule
/// lets authors approve (`lease_holder_is_author`, on by default).
#[test]
fn the_lease_holder_of_a_linked_issue_is_an_author_of_the_revision() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    review_support::write_policy(&h, "merge = { approvals = 1 }\n");
    let a = review_support::agent(&h, "alice");
    let b = review_support::agent(&h, "bob");
    let issue = h.open_server_issue("r", "Agent work");
    // Bob's agent claims the issue; alice's key pushes the work.
    let lease = h.ssh_exec_as(
        &b.key,
        &format!("collab-lease acquire 'r' '{issue}' --ttl 600"),
        b"",
    );
    assert_eq!(lease.code, 0, "{lease:?}");
    ok(&h, &a, &["switch", "-q", "-c", "feature"]);
    commit(&h, &a, "a.txt", "one\n", "Add a.txt");
    let id = push_for_review(&h, &a, &["-o", &format!("issue={}", &issue[..8])]);
    let shown = show(&h, &a, &id);
    assert_eq!(
        shown["revisions"][0]["lease_holders"],
        serde_json::json!([fingerprint(&b.key)]),
        "{shown}"
    );
    let voted = patch(&h, &b, &format!("review 'r' {} --approve", &id[..8]));
    assert_eq!(voted.code, 0, "{voted:?}");
    let rule = &show(&h, &a, &id)["merge_rule"];
    assert_eq!(rule["ready"], false, "{rule}");
    assert!(
        rule["reason"]
            .as_str()
            .unwrap()
            .contains("held the lease of a linked issue"),
        "{rule}"
    );
    let refused = patch(&h, &a, &format!("merge 'r' {}", &id[..8]));
    assert_eq!(refused.code, 1, "{refused:?}");

    // The rule may say otherwise.
    review_support::write_policy(
        &h,
        "merge = { approvals = 1, lease_holder_is_author = false }\n",
    );
    assert_eq!(show(&h, &a, &id)["merge_rule"]["ready"], true);
    let merged = patch(&h, &a, &format!("merge 'r' {}", &id[..8]));
    assert_eq!(merged.code, 0, "{merged:?}");
}

/// `collab-lease next --wait` with nothing ready also returns when a merge
/// the caller queued settles: an exit-3 `settled` reply naming the patch,
/// merged, with its commit, long before the wait runs out, and no claim.
#[test]
fn next_wait_returns_when_a_queued_merge_settles() {
    let (h, a, id, head) = setup(CI_RULE);
    let queued = patch(&h, &a, &format!("merge 'r' {} --when-green", &id[..8]));
    assert_eq!(queued.code, 0, "{queued:?}");
    let started = std::time::Instant::now();
    let waiter = {
        let (h, key) = (&h, a.key.clone());
        std::thread::scope(|s| {
            let waiter =
                s.spawn(move || h.ssh_exec_as(&key, "collab-lease next 'r' --wait 60", b""));
            // Nothing is ready (no issue at all): the call waits. Then CI
            // turns green and the server merges the queued patch.
            std::thread::sleep(Duration::from_millis(1500));
            assert!(!waiter.is_finished(), "next --wait returned at once");
            check_set(h, &head, "ci/test", "success");
            waiter.join().unwrap()
        })
    };
    assert_eq!(waiter.code, 3, "{waiter:?}");
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "{:?}",
        started.elapsed()
    );
    let v = waiter.json();
    assert_eq!(v["status"], "settled", "{v}");
    assert_eq!(v["repo"], "r.git", "{v}");
    let settled = v["settled"].as_array().unwrap();
    assert_eq!(settled.len(), 1, "{v}");
    assert_eq!(settled[0]["patch"], id.as_str());
    assert_eq!(settled[0]["state"], "merged");
    assert_eq!(settled[0]["commit"], head.as_str());
    assert_eq!(settled[0]["revision"], 1);
    let merged = events(&h, "patch.merged");
    assert_eq!(
        merged[0]["payload"]["requested_by"],
        fingerprint(&a.key).as_str()
    );
    assert_eq!(settled[0]["seq"], merged[0]["seq"]);
    // No claim was made.
    let leases = h.ssh_exec_as(&a.key, "collab-lease list 'r'", b"");
    assert_eq!(leases.json()["leases"], serde_json::json!([]), "{leases:?}");
}

/// Issue 44: linking the issue after the push does not launder its lease
/// holder's approval. Bob claims the issue, alice pushes the work with no
/// link, bob approves and lets the lease go, then the patch is linked: the
/// rule reads the links when it is evaluated, and bob is an author.
#[test]
fn the_lease_holder_of_an_issue_linked_after_the_push_is_an_author_too() {
    let (h, a, id, _head) = setup("merge = { approvals = 1 }\n");
    let b = review_support::agent(&h, "bob");
    let issue = h.open_server_issue("r", "Agent work");
    let lease = h.ssh_exec_as(
        &b.key,
        &format!("collab-lease acquire 'r' '{issue}' --ttl 600"),
        b"",
    );
    assert_eq!(lease.code, 0, "{lease:?}");
    let voted = patch(&h, &b, &format!("review 'r' {} --approve", &id[..8]));
    assert_eq!(voted.code, 0, "{voted:?}");
    // Not linked yet: bob is a reviewer like any other.
    assert_eq!(show(&h, &a, &id)["merge_rule"]["ready"], true);
    let released = h.ssh_exec_as(&b.key, &format!("collab-lease release 'r' '{issue}'"), b"");
    assert_eq!(released.code, 0, "{released:?}");

    let linked = patch(&h, &a, &format!("link 'r' {} {}", &id[..8], &issue[..8]));
    assert_eq!(linked.code, 0, "{linked:?}");
    let shown = show(&h, &a, &id);
    // What was recorded at the push stays as it was.
    assert_eq!(
        shown["revisions"][0]["lease_holders"],
        serde_json::json!([]),
        "{shown}"
    );
    let rule = &shown["merge_rule"];
    assert_eq!(rule["ready"], false, "{rule}");
    let reason = rule["reason"].as_str().unwrap();
    let bob = fingerprint(&b.key);
    assert!(
        reason.contains(&format!(
            "{bob}'s approval does not count: {bob} holds or last held the lease of a linked issue"
        )),
        "{rule}"
    );
    let refused = patch(&h, &a, &format!("merge 'r' {}", &id[..8]));
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("lease of a linked issue"),
        "{refused:?}"
    );
    assert_ne!(show(&h, &a, &id)["status"], "merged");

    // A reviewer who never held the lease still counts.
    let c = review_support::agent(&h, "carol");
    let voted = patch(&h, &c, &format!("review 'r' {} --approve", &id[..8]));
    assert_eq!(voted.code, 0, "{voted:?}");
    assert_eq!(show(&h, &a, &id)["merge_rule"]["ready"], true);
    let merged = patch(&h, &a, &format!("merge 'r' {}", &id[..8]));
    assert_eq!(merged.code, 0, "{merged:?}");
}
