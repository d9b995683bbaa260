//! `collab-patch` end to end: review, interdiff and merge of server-held
//! patches, against the real server with real `git` and `ssh`.
//!
//! The review loop of issue 16: A pushes to `refs/for/main`; B requests
//! changes; `main` moves; A rebases with a stale local `main` and pushes
//! revision 2; the interdiff shows only A's change; merges the rule does
//! not allow are refused with the reason; B approves and the server
//! merges. Then: a merge commit when the base moved, a conflict refused
//! with its paths, a fenced base that wants the lease of a linked issue,
//! `Fixes:` in merged commits closing issues, and concurrent merges.

use collab_testkit as common;
use collab_testkit::review as review_support;

use std::path::{Path, PathBuf};

use common::{ServerHarness, SshOutput};
use review_support::{commit, git, ok, setup, Agent};

/// `collab-patch <args>` as `a`.
fn patch(h: &ServerHarness, a: &Agent, args: &str) -> SshOutput {
    h.ssh_exec_as(&a.key, &format!("collab-patch {args}"), b"")
}

fn patch_ok(h: &ServerHarness, a: &Agent, args: &str) -> serde_json::Value {
    let out = patch(h, a, args);
    assert_eq!(out.code, 0, "collab-patch {args}: {out:?}");
    out.json()
}

/// Push HEAD for review; the full patch id.
fn push_for_review(h: &ServerHarness, a: &Agent, extra: &[&str]) -> String {
    let mut args = vec!["push"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["origin", "HEAD:refs/for/main"]);
    let out = ok(h, a, &args);
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("remote: patch "))
        .unwrap_or_else(|| panic!("no patch line: {out:?}"));
    let short = &line.split("remote: patch ").nth(1).unwrap()[..8];
    let listed = patch_ok(h, a, "list 'r' --state all");
    listed["patches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_string())
        .find(|id| id.starts_with(short))
        .expect("the pushed patch is listed")
}

fn server_tip(h: &ServerHarness, a: &Agent, branch: &str) -> String {
    let out = h.ls_remote_as(&a.key, "r");
    out.stdout
        .lines()
        .find_map(|l| {
            let (oid, name) = l.split_once('\t')?;
            (name == format!("refs/heads/{branch}")).then(|| oid.to_string())
        })
        .unwrap_or_default()
}

fn repo_dir(h: &ServerHarness) -> PathBuf {
    h.repos_dir().join("r.git")
}

fn set_policy(h: &ServerHarness, text: &str) {
    collab_testkit::write_live(&repo_dir(h).join("collab-policy.toml"), text);
}

fn parents(dir: &Path, commit: &str) -> Vec<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-list", "--parents", "-n", "1", commit])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect()
}

