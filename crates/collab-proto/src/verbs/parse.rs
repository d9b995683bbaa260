//! Parsing a tokenized exec command against the table: find the row, then
//! fill its positional arguments and flags and check their shape. A call
//! the table refuses gets its family's usage line, or, for a word the
//! verb has no place for, a line naming that word; what only a handler
//! can check (label syntax, cursors) is the handler's.

use super::row::{Arity, Kind, Rule, Verb};
use super::table::VERBS;

/// A command line the table accepts: the row and the values given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation<'t> {
    pub verb: &'static Verb,
    args: Vec<(&'static str, &'t str)>,
    flags: Vec<(&'static str, Option<&'t str>)>,
}

/// Why the table refused a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No verb is spelled like this.
    Unknown,
    /// A known family, with the wrong action or arguments: its usage line.
    Usage(String),
    /// A known verb given a word it has no place for: most often a value
    /// with spaces that ssh split into words, or a misspelt option.
    Unexpected { verb: &'static Verb, token: String },
}

/// The most of a stray word a refusal repeats.
const SHOWN_TOKEN: usize = 64;

impl Refusal {
    /// The one `error: …` line the caller gets.
    pub fn line(&self) -> String {
        match self {
            Refusal::Unknown => "error: unknown command".to_string(),
            Refusal::Usage(usage) => format!("error: usage: {usage}"),
            Refusal::Unexpected { verb, token } => unexpected_line(verb, token),
        }
    }
}

/// `error: unexpected argument 'tests' for collab-check set; ssh splits
/// …; usage: …`: the word, why it likely came, and the verb's own usage.
fn unexpected_line(verb: &Verb, token: &str) -> String {
    let name = verb.name();
    let usage = verb.usage();
    // The tokenizer already refused control characters; the length is
    // the caller's, so only a prefix is repeated.
    let shown: String = match token.char_indices().nth(SHOWN_TOKEN) {
        Some((end, _)) => format!("{}…", &token[..end]),
        None => token.to_string(),
    };
    if token.starts_with("--") {
        return format!("error: unknown option '{shown}' for {name}; usage: {usage}");
    }
    match quoting_example(verb) {
        Some(example) => format!(
            "error: unexpected argument '{shown}' for {name}; ssh splits the command at spaces, \
             so quote a value with spaces twice: {example}; usage: {usage}"
        ),
        None => format!("error: unexpected argument '{shown}' for {name}; usage: {usage}"),
    }
}

/// How a value with spaces is typed for this verb in a local shell: its
/// first free-text flag (`--description "'two words'"`), else its free-text
/// argument; `None` when it takes no free text.
fn quoting_example(verb: &Verb) -> Option<String> {
    const TWICE: &str = "\"'two words'\"";
    let flag = verb
        .flags
        .iter()
        .find(|f| matches!(f.value, Some((_, Kind::Text))));
    match flag {
        Some(flag) => Some(format!("{} {TWICE}", flag.long)),
        None => verb
            .args
            .iter()
            .any(|a| a.kind == Kind::Text)
            .then(|| TWICE.to_string()),
    }
}

/// Why `fill` refused the words after a verb.
enum Miss<'t> {
    /// A value of the wrong shape, a missing one, a broken rule.
    Shape,
    /// A word with no place left.
    Unexpected(&'t str),
}

impl<'t> Invocation<'t> {
    /// The value of a required positional argument. Panics if the row has
    /// no such argument: that is a bug in the handler, not in the input.
    pub fn arg(&self, name: &str) -> &'t str {
        self.opt_arg(name).unwrap_or_else(|| {
            panic!("{}: no argument {name} given", self.verb.name());
        })
    }

    /// The value of an optional positional argument.
    pub fn opt_arg(&self, name: &str) -> Option<&'t str> {
        self.check_arg(name);
        self.args.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// Every value of a repeatable positional argument.
    pub fn args(&self, name: &str) -> Vec<&'t str> {
        self.check_arg(name);
        self.args
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .collect()
    }

    /// Every positional value given, in order: what the MCP tool test
    /// turns back into arguments.
    pub fn given_args(&self) -> &[(&'static str, &'t str)] {
        &self.args
    }

    /// Every flag given, in order (a switch with `None`).
    pub fn given_flags(&self) -> &[(&'static str, Option<&'t str>)] {
        &self.flags
    }

    /// The value of a flag given once.
    pub fn flag(&self, long: &str) -> Option<&'t str> {
        self.check_flag(long);
        self.flags
            .iter()
            .find(|(l, _)| *l == long)
            .and_then(|(_, v)| *v)
    }

    /// Every value of a repeatable flag, in order.
    pub fn flags(&self, long: &str) -> Vec<&'t str> {
        self.check_flag(long);
        self.flags
            .iter()
            .filter(|(l, _)| *l == long)
            .filter_map(|(_, v)| *v)
            .collect()
    }

    /// Whether a flag (or switch) was given.
    pub fn has(&self, long: &str) -> bool {
        self.check_flag(long);
        self.flags.iter().any(|(l, _)| *l == long)
    }

    /// A numeric flag's value (already checked against its kind's range).
    pub fn int(&self, long: &str) -> Option<i64> {
        self.flag(long)
            .map(|v| v.parse().expect("checked by the table"))
    }

    /// A numeric positional argument's value.
    pub fn int_arg(&self, name: &str) -> i64 {
        self.arg(name).parse().expect("checked by the table")
    }

    fn check_arg(&self, name: &str) {
        assert!(
            self.verb.arg(name).is_some(),
            "{} has no argument {name}",
            self.verb.name()
        );
    }

    fn check_flag(&self, long: &str) {
        assert!(
            self.verb.flag(long).is_some(),
            "{} has no flag {long}",
            self.verb.name()
        );
    }
}

