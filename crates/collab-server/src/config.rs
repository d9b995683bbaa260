//! Server configuration: the resolved `ServerConfig` and how it is layered
//! (built-in defaults < TOML file < `GIT_COLLAB_*` environment < CLI flags,
//! SPEC §3.1).
//!
//! Each layer becomes a figment provider named after where it came from
//! (`default`, `file /etc/git-collab/server.toml`, `env GIT_COLLAB_SSH__LISTEN`,
//! `flag --ssh-listen`); figment merges them and remembers which provider set
//! each key, which is what `config show` prints and every error names. Keys
//! are then converted and validated one by one here, so an error says
//! `ssh.listen = "nope" from env GIT_COLLAB_SSH__LISTEN: invalid socket address`.
//! Derived defaults (`repos_dir`, `ssh.host_key`, …) follow the final
//! `state_dir`, whichever layer set it. Nothing here writes to disk.
//!
//! The struct field names are the contract the rest of the server uses.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

/// The effective configuration after every layer has been applied and every
/// derived default (`repos_dir`, `collab_db`, `ssh.host_key`, …) resolved.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ServerConfig {
    pub state_dir: PathBuf,
    pub repos_dir: PathBuf,
    /// `None` means `{repos_dir}/collab.db`; read it through `collab_db_path`.
    pub collab_db: Option<PathBuf>,
    pub site_title: String,
    /// Bytes.
    pub max_release_size: u64,
    /// Largest issue body or comment, in bytes.
    pub max_issue_body: u64,
    /// OpenSSH public key lines granted admin.
    pub initial_admin_keys: Vec<String>,
    /// A push to a missing repository creates it, for callers who may create it.
    pub push_to_create: bool,
    pub ssh: SshConfig,
    pub http: HttpConfig,
    pub git: GitConfig,
    pub log: LogConfig,
    pub leases: LeasesConfig,
    pub events: EventsConfig,
    pub webhooks: WebhooksConfig,
    pub maintenance: MaintenanceConfig,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct SshConfig {
    /// `host:port`, e.g. `0.0.0.0:2222`.
    pub listen: String,
    pub host_key: PathBuf,
    pub authorized_keys: PathBuf,
    /// Accept `ssh-rsa` (SHA-1) user signatures, refused by default as
    /// OpenSSH >= 8.8 does.
    pub allow_sha1_rsa: bool,
    /// Also serve RSA and ECDSA host keys (generated beside `host_key`) for
    /// clients that cannot verify Ed25519.
    pub legacy_host_keys: bool,
    /// Connections open at once, authenticated or not.
    pub max_connections: usize,
    /// Unauthenticated connections: OpenSSH's `MaxStartups` (random early drop).
    pub max_startups: MaxStartups,
    /// Unauthenticated connections from one IP address.
    pub max_startups_per_ip: usize,
    /// How long a connection may take to authenticate (`LoginGraceTime`).
    pub login_grace_time: Duration,
    /// Channels open at once on one connection (`MaxSessions`).
    pub max_sessions: usize,
}

/// OpenSSH's `MaxStartups start:rate:full`: past `start` unauthenticated
/// connections, a new one is refused with probability `rate`% rising
/// linearly to 100% at `full`.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct MaxStartups {
    pub start: usize,
    /// Percent, 1 to 100.
    pub rate: u32,
    pub full: usize,
}

impl std::fmt::Display for MaxStartups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.start, self.rate, self.full)
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct HttpConfig {
    pub listen: String,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one IP address.
    pub max_connections_per_ip: usize,
    /// Time a client has to send a request's headers (also the keep-alive
    /// wait between requests).
    pub header_read_timeout: Duration,
    /// A connection that moves no byte in either direction for this long
    /// is closed.
    pub idle_timeout: Duration,
    /// Largest `git-upload-pack` request body, after gunzipping. Bytes.
    pub max_request_body: u64,
    /// Expensive anonymous pages (tree, blob, raw, commit, log, patch
    /// diffs) rendered at once; more get 503 with `Retry-After`.
    pub max_concurrent_pages: usize,
    /// Largest file shown or diffed inline on a page; bigger ones are
    /// summarized (a blob page shows this many bytes of them). Bytes.
    pub max_file_shown: u64,
}

/// Git child processes (`upload-pack`, `receive-pack`, and the web's raw
/// file streams).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct GitConfig {
    /// Running at once, server-wide.
    pub max_processes: usize,
    /// Running at once for one SSH principal or one anonymous HTTP client IP.
    pub max_processes_per_principal: usize,
    /// How long a request waits for a slot before it is refused.
    pub queue_timeout: Duration,
}

/// Lease policy (`leases.*`), in seconds. The defaults keep phase 1's
/// behaviour: no lifetime cap, no lock delay, TTLs up to ten years.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct LeasesConfig {
    /// Longest one tenure may last, renewals included; 0 = unlimited.
    pub max_lifetime: u64,
    /// After a tenure ends by expiry, others wait this long; 0 = none.
    pub lock_delay: u64,
    /// Longest `--ttl` accepted.
    pub max_ttl: u64,
}

impl Default for LeasesConfig {
    fn default() -> Self {
        LeasesConfig {
            max_lifetime: 0,
            lock_delay: 0,
            max_ttl: DEFAULT_MAX_TTL,
        }
    }
}

/// Default of `leases.max_ttl`: ten years, the longest `--ttl` the verbs
/// parse.
pub const DEFAULT_MAX_TTL: u64 = 10 * 365 * 24 * 60 * 60;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct LogConfig {
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

/// The event stream (`collab-events watch`) and the event log's retention.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct EventsConfig {
    /// Events older than this many days are pruned (at least 1).
    pub retention_days: u64,
    /// A watcher gets a heartbeat line after this many idle seconds.
    pub heartbeat_secs: u64,
    /// A watcher whose output has been blocked this long (its client stopped
    /// reading) is cut off.
    pub stall_timeout_secs: u64,
    /// Most watchers connected at once; more are refused.
    pub max_watchers: u64,
}

impl Default for EventsConfig {
    fn default() -> Self {
        EventsConfig {
            retention_days: 30,
            heartbeat_secs: 30,
            stall_timeout_secs: 30,
            max_watchers: 256,
        }
    }
}

/// Webhook delivery (`webhooks`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct WebhooksConfig {
    /// Host names, IP addresses or CIDRs that may be delivered to although
    /// they are loopback, private, link-local, … (the SSRF guard).
    pub allowed_hosts: Vec<String>,
    /// One HTTP attempt may take this long.
    pub attempt_timeout_secs: u64,
    /// The first retry waits about this long; each next one twice as long.
    pub retry_base_secs: u64,
    /// Retries never wait longer than this.
    pub retry_max_secs: u64,
    /// A subscription failing without a success for this long is disabled.
    pub disable_after_secs: u64,
    /// Subscriptions declared by the operator (`[[webhooks.subscriptions]]`).
    pub subscriptions: Vec<DeclaredWebhook>,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            allowed_hosts: Vec::new(),
            attempt_timeout_secs: 10,
            retry_base_secs: 5,
            retry_max_secs: 3600,
            disable_after_secs: 3 * 24 * 3600,
            subscriptions: Vec::new(),
        }
    }
}

/// When repositories are maintained (`maintenance`): after so many pushes,
/// or once a pushed-to repository has been idle so long, and how many runs
/// at once across the server.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct MaintenanceConfig {
    /// Run after this many pushes to a repository (0: never on count).
    pub after_pushes: u64,
    /// Run once a repository pushed to since its last run has seen no push
    /// for this many seconds (0: never on idleness).
    pub idle_secs: u64,
    /// Most runs at once across the server (at least 1).
    pub concurrency: u64,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            after_pushes: 50,
            idle_secs: 600,
            concurrency: 1,
        }
    }
}

/// A webhook subscription declared in the server configuration.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DeclaredWebhook {
    /// Unique among declared subscriptions; the subscription id is
    /// `config-<name>`.
    pub name: String,
    /// Repository glob (`team/*`, `*`).
    pub repo: String,
    pub url: String,
    /// Type patterns; none = every type.
    #[serde(default)]
    pub events: Vec<String>,
    /// A file holding the `whsec_…` HMAC secret.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
}

/// Built-in default of `state_dir`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/git-collab";
/// The configuration file read when neither `--config` nor
/// `$GIT_COLLAB_CONFIG` names one, if it exists.
pub const SYSTEM_CONFIG_FILE: &str = "/etc/git-collab/server.toml";
/// Prefix of every environment variable the server reads.
pub const ENV_PREFIX: &str = "GIT_COLLAB_";
/// Names the configuration file; not a key itself.
pub const CONFIG_ENV: &str = "GIT_COLLAB_CONFIG";