fn message(dir: &Path, commit: &str) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["log", "-1", "--format=%B", commit])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn review_rebase_interdiff_and_merge_by_the_rule() {
    let (h, a, b) = setup();
    set_policy(&h, "merge = { approvals = 1 }\n");

    // A opens a patch with one push.
    ok(&h, &a, &["switch", "-q", "-c", "feature"]);
    commit(&h, &a, "a.txt", "one\n", "Add a.txt");
    let id = push_for_review(&h, &a, &[]);
    let id8 = &id[..8];

    // B asks for changes; a merge is refused with that reason.
    let v = patch_ok(
        &h,
        &b,
        &format!("review 'r' {id8} --request-changes --body 'Add a second line'"),
    );
    assert_eq!(v["status"], "changes_requested");
    assert_eq!(v["revision"], 1);
    let refused = patch(&h, &b, &format!("merge 'r' {id8}"));
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("merge refused") && refused.stderr.contains("requested changes"),
        "{refused:?}"
    );

    // main moves meanwhile (B's own change).
    let b_main = {
        ok(&h, &b, &["switch", "-q", "main"]);
        let c = commit(&h, &b, "b.txt", "upstream\n", "Upstream change");
        ok(&h, &b, &["push", "-q", "origin", "main"]);
        c
    };

    // A rebases onto origin/main with a stale local main, amends, pushes.
    ok(&h, &a, &["fetch", "-q", "origin"]);
    let stale_main = ok(&h, &a, &["rev-parse", "main"]).stdout.trim().to_string();
    assert_ne!(stale_main, b_main, "A's local main is stale");
    ok(&h, &a, &["rebase", "-q", "origin/main"]);
    std::fs::write(a.clone.join("a.txt"), "one\ntwo\n").unwrap();
    ok(&h, &a, &["commit", "-q", "-a", "--amend", "--no-edit"]);
    let same = push_for_review(&h, &a, &["-o", &format!("patch={id8}")]);
    assert_eq!(same, id);

    // The interdiff shows only A's change, not B's upstream one.
    let inter = patch_ok(&h, &a, &format!("interdiff 'r' {id8} 1 2"));
    let text = inter["text"].as_str().unwrap();
    assert!(text.contains("+two"), "{inter}");
    assert!(!text.contains("upstream"), "{inter}");
    assert_eq!(inter["rebased"], true);
    let files: Vec<&str> = inter["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["a.txt"]);
    // Revision 2's diff is against the server's main at push time.
    let diff = patch_ok(&h, &b, &format!("diff 'r' {id8}"));
    assert_eq!(diff["revision"], 2);
    assert_eq!(diff["base_commit"], b_main);
    assert!(!diff["text"].as_str().unwrap().contains("b.txt"), "{diff}");

    // The request for changes was on revision 1; revision 2 has no vote.
    let refused = patch(&h, &b, &format!("merge 'r' {id8}"));
    assert!(
        refused.code == 1
            && refused
                .stderr
                .contains("needs 1 more approval on revision 2"),
        "{refused:?}"
    );
    // The author's own approval does not count.
    patch_ok(&h, &a, &format!("review 'r' {id8} --approve"));
    let refused = patch(&h, &a, &format!("merge 'r' {id8}"));
    assert!(
        refused.code == 1 && refused.stderr.contains("needs 1 more approval"),
        "{refused:?}"
    );
    let shown = patch_ok(&h, &a, &format!("show 'r' {id8}"));
    assert_eq!(shown["merge_rule"]["ready"], false);

    // B approves (and comments inline); the merge is a fast-forward.
    patch_ok(
        &h,
        &b,
        &format!("comment 'r' {id8} --body 'nice line' --path a.txt --line 2"),
    );
    let bad_path = patch(
        &h,
        &b,
        &format!("comment 'r' {id8} --body x --path nope.txt --line 1"),
    );
    assert!(
        bad_path.code == 1 && bad_path.stderr.contains("no file"),
        "{bad_path:?}"
    );
    patch_ok(&h, &b, &format!("review 'r' {id8} --approve --body LGTM"));
    let shown = patch_ok(&h, &b, &format!("show 'r' {id8}"));
    assert_eq!(shown["merge_rule"]["ready"], true, "{shown}");
    let head2 = shown["revisions"][1]["head"].as_str().unwrap().to_string();
    let merged = patch_ok(&h, &b, &format!("merge 'r' {id8}"));
    assert_eq!(merged["status"], "merged");
    assert_eq!(merged["kind"], "fast_forward");
    assert_eq!(merged["commit"], head2);
    assert_eq!(server_tip(&h, &a, "main"), head2);

    let shown = patch_ok(&h, &a, &format!("show 'r' {id8}"));
    assert_eq!(shown["status"], "merged");
    assert_eq!(shown["merge"]["commit"], head2);
    assert_eq!(shown["comments"][0]["path"], "a.txt");
    assert_eq!(shown["comments"][0]["line"], 2);
    let again = patch(&h, &b, &format!("merge 'r' {id8}"));
    assert!(
        again.code == 1 && again.stderr.contains("merged"),
        "{again:?}"
    );

    // The event log says which push moved main: the merge's own.
    let events = h.ssh_exec_as(
        &a.key,
        "collab-events watch 'r' --since 0 --no-follow --type 'patch.merged' --type 'ref.updated'",
        b"",
    );
    assert_eq!(events.code, 0, "{events:?}");
    let last: Vec<serde_json::Value> = events
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tail: Vec<&str> = last
        .iter()
        .rev()
        .take(2)
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert!(
        tail.contains(&"patch.merged") && tail.contains(&"ref.updated"),
        "{last:?}"
    );

    // Clients cannot write revision refs of server-held patches.
    let pin = format!("HEAD:refs/collab/revisions/{id}/9");
    let out = git(&h, &a, &["push", "origin", &pin]);
    assert_ne!(out.code, 0, "{out:?}");
}

