//! The governed regime end to end: an admin bootstraps `_governance.git`
//! over SSH, pushes `governance.toml`, and from then on governed names are
//! the principals, grants decide access, unenrolled keys are closed out, and
//! a bad file is rejected with its parse error without changing anything.

use collab_testkit as common;

use std::path::{Path, PathBuf};

use common::{fingerprint, public_key_line, ServerHarness, NOT_FOUND};

struct Gov {
    h: ServerHarness,
    admin: PathBuf,
    bob: PathBuf,
    clone: PathBuf,
}

fn governance_toml(admin: &Path, bob: Option<&Path>) -> String {
    let mut text = format!(
        "public = [\"docs\"]\n\n[principals.alice]\nkeys = [\"{}\"]\n",
        public_key_line(admin)
    );
    if let Some(bob) = bob {
        text.push_str(&format!(
            "\n[principals.bob]\nkeys = [\"{}\"]\n\n[groups]\nagents = [\"bob\"]\n",
            public_key_line(bob)
        ));
    }
    text.push_str("\n[[grants]]\nrepos = [\"**\"]\nto = [\"alice\"]\naccess = \"rewind\"\n");
    if bob.is_some() {
        text.push_str(
            "\n[[grants]]\nrepos = [\"team/*\"]\nto = [\"@agents\"]\naccess = \"write\"\n",
        );
    }
    text
}

/// Push a new governance.toml; returns the push output.
fn push_conf(g: &Gov, text: &str) -> std::process::Output {
    std::fs::write(g.clone.join("governance.toml"), text).unwrap();
    g.h.git(&g.clone, &["add", "governance.toml"]);
    g.h.git(&g.clone, &["commit", "-q", "-m", "governance"]);
    g.h.git_as(&g.admin, &g.clone, &["push", "origin", "HEAD:main"])
}

/// A server whose admin has bootstrapped governance with alice (the admin
/// key) and bob (a key that is NOT in authorized_keys).
fn governed() -> Gov {
    let h = ServerHarness::start();
    let admin = h.ssh_client_key();
    let bob = h.named_key("bob");
    let created = h.ssh_exec("collab-repo create '_governance'");
    assert_eq!(created.code, 0, "{created:?}");
    let clone = h.clone_repo("_governance", "gov");
    let g = Gov {
        h,
        admin,
        bob,
        clone,
    };
    let out = push_conf(&g, &governance_toml(&g.admin, Some(&g.bob)));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    g
}

#[test]
fn governed_names_are_the_principals() {
    let g = governed();
    let alice = g.h.ssh_exec("collab-whoami").json();
    assert_eq!(alice["principal"], "alice");
    assert_eq!(alice["name"], "alice");
    assert_eq!(alice["regime"], "governed");
    assert_eq!(alice["fingerprint"], fingerprint(&g.admin).as_str());

    // bob is admitted through governance alone.
    let bob = g.h.ssh_exec_as(&g.bob, "collab-whoami", b"");
    assert_eq!(bob.code, 0, "{bob:?}");
    assert_eq!(bob.json()["principal"], "bob");
}

