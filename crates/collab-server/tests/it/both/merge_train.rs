//! The merge train of a branch (issue 45, item 1): with `train = true` and
//! nothing failed, up to `max_parallel` merge groups are under test at
//! once, each built on the group before it (its `base` is that group's
//! commit, `built_on` its number) and announced together; they land in
//! order, each only once it and every group before it are green; a failed
//! group throws away only the groups built on it, the groups before it
//! still land, its breaker is searched and dropped and the later patches
//! are grouped again; the groups under test survive a SIGKILL; and
//! `min_batch`/`batch_wait` hold back a group of too few patches.

use std::time::{Duration, Instant};

use collab_testkit::review as review_support;
use review_support::{events, server_tip, wait_until, Agent};
use serde_json::Value;

use super::merge_queue::{
    announced, check_set, enqueue, in_main, members, queue_all_then_switch_on_with, queue_show,
    run_ci, server_git, setup, status,
};
use collab_testkit::ServerHarness;

/// Groups of two patches, a train of three.
const TRAIN_RULE: &str = "merge = { required_checks = [\"ci/test\"], queue = true, max_batch = 2, \
                          max_parallel = 3, train = true }\n";

/// `n` patches (one new file each, off `main`) queued at once, then the
/// queue switched on under `rule`: (server, alice, ids, heads).
fn queued(n: usize, rule: &str) -> (ServerHarness, Agent, Vec<String>, Vec<String>) {
    let files: Vec<(String, String)> = (0..n)
        .map(|i| (format!("t{i}.txt"), format!("{i}\n")))
        .collect();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    let (h, a, patches) = setup("merge = { required_checks = [\"ci/test\"] }\n", &files);
    let ids: Vec<String> = patches.iter().map(|(id, _)| id.clone()).collect();
    let heads = patches.into_iter().map(|(_, head)| head).collect();
    queue_all_then_switch_on_with(&h, &a, &ids, rule);
    (h, a, ids, heads)
}

