//! The work queue from the CLI: `git collab issue ready|next|claim --wait|
//! break` and `git collab push`, in a real clone, reaching the real server
//! through the real `ssh`. The token a claim returns is remembered in the
//! clone and `git collab push` fences the push with it: accepted while the
//! claim is live, refused once it was broken.

use collab_testkit as common;

use std::path::Path;

use common::{ServerHarness, SshOutput};
use serde_json::Value;

fn collab(h: &ServerHarness, key: &Path, dir: &Path, args: &[&str]) -> SshOutput {
    let out = h
        .client_command(collab_testkit::bin("git-collab"), key, dir)
        .args(args)
        .output()
        .expect("run git-collab");
    SshOutput::from_output(out)
}

fn open(h: &ServerHarness, title: &str, extra: &str) -> String {
    let out = h.ssh_exec(&format!("collab-issue open 'r' --title '{title}'{extra}"));
    assert_eq!(out.code, 0, "{out:?}");
    out.json()["issue"].as_str().unwrap().to_string()
}

fn remote_ref(h: &ServerHarness, refname: &str) -> Option<String> {
    let out = h.ls_remote_as(&h.ssh_client_key(), "r");
    out.stdout
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .find(|(_, name)| *name == refname)
        .map(|(oid, _)| oid.to_string())
}

