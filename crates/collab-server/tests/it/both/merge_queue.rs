//! The merge queue of a branch end to end (issue 27, item 4): patches
//! queued on a branch whose merge rule has `queue = true` are tested
//! together on a merge-group commit (`refs/collab/queue/<branch>/<n>`,
//! announced by `merge_group.checks_requested`); CI's checks on that commit
//! decide; a green group lands all its patches at once; a failing one is
//! searched by rounds of exclusion groups tested at once (or bisected,
//! with `max_parallel = 1`) until the patch that broke it is dropped; a
//! patch that conflicts with the group is dropped with the paths; the
//! rebase method lands linear history; and the queue survives a crash of
//! the server.

use collab_testkit as common;
use collab_testkit::review as review_support;

use std::collections::BTreeSet;
use std::time::Duration;

use common::ServerHarness;
use review_support::{commit, events, ok, patch, push_for_review, server_tip, wait_until, Agent};
use serde_json::Value;

const QUEUE_RULE: &str =
    "merge = { required_checks = [\"ci/test\"], queue = true, max_batch = 4 }\n";

/// Post `ci/test` on `commit` (the check every rule here requires).
pub(super) fn check_set(h: &ServerHarness, commit: &str, state: &str) {
    review_support::check_set(h, commit, "ci/test", state)
}

pub(super) fn status(h: &ServerHarness, a: &Agent, id: &str) -> String {
    let out = patch(h, a, &format!("show 'r' {}", &id[..8]));
    assert_eq!(out.code, 0, "{out:?}");
    out.json()["status"].as_str().unwrap().to_string()
}

pub(super) fn queue_show(h: &ServerHarness, a: &Agent) -> Value {
    let out = h.ssh_exec_as(&a.key, "collab-queue show 'r' main", b"");
    assert_eq!(out.code, 0, "{out:?}");
    out.json()
}

pub(super) fn server_git(h: &ServerHarness, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .arg("-C")
        .arg(h.repos_dir().join("r.git"))
        .args(args)
        .output()
        .unwrap()
}

/// Whether `commit` is in the server's `main`.
pub(super) fn in_main(h: &ServerHarness, commit: &str) -> bool {
    server_git(
        h,
        &["merge-base", "--is-ancestor", commit, "refs/heads/main"],
    )
    .status
    .success()
}

/// A server with repository `r` under `policy` and alice's `files`, each a
/// patch of its own off `main` writing that file: (server, alice,
/// [(patch, head)]).
pub(super) fn setup(
    policy: &str,
    files: &[(&str, &str)],
) -> (ServerHarness, Agent, Vec<(String, String)>) {
    let h = ServerHarness::start();
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    review_support::write_policy(&h, policy);
    let a = review_support::agent(&h, "alice");
    let mut patches = Vec::new();
    for (i, (file, text)) in files.iter().enumerate() {
        ok(
            &h,
            &a,
            &["switch", "-q", "-c", &format!("f{i}"), "origin/main"],
        );
        let head = commit(&h, &a, file, text, &format!("Write {file} ({i})"));
        patches.push((push_for_review(&h, &a, &[]), head));
    }
    (h, a, patches)
}

pub(super) fn enqueue(h: &ServerHarness, a: &Agent, id: &str) -> Value {
    let out = patch(h, a, &format!("merge 'r' {} --when-green", &id[..8]));
    assert_eq!(out.code, 0, "{out:?}");
    out.json()
}

/// Queue every patch of `ids` while the rule does not queue yet (plain
/// queued merges, waiting for their own checks), then switch the queue on:
/// the queue takes them all at once, in the order they were queued.
fn queue_all_then_switch_on(h: &ServerHarness, a: &Agent, ids: &[String]) {
    queue_all_then_switch_on_with(h, a, ids, QUEUE_RULE)
}

