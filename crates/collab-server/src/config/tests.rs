use std::time::Duration;

use super::*;

const KEY_A: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILEXSjUnGogtRj3PpAaQ1+yOYFJ8HXBEED0TpDEXkZal alice@example";
const KEY_B: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAYQ5/h7Rqxnp1qc329nGsA4A2Dg3dVDahkMcEyV6Tdd bob";

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, OsString> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), OsString::from(v)))
        .collect()
}

fn no_system_file() -> PathBuf {
    PathBuf::from("/nonexistent/git-collab/server.toml")
}

fn load_env(pairs: &[(&str, &str)]) -> anyhow::Result<LoadedConfig> {
    load_from(&ConfigFlags::default(), &env(pairs), &no_system_file())
}

fn err(result: anyhow::Result<LoadedConfig>) -> String {
    format!("{:#}", result.expect_err("expected an error"))
}

#[test]
fn defaults_match_the_spec_table() {
    let loaded = load_env(&[]).unwrap();
    assert_eq!(
        loaded.config,
        ServerConfig::with_state_dir(PathBuf::from("/var/lib/git-collab"))
    );
    assert_eq!(
        loaded.config.collab_db_path(),
        PathBuf::from("/var/lib/git-collab/repos/collab.db")
    );
    assert_eq!(loaded.sources["state_dir"], "default");
    assert_eq!(loaded.sources["repos_dir"], "derived");
    assert_eq!(loaded.sources["collab_db"], "derived");
    assert_eq!(loaded.sources["ssh.host_key"], "derived");
    assert_eq!(loaded.sources.len(), keys::KEYS.len());
    let elsewhere = ServerConfig::with_state_dir(PathBuf::from("/srv/gc"));
    assert_eq!(elsewhere.repos_dir, PathBuf::from("/srv/gc/repos"));
    assert_eq!(
        elsewhere.ssh.authorized_keys,
        PathBuf::from("/srv/gc/authorized_keys")
    );
    assert_eq!(elsewhere.collab_db, None);
}

