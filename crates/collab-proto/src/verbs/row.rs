//! What a row of the verb table is: a [`Verb`], its arguments ([`Arg`]) and
//! flags ([`Flag`]) with their types ([`Kind`], [`Arity`]), the rules
//! between its flags ([`Rule`]), the access it needs ([`Need`], [`Access`]),
//! and its usage line. The rows themselves are `table`'s.

use serde::{Deserialize, Serialize};

/// An access level on a repository. `Ord`: a higher level includes every
/// lower one (gitolite's R < RW < RW+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    /// Read, and post commit checks (`collab-check set`): for CI keys that
    /// must not push.
    Checks,
    Write,
    Rewind,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Checks => "checks",
            Access::Write => "write",
            Access::Rewind => "rewind",
        }
    }
}

/// Who may run a verb. The server decides access from this and nothing
/// else: a handler asks for [`Need::level`] of its row, never a level of
/// its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Any authenticated caller, even one governance closes out.
    Anyone,
    /// This level on the repository named by the verb's `repo` argument.
    Repo(Access),
    /// A level on the repository that depends on one argument: `raised`
    /// when `arg` is given (and, with `value`, given as that value), else
    /// `base`. `text` is how `help` says it.
    RepoBy {
        base: Access,
        raised: Access,
        arg: &'static str,
        value: Option<&'static str>,
        text: &'static str,
    },
    /// At least `level` on the repository to run at all; some of its work
    /// needs more, decided where that work is (a push's ref updates).
    /// `text` is how `help` says it.
    RepoAtLeast { level: Access, text: &'static str },
    /// Server administrators only. An administrator has rewind on every
    /// repository, so a verb of this kind that names one asks rewind on it
    /// (which also tells an absent repository apart).
    Admin,
    /// A rule of its own, in words; its handler enforces it (creating a
    /// repository, hooks over a glob, events filtered per repository).
    Rule(&'static str),
}

impl Need {
    /// How `help` and the docs say it.
    pub fn describe(self) -> &'static str {
        match self {
            Need::Anyone => "none",
            Need::Repo(access) => access.as_str(),
            Need::RepoBy { text, .. } | Need::RepoAtLeast { text, .. } => text,
            Need::Admin => "admin",
            Need::Rule(text) => text,
        }
    }

    /// The level this need asks on the named repository, given which
    /// arguments a call has (`given(name)`: the value of the argument
    /// `name`, if the call has it); `None` for a need that is not a level
    /// on one repository (anyone, a rule of its own).
    pub fn level<'v>(self, given: impl Fn(&str) -> Option<&'v str>) -> Option<Access> {
        match self {
            Need::Repo(level) | Need::RepoAtLeast { level, .. } => Some(level),
            Need::RepoBy {
                base,
                raised,
                arg,
                value,
                ..
            } => {
                let raises = match (given(arg), value) {
                    (Some(v), Some(wanted)) => v == wanted,
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                Some(if raises { raised } else { base })
            }
            Need::Admin => Some(Access::Rewind),
            Need::Anyone | Need::Rule(_) => None,
        }
    }

    /// The least level on the repository that may run the verb at all:
    /// [`Need::level`] with no argument raising it.
    pub fn least(self) -> Option<Access> {
        match self {
            Need::RepoBy { base, .. } => Some(base),
            other => other.level(|_| None),
        }
    }
}

/// The type of an argument's value: what the parser checks, what the docs
/// and the MCP schema say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A repository path (`team/app`, `app.git`).
    Repo,
    /// A glob over repository paths (`team/*`).
    RepoGlob,
    /// An issue or patch id, or a prefix of at least 4 hex digits.
    Id,
    /// Free text, one argument (a title, a note, a description).
    Text,
    /// One word: a branch, tag, file name, label, pattern, cursor, URL, id.
    Word,
    /// Decimal digits, `min..=max`.
    Int { min: i64, max: i64 },
    /// One of these words.
    Choice(&'static [&'static str]),
}

impl Kind {
    /// Whether `value` is of this kind, as far as the table can tell (the
    /// handlers check the rest: label syntax, cursors, patterns).
    pub fn accepts(self, value: &str) -> bool {
        match self {
            Kind::Int { min, max } => int_in(value, min, max).is_some(),
            Kind::Choice(words) => words.contains(&value),
            _ => !value.is_empty(),
        }
    }

    /// The JSON schema type (for the MCP tool list).
    pub fn json_type(self) -> &'static str {
        match self {
            Kind::Int { .. } => "integer",
            _ => "string",
        }
    }
}

/// Decimal digits only (no sign, no spaces), at most 18 of them, within
/// `min..=max`.
pub fn int_in(value: &str, min: i64, max: i64) -> Option<i64> {
    if value.is_empty() || value.len() > 18 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = value.parse().ok()?;
    (min..=max).contains(&n).then_some(n)
}

/// How many values a positional argument takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    One,
    Optional,
    /// Zero or more, at most this many.
    Many(usize),
}

/// A positional argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arg {
    /// Its name: in usage lines (`'<repo>'`), in [`Invocation::arg`], and
    /// as the MCP input property (`repo`, `issue`, `patch`).
    pub name: &'static str,
    pub kind: Kind,
    pub arity: Arity,
    pub doc: &'static str,
}