/// [`queue_all_then_switch_on`] with the queue's rule `rule`.
pub(super) fn queue_all_then_switch_on_with(
    h: &ServerHarness,
    a: &Agent,
    ids: &[String],
    rule: &str,
) {
    review_support::write_policy(h, "merge = { required_checks = [\"ci/test\"] }\n");
    for id in ids {
        let v = enqueue(h, a, id);
        assert_eq!(v["queue"], Value::Null, "{v}");
    }
    // Public too, for the web's queue page.
    review_support::write_policy(h, format!("public = true\n{rule}"));
}

/// The patches of a `merge_group.*` event (or a group of `queue show`).
pub(super) fn members(group: &Value) -> Vec<String> {
    group["patches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["patch"].as_str().unwrap().to_string())
        .collect()
}

/// A simulated CI: for each group announced and not yet run, post
/// `failure` when it holds `bad`, else `success`; until `done` holds.
pub(super) fn run_ci(
    h: &ServerHarness,
    bad: Option<&str>,
    done: impl FnMut() -> bool,
) -> Vec<Value> {
    let bad: Vec<String> = bad.into_iter().map(str::to_string).collect();
    run_ci_with(h, &bad, done)
}

/// [`run_ci`] with any number of broken patches.
pub(super) fn run_ci_with(
    h: &ServerHarness,
    bad: &[String],
    mut done: impl FnMut() -> bool,
) -> Vec<Value> {
    let mut ran = BTreeSet::new();
    let mut groups = Vec::new();
    wait_until("the simulated CI to drain the queue", || {
        for e in events(h, "merge_group.checks_requested") {
            let n = e["payload"]["group"].as_i64().unwrap();
            if ran.insert(n) {
                let broken = members(&e["payload"]).iter().any(|p| bad.contains(p));
                let commit = e["payload"]["commit"].as_str().unwrap();
                check_set(h, commit, if broken { "failure" } else { "success" });
                groups.push(e["payload"].clone());
            }
        }
        done()
    });
    groups
}

#[test]
fn a_batch_lands_in_one_group_when_the_checks_on_its_commit_are_green() {
    let files = [
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("c.txt", "c\n"),
        ("d.txt", "d\n"),
    ];
    let (h, a, patches) = setup(QUEUE_RULE, &files);
    let ids: Vec<String> = patches.iter().map(|(id, _)| id.clone()).collect();
    queue_all_then_switch_on(&h, &a, &ids);
    let shown = patch(&h, &a, &format!("show 'r' {}", &patches[0].0[..8])).json();
    assert_eq!(shown["merge_rule"]["queue"], true, "{shown}");
    assert_eq!(shown["merge_rule"]["max_batch"], 4, "{shown}");

    // The group holds all four, in queue order, at its ref.
    let base = server_tip(&h, "main");
    wait_until("a group of four", || {
        queue_show(&h, &a)["current_group"]["patches"]
            .as_array()
            .is_some_and(|p| p.len() == 4)
    });
    let q = queue_show(&h, &a);
    let group = &q["current_group"];
    assert_eq!(members(group), ids, "{q}");
    assert_eq!(group["base"], base.as_str());
    assert_eq!(q["entries"].as_array().unwrap().len(), 4, "{q}");
    assert_eq!(q["entries"][0]["in_group"], group["group"]);
    let commit = group["commit"].as_str().unwrap().to_string();
    let group_ref = group["ref"].as_str().unwrap().to_string();
    assert_eq!(
        group_ref,
        format!("refs/collab/queue/main/{}", group["group"])
    );
    let announced = events(&h, "merge_group.checks_requested");
    assert_eq!(announced.len(), 1, "{announced:?}");
    assert_eq!(announced[0]["payload"]["commit"], commit.as_str());
    assert_eq!(announced[0]["payload"]["base"], base.as_str());
    assert_eq!(announced[0]["payload"]["branch"], "main");
    // CI can fetch the group's commit; a client cannot push the ref.
    ok(
        &h,
        &a,
        &[
            "fetch",
            "-q",
            "origin",
            &format!("{group_ref}:refs/ci/group"),
        ],
    );
    assert_eq!(
        ok(&h, &a, &["rev-parse", "refs/ci/group"]).stdout.trim(),
        commit
    );
    let pushed = review_support::git(&h, &a, &["push", "origin", &format!("HEAD:{group_ref}")]);
    assert_ne!(pushed.code, 0, "{pushed:?}");

    // A green check on a patch's own head does not land anything; pending
    // on the group does not either.
    check_set(&h, &patches[0].1, "success");
    check_set(&h, &commit, "pending");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(server_tip(&h, "main"), base);
    assert!(patches.iter().all(|(id, _)| status(&h, &a, id) == "open"));

    // The web's queue page shows the group under test and its check.
    let page = common::web::get(&h, "/r/-/queue/main");
    assert_eq!(page.status, 200);
    let text = common::web::strip_tags(&page.text());
    assert!(text.contains("Group 1"), "{text}");
    assert!(text.contains("pending ci/test"), "{text}");
    for (id, _) in &patches {
        assert!(text.contains(&id[..8]), "{text}");
    }
    assert_eq!(common::web::get(&h, "/r/-/queue/a..b").status, 404);
    let patch_page = common::web::get(&h, &format!("/r/-/patches/{}", &patches[0].0[..8])).text();
    assert!(
        patch_page.contains("href=\"/r/-/queue/main\""),
        "{patch_page}"
    );

    check_set(&h, &commit, "success");
    // The branch moves inside the landing transaction, before it commits.
    wait_until("the group to land", || {
        server_tip(&h, "main") == commit && !events(&h, "merge_group.merged").is_empty()
    });
    let text = common::web::strip_tags(&common::web::get(&h, "/r/-/queue/main").text());
    assert!(text.contains("The queue is empty."), "{text}");
    assert!(text.contains("merged"), "{text}");
    for (id, head) in &patches {
        assert_eq!(status(&h, &a, id), "merged");
        assert!(in_main(&h, head));
    }
    let merged = events(&h, "patch.merged");
    assert_eq!(merged.len(), 4, "{merged:?}");
    let seqs: BTreeSet<i64> = merged.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs.len(), 4);
    for e in &merged {
        assert_eq!(e["payload"]["by"], "queue", "{e}");
        assert_eq!(e["payload"]["queue"]["commit"], commit.as_str(), "{e}");
        assert_eq!(e["payload"]["queued"], true, "{e}");
    }
    assert_eq!(events(&h, "merge_group.merged").len(), 1);
    assert_eq!(
        events(&h, "merge_group.checks_requested").len(),
        1,
        "one group, one CI run"
    );
    let q = queue_show(&h, &a);
    assert_eq!(q["entries"], serde_json::json!([]), "{q}");
    assert_eq!(q["current_group"], Value::Null, "{q}");
    assert_eq!(q["groups"][0]["state"], "merged", "{q}");
}

