//! `collab_server`: hosts bare repositories over SSH and HTTP, authorizes
//! every verb, keeps the collab database (through `collab_store`) and serves
//! a read-only web UI. The `git-collab-server` binary is [`cli::main`].
//! See ARCHITECTURE.md for the map.

pub mod app;
pub mod authz;
pub mod auto_merge;
pub mod backup;
pub mod cli;
pub mod config;
pub mod events;
pub mod flock;
pub mod governance;
pub mod healthcheck;
pub mod highlight;
pub mod hooks;
pub mod http;
pub mod identity;
pub mod leasing;
pub mod lfs;
pub mod limits;
pub mod logging;
pub mod maintenance;
pub mod mcp;
pub mod merge_queue;
pub mod metrics;
pub mod mirrors;
pub mod objects;
pub mod ops;
pub mod paced;
pub mod pack_cache;
pub mod patch_merge;
pub mod people;
pub mod releases;
pub mod repo_admin;
pub mod repos;
pub mod serve;
pub mod server_lock;
pub mod service;
pub mod setup;
pub mod shutdown;
pub mod signing;
pub mod ssh;
pub mod tui;
pub mod upload_pack;
pub mod wants;
pub mod webhooks;
