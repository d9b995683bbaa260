//! The one table of configuration keys. Everything that names a key reads
//! it from here: the built-in defaults, the file's known-key check, which
//! environment variables are ours (and the misspelled-name hints), the
//! per-key conversion and validation, and `config show`.
//!
//! A key's name is its TOML path and its `ServerConfig` field path
//! (`ssh.listen` is `[ssh] listen` and `config.ssh.listen`); its environment
//! variable is [`env_name`](super::server_config::env_name) of it and its flag, when it has
//! one, [`flag_name`](super::server_config::flag_name) of it. The order is `config show`'s
//! (SPEC §3.1; resource limits follow their section's listen address).

use super::server_config::DEFAULT_STATE_DIR;

/// One configuration key.
#[derive(Debug)]
pub struct Key {
    /// Dotted: `ssh.max_startups_per_ip`.
    pub name: &'static str,
    /// How a given value is read and checked, and how `config show` prints it.
    pub kind: Kind,
    pub default: DefaultValue,
    /// What the key controls, in one line.
    pub doc: &'static str,
}

/// What a key holds. Each kind accepts a TOML value or the text of an
/// environment variable or flag; see `Given::convert`.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Any string.
    Text,
    /// A non-empty path, used as given.
    Path,
    /// `collab_db`: a SQLite path or a PostgreSQL URL. `config show` prints
    /// where the database is, with a URL's password masked.
    Database,
    /// `IP:PORT`; host names are refused.
    SocketAddr,
    /// Bytes, or a size with a unit ([`parse_size`](super::parse::parse_size)).
    Size,
    /// `true`/`false`; as text also `1`/`0`, `yes`/`no`, `on`/`off`.
    Bool,
    /// A whole number from `min` to `max`.
    Count { min: u64, max: u64 },
    /// Longer than zero ([`parse_duration`](super::parse::parse_duration)).
    Duration,
    /// OpenSSH's `MaxStartups` ([`parse_max_startups`](super::parse::parse_max_startups)).
    MaxStartups,
    /// Lease seconds, at most ten years
    /// ([`parse_lease_duration`](super::parse::parse_lease_duration)). `zero` says
    /// what 0 means, which `config show` adds to it; `None` refuses 0.
    LeaseSecs { zero: Option<&'static str> },
    /// A level or a tracing filter ([`validate_log_level`](super::parse::validate_log_level)).
    LogLevel,
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// OpenSSH public key lines.
    AdminKeys,
    /// A list of strings; as text also comma-separated.
    List,
    /// A non-empty list of these words, each at most once, in the order
    /// given; as text also comma-separated.
    ListOf(&'static [&'static str]),
    /// `[[webhooks.subscriptions]]` tables.
    Webhooks,
}

/// The SSH transport ciphers the server can speak, as OpenSSH names them
/// (`ssh -Q cipher`); `ssh.ciphers` picks from these.
pub const SSH_CIPHERS: &[&str] = &[
    "chacha20-poly1305@openssh.com",
    "aes256-gcm@openssh.com",
    "aes128-gcm@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
];

/// All of [`SSH_CIPHERS`], in that order (what the server offered before
/// the key existed).
const DEFAULT_SSH_CIPHERS: &str = "chacha20-poly1305@openssh.com,aes256-gcm@openssh.com,aes128-gcm@openssh.com,aes256-ctr,aes192-ctr,aes128-ctr";

/// A resource limit: 0 would refuse everything, so it cannot be switched off.
const LIMIT: Kind = Kind::Count {
    min: 1,
    max: 1_000_000,
};

