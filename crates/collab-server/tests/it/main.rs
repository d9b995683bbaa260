//! The server's integration tests: one binary, one module per suite (as
//! ripgrep and gitoxide do), each driving the real `git-collab-server`
//! through `collab_testkit`. The three groups say which database each runs on:
//! the `postgres` nextest profile (.config/nextest.toml) selects `both::`.

/// Suites that reach the collab database only through the harness: run on
/// SQLite, and again on PostgreSQL (`GIT_COLLAB_TEST_BACKEND=postgres`).
mod both {
    mod access_hardening;
    mod auth_binding;
    mod backup_drill;
    mod checks;
    mod cli_reuse;
    mod display_names;
    mod events;
    mod fair_shares;
    mod governance;
    mod hidden_text;
    mod hostile_input;
    mod info_verb;
    mod issue_crash;
    mod issue_export;
    mod issue_fleet;
    mod issue_list_paging;
    mod issue_server;
    mod issue_server_cli;
    mod issue_upgrade;
    mod lease_cli;
    mod lease_concurrency;
    mod lease_crash;
    mod lease_fencing;
    mod lease_policy;
    mod lease_server;
    mod lfs;
    mod limits;
    mod mcp;
    mod merge_queue;
    mod merge_train;
    mod merge_when_green;
    mod mirrors;
    mod queued_tenure;
    mod readme_issues;
    mod release;
    mod replay_bounds;
    mod repo_admin;
    mod repo_identity;
    mod review_cli;
    mod review_integrity;
    mod review_merge;
    mod review_push;
    mod review_stacks;
    mod review_verb;
    mod running_caps;
    mod search;
    mod ssh_access;
    mod ssh_certificates;
    mod ssh_channel_requests;
    mod ssh_git;
    mod tui;
    mod verb_access;
    mod web_code;
    mod web_http;
    mod web_malformed_paths;
    mod web_patches;
    mod web_rendering;
    mod webhooks;
    mod who_acts;
    mod work_queue;
    mod work_queue_cli;
}

/// Suites about the SQLite file itself, which PostgreSQL has no counterpart
/// of: its online copy and corruption in a backup, its file modes, a lost or
/// damaged file at start, and upgrades from the SQLite schemas of earlier
/// releases (which knew no other backend). SQLite only.
mod sqlite {
    mod backup_restore;
    mod file_modes;
    mod issue_import;
    mod patch_import;
    mod server_state;
}

/// Suites that pick their backend themselves (`multi_node`, `db_migrate`,
/// `pg_faults`, `busy` always use PostgreSQL) or test what has no collab database of its own
/// (the container image, the Nix module, a browser, git housekeeping, the
/// README, configuration and CLI messages): run once.
mod once {
    mod advisories;
    mod advisories_ssh_push;
    mod busy;
    mod cli_messages;
    mod config;
    mod container;
    mod db_migrate;
    mod ends_with_caller;
    mod maintenance;
    mod multi_node;
    mod nix_module;
    mod pack_cache;
    mod pg_faults;
    mod readme_quickstart;
    mod unreachable_objects;
    mod web_browser;
}
