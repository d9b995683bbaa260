//! Reading code on the web, against the real server over HTTP: syntax
//! highlighting (blobs, diffs, fenced code in markdown) that stays escaped,
//! line numbers in diffs, the per-file view of a truncated diff, a file's
//! history (paged) and blame, and their bounds.

use collab_testkit as common;
use collab_testkit::web as web_support;

use common::ServerHarness;
use web_support::{get, strip_tags as plain};

/// The `<tr>` rows of a page's tables.
fn rows(page: &str) -> Vec<&str> {
    page.split("<tr")
        .skip(1)
        .map(|r| r.split("</tr>").next().unwrap_or(""))
        .collect()
}

#[test]
fn blobs_and_markdown_code_are_highlighted_and_stay_escaped() {
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "hl");
    h.commit_file(
        &clone,
        "docs/README.md",
        b"# Guide\n\n```rust\nfn main() { let s = \"</pre><script>alert(1)</script>\"; }\n```\n\n```\nplain <i>fence</i>\n```\n",
        "Add a guide",
    );
    h.commit_file(
        &clone,
        "run",
        b"#!/bin/sh\necho \"<b>hi</b>\" # comment\n",
        "Add a script",
    );
    h.ssh_push(&clone, &["main"]);

    // A Rust file: coloured spans, the HTML in it shown as text.
    let page = get(&h, "/hl/-/blob/main/src/main.rs");
    assert_eq!(page.status, 200);
    let text = page.text();
    assert!(text.contains("<span class=\"hl-"), "{text}");
    assert!(text.contains("hl-string"), "{text}");
    assert!(!text.contains("<b>not bold</b>"), "{text}");
    assert!(
        plain(&text).contains("println!(\"<b>not bold</b>\");"),
        "{text}"
    );
    let lines: Vec<&str> = rows(&text)
        .into_iter()
        .filter(|r| r.contains("id=\"L"))
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    for row in &lines {
        assert_eq!(
            row.matches("<span").count(),
            row.matches("</span>").count(),
            "{row}"
        );
    }
    assert!(
        text.contains("href=\"/hl/-/history/main/src/main.rs\""),
        "{text}"
    );
    assert!(
        text.contains("href=\"/hl/-/blame/main/src/main.rs\""),
        "{text}"
    );

    // No extension: the shebang picks the grammar.
    let text = get(&h, "/hl/-/blob/main/run").text();
    assert!(text.contains("hl-comment"), "{text}");
    assert!(
        plain(&text).contains("echo \"<b>hi</b>\" # comment"),
        "{text}"
    );

    // The rendered markdown: the rust fence highlighted, escaped; the
    // plain fence as it was.
    let text = get(&h, "/hl/-/tree/main/docs").text();
    assert!(text.contains("<code class=\"language-rust\">"), "{text}");
    assert!(!text.contains("<script>alert(1)"), "{text}");
    assert!(text.contains("&lt;/pre&gt;&lt;script&gt;"), "{text}");
    assert!(text.contains("plain &lt;i&gt;fence&lt;/i&gt;"), "{text}");

    // The one stylesheet carries the colours.
    let css = get(&h, "/-/static/style.css").text();
    assert!(css.contains(".hl-comment"), "{css}");
    assert!(css.contains("table.diff td.ln"), "{css}");
}

#[test]
fn diffs_have_line_numbers_and_a_cut_file_can_be_seen_alone() {
    let h = ServerHarness::start();
    let (clone, _, second) = web_support::public_repo_with_content(&h, "dl");

    // Line numbers on both sides: main.rs gained line 3.
    let text = get(&h, &format!("/dl/-/commit/{second}")).text();
    let added: Vec<&str> = rows(&text)
        .into_iter()
        .filter(|r| r.starts_with(" class=\"add\""))
        .collect();
    assert_eq!(added.len(), 1, "{text}");
    assert!(
        added[0].contains("<td class=\"ln\"></td><td class=\"ln\">3</td><td class=\"sign\">+</td>"),
        "{}",
        added[0]
    );
    assert!(
        plain(added[0]).contains("let added_line = 42;"),
        "{}",
        added[0]
    );
    assert!(added[0].contains("hl-"), "highlighted: {}", added[0]);
    let context: Vec<&str> = rows(&text)
        .into_iter()
        .filter(|r| r.starts_with(" class=\"ctx\""))
        .collect();
    assert!(
        context[0].contains("<td class=\"ln\">1</td><td class=\"ln\">1</td>"),
        "{}",
        context[0]
    );

    // One commit of 10,050 added lines then a small file: the page stops at
    // 10,000 lines and links to the small file's own diff.
    let big: String = (1..=10_050).map(|i| format!("line {i}\n")).collect();
    std::fs::write(clone.join("a-big.txt"), big).unwrap();
    std::fs::write(clone.join("z-small.rs"), "fn small() {}\n").unwrap();
    h.git(&clone, &["add", "a-big.txt", "z-small.rs"]);
    h.git(&clone, &["commit", "-q", "-m", "Two files"]);
    h.ssh_push(&clone, &["main"]);
    let id = h.rev_parse(&clone, "HEAD");
    let text = get(&h, &format!("/dl/-/commit/{id}")).text();
    assert!(text.contains("This diff is large"), "{}", &text[..2000]);
    assert!(text.contains("<td class=\"ln\">10000</td>"));
    assert!(!text.contains("<td class=\"ln\">10001</td>"));
    for path in ["a-big.txt", "z-small.rs"] {
        assert!(
            text.contains(&format!("href=\"/dl/-/commit/{id}?path={path}\"")),
            "link for {path}"
        );
    }
    let alone = get(&h, &format!("/dl/-/commit/{id}?path=z-small.rs"));
    assert_eq!(alone.status, 200);
    let text = alone.text();
    assert!(text.contains("Only z-small.rs is shown"), "{text}");
    assert!(plain(&text).contains("fn small() {}"), "{text}");
    assert!(!text.contains("a-big.txt</h4>"), "{text}");
    let big_alone = get(&h, &format!("/dl/-/commit/{id}?path=a-big.txt")).text();
    assert!(big_alone.contains("<td class=\"ln\">10000</td>"));
    assert_eq!(get(&h, &format!("/dl/-/commit/{id}?path=nope")).status, 404);
}

