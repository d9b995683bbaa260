//! Push options (`git push -o key=value`) as the hooks read them, and the
//! `pre-receive` check that bounds them before any other check or the
//! `proc-receive` hook (`review`) looks at one.
//!
//! git passes the options through untouched: it refuses a newline on the
//! client, but a CR, an ESC or any other control byte, a 60 KB value or
//! hundreds of options reach the hooks. They are input to `fencing`
//! (`collab-lease=`) and `review` (`title=`, `description=`, `patch=`,
//! `issue=`), whose answers reach the pusher's terminal and whose records
//! reach events and webhooks. So a push whose options break these rules is
//! refused whole, with a line that names the option by its position and
//! key, never echoing its value (GitHub 2026, push-option values carried
//! into internal headers and log lines):
//!
//! - at most [`MAX_OPTIONS`] options, each at most [`MAX_OPTION_BYTES`];
//! - UTF-8, one line of text: no control characters (C0, DEL, C1);
//! - the ids this server reads (`patch=`, `issue=`) are 4 to 40 hex
//!   digits.
//!
//! Each option is one `key=value`, split at its first `=`: a value that
//! itself reads `key=value` (`title=fix patch=1234`) stays the value.

use std::ffi::OsString;

use super::check::Refusal;
use super::context::HookContext;
use super::updates::RefUpdate;

/// Most push options one push may carry.
pub const MAX_OPTIONS: usize = 64;
/// Largest push option, key and value, in bytes.
pub const MAX_OPTION_BYTES: usize = 4096;
/// The options whose value is an object id (or a unique prefix of one).
const ID_OPTIONS: &[&str] = &["patch", "issue"];

/// The push options git passed the hook (`GIT_PUSH_OPTION_COUNT`,
/// `GIT_PUSH_OPTION_<n>`), as bytes: none when the client sent none.
fn raw_from_env() -> Vec<OsString> {
    let count: usize = std::env::var("GIT_PUSH_OPTION_COUNT")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (0..count)
        .filter_map(|i| std::env::var_os(format!("GIT_PUSH_OPTION_{i}")))
        .collect()
}

/// The push options as text. An option that is not UTF-8 is left out:
/// the [`check`] refuses the push before anything reads them.
pub fn from_env() -> Vec<String> {
    raw_from_env()
        .into_iter()
        .filter_map(|o| o.into_string().ok())
        .collect()
}

/// The pipeline check: the options as a whole, then each.
pub fn check(_ctx: &HookContext, _updates: &[RefUpdate]) -> Result<(), Refusal> {
    judge(&raw_from_env()).map_err(Refusal::one)
}

/// The refusal line for `options`, if any breaks the rules.
pub fn judge(options: &[OsString]) -> Result<(), String> {
    if options.len() > MAX_OPTIONS {
        return Err(format!(
            "{} push options: at most {MAX_OPTIONS} per push",
            options.len()
        ));
    }
    for (i, option) in options.iter().enumerate() {
        let n = i + 1;
        let Some(text) = option.to_str() else {
            return Err(format!("push option {n} is not UTF-8"));
        };
        let key = option_key(text);
        if text.len() > MAX_OPTION_BYTES {
            return Err(format!(
                "push option {n} ({key}) is {} bytes: at most {MAX_OPTION_BYTES}",
                text.len()
            ));
        }
        if text.chars().any(char::is_control) {
            return Err(format!(
                "push option {n} ({key}) holds control characters: a push option is one line of text"
            ));
        }
        if let Some((name, value)) = text.split_once('=') {
            if ID_OPTIONS.contains(&name) && !is_id(value) {
                return Err(format!(
                    "push option {n} ({name}=): expected an id of 4 to 40 hex digits"
                ));
            }
        }
    }
    Ok(())
}

/// The option's key as it may be shown: its text up to `=`, when that is
/// a short plain word; otherwise a placeholder.
fn option_key(text: &str) -> String {
    let key = text.split_once('=').map_or(text, |(k, _)| k);
    let plain = !key.is_empty()
        && key.len() <= 40
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if plain {
        format!("{key}=")
    } else {
        "its key is not a plain word".to_string()
    }
}

fn is_id(value: &str) -> bool {
    (4..=40).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(options: &[&str]) -> Result<(), String> {
        let options: Vec<OsString> = options.iter().map(OsString::from).collect();
        judge(&options)
    }

    #[test]
    fn ordinary_options_pass() {
        assert_eq!(
            judged(&[
                "title=Fix the parser (again)",
                "description=Tabs\u{a0}and ünïcode are text",
                "patch=4f2a91c0",
                "issue=ABCDEF0123",
                "collab-lease=4f2a91c0:3",
                "ci.skip",
                "title=fix patch=1234",
            ]),
            Ok(())
        );
    }

    #[test]
    fn control_characters_long_values_and_bad_ids_are_refused_without_their_value() {
        for (option, expect) in [
            (
                "title=a\rb",
                "push option 1 (title=) holds control characters",
            ),
            (
                "title=\u{1b}[2Jx",
                "push option 1 (title=) holds control characters",
            ),
            (
                "x\u{1b}=1",
                "push option 1 (its key is not a plain word) holds control",
            ),
            (
                "description=\u{9b}31m",
                "push option 1 (description=) holds control",
            ),
            ("patch=\u{1b}[31m", "push option 1 (patch=) holds control"),
            ("patch=abc", "push option 1 (patch=): expected an id"),
            ("issue=dead beef", "push option 1 (issue=): expected an id"),
        ] {
            let line = judged(&[option]).unwrap_err();
            assert!(line.starts_with(expect), "{option:?}: {line}");
            assert!(!line.contains('\u{1b}') && !line.contains('\r'), "{line:?}");
        }
        let long = format!("title={}", "x".repeat(MAX_OPTION_BYTES));
        let line = judged(&["ci.skip", &long]).unwrap_err();
        assert_eq!(
            line,
            format!("push option 2 (title=) is 4102 bytes: at most {MAX_OPTION_BYTES}")
        );
        let many = ["ci.skip"; MAX_OPTIONS + 1];
        assert!(judged(&many).unwrap_err().contains("at most 64 per push"));
        assert_eq!(judged(&["ci.skip"; MAX_OPTIONS]), Ok(()));
    }

    #[test]
    fn an_option_that_is_not_utf8_is_refused() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(b"title=\xff".to_vec());
        assert_eq!(
            judge(&[bad]).unwrap_err(),
            "push option 1 is not UTF-8".to_string()
        );
    }
}
