//! Access holes found by attacking the running server (issue 12), each
//! reproduced with the real server, OpenSSH `ssh` and `git`:
//!
//! - a writer (write, not rewind) deleting or moving a tag, rewriting or
//!   deleting a collab record, forcing `refs/notes/*`, in the ungoverned and
//!   the governed regime; a rewinder may do it; nobody may push a
//!   server-maintained ref;
//! - a directory inside a private repository served as a repository of its
//!   own (`secret.git/refs/x`) to a principal with no access to it;
//! - `authorized_keys` options that used to be ignored: `from=`,
//!   `expiry-time=`, `command=`, `cert-authority`.

use collab_testkit as common;
use collab_testkit::web as web_support;

use std::path::{Path, PathBuf};

use common::{fingerprint, public_key_line, ServerHarness, NOT_FOUND};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Push as `key` from `clone`; returns (success, stderr).
fn push(h: &ServerHarness, key: &Path, clone: &Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["push", "origin"];
    all.extend_from_slice(args);
    let out = h.git_as(key, clone, &all);
    (out.status.success(), stderr(&out))
}

fn refused(h: &ServerHarness, key: &Path, clone: &Path, args: &[&str], line: &str) {
    let (ok, err) = push(h, key, clone, args);
    assert!(!ok, "push {args:?} was accepted");
    assert!(
        err.contains(line),
        "push {args:?}: expected {line:?} in:\n{err}"
    );
}

fn accepted(h: &ServerHarness, key: &Path, clone: &Path, args: &[&str]) {
    let (ok, err) = push(h, key, clone, args);
    assert!(ok, "push {args:?} refused:\n{err}");
}