/// With `max_parallel = 1` (one group at a time) a failure is bisected.
#[test]
fn a_failing_patch_is_bisected_out_and_the_rest_merge() {
    let files = [
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("c.txt", "c\n"),
        ("d.txt", "d\n"),
    ];
    let (h, a, patches) = setup(QUEUE_RULE, &files);
    let ids: Vec<String> = patches.iter().map(|(id, _)| id.clone()).collect();
    let serial = "merge = { required_checks = [\"ci/test\"], queue = true, max_batch = 4, \
                  max_parallel = 1 }\n";
    queue_all_then_switch_on_with(&h, &a, &ids, serial);
    let bad = patches[2].0.clone();
    let groups = run_ci(&h, Some(&bad), || {
        events(&h, "patch.merge_dequeued").len() == 1
            && patches
                .iter()
                .filter(|(id, _)| *id != bad)
                .all(|(id, _)| status(&h, &a, id) == "merged")
    });
    // Only the breaker is dropped, its failing check named.
    let dropped = events(&h, "patch.merge_dequeued");
    assert_eq!(dropped[0]["object_id"], bad.as_str(), "{dropped:?}");
    let reason = dropped[0]["payload"]["reason"].as_str().unwrap();
    assert!(reason.contains("ci/test is failure"), "{reason}");
    assert!(reason.contains("merge group"), "{reason}");
    assert_eq!(status(&h, &a, &bad), "open");
    assert!(!in_main(&h, &patches[2].1));
    for (i, (_, head)) in patches.iter().enumerate() {
        assert_eq!(in_main(&h, head), i != 2);
    }
    // Bisected: the four together failed, then a half, then the rest.
    assert_eq!(members(&groups[0]).len(), 4, "{groups:?}");
    assert!(groups.len() <= 5, "{groups:?}");
    assert!(
        groups.iter().any(|g| members(g) == [bad.clone()]),
        "the breaker was tested alone: {groups:?}"
    );
    // No merge went through with a failing check: every patch merged was
    // in a group whose check was green.
    for e in events(&h, "patch.merged") {
        let n = e["payload"]["queue"]["group"].as_i64().unwrap();
        let g = groups.iter().find(|g| g["group"] == n).unwrap();
        assert!(!members(g).contains(&bad), "{g}");
    }
    assert!(!events(&h, "merge_group.failed").is_empty());
}

