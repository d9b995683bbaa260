//! Turning the merged layers into a `ServerConfig`: each key of the table
//! is read from the layer that won it and converted by its kind, so an
//! error names the key, the value and the layer
//! (`ssh.listen = "nope" from env GIT_COLLAB_SSH__LISTEN: invalid socket address`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail};
use figment::value::Value;
use figment::Figment;
use serde_json::json;

use super::keys::{DefaultValue, Key, Kind, KEYS};
use super::parse::{
    describe, one_line, parse_duration, parse_lease_duration, parse_max_startups, parse_size,
    validate_log_level, whole_number,
};
use super::server_config::{
    DeclaredWebhook, LoadedConfig, MaxStartups, ServerConfig, DEFAULT_MAX_TTL,
};

/// Resolve every key in table order, so a derived default (`repos_dir`)
/// sees the final value of the key it follows (`state_dir`).
///
/// The converted values are collected as JSON under their dotted names and
/// deserialized into `ServerConfig` at the end: the key name is the field
/// path, so no key needs its field spelled out here.
pub(super) fn resolve(figment: &Figment) -> anyhow::Result<LoadedConfig> {
    let mut sources = BTreeMap::new();
    let mut fields = serde_json::Map::new();
    for key in KEYS {
        let value = match given(figment, key.name) {
            Some(given) => {
                sources.insert(key.name.to_string(), given.source.clone());
                given.convert(key.kind)?
            }
            None => {
                sources.insert(key.name.to_string(), "derived".into());
                derived(key, &fields)
            }
        };
        insert_dotted(&mut fields, key.name, value);
    }
    let config: ServerConfig = serde_json::from_value(fields.into())
        .expect("every key converts to its ServerConfig field's type");
    Ok(LoadedConfig {
        config,
        sources,
        secret_files: BTreeMap::new(),
    })
}

/// The winning value of `key` and its layer, if any layer set it.
fn given(figment: &Figment, key: &'static str) -> Option<Given> {
    let value = figment.find_value(key).ok()?;
    let source = figment
        .find_metadata(key)
        .map_or_else(|| "unknown".to_string(), |m| m.name.to_string());
    Some(Given { key, value, source })
}

/// The value of a key no layer set: only keys without a built-in default
/// get here (the defaults layer sets the others).
fn derived(key: &Key, fields: &serde_json::Map<String, serde_json::Value>) -> serde_json::Value {
    match key.default {
        DefaultValue::Given(_) => panic!("the defaults layer sets {}", key.name),
        DefaultValue::Under(base, name) => {
            let base = field(fields, base)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_else(|| panic!("{base} is a path resolved before {}", key.name));
            json!(PathBuf::from(base).join(name))
        }
        DefaultValue::Unset(_) => serde_json::Value::Null,
    }
}

/// `fields["ssh"]["listen"]` for `ssh.listen`.
pub(super) fn field<'a>(
    fields: &'a serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Option<&'a serde_json::Value> {
    match key.split_once('.') {
        None => fields.get(key),
        Some((section, rest)) => field(fields.get(section)?.as_object()?, rest),
    }
}

fn insert_dotted(
    fields: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
    value: serde_json::Value,
) {
    match key.split_once('.') {
        None => {
            fields.insert(key.into(), value);
        }
        Some((section, rest)) => {
            let entry = fields
                .entry(section)
                .or_insert_with(|| serde_json::Map::new().into());
            if let serde_json::Value::Object(inner) = entry {
                insert_dotted(inner, rest, value);
            }
        }
    }
}

/// A value as given, with its layer, for conversion and error messages.
struct Given {
    key: &'static str,
    value: Value,
    source: String,
}

