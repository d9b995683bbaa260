//! The server's layered configuration, driven through the real
//! `git-collab-server` binary (`config show --json`, `config check`,
//! `healthcheck`) with a cleared environment, temp files and keys made by the
//! real `ssh-keygen`: each layer overrides the one below, errors name their
//! source, client variables are left alone.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A temp directory holding a `server.toml`, and the environment to run with.
struct Setup {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Setup {
    fn new(toml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("server.toml"), toml).unwrap();
        Setup {
            dir,
            env: Vec::new(),
        }
    }

    fn file(&self) -> PathBuf {
        self.dir.path().join("server.toml")
    }

    fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Run the server binary with `--config <server.toml>` and `args`.
    fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["--config".to_string(), self.file().display().to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        run_server(&all, &self.env)
    }

    /// `config show --json`, which must succeed.
    fn show(&self, flags: &[&str]) -> Value {
        let mut args = flags.to_vec();
        args.extend(["config", "show", "--json"]);
        let out = self.run(&args);
        assert!(out.status.success(), "config show failed: {}", stderr(&out));
        serde_json::from_slice(&out.stdout).expect("config show --json prints JSON")
    }

    /// `config check`, which must fail with exactly one `error: ` line.
    fn check_error(&self, flags: &[&str]) -> String {
        let mut args = flags.to_vec();
        args.extend(["config", "check"]);
        let out = self.run(&args);
        one_line_error(&out)
    }
}

fn run_server(args: &[String], env: &[(String, String)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run git-collab-server")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn one_line_error(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(out));
    assert!(out.stdout.is_empty(), "nothing on stdout on error");
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "one error line: {err:?}");
    assert!(err.starts_with("error: "), "{err}");
    err.trim_end().to_string()
}

fn entry<'a>(show: &'a Value, key: &str) -> (&'a Value, &'a str) {
    let entry = &show[key];
    (&entry["value"], entry["source"].as_str().unwrap())
}

