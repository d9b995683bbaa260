//! `git-collab-server`: hosts bare repositories over SSH, authorizes every
//! verb, keeps leases in SQLite and serves a read-only web UI.
//! See ARCHITECTURE.md for the map.
//!
//! OWNER of this file: server-config helper (flags, subcommands, logging).

mod app;
mod config;
mod repos;

fn main() {
    let cfg = config::ServerConfig::with_state_dir("/var/lib/git-collab".into());
    let _ = repos::create_repo(&cfg, "x");
    let _ = app::serve(cfg);
}
