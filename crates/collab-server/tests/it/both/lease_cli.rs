//! `git-collab issue claim|unclaim|renew|claims` end to end: the real CLI in a
//! clone made over SSH, reaching the real server through the real `ssh`
//! (`GIT_COLLAB_SSH_COMMAND` picks the key, as a user's setup would).

use collab_testkit as common;

use std::path::{Path, PathBuf};

use common::{fingerprint, ServerHarness, SshOutput};
use serde_json::Value;

struct Fixture {
    h: ServerHarness,
    clone: PathBuf,
    /// Full id of an open issue on the server.
    issue: String,
}

fn setup() -> Fixture {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "work");
    let issue = h.open_issue(&clone, "Claim me");
    assert_eq!(issue.len(), 40, "{issue:?}");
    Fixture { h, clone, issue }
}

/// Run `git-collab ARGS` in `dir` as `key`.
fn collab(h: &ServerHarness, key: &Path, dir: &Path, args: &[&str]) -> SshOutput {
    let out = h
        .client_command(collab_testkit::bin("git-collab"), key, dir)
        .args(args)
        .output()
        .expect("run git-collab");
    SshOutput::from_output(out)
}

impl Fixture {
    fn short(&self) -> &str {
        &self.issue[..8]
    }

    fn run(&self, key: &Path, args: &[&str]) -> SshOutput {
        collab(&self.h, key, &self.clone, args)
    }

    fn ok(&self, key: &Path, args: &[&str]) -> String {
        let out = self.run(key, args);
        assert_eq!(out.code, 0, "{args:?}: {out:?}");
        assert_eq!(out.stderr, "", "{args:?}: {out:?}");
        out.stdout
    }

    fn json(&self, key: &Path, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&self.ok(key, &args)).unwrap()
    }
}

