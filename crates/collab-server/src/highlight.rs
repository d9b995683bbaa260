//! Syntax highlighting on the server, for blobs, diffs and fenced code in
//! markdown (syntect, Sublime Text grammars, pure-Rust regexes). The output
//! is `<span class="hl-…">` elements whose colours come from one stylesheet
//! ([`css`], appended to `style.css`), so pages stay free of inline styles
//! and scripts.
//!
//! Every highlighted line is self-contained HTML: the spans still open at a
//! line's end are closed there and opened again on the next line, so a line
//! can sit in its own table row.
//!
//! Bounded (the limits are listed in `docs/security.md`): text over
//! [`MAX_BYTES`] or with a line over [`MAX_LINE`] bytes is not highlighted
//! at all, and a page stops highlighting after [`BUDGET`] of work (each
//! text's first [`FREE_LINES`] lines excepted); what is left is shown
//! escaped, uncoloured. The grammars are loaded once, on first
//! use.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use syntect::highlighting::ThemeSet;
use syntect::html::{line_tokens_to_classed_spans, ClassStyle};
use syntect::parsing::{ParseState, ScopeStack, SyntaxReference, SyntaxSet};

/// Text bigger than this (a blob, one side of one file's diff, a code
/// block) is shown without colours.
pub const MAX_BYTES: usize = 512 * 1024;
/// A line longer than this (minified code) turns highlighting off for its
/// text: regex grammars can take quadratic time on such lines.
pub const MAX_LINE: usize = 4 * 1024;
/// Highlighting time one page may spend; later lines are shown plain.
pub const BUDGET: Duration = Duration::from_millis(750);
/// Lines each highlighter colours before the budget applies, so a short
/// file is always coloured even when compiling its grammar (done once per
/// process, on first use) ate the budget.
pub const FREE_LINES: usize = 100;

const STYLE: ClassStyle = ClassStyle::SpacedPrefixed { prefix: "hl-" };

static SYNTAXES: LazyLock<SyntaxSet> = LazyLock::new(SyntaxSet::load_defaults_newlines);

static CSS: LazyLock<String> = LazyLock::new(|| {
    let themes = ThemeSet::load_defaults();
    themes
        .themes
        .get("InspiredGitHub")
        .and_then(|theme| syntect::html::css_for_theme_with_class_style(theme, STYLE).ok())
        .unwrap_or_default()
});

/// Load the grammars now (the server calls this at start, off the request
/// path), so the first highlighted page does not wait for them.
pub fn preload() {
    LazyLock::force(&SYNTAXES);
}

/// The colours of the `hl-` classes (the InspiredGitHub theme).
pub fn css() -> &'static str {
    &CSS
}

/// When a page's highlighting has to stop.
#[derive(Clone, Copy, Debug)]
pub struct Deadline(Instant);

impl Deadline {
    /// [`BUDGET`] from now, once the grammars are loaded (loading them
    /// does not count against the first page's budget).
    pub fn start() -> Deadline {
        LazyLock::force(&SYNTAXES);
        Deadline(Instant::now() + BUDGET)
    }

    fn passed(self) -> bool {
        Instant::now() >= self.0
    }
}

/// The grammar for a file: by name (`Makefile`), by extension, then by its
/// first line (`#!/bin/sh`); `None` for plain text and unknown kinds.
fn syntax_for(path: &str, first_line: &str) -> Option<&'static SyntaxReference> {
    let set = &*SYNTAXES;
    let name = path.rsplit('/').next().unwrap_or(path);
    let by_name = set.find_syntax_by_extension(name).or_else(|| {
        name.rsplit_once('.')
            .and_then(|(_, ext)| set.find_syntax_by_extension(ext))
    });
    let found = by_name.or_else(|| set.find_syntax_by_first_line(first_line))?;
    (found.name != set.find_syntax_plain_text().name).then_some(found)
}

/// The grammar a fenced code block names (` ```rust `, ` ```py `).
fn syntax_for_token(token: &str) -> Option<&'static SyntaxReference> {
    let set = &*SYNTAXES;
    let token = token.split([',', ' ']).next().unwrap_or("").trim();
    if token.is_empty() {
        return None;
    }
    let found = set.find_syntax_by_token(token)?;
    (found.name != set.find_syntax_plain_text().name).then_some(found)
}

/// Highlights one stream of lines (a file, or one side of a diff).
pub struct Highlighter {
    parse: ParseState,
    stack: ScopeStack,
    deadline: Deadline,
    /// Lines highlighted so far.
    done: usize,
    /// Set once highlighting failed or ran out of time: plain from then on.
    off: bool,
}

impl Highlighter {
    /// A highlighter for `path`, or `None` when its kind is unknown.
    pub fn for_path(path: &str, first_line: &str, deadline: Deadline) -> Option<Highlighter> {
        syntax_for(path, first_line).map(|s| Highlighter::new(s, deadline))
    }

    fn new(syntax: &SyntaxReference, deadline: Deadline) -> Highlighter {
        Highlighter {
            parse: ParseState::new(syntax),
            stack: ScopeStack::new(),
            deadline,
            done: 0,
            off: false,
        }
    }