impl Given {
    /// The value as `kind` says, as JSON of its `ServerConfig` field's type.
    fn convert(&self, kind: Kind) -> anyhow::Result<serde_json::Value> {
        Ok(match kind {
            Kind::Text => json!(self.text()?),
            Kind::Path | Kind::Database => json!(self.path()?),
            Kind::SocketAddr => json!(self.socket_addr()?),
            Kind::Size => json!(self.size()?),
            Kind::Bool => json!(self.boolean()?),
            Kind::Count { min, max } => json!(self.count(min, max)?),
            Kind::Duration => json!(self.duration()?),
            Kind::MaxStartups => json!(self.max_startups()?),
            Kind::LeaseSecs { zero } => json!(self.lease_secs_capped(zero.is_some())?),
            Kind::LogLevel => json!(self.log_level()?),
            Kind::OneOf(words) => json!(self.one_of(words)?),
            Kind::AdminKeys => json!(self.admin_keys()?),
            Kind::List => json!(self.string_list()?),
            Kind::ListOf(words) => json!(self.words(words)?),
            Kind::Webhooks => json!(self.declared_webhooks()?),
        })
    }

    /// Values read through `_FILE` are secrets by intent: never echo them.
    fn is_secret(&self) -> bool {
        self.source.starts_with("env ") && self.source.ends_with("_FILE")
    }

    fn error(&self, problem: impl std::fmt::Display) -> anyhow::Error {
        if self.is_secret() {
            anyhow!("{} from {}: {problem}", self.key, self.source)
        } else {
            let shown = serde_json::to_string(&self.value).unwrap_or_else(|_| "?".into());
            anyhow!("{} = {shown} from {}: {problem}", self.key, self.source)
        }
    }

    fn text(&self) -> anyhow::Result<&str> {
        self.value.as_str().ok_or_else(|| {
            self.error(format!(
                "expected a string, found {}",
                describe(&self.value)
            ))
        })
    }

    fn non_empty_text(&self) -> anyhow::Result<&str> {
        let text = self.text()?;
        if text.trim().is_empty() {
            return Err(self.error("must not be empty"));
        }
        Ok(text)
    }

    fn path(&self) -> anyhow::Result<PathBuf> {
        self.non_empty_text().map(PathBuf::from)
    }

    fn socket_addr(&self) -> anyhow::Result<String> {
        let text = self.text()?;
        text.parse::<SocketAddr>().map_err(|_| {
            self.error("invalid socket address (expected IP:PORT, e.g. 0.0.0.0:2222 or [::]:2222)")
        })?;
        Ok(text.to_string())
    }

    fn size(&self) -> anyhow::Result<u64> {
        match &self.value {
            Value::Num(_, num) => {
                whole_number(num).ok_or_else(|| self.error("expected a whole number of bytes"))
            }
            Value::String(_, text) => parse_size(text).map_err(|problem| self.error(problem)),
            other => Err(self.error(format!(
                "expected a number of bytes or a size like \"100MiB\", found {}",
                describe(other)
            ))),
        }
    }

