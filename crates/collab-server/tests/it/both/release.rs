//! `collab-release` over the real OpenSSH client against the real server:
//! create, list, download and delete; the size limit; unknown tags; the
//! not-found reply for callers without rewind; and a client killed in the
//! middle of an upload; the `git-collab release` CLI; and the web page with
//! its downloads. After every failure the releases directory under the state
//! directory is checked for leftovers.

use collab_testkit as common;
use collab_testkit::web as web_support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{HarnessOptions, ServerHarness, NOT_FOUND};
use sha2::{Digest as _, Sha256};

/// Hang guard for waits on the server (not a performance assertion).
const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// Deterministic bytes that are not all alike.
fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7919 % 251) as u8).collect()
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What a verb wrote, with stdout kept as raw bytes.
struct RawOutput {
    stdout: Vec<u8>,
    stderr: String,
    code: i32,
}

fn ssh_raw_bytes(h: &ServerHarness, key: &Path, remote_cmd: &str, stdin: &[u8]) -> RawOutput {
    let mut child = Command::new("ssh")
        .args(h.ssh_options(key))
        .args(["git@127.0.0.1", remote_cmd])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ssh");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    // The server may answer before reading everything (a refused upload):
    // a broken pipe here is expected then.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().expect("ssh output");
    let _ = writer.join();
    RawOutput {
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code().unwrap_or(-1),
    }
}

/// A repository `app` with one commit on main, tagged `tag`, pushed.
fn repo_with_tag(h: &ServerHarness, tag: &str) {
    h.create_repo("app");
    let clone = h.clone_repo("app", "work");
    h.commit_file(&clone, "README", b"hello\n", "init");
    h.git(&clone, &["tag", tag]);
    h.ssh_push(
        &clone,
        &["HEAD:refs/heads/main", &format!("refs/tags/{tag}")],
    );
}

fn releases_dir(h: &ServerHarness) -> PathBuf {
    h.state_dir().join("releases")
}

/// Every file and directory under `dir`, relative and sorted.
fn entries_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
                out.push(format!("{rel}/"));
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < WAIT_LIMIT, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn create_list_download_delete() {
    let h = ServerHarness::start();
    repo_with_tag(&h, "v1.0");
    let key = h.ssh_client_key();
    // Several SSH packets' worth, so the upload really streams.
    let bin = payload(300_000);
    let created = h.ssh_exec_with_stdin("collab-release create 'app' 'v1.0' 'app.bin'", &bin);
    assert_eq!(created.code, 0, "{created:?}");
    let reply = created.json();
    assert_eq!(reply["status"], "created");
    assert_eq!(reply["repo"], "app.git");
    assert_eq!(reply["tag"], "v1.0");
    assert_eq!(reply["file"]["name"], "app.bin");
    assert_eq!(reply["file"]["size"], 300_000);
    assert_eq!(reply["file"]["sha256"], sha256(&bin));
    assert_eq!(
        reply["file"]["uploader"].as_str(),
        Some(common::fingerprint(&key).as_str())
    );
    let notes = b"checksums\n".to_vec();
    let second = h.ssh_exec_with_stdin("collab-release create '/app.git' v1.0 NOTES.txt", &notes);
    assert_eq!(second.code, 0, "{second:?}");

    // The bytes are on disk under the state directory, exactly.
    let stored = releases_dir(&h)
        .join("app.git")
        .join("v1.0")
        .join("app.bin");
    assert_eq!(std::fs::read(&stored).unwrap(), bin);

    let list = h.ssh_exec("collab-release list 'app'");
    assert_eq!(list.code, 0, "{list:?}");
    let list = list.json();
    assert_eq!(list["repo"], "app.git");
    let releases = list["releases"].as_array().unwrap();
    assert_eq!(releases.len(), 1, "{list}");
    assert_eq!(releases[0]["tag"], "v1.0");
    assert_eq!(releases[0]["size"], 300_000 + notes.len() as u64);
    let files = releases[0]["files"].as_array().unwrap();
    let names: Vec<_> = files.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["NOTES.txt", "app.bin"]);
    assert_eq!(files[1]["sha256"], sha256(&bin));
    assert_eq!(files[0]["sha256"], sha256(&notes));

    let got = ssh_raw_bytes(
        &h,
        &key,
        "collab-release download 'app' 'v1.0' 'app.bin'",
        b"",
    );
    assert_eq!((got.code, got.stderr.as_str()), (0, ""));
    assert!(got.stdout == bin, "downloaded bytes differ");

    let again = h.ssh_exec_with_stdin("collab-release create 'app' 'v1.0' 'app.bin'", b"other");
    assert_eq!(
        (again.code, again.stderr.as_str()),
        (
            1,
            "error: release v1.0 already has a file app.bin; delete it first\n"
        )
    );
    assert_eq!(
        std::fs::read(&stored).unwrap(),
        bin,
        "the first upload stays"
    );

    let deleted = h.ssh_exec("collab-release delete 'app' 'v1.0' 'app.bin'");
    assert_eq!(deleted.code, 0, "{deleted:?}");
    assert_eq!(deleted.json()["files"], serde_json::json!(["app.bin"]));
    let gone = h.ssh_exec("collab-release download 'app' 'v1.0' 'app.bin'");
    assert_eq!(
        (gone.code, gone.stderr.as_str(), gone.stdout.as_str()),
        (1, "error: release v1.0 has no file app.bin\n", "")
    );
    let deleted = h.ssh_exec("collab-release delete 'app' 'v1.0'");
    assert_eq!(deleted.code, 0, "{deleted:?}");
    assert_eq!(deleted.json()["files"], serde_json::json!(["NOTES.txt"]));
    let list = h.ssh_exec("collab-release list 'app'");
    assert_eq!(list.json()["releases"], serde_json::json!([]));
    let none = h.ssh_exec("collab-release delete 'app' 'v1.0'");
    assert_eq!(
        (none.code, none.stderr.as_str()),
        (1, "error: no release v1.0\n")
    );
    assert_eq!(entries_under(&releases_dir(&h)), Vec::<String>::new());
}

