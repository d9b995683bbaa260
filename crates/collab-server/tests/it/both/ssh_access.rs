//! Who gets in and what they see, over real OpenSSH: admission through
//! authorized_keys (live, no restart), `collab-whoami`, `collab-repo`, the
//! identical reply for unknown and private repositories, shells and ptys.

use collab_testkit as common;

use common::{fingerprint, ServerHarness, NOT_FOUND};

#[test]
fn a_key_outside_authorized_keys_is_refused() {
    let h = ServerHarness::start();
    let outsider = h.named_key("outsider");
    let out = h.ssh_exec_as(&outsider, "collab-whoami", b"");
    assert_eq!(out.code, 255, "{out:?}");
    assert!(
        out.stderr.contains("Permission denied (publickey)"),
        "{out:?}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn authorized_keys_changes_apply_without_restart() {
    let h = ServerHarness::start();
    let newcomer = h.named_key("newcomer");
    assert_eq!(h.ssh_exec_as(&newcomer, "collab-whoami", b"").code, 255);

    h.authorize_key(&newcomer, false);
    let out = h.ssh_exec_as(&newcomer, "collab-whoami", b"");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["fingerprint"], fingerprint(&newcomer).as_str());

    // Replace the file (as editors and config management do): the key is gone.
    let path = h.authorized_keys_path();
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.contains("newcomer"))
        .map(|l| format!("{l}\n"))
        .collect();
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, kept).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    assert_eq!(h.ssh_exec_as(&newcomer, "collab-whoami", b"").code, 255);
    assert_eq!(h.ssh_exec("collab-whoami").code, 0);
}

#[test]
fn whoami_reports_the_principal() {
    let h = ServerHarness::start();
    let admin = h.ssh_exec("collab-whoami");
    assert_eq!(admin.code, 0, "{admin:?}");
    let v = admin.json();
    let fp = fingerprint(&h.ssh_client_key());
    assert_eq!(v["principal"], fp.as_str());
    assert_eq!(v["fingerprint"], fp.as_str());
    assert_eq!(v["regime"], "ungoverned");
    assert!(v["name"].is_null());
    assert_eq!(v["admin"], true);
    assert!(admin.stderr.is_empty(), "{admin:?}");

    let user = h.authorized_key("user");
    let v = h.ssh_exec_as(&user, "collab-whoami", b"").json();
    assert_eq!(v["principal"], fingerprint(&user).as_str());
    assert_eq!(v["admin"], false);
}

#[test]
fn unknown_and_private_repositories_reply_identically() {
    let h = ServerHarness::start();
    let private = h.create_repo("secret");
    std::fs::write(
        private.join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    )
    .unwrap();
    let user = h.authorized_key("user");

    for verb in ["git-upload-pack", "git-receive-pack", "git upload-pack"] {
        for name in ["secret", "secret.git", "/secret.git"] {
            let hidden = h.ssh_exec_as(&user, &format!("{verb} '{name}'"), b"");
            let missing = h.ssh_exec_as(&user, &format!("{verb} 'missing'"), b"");
            assert_eq!(hidden, missing, "{verb} {name}");
            assert_eq!(hidden.stderr, NOT_FOUND);
            assert_eq!(hidden.stdout, "");
            assert_eq!(hidden.code, 1);
        }
    }
    // The admin does see it (so the test above hid something real).
    let admin = h.ls_remote_as(&h.ssh_client_key(), "secret");
    assert_eq!(admin.code, 0, "{admin:?}");
    // And git reports the same one line for both to the user.
    let a = h.ls_remote_as(&user, "secret");
    let b = h.ls_remote_as(&user, "missing");
    assert_eq!(a.code, b.code);
    assert_eq!(
        a.stderr.replace("secret", "X"),
        b.stderr.replace("missing", "X")
    );
}