#[test]
fn a_patch_conflicting_with_the_group_is_dropped_with_its_paths() {
    let files = [("a.txt", "one\n"), ("a.txt", "two\n"), ("c.txt", "c\n")];
    let (h, a, patches) = setup(QUEUE_RULE, &files);
    let ids: Vec<String> = patches.iter().map(|(id, _)| id.clone()).collect();
    queue_all_then_switch_on(&h, &a, &ids);
    wait_until("the conflicting patch dropped", || {
        !events(&h, "patch.merge_dequeued").is_empty()
    });
    let dropped = events(&h, "patch.merge_dequeued");
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(dropped[0]["object_id"], patches[1].0.as_str());
    let reason = dropped[0]["payload"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("conflicts with the merge group") && reason.contains("a.txt"),
        "{reason}"
    );
    run_ci(&h, None, || {
        status(&h, &a, &patches[0].0) == "merged" && status(&h, &a, &patches[2].0) == "merged"
    });
    assert_eq!(status(&h, &a, &patches[1].0), "open");
    let text = server_git(&h, &["show", "refs/heads/main:a.txt"]);
    assert_eq!(String::from_utf8_lossy(&text.stdout), "one\n");
}

/// The queue lives in the database: a SIGKILLed server comes back with its
/// group under test and its waiting entries, and goes on when CI reports.
/// (A plain merge on a queued branch joins the queue.)
#[test]
fn the_queue_survives_a_crash_of_the_server() {
    let files = [("a.txt", "a\n"), ("b.txt", "b\n")];
    let (mut h, a, patches) = setup(QUEUE_RULE, &files);
    let plain = patch(&h, &a, &format!("merge 'r' {}", &patches[0].0[..8]));
    assert_eq!(plain.code, 0, "{plain:?}");
    let v = plain.json();
    assert_eq!(
        (v["status"].as_str(), v["queue"].as_str()),
        (Some("queued"), Some("main")),
        "{v}"
    );
    wait_until("a group of one", || {
        queue_show(&h, &a)["current_group"]["patches"]
            .as_array()
            .is_some_and(|p| p.len() == 1)
    });
    enqueue(&h, &a, &patches[1].0);
    let before = queue_show(&h, &a)["current_group"].clone();
    h.kill();
    h.start_again();
    let after = queue_show(&h, &a);
    assert_eq!(after["current_group"]["group"], before["group"], "{after}");
    assert_eq!(after["entries"].as_array().unwrap().len(), 2, "{after}");
    assert_eq!(after["entries"][1]["in_group"], Value::Null, "{after}");
    run_ci(&h, None, || {
        patches.iter().all(|(id, _)| status(&h, &a, id) == "merged")
    });
    assert_eq!(events(&h, "merge_group.checks_requested").len(), 2);
    assert!(patches.iter().all(|(_, head)| in_main(&h, head)));
}

