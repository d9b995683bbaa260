//! `collab-search` against the real server over OpenSSH, its MCP tool and
//! the web's search box: ranking, comments, state and kind filters, paging
//! with the cursor, what a reader of one private repository and not of
//! another finds (a private repository is missing), and hostile queries
//! (FTS operators, quotes, NUL, 10 KB, `*`, `NEAR(`) refused with one
//! usage line and never the engine's text.

use collab_testkit as common;

use common::mcp::McpSession;
use common::review;
use common::{fingerprint, ServerHarness, SshOutput, NOT_FOUND};
use serde_json::{json, Value};

fn ok(out: SshOutput) -> Value {
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    out.json()
}

fn open(h: &ServerHarness, repo: &str, title: &str, body: &str) -> String {
    let v = ok(h.ssh_exec(&format!(
        "collab-issue open '{repo}' --title '{title}' --body '{body}'"
    )));
    v["issue"].as_str().unwrap().to_string()
}

fn search(h: &ServerHarness, args: &str) -> Value {
    ok(h.ssh_exec(&format!("collab-search {args}")))
}

/// The titles of a reply's results, in order.
fn titles(reply: &Value) -> Vec<String> {
    reply["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["title"].as_str().unwrap().to_string())
        .collect()
}

/// A repository only `reader` (besides the admin) may read.
fn readable_by(h: &ServerHarness, name: &str, reader: &std::path::Path) {
    let path = h.create_repo(name);
    common::write_live(
        &path.join("collab-policy.toml"),
        format!("read = [\"{}\"]\nwrite = []\n", fingerprint(reader)),
    );
}

#[test]
fn issues_and_patches_are_found_ranked_filtered_and_paged() {
    let (h, alice, _bob) = review::setup();
    let crash = open(
        &h,
        "r",
        "Parser crashes on empty input",
        "stack trace attached",
    );
    open(&h, "r", "Docs typo", "the parser page says parse twice");
    let other = open(&h, "r", "Slow startup", "takes ten seconds");
    ok(h.ssh_exec(&format!(
        "collab-issue comment r {other} --body 'also seen with the zeppelin backend'"
    )));
    ok(h.ssh_exec(&format!("collab-issue close r {crash}")));
    review::commit(
        &h,
        &alice,
        "f.txt",
        "x\n",
        "Teach the parser about zeppelin files",
    );
    let patch: String = review::push_for_review(&h, &alice, &[]);

    // A title outranks a body; every object once, with its state.
    let parser = search(&h, "parser --kind issue");
    assert_eq!(
        titles(&parser),
        ["Parser crashes on empty input", "Docs typo"]
    );
    assert_eq!(parser["results"][0]["state"], "closed");
    assert_eq!(parser["results"][0]["kind"], "issue");
    assert_eq!(parser["results"][0]["repo"], "r.git");
    assert_eq!(parser["results"][0]["id"], crash.as_str());
    assert_eq!(parser["next"], Value::Null);

    // Comments are found, the snippet shows the words around.
    let z = search(&h, "zeppelin --kind issue");
    assert_eq!(titles(&z), ["Slow startup"]);
    let snippet = z["results"][0]["snippet"].as_str().unwrap();
    assert!(snippet.contains("zeppelin backend"), "{snippet}");

    // Patches too, and the kind filter keeps them apart.
    let patches = search(&h, "zeppelin --kind patch");
    assert_eq!(titles(&patches), ["Teach the parser about zeppelin files"]);
    assert_eq!(patches["results"][0]["id"], patch.as_str());
    assert_eq!(patches["results"][0]["kind"], "patch");
    assert_eq!(titles(&search(&h, "zeppelin")).len(), 2);

    // Every word must match; stems match (crashes / crash).
    assert_eq!(
        titles(&search(&h, "'parser crash'")),
        ["Parser crashes on empty input"]
    );
    assert!(titles(&search(&h, "'parser nonexistentword'")).is_empty());

    // State filters.
    assert_eq!(
        titles(&search(&h, "parser --kind issue --state open")),
        ["Docs typo"]
    );
    assert_eq!(
        titles(&search(&h, "parser --state closed")),
        ["Parser crashes on empty input"]
    );

    // Paging: every match exactly once across pages of two.
    for i in 0..5 {
        open(&h, "r", &format!("Widget {i}"), "widget trouble");
    }
    let mut seen = Vec::new();
    let mut after = String::new();
    let mut pages = 0;
    loop {
        let page = search(&h, &format!("widget --limit 2{after}"));
        pages += 1;
        seen.extend(titles(&page));
        match page["next"].as_str() {
            Some(next) => after = format!(" --after '{next}'"),
            None => break,
        }
        assert!(pages < 10, "the pages never end");
    }
    assert_eq!(pages, 3);
    seen.sort();
    assert_eq!(
        seen,
        (0..5).map(|i| format!("Widget {i}")).collect::<Vec<_>>()
    );
}

#[test]
fn a_reader_finds_only_what_it_may_read_and_private_is_missing() {
    let h = ServerHarness::start();
    let reader = h.authorized_key("reader");
    let stranger = h.authorized_key("stranger");
    readable_by(&h, "team/shared", &reader);
    readable_by(&h, "team/secret", &stranger);
    open(&h, "team/shared", "Zeppelin in shared", "x");
    open(&h, "team/secret", "Zeppelin in secret", "x");

    let mine = ok(h.ssh_exec_as(&reader, "collab-search zeppelin", b""));
    assert_eq!(titles(&mine), ["Zeppelin in shared"]);
    let theirs = ok(h.ssh_exec_as(&stranger, "collab-search zeppelin", b""));
    assert_eq!(titles(&theirs), ["Zeppelin in secret"]);
    let admin = search(&h, "zeppelin");
    assert_eq!(titles(&admin).len(), 2);

    // A glob over both reads only the readable one ...
    let globbed = ok(h.ssh_exec_as(&reader, "collab-search zeppelin --repo 'team/*'", b""));
    assert_eq!(titles(&globbed), ["Zeppelin in shared"]);
    let none = ok(h.ssh_exec_as(&reader, "collab-search zeppelin --repo 'team/sec*'", b""));
    assert_eq!(titles(&none), Vec::<String>::new());
    // ... and naming the private one answers as a name that does not exist.
    let private = h.ssh_exec_as(&reader, "collab-search zeppelin --repo team/secret", b"");
    let missing = h.ssh_exec_as(&reader, "collab-search zeppelin --repo team/nothing", b"");
    assert_eq!(
        (private.code, &private.stdout, &private.stderr),
        (missing.code, &missing.stdout, &missing.stderr)
    );
    assert_eq!((private.code, private.stderr.as_str()), (1, NOT_FOUND));
    let named = ok(h.ssh_exec_as(
        &reader,
        "collab-search zeppelin --repo team/shared.git",
        b"",
    ));
    assert_eq!(titles(&named), ["Zeppelin in shared"]);
}

#[test]
fn hostile_queries_get_one_usage_line_never_the_engines() {
    let h = ServerHarness::start();
    h.create_repo("r");
    open(&h, "r", "Near the edge", "an ordinary body");
    let engine_words = [
        "fts5", "syntax", "sqlite", "tsquery", "postgres", "database",
    ];
    let refused = |args: &str, code: i32| {
        let out = h.ssh_exec(&format!("collab-search {args}"));
        assert_eq!(out.code, code, "{args}: {out:?}");
        assert!(out.stdout.is_empty(), "{args}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{args}: {out:?}");
        assert!(out.stderr.starts_with("error: "), "{args}: {out:?}");
        let lower = out.stderr.to_lowercase();
        for word in engine_words {
            assert!(!lower.contains(word), "{args}: {out:?}");
        }
        out.stderr
    };
    // No words at all, too long, too many words, a cursor we did not write.
    for args in ["'*'", "'\"'", "'()'", "' '", "'-'", "'(*)'"] {
        let line = refused(args, 2);
        assert!(line.starts_with("error: usage: "), "{line}");
    }
    refused(&format!("'{}'", "a".repeat(300)), 2);
    let many: String = (0..20).map(|i| format!("w{i} ")).collect();
    refused(&format!("'{many}'"), 2);
    refused("edge --after 'not-a-cursor'", 2);
    refused("edge --after '0000000000000000.i.00.00'", 2);
    // 10 KB is past the longest command line the server reads at all.
    refused(&format!("'{}'", "x".repeat(10 * 1024)), 1);
    // Operators are only words: they match as words or find nothing.
    for args in [
        "'NEAR(edge ordinary)'",
        "'edge AND NOT ordinary'",
        "'\"edge\" OR body*'",
        "'edge:* & !body | ordinary <-> x'",
        "'title:edge'",
        "'{edge} ^body'",
    ] {
        let out = h.ssh_exec(&format!("collab-search {args}"));
        assert_eq!(out.code, 0, "{args}: {out:?}");
        out.json();
    }
    let near = search(&h, "'NEAR(edge'");
    assert_eq!(titles(&near), ["Near the edge"]);
    // Matched on its title alone: the snippet is the title.
    assert_eq!(near["results"][0]["snippet"], "Near the edge");
    // NUL: OpenSSH cannot send it, an MCP tool call can.
    let mut s = McpSession::open(&h, &h.ssh_client_key());
    let nul = s.call("search", json!({"query": "edge\u{0}body"})).unwrap();
    assert_eq!(nul["isError"], true, "{nul}");
    let text = nul.to_string().to_lowercase();
    for word in engine_words {
        assert!(!text.contains(word), "{nul}");
    }
}

#[test]
fn the_mcp_tool_searches_what_the_caller_may_read() {
    let h = ServerHarness::start();
    let reader = h.authorized_key("reader");
    readable_by(&h, "shared", &reader);
    h.create_repo("secret");
    common::write_live(
        &h.repos_dir().join("secret.git/collab-policy.toml"),
        "read = []\nwrite = []\n",
    );
    open(&h, "shared", "Zeppelin crash", "x");
    open(&h, "secret", "Zeppelin secret", "x");
    let mut s = McpSession::open(&h, &reader);
    let listed = s.request("tools/list", json!({}));
    let tool = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "search")
        .cloned()
        .expect("a search tool");
    assert_eq!(tool["inputSchema"]["required"], json!(["query"]), "{tool}");
    let found = s.call("search", json!({"query": "zeppelin"})).unwrap();
    assert_eq!(found["isError"], false, "{found}");
    assert_eq!(titles(&found["structuredContent"]), ["Zeppelin crash"]);
    let hidden = s
        .call("search", json!({"query": "zeppelin", "repo": ["secret"]}))
        .unwrap();
    let missing = s
        .call("search", json!({"query": "zeppelin", "repo": ["nothing"]}))
        .unwrap();
    assert_eq!(hidden, missing);
    assert_eq!(hidden["isError"], true, "{hidden}");
}

#[test]
fn the_web_search_box_shows_public_repositories_only() {
    let h = ServerHarness::start();
    h.create_repo("open");
    common::web::make_public(&h, "open");
    h.create_repo("closed");
    open(&h, "open", "Zeppelin in the open", "x");
    open(&h, "closed", "Zeppelin behind doors", "x");
    let index = common::web::get(&h, "/").text();
    assert!(index.contains("action=\"/-/search\""), "{index}");
    let page = common::web::get(&h, "/-/search?q=zeppelin");
    assert_eq!(page.status, 200);
    let text = page.text();
    assert!(text.contains("Zeppelin in the open"), "{text}");
    assert!(text.contains("href=\"/open/-/issues/"), "{text}");
    assert!(!text.contains("behind doors"), "{text}");
    let bad = common::web::get(&h, "/-/search?q=%2A");
    assert_eq!(bad.status, 400);
    assert!(!bad.text().to_lowercase().contains("fts5"));
    let cursor = common::web::get(&h, "/-/search?q=zeppelin&after=junk");
    assert_eq!(cursor.status, 400);
    assert_eq!(common::web::get(&h, "/-/search").status, 200);
}