#[test]
fn collab_repo_create_needs_admin_and_list_shows_readable_repos() {
    let h = ServerHarness::start();
    let user = h.authorized_key("user");

    let created = h.ssh_exec("collab-repo create 'team/app'");
    assert_eq!(created.code, 0, "{created:?}");
    assert_eq!(created.json()["repo"], "team/app.git");
    assert!(h.repos_dir().join("team/app.git/HEAD").is_file());

    let again = h.ssh_exec("collab-repo create 'team/app.git'");
    assert_eq!(again.code, 1);
    assert!(
        again.stderr.starts_with("error: repository already exists"),
        "{again:?}"
    );

    let bad = h.ssh_exec("collab-repo create '../escape'");
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr.starts_with("error: invalid repository name"),
        "{bad:?}"
    );
    assert!(!h.state_dir().join("escape.git").exists());

    // A non-admin is refused the same way whether or not the name exists.
    let denied_new = h.ssh_exec_as(&user, "collab-repo create 'other'", b"");
    let denied_old = h.ssh_exec_as(&user, "collab-repo create 'team/app'", b"");
    assert_eq!(denied_new, denied_old);
    assert_eq!(denied_new.code, 1);
    assert!(!h.repos_dir().join("other.git").exists());

    let hidden = h.create_repo("hidden");
    collab_testkit::write_live(
        &hidden.join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    );
    let names = |out: common::SshOutput| -> Vec<(String, String)> {
        out.json()["repos"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_string(),
                    r["access"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        names(h.ssh_exec_as(&user, "collab-repo list", b"")),
        vec![("team/app.git".to_string(), "write".to_string())]
    );
    assert_eq!(
        names(h.ssh_exec("collab-repo list")),
        vec![
            ("hidden.git".to_string(), "rewind".to_string()),
            ("team/app.git".to_string(), "rewind".to_string())
        ]
    );
}

#[test]
fn shells_ptys_and_unknown_verbs_get_one_line_and_exit_1() {
    let h = ServerHarness::start();
    let key = h.ssh_client_key();

    let shell = h.ssh_raw(&key, &["-T", "git@127.0.0.1"], b"");
    assert_eq!(shell.code, 1, "{shell:?}");
    assert!(
        shell
            .stderr
            .starts_with("error: git-collab-server has no shell"),
        "{shell:?}"
    );
    assert_eq!(shell.stderr.lines().count(), 1);

    let pty = h.ssh_raw(&key, &["-tt", "git@127.0.0.1", "collab-whoami"], b"");
    assert_eq!(pty.code, 1, "{pty:?}");
    assert!(
        pty.stdout.contains("has no shell") || pty.stderr.contains("has no shell"),
        "{pty:?}"
    );

    let unknown = h.ssh_exec("rm -rf /");
    assert_eq!(unknown.code, 1);
    assert_eq!(unknown.stderr, "error: unknown command\n");
    assert_eq!(unknown.stdout, "");

    let usage = h.ssh_exec("collab-repo");
    assert_eq!(usage.code, 1);
    assert!(
        usage.stderr.starts_with("error: usage: collab-repo"),
        "{usage:?}"
    );

    let sftp = h.ssh_raw(&key, &["-s", "git@127.0.0.1", "sftp"], b"");
    assert_eq!(sftp.code, 1, "{sftp:?}");
}

#[test]
fn http_probes_answer() {
    let h = ServerHarness::start();
    let get = |path: &str| {
        use std::io::{Read as _, Write as _};
        let mut s = std::net::TcpStream::connect(h.http_addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    };
    let live = get("/livez");
    assert!(live.starts_with("HTTP/1.1 200"), "{live}");
    assert!(live.ends_with("ok"), "{live}");
    assert!(get("/readyz").starts_with("HTTP/1.1 200"));
    std::fs::rename(h.repos_dir(), h.state_dir().join("moved")).unwrap();
    assert!(get("/readyz").starts_with("HTTP/1.1 503"));
}
