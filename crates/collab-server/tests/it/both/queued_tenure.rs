//! Queued work holds its tenure (issue 45, item 2): a patch that joins a
//! merge queue with its issue's lease token (`collab-patch merge
//! --lease-token N`) carries that tenure until it lands or leaves the
//! queue. The lease does not expire while queued (a short TTL, never
//! renewed, and the patch still lands and closes its issue); a release or
//! a break still ends it and takes the patch out of the queue with the
//! reason; a patch the queue evicts (it broke its group) hands its issue
//! back to its author under a fresh token for `leases.eviction_grace`,
//! with a comment naming the failed check and the label `queue-evicted`,
//! and then the issue is ready again; `collab-lease show` says `queued`.

use collab_testkit as common;
use collab_testkit::review as review_support;

use std::time::{Duration, Instant};

use common::{HarnessOptions, ServerHarness};
use review_support::{commit, events, ok, patch, push_for_review, wait_until, Agent};
use serde_json::Value;

const QUEUE_RULE: &str = "merge = { required_checks = [\"ci/test\"], queue = true }\n\
                          fenced_refs = [\"refs/heads/issue/*\"]\n";

/// A server (with `env`) holding repository `r` under [`QUEUE_RULE`], and
/// alice with a clone of it.
fn setup(env: &[(&str, &str)]) -> (ServerHarness, Agent) {
    let h = ServerHarness::start_with(HarnessOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    });
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    review_support::write_policy(&h, QUEUE_RULE);
    let a = review_support::agent(&h, "alice");
    (h, a)
}

/// One unit of leased work.
struct Work {
    issue: String,
    patch: String,
    token: i64,
}

/// Alice claims a new issue with `ttl`, commits `file` fixing it on a
/// branch of her own off `main`, and pushes it for review linked to the
/// issue, under the lease.
fn leased_patch(h: &ServerHarness, a: &Agent, file: &str, ttl: u64) -> Work {
    let issue = h.open_server_issue("r", &format!("Write {file}"));
    let lease = lease(h, a, &format!("acquire 'r' '{issue}' --ttl {ttl}"));
    assert_eq!(lease.code, 0, "{lease:?}");
    let token = lease.json()["token"].as_i64().unwrap();
    ok(h, a, &["switch", "-q", "-c", file, "origin/main"]);
    commit(
        h,
        a,
        file,
        "text\n",
        &format!("Write {file}\n\nFixes: {issue}"),
    );
    let patch = push_for_review(
        h,
        a,
        &[
            "-o",
            &format!("issue={}", &issue[..8]),
            "-o",
            &format!("collab-lease={issue}:{token}"),
        ],
    );
    Work {
        issue,
        patch,
        token,
    }
}

fn lease(h: &ServerHarness, a: &Agent, args: &str) -> common::SshOutput {
    h.ssh_exec_as(&a.key, &format!("collab-lease {args}"), b"")
}

fn show_lease(h: &ServerHarness, a: &Agent, issue: &str) -> Value {
    let out = lease(h, a, &format!("show 'r' '{issue}'"));
    assert_eq!(out.code, 0, "{out:?}");
    out.json()
}

/// Queue `w`'s patch on `main`'s merge queue under its lease token.
fn enqueue(h: &ServerHarness, a: &Agent, w: &Work) {
    let out = patch(
        h,
        a,
        &format!("merge 'r' {} --lease-token {}", &w.patch[..8], w.token),
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["queue"], "main", "{out:?}");
}

fn patch_status(h: &ServerHarness, a: &Agent, id: &str) -> String {
    let out = patch(h, a, &format!("show 'r' {}", &id[..8]));
    assert_eq!(out.code, 0, "{out:?}");
    out.json()["status"].as_str().unwrap().to_string()
}

fn issue(h: &ServerHarness, id: &str) -> Value {
    let out = h.ssh_exec(&format!("collab-issue show 'r' {id}"));
    assert_eq!(out.code, 0, "{out:?}");
    out.json()
}

