//! How the client writes a remote command: [`Call`] starts from a row of
//! the table and quotes every value, and refuses (panics on) an argument or
//! flag the row does not have, so the client cannot send a command the
//! server's parser would not take. Its tests parse what it writes back
//! through [`super::parse`].

use super::lookup::find;
use super::row::Verb;
use crate::tokens::shell_quote;

/// A remote command line under construction.
#[derive(Debug, Clone)]
pub struct Call {
    verb: &'static Verb,
    line: String,
}

impl Call {
    /// `family action`, which must be a row of the table.
    pub fn new(family: &str, action: &str) -> Call {
        let verb = find(family, action).unwrap_or_else(|| panic!("no verb {family} {action}"));
        Call {
            verb,
            line: verb.name(),
        }
    }

    /// The next positional argument, quoted.
    pub fn arg(mut self, value: &str) -> Call {
        self.line.push(' ');
        self.line.push_str(&shell_quote(value));
        self
    }

    /// A flag with a value, quoted.
    pub fn flag(mut self, long: &str, value: &str) -> Call {
        let flag = self.known(long);
        assert!(flag.value.is_some(), "{long} is a switch");
        self.line.push(' ');
        self.line.push_str(long);
        self.line.push(' ');
        self.line.push_str(&shell_quote(value));
        self
    }

    /// A flag with a number, written bare (`--ttl 300`).
    pub fn int(mut self, long: &str, value: impl std::fmt::Display) -> Call {
        let flag = self.known(long);
        assert!(flag.value.is_some(), "{long} is a switch");
        self.line.push_str(&format!(" {long} {value}"));
        self
    }

    /// A flag whose value is one of its kind's words, written bare
    /// (`--state open`).
    pub fn choice(mut self, long: &str, value: &str) -> Call {
        let flag = self.known(long);
        match flag.value {
            Some((_, super::row::Kind::Choice(words))) if words.contains(&value) => {}
            _ => panic!("{long} does not take {value:?}"),
        }
        self.line.push_str(&format!(" {long} {value}"));
        self
    }

    /// A flag with a value when there is one.
    pub fn flag_opt(self, long: &str, value: Option<&str>) -> Call {
        match value {
            Some(v) => self.flag(long, v),
            None => self,
        }
    }

    /// A switch (`--body-stdin`), when `on`.
    pub fn switch(mut self, long: &str, on: bool) -> Call {
        let flag = self.known(long);
        assert!(flag.value.is_none(), "{long} takes a value");
        if on {
            self.line.push(' ');
            self.line.push_str(long);
        }
        self
    }

    /// Apply `f` when `cond` holds (for optional parts in a chain).
    pub fn when(self, cond: bool, f: impl FnOnce(Call) -> Call) -> Call {
        if cond {
            f(self)
        } else {
            self
        }
    }

    /// The row this call is for.
    pub fn verb(&self) -> &'static Verb {
        self.verb
    }

    /// The command line, ready for `ssh host <line>`.
    pub fn line(self) -> String {
        self.line
    }

    fn known(&self, long: &str) -> &'static super::row::Flag {
        self.verb
            .flag(long)
            .unwrap_or_else(|| panic!("{} has no flag {long}", self.verb.name()))
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}
