//! The running server: shared state (`App`) and `serve`, which starts the SSH
//! and HTTP listeners and stops them cleanly on SIGTERM/SIGINT.
//!
//! OWNER: server-ssh helper. `serve` is the contract main.rs calls.

use crate::config::ServerConfig;

/// Run the server until SIGTERM or SIGINT. Prepares the state directory
/// (host key, authorized_keys, initial admin keys, hooks) first.
pub async fn serve(config: ServerConfig) -> anyhow::Result<()> {
    let _ = config;
    anyhow::bail!("serve: not implemented yet")
}
