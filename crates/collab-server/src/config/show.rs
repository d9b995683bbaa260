//! `config show`: every key's effective value and the layer that set it,
//! as aligned text or as JSON.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use super::keys::{self, Key, Kind, KEYS};
use super::resolve;
use super::server_config::{LoadedConfig, MaxStartups};

/// `10s`, `2m`, `1h`, `500ms`: the shortest exact form.
pub fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    if s >= 3600 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// Whole seconds as a JSON integer, otherwise fractional.
fn json_secs(d: Duration) -> serde_json::Value {
    if d.subsec_nanos() == 0 {
        json!(d.as_secs())
    } else {
        json!(d.as_secs_f64())
    }
}

/// `104857600 (100 MiB)`: bytes, with the exact binary unit when there is one.
fn fmt_bytes(bytes: u64) -> String {
    let human = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")]
        .iter()
        .find(|(shift, _)| bytes >= 1 << shift && bytes.is_multiple_of(1 << shift))
        .map(|(shift, unit)| format!(" ({} {unit})", bytes >> shift))
        .unwrap_or_default();
    format!("{bytes}{human}")
}

/// The configuration as JSON objects, one member per key (`ssh.listen` is
/// `["ssh"]["listen"]`), for reading fields by key name.
type Fields = serde_json::Map<String, serde_json::Value>;

/// The field of `key`, read back as its Rust type.
fn field_as<T: serde::de::DeserializeOwned>(fields: &Fields, key: &Key) -> T {
    let value = resolve::field(fields, key.name)
        .unwrap_or_else(|| unreachable!("{} is a ServerConfig field", key.name));
    T::deserialize(value).unwrap_or_else(|e| unreachable!("{}: {e}", key.name))
}

/// `ssh-ed25519 SHA256:… alice`: an admin key as `config show` prints it.
fn fingerprint(line: &str) -> String {
    match ssh_key::PublicKey::from_openssh(line) {
        Ok(key) => format!(
            "{} {} {}",
            key.algorithm(),
            key.fingerprint(ssh_key::HashAlg::Sha256),
            key.comment()
        )
        .trim_end()
        .to_string(),
        Err(_) => line.to_string(),
    }
}

impl LoadedConfig {
    /// The effective value of `key` as `config show` prints it (paths as
    /// strings, `collab_db` resolved, sizes in bytes).
    pub fn value(&self, key: &str) -> serde_json::Value {
        let key = keys::find(key).unwrap_or_else(|| unreachable!("not a configuration key: {key}"));
        self.shown(key, &self.fields())
    }

    fn fields(&self) -> Fields {
        match serde_json::to_value(&self.config) {
            Ok(serde_json::Value::Object(fields)) => fields,
            other => unreachable!("ServerConfig serializes to an object: {other:?}"),
        }
    }

    fn shown(&self, key: &Key, fields: &Fields) -> serde_json::Value {
        match key.kind {
            // Where the database is: a derived `None` is `{repos_dir}/collab.db`,
            // and a URL's password is masked.
            Kind::Database => json!(self.config.collab_db_location().display()),
            Kind::Duration => json_secs(field_as(fields, key)),
            Kind::MaxStartups => json!(field_as::<MaxStartups>(fields, key).to_string()),
            _ => field_as(fields, key),
        }
    }

    fn source(&self, key: &str) -> &str {
        self.sources.get(key).map_or("default", String::as_str)
    }

    /// What `config show` prints instead of a value read through `_FILE`.
    fn redacted(&self, key: &str) -> Option<String> {
        self.secret_files
            .get(key)
            .map(|path| format!("<redacted: from file {}>", path.display()))
    }

    /// `{"key": {"value": …, "source": "…"}}` for every key; a value read
    /// through `_FILE` is replaced by `"<redacted: from file PATH>"`.
    pub fn to_json(&self) -> serde_json::Value {
        let fields = self.fields();
        let map: serde_json::Map<String, serde_json::Value> = KEYS
            .iter()
            .map(|key| {
                let value = match self.redacted(key.name) {
                    Some(redacted) => serde_json::Value::String(redacted),
                    None => self.shown(key, &fields),
                };
                let entry = json!({"value": value, "source": self.source(key.name)});
                (key.name.to_string(), entry)
            })
            .collect();
        serde_json::Value::Object(map)
    }

    /// Aligned `key  value  source` lines. Admin keys are shown one per
    /// line as algorithm, fingerprint and comment; `--json` has them whole.
    pub fn to_text(&self) -> String {
        let fields = self.fields();
        let rows: Vec<(&str, Vec<String>, &str)> = KEYS
            .iter()
            .map(|key| {
                (
                    key.name,
                    self.display_lines(key, &fields),
                    self.source(key.name),
                )
            })
            .collect();
        let key_width = KEYS.iter().map(|k| k.name.len()).max().unwrap_or(0);
        let value_width = rows
            .iter()
            .flat_map(|(_, lines, _)| lines.iter().map(|l| l.chars().count()))
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for (key, lines, source) in rows {
            for (i, line) in lines.iter().enumerate() {
                let (key, source) = if i == 0 { (key, source) } else { ("", "") };
                let row = format!("{key:key_width$}  {line:value_width$}  {source}");
                let _ = writeln!(out, "{}", row.trim_end());
            }
        }
        out
    }

    fn display_lines(&self, key: &Key, fields: &Fields) -> Vec<String> {
        if let Some(redacted) = self.redacted(key.name) {
            return vec![redacted];
        }
        match key.kind {
            Kind::AdminKeys => {
                let lines: Vec<String> = field_as(fields, key);
                if lines.is_empty() {
                    return vec!["(none)".into()];
                }
                lines.iter().map(|line| fingerprint(line)).collect()
            }
            Kind::LeaseSecs {
                zero: Some(meaning),
            } if field_as::<u64>(fields, key) == 0 => {
                vec![format!("0 ({meaning})")]
            }
            // One word a line, as admin keys: a list of names is long.
            Kind::ListOf(_) => field_as(fields, key),
            Kind::Size => vec![fmt_bytes(field_as(fields, key))],
            Kind::Duration => vec![fmt_duration(field_as(fields, key))],
            _ => match self.shown(key, fields) {
                serde_json::Value::String(s) => vec![s],
                serde_json::Value::Null => vec!["(none)".into()],
                other => vec![other.to_string()],
            },
        }
    }
}
