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
//! - `show`: `config show`, as text and JSON;
//! - `server_config`: what they all produce and read, below them:
//!   `ServerConfig` and its sections, `LoadedConfig`, and how a key is
//!   spelled in the environment and as a flag. This file loads (the
//!   layers, then `resolve`) and re-exports it.
//!
//! Derived defaults (`repos_dir`, `ssh.host_key`, …) follow the final
//! `state_dir`, whichever layer set it. Nothing here writes to disk.
//!
//! The struct field names are the contract the rest of the server uses.

pub mod keys;
mod layers;
mod parse;
mod resolve;
mod server_config;
mod show;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use figment::Figment;

pub use layers::ConfigFlags;
pub use parse::{
    parse_duration, parse_lease_duration, parse_max_startups, parse_size, validate_log_level,
};
pub use server_config::{
    env_name, flag_name, DeclaredWebhook, EventsConfig, GitConfig, HttpConfig, LeasesConfig,
    LfsConfig, LoadedConfig, LogConfig, MaintenanceConfig, MaxStartups, McpConfig, MirrorsConfig,
    ServerConfig, SshConfig, WebhooksConfig, CONFIG_ENV, DEFAULT_MAX_TTL, DEFAULT_STATE_DIR,
    ENV_PREFIX, MAX_SECRET_FILE_BYTES, SYSTEM_CONFIG_FILE,
};
pub use show::fmt_duration;

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
}

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
    // SSH: `0` leaves ACKs to the kernel's delayed-ACK timer (ssh::quick_ack;
    // for comparison in benches/lease_ssh.rs).
    "GIT_COLLAB_SSH_QUICK_ACK",
    "GIT_COLLAB_SSH_V2_IN_SERVER",
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