/// The built-in defaults as `config show` prints them, spelled out here
/// rather than read from the key table, so a changed default is seen.
#[test]
fn defaults_are_pinned() {
    let expected = "\
state_dir                          /var/lib/git-collab                       default
repos_dir                          /var/lib/git-collab/repos                 derived
collab_db                          /var/lib/git-collab/repos/collab.db       derived
site_title                         git-collab                                default
max_release_size                   104857600 (100 MiB)                       default
max_issue_body                     262144 (256 KiB)                          default
initial_admin_keys                 (none)                                    default
push_to_create                     false                                     default
ssh.listen                         0.0.0.0:2222                              default
ssh.host_key                       /var/lib/git-collab/ssh_host_ed25519_key  derived
ssh.authorized_keys                /var/lib/git-collab/authorized_keys       derived
ssh.trusted_user_ca_keys           (none)                                    derived
ssh.revoked_keys                   (none)                                    derived
ssh.host_certificate               (none)                                    derived
ssh.allow_sha1_rsa                 false                                     default
ssh.ciphers                        chacha20-poly1305@openssh.com             default
                                   aes256-gcm@openssh.com
                                   aes128-gcm@openssh.com
                                   aes256-ctr
                                   aes192-ctr
                                   aes128-ctr
ssh.legacy_host_keys               false                                     default
ssh.max_connections                512                                       default
ssh.max_startups                   64:30:256                                 default
ssh.max_startups_per_ip            32                                        default
ssh.max_queued_per_ip              256                                       default
ssh.login_grace_time               2m                                        default
ssh.max_sessions                   10                                        default
ssh.max_connections_per_principal  64                                        default
ssh.idle_timeout                   1h                                        default
ssh.pressure_idle_timeout          1m                                        default
ssh.pressure_percent               80                                        default
ssh.max_verbs                      256                                       default
ssh.max_verbs_per_principal        16                                        default
ssh.max_heavy_verbs                32                                        default
ssh.max_heavy_verbs_per_principal  4                                         default
ssh.max_tui_sessions               64                                        default
ssh.max_tui_per_principal          4                                         default
ssh.tui_idle_timeout               15m                                       default
ssh.tui_stall_timeout              30s                                       default
ssh.tui_max_lifetime               8h                                        default
http.listen                        0.0.0.0:8080                              default
http.max_connections               512                                       default
http.max_connections_per_ip        64                                        default
http.header_read_timeout           10s                                       default
http.idle_timeout                  1m                                        default
http.max_request_body              10485760 (10 MiB)                         default
http.max_concurrent_pages          8                                         default
http.max_file_shown                1048576 (1 MiB)                           default
git.max_processes                  32                                        default
git.max_processes_per_principal    8                                         default
git.queue_timeout                  30s                                       default
git.pack_cache                     true                                      default
git.pack_cache_max_size            1073741824 (1 GiB)                        default
git.pack_cache_max_age             5m                                        default
git.pack_cache_min_occurrences     2                                         default
git.max_concurrent_pack_objects    4                                         default
git.nice                           10                                        default
log.level                          info                                      default
log.format                         text                                      default
events.retention_days              30                                        default
events.heartbeat_secs              30                                        default
events.stall_timeout_secs          30                                        default
events.max_watchers                256                                       default
events.max_watchers_per_principal  16                                        default
webhooks.allowed_hosts             []                                        default
webhooks.attempt_timeout_secs      10                                        default
webhooks.retry_base_secs           5                                         default
webhooks.retry_max_secs            3600                                      default
webhooks.disable_after_secs        259200                                    default
webhooks.claim_secs                30                                        default
webhooks.max_per_owner             20                                        default
webhooks.max_per_repo              10                                        default
webhooks.subscriptions             []                                        default
maintenance.after_pushes           50                                        default
maintenance.idle_secs              600                                       default
maintenance.concurrency            1                                         default
mirrors.allowed_hosts              []                                        default
mirrors.max_per_repo               4                                         default
mirrors.min_interval_secs          60                                        default
mirrors.max_backoff_secs           21600                                     default
mirrors.timeout_secs               600                                       default
mirrors.concurrency                2                                         default
leases.max_lifetime                0 (unlimited)                             default
leases.lock_delay                  0 (none)                                  default
leases.max_ttl                     315360000                                 default
leases.eviction_grace              600                                       default
leases.max_waiters                 1024                                      default
leases.max_waiters_per_principal   16                                        default
lfs.max_object_size                2147483648 (2 GiB)                        default
lfs.max_repo_size                  10737418240 (10 GiB)                      default
lfs.gc_grace                       168h                                      default
mcp.max_calls_in_flight            8                                         default
mcp.max_sessions                   128                                       default
mcp.max_sessions_per_principal     4                                         default
mcp.max_message_size               1048576 (1 MiB)                           default
mcp.idle_timeout                   15m                                       default
";
    assert_eq!(load_env(&[]).unwrap().to_text(), expected);
}

#[test]
fn layers_override_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.toml");
    std::fs::write(
        &file,
        "site_title = \"from file\"\n[ssh]\nlisten = \"127.0.0.1:1\"\n[http]\nlisten = \"127.0.0.1:2\"\n[log]\nformat = \"json\"\n",
    )
    .unwrap();
    let flags = ConfigFlags {
        config: Some(file.clone()),
        http_listen: Some("127.0.0.1:3".into()),
        ..Default::default()
    };
    let env = env(&[
        ("GIT_COLLAB_SSH__LISTEN", "127.0.0.1:4"),
        ("GIT_COLLAB_HTTP__LISTEN", "127.0.0.1:5"),
    ]);
    let loaded = load_from(&flags, &env, &no_system_file()).unwrap();
    let c = &loaded.config;
    assert_eq!(c.site_title, "from file");
    assert_eq!(c.log.format, "json");
    assert_eq!(c.ssh.listen, "127.0.0.1:4");
    assert_eq!(c.http.listen, "127.0.0.1:3");
    assert_eq!(c.log.level, "info");
    let s = &loaded.sources;
    assert_eq!(s["site_title"], format!("file {}", file.display()));
    assert_eq!(s["ssh.listen"], "env GIT_COLLAB_SSH__LISTEN");
    assert_eq!(s["http.listen"], "flag --http-listen");
    assert_eq!(s["log.level"], "default");
}

