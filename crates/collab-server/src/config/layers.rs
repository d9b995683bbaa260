//! The configuration layers as figment providers, each named after where
//! it came from (`default`, `file /etc/git-collab/server.toml`,
//! `env GIT_COLLAB_SSH__LISTEN`, `flag --ssh-listen`): figment merges them
//! and remembers which one set each key, which `config show` prints and
//! every error names.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _};
use figment::value::{Dict, Map, Value};
use figment::{Metadata, Profile, Provider};

use super::keys::{self, DefaultValue, KEYS};
use super::parse::{one_line, parse_size};
use super::server_config::{env_name, flag_name, CONFIG_ENV, ENV_PREFIX, MAX_SECRET_FILE_BYTES};

/// Configuration flags shared by every subcommand that needs the
/// configuration. Every field is optional: an unset flag does not override
/// lower layers. Flag names mirror the keys (`ssh.listen` -> `--ssh-listen`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigFlags {
    /// Configuration file (TOML). Default: $GIT_COLLAB_CONFIG, else
    /// /etc/git-collab/server.toml when it exists.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// State directory [default: /var/lib/git-collab].
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Bare repositories [default: {state_dir}/repos].
    #[arg(long, global = true, value_name = "DIR")]
    pub repos_dir: Option<PathBuf>,
    /// Server database [default: {repos_dir}/collab.db].
    #[arg(long, global = true, value_name = "PATH")]
    pub collab_db: Option<PathBuf>,
    /// Title of the web UI [default: git-collab].
    #[arg(long, global = true, value_name = "TEXT")]
    pub site_title: Option<String>,
    /// Largest release artifact, in bytes or with a unit (100MiB, 5M)
    /// [default: 100MiB].
    #[arg(long, global = true, value_name = "BYTES", value_parser = parse_size)]
    pub max_release_size: Option<u64>,
    /// A push to a missing repository creates it, for callers who may
    /// create it [default: false].
    #[arg(long, global = true, value_name = "BOOL")]
    pub push_to_create: Option<bool>,
    /// Largest issue body or comment, in bytes or with a unit (256KiB)
    /// [default: 256KiB].
    #[arg(long, global = true, value_name = "BYTES", value_parser = parse_size)]
    pub max_issue_body: Option<u64>,
    /// SSH listen address [default: 0.0.0.0:2222].
    #[arg(long, global = true, value_name = "ADDR")]
    pub ssh_listen: Option<String>,
    /// Accept ssh-rsa (SHA-1) user signatures [default: false].
    #[arg(long, global = true, value_name = "BOOL")]
    pub ssh_allow_sha1_rsa: Option<bool>,
    /// Also serve RSA and ECDSA host keys [default: false].
    #[arg(long, global = true, value_name = "BOOL")]
    pub ssh_legacy_host_keys: Option<bool>,
    /// SSH host key, generated on first start [default: {state_dir}/ssh_host_ed25519_key].
    #[arg(long, global = true, value_name = "PATH")]
    pub ssh_host_key: Option<PathBuf>,
    /// Admitted keys, re-read when it changes [default: {state_dir}/authorized_keys].
    #[arg(long, global = true, value_name = "PATH")]
    pub ssh_authorized_keys: Option<PathBuf>,
    /// HTTP listen address [default: 0.0.0.0:8080].
    #[arg(long, global = true, value_name = "ADDR")]
    pub http_listen: Option<String>,
    /// Log level or filter, e.g. debug or info,russh=warn [default: info].
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log line format [default: text].
    #[arg(long, global = true, value_name = "text|json")]
    pub log_format: Option<String>,
    /// Longest one lease tenure may last, renewals included, in seconds or
    /// with a unit (90s, 15m, 2h, 7d); 0 = unlimited [default: 0].
    #[arg(long, global = true, value_name = "DURATION")]
    pub leases_max_lifetime: Option<String>,
    /// After a lease ends by expiry, nobody else may acquire the issue for
    /// this long; 0 = no delay [default: 0].
    #[arg(long, global = true, value_name = "DURATION")]
    pub leases_lock_delay: Option<String>,
    /// Longest lease --ttl accepted [default: 3650d].
    #[arg(long, global = true, value_name = "DURATION")]
    pub leases_max_ttl: Option<String>,
}

/// One configuration layer: a figment provider whose name is the source
/// `config show` prints (`env GIT_COLLAB_SSH__LISTEN`).
pub(super) struct Layer {
    pub(super) name: String,
    values: Dict,
}

