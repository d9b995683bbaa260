//! The name shown for a principal: the one function the web pages and the
//! SSH replies use to turn a principal (a governed name or a key's
//! `SHA256:` fingerprint) into something a person can read.
//!
//! In order:
//! 1. the governance principal name the key is enrolled as (or the
//!    principal itself when it already is a governed name);
//! 2. the key's `name="…"` option in `authorized_keys`, else its comment
//!    (`alice@laptop`) when that is printable and short;
//! 3. for an author, the name recorded in the event (a signed event's
//!    author name), unless it is only the fingerprint again;
//! 4. the short fingerprint, `SHA256:GlgxX2Cw…`.
//!
//! Names are resolved when a page or reply is made, not stored: editing a
//! key's comment or `name=` (or governance) renames the key everywhere at
//! once, and the records keep the full fingerprint. Full fingerprints stay
//! in `--json` output and in `title` attributes on web pages.
//!
//! SSH replies carry both: [`annotate`] adds `display_name` beside every
//! person object (`{"principal", "name", …}`), `holder_name` beside every
//! `holder` and `by_name` beside every `by`, and changes no other field.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::app::App;
use crate::governance::GovState;
use crate::identity::options::check_name;
use crate::identity::KeyLines;

const PREFIX: &str = "SHA256:";

/// Base64 characters of the fingerprint kept in the short form.
const SHORT_CHARS: usize = 8;

/// Whether `principal` is a key fingerprint rather than a governed name.
pub fn is_fingerprint(principal: &str) -> bool {
    principal.starts_with(PREFIX)
}

/// Whether a key's comment, `name=` or a recorded author name reads like
/// a fingerprint (`SHA256:…`, in any case, after any blank): such a name
/// could pass for another key's short fingerprint, so it is never shown.
fn poses_as_fingerprint(name: &str) -> bool {
    let name = name.trim_start();
    name.get(..PREFIX.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(PREFIX))
}

/// `SHA256:GlgxX2Cw…` for a fingerprint; anything else unchanged.
pub fn short_fingerprint(principal: &str) -> String {
    match principal.strip_prefix(PREFIX) {
        Some(rest) if rest.chars().count() > SHORT_CHARS => {
            let head: String = rest.chars().take(SHORT_CHARS).collect();
            format!("{PREFIX}{head}\u{2026}")
        }
        _ => principal.to_string(),
    }
}

/// The current authorized_keys and governance, read once for a page or a
/// reply.
pub struct DisplayNames {
    keys: Arc<HashMap<String, KeyLines>>,
    governance: Arc<GovState>,
}

impl DisplayNames {
    /// The names as of now (authorized_keys is re-read if it changed).
    pub fn of(app: &App) -> DisplayNames {
        DisplayNames::new(app.authorized_keys.current(), app.governance.state())
    }

    pub fn new(keys: Arc<HashMap<String, KeyLines>>, governance: Arc<GovState>) -> Self {
        DisplayNames { keys, governance }
    }

    /// The governed name of a fingerprint, or the principal itself when it
    /// is a governed name already.
    fn governed(&self, principal: &str) -> Option<String> {
        if let GovState::Active(conf) = self.governance.as_ref() {
            if let Some(name) = conf.principal_for_fingerprint(principal) {
                return Some(name.to_string());
            }
        }
        (!is_fingerprint(principal) && !principal.is_empty()).then(|| principal.to_string())
    }

    /// The key's `name=`, else its comment, from the first line that has
    /// one. Lines refused for an option give no name (they admit nothing);
    /// an expired line still names its key (old records keep a name).
    fn listed_name(&self, fingerprint: &str) -> Option<String> {
        let lines = &self.keys.get(fingerprint)?.usable;
        lines
            .iter()
            .filter_map(|k| k.options.name.as_deref())
            .find(|n| !poses_as_fingerprint(n))
            .or_else(|| {
                lines
                    .iter()
                    .map(|k| k.comment.as_str())
                    .find(|c| check_name(c).is_ok() && !poses_as_fingerprint(c))
            })
            .map(str::to_string)
    }

    /// A name the server knows for `principal`: governed, else listed.
    fn known(&self, principal: &str) -> Option<String> {
        self.governed(principal)
            .or_else(|| self.listed_name(principal))
    }

    /// The display name of a principal (a lease holder, a merger).
    pub fn name(&self, principal: &str) -> String {
        self.known(principal)
            .unwrap_or_else(|| short_fingerprint(principal))
    }

    /// The display name of an author recorded as `principal` with the name
    /// `recorded`.
    pub fn author(&self, principal: &str, recorded: &str) -> String {
        if principal.is_empty() && !recorded.is_empty() {
            return self.name(recorded);
        }
        self.known(principal)
            .or_else(|| {
                (recorded != principal
                    && !poses_as_fingerprint(recorded)
                    && check_name(recorded).is_ok())
                .then(|| recorded.to_string())
            })
            .unwrap_or_else(|| short_fingerprint(principal))
    }
}