#[test]
fn claim_then_claims_lists_it() {
    let f = setup();
    let key = f.h.ssh_client_key();
    let out = f.ok(&key, &["issue", "claim", &f.issue[..6], "--ttl", "600"]);
    let expires = out
        .strip_prefix(&format!("claimed {} (expires ", f.short()))
        .and_then(|rest| rest.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(
        chrono::DateTime::parse_from_rfc3339(expires).is_ok(),
        "{expires}"
    );

    let listed = f.ok(&key, &["issue", "claims"]);
    let fp = fingerprint(&key);
    assert!(
        // The holder by display name (the key's comment); JSON keeps `fp`.
        listed.starts_with(&format!("{}  client  token 1  since ", f.short())),
        "{listed:?}"
    );
    assert!(
        listed.ends_with(&format!("expires {expires}\n")),
        "{listed:?}"
    );
    assert_eq!(listed.lines().count(), 1);

    let v = f.json(&key, &["issue", "claims"]);
    assert_eq!(v["leases"][0]["issue"], f.issue.as_str());
    assert_eq!(v["leases"][0]["holder"], fp.as_str());
}

#[test]
fn claim_without_ttl_is_an_assignment() {
    let f = setup();
    let key = f.h.ssh_client_key();
    assert_eq!(
        f.ok(&key, &["issue", "claim", f.short()]),
        format!("claimed {} (no expiry)\n", f.short())
    );
}

#[test]
fn claim_conflict_exit_code_4_names_holder() {
    let f = setup();
    let first = f.h.ssh_client_key();
    let second = f.h.authorized_key("second");
    f.ok(&first, &["issue", "claim", &f.issue]);
    let out = f.run(&second, &["issue", "claim", f.short(), "--ttl", "60"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        format!("issue {} is claimed by client\n", f.short())
    );
    // Unclaiming someone else's claim is a conflict too.
    let out = f.run(&second, &["issue", "unclaim", f.short()]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("is claimed by"), "{out:?}");
}

#[test]
fn unclaim_frees() {
    let f = setup();
    let first = f.h.ssh_client_key();
    let second = f.h.authorized_key("second");
    f.ok(&first, &["issue", "claim", f.short()]);
    assert_eq!(
        f.ok(&first, &["issue", "unclaim", f.short()]),
        format!("unclaimed {}\n", f.short())
    );
    assert_eq!(f.ok(&first, &["issue", "claims"]), "");
    // Unclaiming again is not an error (a retried command must not fail).
    f.ok(&first, &["issue", "unclaim", f.short()]);
    let v = f.json(&second, &["issue", "claim", f.short()]);
    assert_eq!(v["holder"], fingerprint(&second).as_str());
    assert_eq!(v["token"], 2, "a new tenure, a larger token");
}

#[test]
fn renew_updates_expiry() {
    let f = setup();
    let key = f.h.ssh_client_key();
    let claimed = f.json(&key, &["issue", "claim", f.short(), "--ttl", "60"]);
    let renewed = f.json(&key, &["issue", "renew", f.short(), "--ttl", "7200"]);
    assert_eq!(renewed["status"], "renewed");
    assert_eq!(renewed["token"], claimed["token"]);
    let at = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v["expires_at"].as_str().unwrap())
            .unwrap()
            .timestamp()
    };
    assert!(
        at(&renewed) >= at(&claimed) + 7200 - 60,
        "{claimed} {renewed}"
    );
    let text = f.ok(&key, &["issue", "renew", f.short(), "--ttl", "600"]);
    assert!(
        text.starts_with(&format!("renewed {} (expires ", f.short())),
        "{text:?}"
    );
    // Someone else cannot renew it; renewing needs a TTL.
    let other = f.h.authorized_key("other");
    let out = f.run(&other, &["issue", "renew", f.short(), "--ttl", "60"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert_eq!(
        out.stderr,
        format!("issue {} is claimed by client\n", f.short())
    );
    let out = f.run(&key, &["issue", "renew", f.short()]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with("error: "), "{out:?}");
}

#[test]
fn claim_json_passthrough_is_server_json() {
    let f = setup();
    let key = f.h.ssh_client_key();
    let out = f.ok(&key, &["issue", "claim", f.short(), "--json"]);
    // Re-acquiring is idempotent, so the server answers the same again
    // (but for the renewal time it now records).
    let direct =
        f.h.ssh_exec(&format!("collab-lease acquire 'r' '{}'", f.issue));
    assert_eq!(direct.code, 0, "{direct:?}");
    assert_eq!(out.lines().count(), 1, "one compact line: {out}");
    let mut ours: Value = serde_json::from_str(&out).unwrap();
    let mut theirs: Value = serde_json::from_str(&direct.stdout).unwrap();
    ours["renewed_at"] = Value::Null;
    theirs["renewed_at"] = Value::Null;
    assert_eq!(ours, theirs, "the CLI prints the server's JSON as it is");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "acquired");
    assert_eq!(v["issue"], f.issue.as_str());

    // A conflict in --json mode: the server's JSON on stdout, exit 4.
    let second = f.h.authorized_key("second");
    let out = f.run(&second, &["issue", "claim", f.short(), "--json"]);
    assert_eq!(out.code, 4, "{out:?}");
    let v = out.json();
    assert_eq!(v["status"], "held");
    assert_eq!(v["holder"], fingerprint(&key).as_str());
}

#[test]
fn claim_against_repo_without_issue_fails_cleanly() {
    let f = setup();
    let key = f.h.ssh_client_key();
    f.h.create_repo("empty");
    let empty = f.h.clone_repo("empty", "empty-clone");
    let out = collab(&f.h, &key, &empty, &["issue", "claim", f.short()]);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (1, "", "error: issue not found\n")
    );
    // The issue's claim in `r` is untouched by that.
    assert_eq!(f.ok(&key, &["issue", "claims"]), "");

    // Refused before anything is sent.
    let out = f.run(&key, &["issue", "claim", "not-hex"]);
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "error: invalid issue id 'not-hex': expected 4 to 40 hex digits\n"
    );
    for ttl in ["0", "-5", "315360001", "soon"] {
        let out = f.run(&key, &["issue", "claim", f.short(), "--ttl", ttl]);
        assert_eq!(out.code, 1, "{out:?}");
        assert!(out.stderr.starts_with("error: "), "{out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    }
    // The longest TTL the client accepts, the server accepts too.
    let v = f.json(&key, &["issue", "claim", f.short(), "--ttl", "315360000"]);
    assert_eq!(v["status"], "acquired");
}

#[test]
fn remote_flag_picks_the_server() {
    let f = setup();
    let key = f.h.ssh_client_key();
    let url = f.h.repo_url("r");
    f.h.git(&f.clone, &["remote", "add", "forge", &url]);
    f.h.git(&f.clone, &["remote", "set-url", "origin", "/nowhere/r.git"]);
    let out = f.run(&key, &["issue", "claim", f.short()]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr,
        "error: remote 'origin' is not an ssh remote (/nowhere/r.git); server commands need ssh\n"
    );
    let out = f.run(&key, &["issue", "claims", "--remote", "nope"]);
    assert_eq!(out.stderr, "error: no remote named 'nope'\n");
    assert_eq!(
        f.ok(&key, &["issue", "claim", f.short(), "--remote", "forge"]),
        format!("claimed {} (no expiry)\n", f.short())
    );
    let v = f.json(&key, &["issue", "claims", "--remote", "forge"]);
    assert_eq!(v["leases"].as_array().unwrap().len(), 1);
}

#[test]
fn ssh_failures_pass_through() {
    let f = setup();
    let key = f.h.ssh_client_key();
    let stranger = f.h.named_key("stranger");
    // A key the server does not admit: ssh's own failure, exit 255.
    let out = f.run(&stranger, &["issue", "claims"]);
    assert_eq!(out.code, 255, "{out:?}");
    assert!(out.stderr.contains("Permission denied"), "{out:?}");
    // An unreadable repository looks missing.
    std::fs::write(
        f.h.repos_dir().join("r.git").join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    )
    .unwrap();
    let user = f.h.authorized_key("user");
    let out = f.run(&user, &["issue", "claim", f.short()]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (1, "error: repository not found\n")
    );
    f.ok(&key, &["issue", "claims"]);
}