/// Every configuration key, dotted, in the order of SPEC §3.1 (the
/// resource limits follow their section's listen address).
pub const KEYS: &[&str] = &[
    "state_dir",
    "repos_dir",
    "collab_db",
    "site_title",
    "max_release_size",
    "max_issue_body",
    "initial_admin_keys",
    "push_to_create",
    "ssh.listen",
    "ssh.host_key",
    "ssh.authorized_keys",
    "ssh.allow_sha1_rsa",
    "ssh.legacy_host_keys",
    "ssh.max_connections",
    "ssh.max_startups",
    "ssh.max_startups_per_ip",
    "ssh.login_grace_time",
    "ssh.max_sessions",
    "http.listen",
    "http.max_connections",
    "http.max_connections_per_ip",
    "http.header_read_timeout",
    "http.idle_timeout",
    "http.max_request_body",
    "http.max_concurrent_pages",
    "http.max_file_shown",
    "git.max_processes",
    "git.max_processes_per_principal",
    "git.queue_timeout",
    "log.level",
    "log.format",
    "events.retention_days",
    "events.heartbeat_secs",
    "events.stall_timeout_secs",
    "events.max_watchers",
    "webhooks.allowed_hosts",
    "webhooks.attempt_timeout_secs",
    "webhooks.retry_base_secs",
    "webhooks.retry_max_secs",
    "webhooks.disable_after_secs",
    "webhooks.subscriptions",
    "maintenance.after_pushes",
    "maintenance.idle_secs",
    "maintenance.concurrency",
    "leases.max_lifetime",
    "leases.lock_delay",
    "leases.max_ttl",
];

/// Top-level TOML tables; every other known key is a top-level scalar.
const SECTIONS: &[&str] = &[
    "ssh",
    "http",
    "git",
    "log",
    "events",
    "webhooks",
    "maintenance",
    "leases",
];

impl ServerConfig {
    /// Embedded defaults for a given state directory (SPEC §3.1).
    pub fn with_state_dir(state_dir: PathBuf) -> Self {
        ServerConfig {
            repos_dir: state_dir.join("repos"),
            collab_db: None,
            site_title: "git-collab".into(),
            max_release_size: 100 * 1024 * 1024,
            max_issue_body: 256 * 1024,
            initial_admin_keys: Vec::new(),
            push_to_create: false,
            ssh: SshConfig {
                listen: "0.0.0.0:2222".into(),
                host_key: state_dir.join("ssh_host_ed25519_key"),
                authorized_keys: state_dir.join("authorized_keys"),
                allow_sha1_rsa: false,
                legacy_host_keys: false,
                max_connections: 512,
                max_startups: MaxStartups {
                    start: 64,
                    rate: 30,
                    full: 256,
                },
                max_startups_per_ip: 32,
                login_grace_time: Duration::from_secs(120),
                max_sessions: 10,
            },
            http: HttpConfig {
                listen: "0.0.0.0:8080".into(),
                max_connections: 512,
                max_connections_per_ip: 64,
                header_read_timeout: Duration::from_secs(10),
                idle_timeout: Duration::from_secs(60),
                max_request_body: 10 * 1024 * 1024,
                max_concurrent_pages: 8,
                max_file_shown: 1024 * 1024,
            },
            git: GitConfig {
                max_processes: 32,
                max_processes_per_principal: 8,
                queue_timeout: Duration::from_secs(30),
            },
            log: LogConfig {
                level: "info".into(),
                format: "text".into(),
            },
            leases: LeasesConfig::default(),
            events: EventsConfig::default(),
            webhooks: WebhooksConfig::default(),
            maintenance: MaintenanceConfig::default(),
            state_dir,
        }
    }

    /// The SQLite file of the collab database: `collab_db` when it is a
    /// path, else `{repos_dir}/collab.db` (also where a PostgreSQL-backed
    /// server would have kept it; see `collab_db_location`).
    pub fn collab_db_path(&self) -> PathBuf {
        match self.collab_db_location() {
            crate::db::Location::Sqlite(path) => path,
            crate::db::Location::Postgres(_) => self.repos_dir.join("collab.db"),
        }
    }

    /// Where the collab database lives: a SQLite file (a path, `sqlite:PATH`,
    /// or the default `{repos_dir}/collab.db`) or a PostgreSQL URL.
    pub fn collab_db_location(&self) -> crate::db::Location {
        match &self.collab_db {
            Some(given) => crate::db::Location::parse(&given.to_string_lossy()),
            None => crate::db::Location::Sqlite(self.repos_dir.join("collab.db")),
        }
    }

    /// Release artifacts live under the state directory so the volume keeps them.
    pub fn releases_dir(&self) -> PathBuf {
        self.state_dir.join("releases")
    }

    /// Server-managed git hooks (`core.hooksPath` for every served repo).
    pub fn hooks_dir(&self) -> PathBuf {
        self.state_dir.join("hooks")
    }

    /// The server's Ed25519 signing key (OpenSSH format), generated on first
    /// start: it signs webhook deliveries (`v1a,`) and is published as
    /// `server_key` by `collab-whoami`.
    pub fn signing_key_path(&self) -> PathBuf {
        self.state_dir.join("collab_signing_key")
    }
}

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

/// The effective configuration and, for every key, the layer that set it
/// (`default`, `derived`, `file <path>`, `env GIT_COLLAB_...`, `flag --...`).
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: ServerConfig,
    /// Dotted key (`ssh.listen`) -> layer description.
    pub sources: BTreeMap<String, String>,
    /// Keys whose effective value was read through `GIT_COLLAB_<KEY>_FILE`
    /// -> that file. `config show` prints these as redacted.
    pub secret_files: BTreeMap<String, PathBuf>,
}

/// Largest file read through `GIT_COLLAB_<KEY>_FILE`. Secrets and key lists
/// are small; anything larger (`/dev/zero`, a wrong path) is refused before
/// it can fill memory.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Resolve the layers from the process environment and the system file.
/// Errors name the key, the bad value and the layer.
pub fn load(flags: &ConfigFlags) -> anyhow::Result<LoadedConfig> {
    load_from(flags, &process_env(), Path::new(SYSTEM_CONFIG_FILE))
}

/// Make every path absolute: git runs hooks from inside the repository, so
/// a relative hooks path (from a relative `--state-dir`) would miss.
pub fn absolute_paths(mut config: ServerConfig) -> anyhow::Result<ServerConfig> {
    for path in [
        &mut config.state_dir,
        &mut config.repos_dir,
        &mut config.ssh.host_key,
        &mut config.ssh.authorized_keys,
    ] {
        *path =
            std::path::absolute(&*path).with_context(|| format!("resolving {}", path.display()))?;
    }
    // A SQLite path is resolved like the others; a PostgreSQL URL is kept.
    if let Some(db) = config.collab_db.as_mut() {
        if let collab_store::Location::Sqlite(path) =
            collab_store::Location::parse(&db.to_string_lossy())
        {
            *db = std::path::absolute(&path)
                .with_context(|| format!("resolving {}", path.display()))?;
        }
    }
    Ok(config)
}

/// `GIT_COLLAB_*` variables of this process. Names that are not UTF-8 cannot
/// be ours and are skipped; values stay raw so a bad one is reported by key.
pub fn process_env() -> BTreeMap<String, OsString> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value)))
        .filter(|(name, _)| name.starts_with(ENV_PREFIX))
        .collect()
}

/// `load` with the environment and the fallback file given explicitly
/// (tests use this; `load` passes the real ones).
pub fn load_from(
    flags: &ConfigFlags,
    env: &BTreeMap<String, OsString>,
    system_file: &Path,
) -> anyhow::Result<LoadedConfig> {
    let mut figment = Figment::new().merge(Layer::new("default".into(), default_values()));
    if let Some(file) = config_file(flags, env, system_file)? {
        figment = figment.merge(file_layer(&file)?);
    }
    let mut file_layers = Vec::new();
    for (layer, file) in env_layers(env)? {
        if let Some((key, path)) = file {
            file_layers.push((layer.name.clone(), key, path));
        }
        figment = figment.merge(layer);
    }
    for layer in flag_layers(flags)? {
        figment = figment.merge(layer);
    }
    let mut loaded = resolve(&figment)?;
    for (layer, key, path) in file_layers {
        if loaded.sources.get(key) == Some(&layer) {
            loaded.secret_files.insert(key.to_string(), path);
        }
    }
    Ok(loaded)
}

/// Environment variables that look like a mistyped key: a single `_` where
/// the nesting needs `__` (`GIT_COLLAB_SSH_LISTEN`). They are ignored (other
/// `GIT_COLLAB_*` variables belong to the client), so the caller warns.
pub fn misspelled_env_vars(env: &BTreeMap<String, OsString>) -> Vec<(String, String)> {
    env.keys()
        .filter_map(|name| {
            let rest = name.strip_prefix(ENV_PREFIX)?.to_ascii_lowercase();
            let rest = rest.strip_suffix("_file").unwrap_or(&rest);
            KEYS.iter()
                .find(|key| key.contains('.') && key.replace('.', "_") == rest)
                .map(|key| (name.clone(), env_name(key)))
        })
        .collect()
}

/// `ssh.listen` -> `GIT_COLLAB_SSH__LISTEN`.
pub fn env_name(key: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        key.replace('.', "__").to_ascii_uppercase()
    )
}

/// `ssh.listen` -> `--ssh-listen`.
pub fn flag_name(key: &str) -> String {
    format!("--{}", key.replace(['.', '_'], "-"))
}

/// One configuration layer: a figment provider whose name is the source
/// `config show` prints (`env GIT_COLLAB_SSH__LISTEN`).
struct Layer {
    name: String,
    values: Dict,
}

