//! Questions asked of the whole verb table: a row by its command words
//! ([`find`]), a row by its name ([`named`]) and the level it asks ([`level`]), whether a word
//! is a family ([`is_family`]), and `help`'s list ([`help_groups`]).

use serde::Serialize;

use super::row::{Access, Verb};
use super::table::VERBS;

/// The verb named by its command words (`collab-issue`, `open`).
pub fn find(family: &str, action: &str) -> Option<&'static Verb> {
    VERBS
        .iter()
        .find(|v| v.family == family && v.action == action)
}

/// The row named `name` (`collab-issue open`, `collab-repo mirror add`,
/// `git-upload-pack`), as a typed command's name says it; `None` for a
/// name that is no row.
pub fn named(name: &str) -> Option<&'static Verb> {
    let (family, action) = name.split_once(' ').unwrap_or((name, ""));
    find(family, action)
}

/// The level the row `name` (a typed command's name: `collab-lease
/// break`) asks on the repository it names; `given(arg)` is the call's
/// value of the row's argument `arg`, for a row whose level depends on one
/// (`collab-repo describe`). The server's handlers take their level from
/// here, never a level of their own. A name that is no row, or a row whose
/// need is not a level on one repository, gets rewind: refused to all but
/// the repository's owners rather than let through (the server's parser
/// makes only commands that name their own row).
pub fn level<'v>(name: &str, given: impl Fn(&str) -> Option<&'v str>) -> Access {
    named(name)
        .and_then(|row| row.need.level(given))
        .unwrap_or(Access::Rewind)
}

/// Whether `word` is a family's command word.
pub fn is_family(word: &str) -> bool {
    VERBS.iter().any(|v| v.family == word)
}

/// One line of `help`: verbs of one family that need the same access.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HelpGroup {
    /// `collab-issue show|list|ready '<repo>' ...`, or a verb's whole
    /// usage line when it stands alone.
    pub verb: String,
    pub access: &'static str,
}

/// `help`'s list: the verbs `shown` keeps, grouped by family and access in
/// table order.
pub fn help_groups(shown: impl Fn(&Verb) -> bool) -> Vec<HelpGroup> {
    // Grouped by how the need reads: two settings verbs ask the same
    // levels of different arguments.
    let mut groups: Vec<(&'static str, &'static str, Vec<&'static Verb>)> = Vec::new();
    for verb in VERBS.iter().filter(|v| shown(v)) {
        let need = verb.need.describe();
        match groups
            .iter_mut()
            .find(|(family, text, _)| *family == verb.family && *text == need)
        {
            Some((_, _, verbs)) => verbs.push(verb),
            None => groups.push((verb.family, need, vec![verb])),
        }
    }
    groups
        .into_iter()
        .map(|(family, need, verbs)| {
            let verb = match verbs.as_slice() {
                [one] => one.usage(),
                many => {
                    let actions: Vec<&str> = many.iter().map(|v| v.action).collect();
                    let rest = if many.iter().all(|v| v.names_repo()) {
                        " '<repo>' ..."
                    } else {
                        " ..."
                    };
                    format!("{family} {}{rest}", actions.join("|"))
                }
            };
            HelpGroup { verb, access: need }
        })
        .collect()
}
