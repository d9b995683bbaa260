//! The terminal UI's state and drawing, without IO: a stack of screens
//! (`q` goes back), the events pane, the help overlay and the prompt line.
//! A key press changes the state and may ask the session for work
//! ([`Cmd`]: load a screen, run a verb); the session does it and hands the
//! result back. Drawing is a pure function of the state, so the layout is
//! tested with ratatui's `TestBackend` (tui/snapshots/).
//!
//! Every string that came from a user (titles, bodies, labels, names,
//! diffs, event fields) is drawn through [`line`] or [`text`], the
//! record's escaping: a control character shows as `\x1b`, never acts.

use std::collections::VecDeque;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, Clear, List, ListItem, ListState, Paragraph, Wrap};
use ratatui::Frame;
use serde_json::Value;

use super::keys::Key;

/// Rows a list screen loads per page.
pub const PAGE: usize = 50;
/// Events the pane keeps (newest).
pub const MAX_EVENTS: usize = 200;
/// Diff lines a patch screen keeps.
pub const MAX_DIFF_LINES: usize = 5000;
/// Bytes the prompt line accepts.
pub const MAX_INPUT: usize = 4096;
/// Screens deep the stack may go (older ones are dropped).
const MAX_DEPTH: usize = 16;

/// What a screen shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewKind {
    Repos,
    Issues {
        repo: String,
        state: String,
        label: Option<String>,
        /// The work queue: ready issues, then why the others are not.
        queue: bool,
    },
    Issue {
        repo: String,
        id: String,
    },
    Patches {
        repo: String,
        state: String,
    },
    Patch {
        repo: String,
        id: String,
        interdiff: bool,
    },
    Leases {
        mine: bool,
    },
}

/// One coloured piece of a diff line: `class` is the highlighter's
/// (`hl-keyword`), or `header` / `hunk`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seg {
    pub class: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffLine {
    pub sign: char,
    pub segs: Vec<Seg>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    pub seq: i64,
    pub at: i64,
    pub kind: String,
    pub repo: String,
    pub object: String,
    pub actor: String,
}

/// One screen on the stack.
pub struct View {
    pub kind: ViewKind,
    pub data: Value,
    pub diff: Vec<DiffLine>,
    /// Selected row (lists) or first line shown (details).
    pub sel: usize,
    /// `/` search: rows containing it (any case).
    pub filter: String,
    /// The cursor of the page shown (`None`: the first) and of the pages
    /// before it.
    pub after: Option<String>,
    pub before: Vec<Option<String>>,
    pub loading: bool,
}

impl View {
    pub fn new(kind: ViewKind) -> View {
        View {
            kind,
            data: Value::Null,
            diff: Vec::new(),
            sel: 0,
            filter: String::new(),
            after: None,
            before: Vec::new(),
            loading: true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    Main,
    Events,
}

/// What the prompt line is asking for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    Search,
    Comment,
    Labels,
    Review(&'static str),
    PatchComment,
}

pub struct Input {
    pub ask: Ask,
    pub text: String,
}

/// Work a key press asks the session for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    None,
    Quit,
    /// Load (again) the top screen's page.
    Load,
    /// Run this verb as the caller, then load the top screen again; say
    /// `done` when it succeeded.
    Act {
        argv: Vec<String>,
        done: String,
    },
}

pub struct Ui {
    /// The caller's principal (whose leases are "mine").
    pub me: String,
    pub color: bool,
    /// Unix seconds, for "3m ago" (set by the session before drawing).
    pub now: i64,
    pub stack: Vec<View>,
    pub events: VecDeque<EventRow>,
    pub events_scroll: usize,
    pub focus: Focus,
    pub help: bool,
    pub input: Option<Input>,
    /// The last outcome shown on the bottom line: text, and whether it is
    /// an error.
    pub status: Option<(String, bool)>,
}

/// A one-line field from a user, made inert.
pub fn line(s: &str) -> String {
    collab_record::text::escape_line(s).into_owned()
}

/// A multi-line text from a user, made inert (newlines and tabs kept).
pub fn text(s: &str) -> String {
    collab_record::text::escape_text(s)
        .replace('\t', "    ")
        .to_string()
}

fn field(v: &Value) -> String {
    match v {
        Value::String(s) => line(s),
        Value::Null => String::new(),
        other => line(&other.to_string()),
    }
}

fn short(id: &str) -> String {
    line(&id.chars().take(8).collect::<String>())
}

/// `1 patch`, `2 patches`: the noun for a count shown beside it.
fn plural(n: &Value, one: &'static str, many: &'static str) -> &'static str {
    if n.as_u64() == Some(1) {
        one
    } else {
        many
    }
}

/// A patch row's revision and reviews in words (`+1 -0` read like a
/// diffstat): ` r2 · 1 approval · 1 change request`.
fn review_counts(p: &Value) -> String {
    let mut out = format!(" r{}", p["revisions"]);
    let approvals = p["approvals"].as_u64().unwrap_or(0);
    let changes = p["changes_requested"].as_u64().unwrap_or(0);
    if approvals > 0 {
        let noun = if approvals == 1 {
            "approval"
        } else {
            "approvals"
        };
        out.push_str(&format!(" · {approvals} {noun}"));
    }
    if changes > 0 {
        let noun = if changes == 1 {
            "change request"
        } else {
            "change requests"
        };
        out.push_str(&format!(" · {changes} {noun}"));
    }
    out
}

