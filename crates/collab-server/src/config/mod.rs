//! Server configuration: the resolved `ServerConfig` and how it is layered
//! (built-in defaults < TOML file < `GIT_COLLAB_*` environment < CLI flags,
//! SPEC §3.1).
//!
//! Every key is one row of the table in [`keys`]: its name (which is also
//! its TOML path and its field path here), its kind, its default and what
//! it does. The modules:
//!
//! - `keys`: the table;
//! - `layers`: the defaults, file, environment and flag layers (figment
//!   providers named after their source);
//! - `resolve`: each key read from the layer that won it and converted by
//!   its kind, so an error names key, value and layer;
//! - `parse`: the text forms of sizes, durations and limits;
//! - `show`: `config show`, as text and JSON.
//!
//! Derived defaults (`repos_dir`, `ssh.host_key`, …) follow the final
//! `state_dir`, whichever layer set it. Nothing here writes to disk.
//!
//! The struct field names are the contract the rest of the server uses.

pub mod keys;
mod layers;
mod parse;
mod resolve;
mod show;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;

pub use layers::ConfigFlags;
pub use parse::{
    parse_duration, parse_lease_duration, parse_max_startups, parse_size, validate_log_level,
};
pub use show::fmt_duration;

/// The effective configuration after every layer has been applied and every
/// derived default (`repos_dir`, `collab_db`, `ssh.host_key`, …) resolved.
///
/// Each field is the key of the same name (`ssh.listen` is `ssh.listen`) in
/// [`keys::KEYS`], which says what it does and its default; the comments
/// here say only how a value is held.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ServerConfig {
    pub state_dir: PathBuf,
    pub repos_dir: PathBuf,
    /// `None` means `{repos_dir}/collab.db`; read it through `collab_db_path`
    /// or `collab_db_location`.
    pub collab_db: Option<PathBuf>,
    pub site_title: String,
    /// Bytes.
    pub max_release_size: u64,
    /// Bytes.
    pub max_issue_body: u64,
    /// Whole OpenSSH public key lines.
    pub initial_admin_keys: Vec<String>,
    pub push_to_create: bool,
    pub ssh: SshConfig,
    pub http: HttpConfig,
    pub git: GitConfig,
    pub log: LogConfig,
    pub leases: LeasesConfig,
    pub events: EventsConfig,
    pub webhooks: WebhooksConfig,
    pub maintenance: MaintenanceConfig,
    pub mirrors: MirrorsConfig,
    pub mcp: McpConfig,
}

/// `ssh.*`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct SshConfig {
    /// `IP:PORT`, checked.
    pub listen: String,
    pub host_key: PathBuf,
    pub authorized_keys: PathBuf,
    /// CA keys whose user certificates log in (unset: none).
    pub trusted_user_ca_keys: Option<PathBuf>,
    /// A KRL or a list of revoked keys and certificates (unset: none).
    pub revoked_keys: Option<PathBuf>,
    /// A certificate of the host key, presented to clients (unset: none).
    pub host_certificate: Option<PathBuf>,
    pub allow_sha1_rsa: bool,
    /// Transport ciphers offered, most preferred first (`SSH_CIPHERS` names).
    pub ciphers: Vec<String>,
    pub legacy_host_keys: bool,
    pub max_connections: usize,
    pub max_startups: MaxStartups,
    pub max_startups_per_ip: usize,
    pub max_queued_per_ip: usize,
    pub login_grace_time: Duration,
    pub max_sessions: usize,
    pub max_connections_per_principal: usize,
    pub idle_timeout: Duration,
    pub pressure_idle_timeout: Duration,
    pub pressure_percent: usize,
    /// The terminal UI: no key press this long ends the session.
    pub tui_idle_timeout: Duration,
    /// The terminal UI: a client whose window stays full this long is
    /// disconnected.
    pub tui_stall_timeout: Duration,
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

/// `http.*`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct HttpConfig {
    /// `IP:PORT`, checked.
    pub listen: String,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    /// Bytes.
    pub max_request_body: u64,
    pub max_concurrent_pages: usize,
    /// Bytes.
    pub max_file_shown: u64,
}

/// `git.*`: git child processes (`upload-pack`, `receive-pack`, and the
/// web's raw file streams).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct GitConfig {
    pub max_processes: usize,
    pub max_processes_per_principal: usize,
    pub queue_timeout: Duration,
    /// `uploadpack.packObjectsHook` = the server's pack cache (`pack_cache`).
    pub pack_cache: bool,
    /// Bytes.
    pub pack_cache_max_size: u64,
    pub pack_cache_max_age: Duration,
    pub pack_cache_min_occurrences: u64,
    pub max_concurrent_pack_objects: usize,
    /// Niceness added to `upload-pack` and its children (`git_priority`).
    pub nice: u64,
}

/// `leases.*`, in seconds. The defaults keep phase 1's behaviour: no
/// lifetime cap, no lock delay, TTLs up to ten years.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct LeasesConfig {
    /// 0 = unlimited.
    pub max_lifetime: u64,
    /// 0 = none.
    pub lock_delay: u64,
    pub max_ttl: u64,
    pub max_waiters: usize,
    pub max_waiters_per_principal: usize,
}

