//! `collab-issue` against the real server over OpenSSH: every subcommand
//! and its JSON, who may do what (a read-only principal lists but cannot
//! comment; a private repository answers exactly like a missing one),
//! hostile input refused with nothing written, and fencing with
//! `--lease-token` (a stale token changes nothing; closing ends the lease).
use collab_testkit as common;

use std::path::Path;

use common::{fingerprint, HarnessOptions, ServerHarness, SshOutput, NOT_FOUND};
use serde_json::Value;

fn ok(out: SshOutput) -> Value {
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    out.json()
}

fn open(h: &ServerHarness, repo: &str, title: &str) -> String {
    let v = ok(h.ssh_exec(&format!("collab-issue open '{repo}' --title '{title}'")));
    v["issue"].as_str().unwrap().to_string()
}

/// What the database holds, row counts per table (read-only, beside the
/// running server: WAL lets us).
fn db_counts(h: &ServerHarness) -> Vec<i64> {
    let conn = collab_store::open_reader(collab_store::Location::parse(&h.db_setting())).unwrap();
    [
        "issues",
        "issue_comments",
        "issue_labels",
        "issue_links",
        "events",
    ]
    .iter()
    .map(|t| {
        conn.query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| r.get(0))
            .unwrap()
    })
    .collect()
}

fn private_repo(h: &ServerHarness, name: &str) {
    let path = h.create_repo(name);
    collab_testkit::write_live(&path.join("collab-policy.toml"), "read = []\nwrite = []\n");
}

