//! Repository names, their safe resolution under `repos_dir`, per-repo policy
//! (`collab-policy.toml`) and creation.
//!
//! OWNER: server-ssh helper. `create_repo` is the contract main.rs calls.

use std::path::PathBuf;

use crate::config::ServerConfig;

/// Create a bare repository `name` (normalized to end in `.git`) under
/// `repos_dir`; errors if the name is invalid or the repository exists.
pub fn create_repo(config: &ServerConfig, name: &str) -> anyhow::Result<PathBuf> {
    let _ = (config, name);
    anyhow::bail!("repo create: not implemented yet")
}
