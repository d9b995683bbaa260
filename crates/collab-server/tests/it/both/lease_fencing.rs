//! Fencing on pushes, end to end: `git push -o collab-lease=<issue>:<token>`
//! against the real server and its pre-receive hook, with a repository
//! policy that fences `refs/heads/issue/*`.
//!
//! The zombie scenario: agent A claims an issue and pushes its branch; its
//! lease is broken (as if it stalled), agent B claims the issue (token 2)
//! and pushes on top. A wakes up and pushes with its stale token 1: the
//! whole push is refused with one line naming B and token 2, and no ref
//! moves. B's pushes keep working; a push to a fenced ref without a token
//! is refused; a private repository answers a push carrying the option
//! exactly as a missing one does.
//!
//! A fenced ref named for an issue (`refs/heads/issue/<id>`, the default
//! `fenced_ref_issue`) wants the lease of that issue: a zombie whose other
//! lease is still live cannot use it on its lost issue's branch.

use collab_testkit as common;

use std::path::{Path, PathBuf};

use common::{fingerprint, ServerHarness, SshOutput};

struct Agent {
    key: PathBuf,
    fp: String,
    clone: PathBuf,
}

fn agent(h: &ServerHarness, name: &str) -> Agent {
    let key = h.authorized_key(name);
    let fp = fingerprint(&key);
    let clone = h.clone_as(&key, "r", name);
    Agent { key, fp, clone }
}

