//! A new ref's name shows everywhere a ref is shown (the web's branch,
//! tag and log pages, `ref.updated` events, `git collab events`, clients'
//! terminals), so it must say what it is: a push that **creates** a ref
//! whose name holds a control character git lets through (C1, U+0080 to
//! U+009F: git refuses C0 and DEL itself), a bidi control, a direction
//! mark or a zero-width character (Trojan Source, as titles refuse them,
//! `collab_record::text::is_hidden`) is refused whole. Updating or
//! deleting such a ref that already exists (a mirror's upstream may have
//! one) stays possible, so it can be removed; the pages and replies that
//! show one escape it.

use super::check::Refusal;
use super::context::HookContext;
use super::updates::RefUpdate;

/// The first character of `refname` that could make it show something
/// other than what it says.
pub fn hidden_char(refname: &str) -> Option<char> {
    refname
        .chars()
        .find(|&c| c.is_control() || collab_record::text::is_hidden(c))
}

pub fn check(_ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), Refusal> {
    let lines: Vec<String> = updates
        .iter()
        .filter(|u| u.old.is_none())
        .filter_map(|u| {
            let c = hidden_char(&u.refname)?;
            Some(format!(
                "{}: a ref name may not hold U+{:04X} (control, invisible and \
                 text-direction characters make it show something other than what it \
                 says); nothing was changed",
                collab_record::text::escape_line(&u.refname),
                u32::from(c)
            ))
        })
        .collect();
    if lines.is_empty() {
        Ok(())
    } else {
        Err(Refusal(lines))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_and_control_characters_are_found_and_plain_names_pass() {
        for name in [
            "refs/heads/fix\u{202E}txt",
            "refs/heads/a\u{200B}b",
            "refs/tags/v1\u{9b}",
            "refs/heads/\u{2066}x",
        ] {
            assert!(hidden_char(name).is_some(), "{name:?}");
        }
        for name in [
            "refs/heads/main",
            "refs/heads/fix/ümlaut-日本",
            "refs/tags/v1.0",
        ] {
            assert_eq!(hidden_char(name), None, "{name:?}");
        }
    }
}