#[test]
fn uploads_over_the_size_limit_leave_nothing() {
    let h = ServerHarness::start_with(HarnessOptions {
        args: vec!["--max-release-size".into(), "1000".into()],
        ..Default::default()
    });
    repo_with_tag(&h, "v1");
    let exact = h.ssh_exec_with_stdin("collab-release create app v1 exact.bin", &payload(1000));
    assert_eq!(exact.code, 0, "{exact:?}");
    let expected =
        "error: upload is larger than max_release_size (1000 bytes); nothing was stored\n";
    for (name, size) in [("one-over.bin", 1001), ("big.bin", 2_000_000)] {
        let out = h.ssh_exec_with_stdin(
            &format!("collab-release create app v1 {name}"),
            &payload(size),
        );
        assert_eq!((out.code, out.stderr.as_str()), (1, expected), "{name}");
        assert_eq!(out.stdout, "");
    }
    // Only the upload that fit is there: no partial or temporary file.
    assert_eq!(
        entries_under(&releases_dir(&h)),
        [
            "app.git/",
            "app.git/v1/",
            "app.git/v1/.exact.bin.meta",
            "app.git/v1/exact.bin"
        ]
    );
    let list = h.ssh_exec("collab-release list app").json();
    assert_eq!(list["releases"][0]["files"].as_array().unwrap().len(), 1);
}

#[test]
fn bad_tags_and_file_names_are_refused() {
    let h = ServerHarness::start();
    repo_with_tag(&h, "v1");
    for (cmd, expected) in [
        (
            "collab-release create app v9 a.bin",
            "error: no tag v9 in app.git: push it first (git push origin tag v9)\n",
        ),
        // A branch is not a tag.
        (
            "collab-release create app main a.bin",
            "error: no tag main in app.git: push it first (git push origin tag main)\n",
        ),
        (
            "collab-release create app 'v1..x' a.bin",
            "error: invalid tag name 'v1..x'\n",
        ),
        (
            "collab-release create app v1 ../../authorized_keys",
            "error: invalid file name '../../authorized_keys': use letters, digits, '.', '_', '-' and '+', not starting with '.' or '-', at most 255 bytes\n",
        ),
        (
            "collab-release create app v1 .a.bin.meta",
            "error: invalid file name '.a.bin.meta': use letters, digits, '.', '_', '-' and '+', not starting with '.' or '-', at most 255 bytes\n",
        ),
        ("collab-release create app v1", "error: usage: collab-release create '<repo>' '<tag>' '<file>' | collab-release list '<repo>' | collab-release download '<repo>' '<tag>' '<file>' | collab-release delete '<repo>' '<tag>' ['<file>']\n"),
    ] {
        let out = h.ssh_exec_with_stdin(cmd, b"data");
        assert_eq!((out.code, out.stderr.as_str()), (1, expected), "{cmd}");
    }
    assert_eq!(entries_under(&releases_dir(&h)), Vec::<String>::new());
}

