//! Upgrading a state directory written by the previous release: a version 1
//! `collab.db` with live leases (built here with the v1 schema SQL), and
//! repositories whose issues are signed DAGs made with the CLI, including
//! events by an untrusted key and a tampered event. The new server starts
//! on it and:
//!
//! - keeps every lease (holder, token, expiry) and each issue's token
//!   high-water mark;
//! - imports each repository's issues so that `collab-issue list|show`
//!   equals what the CLI replays from the same DAGs (allowlist honoured,
//!   bad events dropped), with ids, authors, times and comment order kept;
//! - imports nothing twice across a restart, and `git-collab-server import`
//!   reports the repositories as already imported;
//! - refuses, from then on, a push of an issue DAG ref.

use collab_testkit as common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{generate_key, public_key_line, ServerHarness};
use serde_json::{json, Value};

/// The schema of the first release's collab.db (migration step 1), as it
/// shipped.
const V1_SCHEMA: &str = "
CREATE TABLE leases (
    repo        TEXT    NOT NULL,
    issue_id    TEXT    NOT NULL,
    holder      TEXT    NOT NULL CHECK (holder <> ''),
    token       INTEGER NOT NULL CHECK (token > 0),
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER,
    PRIMARY KEY (repo, issue_id)
) WITHOUT ROWID;
CREATE TABLE lease_tokens (
    repo       TEXT    NOT NULL,
    issue_id   TEXT    NOT NULL,
    last_token INTEGER NOT NULL CHECK (last_token > 0),
    PRIMARY KEY (repo, issue_id)
) WITHOUT ROWID;
PRAGMA user_version = 1;
";

fn checked(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A work repository where the CLI writes local issue DAGs, switching
/// between signing keys.
struct Author<'a> {
    h: &'a ServerHarness,
    work: PathBuf,
}