/// The first parent of `commit` in the server's repository.
fn first_parent(h: &ServerHarness, commit: &str) -> String {
    let out = server_git(h, &["rev-parse", &format!("{commit}^1")]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The state of group `n` in `collab-queue show`'s latest groups.
fn group_state(h: &ServerHarness, a: &Agent, n: i64) -> (String, String) {
    let q = queue_show(h, a);
    let g = q["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"] == n)
        .cloned()
        .unwrap_or(Value::Null);
    (
        g["state"].as_str().unwrap_or_default().to_string(),
        g["reason"].as_str().unwrap_or_default().to_string(),
    )
}

/// Three groups are built at once, each on the one before (its first
/// commit's first parent is the previous group's commit), announced in
/// one transaction; CI answers group 3, then 2: nothing lands until group
/// 1 is green, then all three land in order, with no CI run thrown away,
/// and `collab-queue show`, the web page and /metrics count them.
#[test]
fn a_train_of_three_groups_lands_in_order_when_greens_arrive_out_of_order() {
    let (h, a, ids, heads) = queued(6, TRAIN_RULE);
    let base = server_tip(&h, "main");
    wait_until("a group announced", || !announced(&h).is_empty());
    // Announced together: the first look that sees one sees all three.
    let groups = announced(&h);
    assert_eq!(groups.len(), 3, "{groups:?}");
    for (i, g) in groups.iter().enumerate() {
        assert_eq!(members(g), ids[2 * i..2 * i + 2], "{g}");
    }
    assert_eq!(groups[0]["base"], base.as_str());
    assert_eq!(groups[0]["built_on"], Value::Null);
    for i in 1..3 {
        let (before, g) = (&groups[i - 1], &groups[i]);
        assert_eq!(g["base"], before["commit"], "{g}");
        assert_eq!(g["built_on"], before["group"], "{g}");
        // The group's first commit (a merge of its first patch) sits on
        // the commit of the group before.
        let first = g["patches"][0]["commit"].as_str().unwrap();
        assert_eq!(first_parent(&h, first), before["commit"].as_str().unwrap());
    }
    let q = queue_show(&h, &a);
    assert_eq!(q["train"], true, "{q}");
    let live = q["live_groups"].as_array().unwrap();
    assert_eq!(live.len(), 3, "{q}");
    assert_eq!(live[2]["built_on"], live[1]["group"], "{q}");
    assert_eq!(q["entries"][5]["in_group"], live[2]["group"], "{q}");
    let text = common_page(&h);
    assert!(text.contains("merge train"), "{text}");
    assert!(
        text.contains(&format!("on group {}", live[1]["group"])),
        "{text}"
    );

    let commit = |i: usize| groups[i]["commit"].as_str().unwrap().to_string();
    check_set(&h, &commit(2), "success");
    check_set(&h, &commit(1), "success");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(server_tip(&h, "main"), base, "nothing lands before group 1");
    assert!(ids.iter().all(|id| status(&h, &a, id) == "open"));
    assert_eq!(
        queue_show(&h, &a)["live_groups"].as_array().unwrap().len(),
        3
    );

    check_set(&h, &commit(0), "success");
    // The branch moves inside each landing transaction, before it commits.
    wait_until("the train to land", || {
        server_tip(&h, "main") == commit(2) && events(&h, "merge_group.merged").len() == 3
    });
    for (id, head) in ids.iter().zip(&heads) {
        assert_eq!(status(&h, &a, id), "merged");
        assert!(in_main(&h, head));
    }
    let merged: Vec<i64> = events(&h, "merge_group.merged")
        .iter()
        .map(|e| e["payload"]["group"].as_i64().unwrap())
        .collect();
    let numbers: Vec<i64> = groups
        .iter()
        .map(|g| g["group"].as_i64().unwrap())
        .collect();
    assert_eq!(merged, numbers, "landed one by one, in order");
    for e in events(&h, "patch.merged") {
        let group = e["payload"]["queue"]["group"].as_i64().unwrap();
        let i = numbers.iter().position(|n| *n == group).unwrap();
        assert_eq!(e["payload"]["queue"]["commit"], groups[i]["commit"], "{e}");
    }
    assert!(events(&h, "merge_group.stale").is_empty());
    assert_eq!(announced(&h).len(), 3, "three CI runs, none thrown away");
    let q = queue_show(&h, &a);
    assert_eq!(
        q["counts"],
        serde_json::json!({"built": 3, "testing": 0, "merged": 3, "failed": 0, "stale": 0}),
        "{q}"
    );
    let metrics = web(&h, "/metrics");
    assert!(
        metrics.contains("git_collab_merge_groups_total{event=\"merged\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("git_collab_merge_groups_total{event=\"built\"} 3"),
        "{metrics}"
    );
}

fn web(h: &ServerHarness, path: &str) -> String {
    collab_testkit::web::get(h, path).text()
}

fn common_page(h: &ServerHarness) -> String {
    collab_testkit::web::strip_tags(&web(h, "/r/-/queue/main"))
}

/// A train of three, the breaker in group 2: group 2 fails while group 1
/// is still under test; group 3, built on it, is thrown away at once
/// ("built on failed merge group 2"); group 1 still lands; group 2's two
/// patches are searched (a round of two exclusion groups), the healthy one
/// lands and the breaker is dropped; group 3's patches are grouped again
/// and land. Only the breaker leaves the queue.
#[test]
fn a_failed_group_throws_away_only_the_groups_built_on_it() {
    let (h, a, ids, heads) = queued(6, TRAIN_RULE);
    let bad = ids[3].clone();
    wait_until("three groups", || announced(&h).len() == 3);
    let groups = announced(&h);
    let n = |i: usize| groups[i]["group"].as_i64().unwrap();
    let commit = |i: usize| groups[i]["commit"].as_str().unwrap().to_string();
    check_set(&h, &commit(2), "success");
    check_set(&h, &commit(1), "failure");
    wait_until("group 3 thrown away", || {
        group_state(&h, &a, n(2)).0 == "stale"
    });
    let (_, why) = group_state(&h, &a, n(2));
    assert_eq!(why, format!("built on failed merge group {}", n(1)));
    // Group 2's failure waits for group 1: the search starts once group
    // 2's patches are the head of the queue.
    assert_eq!(group_state(&h, &a, n(1)).0, "testing");
    assert_eq!(group_state(&h, &a, n(0)).0, "testing");
    let base = server_tip(&h, "main");

    run_ci(&h, Some(&bad), || {
        ids.iter()
            .filter(|id| **id != bad)
            .all(|id| status(&h, &a, id) == "merged")
            && queue_show(&h, &a)["entries"]
                .as_array()
                .is_some_and(|e| e.is_empty())
    });
    assert_eq!(group_state(&h, &a, n(0)).0, "merged");
    assert_eq!(group_state(&h, &a, n(1)).0, "failed");
    assert!(in_main(&h, &commit(0)));
    assert!(in_main(&h, &base));
    assert!(!in_main(&h, &heads[3]));
    assert_eq!(status(&h, &a, &bad), "open");
    let dequeued = events(&h, "patch.merge_dequeued");
    assert_eq!(dequeued.len(), 1, "only the breaker leaves: {dequeued:?}");
    assert_eq!(dequeued[0]["object_id"], bad.as_str(), "{dequeued:?}");
    let reason = dequeued[0]["payload"]["reason"].as_str().unwrap();
    assert!(reason.contains("without it passed"), "{reason}");
    // No group holding the breaker ever landed.
    for e in events(&h, "merge_group.merged") {
        assert!(!members(&e["payload"]).contains(&bad), "{e}");
    }
    let q = queue_show(&h, &a);
    assert!(q["counts"]["stale"].as_i64().unwrap() >= 1, "{q}");
    assert_eq!(q["search"], Value::Null, "{q}");
}

/// A SIGKILLed server comes back with its train under test (two groups,
/// the second built on the first) and lands it without building again.
#[test]
fn a_train_under_test_survives_a_crash_of_the_server() {
    let rule = "merge = { required_checks = [\"ci/test\"], queue = true, max_batch = 2, \
                max_parallel = 2, train = true }\n";
    let (mut h, a, ids, _heads) = queued(4, rule);
    wait_until("two groups", || announced(&h).len() == 2);
    let before = queue_show(&h, &a)["live_groups"].clone();
    h.kill();
    h.start_again();
    let after = queue_show(&h, &a);
    assert_eq!(after["live_groups"], before, "{after}");
    assert_eq!(after["live_groups"][1]["built_on"], before[0]["group"]);
    run_ci(&h, None, || {
        ids.iter().all(|id| status(&h, &a, id) == "merged")
    });
    assert_eq!(announced(&h).len(), 2, "the train was not built again");
    assert_eq!(events(&h, "merge_group.merged").len(), 2);
}

/// `min_batch = 2, batch_wait = 5`: one ready patch waits; a second
/// makes a group at once; a third alone, on top of that group, waits
/// `batch_wait` for company and is then grouped alone.
#[test]
fn min_batch_waits_for_company_until_batch_wait() {
    let rule = "merge = { required_checks = [\"ci/test\"], queue = true, max_batch = 4, \
                max_parallel = 2, train = true, min_batch = 2, batch_wait = 5 }\n";
    let files = [("a.txt", "a\n"), ("b.txt", "b\n"), ("c.txt", "c\n")];
    let (h, a, patches) = setup(rule, &files);
    let ids: Vec<String> = patches.iter().map(|(id, _)| id.clone()).collect();
    let shown = review_support::patch(&h, &a, &format!("show 'r' {}", &ids[0][..8])).json();
    assert_eq!(
        (
            &shown["merge_rule"]["min_batch"],
            &shown["merge_rule"]["batch_wait"]
        ),
        (&serde_json::json!(2), &serde_json::json!(5)),
        "{shown}"
    );
    enqueue(&h, &a, &ids[0]);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(announced(&h).is_empty(), "one patch waits for a second");
    enqueue(&h, &a, &ids[1]);
    wait_until("a group of two", || announced(&h).len() == 1);
    assert_eq!(members(&announced(&h)[0]), ids[..2]);

    let queued_at = Instant::now();
    enqueue(&h, &a, &ids[2]);
    wait_until("the third grouped alone", || announced(&h).len() == 2);
    let waited = queued_at.elapsed();
    assert!(waited >= Duration::from_secs(4), "grouped after {waited:?}");
    let g2 = &announced(&h)[1];
    assert_eq!(members(g2), ids[2..]);
    assert_eq!(g2["built_on"], announced(&h)[0]["group"], "{g2}");
    run_ci(&h, None, || {
        ids.iter().all(|id| status(&h, &a, id) == "merged")
    });
}