/// A reader learns that releases need rewind (the repository's existence is
/// no secret to it); a caller who cannot read gets the unknown-repo reply.
#[test]
fn without_rewind_a_reader_is_told_why_and_others_get_not_found() {
    let h = ServerHarness::start();
    repo_with_tag(&h, "v1");
    let admin = h.ssh_client_key();
    let created = h.ssh_exec_with_stdin("collab-release create app v1 a.bin", b"release");
    assert_eq!(created.code, 0, "{created:?}");
    // bob may read and write `app` (the default policy) but not rewind.
    let bob = h.authorized_key("bob");
    for verb in [
        "create '{r}' v1 b.bin",
        "delete '{r}' v1 a.bin",
        "delete '{r}' v1",
    ] {
        let on_app = h.ssh_exec_as(
            &bob,
            &format!("collab-release {}", verb.replace("{r}", "app")),
            b"x",
        );
        let on_missing = h.ssh_exec_as(
            &bob,
            &format!("collab-release {}", verb.replace("{r}", "missing")),
            b"x",
        );
        let admin_missing = h.ssh_exec_as(
            &admin,
            &format!("collab-release {}", verb.replace("{r}", "missing")),
            b"x",
        );
        assert_eq!(on_missing, admin_missing, "{verb}");
        assert_eq!(
            (
                on_missing.code,
                on_missing.stderr.as_str(),
                on_missing.stdout.as_str()
            ),
            (1, NOT_FOUND, "")
        );
        assert_eq!(
            (on_app.code, on_app.stderr.as_str(), on_app.stdout.as_str()),
            (
                1,
                "error: permission denied: releases need rewind access\n",
                ""
            )
        );
    }
    // Read is enough to list and download.
    let list = h.ssh_exec_as(&bob, "collab-release list app", b"");
    assert_eq!(list.code, 0, "{list:?}");
    assert_eq!(list.json()["releases"][0]["files"][0]["name"], "a.bin");
    let got = h.ssh_exec_as(&bob, "collab-release download app v1 a.bin", b"");
    assert_eq!((got.code, got.stdout.as_str()), (0, "release"));

    // A private repository looks missing to every verb.
    std::fs::write(
        h.repos_dir().join("app.git").join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    )
    .unwrap();
    for verb in [
        "list '{r}'",
        "download '{r}' v1 a.bin",
        "create '{r}' v1 b.bin",
        "delete '{r}' v1",
    ] {
        let hidden = h.ssh_exec_as(
            &bob,
            &format!("collab-release {}", verb.replace("{r}", "app")),
            b"",
        );
        let missing = h.ssh_exec_as(
            &bob,
            &format!("collab-release {}", verb.replace("{r}", "missing")),
            b"",
        );
        assert_eq!(hidden, missing, "{verb}");
        assert_eq!((hidden.code, hidden.stderr.as_str()), (1, NOT_FOUND));
    }
    // Nothing changed on disk.
    assert_eq!(
        entries_under(&releases_dir(&h)),
        [
            "app.git/",
            "app.git/v1/",
            "app.git/v1/.a.bin.meta",
            "app.git/v1/a.bin"
        ]
    );
}