/// Default of `leases.max_ttl` and the cap of every `leases.*` key: ten
/// years, the longest `--ttl` the verbs parse.
pub const DEFAULT_MAX_TTL: u64 = 10 * 365 * 24 * 60 * 60;

/// `log.*`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct LogConfig {
    /// A level or a tracing filter, checked.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

/// `mcp.*`: the limits of one `collab-mcp` session.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct McpConfig {
    pub max_calls_in_flight: usize,
    /// Bytes.
    pub max_message_size: u64,
    pub idle_timeout: Duration,
}

/// `events.*`: the event stream (`collab-events watch`) and the event
/// log's retention.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct EventsConfig {
    pub retention_days: u64,
    pub heartbeat_secs: u64,
    pub stall_timeout_secs: u64,
    pub max_watchers: u64,
    pub max_watchers_per_principal: u64,
}

/// `webhooks.*`: webhook delivery.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct WebhooksConfig {
    pub allowed_hosts: Vec<String>,
    pub attempt_timeout_secs: u64,
    pub retry_base_secs: u64,
    pub retry_max_secs: u64,
    pub disable_after_secs: u64,
    /// Seconds a node's claim on a subscription lasts unless renewed.
    pub claim_secs: u64,
    /// `collab-hook add` subscriptions per owner.
    pub max_per_owner: u64,
    /// `collab-hook add` subscriptions matching any one repository.
    pub max_per_repo: u64,
    pub subscriptions: Vec<DeclaredWebhook>,
}

/// `maintenance.*`: when repositories are maintained (after so many
/// pushes, or once a pushed-to repository has been idle so long) and how
/// many runs at once across the server.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct MaintenanceConfig {
    /// 0: never on count.
    pub after_pushes: u64,
    /// Seconds; 0: never on idleness.
    pub idle_secs: u64,
    pub concurrency: u64,
}

/// `mirrors.*`: pull and push mirrors (`mirrors`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct MirrorsConfig {
    pub allowed_hosts: Vec<String>,
    pub max_per_repo: u64,
    /// Seconds.
    pub min_interval_secs: u64,
    /// Seconds.
    pub max_backoff_secs: u64,
    /// Seconds.
    pub timeout_secs: u64,
    pub concurrency: u64,
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

