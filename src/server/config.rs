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