/// An RFC 3339 time as `2026-12-03 07:55`.
fn when(v: &Value) -> String {
    let s = v.as_str().unwrap_or("");
    line(&s.chars().take(16).collect::<String>().replace('T', " "))
}

/// A person as shown: the display name when the reply has one.
fn who(v: &Value) -> String {
    for k in ["display_name", "name", "principal"] {
        if let Some(s) = v[k].as_str() {
            return line(s);
        }
    }
    field(v)
}

fn labels(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(line)
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

fn ago(now: i64, then: i64) -> String {
    let d = (now - then).max(0);
    match d {
        0..=59 => format!("{d}s ago"),
        60..=3599 => format!("{}m ago", d / 60),
        3600..=86_399 => format!("{}h ago", d / 3600),
        _ => format!("{}d ago", d / 86_400),
    }
}

/// `s` cut or padded to `width` columns.
fn fit(s: &str, width: usize) -> String {
    use unicode_width::UnicodeWidthChar;
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.extend(std::iter::repeat_n(' ', width - used));
    out
}

impl Ui {
    pub fn new(me: String, color: bool) -> Ui {
        Ui {
            me,
            color,
            now: 0,
            stack: vec![View::new(ViewKind::Repos)],
            events: VecDeque::new(),
            events_scroll: 0,
            focus: Focus::Main,
            help: false,
            input: None,
            status: None,
        }
    }

    pub fn top(&self) -> &View {
        self.stack.last().expect("the stack is never empty")
    }

    pub fn top_mut(&mut self) -> &mut View {
        self.stack.last_mut().expect("the stack is never empty")
    }

    fn style(&self, color: Color) -> Style {
        if self.color {
            Style::default().fg(color)
        } else {
            Style::default()
        }
    }

    fn bold(&self) -> Style {
        Style::default().add_modifier(Modifier::BOLD)
    }

    fn push(&mut self, kind: ViewKind) -> Cmd {
        if self.stack.len() >= MAX_DEPTH {
            self.stack.remove(1);
        }
        self.stack.push(View::new(kind));
        Cmd::Load
    }

    // ------------------------------------------------------------ keys

    /// Handle one key press.
    pub fn key(&mut self, key: Key) -> Cmd {
        if let Some(input) = self.input.as_mut() {
            match key {
                Key::Enter => {
                    let input = self.input.take().expect("checked");
                    return self.submit(input);
                }
                Key::Esc | Key::Ctrl('c') => self.input = None,
                Key::Backspace => {
                    input.text.pop();
                }
                Key::Char(c) if input.text.len() + c.len_utf8() <= MAX_INPUT => input.text.push(c),
                _ => {}
            }
            return Cmd::None;
        }
        if self.help {
            self.help = false;
            return Cmd::None;
        }
        self.status = None;
        match key {
            Key::Char('?') => {
                self.help = true;
                return Cmd::None;
            }
            Key::Char('q') | Key::Esc => {
                if self.stack.len() > 1 {
                    self.stack.pop();
                    return Cmd::None;
                }
                return Cmd::Quit;
            }
            Key::Ctrl('c') => return Cmd::Quit,
            Key::Tab | Key::BackTab => {
                self.focus = match self.focus {
                    Focus::Main => Focus::Events,
                    Focus::Events => Focus::Main,
                };
                return Cmd::None;
            }
            Key::Ctrl('r') | Key::Char('g') => return Cmd::Load,
            _ => {}
        }
        if self.focus == Focus::Events {
            match key {
                Key::Char('k') | Key::Up => self.events_scroll += 1,
                Key::Char('j') | Key::Down => {
                    self.events_scroll = self.events_scroll.saturating_sub(1)
                }
                _ => {}
            }
            self.events_scroll = self.events_scroll.min(self.events.len().saturating_sub(1));
            return Cmd::None;
        }
        let rows = self.row_count();
        match key {
            Key::Char('j') | Key::Down => self.move_by(1, rows),
            Key::Char('k') | Key::Up => self.move_by(-1, rows),
            Key::PageDown | Key::Ctrl('d') => self.move_by(10, rows),
            Key::PageUp | Key::Ctrl('u') => self.move_by(-10, rows),
            Key::Home => self.top_mut().sel = 0,
            Key::End => self.move_by(isize::MAX / 2, rows),
            Key::Char('/') => self.ask(Ask::Search),
            Key::Char(']') => return self.next_page(),
            Key::Char('[') => return self.prev_page(),
            Key::Enter => return self.open(),
            Key::Char(c) => return self.action(c),
            _ => {}
        }
        Cmd::None
    }

    fn ask(&mut self, ask: Ask) {
        let detail = matches!(
            self.top().kind,
            ViewKind::Issue { .. } | ViewKind::Patch { .. }
        );
        let text = match ask {
            Ask::Search if !detail => self.top().filter.clone(),
            _ => String::new(),
        };
        self.input = Some(Input { ask, text });
    }

    fn move_by(&mut self, delta: isize, rows: usize) {
        let view = self.top_mut();
        let max = rows.saturating_sub(1);
        let sel = view.sel as isize + delta;
        view.sel = sel.clamp(0, max as isize) as usize;
    }

    fn next_page(&mut self) -> Cmd {
        let view = self.top_mut();
        let Some(next) = view.data["next"].as_str().map(str::to_string) else {
            return Cmd::None;
        };
        let current = view.after.replace(next);
        view.before.push(current);
        view.sel = 0;
        Cmd::Load
    }

    fn prev_page(&mut self) -> Cmd {
        let view = self.top_mut();
        match view.before.pop() {
            Some(previous) => {
                view.after = previous;
                view.sel = 0;
                Cmd::Load
            }
            None => Cmd::None,
        }
    }

    /// The repository of the top screen, if it has one.
    fn repo(&self) -> Option<String> {
        match &self.top().kind {
            ViewKind::Issues { repo, .. }
            | ViewKind::Issue { repo, .. }
            | ViewKind::Patches { repo, .. }
            | ViewKind::Patch { repo, .. } => Some(repo.clone()),
            ViewKind::Repos => self.selected_repo(),
            ViewKind::Leases { .. } => None,
        }
    }

    fn selected_repo(&self) -> Option<String> {
        let rows = self.list_rows();
        match rows.get(self.top().sel).and_then(|r| r.1.clone()) {
            Some(ViewKind::Issues { repo, .. }) => Some(repo),
            _ => None,
        }
    }

    fn open(&mut self) -> Cmd {
        let rows = self.list_rows();
        match rows.get(self.top().sel).and_then(|r| r.1.clone()) {
            Some(kind) => self.push(kind),
            None => Cmd::None,
        }
    }

    fn action(&mut self, c: char) -> Cmd {
        let kind = self.top().kind.clone();
        match (c, &kind) {
            ('i', _) => match self.repo() {
                Some(repo) => self.push(ViewKind::Issues {
                    repo,
                    state: "open".into(),
                    label: None,
                    queue: false,
                }),
                None => Cmd::None,
            },
            ('p', _) => match self.repo() {
                Some(repo) => self.push(ViewKind::Patches {
                    repo,
                    state: "open".into(),
                }),
                None => Cmd::None,
            },
            ('L', _) => self.push(ViewKind::Leases { mine: false }),
            ('m', ViewKind::Leases { mine }) => {
                self.top_mut().kind = ViewKind::Leases { mine: !mine };
                self.top_mut().sel = 0;
                Cmd::None
            }
            (
                's',
                ViewKind::Issues {
                    repo,
                    state,
                    label,
                    queue,
                },
            ) => {
                let next = match state.as_str() {
                    "open" => "closed",
                    "closed" => "all",
                    _ => "open",
                };
                self.replace(ViewKind::Issues {
                    repo: repo.clone(),
                    state: next.into(),
                    label: label.clone(),
                    queue: *queue,
                })
            }
            ('s', ViewKind::Patches { repo, state }) => {
                let next = match state.as_str() {
                    "open" => "merged",
                    "merged" => "closed",
                    "closed" => "all",
                    _ => "open",
                };
                self.replace(ViewKind::Patches {
                    repo: repo.clone(),
                    state: next.into(),
                })
            }
            // The work queue opens above the issue list, so `q` (or `w`
            // again) comes back to the list rather than leaving it.
            (
                'w',
                ViewKind::Issues {
                    repo,
                    state,
                    label,
                    queue: false,
                },
            ) => self.push(ViewKind::Issues {
                repo: repo.clone(),
                state: state.clone(),
                label: label.clone(),
                queue: true,
            }),
            (
                'w',
                ViewKind::Issues {
                    repo,
                    state,
                    label,
                    queue: true,
                },
            ) => {
                let below = self.stack.len().checked_sub(2).map(|i| &self.stack[i].kind);
                if matches!(below, Some(ViewKind::Issues { repo: r, queue: false, .. }) if r == repo)
                {
                    self.stack.pop();
                    Cmd::None
                } else {
                    self.replace(ViewKind::Issues {
                        repo: repo.clone(),
                        state: state.clone(),
                        label: label.clone(),
                        queue: false,
                    })
                }
            }
            ('c', ViewKind::Issue { .. }) => {
                self.ask(Ask::Comment);
                Cmd::None
            }
            ('l', ViewKind::Issue { .. }) => {
                self.ask(Ask::Labels);
                Cmd::None
            }
            ('x', ViewKind::Issue { repo, id }) => {
                let closed = self.top().data["status"].as_str() == Some("closed");
                let (action, done) = if closed {
                    ("reopen", "reopened")
                } else {
                    ("close", "closed")
                };
                act(&["collab-issue", action, repo, id], done)
            }
            ('a', ViewKind::Issue { repo, id }) => {
                act(&["collab-lease", "acquire", repo, id], "claimed")
            }
            ('r', ViewKind::Issue { repo, id }) => {
                act(&["collab-lease", "release", repo, id], "released")
            }
            ('A' | 'R', ViewKind::Patch { .. }) if !self.patch_is_open() => {
                self.status = Some(("only an open patch can be reviewed".into(), true));
                Cmd::None
            }
            ('A', ViewKind::Patch { .. }) => {
                self.ask(Ask::Review("--approve"));
                Cmd::None
            }
            ('R', ViewKind::Patch { .. }) => {
                self.ask(Ask::Review("--request-changes"));
                Cmd::None
            }
            ('c', ViewKind::Patch { .. }) => {
                self.ask(Ask::PatchComment);
                Cmd::None
            }
            (
                'd',
                ViewKind::Patch {
                    repo,
                    id,
                    interdiff,
                },
            ) => self.replace(ViewKind::Patch {
                repo: repo.clone(),
                id: id.clone(),
                interdiff: !interdiff,
            }),
            _ => Cmd::None,
        }
    }

    /// Show `kind` in place of the top screen (a filter changed).
    fn replace(&mut self, kind: ViewKind) -> Cmd {
        let filter = std::mem::take(&mut self.top_mut().filter);
        let view = self.top_mut();
        *view = View::new(kind);
        view.filter = filter;
        Cmd::Load
    }

    fn submit(&mut self, input: Input) -> Cmd {
        let kind = self.top().kind.clone();
        let body = input.text.trim().to_string();
        let optional = input.ask == Ask::Review("--approve");
        match (input.ask, kind) {
            (Ask::Search, kind) => {
                // `label:NAME` filters a repository's issues on the server.
                if let (
                    Some(label),
                    ViewKind::Issues {
                        repo, state, queue, ..
                    },
                ) = (body.strip_prefix("label:"), &kind)
                {
                    let label = (!label.is_empty()).then(|| label.to_string());
                    return self.replace(ViewKind::Issues {
                        repo: repo.clone(),
                        state: state.clone(),
                        label,
                        queue: *queue,
                    });
                }
                if matches!(kind, ViewKind::Issue { .. } | ViewKind::Patch { .. }) {
                    // An issue or a patch: scroll to the next line with it.
                    let needle = body.to_lowercase();
                    let from = self.top().sel + 1;
                    let lines = self.detail_lines();
                    let found = (from..lines.len())
                        .chain(0..from.min(lines.len()))
                        .find(|&i| lines[i].to_string().to_lowercase().contains(&needle));
                    match found {
                        Some(i) if !needle.is_empty() => self.top_mut().sel = i,
                        _ => self.status = Some((format!("not found: {}", body), true)),
                    }
                    return Cmd::None;
                }
                let view = self.top_mut();
                view.filter = body;
                view.sel = 0;
                Cmd::None
            }
            (_, _) if body.is_empty() && !optional => {
                self.status = Some(("nothing written: the text was empty".into(), true));
                Cmd::None
            }
            (Ask::Comment, ViewKind::Issue { repo, id }) => act(
                &["collab-issue", "comment", &repo, &id, "--body", &body],
                "commented",
            ),
            (Ask::Labels, ViewKind::Issue { repo, id }) => {
                let mut argv = vec![
                    "collab-issue".to_string(),
                    "label".into(),
                    repo.clone(),
                    id.clone(),
                ];
                for word in body.split_whitespace() {
                    match word.strip_prefix('-') {
                        Some(label) => argv.extend(["--remove".to_string(), label.to_string()]),
                        None => argv.extend([
                            "--add".to_string(),
                            word.trim_start_matches('+').to_string(),
                        ]),
                    }
                }
                Cmd::Act {
                    argv,
                    done: "labels changed".into(),
                }
            }
            (Ask::Review(verdict), ViewKind::Patch { repo, id, .. }) => {
                let mut argv = vec!["collab-patch", "review", &repo, &id, verdict];
                if !body.is_empty() {
                    argv.extend(["--body", &body]);
                }
                let done = if verdict == "--approve" {
                    "approved"
                } else {
                    "changes requested"
                };
                act(&argv, done)
            }
            (Ask::PatchComment, ViewKind::Patch { repo, id, .. }) => act(
                &["collab-patch", "comment", &repo, &id, "--body", &body],
                "commented",
            ),
            _ => Cmd::None,
        }
    }

    // ------------------------------------------------------------ rows

    fn row_count(&self) -> usize {
        match self.top().kind {
            ViewKind::Issue { .. } | ViewKind::Patch { .. } => self.detail_lines().len(),
            _ => self.list_rows().len(),
        }
    }

    /// A list screen's rows (after the `/` filter), each with the screen
    /// Enter opens.
    fn list_rows(&self) -> Vec<(Line<'static>, Option<ViewKind>)> {
        let view = self.top();
        let d = &view.data;
        let mut rows: Vec<(Line<'static>, Option<ViewKind>)> = Vec::new();
        let dim = self.style(Color::DarkGray);
        let green = self.style(Color::Green);
        let red = self.style(Color::Red);
        let yellow = self.style(Color::Yellow);
        let cyan = self.style(Color::Cyan);
        match &view.kind {
            ViewKind::Repos => {
                for r in d["repos"].as_array().into_iter().flatten() {
                    let name = field(&r["name"]);
                    let pushed = r["last_push"]
                        .as_i64()
                        .map(|t| ago(self.now, t))
                        .unwrap_or_else(|| "never".into());
                    rows.push((
                        Line::from(vec![
                            Span::styled(fit(&name, 22), self.bold()),
                            Span::styled(
                                format!(
                                    "{:>4} {:<6} {:>4} {:<7} ",
                                    r["open_issues"],
                                    plural(&r["open_issues"], "issue", "issues"),
                                    r["open_patches"],
                                    plural(&r["open_patches"], "patch", "patches"),
                                ),
                                cyan,
                            ),
                            Span::styled(fit(&pushed, 9), dim),
                            Span::raw(field(&r["description"])),
                        ]),
                        Some(ViewKind::Issues {
                            repo: r["name"].as_str().unwrap_or("").to_string(),
                            state: "open".into(),
                            label: None,
                            queue: false,
                        }),
                    ));
                }
            }
            ViewKind::Issues {
                repo, queue: false, ..
            } => {
                for i in d["issues"].as_array().into_iter().flatten() {
                    let status = i["status"].as_str().unwrap_or("");
                    let id = i["id"].as_str().unwrap_or("").to_string();
                    rows.push((
                        Line::from(vec![
                            Span::styled(short(&id), yellow),
                            Span::raw(" "),
                            Span::styled(
                                fit(status, 7),
                                if status == "open" { green } else { red },
                            ),
                            Span::raw(field(&i["title"])),
                            Span::styled(format!(" [{}]", labels(&i["labels"])), dim),
                            Span::styled(format!(" {}c", i["comments"]), dim),
                        ]),
                        Some(ViewKind::Issue {
                            repo: repo.clone(),
                            id,
                        }),
                    ));
                }
            }
            ViewKind::Issues {
                repo, queue: true, ..
            } => {
                for i in d["ready"].as_array().into_iter().flatten() {
                    let id = i["id"].as_str().unwrap_or("").to_string();
                    rows.push((
                        Line::from(vec![
                            Span::styled(short(&id), yellow),
                            Span::styled(" ready   ", green),
                            Span::raw(field(&i["title"])),
                            Span::styled(format!(" [{}]", labels(&i["labels"])), dim),
                        ]),
                        Some(ViewKind::Issue {
                            repo: repo.clone(),
                            id,
                        }),
                    ));
                }
                for i in d["not_ready"].as_array().into_iter().flatten() {
                    let id = i["id"].as_str().unwrap_or("").to_string();
                    let why = i["why"]
                        .as_array()
                        .map(|a| a.iter().map(field).collect::<Vec<_>>().join("; "))
                        .unwrap_or_default();
                    rows.push((
                        Line::from(vec![
                            Span::styled(short(&id), yellow),
                            Span::styled(" waiting ", red),
                            Span::raw(field(&i["title"])),
                            Span::styled(format!(" ({why})"), dim),
                        ]),
                        Some(ViewKind::Issue {
                            repo: repo.clone(),
                            id,
                        }),
                    ));
                }
            }
            ViewKind::Patches { repo, .. } => {
                for p in d["patches"].as_array().into_iter().flatten() {
                    let id = p["id"].as_str().unwrap_or("").to_string();
                    let status = p["status"].as_str().unwrap_or("");
                    rows.push((
                        Line::from(vec![
                            Span::styled(short(&id), yellow),
                            Span::raw(" "),
                            Span::styled(
                                fit(status, 7),
                                if status == "open" { green } else { dim },
                            ),
                            Span::raw(field(&p["title"])),
                            Span::styled(review_counts(p), dim),
                        ]),
                        Some(ViewKind::Patch {
                            repo: repo.clone(),
                            id,
                            interdiff: false,
                        }),
                    ));
                }
            }
            ViewKind::Leases { mine } => {
                for l in d["leases"].as_array().into_iter().flatten() {
                    if *mine && l["holder"].as_str() != Some(self.me.as_str()) {
                        continue;
                    }
                    let repo = l["repo"].as_str().unwrap_or("").to_string();
                    let id = l["issue"].as_str().unwrap_or("").to_string();
                    let holder = l["holder_name"]
                        .as_str()
                        .or(l["holder"].as_str())
                        .unwrap_or("");
                    let expires = if l["expires_at"].is_null() {
                        "no expiry".to_string()
                    } else {
                        format!("until {}", when(&l["expires_at"]))
                    };
                    rows.push((
                        Line::from(vec![
                            Span::styled(fit(&line(&repo), 16), self.bold()),
                            Span::styled(short(&id), yellow),
                            Span::raw(format!(" {} ", fit(&line(holder), 16))),
                            Span::styled(format!("#{} ", l["token"]), cyan),
                            Span::styled(expires, dim),
                        ]),
                        Some(ViewKind::Issue { repo, id }),
                    ));
                }
            }
            ViewKind::Issue { .. } | ViewKind::Patch { .. } => {}
        }
        let filter = view.filter.to_lowercase();
        if !filter.is_empty() {
            rows.retain(|(l, _)| l.to_string().to_lowercase().contains(&filter));
        }
        rows
    }

    /// An issue's or a patch's lines.
    fn detail_lines(&self) -> Vec<Line<'static>> {
        let view = self.top();
        let d = &view.data;
        let mut out: Vec<Line<'static>> = Vec::new();
        if d.is_null() {
            return out;
        }
        let dim = self.style(Color::DarkGray);
        let head = self.bold().patch(self.style(Color::Cyan));
        let body = |out: &mut Vec<Line<'static>>, s: &Value| {
            for l in text(s.as_str().unwrap_or("")).lines() {
                out.push(Line::raw(format!("  {l}")));
            }
        };
        out.push(Line::styled(field(&d["title"]), self.bold()));
        out.push(Line::from(vec![
            Span::styled(
                field(&d["status"]),
                self.style(if d["status"] == "open" {
                    Color::Green
                } else {
                    Color::Red
                }),
            ),
            Span::styled(
                format!(
                    "  {}  by {}  {}",
                    short(d["id"].as_str().unwrap_or("")),
                    who(&d["author"]),
                    when(&d["created_at"])
                ),
                dim,
            ),
        ]));
        match &view.kind {
            ViewKind::Issue { .. } => {
                out.push(Line::raw(format!("labels: {}", labels(&d["labels"]))));
                let lease = &d["lease"];
                out.push(if lease.is_null() {
                    Line::raw("lease: none".to_string())
                } else {
                    let holder = lease["holder_name"]
                        .as_str()
                        .or(lease["holder"].as_str())
                        .unwrap_or("");
                    let until = if lease["expires_at"].is_null() {
                        "no expiry".to_string()
                    } else {
                        format!("until {}", when(&lease["expires_at"]))
                    };
                    Line::styled(
                        format!(
                            "lease: held by {} (token {}, {until})",
                            line(holder),
                            lease["token"]
                        ),
                        self.style(Color::Yellow),
                    )
                });
                if let Some(why) = d["not_ready"].as_array().filter(|a| !a.is_empty()) {
                    let why: Vec<_> = why.iter().map(field).collect();
                    out.push(Line::styled(format!("not ready: {}", why.join("; ")), dim));
                }
                for (kind, name) in [
                    ("blocks", "blocks"),
                    ("blocked_by", "blocked by"),
                    ("relates", "relates to"),
                ] {
                    if let Some(links) = d["links"][kind].as_array().filter(|a| !a.is_empty()) {
                        let texts: Vec<_> = links.iter().map(|l| field(&l["text"])).collect();
                        out.push(Line::raw(format!("{name}: {}", texts.join(", "))));
                    }
                }
                out.push(Line::raw(String::new()));
                body(&mut out, &d["body"]);
                for c in d["comments"].as_array().into_iter().flatten() {
                    out.push(Line::raw(String::new()));
                    out.push(Line::styled(
                        format!("── {}  {}", who(&c["author"]), when(&c["at"])),
                        head,
                    ));
                    body(&mut out, &c["body"]);
                }
            }
            ViewKind::Patch { .. } => {
                out.push(Line::raw(format!("base: {}", field(&d["base"]))));
                out.push(Line::styled("revisions".to_string(), head));
                for r in d["revisions"].as_array().into_iter().flatten() {
                    out.push(Line::raw(format!(
                        "  r{}  {}  {}",
                        r["n"],
                        short(r["head"].as_str().unwrap_or("")),
                        when(&r["at"])
                    )));
                }
                let reviews = d["reviews"].as_array().filter(|a| !a.is_empty());
                if let Some(reviews) = reviews {
                    out.push(Line::styled("reviews".to_string(), head));
                    for r in reviews {
                        let verdict = r["verdict"].as_str().unwrap_or("");
                        let colour = match verdict {
                            "approve" => Color::Green,
                            "request_changes" => Color::Red,
                            _ => Color::Reset,
                        };
                        out.push(Line::from(vec![
                            Span::styled(format!("  {}", line(verdict)), self.style(colour)),
                            Span::raw(format!(
                                " by {} on r{}: {}",
                                who(&r["author"]),
                                r["revision"],
                                line(r["body"].as_str().unwrap_or(""))
                            )),
                        ]));
                    }
                }
                for c in d["comments"].as_array().into_iter().flatten() {
                    // An inline comment says where it points, as the web does.
                    let place = match (c["path"].as_str(), c["line"].as_i64()) {
                        (Some(path), Some(n)) => {
                            format!("  on r{} {}:{n}", c["revision"], line(path))
                        }
                        (Some(path), None) => format!("  on r{} {}", c["revision"], line(path)),
                        _ => String::new(),
                    };
                    out.push(Line::styled(
                        format!("── {}  {}{place}", who(&c["author"]), when(&c["at"])),
                        head,
                    ));
                    body(&mut out, &c["body"]);
                }
                out.push(Line::styled(
                    format!("── {}", field(&d["diff_title"])),
                    head,
                ));
                for l in &view.diff {
                    out.push(self.diff_line(l));
                }
            }
            _ => {}
        }
        out
    }

    fn diff_line(&self, l: &DiffLine) -> Line<'static> {
        let sign_style = match l.sign {
            '+' => self.style(Color::Green),
            '-' => self.style(Color::Red),
            _ => Style::default(),
        };
        let mut spans = vec![Span::styled(l.sign.to_string(), sign_style)];
        for seg in &l.segs {
            let style = match seg.class.as_str() {
                "header" => self.bold(),
                "hunk" => self.style(Color::Cyan),
                c => self.code_style(c),
            };
            spans.push(Span::styled(seg.text.clone(), style));
        }
        Line::from(spans)
    }

    /// A terminal colour for a highlighter class list (`hl-keyword hl-rust`).
    fn code_style(&self, classes: &str) -> Style {
        let has = |atom: &str| classes.split(' ').any(|c| c == format!("hl-{atom}"));
        let colour = if has("comment") {
            Color::DarkGray
        } else if has("string") {
            Color::Green
        } else if has("keyword") || has("storage") {
            Color::Magenta
        } else if has("constant") {
            Color::Yellow
        } else if has("entity") || has("support") {
            Color::Blue
        } else {
            return Style::default();
        };
        self.style(colour)
    }

    // ------------------------------------------------------------ drawing

    fn title(&self) -> String {
        let view = self.top();
        let crumb = match &view.kind {
            ViewKind::Repos => "repositories".to_string(),
            ViewKind::Issues {
                repo,
                state,
                label,
                queue,
            } => {
                let what = if *queue { "work queue" } else { "issues" };
                let label = label
                    .as_deref()
                    .map(|l| format!(" label:{}", line(l)))
                    .unwrap_or_default();
                format!("{} › {what} ({state}{label})", line(repo))
            }
            ViewKind::Issue { repo, id } => format!("{} › issue {}", line(repo), short(id)),
            ViewKind::Patches { repo, state } => format!("{} › patches ({state})", line(repo)),
            ViewKind::Patch { repo, id, .. } => format!("{} › patch {}", line(repo), short(id)),
            ViewKind::Leases { mine } => {
                format!("leases ({})", if *mine { "mine" } else { "all" })
            }
        };
        let page = if view.before.is_empty() {
            String::new()
        } else {
            format!(" · page {}", view.before.len() + 1)
        };
        let filter = if view.filter.is_empty() {
            String::new()
        } else {
            format!(" · /{}", line(&view.filter))
        };
        format!("git-collab › {crumb}{page}{filter}")
    }

    /// Whether the patch on screen is open (reviews are for open patches;
    /// a merged or closed one offers none).
    fn patch_is_open(&self) -> bool {
        self.top().data["status"].as_str() == Some("open")
    }

    fn hints(&self) -> &'static str {
        match self.top().kind {
            ViewKind::Repos => "Enter issues  p patches  L leases  / search  ? help  q quit",
            ViewKind::Issues { .. } => {
                "Enter open  s state  w queue  / search  ] [ page  p patches  q back"
            }
            ViewKind::Issue { .. } => {
                "c comment  l label  x close/reopen  a claim  r release  q back"
            }
            ViewKind::Patches { .. } => "Enter open  s state  / search  ] [ page  q back",
            ViewKind::Patch { .. } if self.patch_is_open() => {
                "A approve  R request changes  c comment  d diff/interdiff  q back"
            }
            ViewKind::Patch { .. } => "c comment  d diff/interdiff  q back",
            ViewKind::Leases { .. } => "Enter issue  m mine/all  / search  q back",
        }
    }

    /// Draw the whole screen.
    pub fn draw(&self, f: &mut Frame) {
        let area = f.area();
        let events_height = if area.height >= 16 { 7 } else { 0 };
        let [top, main, events, bottom] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(1),
            Constraint::Length(events_height),
            Constraint::Length(1),
        ])
        .areas(area);
        f.render_widget(
            Paragraph::new(Line::styled(
                self.title(),
                Style::default().add_modifier(Modifier::REVERSED),
            )),
            top,
        );
        self.draw_main(f, main);
        if events_height > 0 {
            self.draw_events(f, events);
        }
        let bottom_line = if let Some(input) = &self.input {
            let prompt = match input.ask {
                Ask::Search => match self.top().kind {
                    ViewKind::Issue { .. } | ViewKind::Patch { .. } => "find: ",
                    _ => "search (label:NAME filters issues): ",
                },
                Ask::Comment | Ask::PatchComment => "comment: ",
                Ask::Labels => "labels (+add -remove): ",
                Ask::Review("--approve") => "approve, with a comment (optional): ",
                Ask::Review(_) => "request changes, saying why: ",
            };
            Line::from(vec![
                Span::styled(prompt, self.bold()),
                Span::raw(line(&input.text)),
                Span::styled("▏", self.bold()),
            ])
        } else if let Some((message, error)) = &self.status {
            Line::styled(
                line(message),
                if *error {
                    self.style(Color::Red).add_modifier(Modifier::BOLD)
                } else {
                    self.style(Color::Green)
                },
            )
        } else {
            Line::styled(self.hints(), self.style(Color::DarkGray))
        };
        f.render_widget(Paragraph::new(bottom_line), bottom);
        if self.help {
            self.draw_help(f, area);
        }
    }

    fn draw_main(&self, f: &mut Frame, area: Rect) {
        let view = self.top();
        let focused = self.focus == Focus::Main;
        let block = Block::default().borders(Borders::NONE);
        if view.loading && view.data.is_null() {
            f.render_widget(Paragraph::new("loading…").block(block), area);
            return;
        }
        match view.kind {
            ViewKind::Issue { .. } | ViewKind::Patch { .. } => {
                let lines = self.detail_lines();
                let start = view.sel.min(lines.len().saturating_sub(1));
                let shown: Vec<Line> = lines.into_iter().skip(start).collect();
                f.render_widget(
                    Paragraph::new(Text::from(shown)).wrap(Wrap { trim: false }),
                    area,
                );
            }
            _ => {
                let rows = self.list_rows();
                if rows.is_empty() {
                    let empty = if view.filter.is_empty() {
                        "nothing here"
                    } else {
                        "nothing matches the search"
                    };
                    f.render_widget(Paragraph::new(empty), area);
                    return;
                }
                let more = view.data["next"].is_string();
                let mut items: Vec<ListItem> =
                    rows.into_iter().map(|(l, _)| ListItem::new(l)).collect();
                if more {
                    items.push(ListItem::new(Line::styled(
                        "… more: ] next page",
                        self.style(Color::DarkGray),
                    )));
                }
                let highlight = if focused {
                    Style::default().add_modifier(Modifier::REVERSED)
                } else {
                    Style::default().add_modifier(Modifier::UNDERLINED)
                };
                let list = List::new(items).highlight_style(highlight);
                let mut state = ListState::default().with_selected(Some(view.sel));
                f.render_stateful_widget(list, area, &mut state);
            }
        }
    }

    fn draw_events(&self, f: &mut Frame, area: Rect) {
        let focused = self.focus == Focus::Events;
        let title = if focused {
            " events (live) · j/k scroll · Tab back "
        } else {
            " events (live) · Tab "
        };
        let border = if focused {
            self.style(Color::Yellow)
        } else {
            self.style(Color::DarkGray)
        };
        let block = Block::default()
            .borders(Borders::TOP)
            .border_style(border)
            .title(title);
        let inner = block.inner(area);
        f.render_widget(block, area);
        let height = inner.height as usize;
        let end = self.events.len().saturating_sub(self.events_scroll);
        let start = end.saturating_sub(height);
        let lines: Vec<Line> = self
            .events
            .range(start..end)
            .map(|e| {
                let at = chrono::DateTime::from_timestamp(e.at, 0)
                    .map(|t| t.format("%H:%M:%S").to_string())
                    .unwrap_or_default();
                let actor: String = line(&e.actor).chars().take(14).collect();
                // Time, kind and actor take 40 columns; an object that is a
                // name (a ref, a branch, a tag) gets what the repository
                // leaves, at least 8 columns.
                let repo = line(&e.repo);
                let room = (inner.width as usize)
                    .saturating_sub(40 + repo.chars().count() + 2)
                    .clamp(8, 64);
                let object: String =
                    if e.object.len() >= 12 && e.object.bytes().all(|b| b.is_ascii_hexdigit()) {
                        short(&e.object) // an id: its short form, as everywhere
                    } else {
                        line(&e.object).chars().take(room).collect()
                    };
                Line::from(vec![
                    Span::styled(format!("{at} "), self.style(Color::DarkGray)),
                    Span::styled(
                        format!("{} ", fit(&line(&e.kind), 16)),
                        self.style(Color::Cyan),
                    ),
                    Span::raw(format!("{repo} {object} ")),
                    Span::styled(actor, self.style(Color::DarkGray)),
                ])
            })
            .collect();
        f.render_widget(Paragraph::new(lines), inner);
    }

    fn draw_help(&self, f: &mut Frame, area: Rect) {
        let lines = HELP.iter().map(|l| Line::raw(*l)).collect::<Vec<_>>();
        let width = 64.min(area.width);
        let height = (lines.len() as u16 + 2).min(area.height);
        let popup = Rect {
            x: area.x + (area.width - width) / 2,
            y: area.y + (area.height - height) / 2,
            width,
            height,
        };
        f.render_widget(Clear, popup);
        f.render_widget(
            Paragraph::new(lines).block(Block::bordered().title(" keys · any key closes ")),
            popup,
        );
    }
}

/// The help overlay (`?`), also docs/tui.md's key table.
pub const HELP: &[&str] = &[
    "j/k ↓/↑  move        PgDn/PgUp  by ten    Enter  open",
    "q Esc    back/quit   Tab  events pane     g  reload",
    "/        search, find, label:NAME         ] [  next/prev page",
    "i        issues      p  patches           L  leases",
    "issues:  s state (open/closed/all)        w  work queue",
    "issue:   c comment   l label (+a -b)      x  close/reopen",
    "         a claim     r release",
    "patch:   A approve   R request changes    c  comment",
    "         d diff / interdiff of the last two revisions",
    "leases:  m mine/all",
];

fn act(argv: &[&str], done: &str) -> Cmd {
    Cmd::Act {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        done: done.to_string(),
    }
}
