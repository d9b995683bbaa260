//! Evaluates the NixOS module `nixos/module.nix` with the real nixpkgs lib
//! (`lib.evalModules` through `nix-instantiate --eval --strict --json` on
//! `nixos/tests/eval/eval-module.nix`, which adds stub declarations for the NixOS
//! options the module sets and a stub `pkgs`) and checks what it produces:
//! the systemd unit, the rendered settings, the service account and the
//! firewall. The rendered file is also handed to the real
//! `git-collab-server config check`.
//!
//! Needs `nix-instantiate` (Debian: `apt-get install nix-bin`) and the
//! nixpkgs lib, which no package registry carries: `NIXPKGS_LIB` (a
//! checkout of nix-community/nixpkgs.lib, its `lib/` directory or the
//! repository root), else the vendored copy beside the clone,
//! `../shared/vendor/nixpkgs-lib` from the project root. Without them each
//! test prints why it is skipped and passes, unless
//! `GIT_COLLAB_REQUIRE_NIX_TESTS=1` (set by `.ci/run`) makes that a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

/// Where the nixpkgs lib is, or `None` (after saying why) when these tests
/// cannot run here.
fn nixpkgs_lib() -> Option<PathBuf> {
    let require = std::env::var("GIT_COLLAB_REQUIRE_NIX_TESTS").is_ok_and(|v| v == "1");
    let skip = |why: String| {
        assert!(!require, "GIT_COLLAB_REQUIRE_NIX_TESTS=1 but {why}");
        eprintln!("skipping NixOS module evaluation: {why}");
        None
    };
    let vendored = vendored_lib();
    let Some(root) = std::env::var_os("NIXPKGS_LIB")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| vendored.is_dir().then(|| vendored.clone()))
    else {
        return skip(format!(
            "NIXPKGS_LIB is not set and there is no {} (point it at a checkout of nix-community/nixpkgs.lib)",
            vendored.display()
        ));
    };
    if let Err(e) = Command::new("nix-instantiate").arg("--version").output() {
        return skip(format!(
            "nix-instantiate cannot run ({e}); apt-get install nix-bin"
        ));
    }
    // A set but wrong NIXPKGS_LIB is a mistake, not a reason to skip.
    [root.clone(), root.join("lib")]
        .into_iter()
        .find(|dir| dir.join("default.nix").is_file() && dir.join("modules.nix").is_file())
        .map(Some)
        .unwrap_or_else(|| {
            panic!(
                "NIXPKGS_LIB={} holds no nixpkgs lib (no default.nix and modules.nix in it or in its lib/)",
                root.display()
            )
        })
}

/// The nixpkgs lib vendored beside the clone: `../shared/vendor/nixpkgs-lib`
/// from the project root (its README says so), wherever the clone is.
fn vendored_lib() -> PathBuf {
    collab_testkit::workspace_root().join("../shared/vendor/nixpkgs-lib")
}

fn harness() -> PathBuf {
    collab_testkit::workspace_root().join("nixos/tests/eval/eval-module.nix")
}

/// Runs the harness with `configuration` (a NixOS module expression).
fn nix_eval(lib: &Path, configuration: &str) -> std::process::Output {
    Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json", "--readonly-mode"])
        .arg(harness())
        .arg("--argstr")
        .arg("libPath")
        .arg(lib)
        .args(["--arg", "configuration", configuration])
        .output()
        .expect("run nix-instantiate")
}

