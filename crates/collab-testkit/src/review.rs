//! Helpers for the push-to-review tests: two agents (alice and bob), each
//! with an authorized key and a clone of repository `r`, whose `main` holds
//! one commit; git run as an agent; commits made in an agent's clone.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{ServerHarness, SshOutput};

/// One agent: its key and its clone of `r`.
pub struct Agent {
    pub key: PathBuf,
    pub clone: PathBuf,
}

/// An agent with a key of its own, authorized, and a clone of `r`.
pub fn agent(h: &ServerHarness, name: &str) -> Agent {
    let key = h.authorized_key(name);
    let clone = h.clone_as(&key, "r", name);
    Agent { key, clone }
}

/// A server with repository `r` (`main`: one commit), and alice and bob.
pub fn setup() -> (ServerHarness, Agent, Agent) {
    let h = ServerHarness::start();
    h.create_repo("r");
    let seed = h.clone_repo("r", "seed");
    h.commit_file(&seed, "README", b"hello\n", "Initial commit");
    h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    let a = agent(&h, "alice");
    let b = agent(&h, "bob");
    (h, a, b)
}

/// `git ARGS` in the agent's clone, as the agent.
pub fn git(h: &ServerHarness, a: &Agent, args: &[&str]) -> SshOutput {
    SshOutput::from_output(h.git_as(&a.key, &a.clone, args))
}

/// [`git`], which must succeed.
pub fn ok(h: &ServerHarness, a: &Agent, args: &[&str]) -> SshOutput {
    let out = git(h, a, args);
    assert_eq!(out.code, 0, "git {args:?}: {out:?}");
    out
}

/// Write `file`, commit it with `message`; the new commit's id.
pub fn commit(h: &ServerHarness, a: &Agent, file: &str, text: &str, message: &str) -> String {
    std::fs::write(a.clone.join(file), text).unwrap();
    ok(h, a, &["add", file]);
    ok(h, a, &["commit", "-q", "-m", message]);
    ok(h, a, &["rev-parse", "HEAD"]).stdout.trim().to_string()
}

/// `collab-patch ARGS` as the agent.
pub fn patch(h: &ServerHarness, a: &Agent, args: &str) -> SshOutput {
    h.ssh_exec_as(&a.key, &format!("collab-patch {args}"), b"")
}

/// Set check `name` on `commit` of `r` to `state`, as the admin (CI).
pub fn check_set(h: &ServerHarness, commit: &str, name: &str, state: &str) {
    let out = h.ssh_exec(&format!(
        "collab-check set 'r' {commit} {name} --state {state}"
    ));
    assert_eq!(out.code, 0, "{out:?}");
}

/// The events of `kind` so far, oldest first.
pub fn events(h: &ServerHarness, kind: &str) -> Vec<Value> {
    let out = h.ssh_exec("collab-events watch --since 1 --no-follow");
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == kind)
        .collect()
}

/// Hang guard of [`wait_until`] (not a timing assertion: the server's
/// drivers look about every second).
pub const WAIT_LIMIT: Duration = Duration::from_secs(90);

/// Wait until `f` holds, or fail after [`WAIT_LIMIT`].
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < WAIT_LIMIT, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Where `branch` of `r` points on the server.
pub fn server_tip(h: &ServerHarness, branch: &str) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(h.repos_dir().join("r.git"))
        .args(["rev-parse", &format!("refs/heads/{branch}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Push the agent's HEAD to `refs/for/main` (with `extra` push options);
/// the new patch's full id.
pub fn push_for_review(h: &ServerHarness, a: &Agent, extra: &[&str]) -> String {
    let mut args = vec!["push"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["origin", "HEAD:refs/for/main"]);
    let out = ok(h, a, &args);
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("remote: patch "))
        .unwrap_or_else(|| panic!("no patch line: {out:?}"));
    let short = line.split("remote: patch ").nth(1).unwrap()[..8].to_string();
    let listed = patch(h, a, "list 'r' --state all").json();
    listed["patches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_string())
        .find(|id| id.starts_with(&short))
        .expect("the pushed patch is listed")
}

/// Replace repository `r`'s `collab-policy.toml` with `text` while the
/// server runs: written beside it and renamed into place, as an editor
/// saves, so the server never reads it empty or half-written. (Written in
/// place, the server could read the file between its truncation and the
/// write: a policy with no merge rule, under which a patch waiting to merge
/// when green is green at once.)
pub fn write_policy(h: &ServerHarness, text: impl AsRef<[u8]>) {
    crate::files::write_live(&h.repos_dir().join("r.git/collab-policy.toml"), text);
}

/// Push a patch for review from a new branch `big` of `a`'s clone whose
/// one file is about `bytes` of quotes and backslashes (its diff's JSON
/// reply is twice that): the patch's full id.
pub fn big_patch(h: &ServerHarness, a: &Agent, bytes: usize) -> String {
    ok(h, a, &["switch", "-q", "-c", "big"]);
    let line = format!("{}\n", "\"\\".repeat(30));
    commit(
        h,
        a,
        "big.txt",
        &line.repeat(bytes / line.len()),
        "Add a big file",
    );
    ok(h, a, &["push", "-q", "origin", "HEAD:refs/for/main"]);
    let listed = patch(h, a, "list 'r' --state all");
    assert_eq!(listed.code, 0, "{listed:?}");
    listed.json()["patches"][0]["id"]
        .as_str()
        .expect("the pushed patch is listed")
        .to_string()
}