impl Layer {
    pub(super) fn new(name: String, values: Dict) -> Self {
        Layer { name, values }
    }

    fn single(name: String, key: &str, value: Value) -> Self {
        let mut values = Dict::new();
        insert_dotted(&mut values, key, value);
        Layer { name, values }
    }
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.values.clone()))
    }
}

fn insert_dotted(dict: &mut Dict, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            dict.insert(key.into(), value);
        }
        Some((section, rest)) => {
            let entry = dict
                .entry(section.into())
                .or_insert_with(|| Value::from(Dict::new()));
            if let Value::Dict(_, inner) = entry {
                insert_dotted(inner, rest, value);
            }
        }
    }
}

/// The built-in defaults, as the layer named `default`. Keys without one
/// (derived from another key's final value) are absent, so they resolve
/// after every layer has had its say.
pub(super) fn defaults_layer() -> Layer {
    let mut values = Dict::new();
    for key in KEYS {
        if let DefaultValue::Given(text) = key.default {
            insert_dotted(&mut values, key.name, Value::from(text));
        }
    }
    Layer::new("default".into(), values)
}

/// Which file to read: `--config`, else `$GIT_COLLAB_CONFIG` (empty means
/// unset), else the system file when it exists. A named file must exist.
pub(super) fn config_file(
    flags: &ConfigFlags,
    env: &BTreeMap<String, OsString>,
    system_file: &Path,
) -> anyhow::Result<Option<PathBuf>> {
    let (path, named_by) = if let Some(path) = &flags.config {
        (path.clone(), "flag --config")
    } else if let Some(path) = env.get(CONFIG_ENV).filter(|v| !v.is_empty()) {
        (PathBuf::from(path), "env GIT_COLLAB_CONFIG")
    } else if system_file.exists() {
        return Ok(Some(system_file.to_path_buf()));
    } else {
        return Ok(None);
    };
    if !path.is_file() {
        bail!(
            "config file {} from {named_by}: {}",
            path.display(),
            if path.exists() {
                "not a regular file"
            } else {
                "no such file"
            }
        );
    }
    Ok(Some(path))
}

/// Parse the TOML file, rejecting unknown keys, into a layer.
pub(super) fn file_layer(path: &Path) -> anyhow::Result<Layer> {
    let name = format!("file {}", path.display());
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("config file {}: cannot read", path.display()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| {
        // toml's Display spans several lines with a source excerpt; keep one.
        let at = e
            .span()
            .map(|span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!(" line {line} column {column}")
            })
            .unwrap_or_default();
        anyhow!(
            "config file {}{at}: invalid TOML: {}",
            path.display(),
            one_line(e.message())
        )
    })?;
    check_file_keys(&table, &name)?;
    let values = match Value::serialize(&table)? {
        Value::Dict(_, dict) => dict,
        _ => unreachable!("a TOML table serializes to a dict"),
    };
    Ok(Layer::new(name, values))
}

fn check_file_keys(table: &toml::Table, source: &str) -> anyhow::Result<()> {
    let unknown = |key: &str| {
        let known: Vec<&str> = KEYS.iter().map(|key| key.name).collect();
        anyhow!(
            "{key} from {source}: unknown key (known keys: {})",
            known.join(", ")
        )
    };
    for (name, value) in table {
        if keys::is_section(name) {
            let toml::Value::Table(section) = value else {
                bail!("{name} = {value} from {source}: expected a table ([{name}])");
            };
            for inner in section.keys() {
                let key = format!("{name}.{inner}");
                if keys::find(&key).is_none() {
                    return Err(unknown(&key));
                }
            }
        } else if keys::find(name).is_none() {
            return Err(unknown(name));
        }
    }
    Ok(())
}

