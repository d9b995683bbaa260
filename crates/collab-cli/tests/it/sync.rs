//! Two clones of a bare remote (file://), each with its own signing key,
//! make concurrent changes and sync through the remote in several orders;
//! both must end with byte-identical `issue list --json` and
//! `issue show --json` output, with every change kept.

use collab_testkit::cli as cli_support;

use cli_support::{Clone, World};
use serde_json::Value;

/// `issue list --all --json` plus `issue show --json` of every issue.
fn snapshot(c: &Clone) -> String {
    let list = c.ok(&["issue", "list", "--all", "--json"]);
    let ids: Vec<String> = serde_json::from_str::<Value>(&list)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect();
    let mut out = list;
    for id in ids {
        out.push_str(&c.ok(&["issue", "show", &id, "--json"]));
    }
    out
}

fn show(c: &Clone, id: &str) -> Value {
    c.json(&["issue", "show", id, "--json"])
}

fn comment_bodies(issue: &Value) -> Vec<String> {
    let mut bodies: Vec<String> = issue["comments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["body"].as_str().unwrap().to_string())
        .collect();
    bodies.sort();
    bodies
}

/// Both clones share issue X, then change it (and open more) concurrently.
fn diverge(a: &Clone, b: &Clone) -> (String, String, String) {
    let x = a.open("Shared issue", &["-b", "shared"]);
    a.ok(&["sync"]);
    b.ok(&["sync"]);
    assert_eq!(snapshot(a), snapshot(b), "the first sync hands X over");

    a.ok(&["issue", "comment", &x, "-m", "from a"]);
    a.ok(&["issue", "label", &x, "--add", "bug"]);
    let za = a.open("Only in a", &["-l", "a"]);
    b.ok(&["issue", "comment", &x[..8], "-m", "from b"]);
    b.ok(&["issue", "label", &x[..6], "--add", "ui"]);
    b.ok(&["issue", "close", &x, "-r", "fixed in b"]);
    let yb = b.open("Only in b", &[]);
    (x, za, yb)
}

fn assert_merged(a: &Clone, b: &Clone, x: &str, za: &str, yb: &str) {
    let snap_a = snapshot(a);
    assert_eq!(
        snap_a,
        snapshot(b),
        "both clones materialize the same state"
    );
    let issue = show(a, x);
    assert_eq!(comment_bodies(&issue), vec!["from a", "from b"]);
    assert_eq!(issue["labels"], serde_json::json!(["bug", "ui"]));
    assert_eq!(issue["status"], "closed");
    assert_eq!(issue["closed_reason"], "fixed in b");
    for id in [za, yb] {
        assert_eq!(show(b, id)["status"], "open");
        assert_eq!(show(a, id)["id"], id);
    }
    let list: Value = serde_json::from_str(&a.ok(&["issue", "list", "--all", "--json"])).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 3);
}

#[test]
fn concurrent_changes_converge_when_a_syncs_first() {
    let w = World::new();
    let (a, b) = (w.clone("a"), w.clone("b"));
    let (x, za, yb) = diverge(&a, &b);
    a.ok(&["sync"]);
    let out = b.ok(&["sync"]);
    assert!(
        out.contains("1 merged"),
        "b joins the two histories of X: {out}"
    );
    a.ok(&["sync"]);
    assert_merged(&a, &b, &x, &za, &yb);
}

#[test]
fn concurrent_changes_converge_when_b_syncs_first() {
    let w = World::new();
    let (a, b) = (w.clone("a"), w.clone("b"));
    let (x, za, yb) = diverge(&a, &b);
    b.ok(&["sync", "origin"]);
    a.ok(&["sync"]);
    b.ok(&["sync"]);
    assert_merged(&a, &b, &x, &za, &yb);

    // The bare remote itself materializes the same list.
    let bare = w.collab_bare(&["issue", "list", "--all", "--json"]);
    assert!(
        bare.status.success(),
        "{}",
        String::from_utf8_lossy(&bare.stderr)
    );
    assert_eq!(
        String::from_utf8(bare.stdout).unwrap(),
        a.ok(&["issue", "list", "--all", "--json"])
    );
}

