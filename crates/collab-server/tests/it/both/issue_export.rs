//! The server's signed export of its issues, end to end: writes through
//! `collab-issue` show up, shortly after, under
//! `refs/collab/export/issues/<id>` as DAGs signed by the server's key; a
//! clone fetches them and the real CLI replays them offline to what the
//! server shows; `git collab verify` checks them once `server_key` is
//! trusted; clients cannot push there.

use collab_testkit as common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::ServerHarness;
use serde_json::{json, Value};

/// Hang guard for the background exporter (not a performance bound).
const EXPORT_LIMIT: Duration = Duration::from_secs(60);

fn ok(h: &ServerHarness, cmd: &str) -> Value {
    let out = h.ssh_exec(cmd);
    assert_eq!(out.code, 0, "{cmd}: {out:?}");
    out.json()
}

fn cli(h: &ServerHarness, dir: &Path, args: &[&str]) -> std::process::Output {
    h.client_command(collab_testkit::bin("git-collab"), &h.ssh_client_key(), dir)
        .args(args)
        .output()
        .unwrap()
}

fn cli_json(h: &ServerHarness, dir: &Path, args: &[&str]) -> Value {
    let out = cli(h, dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The fields an export carries, from the server's or the CLI's JSON
/// (comment ids differ: the export's are its own commit ids).
fn exported_view(v: &Value) -> Value {
    json!({
        "id": v["id"], "title": v["title"], "body": v["body"],
        "author": v["author"]["name"],
        "created_at": v["created_at"], "updated_at": v["updated_at"],
        "status": v["status"], "closed_reason": v["closed_reason"], "labels": v["labels"],
        "comments": v["comments"].as_array().unwrap().iter()
            .map(|c| json!([c["author"]["name"], c["at"], c["body"]])).collect::<Vec<_>>(),
    })
}

/// Fetch the export into `clone` until `issue` offline equals the server's
/// view (the exporter runs shortly after writes).
fn wait_for_export(h: &ServerHarness, clone: &Path, issue: &str) -> Value {
    let want = exported_view(&ok(h, &format!("collab-issue show r {issue}")));
    let start = Instant::now();
    loop {
        let fetched = cli(h, clone, &["issue", "fetch"]);
        assert!(fetched.status.success(), "{fetched:?}");
        let out = cli(h, clone, &["issue", "show", issue, "--offline", "--json"]);
        if out.status.success() {
            let got: Value = serde_json::from_slice(&out.stdout).unwrap();
            if exported_view(&got) == want {
                return got;
            }
        }
        assert!(
            start.elapsed() < EXPORT_LIMIT,
            "the export never caught up; want {want:#}\nserver log:\n{}",
            h.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn writes_reach_a_signed_export_that_clones_replay_and_verify_offline() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let agent = h.authorized_key("agent");
    let id = ok(
        &h,
        "collab-issue open r --title 'Exported issue' --label bug --label ui --body 'first body'",
    )["issue"]
        .as_str()
        .unwrap()
        .to_string();
    ok(
        &h,
        &format!("collab-issue comment r {id} --body 'by the admin'"),
    );
    let out = h.ssh_exec_as(
        &agent,
        &format!("collab-issue comment r {id} --body 'by the agent'"),
        b"",
    );
    assert_eq!(out.code, 0, "{out:?}");
    let clone = h.clone_repo("r", "reader");
    wait_for_export(&h, &clone, &id);

    // Later writes of every kind follow.
    ok(
        &h,
        &format!("collab-issue edit r {id} --title 'Exported, renamed' --body 'second body'"),
    );
    ok(
        &h,
        &format!("collab-issue label r {id} --add p1 --remove ui"),
    );
    let other = ok(&h, "collab-issue open r --title 'Another'")["issue"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&h, &format!("collab-issue link r {id} blocks {other}"));
    ok(&h, &format!("collab-issue close r {id} --reason done"));
    ok(&h, &format!("collab-issue reopen r {id}"));
    ok(
        &h,
        &format!("collab-issue close r {id} --reason 'done again'"),
    );
    let shown = wait_for_export(&h, &clone, &id);
    assert_eq!(shown["status"], "closed");
    assert_eq!(shown["closed_reason"], "done again");
    assert_eq!(shown["labels"], json!(["bug", "p1"]));
    wait_for_export(&h, &clone, &other);
    let listed = cli_json(
        &h,
        &clone,
        &["issue", "list", "--offline", "--all", "--json"],
    );
    assert_eq!(listed.as_array().unwrap().len(), 2);

    // Every exported event is signed by the server's key: once trusted,
    // verify checks the export and finds nothing wrong.
    let server_key = ok(&h, "collab-whoami")["server_key"]
        .as_str()
        .unwrap()
        .to_string();
    let added = cli(&h, &clone, &["trust", "add", &server_key]);
    assert!(added.status.success(), "{added:?}");
    let report = cli_json(&h, &clone, &["verify", "--json"]);
    assert_eq!(report["ok"], true, "{report:#}");
    let export = &report["exports"][0];
    assert_eq!(export["issues"], 2, "{report:#}");
    assert_eq!(export["checked"], true, "{report:#}");
    assert_eq!(export["dropped"], json!([]));

    // The export is the server's: a client cannot write there.
    h.git(
        &clone,
        &[
            "fetch",
            "origin",
            "refs/collab/export/*:refs/collab/export/*",
        ],
    );
    let tip = h.rev_parse(&clone, &format!("refs/collab/export/issues/{id}"));
    let out = h.git_as(
        &h.ssh_client_key(),
        &clone,
        &[
            "push",
            "origin",
            &format!("{tip}:refs/collab/export/issues/{other}"),
        ],
    );
    assert!(!out.status.success(), "{out:?}");
    // A restart re-exports nothing: the export refs stay where they were.
    let before = h.ls_remote_as(&h.ssh_client_key(), "r").stdout;
    let mut h = h;
    h.restart();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(h.ls_remote_as(&h.ssh_client_key(), "r").stdout, before);
}