/// The commit of the first merge group announced.
fn first_group_commit(h: &ServerHarness) -> String {
    wait_until("a merge group announced", || {
        !events(h, "merge_group.checks_requested").is_empty()
    });
    events(h, "merge_group.checks_requested")[0]["payload"]["commit"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A TTL of 3 s that nobody renews runs out while the patch's group is
/// under test: the queue carries the tenure (same token, open-ended,
/// `show` says `queued`, the fenced issue branch still takes a push under
/// it), the group lands, and the issue closes, ending the lease.
#[test]
fn a_queued_patch_outlives_its_lease_ttl_and_lands() {
    let (h, a) = setup(&[]);
    let w = leased_patch(&h, &a, "a.txt", 3);
    enqueue(&h, &a, &w);
    let group = first_group_commit(&h);

    let shown = show_lease(&h, &a, &w.issue);
    assert_eq!(shown["status"], "held", "{shown}");
    assert_eq!(shown["token"], w.token, "{shown}");
    assert_eq!(shown["expires_at"], Value::Null, "{shown}");
    assert_eq!(shown["queued"]["patch"], w.patch.as_str(), "{shown}");
    assert_eq!(shown["queued"]["branch"], "main", "{shown}");

    // Well past the TTL, with the expiry timer's second on top.
    std::thread::sleep(Duration::from_secs(5));
    let shown = show_lease(&h, &a, &w.issue);
    assert_eq!(
        (shown["status"].as_str(), shown["token"].as_i64()),
        (Some("held"), Some(w.token)),
        "{shown}"
    );
    assert!(events(&h, "lease.expired").is_empty());
    // The fence still holds the issue's branch for the token.
    let pushed = review_support::git(
        &h,
        &a,
        &[
            "push",
            "-o",
            &format!("collab-lease={}:{}", w.issue, w.token),
            "origin",
            &format!("HEAD:refs/heads/issue/{}", &w.issue[..8]),
        ],
    );
    assert_eq!(pushed.code, 0, "{pushed:?}");
    let stale = review_support::git(
        &h,
        &a,
        &[
            "push",
            "-o",
            &format!("collab-lease={}:{}", w.issue, w.token + 1),
            "origin",
            &format!("HEAD:refs/heads/issue/{}-x", &w.issue[..8]),
        ],
    );
    assert_ne!(stale.code, 0, "{stale:?}");

    review_support::check_set(&h, &group, "ci/test", "success");
    wait_until("the group landed", || {
        patch_status(&h, &a, &w.patch) == "merged"
    });
    assert!(events(&h, "patch.merge_dequeued").is_empty());
    assert_eq!(issue(&h, &w.issue)["status"], "closed");
    assert_eq!(show_lease(&h, &a, &w.issue)["status"], "free");
}

/// A release by the holder or a break by an administrator still ends a
/// queued tenure: the patch leaves the queue with the reason, and the
/// group under test that held it does not land.
#[test]
fn a_queued_lease_released_or_broken_takes_its_patch_out_of_the_queue() {
    let (h, a) = setup(&[]);
    let released = leased_patch(&h, &a, "a.txt", 600);
    let broken = leased_patch(&h, &a, "b.txt", 600);
    enqueue(&h, &a, &released);
    enqueue(&h, &a, &broken);
    let group = first_group_commit(&h);

    let out = lease(&h, &a, &format!("release 'r' '{}'", released.issue));
    assert_eq!(out.code, 0, "{out:?}");
    let out = h.ssh_exec(&format!(
        "collab-lease break 'r' '{}' --reason 'agent died'",
        broken.issue
    ));
    assert_eq!(out.code, 0, "{out:?}");
    wait_until("both patches dropped", || {
        events(&h, "patch.merge_dequeued").len() == 2
    });
    let reason = |w: &Work| -> String {
        events(&h, "patch.merge_dequeued")
            .into_iter()
            .find(|e| e["object_id"] == w.patch.as_str())
            .map(|e| e["payload"]["reason"].as_str().unwrap().to_string())
            .unwrap()
    };
    let r = reason(&released);
    assert!(
        r.contains(&format!("token {}", released.token)) && r.contains("was released by"),
        "{r}"
    );
    let r = reason(&broken);
    assert!(
        r.contains("was broken by") && r.contains("agent died"),
        "{r}"
    );

    // Green too late: the group lost its patches and lands nothing.
    review_support::check_set(&h, &group, "ci/test", "success");
    wait_until("the group ended stale", || {
        !events(&h, "merge_group.stale").is_empty()
    });
    std::thread::sleep(Duration::from_secs(2));
    for w in [&released, &broken] {
        assert_eq!(patch_status(&h, &a, &w.patch), "open");
        assert_eq!(issue(&h, &w.issue)["status"], "open");
    }
    assert!(events(&h, "merge_group.merged").is_empty());
}

/// The queue evicts a patch that broke its group: its issue gets a comment
/// naming the failed check and the group, the label `queue-evicted`, and
/// goes back to alice under a fresh token for `leases.eviction_grace`
/// (the old token fenced out); when that runs out the issue is ready.
#[test]
fn an_evicted_breaker_goes_back_to_its_author_then_to_the_ready_queue() {
    let (h, a) = setup(&[("GIT_COLLAB_LEASES__EVICTION_GRACE", "6")]);
    let w = leased_patch(&h, &a, "a.txt", 600);
    enqueue(&h, &a, &w);
    let group = first_group_commit(&h);
    review_support::check_set(&h, &group, "ci/test", "failure");
    wait_until("the breaker evicted", || {
        !events(&h, "lease.evicted").is_empty()
    });
    let evicted_at = Instant::now();

    let dropped = events(&h, "patch.merge_dequeued");
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    let reason = dropped[0]["payload"]["reason"].as_str().unwrap();
    assert!(reason.contains("ci/test is failure"), "{reason}");

    let shown = issue(&h, &w.issue);
    assert_eq!(shown["status"], "open", "{shown}");
    assert!(
        shown["labels"]
            .as_array()
            .unwrap()
            .contains(&Value::from("queue-evicted")),
        "{shown}"
    );
    let comments = shown["comments"].as_array().unwrap();
    let body = comments.last().unwrap()["body"].as_str().unwrap();
    assert!(
        body.contains("ci/test is failure") && body.contains("merge group 1"),
        "{body}"
    );

    let evicted = &events(&h, "lease.evicted")[0]["payload"];
    assert_eq!(evicted["token"], w.token, "{evicted}");
    let fresh = show_lease(&h, &a, &w.issue);
    assert_eq!(fresh["status"], "held", "{fresh}");
    assert_eq!(fresh["holder"], evicted["holder"], "{fresh}");
    assert!(fresh["token"].as_i64().unwrap() > w.token, "{fresh}");
    assert_eq!(fresh["token"], evicted["new_token"], "{fresh}");
    assert_ne!(fresh["expires_at"], Value::Null, "{fresh}");
    assert_eq!(fresh["queued"], Value::Null, "{fresh}");
    // Work under the evicted token is fenced out.
    let stale = review_support::git(
        &h,
        &a,
        &[
            "push",
            "-o",
            &format!("collab-lease={}:{}", w.issue, w.token),
            "origin",
            &format!("HEAD:refs/heads/issue/{}", &w.issue[..8]),
        ],
    );
    assert_ne!(stale.code, 0, "{stale:?}");

    let ready = || -> Vec<Value> {
        let out = h.ssh_exec("collab-issue ready 'r'");
        assert_eq!(out.code, 0, "{out:?}");
        out.json()["issues"].as_array().unwrap().clone()
    };
    assert!(ready().is_empty(), "held by its author during the grace");
    wait_until("the issue ready again", || !ready().is_empty());
    assert!(
        evicted_at.elapsed() >= Duration::from_secs(4),
        "ready after {:?}, before the grace ran out",
        evicted_at.elapsed()
    );
    let listed = ready();
    assert_eq!(listed[0]["id"], w.issue.as_str());
    assert!(
        listed[0]["labels"]
            .as_array()
            .unwrap()
            .contains(&Value::from("queue-evicted")),
        "{listed:?}"
    );
}