#[test]
fn merge_commits_conflicts_fenced_bases_and_fixes() {
    let (h, a, b) = setup();
    // Two patches from the same base, on different files.
    ok(&h, &a, &["switch", "-q", "-c", "one"]);
    commit(&h, &a, "one.txt", "1\n", "Add one.txt");
    let one = push_for_review(&h, &a, &[]);
    ok(&h, &a, &["switch", "-q", "main"]);
    ok(&h, &a, &["switch", "-q", "-c", "clash"]);
    commit(&h, &a, "README", "mine\n", "Rewrite README");
    let clash = push_for_review(&h, &a, &[]);

    // main moves: README changes upstream.
    ok(&h, &b, &["switch", "-q", "main"]);
    commit(&h, &b, "README", "theirs\n", "Upstream README");
    ok(&h, &b, &["push", "-q", "origin", "main"]);
    let upstream = server_tip(&h, &b, "main");

    // `one` merges with a merge commit that names the patch.
    let merged = patch_ok(&h, &b, &format!("merge 'r' {}", &one[..8]));
    assert_eq!(merged["kind"], "merge_commit", "{merged}");
    let commit_id = merged["commit"].as_str().unwrap();
    assert_eq!(server_tip(&h, &b, "main"), commit_id);
    let dir = repo_dir(&h);
    let shown = patch_ok(&h, &b, &format!("show 'r' {}", &one[..8]));
    let head = shown["revisions"][0]["head"].as_str().unwrap();
    assert_eq!(parents(&dir, commit_id), [upstream.as_str(), head]);
    assert!(
        message(&dir, commit_id).contains(&format!("Patch: {one}")),
        "{}",
        message(&dir, commit_id)
    );

    // Linking an issue after the push.
    let tracked = h.open_server_issue("r", "Track one");
    let linked = patch_ok(
        &h,
        &b,
        &format!("link 'r' {} {}", &clash[..8], &tracked[..8]),
    );
    assert_eq!(linked["status"], "linked");
    let shown = patch_ok(&h, &b, &format!("show 'r' {}", &clash[..8]));
    assert_eq!(shown["issues"][0], tracked.as_str());

    // `clash` conflicts in README: refused, main untouched.
    let refused = patch(&h, &b, &format!("merge 'r' {}", &clash[..8]));
    assert!(
        refused.code == 1 && refused.stderr.contains("conflicts with 'main' in README"),
        "{refused:?}"
    );
    assert_eq!(server_tip(&h, &b, "main"), commit_id);

    // A fenced main: merging needs the live lease of a linked issue.
    let issue = h.open_server_issue("r", "Add two.txt");
    set_policy(&h, "fenced_refs = [\"refs/heads/main\"]\n");
    ok(&h, &a, &["fetch", "-q", "origin"]);
    ok(&h, &a, &["switch", "-q", "-c", "two", "origin/main"]);
    commit(
        &h,
        &a,
        "two.txt",
        "2\n",
        &format!("Add two.txt\n\nFixes: {}", &issue[..8]),
    );
    let two = push_for_review(&h, &a, &["-o", &format!("issue={}", &issue[..8])]);
    let fenced = patch(&h, &a, &format!("merge 'r' {}", &two[..8]));
    assert_eq!(fenced.code, 4, "{fenced:?}");
    assert_eq!(fenced.json()["status"], "fenced");
    let lease = h.ssh_exec_as(
        &a.key,
        &format!("collab-lease acquire 'r' '{issue}' --ttl 600"),
        b"",
    );
    assert_eq!(lease.code, 0, "{lease:?}");
    let token = lease.json()["token"].as_i64().unwrap();
    let wrong = patch(
        &h,
        &b,
        &format!("merge 'r' {} --lease-token {token}", &two[..8]),
    );
    assert_eq!(wrong.code, 4, "B does not hold the lease: {wrong:?}");
    assert!(!wrong.json()["holder"].as_str().unwrap().is_empty());
    let merged = patch_ok(
        &h,
        &a,
        &format!("merge 'r' {} --lease-token {token}", &two[..8]),
    );
    assert_eq!(merged["kind"], "fast_forward");
    // The merged commit's `Fixes:` closed the issue and ended its lease.
    let closed = merged["closed_issues"].as_array().unwrap();
    assert_eq!(closed.len(), 1, "{merged}");
    assert_eq!(closed[0]["issue"], issue.as_str());
    let shown = h.ssh_exec(&format!("collab-issue show 'r' '{issue}'"));
    assert_eq!(shown.json()["status"], "closed", "{shown:?}");
    assert_eq!(shown.json()["lease"], serde_json::Value::Null);
}

#[test]
fn concurrent_merges_land_every_patch_once() {
    let (h, a, b) = setup();
    let mut ids = Vec::new();
    for i in 0..4 {
        ok(&h, &a, &["switch", "-q", "main"]);
        ok(&h, &a, &["switch", "-q", "-c", &format!("f{i}")]);
        commit(&h, &a, &format!("f{i}.txt"), "x\n", &format!("Add f{i}"));
        ids.push(push_for_review(&h, &a, &[]));
    }
    // Every patch merged by two callers at once: each lands exactly once.
    let agents = [&a, &b];
    let outcomes: Vec<(String, SshOutput)> = std::thread::scope(|s| {
        let handles: Vec<_> = ids
            .iter()
            .flat_map(|id| agents.iter().map(move |who| (id.clone(), *who)))
            .map(|(id, who)| {
                let h = &h;
                s.spawn(move || {
                    let out = patch(h, who, &format!("merge 'r' {}", &id[..8]));
                    (id, out)
                })
            })
            .collect();
        handles.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for id in &ids {
        let wins: Vec<&SshOutput> = outcomes
            .iter()
            .filter(|(i, o)| i == id && o.code == 0)
            .map(|(_, o)| o)
            .collect();
        assert_eq!(wins.len(), 1, "patch {id}: {outcomes:?}");
        let losers: Vec<&SshOutput> = outcomes
            .iter()
            .filter(|(i, o)| i == id && o.code != 0)
            .map(|(_, o)| o)
            .collect();
        assert!(
            losers
                .iter()
                .all(|o| o.stderr.contains("merged") || o.stderr.contains("kept moving")),
            "{losers:?}"
        );
    }
    // main holds every head.
    let tip = server_tip(&h, &a, "main");
    let dir = repo_dir(&h);
    for id in &ids {
        let shown = patch_ok(&h, &a, &format!("show 'r' {}", &id[..8]));
        assert_eq!(shown["status"], "merged");
        let head = shown["revisions"][0]["head"].as_str().unwrap();
        let contains = std::process::Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(["merge-base", "--is-ancestor", head, &tip])
            .status()
            .unwrap();
        assert!(contains.success(), "{head} is in main");
    }
}