#[test]
fn every_subcommand_round_trips_over_ssh() {
    let h = ServerHarness::start();
    h.create_repo("team/app");
    h.create_repo("team/lib");
    let me = fingerprint(&h.ssh_client_key());

    let opened = ok(h.ssh_exec_with_stdin(
        "collab-issue open 'team/app' --title 'Crash on start' --label bug --label ui --body-stdin",
        b"boom\n\nsecond paragraph\n",
    ));
    assert_eq!(opened["status"], "opened");
    assert_eq!(opened["repo"], "team/app.git");
    let id = opened["issue"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 40);
    assert_eq!(opened["event"], id.as_str());
    let seq0 = opened["seq"].as_i64().unwrap();

    let c = ok(h.ssh_exec(&format!(
        "collab-issue comment team/app {} --body 'first comment'",
        &id[..6]
    )));
    assert_eq!(c["status"], "commented");
    assert_eq!(c["issue"], id.as_str());
    assert_eq!(c["seq"].as_i64().unwrap(), seq0 + 1);
    let comment_id = c["event"].as_str().unwrap().to_string();
    ok(h.ssh_exec_with_stdin(
        &format!("collab-issue comment team/app {id} --body-stdin"),
        b"second\nwith two lines",
    ));
    ok(h.ssh_exec(&format!(
        "collab-issue edit team/app {id} --title 'Crash on start-up'"
    )));
    let l = ok(h.ssh_exec(&format!(
        "collab-issue label team/app {id} --add p1 --remove ui"
    )));
    assert_eq!(l["status"], "labeled");

    let other = open(&h, "team/lib", "Library bug");
    let blocked = open(&h, "team/app", "Follow-up");
    let linked = ok(h.ssh_exec(&format!(
        "collab-issue link team/app {id} blocks {}",
        &blocked[..8]
    )));
    assert_eq!(linked["link"]["kind"], "blocks");
    assert_eq!(linked["link"]["target"]["id"], blocked.as_str());
    ok(h.ssh_exec(&format!(
        "collab-issue link team/app {id} relates 'team/lib#{}'",
        &other[..8]
    )));

    let shown = ok(h.ssh_exec(&format!("collab-issue show team/app {id}")));
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["title"], "Crash on start-up");
    assert_eq!(shown["body"], "boom\n\nsecond paragraph\n");
    assert_eq!(shown["status"], "open");
    assert_eq!(shown["closed_reason"], Value::Null);
    assert_eq!(shown["labels"], serde_json::json!(["bug", "p1"]));
    assert_eq!(shown["author"]["principal"], me.as_str());
    assert!(shown["author"]["key"]
        .as_str()
        .unwrap()
        .starts_with("ssh-ed25519 "));
    assert_eq!(shown["priority"], Value::Null);
    let comments = shown["comments"].as_array().unwrap();
    assert_eq!(comments.len(), 2);
    assert_eq!(comments[0]["id"], comment_id.as_str());
    assert_eq!(comments[0]["body"], "first comment");
    assert_eq!(comments[1]["body"], "second\nwith two lines");
    assert!(comments[0]["at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(shown["links"]["blocks"][0]["id"], blocked.as_str());
    assert_eq!(
        shown["links"]["relates"][0]["text"],
        format!("team/lib#{}", &other[..8])
    );
    // The other ends see the links too.
    let b = ok(h.ssh_exec(&format!("collab-issue show team/app {blocked}")));
    assert_eq!(b["links"]["blocked_by"][0]["id"], id.as_str());
    let o = ok(h.ssh_exec(&format!("collab-issue show team/lib {other}")));
    assert_eq!(o["links"]["relates"][0]["repo"], "team/app.git");

    ok(h.ssh_exec(&format!(
        "collab-issue unlink team/app {id} relates 'team/lib#{other}'"
    )));
    let closed = ok(h.ssh_exec(&format!(
        "collab-issue close team/app {id} --reason 'fixed in main'"
    )));
    assert_eq!(closed["lease_ended"], Value::Null);
    let again = h.ssh_exec(&format!("collab-issue close team/app {id}"));
    assert_eq!(again.code, 1);
    assert!(again.stderr.contains("already closed"), "{again:?}");

    let list = ok(h.ssh_exec("collab-issue list team/app"));
    let ids: Vec<&str> = list["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [blocked.as_str()], "only the open one");
    let all = ok(h.ssh_exec("collab-issue list team/app --state all --label p1"));
    let row = &all["issues"][0];
    assert_eq!(row["id"], id.as_str());
    assert_eq!(row["comments"], 2);
    assert_eq!(row["status"], "closed");
    assert_eq!(all["next"], Value::Null);
    ok(h.ssh_exec(&format!("collab-issue reopen team/app {}", &id[..10])));

    // Ambiguity and unknown ids answer like the CLI.
    let missing = h.ssh_exec("collab-issue show team/app 0000000");
    assert_eq!(missing.stderr, "error: no issue matches '0000000'\n");
    let bad = h.ssh_exec("collab-issue show team/app xyz");
    assert!(bad.stderr.starts_with("error: invalid issue id"), "{bad:?}");
}

#[test]
fn list_pages_through_many_issues_with_a_stable_cursor() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let mut opened = Vec::new();
    for i in 0..7 {
        opened.push(open(&h, "r", &format!("issue {i}")));
    }
    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let v = ok(h.ssh_exec(&format!("collab-issue list r --limit 3{after}")));
        let page = v["issues"].as_array().unwrap();
        assert!(page.len() <= 3);
        seen.extend(page.iter().map(|i| i["id"].as_str().unwrap().to_string()));
        // A write between pages does not disturb the walk.
        ok(h.ssh_exec(&format!("collab-issue comment r {} --body x", opened[0])));
        match v["next"].as_str() {
            Some(cursor) => after = format!(" --after {cursor}"),
            None => break,
        }
    }
    let mut expected = opened.clone();
    expected.sort();
    let mut got = seen.clone();
    got.sort();
    assert_eq!(got, expected, "every issue exactly once: {seen:?}");
}

