//! The resolved configuration as the rest of the server reads it
//! ([`ServerConfig`] and its sections), what a load gives ([`LoadedConfig`]),
//! and the names of the layers (the environment prefix, how a key is
//! spelled as an environment variable and as a flag). Below `keys`,
//! `layers`, `parse`, `resolve` and `show`, which all use it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    pub lfs: LfsConfig,
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
    pub max_verbs: usize,
    pub max_verbs_per_principal: usize,
    pub max_heavy_verbs: usize,
    pub max_heavy_verbs_per_principal: usize,
    pub max_tui_sessions: usize,
    pub max_tui_per_principal: usize,
    /// The terminal UI: no key press this long ends the session.
    pub tui_idle_timeout: Duration,
    /// The terminal UI: a client whose window stays full this long is
    /// disconnected.
    pub tui_stall_timeout: Duration,
    /// The terminal UI: a session ends this long after it opened, key
    /// presses or not.
    pub tui_max_lifetime: Duration,
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
    /// 0 = none: an evicted patch's issue is ready at once.
    pub eviction_grace: u64,
    pub max_waiters: usize,
    pub max_waiters_per_principal: usize,
}

/// Default of `leases.max_ttl` and the cap of every `leases.*` key: ten
/// years, the longest `--ttl` the verbs parse (the one constant).
pub const DEFAULT_MAX_TTL: u64 = collab_proto::limits::MAX_TTL_SECS;

/// `log.*`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct LogConfig {
    /// A level or a tracing filter, checked.
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

/// `lfs.*`: git-lfs objects (`lfs`, docs/lfs.md).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct LfsConfig {
    /// Bytes.
    pub max_object_size: u64,
    /// Bytes, per repository.
    pub max_repo_size: u64,
    /// How old an object no ref points at must be before maintenance
    /// removes it (by its file's time: when it was uploaded, or last
    /// found held by an upload's `batch`).
    pub gc_grace: Duration,
}

/// `mcp.*`: the limits of one `collab-mcp` session.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct McpConfig {
    pub max_calls_in_flight: usize,
    pub max_sessions: usize,
    pub max_sessions_per_principal: usize,
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
    /// The SQLite file of the collab database: `collab_db` when it is a
    /// path, else `{repos_dir}/collab.db` (also where a PostgreSQL-backed
    /// server would have kept it; see `collab_db_location`).
    pub fn collab_db_path(&self) -> PathBuf {
        match self.collab_db_location() {
            collab_store::Location::Sqlite(path) => path,
            collab_store::Location::Postgres(_) => self.repos_dir.join("collab.db"),
        }
    }

    /// Where the collab database lives: a SQLite file (a path, `sqlite:PATH`,
    /// or the default `{repos_dir}/collab.db`) or a PostgreSQL URL.
    pub fn collab_db_location(&self) -> collab_store::Location {
        match &self.collab_db {
            Some(given) => collab_store::Location::parse(&given.to_string_lossy()),
            None => collab_store::Location::Sqlite(self.repos_dir.join("collab.db")),
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