/// The patches a group leaves out (`excluded` of its event), if any.
fn excluded(group: &Value) -> Option<Vec<String>> {
    group["excluded"]
        .as_array()
        .map(|ex| ex.iter().map(|p| p.as_str().unwrap().to_string()).collect())
}

/// The groups announced so far, oldest first (their event payloads).
pub(super) fn announced(h: &ServerHarness) -> Vec<Value> {
    events(h, "merge_group.checks_requested")
        .into_iter()
        .map(|e| e["payload"].clone())
        .collect()
}

/// Eight patches (one new file each, off `main`) queued at once, then the
/// queue switched on under `rule`: (server, alice, [(patch, head)], ids).
fn eight_queued(rule: &str) -> (ServerHarness, Agent, Vec<(String, String)>, Vec<String>) {
    let files: Vec<(String, String)> = (0..8)
        .map(|i| (format!("f{i}.txt"), format!("{i}\n")))
        .collect();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    let (h, a, patches) = setup(QUEUE_RULE, &files);
    let ids: Vec<String> = patches.iter().map(|(id, _)| id.clone()).collect();
    queue_all_then_switch_on_with(&h, &a, &ids, rule);
    (h, a, patches, ids)
}

/// One broken patch among eight, `max_parallel = 4`: the batch fails; a
/// round of four exclusion groups (each the batch without two patches) is
/// under test at once, shown by `collab-queue show` and the web page; the
/// one without the breaker's pair lands; a round of two (the pair without
/// one each) lands the other and drops the breaker. Three rounds, seven
/// groups, no merge of a group that was not green.
#[test]
fn one_broken_patch_among_eight_is_found_in_three_rounds_of_parallel_groups() {
    let rule = "merge = { required_checks = [\"ci/test\"], queue = true, max_batch = 8, \
                max_parallel = 4 }\n";
    let (h, a, patches, ids) = eight_queued(rule);
    let bad = ids[5].clone();
    let base = server_tip(&h, "main");

    // Round 1: the whole batch, which fails.
    wait_until("the batch of eight", || announced(&h).len() == 1);
    let first = announced(&h).remove(0);
    assert_eq!(members(&first), ids, "{first}");
    assert_eq!(excluded(&first), None, "{first}");
    check_set(&h, first["commit"].as_str().unwrap(), "failure");

    // Round 2: four groups under test at once, all on the same base.
    wait_until("a round of four groups", || announced(&h).len() == 5);
    let round: Vec<Value> = announced(&h)[1..].to_vec();
    let q = queue_show(&h, &a);
    assert_eq!(q["live_groups"].as_array().unwrap().len(), 4, "{q}");
    assert_eq!(q["search"], "exclude", "{q}");
    assert_eq!(q["bisecting"], 8, "{q}");
    assert_eq!(q["max_parallel"], 4, "{q}");
    assert_eq!(
        q["entries"][0]["in_groups"].as_array().unwrap().len(),
        3,
        "the first patch is in every group but the one without it: {q}"
    );
    let text = common::web::strip_tags(&common::web::get(&h, "/r/-/queue/main").text());
    for g in &round {
        assert!(text.contains(&format!("Group {}", g["group"])), "{text}");
    }
    assert!(
        text.contains("Searching a failure among the first 8"),
        "{text}"
    );
    let mut left_out = Vec::new();
    for (i, g) in round.iter().enumerate() {
        let ex = excluded(g).expect("an exclusion group");
        assert_eq!(ex, ids[2 * i..2 * i + 2], "{g}");
        let kept: Vec<String> = ids.iter().filter(|p| !ex.contains(p)).cloned().collect();
        assert_eq!(members(g), kept, "{g}");
        assert_eq!(g["base"], base.as_str(), "{g}");
        left_out.extend(ex);
    }
    assert_eq!(left_out, ids, "the chunks cover the suspects once");
    // CI answers the round's groups in any order.
    for g in round.iter().rev() {
        let broken = members(g).contains(&bad);
        let commit = g["commit"].as_str().unwrap();
        check_set(&h, commit, if broken { "failure" } else { "success" });
    }

    // Round 3: the pair left out by the green group, without one each.
    let groups = run_ci(&h, Some(&bad), || {
        !events(&h, "patch.merge_dequeued").is_empty()
            && ids
                .iter()
                .filter(|id| **id != bad)
                .all(|id| status(&h, &a, id) == "merged")
    });
    let all = announced(&h);
    assert_eq!(all.len(), 7, "1 + 4 + 2 groups: {all:?}");
    let third: Vec<&Value> = all[5..].iter().collect();
    assert_eq!(
        third.iter().map(|g| members(g)).collect::<Vec<_>>(),
        [vec![ids[5].clone()], vec![ids[4].clone()]],
        "{third:?}"
    );
    let landed = &round[2];
    for g in &third {
        assert_eq!(g["base"], landed["commit"], "built on the landed group");
    }
    // Exactly the breaker dropped, with both pieces of evidence.
    let dropped = events(&h, "patch.merge_dequeued");
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(dropped[0]["object_id"], bad.as_str());
    let reason = dropped[0]["payload"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("ci/test is failure") && reason.contains("without it passed"),
        "{reason}"
    );
    assert!(!in_main(&h, &patches[5].1));
    for (i, (_, head)) in patches.iter().enumerate() {
        assert_eq!(in_main(&h, head), i != 5, "patch {i}");
    }
    // Two landings (round 2's and round 3's), each of a green group.
    let merged_groups = events(&h, "merge_group.merged");
    assert_eq!(merged_groups.len(), 2, "{merged_groups:?}");
    assert_eq!(merged_groups[0]["payload"]["group"], landed["group"]);
    for e in events(&h, "patch.merged") {
        let n = e["payload"]["queue"]["group"].as_i64().unwrap();
        let g = all.iter().find(|g| g["group"] == n).unwrap();
        assert!(!members(g).contains(&bad), "{g}");
    }
    // The groups of a round that did not land end stale or failed.
    let stale = events(&h, "merge_group.stale").len();
    let failed = events(&h, "merge_group.failed").len();
    assert_eq!(stale + failed, 7 - 2, "every group ended once");
    assert_eq!(groups.len(), 7, "{groups:?}");
    let q = queue_show(&h, &a);
    assert_eq!(q["search"], Value::Null, "{q}");
    assert_eq!(q["live_groups"], serde_json::json!([]), "{q}");
}