/// Evaluates `configuration`; panics with Nix's error when evaluation fails.
fn eval(lib: &Path, configuration: &str) -> Value {
    let out = nix_eval(lib, configuration);
    assert!(
        out.status.success(),
        "evaluating {configuration} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("nix-instantiate prints JSON")
}

/// Evaluates `configuration`, which must fail; returns Nix's error text.
fn eval_error(lib: &Path, configuration: &str) -> String {
    let out = nix_eval(lib, configuration);
    assert!(
        !out.status.success(),
        "evaluating {configuration} should fail, got {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn enabled(extra: &str) -> String {
    format!("{{ lib, ... }}: {{ services.git-collab = {{ enable = true; {extra} }}; }}")
}

fn service_config(result: &Value) -> &Value {
    assert_eq!(result["failedAssertions"], json!([]), "{result:#}");
    &result["service"]["serviceConfig"]
}

/// `ExecStart`'s program: the server binary of `services.git-collab.package`.
fn server_exe(result: &Value) -> String {
    let package = result["systemPackages"][0]
        .as_str()
        .expect("the package is installed");
    assert!(package.ends_with("-git-collab"), "{package}");
    format!("{package}/bin/git-collab-server")
}

fn rendered_toml(result: &Value) -> String {
    result["etc"]["git-collab/server.toml"]["text"]
        .as_str()
        .expect("server.toml is rendered")
        .to_owned()
}

/// The settings without the unset (null) optional keys, as the file has them.
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn defaults_give_the_spec_settings_and_a_hardened_unit() {
    let Some(lib) = nixpkgs_lib() else { return };
    let result = eval(&lib, &enabled(""));
    let unit = service_config(&result);

    assert_eq!(
        result["settings"],
        json!({
            "state_dir": "/var/lib/git-collab",
            "repos_dir": "/var/lib/git-collab/repos",
            "collab_db": null,
            "site_title": "git-collab",
            "max_release_size": 104857600,
            "initial_admin_keys": [],
            "ssh": {
                "listen": "0.0.0.0:2222",
                "host_key": null,
                "authorized_keys": null,
                "trusted_user_ca_keys": null,
                "revoked_keys": null,
                "host_certificate": null,
            },
            "http": {"listen": "0.0.0.0:8080"},
            "log": {"level": "info", "format": "text"},
        })
    );
    assert_eq!(
        unit["ExecStart"],
        format!(
            "{} --config /etc/git-collab/server.toml serve",
            server_exe(&result)
        )
    );
    assert_eq!(unit["StateDirectory"], "git-collab");
    assert_eq!(unit["StateDirectoryMode"], "0750");
    assert_eq!(unit["WorkingDirectory"], "/var/lib/git-collab");
    assert_eq!(unit["User"], "git-collab");
    assert_eq!(unit["Group"], "git-collab");
    assert_eq!(unit["Restart"], "on-failure");
    assert_eq!(unit["UMask"], "0077");
    assert!(unit.get("EnvironmentFile").is_none());
    assert!(unit.get("ExecStartPre").is_none());
    assert!(unit.get("ReadWritePaths").is_none());

    let hardening = json!({
        "ProtectSystem": "strict",
        "ProtectHome": true,
        "PrivateTmp": true,
        "PrivateDevices": true,
        "PrivateUsers": true,
        "NoNewPrivileges": true,
        "ProtectKernelTunables": true,
        "ProtectKernelModules": true,
        "ProtectKernelLogs": true,
        "ProtectControlGroups": true,
        "ProtectClock": true,
        "ProtectHostname": true,
        "ProtectProc": "invisible",
        "RestrictAddressFamilies": ["AF_INET", "AF_INET6", "AF_UNIX"],
        "RestrictNamespaces": true,
        "RestrictRealtime": true,
        "RestrictSUIDSGID": true,
        "LockPersonality": true,
        "MemoryDenyWriteExecute": true,
        "SystemCallArchitectures": "native",
        "SystemCallFilter": ["@system-service", "~@privileged", "~@resources"],
        "CapabilityBoundingSet": [""],
    });
    for (key, want) in hardening.as_object().unwrap() {
        assert_eq!(&unit[key], want, "serviceConfig.{key}");
    }
    assert!(unit.get("AmbientCapabilities").is_none(), "{unit:#}");

    let service = &result["service"];
    // git upload-pack / receive-pack are spawned from PATH.
    let path = service["path"].as_array().unwrap();
    assert_eq!(path.len(), 1, "{path:?}");
    assert!(path[0].as_str().unwrap().ends_with("-git"), "{path:?}");
    assert_eq!(service["wantedBy"], json!(["multi-user.target"]));
    // A changed server.toml restarts the unit.
    assert_eq!(
        service["restartTriggers"],
        json!([result["etc"]["git-collab/server.toml"]["path"]])
    );

    assert_eq!(
        result["users"],
        json!({"git-collab": {
            "isSystemUser": true,
            "group": "git-collab",
            "home": "/var/lib/git-collab",
            "description": "git-collab forge server",
        }})
    );
    assert_eq!(result["groups"], json!({"git-collab": {}}));
    assert_eq!(result["firewallTCPPorts"], json!([]));
    assert_eq!(result["tmpfiles"], json!({}));
    assert_eq!(result["systemPackages"].as_array().unwrap().len(), 1);
}

#[test]
fn rendered_file_holds_the_settings_and_the_server_accepts_it() {
    let Some(lib) = nixpkgs_lib() else { return };
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_str().unwrap();
    let result = eval(
        &lib,
        &enabled(&format!(
            r#"stateDir = "{state_dir}";
               settings.site_title = "Team \"forge\"";
               settings.ssh.listen = "127.0.0.1:2222";
               settings.log.format = "json";
               settings.initial_admin_keys = [ "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFGcO/3H2J4Iz3IIZ+Q83UCxEhu5/ic2LhsNeb/62hMF admin" ];"#
        )),
    );
    let text = rendered_toml(&result);
    let parsed: Value = toml::from_str::<toml::Value>(&text)
        .map(|v| serde_json::to_value(v).unwrap())
        .unwrap_or_else(|e| panic!("server.toml is not TOML ({e}):\n{text}"));
    assert_eq!(parsed, without_nulls(&result["settings"]));
    assert_eq!(parsed["site_title"], "Team \"forge\"");
    assert_eq!(parsed["state_dir"], state_dir);
    assert_eq!(parsed["repos_dir"], format!("{state_dir}/repos"));
    assert_eq!(parsed["log"]["format"], "json");
    // Unset optional keys are left to the server's own defaults.
    assert!(parsed.get("collab_db").is_none());
    assert!(parsed["ssh"].get("host_key").is_none());

    let file = state.path().join("server.toml");
    std::fs::write(&file, &text).unwrap();
    let mut check = Command::new(env!("CARGO_BIN_EXE_git-collab-server"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GIT_COLLAB_") {
            check.env_remove(key);
        }
    }
    let out = check
        .arg("--config")
        .arg(&file)
        .args(["config", "check"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git-collab-server config check rejected the module's file:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn certificate_files_render_as_paths_and_the_server_accepts_them() {
    let Some(lib) = nixpkgs_lib() else { return };
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_str().unwrap();
    let ca =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFGcO/3H2J4Iz3IIZ+Q83UCxEhu5/ic2LhsNeb/62hMF fleet-ca";
    let result = eval(
        &lib,
        &format!(
            r#"{{ lib, pkgs, ... }}: {{ services.git-collab = {{
                 enable = true;
                 stateDir = "{state_dir}";
                 settings.ssh.trusted_user_ca_keys = pkgs.writeText "user-ca.pub" "{ca}\n";
                 settings.ssh.revoked_keys = "{state_dir}/revoked.krl";
                 settings.ssh.host_certificate = "/etc/ssh/git-collab-host-cert.pub";
               }}; }}"#
        ),
    );
    assert_eq!(result["failedAssertions"], json!([]), "{result:#}");
    let ssh = &result["settings"]["ssh"];
    // The CA file is a store path (public keys: no secret in the store);
    // the KRL stays where the operator rewrites it.
    let ca_path = ssh["trusted_user_ca_keys"].as_str().unwrap();
    assert!(
        ca_path.starts_with('/') && ca_path.ends_with("-user-ca.pub"),
        "{ssh:#}"
    );
    assert_eq!(ssh["revoked_keys"], format!("{state_dir}/revoked.krl"));
    assert_eq!(ssh["host_certificate"], "/etc/ssh/git-collab-host-cert.pub");
    let text = rendered_toml(&result);
    assert!(
        text.contains(&format!("trusted_user_ca_keys = \"{ca_path}\"")),
        "{text}"
    );
    // Nothing else about the unit changes: no credentials, no pre-start.
    assert!(service_config(&result).get("ExecStartPre").is_none());
    assert!(service_config(&result).get("LoadCredential").is_none());

    // The server takes the rendered file.
    let file = state.path().join("server.toml");
    std::fs::write(&file, &text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_git-collab-server"))
        .env_remove("GIT_COLLAB_SSH__TRUSTED_USER_CA_KEYS")
        .arg("--config")
        .arg(&file)
        .args(["config", "show", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["ssh.trusted_user_ca_keys"]["value"], ca_path);
    assert_eq!(
        shown["ssh.revoked_keys"]["value"],
        format!("{state_dir}/revoked.krl")
    );

    // A relative path is refused at evaluation, naming the option.
    let error = eval_error(
        &lib,
        &enabled(r#"settings.ssh.trusted_user_ca_keys = "user-ca.pub";"#),
    );
    assert!(error.contains("trusted_user_ca_keys"), "{error}");
}

#[test]
fn open_firewall_opens_the_listen_ports_except_loopback_ones() {
    let Some(lib) = nixpkgs_lib() else { return };
    let both = eval(
        &lib,
        &enabled(
            r#"openFirewall = true; settings.ssh.listen = "[::]:2022"; settings.http.listen = "0.0.0.0:9090";"#,
        ),
    );
    assert_eq!(both["firewallTCPPorts"], json!([2022, 9090]));
    let defaults = eval(&lib, &enabled("openFirewall = true;"));
    assert_eq!(defaults["firewallTCPPorts"], json!([2222, 8080]));
    let loopback_http = eval(
        &lib,
        &enabled(r#"openFirewall = true; settings.http.listen = "127.0.0.1:8080";"#),
    );
    assert_eq!(loopback_http["firewallTCPPorts"], json!([2222]));
    // Unprivileged ports need no capability.
    assert_eq!(service_config(&both)["PrivateUsers"], true);
    assert!(service_config(&both).get("AmbientCapabilities").is_none());
}

#[test]
fn a_port_below_1024_gets_net_bind_service_and_nothing_more() {
    let Some(lib) = nixpkgs_lib() else { return };
    for extra in [
        r#"settings.ssh.listen = "0.0.0.0:22";"#,
        r#"settings.http.listen = "[::]:80";"#,
    ] {
        let result = eval(&lib, &enabled(&format!("openFirewall = true; {extra}")));
        let unit = service_config(&result);
        assert_eq!(
            unit["AmbientCapabilities"],
            json!(["CAP_NET_BIND_SERVICE"]),
            "{extra}"
        );
        assert_eq!(
            unit["CapabilityBoundingSet"],
            json!(["CAP_NET_BIND_SERVICE"]),
            "{extra}"
        );
        assert_eq!(unit["PrivateUsers"], false, "{extra}");
        assert_eq!(unit["NoNewPrivileges"], true, "{extra}");
    }
    let result = eval(
        &lib,
        &enabled(r#"openFirewall = true; settings.ssh.listen = "0.0.0.0:22";"#),
    );
    assert_eq!(result["firewallTCPPorts"], json!([22, 8080]));
}

#[test]
fn authorized_keys_are_installed_from_the_store_at_every_start() {
    let Some(lib) = nixpkgs_lib() else { return };
    let alice =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFGcO/3H2J4Iz3IIZ+Q83UCxEhu5/ic2LhsNeb/62hMF alice";
    let bob =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBcj4k9wDn1l3jG4Ew5Ws8vgM4Yh2b1H9XoGSQqzM1Ko bob";
    let result = eval(
        &lib,
        &enabled(&format!(r#"authorizedKeys = [ "{alice}" "{bob}" ];"#)),
    );
    let runtime_file = "/run/git-collab/authorized_keys";
    assert_eq!(result["settings"]["ssh"]["authorized_keys"], runtime_file);
    let text = rendered_toml(&result);
    assert!(
        text.contains(&format!("authorized_keys = \"{runtime_file}\"")),
        "{text}"
    );
    // Keys are admitted, not made admins.
    assert_eq!(result["settings"]["initial_admin_keys"], json!([]));

    let unit = service_config(&result);
    assert_eq!(unit["RuntimeDirectory"], "git-collab");
    let pre = unit["ExecStartPre"]
        .as_str()
        .expect("ExecStartPre installs the keys");
    let words: Vec<&str> = pre.split(' ').collect();
    let [install, "-m", "0600", source, target] = words[..] else {
        panic!("ExecStartPre is not `install -m 0600 SOURCE TARGET`: {pre}");
    };
    assert!(install.ends_with("-coreutils/bin/install"), "{pre}");
    assert_eq!(target, runtime_file);
    assert!(source.ends_with("-git-collab-authorized-keys"), "{pre}");
    assert_eq!(
        result["storeFiles"][source]["text"],
        format!("{alice}\n{bob}\n")
    );

    // An explicit path wins over the runtime file.
    let explicit = eval(
        &lib,
        &enabled(&format!(
            r#"authorizedKeys = [ "{alice}" ]; settings.ssh.authorized_keys = "/var/lib/git-collab/keys";"#
        )),
    );
    assert!(service_config(&explicit)["ExecStartPre"]
        .as_str()
        .unwrap()
        .ends_with(" /var/lib/git-collab/keys"));

    // A key with a newline would smuggle a second line into the file.
    let error = eval_error(
        &lib,
        &enabled(r#"authorizedKeys = [ "ssh-ed25519 AAAA a\nssh-ed25519 BBBB b" ];"#),
    );
    assert!(
        error.contains("services.git-collab.authorizedKeys"),
        "{error}"
    );
}

#[test]
fn environment_file_and_extra_args_reach_the_unit_escaped() {
    let Some(lib) = nixpkgs_lib() else { return };
    let result = eval(
        &lib,
        &enabled(
            r#"environmentFile = "/run/secrets/git-collab.env";
               extraArgs = [ "--log-level" "debug" "--site-title" "Forge $HOME 100%" ];"#,
        ),
    );
    let unit = service_config(&result);
    assert_eq!(unit["EnvironmentFile"], "/run/secrets/git-collab.env");
    // systemd would expand $HOME and % inside quotes: they are doubled.
    assert_eq!(
        unit["ExecStart"],
        format!(
            "{} --config /etc/git-collab/server.toml serve --log-level debug --site-title 'Forge $$HOME 100%%'",
            server_exe(&result)
        )
    );
    // The secret never enters the rendered file or the store.
    assert!(!rendered_toml(&result).contains("secrets"));
}

#[test]
fn secrets_in_the_store_and_a_diverging_state_dir_are_refused() {
    let Some(lib) = nixpkgs_lib() else { return };
    let store_env = eval(
        &lib,
        &enabled(r#"environmentFile = "/nix/store/00000000000000000000000000000000-env";"#),
    );
    let messages = store_env["failedAssertions"].to_string();
    assert!(
        messages.contains("environmentFile must be an absolute path outside the Nix store"),
        "{messages}"
    );
    let relative = eval(&lib, &enabled(r#"environmentFile = "secrets.env";"#));
    assert_ne!(relative["failedAssertions"], json!([]));

    let diverging = eval(&lib, &enabled(r#"settings.state_dir = "/srv/elsewhere";"#));
    let messages = diverging["failedAssertions"].to_string();
    assert!(messages.contains("set stateDir instead"), "{messages}");
}

#[test]
fn bad_settings_fail_evaluation_naming_the_option() {
    let Some(lib) = nixpkgs_lib() else { return };
    for (extra, option) in [
        (
            r#"settings.log.format = "yaml";"#,
            "services.git-collab.settings.log.format",
        ),
        (
            r#"settings.log.level = "loud";"#,
            "services.git-collab.settings.log.level",
        ),
        (
            r#"settings.ssh.listen = "0.0.0.0";"#,
            "services.git-collab.settings.ssh.listen",
        ),
        (
            r#"settings.http.listen = "8080";"#,
            "services.git-collab.settings.http.listen",
        ),
        (
            "settings.max_release_size = 0;",
            "services.git-collab.settings.max_release_size",
        ),
        (
            r#"stateDir = "relative/dir";"#,
            "services.git-collab.stateDir",
        ),
    ] {
        let error = eval_error(&lib, &enabled(extra));
        assert!(error.contains(option), "{extra}: {error}");
    }
    let out_of_range = eval(&lib, &enabled(r#"settings.ssh.listen = "0.0.0.0:70000";"#));
    assert!(out_of_range["failedAssertions"]
        .to_string()
        .contains("port between 1 and 65535"));
}

#[test]
fn a_state_dir_outside_var_lib_and_custom_accounts_are_supported() {
    let Some(lib) = nixpkgs_lib() else { return };
    let result = eval(
        &lib,
        &enabled(
            r#"stateDir = "/srv/git-collab"; user = "forge"; group = "forge";
               settings.repos_dir = "/data/repos";
               settings.collab_db = "/data/db/collab.db";"#,
        ),
    );
    let unit = service_config(&result);
    assert!(unit.get("StateDirectory").is_none(), "{unit:#}");
    assert_eq!(unit["WorkingDirectory"], "/srv/git-collab");
    assert_eq!(
        unit["ReadWritePaths"],
        json!(["/srv/git-collab", "/data/repos", "/data/db"])
    );
    assert_eq!(unit["User"], "forge");
    assert_eq!(unit["Group"], "forge");
    assert_eq!(
        result["tmpfiles"],
        json!({"10-git-collab": {"/srv/git-collab": {"d": {"user": "forge", "group": "forge", "mode": "0750"}}}})
    );
    assert_eq!(result["settings"]["state_dir"], "/srv/git-collab");
    assert_eq!(result["settings"]["repos_dir"], "/data/repos");
    // Accounts other than the default are the administrator's to create.
    assert_eq!(result["users"], json!({}));
    assert_eq!(result["groups"], json!({}));

    // Under /var/lib, systemd manages the directory.
    let nested = eval(
        &lib,
        &enabled(
            r#"stateDir = "/var/lib/forge/main"; settings.collab_db = "/var/lib/forge/main/db/collab.db";"#,
        ),
    );
    assert_eq!(service_config(&nested)["StateDirectory"], "forge/main");
    assert!(service_config(&nested).get("ReadWritePaths").is_none());
    assert_eq!(nested["tmpfiles"], json!({}));
}

#[test]
fn undeclared_settings_pass_through_to_the_file() {
    let Some(lib) = nixpkgs_lib() else { return };
    let result = eval(
        &lib,
        &enabled(
            r#"settings.collab_db = "/srv/db/collab.db";
               settings.future_section.enabled = true;"#,
        ),
    );
    let parsed: toml::Value = toml::from_str(&rendered_toml(&result)).unwrap();
    assert_eq!(parsed["collab_db"].as_str(), Some("/srv/db/collab.db"));
    assert_eq!(parsed["future_section"]["enabled"].as_bool(), Some(true));
}

#[test]
fn a_disabled_module_defines_nothing() {
    let Some(lib) = nixpkgs_lib() else { return };
    let result = eval(
        &lib,
        "{ services.git-collab = { enable = false; openFirewall = true; }; }",
    );
    assert_eq!(result["service"], Value::Null);
    assert_eq!(result["etc"], json!({}));
    assert_eq!(result["users"], json!({}));
    assert_eq!(result["firewallTCPPorts"], json!([]));
}

/// The nodes of the NixOS VM test (nixos/tests/git-collab.nix) are valid
/// configurations of this module and say what the VM test relies on.
#[test]
fn vm_test_nodes_evaluate_against_the_module() {
    let Some(lib) = nixpkgs_lib() else { return };
    let vm_test = collab_testkit::workspace_root().join("nixos/tests/git-collab.nix");
    let node = |name: &str| {
        eval(
            &lib,
            &format!(
                "{{ lib, ... }}: {{ imports = [ (import \"{}\" {{ inherit lib; }}).nodes.{name} ]; }}",
                vm_test.display()
            ),
        )
    };

    let server = node("server");
    let unit = service_config(&server);
    // The test script provisions the secrets, then starts the unit itself.
    assert_eq!(server["service"]["wantedBy"], json!([]));
    assert_eq!(unit["EnvironmentFile"], "/run/git-collab-secrets/env");
    assert_eq!(
        server["settings"]["ssh"]["authorized_keys"],
        "/run/git-collab/authorized_keys"
    );
    assert_eq!(server["settings"]["site_title"], "VM forge");
    assert_eq!(server["firewallTCPPorts"], json!([2222, 8080]));
    assert_eq!(unit["PrivateUsers"], true);

    let lowport = node("lowport");
    assert_eq!(lowport["service"]["wantedBy"], json!(["multi-user.target"]));
    assert_eq!(
        service_config(&lowport)["AmbientCapabilities"],
        json!(["CAP_NET_BIND_SERVICE"])
    );
    assert_eq!(lowport["firewallTCPPorts"], json!([22, 80]));
}

#[test]
fn backup_timer_runs_the_backup_as_the_server_user_and_keeps_n() {
    let Some(lib) = nixpkgs_lib() else { return };
    let result = eval(&lib, &enabled(""));
    assert_eq!(result["backupService"], Value::Null, "off by default");
    assert_eq!(result["backupTimer"], Value::Null);

    let result = eval(
        &lib,
        &enabled(
            r#"backup = { enable = true; startAt = "*-*-* 03:15:00"; directory = "/srv/backups/forge"; keep = 3; };"#,
        ),
    );
    assert_eq!(result["failedAssertions"], json!([]), "{result:#}");
    let backup = &result["backupService"];
    assert_eq!(backup["startAt"], "*-*-* 03:15:00", "{backup:#}");
    assert_eq!(backup["after"], json!(["git-collab.service"]));
    let unit = &backup["serviceConfig"];
    assert_eq!(unit["Type"], "oneshot");
    assert_eq!(unit["User"], "git-collab");
    assert_eq!(unit["Group"], "git-collab");
    assert_eq!(unit["ProtectSystem"], "strict");
    assert_eq!(unit["PrivateNetwork"], true);
    assert_eq!(
        unit["ReadWritePaths"],
        json!(["/var/lib/git-collab", "/srv/backups/forge"])
    );
    let script = backup["script"].as_str().expect("a script");
    let exe = server_exe(&result);
    assert!(
        script.contains(&format!(
            "exec {exe} --config /etc/git-collab/server.toml backup"
        )),
        "{script}"
    );
    assert!(
        script.contains(r#"--to /srv/backups/forge/"$(date -u +%Y%m%dT%H%M%SZ)""#),
        "{script}"
    );
    assert!(script.contains("--keep 3 --json"), "{script}");
    assert_eq!(
        result["backupTimer"],
        json!({"timerConfig": {"Persistent": true}})
    );
    assert_eq!(
        result["tmpfiles"],
        json!({"10-git-collab": {"/srv/backups/forge": {"d": {"user": "git-collab", "group": "git-collab", "mode": "0750"}}}})
    );

    // A backup directory inside the state directory is refused.
    let inside = eval(
        &lib,
        &enabled(r#"backup = { enable = true; directory = "/var/lib/git-collab/backups"; };"#),
    );
    let failed = inside["failedAssertions"].as_array().unwrap();
    assert!(
        failed.iter().any(|m| m
            .as_str()
            .unwrap()
            .contains("backup.directory must lie outside")),
        "{inside:#}"
    );
}

/// Runs the module's store script `script` (it builds the PostgreSQL URL
/// from the password credential) as systemd would, with a credentials
/// directory holding `password`; returns the URL file it wrote, after
/// checking that only its owner can read it.
fn run_url_script(result: &Value, script: &str, password: &str) -> String {
    use std::os::unix::fs::PermissionsExt;

    let text = result["storeFiles"][script]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{script} is not a store file: {result:#}"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("collab-db-password"), password).unwrap();
    let out = dir.path().join("collab-db-url");
    let status = Command::new("bash")
        .arg("-c")
        .arg(text)
        .arg("git-collab-collab-db-url")
        .arg(&out)
        .env("CREDENTIALS_DIRECTORY", dir.path())
        .status()
        .expect("run bash");
    assert!(status.success(), "{text}");
    let mode = std::fs::metadata(&out).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{text}");
    std::fs::read_to_string(&out).unwrap()
}

/// `services.git-collab.database` (issue #17): the unit's environment, the
/// local PostgreSQL server `createLocally` sets up, and nothing of either
/// with the default SQLite database.
#[test]
fn sqlite_is_the_default_database_and_adds_nothing_to_the_unit() {
    let Some(lib) = nixpkgs_lib() else { return };
    let result = eval(&lib, &enabled(""));
    service_config(&result);
    let service = &result["service"];
    assert_eq!(service["environment"], json!({}));
    assert_eq!(service["after"], json!(["network.target"]));
    assert_eq!(service["requires"], json!([]));
    assert!(service["serviceConfig"].get("LoadCredential").is_none());
    assert_eq!(result["postgresql"]["enable"], false);
    assert_eq!(result["settings"]["collab_db"], Value::Null);
}

#[test]
fn postgres_created_locally_uses_peer_auth_over_the_socket() {
    let Some(lib) = nixpkgs_lib() else { return };
    let result = eval(
        &lib,
        &enabled(r#"database = { type = "postgres"; createLocally = true; };"#),
    );
    let unit = service_config(&result);
    let service = &result["service"];
    assert_eq!(
        service["environment"],
        json!({"GIT_COLLAB_COLLAB_DB": "postgres:///git-collab?host=/run/postgresql&user=git-collab&port=5432"})
    );
    assert_eq!(
        service["after"],
        json!(["network.target", "postgresql.service", "postgresql.target"])
    );
    assert_eq!(service["requires"], json!(["postgresql.service"]));
    let mut postgresql = result["postgresql"].clone();
    let package = postgresql
        .as_object_mut()
        .and_then(|p| p.remove("package"))
        .expect("services.postgresql.package");
    assert_eq!(
        postgresql,
        json!({
            "enable": true,
            "ensureDatabases": ["git-collab"],
            "ensureUsers": [{"name": "git-collab", "ensureDBOwnership": true}],
        })
    );
    // Backups dump with the local server's own pg_dump.
    let with_backup = eval(
        &lib,
        &enabled(
            r#"database = { type = "postgres"; createLocally = true; };
               backup.enable = true;"#,
        ),
    );
    let path = &with_backup["backupService"]["path"];
    assert!(
        path.as_array().is_some_and(|p| p.contains(&package)),
        "{path} lacks {package}"
    );
    // Peer authentication: no password, no credential, nothing run before start.
    assert!(unit.get("LoadCredential").is_none(), "{unit:#}");
    assert!(unit.get("ExecStartPre").is_none(), "{unit:#}");
    // The unix socket is reachable through the existing hardening.
    assert_eq!(
        unit["RestrictAddressFamilies"],
        json!(["AF_INET", "AF_INET6", "AF_UNIX"])
    );
    // The database is not in the rendered file: the environment names it.
    assert!(!rendered_toml(&result).contains("collab_db"));

    // Another account works when the role and the database follow it.
    let custom = eval(
        &lib,
        &enabled(
            r#"user = "forge"; group = "forge";
               database = { type = "postgres"; createLocally = true; user = "forge"; name = "forge"; port = 5433; };"#,
        ),
    );
    assert_eq!(custom["failedAssertions"], json!([]), "{custom:#}");
    assert_eq!(
        custom["service"]["environment"]["GIT_COLLAB_COLLAB_DB"],
        "postgres:///forge?host=/run/postgresql&user=forge&port=5433"
    );
    assert_eq!(custom["postgresql"]["ensureDatabases"], json!(["forge"]));

    // Without createLocally the server is someone else's: ordering only.
    let external = eval(&lib, &enabled(r#"database.type = "postgres";"#));
    assert_eq!(external["failedAssertions"], json!([]), "{external:#}");
    assert_eq!(external["service"]["requires"], json!([]));
    assert_eq!(external["postgresql"]["enable"], false);
}

#[test]
fn postgres_password_file_reaches_the_server_as_a_runtime_url_file() {
    let Some(lib) = nixpkgs_lib() else { return };
    let result = eval(
        &lib,
        &enabled(
            r#"authorizedKeys = [ "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFGcO/3H2J4Iz3IIZ+Q83UCxEhu5/ic2LhsNeb/62hMF alice" ];
               database = { type = "postgres"; host = "db.example.org"; port = 6432; name = "forge"; user = "forge_app";
                            passwordFile = "/run/secrets/git-collab-db-password"; };
               backup.enable = true;"#,
        ),
    );
    let unit = service_config(&result);
    let url_file = "/run/git-collab/collab-db-url";
    assert_eq!(
        result["service"]["environment"],
        json!({"GIT_COLLAB_COLLAB_DB_FILE": url_file})
    );
    // systemd reads the password (as root) and hands it to the unit only.
    assert_eq!(
        unit["LoadCredential"],
        json!(["collab-db-password:/run/secrets/git-collab-db-password"])
    );
    assert_eq!(unit["RuntimeDirectory"], "git-collab");
    // The authorized keys first, then the URL file.
    let pre = unit["ExecStartPre"].as_array().expect("two ExecStartPre");
    assert_eq!(pre.len(), 2, "{pre:?}");
    assert!(pre[0]
        .as_str()
        .unwrap()
        .ends_with(" /run/git-collab/authorized_keys"));
    let words: Vec<&str> = pre[1].as_str().unwrap().split(' ').collect();
    let [script, target] = words[..] else {
        panic!("ExecStartPre is not `SCRIPT FILE`: {pre:?}");
    };
    assert!(script.ends_with("-git-collab-collab-db-url"), "{script}");
    assert_eq!(target, url_file);
    // The script percent-encodes the password into the URL, mode 0600.
    assert_eq!(
        run_url_script(&result, script, "p@ss:w/rd% é\"'\\x\n"),
        "postgres://forge_app:p%40ss%3Aw%2Frd%25%20%C3%A9%22%27%5Cx@db.example.org:6432/forge"
    );

    // The backup unit reaches the same database with its own copy of the
    // URL, and needs the network for a TCP host.
    let backup = &result["backupService"];
    assert_eq!(
        backup["environment"],
        json!({"GIT_COLLAB_COLLAB_DB_FILE": "/run/git-collab-backup/collab-db-url"})
    );
    let backup_unit = &backup["serviceConfig"];
    assert_eq!(backup_unit["LoadCredential"], unit["LoadCredential"]);
    assert_eq!(backup_unit["RuntimeDirectory"], "git-collab-backup");
    assert_eq!(
        backup_unit["ExecStartPre"],
        json!([format!("{script} /run/git-collab-backup/collab-db-url")])
    );
    assert_eq!(backup_unit["PrivateNetwork"], false);
    assert_eq!(
        backup_unit["RestrictAddressFamilies"],
        json!(["AF_UNIX", "AF_INET", "AF_INET6"])
    );
    // It dumps PostgreSQL itself: pg_dump is on its path, and nothing warns
    // that the database is left out any more.
    let path = backup["path"].as_array().expect("the backup unit's path");
    assert!(
        path.iter()
            .any(|p| p.as_str().is_some_and(|p| p.ends_with("-postgresql"))),
        "{path:?}"
    );
    assert!(
        !result["warnings"].to_string().contains("pg_dump"),
        "{:#}",
        result["warnings"]
    );

    // A socket directory becomes a percent-encoded host.
    let socket = eval(
        &lib,
        &enabled(
            r#"database = { type = "postgres"; passwordFile = "/run/secrets/git-collab-db-password"; };"#,
        ),
    );
    let pre = service_config(&socket)["ExecStartPre"]
        .as_str()
        .expect("one ExecStartPre")
        .to_owned();
    let script = pre.split(' ').next().unwrap();
    assert_eq!(
        run_url_script(&socket, script, "secret"),
        "postgres://git-collab:secret@%2Frun%2Fpostgresql:5432/git-collab"
    );
}

#[test]
fn postgres_misuse_is_refused() {
    let Some(lib) = nixpkgs_lib() else { return };
    for (extra, message) in [
        (
            "database.createLocally = true;",
            "apply to database.type = \\\"postgres\\\" only",
        ),
        (
            r#"database.passwordFile = "/run/secrets/pw";"#,
            "apply to database.type = \\\"postgres\\\" only",
        ),
        (
            r#"database = { type = "postgres"; createLocally = true; host = "127.0.0.1"; };"#,
            "database.host must be a socket directory",
        ),
        (
            r#"database = { type = "postgres"; createLocally = true; passwordFile = "/run/secrets/pw"; };"#,
            "unset database.passwordFile",
        ),
        (
            r#"database = { type = "postgres"; createLocally = true; user = "other"; name = "other"; };"#,
            "must equal services.git-collab.user",
        ),
        (
            r#"database = { type = "postgres"; createLocally = true; name = "forge"; };"#,
            "database.name (forge) must equal database.user (git-collab)",
        ),
        (
            r#"database = { type = "postgres"; passwordFile = "/nix/store/00000000000000000000000000000000-pw"; };"#,
            "passwordFile must be an absolute path outside the Nix store",
        ),
        (
            r#"database.type = "postgres"; settings.collab_db = "/srv/db/collab.db";"#,
            "settings.collab_db must stay unset",
        ),
    ] {
        let result = eval(&lib, &enabled(extra));
        let messages = result["failedAssertions"].to_string();
        assert!(messages.contains(message), "{extra}: {messages}");
    }
    // Values a URL would have to escape are refused by the option types.
    for (extra, option) in [
        (
            r#"database.type = "mysql";"#,
            "services.git-collab.database.type",
        ),
        (
            r#"database = { type = "postgres"; name = "a b"; };"#,
            "services.git-collab.database.name",
        ),
        (
            r#"database = { type = "postgres"; user = "a&b"; };"#,
            "services.git-collab.database.user",
        ),
        (
            r#"database = { type = "postgres"; host = "h?x"; };"#,
            "services.git-collab.database.host",
        ),
        (
            r#"database = { type = "postgres"; port = 70000; };"#,
            "services.git-collab.database.port",
        ),
    ] {
        let error = eval_error(&lib, &enabled(extra));
        assert!(error.contains(option), "{extra}: {error}");
    }
}