fn ssh_keygen(dir: &Path, name: &str) -> String {
    let path = dir.join(name);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&path)
        .status()
        .expect("run ssh-keygen");
    assert!(status.success());
    std::fs::read_to_string(path.with_extension("pub"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn defaults_with_an_empty_file() {
    let setup = Setup::new("");
    let show = setup.show(&[]);
    assert_eq!(show.as_object().unwrap().len(), 92, "{show:#}");
    assert_eq!(
        entry(&show, "leases.max_ttl"),
        (&Value::from(315_360_000), "default")
    );
    assert_eq!(
        entry(&show, "leases.lock_delay"),
        (&Value::from(0), "default")
    );
    assert_eq!(
        entry(&show, "state_dir"),
        (&Value::from("/var/lib/git-collab"), "default")
    );
    assert_eq!(
        entry(&show, "collab_db"),
        (
            &Value::from("/var/lib/git-collab/repos/collab.db"),
            "derived"
        )
    );
    assert_eq!(
        entry(&show, "max_release_size"),
        (&Value::from(104857600), "default")
    );
    assert_eq!(
        entry(&show, "max_issue_body"),
        (&Value::from(262144), "default")
    );
    assert_eq!(
        entry(&show, "ssh.listen"),
        (&Value::from("0.0.0.0:2222"), "default")
    );
    assert_eq!(
        entry(&show, "http.listen"),
        (&Value::from("0.0.0.0:8080"), "default")
    );
    assert_eq!(
        entry(&show, "initial_admin_keys"),
        (&serde_json::json!([]), "default")
    );
}

#[test]
fn file_overrides_defaults() {
    let setup = Setup::new(
        "site_title = \"Team forge\"\nmax_release_size = \"5M\"\n[ssh]\nlisten = \"127.0.0.1:2200\"\n[log]\nformat = \"json\"\n",
    );
    let file = format!("file {}", setup.file().display());
    let show = setup.show(&[]);
    assert_eq!(
        entry(&show, "site_title"),
        (&Value::from("Team forge"), file.as_str())
    );
    assert_eq!(
        entry(&show, "max_release_size"),
        (&Value::from(5 * 1024 * 1024), file.as_str())
    );
    assert_eq!(
        entry(&show, "ssh.listen"),
        (&Value::from("127.0.0.1:2200"), file.as_str())
    );
    assert_eq!(
        entry(&show, "log.format"),
        (&Value::from("json"), file.as_str())
    );
    assert_eq!(entry(&show, "log.level").1, "default");
}

#[test]
fn env_overrides_file_with_nesting() {
    let setup = Setup::new("[ssh]\nlisten = \"127.0.0.1:2200\"\n[log]\nlevel = \"warn\"\n")
        .env("GIT_COLLAB_SSH__LISTEN", "127.0.0.1:2201")
        .env("GIT_COLLAB_LOG__LEVEL", "debug")
        .env("GIT_COLLAB_SITE_TITLE", "12345");
    let show = setup.show(&[]);
    assert_eq!(
        entry(&show, "ssh.listen"),
        (&Value::from("127.0.0.1:2201"), "env GIT_COLLAB_SSH__LISTEN")
    );
    assert_eq!(
        entry(&show, "log.level"),
        (&Value::from("debug"), "env GIT_COLLAB_LOG__LEVEL")
    );
    // A numeric-looking value for a string key stays that string.
    assert_eq!(
        entry(&show, "site_title"),
        (&Value::from("12345"), "env GIT_COLLAB_SITE_TITLE")
    );
}

#[test]
fn flag_overrides_env() {
    let setup = Setup::new("[http]\nlisten = \"127.0.0.1:8000\"\n")
        .env("GIT_COLLAB_HTTP__LISTEN", "127.0.0.1:8001")
        .env("GIT_COLLAB_MAX_RELEASE_SIZE", "1GB");
    let show = setup.show(&[
        "--http-listen",
        "127.0.0.1:8002",
        "--max-release-size",
        "2k",
    ]);
    assert_eq!(
        entry(&show, "http.listen"),
        (&Value::from("127.0.0.1:8002"), "flag --http-listen")
    );
    assert_eq!(
        entry(&show, "max_release_size"),
        (&Value::from(2048), "flag --max-release-size")
    );
}

#[test]
fn config_file_from_env_variable() {
    let setup = Setup::new("site_title = \"via env\"\n");
    let env = vec![(
        "GIT_COLLAB_CONFIG".to_string(),
        setup.file().display().to_string(),
    )];
    let out = run_server(&["config".into(), "show".into(), "--json".into()], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let show: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        entry(&show, "site_title"),
        (
            &Value::from("via env"),
            format!("file {}", setup.file().display()).as_str()
        )
    );
}

#[test]
fn derived_paths_follow_state_dir_from_any_layer() {
    let file_layer = Setup::new("state_dir = \"/srv/from-file\"\n");
    let env_layer =
        Setup::new("state_dir = \"/srv/from-file\"\n").env("GIT_COLLAB_STATE_DIR", "/srv/from-env");
    for (show, dir) in [
        (file_layer.show(&[]), "/srv/from-file"),
        (env_layer.show(&[]), "/srv/from-env"),
        (
            env_layer.show(&["--state-dir", "/srv/from-flag"]),
            "/srv/from-flag",
        ),
    ] {
        for (key, path) in [
            ("repos_dir", format!("{dir}/repos")),
            ("collab_db", format!("{dir}/repos/collab.db")),
            ("ssh.host_key", format!("{dir}/ssh_host_ed25519_key")),
            ("ssh.authorized_keys", format!("{dir}/authorized_keys")),
        ] {
            assert_eq!(entry(&show, key), (&Value::from(path), "derived"), "{key}");
        }
    }
    // An explicit value is not derived; collab_db then follows repos_dir.
    let show = env_layer.show(&["--repos-dir", "/data/git"]);
    assert_eq!(
        entry(&show, "collab_db"),
        (&Value::from("/data/git/collab.db"), "derived")
    );
    assert_eq!(
        entry(&show, "repos_dir"),
        (&Value::from("/data/git"), "flag --repos-dir")
    );
}

#[test]
fn file_indirection_reads_secret_files() {
    let setup = Setup::new("");
    let alice = ssh_keygen(setup.dir.path(), "alice");
    let bob = ssh_keygen(setup.dir.path(), "bob");
    let keys_file = setup.dir.path().join("admin_keys");
    std::fs::write(&keys_file, format!("# admins\n{alice}\n\n{bob}\n")).unwrap();
    let setup = setup.env(
        "GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE",
        keys_file.to_str().unwrap(),
    );
    // The keys are read (a check passes) but never shown: values read
    // through `_FILE` are secrets by intent.
    let checked = setup.run(&["config", "check"]);
    assert!(checked.status.success(), "{}", stderr(&checked));
    let show = setup.show(&[]);
    let redacted = format!("<redacted: from file {}>", keys_file.display());
    assert_eq!(
        entry(&show, "initial_admin_keys"),
        (
            &Value::from(redacted.as_str()),
            "env GIT_COLLAB_INITIAL_ADMIN_KEYS_FILE"
        )
    );
    let out = setup.run(&["config", "show"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&redacted), "{text}");
    assert!(
        !text.contains("SHA256:") && !text.contains("AAAA"),
        "{text}"
    );
    assert!(!show.to_string().contains("AAAA"), "{show}");
}

#[test]
fn file_indirection_is_redacted_and_size_bounded() {
    let setup = Setup::new("");
    let title = setup.dir.path().join("title");
    std::fs::write(&title, "hunter2\n").unwrap();
    let setup = setup.env("GIT_COLLAB_SITE_TITLE_FILE", title.to_str().unwrap());
    let out = setup.run(&["config", "show"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        text.contains(&format!("<redacted: from file {}>", title.display())),
        "{text}"
    );

    let zero = Setup::new("").env("GIT_COLLAB_SITE_TITLE_FILE", "/dev/zero");
    assert_eq!(
        zero.check_error(&[]),
        "error: site_title from env GIT_COLLAB_SITE_TITLE_FILE: cannot read /dev/zero: \
         larger than 64 KiB (the limit for _FILE values)"
    );
}

#[test]
fn bad_admin_key_is_a_loud_error() {
    let setup = Setup::new("initial_admin_keys = [\"ssh-ed25519 AAAA-not-a-key eve\"]\n");
    let err = setup.check_error(&[]);
    assert!(
        err.starts_with(&format!(
            "error: initial_admin_keys entry 1 = \"ssh-ed25519 AAAA-not-a-key eve\" from file {}: not an OpenSSH public key",
            setup.file().display()
        )),
        "{err}"
    );
}

#[test]
fn unknown_file_key_is_an_error() {
    let setup = Setup::new("[ssh]\nlisen = \"127.0.0.1:22\"\n");
    let err = setup.check_error(&[]);
    assert!(
        err.starts_with(&format!(
            "error: ssh.lisen from file {}: unknown key",
            setup.file().display()
        )),
        "{err}"
    );
}

#[test]
fn missing_config_file_is_an_error() {
    let out = run_server(
        &[
            "--config".into(),
            "/nonexistent/server.toml".into(),
            "config".into(),
            "check".into(),
        ],
        &[],
    );
    assert_eq!(
        one_line_error(&out),
        "error: config file /nonexistent/server.toml from flag --config: no such file"
    );
    let env = [(
        "GIT_COLLAB_CONFIG".to_string(),
        "/nonexistent/env.toml".to_string(),
    )];
    let out = run_server(&["config".into(), "check".into()], &env);
    assert_eq!(
        one_line_error(&out),
        "error: config file /nonexistent/env.toml from env GIT_COLLAB_CONFIG: no such file"
    );
}

#[test]
fn bad_value_in_each_layer_names_its_source() {
    let bad_file = Setup::new("[http]\nlisten = \"nope\"\n");
    let err = bad_file.check_error(&[]);
    assert!(
        err.starts_with(&format!(
            "error: http.listen = \"nope\" from file {}: invalid socket address",
            bad_file.file().display()
        )),
        "{err}"
    );

    let bad_env = Setup::new("").env("GIT_COLLAB_SSH__LISTEN", "nope");
    let err = bad_env.check_error(&[]);
    assert!(
        err.starts_with(
            "error: ssh.listen = \"nope\" from env GIT_COLLAB_SSH__LISTEN: invalid socket address"
        ),
        "{err}"
    );

    let err = Setup::new("").check_error(&["--log-format", "xml"]);
    assert!(
        err.starts_with(
            "error: log.format = \"xml\" from flag --log-format: expected text or json"
        ),
        "{err}"
    );

    let missing_secret = Setup::new("").env("GIT_COLLAB_SITE_TITLE_FILE", "/nonexistent/title");
    let err = missing_secret.check_error(&[]);
    assert!(
        err.starts_with(
            "error: site_title from env GIT_COLLAB_SITE_TITLE_FILE: cannot read /nonexistent/title"
        ),
        "{err}"
    );

    let broken_toml = Setup::new("[ssh\nlisten = 1\n");
    let err = broken_toml.check_error(&[]);
    assert!(
        err.starts_with(&format!(
            "error: config file {} line 1",
            broken_toml.file().display()
        )),
        "{err}"
    );
}

#[test]
fn client_variables_do_not_break_the_server() {
    let setup = Setup::new("")
        .env(
            "GIT_COLLAB_SSH_COMMAND",
            "ssh -i /tmp/key -o StrictHostKeyChecking=no",
        )
        .env("GIT_COLLAB_REQUIRE_CONTAINER_TESTS", "1")
        .env("GIT_COLLAB_WHATEVER__NESTED", "[not toml");
    let out = setup.run(&["config", "check"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "configuration ok\n");
    assert_eq!(
        entry(&setup.show(&[]), "ssh.listen"),
        (&Value::from("0.0.0.0:2222"), "default")
    );
}

/// A mistyped setting is ignored, as every unknown variable is, but the
/// server says so with the nearest name (issue 32: it was silent); known
/// client and test variables draw nothing.
#[test]
fn a_mistyped_variable_gets_the_nearest_name() {
    let setup = Setup::new("")
        .env("GIT_COLLAB_SITE_TITEL", "Mine")
        .env("GIT_COLLAB_SSH_LISTEN", "127.0.0.1:1")
        .env("GIT_COLLAB_SSH_COMMAND", "ssh")
        .env("GIT_COLLAB_REQUIRE_CONTAINER_TESTS", "1");
    let out = setup.run(&["config", "check"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("GIT_COLLAB_SITE_TITEL is not a server setting and is ignored; did you mean GIT_COLLAB_SITE_TITLE?"),
        "{err}"
    );
    assert!(
        err.contains("did you mean GIT_COLLAB_SSH__LISTEN?"),
        "{err}"
    );
    assert!(!err.contains("GIT_COLLAB_SSH_COMMAND"), "{err}");
    assert!(!err.contains("GIT_COLLAB_REQUIRE_CONTAINER_TESTS"), "{err}");
}

#[test]
fn show_text_is_aligned_with_sources() {
    let setup = Setup::new("site_title = \"T\"\n").env("GIT_COLLAB_SSH__LISTEN", "127.0.0.1:22");
    let out = setup.run(&["--http-listen", "127.0.0.1:80", "config", "show"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // 92 keys; ssh.ciphers' six defaults take six lines.
    assert_eq!(lines.len(), 97, "{text}");
    let file = format!("file {}", setup.file().display());
    let expect = [
        ("site_title", "T", file.as_str()),
        ("ssh.listen", "127.0.0.1:22", "env GIT_COLLAB_SSH__LISTEN"),
        ("http.listen", "127.0.0.1:80", "flag --http-listen"),
        ("state_dir", "/var/lib/git-collab", "default"),
        ("repos_dir", "/var/lib/git-collab/repos", "derived"),
    ];
    let source_column = lines[0].rfind("default").unwrap();
    for (key, value, source) in expect {
        let line = lines
            .iter()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no {key} in {text}"));
        let fields: Vec<&str> = line
            .split("  ")
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .collect();
        assert_eq!(fields, [key, value, source], "{line}");
        assert_eq!(line.rfind(source), Some(source_column), "{text}");
    }
}

/// A one-shot HTTP server on an ephemeral loopback port answering `reply`.
fn http_once(reply: &'static str) -> (String, std::thread::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 512];
        while !request.ends_with(b"\r\n\r\n") {
            match conn.read(&mut buf).unwrap() {
                0 => break,
                n => request.extend_from_slice(&buf[..n]),
            }
        }
        conn.write_all(reply.as_bytes()).unwrap();
        String::from_utf8(request).unwrap()
    });
    (addr, handle)
}

#[test]
fn healthcheck_asks_readyz() {
    let (addr, server) = http_once("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let setup = Setup::new("").env("GIT_COLLAB_HTTP__LISTEN", &addr);
    let out = setup.run(&["healthcheck"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(server
        .join()
        .unwrap()
        .starts_with("GET /readyz HTTP/1.0\r\n"));

    let (addr, server) = http_once("HTTP/1.1 503 Service Unavailable\r\n\r\n");
    let out = Setup::new("").run(&["--http-listen", &addr, "healthcheck"]);
    server.join().unwrap();
    assert_eq!(
        one_line_error(&out),
        format!(
            "error: healthcheck: http://{addr}/readyz answered HTTP/1.1 503 Service Unavailable"
        )
    );
}

/// A missing or mistyped `--state-dir` used to be created silently, with a
/// new host key and an empty forge (issue 32). Now `serve` refuses with
/// one line naming the directory and `--init`, creating nothing; with
/// `--init` it makes the new forge.
#[test]
fn a_missing_state_dir_is_created_only_with_init() {
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("stat");
    let serve = |extra: &[&str]| {
        let mut args = vec![
            "--state-dir".to_string(),
            typo.display().to_string(),
            "--ssh-listen".into(),
            "127.0.0.1:0".into(),
            "--http-listen".into(),
            "127.0.0.1:0".into(),
            "serve".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let out = run_server(&serve(&[]), &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = one_line_error(&out);
    assert!(
        err.contains(&format!(
            "state directory {} does not exist",
            typo.display()
        )),
        "{err}"
    );
    assert!(err.contains("serve --init"), "{err}");
    assert!(!typo.exists(), "nothing was created");

    // With --init the server makes it (and serves; stopped here once ready).
    let mut child = Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
        .args(serve(&["--init"]))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !typo.join("ssh_host_ed25519_key").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server made no state"
        );
        assert!(child.try_wait().unwrap().is_none(), "the server exited");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `ssh.ciphers` is what the server offers: a client asking only for a
/// cipher left out is refused at key exchange, and a client's default list
/// settles on the first one of its own list the server has, whatever the
/// server's order (OpenSSH's `ssh -v` names it; `-v` also beats the
/// harness's `LogLevel=ERROR`, which hides the refusal's reason).
/// A name the server does not speak is a one-line configuration error.
#[test]
fn ssh_ciphers_limit_what_a_client_can_negotiate() {
    use collab_testkit::{HarnessOptions, ServerHarness};
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![(
            "GIT_COLLAB_SSH__CIPHERS".into(),
            "aes256-gcm@openssh.com, aes128-gcm@openssh.com".into(),
        )],
        ..Default::default()
    });
    let key = h.ssh_client_key();
    let ask = |options: &[&str]| {
        let mut args = options.to_vec();
        args.extend(["git@127.0.0.1", "collab-whoami"]);
        h.ssh_raw(&key, &args, b"")
    };
    let chacha = ask(&["-v", "-o", "Ciphers=chacha20-poly1305@openssh.com"]);
    assert_ne!(chacha.code, 0, "{chacha:?}");
    assert!(
        chacha.stderr.contains("no matching cipher"),
        "{}",
        chacha.stderr
    );
    let ctr = ask(&["-v", "-o", "Ciphers=aes128-ctr"]);
    assert!(ctr.stderr.contains("no matching cipher"), "{}", ctr.stderr);
    let gcm256 = ask(&["-o", "Ciphers=aes256-gcm@openssh.com"]);
    assert!(gcm256.success(), "{gcm256:?}");
    let default = ask(&["-v"]);
    assert!(default.success(), "{default:?}");
    assert!(
        default
            .stderr
            .contains("server->client cipher: aes128-gcm@openssh.com"),
        "{}",
        default.stderr
    );

    let err =
        Setup::new("[ssh]\nciphers = [\"aes128-gcm@openssh.com\", \"arcfour\"]\n").check_error(&[]);
    assert!(
        err.contains("ssh.ciphers") && err.contains("unknown: arcfour"),
        "{err}"
    );
    let err = Setup::new("")
        .env("GIT_COLLAB_SSH__CIPHERS", "")
        .check_error(&[]);
    assert!(err.contains("must name at least one"), "{err}");
}