#[test]
fn a_client_killed_mid_upload_leaves_nothing() {
    let h = ServerHarness::start();
    repo_with_tag(&h, "v1");
    let key = h.ssh_client_key();
    let mut ssh = Command::new("ssh")
        .args(h.ssh_options(&key))
        .args(["git@127.0.0.1", "collab-release create app v1 big.bin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ssh");
    let mut stdin = ssh.stdin.take().unwrap();
    let sent = payload(256 * 1024);
    stdin.write_all(&sent).unwrap();
    stdin.flush().unwrap();
    // The server has all of it in its temporary file; stdin stays open, so
    // the upload is still in progress.
    let release_dir = releases_dir(&h).join("app.git").join("v1");
    wait_until("the partial upload on disk", || {
        std::fs::read_dir(&release_dir)
            .map(|entries| {
                entries.flatten().any(|e| {
                    e.file_name().to_string_lossy().starts_with(".tmp-")
                        && e.metadata().ok().map(|m| m.len()) == Some(sent.len() as u64)
                })
            })
            .unwrap_or(false)
    });
    ssh.kill().expect("kill ssh");
    ssh.wait().unwrap();
    drop(stdin);
    h.wait_for_log("release upload aborted");
    assert_eq!(entries_under(&releases_dir(&h)), Vec::<String>::new());
    let list = h.ssh_exec("collab-release list app").json();
    assert_eq!(list["releases"], serde_json::json!([]));
}

/// Run the `git-collab` CLI as `key` in `dir`.
fn cli(h: &ServerHarness, key: &Path, dir: &Path, args: &[&str]) -> common::SshOutput {
    let out = h
        .client_command(collab_testkit::bin("git-collab"), key, dir)
        .args(args)
        .output()
        .expect("run git-collab");
    common::SshOutput::from_output(out)
}

#[test]
fn cli_uploads_lists_downloads_and_deletes() {
    let h = ServerHarness::start();
    repo_with_tag(&h, "v1.0");
    let key = h.ssh_client_key();
    let work = h.temp_dir().join("work");
    let big = payload(500_000);
    std::fs::write(work.join("app.bin"), &big).unwrap();
    std::fs::write(
        work.join("SHA256SUMS"),
        format!("{}  app.bin\n", sha256(&big)),
    )
    .unwrap();

    let created = cli(
        &h,
        &key,
        &work,
        &[
            "release",
            "create",
            "v1.0",
            "app.bin",
            "SHA256SUMS",
            "--json",
        ],
    );
    assert_eq!(created.code, 0, "{created:?}");
    let created = created.json();
    assert_eq!(created["repo"], "app.git");
    assert_eq!(created["files"][0]["name"], "app.bin");
    assert_eq!(created["files"][0]["sha256"], sha256(&big));
    assert_eq!(created["files"][1]["name"], "SHA256SUMS");

    let listed = cli(&h, &key, &work, &["release", "list", "--json"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    let listed = listed.json();
    assert_eq!(listed["releases"][0]["tag"], "v1.0");
    assert_eq!(listed["releases"][0]["files"].as_array().unwrap().len(), 2);
    let text = cli(&h, &key, &work, &["release", "list"]);
    assert!(
        text.stdout
            .contains(&format!("app.bin  500000 bytes  sha256 {}", sha256(&big))),
        "{text:?}"
    );

    // Everything, into a new directory.
    let all = cli(
        &h,
        &key,
        &work,
        &["release", "download", "v1.0", "-o", "out", "--json"],
    );
    assert_eq!(all.code, 0, "{all:?}");
    assert_eq!(all.json()["files"].as_array().unwrap().len(), 2);
    assert!(std::fs::read(work.join("out/app.bin")).unwrap() == big);
    assert_eq!(
        std::fs::read_to_string(work.join("out/SHA256SUMS")).unwrap(),
        format!("{}  app.bin\n", sha256(&big))
    );
    // One file, into the current directory of another checkout.
    let other = h.temp_dir().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let one = cli(
        &h,
        &key,
        &work,
        &[
            "release",
            "download",
            "v1.0",
            "SHA256SUMS",
            "-o",
            other.to_str().unwrap(),
        ],
    );
    assert_eq!(one.code, 0, "{one:?}");
    assert!(one.stdout.contains("verified"), "{one:?}");
    assert_eq!(entries_under(&other), ["SHA256SUMS"]);

    // All or none: a clash on the second file takes the first one back out.
    std::fs::write(work.join("new.bin"), b"new").unwrap();
    let clash = cli(
        &h,
        &key,
        &work,
        &["release", "create", "v1.0", "new.bin", "app.bin"],
    );
    assert_eq!(
        (clash.code, clash.stderr.as_str()),
        (
            1,
            "error: release v1.0 already has a file app.bin; delete it first\n"
        )
    );
    let names: Vec<String> = cli(&h, &key, &work, &["release", "list", "--json"]).json()
        ["releases"][0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["SHA256SUMS", "app.bin"]);

    let deleted = cli(&h, &key, &work, &["release", "delete", "v1.0", "app.bin"]);
    assert_eq!(
        (deleted.code, deleted.stdout.as_str()),
        (0, "deleted app.bin from v1.0\n")
    );
    let deleted = cli(&h, &key, &work, &["release", "delete", "v1.0", "--json"]);
    assert_eq!(deleted.code, 0, "{deleted:?}");
    assert_eq!(deleted.json()["files"], serde_json::json!(["SHA256SUMS"]));
    let empty = cli(&h, &key, &work, &["release", "list"]);
    assert_eq!(empty.stdout, "no releases\n");
    let missing = cli(&h, &key, &work, &["release", "download", "v1.0"]);
    assert_eq!(
        (missing.code, missing.stderr.as_str()),
        (1, "error: no release v1.0\n")
    );
    assert_eq!(entries_under(&releases_dir(&h)), Vec::<String>::new());
}

#[test]
fn cli_refusals_are_one_line() {
    let h = ServerHarness::start();
    repo_with_tag(&h, "v1");
    let work = h.temp_dir().join("work");
    std::fs::write(work.join("a.bin"), b"a").unwrap();
    // bob can push but not rewind: he is told what he lacks, on one line.
    let bob = h.authorized_key("bob");
    let refused = cli(&h, &bob, &work, &["release", "create", "v1", "a.bin"]);
    assert_eq!(
        (refused.code, refused.stderr.as_str()),
        (1, "error: permission denied: releases need rewind access\n")
    );
    let unknown_tag = cli(
        &h,
        &h.ssh_client_key(),
        &work,
        &["release", "create", "v2", "a.bin"],
    );
    assert_eq!(
        (unknown_tag.code, unknown_tag.stderr.as_str()),
        (
            1,
            "error: no tag v2 in app.git: push it first (git push origin tag v2)\n"
        )
    );
    std::fs::write(work.join(".hidden"), b"h").unwrap();
    let bad_name = cli(
        &h,
        &h.ssh_client_key(),
        &work,
        &["release", "create", "v1", ".hidden"],
    );
    assert_eq!(bad_name.code, 1);
    assert!(
        bad_name
            .stderr
            .starts_with("error: cannot upload .hidden: its name is not a valid release file name"),
        "{bad_name:?}"
    );
    let no_remote = cli(
        &h,
        &h.ssh_client_key(),
        &work,
        &["release", "list", "--remote", "nope"],
    );
    assert_eq!(
        (no_remote.code, no_remote.stderr.as_str()),
        (1, "error: no remote named 'nope'\n")
    );
    assert_eq!(entries_under(&releases_dir(&h)), Vec::<String>::new());
}

#[test]
fn cli_download_refuses_bytes_that_do_not_match_the_checksum() {
    let h = ServerHarness::start();
    repo_with_tag(&h, "v1");
    let key = h.ssh_client_key();
    let work = h.temp_dir().join("work");
    std::fs::write(work.join("a.bin"), b"original").unwrap();
    let created = cli(&h, &key, &work, &["release", "create", "v1", "a.bin"]);
    assert_eq!(created.code, 0, "{created:?}");
    // The stored bytes rot on the server (same size, other content).
    std::fs::write(releases_dir(&h).join("app.git/v1/a.bin"), b"tampered").unwrap();
    let got = cli(&h, &key, &work, &["release", "download", "v1", "-o", "out"]);
    assert_eq!(got.code, 1, "{got:?}");
    assert!(
        got.stderr.starts_with("error: a.bin: checksum mismatch"),
        "{got:?}"
    );
    // Nothing half-written is left behind.
    assert_eq!(entries_under(&work.join("out")), Vec::<String>::new());
}

#[test]
fn web_lists_releases_and_streams_downloads() {
    let h = ServerHarness::start();
    repo_with_tag(&h, "v1.0");
    let work = h.temp_dir().join("work");
    h.git(&work, &["tag", "release/2.0"]);
    h.ssh_push(&work, &["refs/tags/release/2.0"]);
    let tarball = payload(200_000);
    let html = b"<script>alert(1)</script>".to_vec();
    for (tag, name, bytes) in [
        ("v1.0", "app.tar.gz", &tarball),
        ("v1.0", "page.html", &html),
        ("release/2.0", "NOTES.txt", &b"notes\n".to_vec()),
    ] {
        let out = h.ssh_exec_with_stdin(
            &format!("collab-release create app '{tag}' '{name}'"),
            bytes,
        );
        assert_eq!(out.code, 0, "{out:?}");
    }

    // Private (the default): exactly the answer for a missing repository.
    for path in ["/-/releases", "/-/releases/v1.0/app.tar.gz"] {
        let private = web_support::get(&h, &format!("/app{path}"));
        let missing = web_support::get(&h, &format!("/nope{path}"));
        assert_eq!(private.status, 404, "{path}");
        assert_eq!(
            (private.status, private.body),
            (missing.status, missing.body),
            "{path}"
        );
    }

    web_support::make_public(&h, "app");
    let page = web_support::get(&h, "/app/-/releases");
    assert_eq!(page.status, 200);
    let text = page.text();
    for needle in [
        "href=\"/app/-/releases/v1.0/app.tar.gz\"",
        "href=\"/app/-/releases/release/2.0/NOTES.txt\"",
        "href=\"/app/-/tree/v1.0\"",
        "195.3 KiB",
        "title=\"200000 bytes\"",
        &sha256(&tarball),
    ] {
        assert!(text.contains(needle), "{needle} not on the page:\n{text}");
    }

    let got = web_support::get(&h, "/app/-/releases/v1.0/app.tar.gz");
    assert_eq!(got.status, 200);
    assert_eq!(got.header("content-type"), Some("application/gzip"));
    assert_eq!(got.header("content-length"), Some("200000"));
    assert_eq!(
        got.header("content-disposition"),
        Some("attachment; filename=\"app.tar.gz\"")
    );
    assert!(got.body == tarball, "downloaded bytes differ");
    // User content that a browser could run is served as inert bytes.
    let page_html = web_support::get(&h, "/app/-/releases/v1.0/page.html");
    assert_eq!(
        page_html.header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(page_html.body, html);
    let notes = web_support::get(&h, "/app/-/releases/release/2.0/NOTES.txt");
    assert_eq!((notes.status, notes.text().as_str()), (200, "notes\n"));
    assert_eq!(
        notes.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    for missing in [
        "/app/-/releases/v1.0/nope.bin",
        "/app/-/releases/v9/app.tar.gz",
        "/app/-/releases/v1.0/.app.tar.gz.meta",
        "/app/-/releases/v1.0",
    ] {
        assert_eq!(web_support::get(&h, missing).status, 404, "{missing}");
    }
}

/// File names of 250 to 255 bytes (the documented limit) upload, list,
/// download (through the CLI, which streams into a temporary file beside
/// the target) and delete like short ones. Regression for issue 12: the
/// server's record name `.<file>.meta` passed the file-name limit and the
/// upload failed with "internal error".
#[test]
fn file_names_of_up_to_255_bytes_work() {
    let h = ServerHarness::start();
    repo_with_tag(&h, "v1");
    let key = h.ssh_client_key();
    let work = h.temp_dir().join("work");
    let names: Vec<String> = [250, 251, 254, 255]
        .iter()
        .map(|&n| format!("{n}-{}", "a".repeat(n - 4)))
        .collect();
    for name in &names {
        assert_eq!(name.len().to_string(), name[..3]);
        let up = ssh_raw_bytes(
            &h,
            &key,
            &format!("collab-release create 'app' 'v1' '{name}'"),
            name.as_bytes(),
        );
        assert_eq!(up.code, 0, "{}: {}", name.len(), up.stderr);
    }
    let listed = cli(&h, &key, &work, &["release", "list", "--json"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    let listed: Vec<String> = listed.json()["releases"][0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, names);

    let got = cli(
        &h,
        &key,
        &work,
        &["release", "download", "v1", "-o", "out", "--json"],
    );
    assert_eq!(got.code, 0, "{got:?}");
    let mut downloaded = entries_under(&work.join("out"));
    downloaded.sort();
    assert_eq!(downloaded, names);
    for name in &names {
        assert_eq!(
            std::fs::read(work.join("out").join(name)).unwrap(),
            name.as_bytes()
        );
    }

    let deleted = cli(&h, &key, &work, &["release", "delete", "v1", "--json"]);
    assert_eq!(deleted.code, 0, "{deleted:?}");
    assert_eq!(entries_under(&releases_dir(&h)), Vec::<String>::new());
    assert!(!h.log().contains("ERROR"), "{}", h.log());
}
