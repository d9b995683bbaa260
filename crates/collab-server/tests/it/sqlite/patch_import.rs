//! Upgrading a state directory whose repositories hold patch DAGs made with
//! the real `git collab patch …` CLI (two revisions across a rebase, votes
//! replaced by later votes, general and inline comments, a closed and a
//! merged patch, events by an untrusted key, a tampered event) and whose
//! `collab.db` is at the previous schema version with the issues already
//! imported. The new server starts on it and:
//!
//! - imports each repository's patches so that the database holds what the
//!   library replays from the same DAGs (allowlist honoured, bad events
//!   dropped and reported): ids, authors, times, revisions with heads and
//!   bases, one vote per principal and revision, comments in order with
//!   their inline path and line, status and merge;
//! - imports nothing twice across a restart, and `git-collab-server import`
//!   reports the repositories as already imported;
//! - refuses, from then on, a push of a patch DAG ref or of a revision ref,
//!   while a `refs/for/<base>` push adds a revision to an imported patch
//!   (the server's own revision ref write keeps working);
//! - exports the patches, signed by the server's key, in the patch DAG
//!   format, and the export replays with the library to the same patch.
//!
//! And an import SIGKILLed between two batches is finished by the next
//! start, each patch stored once.

use collab_testkit as common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use collab_record::patch::{self, PatchState};
use collab_record::trust::TrustList;
use common::{generate_key, public_key_line, ServerHarness};
use serde_json::Value;

fn checked(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A work repository where the CLI writes local patch DAGs, switching
/// between signing keys.
struct Author<'a> {
    h: &'a ServerHarness,
    work: PathBuf,
}