/// `speculate = true`: the round that would search a batch is built with
/// it. With one broken patch among eight (`max_parallel = 4`) the batch and
/// its four exclusion groups are announced at once; the batch fails, the
/// group without the breaker's pair lands, a round of two finds the breaker:
/// two rounds of CI instead of three. Then a batch with nothing broken lands
/// whole, and its speculative groups end stale without landing anything.
#[test]
fn a_speculative_round_finds_one_broken_patch_in_two_rounds() {
    let rule = "merge = { required_checks = [\"ci/test\"], queue = true, max_batch = 8, \
                max_parallel = 4, speculate = true }\n";
    let (h, a, patches, ids) = eight_queued(rule);
    let bad = ids[2].clone();

    // Round 1: the batch and its four exclusion groups, all at once.
    wait_until("the batch and its speculative round", || {
        announced(&h).len() == 5
    });
    let first = announced(&h);
    assert_eq!(members(&first[0]), ids, "{:?}", first[0]);
    assert_eq!(excluded(&first[0]), None);
    for (i, g) in first[1..].iter().enumerate() {
        assert_eq!(excluded(g).unwrap(), ids[2 * i..2 * i + 2], "{g}");
        assert_eq!(g["base"], first[0]["base"], "{g}");
    }
    let q = queue_show(&h, &a);
    assert_eq!(q["speculate"], true, "{q}");
    assert_eq!(q["live_groups"].as_array().unwrap().len(), 5, "{q}");
    // A green exclusion group does not land while the batch may still pass.
    let without_the_breaker = first[2]["commit"].as_str().unwrap();
    assert!(!members(&first[2]).contains(&bad));
    check_set(&h, without_the_breaker, "success");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(
        events(&h, "merge_group.merged").is_empty(),
        "landed before the batch's verdict"
    );

    let groups = run_ci(&h, Some(&bad), || {
        !events(&h, "patch.merge_dequeued").is_empty()
            && ids
                .iter()
                .filter(|id| **id != bad)
                .all(|id| status(&h, &a, id) == "merged")
    });
    let all = announced(&h);
    assert_eq!(all.len(), 7, "batch + 4, then 2: {all:?}");
    // Round 2: the pair the landed group left out, without one each.
    assert_eq!(
        all[5..].iter().map(members).collect::<Vec<_>>(),
        [vec![ids[3].clone()], vec![ids[2].clone()]],
        "{all:?}"
    );
    let dropped = events(&h, "patch.merge_dequeued");
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(dropped[0]["object_id"], bad.as_str());
    for (i, (_, head)) in patches.iter().enumerate() {
        assert_eq!(in_main(&h, head), i != 2, "patch {i}");
    }
    for e in events(&h, "patch.merged") {
        let n = e["payload"]["queue"]["group"].as_i64().unwrap();
        let g = all.iter().find(|g| g["group"] == n).unwrap();
        assert!(!members(g).contains(&bad), "{g}");
    }
    assert!(groups.len() >= 6, "{groups:?}");

    // Nothing broken: the batch lands whole, its round ends stale.
    ok(&h, &a, &["fetch", "-q", "origin"]);
    let more: Vec<String> = (0..3)
        .map(|i| {
            ok(
                &h,
                &a,
                &["switch", "-q", "-c", &format!("more{i}"), "origin/main"],
            );
            commit(&h, &a, &format!("g{i}.txt"), "g\n", &format!("More {i}"));
            push_for_review(&h, &a, &[])
        })
        .collect();
    let before = announced(&h).len();
    queue_all_then_switch_on_with(&h, &a, &more, rule);
    wait_until("the second batch and its round", || {
        announced(&h).len() == before + 4
    });
    let merged_before = events(&h, "merge_group.merged").len();
    run_ci(&h, None, || {
        more.iter().all(|id| status(&h, &a, id) == "merged")
    });
    let merged = events(&h, "merge_group.merged");
    assert_eq!(merged.len(), merged_before + 1, "one landing: {merged:?}");
    let batch = &announced(&h)[before];
    assert_eq!(excluded(batch), None);
    assert_eq!(merged.last().unwrap()["payload"]["group"], batch["group"]);
}

