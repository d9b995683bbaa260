//! `collab-check` end to end (issue 27): CI posts checks on commits with
//! the real `ssh`, against commits pushed with the real `git`; the checks
//! show in `collab-patch show`; every `set` is a `check.updated` event that
//! a real HTTP receiver gets as a webhook; the `checks` access level lets a
//! key post checks without pushing; hostile input is refused with one line.

use collab_testkit as common;
use collab_testkit::review as review_support;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{fingerprint, HarnessOptions, ServerHarness, SshOutput};
use review_support::{commit, ok, Agent};
use serde_json::Value;

/// Hang guard for waiting on a delivery (not a timing assertion).
const WAIT_LIMIT: Duration = Duration::from_secs(120);

fn check(h: &ServerHarness, key: &std::path::Path, args: &str) -> SshOutput {
    h.ssh_exec_as(key, &format!("collab-check {args}"), b"")
}

/// Push HEAD of `a` to `refs/for/main`; the new patch's full id.
fn push_for_review(h: &ServerHarness, a: &Agent) -> String {
    ok(h, a, &["push", "origin", "HEAD:refs/for/main"]);
    let out = h.ssh_exec_as(&a.key, "collab-patch list 'r'", b"");
    assert_eq!(out.code, 0, "{out:?}");
    out.json()["patches"][0]["id"]
        .as_str()
        .expect("a patch")
        .to_string()
}

/// The `check.updated` events so far, oldest first.
fn check_events(h: &ServerHarness) -> Vec<Value> {
    let out = h.ssh_exec("collab-events watch --since 1 --no-follow");
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "check.updated")
        .collect()
}

/// A server with repository `r` (`main` with one commit), and alice with a
/// clone and a feature commit pushed for review.
fn setup_with_patch(options: HarnessOptions) -> (ServerHarness, Agent, String, String) {
    let h = ServerHarness::start_with(options);
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    let a = review_support::agent(&h, "alice");
    ok(&h, &a, &["switch", "-q", "-c", "feature"]);
    let head = commit(&h, &a, "a.txt", "one\n", "Add a.txt");
    let id = push_for_review(&h, &a);
    (h, a, id, head)
}