/// Where a key's value comes from when no layer sets it.
#[derive(Debug, Clone, Copy)]
pub enum DefaultValue {
    /// Written as in the environment and read like a given value, so a
    /// default is also an example of the syntax.
    Given(&'static str),
    /// `name` under the final value of an earlier path key (`state_dir`),
    /// whichever layer set that.
    Under(&'static str, &'static str),
    /// Left unset (`None`); the field's reader derives it as described.
    Unset(&'static str),
}

use DefaultValue::{Given, Under, Unset};
use Kind::*;

const fn key(name: &'static str, kind: Kind, default: DefaultValue, doc: &'static str) -> Key {
    Key {
        name,
        kind,
        default,
        doc,
    }
}

/// Every configuration key, in `config show` order. One row a line, so it
/// reads as a table.
#[rustfmt::skip]
pub const KEYS: &[Key] = &[
    key("state_dir", Path, Given(DEFAULT_STATE_DIR), "Persistent state: repositories, database, host key, releases."),
    key("repos_dir", Path, Under("state_dir", "repos"), "Bare repositories."),
    key("collab_db", Database, Unset("{repos_dir}/collab.db"), "The collab database: a SQLite path or a postgres:// URL."),
    key("site_title", Text, Given("git-collab"), "Title of the web UI."),
    key("max_release_size", Size, Given("100MiB"), "Largest release artifact."),
    key("max_issue_body", Size, Given("256KiB"), "Largest issue body or comment."),
    key("initial_admin_keys", AdminKeys, Given("[]"), "OpenSSH public keys granted admin, merged into ssh.authorized_keys."),
    key("push_to_create", Bool, Given("false"), "A push to a missing repository creates it, for callers who may create it."),
    key("ssh.listen", SocketAddr, Given("0.0.0.0:2222"), "SSH listen address."),
    key("ssh.host_key", Path, Under("state_dir", "ssh_host_ed25519_key"), "SSH host key, generated on first start."),
    key("ssh.authorized_keys", Path, Under("state_dir", "authorized_keys"), "Admitted public keys, re-read when the file changes."),
    key("ssh.trusted_user_ca_keys", Path, Unset("none"), "CA public keys whose user certificates log in (TrustedUserCAKeys), re-read when the file changes."),
    key("ssh.revoked_keys", Path, Unset("none"), "Revoked keys and certificates: an OpenSSH KRL or a list of keys (RevokedKeys), re-read when it changes."),
    key("ssh.host_certificate", Path, Unset("none"), "A certificate of ssh.host_key signed by a host CA, presented to clients (@cert-authority)."),
    key("ssh.allow_sha1_rsa", Bool, Given("false"), "Accept ssh-rsa (SHA-1) user signatures, refused as by OpenSSH >= 8.8."),
    key("ssh.ciphers", ListOf(SSH_CIPHERS), Given(DEFAULT_SSH_CIPHERS), "Transport ciphers offered, most preferred first; the client's order picks among them."),
    key("ssh.legacy_host_keys", Bool, Given("false"), "Also serve RSA and ECDSA host keys for clients that cannot verify Ed25519."),
    key("ssh.max_connections", LIMIT, Given("512"), "SSH connections open at once, authenticated or not."),
    key("ssh.max_startups", MaxStartups, Given("64:30:256"), "Unauthenticated connections, as OpenSSH's MaxStartups start:rate:full."),
    key("ssh.max_startups_per_ip", LIMIT, Given("32"), "Connections from one IP address in their SSH handshake at once; more wait in the queue."),
    key("ssh.max_queued_per_ip", LIMIT, Given("256"), "Connections from one IP address waiting for a handshake place (at most half of ssh.max_connections); more are dropped."),
    key("ssh.login_grace_time", Duration, Given("120s"), "Time a connection has to authenticate (LoginGraceTime)."),
    key("ssh.max_sessions", LIMIT, Given("10"), "Channels open at once on one connection (MaxSessions)."),
    key("ssh.max_connections_per_principal", LIMIT, Given("64"), "Authenticated SSH connections of one key at once (at most a quarter of ssh.max_connections)."),
    key("ssh.idle_timeout", Duration, Given("1h"), "An authenticated connection with no channel open this long is closed."),
    key("ssh.pressure_idle_timeout", Duration, Given("60s"), "The idle timeout while the server is near its connection cap."),
    key("ssh.pressure_percent", Count { min: 1, max: 100 }, Given("80"), "Percent of ssh.max_connections open at which the pressure idle timeout applies."),
    key("ssh.max_verbs", LIMIT, Given("256"), "Exec commands running at once, server-wide (sessions, git and watchers are counted apart)."),
    key("ssh.max_verbs_per_principal", LIMIT, Given("16"), "Exec commands running at once with one key."),
    key("ssh.max_heavy_verbs", LIMIT, Given("32"), "Diffs, interdiffs and release downloads running at once, server-wide."),
    key("ssh.max_heavy_verbs_per_principal", LIMIT, Given("4"), "Diffs, interdiffs and release downloads running at once with one key."),
    key("ssh.max_tui_sessions", LIMIT, Given("64"), "Terminal UI sessions open at once, server-wide."),
    key("ssh.max_tui_per_principal", LIMIT, Given("4"), "Terminal UI sessions open at once with one key."),
    key("ssh.tui_idle_timeout", Duration, Given("15m"), "A terminal UI session with no key press this long is closed (bytes that are no key do not count)."),
    key("ssh.tui_stall_timeout", Duration, Given("30s"), "A terminal UI client that stops reading this long is disconnected."),
    key("ssh.tui_max_lifetime", Duration, Given("8h"), "A terminal UI session is closed this long after it opened, however busy."),
    key("http.listen", SocketAddr, Given("0.0.0.0:8080"), "HTTP listen address."),
    key("http.max_connections", LIMIT, Given("512"), "HTTP connections open at once."),
    key("http.max_connections_per_ip", LIMIT, Given("64"), "HTTP connections open at once from one IP address."),
    key("http.header_read_timeout", Duration, Given("10s"), "Time a client has to send a request's headers; also the keep-alive wait."),
    key("http.idle_timeout", Duration, Given("60s"), "A connection that moves no byte for this long is closed."),
    key("http.max_request_body", Size, Given("10MiB"), "Largest git-upload-pack request body, after gunzipping."),
    key("http.max_concurrent_pages", LIMIT, Given("8"), "Expensive web pages rendered at once; more get 503."),
    key("http.max_file_shown", Size, Given("1MiB"), "Largest file shown or diffed inline on a page."),
    key("git.max_processes", LIMIT, Given("32"), "Git child processes running at once, server-wide."),
    key("git.max_processes_per_principal", LIMIT, Given("8"), "Git child processes at once for one SSH principal or HTTP client IP."),
    key("git.queue_timeout", Duration, Given("30s"), "How long a git request waits for a slot before it is refused."),
    key("git.pack_cache", Bool, Given("true"), "Share identical upload-pack responses (clone and fetch storms) through the on-disk pack cache."),
    key("git.pack_cache_max_size", Size, Given("1GiB"), "Largest total size of the pack cache; least recently used packs go first."),
    key("git.pack_cache_max_age", Duration, Given("5m"), "A cached pack older than this is not served."),
    key("git.pack_cache_min_occurrences", Count { min: 1, max: 1_000_000 }, Given("2"), "Cache a request's pack only once it was asked for this many times."),
    key("git.max_concurrent_pack_objects", LIMIT, Given("4"), "Most git pack-objects running at once (with the pack cache on); the rest wait in turn."),
    key("git.nice", Count { min: 0, max: 19 }, Given("10"), "CPU niceness of upload-pack and the pack-objects it runs (0: as the server), so a clone storm yields the CPU to logins and verbs."),
    key("log.level", LogLevel, Given("info"), "Log level or tracing filter."),
    key("log.format", OneOf(&["text", "json"]), Given("text"), "Log line format."),
    key("events.retention_days", Count { min: 1, max: 36_500 }, Given("30"), "Events older than this many days are pruned."),
    key("events.heartbeat_secs", Count { min: 1, max: 3600 }, Given("30"), "A watcher gets a heartbeat line after this many idle seconds."),
    key("events.stall_timeout_secs", Count { min: 1, max: 3600 }, Given("30"), "A watcher whose client stopped reading this long is cut off."),
    key("events.max_watchers", Count { min: 1, max: 100_000 }, Given("256"), "Most watchers connected at once."),
    key("events.max_watchers_per_principal", Count { min: 1, max: 100_000 }, Given("16"), "Most watchers connected at once with one key."),
    key("webhooks.allowed_hosts", List, Given("[]"), "Hosts, IPs or CIDRs deliverable although private (the SSRF guard)."),
    key("webhooks.attempt_timeout_secs", Count { min: 1, max: 300 }, Given("10"), "Longest one delivery attempt may take."),
    key("webhooks.retry_base_secs", Count { min: 1, max: 3600 }, Given("5"), "First retry delay; each next one is twice as long."),
    key("webhooks.retry_max_secs", Count { min: 1, max: 86_400 }, Given("3600"), "Longest retry delay."),
    key("webhooks.disable_after_secs", Count { min: 10, max: 365 * 86_400 }, Given("259200"), "A subscription failing this long without a success is disabled."),
    key("webhooks.claim_secs", Count { min: 10, max: 3600 }, Given("30"), "How long a node's claim on a subscription lasts unless renewed (a dead node's lapse after it)."),
    key("webhooks.max_per_owner", Count { min: 1, max: 100_000 }, Given("20"), "Most subscriptions one principal may add with collab-hook."),
    key("webhooks.max_per_repo", Count { min: 1, max: 100_000 }, Given("10"), "Most collab-hook subscriptions whose glob matches any one repository."),
    key("webhooks.subscriptions", Webhooks, Given("[]"), "Subscriptions declared by the operator."),
    key("maintenance.after_pushes", Count { min: 0, max: 1_000_000 }, Given("50"), "Maintain a repository after this many pushes (0: never on count)."),
    key("maintenance.idle_secs", Count { min: 0, max: 604_800 }, Given("600"), "Maintain a pushed-to repository idle this long (0: never on idleness)."),
    key("maintenance.concurrency", Count { min: 1, max: 64 }, Given("1"), "Most maintenance runs at once across the server."),
    key("mirrors.allowed_hosts", List, Given("[]"), "Hosts, IPs or CIDRs a mirror may reach although private (the SSRF guard)."),
    key("mirrors.max_per_repo", Count { min: 1, max: 100 }, Given("4"), "Most mirrors (pull and push) of one repository."),
    key("mirrors.min_interval_secs", Count { min: 1, max: 86_400 }, Given("60"), "Shortest mirror --interval; also the first retry delay after a failure."),
    key("mirrors.max_backoff_secs", Count { min: 1, max: 604_800 }, Given("21600"), "Longest retry delay of a failing mirror."),
    key("mirrors.timeout_secs", Count { min: 5, max: 86_400 }, Given("600"), "Longest one git fetch or push of a mirror may run before it is killed."),
    key("mirrors.concurrency", Count { min: 1, max: 64 }, Given("2"), "Mirror syncs running at once on one node."),
    key("leases.max_lifetime", LeaseSecs { zero: Some("unlimited") }, Given("0"), "Longest one lease tenure may last, renewals included."),
    key("leases.lock_delay", LeaseSecs { zero: Some("none") }, Given("0"), "After a lease ends by expiry, others wait this long."),
    key("leases.max_ttl", LeaseSecs { zero: None }, Given("3650d"), "Longest lease --ttl accepted."),
    key("leases.eviction_grace", LeaseSecs { zero: Some("none") }, Given("10m"), "The merge queue evicted a patch: its author holds the issue again this long."),
    key("leases.max_waiters", LIMIT, Given("1024"), "Callers waiting in collab-lease acquire/next --wait at once."),
    key("leases.max_waiters_per_principal", LIMIT, Given("16"), "Callers waiting in collab-lease --wait at once with one key."),
    key("lfs.max_object_size", Size, Given("2GiB"), "Largest git-lfs object one upload may store."),
    key("lfs.max_repo_size", Size, Given("10GiB"), "Most git-lfs object bytes one repository may hold."),
    key("lfs.gc_grace", Duration, Given("168h"), "A git-lfs object no ref points at is removed by maintenance once it is this old (unused this long)."),
    key("mcp.max_calls_in_flight", LIMIT, Given("8"), "Tool calls one collab-mcp session runs at once; more are answered with an error."),
    key("mcp.max_sessions", LIMIT, Given("128"), "collab-mcp sessions open at once, server-wide."),
    key("mcp.max_sessions_per_principal", LIMIT, Given("4"), "collab-mcp sessions open at once with one key."),
    key("mcp.max_message_size", Size, Given("1MiB"), "Largest JSON-RPC message a collab-mcp session reads; a longer one is refused and skipped."),
    key("mcp.idle_timeout", Duration, Given("15m"), "A collab-mcp session with no message, call or subscription this long is closed."),
];

/// The key named `name`, if it is one.
pub fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|key| key.name == name)
}

