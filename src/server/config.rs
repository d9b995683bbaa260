//! Server configuration: the resolved `ServerConfig` and how it is layered
//! (built-in defaults < TOML file < `GIT_COLLAB_*` environment < CLI flags).
//!
//! OWNER: server-config helper. The struct below is the shared contract; its
//! field names and meanings come from SPEC §3.1 and must not change.

use std::path::PathBuf;

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
    /// OpenSSH public key lines granted admin.
    pub initial_admin_keys: Vec<String>,
    pub ssh: SshConfig,
    pub http: HttpConfig,
    pub log: LogConfig,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct SshConfig {
    /// `host:port`, e.g. `0.0.0.0:2222`.
    pub listen: String,
    pub host_key: PathBuf,
    pub authorized_keys: PathBuf,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct HttpConfig {
    pub listen: String,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct LogConfig {
    pub level: String,
    /// `text` or `json`.
    pub format: String,
}

impl ServerConfig {
    /// Embedded defaults for a given state directory (SPEC §3.1).
    pub fn with_state_dir(state_dir: PathBuf) -> Self {
        ServerConfig {
            repos_dir: state_dir.join("repos"),
            collab_db: None,
            site_title: "git-collab".into(),
            max_release_size: 100 * 1024 * 1024,
            initial_admin_keys: Vec::new(),
            ssh: SshConfig {
                listen: "0.0.0.0:2222".into(),
                host_key: state_dir.join("ssh_host_ed25519_key"),
                authorized_keys: state_dir.join("authorized_keys"),
            },
            http: HttpConfig {
                listen: "0.0.0.0:8080".into(),
            },
            log: LogConfig {
                level: "info".into(),
                format: "text".into(),
            },
            state_dir,
        }
    }

    pub fn collab_db_path(&self) -> PathBuf {
        self.collab_db
            .clone()
            .unwrap_or_else(|| self.repos_dir.join("collab.db"))
    }

    /// Release artifacts live under the state directory so the volume keeps them.
    pub fn releases_dir(&self) -> PathBuf {
        self.state_dir.join("releases")
    }

    /// Server-managed git hooks (`core.hooksPath` for every served repo).
    pub fn hooks_dir(&self) -> PathBuf {
        self.state_dir.join("hooks")
    }
}

/// Configuration flags shared by every subcommand that needs the
/// configuration. Every field is optional: an unset flag does not override
/// lower layers. Flag names mirror the keys (`ssh.listen` -> `--ssh-listen`).
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize)]
pub struct ConfigFlags {
    /// Configuration file (TOML). Default: $GIT_COLLAB_CONFIG, else
    /// /etc/git-collab/server.toml when it exists.
    #[arg(long, global = true, value_name = "PATH")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    #[arg(long, global = true, value_name = "DIR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    #[arg(long, global = true, value_name = "DIR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repos_dir: Option<PathBuf>,
    #[arg(long, global = true, value_name = "PATH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collab_db: Option<PathBuf>,
    #[arg(long, global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site_title: Option<String>,
    #[arg(long, global = true, value_name = "BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_release_size: Option<u64>,
    #[arg(long, global = true, value_name = "ADDR")]
    #[serde(skip)]
    pub ssh_listen: Option<String>,
    #[arg(long, global = true, value_name = "PATH")]
    #[serde(skip)]
    pub ssh_host_key: Option<PathBuf>,
    #[arg(long, global = true, value_name = "PATH")]
    #[serde(skip)]
    pub ssh_authorized_keys: Option<PathBuf>,
    #[arg(long, global = true, value_name = "ADDR")]
    #[serde(skip)]
    pub http_listen: Option<String>,
    #[arg(long, global = true)]
    #[serde(skip)]
    pub log_level: Option<String>,
    #[arg(long, global = true, value_name = "text|json")]
    #[serde(skip)]
    pub log_format: Option<String>,
}

/// The effective configuration and, for every key, the layer that set it
/// (`default`, `file <path>`, `env GIT_COLLAB_...`, `flag --...`).
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: ServerConfig,
    /// Dotted key (`ssh.listen`) -> layer description.
    pub sources: std::collections::BTreeMap<String, String>,
}

/// Resolve the layers. Errors name the key, the bad value and the layer.
///
/// PLACEHOLDER (server-config helper replaces the body with figment layering
/// of defaults < TOML < env < flags, `_FILE` indirection, derived defaults).
pub fn load(flags: &ConfigFlags) -> anyhow::Result<LoadedConfig> {
    let state_dir = flags
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/git-collab"));
    let mut config = ServerConfig::with_state_dir(state_dir);
    if let Some(v) = &flags.repos_dir {
        config.repos_dir = v.clone();
    }
    if let Some(v) = &flags.collab_db {
        config.collab_db = Some(v.clone());
    }
    if let Some(v) = &flags.ssh_listen {
        config.ssh.listen = v.clone();
    }
    if let Some(v) = &flags.http_listen {
        config.http.listen = v.clone();
    }
    if let Some(v) = &flags.ssh_authorized_keys {
        config.ssh.authorized_keys = v.clone();
    }
    if let Some(v) = &flags.ssh_host_key {
        config.ssh.host_key = v.clone();
    }
    if let Some(v) = flags.max_release_size {
        config.max_release_size = v;
    }
    Ok(LoadedConfig {
        config,
        sources: Default::default(),
    })
}