#[test]
fn system_file_is_used_only_when_nothing_else_names_one() {
    let dir = tempfile::tempdir().unwrap();
    let system = dir.path().join("system.toml");
    std::fs::write(&system, "site_title = \"system\"\n").unwrap();
    let other = dir.path().join("other.toml");
    std::fs::write(&other, "site_title = \"other\"\n").unwrap();
    let flags = ConfigFlags::default();
    let loaded = load_from(&flags, &env(&[]), &system).unwrap();
    assert_eq!(loaded.config.site_title, "system");
    let via_env = env(&[("GIT_COLLAB_CONFIG", other.to_str().unwrap())]);
    let loaded = load_from(&flags, &via_env, &system).unwrap();
    assert_eq!(loaded.config.site_title, "other");
    // An empty GIT_COLLAB_CONFIG counts as unset.
    let loaded = load_from(&flags, &env(&[("GIT_COLLAB_CONFIG", "")]), &system).unwrap();
    assert_eq!(loaded.config.site_title, "system");
}

#[test]
fn named_but_missing_file_is_an_error() {
    let flags = ConfigFlags {
        config: Some("/nonexistent/a.toml".into()),
        ..Default::default()
    };
    let e = err(load_from(&flags, &env(&[]), &no_system_file()));
    assert_eq!(
        e,
        "config file /nonexistent/a.toml from flag --config: no such file"
    );
    let e = err(load_env(&[("GIT_COLLAB_CONFIG", "/nonexistent/b.toml")]));
    assert_eq!(
        e,
        "config file /nonexistent/b.toml from env GIT_COLLAB_CONFIG: no such file"
    );
}

#[test]
fn unknown_and_misplaced_file_keys_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.toml");
    let flags = ConfigFlags {
        config: Some(file.clone()),
        ..Default::default()
    };
    for (text, problem) in [
        ("[ssh]\nlisen = \"x\"\n", "ssh.lisen from file"),
        ("titel = \"x\"\n", "titel from file"),
        ("listen = \"x\"\n", "listen from file"),
        ("ssh = \"x\"\n", "ssh = \"x\" from file"),
    ] {
        std::fs::write(&file, text).unwrap();
        let e = err(load_from(&flags, &env(&[]), &no_system_file()));
        assert!(e.starts_with(problem), "{text:?}: {e}");
    }
    std::fs::write(&file, "[ssh]\nlisen = \"x\"\n").unwrap();
    let e = err(load_from(&flags, &env(&[]), &no_system_file()));
    assert!(e.contains("unknown key"), "{e}");
}

#[test]
fn invalid_toml_is_one_line_with_position() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.toml");
    std::fs::write(&file, "site_title = \"ok\"\nstate_dir = \n").unwrap();
    let flags = ConfigFlags {
        config: Some(file.clone()),
        ..Default::default()
    };
    let e = err(load_from(&flags, &env(&[]), &no_system_file()));
    assert!(!e.contains('\n'), "{e}");
    assert!(
        e.starts_with(&format!("config file {} line 2", file.display())),
        "{e}"
    );
}

#[test]
fn env_nesting_and_client_variables() {
    let loaded = load_env(&[
        ("GIT_COLLAB_SSH__LISTEN", "0.0.0.0:22"),
        ("GIT_COLLAB_SSH_COMMAND", "ssh -o StrictHostKeyChecking=no"),
        ("GIT_COLLAB_REQUIRE_CONTAINER_TESTS", "1"),
        ("GIT_COLLAB_SOMETHING__ELSE", "[broken"),
    ])
    .unwrap();
    assert_eq!(loaded.config.ssh.listen, "0.0.0.0:22");
}

#[test]
fn numeric_env_values_stay_strings() {
    let loaded = load_env(&[
        ("GIT_COLLAB_SITE_TITLE", "12345"),
        ("GIT_COLLAB_STATE_DIR", "2024"),
        ("GIT_COLLAB_LOG__LEVEL", "debug"),
    ])
    .unwrap();
    assert_eq!(loaded.config.site_title, "12345");
    assert_eq!(loaded.config.state_dir, PathBuf::from("2024"));
}

