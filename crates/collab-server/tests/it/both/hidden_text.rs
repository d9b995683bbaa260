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

/// Branch and tag names (issue 44): a push creating one that holds a
/// text-direction, invisible or C1 control character is refused whole;
/// one that exists already (a mirror's upstream, an older push) can be
/// deleted, and the web's branch pages and `collab-events watch` show it
/// escaped, never as the character itself.
#[test]
fn hidden_characters_in_ref_names_are_refused_at_push_and_shown_escaped() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "c");
    h.commit_file(&clone, "a.txt", b"a\n", "first");
    h.ssh_push(&clone, &["HEAD:main"]);

    for (name, code) in [
        ("fix\u{202E}txt.exe", "U+202E"),
        ("a\u{200B}b", "U+200B"),
        ("v1\u{9b}", "U+009B"),
    ] {
        let refspec = format!("HEAD:refs/heads/{name}");
        let out = h.git_as(
            &h.ssh_client_key(),
            &clone,
            &["push", "origin", refspec.as_str()],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name:?} was accepted: {stderr}");
        assert!(
            stderr.contains(&format!("a ref name may not hold {code}")),
            "{name:?}: {stderr}"
        );
    }
    let refs = h.git(&clone, &["ls-remote", "origin"]);
    let refs = String::from_utf8_lossy(&refs.stdout).to_string();
    assert!(!refs.contains("fix") && !refs.contains("v1"), "{refs}");

    // One that exists already: made in the repository itself, as a
    // mirror's fetch would.
    let bare = h.repos_dir().join("r.git");
    let head = h.rev_parse(&clone, "HEAD");
    let made = std::process::Command::new("git")
        .arg("-C")
        .arg(&bare)
        .args([
            "update-ref",
            "refs/heads/evil\u{202E}gnp.exe",
            head.as_str(),
        ])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    common::web::make_public(&h, "r");
    let page = common::web::get(&h, "/r/-/branches");
    let body = String::from_utf8_lossy(&page.body).to_string();
    assert_eq!(page.status, 200, "{body}");
    assert!(body.contains("evil\\u{202e}gnp.exe"), "{body}");
    assert!(
        !body.contains('\u{202E}'),
        "the raw character reached the page"
    );
    let log = common::web::get(&h, "/r/-/log/evil%E2%80%AEgnp.exe");
    let body = String::from_utf8_lossy(&log.body).to_string();
    assert_eq!(log.status, 200, "{body}");
    assert!(
        !body.contains('\u{202E}'),
        "the raw character reached the log page"
    );

    // Deleting it is allowed, and its event is sent escaped.
    let since = h.ssh_exec("collab-events watch --no-follow --since 1");
    let last = since.stdout.lines().count();
    let out = h.git_as(
        &h.ssh_client_key(),
        &clone,
        &["push", "origin", ":refs/heads/evil\u{202E}gnp.exe"],
    );
    assert!(out.status.success(), "{out:?}");
    let events = h.ssh_exec("collab-events watch --no-follow --since 1");
    assert_eq!(events.code, 0, "{events:?}");
    assert!(events.stdout.lines().count() > last, "{events:?}");
    assert!(!events.stdout.contains('\u{202E}'), "{events:?}");
    assert!(events.stdout.contains("evil\\u202egnp.exe"), "{events:?}");
    let parsed: Vec<serde_json::Value> = events
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The escapes are JSON's own: parsed, the name is the name.
    assert!(
        parsed
            .iter()
            .any(|e| e.to_string().contains("refs/heads/evil\u{202E}gnp.exe")),
        "{events:?}"
    );
}
