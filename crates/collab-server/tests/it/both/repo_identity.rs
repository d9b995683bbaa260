//! Repository identity (issue 25): events carry the lasting id of the
//! repository they were written for, so a new repository that reuses a
//! deleted or renamed-away private repository's name never shows its
//! predecessor's history to its own readers; an administrator still sees
//! it, and a renamed repository's readers keep its history under the new
//! name. Real server, real `ssh`.

use collab_testkit as common;

use std::path::Path;

use common::{fingerprint, ServerHarness};
use serde_json::Value;

const SECRET: &str = "SECRET-launch-codes";

fn run_ok(h: &ServerHarness, cmd: &str) -> Value {
    let out = h.ssh_exec(cmd);
    assert_eq!(out.code, 0, "{cmd}: {out:?}\n{}", h.log());
    if out.stdout.trim().is_empty() {
        Value::Null
    } else {
        out.json()
    }
}

/// Only administrators (and `readers`) may read `repo`.
fn restrict(h: &ServerHarness, repo: &str, readers: &[&Path]) {
    let list: Vec<String> = readers
        .iter()
        .map(|k| format!("\"{}\"", fingerprint(k)))
        .collect();
    std::fs::write(
        h.repos_dir()
            .join(format!("{repo}.git"))
            .join("collab-policy.toml"),
        format!("read = [{}]\nwrite = []\n", list.join(", ")),
    )
    .unwrap();
}

/// A private repository `name` with an issue titled [`SECRET`].
fn private_with_secret(h: &ServerHarness, name: &str) {
    run_ok(h, &format!("collab-repo create '{name}'"));
    restrict(h, name, &[]);
    run_ok(
        h,
        &format!("collab-issue open '{name}' --title '{SECRET} in {name}'"),
    );
}

/// `collab-events watch ARGS --no-follow` as `key`: its lines.
fn replay(h: &ServerHarness, key: &Path, args: &str) -> Vec<Value> {
    let out = h.ssh_exec_as(
        key,
        &format!("collab-events watch {args} --since 0 --no-follow"),
        b"",
    );
    assert_eq!(out.code, 0, "{args}: {out:?}");
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn secret_events(events: &[Value], repo: &str) -> usize {
    events
        .iter()
        .filter(|e| e.to_string().contains(&format!("{SECRET} in {repo}")))
        .count()
}

#[test]
fn a_reused_name_never_replays_its_deleted_predecessors_events() {
    let h = ServerHarness::start();
    let admin = h.ssh_client_key();
    let user = h.authorized_key("user");
    private_with_secret(&h, "p");
    run_ok(&h, "collab-repo delete 'p' --confirm 'p'");
    // A new repository under the same name, readable by the user.
    run_ok(&h, "collab-repo create 'p'");
    run_ok(&h, "collab-issue open 'p' --title 'fresh start'");

    for args in ["'p'", ""] {
        let theirs = replay(&h, &user, args);
        assert_eq!(secret_events(&theirs, "p"), 0, "{args}: {theirs:?}");
        assert!(
            theirs.iter().all(|e| e["type"] != "repo.deleted"),
            "{theirs:?}"
        );
        // They do see the new repository's own history.
        assert!(
            theirs
                .iter()
                .any(|e| e["type"] == "issue.opened" && e.to_string().contains("fresh start")),
            "{args}: {theirs:?}"
        );
    }
    // The administrator still sees the deleted repository's events, under a
    // different id than the new repository's.
    let all = replay(&h, &admin, "");
    assert_eq!(secret_events(&all, "p"), 1, "{all:?}");
    let old = all.iter().find(|e| e.to_string().contains(SECRET)).unwrap();
    let new = all.iter().rfind(|e| e["type"] == "repo.created").unwrap();
    assert!(old["repo_id"].is_string() && new["repo_id"].is_string());
    assert_ne!(old["repo_id"], new["repo_id"]);
    // Asking for the name means the repository that has it now.
    assert_eq!(secret_events(&replay(&h, &admin, "'p'"), "p"), 0);
}

#[test]
fn a_renamed_repositorys_history_follows_it_and_not_the_old_name() {
    let h = ServerHarness::start();
    let admin = h.ssh_client_key();
    let user = h.authorized_key("user");
    let reader = h.authorized_key("reader");
    private_with_secret(&h, "q");
    run_ok(&h, "collab-repo rename 'q' 'q2'");
    restrict(&h, "q2", &[&reader]);
    // A new `q` that the user may read.
    run_ok(&h, "collab-repo create 'q'");

    for args in ["'q'", ""] {
        let theirs = replay(&h, &user, args);
        assert_eq!(secret_events(&theirs, "q"), 0, "{args}: {theirs:?}");
        assert!(
            theirs.iter().any(|e| e["type"] == "repo.created"),
            "{theirs:?}"
        );
    }
    // The renamed repository's reader keeps its whole history, the events
    // written under the old name included.
    let kept = replay(&h, &reader, "'q2'");
    assert_eq!(secret_events(&kept, "q"), 1, "{kept:?}");
    assert!(kept.iter().any(|e| e["type"] == "repo.renamed"), "{kept:?}");
    assert!(kept.iter().all(|e| e["repo_id"] == kept[0]["repo_id"]));
    assert_eq!(secret_events(&replay(&h, &reader, ""), "q"), 1);
    assert_eq!(secret_events(&replay(&h, &admin, ""), "q"), 1);
}
