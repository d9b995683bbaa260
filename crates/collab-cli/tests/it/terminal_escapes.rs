//! Other people's text never reaches the reader's terminal raw. Mallory
//! signs valid events (her own key, no allowlist) whose titles, bodies,
//! comments, labels, close reason, review and author name carry terminal
//! control sequences: `ESC[2J` (clear the screen), OSC 52 (write the
//! clipboard), BEL, CR, backspace, DEL and C1 controls. `git-collab issue
//! list|show` and `patch list|show|diff` show them as visible escapes; the
//! `--json` output stays valid JSON that parses back to exactly what was
//! signed, with no raw control character either. Regression for issue 12.

use collab_testkit::cli as cli_support;

use cli_support::{Clone, World};
use collab_record::event::{
    Action, Author, Event, IssueClose, IssueComment, IssueLabel, IssueOpen, PatchComment,
    PatchOpen, PatchReview, Verdict,
};
use collab_record::refs;
use collab_record::sign::SigningKey;
use collab_record::store;

/// Clear screen, OSC 52 clipboard write, BEL, CR, backspace, DEL, CSI as a
/// C1 control, NEL.
const ATTACK: &str = "\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\rok\x08\x7f\u{9b}31m\u{85}";

fn hostile(what: &str) -> String {
    format!("{what} {ATTACK} end")
}

/// Every control character a terminal would act on (newline and tab are
/// layout and allowed).
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| c.is_control() && !matches!(c, '\n' | '\t'))
        .collect()
}

fn assert_neutral(what: &str, out: &str) {
    let raw = raw_controls(out);
    assert!(raw.is_empty(), "{what}: raw {raw:?} in {out:?}");
    // Shown, not dropped: the reader can see something odd is there.
    assert!(out.contains("\\x1b[2J"), "{what}: {out:?}");
}

fn stdout(c: &Clone, args: &[&str]) -> String {
    let out = c.collab(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        raw_controls(&stderr).is_empty(),
        "{args:?} stderr: {stderr:?}"
    );
    text
}

struct Mallory {
    key: SigningKey,
    at: i64,
}

impl Mallory {
    fn event(&mut self, action: Action) -> Event {
        self.at += 1;
        Event::new(
            Author {
                name: hostile("Mallory"),
                key: self.key.public_key_line(),
            },
            chrono::DateTime::from_timestamp(1_700_000_000 + self.at, 0).unwrap(),
            action,
        )
    }
}

#[test]
fn issue_and_patch_output_holds_no_raw_control_characters() {
    let w = World::new();
    let a = w.clone("a");
    std::fs::write(a.dir.join("app.txt"), "app\n").unwrap();
    a.git(&["add", "app.txt"]);
    a.git(&["commit", "-q", "-m", "Initial"]);
    a.git(&["push", "-q", "origin", "main"]);
    let base = a.git(&["rev-parse", "main"]).trim().to_string();
    a.git(&["checkout", "-q", "-b", "feature"]);
    // The diff itself carries the attack too.
    std::fs::write(a.dir.join("app.txt"), format!("app\n{ATTACK}\n")).unwrap();
    a.git(&["commit", "-q", "-am", "Change"]);
    let head = a.git(&["rev-parse", "HEAD"]).trim().to_string();

    let repo = git2::Repository::open(&a.dir).unwrap();
    let mut mallory = Mallory {
        key: SigningKey::generate(&w.tmp.path().join("mallory"), "mallory", false).unwrap(),
        at: 0,
    };
    let open = mallory.event(Action::IssueOpen(IssueOpen {
        title: hostile("title"),
        body: hostile("body\nsecond line"),
        labels: vec![hostile("label")],
        nonce: "1".into(),
    }));
    let issue = store::create_dag(&repo, &open, &mallory.key, refs::issue_ref).unwrap();
    let issue_ref = refs::issue_ref(&issue.to_string());
    for action in [
        Action::IssueComment(IssueComment {
            body: hostile("comment"),
        }),
        Action::IssueLabel(IssueLabel {
            add: vec![hostile("more")],
            remove: vec![],
        }),
        Action::IssueClose(IssueClose {
            reason: Some(hostile("reason")),
        }),
    ] {
        let ev = mallory.event(action);
        store::append_event(&repo, &issue_ref, &ev, &mallory.key).unwrap();
    }

    let open = mallory.event(Action::PatchOpen(PatchOpen {
        title: hostile("patch title"),
        body: hostile("patch body"),
        base: "main".into(),
        head: head.clone(),
        base_commit: Some(base),
        nonce: "2".into(),
    }));
    let patch = store::create_dag(&repo, &open, &mallory.key, refs::patch_ref).unwrap();
    let patch_id = patch.to_string();
    let patch_ref = refs::patch_ref(&patch_id);
    repo.reference(
        &refs::revision_ref(&patch_id, 1),
        repo.revparse_single(&head).unwrap().id(),
        true,
        "pin",
    )
    .unwrap();
    for action in [
        Action::PatchComment(PatchComment {
            body: hostile("patch comment"),
            revision: Some(patch_id.clone()),
            path: Some("app.txt".into()),
            line: Some(2),
        }),
        Action::PatchReview(PatchReview {
            revision: patch_id.clone(),
            verdict: Verdict::RequestChanges,
            body: hostile("review"),
            voter: None,
        }),
    ] {
        let ev = mallory.event(action);
        store::append_event(&repo, &patch_ref, &ev, &mallory.key).unwrap();
    }

    let issue_id = issue.to_string();
    for args in [
        vec!["issue", "list", "--all"],
        vec!["issue", "show", &issue_id],
        vec!["patch", "list", "--all"],
        vec!["patch", "show", &patch_id],
        vec!["patch", "diff", &patch_id],
    ] {
        let out = stdout(&a, &args);
        assert_neutral(&format!("{args:?}"), &out);
    }
    // Each field is there, escaped, and cannot forge a line of output.
    let shown = stdout(&a, &["issue", "show", &issue_id]);
    for field in [
        "title",
        "second line",
        "label",
        "more",
        "comment",
        "reason",
        "Mallory",
    ] {
        assert!(
            shown.contains(&format!("{field} \\x1b[2J")),
            "{field}: {shown}"
        );
    }
    assert!(shown.contains("\\u{9b}31m\\u{85} end"), "{shown}");
    assert!(
        shown.contains("body\nsecond line"),
        "bodies keep newlines: {shown}"
    );
    let listed = stdout(&a, &["issue", "list", "--all"]);
    assert_eq!(listed.lines().count(), 1, "{listed}");

    // JSON: valid, the exact signed values, no raw control character.
    for args in [
        vec!["issue", "list", "--all", "--json"],
        vec!["issue", "show", &issue_id, "--json"],
        vec!["patch", "list", "--all", "--json"],
        vec!["patch", "show", &patch_id, "--json"],
    ] {
        let out = stdout(&a, &args);
        let raw = raw_controls(&out);
        assert!(raw.is_empty(), "{args:?}: raw {raw:?}");
        let value: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
        let title = if args[1] == "list" {
            value[0]["title"].clone()
        } else {
            value["title"].clone()
        };
        let want = if args[0] == "issue" {
            hostile("title")
        } else {
            hostile("patch title")
        };
        assert_eq!(title, serde_json::Value::from(want), "{args:?}");
    }
}