/// A `--flag` after the positional arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    pub long: &'static str,
    /// The value's placeholder in usage lines and its kind; `None` for a
    /// switch.
    pub value: Option<(&'static str, Kind)>,
    /// May be given more than once.
    pub repeat: bool,
    /// Must be given.
    pub required: bool,
    pub doc: &'static str,
}

impl Flag {
    /// The MCP input property: the long name without `--`, `-` → `_`.
    pub fn property(&self) -> String {
        self.long.trim_start_matches("--").replace('-', "_")
    }
}

/// A rule between flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Exactly one of these.
    OneOf(&'static [&'static str]),
    /// At most one of these.
    AtMostOne(&'static [&'static str]),
    /// At least one of these.
    AtLeastOne(&'static [&'static str]),
    /// The first only together with the second.
    Requires(&'static str, &'static str),
}

/// One SSH exec verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verb {
    /// The command word: `collab-issue`, `git-upload-pack`, `help`.
    pub family: &'static str,
    /// The subcommand word; empty for one-word verbs.
    pub action: &'static str,
    /// Other spellings of the command words (`git upload-pack`,
    /// `collab-help`).
    pub aliases: &'static [&'static str],
    pub args: &'static [Arg],
    pub flags: &'static [Flag],
    pub rules: &'static [Rule],
    pub need: Need,
    /// What it does, one line.
    pub help: &'static str,
}

impl Verb {
    /// `collab-issue open`, `collab-whoami`.
    pub fn name(&self) -> String {
        if self.action.is_empty() {
            self.family.to_string()
        } else {
            format!("{} {}", self.family, self.action)
        }
    }

    /// The MCP tool name, `<family>_<action>` without `collab-`:
    /// `issue_open`, `lease_next`, `whoami`, `repo_mirror_add`.
    pub fn tool_name(&self) -> String {
        let family = self.family.trim_start_matches("collab-").replace('-', "_");
        if self.action.is_empty() {
            family
        } else {
            format!("{family}_{}", self.action.replace(['-', ' '], "_"))
        }
    }

    /// The flag named `long`, if this verb takes it.
    pub fn flag(&self, long: &str) -> Option<&'static Flag> {
        self.flags.iter().find(|f| f.long == long)
    }

    /// The positional argument named `name`, if this verb takes it.
    pub fn arg(&self, name: &str) -> Option<&'static Arg> {
        self.args.iter().find(|a| a.name == name)
    }

    /// Whether the first positional argument is the repository the access
    /// check is made on.
    pub fn names_repo(&self) -> bool {
        self.args
            .first()
            .is_some_and(|a| a.kind == Kind::Repo && a.arity == Arity::One)
    }

    /// The usage line: `collab-issue open '<repo>' --title T [--body
    /// B|--body-stdin] [--label L]...`.
    pub fn usage(&self) -> String {
        let mut out = self.name();
        let words = self.usage_words();
        if !words.is_empty() {
            out.push(' ');
            out.push_str(&words);
        }
        out
    }

    /// The usage line after the command words.
    fn usage_words(&self) -> String {
        let mut parts: Vec<String> = self.args.iter().map(arg_usage).collect();
        let mut shown: Vec<&str> = Vec::new();
        // Flags grouped by a rule are shown together, where the first of
        // them stands.
        for flag in self.flags {
            if shown.contains(&flag.long) {
                continue;
            }
            let group = self.rules.iter().find_map(|rule| match *rule {
                Rule::OneOf(g) if g.contains(&flag.long) => Some((g, true)),
                Rule::AtMostOne(g) if g.contains(&flag.long) => Some((g, false)),
                _ => None,
            });
            match group {
                Some((group, required)) => {
                    let alternatives: Vec<String> = group
                        .iter()
                        .filter_map(|long| self.flag(long))
                        .map(flag_usage)
                        .collect();
                    shown.extend(group.iter().copied());
                    let text = alternatives.join("|");
                    parts.push(if required { text } else { format!("[{text}]") });
                }
                None => {
                    shown.push(flag.long);
                    let text = flag_usage(flag);
                    parts.push(match (flag.required, flag.repeat) {
                        (true, false) => text,
                        (true, true) => format!("{text}..."),
                        (false, false) => format!("[{text}]"),
                        (false, true) => format!("[{text}]..."),
                    });
                }
            }
        }
        parts.join(" ")
    }
}

fn arg_usage(arg: &Arg) -> String {
    let word = match arg.kind {
        Kind::Choice(words) => words.join("|"),
        Kind::Int { .. } => format!("<{}>", arg.name),
        _ => format!("'<{}>'", arg.name),
    };
    match arg.arity {
        Arity::One => word,
        Arity::Optional => format!("[{word}]"),
        Arity::Many(_) => format!("[{word}...]"),
    }
}

fn flag_usage(flag: &Flag) -> String {
    match flag.value {
        Some((placeholder, _)) => format!("{} {placeholder}", flag.long),
        None => flag.long.to_string(),
    }
}