#[test]
fn next_remembers_the_token_and_push_is_fenced_with_it() {
    let h = ServerHarness::start();
    let seed = h.create_fenced_repo("r");
    let later = open(&h, "Later", " --label backend");
    let first = open(&h, "First", " --label backend");
    open(&h, "Frontend", " --label frontend");
    let out = h.ssh_exec(&format!("collab-issue edit 'r' '{first}' --priority 1"));
    assert_eq!(out.code, 0, "{out:?}");

    let agent = h.authorized_key("agent");
    let clone = h.clone_as(&agent, "r", "agent");
    let run = |args: &[&str]| collab(&h, &agent, &clone, args);

    // ready: priority first, then age; labels filter.
    let out = run(&["issue", "ready", "--label", "backend"]);
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert!(
        lines[0].starts_with(&format!("{}  P1  First", &first[..8])),
        "{out:?}"
    );
    assert!(
        lines[1].starts_with(&format!("{}  -  Later", &later[..8])),
        "{out:?}"
    );

    // next takes "First" and remembers its token in the clone.
    let out = run(&[
        "issue", "next", "--label", "backend", "--ttl", "600", "--json",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["issue"], first.as_str());
    assert_eq!(v["title"], "First");
    let token = v["token"].as_i64().unwrap();
    let remembered = h.git(
        &clone,
        &["config", "--get-all", "remote.origin.collabLease"],
    );
    assert_eq!(
        String::from_utf8_lossy(&remembered.stdout).trim(),
        format!("{first}:{token}")
    );

    // git collab push fences the push with it.
    h.commit_file(&clone, "work.txt", b"v1\n", "Work on First");
    let out = run(&["push", "origin", "HEAD:refs/heads/issue/first"]);
    assert_eq!(out.code, 0, "{out:?}");
    let pushed = remote_ref(&h, "refs/heads/issue/first").expect("pushed");
    // A plain git push to the fenced ref is refused.
    h.commit_file(&clone, "work.txt", b"v2\n", "More work");
    let plain = h.git_as(
        &agent,
        &clone,
        &["push", "origin", "HEAD:refs/heads/issue/first"],
    );
    assert!(!plain.status.success());
    assert!(String::from_utf8_lossy(&plain.stderr).contains("fenced ref"));

    // Someone breaks the claim: the remembered token is stale, the push is
    // refused and nothing moves.
    let admin = h.ssh_client_key();
    let out = collab(
        &h,
        &admin,
        &seed,
        &["issue", "break", &first[..8], "--reason", "agent is stuck"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("broke "), "{out:?}");
    let out = run(&["push", "origin", "HEAD:refs/heads/issue/first"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("is not live"), "{out:?}");
    assert_eq!(remote_ref(&h, "refs/heads/issue/first"), Some(pushed));

    // claim --wait on an issue someone else holds: exit 4 naming them.
    let other = h.authorized_key("other");
    let out = h.ssh_exec_as(&other, &format!("collab-lease acquire 'r' '{later}'"), b"");
    assert_eq!(out.code, 0, "{out:?}");
    let out = run(&["issue", "claim", &later[..8], "--wait", "1"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("is claimed by"), "{out:?}");

    // Nothing ready with these labels: exit 3, said on stderr.
    let out = run(&["issue", "next", "--label", "nosuch"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr, "nothing is ready with labels nosuch\n");
    let out = run(&["issue", "next", "--label", "nosuch", "--json"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(
        serde_json::from_str::<Value>(&out.stdout).unwrap()["status"],
        "empty"
    );

    // Unclaiming forgets a remembered token.
    let out = run(&["issue", "next", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let taken = v["issue"].as_str().unwrap().to_string();
    let out = run(&["issue", "unclaim", &taken[..8]]);
    assert_eq!(out.code, 0, "{out:?}");
    // (`git config` exits 1 when no token is left at all.)
    let remembered = std::process::Command::new("git")
        .current_dir(&clone)
        .args(["config", "--get-all", "remote.origin.collabLease"])
        .output()
        .unwrap();
    let remembered = String::from_utf8_lossy(&remembered.stdout);
    assert!(!remembered.contains(&taken), "{remembered}");
}

/// The documented agent loop with a lapse (issue 32): claim A, let it
/// expire, claim B, `git collab push` B's branch. The clone still
/// remembers A's token and sends it; the push works under B's live lease,
/// so A's stale token is ignored with a note naming how to forget it. A
/// ref tied to A by its name still needs A's live lease: the zombie stays
/// fenced out.
#[test]
fn a_lapsed_claim_does_not_block_the_next_push() {
    let h = ServerHarness::start();
    h.create_fenced_repo("r");
    let a = open(&h, "A", "");
    let b = open(&h, "B", "");
    let agent = h.authorized_key("agent");
    let clone = h.clone_as(&agent, "r", "agent");
    let run = |args: &[&str]| collab(&h, &agent, &clone, args);

    let out = run(&["issue", "claim", &a[..8], "--ttl", "1"]);
    assert_eq!(out.code, 0, "{out:?}");
    // Wait until A's lease has lapsed on the server.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let shown = h.ssh_exec(&format!("collab-lease show 'r' '{a}'"));
        if shown.code != 0 || shown.json()["holder"].is_null() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "A never lapsed: {shown:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let out = run(&["issue", "claim", &b[..8], "--ttl", "600"]);
    assert_eq!(out.code, 0, "{out:?}");
    let remembered = h.git(
        &clone,
        &["config", "--get-all", "remote.origin.collabLease"],
    );
    assert_eq!(
        String::from_utf8_lossy(&remembered.stdout).lines().count(),
        2,
        "both claims are remembered: {remembered:?}"
    );

    h.commit_file(&clone, "b.txt", b"b\n", "Work on B");
    let branch = format!("refs/heads/issue/{}", &b[..8]);
    let out = run(&["push", "origin", &format!("HEAD:{branch}")]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(remote_ref(&h, &branch).is_some(), "{out:?}");
    assert!(
        out.stderr
            .contains(&format!("lease token 1 for issue {} is not live", &a[..8])),
        "{out:?}"
    );
    assert!(out.stderr.contains("git collab issue unclaim"), "{out:?}");

    // A's own branch still needs A's live lease.
    let a_branch = format!("refs/heads/issue/{}", &a[..8]);
    let out = run(&["push", "origin", &format!("HEAD:{a_branch}")]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(remote_ref(&h, &a_branch).is_none());
    assert!(
        out.stderr
            .contains(&format!("fenced ref of issue {}", &a[..8])),
        "{out:?}"
    );
}

/// `issue next --json` carries what an agent needs to start in one call:
/// with the claim, the issue's body, labels and links (both ways), so no
/// `issue show` follows every claim.
#[test]
fn next_json_carries_the_issue_body_labels_and_links() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let work = open(
        &h,
        "Work",
        " --body 'Do the thing.\\nCarefully.' --label backend --label parser",
    );
    let later = open(&h, "Later", "");
    let nearby = open(&h, "Nearby", "");
    for (link, other) in [("blocks", &later), ("relates", &nearby)] {
        let out = h.ssh_exec(&format!("collab-issue link 'r' '{work}' {link} '{other}'"));
        assert_eq!(out.code, 0, "{out:?}");
    }
    let out = h.ssh_exec(&format!("collab-issue edit 'r' '{work}' --priority 1"));
    assert_eq!(out.code, 0, "{out:?}");

    let agent = h.authorized_key("agent");
    let clone = h.clone_as(&agent, "r", "agent");
    let out = collab(&h, &agent, &clone, &["issue", "next", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["status"], "acquired");
    assert_eq!(v["issue"], work.as_str());
    assert_eq!(v["title"], "Work");
    assert_eq!(v["body"], "Do the thing.\\nCarefully.");
    assert_eq!(v["labels"], serde_json::json!(["backend", "parser"]));
    assert_eq!(v["priority"], 1);
    assert!(v["token"].as_i64().is_some(), "{v}");
    let ids = |key: &str| -> Vec<String> {
        v["links"][key]
            .as_array()
            .unwrap_or_else(|| panic!("links.{key} in {v}"))
            .iter()
            .map(|l| l["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids("blocks"), vec![later.clone()]);
    assert_eq!(ids("relates"), vec![nearby.clone()]);
    assert!(ids("blocked_by").is_empty());
}