impl ServerConfig {
    /// The built-in defaults (the key table's) for a given state
    /// directory, which must be UTF-8 like every configured path.
    pub fn with_state_dir(state_dir: PathBuf) -> Self {
        let flags = ConfigFlags {
            state_dir: Some(state_dir),
            ..ConfigFlags::default()
        };
        load_layers(&flags, &BTreeMap::new(), None)
            .expect("the built-in defaults are valid")
            .config
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

    /// The pack cache (`pack_cache`): rebuilt on demand, never backed up.
    pub fn pack_cache_dir(&self) -> PathBuf {
        self.state_dir.join("pack-cache")
    }

    /// What `git upload-pack`'s pack-objects hook needs to serve `repo`,
    /// or `None` when the pack cache is off.
    pub fn pack_cache_settings(&self, repo: &Path) -> Option<crate::pack_cache::Settings> {
        self.git.pack_cache.then(|| crate::pack_cache::Settings {
            dir: self.pack_cache_dir(),
            repo: repo.to_path_buf(),
            max_size: self.git.pack_cache_max_size,
            max_age: self.git.pack_cache_max_age,
            min_occurrences: self.git.pack_cache_min_occurrences,
            slots: self.git.max_concurrent_pack_objects,
        })
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
    use anyhow::Context as _;
    for path in [
        &mut config.state_dir,
        &mut config.repos_dir,
        &mut config.ssh.host_key,
        &mut config.ssh.authorized_keys,
    ] {
        *path =
            std::path::absolute(&*path).with_context(|| format!("resolving {}", path.display()))?;
    }
    for path in [
        &mut config.ssh.trusted_user_ca_keys,
        &mut config.ssh.revoked_keys,
        &mut config.ssh.host_certificate,
    ]
    .into_iter()
    .flatten()
    {
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
    let file = layers::config_file(flags, env, system_file)?;
    load_layers(flags, env, file.as_deref())
}

/// Merge defaults < file < environment < flags and resolve every key.
fn load_layers(
    flags: &ConfigFlags,
    env: &BTreeMap<String, OsString>,
    file: Option<&Path>,
) -> anyhow::Result<LoadedConfig> {
    let mut figment = Figment::new().merge(layers::defaults_layer());
    if let Some(file) = file {
        figment = figment.merge(layers::file_layer(file)?);
    }
    let mut file_layers = Vec::new();
    for (layer, file) in layers::env_layers(env)? {
        if let Some((key, path)) = file {
            file_layers.push((layer.name.clone(), key, path));
        }
        figment = figment.merge(layer);
    }
    for layer in layers::flag_layers(flags)? {
        figment = figment.merge(layer);
    }
    let mut loaded = resolve::resolve(&figment)?;
    for (layer, key, path) in file_layers {
        if loaded.sources.get(key) == Some(&layer) {
            loaded.secret_files.insert(key.to_string(), path);
        }
    }
    Ok(loaded)
}

/// `GIT_COLLAB_*` variables that are not server settings but are known:
/// the client's, the hooks' (set by the server for `receive-pack`), the
/// `authorized_keys` role marker, and the tests' and CI's. The server
/// ignores them silently; any other unknown `GIT_COLLAB_*` name gets a
/// warning ([`misspelled_env_vars`]). A test scans the tree for names
/// missing here.
pub const OTHER_ENV_VARS: &[&str] = &[
    // The server's own, not a key.
    CONFIG_ENV,
    // The client.
    "GIT_COLLAB_SSH_COMMAND",
    "GIT_COLLAB_SSH_REUSE",
    // Hook context (hooks::context).
    "GIT_COLLAB_PRINCIPAL",
    "GIT_COLLAB_FINGERPRINT",
    "GIT_COLLAB_REPO",
    "GIT_COLLAB_ACCESS",
    "GIT_COLLAB_DB",
    "GIT_COLLAB_FENCED_REFS",
    "GIT_COLLAB_FENCED_REF_ISSUE",
    "GIT_COLLAB_OTHERS_MAY_REVISE",
    "GIT_COLLAB_MAX_BODY",
    "GIT_COLLAB_WEB_URL",
    // The pack cache hook's context (pack_cache::Settings).
    "GIT_COLLAB_PACK_CACHE_DIR",
    "GIT_COLLAB_PACK_CACHE_REPO",
    "GIT_COLLAB_PACK_CACHE_MAX_SIZE",
    "GIT_COLLAB_PACK_CACHE_MAX_AGE",
    "GIT_COLLAB_PACK_CACHE_MIN_OCCURRENCES",
    "GIT_COLLAB_PACK_CACHE_SLOTS",
    // `environment="GIT_COLLAB_ROLE=admin"` in authorized_keys.
    "GIT_COLLAB_ROLE",
    // The store: lease operations on PostgreSQL as statements instead of
    // their functions (docs/postgres.md, for comparison and as a way back).
    "GIT_COLLAB_PG_LEASE_STATEMENTS",
    // Tests, benchmarks and CI.
    "GIT_COLLAB_TEST_BACKEND",
    "GIT_COLLAB_TEST_POSTGRES",
    "GIT_COLLAB_REQUIRE_CONTAINER_TESTS",
    "GIT_COLLAB_REQUIRE_BROWSER_TESTS",
    "GIT_COLLAB_REQUIRE_POSTGRES_TESTS",
    "GIT_COLLAB_REQUIRE_MCP_TESTS",
    "GIT_COLLAB_MCP_PYTHON",
    "GIT_COLLAB_MCP_VENV",
    "GIT_COLLAB_REQUIRE_NIX_TESTS",
    "GIT_COLLAB_REQUIRE_STATIX",
    "GIT_COLLAB_BENCH_DOCS",
    "GIT_COLLAB_CI_PG_DIR",
    "GIT_COLLAB_CI_CACHE",
    "GIT_COLLAB_E2E_IMAGE",
    "GIT_COLLAB_IMAGE",
];

/// `GIT_COLLAB_*` variables that are neither a setting (nor its `_FILE`
/// form) nor one of [`OTHER_ENV_VARS`], each with the known name nearest
/// to it, when one is near (`GIT_COLLAB_SSH_LISTEN` → `GIT_COLLAB_SSH__LISTEN`,
/// `GIT_COLLAB_SITE_TITEL` → `GIT_COLLAB_SITE_TITLE`); an empty suggestion
/// when none is. The server ignores them, so the caller warns.
pub fn misspelled_env_vars(env: &BTreeMap<String, OsString>) -> Vec<(String, String)> {
    let settings: Vec<String> = keys::KEYS.iter().map(|key| env_name(key.name)).collect();
    let known = |name: &str| {
        let stem = name.strip_suffix("_FILE").unwrap_or(name);
        settings.iter().any(|s| s == name || s == stem) || OTHER_ENV_VARS.contains(&name)
    };
    env.keys()
        .filter(|name| name.starts_with(ENV_PREFIX) && !known(name))
        .map(|name| {
            let (stem, file) = match name.strip_suffix("_FILE") {
                Some(stem) => (stem, "_FILE"),
                None => (name.as_str(), ""),
            };
            // Settings first: a near setting is the likelier meaning.
            let nearest = settings
                .iter()
                .map(String::as_str)
                .chain(OTHER_ENV_VARS.iter().copied())
                .map(|candidate| (edit_distance(stem, candidate), candidate))
                .min_by_key(|(distance, _)| *distance)
                .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 8))
                .map(|(_, candidate)| {
                    // `_FILE` belongs only to settings.
                    if settings.iter().any(|s| s == candidate) {
                        format!("{candidate}{file}")
                    } else {
                        candidate.to_string()
                    }
                })
                .unwrap_or_default();
            (name.clone(), nearest)
        })
        .collect()
}

/// Levenshtein distance over bytes, case-insensitive (names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.to_ascii_uppercase(), b.to_ascii_uppercase());
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
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
