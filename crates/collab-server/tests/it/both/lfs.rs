//! git-lfs's SSH transfer (`git-lfs-transfer`) against the real server:
//! the real `git lfs` client pushing, cloning, locking and unlocking over
//! the real OpenSSH client; hostile transfers from a raw pkt-line client
//! (wrong hashes and sizes, truncated uploads, bad object ids, the size
//! limit and the quota crossed, a stream that is not pkt-lines), each
//! refused with its status and one line and nothing partial left in the
//! store; access (private == missing, readers may not upload); and a
//! repository's objects through a rename and a delete.

use collab_testkit as common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{HarnessOptions, ServerHarness, NOT_FOUND};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// Deterministic bytes that are not all alike (`seed` makes them differ).
fn payload(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7919 + seed * 104_729) % 251) as u8)
        .collect()
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

// A raw client: pkt-lines written by hand, sent in one go (no request
// depends on an earlier answer), answers parsed after the session ends.

fn pkt(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", payload.len() + 4).into_bytes();
    out.extend_from_slice(payload);
    out
}

fn line(text: &str) -> Vec<u8> {
    pkt(format!("{text}\n").as_bytes())
}

const FLUSH: &[u8] = b"0000";
const DELIM: &[u8] = b"0001";

/// A request: a command line, its arguments, and (after a delimiter) its
/// lines or data packets, then a flush.
fn request(command: &str, args: &[&str], body: Option<&[Vec<u8>]>) -> Vec<u8> {
    let mut out = line(command);
    for arg in args {
        out.extend(line(arg));
    }
    if let Some(body) = body {
        out.extend_from_slice(DELIM);
        for p in body {
            out.extend_from_slice(p);
        }
    }
    out.extend_from_slice(FLUSH);
    out
}

/// `put-object` of `data` declared as `oid` and `size`, in 64 KiB packets.
fn put(oid: &str, size: usize, data: &[u8]) -> Vec<u8> {
    let body: Vec<Vec<u8>> = data.chunks(65516).map(pkt).collect();
    request(
        &format!("put-object {oid}"),
        &[&format!("size={size}")],
        Some(&body),
    )
}

/// One answer: its status, arguments, and what came after a delimiter.
#[derive(Debug)]
struct Answer {
    status: u16,
    args: Vec<String>,
    body: Vec<Vec<u8>>,
}

impl Answer {
    fn lines(&self) -> Vec<String> {
        self.body
            .iter()
            .map(|l| {
                String::from_utf8_lossy(l)
                    .trim_end_matches('\n')
                    .to_string()
            })
            .collect()
    }
}

#[derive(Debug)]
struct Session {
    capabilities: Vec<String>,
    answers: Vec<Answer>,
    stderr: String,
    code: i32,
}

fn parse_packets(mut out: &[u8]) -> Vec<Option<Vec<u8>>> {
    // None: flush; Some(empty) never occurs for a delimiter, which is
    // given as the one-byte marker [1].
    let mut packets = Vec::new();
    while out.len() >= 4 {
        let len = usize::from_str_radix(std::str::from_utf8(&out[..4]).unwrap(), 16).unwrap();
        match len {
            0 => packets.push(None),
            1 => packets.push(Some(vec![1])),
            n => {
                packets.push(Some(out[4..n].to_vec()));
                out = &out[n..];
                continue;
            }
        }
        out = &out[4..];
    }
    assert!(out.is_empty(), "trailing bytes {out:?}");
    packets
}

fn parse_session(stdout: &[u8], stderr: String, code: i32) -> Session {
    let mut packets = parse_packets(stdout).into_iter();
    let mut capabilities = Vec::new();
    for p in packets.by_ref() {
        match p {
            None => break,
            Some(l) => capabilities.push(String::from_utf8(l).unwrap().trim_end().to_string()),
        }
    }
    let mut answers = Vec::new();
    while let Some(Some(first)) = packets.next() {
        let status = String::from_utf8(first).unwrap();
        let status: u16 = status
            .trim_end()
            .strip_prefix("status ")
            .unwrap_or_else(|| panic!("expected a status, got {status:?}"))
            .parse()
            .unwrap();
        let (mut args, mut body, mut after_delim) = (Vec::new(), Vec::new(), false);
        for p in packets.by_ref() {
            match p {
                None => break,
                Some(d) if d == [1] && !after_delim => after_delim = true,
                Some(d) if after_delim => body.push(d),
                Some(d) => args.push(String::from_utf8(d).unwrap().trim_end().to_string()),
            }
        }
        answers.push(Answer { status, args, body });
    }
    Session {
        capabilities,
        answers,
        stderr,
        code,
    }
}