/// The per-ref rules on repository `r` for `writer` (write) and `rewinder`
/// (rewind); `admin` is the harness key. The same scenario runs in both
/// regimes.
fn per_ref_rules(h: &ServerHarness, writer: &Path, rewinder: &Path, tag: &str) {
    let w = h.clone_as(writer, "r", &format!("w-{tag}"));
    let one = h.commit_file(&w, "f", b"1", "one");
    let two = h.commit_file(&w, "f", b"2", "two");
    h.git(&w, &["checkout", "-q", "--orphan", "other"]);
    let unrelated = h.commit_file(&w, "g", b"x", "unrelated");
    h.git(&w, &["checkout", "-q", "main"]);
    accepted(h, writer, &w, &["main"]);

    // Tags: a writer creates one, but may neither move nor delete it.
    let tag_ref = format!("refs/tags/{tag}");
    accepted(h, writer, &w, &[&format!("{one}:{tag_ref}")]);
    let moving = format!("error: {tag_ref}: moving a tag needs rewind access");
    refused(
        h,
        writer,
        &w,
        &["--force", &format!("{unrelated}:{tag_ref}")],
        &moving,
    );
    refused(
        h,
        writer,
        &w,
        &["--force", &format!("{two}:{tag_ref}")],
        &moving,
    );
    let deleting = format!("error: {tag_ref}: deleting a ref needs rewind access");
    refused(h, writer, &w, &[&format!(":{tag_ref}")], &deleting);

    // Issue DAGs are the server's now: no client pushes them at all.
    refused(
        h,
        writer,
        &w,
        &[&format!("{one}:refs/collab/issues/{one}")],
        "error: issues are kept by the server",
    );

    // Patch DAGs are the server's too, and so are revision pins.
    refused(
        h,
        writer,
        &w,
        &[&format!("{one}:refs/collab/patches/{one}")],
        "error: patches are kept by the server",
    );
    refused(
        h,
        rewinder,
        &w,
        &[&format!("{one}:refs/collab/revisions/{one}/1")],
        &format!("error: refs/collab/revisions/{one}/1: maintained by the server"),
    );

    // Any other collab ref only grows. (The hook judges the ref, not what
    // it holds, so plain commits stand in for a record.) `record_ref`
    // names it below.
    let record_ref = format!("refs/collab/drafts/{one}");
    accepted(h, writer, &w, &[&format!("{one}:{record_ref}")]);
    accepted(h, writer, &w, &[&format!("{two}:{record_ref}")]);
    let record_tip = two.clone();
    refused(
        h,
        writer,
        &w,
        &["--force", &format!("{unrelated}:{record_ref}")],
        &format!("error: {record_ref}: rewriting a collab record (its history only grows) needs rewind access"),
    );
    refused(
        h,
        writer,
        &w,
        &["--force", &format!("{one}:{record_ref}")],
        &format!("error: {record_ref}: rewriting a collab record"),
    );
    refused(
        h,
        writer,
        &w,
        &[&format!(":{record_ref}")],
        &format!("error: {record_ref}: deleting a ref needs rewind access"),
    );

    // Notes: fast-forward only for a writer.
    h.git(&w, &["notes", "add", "-m", "first note", "HEAD"]);
    accepted(h, writer, &w, &["refs/notes/commits"]);
    h.git(&w, &["notes", "add", "-f", "-m", "second note", "HEAD"]);
    accepted(h, writer, &w, &["refs/notes/commits"]);
    let notes_tip = h.rev_parse(&w, "refs/notes/commits");
    h.git(&w, &["update-ref", "-d", "refs/notes/commits"]);
    h.git(&w, &["notes", "add", "-m", "history rewritten", "HEAD"]);
    refused(
        h,
        writer,
        &w,
        &["--force", "refs/notes/commits"],
        "error: refs/notes/commits: a non-fast-forward update needs rewind access",
    );

    // Server-maintained refs: refused to every client, even a rewinder.
    refused(
        h,
        rewinder,
        &w,
        &[&format!("{one}:refs/collab/export/x")],
        "error: refs/collab/export/x: maintained by the server; clients cannot push it",
    );

    // Nothing the writer tried changed anything.
    let remote = h.ls_remote_as(rewinder, "r").stdout;
    assert!(remote.contains(&format!("{one}\t{tag_ref}\n")), "{remote}");
    assert!(
        remote.contains(&format!("{record_tip}\t{record_ref}\n")),
        "{remote}"
    );
    assert!(
        remote.contains(&format!("{notes_tip}\trefs/notes/commits\n")),
        "{remote}"
    );
    assert!(!remote.contains("refs/collab/export/"), "{remote}");

    // A rewinder may move and delete the tag and rewrite the others.
    accepted(
        h,
        rewinder,
        &w,
        &["--force", &format!("{unrelated}:{tag_ref}")],
    );
    accepted(h, rewinder, &w, &["--force", "refs/notes/commits"]);
    accepted(
        h,
        rewinder,
        &w,
        &["--force", &format!("{unrelated}:{record_ref}")],
    );
    accepted(
        h,
        rewinder,
        &w,
        &[&format!(":{tag_ref}"), &format!(":{record_ref}")],
    );
    let remote = h.ls_remote_as(rewinder, "r").stdout;
    assert!(!remote.contains(&tag_ref), "{remote}");
    assert!(!remote.contains(&record_ref), "{remote}");
    assert!(!remote.contains(&notes_tip), "{remote}");
}

#[test]
fn ungoverned_writers_cannot_rewrite_tags_collab_refs_or_notes() {
    let h = ServerHarness::start();
    let dir = h.create_repo("r");
    let writer = h.authorized_key("writer");
    let rewinder = h.authorized_key("rewinder");
    std::fs::write(
        dir.join("collab-policy.toml"),
        format!("rewind = [\"{}\"]\n", fingerprint(&rewinder)),
    )
    .unwrap();
    per_ref_rules(&h, &writer, &rewinder, "v1.0");
}