fn push(h: &ServerHarness, a: &Agent, options: &[String], refspecs: &[&str]) -> SshOutput {
    let mut args: Vec<String> = vec!["push".into()];
    for o in options {
        args.push("-o".into());
        args.push(o.clone());
    }
    args.push("origin".into());
    args.extend(refspecs.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = h.git_as(&a.key, &a.clone, &args);
    SshOutput::from_output(out)
}

fn lease_opt(issue: &str, token: i64) -> Vec<String> {
    vec![format!("collab-lease={issue}:{token}")]
}

fn commit(h: &ServerHarness, a: &Agent, file: &str, text: &str) -> String {
    let path = a.clone.join(file);
    std::fs::write(&path, text).unwrap();
    assert!(h.git_as(&a.key, &a.clone, &["add", file]).status.success());
    assert!(h
        .git_as(&a.key, &a.clone, &["commit", "-q", "-m", text])
        .status
        .success());
    let out = h.git_as(&a.key, &a.clone, &["rev-parse", "HEAD"]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `refname -> oid` on the server.
fn remote_ref(h: &ServerHarness, refname: &str) -> Option<String> {
    let out = h.ls_remote_as(&h.ssh_client_key(), "r");
    out.stdout
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .find(|(_, name)| *name == refname)
        .map(|(oid, _)| oid.to_string())
}

fn lease(h: &ServerHarness, key: &Path, args: &str) -> serde_json::Value {
    let out = h.ssh_exec_as(key, &format!("collab-lease {args}"), b"");
    assert_eq!(out.code, 0, "{out:?}");
    out.json()
}

/// The lines the server sent (git prints them as `remote: …`).
fn remote_errors(out: &SshOutput) -> Vec<String> {
    out.stderr
        .lines()
        .filter_map(|l| l.strip_prefix("remote: "))
        // git pads the remote's lines with spaces.
        .map(|l| l.trim_end().to_string())
        .collect()
}

#[test]
fn a_zombie_with_a_stale_token_cannot_push_and_its_successor_can() {
    let h = ServerHarness::start();
    let seed = h.create_fenced_repo("r");
    let opened = h.open_issue(&seed, "Write the parser");
    let short = opened.rsplit(' ').next().unwrap().to_string();

    let a = agent(&h, "agent-a");
    let b = agent(&h, "agent-b");
    let branch = "refs/heads/issue/parser";

    // A claims and pushes under its token.
    let v = lease(&h, &a.key, &format!("acquire 'r' '{short}' --ttl 600"));
    let issue = v["issue"].as_str().unwrap().to_string();
    assert_eq!(v["token"], 1);
    commit(&h, &a, "parser.rs", "a: first draft");
    let out = push(&h, &a, &lease_opt(&issue, 1), &[&format!("HEAD:{branch}")]);
    assert_eq!(out.code, 0, "{out:?}");

    // A fenced ref without a token: refused.
    commit(&h, &a, "parser.rs", "a: no token");
    let out = push(&h, &a, &[], &[&format!("HEAD:{branch}")]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        remote_errors(&out)
            .iter()
            .any(|l| l.contains(&format!("{branch}: fenced ref"))),
        "{out:?}"
    );

    // A stalls; an admin breaks its lease; B claims (token 2), builds on
    // A's pushed work and pushes.
    let admin = h.ssh_client_key();
    lease(
        &h,
        &admin,
        &format!("break 'r' '{issue}' --reason 'agent-a stalled'"),
    );
    let v = lease(&h, &b.key, &format!("acquire 'r' '{issue}' --ttl 600"));
    assert_eq!(
        (v["token"].as_i64(), v["holder"].as_str()),
        (Some(2), Some(b.fp.as_str()))
    );
    assert!(h
        .git_as(
            &b.key,
            &b.clone,
            &["fetch", "-q", "origin", &format!("{branch}:{branch}")]
        )
        .status
        .success());
    assert!(h
        .git_as(&b.key, &b.clone, &["checkout", "-q", "issue/parser"])
        .status
        .success());
    let b_tip = commit(&h, &b, "parser.rs", "b: finished");
    let out = push(
        &h,
        &b,
        &lease_opt(&issue[..8], 2),
        &[&format!("HEAD:{branch}")],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(remote_ref(&h, branch).as_deref(), Some(b_tip.as_str()));

    // A wakes up: it fetches, commits on top and pushes with its stale
    // token, also moving an unfenced branch. The whole push is refused.
    let main_before = remote_ref(&h, "refs/heads/main");
    assert!(h
        .git_as(&a.key, &a.clone, &["fetch", "-q", "origin"])
        .status
        .success());
    assert!(h
        .git_as(&a.key, &a.clone, &["reset", "-q", "--hard", &b_tip])
        .status
        .success());
    commit(&h, &a, "parser.rs", "a: zombie overwrite");
    let out = push(
        &h,
        &a,
        &lease_opt(&issue, 1),
        &[&format!("HEAD:{branch}"), "HEAD:refs/heads/main"],
    );
    assert_ne!(out.code, 0, "{out:?}");
    let errors = remote_errors(&out);
    assert_eq!(
        errors,
        [format!(
            "error: push refused: lease token 1 for issue {} is not live: the issue is held by {} with token 2",
            &issue[..8],
            b.fp
        )],
        "{out:?}"
    );
    assert_eq!(
        remote_ref(&h, branch).as_deref(),
        Some(b_tip.as_str()),
        "nothing moved"
    );
    assert_eq!(remote_ref(&h, "refs/heads/main"), main_before);

    // A token belongs to its holder: B's token does not let A push.
    let out = push(&h, &a, &lease_opt(&issue, 2), &[&format!("HEAD:{branch}")]);
    assert_ne!(out.code, 0, "{out:?}");
    // A malformed option is refused with a usage line.
    let out = push(
        &h,
        &a,
        &["collab-lease=nope".into()],
        &["HEAD:refs/heads/other"],
    );
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        remote_errors(&out)
            .iter()
            .any(|l| l.contains("expected collab-lease=<issue>:<token>")),
        "{out:?}"
    );
    assert_eq!(remote_ref(&h, "refs/heads/other"), None);

    // B releases: now nobody's token is live.
    lease(&h, &b.key, &format!("release 'r' '{issue}'"));
    commit(&h, &b, "parser.rs", "b: after release");
    let out = push(&h, &b, &lease_opt(&issue, 2), &[&format!("HEAD:{branch}")]);
    assert!(
        remote_errors(&out)
            .iter()
            .any(|l| l.contains("the issue has no live lease")),
        "{out:?}"
    );
    // Unfenced refs need no token.
    let out = push(&h, &b, &[], &["HEAD:refs/heads/b-scratch"]);
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn a_private_repository_answers_a_fenced_push_like_a_missing_one() {
    let h = ServerHarness::start();
    h.create_repo("private");
    let stranger = h.authorized_key("stranger");
    std::fs::write(
        h.repos_dir().join("private.git").join("collab-policy.toml"),
        "read = []\nwrite = []\nfenced_refs = [\"refs/heads/*\"]\n",
    )
    .unwrap();
    let work = h.temp_dir().join("work");
    std::fs::create_dir_all(&work).unwrap();
    assert!(h.git_as(&stranger, &work, &["init", "-q"]).status.success());
    std::fs::write(work.join("f"), "x").unwrap();
    assert!(h.git_as(&stranger, &work, &["add", "f"]).status.success());
    assert!(h
        .git_as(&stranger, &work, &["commit", "-q", "-m", "x"])
        .status
        .success());
    let attempt = |repo: &str| {
        let out = h.git_as(
            &stranger,
            &work,
            &[
                "push",
                "-o",
                "collab-lease=abcd:1",
                &h.repo_url(repo),
                "HEAD:refs/heads/main",
            ],
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).replace(repo, "<repo>"),
        )
    };
    let private = attempt("private");
    let missing = attempt("missing");
    assert_ne!(private.0, Some(0));
    assert_eq!(private, missing);
    assert!(private.1.contains("repository not found"), "{private:?}");
}

#[test]
fn a_bad_fenced_refs_policy_closes_the_repository() {
    let h = ServerHarness::start();
    h.create_repo("r");
    std::fs::write(
        h.repos_dir().join("r.git").join("collab-policy.toml"),
        "fenced_refs = [\"heads/*\"]\n",
    )
    .unwrap();
    // Fail closed: the policy does not parse, so the repository is closed
    // to everyone but admins, and nobody learns why over the wire.
    let writer = h.authorized_key("writer");
    let out = h.ls_remote_as(&writer, "r");
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("repository not found"), "{out:?}");
}

/// Issue 25: agent Z holds issue X and held issue Y, whose lease expired
/// and went to agent S. Z's live X token does not open Y's branch; S's Y
/// token does; Z's X token still opens X's branch.
#[test]
fn a_ref_named_for_an_issue_needs_that_issues_lease() {
    let h = ServerHarness::start();
    let seed = h.create_fenced_repo("r");
    let short = |opened: String| opened.rsplit(' ').next().unwrap().to_string();
    let x = short(h.open_issue(&seed, "Issue X"));
    let y = short(h.open_issue(&seed, "Issue Y"));

    let z = agent(&h, "agent-z");
    let s = agent(&h, "agent-s");
    let x_lease = lease(&h, &z.key, &format!("acquire 'r' '{x}' --ttl 600"));
    let x_token = x_lease["token"].as_i64().unwrap();
    let x_id = x_lease["issue"].as_str().unwrap().to_string();
    // Z's lease of Y expires (a short TTL); S waits for it and takes Y.
    let y_lease = lease(&h, &z.key, &format!("acquire 'r' '{y}' --ttl 1"));
    let y_id = y_lease["issue"].as_str().unwrap().to_string();
    let taken = lease(
        &h,
        &s.key,
        &format!("acquire 'r' '{y}' --ttl 600 --wait 120"),
    );
    assert_eq!(taken["holder"].as_str(), Some(s.fp.as_str()), "{taken}");
    let y_token = taken["token"].as_i64().unwrap();
    assert!(y_token > y_lease["token"].as_i64().unwrap());

    let y_branch = format!("refs/heads/issue/{}", &y_id[..8]);
    let s_tip = commit(&h, &s, "y.rs", "s: Y's work");
    let out = push(
        &h,
        &s,
        &lease_opt(&y_id, y_token),
        &[&format!("HEAD:{y_branch}")],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(remote_ref(&h, &y_branch).as_deref(), Some(s_tip.as_str()));

    // The zombie pushes onto Y's branch under its live X token: refused,
    // naming the rule, and nothing moves (a fast-forward, so that only
    // the fence can refuse it).
    ok_fetch_reset(&h, &z, &y_branch);
    commit(&h, &z, "y.rs", "z: zombie overwrite");
    let out = push(
        &h,
        &z,
        &lease_opt(&x_id, x_token),
        &[&format!("HEAD:{y_branch}")],
    );
    assert_ne!(out.code, 0, "{out:?}");
    assert_eq!(
        remote_errors(&out),
        [format!(
            "error: {y_branch}: fenced ref of issue {y8}: push with -o collab-lease={y8}:<token> \
             of your live lease of that issue (a lease of another issue does not count)",
            y8 = &y_id[..8]
        )],
        "{out:?}"
    );
    assert_eq!(remote_ref(&h, &y_branch).as_deref(), Some(s_tip.as_str()));
    // The full id in the ref name is the same issue.
    let full = format!("refs/heads/issue/{y_id}");
    let out = push(
        &h,
        &z,
        &lease_opt(&x_id, x_token),
        &[&format!("HEAD:{full}")],
    );
    assert_ne!(out.code, 0, "{out:?}");
    assert_eq!(remote_ref(&h, &full), None);

    // Z's X token still opens X's own branch.
    let x_branch = format!("refs/heads/issue/{}", &x_id[..8]);
    let out = push(
        &h,
        &z,
        &lease_opt(&x_id, x_token),
        &[&format!("HEAD:{x_branch}")],
    );
    assert_eq!(out.code, 0, "{out:?}");

    // S keeps working on Y.
    ok_fetch_reset(&h, &s, &y_branch);
    let s_tip = commit(&h, &s, "y.rs", "s: more");
    let out = push(
        &h,
        &s,
        &lease_opt(&y_id[..8], y_token),
        &[&format!("HEAD:{y_branch}")],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(remote_ref(&h, &y_branch).as_deref(), Some(s_tip.as_str()));
}

/// Bring `a`'s HEAD to the server's `refname`.
fn ok_fetch_reset(h: &ServerHarness, a: &Agent, refname: &str) {
    assert!(h
        .git_as(&a.key, &a.clone, &["fetch", "-q", "origin", refname])
        .status
        .success());
    assert!(h
        .git_as(&a.key, &a.clone, &["reset", "-q", "--hard", "FETCH_HEAD"])
        .status
        .success());
}
