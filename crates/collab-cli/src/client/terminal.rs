//! Text written by other people, made safe to print on a terminal. Titles,
//! bodies, comments, labels, author names, branch names in events, diffs
//! and whatever a server sends back can hold control characters: `ESC[2J`
//! clears the screen, OSC 52 (`ESC]52;…BEL`) writes the reader's clipboard,
//! a lone CR or backspaces overprint what was shown. Every CLI printer
//! passes such text through one of these functions, which replace each
//! control character (Unicode category Cc: C0, DEL and C1) by a visible
//! escape, so it is shown but never acted on:
//!
//! - [`line`]: a one-line field (title, name, label); newline and tab are
//!   escaped too, so a field cannot forge another line of output;
//! - [`text`]: a body (description, comment, diff); newline and tab stay;
//! - [`json`]: serialized JSON; the escapes are JSON's own (`\u001b`), so
//!   the output stays valid JSON and parses to the same values (serde_json
//!   already escapes C0 inside strings, but not DEL or C1).
//!
//! Text-direction and invisible characters (Trojan Source) are shown as
//! escapes too: in a one-line field every one `collab_record::text` refuses
//! in titles and in JSON (as JSON's own escapes), in bodies the bidi
//! embeddings, overrides and isolates. The server refuses them in new titles and bodies; this keeps
//! older records and other servers' replies from reordering what is shown.
//!
//! Only this module decides what is neutralized; printers do not
//! filter on their own. The escaping itself is `collab_record::text`'s,
//! shared with the server's terminal UI.

use std::borrow::Cow;

/// A count with its noun, singular for one: `1 patch`, `2 patches`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A one-line field, with every control character shown as an escape
/// (`\x1b`, `\n`, `\u{9b}`).
pub fn line(s: &str) -> Cow<'_, str> {
    collab_record::text::escape_line(s)
}

/// A multi-line text, with every control character but newline and tab
/// shown as an escape.
pub fn text(s: &str) -> Cow<'_, str> {
    collab_record::text::escape_text(s)
}

/// Serialized JSON with every control character but newline and tab (the
/// layout of pretty-printed JSON) written as a JSON escape (`\u009b`).
/// Inside a JSON string that is the same character, so valid JSON stays
/// valid and means the same; outside strings valid JSON has no control
/// characters but layout.
pub fn json(s: &str) -> Cow<'_, str> {
    collab_record::text::escape_json(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every attack the issue names, and a few more.
    const HOSTILE: &str = "a\x1b[2Jb\x1b]52;c;aGk=\x07c\rd\x08e\u{9b}31mf\u{85}g\x7fh\0i\nj\tk";

    fn has_control(s: &str, allowed: &[char]) -> bool {
        s.chars().any(|c| c.is_control() && !allowed.contains(&c))
    }

    #[test]
    fn lines_escape_every_control_character() {
        let shown = line(HOSTILE);
        assert!(!has_control(&shown, &[]), "{shown:?}");
        assert_eq!(
            shown,
            "a\\x1b[2Jb\\x1b]52;c;aGk=\\x07c\\rd\\x08e\\u{9b}31mf\\u{85}g\\x7fh\\x00i\\nj\\tk"
        );
        assert!(matches!(line("plain ünïcode 🙂"), Cow::Borrowed(_)));
    }

    #[test]
    fn texts_keep_newlines_and_tabs() {
        let shown = text(HOSTILE);
        assert!(!has_control(&shown, &['\n', '\t']), "{shown:?}");
        assert!(shown.ends_with("h\\x00i\nj\tk"), "{shown:?}");
        assert!(shown.contains("c\\rd"), "{shown:?}");
    }

    #[test]
    fn json_stays_valid_and_means_the_same() {
        let value = serde_json::json!({ "title": HOSTILE, "labels": ["\u{9b}x", "\x7f"] });
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        assert!(has_control(&pretty, &['\n']), "serde_json leaves C1 raw");
        let safe = json(&pretty);
        assert!(!has_control(&safe, &['\n', '\t']), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn direction_and_invisible_characters_are_shown_not_obeyed() {
        assert_eq!(line("a\u{202e}b\u{200b}c"), "a\\u{202e}b\\u{200b}c");
        // Bodies keep the joiners and marks prose needs.
        assert_eq!(text("x\u{2066}y \u{200d}\n"), "x\\u{2066}y \u{200d}\n");
        let safe = json("{\"t\":\"a\u{202e}b\"}");
        assert_eq!(safe, "{\"t\":\"a\\u202eb\"}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["t"], "a\u{202e}b");
        // A branch name's zero-width space too, still the same value.
        let safe = json("{\"ref\":\"refs/heads/a\u{200b}b\"}");
        assert_eq!(safe, "{\"ref\":\"refs/heads/a\\u200bb\"}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["ref"], "refs/heads/a\u{200b}b");
    }
}
