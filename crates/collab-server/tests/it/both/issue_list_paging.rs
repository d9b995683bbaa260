//! `git collab issue list` in server mode follows the server's cursor over
//! many pages (500 issues a call) and prints one list, as local mode does:
//! every issue once, newest first. The issues are seeded straight into the
//! stopped server's collab.db (through the server's own `collab_store::issues`), as a
//! busy repository would hold them; the CLI and the server then run for real.
use collab_testkit as common;

use collab_store::issues::{self, NewIssue, Person, WriteCtx};
use common::ServerHarness;
use serde_json::Value;

const COUNT: usize = 1203;

#[test]
fn list_follows_the_cursor_over_many_pages() {
    let mut h = ServerHarness::start();
    h.create_repo("r");
    let key = h.ssh_client_key();
    // The repository's name as the database holds it.
    let first = h.ssh_exec("collab-issue open 'r' --title 'first'").json();
    let repo = first["repo"].as_str().unwrap().to_string();
    h.stop();
    {
        let conn = collab_store::open(collab_store::Location::parse(&h.db_setting())).unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        let who = Person {
            principal: "SHA256:seed".into(),
            name: "seed".into(),
            key: None,
        };
        for i in 1..COUNT {
            // Pairs of issues share a second, so the cursor's tie-break by
            // id is exercised.
            let w = WriteCtx {
                repo: &repo,
                actor: &who,
                fence: None,
                max_body: 1024,
                now: 1_800_000_000 + (i / 2) as i64,
            };
            let new = NewIssue {
                title: format!("issue {i}"),
                body: String::new(),
                labels: vec![],
            };
            let written = issues::open(&tx, &w, &new).unwrap();
            if i % 3 == 0 {
                issues::close(&tx, &w, &written.issue, None).unwrap();
            }
        }
        tx.commit().unwrap();
    }
    h.start_again();
    let clone = h.clone_repo("r", "work");
    let list = |args: &[&str]| -> Vec<Value> {
        let out = h
            .client_command(collab_testkit::bin("git-collab"), &key, &clone)
            .args(["issue", "list", "--json"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };
    let all = list(&["--all"]);
    assert_eq!(all.len(), COUNT);
    let mut ids: Vec<&str> = all.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let order: Vec<(String, String)> = all
        .iter()
        .map(|r| {
            (
                r["created_at"].as_str().unwrap().to_string(),
                r["id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut sorted = order.clone();
    // Newest first, ties by id: what local mode prints.
    sorted.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    assert_eq!(order, sorted);
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), COUNT, "every issue exactly once");
    let closed = (1..COUNT).filter(|i| i % 3 == 0).count();
    assert_eq!(list(&["--closed"]).len(), closed);
    assert_eq!(list(&[]).len(), COUNT - closed);
}