/// Bootstrap governance with the harness key as `admin`, `top` top-level
/// keys and `extra` tables (principals and grants).
fn govern(h: &ServerHarness, top: &str, extra: &str) {
    let created = h.ssh_exec("collab-repo create '_governance'");
    assert_eq!(created.code, 0, "{created:?}");
    let clone = h.clone_repo("_governance", "gov");
    let text = format!(
        "{top}\n[principals.admin]\nkeys = [\"{}\"]\n\n[[grants]]\nrepos = [\"**\"]\nto = [\"admin\"]\naccess = \"rewind\"\n{extra}",
        public_key_line(&h.ssh_client_key())
    );
    std::fs::write(clone.join("governance.toml"), text).unwrap();
    h.git(&clone, &["add", "governance.toml"]);
    h.git(&clone, &["commit", "-q", "-m", "governance"]);
    h.ssh_push(&clone, &["HEAD:main"]);
}

fn principal(name: &str, key: &Path) -> String {
    format!(
        "\n[principals.{name}]\nkeys = [\"{}\"]\n",
        public_key_line(key)
    )
}

fn grant(repos: &str, to: &str, access: &str) -> String {
    format!("\n[[grants]]\nrepos = [\"{repos}\"]\nto = [\"{to}\"]\naccess = \"{access}\"\n")
}

#[test]
fn governed_writers_cannot_rewrite_tags_collab_refs_or_notes() {
    let h = ServerHarness::start();
    h.create_repo("r");
    // Enrolled through governance only, not in authorized_keys.
    let writer = h.named_key("writer");
    let rewinder = h.named_key("rewinder");
    govern(
        &h,
        "",
        &format!(
            "{}{}{}{}",
            principal("writer", &writer),
            principal("rewinder", &rewinder),
            grant("r", "writer", "write"),
            grant("r", "rewinder", "rewind"),
        ),
    );
    per_ref_rules(&h, &writer, &rewinder, "v2.0");
}

/// The writer of `secret.git` makes `secret.git/refs/x` look like a bare
/// repository (HEAD file, objects/ and refs/ directories) by pushing refs.
fn plant_nested_repo(h: &ServerHarness, owner: &Path) -> (PathBuf, String) {
    let clone = h.clone_as(owner, "secret", "secret-clone");
    let commit = h.commit_file(&clone, "private.txt", b"secret\n", "private");
    accepted(
        h,
        owner,
        &clone,
        &[
            "HEAD:main",
            "HEAD:refs/x/HEAD",
            "HEAD:refs/x/objects/keep",
            "HEAD:refs/x/refs/keep",
        ],
    );
    let inner = h.repos_dir().join("secret.git/refs/x");
    assert!(
        inner.join("HEAD").is_file() && inner.join("objects").is_dir(),
        "the planted directory is not there"
    );
    (clone, commit)
}