#[test]
fn grants_decide_access_and_unenrolled_keys_are_closed() {
    let g = governed();
    let h = &g.h;
    assert_eq!(h.ssh_exec("collab-repo create 'team/app'").code, 0);
    assert_eq!(h.ssh_exec("collab-repo create 'other'").code, 0);
    // bob has no rewind, so no creation.
    assert_eq!(
        h.ssh_exec_as(&g.bob, "collab-repo create 'team/new'", b"")
            .code,
        1
    );

    // bob writes team/* ...
    let clone = h.clone_as(&g.bob, "team/app", "bob-app");
    h.commit_file(&clone, "f", b"1", "one");
    let push = h.git_as(&g.bob, &clone, &["push", "origin", "HEAD:main"]);
    assert!(
        push.status.success(),
        "{}",
        String::from_utf8_lossy(&push.stderr)
    );
    // ... but may not rewind it ...
    h.git(&clone, &["commit", "-q", "--amend", "-m", "rewritten"]);
    let forced = h.git_as(&g.bob, &clone, &["push", "-f", "origin", "HEAD:main"]);
    assert!(!forced.status.success());
    // ... and sees neither `other` nor `_governance`.
    for repo in ["other", "_governance"] {
        let out = h.ssh_exec_as(&g.bob, &format!("git-upload-pack '{repo}'"), b"");
        assert_eq!(out.stderr, NOT_FOUND, "{repo}");
        assert_eq!(out.code, 1);
    }
    let list = h.ssh_exec_as(&g.bob, "collab-repo list", b"").json();
    assert_eq!(list["repos"].as_array().unwrap().len(), 1, "{list}");

    // A key in authorized_keys but not enrolled: closed.
    let user = h.authorized_key("user");
    let who = h.ssh_exec_as(&user, "collab-whoami", b"").json();
    assert_eq!(who["regime"], "closed");
    assert_eq!(who["principal"], fingerprint(&user).as_str());
    assert_eq!(who["enrolled"], false, "{who}");
    assert!(
        who["hint"].as_str().unwrap().contains("governance.toml"),
        "{who}"
    );
    for repo in ["team/app", "other", "missing"] {
        let out = h.ssh_exec_as(&user, &format!("git-upload-pack '{repo}'"), b"");
        assert_eq!(out.stderr, NOT_FOUND, "{repo}");
    }
    let list = h.ssh_exec_as(&user, "collab-repo list", b"").json();
    assert_eq!(list["repos"].as_array().unwrap().len(), 0);
}

#[test]
fn a_bad_governance_push_is_rejected_and_changes_nothing() {
    let g = governed();
    let h = &g.h;
    let before = h.ls_remote_as(&g.admin, "_governance").stdout;

    let cases = [
        ("[principals.bob\nkeys = []\n", "TOML parse error"),
        (
            "[[grants]]\nrepos = [\"**\"]\nto = [\"carol\"]\naccess = \"rewind\"\n",
            "unknown principal \"carol\"",
        ),
        // Valid, but it would lock the pushing admin out.
        (&governance_toml(&g.bob, None) as &str, "would lock you out"),
    ];
    for (text, expected) in cases {
        let out = push_conf(&g, text);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "accepted: {text}");
        assert!(stderr.contains(expected), "{expected:?} not in:\n{stderr}");
        assert!(stderr.contains("pre-receive hook declined"), "{stderr}");
        h.git(&g.clone, &["reset", "-q", "--hard", "HEAD~1"]);
    }
    assert_eq!(h.ls_remote_as(&g.admin, "_governance").stdout, before);
    assert_eq!(
        h.ssh_exec_as(&g.bob, "collab-whoami", b"").json()["principal"],
        "bob"
    );
    assert_eq!(h.ssh_exec("collab-whoami").json()["principal"], "alice");
}

#[test]
fn a_good_governance_push_applies_at_once() {
    let g = governed();
    // Drop bob: his key is no longer admitted at all.
    let out = push_conf(&g, &governance_toml(&g.admin, None));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bob = g.h.ssh_exec_as(&g.bob, "collab-whoami", b"");
    assert_eq!(bob.code, 255, "{bob:?}");
    // And governance survives a restart.
    let mut h = g.h;
    h.restart();
    assert_eq!(h.ssh_exec("collab-whoami").json()["regime"], "governed");
}

#[test]
fn only_admins_see_the_governance_repo_before_bootstrap() {
    let h = ServerHarness::start();
    let user = h.authorized_key("user");
    assert_eq!(
        h.ssh_exec_as(&user, "collab-repo create '_governance'", b"")
            .code,
        1
    );
    assert_eq!(h.ssh_exec("collab-repo create '_governance'").code, 0);
    let out = h.ssh_exec_as(&user, "git-receive-pack '_governance'", b"");
    assert_eq!(out.stderr, NOT_FOUND);
    // An empty governance repository does not activate governance.
    assert_eq!(
        h.ssh_exec_as(&user, "collab-whoami", b"").json()["regime"],
        "ungoverned"
    );
}