/// Whether `name` is a TOML table of keys (`ssh`), not a key itself.
pub fn is_section(name: &str) -> bool {
    KEYS.iter().any(|key| {
        key.name
            .split_once('.')
            .is_some_and(|(section, _)| section == name)
    })
}

/// The table checked against itself and against what reads it.
#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    use clap::{Args as _, FromArgMatches as _};
    use figment::value::{Dict, Value};
    use figment::Provider as _;

    use super::*;
    use crate::config::{env_name, flag_name, load_from, ConfigFlags, LoadedConfig, CONFIG_ENV};

    fn load(flags: &ConfigFlags) -> LoadedConfig {
        load_from(
            flags,
            &BTreeMap::new(),
            Path::new("/nonexistent/server.toml"),
        )
        .unwrap()
    }

    /// `ssh.listen` for every leaf of a nested dict.
    fn dotted(dict: &Dict, prefix: &str, out: &mut Vec<String>) {
        for (name, value) in dict {
            let name = format!("{prefix}{name}");
            match value {
                Value::Dict(_, inner) => dotted(inner, &format!("{name}."), out),
                _ => out.push(name),
            }
        }
    }

    #[test]
    fn names_and_env_names_are_unique_and_read_back() {
        let mut names = BTreeSet::new();
        let mut env_names = BTreeSet::new();
        for key in KEYS {
            assert!(names.insert(key.name), "{} is in the table twice", key.name);
            let (section, field) = key.name.split_once('.').unwrap_or(("", key.name));
            assert!(!field.contains('.'), "{}: one level of nesting", key.name);
            assert!(
                (section.to_string() + field)
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{}: lower-case words joined by _",
                key.name
            );
            // `GIT_COLLAB_<KEY>_FILE` reads another key's value from a file.
            assert!(!key.name.ends_with("_file"), "{}", key.name);
            let env = env_name(key.name);
            assert_ne!(env, CONFIG_ENV);
            // The environment layer maps a variable back to its key this way.
            let back = env["GIT_COLLAB_".len()..]
                .to_ascii_lowercase()
                .replace("__", ".");
            assert_eq!(back, key.name);
            assert!(env_names.insert(env.clone()), "{env} names two keys");
        }
        for env in &env_names {
            assert!(!env_names.contains(&format!("{env}_FILE")), "{env}_FILE");
        }
    }

    #[test]
    fn every_default_is_in_the_table_once() {
        let layer = crate::config::layers::defaults_layer();
        let mut defaulted = Vec::new();
        for dict in layer.data().unwrap().values() {
            dotted(dict, "", &mut defaulted);
        }
        for name in &defaulted {
            let rows = KEYS.iter().filter(|key| key.name == name).count();
            assert_eq!(rows, 1, "default {name} is in the table {rows} times");
        }
        let loaded = load(&ConfigFlags::default());
        assert_eq!(loaded.sources.len(), KEYS.len());
        for (i, key) in KEYS.iter().enumerate() {
            let given = matches!(key.default, DefaultValue::Given(_));
            assert_eq!(
                given,
                defaulted.iter().any(|name| name == key.name),
                "{}",
                key.name
            );
            let source = if given { "default" } else { "derived" };
            assert_eq!(loaded.sources[key.name], source, "{}", key.name);
            // A derived default follows a path key resolved before it.
            if let DefaultValue::Under(base, _) = key.default {
                let earlier = KEYS[..i].iter().find(|k| k.name == base);
                assert!(
                    earlier.is_some_and(|k| matches!(k.kind, Kind::Path)),
                    "{} follows {base}",
                    key.name
                );
            }
        }
    }

    #[test]
    fn every_key_is_a_server_config_field_shown_by_config_show() {
        let loaded = load(&ConfigFlags::default());
        let shown = loaded.to_json();
        let shown: BTreeSet<&str> = shown
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let table: BTreeSet<&str> = KEYS.iter().map(|key| key.name).collect();
        assert_eq!(shown, table);
        // The key names are the field paths, both ways.
        let serde_json::Value::Object(fields) = serde_json::to_value(&loaded.config).unwrap()
        else {
            panic!("ServerConfig is a struct");
        };
        let mut paths = BTreeSet::new();
        for (name, value) in &fields {
            match value.as_object() {
                Some(section) if is_section(name) => {
                    paths.extend(section.keys().map(|field| format!("{name}.{field}")));
                }
                _ => {
                    paths.insert(name.clone());
                }
            }
        }
        let table: BTreeSet<String> = table.into_iter().map(String::from).collect();
        assert_eq!(paths, table);
    }

    /// A valid value of `kind` as a flag would give it.
    fn sample(kind: Kind) -> &'static str {
        match kind {
            Kind::Text => "Sample",
            Kind::Path | Kind::Database => "/sample",
            Kind::Size => "2k",
            Kind::Bool => "true",
            Kind::SocketAddr => "127.0.0.1:1",
            Kind::LogLevel => "debug",
            Kind::OneOf(words) => words[words.len() - 1],
            Kind::LeaseSecs { .. } => "5m",
            other => panic!("no flag takes a {other:?}"),
        }
    }

    #[test]
    fn every_flag_sets_the_key_it_is_named_after() {
        let command = ConfigFlags::augment_args(clap::Command::new("server"));
        let mut argv = vec!["server".to_string()];
        let mut flagged = Vec::new();
        for arg in command.get_arguments() {
            let long = format!("--{}", arg.get_long().unwrap());
            if long == "--config" {
                continue;
            }
            let key = KEYS
                .iter()
                .find(|key| flag_name(key.name) == long)
                .unwrap_or_else(|| panic!("{long} names no key"));
            argv.extend([long, sample(key.kind).to_string()]);
            flagged.push(key.name);
        }
        let matches = command.get_matches_from(argv);
        let loaded = load(&ConfigFlags::from_arg_matches(&matches).unwrap());
        for name in flagged {
            assert_eq!(loaded.sources[name], format!("flag {}", flag_name(name)));
        }
    }

    /// The `## Configuration reference` of README.md names every key, and
    /// so does docs/configuration.md's table.
    #[test]
    fn the_docs_list_every_key() {
        let root = collab_testkit::workspace_root().to_path_buf();
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let start = readme.find("## Configuration reference").unwrap();
        let end = readme[start + 1..]
            .find("\n## ")
            .map_or(readme.len(), |i| start + 1 + i);
        let reference = &readme[start..end];
        let docs = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap();
        for key in KEYS {
            let named = format!("`{}`", key.name);
            assert!(
                reference.contains(&named),
                "README.md's configuration reference lacks {named}"
            );
            assert!(
                docs.contains(&format!("| {named} |")),
                "docs/configuration.md lacks {named}"
            );
        }
    }
}