/// Add the display names to a JSON reply, in place (see the module doc):
/// only new `*_name` fields; what was there stays as it was.
pub fn annotate(value: &mut Value, names: &DisplayNames) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(|v| annotate(v, names)),
        Value::Object(map) => {
            map.values_mut().for_each(|v| annotate(v, names));
            if let Some(Value::String(principal)) = map.get("principal") {
                let recorded = map.get("name").and_then(Value::as_str).unwrap_or("");
                let name = names.author(principal, recorded);
                map.entry("display_name").or_insert(Value::String(name));
            }
            for (field, named) in [("holder", "holder_name"), ("by", "by_name")] {
                if let Some(Value::String(who)) = map.get(field) {
                    let name = names.name(who);
                    map.entry(named).or_insert(Value::String(name));
                }
            }
        }
        _ => {}
    }
}

/// [`annotate`] a reply line that is a JSON object; other lines (`error:
/// …`) unchanged.
pub fn annotate_line(line: String, names: &DisplayNames) -> String {
    if !line.starts_with('{') {
        return line;
    }
    match serde_json::from_str::<Value>(&line) {
        Ok(mut value) => {
            annotate(&mut value, names);
            serde_json::to_string(&value).unwrap_or(line)
        }
        Err(_) => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::parse_authorized_keys;

    const ALICE: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICtQ/RYc3WhAmSKhGYkTZDTD1K+ATpny91Oy682hu+Dg";
    const BOT: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEWIL8kgygbb8laAYTQlOZR/YsSIPEOvlnETrSyB5uIs";

    fn names(text: &str) -> (DisplayNames, Vec<String>) {
        let (keys, bad) = parse_authorized_keys(text);
        assert!(bad.is_empty(), "{bad:?}");
        let mut fps: Vec<(usize, String)> = keys
            .iter()
            .map(|(fp, l)| (l.usable[0].line, fp.clone()))
            .collect();
        fps.sort();
        let fps = fps.into_iter().map(|(_, fp)| fp).collect();
        (
            DisplayNames::new(Arc::new(keys), Arc::new(GovState::Inactive)),
            fps,
        )
    }

    #[test]
    fn short_form_keeps_eight_characters() {
        assert_eq!(
            short_fingerprint("SHA256:GlgxX2CwAbCdEfGhIjKlMnOpQrStUvWxYz0123456789a"),
            "SHA256:GlgxX2Cw\u{2026}"
        );
        assert_eq!(short_fingerprint("alice"), "alice");
        assert_eq!(short_fingerprint("SHA256:abc"), "SHA256:abc");
    }

    #[test]
    fn name_option_then_comment_then_short_fingerprint() {
        let (n, fps) = names(&format!(
            "{ALICE} alice@laptop\nno-pty,name=\"Build Bot\" {BOT} ci@host\n"
        ));
        assert_eq!(n.name(&fps[0]), "alice@laptop");
        assert_eq!(n.name(&fps[1]), "Build Bot", "name= wins over the comment");
        assert_eq!(n.author(&fps[0], &fps[0]), "alice@laptop");
        let unknown = "SHA256:GlgxX2CwAbCdEfGhIjKlMnOpQrStUvWxYz0123456789a";
        assert_eq!(n.name(unknown), "SHA256:GlgxX2Cw\u{2026}");
        assert_eq!(n.author(unknown, "Alice Liddell"), "Alice Liddell");
        assert_eq!(n.author(unknown, unknown), "SHA256:GlgxX2Cw\u{2026}");
        assert_eq!(n.name("alice"), "alice", "a governed principal stays");

        let mut reply = serde_json::json!({
            "holder": fps[1],
            "author": {"principal": fps[0], "name": fps[0], "key": null},
            "leases": [{"holder": unknown}],
            "by": "alice",
        });
        annotate(&mut reply, &n);
        assert_eq!(reply["holder"], fps[1].as_str(), "the principal stays");
        assert_eq!(reply["holder_name"], "Build Bot");
        assert_eq!(reply["author"]["name"], fps[0].as_str());
        assert_eq!(reply["author"]["display_name"], "alice@laptop");
        assert_eq!(reply["leases"][0]["holder_name"], "SHA256:GlgxX2Cw\u{2026}");
        assert_eq!(reply["by_name"], "alice");

        let (n, fps) = names(&format!("{ALICE}\n{BOT} evil\u{202E}txt\n"));
        assert!(n.name(&fps[0]).ends_with('\u{2026}'), "no comment");
        assert!(
            n.name(&fps[1]).ends_with('\u{2026}'),
            "a comment with a bidi override is not shown"
        );
    }

    #[test]
    fn a_name_that_poses_as_a_fingerprint_is_never_shown() {
        let (n, fps) = names(&format!(
            "{ALICE} SHA256:GlgxX2Cw\u{2026}\nname=\"sha256:Zz\" {BOT} ci@host\n"
        ));
        let alice_short = short_fingerprint(&fps[0]);
        assert_eq!(n.name(&fps[0]), alice_short, "the comment is not shown");
        assert_eq!(n.name(&fps[1]), "ci@host", "the name= is not shown");
        let unknown = "SHA256:GlgxX2CwAbCdEfGhIjKlMnOpQrStUvWxYz0123456789a";
        assert_eq!(
            n.author(unknown, " SHA256:other\u{2026}"),
            short_fingerprint(unknown)
        );
    }
}