/// The attacker gets `repository not found` for the nested path, both to
/// read and to push, and `secret.git`'s refs stay as they were.
fn nested_path_is_not_a_repository(h: &ServerHarness, attacker: &Path, commit: &str) {
    let nested = "secret.git/refs/x";
    let listed = h.ls_remote_as(attacker, nested);
    assert_ne!(listed.code, 0, "{listed:?}");
    assert!(listed.stderr.contains(NOT_FOUND.trim()), "{listed:?}");
    assert!(!listed.stdout.contains(commit), "{listed:?}");

    let mine = h.temp_dir().join("attacker");
    std::fs::create_dir_all(&mine).unwrap();
    h.git_as(attacker, &mine, &["init", "-q"]);
    let url = h.repo_url(nested);
    let out = h.git_as(attacker, &mine, &["push", &url, ":refs/keep"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(NOT_FOUND.trim()), "{}", stderr(&out));

    let whole = h.ls_remote_as(&h.ssh_client_key(), "secret").stdout;
    assert!(
        whole.contains(&format!("{commit}\trefs/x/refs/keep\n")),
        "{whole}"
    );
    assert!(h.repos_dir().join("secret.git/refs/x/refs/keep").is_file());

    // Over HTTP too: smart HTTP and the web UI.
    for path in [
        "/secret.git/refs/x/info/refs?service=git-upload-pack",
        "/secret.git/refs/x",
    ] {
        let got = web_support::get(h, path);
        assert_eq!(got.status, 404, "{path}");
        assert!(
            !String::from_utf8_lossy(&got.body).contains(commit),
            "{path}"
        );
    }
}

#[test]
fn ungoverned_nested_repository_path_is_not_found() {
    let h = ServerHarness::start();
    let dir = h.create_repo("secret");
    let owner = h.authorized_key("owner");
    let attacker = h.authorized_key("attacker");
    let fp = fingerprint(&owner);
    std::fs::write(
        dir.join("collab-policy.toml"),
        format!("read = [\"{fp}\"]\nwrite = [\"{fp}\"]\n"),
    )
    .unwrap();
    let (_, commit) = plant_nested_repo(&h, &owner);
    assert!(h
        .ls_remote_as(&attacker, "secret")
        .stderr
        .starts_with(NOT_FOUND));
    nested_path_is_not_a_repository(&h, &attacker, &commit);
}

#[test]
fn governed_nested_repository_path_is_not_found() {
    let h = ServerHarness::start();
    h.create_repo("secret");
    let owner = h.named_key("owner");
    let attacker = h.named_key("attacker");
    // The attacker may write every repository named `x` in any namespace,
    // and anonymous HTTP may read them: a grant that would match the
    // nested path if it were a repository.
    govern(
        &h,
        "public = [\"**/x\"]",
        &format!(
            "{}{}{}{}",
            principal("owner", &owner),
            principal("attacker", &attacker),
            grant("secret", "owner", "write"),
            grant("**/x", "attacker", "write"),
        ),
    );
    let (_, commit) = plant_nested_repo(&h, &owner);
    nested_path_is_not_a_repository(&h, &attacker, &commit);
}

/// Replace authorized_keys with the harness admin line plus `line`.
fn authorize_with(h: &ServerHarness, line: &str) {
    let admin = format!(
        "{} {}\n",
        common::ADMIN_OPTION,
        public_key_line(&h.ssh_client_key())
    );
    std::fs::write(h.authorized_keys_path(), format!("{admin}{line}\n")).unwrap();
}

fn can_log_in(h: &ServerHarness, key: &Path) -> bool {
    let out = h.ssh_exec_as(key, "collab-whoami", b"");
    if out.code != 0 {
        assert!(out.stderr.contains("Permission denied"), "{out:?}");
    }
    out.code == 0
}

#[test]
fn authorized_keys_options_are_honoured_or_refuse_the_line() {
    let h = ServerHarness::start();
    let key = h.named_key("k");
    let line = public_key_line(&key);

    // from=: the harness connects from 127.0.0.1.
    authorize_with(&h, &format!("from=\"10.0.0.0/8\" {line}"));
    assert!(!can_log_in(&h, &key), "from= mismatch admitted");
    h.wait_for_log("from= does not match 127.0.0.1");
    authorize_with(&h, &format!("from=\"!127.0.0.1,127.0.0.0/8\" {line}"));
    assert!(!can_log_in(&h, &key), "negated from= admitted");
    authorize_with(&h, &format!("from=\"10.0.0.0/8,127.0.0.?\" {line}"));
    assert!(can_log_in(&h, &key), "matching from= refused");

    // expiry-time=
    authorize_with(&h, &format!("expiry-time=\"20200101\" {line}"));
    assert!(!can_log_in(&h, &key), "expired key admitted");
    h.wait_for_log("expiry-time has passed");
    authorize_with(&h, &format!("restrict,expiry-time=\"29991231Z\" {line}"));
    assert!(can_log_in(&h, &key), "unexpired restricted key refused");

    // command= cannot be honoured: the line admits nothing, and says why.
    authorize_with(&h, &format!("command=\"/bin/echo hi\" {line}"));
    assert!(!can_log_in(&h, &key), "command= line admitted");
    h.wait_for_log(":2: option `command` cannot be honoured");

    // A cert-authority line is a CA, never a user key.
    authorize_with(&h, &format!("cert-authority {line}"));
    assert!(!can_log_in(&h, &key), "cert-authority key admitted");
    h.wait_for_log(":2: a cert-authority line is a CA key");

    // The harness admin, on its plain line, was never affected.
    assert!(can_log_in(&h, &h.ssh_client_key()));
}