#[test]
fn repeated_divergence_keeps_converging() {
    let w = World::new();
    let (a, b) = (w.clone("a"), w.clone("b"));
    let (x, za, yb) = diverge(&a, &b);
    a.ok(&["sync"]);
    // a changes X again before b's merge reaches it: a second merge.
    a.ok(&["issue", "edit", &x, "-t", "Renamed in a"]);
    b.ok(&["sync"]);
    let out = a.ok(&["sync"]);
    assert!(
        out.contains("1 merged"),
        "a joins its edit with b's merge: {out}"
    );
    b.ok(&["sync"]);
    assert_eq!(snapshot(&a), snapshot(&b));
    let issue = show(&a, &x);
    assert_eq!(comment_bodies(&issue), vec!["from a", "from b"]);
    assert_eq!(issue["labels"], serde_json::json!(["bug", "ui"]));
    assert_eq!(issue["title"], "Renamed in a");
    assert_eq!(issue["status"], "closed");
    let _ = (za, yb);
    // Syncing again changes nothing.
    let before = a.refs();
    let out = a.ok(&["sync"]);
    assert!(out.contains("0 new, 0 fast-forwarded, 0 merged"), "{out}");
    assert_eq!(before, a.refs());
}

#[test]
fn sync_retries_once_when_the_remote_moves_during_the_round() {
    let w = World::new();
    let (a, b) = (w.clone("a"), w.clone("b"));
    let x = a.open("Raced", &[]);
    a.ok(&["sync"]);
    b.ok(&["sync"]);
    a.ok(&["issue", "comment", &x, "-m", "a's"]);
    b.ok(&["issue", "comment", &x, "-m", "b's"]);

    // A `git` wrapper first in a's PATH: on a's first push it lets b sync
    // (moving the remote between a's fetch and a's push), then runs git.
    let real_git = which_git();
    let bin = w.tmp.path().join("wrap");
    std::fs::create_dir_all(&bin).unwrap();
    let marker = w.tmp.path().join("raced");
    let script = format!(
        "#!/bin/sh\n\
         case \" $* \" in *\" push \"*)\n\
           if [ ! -e '{marker}' ]; then\n\
             touch '{marker}'\n\
             (cd '{bdir}' && HOME='{bhome}' XDG_CONFIG_HOME='{bhome}/.config' PATH='{path}' '{collab}' sync >/dev/null) || exit 99\n\
           fi;;\n\
         esac\n\
         exec '{real_git}' \"$@\"\n",
        marker = marker.display(),
        bdir = b.dir.display(),
        bhome = b.home.display(),
        path = std::env::var("PATH").unwrap(),
        collab = cli_support::cli_bin(),
        real_git = real_git,
    );
    let wrapper = bin.join("git");
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();

    let mut cmd = std::process::Command::new(cli_support::cli_bin());
    cmd.arg("sync");
    a.env(&mut cmd);
    cmd.env(
        "PATH",
        format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
    );
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(marker.exists(), "the wrapper raced b's sync");
    assert!(
        stdout.contains("retried"),
        "a's first push was rejected: {stdout}"
    );

    b.ok(&["sync"]);
    assert_eq!(snapshot(&a), snapshot(&b));
    assert_eq!(comment_bodies(&show(&b, &x)), vec!["a's", "b's"]);
}

#[test]
fn sync_with_an_unknown_or_broken_remote_is_a_clear_error() {
    let w = World::new();
    let a = w.clone("a");
    let err = a.fails(&["sync", "nope"]);
    assert_eq!(err, "error: no remote named 'nope'");
    a.git(&["remote", "add", "gone", "/nonexistent/repo.git"]);
    let err = a.fails(&["sync", "gone"]);
    assert!(err.starts_with("error: git fetch gone failed: "), "{err}");
    assert!(err.contains("/nonexistent/repo.git"), "{err}");
}

#[test]
fn sync_with_nothing_on_either_side_succeeds() {
    let w = World::new();
    let a = w.clone("a");
    let out = a.ok(&["sync"]);
    assert!(out.contains("0 new, 0 fast-forwarded, 0 merged"), "{out}");
    assert!(a
        .json(&["issue", "list", "--json"])
        .as_array()
        .unwrap()
        .is_empty());
}

fn which_git() -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