/// How many tokens `alias` (`git upload-pack`) takes, if `tokens` start
/// with its words.
fn spelled(alias: &str, tokens: &[String]) -> Option<usize> {
    let words: Vec<&str> = alias.split(' ').collect();
    (tokens.len() >= words.len() && words.iter().zip(tokens).all(|(w, t)| w == t))
        .then_some(words.len())
}

/// The row `tokens` names, and how many tokens its command words took.
fn lookup(tokens: &[String]) -> Option<(&'static Verb, usize)> {
    let first = tokens.first()?.as_str();
    for verb in VERBS {
        if verb.family == first {
            if verb.action.is_empty() {
                return Some((verb, 1));
            }
            // An action may be two words (`collab-repo mirror add`).
            if let Some(taken) = spelled(verb.action, &tokens[1..]) {
                return Some((verb, 1 + taken));
            }
        }
        for alias in verb.aliases {
            if let Some(taken) = spelled(alias, tokens) {
                return Some((verb, taken));
            }
        }
    }
    None
}

/// The family whose usage a refused line gets: its first word, or the
/// two-word alias it starts with (`git upload-pack` → `git-upload-pack`).
fn family_of(tokens: &[String]) -> Option<&'static str> {
    let first = tokens.first()?.as_str();
    if let Some(verb) = VERBS.iter().find(|v| v.family == first) {
        return Some(verb.family);
    }
    VERBS.iter().find_map(|v| {
        v.aliases
            .iter()
            .find_map(|alias| spelled(alias, tokens).filter(|&n| n > 1).map(|_| v.family))
    })
}

/// Every usage line of a family, joined by ` | `: `collab-lease acquire
/// '<repo>' '<issue>' … | collab-lease renew …`.
pub fn family_usage(family: &str) -> String {
    let lines: Vec<String> = VERBS
        .iter()
        .filter(|v| v.family == family)
        .map(Verb::usage)
        .collect();
    lines.join(" | ")
}

/// Parse tokens (from `tokens::shell_tokens`) against the table.
pub fn parse(tokens: &[String]) -> Result<Invocation<'_>, Refusal> {
    let refused = || match family_of(tokens) {
        Some(family) => Refusal::Usage(family_usage(family)),
        None => Refusal::Unknown,
    };
    let (verb, taken) = lookup(tokens).ok_or_else(refused)?;
    fill(verb, &tokens[taken..]).map_err(|miss| match miss {
        Miss::Shape => refused(),
        Miss::Unexpected(token) => Refusal::Unexpected {
            verb,
            token: token.to_string(),
        },
    })
}

/// Fill a row's slots from the tokens after its command words.
fn fill<'t>(verb: &'static Verb, rest: &'t [String]) -> Result<Invocation<'t>, Miss<'t>> {
    let mut inv = Invocation {
        verb,
        args: Vec::new(),
        flags: Vec::new(),
    };
    let mut rest = rest.iter().map(String::as_str).peekable();
    // Required positional arguments come first, whatever they look like: a
    // repository may be called `--x`; its handler decides.
    for arg in verb.args.iter().filter(|a| a.arity == Arity::One) {
        let value = rest.next().ok_or(Miss::Shape)?;
        if !arg.kind.accepts(value) {
            return Err(Miss::Shape);
        }
        inv.args.push((arg.name, value));
    }
    // Then flags, and optional or repeated positional arguments, in any
    // order.
    let mut slots = verb.args.iter().filter(|a| a.arity != Arity::One);
    let mut slot = slots.next();
    let mut in_slot = 0usize;
    while let Some(token) = rest.next() {
        if let Some(flag) = token.starts_with("--").then(|| verb.flag(token)).flatten() {
            if !flag.repeat && inv.flags.iter().any(|(l, _)| *l == flag.long) {
                return Err(Miss::Shape);
            }
            let value = match flag.value {
                Some((_, kind)) => {
                    let value = rest.next().ok_or(Miss::Shape)?;
                    if !kind.accepts(value) {
                        return Err(Miss::Shape);
                    }
                    Some(value)
                }
                None => None,
            };
            inv.flags.push((flag.long, value));
            continue;
        }
        // A positional value: free text may look like anything; other
        // kinds may not look like an option.
        let Some(arg) = slot else {
            return Err(Miss::Unexpected(token));
        };
        if token.starts_with("--") && arg.kind != Kind::Text {
            return Err(Miss::Unexpected(token));
        }
        if token.starts_with('-') && arg.kind != Kind::Text {
            return Err(Miss::Shape);
        }
        if !arg.kind.accepts(token) {
            return Err(Miss::Shape);
        }
        inv.args.push((arg.name, token));
        in_slot += 1;
        match arg.arity {
            Arity::Many(max) if in_slot < max => {}
            Arity::Many(_) | Arity::Optional => {
                slot = slots.next();
                in_slot = 0;
            }
            Arity::One => unreachable!("required arguments were taken first"),
        }
    }
    if check_rules(verb, &inv) {
        Ok(inv)
    } else {
        Err(Miss::Shape)
    }
}

fn check_rules(verb: &Verb, inv: &Invocation<'_>) -> bool {
    let given = |long: &str| inv.flags.iter().any(|(l, _)| *l == long);
    let count = |group: &[&str]| group.iter().filter(|l| given(l)).count();
    verb.flags.iter().all(|f| !f.required || given(f.long))
        && verb.rules.iter().all(|rule| match *rule {
            Rule::OneOf(group) => count(group) == 1,
            Rule::AtMostOne(group) => count(group) <= 1,
            Rule::AtLeastOne(group) => count(group) >= 1,
            Rule::Requires(flag, needs) => !given(flag) || given(needs),
        })
}
