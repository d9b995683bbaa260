//! Characters that make text say something other than what it shows, and
//! the one rule about them for every title-like field (issue, patch and
//! lease titles, labels, branch and tag names, descriptions) and for bodies.
//!
//! Trojan Source (CVE-2021-42574): bidirectional overrides, embeddings and
//! isolates reorder what a reviewer sees; zero-width characters make two
//! different strings look alike. Neither has a use in a one-line title or a
//! name, so such fields refuse them all ([`check_line`]). Bodies refuse the
//! overrides, embeddings and isolates ([`check_body`]), which can reorder a
//! whole paragraph, but keep the marks (LRM, RLM, ALM) and zero-width
//! joiners that right-to-left prose and emoji need: those cannot move text.
//!
//! The store, the record (clone-side writes) and the server call these;
//! nothing else decides which characters are refused.

/// Bidirectional embeddings and overrides (U+202A–U+202E) and isolates
/// (U+2066–U+2069): they reorder the text that follows them.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Every character a title or name refuses: the bidi controls, the
/// direction marks (U+200E, U+200F, U+061C) and the zero-width characters
/// (U+200B–U+200D, U+2060, U+FEFF).
pub fn is_hidden(c: char) -> bool {
    is_bidi_control(c)
        || matches!(
            c,
            '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{200B}'
                ..='\u{200D}' | '\u{2060}' | '\u{FEFF}'
        )
}

/// The character's Unicode name, for messages.
fn name(c: char) -> &'static str {
    match c {
        '\u{202A}' => "LEFT-TO-RIGHT EMBEDDING",
        '\u{202B}' => "RIGHT-TO-LEFT EMBEDDING",
        '\u{202C}' => "POP DIRECTIONAL FORMATTING",
        '\u{202D}' => "LEFT-TO-RIGHT OVERRIDE",
        '\u{202E}' => "RIGHT-TO-LEFT OVERRIDE",
        '\u{2066}' => "LEFT-TO-RIGHT ISOLATE",
        '\u{2067}' => "RIGHT-TO-LEFT ISOLATE",
        '\u{2068}' => "FIRST STRONG ISOLATE",
        '\u{2069}' => "POP DIRECTIONAL ISOLATE",
        '\u{200E}' => "LEFT-TO-RIGHT MARK",
        '\u{200F}' => "RIGHT-TO-LEFT MARK",
        '\u{061C}' => "ARABIC LETTER MARK",
        '\u{200B}' => "ZERO WIDTH SPACE",
        '\u{200C}' => "ZERO WIDTH NON-JOINER",
        '\u{200D}' => "ZERO WIDTH JOINER",
        '\u{2060}' => "WORD JOINER",
        '\u{FEFF}' => "ZERO WIDTH NO-BREAK SPACE",
        _ => "invisible character",
    }
}

fn refusal(what: &str, c: char) -> String {
    format!(
        "{what} contains U+{:04X} {}: invisible and text-direction characters could make it \
         show something other than what it says; remove it",
        u32::from(c),
        name(c)
    )
}

/// A title or name (`what` names it in the message): none of
/// [`is_hidden`]'s characters. `Err` is the one-line refusal.
pub fn check_line(what: &str, s: &str) -> Result<(), String> {
    match s.chars().find(|&c| is_hidden(c)) {
        Some(c) => Err(refusal(what, c)),
        None => Ok(()),
    }
}

/// A body or comment: no bidi embedding, override or isolate.
pub fn check_body(what: &str, s: &str) -> Result<(), String> {
    match s.chars().find(|&c| is_bidi_control(c)) {
        Some(c) => Err(refusal(what, c)),
        None => Ok(()),
    }
}

/// A one-line field made safe to show on a terminal: every control
/// character (Unicode Cc: C0, DEL, C1; newline and tab too) and every
/// [`is_hidden`] character becomes a visible escape (`\x1b`, `\n`,
/// `\u{9b}`), so it is shown but never acted on. The CLI's printers and
/// the server's terminal UI both use it.
pub fn escape_line(s: &str) -> std::borrow::Cow<'_, str> {
    escape(s, &[], is_hidden, false)
}

/// [`escape_line`] for a multi-line text (a body, a comment, a diff):
/// newline and tab stay, and only the [`is_bidi_control`] characters are
/// escaped besides the control characters.
pub fn escape_text(s: &str) -> std::borrow::Cow<'_, str> {
    escape(s, &['\n', '\t'], is_bidi_control, false)
}

/// Serialized JSON with every control character but newline and tab, and
/// every [`is_hidden`] character (a branch name in an event may hold one),
/// written as a JSON escape (`\u009b`, `\u202e`): inside a string that is
/// the same character, so valid JSON stays valid and means the same.
pub fn escape_json(s: &str) -> std::borrow::Cow<'_, str> {
    escape(s, &['\n', '\t'], is_hidden, true)
}

fn escape<'a>(
    s: &'a str,
    keep: &[char],
    also: fn(char) -> bool,
    json: bool,
) -> std::borrow::Cow<'a, str> {
    use std::fmt::Write as _;
    let unsafe_char = |c: char| (c.is_control() && !keep.contains(&c)) || also(c);
    if !s.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if !unsafe_char(c) {
            out.push(c);
            continue;
        }
        let code = u32::from(c);
        let _ = match c {
            _ if json => write!(out, "\\u{code:04x}"),
            '\n' => write!(out, "\\n"),
            '\t' => write!(out, "\\t"),
            '\r' => write!(out, "\\r"),
            _ if code < 0x80 => write!(out, "\\x{code:02x}"),
            _ => write!(out, "\\u{{{code:x}}}"),
        };
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_refuse_every_hidden_character_and_bodies_the_reordering_ones() {
        let hidden = [
            '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}', '\u{200B}', '\u{200C}',
            '\u{200D}', '\u{2060}', '\u{FEFF}',
        ];
        for c in hidden {
            let s = format!("fix{c}it");
            let err = check_line("title", &s).unwrap_err();
            assert!(
                err.starts_with(&format!("title contains U+{:04X} ", u32::from(c)))
                    && !err.contains('\n'),
                "{err}"
            );
            assert_eq!(check_body("body", &s).is_err(), is_bidi_control(c), "{c:?}");
        }
        assert_eq!(
            check_line("title", "access \u{202E}nimda\u{2066}").unwrap_err(),
            "title contains U+202E RIGHT-TO-LEFT OVERRIDE: invisible and text-direction \
             characters could make it show something other than what it says; remove it"
        );
        // Ordinary text of any script passes, and so do the marks and
        // joiners right-to-left prose and emoji need in a body.
        for ok in ["Fix the parser", "ünïcode 🙂", "עברית", "العربية", "日本語"]
        {
            assert_eq!(check_line("title", ok), Ok(()));
        }
        assert_eq!(check_body("body", "שלום\u{200F} 👩\u{200D}💻\n"), Ok(()));
    }
}