#[test]
fn checks_are_set_listed_and_shown_on_the_patch_with_their_history_as_events() {
    let (h, a, id, head) = setup_with_patch(HarnessOptions::default());
    let admin = h.ssh_client_key();

    let set = check(
        &h,
        &admin,
        &format!("set 'r' {head} ci/test --state pending --url https://ci.example/run/1 --description 'queued'"),
    );
    assert_eq!(set.code, 0, "{set:?}");
    let v = set.json();
    assert_eq!(v["state"], "pending");
    assert_eq!(v["previous_state"], Value::Null);
    let v = check(
        &h,
        &admin,
        &format!("set 'r' {head} ci/test --state success"),
    )
    .json();
    assert_eq!(v["previous_state"], "pending");
    check(&h, &admin, &format!("set 'r' {head} lint --state failure"));

    // By commit and by patch (its latest head): the same two checks.
    for target in [head.as_str(), &id, &id[..8]] {
        let listed = check(&h, &a.key, &format!("list 'r' {target}"));
        assert_eq!(listed.code, 0, "{listed:?}");
        let v = listed.json();
        assert_eq!(v["commit"], head.as_str());
        let states: Vec<(String, String)> = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().into(),
                    c["state"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(
            states,
            vec![
                ("ci/test".to_string(), "success".to_string()),
                ("lint".to_string(), "failure".to_string())
            ]
        );
    }
    let shown = h.ssh_exec_as(&a.key, &format!("collab-patch show 'r' {}", &id[..8]), b"");
    let checks = shown.json()["checks"].clone();
    assert_eq!(checks.as_array().map(Vec::len), Some(2), "{shown:?}");
    assert_eq!(checks[0]["name"], "ci/test");
    assert_eq!(
        checks[0]["url"],
        Value::Null,
        "the latest set replaced the url"
    );

    // A new revision: the old head's checks are not the patch's any more.
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
    let shown = h.ssh_exec_as(&a.key, &format!("collab-patch show 'r' {}", &id[..8]), b"");
    assert_eq!(shown.json()["checks"], serde_json::json!([]), "{shown:?}");

    // The history: one event per set, each naming the state before.
    let events = check_events(&h);
    let seen: Vec<(Value, Value, Value)> = events
        .iter()
        .map(|e| {
            let p = &e["payload"];
            (
                p["name"].clone(),
                p["state"].clone(),
                p["previous_state"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("ci/test".into(), "pending".into(), Value::Null),
            ("ci/test".into(), "success".into(), "pending".into()),
            ("lint".into(), "failure".into(), Value::Null),
        ]
    );
    assert!(events.iter().all(|e| e["object_id"] == head.as_str()));
}

#[test]
fn concurrent_sets_of_one_check_each_leave_one_event_in_a_consistent_chain() {
    let (h, _a, _id, head) = setup_with_patch(HarnessOptions::default());
    let h = Arc::new(h);
    const STATES: [&str; 6] = [
        "pending", "success", "failure", "error", "skipped", "success",
    ];
    let states = STATES;
    let threads: Vec<_> = states
        .into_iter()
        .map(|state| {
            let (h, head) = (h.clone(), head.clone());
            std::thread::spawn(move || {
                let out = check(
                    &h,
                    &h.ssh_client_key(),
                    &format!("set 'r' {head} ci --state {state}"),
                );
                assert_eq!(out.code, 0, "{out:?}");
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let events = check_events(&h);
    assert_eq!(events.len(), states.len());
    // Serialized by the writer: each event's previous state is the state
    // the event before it set; the row holds the last one.
    let mut before = Value::Null;
    for e in &events {
        assert_eq!(e["payload"]["previous_state"], before, "{events:?}");
        before = e["payload"]["state"].clone();
    }
    let listed = check(&h, &h.ssh_client_key(), &format!("list 'r' {head}")).json();
    assert_eq!(listed["checks"][0]["state"], before);
    assert_eq!(listed["checks"].as_array().unwrap().len(), 1);
}

#[test]
fn hostile_checks_are_refused_with_one_line_and_nothing_is_written() {
    let (h, _a, _id, head) = setup_with_patch(HarnessOptions::default());
    let admin = h.ssh_client_key();
    let not_here = "0123456789abcdef0123456789abcdef01234567";
    let cases = [
        (
            format!("set 'r' {not_here} ci --state success"),
            "no commit",
        ),
        (
            format!("set 'r' {} ci --state success", &head[..12]),
            "full commit id",
        ),
        (format!("set 'r' {head} '-x' --state success"), ""),
        (
            format!("set 'r' {head} 'a b' --state success"),
            "invalid check name",
        ),
        (format!("set 'r' {head} 'ci\u{1b}[31m' --state success"), ""),
        (format!("set 'r' {head} ci --state done"), "usage"),
        (
            format!("set 'r' {head} ci --state success --url 'javascript:alert(1)'"),
            "http",
        ),
        (
            format!("set 'r' {head} ci --state success --url 'file:///etc/passwd'"),
            "http",
        ),
        (
            format!("set 'r' {head} ci --state success --url 'https://a b'"),
            "--url",
        ),
        (
            format!(
                "set 'r' {head} ci --state success --url https://{}",
                "a".repeat(3000)
            ),
            "--url",
        ),
        (
            format!("set 'r' {head} ci --state success --description 'a\u{7}b'"),
            "",
        ),
        (
            format!("set 'r' {head} {} --state success", "n".repeat(101)),
            "invalid check name",
        ),
        ("list 'r' zzzz".to_string(), "not a full commit id"),
    ];
    for (args, words) in &cases {
        let out = check(&h, &admin, args);
        assert_ne!(out.code, 0, "{args}: {out:?}");
        assert!(out.stdout.is_empty(), "{args}: {out:?}");
        let line = out.stderr.trim_end();
        assert!(
            line.starts_with("error: ") && !line.contains('\n'),
            "{args}: {out:?}"
        );
        assert!(line.contains(words), "{args}: {out:?}");
    }
    assert!(check_events(&h).is_empty());
    // An unknown repository and a private one read the same.
    let nobody = h.authorized_key("nobody");
    review_support::write_policy(
        &h,
        format!("read = [\"{}\"]\nwrite = []\n", fingerprint(&admin)),
    );
    let hidden = check(&h, &nobody, &format!("set 'r' {head} ci --state success"));
    let missing = check(
        &h,
        &nobody,
        &format!("set 'ghost' {head} ci --state success"),
    );
    assert_eq!(hidden.stderr, missing.stderr);
    assert_eq!(hidden.code, missing.code);
}

#[test]
fn the_checks_level_posts_checks_but_cannot_push() {
    let (h, a, _id, head) = setup_with_patch(HarnessOptions::default());
    let ci = h.authorized_key("ci");
    let reader = h.authorized_key("reader");
    review_support::write_policy(
        &h,
        format!(
            "read = [\"*\"]\nchecks = [\"{}\"]\nwrite = [\"{}\"]\n",
            fingerprint(&ci),
            fingerprint(&a.key)
        ),
    );
    let out = check(&h, &ci, &format!("set 'r' {head} ci --state success"));
    assert_eq!(out.code, 0, "{out:?}");
    let out = check(&h, &reader, &format!("set 'r' {head} ci --state failure"));
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("permission denied"), "{out:?}");
    assert_eq!(check(&h, &reader, &format!("list 'r' {head}")).code, 0);
    // The CI key pushes nothing.
    let clone = h.clone_as(&ci, "r", "ci-clone");
    h.commit_file(&clone, "x", b"x\n", "CI tries to push");
    let push = h
        .git_command(&ci, &clone)
        .args(["push", "origin", "HEAD:refs/heads/ci"])
        .output()
        .unwrap();
    assert!(!push.status.success(), "{push:?}");
    // The author may post too (write includes checks).
    assert_eq!(
        check(&h, &a.key, &format!("set 'r' {head} lint --state success")).code,
        0
    );
}

/// A minimal webhook receiver: accepts every POST, keeps its body.
fn receiver() -> (u16, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok() {
                if let Ok(v) = serde_json::from_slice(&body) {
                    seen.lock().unwrap().push(v);
                }
            }
            let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
        }
    });
    (port, bodies)
}

#[test]
fn a_webhook_receiver_gets_check_updated_with_the_previous_state() {
    let (port, bodies) = receiver();
    let (h, _a, _id, head) = setup_with_patch(HarnessOptions {
        env: vec![(
            "GIT_COLLAB_WEBHOOKS__ALLOWED_HOSTS".into(),
            "127.0.0.1".into(),
        )],
        ..Default::default()
    });
    let add = h.ssh_exec(&format!(
        "collab-hook add 'r' 'http://127.0.0.1:{port}/hook' --event 'check.*'"
    ));
    assert_eq!(add.code, 0, "{add:?}");
    check(
        &h,
        &h.ssh_client_key(),
        &format!("set 'r' {head} ci/test --state pending"),
    );
    check(
        &h,
        &h.ssh_client_key(),
        &format!("set 'r' {head} ci/test --state success"),
    );
    let start = Instant::now();
    loop {
        let got: Vec<Value> = bodies.lock().unwrap().clone();
        if got.len() >= 2 {
            let states: Vec<(Value, Value)> = got
                .iter()
                .map(|b| {
                    assert_eq!(b["type"], "check.updated", "{b}");
                    (
                        b["data"]["payload"]["state"].clone(),
                        b["data"]["payload"]["previous_state"].clone(),
                    )
                })
                .collect();
            assert_eq!(
                states,
                vec![
                    ("pending".into(), Value::Null),
                    ("success".into(), "pending".into())
                ]
            );
            assert_eq!(got[0]["data"]["payload"]["commit"], head.as_str());
            break;
        }
        assert!(start.elapsed() < WAIT_LIMIT, "deliveries: {got:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Items 2 of issue 27: the merge rule's `required_checks`.
#[test]
fn a_merge_waits_for_every_required_check_on_the_latest_head() {
    let (h, a, id, head) = setup_with_patch(HarnessOptions::default());
    let admin = h.ssh_client_key();
    review_support::write_policy(
        &h,
        "merge = { required_checks = [\"ci/test\", \"lint\"] }\n",
    );
    let merge = |h: &ServerHarness| {
        h.ssh_exec_as(&a.key, &format!("collab-patch merge 'r' {}", &id[..8]), b"")
    };
    let verdict = |h: &ServerHarness| {
        let shown = h.ssh_exec_as(&a.key, &format!("collab-patch show 'r' {}", &id[..8]), b"");
        let rule = shown.json()["merge_rule"].clone();
        assert_eq!(
            rule["required_checks"],
            serde_json::json!(["ci/test", "lint"])
        );
        (rule["ready"].clone(), rule["reason"].clone(), shown)
    };

    // Missing is not green.
    let out = merge(&h);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains("ci/test is missing, lint is missing"),
        "{out:?}"
    );
    // Pending is not green; failing and skipped (by default) neither.
    check(
        &h,
        &admin,
        &format!("set 'r' {head} ci/test --state pending"),
    );
    check(&h, &admin, &format!("set 'r' {head} lint --state skipped"));
    let out = merge(&h);
    assert!(
        out.code == 1 && out.stderr.contains("ci/test is pending, lint is skipped"),
        "{out:?}"
    );
    let (ready, _, shown) = verdict(&h);
    assert_eq!(ready, false, "{shown:?}");
    assert!(shown.stdout.contains("ci/test is pending"), "{shown:?}");
    check(
        &h,
        &admin,
        &format!("set 'r' {head} ci/test --state failure"),
    );
    check(&h, &admin, &format!("set 'r' {head} lint --state success"));
    let out = merge(&h);
    assert!(
        out.code == 1 && out.stderr.contains("ci/test is failure"),
        "{out:?}"
    );

    // Green on the old head does not carry to a new revision.
    check(
        &h,
        &admin,
        &format!("set 'r' {head} ci/test --state success"),
    );
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
    let new_head = ok(&h, &a, &["rev-parse", "HEAD"]).stdout.trim().to_string();
    let out = merge(&h);
    assert!(
        out.code == 1 && out.stderr.contains("ci/test is missing, lint is missing"),
        "{out:?}"
    );

    // Green on the latest head: it merges.
    check(
        &h,
        &admin,
        &format!("set 'r' {new_head} ci/test --state success"),
    );
    check(
        &h,
        &admin,
        &format!("set 'r' {new_head} lint --state success"),
    );
    let (ready, _, shown) = verdict(&h);
    assert_eq!(ready, true, "{shown:?}");
    let out = merge(&h);
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn skipped_counts_only_when_the_rule_says_so() {
    let (h, a, id, head) = setup_with_patch(HarnessOptions::default());
    let admin = h.ssh_client_key();
    check(&h, &admin, &format!("set 'r' {head} lint --state skipped"));
    let merge = || h.ssh_exec_as(&a.key, &format!("collab-patch merge 'r' {}", &id[..8]), b"");
    review_support::write_policy(&h, "merge = { required_checks = [\"lint\"] }\n");
    let out = merge();
    assert!(
        out.code == 1 && out.stderr.contains("lint is skipped"),
        "{out:?}"
    );
    review_support::write_policy(
        &h,
        "merge = { required_checks = [\"lint\"], skipped_is_success = true }\n",
    );
    assert_eq!(merge().code, 0);
}

/// The web's patch page lists the checks (links only to http(s), text
/// escaped) and says which required check holds the merge.
#[test]
fn the_web_patch_page_shows_checks_and_the_verdict() {
    let (h, _a, id, head) = setup_with_patch(HarnessOptions::default());
    review_support::write_policy(
        &h,
        "public = true\nmerge = { required_checks = [\"ci/test\", \"lint\"] }\n",
    );
    let admin = h.ssh_client_key();
    let out = check(
        &h,
        &admin,
        &format!("set 'r' {head} ci/test --state pending --url https://ci.example/run/7 --description '<script>x</script>'"),
    );
    assert_eq!(out.code, 0, "{out:?}");
    check(&h, &admin, &format!("set 'r' {head} lint --state success"));
    let page = collab_testkit::web::get(&h, &format!("/r/-/patches/{}", &id[..8]));
    assert_eq!(page.status, 200);
    let text = page.text();
    assert!(text.contains("href=\"https://ci.example/run/7\""), "{text}");
    assert!(text.contains("<code>lint</code>"), "{text}");
    assert!(!text.contains("<script>x"), "{text}");
    assert!(text.contains("&#60;script&#62;x"), "{text}");
    assert!(text.contains("ci/test is pending"), "{text}");
    assert!(text.contains("checks ci/test, lint must pass"), "{text}");
}

/// The web's commit page lists the checks reported on that commit, and only
/// those: a commit without checks shows none.
#[test]
fn the_web_commit_page_shows_the_commits_checks() {
    let (h, a, _id, head) = setup_with_patch(HarnessOptions::default());
    review_support::write_policy(&h, "public = true\n");
    let admin = h.ssh_client_key();
    let out = check(
        &h,
        &admin,
        &format!("set 'r' {head} ci/test --state failure --url https://ci.example/run/9 --description '<b>broke</b>'"),
    );
    assert_eq!(out.code, 0, "{out:?}");
    let page = collab_testkit::web::get(&h, &format!("/r/-/commit/{head}"));
    assert_eq!(page.status, 200);
    let text = page.text();
    assert!(text.contains("class=\"checks\""), "{text}");
    assert!(text.contains("href=\"https://ci.example/run/9\""), "{text}");
    assert!(text.contains("<code>ci/test</code>"), "{text}");
    assert!(text.contains("state failure"), "{text}");
    assert!(!text.contains("<b>broke"), "{text}");

    // The base's tip has no checks: its page shows no list.
    let base = h.rev_parse(&a.clone, "HEAD~1");
    let page = collab_testkit::web::get(&h, &format!("/r/-/commit/{base}"));
    assert_eq!(page.status, 200);
    assert!(!page.text().contains("class=\"checks\""));
}

/// `--lease-token` fences a check: it is written only while the caller
/// holds that tenure of an issue linked to a patch with this head; a CI run
/// whose lease is gone (a zombie) changes nothing and gets exit 4.
#[test]
fn a_lease_token_fences_a_check_by_the_linked_issues_lease() {
    let (h, a, _id, unlinked_head) = setup_with_patch(HarnessOptions::default());
    let refused = check(
        &h,
        &a.key,
        &format!("set 'r' {unlinked_head} ci/test --state success --lease-token 1"),
    );
    assert_eq!(refused.code, 4, "{refused:?}");
    assert_eq!(refused.json()["status"], "fenced");
    assert!(
        refused.json()["message"]
            .as_str()
            .unwrap()
            .contains("fences nothing"),
        "{refused:?}"
    );

    // A patch linked to an issue alice holds.
    let issue = h.open_server_issue("r", "Add b.txt");
    ok(&h, &a, &["switch", "-q", "-c", "linked", "origin/main"]);
    let head = commit(&h, &a, "b.txt", "b\n", "Add b.txt");
    ok(
        &h,
        &a,
        &[
            "push",
            "-o",
            &format!("issue={}", &issue[..8]),
            "origin",
            "HEAD:refs/for/main",
        ],
    );
    let lease = h.ssh_exec_as(
        &a.key,
        &format!("collab-lease acquire 'r' '{issue}' --ttl 600"),
        b"",
    );
    assert_eq!(lease.code, 0, "{lease:?}");
    let token = lease.json()["token"].as_i64().unwrap();

    let set = check(
        &h,
        &a.key,
        &format!("set 'r' {head} ci/test --state pending --lease-token {token}"),
    );
    assert_eq!(set.code, 0, "{set:?}");
    let stale = check(
        &h,
        &a.key,
        &format!(
            "set 'r' {head} ci/test --state success --lease-token {}",
            token + 1
        ),
    );
    assert_eq!(stale.code, 4, "{stale:?}");
    assert_eq!(stale.json()["holder"], lease.json()["holder"]);
    assert_eq!(stale.json()["token"], token);

    // The lease is gone: the old run's report is refused.
    let released = h.ssh_exec_as(&a.key, &format!("collab-lease release 'r' '{issue}'"), b"");
    assert_eq!(released.code, 0, "{released:?}");
    let zombie = check(
        &h,
        &a.key,
        &format!("set 'r' {head} ci/test --state success --lease-token {token}"),
    );
    assert_eq!(zombie.code, 4, "{zombie:?}");
    assert!(
        zombie.json()["message"]
            .as_str()
            .unwrap()
            .contains("has no live lease"),
        "{zombie:?}"
    );
    // Nothing refused was written.
    let listed = check(&h, &a.key, &format!("list 'r' {head}"));
    assert_eq!(listed.code, 0, "{listed:?}");
    assert_eq!(listed.json()["checks"][0]["state"], "pending", "{listed:?}");
}

/// A value with spaces typed once-quoted in a local shell reaches the
/// server as several words (ssh joins the arguments, the server splits
/// them again). The refusal names the stray word and shows how to quote,
/// instead of every `collab-check` form's usage; quoted twice, as it
/// says, the same value goes through.
#[test]
fn a_value_split_by_ssh_is_named_in_the_refusal() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "seed");
    let head = h.commit_file(&clone, "a.txt", b"a\n", "first");
    h.ssh_push(&clone, &["HEAD:main"]);
    let key = h.ssh_client_key();
    // The argv a shell makes of
    // `ssh host collab-check set r <sha> ci/test --state failure --description "2 tests failed"`.
    let ssh = |description: &str| {
        Command::new("ssh")
            .args(h.ssh_options(&key))
            .arg("git@127.0.0.1")
            .args(["collab-check", "set", "r", &head, "ci/test"])
            .args(["--state", "failure", "--description", description])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = ssh("2 tests failed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(
            "error: unexpected argument 'tests' for collab-check set; ssh splits the command at spaces"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(r#"--description "'two words'""#),
        "{stderr}"
    );
    // Its own usage, not every form's.
    assert!(
        stderr.contains("usage: collab-check set '<repo>'"),
        "{stderr}"
    );
    assert!(!stderr.contains("collab-check list"), "{stderr}");
    let listed = check(&h, &key, &format!("list 'r' {head}")).json();
    assert_eq!(listed["checks"].as_array().unwrap().len(), 0, "{listed}");

    let out = ssh("'2 tests failed'");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let listed = check(&h, &key, &format!("list 'r' {head}")).json();
    assert_eq!(listed["checks"][0]["description"], "2 tests failed");
}