/// One layer per `GIT_COLLAB_<KEY>` or `GIT_COLLAB_<KEY>_FILE` variable whose
/// key is known; every other `GIT_COLLAB_*` variable is left to the client.
/// Values are taken verbatim (no TOML-ish parsing), so `12345` stays a string.
/// A layer read through `_FILE` comes with its key and the file's path.
#[allow(clippy::type_complexity)]
pub(super) fn env_layers(
    env: &BTreeMap<String, OsString>,
) -> anyhow::Result<Vec<(Layer, Option<(&'static str, PathBuf)>)>> {
    let mut layers = Vec::new();
    for (name, raw) in env {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let rest = rest.to_ascii_lowercase();
        let (key, from_file) = match rest.strip_suffix("_file") {
            Some(stem) => (stem.replace("__", "."), true),
            None => (rest.replace("__", "."), false),
        };
        let Some(key) = keys::find(&key).map(|key| key.name) else {
            continue;
        };
        let source = format!("env {name}");
        let (text, file) = if from_file {
            let direct = env_name(key);
            if env.contains_key(&direct) {
                bail!("{key} from {source}: {direct} is set too; set only one of them");
            }
            let path = PathBuf::from(raw);
            let contents = read_secret_file(&path)
                .with_context(|| format!("{key} from {source}: cannot read {}", path.display()))?;
            // Secret files usually end with a newline that is not part of the value.
            let text = contents.trim_end_matches(['\n', '\r']).to_string();
            (text, Some((key, path)))
        } else {
            let text = raw
                .to_str()
                .ok_or_else(|| anyhow!("{key} = {raw:?} from {source}: not valid UTF-8"))?
                .to_string();
            (text, None)
        };
        layers.push((Layer::single(source, key, Value::from(text)), file));
    }
    Ok(layers)
}

/// The text of a `_FILE` file, at most [`MAX_SECRET_FILE_BYTES`]. Errors
/// never quote the content.
fn read_secret_file(path: &Path) -> anyhow::Result<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        bail!(
            "larger than {} KiB (the limit for _FILE values)",
            MAX_SECRET_FILE_BYTES / 1024
        );
    }
    String::from_utf8(bytes).map_err(|_| anyhow!("not valid UTF-8"))
}

/// A flag's value, as clap parsed it.
enum FlagValue<'a> {
    Path(&'a Path),
    Text(&'a str),
    Bytes(u64),
    Bool(bool),
}

impl ConfigFlags {
    /// The flags given, each with the key it sets: `--ssh-listen` sets
    /// `ssh.listen` (see `flag_name`).
    fn given(&self) -> Vec<(&'static str, FlagValue<'_>)> {
        use FlagValue::{Bool, Bytes, Path, Text};
        let flags = [
            ("state_dir", self.state_dir.as_deref().map(Path)),
            ("repos_dir", self.repos_dir.as_deref().map(Path)),
            ("collab_db", self.collab_db.as_deref().map(Path)),
            ("site_title", self.site_title.as_deref().map(Text)),
            ("max_release_size", self.max_release_size.map(Bytes)),
            ("push_to_create", self.push_to_create.map(Bool)),
            ("max_issue_body", self.max_issue_body.map(Bytes)),
            ("ssh.listen", self.ssh_listen.as_deref().map(Text)),
            ("ssh.allow_sha1_rsa", self.ssh_allow_sha1_rsa.map(Bool)),
            ("ssh.legacy_host_keys", self.ssh_legacy_host_keys.map(Bool)),
            ("ssh.host_key", self.ssh_host_key.as_deref().map(Path)),
            (
                "ssh.authorized_keys",
                self.ssh_authorized_keys.as_deref().map(Path),
            ),
            ("http.listen", self.http_listen.as_deref().map(Text)),
            ("log.level", self.log_level.as_deref().map(Text)),
            ("log.format", self.log_format.as_deref().map(Text)),
            (
                "leases.max_lifetime",
                self.leases_max_lifetime.as_deref().map(Text),
            ),
            (
                "leases.lock_delay",
                self.leases_lock_delay.as_deref().map(Text),
            ),
            ("leases.max_ttl", self.leases_max_ttl.as_deref().map(Text)),
        ];
        flags
            .into_iter()
            .filter_map(|(key, value)| Some((key, value?)))
            .collect()
    }
}

/// One layer per flag that was given.
pub(super) fn flag_layers(flags: &ConfigFlags) -> anyhow::Result<Vec<Layer>> {
    let mut layers = Vec::new();
    for (key, value) in flags.given() {
        let source = format!("flag {}", flag_name(key));
        let value = match value {
            FlagValue::Path(path) => path
                .to_str()
                .map(Value::from)
                .ok_or_else(|| anyhow!("{key} = {path:?} from {source}: not valid UTF-8"))?,
            FlagValue::Text(text) => Value::from(text),
            FlagValue::Bytes(bytes) => Value::from(bytes),
            FlagValue::Bool(b) => Value::from(b),
        };
        layers.push(Layer::single(source, key, value));
    }
    Ok(layers)
}
