//! Who acts (issue 44): work a key leaves to happen later acts for it only
//! while it could act with nobody connected (a `from=`-limited key's queued
//! merge is dropped, and it cannot queue another), and a merge rule with
//! `checks_from = "checks"` counts a required check only when a principal
//! with the `checks` level posted it (a writer cannot turn its own patch
//! green), for a merge now, `--when-green` and the merge queue alike.

use collab_testkit as common;
use collab_testkit::review as review_support;

use std::path::Path;
use std::time::Duration;

use common::{fingerprint, ServerHarness};
use review_support::{commit, events, ok, patch, push_for_review, server_tip, wait_until, Agent};
use serde_json::Value;

fn status(h: &ServerHarness, a: &Agent, id: &str) -> String {
    let out = patch(h, a, &format!("show 'r' {}", &id[..8]));
    assert_eq!(out.code, 0, "{out:?}");
    out.json()["status"].as_str().unwrap().to_string()
}

/// `collab-check set` of `ci/test` as `key`.
fn check_as(h: &ServerHarness, key: &Path, commit: &str, state: &str) {
    let out = h.ssh_exec_as(
        key,
        &format!("collab-check set 'r' {commit} ci/test --state {state}"),
        b"",
    );
    assert_eq!(out.code, 0, "{out:?}");
}

/// A server with repository `r`, alice (a writer) with a feature commit
/// pushed for review, and the policy `policy(alice, ci)` written after:
/// (server, alice, the key `ci`, patch, head).
fn setup(
    policy: impl Fn(&str, &str) -> String,
) -> (ServerHarness, Agent, std::path::PathBuf, String, String) {
    let h = ServerHarness::start();
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    let a = review_support::agent(&h, "alice");
    let ci = h.authorized_key("ci");
    review_support::write_policy(&h, policy(&fingerprint(&a.key), &fingerprint(&ci)));
    ok(&h, &a, &["switch", "-q", "-c", "feature"]);
    let head = commit(&h, &a, "a.txt", "one\n", "Add a.txt");
    let id = push_for_review(&h, &a, &[]);
    (h, a, ci, id, head)
}

/// Only alice writes, `ci` posts checks, and the rule wants `ci/test` from
/// a principal with the checks level (`extra` added to the rule).
fn ci_only(extra: &'static str) -> impl Fn(&str, &str) -> String {
    move |alice, ci| {
        format!(
            "write = [\"{alice}\"]\nchecks = [\"{ci}\"]\n\
             merge = {{ required_checks = [\"ci/test\"], checks_from = \"checks\"{extra} }}\n"
        )
    }
}

#[test]
fn a_writers_own_green_check_does_not_satisfy_a_checks_from_rule() {
    let (h, a, ci, id, head) = setup(ci_only(""));
    // The writer may post the check, but it does not count.
    check_as(&h, &a.key, &head, "success");
    let refused = patch(&h, &a, &format!("merge 'r' {}", &id[..8]));
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("ci/test is missing from a principal with the checks level"),
        "{refused:?}"
    );
    // Nor does the administrator's (rewind is not the checks level).
    review_support::check_set(&h, &head, "ci/test", "success");
    assert_eq!(patch(&h, &a, &format!("merge 'r' {}", &id[..8])).code, 1);

    // Queued behind it: waiting, not merged.
    let queued = patch(&h, &a, &format!("merge 'r' {} --when-green", &id[..8]));
    assert_eq!(queued.code, 0, "{queued:?}");
    assert!(
        queued.json()["waiting_for"]
            .as_str()
            .is_some_and(|w| w.contains("checks level")),
        "{queued:?}"
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(status(&h, &a, &id), "open");
    assert_ne!(server_tip(&h, "main"), head);

    // CI's green lands it, with nobody connected.
    check_as(&h, &ci, &head, "success");
    wait_until("the queued merge", || status(&h, &a, &id) == "merged");
    assert_eq!(server_tip(&h, "main"), head);
}

#[test]
fn a_merge_group_waits_for_the_checks_principals_green() {
    let (h, a, ci, id, _head) = setup(ci_only(", queue = true"));
    let queued = patch(&h, &a, &format!("merge 'r' {} --when-green", &id[..8]));
    assert_eq!(queued.code, 0, "{queued:?}");
    let group = || {
        let out = h.ssh_exec_as(&a.key, "collab-queue show 'r' main", b"");
        assert_eq!(out.code, 0, "{out:?}");
        out.json()["current_group"]["commit"].clone()
    };
    wait_until("a merge group", || group().is_string());
    let commit = group().as_str().unwrap().to_string();
    let base = server_tip(&h, "main");

    check_as(&h, &a.key, &commit, "success");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(server_tip(&h, "main"), base, "the writer's green landed it");
    assert_eq!(status(&h, &a, &id), "open");

    check_as(&h, &ci, &commit, "success");
    wait_until("the group lands", || status(&h, &a, &id) == "merged");
    assert_ne!(server_tip(&h, "main"), base);
}

/// A queued merge acts as whoever queued it, later, with nobody connected:
/// once that key is limited with `from=` (even to where it logs in from),
/// the merge is dropped with an event saying why, and queueing again is
/// refused at once with one line.
#[test]
fn a_from_limited_keys_queued_merge_is_dropped() {
    let (h, a, ci, id, head) = setup(|alice, ci| {
        format!(
            "write = [\"{alice}\"]\nchecks = [\"{ci}\"]\n\
             merge = {{ required_checks = [\"ci/test\"] }}\n"
        )
    });
    let queue = || patch(&h, &a, &format!("merge 'r' {} --when-green", &id[..8]));
    assert_eq!(queue().code, 0);

    h.limit_key_from_loopback(&a.key);
    assert_eq!(h.ssh_exec_as(&a.key, "collab-whoami", b"").code, 0);
    check_as(&h, &ci, &head, "success");
    wait_until("the drop", || {
        !events(&h, "patch.merge_dequeued").is_empty()
    });
    let dropped = events(&h, "patch.merge_dequeued");
    assert!(
        dropped[0]["payload"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("from=")),
        "{dropped:?}"
    );
    assert_eq!(status(&h, &a, &id), "open");
    assert_ne!(server_tip(&h, "main"), head);

    let refused = queue();
    assert!(
        refused.code == 1
            && refused.stderr.starts_with("error: ")
            && refused.stderr.contains("from="),
        "{refused:?}"
    );
    assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
    // A merge now, while connected, is still the key's to make.
    let merged = patch(&h, &a, &format!("merge 'r' {}", &id[..8]));
    assert_eq!(merged.code, 0, "{merged:?}");
    let shown: Value = patch(&h, &a, &format!("show 'r' {}", &id[..8])).json();
    assert_eq!(shown["status"], "merged", "{shown}");
}
