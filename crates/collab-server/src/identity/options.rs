//! The options of one `authorized_keys` line, as OpenSSH's sshd(8) defines
//! them, and what git-collab-server does with each:
//!
//! - honoured: `from="pattern-list"` (client address patterns: `*` and `?`
//!   wildcards, `!` negation, `addr/len` CIDR; matched against the address,
//!   as OpenSSH does with `UseDNS no`), `expiry-time="YYYYMMDD[HHMM[SS]][Z]"`
//!   (local time unless `Z`), and our own admin mark
//!   `environment="GIT_COLLAB_ROLE=admin"`, and our own
//!   `name="Display Name"` (the name shown for the key on web pages and in
//!   replies, see `display`; printable, no control or bidi characters, at
//!   most [`MAX_NAME_CHARS`] characters, else the line is refused);
//! - honoured because the server never offers what they forbid: `restrict`,
//!   `no-pty`, `no-port-forwarding`, `no-agent-forwarding`,
//!   `no-X11-forwarding`, `no-user-rc`; and accepted because the server
//!   still never offers what they would permit: `pty`, `port-forwarding`,
//!   `agent-forwarding`, `X11-forwarding`, `user-rc`, `no-touch-required`;
//! - refused (the line admits nothing, and the reason is logged): every
//!   other option, among them `command=`, `principals=`, `tunnel=`,
//!   `permitopen=`, `permitlisten=`, any other `environment=`,
//!   `verify-required`, and `cert-authority` (a CA key is never a user key).

use std::net::IpAddr;
use std::str::FromStr as _;

use chrono::{Local, NaiveDate, NaiveDateTime, TimeZone as _, Utc};
use ipnet::IpNet;

/// The authorized_keys option that marks a server admin.
pub const ADMIN_OPTION: &str = "environment=\"GIT_COLLAB_ROLE=admin\"";

/// The honoured options of a line that can be honoured in full.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyOptions {
    /// Marked admin with [`ADMIN_OPTION`].
    pub admin: bool,
    /// `from=`: the client address must match.
    pub from: Option<AddressPatterns>,
    /// `expiry-time=`: unix seconds after which the line admits nothing.
    pub expires_at: Option<i64>,
    /// `name=`: the display name of the key (validated, see [`check_name`]).
    pub name: Option<String>,
}

/// Why a line admits nothing for this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    From,
    Expired,
}