impl Layer {
    fn new(name: String, values: Dict) -> Self {
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

/// Built-in defaults. Keys derived from `state_dir` are absent on purpose:
/// they are filled in after the final `state_dir` is known.
fn default_values() -> Dict {
    let defaults = ServerConfig::with_state_dir(PathBuf::from(DEFAULT_STATE_DIR));
    let mut dict = Dict::new();
    let mut put = |key: &str, value: Value| insert_dotted(&mut dict, key, value);
    put("state_dir", Value::from(DEFAULT_STATE_DIR));
    put("site_title", Value::from(defaults.site_title));
    put("max_release_size", Value::from(defaults.max_release_size));
    put("max_issue_body", Value::from(defaults.max_issue_body));
    put("initial_admin_keys", Value::from(Vec::<Value>::new()));
    put("push_to_create", Value::from(defaults.push_to_create));
    put("ssh.listen", Value::from(defaults.ssh.listen));
    put(
        "ssh.allow_sha1_rsa",
        Value::from(defaults.ssh.allow_sha1_rsa),
    );
    put(
        "ssh.legacy_host_keys",
        Value::from(defaults.ssh.legacy_host_keys),
    );
    put(
        "ssh.max_connections",
        Value::from(defaults.ssh.max_connections),
    );
    put(
        "ssh.max_startups",
        Value::from(defaults.ssh.max_startups.to_string()),
    );
    put(
        "ssh.max_startups_per_ip",
        Value::from(defaults.ssh.max_startups_per_ip),
    );
    put(
        "ssh.login_grace_time",
        Value::from(defaults.ssh.login_grace_time.as_secs()),
    );
    put("ssh.max_sessions", Value::from(defaults.ssh.max_sessions));
    put("http.listen", Value::from(defaults.http.listen));
    put(
        "http.max_connections",
        Value::from(defaults.http.max_connections),
    );
    put(
        "http.max_connections_per_ip",
        Value::from(defaults.http.max_connections_per_ip),
    );
    put(
        "http.header_read_timeout",
        Value::from(defaults.http.header_read_timeout.as_secs()),
    );
    put(
        "http.idle_timeout",
        Value::from(defaults.http.idle_timeout.as_secs()),
    );
    put(
        "http.max_request_body",
        Value::from(defaults.http.max_request_body),
    );
    put(
        "http.max_concurrent_pages",
        Value::from(defaults.http.max_concurrent_pages),
    );
    put(
        "http.max_file_shown",
        Value::from(defaults.http.max_file_shown),
    );
    put("git.max_processes", Value::from(defaults.git.max_processes));
    put(
        "git.max_processes_per_principal",
        Value::from(defaults.git.max_processes_per_principal),
    );
    put(
        "git.queue_timeout",
        Value::from(defaults.git.queue_timeout.as_secs()),
    );
    put("log.level", Value::from(defaults.log.level));
    put("log.format", Value::from(defaults.log.format));
    put(
        "leases.max_lifetime",
        Value::from(defaults.leases.max_lifetime),
    );
    put("leases.lock_delay", Value::from(defaults.leases.lock_delay));
    put("leases.max_ttl", Value::from(defaults.leases.max_ttl));
    let events = EventsConfig::default();
    put("events.retention_days", Value::from(events.retention_days));
    put("events.heartbeat_secs", Value::from(events.heartbeat_secs));
    put(
        "events.stall_timeout_secs",
        Value::from(events.stall_timeout_secs),
    );
    put("events.max_watchers", Value::from(events.max_watchers));
    let hooks = WebhooksConfig::default();
    put("webhooks.allowed_hosts", Value::from(Vec::<Value>::new()));
    put(
        "webhooks.attempt_timeout_secs",
        Value::from(hooks.attempt_timeout_secs),
    );
    put(
        "webhooks.retry_base_secs",
        Value::from(hooks.retry_base_secs),
    );
    put("webhooks.retry_max_secs", Value::from(hooks.retry_max_secs));
    put(
        "webhooks.disable_after_secs",
        Value::from(hooks.disable_after_secs),
    );
    put("webhooks.subscriptions", Value::from(Vec::<Value>::new()));
    let maintenance = MaintenanceConfig::default();
    put(
        "maintenance.after_pushes",
        Value::from(maintenance.after_pushes),
    );
    put("maintenance.idle_secs", Value::from(maintenance.idle_secs));
    put(
        "maintenance.concurrency",
        Value::from(maintenance.concurrency),
    );
    dict
}

/// Which file to read: `--config`, else `$GIT_COLLAB_CONFIG` (empty means
/// unset), else the system file when it exists. A named file must exist.
fn config_file(
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
fn file_layer(path: &Path) -> anyhow::Result<Layer> {
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
        anyhow!(
            "{key} from {source}: unknown key (known keys: {})",
            KEYS.join(", ")
        )
    };
    for (name, value) in table {
        if SECTIONS.contains(&name.as_str()) {
            let toml::Value::Table(section) = value else {
                bail!("{name} = {value} from {source}: expected a table ([{name}])");
            };
            for inner in section.keys() {
                let key = format!("{name}.{inner}");
                if !KEYS.contains(&key.as_str()) {
                    return Err(unknown(&key));
                }
            }
        } else if !KEYS.contains(&name.as_str()) {
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
fn env_layers(
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
        let Some(key) = KEYS.iter().find(|k| **k == key) else {
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
            (text, Some((*key, path)))
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

/// One layer per flag that was given.
fn flag_layers(flags: &ConfigFlags) -> anyhow::Result<Vec<Layer>> {
    fn path(key: &str, path: &Path) -> anyhow::Result<Value> {
        path.to_str().map(Value::from).ok_or_else(|| {
            anyhow!(
                "{key} = {path:?} from flag {}: not valid UTF-8",
                flag_name(key)
            )
        })
    }
    let mut given: Vec<(&str, Value)> = Vec::new();
    let paths = [
        ("state_dir", &flags.state_dir),
        ("repos_dir", &flags.repos_dir),
        ("collab_db", &flags.collab_db),
        ("ssh.host_key", &flags.ssh_host_key),
        ("ssh.authorized_keys", &flags.ssh_authorized_keys),
    ];
    for (key, value) in paths {
        if let Some(value) = value {
            given.push((key, path(key, value)?));
        }
    }
    let texts = [
        ("site_title", &flags.site_title),
        ("ssh.listen", &flags.ssh_listen),
        ("http.listen", &flags.http_listen),
        ("log.level", &flags.log_level),
        ("log.format", &flags.log_format),
        ("leases.max_lifetime", &flags.leases_max_lifetime),
        ("leases.lock_delay", &flags.leases_lock_delay),
        ("leases.max_ttl", &flags.leases_max_ttl),
    ];
    for (key, value) in texts {
        if let Some(value) = value {
            given.push((key, Value::from(value.as_str())));
        }
    }
    if let Some(size) = flags.max_release_size {
        given.push(("max_release_size", Value::from(size)));
    }
    let booleans = [
        ("push_to_create", flags.push_to_create),
        ("ssh.allow_sha1_rsa", flags.ssh_allow_sha1_rsa),
        ("ssh.legacy_host_keys", flags.ssh_legacy_host_keys),
    ];
    for (key, value) in booleans {
        if let Some(value) = value {
            given.push((key, Value::from(value)));
        }
    }
    if let Some(size) = flags.max_issue_body {
        given.push(("max_issue_body", Value::from(size)));
    }
    Ok(given
        .into_iter()
        .map(|(key, value)| Layer::single(format!("flag {}", flag_name(key)), key, value))
        .collect())
}

/// Reads keys out of the merged figment, recording where each came from.
struct Resolver<'a> {
    figment: &'a Figment,
    sources: BTreeMap<String, String>,
}

/// A value as given, with its layer, for conversion and error messages.
struct Given {
    key: &'static str,
    value: Value,
    source: String,
}

impl Given {
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
        self.value
            .as_str()
            .ok_or_else(|| self.error(format!("expected a string, found {}", kind(&self.value))))
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
            // TOML integers arrive signed, flags unsigned.
            Value::Num(_, num) => num
                .to_i128()
                .or_else(|| num.to_u128().and_then(|n| i128::try_from(n).ok()))
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| self.error("expected a whole number of bytes")),
            Value::String(_, text) => parse_size(text).map_err(|problem| self.error(problem)),
            other => Err(self.error(format!(
                "expected a number of bytes or a size like \"100MiB\", found {}",
                kind(other)
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
            other => Err(self.error(format!("expected true or false, found {}", kind(other)))),
        }
    }

    /// Lease seconds: a whole number, or a string with a unit (`90s`,
    /// `15m`, `2h`, `7d`; a bare number in a string is seconds); 0 allowed.
    fn lease_secs(&self) -> anyhow::Result<u64> {
        match &self.value {
            Value::Num(_, num) => num
                .to_i128()
                .or_else(|| num.to_u128().and_then(|n| i128::try_from(n).ok()))
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| self.error("expected a whole number of seconds")),
            Value::String(_, text) => {
                parse_lease_duration(text).map_err(|problem| self.error(problem))
            }
            other => Err(self.error(format!(
                "expected seconds or a duration like \"15m\", found {}",
                kind(other)
            ))),
        }
    }

    /// Lease seconds, at most `max`.
    fn lease_secs_at_most(&self, max: u64) -> anyhow::Result<u64> {
        let secs = self.lease_secs()?;
        if secs > max {
            return Err(self.error(format!("at most {max} seconds")));
        }
        Ok(secs)
    }

    /// A whole number in `min..=max` (TOML integer, or digits from env).
    fn count(&self, min: u64, max: u64) -> anyhow::Result<u64> {
        let n = match &self.value {
            Value::Num(_, num) => num
                .to_i128()
                .or_else(|| num.to_u128().and_then(|n| i128::try_from(n).ok()))
                .and_then(|n| u64::try_from(n).ok()),
            Value::String(_, text) => text.trim().parse::<u64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(self.error(format!("expected a whole number from {min} to {max}"))),
        }
    }

    /// A list of strings: a TOML list, or (from env) a TOML list or a
    /// comma-separated string.
    fn string_list(&self) -> anyhow::Result<Vec<String>> {
        let items = match &self.value {
            Value::Array(_, items) => items.clone(),
            Value::String(_, text) if text.trim_start().starts_with('[') => {
                let parsed: toml::Table = toml::from_str(&format!("v = {text}"))
                    .map_err(|e| self.error(format!("invalid list: {}", one_line(e.message()))))?;
                match Value::serialize(&parsed["v"])? {
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
            other => return Err(self.error(format!("expected a list, found {}", kind(other)))),
        };
        items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| self.error(format!("expected strings, found {}", kind(item))))
            })
            .collect()
    }

    /// `[[webhooks.subscriptions]]`: a list of tables (or, from env, the
    /// same as a TOML inline list).
    fn declared_webhooks(&self) -> anyhow::Result<Vec<DeclaredWebhook>> {
        let value = match &self.value {
            Value::String(_, text) => {
                let parsed: toml::Table = toml::from_str(&format!("v = {text}"))
                    .map_err(|e| self.error(format!("invalid list: {}", one_line(e.message()))))?;
                Value::serialize(&parsed["v"])?
            }
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

    /// A resource limit: a whole number from 1 (0 would refuse everything)
    /// to 1000000.
    fn limit(&self) -> anyhow::Result<usize> {
        self.count(1, 1_000_000).map(|n| n as usize)
    }

    /// Seconds, or a number with a unit (`500ms`, `10s`, `2m`, `1h`).
    fn duration(&self) -> anyhow::Result<Duration> {
        let parsed = match &self.value {
            Value::Num(_, num) => num
                .to_u128()
                .or_else(|| num.to_i128().and_then(|n| u128::try_from(n).ok()))
                .and_then(|n| u64::try_from(n).ok())
                .map(Duration::from_secs)
                .ok_or_else(|| "expected a whole number of seconds".to_string()),
            Value::String(_, text) => parse_duration(text),
            other => Err(format!(
                "expected seconds or a duration like \"10s\", found {}",
                kind(other)
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
            Value::Num(..) => {
                return self.limit().map(|full| MaxStartups {
                    start: full,
                    rate: 100,
                    full,
                })
            }
            Value::String(_, text) => text,
            other => {
                return Err(self.error(format!(
                    "expected start:rate:full like \"10:30:100\", found {}",
                    kind(other)
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

    fn log_format(&self) -> anyhow::Result<String> {
        match self.text()? {
            format @ ("text" | "json") => Ok(format.to_string()),
            _ => Err(self.error("expected text or json")),
        }
    }

    /// A list of strings, or one string holding one key per line. Blank
    /// lines and `#` comments are skipped; every other line must be an
    /// OpenSSH public key.
    fn admin_keys(&self) -> anyhow::Result<Vec<String>> {
        let mut entries: Vec<(String, &str)> = Vec::new();
        match &self.value {
            Value::String(_, text) => {
                // An env value may also be a TOML array: ["ssh-ed25519 …", "…"].
                if text.trim_start().starts_with('[') {
                    let parsed: toml::Table =
                        toml::from_str(&format!("keys = {text}")).map_err(|e| {
                            self.error(format!("invalid list: {}", one_line(e.message())))
                        })?;
                    let list = Value::serialize(&parsed["keys"])?;
                    return Given {
                        key: self.key,
                        value: list,
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
                            kind(item)
                        ))
                    })?;
                    entries.push((format!("entry {}", i + 1), line));
                }
            }
            other => {
                return Err(self.error(format!(
                    "expected a list of OpenSSH public keys, found {}",
                    kind(other)
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

impl Resolver<'_> {
    /// The winning value of `key`, if any layer set it.
    fn given(&mut self, key: &'static str) -> Option<Given> {
        let value = self.figment.find_value(key).ok()?;
        let source = self
            .figment
            .find_metadata(key)
            .map_or_else(|| "unknown".to_string(), |m| m.name.to_string());
        self.sources.insert(key.to_string(), source.clone());
        Some(Given { key, value, source })
    }

    /// A key every layer stack has (the defaults layer sets it).
    fn required(&mut self, key: &'static str) -> Given {
        self.given(key)
            .unwrap_or_else(|| panic!("the defaults layer sets {key}"))
    }

    /// A path derived from another one unless a layer set it.
    fn path_or_derived(
        &mut self,
        key: &'static str,
        derive: impl FnOnce() -> PathBuf,
    ) -> anyhow::Result<PathBuf> {
        match self.given(key) {
            Some(given) => given.path(),
            None => {
                self.sources.insert(key.to_string(), "derived".into());
                Ok(derive())
            }
        }
    }
}

fn resolve(figment: &Figment) -> anyhow::Result<LoadedConfig> {
    let mut r = Resolver {
        figment,
        sources: BTreeMap::new(),
    };
    let state_dir = r.required("state_dir").path()?;
    let repos_dir = r.path_or_derived("repos_dir", || state_dir.join("repos"))?;
    let collab_db = match r.given("collab_db") {
        Some(given) => Some(given.path()?),
        None => {
            r.sources.insert("collab_db".into(), "derived".into());
            None
        }
    };
    let config = ServerConfig {
        collab_db,
        site_title: r.required("site_title").text()?.to_string(),
        max_release_size: r.required("max_release_size").size()?,
        max_issue_body: r.required("max_issue_body").size()?,
        initial_admin_keys: r.required("initial_admin_keys").admin_keys()?,
        push_to_create: r.required("push_to_create").boolean()?,
        ssh: SshConfig {
            listen: r.required("ssh.listen").socket_addr()?,
            allow_sha1_rsa: r.required("ssh.allow_sha1_rsa").boolean()?,
            legacy_host_keys: r.required("ssh.legacy_host_keys").boolean()?,
            host_key: r
                .path_or_derived("ssh.host_key", || state_dir.join("ssh_host_ed25519_key"))?,
            authorized_keys: r
                .path_or_derived("ssh.authorized_keys", || state_dir.join("authorized_keys"))?,
            max_connections: r.required("ssh.max_connections").limit()?,
            max_startups: r.required("ssh.max_startups").max_startups()?,
            max_startups_per_ip: r.required("ssh.max_startups_per_ip").limit()?,
            login_grace_time: r.required("ssh.login_grace_time").duration()?,
            max_sessions: r.required("ssh.max_sessions").limit()?,
        },
        http: HttpConfig {
            listen: r.required("http.listen").socket_addr()?,
            max_connections: r.required("http.max_connections").limit()?,
            max_connections_per_ip: r.required("http.max_connections_per_ip").limit()?,
            header_read_timeout: r.required("http.header_read_timeout").duration()?,
            idle_timeout: r.required("http.idle_timeout").duration()?,
            max_request_body: r.required("http.max_request_body").size()?,
            max_concurrent_pages: r.required("http.max_concurrent_pages").limit()?,
            max_file_shown: r.required("http.max_file_shown").size()?,
        },
        git: GitConfig {
            max_processes: r.required("git.max_processes").limit()?,
            max_processes_per_principal: r.required("git.max_processes_per_principal").limit()?,
            queue_timeout: r.required("git.queue_timeout").duration()?,
        },
        log: LogConfig {
            level: r.required("log.level").log_level()?,
            format: r.required("log.format").log_format()?,
        },
        leases: LeasesConfig {
            max_lifetime: r
                .required("leases.max_lifetime")
                .lease_secs_at_most(DEFAULT_MAX_TTL)?,
            lock_delay: r
                .required("leases.lock_delay")
                .lease_secs_at_most(DEFAULT_MAX_TTL)?,
            max_ttl: match r.required("leases.max_ttl") {
                given if given.lease_secs()? == 0 => {
                    return Err(given.error("must be at least 1 second"))
                }
                given => given.lease_secs_at_most(DEFAULT_MAX_TTL)?,
            },
        },
        events: EventsConfig {
            retention_days: r.required("events.retention_days").count(1, 36_500)?,
            heartbeat_secs: r.required("events.heartbeat_secs").count(1, 3600)?,
            stall_timeout_secs: r.required("events.stall_timeout_secs").count(1, 3600)?,
            max_watchers: r.required("events.max_watchers").count(1, 100_000)?,
        },
        webhooks: WebhooksConfig {
            allowed_hosts: r.required("webhooks.allowed_hosts").string_list()?,
            attempt_timeout_secs: r.required("webhooks.attempt_timeout_secs").count(1, 300)?,
            retry_base_secs: r.required("webhooks.retry_base_secs").count(1, 3600)?,
            retry_max_secs: r.required("webhooks.retry_max_secs").count(1, 86_400)?,
            disable_after_secs: r
                .required("webhooks.disable_after_secs")
                .count(10, 365 * 86_400)?,
            subscriptions: r.required("webhooks.subscriptions").declared_webhooks()?,
        },
        maintenance: MaintenanceConfig {
            after_pushes: r.required("maintenance.after_pushes").count(0, 1_000_000)?,
            idle_secs: r.required("maintenance.idle_secs").count(0, 604_800)?,
            concurrency: r.required("maintenance.concurrency").count(1, 64)?,
        },
        repos_dir,
        state_dir,
    };
    Ok(LoadedConfig {
        config,
        sources: r.sources,
        secret_files: BTreeMap::new(),
    })
}

/// `"90"`, `"90s"`, `"15m"`, `"2h"`, `"7d"` -> seconds (the `leases.*`
/// keys, which also take days and zero).
pub fn parse_lease_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let unit_secs = match unit.trim() {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err("expected seconds or a duration like 90s, 15m, 2h, 7d".into()),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| "expected seconds or a duration like 90s, 15m, 2h, 7d".to_string())?;
    n.checked_mul(unit_secs)
        .ok_or_else(|| "duration too large".to_string())
}

/// Join a multi-line message so every error stays on one line.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join("; ")
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::String(..) => "a string",
        Value::Char(..) => "a character",
        Value::Bool(..) => "a boolean",
        Value::Num(..) => "a number",
        Value::Empty(..) => "nothing",
        Value::Dict(..) => "a table",
        Value::Array(..) => "a list",
    }
}

/// Bytes, or a number with a unit: K/M/G/T and KiB/MiB/GiB/TiB are powers
/// of 1024, KB/MB/GB/TB powers of 1000 (case-insensitive), B is bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    let expected = "expected bytes or a size like 100MiB, 5M or 1GB";
    let count: u64 = digits.parse().map_err(|_| expected.to_string())?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(format!("unknown unit {:?}; {expected}", unit.trim())),
    };
    count
        .checked_mul(multiplier)
        .ok_or_else(|| "too large".to_string())
}

/// A duration: whole seconds, or a number with a unit: `ms`, `s`, `m`, `h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    let expected = "expected seconds or a duration like 500ms, 10s, 2m or 1h";
    let count: u64 = digits.parse().map_err(|_| expected.to_string())?;
    let millis: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("unknown unit {:?}; {expected}", unit.trim())),
    };
    count
        .checked_mul(millis)
        .map(Duration::from_millis)
        .ok_or_else(|| "too large".to_string())
}

/// `start:rate:full` (OpenSSH's `MaxStartups`), or one number `full`
/// (refuse past it, no early drop).
pub fn parse_max_startups(text: &str) -> Result<MaxStartups, String> {
    let expected = "expected start:rate:full like 10:30:100 (rate in percent), or one number";
    let parts: Vec<&str> = text.trim().split(':').map(str::trim).collect();
    let number = |s: &str| s.parse::<usize>().map_err(|_| expected.to_string());
    let limits = match parts.as_slice() {
        [full] => {
            let full = number(full)?;
            MaxStartups {
                start: full,
                rate: 100,
                full,
            }
        }
        [start, rate, full] => MaxStartups {
            start: number(start)?,
            rate: rate.parse().map_err(|_| expected.to_string())?,
            full: number(full)?,
        },
        _ => return Err(expected.to_string()),
    };
    if limits.full == 0 || limits.start == 0 {
        return Err("start and full must be at least 1".into());
    }
    if limits.start > limits.full {
        return Err("start must not exceed full".into());
    }
    if !(1..=100).contains(&limits.rate) {
        return Err("rate is a percentage from 1 to 100".into());
    }
    Ok(limits)
}

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
        serde_json::json!(d.as_secs())
    } else {
        serde_json::json!(d.as_secs_f64())
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

/// `log.level` is a level (`info`) or a tracing filter with directives
/// (`info,russh=warn`). A lone word that is not a level would silently be
/// read as a target name, so it is refused.
pub fn validate_log_level(text: &str) -> Result<(), String> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    let expected = "expected trace, debug, info, warn, error, off or a filter like info,russh=warn";
    for directive in text.split(',') {
        let directive = directive.trim();
        if !directive.contains('=') && !LEVELS.contains(&directive.to_ascii_lowercase().as_str()) {
            return Err(expected.to_string());
        }
    }
    tracing_subscriber::EnvFilter::try_new(text).map_err(|e| format!("{e}; {expected}"))?;
    Ok(())
}

impl LoadedConfig {
    /// The effective value of `key` as `config show` prints it (paths as
    /// strings, `collab_db` resolved, sizes in bytes).
    pub fn value(&self, key: &str) -> serde_json::Value {
        use serde_json::json;
        let c = &self.config;
        match key {
            "state_dir" => json!(c.state_dir),
            "repos_dir" => json!(c.repos_dir),
            "collab_db" => json!(c.collab_db_location().display()),
            "site_title" => json!(c.site_title),
            "max_release_size" => json!(c.max_release_size),
            "max_issue_body" => json!(c.max_issue_body),
            "initial_admin_keys" => json!(c.initial_admin_keys),
            "push_to_create" => json!(c.push_to_create),
            "ssh.listen" => json!(c.ssh.listen),
            "ssh.allow_sha1_rsa" => json!(c.ssh.allow_sha1_rsa),
            "ssh.legacy_host_keys" => json!(c.ssh.legacy_host_keys),
            "ssh.host_key" => json!(c.ssh.host_key),
            "ssh.authorized_keys" => json!(c.ssh.authorized_keys),
            "ssh.max_connections" => json!(c.ssh.max_connections),
            "ssh.max_startups" => json!(c.ssh.max_startups.to_string()),
            "ssh.max_startups_per_ip" => json!(c.ssh.max_startups_per_ip),
            "ssh.login_grace_time" => json_secs(c.ssh.login_grace_time),
            "ssh.max_sessions" => json!(c.ssh.max_sessions),
            "http.listen" => json!(c.http.listen),
            "http.max_connections" => json!(c.http.max_connections),
            "http.max_connections_per_ip" => json!(c.http.max_connections_per_ip),
            "http.header_read_timeout" => json_secs(c.http.header_read_timeout),
            "http.idle_timeout" => json_secs(c.http.idle_timeout),
            "http.max_request_body" => json!(c.http.max_request_body),
            "http.max_concurrent_pages" => json!(c.http.max_concurrent_pages),
            "http.max_file_shown" => json!(c.http.max_file_shown),
            "git.max_processes" => json!(c.git.max_processes),
            "git.max_processes_per_principal" => json!(c.git.max_processes_per_principal),
            "git.queue_timeout" => json_secs(c.git.queue_timeout),
            "log.level" => json!(c.log.level),
            "log.format" => json!(c.log.format),
            "leases.max_lifetime" => json!(c.leases.max_lifetime),
            "leases.lock_delay" => json!(c.leases.lock_delay),
            "leases.max_ttl" => json!(c.leases.max_ttl),
            "events.retention_days" => json!(c.events.retention_days),
            "events.heartbeat_secs" => json!(c.events.heartbeat_secs),
            "events.stall_timeout_secs" => json!(c.events.stall_timeout_secs),
            "events.max_watchers" => json!(c.events.max_watchers),
            "webhooks.allowed_hosts" => json!(c.webhooks.allowed_hosts),
            "webhooks.attempt_timeout_secs" => json!(c.webhooks.attempt_timeout_secs),
            "webhooks.retry_base_secs" => json!(c.webhooks.retry_base_secs),
            "webhooks.retry_max_secs" => json!(c.webhooks.retry_max_secs),
            "webhooks.disable_after_secs" => json!(c.webhooks.disable_after_secs),
            "webhooks.subscriptions" => json!(c.webhooks.subscriptions),
            "maintenance.after_pushes" => json!(c.maintenance.after_pushes),
            "maintenance.idle_secs" => json!(c.maintenance.idle_secs),
            "maintenance.concurrency" => json!(c.maintenance.concurrency),
            other => unreachable!("not a configuration key: {other}"),
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
        let map: serde_json::Map<String, serde_json::Value> = KEYS
            .iter()
            .map(|key| {
                let value = match self.redacted(key) {
                    Some(redacted) => serde_json::Value::String(redacted),
                    None => self.value(key),
                };
                let entry = serde_json::json!({"value": value, "source": self.source(key)});
                (key.to_string(), entry)
            })
            .collect();
        serde_json::Value::Object(map)
    }

    /// Aligned `key  value  source` lines. Admin keys are shown one per
    /// line as algorithm, fingerprint and comment; `--json` has them whole.
    pub fn to_text(&self) -> String {
        let rows: Vec<(&str, Vec<String>, &str)> = KEYS
            .iter()
            .map(|key| (*key, self.display_lines(key), self.source(key)))
            .collect();
        let key_width = KEYS.iter().map(|k| k.len()).max().unwrap_or(0);
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

    fn display_lines(&self, key: &str) -> Vec<String> {
        if let Some(redacted) = self.redacted(key) {
            return vec![redacted];
        }
        let c = &self.config;
        match key {
            "initial_admin_keys" if c.initial_admin_keys.is_empty() => vec!["(none)".into()],
            "initial_admin_keys" => c
                .initial_admin_keys
                .iter()
                .map(|line| match ssh_key::PublicKey::from_openssh(line) {
                    Ok(key) => format!(
                        "{} {} {}",
                        key.algorithm(),
                        key.fingerprint(ssh_key::HashAlg::Sha256),
                        key.comment()
                    )
                    .trim_end()
                    .to_string(),
                    Err(_) => line.clone(),
                })
                .collect(),
            "leases.max_lifetime" if c.leases.max_lifetime == 0 => vec!["0 (unlimited)".into()],
            "leases.lock_delay" if c.leases.lock_delay == 0 => vec!["0 (none)".into()],
            "max_release_size" => vec![fmt_bytes(c.max_release_size)],
            "max_issue_body" => vec![fmt_bytes(c.max_issue_body)],
            "http.max_request_body" => vec![fmt_bytes(c.http.max_request_body)],
            "http.max_file_shown" => vec![fmt_bytes(c.http.max_file_shown)],
            "ssh.login_grace_time" => vec![fmt_duration(c.ssh.login_grace_time)],
            "http.header_read_timeout" => vec![fmt_duration(c.http.header_read_timeout)],
            "http.idle_timeout" => vec![fmt_duration(c.http.idle_timeout)],
            "git.queue_timeout" => vec![fmt_duration(c.git.queue_timeout)],
            _ => match self.value(key) {
                serde_json::Value::String(s) => vec![s],
                other => vec![other.to_string()],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILEXSjUnGogtRj3PpAaQ1+yOYFJ8HXBEED0TpDEXkZal alice@example";
    const KEY_B: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAYQ5/h7Rqxnp1qc329nGsA4A2Dg3dVDahkMcEyV6Tdd bob";

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, OsString> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect()
    }

    fn no_system_file() -> PathBuf {
        PathBuf::from("/nonexistent/git-collab/server.toml")
    }

    fn load_env(pairs: &[(&str, &str)]) -> anyhow::Result<LoadedConfig> {
        load_from(&ConfigFlags::default(), &env(pairs), &no_system_file())
    }

    fn err(result: anyhow::Result<LoadedConfig>) -> String {
        format!("{:#}", result.expect_err("expected an error"))
    }

    #[test]
    fn defaults_match_the_spec_table() {
        let loaded = load_env(&[]).unwrap();
        assert_eq!(
            loaded.config,
            ServerConfig::with_state_dir(PathBuf::from("/var/lib/git-collab"))
        );
        assert_eq!(
            loaded.config.collab_db_path(),
            PathBuf::from("/var/lib/git-collab/repos/collab.db")
        );
        assert_eq!(loaded.sources["state_dir"], "default");
        assert_eq!(loaded.sources["repos_dir"], "derived");
        assert_eq!(loaded.sources["collab_db"], "derived");
        assert_eq!(loaded.sources["ssh.host_key"], "derived");
        assert_eq!(loaded.sources.len(), KEYS.len());
    }

    #[test]
    fn layers_override_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("server.toml");
        std::fs::write(
            &file,
            "site_title = \"from file\"\n[ssh]\nlisten = \"127.0.0.1:1\"\n[http]\nlisten = \"127.0.0.1:2\"\n[log]\nformat = \"json\"\n",
        )
        .unwrap();
        let flags = ConfigFlags {
            config: Some(file.clone()),
            http_listen: Some("127.0.0.1:3".into()),
            ..Default::default()
        };
        let env = env(&[
            ("GIT_COLLAB_SSH__LISTEN", "127.0.0.1:4"),
            ("GIT_COLLAB_HTTP__LISTEN", "127.0.0.1:5"),
        ]);
        let loaded = load_from(&flags, &env, &no_system_file()).unwrap();
        let c = &loaded.config;
        assert_eq!(c.site_title, "from file");
        assert_eq!(c.log.format, "json");
        assert_eq!(c.ssh.listen, "127.0.0.1:4");
        assert_eq!(c.http.listen, "127.0.0.1:3");
        assert_eq!(c.log.level, "info");
        let s = &loaded.sources;
        assert_eq!(s["site_title"], format!("file {}", file.display()));
        assert_eq!(s["ssh.listen"], "env GIT_COLLAB_SSH__LISTEN");
        assert_eq!(s["http.listen"], "flag --http-listen");
        assert_eq!(s["log.level"], "default");
    }

    #[test]
    fn system_file_is_used_only_when_nothing_else_names_one() {
        let dir = tempfile::tempdir().unwrap();
        let system = dir.path().join("system.toml");
        std::fs::write(&system, "site_title = \"system\"\n").unwrap();
        let other = dir.path().join("other.toml");
        std::fs::write(&other, "site_title = \"other\"\n").unwrap();
        let flags = ConfigFlags::default();
        let loaded = load_from(&flags, &env(&[]), &system).unwrap();
        assert_eq!(loaded.config.site_title, "system");
        let via_env = env(&[("GIT_COLLAB_CONFIG", other.to_str().unwrap())]);
        let loaded = load_from(&flags, &via_env, &system).unwrap();
        assert_eq!(loaded.config.site_title, "other");
        // An empty GIT_COLLAB_CONFIG counts as unset.
        let loaded = load_from(&flags, &env(&[("GIT_COLLAB_CONFIG", "")]), &system).unwrap();
        assert_eq!(loaded.config.site_title, "system");
    }

    #[test]
    fn named_but_missing_file_is_an_error() {
        let flags = ConfigFlags {
            config: Some("/nonexistent/a.toml".into()),
            ..Default::default()
        };
        let e = err(load_from(&flags, &env(&[]), &no_system_file()));
        assert_eq!(
            e,
            "config file /nonexistent/a.toml from flag --config: no such file"
        );
        let e = err(load_env(&[("GIT_COLLAB_CONFIG", "/nonexistent/b.toml")]));
        assert_eq!(
            e,
            "config file /nonexistent/b.toml from env GIT_COLLAB_CONFIG: no such file"
        );
    }

    #[test]
    fn unknown_and_misplaced_file_keys_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("server.toml");
        let flags = ConfigFlags {
            config: Some(file.clone()),
            ..Default::default()
        };
        for (text, problem) in [
            ("[ssh]\nlisen = \"x\"\n", "ssh.lisen from file"),
            ("titel = \"x\"\n", "titel from file"),
            ("listen = \"x\"\n", "listen from file"),
            ("ssh = \"x\"\n", "ssh = \"x\" from file"),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = err(load_from(&flags, &env(&[]), &no_system_file()));
            assert!(e.starts_with(problem), "{text:?}: {e}");
        }
        std::fs::write(&file, "[ssh]\nlisen = \"x\"\n").unwrap();
        let e = err(load_from(&flags, &env(&[]), &no_system_file()));
        assert!(e.contains("unknown key"), "{e}");
    }

    #[test]
    fn invalid_toml_is_one_line_with_position() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("server.toml");
        std::fs::write(&file, "site_title = \"ok\"\nstate_dir = \n").unwrap();
        let flags = ConfigFlags {
            config: Some(file.clone()),
            ..Default::default()
        };
        let e = err(load_from(&flags, &env(&[]), &no_system_file()));
        assert!(!e.contains('\n'), "{e}");
        assert!(
            e.starts_with(&format!("config file {} line 2", file.display())),
            "{e}"
        );
    }

    #[test]
    fn env_nesting_and_client_variables() {
        let loaded = load_env(&[
            ("GIT_COLLAB_SSH__LISTEN", "0.0.0.0:22"),
            ("GIT_COLLAB_SSH_COMMAND", "ssh -o StrictHostKeyChecking=no"),
            ("GIT_COLLAB_REQUIRE_CONTAINER_TESTS", "1"),
            ("GIT_COLLAB_SOMETHING__ELSE", "[broken"),
        ])
        .unwrap();
        assert_eq!(loaded.config.ssh.listen, "0.0.0.0:22");
    }

    #[test]
    fn numeric_env_values_stay_strings() {
        let loaded = load_env(&[
            ("GIT_COLLAB_SITE_TITLE", "12345"),
            ("GIT_COLLAB_STATE_DIR", "2024"),
            ("GIT_COLLAB_LOG__LEVEL", "debug"),
        ])
        .unwrap();
        assert_eq!(loaded.config.site_title, "12345");
        assert_eq!(loaded.config.state_dir, PathBuf::from("2024"));
    }

    #[test]
    fn derived_paths_follow_the_final_state_dir() {
        let loaded = load_env(&[("GIT_COLLAB_STATE_DIR", "/srv/gc")]).unwrap();
        let c = &loaded.config;
        assert_eq!(c.repos_dir, PathBuf::from("/srv/gc/repos"));
        assert_eq!(c.collab_db_path(), PathBuf::from("/srv/gc/repos/collab.db"));
        assert_eq!(
            c.ssh.host_key,
            PathBuf::from("/srv/gc/ssh_host_ed25519_key")
        );
        assert_eq!(
            c.ssh.authorized_keys,
            PathBuf::from("/srv/gc/authorized_keys")
        );
        // Explicit values win over derivation; collab_db follows repos_dir.
        let loaded = load_env(&[
            ("GIT_COLLAB_STATE_DIR", "/srv/gc"),
            ("GIT_COLLAB_REPOS_DIR", "/data/repos"),
            ("GIT_COLLAB_SSH__HOST_KEY", "/keys/host"),
        ])
        .unwrap();
        let c = &loaded.config;
        assert_eq!(c.collab_db_path(), PathBuf::from("/data/repos/collab.db"));
        assert_eq!(c.ssh.host_key, PathBuf::from("/keys/host"));
        assert_eq!(
            loaded.sources["ssh.host_key"],
            "env GIT_COLLAB_SSH__HOST_KEY"
        );
        assert_eq!(loaded.sources["ssh.authorized_keys"], "derived");
    }

    #[test]
    fn file_indirection_reads_keys_one_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        std::fs::write(&keys, format!("# admins\n{KEY_A}\n\n  {KEY_B}  \n")).unwrap();
        let title = dir.path().join("title");
        std::fs::write(&title, "Secret Forge\n").unwrap();
        let loaded = load_env(&[
            ("GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE", keys.to_str().unwrap()),
            ("GIT_COLLAB_SITE_TITLE_FILE", title.to_str().unwrap()),
        ])
        .unwrap();
        assert_eq!(loaded.config.initial_admin_keys, vec![KEY_A, KEY_B]);
        assert_eq!(loaded.config.site_title, "Secret Forge");
        assert_eq!(
            loaded.sources["initial_admin_keys"],
            "env GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE"
        );
    }

    #[test]
    fn file_values_are_redacted_in_config_show() {
        let dir = tempfile::tempdir().unwrap();
        let title = dir.path().join("title");
        std::fs::write(&title, "Secret Forge\n").unwrap();
        let keys = dir.path().join("keys");
        std::fs::write(&keys, format!("{KEY_A}\n")).unwrap();
        let loaded = load_env(&[
            ("GIT_COLLAB_SITE_TITLE_FILE", title.to_str().unwrap()),
            ("GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE", keys.to_str().unwrap()),
            ("GIT_COLLAB_LOG__LEVEL", "debug"),
        ])
        .unwrap();
        assert_eq!(loaded.config.site_title, "Secret Forge");
        let json = loaded.to_json();
        let shown = format!("<redacted: from file {}>", title.display());
        assert_eq!(json["site_title"]["value"], shown.as_str());
        assert_eq!(
            json["site_title"]["source"],
            "env GIT_COLLAB_SITE_TITLE_FILE"
        );
        assert_eq!(
            json["initial_admin_keys"]["value"],
            format!("<redacted: from file {}>", keys.display()).as_str()
        );
        assert_eq!(json["log.level"]["value"], "debug");
        let text = loaded.to_text();
        assert!(text.contains(&shown), "{text}");
        for secret in ["Secret Forge", "AAAAC3Nz", "SHA256:"] {
            assert!(!text.contains(secret), "{text}");
            assert!(!json.to_string().contains(secret), "{json}");
        }

        // A flag overriding the file: the shown value is the flag's.
        let flags = ConfigFlags {
            state_dir: Some("/srv".into()),
            site_title: Some("Open".into()),
            ..ConfigFlags::default()
        };
        let env = env(&[("GIT_COLLAB_SITE_TITLE_FILE", title.to_str().unwrap())]);
        let loaded = load_from(&flags, &env, &no_system_file()).unwrap();
        assert_eq!(loaded.to_json()["site_title"]["value"], "Open");
    }

    #[test]
    fn file_values_are_size_bounded() {
        let e = err(load_env(&[("GIT_COLLAB_SITE_TITLE_FILE", "/dev/zero")]));
        assert_eq!(
            e,
            "site_title from env GIT_COLLAB_SITE_TITLE_FILE: cannot read /dev/zero: \
             larger than 64 KiB (the limit for _FILE values)"
        );
        let dir = tempfile::tempdir().unwrap();
        let at_limit = dir.path().join("at_limit");
        std::fs::write(&at_limit, "x".repeat(MAX_SECRET_FILE_BYTES as usize)).unwrap();
        let loaded = load_env(&[("GIT_COLLAB_SITE_TITLE_FILE", at_limit.to_str().unwrap())]);
        assert_eq!(loaded.unwrap().config.site_title.len(), 64 * 1024);
        let over = dir.path().join("over");
        std::fs::write(&over, "x".repeat(MAX_SECRET_FILE_BYTES as usize + 1)).unwrap();
        let e = err(load_env(&[(
            "GIT_COLLAB_SITE_TITLE_FILE",
            over.to_str().unwrap(),
        )]));
        assert!(
            e.ends_with("larger than 64 KiB (the limit for _FILE values)"),
            "{e}"
        );
        let binary = dir.path().join("binary");
        std::fs::write(&binary, b"\xff\xfesecret").unwrap();
        let e = err(load_env(&[(
            "GIT_COLLAB_SITE_TITLE_FILE",
            binary.to_str().unwrap(),
        )]));
        assert!(
            e.ends_with("not valid UTF-8") && !e.contains("secret"),
            "{e}"
        );
    }

    #[test]
    fn file_indirection_errors() {
        let e = err(load_env(&[(
            "GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE",
            "/nonexistent/keys",
        )]));
        assert!(
            e.starts_with("initial_admin_keys from env GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE: cannot read /nonexistent/keys"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        std::fs::write(&keys, format!("{KEY_A}\nhunter2\n")).unwrap();
        let e = err(load_env(&[(
            "GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE",
            keys.to_str().unwrap(),
        )]));
        assert!(
            e.starts_with("initial_admin_keys line 2 from env GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE: not an OpenSSH public key"),
            "{e}"
        );
        assert!(
            !e.contains("hunter2"),
            "a secret file's content is not echoed: {e}"
        );
        let e = err(load_env(&[
            ("GIT_COLLAB_SITE_TITLE", "a"),
            ("GIT_COLLAB_SITE_TITLE_FILE", keys.to_str().unwrap()),
        ]));
        assert!(e.contains("set only one of them"), "{e}");
    }

    #[test]
    fn admin_keys_forms() {
        let loaded = load_env(&[("GIT_COLLAB_INITIAL_ADMIN_KEYS", KEY_A)]).unwrap();
        assert_eq!(loaded.config.initial_admin_keys, vec![KEY_A]);
        let list = format!("[\"{KEY_A}\", \"{KEY_B}\"]");
        let loaded = load_env(&[("GIT_COLLAB_INITIAL_ADMIN_KEYS", &list)]).unwrap();
        assert_eq!(loaded.config.initial_admin_keys, vec![KEY_A, KEY_B]);
        let loaded = load_env(&[("GIT_COLLAB_INITIAL_ADMIN_KEYS", "")]).unwrap();
        assert!(loaded.config.initial_admin_keys.is_empty());
        let e = err(load_env(&[(
            "GIT_COLLAB_INITIAL_ADMIN_KEYS",
            "ssh-ed25519 notbase64 x",
        )]));
        assert!(
            e.starts_with("initial_admin_keys line 1 = \"ssh-ed25519 notbase64 x\" from env GIT_COLLAB_INITIAL_ADMIN_KEYS: not an OpenSSH public key"),
            "{e}"
        );
        let e = err(load_env(&[(
            "GIT_COLLAB_INITIAL_ADMIN_KEYS",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n",
        )]));
        assert!(e.contains("looks like a private key"), "{e}");
        assert!(!e.contains("b3Bl"), "{e}");
    }

    #[test]
    fn bad_values_name_key_value_and_layer() {
        for (pairs, expected) in [
            (
                vec![("GIT_COLLAB_SSH__LISTEN", "nope")],
                "ssh.listen = \"nope\" from env GIT_COLLAB_SSH__LISTEN: invalid socket address",
            ),
            (
                vec![("GIT_COLLAB_HTTP__LISTEN", "12345")],
                "http.listen = \"12345\" from env GIT_COLLAB_HTTP__LISTEN: invalid socket address",
            ),
            (
                vec![("GIT_COLLAB_LOG__FORMAT", "xml")],
                "log.format = \"xml\" from env GIT_COLLAB_LOG__FORMAT: expected text or json",
            ),
            (
                vec![("GIT_COLLAB_LOG__LEVEL", "loud")],
                "log.level = \"loud\" from env GIT_COLLAB_LOG__LEVEL: expected trace",
            ),
            (
                vec![("GIT_COLLAB_MAX_RELEASE_SIZE", "5X")],
                "max_release_size = \"5X\" from env GIT_COLLAB_MAX_RELEASE_SIZE: unknown unit",
            ),
            (
                vec![("GIT_COLLAB_STATE_DIR", "")],
                "state_dir = \"\" from env GIT_COLLAB_STATE_DIR: must not be empty",
            ),
        ] {
            let e = err(load_env(&pairs));
            assert!(e.starts_with(expected), "{pairs:?}: {e}");
        }
    }

    #[test]
    fn bad_file_values_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("server.toml");
        let flags = ConfigFlags {
            config: Some(file.clone()),
            ..Default::default()
        };
        for (text, expected) in [
            ("max_release_size = -1\n", "max_release_size = -1 from file"),
            ("site_title = 3\n", "site_title = 3 from file"),
            (
                "[log]\nlevel = [\"info\"]\n",
                "log.level = [\"info\"] from file",
            ),
            (
                "initial_admin_keys = [1]\n",
                "initial_admin_keys = [1] from file",
            ),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = err(load_from(&flags, &env(&[]), &no_system_file()));
            assert!(e.starts_with(expected), "{text:?}: {e}");
            assert!(e.contains(&file.display().to_string()), "{e}");
        }
    }

    #[test]
    fn a_bad_lower_layer_value_is_overridden() {
        let loaded = load_from(
            &ConfigFlags {
                ssh_listen: Some("127.0.0.1:9".into()),
                ..Default::default()
            },
            &env(&[("GIT_COLLAB_SSH__LISTEN", "nope")]),
            &no_system_file(),
        )
        .unwrap();
        assert_eq!(loaded.config.ssh.listen, "127.0.0.1:9");
        assert_eq!(loaded.sources["ssh.listen"], "flag --ssh-listen");
    }

    #[test]
    fn lease_policy_keys_take_seconds_or_units() {
        let loaded = load_env(&[
            ("GIT_COLLAB_LEASES__MAX_LIFETIME", "2h"),
            ("GIT_COLLAB_LEASES__LOCK_DELAY", "15"),
            ("GIT_COLLAB_LEASES__MAX_TTL", "10m"),
        ])
        .unwrap();
        assert_eq!(
            loaded.config.leases,
            LeasesConfig {
                max_lifetime: 7200,
                lock_delay: 15,
                max_ttl: 600
            }
        );
        assert_eq!(
            loaded.sources["leases.lock_delay"],
            "env GIT_COLLAB_LEASES__LOCK_DELAY"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("server.toml");
        std::fs::write(&file, "[leases]\nlock_delay = 30\nmax_lifetime = \"1d\"\n").unwrap();
        let flags = ConfigFlags {
            config: Some(file),
            ..Default::default()
        };
        let loaded = load_from(&flags, &env(&[]), &no_system_file()).unwrap();
        assert_eq!(
            (
                loaded.config.leases.lock_delay,
                loaded.config.leases.max_lifetime
            ),
            (30, 86400)
        );
        let defaults = load_env(&[]).unwrap().to_text();
        assert!(defaults.contains("0 (unlimited)"), "{defaults}");
        assert!(defaults.contains("0 (none)"), "{defaults}");
        for (var, bad) in [
            ("GIT_COLLAB_LEASES__LOCK_DELAY", "soon"),
            ("GIT_COLLAB_LEASES__MAX_TTL", "0"),
            ("GIT_COLLAB_LEASES__MAX_LIFETIME", "-5"),
            ("GIT_COLLAB_LEASES__MAX_LIFETIME", "99999d"),
        ] {
            let e = err(load_env(&[(var, bad)]));
            assert!(e.contains(&format!("from env {var}")), "{e}");
        }
        assert_eq!(parse_lease_duration("90"), Ok(90));
        assert_eq!(parse_lease_duration("7d"), Ok(604800));
        assert!(parse_lease_duration("1w").is_err());
        assert!(parse_lease_duration("").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("104857600"), Ok(104857600));
        assert_eq!(parse_size("100MiB"), Ok(100 << 20));
        assert_eq!(parse_size("5M"), Ok(5 << 20));
        assert_eq!(parse_size("5 m"), Ok(5 << 20));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("2k"), Ok(2048));
        assert!(parse_size("M").is_err());
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("99999999999T").is_err());
        let loaded = load_env(&[("GIT_COLLAB_MAX_RELEASE_SIZE", "5M")]).unwrap();
        assert_eq!(loaded.config.max_release_size, 5 << 20);
    }

    #[test]
    fn limits_parse_and_validate() {
        let loaded = load_env(&[
            ("GIT_COLLAB_SSH__MAX_STARTUPS", "5:50:20"),
            ("GIT_COLLAB_SSH__LOGIN_GRACE_TIME", "2m"),
            ("GIT_COLLAB_HTTP__HEADER_READ_TIMEOUT", "1500ms"),
            ("GIT_COLLAB_HTTP__IDLE_TIMEOUT", "30"),
            ("GIT_COLLAB_HTTP__MAX_REQUEST_BODY", "1M"),
            ("GIT_COLLAB_GIT__MAX_PROCESSES", "3"),
        ])
        .unwrap();
        let c = &loaded.config;
        assert_eq!(
            c.ssh.max_startups,
            MaxStartups {
                start: 5,
                rate: 50,
                full: 20
            }
        );
        assert_eq!(c.ssh.login_grace_time, Duration::from_secs(120));
        assert_eq!(c.http.header_read_timeout, Duration::from_millis(1500));
        assert_eq!(c.http.idle_timeout, Duration::from_secs(30));
        assert_eq!(c.http.max_request_body, 1 << 20);
        assert_eq!(c.git.max_processes, 3);
        assert_eq!(
            loaded.sources["git.max_processes"],
            "env GIT_COLLAB_GIT__MAX_PROCESSES"
        );
        let text = loaded.to_text();
        assert!(text.contains("1500ms"), "{text}");
        assert!(text.contains("5:50:20"), "{text}");
        assert_eq!(loaded.to_json()["ssh.login_grace_time"]["value"], 120);

        for (pairs, expected) in [
            (
                vec![("GIT_COLLAB_SSH__MAX_SESSIONS", "0")],
                "ssh.max_sessions = \"0\" from env GIT_COLLAB_SSH__MAX_SESSIONS: expected a whole number from 1 to 1000000",
            ),
            (
                vec![("GIT_COLLAB_HTTP__IDLE_TIMEOUT", "0s")],
                "http.idle_timeout = \"0s\" from env GIT_COLLAB_HTTP__IDLE_TIMEOUT: must be longer than zero",
            ),
            (
                vec![("GIT_COLLAB_HTTP__HEADER_READ_TIMEOUT", "10 days")],
                "http.header_read_timeout = \"10 days\" from env GIT_COLLAB_HTTP__HEADER_READ_TIMEOUT: unknown unit",
            ),
            (
                vec![("GIT_COLLAB_SSH__MAX_STARTUPS", "30:10:10")],
                "ssh.max_startups = \"30:10:10\" from env GIT_COLLAB_SSH__MAX_STARTUPS: start must not exceed full",
            ),
            (
                vec![("GIT_COLLAB_SSH__MAX_STARTUPS", "1:0:10")],
                "ssh.max_startups = \"1:0:10\" from env GIT_COLLAB_SSH__MAX_STARTUPS: rate is a percentage",
            ),
        ] {
            let e = err(load_env(&pairs));
            assert!(e.starts_with(expected), "{pairs:?}: {e}");
        }
        // One number means "refuse past it".
        assert_eq!(
            parse_max_startups("50"),
            Ok(MaxStartups {
                start: 50,
                rate: 100,
                full: 50
            })
        );
        assert_eq!(fmt_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(fmt_duration(Duration::from_secs(90)), "90s");
    }

    #[test]
    fn limits_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("server.toml");
        std::fs::write(
            &file,
            "[ssh]\nmax_sessions = 4\nlogin_grace_time = 30\nmax_startups = 20\n[git]\nmax_processes = 2\n[http]\nmax_file_shown = \"64KiB\"\n",
        )
        .unwrap();
        let flags = ConfigFlags {
            config: Some(file.clone()),
            ..Default::default()
        };
        let c = load_from(&flags, &env(&[]), &no_system_file())
            .unwrap()
            .config;
        assert_eq!(c.ssh.max_sessions, 4);
        assert_eq!(c.ssh.login_grace_time, Duration::from_secs(30));
        assert_eq!(c.ssh.max_startups.full, 20);
        assert_eq!(c.git.max_processes, 2);
        assert_eq!(c.http.max_file_shown, 64 << 10);
        std::fs::write(&file, "[git]\nmax_procs = 2\n").unwrap();
        let e = err(load_from(&flags, &env(&[]), &no_system_file()));
        assert!(e.starts_with("git.max_procs from file"), "{e}");
    }

    #[test]
    fn misspelled_nesting_is_reported() {
        let vars = env(&[
            ("GIT_COLLAB_SSH_LISTEN", "x"),
            ("GIT_COLLAB_SSH_COMMAND", "ssh"),
            ("GIT_COLLAB_LOG_LEVEL_FILE", "/x"),
        ]);
        assert_eq!(
            misspelled_env_vars(&vars),
            vec![
                (
                    "GIT_COLLAB_LOG_LEVEL_FILE".to_string(),
                    "GIT_COLLAB_LOG__LEVEL".to_string()
                ),
                (
                    "GIT_COLLAB_SSH_LISTEN".to_string(),
                    "GIT_COLLAB_SSH__LISTEN".to_string()
                ),
            ]
        );
    }

    #[test]
    fn show_renders_every_key() {
        let loaded = load_env(&[("GIT_COLLAB_INITIAL_ADMIN_KEYS", KEY_A)]).unwrap();
        let json = loaded.to_json();
        assert_eq!(json.as_object().unwrap().len(), KEYS.len());
        assert_eq!(
            json["collab_db"]["value"],
            "/var/lib/git-collab/repos/collab.db"
        );
        assert_eq!(json["max_release_size"]["value"], 104857600);
        assert_eq!(json["initial_admin_keys"]["value"][0], KEY_A);
        let text = loaded.to_text();
        assert!(text.contains("104857600 (100 MiB)"), "{text}");
        assert!(text.contains("SHA256:"), "{text}");
        // Sources line up in one column.
        let column = text.lines().next().unwrap().find("default").unwrap();
        for line in text.lines() {
            let source = line.trim_end().rsplit("  ").next().unwrap();
            assert_eq!(line.rfind(source).unwrap(), column, "{text}");
        }
    }
}