#[test]
fn derived_paths_follow_the_final_state_dir() {
    let loaded = load_env(&[("GIT_COLLAB_STATE_DIR", "/srv/gc")]).unwrap();
    let c = &loaded.config;
    assert_eq!(c.repos_dir, PathBuf::from("/srv/gc/repos"));
    assert_eq!(c.collab_db_path(), PathBuf::from("/srv/gc/repos/collab.db"));
    assert_eq!(
        c.ssh.host_key,
        PathBuf::from("/srv/gc/ssh_host_ed25519_key")
    );
    assert_eq!(
        c.ssh.authorized_keys,
        PathBuf::from("/srv/gc/authorized_keys")
    );
    // Explicit values win over derivation; collab_db follows repos_dir.
    let loaded = load_env(&[
        ("GIT_COLLAB_STATE_DIR", "/srv/gc"),
        ("GIT_COLLAB_REPOS_DIR", "/data/repos"),
        ("GIT_COLLAB_SSH__HOST_KEY", "/keys/host"),
    ])
    .unwrap();
    let c = &loaded.config;
    assert_eq!(c.collab_db_path(), PathBuf::from("/data/repos/collab.db"));
    assert_eq!(c.ssh.host_key, PathBuf::from("/keys/host"));
    assert_eq!(
        loaded.sources["ssh.host_key"],
        "env GIT_COLLAB_SSH__HOST_KEY"
    );
    assert_eq!(loaded.sources["ssh.authorized_keys"], "derived");
}

#[test]
fn file_indirection_reads_keys_one_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("# admins\n{KEY_A}\n\n  {KEY_B}  \n")).unwrap();
    let title = dir.path().join("title");
    std::fs::write(&title, "Secret Forge\n").unwrap();
    let loaded = load_env(&[
        ("GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE", keys.to_str().unwrap()),
        ("GIT_COLLAB_SITE_TITLE_FILE", title.to_str().unwrap()),
    ])
    .unwrap();
    assert_eq!(loaded.config.initial_admin_keys, vec![KEY_A, KEY_B]);
    assert_eq!(loaded.config.site_title, "Secret Forge");
    assert_eq!(
        loaded.sources["initial_admin_keys"],
        "env GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE"
    );
}

#[test]
fn file_values_are_redacted_in_config_show() {
    let dir = tempfile::tempdir().unwrap();
    let title = dir.path().join("title");
    std::fs::write(&title, "Secret Forge\n").unwrap();
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("{KEY_A}\n")).unwrap();
    let loaded = load_env(&[
        ("GIT_COLLAB_SITE_TITLE_FILE", title.to_str().unwrap()),
        ("GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE", keys.to_str().unwrap()),
        ("GIT_COLLAB_LOG__LEVEL", "debug"),
    ])
    .unwrap();
    assert_eq!(loaded.config.site_title, "Secret Forge");
    let json = loaded.to_json();
    let shown = format!("<redacted: from file {}>", title.display());
    assert_eq!(json["site_title"]["value"], shown.as_str());
    assert_eq!(
        json["site_title"]["source"],
        "env GIT_COLLAB_SITE_TITLE_FILE"
    );
    assert_eq!(
        json["initial_admin_keys"]["value"],
        format!("<redacted: from file {}>", keys.display()).as_str()
    );
    assert_eq!(json["log.level"]["value"], "debug");
    let text = loaded.to_text();
    assert!(text.contains(&shown), "{text}");
    for secret in ["Secret Forge", "AAAAC3Nz", "SHA256:"] {
        assert!(!text.contains(secret), "{text}");
        assert!(!json.to_string().contains(secret), "{json}");
    }

    // A flag overriding the file: the shown value is the flag's.
    let flags = ConfigFlags {
        state_dir: Some("/srv".into()),
        site_title: Some("Open".into()),
        ..ConfigFlags::default()
    };
    let env = env(&[("GIT_COLLAB_SITE_TITLE_FILE", title.to_str().unwrap())]);
    let loaded = load_from(&flags, &env, &no_system_file()).unwrap();
    assert_eq!(loaded.to_json()["site_title"]["value"], "Open");
}

#[test]
fn file_values_are_size_bounded() {
    let e = err(load_env(&[("GIT_COLLAB_SITE_TITLE_FILE", "/dev/zero")]));
    assert_eq!(
        e,
        "site_title from env GIT_COLLAB_SITE_TITLE_FILE: cannot read /dev/zero: \
         larger than 64 KiB (the limit for _FILE values)"
    );
    let dir = tempfile::tempdir().unwrap();
    let at_limit = dir.path().join("at_limit");
    std::fs::write(&at_limit, "x".repeat(MAX_SECRET_FILE_BYTES as usize)).unwrap();
    let loaded = load_env(&[("GIT_COLLAB_SITE_TITLE_FILE", at_limit.to_str().unwrap())]);
    assert_eq!(loaded.unwrap().config.site_title.len(), 64 * 1024);
    let over = dir.path().join("over");
    std::fs::write(&over, "x".repeat(MAX_SECRET_FILE_BYTES as usize + 1)).unwrap();
    let e = err(load_env(&[(
        "GIT_COLLAB_SITE_TITLE_FILE",
        over.to_str().unwrap(),
    )]));
    assert!(
        e.ends_with("larger than 64 KiB (the limit for _FILE values)"),
        "{e}"
    );
    let binary = dir.path().join("binary");
    std::fs::write(&binary, b"\xff\xfesecret").unwrap();
    let e = err(load_env(&[(
        "GIT_COLLAB_SITE_TITLE_FILE",
        binary.to_str().unwrap(),
    )]));
    assert!(
        e.ends_with("not valid UTF-8") && !e.contains("secret"),
        "{e}"
    );
}