impl KeyOptions {
    /// Parse the options part of a line (`a,b="x,y"`); `Err` names the first
    /// option that cannot be honoured, and then the line admits nothing.
    pub fn parse(options: &str) -> Result<KeyOptions, String> {
        let mut out = KeyOptions::default();
        for option in split_options(options) {
            let (name, value) = match option.split_once('=') {
                Some((n, v)) => (n, Some(unquote(v).ok_or_else(|| bad_quotes(option))?)),
                None => (option, None),
            };
            let lower = name.to_ascii_lowercase();
            match (lower.as_str(), value) {
                ("restrict" | "no-pty" | "no-port-forwarding" | "no-agent-forwarding", None)
                | ("no-x11-forwarding" | "no-user-rc" | "pty" | "port-forwarding", None)
                | ("agent-forwarding" | "x11-forwarding" | "user-rc", None)
                | ("no-touch-required", None) => {}
                ("environment", Some(_)) if option == ADMIN_OPTION => out.admin = true,
                ("from", Some(v)) => {
                    out.from = Some(AddressPatterns::parse(&v).map_err(|e| format!("from=: {e}"))?)
                }
                ("expiry-time", Some(v)) => {
                    out.expires_at =
                        Some(parse_expiry(&v).ok_or_else(|| format!("expiry-time={v:?} is not YYYYMMDD[HHMM[SS]][Z]"))?)
                }
                ("name", Some(v)) => {
                    check_name(&v).map_err(|e| format!("name={v:?}: {e}"))?;
                    out.name = Some(v)
                }
                ("cert-authority", None) => {
                    return Err("a cert-authority line is a CA key, not a user key; certificates are not supported".into())
                }
                _ => {
                    return Err(format!(
                        "option `{name}` cannot be honoured by git-collab-server"
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Whether the line admits a client at `peer` at `now` (unix seconds).
    pub fn admits(&self, peer: IpAddr, now: i64) -> Result<(), Refused> {
        if self.expires_at.is_some_and(|t| now > t) {
            return Err(Refused::Expired);
        }
        if let Some(from) = &self.from {
            if !from.matches(peer) {
                return Err(Refused::From);
            }
        }
        Ok(())
    }
}

/// The longest display name, in characters: long enough for a full name or
/// `user@host`, short enough not to swamp a page or a terminal line.
pub const MAX_NAME_CHARS: usize = 64;

/// Whether `name` may be shown as a display name: not blank, at most
/// [`MAX_NAME_CHARS`] characters, and no control, bidi-override or
/// invisible formatting characters (they would let a name rewrite the
/// terminal or pose as another one on a page).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("the name is empty".into());
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!("longer than {MAX_NAME_CHARS} characters"));
    }
    if let Some(c) = name.chars().find(|&c| !printable(c)) {
        return Err(format!(
            "contains the character U+{:04X}, which is not printable",
            c as u32
        ));
    }
    Ok(())
}

/// Not a control character and not a Unicode format character that
/// reorders or hides text (bidi embeddings, overrides and isolates,
/// zero-width characters, line and paragraph separators, BOM).
fn printable(c: char) -> bool {
    !c.is_control()
        && !matches!(c,
            '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{180E}' | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FEFF}'
            | '\u{FFA0}' | '\u{FFF9}'..='\u{FFFB}')
}

fn bad_quotes(option: &str) -> String {
    format!("option {option:?}: the value must be one double-quoted string")
}

/// `"value"` -> `value` (with `\"` unescaped); `None` if not quoted.
fn unquote(v: &str) -> Option<String> {
    let inner = v.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('"') => out.push('"'),
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => return None,
            },
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// Split `a,b="x,y",c` at commas outside quotes.
pub fn split_options(options: &str) -> impl Iterator<Item = &str> {
    let mut parts = Vec::new();
    let (mut start, mut in_quotes, mut escaped) = (0, false, false);
    for (i, c) in options.char_indices() {
        match c {
            '\\' if in_quotes && !escaped => {
                escaped = true;
                continue;
            }
            '"' if !escaped => in_quotes = !in_quotes,
            ',' if !in_quotes => {
                parts.push(&options[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        escaped = false;
    }
    if start < options.len() {
        parts.push(&options[start..]);
    }
    parts.into_iter().map(str::trim)
}

/// `YYYYMMDD[HHMM[SS]]`, local time, or UTC with a trailing `Z`.
fn parse_expiry(v: &str) -> Option<i64> {
    let (digits, utc) = match v.strip_suffix(['Z', 'z']) {
        Some(d) => (d, true),
        None => (v, false),
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let at: NaiveDateTime = match digits.len() {
        8 => NaiveDate::parse_from_str(digits, "%Y%m%d")
            .ok()?
            .and_hms_opt(0, 0, 0)?,
        12 => NaiveDateTime::parse_from_str(digits, "%Y%m%d%H%M").ok()?,
        14 => NaiveDateTime::parse_from_str(digits, "%Y%m%d%H%M%S").ok()?,
        _ => return None,
    };
    if utc {
        Some(Utc.from_utc_datetime(&at).timestamp())
    } else {
        Some(Local.from_local_datetime(&at).earliest()?.timestamp())
    }
}

/// One `from=` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Net(IpNet),
    /// `*` / `?` wildcards over the address text (lowercase).
    Wildcard(String),
}

/// A `from=` pattern list, as OpenSSH's `match_host_and_ip`: a negated
/// pattern that matches refuses; otherwise any positive match admits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPatterns(Vec<(bool, Pattern)>);

impl AddressPatterns {
    pub fn parse(list: &str) -> Result<AddressPatterns, String> {
        let mut out = Vec::new();
        for raw in list.split(',').map(str::trim) {
            let (negated, p) = match raw.strip_prefix('!') {
                Some(p) => (true, p),
                None => (false, raw),
            };
            if p.is_empty() {
                return Err(format!("empty pattern in {list:?}"));
            }
            let pattern = if p.contains('/') {
                let net = IpNet::from_str(p).map_err(|_| format!("bad CIDR {p:?}"))?;
                // OpenSSH refuses a network with host bits set.
                if net.trunc() != net {
                    return Err(format!("CIDR {p:?} has host bits set"));
                }
                Pattern::Net(net)
            } else if let Ok(ip) = IpAddr::from_str(p) {
                Pattern::Net(IpNet::from(ip))
            } else if p
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'-' | b'*' | b'?'))
            {
                Pattern::Wildcard(p.to_ascii_lowercase())
            } else {
                return Err(format!("bad pattern {p:?}"));
            };
            out.push((negated, pattern));
        }
        Ok(AddressPatterns(out))
    }

    pub fn matches(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        let text = peer.to_string();
        let mut admitted = false;
        for (negated, pattern) in &self.0 {
            let hit = match pattern {
                Pattern::Net(net) => net.contains(&peer),
                Pattern::Wildcard(w) => wildcard_match(w.as_bytes(), text.as_bytes()),
            };
            if hit && *negated {
                return false;
            }
            admitted |= hit;
        }
        admitted
    }
}

/// OpenSSH's `match_pattern`: `*` any run, `?` one character.
fn wildcard_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| wildcard_match(rest, &text[i..])),
        Some((b'?', rest)) => !text.is_empty() && wildcard_match(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && wildcard_match(rest, &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn from_patterns_follow_openssh() {
        let p = AddressPatterns::parse("10.0.0.0/8,!10.1.2.3,192.168.1.*,::1").unwrap();
        assert!(p.matches(ip("10.9.9.9")));
        assert!(!p.matches(ip("10.1.2.3")), "negation wins");
        assert!(p.matches(ip("192.168.1.77")));
        assert!(!p.matches(ip("192.168.2.1")));
        assert!(p.matches(ip("::1")));
        assert!(!p.matches(ip("127.0.0.1")));
        assert!(
            p.matches(ip("::ffff:10.0.0.1")),
            "v4-mapped peers match v4 patterns"
        );
        let only_negated = AddressPatterns::parse("!127.0.0.1").unwrap();
        assert!(
            !only_negated.matches(ip("10.0.0.1")),
            "no positive match admits nothing"
        );
        assert!(
            AddressPatterns::parse("10.0.0.1/8").is_err(),
            "host bits set"
        );
        assert!(AddressPatterns::parse("10.0.0.0/33").is_err());
        assert!(AddressPatterns::parse("a,,b").is_err());
        assert!(AddressPatterns::parse("x y").is_err());
        assert!(AddressPatterns::parse("127.0.0.?")
            .unwrap()
            .matches(ip("127.0.0.1")));
    }

    #[test]
    fn options_are_honoured_or_refused() {
        let o = KeyOptions::parse(&format!(
            "restrict,no-pty,from=\"127.0.0.0/8\",expiry-time=\"20990101Z\",{ADMIN_OPTION}"
        ))
        .unwrap();
        assert!(o.admin && o.from.is_some());
        assert_eq!(o.expires_at, Some(4070908800));
        assert!(o.admits(ip("127.0.0.1"), 0).is_ok());
        assert_eq!(o.admits(ip("10.0.0.1"), 0), Err(Refused::From));
        assert_eq!(o.admits(ip("127.0.0.1"), 4070908801), Err(Refused::Expired));
        assert_eq!(KeyOptions::parse("").unwrap(), KeyOptions::default());
        assert!(
            KeyOptions::parse("NO-PTY").is_ok(),
            "names are case-insensitive"
        );
        for bad in [
            "command=\"echo hi\"",
            "principals=\"a\"",
            "tunnel=\"1\"",
            "permitopen=\"host:22\"",
            "permitlisten=\"8080\"",
            "environment=\"FOO=bar\"",
            "cert-authority",
            "verify-required",
            "no-such-option",
            "from=127.0.0.1",
            "expiry-time=\"2099\"",
            "from=\"10.0.0.1/8\"",
        ] {
            assert!(KeyOptions::parse(bad).is_err(), "{bad} accepted");
        }
        let named = KeyOptions::parse("no-pty,name=\"Build Bot\"").unwrap();
        assert_eq!(named.name.as_deref(), Some("Build Bot"));
        for bad in [
            "name=\"\"",
            "name=\"  \"",
            "name=Bot",
            "name=\"a\u{7}b\"",
            "name=\"a\tb\"",
            "name=\"evil\u{202E}gnp\"",
            "name=\"zero\u{200B}width\"",
        ] {
            assert!(KeyOptions::parse(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("name=\"{}\"", "é".repeat(MAX_NAME_CHARS + 1));
        assert!(KeyOptions::parse(&long).unwrap_err().contains("longer"));
        let err = KeyOptions::parse("no-pty,command=\"x\"").unwrap_err();
        assert!(err.contains("command"), "{err}");
    }
}