/// Run `git-lfs-transfer '<repo>' <op>` as `key` with `input` on stdin.
fn session(h: &ServerHarness, key: &Path, repo: &str, op: &str, input: &[u8]) -> Session {
    let out = raw(h, key, &format!("git-lfs-transfer '{repo}' {op}"), input);
    parse_session(
        &out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

fn raw(h: &ServerHarness, key: &Path, remote_cmd: &str, input: &[u8]) -> Output {
    let mut child = Command::new("ssh")
        .args(h.ssh_options(key))
        .args(["git@127.0.0.1", remote_cmd])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ssh");
    let mut stdin = child.stdin.take().unwrap();
    let data = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().expect("ssh output");
    let _ = writer.join();
    out
}

/// Every file under the LFS store: (name, bytes).
fn stored(h: &ServerHarness) -> Vec<(String, Vec<u8>)> {
    let mut found = Vec::new();
    let mut todo = vec![h.state_dir().join("lfs")];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                todo.push(e.path());
            } else {
                let name = e.file_name().to_string_lossy().into_owned();
                found.push((name, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    found.sort();
    found
}

fn stored_names(h: &ServerHarness) -> Vec<String> {
    stored(h).into_iter().map(|(n, _)| n).collect()
}

fn events(h: &ServerHarness, kind: &str) -> Vec<Value> {
    let out = h.ssh_exec("collab-events watch --since 1 --no-follow");
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == kind)
        .collect()
}

fn start_with_limits(max_object: &str, max_repo: &str) -> ServerHarness {
    ServerHarness::start_with(HarnessOptions {
        env: vec![
            ("GIT_COLLAB_LFS__MAX_OBJECT_SIZE".into(), max_object.into()),
            ("GIT_COLLAB_LFS__MAX_REPO_SIZE".into(), max_repo.into()),
        ],
        ..Default::default()
    })
}

/// `git` (and through it `git lfs`) as `key` in `dir`, checked.
fn git_ok(h: &ServerHarness, key: &Path, dir: &Path, args: &[&str]) -> Output {
    let out = h.git_as(key, dir, args);
    assert!(
        out.status.success(),
        "git {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A clone of `repo` as `key` with git-lfs's filters and hooks on.
fn lfs_clone(h: &ServerHarness, key: &Path, repo: &str, dir: &str) -> PathBuf {
    // The harness's HOME is private to the test: its global config gets
    // the filters, as `git lfs install` does for a user.
    git_ok(h, key, h.state_dir(), &["lfs", "install", "--skip-repo"]);
    let clone = h.clone_as(key, repo, dir);
    git_ok(h, key, &clone, &["lfs", "install", "--local"]);
    clone
}

#[test]
fn git_lfs_pushes_clones_and_locks_over_ssh() {
    let h = ServerHarness::start();
    h.create_repo("big");
    let admin = h.ssh_client_key();
    let alice = lfs_clone(&h, &admin, "big", "alice");
    git_ok(&h, &admin, &alice, &["lfs", "track", "*.bin"]);
    let data = payload(3 << 20, 1);
    std::fs::write(alice.join("data.bin"), &data).unwrap();
    git_ok(&h, &admin, &alice, &["add", ".gitattributes", "data.bin"]);
    git_ok(
        &h,
        &admin,
        &alice,
        &["commit", "-q", "-m", "Add a large file"],
    );
    // The issue's failure: `batch request: error: unknown command`.
    git_ok(
        &h,
        &admin,
        &alice,
        &["push", "origin", "HEAD:refs/heads/main"],
    );

    // Stored once, whole, under its SHA-256; no temporary file left.
    let oid = sha256(&data);
    let files = stored(&h);
    assert_eq!(files.len(), 1, "{:?}", stored_names(&h));
    assert_eq!(files[0].0, oid);
    assert!(files[0].1 == data, "the stored bytes differ");
    // The event log says so.
    let uploaded = events(&h, "lfs.uploaded");
    assert_eq!(uploaded.len(), 1, "{uploaded:?}");
    assert_eq!(uploaded[0]["repo"], "big.git");
    assert_eq!(uploaded[0]["payload"]["objects"], 1);
    assert_eq!(uploaded[0]["payload"]["bytes"], data.len() as u64);

    // The web's raw page serves the object, not the pointer git holds.
    let out = h.ssh_exec("collab-repo visibility 'big' public");
    assert_eq!(out.code, 0, "{out:?}");
    let raw = common::web::get(&h, "/big/-/raw/main/data.bin");
    assert_eq!(raw.status, 200);
    assert!(
        raw.body == data,
        "the raw page sent {} bytes",
        raw.body.len()
    );
    let pointer = common::web::get(&h, "/big/-/raw/main/.gitattributes");
    assert_eq!(pointer.body, b"*.bin filter=lfs diff=lfs merge=lfs -text\n");

    // A fresh clone checks the file out with its content, not the pointer.
    let bob_key = h.authorized_key("bob");
    let bob = lfs_clone(&h, &bob_key, "big", "bob");
    assert!(std::fs::read(bob.join("data.bin")).unwrap() == data);

    // Locks: Alice takes one; Bob sees it as theirs and can neither take
    // nor give it back; Bob cannot push a change to the locked file.
    git_ok(&h, &admin, &alice, &["lfs", "lock", "data.bin"]);
    let listed = text(&git_ok(&h, &bob_key, &bob, &["lfs", "locks"]));
    assert!(listed.contains("data.bin"), "{listed}");
    let taken = h.git_as(&bob_key, &bob, &["lfs", "lock", "data.bin"]);
    assert!(!taken.status.success(), "{}", text(&taken));
    let stolen = h.git_as(&bob_key, &bob, &["lfs", "unlock", "data.bin"]);
    assert!(!stolen.status.success(), "{}", text(&stolen));
    std::fs::write(bob.join("data.bin"), payload(1 << 20, 2)).unwrap();
    git_ok(
        &h,
        &bob_key,
        &bob,
        &["commit", "-q", "-am", "Change a locked file"],
    );
    // Unset, git-lfs only warns (docs/lfs.md).
    git_ok(&h, &bob_key, &bob, &["config", "lfs.locksverify", "true"]);
    let pushed = h.git_as(&bob_key, &bob, &["push", "origin", "HEAD:refs/heads/main"]);
    assert!(!pushed.status.success(), "{}", text(&pushed));
    assert!(text(&pushed).contains("locked"), "{}", text(&pushed));

    // Bob locks another path; the admin breaks it with --force, then
    // gives back their own.
    std::fs::write(bob.join("other.bin"), b"x").unwrap();
    git_ok(&h, &bob_key, &bob, &["lfs", "lock", "other.bin"]);
    git_ok(
        &h,
        &admin,
        &alice,
        &["lfs", "unlock", "--force", "other.bin"],
    );
    git_ok(&h, &admin, &alice, &["lfs", "unlock", "data.bin"]);
    let listed = text(&git_ok(&h, &bob_key, &bob, &["lfs", "locks"]));
    assert!(!listed.contains(".bin"), "{listed}");
    // With the lock gone, Bob's push goes through.
    git_ok(
        &h,
        &bob_key,
        &bob,
        &["push", "origin", "HEAD:refs/heads/main"],
    );
    assert_eq!(stored(&h).len(), 2, "{:?}", stored_names(&h));
}

/// The commit `main` of `repo` points at on the server.
fn remote_main(h: &ServerHarness, key: &Path, dir: &Path) -> String {
    let out = git_ok(h, key, dir, &["ls-remote", "origin", "refs/heads/main"]);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Commit everything in `dir` as `key` with `message`.
fn commit_all(h: &ServerHarness, key: &Path, dir: &Path, message: &str) {
    git_ok(h, key, dir, &["add", "-A"]);
    git_ok(h, key, dir, &["commit", "-q", "-m", message]);
}

/// Clone `repo` (a git-lfs clone in `dir`), track `*.bin`, and push
/// `files` to `main` in one commit as `key`; the clone.
fn push_lfs_files(
    h: &ServerHarness,
    key: &Path,
    repo: &str,
    dir: &str,
    files: &[(&str, &[u8])],
) -> PathBuf {
    let clone = lfs_clone(h, key, repo, dir);
    git_ok(h, key, &clone, &["lfs", "track", "*.bin"]);
    for (name, data) in files {
        std::fs::write(clone.join(name), data).unwrap();
    }
    commit_all(h, key, &clone, "Add LFS objects");
    git_ok(h, key, &clone, &["push", "origin", "HEAD:refs/heads/main"]);
    clone
}

#[test]
fn a_push_changing_a_path_locked_by_another_is_refused_by_the_server() {
    let h = ServerHarness::start();
    h.create_repo("big");
    h.create_repo("other");
    let admin = h.ssh_client_key();
    let alice = lfs_clone(&h, &admin, "big", "alice");
    git_ok(&h, &admin, &alice, &["lfs", "track", "*.bin"]);
    std::fs::write(alice.join("data.bin"), payload(100_000, 1)).unwrap();
    std::fs::write(alice.join("notes.txt"), "one\n").unwrap();
    commit_all(&h, &admin, &alice, "Add a large file");
    git_ok(
        &h,
        &admin,
        &alice,
        &["push", "origin", "HEAD:refs/heads/main"],
    );
    let bob_key = h.authorized_key("bob");
    let bob = lfs_clone(&h, &bob_key, "big", "bob");

    // Alice locks data.bin here; a lock on free.bin in another repository
    // does not count in this one.
    git_ok(&h, &admin, &alice, &["lfs", "lock", "data.bin"]);
    let mut input = request("lock", &["path=free.bin"], None);
    input.extend(request("quit", &[], None));
    let s = session(&h, &admin, "other", "upload", &input);
    assert_eq!(s.answers[0].status, 201, "{s:?}");
    let locks: Value =
        serde_json::from_slice(&git_ok(&h, &bob_key, &bob, &["lfs", "locks", "--json"]).stdout)
            .unwrap();
    let owner = locks[0]["owner"]["name"].as_str().unwrap().to_string();
    assert_eq!(locks[0]["path"], "data.bin", "{locks}");

    // Bob changes the locked file, then another one on top. git-lfs does
    // not stop him (lfs.locksverify false), nor does a client without
    // git-lfs's pre-push hook (--no-verify): the server does, with one line.
    git_ok(&h, &bob_key, &bob, &["config", "lfs.locksverify", "false"]);
    std::fs::write(bob.join("data.bin"), payload(100_000, 2)).unwrap();
    commit_all(&h, &bob_key, &bob, "Change a locked file");
    std::fs::write(bob.join("notes.txt"), "two\n").unwrap();
    commit_all(&h, &bob_key, &bob, "Change another file");
    let before = remote_main(&h, &bob_key, &bob);
    for extra in [&[][..], &["--no-verify"][..]] {
        let mut args = vec!["push", "origin", "HEAD:refs/heads/main"];
        args.extend_from_slice(extra);
        let pushed = h.git_as(&bob_key, &bob, &args);
        let said = text(&pushed);
        assert!(!pushed.status.success(), "{said}");
        let lines: Vec<&str> = said.lines().filter(|l| l.contains("locked by")).collect();
        assert_eq!(lines.len(), 1, "{said}");
        assert!(
            lines[0].starts_with(&format!("remote: error: data.bin: locked by {owner} ")),
            "{said}"
        );
        assert!(lines[0].contains("git lfs unlock data.bin"), "{said}");
        assert_eq!(remote_main(&h, &bob_key, &bob), before, "{extra:?}");
    }

    // The lock owner's own change passes.
    std::fs::write(alice.join("data.bin"), payload(100_000, 3)).unwrap();
    commit_all(&h, &admin, &alice, "Change my locked file");
    git_ok(
        &h,
        &admin,
        &alice,
        &["push", "origin", "HEAD:refs/heads/main"],
    );

    // Bob's change of other paths (free.bin is locked only elsewhere) passes.
    git_ok(&h, &bob_key, &bob, &["fetch", "-q", "origin"]);
    git_ok(
        &h,
        &bob_key,
        &bob,
        &["reset", "-q", "--hard", "origin/main"],
    );
    std::fs::write(bob.join("free.bin"), payload(1000, 4)).unwrap();
    std::fs::write(bob.join("notes.txt"), "three\n").unwrap();
    commit_all(&h, &bob_key, &bob, "Change free files");
    git_ok(
        &h,
        &bob_key,
        &bob,
        &["push", "origin", "HEAD:refs/heads/main"],
    );
}

#[test]
fn hostile_transfers_get_a_status_and_one_line_and_leave_nothing_partial() {
    let h = start_with_limits("1MiB", "2MiB");
    h.create_repo("r");
    let key = h.ssh_client_key();
    let good = payload(900 << 10, 3);
    let good_oid = sha256(&good);
    let other = payload(900 << 10, 4);
    let other_oid = sha256(&other);
    let third = payload(900 << 10, 5);
    let big = payload((1 << 20) + 1, 6);
    let mut input = request("version 1", &[], None);
    // 0: an oid that is not 64 hex digits.
    input.extend(request(
        "batch",
        &["transfer=ssh", "hash-algo=sha256"],
        Some(&[line("../../etc/passwd 10")]),
    ));
    // 1: the right size, the wrong bytes.
    input.extend(put(&good_oid, good.len(), &other));
    // 2: fewer bytes than its size (the flush came early).
    input.extend(put(&good_oid, good.len(), &good[..1000]));
    // 3: more bytes than its size.
    input.extend(put(&sha256(&good[..1000]), 1000, &good));
    // 4: an oid that would be a path outside the store.
    input.extend(put("../../../../etc/passwd", 5, b"hello"));
    // 5: over lfs.max_object_size, at batch and at put-object (6).
    input.extend(request(
        "batch",
        &["transfer=ssh"],
        Some(&[line(&format!("{} {}", sha256(&big), big.len()))]),
    ));
    input.extend(put(&sha256(&big), big.len(), &big));
    // 7, 8: two good objects; 9: verified.
    input.extend(put(&good_oid, good.len(), &good));
    input.extend(put(&other_oid, other.len(), &other));
    input.extend(request(
        &format!("verify-object {good_oid}"),
        &[&format!("size={}", good.len())],
        None,
    ));
    // 10: a third would cross lfs.max_repo_size (batch), 11: put-object.
    input.extend(request(
        "batch",
        &["transfer=ssh"],
        Some(&[line(&format!("{} {}", sha256(&third), third.len()))]),
    ));
    input.extend(put(&sha256(&third), third.len(), &third));
    // 12: a stored object's oid with other bytes: what is there stays.
    input.extend(put(&good_oid, good.len(), &other));
    // 13: get-object is for download sessions.
    input.extend(request(&format!("get-object {good_oid}"), &[], None));
    // 14: an unknown command.
    input.extend(request("rm -rf", &[], None));
    input.extend(request("quit", &[], None));
    let s = session(&h, &key, "r", "upload", &input);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(s.capabilities, ["version=1", "locking"]);
    let got: Vec<(u16, Vec<String>)> = s.answers.iter().map(|a| (a.status, a.lines())).collect();
    let expect_refused = |i: usize, status: u16, needle: &str| {
        let (code, lines) = &got[i + 1];
        assert_eq!(*code, status, "answer {i}: {got:?}");
        assert_eq!(lines.len(), 1, "answer {i}: {got:?}");
        assert!(lines[0].contains(needle), "answer {i}: {got:?}");
    };
    assert_eq!(got[0].0, 200, "version: {got:?}");
    expect_refused(0, 422, "invalid object id");
    expect_refused(1, 422, "SHA-256");
    expect_refused(2, 422, "1000 bytes received");
    expect_refused(3, 400, "more data than its size");
    expect_refused(4, 400, "invalid object id");
    expect_refused(5, 413, "lfs.max_object_size");
    expect_refused(6, 413, "lfs.max_object_size");
    assert_eq!(got[8].0, 200, "{got:?}");
    assert_eq!(got[9].0, 200, "{got:?}");
    assert_eq!(got[10].0, 200, "verify: {got:?}");
    expect_refused(10, 413, "lfs.max_repo_size");
    expect_refused(11, 413, "lfs.max_repo_size");
    assert_eq!(got[13].0, 200, "{got:?}");
    expect_refused(13, 403, "download session");
    expect_refused(14, 400, "unknown command");
    assert_eq!(got[16].0, 200, "quit: {got:?}");
    assert_eq!(got.len(), 17, "{got:?}");

    // Only the two good objects, whole; no temporary file.
    let files = stored(&h);
    let mut want = vec![(good_oid.clone(), good.clone()), (other_oid.clone(), other)];
    want.sort();
    assert!(files == want, "{:?}", stored_names(&h));

    // /metrics counts them, and names no private repository.
    let metrics = common::web::metrics(&h);
    assert!(
        metrics.contains("git_collab_lfs_uploaded_objects_total 2\n"),
        "{metrics}"
    );
    assert!(!metrics.contains("repo=\"r.git\""), "{metrics}");
    // Once public, the repository's own series appear at its next upload.
    let out = h.ssh_exec("collab-repo visibility 'r' public");
    assert_eq!(out.code, 0, "{out:?}");
    let small = payload(1000, 8);
    let s = session(
        &h,
        &key,
        "r",
        "upload",
        &put(&sha256(&small), small.len(), &small),
    );
    assert_eq!(s.answers[0].status, 200, "{s:?}");
    let metrics = common::web::metrics(&h);
    assert!(
        metrics.contains("git_collab_repo_lfs_objects{repo=\"r.git\"} 3\n"),
        "{metrics}"
    );
    let held = 2 * good.len() + small.len();
    assert!(
        metrics.contains(&format!(
            "git_collab_repo_lfs_bytes{{repo=\"r.git\"}} {held}\n"
        )),
        "{metrics}"
    );

    // An upload cut off mid-object (the connection closes): nothing left.
    let mut cut = request("version 1", &[], None);
    let mid = payload(100_000, 9);
    let whole = put(&sha256(&mid), mid.len(), &mid);
    cut.extend_from_slice(&whole[..whole.len() / 2]);
    let s = session(&h, &key, "r", "upload", &cut);
    assert_eq!(s.answers.len(), 1, "{s:?}");
    assert_eq!(s.code, 1, "{s:?}");
    assert_eq!(stored(&h).len(), 3, "{:?}", stored_names(&h));

    // A download session: batch says what there is, get-object sends it.
    let missing = sha256(b"missing");
    let mut input = request("version 1", &[], None);
    input.extend(request(
        "batch",
        &["transfer=ssh"],
        Some(&[
            line(&format!("{good_oid} {}", good.len())),
            line(&format!("{missing} 7")),
        ]),
    ));
    input.extend(request(&format!("get-object {good_oid}"), &[], None));
    input.extend(request(&format!("get-object {missing}"), &[], None));
    input.extend(put(&good_oid, good.len(), &good));
    input.extend(request("quit", &[], None));
    let s = session(&h, &key, "r", "download", &input);
    assert_eq!(s.code, 0, "{s:?}");
    let batch = &s.answers[1];
    assert_eq!(batch.status, 200);
    assert_eq!(batch.args, ["hash-algo=sha256"]);
    assert_eq!(
        batch.lines(),
        [
            format!("{good_oid} {} download", good.len()),
            format!("{missing} 7 noop")
        ]
    );
    let object = &s.answers[2];
    assert_eq!(object.status, 200);
    assert_eq!(object.args, [format!("size={}", good.len())]);
    assert!(object.body.concat() == good, "get-object sent other bytes");
    assert_eq!(s.answers[3].status, 404);
    assert_eq!(s.answers[4].status, 403, "{:?}", s.answers[4]);
    assert_eq!(s.answers[5].status, 200);

    // A stream that is not pkt-lines: one line and exit 1.
    let s = session(&h, &key, "r", "upload", b"zzzz nonsense");
    assert_eq!(s.code, 1, "{s:?}");
    assert_eq!(s.stderr.lines().count(), 1, "{s:?}");
    assert!(
        s.stderr
            .starts_with("error: git-lfs-transfer: bad packet length"),
        "{s:?}"
    );
    assert_eq!(stored(&h).len(), 3);
}

#[test]
fn access_is_the_repositorys_and_private_looks_missing() {
    let h = ServerHarness::start();
    let secret = h.create_repo("secret");
    std::fs::write(secret.join("collab-policy.toml"), "read = []\nwrite = []\n").unwrap();
    let open = h.create_repo("open");
    std::fs::write(
        open.join("collab-policy.toml"),
        "read = [\"*\"]\nwrite = []\n",
    )
    .unwrap();
    let user = h.authorized_key("user");
    let quit = request("quit", &[], None);
    for op in ["upload", "download"] {
        let hidden = raw(&h, &user, &format!("git-lfs-transfer 'secret' {op}"), &quit);
        let missing = raw(
            &h,
            &user,
            &format!("git-lfs-transfer 'missing' {op}"),
            &quit,
        );
        assert_eq!(hidden, missing, "{op}");
        assert_eq!(String::from_utf8_lossy(&hidden.stderr), NOT_FOUND);
        assert_eq!(hidden.status.code(), Some(1));
    }
    // A reader downloads, and may not upload.
    let s = session(&h, &user, "open", "download", &quit);
    assert_eq!((s.code, s.answers.len()), (0, 1), "{s:?}");
    let refused = raw(&h, &user, "git-lfs-transfer 'open' upload", &quit);
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        "error: permission denied: git-lfs uploads need write access\n"
    );
    // Older git-lfs asks for an HTTP endpoint: one line, whatever the repository.
    for repo in ["open", "secret", "missing"] {
        let out = raw(
            &h,
            &user,
            &format!("git-lfs-authenticate '{repo}' upload"),
            b"",
        );
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("use the SSH transfer (git-lfs >= 3.0)"),
            "{err}"
        );
    }
    // The operation is one of two words.
    let out = raw(&h, &user, "git-lfs-transfer 'open' delete", b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: usage: git-lfs-transfer"));
}

#[test]
fn objects_and_locks_follow_a_rename_and_go_with_a_delete() {
    let h = ServerHarness::start();
    h.create_repo("before");
    let key = h.ssh_client_key();
    let data = payload(10_000, 7);
    let oid = sha256(&data);
    let mut input = put(&oid, data.len(), &data);
    input.extend(request("lock", &["path=assets/a.psd"], None));
    input.extend(request("quit", &[], None));
    let s = session(&h, &key, "before", "upload", &input);
    assert_eq!(s.answers[0].status, 200, "{s:?}");
    assert_eq!(s.answers[1].status, 201, "{s:?}");
    let lock_id = s.answers[1].args[0]
        .strip_prefix("id=")
        .unwrap()
        .to_string();

    // A backup holds the object, as a file of the state directory.
    let backup = h.temp_dir().join("backup");
    let out = h.host_cli(&["backup", "--to", backup.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let mut todo = vec![backup.join("state").join("lfs")];
    let mut in_backup = Vec::new();
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                todo.push(e.path());
            } else {
                in_backup.push((
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                ));
            }
        }
    }
    assert!(
        in_backup == vec![(oid.clone(), data.clone())],
        "the backup's LFS files differ"
    );

    let out = h.ssh_exec("collab-repo rename 'before' 'after'");
    assert_eq!(out.code, 0, "{out:?}");
    let mut input = request(&format!("get-object {oid}"), &[], None);
    input.extend(request("list-lock", &[], None));
    input.extend(request("quit", &[], None));
    let s = session(&h, &key, "after", "download", &input);
    assert_eq!(s.answers[0].status, 200, "{s:?}");
    assert!(s.answers[0].body.concat() == data);
    let locks = s.answers[1].lines();
    assert_eq!(locks[0], format!("lock {lock_id}"), "{locks:?}");
    assert_eq!(locks[1], format!("path {lock_id} assets/a.psd"));
    assert_eq!(locks[4], format!("owner {lock_id} ours"));

    let out = h.ssh_exec("collab-repo delete 'after' --confirm 'after'");
    assert_eq!(out.code, 0, "{out:?}");
    assert!(stored(&h).is_empty(), "{:?}", stored_names(&h));
    // A new repository under the old name starts empty: no objects, no locks.
    h.create_repo("after");
    let mut input = request(&format!("get-object {oid}"), &[], None);
    input.extend(request("list-lock", &[], None));
    input.extend(request("quit", &[], None));
    let s = session(&h, &key, "after", "download", &input);
    assert_eq!(s.answers[0].status, 404, "{s:?}");
    assert_eq!(
        (s.answers[1].status, s.answers[1].body.len()),
        (200, 0),
        "{s:?}"
    );
}

/// Set the time of every stored object file to `age` ago.
fn age_store(h: &ServerHarness, age: std::time::Duration) {
    let then = std::time::SystemTime::now() - age;
    let mut todo = vec![h.state_dir().join("lfs")];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                todo.push(e.path());
            } else {
                std::fs::File::open(e.path())
                    .unwrap()
                    .set_modified(then)
                    .unwrap();
            }
        }
    }
}

#[test]
fn maintenance_collects_lfs_objects_no_ref_points_at_after_the_grace() {
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_LFS__GC_GRACE".into(), "1h".into())],
        ..Default::default()
    });
    h.create_repo("big");
    let admin = h.ssh_client_key();
    let repo = lfs_clone(&h, &admin, "big", "work");
    git_ok(&h, &admin, &repo, &["lfs", "track", "*.bin"]);
    let (kept, gone, proposed) = (payload(50_000, 1), payload(60_000, 2), payload(70_000, 3));
    // `kept` on main; `gone` only on a branch deleted after; `proposed`
    // only in a patch (push-to-review: a revision ref under refs/collab/).
    std::fs::write(repo.join("kept.bin"), &kept).unwrap();
    commit_all(&h, &admin, &repo, "Keep");
    git_ok(
        &h,
        &admin,
        &repo,
        &["push", "origin", "HEAD:refs/heads/main"],
    );
    std::fs::write(repo.join("gone.bin"), &gone).unwrap();
    commit_all(&h, &admin, &repo, "Soon gone");
    git_ok(
        &h,
        &admin,
        &repo,
        &["push", "origin", "HEAD:refs/heads/tmp"],
    );
    git_ok(&h, &admin, &repo, &["reset", "-q", "--hard", "HEAD~1"]);
    std::fs::write(repo.join("proposed.bin"), &proposed).unwrap();
    commit_all(&h, &admin, &repo, "Propose");
    git_ok(&h, &admin, &repo, &["push", "origin", "HEAD:refs/for/main"]);
    git_ok(&h, &admin, &repo, &["push", "origin", ":refs/heads/tmp"]);

    // Two objects no ref points at, uploaded without a push: `found`
    // will be named by an upload's batch again (as by a push about to
    // point at it), `young` stays young.
    let (found, young) = (payload(1000, 4), payload(2000, 5));
    let mut input = put(&sha256(&found), found.len(), &found);
    input.extend(request("quit", &[], None));
    assert_eq!(
        session(&h, &admin, "big", "upload", &input).answers[0].status,
        200
    );
    assert_eq!(stored(&h).len(), 4, "{:?}", stored_names(&h));

    // Two hours pass (lfs.gc_grace is 1h here) for what is stored so far.
    age_store(&h, std::time::Duration::from_secs(2 * 3600));
    let mut input = put(&sha256(&young), young.len(), &young);
    input.extend(request(
        "batch",
        &["transfer=ssh", "hash-algo=sha256"],
        Some(&[line(&format!("{} {}", sha256(&found), found.len()))]),
    ));
    input.extend(request("quit", &[], None));
    let s = session(&h, &admin, "big", "upload", &input);
    assert_eq!(s.answers[0].status, 200, "{s:?}");
    assert_eq!(
        s.answers[1].lines(),
        [format!("{} {} noop", sha256(&found), found.len())],
        "{s:?}"
    );

    let out = h.ssh_exec("collab-repo visibility 'big' public");
    assert_eq!(out.code, 0, "{out:?}");
    let out = h.ssh_exec("collab-repo gc 'big'");
    assert_eq!(out.code, 0, "{out:?}");
    let reply: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(reply["lfs_objects_removed"], 1, "{reply}");
    // /metrics shows what the public repository holds now.
    let held = kept.len() + proposed.len() + found.len() + young.len();
    let metrics = common::web::metrics(&h);
    assert!(
        metrics.contains(&format!(
            "git_collab_repo_lfs_bytes{{repo=\"big.git\"}} {held}\n"
        )),
        "{metrics}"
    );
    assert_eq!(reply["lfs_bytes_removed"], gone.len() as u64, "{reply}");
    let mut want: Vec<String> = [&kept, &proposed, &found, &young]
        .iter()
        .map(|d| sha256(d))
        .collect();
    want.sort();
    assert_eq!(stored_names(&h), want);

    // What is kept still serves: a fresh clone has the file's content.
    let again = lfs_clone(&h, &admin, "big", "again");
    assert!(std::fs::read(again.join("kept.bin")).unwrap() == kept);
    // A second run finds nothing more to collect.
    let out = h.ssh_exec("collab-repo gc 'big'");
    let reply: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(reply["lfs_objects_removed"], 0, "{reply}");
}

