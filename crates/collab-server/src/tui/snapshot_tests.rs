//! The screens' layout at 80x24, drawn with ratatui's `TestBackend` from
//! replies shaped like the verbs' and compared with the files under
//! `tui/snapshots/` (`UPDATE_TUI_SNAPSHOTS=1` rewrites them; review the
//! diff). The session test (tests/it/both/tui.rs) drives the real thing.

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::json;

use super::data::colour_diff;
use super::keys::Key;
use super::view::{Cmd, EventRow, Ui, View, ViewKind};

const NOW: i64 = 1_796_284_558; // 2026-12-02T...

fn screen(ui: &Ui, cols: u16, rows: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(cols, rows)).unwrap();
    terminal.draw(|f| ui.draw(f)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..rows {
        let mut line = String::new();
        for x in 0..cols {
            line.push_str(buffer[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn check(name: &str, actual: &str) {
    let path = collab_testkit::workspace_root()
        .join("crates/collab-server/src/tui/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_TUI_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{} missing: run with UPDATE_TUI_SNAPSHOTS=1",
            path.display()
        )
    });
    assert_eq!(
        actual, expected,
        "screen {name} changed (UPDATE_TUI_SNAPSHOTS=1 rewrites it):\n{actual}"
    );
}

const HOSTILE: &str = "Crash \x1b[2J\x1b]2;pwned\x07 on start";

fn ui() -> Ui {
    let mut ui = Ui::new("SHA256:me".into(), true);
    ui.now = NOW;
    for (seq, kind, object) in [
        (41, "issue.opened", "8bab8db77d3d"),
        (42, "issue.commented", "8bab8db77d3d"),
        (43, "lease.acquired", "8bab8db77d3d"),
    ] {
        ui.events.push_back(EventRow {
            seq,
            at: NOW - 60 + seq,
            kind: kind.into(),
            repo: "team/app.git".into(),
            object: object.into(),
            actor: "alice".into(),
        });
    }
    ui.stack[0].loading = false;
    ui.stack[0].data = json!({"repos": [
        {"name": "team/app.git", "description": "The app \x1b[31mred", "open_issues": 3, "open_patches": 1, "last_push": NOW - 3600},
        {"name": "team/lib.git", "description": "", "open_issues": 0, "open_patches": 0, "last_push": null},
    ]});
    ui
}

fn push(ui: &mut Ui, kind: ViewKind, data: serde_json::Value) {
    let mut view = View::new(kind);
    view.loading = false;
    view.data = data;
    ui.stack.push(view);
}

fn issue() -> serde_json::Value {
    json!({
        "id": "8bab8db77d3d7f5dfaffa06e4f0fe88ae2dce610",
        "repo": "team/app.git",
        "title": HOSTILE,
        "body": "It crashes.\r\nOverprinted?\n\tindented",
        "author": {"name": "ada", "principal": "ada", "display_name": "Ada"},
        "created_at": "2026-12-03T07:55:58.114Z",
        "status": "open",
        "labels": ["bug", "p1"],
        "comments": [{"author": {"display_name": "Bob"}, "at": "2026-12-03T08:00:00Z", "body": "On it."}],
        "links": {"blocks": [], "blocked_by": [{"text": "team/lib#1a2b3c4d"}], "relates": []},
        "lease": {"holder": "bob", "holder_name": "Bob", "token": 3, "expires_at": "2026-12-03T09:00:00Z"},
        "not_ready": ["held by bob until 2026-12-03T09:00:00Z", "blocked by team/lib#1a2b3c4d"],
    })
}

#[test]
fn repositories() {
    check("repos", &screen(&ui(), 80, 24));
}

#[test]
fn issues_and_the_work_queue() {
    let mut ui = ui();
    let kind = ViewKind::Issues {
        repo: "team/app.git".into(),
        state: "open".into(),
        label: None,
        queue: false,
    };
    push(
        &mut ui,
        kind,
        json!({"issues": [
            {"id": "8bab8db77d3d7f5dfaffa06e4f0fe88ae2dce610", "title": HOSTILE, "status": "open", "labels": ["bug"], "comments": 1},
            {"id": "1a2b3c4d00000000000000000000000000000000", "title": "Docs: ünïcode 🙂 title", "status": "open", "labels": [], "comments": 0},
        ], "next": "1796284558114-1a2b3c4d00000000000000000000000000000000"}),
    );
    check("issues", &screen(&ui, 80, 24));
    let queue = ViewKind::Issues {
        repo: "team/app.git".into(),
        state: "open".into(),
        label: Some("bug".into()),
        queue: true,
    };
    push(
        &mut ui,
        queue,
        json!({"ready": [{"id": "1a2b3c4d00000000000000000000000000000000", "title": "Docs", "labels": ["bug"]}],
               "not_ready": [{"id": "8bab8db77d3d7f5dfaffa06e4f0fe88ae2dce610", "title": "Crash", "why": ["held by Bob until 2026-12-03T09:00:00Z"]}]}),
    );
    check("queue", &screen(&ui, 80, 24));
}

#[test]
fn an_issue_with_hostile_text_and_a_lease() {
    let mut ui = ui();
    push(
        &mut ui,
        ViewKind::Issue {
            repo: "team/app.git".into(),
            id: "8bab8db77d3d7f5dfaffa06e4f0fe88ae2dce610".into(),
        },
        issue(),
    );
    let shown = screen(&ui, 80, 24);
    assert!(!shown.contains('\x1b') && !shown.contains('\r'), "{shown}");
    check("issue", &shown);
    // `/` in an issue finds the next line with the text.
    ui.key(Key::Char('/'));
    for c in "on it".chars() {
        ui.key(Key::Char(c));
    }
    ui.key(Key::Enter);
    assert!(ui.top().sel > 5, "scrolled to the comment");
    assert!(screen(&ui, 80, 24)
        .lines()
        .nth(1)
        .unwrap()
        .contains("On it."));
    ui.key(Key::Home);
    // The comment prompt.
    assert_eq!(ui.key(Key::Char('c')), super::view::Cmd::None);
    for c in "Looks fine".chars() {
        ui.key(Key::Char(c));
    }
    check("issue-comment-prompt", &screen(&ui, 80, 24));
    assert_eq!(
        ui.key(Key::Enter),
        super::view::Cmd::Act {
            argv: [
                "collab-issue",
                "comment",
                "team/app.git",
                "8bab8db77d3d7f5dfaffa06e4f0fe88ae2dce610",
                "--body",
                "Looks fine"
            ]
            .map(String::from)
            .to_vec(),
            done: "commented".into()
        }
    );
}

#[test]
fn a_patch_with_its_coloured_diff() {
    let mut ui = ui();
    push(
        &mut ui,
        ViewKind::Patch {
            repo: "team/app.git".into(),
            id: "feedface00000000000000000000000000000000".into(),
            interdiff: false,
        },
        json!({
            "id": "feedface00000000000000000000000000000000",
            "title": "Fix the crash",
            "status": "open",
            "author": {"display_name": "Ada"},
            "created_at": "2026-12-03T07:55:58Z",
            "base": "main",
            "revisions": [{"n": 1, "head": "abcdef0123", "at": "2026-12-03T08:00:00Z"}],
            "reviews": [{"verdict": "approve", "author": {"display_name": "Bob"}, "revision": 1, "body": "LGTM"}],
            "comments": [],
            "diff_title": "diff r1",
        }),
    );
    ui.top_mut().diff = colour_diff(
        "diff --git a/src/main.rs b/src/main.rs\n--- a/src/main.rs\n+++ b/src/main.rs\n@@ -1,2 +1,2 @@\n fn main() {\n-    panic!(\"boom\");\n+    println!(\"ok\");\n }\n",
    );
    check("patch", &screen(&ui, 80, 24));
}

#[test]
fn leases_help_and_a_small_window() {
    let mut ui = ui();
    push(
        &mut ui,
        ViewKind::Leases { mine: false },
        json!({"leases": [
            {"repo": "team/app.git", "issue": "8bab8db77d3d7f5dfaffa06e4f0fe88ae2dce610", "holder": "SHA256:me", "holder_name": "me", "token": 3, "expires_at": "2026-12-03T09:00:00Z"},
            {"repo": "team/lib.git", "issue": "1a2b3c4d00000000000000000000000000000000", "holder": "bob", "holder_name": "Bob", "token": 1, "expires_at": null},
        ]}),
    );
    check("leases", &screen(&ui, 80, 24));
    ui.key(Key::Char('m'));
    let mine = screen(&ui, 80, 24);
    assert!(
        mine.contains("team/app.git") && !mine.contains("team/lib.git"),
        "{mine}"
    );
    ui.key(Key::Char('?'));
    check("help", &screen(&ui, 80, 24));
    // Any key closes the overlay; a 40x10 window still draws (no events pane).
    ui.key(Key::Char('x'));
    check("small", &screen(&ui, 40, 10));
}

/// What goes down the channel: the first frame draws every cell that is
/// not blank (the screen was cleared before it), a new
/// event redraws only the cells that changed (ratatui's diff), so a live
/// pane costs a few hundred bytes a line, not a screen.
#[test]
fn a_new_event_sends_only_what_changed() {
    use super::backend::AnsiBackend;
    use ratatui::layout::{Rect, Size};
    use ratatui::{TerminalOptions, Viewport};
    let mut ui = ui();
    push(
        &mut ui,
        ViewKind::Issue {
            repo: "team/app.git".into(),
            id: "8bab8db77d3d7f5dfaffa06e4f0fe88ae2dce610".into(),
        },
        issue(),
    );
    let options = TerminalOptions {
        viewport: Viewport::Fixed(Rect::new(0, 0, 80, 24)),
    };
    let mut terminal =
        Terminal::with_options(AnsiBackend::new(Size::new(80, 24), true), options).unwrap();
    terminal.draw(|f| ui.draw(f)).unwrap();
    let full = terminal.backend_mut().take().len();
    ui.events.push_back(EventRow {
        seq: 44,
        at: NOW,
        kind: "issue.labeled".into(),
        repo: "team/app.git".into(),
        object: "8bab8db77d3d".into(),
        actor: "bob".into(),
    });
    terminal.draw(|f| ui.draw(f)).unwrap();
    let update = terminal.backend_mut().take().len();
    eprintln!("80x24 issue screen: first frame {full} bytes, one new event {update} bytes");
    assert!(full > 800, "the text drawn once: {full}");
    assert!(
        update * 4 < full,
        "an event redraws the pane only: {update} of {full}"
    );
}

/// Issue 50 item 9: a merged patch offers no review, an inline comment says
/// where it points, the patch list says approvals in words, the repository
/// list counts one patch as `1 patch`, the events pane gives a wide window
/// the object's whole name, and `q` from the work queue comes back to the
/// issue list it was opened from.
#[test]
fn the_screens_say_what_they_mean() {
    let mut ui = ui();
    push(
        &mut ui,
        ViewKind::Patch {
            repo: "team/app.git".into(),
            id: "feedface00000000000000000000000000000000".into(),
            interdiff: false,
        },
        json!({
            "id": "feedface00000000000000000000000000000000",
            "title": "Fix the crash",
            "status": "merged",
            "author": {"display_name": "Ada"},
            "base": "main",
            "revisions": [{"n": 1, "head": "abcdef0123", "at": "2026-12-03T08:00:00Z"}],
            "reviews": [],
            "comments": [{"author": {"display_name": "Bob"}, "at": "2026-12-03T08:01:00Z", "body": "why?", "revision": 1, "path": "src/main.rs", "line": 7}],
            "diff_title": "diff r1",
        }),
    );
    let merged = screen(&ui, 100, 24);
    assert!(!merged.contains("A approve"), "{merged}");
    assert!(merged.contains("on r1 src/main.rs:7"), "{merged}");
    assert_eq!(ui.key(Key::Char('A')), Cmd::None);
    assert!(ui.input.is_none(), "no review prompt on a merged patch");
    assert!(screen(&ui, 100, 24).contains("only an open patch can be reviewed"));

    let mut ui = self::ui();
    ui.stack[0].data = json!({"repos": [
        {"name": "team/app.git", "description": "", "open_issues": 1, "open_patches": 1, "last_push": null},
    ]});
    ui.stack[0].loading = false;
    ui.events.push_back(EventRow {
        seq: 44,
        at: NOW,
        kind: "push".into(),
        repo: "team/app.git".into(),
        object: "refs/heads/feature/a-long-branch-name".into(),
        actor: "bob".into(),
    });
    let wide = screen(&ui, 160, 30);
    assert!(
        wide.contains("1 issue ") && wide.contains("1 patch "),
        "{wide}"
    );
    assert!(!wide.contains("1 patches"), "{wide}");
    assert!(
        wide.contains("refs/heads/feature/a-long-branch-name"),
        "{wide}"
    );
    assert!(
        screen(&ui, 80, 24).contains("refs/hea"),
        "a narrow pane keeps the short form"
    );

    push(
        &mut ui,
        ViewKind::Patches {
            repo: "team/app.git".into(),
            state: "open".into(),
        },
        json!({"patches": [
            {"id": "feedface00000000000000000000000000000000", "title": "Fix", "status": "open", "revisions": 2, "approvals": 1, "changes_requested": 2},
        ]}),
    );
    let list = screen(&ui, 100, 24);
    assert!(
        list.contains("r2 · 1 approval · 2 change requests"),
        "{list}"
    );
    assert!(!list.contains("+1 -2"), "{list}");

    // The work queue opens above the issue list; `q` comes back to it.
    ui.stack.truncate(1);
    push(
        &mut ui,
        ViewKind::Issues {
            repo: "team/app.git".into(),
            state: "open".into(),
            label: None,
            queue: false,
        },
        json!({"issues": []}),
    );
    assert_eq!(ui.key(Key::Char('w')), Cmd::Load);
    assert_eq!(ui.stack.len(), 3);
    assert!(matches!(
        ui.top().kind,
        ViewKind::Issues { queue: true, .. }
    ));
    ui.key(Key::Char('q'));
    assert!(
        matches!(ui.top().kind, ViewKind::Issues { queue: false, .. }),
        "q from the queue comes back to the issue list"
    );
    // `w` on the queue also comes back, without a second copy of the list.
    ui.key(Key::Char('w'));
    ui.key(Key::Char('w'));
    assert_eq!(ui.stack.len(), 2);
}