    /// `true`/`false`; from the environment also `1`/`0`, `yes`/`no`.
    fn boolean(&self) -> anyhow::Result<bool> {
        match &self.value {
            Value::Bool(_, b) => Ok(*b),
            Value::String(_, text) => match text.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(self.error("expected true or false")),
            },
            Value::Num(_, num) if num.to_u128() == Some(1) => Ok(true),
            Value::Num(_, num) if num.to_u128() == Some(0) => Ok(false),
            other => Err(self.error(format!("expected true or false, found {}", describe(other)))),
        }
    }

    /// Lease seconds: a whole number, or a string with a unit (`90s`,
    /// `15m`, `2h`, `7d`; a bare number in a string is seconds); 0 allowed.
    fn lease_secs(&self) -> anyhow::Result<u64> {
        match &self.value {
            Value::Num(_, num) => {
                whole_number(num).ok_or_else(|| self.error("expected a whole number of seconds"))
            }
            Value::String(_, text) => {
                parse_lease_duration(text).map_err(|problem| self.error(problem))
            }
            other => Err(self.error(format!(
                "expected seconds or a duration like \"15m\", found {}",
                describe(other)
            ))),
        }
    }

    /// Lease seconds, at most ten years; 0 only where it means something.
    fn lease_secs_capped(&self, zero_allowed: bool) -> anyhow::Result<u64> {
        let secs = self.lease_secs()?;
        if secs == 0 && !zero_allowed {
            return Err(self.error("must be at least 1 second"));
        }
        if secs > DEFAULT_MAX_TTL {
            return Err(self.error(format!("at most {DEFAULT_MAX_TTL} seconds")));
        }
        Ok(secs)
    }

    /// A whole number in `min..=max` (TOML integer, or digits from env).
    fn count(&self, min: u64, max: u64) -> anyhow::Result<u64> {
        let n = match &self.value {
            Value::Num(_, num) => whole_number(num),
            Value::String(_, text) => text.trim().parse::<u64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(self.error(format!("expected a whole number from {min} to {max}"))),
        }
    }

    /// A TOML inline list given as text (`["a", "b"]`), as in the environment.
    fn inline_list(&self, text: &str) -> anyhow::Result<Value> {
        let parsed: toml::Table = toml::from_str(&format!("v = {text}"))
            .map_err(|e| self.error(format!("invalid list: {}", one_line(e.message()))))?;
        Ok(Value::serialize(&parsed["v"])?)
    }

    /// A list of strings: a TOML list, or (from env) a TOML list or a
    /// comma-separated string.
    fn string_list(&self) -> anyhow::Result<Vec<String>> {
        let items = match &self.value {
            Value::Array(_, items) => items.clone(),
            Value::String(_, text) if text.trim_start().starts_with('[') => {
                match self.inline_list(text)? {
                    Value::Array(_, items) => items,
                    _ => return Err(self.error("expected a list")),
                }
            }
            Value::String(_, text) => text
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(Value::from)
                .collect(),
            other => return Err(self.error(format!("expected a list, found {}", describe(other)))),
        };
        items
            .iter()
            .map(|item| {
                item.as_str().map(str::to_string).ok_or_else(|| {
                    self.error(format!("expected strings, found {}", describe(item)))
                })
            })
            .collect()
    }

    /// `[[webhooks.subscriptions]]`: a list of tables (or, from env, the
    /// same as a TOML inline list).
    fn declared_webhooks(&self) -> anyhow::Result<Vec<DeclaredWebhook>> {
        let value = match &self.value {
            Value::String(_, text) => self.inline_list(text)?,
            other => other.clone(),
        };
        let declared: Vec<DeclaredWebhook> = value.deserialize().map_err(|e| {
            self.error(format!(
                "invalid subscription: {}",
                one_line(&e.to_string())
            ))
        })?;
        let mut names = std::collections::BTreeSet::new();
        for hook in &declared {
            let ok_name = !hook.name.is_empty()
                && hook.name.len() <= 64
                && hook
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
            if !ok_name {
                return Err(self.error(format!(
                    "subscription name {:?}: use 1 to 64 of A-Z a-z 0-9 - _",
                    hook.name
                )));
            }
            if !names.insert(hook.name.clone()) {
                return Err(self.error(format!("subscription name {:?} is used twice", hook.name)));
            }
        }
        Ok(declared)
    }

    /// Seconds, or a number with a unit (`500ms`, `10s`, `2m`, `1h`).
    fn duration(&self) -> anyhow::Result<Duration> {
        let parsed = match &self.value {
            Value::Num(_, num) => whole_number(num)
                .map(Duration::from_secs)
                .ok_or_else(|| "expected a whole number of seconds".to_string()),
            Value::String(_, text) => parse_duration(text),
            other => Err(format!(
                "expected seconds or a duration like \"10s\", found {}",
                describe(other)
            )),
        };
        match parsed {
            Ok(d) if d.is_zero() => Err(self.error("must be longer than zero")),
            Ok(d) => Ok(d),
            Err(problem) => Err(self.error(problem)),
        }
    }

    fn max_startups(&self) -> anyhow::Result<MaxStartups> {
        let text = match &self.value {
            // One number: refuse past it, checked like the other limits.
            Value::Num(..) => {
                return self.count(1, 1_000_000).map(|full| MaxStartups {
                    start: full as usize,
                    rate: 100,
                    full: full as usize,
                })
            }
            Value::String(_, text) => text,
            other => {
                return Err(self.error(format!(
                    "expected start:rate:full like \"10:30:100\", found {}",
                    describe(other)
                )))
            }
        };
        parse_max_startups(text).map_err(|problem| self.error(problem))
    }

    fn log_level(&self) -> anyhow::Result<String> {
        let text = self.non_empty_text()?.trim();
        validate_log_level(text).map_err(|problem| self.error(problem))?;
        Ok(text.to_string())
    }

    fn one_of(&self, words: &[&str]) -> anyhow::Result<String> {
        let text = self.text()?;
        if !words.contains(&text) {
            let (last, rest) = words.split_last().expect("a choice of words");
            return Err(self.error(format!("expected {} or {last}", rest.join(", "))));
        }
        Ok(text.to_string())
    }

    /// A non-empty list of distinct words out of `words`, in the given order.
    fn words(&self, words: &[&str]) -> anyhow::Result<Vec<String>> {
        let given = self.string_list()?;
        if given.is_empty() {
            return Err(self.error(format!("must name at least one of {}", words.join(", "))));
        }
        for (i, word) in given.iter().enumerate() {
            if !words.contains(&word.as_str()) {
                return Err(self.error(format!("unknown: {word} (known: {})", words.join(", "))));
            }
            if given[..i].contains(word) {
                return Err(self.error(format!("{word} is named twice")));
            }
        }
        Ok(given)
    }

    /// A list of strings, or one string holding one key per line. Blank
    /// lines and `#` comments are skipped; every other line must be an
    /// OpenSSH public key.
    fn admin_keys(&self) -> anyhow::Result<Vec<String>> {
        let mut entries: Vec<(String, &str)> = Vec::new();
        match &self.value {
            Value::String(_, text) => {
                // An env value may also be a TOML array: ["ssh-ed25519 …", "…"].
                // Errors then show the parsed list, as for a file's.
                if text.trim_start().starts_with('[') {
                    return Given {
                        key: self.key,
                        value: self.inline_list(text)?,
                        source: self.source.clone(),
                    }
                    .admin_keys();
                }
                for (n, line) in text.lines().enumerate() {
                    entries.push((format!("line {}", n + 1), line));
                }
            }
            Value::Array(_, items) => {
                for (i, item) in items.iter().enumerate() {
                    let line = item.as_str().ok_or_else(|| {
                        self.error(format!(
                            "entry {} is {}, expected a string",
                            i + 1,
                            describe(item)
                        ))
                    })?;
                    entries.push((format!("entry {}", i + 1), line));
                }
            }
            other => {
                return Err(self.error(format!(
                    "expected a list of OpenSSH public keys, found {}",
                    describe(other)
                )))
            }
        }
        let mut keys = Vec::new();
        for (position, line) in entries {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = format!("{} {position}", self.key);
            if line.starts_with("-----BEGIN") {
                // Never echo what looks like private key material.
                bail!(
                    "{at} from {}: looks like a private key; give the public key (.pub) line",
                    self.source
                );
            }
            if let Err(problem) = ssh_key::PublicKey::from_openssh(line) {
                if self.is_secret() {
                    bail!(
                        "{at} from {}: not an OpenSSH public key ({problem})",
                        self.source
                    );
                }
                bail!(
                    "{at} = {line:?} from {}: not an OpenSSH public key ({problem})",
                    self.source
                );
            }
            keys.push(line.to_string());
        }
        Ok(keys)
    }
}
