//! `info`: gitolite's one-line question "what may I do here", as text with
//! R / RW / RW+ letters and as JSON with counts and the caller's leases.
//! It never names a repository the caller cannot read.

use collab_testkit as common;

use common::{fingerprint, ServerHarness};

#[test]
fn info_lists_what_each_caller_may_read_and_nothing_else() {
    let h = ServerHarness::start();
    let user = h.authorized_key("user");
    let fp = fingerprint(&user);
    h.create_repo("open");
    let private = h.create_repo("secret/plans");
    std::fs::write(
        private.join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    )
    .unwrap();
    let shared = h.create_repo("shared");
    std::fs::write(
        shared.join("collab-policy.toml"),
        format!("read = [\"{fp}\"]\nwrite = []\n"),
    )
    .unwrap();
    let issue = h.open_server_issue("open", "first");
    h.open_server_issue("open", "second");

    // The user: RW on the default-policy repository, R where only reading
    // is granted, and the private one not at all.
    let text = h.ssh_exec_as(&user, "info", b"");
    assert_eq!(text.code, 0, "{text:?}");
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "hello {fp}, this is git-collab-server {}",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert_eq!(lines[1], "");
    assert_eq!(&lines[2..], [" RW   open", " R    shared"], "{text:?}");
    assert!(!text.stdout.contains("secret"), "{text:?}");

    // The admin rewinds everywhere and sees everything.
    let admin = h.ssh_exec("info");
    assert!(admin.stdout.contains(" RW+  secret/plans\n"), "{admin:?}");
    assert!(admin.stdout.contains(" RW+  open\n"), "{admin:?}");

    // JSON: access, open issues, and only the caller's own live leases.
    let acquired = h.ssh_exec_as(
        &user,
        &format!("collab-lease acquire 'open' '{issue}' --ttl 600"),
        b"",
    );
    assert_eq!(acquired.code, 0, "{acquired:?}");
    let v = h.ssh_exec_as(&user, "info --json", b"").json();
    assert_eq!(v["principal"], fp.as_str());
    assert_eq!(v["server"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["server"]["features"]
        .as_array()
        .unwrap()
        .contains(&"leases".into()));
    let repos = v["repos"].as_array().unwrap();
    assert_eq!(repos.len(), 2, "{v:#}");
    assert_eq!(repos[0]["name"], "open");
    assert_eq!(repos[0]["access"], "write");
    assert_eq!(repos[0]["letters"], "RW");
    assert_eq!(repos[0]["open_issues"], 2);
    assert_eq!(repos[0]["open_patches"], 0);
    assert_eq!(repos[1]["name"], "shared");
    assert_eq!(repos[1]["access"], "read");
    let leases = v["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 1, "{v:#}");
    assert_eq!(leases[0]["repo"], "open");
    assert_eq!(leases[0]["issue"], issue.as_str());
    assert!(leases[0]["expires_at"].as_i64().unwrap() > 0);
    assert!(!v.to_string().contains("secret"), "{v:#}");
    // Someone else's lease is not the admin's.
    let theirs = h.ssh_exec("info --json").json();
    assert_eq!(theirs["leases"].as_array().unwrap().len(), 0, "{theirs:#}");
    assert_eq!(theirs["repos"].as_array().unwrap().len(), 3, "{theirs:#}");

    // A stray argument is a usage error, not a listing.
    let bad = h.ssh_exec_as(&user, "info --yaml", b"");
    assert_eq!(bad.code, 1, "{bad:?}");
    assert_eq!(
        bad.stderr,
        "error: unknown option '--yaml' for info; usage: info [--json]\n"
    );
}