#[test]
fn file_history_pages_and_blame() {
    let h = ServerHarness::start();
    let (clone, first, second) = web_support::public_repo_with_content(&h, "fh");
    // 60 commits to notes.txt, with unrelated commits between them.
    let mut notes = String::new();
    for i in 0..60 {
        notes.push_str(&format!("note {i}\n"));
        h.commit_file(&clone, "notes.txt", notes.as_bytes(), &format!("Note {i}"));
        if i % 10 == 0 {
            h.commit_file(
                &clone,
                "other.txt",
                format!("{i}\n").as_bytes(),
                &format!("Other {i}"),
            );
        }
    }
    h.ssh_push(&clone, &["main"]);

    let page1 = get(&h, "/fh/-/history/main/notes.txt");
    assert_eq!(page1.status, 200);
    let text = page1.text();
    assert_eq!(text.matches("<a class=\"id\"").count(), 50, "{text}");
    assert!(
        text.contains("Note 59") && text.contains("Note 10"),
        "{text}"
    );
    assert!(!text.contains("Other "), "{text}");
    assert!(
        text.contains("href=\"/fh/-/history/main/notes.txt?page=2\""),
        "{text}"
    );
    let page2 = get(&h, "/fh/-/history/main/notes.txt?page=2").text();
    assert_eq!(page2.matches("<a class=\"id\"").count(), 10, "{page2}");
    assert!(
        page2.contains("Note 0<") || page2.contains("Note 0 "),
        "{page2}"
    );
    assert!(!page2.contains("?page=3"), "{page2}");
    // Commit links open that commit's diff of this path alone.
    assert!(page2.contains("?path=notes.txt\""), "{page2}");

    // A file changed twice; a directory's history holds its files'.
    let text = get(&h, "/fh/-/history/main/src/main.rs").text();
    assert_eq!(text.matches("<a class=\"id\"").count(), 2, "{text}");
    assert!(text.contains(&first) && text.contains(&second), "{text}");
    let text = get(&h, "/fh/-/history/main/src").text();
    assert_eq!(text.matches("<a class=\"id\"").count(), 2, "{text}");
    assert_eq!(get(&h, "/fh/-/history/main/nope.txt").status, 404);
    assert_eq!(get(&h, "/fh/-/history/main/../x").status, 404);

    // Blame: line 3 of main.rs came with the second commit, lines 1-2 and
    // 4 with the first.
    let page = get(&h, "/fh/-/blame/main/src/main.rs");
    assert_eq!(page.status, 200);
    let text = page.text();
    let lines: Vec<&str> = rows(&text)
        .into_iter()
        .filter(|r| r.contains("id=\"L"))
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].contains(&format!("/fh/-/commit/{first}")),
        "{}",
        lines[0]
    );
    assert!(!lines[1].contains("class=\"id\""), "{}", lines[1]);
    assert!(
        lines[2].contains(&format!("/fh/-/commit/{second}")),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].contains(&format!("/fh/-/commit/{first}")),
        "{}",
        lines[3]
    );
    assert!(
        plain(lines[1]).contains("println!(\"<b>not bold</b>\");"),
        "{}",
        lines[1]
    );
    assert!(text.contains("hl-"), "highlighted: {text}");
    let text = get(&h, "/fh/-/blame/main/logo.bin").text();
    assert!(text.contains("Binary file"), "{text}");
    assert_eq!(get(&h, "/fh/-/blame/main/src").status, 404);

    // A file over the blame limit (256 KiB) gets a note, not a blame.
    let big: String = (0..30_000).map(|i| format!("line {i}\n")).collect();
    h.commit_file(&clone, "big.txt", big.as_bytes(), "Big file");
    h.ssh_push(&clone, &["main"]);
    let text = get(&h, "/fh/-/blame/main/big.txt").text();
    assert!(text.contains("too large to blame"), "{text}");
}
