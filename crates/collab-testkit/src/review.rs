//! Helpers for the push-to-review tests: two agents (alice and bob), each
//! with an authorized key and a clone of repository `r`, whose `main` holds
//! one commit; git run as an agent; commits made in an agent's clone.

use std::path::PathBuf;

use crate::{ServerHarness, SshOutput};

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