#[test]
fn read_only_principals_list_but_cannot_write_and_private_repos_look_missing() {
    let h = ServerHarness::start();
    let repo = h.create_repo("shared");
    let reader = h.authorized_key("reader");
    std::fs::write(
        repo.join("collab-policy.toml"),
        format!("read = [\"{}\"]\nwrite = []\n", fingerprint(&reader)),
    )
    .unwrap();
    let id = open(&h, "shared", "Readable");
    let listed = ok(h.ssh_exec_as(&reader, "collab-issue list shared", b""));
    assert_eq!(listed["issues"][0]["id"], id.as_str());
    ok(h.ssh_exec_as(&reader, &format!("collab-issue show shared {id}"), b""));
    let before = db_counts(&h);
    let refused = h.ssh_exec_as(
        &reader,
        &format!("collab-issue comment shared {id} --body nope"),
        b"",
    );
    assert_eq!((refused.code, refused.stderr.as_str()), (1, NOT_FOUND));
    assert_eq!(db_counts(&h), before, "nothing written");

    // Every verb on a private repository answers exactly as on a missing one.
    private_repo(&h, "secret");
    let secret_id = open(&h, "secret", "Hidden");
    let user = h.authorized_key("user");
    let verbs = |repo: &str, id: &str| {
        vec![
            format!("collab-issue open '{repo}' --title t"),
            format!("collab-issue show '{repo}' {id}"),
            format!("collab-issue list '{repo}'"),
            format!("collab-issue comment '{repo}' {id} --body x"),
            format!("collab-issue edit '{repo}' {id} --title x"),
            format!("collab-issue label '{repo}' {id} --add x"),
            format!("collab-issue close '{repo}' {id}"),
            format!("collab-issue reopen '{repo}' {id}"),
            format!("collab-issue link '{repo}' {id} relates {id}"),
            format!("collab-issue unlink '{repo}' {id} relates {id}"),
        ]
    };
    h.create_repo("work");
    let mine = open(&h, "work", "Mine");
    let before = db_counts(&h);
    for (secret, missing) in verbs("secret", &secret_id)
        .iter()
        .zip(verbs("nothing-here", &secret_id))
    {
        let a = h.ssh_exec_as(&user, secret, b"");
        let b = h.ssh_exec_as(&user, &missing, b"");
        assert_eq!(
            (a.code, &a.stdout, &a.stderr),
            (b.code, &b.stdout, &b.stderr)
        );
        assert_eq!(a.stderr, NOT_FOUND, "{secret}");
    }
    // A link into a repository the caller cannot read is refused the same way.
    let out = h.ssh_exec_as(
        &user,
        &format!("collab-issue link work {mine} relates 'secret#{secret_id}'"),
        b"",
    );
    assert_eq!(out.stderr, NOT_FOUND, "{out:?}");
    // ... while a link within reach is made.
    let other = open(&h, "work", "Other");
    ok(h.ssh_exec_as(
        &user,
        &format!("collab-issue link work {mine} relates {other}"),
        b"",
    ));
    let after = db_counts(&h);
    assert_eq!(after[3], 1, "one link: {after:?}");
    assert_eq!(&after[1..3], &before[1..3], "nothing else written");
}

#[test]
fn links_into_private_repositories_are_hidden_from_readers_who_cannot_see_them() {
    let h = ServerHarness::start();
    h.create_repo("open");
    private_repo(&h, "secret");
    let public = open(&h, "open", "Public");
    let hidden = open(&h, "secret", "Hidden");
    // The admin can see both and links them.
    ok(h.ssh_exec(&format!(
        "collab-issue link secret {hidden} blocks 'open#{public}'"
    )));
    let admin_view = ok(h.ssh_exec(&format!("collab-issue show open {public}")));
    assert_eq!(admin_view["links"]["blocked_by"][0]["id"], hidden.as_str());
    let user = h.authorized_key("user");
    let user_view = ok(h.ssh_exec_as(&user, &format!("collab-issue show open {public}"), b""));
    assert_eq!(user_view["links"]["blocked_by"], serde_json::json!([]));
}

#[test]
fn hostile_input_is_refused_with_one_line_and_nothing_written() {
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_MAX_ISSUE_BODY".into(), "1KiB".into())],
        ..Default::default()
    });
    h.create_repo("r");
    let id = open(&h, "r", "Target");
    let before = db_counts(&h);
    let many_labels: String = (0..40).map(|i| format!(" --label l{i}")).collect();
    let cases: Vec<(String, Vec<u8>)> = vec![
        ("collab-issue open r --title ''".into(), vec![]),
        ("collab-issue open r --title '   '".into(), vec![]),
        ("collab-issue open r --title \"a\nb\"".into(), vec![]),
        ("collab-issue open r --title t --label ''".into(), vec![]),
        ("collab-issue open r --title t --label 'a b'".into(), vec![]),
        ("collab-issue open r --title t --label a,b".into(), vec![]),
        (
            format!("collab-issue open r --title t{many_labels}"),
            vec![],
        ),
        (
            "collab-issue open r --title t --body-stdin".into(),
            vec![b'x'; 1025],
        ),
        (
            "collab-issue open r --title t --body-stdin".into(),
            b"nul\0inside".to_vec(),
        ),
        (
            "collab-issue open r --title t --body-stdin".into(),
            vec![0xff, 0xfe],
        ),
        (
            format!("collab-issue comment r {id} --body-stdin"),
            vec![b'y'; 4096],
        ),
        (format!("collab-issue comment r {id} --body-stdin"), vec![]),
        (format!("collab-issue comment r {id} --body ' '"), vec![]),
        (
            format!("collab-issue comment r {id} --body-stdin"),
            b"esc \x1b[2J".to_vec(),
        ),
        (format!("collab-issue label r {id} --add 'x y'"), vec![]),
        (
            format!("collab-issue label r {id} --add a --remove a"),
            vec![],
        ),
        (format!("collab-issue edit r {id} --title ''"), vec![]),
        (format!("collab-issue link r {id} blocks {id}"), vec![]),
        ("collab-issue comment r abc --body x".into(), vec![]),
        ("collab-issue list r --limit 100000".into(), vec![]),
        ("collab-issue frobnicate r".into(), vec![]),
    ];
    for (cmd, stdin) in &cases {
        let out = h.ssh_exec_with_stdin(cmd, stdin);
        assert_eq!(out.code, 1, "{cmd}: {out:?}");
        assert!(out.stdout.is_empty(), "{cmd}: {out:?}");
        assert!(
            out.stderr.starts_with("error: ") && out.stderr.lines().count() == 1,
            "{cmd}: {out:?}"
        );
    }
    assert_eq!(db_counts(&h), before, "nothing was written");
    // The limit is exact: max_issue_body bytes are fine.
    ok(h.ssh_exec_with_stdin(
        &format!("collab-issue comment r {id} --body-stdin"),
        &[b'z'; 1024],
    ));
}

