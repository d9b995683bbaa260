//! `git-collab patch …` in server mode, end to end: the real CLI in clones
//! made over SSH, against the real server. Opening and revising go through
//! `refs/for/<base>` (`patch push`, `patch create`, `patch revise`), the
//! rest through `collab-patch`; text and `--json` output; a plain git
//! remote keeps the local mode and `patch push` says it needs a server.

use collab_testkit as common;
use collab_testkit::cli_bin;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{ServerHarness, SshOutput};
use serde_json::Value;

struct Agent {
    key: PathBuf,
    clone: PathBuf,
}

fn run(h: &ServerHarness, a: &Agent, args: &[&str]) -> SshOutput {
    let out = h
        .client_command(cli_bin(), &a.key, &a.clone)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run git-collab");
    SshOutput::from_output(out)
}

fn ok(h: &ServerHarness, a: &Agent, args: &[&str]) -> SshOutput {
    let out = run(h, a, args);
    assert_eq!(out.code, 0, "git-collab {args:?}: {out:?}");
    out
}

fn json(h: &ServerHarness, a: &Agent, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    ok(h, a, &args).json()
}

fn git(h: &ServerHarness, a: &Agent, args: &[&str]) {
    let out = h.git_as(&a.key, &a.clone, args);
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

fn commit(h: &ServerHarness, a: &Agent, file: &str, text: &str, message: &str) {
    std::fs::write(a.clone.join(file), text).unwrap();
    git(h, a, &["add", file]);
    git(h, a, &["commit", "-q", "-m", message]);
}

fn setup() -> (ServerHarness, Agent, Agent) {
    let h = ServerHarness::start();
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    let mk = |name: &str| {
        let key = h.authorized_key(name);
        let clone = h.clone_as(&key, "r", name);
        Agent { key, clone }
    };
    let (a, b) = (mk("alice"), mk("bob"));
    (h, a, b)
}

#[test]
fn the_cli_reviews_and_merges_on_the_server() {
    let (h, a, b) = setup();
    let issue = h.open_server_issue("r", "Greet in French");
    git(&h, &a, &["switch", "-q", "-c", "fr"]);
    commit(&h, &a, "fr.txt", "bonjour\n", "Add fr.txt\n\nSays hello.");

    // `patch push` opens the patch through refs/for/main.
    let pushed = json(&h, &a, &["patch", "push", "--issue", &issue[..8]]);
    let id = pushed["patch"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 40, "{pushed}");
    assert_eq!(pushed["revision"], 1);
    let id8 = &id[..8];

    // Listing and showing, text and JSON.
    let listed = ok(&h, &b, &["patch", "list"]);
    assert!(
        listed.stdout.contains(id8) && listed.stdout.contains("Add fr.txt"),
        "{listed:?}"
    );
    let rows = json(&h, &b, &["patch", "list"]);
    assert_eq!(rows[0]["id"], id.as_str());
    let shown = ok(&h, &b, &["patch", "show", id8]);
    assert!(shown.stdout.contains("Says hello."), "{shown:?}");
    assert!(
        shown.stdout.contains(&issue[..8]),
        "linked issue: {shown:?}"
    );

    // Review, revise, diff and interdiff.
    ok(
        &h,
        &b,
        &[
            "patch",
            "review",
            id8,
            "--request-changes",
            "-m",
            "Add a comma",
        ],
    );
    std::fs::write(a.clone.join("fr.txt"), "bonjour,\n").unwrap();
    git(&h, &a, &["commit", "-q", "-a", "--amend", "--no-edit"]);
    let revised = ok(&h, &a, &["patch", "revise", id8]);
    assert!(
        revised
            .stdout
            .contains(&format!("revised {id8} (revision 2)")),
        "{revised:?}"
    );
    let inter = ok(&h, &b, &["patch", "interdiff", id8, "1", "2"]);
    assert!(
        inter.stdout.contains("-bonjour") && inter.stdout.contains("+bonjour,"),
        "{inter:?}"
    );
    let diff = json(&h, &b, &["patch", "diff", id8]);
    assert_eq!(diff["revision"], 2);
    ok(
        &h,
        &b,
        &[
            "patch", "comment", id8, "-m", "good", "--path", "fr.txt", "--line", "1",
        ],
    );
    let approved = ok(&h, &b, &["patch", "review", id8, "--approve"]);
    assert!(
        approved
            .stdout
            .contains(&format!("approved {id8} (revision 2)")),
        "{approved:?}"
    );
    let shown = ok(&h, &b, &["patch", "show", id8]);
    assert!(
        shown.stdout.contains("merge: ready") && shown.stdout.contains("on fr.txt:1"),
        "{shown:?}"
    );

    // Checkout fetches the revision from the server.
    let checked = json(&h, &b, &["patch", "checkout", id8]);
    assert_eq!(checked["revision"], 2);
    assert_eq!(
        std::fs::read_to_string(b.clone.join("fr.txt")).unwrap(),
        "bonjour,\n"
    );

    // The server merges; B's local main is not touched.
    let merged = ok(&h, &b, &["patch", "merge", id8]);
    assert!(
        merged
            .stdout
            .contains("into main on the server (fast-forward)"),
        "{merged:?}"
    );
    let shown = json(&h, &a, &["patch", "show", id8]);
    assert_eq!(shown["status"], "merged");
    let again = run(&h, &b, &["patch", "merge", id8]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("merged"), "{again:?}");

    // A refused push says why, in one line.
    let nothing = run(&h, &a, &["patch", "push", "--base", "nope"]);
    assert_ne!(nothing.code, 0, "{nothing:?}");
    assert!(nothing.stderr.contains("error:"), "{nothing:?}");
}

#[test]
fn a_plain_git_remote_keeps_the_local_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let bare = root.join("plain.git");
    let clone = root.join("work");
    let git = |dir: &Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", root)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    git(root, &["init", "-q", "--bare", "-b", "main", "plain.git"]);
    git(root, &["clone", "-q", bare.to_str().unwrap(), "work"]);
    let out = std::process::Command::new(cli_bin())
        .current_dir(&clone)
        .env("HOME", root)
        .args(["patch", "push"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("needs a git-collab server"), "{stderr}");
}

#[test]
fn sync_in_server_mode_keeps_local_patch_dags_at_home() {
    let (h, a, _b) = setup();
    ok(&h, &a, &["key", "generate"]);
    git(&h, &a, &["switch", "-q", "-c", "local"]);
    commit(&h, &a, "l.txt", "local\n", "A local-only patch");
    ok(
        &h,
        &a,
        &["patch", "--mode", "local", "create", "-t", "Local only"],
    );
    // The server holds patches: sync fetches and joins, never pushes them.
    let synced = ok(&h, &a, &["sync"]);
    assert!(
        !synced.stdout.contains("refs/collab/patches")
            && !synced.stdout.contains("refs/collab/revisions"),
        "{synced:?}"
    );
    let remote = h.ls_remote_as(&a.key, "r");
    assert!(
        !remote.stdout.contains("refs/collab/patches/"),
        "{}",
        remote.stdout
    );
}

/// Issue 50 item 6: a CI step sets a check with `git collab check set`
/// (a description with spaces needs no ssh quoting), `check list` shows it,
/// `patch show` shows the checks, the required checks still missing and a
/// queued merge, and `git collab events` names the actor by display name.
#[test]
fn ci_sets_checks_with_the_cli_and_patch_show_tells_what_merging_waits_for() {
    let (h, a, b) = setup();
    collab_testkit::review::write_policy(
        &h,
        "merge = { required_checks = [\"ci/test\", \"lint\"] }\n",
    );
    git(&h, &a, &["switch", "-q", "-c", "de"]);
    commit(&h, &a, "de.txt", "hallo\n", "Add de.txt");
    let pushed = json(&h, &a, &["patch", "push"]);
    let id = pushed["patch"].as_str().unwrap().to_string();
    let id8 = &id[..8];

    let set = ok(
        &h,
        &a,
        &[
            "check",
            "set",
            "HEAD",
            "ci/test",
            "--state",
            "pending",
            "--description",
            "2 suites running",
        ],
    );
    assert!(set.stdout.starts_with("ci/test pending on "), "{set:?}");
    ok(&h, &a, &["patch", "merge", id8, "--when-green"]);
    let shown = ok(&h, &b, &["patch", "show", id8]);
    for want in [
        "checks:",
        "pending  ci/test  2 suites running",
        "merge: not yet",
        "required checks not reported yet: lint",
        "queued: revision 1 merges when green",
    ] {
        assert!(shown.stdout.contains(want), "{want:?} in {shown:?}");
    }

    ok(
        &h,
        &a,
        &[
            "check",
            "set",
            "HEAD",
            "ci/test",
            "--state",
            "failure",
            "--description",
            "2 tests failed",
        ],
    );
    let listed = json(&h, &b, &["check", "list", id8]);
    assert_eq!(listed["checks"][0]["name"], "ci/test");
    assert_eq!(listed["checks"][0]["description"], "2 tests failed");
    let text = ok(&h, &a, &["check", "list"]);
    assert!(
        text.stdout.contains("failure  ci/test  2 tests failed"),
        "{text:?}"
    );
    let bad = run(
        &h,
        &a,
        &[
            "check",
            "set",
            "no-such-rev",
            "ci/test",
            "--state",
            "success",
        ],
    );
    assert_ne!(bad.code, 0, "{bad:?}");
    assert!(bad.stderr.contains("no commit 'no-such-rev'"), "{bad:?}");

    // Events name the actor as every other text does.
    let events = ok(&h, &b, &["events"]);
    let line = events
        .stdout
        .lines()
        .find(|l| l.contains("check.updated"))
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(!line.contains("SHA256:"), "{line}");
}