impl Author<'_> {
    fn git(&self, args: &[&str]) -> Output {
        checked(
            self.h
                .git_command(&self.h.ssh_client_key(), &self.work)
                .args(args)
                .output()
                .unwrap(),
            &format!("git {args:?}"),
        )
    }

    fn sign_as(&self, name: &str, key: &Path) {
        self.git(&["config", "user.name", name]);
        self.git(&["config", "collab.signingKey", key.to_str().unwrap()]);
    }

    fn collab(&self, args: &[&str]) -> String {
        let out = self
            .h
            .client_command(
                collab_testkit::bin("git-collab"),
                &self.h.ssh_client_key(),
                &self.work,
            )
            .args(["issue", "--mode", "local"])
            .args(args)
            .output()
            .unwrap();
        let out = checked(out, &format!("git-collab issue {args:?}"));
        String::from_utf8(out.stdout).unwrap()
    }

    fn open(&self, title: &str, labels: &[&str]) -> String {
        let mut args = vec!["open", "-t", title, "-b", "body of the issue", "--json"];
        for l in labels {
            args.extend(["-l", l]);
        }
        let v: Value = serde_json::from_str(&self.collab(&args)).unwrap();
        v["issue"].as_str().unwrap().to_string()
    }

    fn rev(&self, rev: &str) -> String {
        String::from_utf8(self.git(&["rev-parse", rev]).stdout)
            .unwrap()
            .trim()
            .to_string()
    }

    /// Replace the tip event of `issue` with a copy whose `event.json` says
    /// something else under the same signature.
    fn tamper_tip(&self, issue: &str, from: &str, to: &str) {
        let ref_name = format!("refs/collab/issues/{issue}");
        let tip = self.rev(&ref_name);
        let parent = self.rev(&format!("{tip}^"));
        let json = String::from_utf8(
            self.git(&["cat-file", "blob", &format!("{tip}:event.json")])
                .stdout,
        )
        .unwrap();
        assert!(json.contains(from), "{json}");
        let forged = json.replace(from, to);
        let mut hash = self
            .h
            .git_command(&self.h.ssh_client_key(), &self.work)
            .args(["hash-object", "-w", "--stdin"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        hash.stdin
            .take()
            .unwrap()
            .write_all(forged.as_bytes())
            .unwrap();
        let blob = String::from_utf8(hash.wait_with_output().unwrap().stdout).unwrap();
        let sig = self.rev(&format!("{tip}:event.sig"));
        let listing = format!(
            "100644 blob {}\tevent.json\n100644 blob {sig}\tevent.sig\n",
            blob.trim()
        );
        let mut mktree = self
            .h
            .git_command(&self.h.ssh_client_key(), &self.work)
            .arg("mktree")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        mktree
            .stdin
            .take()
            .unwrap()
            .write_all(listing.as_bytes())
            .unwrap();
        let tree = String::from_utf8(mktree.wait_with_output().unwrap().stdout).unwrap();
        let commit = String::from_utf8(
            self.git(&["commit-tree", tree.trim(), "-p", &parent, "-m", "event"])
                .stdout,
        )
        .unwrap();
        self.git(&["update-ref", &ref_name, commit.trim(), &tip]);
    }
}

/// What the CLI replays from a bare repository (its allowlist applies).
fn cli_view(h: &ServerHarness, bare: &Path, args: &[&str]) -> Value {
    let out = Command::new(collab_testkit::bin("git-collab"))
        .env("GIT_DIR", bare)
        .env("HOME", h.temp_dir().join("home"))
        .env("XDG_CONFIG_HOME", h.temp_dir().join("xdg"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["issue", "--mode", "local"])
        .args(args)
        .output()
        .unwrap();
    let out = checked(out, &format!("git-collab {args:?} in {}", bare.display()));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The fields the CLI's JSON and the server's share, from either.
fn comparable_show(v: &Value) -> Value {
    let person = |p: &Value| json!({"name": p["name"], "key": p["key"]});
    json!({
        "id": v["id"], "title": v["title"], "body": v["body"],
        "author": person(&v["author"]),
        "created_at": v["created_at"], "updated_at": v["updated_at"],
        "status": v["status"], "closed_reason": v["closed_reason"], "labels": v["labels"],
        "comments": v["comments"].as_array().unwrap().iter().map(|c| json!({
            "id": c["id"], "author": person(&c["author"]), "at": c["at"], "body": c["body"],
        })).collect::<Vec<_>>(),
    })
}

fn comparable_row(v: &Value) -> Value {
    json!({
        "id": v["id"], "title": v["title"], "status": v["status"],
        "author": {"name": v["author"]["name"], "key": v["author"]["key"]},
        "created_at": v["created_at"], "updated_at": v["updated_at"],
        "labels": v["labels"], "comments": v["comments"],
    })
}

fn server_json(h: &ServerHarness, cmd: &str) -> Value {
    let out = h.ssh_exec(cmd);
    assert_eq!(out.code, 0, "{cmd}: {out:?}");
    out.json()
}

fn count_imported_events(h: &ServerHarness) -> i64 {
    let conn = rusqlite::Connection::open_with_flags(
        h.repos_dir().join("collab.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    conn.query_row(
        "SELECT COUNT(*) FROM events WHERE type = 'issue.imported'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn a_previous_release_state_directory_upgrades_in_place() {
    let mut h = ServerHarness::start();
    h.stop();
    let keys = h.temp_dir().join("keys");
    let (alice, mallory) = (keys.join("alice"), keys.join("mallory"));
    generate_key(&alice, "alice");
    generate_key(&mallory, "mallory");

    // The DAGs, written with the CLI in a work repository.
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
    a.sign_as("Alice", &alice);
    let closed = a.open("Crash on start", &["bug", "ui"]);
    a.collab(&["comment", &closed, "-m", "first, by alice"]);
    a.sign_as("Mallory", &mallory);
    a.collab(&["comment", &closed, "-m", "spam by an untrusted key"]);
    a.sign_as("Alice", &alice);
    a.collab(&["comment", &closed, "-m", "second, by alice"]);
    a.collab(&["label", &closed, "--add", "p1", "--remove", "ui"]);
    a.collab(&["close", &closed, "-r", "fixed"]);
    let tampered = a.open("Has a forged comment", &[]);
    a.collab(&["comment", &tampered, "-m", "the real words"]);
    a.tamper_tip(&tampered, "the real words", "forged words");
    a.collab(&["comment", &tampered, "-m", "after the forgery"]);
    let leased = a.open("Being worked on", &["wip"]);
    a.sign_as("Mallory", &mallory);
    let by_mallory = a.open("Opened by the untrusted key", &[]);
    a.sign_as("Alice", &alice);

    // Two repositories: `app` trusts alice only; `plain` has no allowlist.
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
            "refs/collab/*:refs/collab/*",
        ]);
    }
    std::fs::create_dir_all(repos.join("app.git/collab")).unwrap();
    std::fs::write(
        repos.join("app.git/collab/trusted_keys"),
        format!("{}\n", public_key_line(&alice)),
    )
    .unwrap();

    // The previous release's collab.db: version 1, with two live leases.
    for file in ["collab.db", "collab.db-wal", "collab.db-shm"] {
        let _ = std::fs::remove_file(repos.join(file));
    }
    {
        let conn = rusqlite::Connection::open(repos.join("collab.db")).unwrap();
        conn.execute_batch(V1_SCHEMA).unwrap();
        let far = chrono::Utc::now().timestamp() + 86_400;
        conn.execute(
            "INSERT INTO leases VALUES ('app.git', ?1, 'agent-7', 5, 1000, ?2)",
            rusqlite::params![leased, far],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO leases VALUES ('plain.git', ?1, 'agent-8', 2, 1000, NULL)",
            [&closed],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO lease_tokens VALUES ('app.git', ?1, 5), ('plain.git', ?2, 2)",
            [&leased, &closed],
        )
        .unwrap();
    }

    // What the CLI shows for the same repositories, before the upgrade.
    let expected: Vec<(&str, Value, Vec<Value>)> = ["app", "plain"]
        .iter()
        .map(|name| {
            let bare = repos.join(format!("{name}.git"));
            let list = cli_view(&h, &bare, &["list", "--all", "--json"]);
            let shows = list
                .as_array()
                .unwrap()
                .iter()
                .map(|row| cli_view(&h, &bare, &["show", row["id"].as_str().unwrap(), "--json"]))
                .collect();
            (*name, list, shows)
        })
        .collect();
    let app_ids: Vec<&str> = expected[0]
        .1
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        app_ids.len(),
        3,
        "mallory's issue is not in app: {app_ids:?}"
    );
    assert!(!app_ids.contains(&by_mallory.as_str()));
    assert_eq!(
        expected[1].1.as_array().unwrap().len(),
        4,
        "plain trusts every key"
    );

    // The upgrade: the new server starts on this state directory.
    let work = a.work.clone();
    h.start_again();
    for (name, list, shows) in &expected {
        let got = server_json(&h, &format!("collab-issue list {name} --state all"));
        let got_rows: Vec<Value> = got["issues"]
            .as_array()
            .unwrap()
            .iter()
            .map(comparable_row)
            .collect();
        let want_rows: Vec<Value> = list
            .as_array()
            .unwrap()
            .iter()
            .map(comparable_row)
            .collect();
        assert_eq!(got_rows, want_rows, "{name}: list");
        for want in shows {
            let id = want["id"].as_str().unwrap();
            let got = server_json(&h, &format!("collab-issue show {name} {id}"));
            assert_eq!(
                comparable_show(&got),
                comparable_show(want),
                "{name}: show {id}"
            );
            assert_eq!(got["imported"], true);
        }
    }
    // The allowlist held: mallory's comment and the forged one are gone.
    let shown = server_json(&h, &format!("collab-issue show app {closed}"));
    let bodies: Vec<&str> = shown["comments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["first, by alice", "second, by alice"]);
    assert_eq!(shown["labels"], json!(["bug", "p1"]));
    assert_eq!(
        (shown["status"].as_str(), shown["closed_reason"].as_str()),
        (Some("closed"), Some("fixed"))
    );
    let forged = server_json(&h, &format!("collab-issue show app {tampered}"));
    let bodies: Vec<&str> = forged["comments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["after the forgery"]);
    let plain = server_json(&h, &format!("collab-issue show plain {closed}"));
    assert_eq!(
        plain["comments"].as_array().unwrap().len(),
        3,
        "no allowlist in plain"
    );

    // The leases are intact, tokens included.
    let leases = server_json(&h, "collab-lease list app");
    assert_eq!(leases["leases"][0]["issue"], leased.as_str());
    assert_eq!(leases["leases"][0]["holder"], "agent-7");
    assert_eq!(leases["leases"][0]["token"], 5);
    let held = h.ssh_exec(&format!("collab-lease acquire app {leased}"));
    assert_eq!(held.code, 4, "{held:?}");
    assert_eq!(held.json()["holder"], "agent-7");
    let plain_leases = server_json(&h, "collab-lease list plain");
    assert_eq!(plain_leases["leases"][0]["token"], 2);
    // Fencing works on imported issues with the old tenure's token.
    let fenced = h.ssh_exec(&format!(
        "collab-issue comment app {leased} --body late --lease-token 4"
    ));
    assert_eq!(fenced.code, 4, "{fenced:?}");
    assert_eq!(fenced.json()["token"], 5);

    // A restart imports nothing twice; the host command agrees.
    let imported = count_imported_events(&h);
    assert_eq!(imported, 3 + 4, "one event per imported issue");
    h.restart();
    assert_eq!(count_imported_events(&h), imported);
    let out = checked(
        Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
            .arg("--state-dir")
            .arg(h.state_dir())
            .args(["import", "--json"])
            .output()
            .unwrap(),
        "git-collab-server import",
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
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
    assert_eq!(count_imported_events(&h), imported);

    // The import's own report, kept in the database, names what was dropped.
    let conn = rusqlite::Connection::open_with_flags(
        h.repos_dir().join("collab.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let (issues, dropped, report): (i64, i64, String) = conn
        .query_row(
            "SELECT issues, dropped, report FROM imports WHERE repo = 'app.git'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(issues, 3);
    let report: Value = serde_json::from_str(&report).unwrap();
    let reasons: Vec<&str> = report["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    assert_eq!(dropped as usize, reasons.len());
    assert!(
        reasons.contains(&"untrusted") && reasons.contains(&"bad_signature"),
        "{reasons:?}"
    );
    assert_eq!(report["invalid_issues"][0]["issue"], by_mallory.as_str());

    // Issue DAG refs cannot be pushed any more.
    let a = Author { h: &h, work };
    a.collab(&["comment", &leased, "-m", "pushed the old way"]);
    a.git(&["remote", "add", "origin", &h.repo_url("app")]);
    let out = h.git_as(
        &h.ssh_client_key(),
        &a.work,
        &["push", "origin", "refs/collab/*:refs/collab/*"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("use `git collab issue"), "{stderr}");
    let shown = server_json(&h, &format!("collab-issue show app {leased}"));
    assert_eq!(
        shown["comments"],
        json!([]),
        "nothing was imported from the push"
    );
}

#[test]
fn the_import_command_reports_counts_and_a_repository_created_later_is_imported_on_first_use() {
    let h = ServerHarness::start();
    // A repository appears on the host while the server runs, with a DAG.
    let key = h.temp_dir().join("keys").join("author");
    generate_key(&key, "author");
    let work = h.temp_dir().join("late-work");
    checked(
        Command::new("git")
            .args(["init", "-q"])
            .arg(&work)
            .output()
            .unwrap(),
        "git init",
    );
    let a = Author { h: &h, work };
    a.sign_as("Author", &key);
    let id = a.open("Made before the repository was served", &["old"]);
    a.collab(&["comment", &id, "-m", "history"]);
    let bare = h.repos_dir().join("late.git");
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
        "refs/collab/*:refs/collab/*",
    ]);

    // `import late` on the host imports it (the server is running).
    let out = checked(
        Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
            .arg("--state-dir")
            .arg(h.state_dir())
            .args(["import", "late"])
            .output()
            .unwrap(),
        "git-collab-server import late",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("late.git: imported 1 issues, 1 comments (2 events replayed, 0 dropped"),
        "{text}"
    );
    let shown = server_json(&h, &format!("collab-issue show late {}", &id[..8]));
    assert_eq!(shown["comments"][0]["body"], "history");

    // Another repository appears; the first issue verb imports it.
    let bare2 = h.repos_dir().join("later.git");
    checked(
        Command::new("git")
            .args(["init", "-q", "--bare"])
            .arg(&bare2)
            .output()
            .unwrap(),
        "git init --bare",
    );
    a.git(&[
        "push",
        "-q",
        bare2.to_str().unwrap(),
        "refs/collab/*:refs/collab/*",
    ]);
    let listed = server_json(&h, "collab-issue list later");
    assert_eq!(listed["issues"][0]["id"], id.as_str());
    // An unknown repository is refused by name.
    let out = Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
        .arg("--state-dir")
        .arg(h.state_dir())
        .args(["import", "nothing-here"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: repository not found\n"
    );
}