/// `queue_method = "rebase"`: each patch's commits are cherry-picked onto
/// the group so far, so `main` stays linear; every patch is marked merged
/// with the rebased commit that carries it, whose message is its own.
#[test]
fn the_rebase_method_lands_linear_history() {
    let files = [("a.txt", "a\n"), ("b.txt", "b\n")];
    let (h, a, mut patches) = setup(QUEUE_RULE, &files);
    // A third patch of two commits.
    ok(&h, &a, &["switch", "-q", "-c", "f2", "origin/main"]);
    commit(&h, &a, "c.txt", "c\n", "Write c.txt (2)");
    let head = commit(&h, &a, "c2.txt", "c2\n", "Write c2.txt");
    patches.push((push_for_review(&h, &a, &[]), head));
    let ids: Vec<String> = patches.iter().map(|(id, _)| id.clone()).collect();
    let base = server_tip(&h, "main");
    let rule = "merge = { required_checks = [\"ci/test\"], queue = true, \
                queue_method = \"rebase\" }\n";
    queue_all_then_switch_on_with(&h, &a, &ids, rule);
    let groups = run_ci(&h, None, || {
        ids.iter().all(|id| status(&h, &a, id) == "merged")
    });
    assert_eq!(groups.len(), 1, "{groups:?}");
    let merges = server_git(&h, &["rev-list", "--merges", "refs/heads/main"]);
    assert_eq!(
        String::from_utf8_lossy(&merges.stdout),
        "",
        "no merge commit"
    );
    let count = server_git(
        &h,
        &["rev-list", "--count", &format!("{base}..refs/heads/main")],
    );
    assert_eq!(String::from_utf8_lossy(&count.stdout).trim(), "4");
    let log = server_git(&h, &["log", "--format=%s", "refs/heads/main"]);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "Write c2.txt\nWrite c.txt (2)\nWrite b.txt (1)\nWrite a.txt (0)\nInitial commit\n"
    );
    assert_eq!(
        server_tip(&h, "main"),
        groups[0]["commit"].as_str().unwrap()
    );
    // The first patch fast-forwards (its head is the base's child); the
    // others are rebased: their heads are not in main, their copies are.
    assert!(in_main(&h, &patches[0].1));
    assert!(!in_main(&h, &patches[1].1) && !in_main(&h, &patches[2].1));
    let merged = events(&h, "patch.merged");
    assert_eq!(merged.len(), 3, "{merged:?}");
    for (e, (id, _)) in merged.iter().zip(&patches) {
        assert_eq!(e["object_id"], id.as_str(), "{e}");
        let commit = e["payload"]["commit"].as_str().unwrap();
        assert!(in_main(&h, commit), "{e}");
    }
    let last = merged[2]["payload"]["commit"].as_str().unwrap();
    assert_eq!(
        last,
        server_tip(&h, "main"),
        "the last patch's last commit is the tip"
    );
    for file in ["a.txt", "b.txt", "c.txt", "c2.txt"] {
        let shown = server_git(&h, &["show", &format!("refs/heads/main:{file}")]);
        assert!(shown.status.success(), "{file}");
    }
}