#[test]
fn file_indirection_errors() {
    let e = err(load_env(&[(
        "GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE",
        "/nonexistent/keys",
    )]));
    assert!(
        e.starts_with("initial_admin_keys from env GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE: cannot read /nonexistent/keys"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("{KEY_A}\nhunter2\n")).unwrap();
    let e = err(load_env(&[(
        "GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE",
        keys.to_str().unwrap(),
    )]));
    assert!(
        e.starts_with("initial_admin_keys line 2 from env GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE: not an OpenSSH public key"),
        "{e}"
    );
    assert!(
        !e.contains("hunter2"),
        "a secret file's content is not echoed: {e}"
    );
    let e = err(load_env(&[
        ("GIT_COLLAB_SITE_TITLE", "a"),
        ("GIT_COLLAB_SITE_TITLE_FILE", keys.to_str().unwrap()),
    ]));
    assert!(e.contains("set only one of them"), "{e}");
}

#[test]
fn admin_keys_forms() {
    let loaded = load_env(&[("GIT_COLLAB_INITIAL_ADMIN_KEYS", KEY_A)]).unwrap();
    assert_eq!(loaded.config.initial_admin_keys, vec![KEY_A]);
    let list = format!("[\"{KEY_A}\", \"{KEY_B}\"]");
    let loaded = load_env(&[("GIT_COLLAB_INITIAL_ADMIN_KEYS", &list)]).unwrap();
    assert_eq!(loaded.config.initial_admin_keys, vec![KEY_A, KEY_B]);
    let loaded = load_env(&[("GIT_COLLAB_INITIAL_ADMIN_KEYS", "")]).unwrap();
    assert!(loaded.config.initial_admin_keys.is_empty());
    let e = err(load_env(&[(
        "GIT_COLLAB_INITIAL_ADMIN_KEYS",
        "ssh-ed25519 notbase64 x",
    )]));
    assert!(
        e.starts_with("initial_admin_keys line 1 = \"ssh-ed25519 notbase64 x\" from env GIT_COLLAB_INITIAL_ADMIN_KEYS: not an OpenSSH public key"),
        "{e}"
    );
    let e = err(load_env(&[(
        "GIT_COLLAB_INITIAL_ADMIN_KEYS",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n",
    )]));
    assert!(e.contains("looks like a private key"), "{e}");
    assert!(!e.contains("b3Bl"), "{e}");
}

#[test]
fn bad_values_name_key_value_and_layer() {
    for (pairs, expected) in [
        (
            vec![("GIT_COLLAB_SSH__LISTEN", "nope")],
            "ssh.listen = \"nope\" from env GIT_COLLAB_SSH__LISTEN: invalid socket address",
        ),
        (
            vec![("GIT_COLLAB_HTTP__LISTEN", "12345")],
            "http.listen = \"12345\" from env GIT_COLLAB_HTTP__LISTEN: invalid socket address",
        ),
        (
            vec![("GIT_COLLAB_LOG__FORMAT", "xml")],
            "log.format = \"xml\" from env GIT_COLLAB_LOG__FORMAT: expected text or json",
        ),
        (
            vec![("GIT_COLLAB_LOG__LEVEL", "loud")],
            "log.level = \"loud\" from env GIT_COLLAB_LOG__LEVEL: expected trace",
        ),
        (
            vec![("GIT_COLLAB_MAX_RELEASE_SIZE", "5X")],
            "max_release_size = \"5X\" from env GIT_COLLAB_MAX_RELEASE_SIZE: unknown unit",
        ),
        (
            vec![("GIT_COLLAB_STATE_DIR", "")],
            "state_dir = \"\" from env GIT_COLLAB_STATE_DIR: must not be empty",
        ),
    ] {
        let e = err(load_env(&pairs));
        assert!(e.starts_with(expected), "{pairs:?}: {e}");
    }
}

#[test]
fn bad_file_values_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.toml");
    let flags = ConfigFlags {
        config: Some(file.clone()),
        ..Default::default()
    };
    for (text, expected) in [
        ("max_release_size = -1\n", "max_release_size = -1 from file"),
        ("site_title = 3\n", "site_title = 3 from file"),
        (
            "[log]\nlevel = [\"info\"]\n",
            "log.level = [\"info\"] from file",
        ),
        (
            "initial_admin_keys = [1]\n",
            "initial_admin_keys = [1] from file",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let e = err(load_from(&flags, &env(&[]), &no_system_file()));
        assert!(e.starts_with(expected), "{text:?}: {e}");
        assert!(e.contains(&file.display().to_string()), "{e}");
    }
}

#[test]
fn a_bad_lower_layer_value_is_overridden() {
    let loaded = load_from(
        &ConfigFlags {
            ssh_listen: Some("127.0.0.1:9".into()),
            ..Default::default()
        },
        &env(&[("GIT_COLLAB_SSH__LISTEN", "nope")]),
        &no_system_file(),
    )
    .unwrap();
    assert_eq!(loaded.config.ssh.listen, "127.0.0.1:9");
    assert_eq!(loaded.sources["ssh.listen"], "flag --ssh-listen");
}

#[test]
fn lease_policy_keys_take_seconds_or_units() {
    let loaded = load_env(&[
        ("GIT_COLLAB_LEASES__MAX_LIFETIME", "2h"),
        ("GIT_COLLAB_LEASES__LOCK_DELAY", "15"),
        ("GIT_COLLAB_LEASES__MAX_TTL", "10m"),
        ("GIT_COLLAB_LEASES__EVICTION_GRACE", "30s"),
    ])
    .unwrap();
    assert_eq!(
        loaded.config.leases,
        LeasesConfig {
            max_lifetime: 7200,
            lock_delay: 15,
            max_ttl: 600,
            eviction_grace: 30,
            max_waiters: 1024,
            max_waiters_per_principal: 16,
        }
    );
    assert_eq!(
        loaded.sources["leases.lock_delay"],
        "env GIT_COLLAB_LEASES__LOCK_DELAY"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.toml");
    std::fs::write(&file, "[leases]\nlock_delay = 30\nmax_lifetime = \"1d\"\n").unwrap();
    let flags = ConfigFlags {
        config: Some(file),
        ..Default::default()
    };
    let loaded = load_from(&flags, &env(&[]), &no_system_file()).unwrap();
    assert_eq!(
        (
            loaded.config.leases.lock_delay,
            loaded.config.leases.max_lifetime
        ),
        (30, 86400)
    );
    let defaults = load_env(&[]).unwrap().to_text();
    assert!(defaults.contains("0 (unlimited)"), "{defaults}");
    assert!(defaults.contains("0 (none)"), "{defaults}");
    for (var, bad) in [
        ("GIT_COLLAB_LEASES__LOCK_DELAY", "soon"),
        ("GIT_COLLAB_LEASES__MAX_TTL", "0"),
        ("GIT_COLLAB_LEASES__MAX_LIFETIME", "-5"),
        ("GIT_COLLAB_LEASES__MAX_LIFETIME", "99999d"),
    ] {
        let e = err(load_env(&[(var, bad)]));
        assert!(e.contains(&format!("from env {var}")), "{e}");
    }
    assert_eq!(parse_lease_duration("90"), Ok(90));
    assert_eq!(parse_lease_duration("7d"), Ok(604800));
    assert!(parse_lease_duration("1w").is_err());
    assert!(parse_lease_duration("").is_err());
}

#[test]
fn sizes() {
    assert_eq!(parse_size("104857600"), Ok(104857600));
    assert_eq!(parse_size("100MiB"), Ok(100 << 20));
    assert_eq!(parse_size("5M"), Ok(5 << 20));
    assert_eq!(parse_size("5 m"), Ok(5 << 20));
    assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
    assert_eq!(parse_size("2k"), Ok(2048));
    assert!(parse_size("M").is_err());
    assert!(parse_size("1.5G").is_err());
    assert!(parse_size("99999999999T").is_err());
    let loaded = load_env(&[("GIT_COLLAB_MAX_RELEASE_SIZE", "5M")]).unwrap();
    assert_eq!(loaded.config.max_release_size, 5 << 20);
}

#[test]
fn limits_parse_and_validate() {
    let loaded = load_env(&[
        ("GIT_COLLAB_SSH__MAX_STARTUPS", "5:50:20"),
        ("GIT_COLLAB_SSH__LOGIN_GRACE_TIME", "2m"),
        ("GIT_COLLAB_HTTP__HEADER_READ_TIMEOUT", "1500ms"),
        ("GIT_COLLAB_HTTP__IDLE_TIMEOUT", "30"),
        ("GIT_COLLAB_HTTP__MAX_REQUEST_BODY", "1M"),
        ("GIT_COLLAB_GIT__MAX_PROCESSES", "3"),
    ])
    .unwrap();
    let c = &loaded.config;
    assert_eq!(
        c.ssh.max_startups,
        MaxStartups {
            start: 5,
            rate: 50,
            full: 20
        }
    );
    assert_eq!(c.ssh.login_grace_time, Duration::from_secs(120));
    assert_eq!(c.http.header_read_timeout, Duration::from_millis(1500));
    assert_eq!(c.http.idle_timeout, Duration::from_secs(30));
    assert_eq!(c.http.max_request_body, 1 << 20);
    assert_eq!(c.git.max_processes, 3);
    assert_eq!(
        loaded.sources["git.max_processes"],
        "env GIT_COLLAB_GIT__MAX_PROCESSES"
    );
    let text = loaded.to_text();
    assert!(text.contains("1500ms"), "{text}");
    assert!(text.contains("5:50:20"), "{text}");
    assert_eq!(loaded.to_json()["ssh.login_grace_time"]["value"], 120);

    for (pairs, expected) in [
        (
            vec![("GIT_COLLAB_SSH__MAX_SESSIONS", "0")],
            "ssh.max_sessions = \"0\" from env GIT_COLLAB_SSH__MAX_SESSIONS: expected a whole number from 1 to 1000000",
        ),
        (
            vec![("GIT_COLLAB_HTTP__IDLE_TIMEOUT", "0s")],
            "http.idle_timeout = \"0s\" from env GIT_COLLAB_HTTP__IDLE_TIMEOUT: must be longer than zero",
        ),
        (
            vec![("GIT_COLLAB_HTTP__HEADER_READ_TIMEOUT", "10 days")],
            "http.header_read_timeout = \"10 days\" from env GIT_COLLAB_HTTP__HEADER_READ_TIMEOUT: unknown unit",
        ),
        (
            vec![("GIT_COLLAB_SSH__MAX_STARTUPS", "30:10:10")],
            "ssh.max_startups = \"30:10:10\" from env GIT_COLLAB_SSH__MAX_STARTUPS: start must not exceed full",
        ),
        (
            vec![("GIT_COLLAB_SSH__MAX_STARTUPS", "1:0:10")],
            "ssh.max_startups = \"1:0:10\" from env GIT_COLLAB_SSH__MAX_STARTUPS: rate is a percentage",
        ),
    ] {
        let e = err(load_env(&pairs));
        assert!(e.starts_with(expected), "{pairs:?}: {e}");
    }
    // One number means "refuse past it".
    assert_eq!(
        parse_max_startups("50"),
        Ok(MaxStartups {
            start: 50,
            rate: 100,
            full: 50
        })
    );
    assert_eq!(fmt_duration(Duration::from_secs(7200)), "2h");
    assert_eq!(fmt_duration(Duration::from_secs(90)), "90s");
}

#[test]
fn limits_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.toml");
    std::fs::write(
        &file,
        "[ssh]\nmax_sessions = 4\nlogin_grace_time = 30\nmax_startups = 20\n[git]\nmax_processes = 2\n[http]\nmax_file_shown = \"64KiB\"\n",
    )
    .unwrap();
    let flags = ConfigFlags {
        config: Some(file.clone()),
        ..Default::default()
    };
    let c = load_from(&flags, &env(&[]), &no_system_file())
        .unwrap()
        .config;
    assert_eq!(c.ssh.max_sessions, 4);
    assert_eq!(c.ssh.login_grace_time, Duration::from_secs(30));
    assert_eq!(c.ssh.max_startups.full, 20);
    assert_eq!(c.git.max_processes, 2);
    assert_eq!(c.http.max_file_shown, 64 << 10);
    std::fs::write(&file, "[git]\nmax_procs = 2\n").unwrap();
    let e = err(load_from(&flags, &env(&[]), &no_system_file()));
    assert!(e.starts_with("git.max_procs from file"), "{e}");
}

#[test]
fn misspelled_env_vars_get_the_nearest_name() {
    let vars = env(&[
        ("GIT_COLLAB_SSH_LISTEN", "x"),
        ("GIT_COLLAB_SSH_COMMAND", "ssh"),
        ("GIT_COLLAB_LOG_LEVEL_FILE", "/x"),
        ("GIT_COLLAB_SITE_TITEL", "x"),
        ("GIT_COLLAB_STATEDIR", "x"),
        ("GIT_COLLAB_REQUIRE_POSTGRES_TEST", "1"),
        ("GIT_COLLAB_SITE_TITLE", "fine"),
        ("GIT_COLLAB_SITE_TITLE_FILE", "/fine"),
        ("GIT_COLLAB_TEST_BACKEND", "postgres"),
        ("GIT_COLLAB_NOTHING_LIKE_IT_AT_ALL", "x"),
    ]);
    let got = misspelled_env_vars(&vars);
    let want = [
        ("GIT_COLLAB_LOG_LEVEL_FILE", "GIT_COLLAB_LOG__LEVEL_FILE"),
        ("GIT_COLLAB_NOTHING_LIKE_IT_AT_ALL", ""),
        (
            "GIT_COLLAB_REQUIRE_POSTGRES_TEST",
            "GIT_COLLAB_REQUIRE_POSTGRES_TESTS",
        ),
        ("GIT_COLLAB_SITE_TITEL", "GIT_COLLAB_SITE_TITLE"),
        ("GIT_COLLAB_SSH_LISTEN", "GIT_COLLAB_SSH__LISTEN"),
        ("GIT_COLLAB_STATEDIR", "GIT_COLLAB_STATE_DIR"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(got, want);
}

/// Every `GIT_COLLAB_*` name the tree uses is a setting or listed in
/// `OTHER_ENV_VARS`, so a real variable never draws the warning.
#[test]
fn every_env_var_the_tree_uses_is_known() {
    let root = collab_testkit_root();
    let mut unknown = std::collections::BTreeSet::new();
    let mut dirs = vec![root.join("crates"), root.join("scripts"), root.join(".ci")];
    let settings: Vec<String> = keys::KEYS.iter().map(|k| env_name(k.name)).collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            // These test unknown and misspelled names on purpose.
            if path.ends_with("config/tests.rs") || path.ends_with("tests/it/once/config.rs") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            // Comments give misspellings as examples.
            let text: String = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            for (i, _) in text.match_indices("GIT_COLLAB_") {
                let name: String = text[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                let name = name.trim_end_matches('_');
                let stem = name.strip_suffix("_FILE").unwrap_or(name);
                let is_prefix = settings.iter().any(|s| s.starts_with(&format!("{name}__")));
                if name == "GIT_COLLAB"
                    || is_prefix
                    || settings.iter().any(|s| s == name || s == stem)
                    || OTHER_ENV_VARS.contains(&name)
                {
                    continue;
                }
                unknown.insert(format!("{name} ({})", path.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "add these to OTHER_ENV_VARS or fix them: {unknown:#?}"
    );
}

fn collab_testkit_root() -> std::path::PathBuf {
    collab_testkit::workspace_root().to_path_buf()
}

#[test]
fn show_renders_every_key() {
    let loaded = load_env(&[("GIT_COLLAB_INITIAL_ADMIN_KEYS", KEY_A)]).unwrap();
    let json = loaded.to_json();
    assert_eq!(json.as_object().unwrap().len(), keys::KEYS.len());
    assert_eq!(
        json["collab_db"]["value"],
        "/var/lib/git-collab/repos/collab.db"
    );
    assert_eq!(json["max_release_size"]["value"], 104857600);
    assert_eq!(json["initial_admin_keys"]["value"][0], KEY_A);
    let text = loaded.to_text();
    assert!(text.contains("104857600 (100 MiB)"), "{text}");
    assert!(text.contains("SHA256:"), "{text}");
    // Sources line up in one column.
    let column = text.lines().next().unwrap().find("default").unwrap();
    // A list shown one item per line continues under its value column.
    for line in text.lines().filter(|l| !l.starts_with(' ')) {
        let source = line.trim_end().rsplit("  ").next().unwrap();
        assert_eq!(line.rfind(source).unwrap(), column, "{text}");
    }
}
