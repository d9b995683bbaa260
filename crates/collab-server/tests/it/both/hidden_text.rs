//! Trojan Source in titles (issue 25): bidirectional controls and
//! zero-width characters are refused in titles and labels of issues and
//! patches, over SSH and over a push, with one clear line; bodies refuse
//! the bidi embeddings, overrides and isolates but keep the marks and
//! joiners prose needs. Nothing is written by a refused call.

use collab_testkit as common;
use collab_testkit::review as review_support;

use common::ServerHarness;
use review_support::{commit, git, setup};

fn issue_count(h: &ServerHarness) -> usize {
    let out = h.ssh_exec("collab-issue list 'r' --state all");
    assert_eq!(out.code, 0, "{out:?}");
    out.json()["issues"].as_array().unwrap().len()
}

#[test]
fn hidden_characters_are_refused_in_titles_and_reordering_ones_in_bodies() {
    let h = ServerHarness::start();
    h.create_repo("r");

    for (title, code) in [
        (
            "Fix \u{202E}nimda\u{2066} check",
            "U+202E RIGHT-TO-LEFT OVERRIDE",
        ),
        ("Fix\u{200B}parser", "U+200B ZERO WIDTH SPACE"),
        ("\u{FEFF}Fix", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
    ] {
        let out = h.ssh_exec(&format!("collab-issue open 'r' --title '{title}'"));
        assert_eq!(out.code, 1, "{out:?}");
        assert_eq!(
            out.stderr.trim_end(),
            format!(
                "error: title contains {code}: invisible and text-direction characters could \
                 make it show something other than what it says; remove it"
            ),
            "{out:?}"
        );
    }
    let out = h.ssh_exec("collab-issue open 'r' --title 'Fine' --label 'b\u{200D}ug'");
    assert!(
        out.code == 1
            && out
                .stderr
                .contains("label contains U+200D ZERO WIDTH JOINER"),
        "{out:?}"
    );
    let out = h.ssh_exec_with_stdin(
        "collab-issue open 'r' --title 'Fine' --body-stdin",
        "if (is_admin) {\u{2067} /* end */ \u{2069}\n".as_bytes(),
    );
    assert!(
        out.code == 1
            && out
                .stderr
                .contains("body contains U+2067 RIGHT-TO-LEFT ISOLATE"),
        "{out:?}"
    );
    assert_eq!(issue_count(&h), 0, "a refused write wrote nothing");

    // Right-to-left prose and emoji pass: marks and joiners in a body, any
    // script in a title.
    let out = h.ssh_exec_with_stdin(
        "collab-issue open 'r' --title 'תיקון: שלום' --body-stdin",
        "שלום\u{200F} 👩\u{200D}💻\n".as_bytes(),
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(issue_count(&h), 1);
}

#[test]
fn a_push_for_review_with_a_hidden_title_is_refused() {
    let (h, a, _b) = setup();
    commit(&h, &a, "a.txt", "x\n", "Innocent subject");
    let out = git(
        &h,
        &a,
        &[
            "push",
            "-o",
            "title=Approve \u{202D}me",
            "origin",
            "HEAD:refs/for/main",
        ],
    );
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.lines().any(|l| l.contains("[remote rejected]")
            && l.contains("title contains U+202D LEFT-TO-RIGHT OVERRIDE")),
        "{out:?}"
    );
    let listed = h.ssh_exec("collab-patch list 'r' --state all");
    assert_eq!(
        listed.json()["patches"].as_array().unwrap().len(),
        0,
        "{listed:?}"
    );
}