fn lease(h: &ServerHarness, key: &Path, cmd: &str) -> SshOutput {
    h.ssh_exec_as(key, cmd, b"")
}

#[test]
fn lease_tokens_fence_writes_and_closing_ends_the_lease() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let id = open(&h, "r", "Fenced work");
    let agent = h.authorized_key("agent");
    let first = ok(lease(
        &h,
        &agent,
        &format!("collab-lease acquire r {id} --ttl 600"),
    ));
    assert_eq!(first["token"], 1);
    ok(lease(&h, &agent, &format!("collab-lease release r {id}")));
    let second = ok(lease(
        &h,
        &agent,
        &format!("collab-lease acquire r {}", &id[..8]),
    ));
    assert_eq!(second["token"], 2);

    // The stale token (1) is refused, naming the holder and the live token.
    let before = db_counts(&h);
    for cmd in [
        format!("collab-issue comment r {id} --body late --lease-token 1"),
        format!("collab-issue edit r {id} --title late --lease-token 1"),
        format!("collab-issue label r {id} --add late --lease-token 1"),
        format!("collab-issue close r {id} --lease-token 1"),
    ] {
        let out = h.ssh_exec_as(&agent, &cmd, b"");
        assert_eq!(out.code, 4, "{cmd}: {out:?}");
        let v = out.json();
        assert_eq!(v["status"], "fenced");
        assert_eq!(v["issue"], id.as_str());
        assert_eq!(v["holder"], fingerprint(&agent).as_str());
        assert_eq!(v["token"], 2);
    }
    assert_eq!(db_counts(&h), before, "a fenced write changes nothing");

    // The live token passes.
    ok(h.ssh_exec_as(
        &agent,
        &format!("collab-issue comment r {id} --body progress --lease-token 2"),
        b"",
    ));
    // Closing ends the lease, and an event records it.
    let closed = ok(h.ssh_exec_as(
        &agent,
        &format!("collab-issue close r {id} --reason done --lease-token 2"),
        b"",
    ));
    assert_eq!(closed["lease_ended"]["token"], 2);
    let leases = ok(h.ssh_exec("collab-lease list r"));
    assert_eq!(leases["leases"], serde_json::json!([]));
    let conn = collab_store::open_reader(collab_store::Location::parse(&h.db_setting())).unwrap();
    let (kind, payload): (String, String) = conn
        .query_row(
            "SELECT type, payload FROM events ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(kind, "lease.released");
    assert!(payload.contains("issue_closed"), "{payload}");
    // A closed issue cannot be claimed; after a reopen the token keeps growing.
    let refused = lease(&h, &agent, &format!("collab-lease acquire r {id}"));
    assert_eq!(refused.stderr, "error: issue is closed\n");
    ok(h.ssh_exec(&format!("collab-issue reopen r {id}")));
    let third = ok(lease(&h, &agent, &format!("collab-lease acquire r {id}")));
    assert_eq!(third["token"], 3);
}