/// Two broken patches in different chunks: every group of the round fails,
/// so the queue bisects the suspects instead; both breakers are dropped,
/// the other six land, none in a group that was not green.
#[test]
fn a_round_that_fails_entirely_falls_back_to_bisection() {
    let rule = "merge = { required_checks = [\"ci/test\"], queue = true, max_batch = 8, \
                max_parallel = 4 }\n";
    let (h, a, patches, ids) = eight_queued(rule);
    let bad = vec![ids[1].clone(), ids[6].clone()];
    let groups = run_ci_with(&h, &bad, || {
        events(&h, "patch.merge_dequeued").len() == 2
            && ids
                .iter()
                .filter(|id| !bad.contains(id))
                .all(|id| status(&h, &a, id) == "merged")
    });
    let dropped: BTreeSet<String> = events(&h, "patch.merge_dequeued")
        .iter()
        .map(|e| e["object_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        dropped,
        bad.iter().cloned().collect(),
        "exactly the breakers"
    );
    // The batch, a round of four that all fail, then bisection: a plain
    // group of the first half.
    assert_eq!(members(&groups[0]), ids);
    assert!(
        groups[1..5].iter().all(|g| excluded(g).is_some()),
        "{groups:?}"
    );
    assert_eq!(excluded(&groups[5]), None, "{groups:?}");
    assert_eq!(members(&groups[5]), ids[..4], "{groups:?}");
    let failed: BTreeSet<i64> = events(&h, "merge_group.failed")
        .iter()
        .map(|e| e["payload"]["group"].as_i64().unwrap())
        .collect();
    for g in &groups[..5] {
        assert!(failed.contains(&g["group"].as_i64().unwrap()), "{g}");
    }
    for e in events(&h, "patch.merged") {
        let n = e["payload"]["queue"]["group"].as_i64().unwrap();
        let g = groups.iter().find(|g| g["group"] == n).unwrap();
        assert!(members(g).iter().all(|p| !bad.contains(p)), "{g}");
    }
    for (i, (_, head)) in patches.iter().enumerate() {
        assert_eq!(in_main(&h, head), i != 1 && i != 6, "patch {i}");
    }
}
