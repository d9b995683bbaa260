//! Questions asked of the whole verb table: a row by its command words
//! ([`find`]), a row's repository access ([`repo_access`]), whether a word
//! is a family ([`is_family`]), and `help`'s list ([`help_groups`]).

use serde::Serialize;

use super::row::{Access, Need, Verb};
use super::table::VERBS;

/// The verb named by its command words (`collab-issue`, `open`).
pub fn find(family: &str, action: &str) -> Option<&'static Verb> {
    VERBS
        .iter()
        .find(|v| v.family == family && v.action == action)
}

/// The repository access the row `name` asks for (`collab-issue open` →
/// Write). Panics for a row that is not in the table or whose need is not
/// a level on its repository: such a verb's handler decides access itself.
pub fn repo_access(name: &str) -> Access {
    let row = VERBS
        .iter()
        .find(|v| v.name() == name)
        .unwrap_or_else(|| panic!("{name} is not in the verb table"));
    match row.need {
        Need::Repo(access) => access,
        other => panic!("{name} needs {other:?}, not a repository level"),
    }
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
    let mut groups: Vec<(&'static str, Need, Vec<&'static Verb>)> = Vec::new();
    for verb in VERBS.iter().filter(|v| shown(v)) {
        match groups
            .iter_mut()
            .find(|(family, need, _)| *family == verb.family && *need == verb.need)
        {
            Some((_, _, verbs)) => verbs.push(verb),
            None => groups.push((verb.family, verb.need, vec![verb])),
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
            HelpGroup {
                verb,
                access: need.describe(),
            }
        })
        .collect()
}