/// `path` inside a `.tar.gz` archive (as `tar` reads it), or `None`.
fn from_tar_gz(archive: &[u8], path: &str) -> Option<Vec<u8>> {
    let mut child = Command::new("tar")
        .args(["-xzO", "-f", "-", path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let bytes = archive.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    out.status.success().then_some(out.stdout)
}

#[test]
fn the_web_shows_and_archives_lfs_files_as_their_content() {
    let h = ServerHarness::start();
    h.create_repo("site");
    let admin = h.ssh_client_key();
    let clone = lfs_clone(&h, &admin, "site", "site");
    git_ok(&h, &admin, &clone, &["lfs", "track", "*.bin", "*.txt"]);
    let text_body = b"first line\nlfscontentmarker says hello\n".to_vec();
    let binary = payload(100 << 10, 3);
    std::fs::write(clone.join("notes.txt"), &text_body).unwrap();
    std::fs::write(clone.join("data.bin"), &binary).unwrap();
    git_ok(
        &h,
        &admin,
        &clone,
        &["add", ".gitattributes", "notes.txt", "data.bin"],
    );
    git_ok(&h, &admin, &clone, &["commit", "-q", "-m", "Add LFS files"]);
    // A pointer to an object nobody uploaded (git-lfs's clean filter
    // keeps a pointer as it is; its push check is told to let it go).
    let ghost = sha256(b"never uploaded");
    let ghost_pointer =
        format!("version https://git-lfs.github.com/spec/v1\noid sha256:{ghost}\nsize 14\n");
    std::fs::write(clone.join("ghost.bin"), &ghost_pointer).unwrap();
    git_ok(&h, &admin, &clone, &["add", "ghost.bin"]);
    git_ok(
        &h,
        &admin,
        &clone,
        &["commit", "-q", "-m", "Add a dangling pointer"],
    );
    git_ok(
        &h,
        &admin,
        &clone,
        &["config", "lfs.allowincompletepush", "true"],
    );
    git_ok(
        &h,
        &admin,
        &clone,
        &["push", "origin", "HEAD:refs/heads/main"],
    );
    let out = h.ssh_exec("collab-repo visibility 'site' public");
    assert_eq!(out.code, 0, "{out:?}");
    let page = |path: &str| {
        let got = common::web::get(&h, path);
        assert_eq!(got.status, 200, "{path}");
        String::from_utf8(got.body).unwrap()
    };

    // A text file in git-lfs shows its content, tagged, with its size.
    let notes = page("/site/-/blob/main/notes.txt");
    assert!(notes.contains("lfscontentmarker"), "{notes}");
    assert!(!notes.contains("oid sha256:"), "{notes}");
    assert!(notes.contains("badge lfs"), "{notes}");
    assert!(notes.contains(&format!("{} B", text_body.len())), "{notes}");
    // A binary one says where it is, with its size and the raw link.
    let data = page("/site/-/blob/main/data.bin");
    assert!(
        data.contains("Stored in git-lfs, 100.0 KiB: binary, not shown"),
        "{data}"
    );
    assert!(data.contains("/site/-/raw/main/data.bin"), "{data}");
    // A pointer to an object the server does not hold shows the pointer.
    let dangling = page("/site/-/blob/main/ghost.bin");
    assert!(dangling.contains(&ghost), "{dangling}");
    assert!(!dangling.contains("badge lfs"), "{dangling}");

    // The tree lists the held objects tagged, with their sizes; the
    // dangling pointer is listed as the small file it is.
    let tree = page("/site/-/tree/main");
    assert_eq!(tree.matches("badge lfs").count(), 2, "{tree}");
    assert!(tree.contains("LFS</span> 100.0 KiB"), "{tree}");
    assert!(
        tree.contains(&format!("LFS</span> {} B", text_body.len())),
        "{tree}"
    );

    // The commit page tags the two LFS files and not .gitattributes.
    let first = text(&git_ok(&h, &admin, &clone, &["rev-parse", "HEAD~1"]));
    let commit = page(&format!("/site/-/commit/{}", first.trim()));
    assert_eq!(commit.matches("badge lfs").count(), 2, "{commit}");
    let tagged = |path: &str| commit.contains(&format!("{path} <span class=\"badge lfs\""));
    assert!(tagged("notes.txt") && tagged("data.bin"), "{commit}");
    assert!(!tagged(".gitattributes"), "{commit}");

    // The archive holds the content where it is stored, else the pointer.
    let archive = common::web::get(&h, "/site/-/archive/main.tar.gz");
    assert_eq!(archive.status, 200);
    let member = |path: &str| {
        from_tar_gz(&archive.body, &format!("site-main/{path}"))
            .unwrap_or_else(|| panic!("{path} is not in the archive"))
    };
    assert!(member("data.bin") == binary, "data.bin is not its content");
    assert_eq!(member("notes.txt"), text_body);
    assert_eq!(member("ghost.bin"), ghost_pointer.as_bytes());
    // A file that is no pointer goes in as it is (git-lfs writes the
    // tracked patterns in an order of its own: compare with what was pushed).
    let attributes = std::fs::read(clone.join(".gitattributes")).unwrap();
    assert!(
        String::from_utf8_lossy(&attributes).contains("*.bin filter=lfs"),
        "{attributes:?}"
    );
    assert_eq!(member(".gitattributes"), attributes);
    // The zip too.
    let zip = common::web::get(&h, "/site/-/archive/main.zip");
    assert_eq!(zip.status, 200);
    let zip_path = h.state_dir().join("site.zip");
    std::fs::write(&zip_path, &zip.body).unwrap();
    let unzipped = Command::new("unzip")
        .arg("-p")
        .arg(&zip_path)
        .arg("site-main/notes.txt")
        .output()
        .unwrap();
    assert!(unzipped.status.success(), "{unzipped:?}");
    assert_eq!(unzipped.stdout, text_body);
}

#[test]
fn info_counts_each_repositorys_lfs_objects_and_bytes() {
    let h = ServerHarness::start();
    h.create_repo("heavy");
    h.create_repo("light");
    let admin = h.ssh_client_key();
    let (one, two) = (payload(70_000, 4), payload(5_000, 5));
    push_lfs_files(
        &h,
        &admin,
        "heavy",
        "heavy",
        &[("one.bin", &one), ("two.bin", &two)],
    );

    let out = h.ssh_exec("info --json");
    assert_eq!(out.code, 0, "{out:?}");
    let info: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let repo = |name: &str| {
        info["repos"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {info}"))
            .clone()
    };
    assert_eq!(repo("heavy")["lfs_objects"], 2, "{info}");
    assert_eq!(
        repo("heavy")["lfs_bytes"],
        (one.len() + two.len()) as u64,
        "{info}"
    );
    assert_eq!(repo("light")["lfs_objects"], 0, "{info}");
    assert_eq!(repo("light")["lfs_bytes"], 0, "{info}");
}

#[test]
fn backup_verify_checks_each_lfs_object_against_its_name() {
    let h = ServerHarness::start();
    h.create_repo("kept");
    let admin = h.ssh_client_key();
    let (one, two) = (payload(40_000, 6), payload(9_000, 7));
    push_lfs_files(
        &h,
        &admin,
        "kept",
        "kept",
        &[("one.bin", &one), ("two.bin", &two)],
    );

    let dir = h.temp_dir().join("lfs-backup");
    let dir_str = dir.to_str().unwrap();
    let taken = h.host_cli(&["backup", "--to", dir_str, "--json"]);
    assert!(
        taken.status.success(),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
    let key = common::stdout_json(&taken)["fingerprint"]
        .as_str()
        .expect("the signing key's fingerprint")
        .to_string();
    let verify = |dir: &str| h.host_cli(&["backup", "--verify", dir, "--key", &key]);
    let sound = verify(dir_str);
    let said = String::from_utf8_lossy(&sound.stdout).into_owned();
    assert!(
        sound.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&sound.stderr)
    );
    assert!(
        said.contains(&format!(
            "(2 git-lfs objects, {} bytes)",
            one.len() + two.len()
        )),
        "{said}"
    );

    // One object damaged in a copy of the backup: one line names it.
    let bad = h.temp_dir().join("lfs-backup-bad");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(&dir)
        .arg(&bad)
        .status()
        .unwrap();
    assert!(copied.success());
    let oid = sha256(&one);
    let mut found = Vec::new();
    let mut todo = vec![bad.join("state/lfs")];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                todo.push(e.path());
            } else if e.file_name().to_str() == Some(oid.as_str()) {
                found.push(e.path());
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    let mut bytes = std::fs::read(&found[0]).unwrap();
    bytes[100] ^= 0x01;
    std::fs::write(&found[0], &bytes).unwrap();
    let out = verify(bad.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let problems: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("problem: "))
        .collect();
    assert_eq!(problems.len(), 1, "{stderr}");
    assert!(
        problems[0].contains(&format!("git-lfs object {oid} is damaged")),
        "{stderr}"
    );
    assert!(
        stderr.lines().last().unwrap().starts_with("error: backup"),
        "{stderr}"
    );
}