impl Author<'_> {
    fn git(&self, args: &[&str]) -> String {
        let out = checked(
            self.h
                .git_command(&self.h.ssh_client_key(), &self.work)
                .args(args)
                .output()
                .unwrap(),
            &format!("git {args:?}"),
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    fn sign_as(&self, name: &str, key: &Path) {
        self.git(&["config", "user.name", name]);
        self.git(&["config", "collab.signingKey", key.to_str().unwrap()]);
    }

    fn patch(&self, args: &[&str]) -> String {
        let out = self
            .h
            .client_command(
                collab_testkit::bin("git-collab"),
                &self.h.ssh_client_key(),
                &self.work,
            )
            .arg("patch")
            .args(args)
            .output()
            .unwrap();
        let out = checked(out, &format!("git-collab patch {args:?}"));
        String::from_utf8(out.stdout).unwrap()
    }

    fn create(&self, title: &str) -> String {
        let v: Value = serde_json::from_str(&self.patch(&[
            "create", "--base", "main", "-t", title, "-b", "why", "--json",
        ]))
        .unwrap();
        v["patch"].as_str().unwrap().to_string()
    }

    fn commit(&self, path: &str, content: &str, message: &str) -> String {
        std::fs::write(self.work.join(path), content).unwrap();
        self.git(&["add", path]);
        self.git(&["commit", "-q", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// Replace the tip event of `ref_name` with a copy whose `event.json`
    /// says something else under the same signature.
    fn tamper_tip(&self, ref_name: &str, from: &str, to: &str) {
        let tip = self.git(&["rev-parse", ref_name]);
        let parent = self.git(&["rev-parse", &format!("{tip}^")]);
        let json = self.git(&["cat-file", "blob", &format!("{tip}:event.json")]);
        assert!(json.contains(from), "{json}");
        let blob = self.stdin_git(&["hash-object", "-w", "--stdin"], &json.replace(from, to));
        let sig = self.git(&["rev-parse", &format!("{tip}:event.sig")]);
        let tree = self.stdin_git(
            &["mktree"],
            &format!("100644 blob {blob}\tevent.json\n100644 blob {sig}\tevent.sig\n"),
        );
        let commit = self.git(&["commit-tree", &tree, "-p", &parent, "-m", "event"]);
        self.git(&["update-ref", ref_name, &commit, &tip]);
    }

    fn stdin_git(&self, args: &[&str], input: &str) -> String {
        use std::io::Write as _;
        let mut child = self
            .h
            .git_command(&self.h.ssh_client_key(), &self.work)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = checked(child.wait_with_output().unwrap(), &format!("git {args:?}"));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }
}

/// Every valid patch of a bare repository, as the library replays it (the
/// repository's allowlist applies): what `git collab patch show` shows.
fn replayed(bare: &Path) -> (Vec<PatchState>, usize) {
    let repo = git2::Repository::open_bare(bare).unwrap();
    let trust = TrustList::load(&repo).unwrap();
    let mut valid = Vec::new();
    let mut dropped = 0;
    for (name, id) in patch::patch_refs(&repo).unwrap() {
        let r = patch::replay_ref(&repo, &name, &id, trust.as_ref()).unwrap();
        dropped += r.dropped.len();
        if let Ok(s) = r.state {
            valid.push(s);
        }
    }
    (valid, dropped)
}

fn db(h: &ServerHarness) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(
        h.repos_dir().join("collab.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap()
}

fn count(h: &ServerHarness, sql: &str) -> i64 {
    db(h).query_row(sql, [], |r| r.get(0)).unwrap()
}

type Row = Vec<Option<String>>;

fn rows(conn: &rusqlite::Connection, sql: &str, repo: &str, id: &str) -> Vec<Row> {
    let mut stmt = conn.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([repo, id], |r| {
        (0..n)
            .map(|i| {
                Ok(match r.get_ref(i)? {
                    rusqlite::types::ValueRef::Null => None,
                    rusqlite::types::ValueRef::Integer(v) => Some(v.to_string()),
                    rusqlite::types::ValueRef::Text(t) => {
                        Some(String::from_utf8_lossy(t).into_owned())
                    }
                    other => Some(format!("{other:?}")),
                })
            })
            .collect()
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

fn s(v: impl ToString) -> Option<String> {
    Some(v.to_string())
}

/// What the database holds for patch `p.id` of `repo`, against `p`.
fn assert_imported(h: &ServerHarness, repo: &str, p: &PatchState) {
    let conn = db(h);
    let ms = |t: chrono::DateTime<chrono::Utc>| s(t.timestamp_millis());
    let got = rows(
        &conn,
        "SELECT title, body, base, author_name, author_key, created_ms, updated_ms, status,
                merged_commit, merged_ms, imported, revision_count, comment_count
         FROM patches WHERE repo = ?1 AND id = ?2",
        repo,
        &p.id,
    );
    let want = vec![
        s(&p.title),
        s(&p.body),
        s(&p.base),
        s(&p.author.name),
        s(&p.author.key),
        ms(p.created_at),
        ms(p.updated_at),
        s(p.status),
        p.merge.as_ref().map(|m| m.commit.clone()),
        p.merge.as_ref().and_then(|m| ms(m.at)),
        s(1),
        s(p.revisions.len()),
        s(p.comments.len()),
    ];
    assert_eq!(got, vec![want], "{repo} patch {}", p.id);
    let got = rows(
        &conn,
        "SELECT n, head, base_commit, author_name, author_key, at_ms, event_id
         FROM patch_revisions WHERE repo = ?1 AND patch_id = ?2 ORDER BY n",
        repo,
        &p.id,
    );
    let want: Vec<Row> = p
        .revisions
        .iter()
        .map(|r| {
            vec![
                s(r.n),
                s(&r.head),
                r.base_commit.clone(),
                s(&r.author.name),
                s(&r.author.key),
                ms(r.at),
                s(&r.id),
            ]
        })
        .collect();
    assert_eq!(got, want, "{repo} revisions of {}", p.id);
    let got = rows(
        &conn,
        "SELECT id, revision, author_key, verdict, body, at_ms
         FROM patch_reviews WHERE repo = ?1 AND patch_id = ?2 ORDER BY revision, at_ms, id",
        repo,
        &p.id,
    );
    let mut want: Vec<Row> = p
        .reviews
        .iter()
        .map(|r| {
            vec![
                s(&r.id),
                s(r.revision),
                s(&r.author.key),
                s(r.verdict.as_str()),
                s(&r.body),
                ms(r.at),
            ]
        })
        .collect();
    want.sort_by_key(|r| {
        (
            r[1].clone().unwrap().parse::<u32>().unwrap(),
            r[5].clone(),
            r[0].clone(),
        )
    });
    assert_eq!(got, want, "{repo} votes on {}", p.id);
    let got = rows(
        &conn,
        "SELECT id, author_key, at_ms, body, revision, path, line
         FROM patch_comments WHERE repo = ?1 AND patch_id = ?2 ORDER BY position",
        repo,
        &p.id,
    );
    let want: Vec<Row> = p
        .comments
        .iter()
        .map(|c| {
            vec![
                s(&c.id),
                s(&c.author.key),
                ms(c.at),
                s(&c.body),
                c.revision.map(|n| n.to_string()),
                c.path.clone(),
                c.line.map(|l| l.to_string()),
            ]
        })
        .collect();
    assert_eq!(got, want, "{repo} comments on {}", p.id);
}

fn comment_bodies(h: &ServerHarness, repo: &str, id: &str) -> Vec<String> {
    rows(
        &db(h),
        "SELECT body FROM patch_comments WHERE repo = ?1 AND patch_id = ?2 ORDER BY position",
        repo,
        id,
    )
    .into_iter()
    .map(|r| r[0].clone().unwrap())
    .collect()
}

fn server_import_json(h: &ServerHarness) -> Value {
    let out = checked(
        Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
            .arg("--state-dir")
            .arg(h.state_dir())
            .args(["import", "--json"])
            .output()
            .unwrap(),
        "git-collab-server import",
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn patch_dags_from_before_the_upgrade_import_intact_once_and_are_frozen_after() {
    let mut h = ServerHarness::start();
    h.stop();
    let keys = h.temp_dir().join("keys");
    let (alice, bob, mallory) = (keys.join("alice"), keys.join("bob"), keys.join("mallory"));
    generate_key(&alice, "alice");
    generate_key(&bob, "bob");
    generate_key(&mallory, "mallory");

    // The DAGs, written with the CLI in a work repository without remotes.
    let work = h.temp_dir().join("work");
    checked(
        Command::new("git")
            .args(["init", "-q"])
            .arg(&work)
            .output()
            .unwrap(),
        "git init",
    );
    let a = Author { h: &h, work };
    a.git(&["symbolic-ref", "HEAD", "refs/heads/main"]);
    a.commit("README", "base\n", "Base");
    a.sign_as("Alice", &alice);

    // An open patch: two revisions across a rebase, votes, comments.
    a.git(&["checkout", "-q", "-b", "topic"]);
    a.commit("lib.txt", "v1\n", "Add lib");
    let open = a.create("Add lib");
    a.git(&["checkout", "-q", "main"]);
    a.commit("README", "base\nupstream\n", "Upstream");
    a.git(&["checkout", "-q", "topic"]);
    a.git(&["rebase", "-q", "main"]);
    a.commit("lib.txt", "v2\n", "Rework lib");
    a.patch(&["revise", &open]);
    a.sign_as("Bob", &bob);
    a.patch(&[
        "review",
        &open,
        "--rev",
        "1",
        "--request-changes",
        "-m",
        "rename it",
    ]);
    a.patch(&["review", &open, "--request-changes", "-m", "not yet"]);
    a.patch(&["review", &open, "--approve", "-m", "good now"]);
    a.patch(&[
        "comment", &open, "-m", "nit", "--path", "lib.txt", "--line", "1",
    ]);
    a.sign_as("Mallory", &mallory);
    a.patch(&["comment", &open, "-m", "spam by an untrusted key"]);
    a.patch(&["review", &open, "--approve", "-m", "me too"]);
    a.sign_as("Alice", &alice);
    a.patch(&["comment", &open, "-m", "thanks, general remark"]);

    // A patch with a forged comment.
    a.git(&["checkout", "-q", "-b", "other", "main"]);
    a.commit("other.txt", "x\n", "Other");
    let tampered = a.create("Has a forged comment");
    a.patch(&["comment", &tampered, "-m", "the real words"]);
    a.tamper_tip(
        &format!("refs/collab/patches/{tampered}"),
        "the real words",
        "forged words",
    );
    a.patch(&["comment", &tampered, "-m", "after the forgery"]);

    // A closed patch, a merged one, and one opened by the untrusted key.
    a.git(&["checkout", "-q", "-b", "gone", "main"]);
    a.commit("gone.txt", "x\n", "Abandoned");
    let closed = a.create("Abandoned");
    a.patch(&["close", &closed]);
    a.git(&["checkout", "-q", "-b", "ff", "main"]);
    a.commit("ff.txt", "x\n", "Fast one");
    let merged = a.create("Fast one");
    a.patch(&["merge", &merged]);
    a.git(&["checkout", "-q", "-b", "bad", "main"]);
    a.commit("bad.txt", "x\n", "By mallory");
    a.sign_as("Mallory", &mallory);
    let by_mallory = a.create("Opened by the untrusted key");
    a.sign_as("Alice", &alice);

    // Two repositories: `app` trusts alice and bob; `plain` has no allowlist.
    let repos = h.repos_dir();
    for name in ["app", "plain"] {
        let bare = repos.join(format!("{name}.git"));
        checked(
            Command::new("git")
                .args(["init", "-q", "--bare"])
                .arg(&bare)
                .output()
                .unwrap(),
            "git init --bare",
        );
        a.git(&[
            "push",
            "-q",
            bare.to_str().unwrap(),
            "refs/heads/*:refs/heads/*",
            "refs/collab/*:refs/collab/*",
        ]);
    }
    std::fs::create_dir_all(repos.join("app.git/collab")).unwrap();
    std::fs::write(
        repos.join("app.git/collab/trusted_keys"),
        format!("{}\n{}\n", public_key_line(&alice), public_key_line(&bob)),
    )
    .unwrap();

    // The previous release's collab.db: schema version 7 (version 18's, 13's, 12's, 11's, 10's,
    // 9's and 8's tables and columns undone), the (empty) issue
    // import of both repositories done, no patch import.
    {
        let conn = rusqlite::Connection::open(repos.join("collab.db")).unwrap();
        // Version 19's search index and its triggers first.
        conn.execute_batch(collab_store::search::SQLITE_UNDO)
            .unwrap();
        // Version 21's stack columns.
        conn.execute_batch(collab_store::migrations::STACKS_UNDO)
            .unwrap();
        conn.execute_batch(
            "DROP TABLE lfs_locks;
             DROP TABLE lease_queue_holds;
             DROP TABLE webhook_nodes;
             ALTER TABLE webhooks DROP COLUMN claimed_by;
             ALTER TABLE webhooks DROP COLUMN claimed_until;
             DROP TABLE merge_groups;
             DROP TABLE merge_queue_branches;
             DROP TABLE merge_intents;
             ALTER TABLE patch_revisions DROP COLUMN lease_holders;
             DROP TABLE checks;
             DROP TABLE mirrors;
             DROP TABLE repositories;
             DROP INDEX events_repo_id_seq;
             ALTER TABLE events DROP COLUMN repo_id;
             ALTER TABLE webhooks DROP COLUMN needs_approval;
             ALTER TABLE webhooks DROP COLUMN approved_by;
             DROP TABLE patch_imports;
             DROP TABLE patch_exports;
             INSERT INTO imports VALUES ('app.git', 'imported', 1, 0, 0, 0, 0, '{}'),
                                        ('plain.git', 'imported', 1, 0, 0, 0, 0, '{}');
             PRAGMA user_version = 7;",
        )
        .unwrap();
    }

    // What the library (and so the CLI) shows for the same repositories.
    let (app, app_dropped) = replayed(&repos.join("app.git"));
    let (plain, _) = replayed(&repos.join("plain.git"));
    let ids = |v: &[PatchState]| v.iter().map(|p| p.id.clone()).collect::<Vec<_>>();
    assert_eq!(app.len(), 4, "mallory's patch is not valid in app");
    assert!(!ids(&app).contains(&by_mallory));
    assert_eq!(plain.len(), 5, "plain trusts every key");
    let shown = app.iter().find(|p| p.id == open).unwrap();
    assert_eq!(shown.revisions.len(), 2);
    assert_eq!(shown.reviews.len(), 2, "one vote per key and revision");

    // The upgrade.
    let work = a.work.clone();
    h.start_again();
    for (name, patches) in [("app.git", &app), ("plain.git", &plain)] {
        assert_eq!(
            count(
                &h,
                &format!("SELECT COUNT(*) FROM patches WHERE repo = '{name}'")
            ),
            patches.len() as i64
        );
        for p in patches {
            assert_imported(&h, name, p);
        }
    }
    // The allowlist held; the forged comment is gone; later votes replaced
    // earlier ones; the inline comment kept its place.
    assert_eq!(
        comment_bodies(&h, "app.git", &open),
        ["nit", "thanks, general remark"]
    );
    assert_eq!(
        comment_bodies(&h, "plain.git", &open),
        ["nit", "spam by an untrusted key", "thanks, general remark"]
    );
    assert_eq!(
        comment_bodies(&h, "app.git", &tampered),
        ["after the forgery"]
    );
    let votes = rows(
        &db(&h),
        "SELECT revision, author_name, verdict, body FROM patch_reviews
         WHERE repo = ?1 AND patch_id = ?2 ORDER BY revision",
        "app.git",
        &open,
    );
    assert_eq!(
        votes,
        [
            vec![s(1), s("Bob"), s("request_changes"), s("rename it")],
            vec![s(2), s("Bob"), s("approve"), s("good now")],
        ]
    );
    let inline = rows(
        &db(&h),
        "SELECT path, line, revision FROM patch_comments WHERE repo = ?1 AND patch_id = ?2
         AND path IS NOT NULL",
        "app.git",
        &open,
    );
    assert_eq!(inline, [vec![s("lib.txt"), s(1), s(2)]]);
    let status = |id: &str| {
        rows(
            &db(&h),
            "SELECT status FROM patches WHERE repo = ?1 AND id = ?2",
            "app.git",
            id,
        )[0][0]
            .clone()
            .unwrap()
    };
    assert_eq!(status(&closed), "closed");
    assert_eq!(status(&merged), "merged");
    assert_eq!(status(&open), "open");

    // The import's report, kept in the database, names what was dropped.
    let (imported, dropped, report): (i64, i64, String) = db(&h)
        .query_row(
            "SELECT patches, dropped, report FROM patch_imports WHERE repo = 'app.git'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(imported, 4);
    assert_eq!(dropped as usize, app_dropped);
    let report: Value = serde_json::from_str(&report).unwrap();
    let reasons: Vec<&str> = report["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons.contains(&"untrusted") && reasons.contains(&"bad_signature"),
        "{reasons:?}"
    );
    assert_eq!(report["invalid_patches"][0]["patch"], by_mallory.as_str());

    // Imported once: a restart and the host command change nothing.
    let events = count(
        &h,
        "SELECT COUNT(*) FROM events WHERE type = 'patch.imported'",
    );
    assert_eq!(events, 4 + 5);
    h.restart();
    assert_eq!(
        count(
            &h,
            "SELECT COUNT(*) FROM events WHERE type = 'patch.imported'"
        ),
        events
    );
    let report = server_import_json(&h);
    let statuses: Vec<(&str, &str)> = report["repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["repo"].as_str().unwrap(), r["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("app.git", "already_imported"),
            ("plain.git", "already_imported")
        ]
    );

    // Patch DAG refs and revision refs cannot be pushed any more.
    let a = Author { h: &h, work };
    a.patch(&["comment", &open, "-m", "pushed the old way"]);
    a.git(&["remote", "add", "origin", &h.repo_url("app")]);
    let key = h.ssh_client_key();
    let out = h.git_as(
        &key,
        &a.work,
        &[
            "push",
            "origin",
            "refs/collab/patches/*:refs/collab/patches/*",
        ],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("patches are kept by the server")
            && stderr.contains("HEAD:refs/for/<base>"),
        "{stderr}"
    );
    let out = h.git_as(
        &key,
        &a.work,
        &[
            "push",
            "origin",
            &format!("HEAD:refs/collab/revisions/{open}/9"),
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("maintained by the server"),
        "{out:?}"
    );
    assert_eq!(
        comment_bodies(&h, "app.git", &open),
        ["nit", "thanks, general remark"],
        "nothing was imported from the push"
    );

    // The server still writes revisions of an imported patch itself.
    a.git(&["checkout", "-q", "topic"]);
    let v3 = a.commit("lib.txt", "v3\n", "Rework lib again");
    let out = h.git_as(
        &key,
        &a.work,
        &[
            "push",
            "-o",
            &format!("patch={open}"),
            "origin",
            "HEAD:refs/for/main",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let heads = rows(
        &db(&h),
        "SELECT n, head FROM patch_revisions WHERE repo = ?1 AND patch_id = ?2 ORDER BY n",
        "app.git",
        &open,
    );
    assert_eq!(heads.len(), 3);
    assert_eq!(heads[2], vec![s(3), s(&v3)]);
    let remote = String::from_utf8_lossy(&h.git_as(&key, &a.work, &["ls-remote", "origin"]).stdout)
        .into_owned();
    for (n, head) in [
        (1, &shown.revisions[0].head),
        (2, &shown.revisions[1].head),
        (3, &v3),
    ] {
        assert!(
            remote.contains(&format!("{head}\trefs/collab/revisions/{open}/{n}\n")),
            "pin {n}: {remote}"
        );
    }

    // The export: every patch of `app`, signed by the server's key, in the
    // patch DAG format; replayed with the library it is the database's
    // patch, and `verify` finds nothing wrong once the key is trusted.
    let reader = h.clone_repo("app", "reader");
    let cli = |args: &[&str]| {
        checked(
            h.client_command(collab_testkit::bin("git-collab"), &key, &reader)
                .args(args)
                .output()
                .unwrap(),
            &format!("git-collab {args:?}"),
        )
    };
    let whoami = h.ssh_exec("collab-whoami");
    let server_key = whoami.json()["server_key"].as_str().unwrap().to_string();
    cli(&["trust", "add", &server_key]);
    let ids: Vec<String> = {
        let conn = db(&h);
        let mut stmt = conn
            .prepare("SELECT id FROM patches WHERE repo = 'app.git' ORDER BY id")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let git = git2::Repository::open(&reader).unwrap();
    let exported = |id: &str| -> Option<PatchState> {
        let trust = TrustList::load(&git).unwrap();
        let mut checker = collab_record::replay::Checker::new(trust.as_ref());
        let name = collab_record::refs::export_patch_ref("origin", id);
        let r = collab_record::export::replay_patch_export(&git, &name, id, &mut checker).ok()?;
        assert!(r.dropped.is_empty(), "{:?}", r.dropped);
        r.state.ok()
    };
    let start = std::time::Instant::now();
    loop {
        h.git(
            &reader,
            &[
                "fetch",
                "-q",
                "origin",
                "+refs/collab/export/*:refs/collab-remotes/origin/export/*",
            ],
        );
        let done = ids.iter().all(|id| exported(id).is_some())
            && exported(&open).is_some_and(|p| p.revisions.len() == 3);
        if done {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the export did not catch up"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let conn = db(&h);
    for id in &ids {
        let p = exported(id).unwrap();
        assert_eq!(p.author.key, server_key, "signed by the server");
        let q = |sql: &str| rows(&conn, sql, "app.git", id);
        let row = &q(
            "SELECT title, body, base, status, merged_commit, created_ms, author_name
                      FROM patches WHERE repo = ?1 AND id = ?2",
        )[0];
        assert_eq!(
            row,
            &vec![
                s(&p.title),
                s(&p.body),
                s(&p.base),
                s(p.status),
                p.merge.as_ref().map(|m| m.commit.clone()),
                s(p.created_at.timestamp_millis()),
                s(&p.author.name),
            ],
            "export of {id}"
        );
        let revisions: Vec<Row> = p
            .revisions
            .iter()
            .map(|r| vec![s(r.n), s(&r.head), r.base_commit.clone(), s(&r.author.name)])
            .collect();
        assert_eq!(
            q(
                "SELECT n, head, base_commit, author_name FROM patch_revisions
               WHERE repo = ?1 AND patch_id = ?2 ORDER BY n"
            ),
            revisions,
            "revisions of {id}"
        );
        let mut votes: Vec<Row> = p
            .reviews
            .iter()
            .map(|r| {
                vec![
                    s(r.revision),
                    r.voter.clone(),
                    s(&r.author.name),
                    s(r.verdict.as_str()),
                    s(&r.body),
                ]
            })
            .collect();
        votes.sort();
        assert_eq!(
            q(
                "SELECT revision, author, author_name, verdict, body FROM patch_reviews
               WHERE repo = ?1 AND patch_id = ?2 ORDER BY revision, author"
            ),
            votes,
            "votes on {id}"
        );
        let comments: Vec<Row> = p
            .comments
            .iter()
            .map(|c| {
                vec![
                    s(&c.body),
                    s(&c.author.name),
                    c.revision.map(|n| n.to_string()),
                    c.path.clone(),
                    c.line.map(|l| l.to_string()),
                ]
            })
            .collect();
        assert_eq!(
            q(
                "SELECT body, author_name, revision, path, line FROM patch_comments
               WHERE repo = ?1 AND patch_id = ?2 ORDER BY position"
            ),
            comments,
            "comments on {id}"
        );
    }
    let report: Value = serde_json::from_slice(&cli(&["verify", "--json"]).stdout).unwrap();
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["exports"][0]["patches"], ids.len(), "{report:#}");
    assert_eq!(report["exports"][0]["checked"], true, "{report:#}");
}

/// `patches` patch DAGs of three events each (open, vote, comment), written
/// with the library into a new bare repository `name`.
fn write_many_patches(h: &ServerHarness, name: &str, patches: usize) {
    use collab_record::event::{
        self, Action, Event, PatchComment, PatchOpen, PatchReview, Verdict,
    };
    use collab_record::{refs, store};
    let repo = git2::Repository::init_bare(h.repos_dir().join(name)).unwrap();
    let sig = git2::Signature::now("T", "t@example.com").unwrap();
    let tree = repo.treebuilder(None).unwrap().write().unwrap();
    let tree = repo.find_tree(tree).unwrap();
    let base = repo
        .commit(Some("refs/heads/main"), &sig, &sig, "base", &tree, &[])
        .unwrap();
    let parent = repo.find_commit(base).unwrap();
    let head = repo
        .commit(None, &sig, &sig, "head", &tree, &[&parent])
        .unwrap();
    let key = collab_record::sign::SigningKey::generate(
        &h.temp_dir().join(format!("keys/{name}")),
        "writer",
        false,
    )
    .unwrap();
    let author = event::Author {
        name: "Writer".into(),
        key: key.public_key_line(),
    };
    let t0 = chrono::Utc::now() - chrono::TimeDelta::hours(1);
    let at = |i: usize, k: i64| t0 + chrono::TimeDelta::milliseconds(i as i64 * 3 + k);
    for i in 0..patches {
        let open = Event::new(
            author.clone(),
            at(i, 0),
            Action::PatchOpen(PatchOpen {
                title: format!("patch {i}"),
                body: String::new(),
                base: "main".into(),
                head: head.to_string(),
                base_commit: Some(base.to_string()),
                nonce: format!("{i:032x}"),
            }),
        );
        let root = store::create_dag(&repo, &open, &key, refs::patch_ref).unwrap();
        let patch_ref = refs::patch_ref(&root.to_string());
        let vote = Action::PatchReview(PatchReview {
            revision: root.to_string(),
            verdict: Verdict::Approve,
            body: "ok".into(),
            voter: None,
        });
        store::append_event(
            &repo,
            &patch_ref,
            &Event::new(author.clone(), at(i, 1), vote),
            &key,
        )
        .unwrap();
        let comment = Action::PatchComment(PatchComment {
            body: format!("comment {i}"),
            revision: None,
            path: None,
            line: None,
        });
        store::append_event(
            &repo,
            &patch_ref,
            &Event::new(author.clone(), at(i, 2), comment),
            &key,
        )
        .unwrap();
    }
}

#[test]
fn an_import_killed_part_way_is_finished_exactly_once_by_the_next_start() {
    // Three batches (`import::BATCH` is 256).
    const PATCHES: usize = 600;
    let mut h = ServerHarness::start();
    h.stop();
    write_many_patches(&h, "many.git", PATCHES);
    {
        let conn = rusqlite::Connection::open(h.repos_dir().join("collab.db")).unwrap();
        // Version 19's search index and its triggers first.
        conn.execute_batch(collab_store::search::SQLITE_UNDO)
            .unwrap();
        // Version 21's stack columns.
        conn.execute_batch(collab_store::migrations::STACKS_UNDO)
            .unwrap();
        conn.execute_batch(
            "DROP TABLE lfs_locks;
             DROP TABLE lease_queue_holds;
             DROP TABLE webhook_nodes;
             ALTER TABLE webhooks DROP COLUMN claimed_by;
             ALTER TABLE webhooks DROP COLUMN claimed_until;
             DROP TABLE merge_groups;
             DROP TABLE merge_queue_branches;
             DROP TABLE merge_intents;
             ALTER TABLE patch_revisions DROP COLUMN lease_holders;
             DROP TABLE checks;
             DROP TABLE mirrors;
             DROP TABLE repositories;
             DROP INDEX events_repo_id_seq;
             ALTER TABLE events DROP COLUMN repo_id;
             ALTER TABLE webhooks DROP COLUMN needs_approval;
             ALTER TABLE webhooks DROP COLUMN approved_by;
             DROP TABLE patch_imports;
             DROP TABLE patch_exports;
             INSERT INTO imports VALUES ('many.git', 'imported', 1, 0, 0, 0, 0, '{}');
             PRAGMA user_version = 7;",
        )
        .unwrap();
    }
    let patches_in = |h: &ServerHarness| -> i64 {
        rusqlite::Connection::open_with_flags(
            h.repos_dir().join("collab.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .and_then(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM patches WHERE repo = 'many.git'",
                [],
                |r| r.get(0),
            )
        })
        .unwrap_or(0)
    };

    // `import` on the host, SIGKILLed once its first batch is stored.
    let started = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
        .arg("--state-dir")
        .arg(h.state_dir())
        .args(["import", "many"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let killed = loop {
        if child.try_wait().unwrap().is_some() {
            break false;
        }
        if patches_in(&h) > 0 {
            child.kill().unwrap();
            break true;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(120));
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    child.wait().unwrap();
    let partial = patches_in(&h);
    eprintln!("import killed: {killed}, after {partial} of {PATCHES} patches were stored");
    if killed {
        assert!(partial > 0 && (partial as usize) < PATCHES, "{partial}");
        assert_eq!(count(&h, "SELECT COUNT(*) FROM patch_imports"), 0);
    }

    // The next start finishes the import, storing each patch once.
    let started = std::time::Instant::now();
    h.start_again();
    eprintln!("start with the rest of the import: {:?}", started.elapsed());
    assert_eq!(patches_in(&h), PATCHES as i64);
    assert_eq!(
        count(
            &h,
            "SELECT COUNT(*) FROM events WHERE type = 'patch.imported' AND repo = 'many.git'"
        ),
        PATCHES as i64
    );
    assert_eq!(
        count(&h, "SELECT COUNT(*) FROM patch_reviews"),
        PATCHES as i64
    );
    assert_eq!(
        count(&h, "SELECT COUNT(*) FROM patch_comments"),
        PATCHES as i64
    );
    assert_eq!(
        count(
            &h,
            "SELECT COUNT(*) FROM patch_imports WHERE repo = 'many.git'"
        ),
        1
    );
    let (first, last): (String, String) = db(&h)
        .query_row(
            "SELECT MIN(title), MAX(title) FROM patches WHERE repo = 'many.git'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((first.as_str(), last.as_str()), ("patch 0", "patch 99"));
}