    /// One line (without its line ending) as HTML: highlighted while the
    /// budget lasts and the line is short enough, else escaped.
    pub fn line(&mut self, text: &str) -> String {
        if self.off || text.len() > MAX_LINE || (self.done >= FREE_LINES && self.deadline.passed())
        {
            self.off = true;
            return escape(text);
        }
        match self.try_line(text) {
            Some(html) => {
                self.done += 1;
                html
            }
            None => {
                self.off = true;
                escape(text)
            }
        }
    }

    fn try_line(&mut self, text: &str) -> Option<String> {
        // The grammars are the "newlines" kind: each line ends with `\n`.
        let with_newline = format!("{text}\n");
        let ops = self.parse.parse_line(&with_newline, &SYNTAXES).ok()?;
        let mut html = String::with_capacity(text.len() * 2);
        // Reopen the spans the previous line left open.
        for scope in self.stack.as_slice() {
            html.push_str("<span class=\"");
            html.push_str(&classes(&scope.build_string()));
            html.push_str("\">");
        }
        let (body, _) =
            line_tokens_to_classed_spans(&with_newline, &ops, STYLE, &mut self.stack).ok()?;
        html.push_str(&body);
        if let Some(at) = html.rfind('\n') {
            html.remove(at);
        }
        for _ in 0..self.stack.len() {
            html.push_str("</span>");
        }
        Some(html)
    }
}

/// `source.rust` as the classes syntect gives it: `hl-source hl-rust`.
fn classes(scope: &str) -> String {
    scope
        .split('.')
        .map(|atom| format!("hl-{atom}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `text` is small enough, line by line and in all, to highlight.
pub fn within_limits(text: &str) -> bool {
    text.len() <= MAX_BYTES && text.lines().all(|l| l.len() <= MAX_LINE)
}

/// The lines of file `path` as HTML, highlighted when its kind is known
/// and it is within the limits; escaped otherwise.
pub fn file_lines(path: &str, lines: &[String], deadline: Deadline) -> Vec<String> {
    let total: usize = lines.iter().map(|l| l.len() + 1).sum();
    let fits = total <= MAX_BYTES && lines.iter().all(|l| l.len() <= MAX_LINE);
    let first = lines.first().map(String::as_str).unwrap_or("");
    match Highlighter::for_path(path, first, deadline).filter(|_| fits) {
        Some(mut h) => lines.iter().map(|l| h.line(l)).collect(),
        None => lines.iter().map(|l| escape(l)).collect(),
    }
}

/// A fenced code block's content as HTML for inside `<code>`, when `lang`
/// names a known grammar and the block is within the limits.
pub fn code_block(lang: &str, code: &str, deadline: Deadline) -> Option<String> {
    let syntax = syntax_for_token(lang)?;
    if !within_limits(code) {
        return None;
    }
    let mut h = Highlighter::new(syntax, deadline);
    let mut out = String::with_capacity(code.len() * 2);
    for line in code.lines() {
        out.push_str(&h.line(line));
        out.push('\n');
    }
    Some(out)
}

/// `text` escaped for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_is_highlighted_and_each_line_closes_its_spans() {
        let lines: Vec<String> = [
            "/* a comment",
            "   still <comment> */",
            "fn main() { let x = \"s\"; }",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = file_lines("src/main.rs", &lines, Deadline::start());
        assert_eq!(out.len(), 3);
        for line in &out {
            assert_eq!(
                line.matches("<span").count(),
                line.matches("</span>").count(),
                "{line}"
            );
            assert!(!line.contains('\n'), "{line}");
        }
        assert!(out[1].contains("hl-comment"), "{}", out[1]);
        assert!(out[1].contains("&lt;comment&gt;"), "{}", out[1]);
        assert!(
            out[2].contains("hl-storage") || out[2].contains("hl-keyword"),
            "{}",
            out[2]
        );
        assert!(out[2].contains("hl-string"), "{}", out[2]);
    }

    #[test]
    fn unknown_kinds_and_oversized_text_are_only_escaped() {
        let lines = vec!["<b>x</b>".to_string()];
        assert_eq!(
            file_lines("notes.unknownext", &lines, Deadline::start()),
            ["&lt;b&gt;x&lt;/b&gt;"]
        );
        let long = vec![format!("let x = \"{}\";", "a".repeat(MAX_LINE))];
        let out = file_lines("a.rs", &long, Deadline::start());
        assert!(!out[0].contains("<span"), "{}", &out[0][..80]);
        let expired = Deadline(Instant::now());
        let many: Vec<String> = (0..FREE_LINES + 5)
            .map(|i| format!("fn f{i}() {{}}"))
            .collect();
        let out = file_lines("a.rs", &many, expired);
        assert!(
            out[FREE_LINES - 1].contains("<span"),
            "{}",
            out[FREE_LINES - 1]
        );
        assert_eq!(out[FREE_LINES], format!("fn f{FREE_LINES}() {{}}"));
    }

    #[test]
    fn shebang_and_fence_tokens_pick_a_grammar() {
        let out = file_lines(
            "run",
            &["#!/bin/sh".to_string(), "echo hi".to_string()],
            Deadline::start(),
        );
        assert!(out[1].contains("<span"), "{out:?}");
        assert!(code_block("rust", "let x = 1;\n", Deadline::start()).is_some());
        assert!(code_block("py", "x = 1\n", Deadline::start()).is_some());
        assert!(code_block("nosuchlanguage", "x\n", Deadline::start()).is_none());
        assert!(code_block("", "x\n", Deadline::start()).is_none());
        assert!(css().contains(".hl-comment"), "{}", css());
    }
}
