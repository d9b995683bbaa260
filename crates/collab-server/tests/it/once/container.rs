//! Container end-to-end tests: boot the real image (`localhost/git-collab:test`,
//! built by `scripts/ci-build-image.sh`) with testcontainers on Podman or
//! Docker, and drive it from the host with the real OpenSSH `ssh`, real `git`
//! and the `git-collab` CLI, over ports published on 127.0.0.1 only.
//!
//! Engine: `DOCKER_HOST`, else the rootful Podman socket
//! `/run/podman/podman.sock` when it exists (`scripts/ci-podman-setup.sh`
//! starts it). When no engine answers or the image is missing, each test says
//! why on stderr and returns, unless `GIT_COLLAB_REQUIRE_CONTAINER_TESTS=1`
//! (CI), which turns that into a failure. `GIT_COLLAB_E2E_IMAGE` picks another
//! image. The image is not rebuilt here: rebuild it after changing the server.
//!
//! The two-node test also needs PostgreSQL: an admin URL in
//! `GIT_COLLAB_TEST_POSTGRES` (`scripts/ci-postgres.sh` starts a cluster on
//! the host's loopback and prints it). Without one it says so and returns,
//! unless `GIT_COLLAB_REQUIRE_POSTGRES_TESTS=1`.

use collab_store::sql::test_database as pg;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;
use testcontainers::bollard::models::{HostConfig, PortBinding};
use testcontainers::core::logs::LogFrame;
use testcontainers::core::{CmdWaitFor, ExecCommand, IntoContainerPort, Mount};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, ContainerRequest, GenericImage, ImageExt};

const DEFAULT_IMAGE: &str = "localhost/git-collab:test";
const PODMAN_SOCKET: &str = "/run/podman/podman.sock";
/// `scripts/ci-podman-setup.sh` removes volumes with this prefix that a killed run leaked.
const VOLUME_PREFIX: &str = "git-collab-e2e-";
const SSH_PORT: u16 = 2222;
const HTTP_PORT: u16 = 8080;
const STATE_DIR: &str = "/var/lib/git-collab";
/// Where a test mounts the file holding the collab database URL.
const DB_URL_SECRET: &str = "/run/secrets/collab_db";
/// The fixed uid of the `git-collab` user in docker/Dockerfile.
const APP_UID: &str = "10001";
/// Upper bound on waiting for a booting server, so a broken image fails
/// instead of hanging; not a performance assertion.
const READY_DEADLINE: Duration = Duration::from_secs(180);

// ------------------------------------------------------------------ engine

/// A reachable container engine that has the image under test.
struct Engine {
    /// `unix:///…` or `tcp://host:port`.
    docker_host: String,
    image_name: String,
    image_tag: String,
    /// `GET /images/{image}/json` as the engine returned it.
    image_inspect: Value,
    /// The image's HEALTHCHECK command (`Null` when it has none).
    healthcheck: Value,
}

impl Engine {
    fn image(&self) -> GenericImage {
        GenericImage::new(self.image_name.as_str(), self.image_tag.as_str())
    }

    fn image_ref(&self) -> String {
        format!("{}:{}", self.image_name, self.image_tag)
    }
}

/// The engine and image for this test run, or a skip (or, in CI, a failure)
/// that says what is missing.
fn engine() -> Option<&'static Engine> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    match ENGINE.get_or_init(discover_engine) {
        Ok(engine) => Some(engine),
        Err(why) if std::env::var("GIT_COLLAB_REQUIRE_CONTAINER_TESTS").as_deref() == Ok("1") => {
            panic!("container tests are required (GIT_COLLAB_REQUIRE_CONTAINER_TESTS=1) but {why}")
        }
        Err(why) => {
            // Straight to stderr, past libtest's capture, so a plain
            // `cargo test` shows that these tests did not run.
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "skipping container e2e tests: {why} \
                     (set GIT_COLLAB_REQUIRE_CONTAINER_TESTS=1 to make this a failure)"
                );
            });
            None
        }
    }
}

fn discover_engine() -> Result<Engine, String> {
    let docker_host = match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.is_empty() => host,
        _ if Path::new(PODMAN_SOCKET).exists() => {
            let host = format!("unix://{PODMAN_SOCKET}");
            // testcontainers reads DOCKER_HOST; set once, before any container starts.
            std::env::set_var("DOCKER_HOST", &host);
            host
        }
        _ => {
            return Err(format!(
                "no container engine: DOCKER_HOST is unset and {PODMAN_SOCKET} does not exist \
                 (run scripts/ci-podman-setup.sh as root)"
            ))
        }
    };
    let (status, _) = engine_request(&docker_host, "GET", "/_ping")
        .map_err(|e| format!("the container engine at {docker_host} does not answer: {e}"))?;
    if status != 200 {
        return Err(format!(
            "the container engine at {docker_host} answered /_ping with {status}"
        ));
    }
    let image = std::env::var("GIT_COLLAB_E2E_IMAGE").unwrap_or_else(|_| DEFAULT_IMAGE.into());
    let (image_name, image_tag) = match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name.to_string(), tag.to_string()),
        _ => (image.clone(), "latest".to_string()),
    };
    let (status, body) = engine_request(&docker_host, "GET", &format!("/images/{image}/json"))
        .map_err(|e| format!("inspecting image {image}: {e}"))?;
    if status != 200 {
        return Err(format!(
            "image {image} is not in the engine at {docker_host} (HTTP {status}); \
             build it with scripts/ci-build-image.sh"
        ));
    }
    let image_inspect: Value = serde_json::from_str(&body)
        .map_err(|e| format!("image inspect of {image} is not JSON: {e}"))?;
    let mut healthcheck = image_inspect["Config"]["Healthcheck"]["Test"].clone();
    if healthcheck.is_null() {
        // Podman's Docker-compatible inspect leaves the health check out;
        // its own API has it.
        if let Ok((200, body)) = engine_request(
            &docker_host,
            "GET",
            &format!("/v4.0.0/libpod/images/{image}/json"),
        ) {
            let libpod: Value = serde_json::from_str(&body).unwrap_or_default();
            healthcheck = libpod["Healthcheck"]["Test"].clone();
        }
    }
    eprintln!(
        "container e2e: engine {docker_host}, image {image} (created {}, revision {})",
        image_inspect["Created"].as_str().unwrap_or("?"),
        image_inspect["Config"]["Labels"]["org.opencontainers.image.revision"]
            .as_str()
            .unwrap_or("?"),
    );
    Ok(Engine {
        docker_host,
        image_name,
        image_tag,
        image_inspect,
        healthcheck,
    })
}

/// One HTTP/1.0 request to the engine API (unix socket or tcp), for what
/// testcontainers does not offer: ping, image inspect, volume removal.
fn engine_request(docker_host: &str, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let request = format!("{method} {path} HTTP/1.0\r\nHost: engine\r\n\r\n");
    let timeout = Some(Duration::from_secs(30));
    let mut response = Vec::new();
    if let Some(socket) = docker_host.strip_prefix("unix://") {
        let mut stream = std::os::unix::net::UnixStream::connect(socket)?;
        stream.set_read_timeout(timeout)?;
        stream.write_all(request.as_bytes())?;
        stream.read_to_end(&mut response)?;
    } else {
        let addr = docker_host.strip_prefix("tcp://").unwrap_or(docker_host);
        let mut stream = std::net::TcpStream::connect(addr)?;
        stream.set_read_timeout(timeout)?;
        stream.write_all(request.as_bytes())?;
        stream.read_to_end(&mut response)?;
    }
    parse_http_response(&response)
}

/// Status code and body of an HTTP/1.x response that ended with the connection.
fn parse_http_response(response: &[u8]) -> std::io::Result<(u16, String)> {
    let text = String::from_utf8_lossy(response);
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("bad HTTP response: {text:.200}"),
        )
    };
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    Ok((status, body.to_string()))
}

/// A named volume unique to one test, removed when the test ends (after its
/// containers: declare it before them).
struct Volume {
    docker_host: String,
    name: String,
}

impl Volume {
    fn new(engine: &Engine, test: &str) -> Volume {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .subsec_nanos();
        Volume {
            docker_host: engine.docker_host.clone(),
            name: format!("{VOLUME_PREFIX}{test}-{}-{nanos}", std::process::id()),
        }
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let path = format!("/volumes/{}?force=true", self.name);
        match engine_request(&self.docker_host, "DELETE", &path) {
            Ok((204 | 404, _)) => {}
            Ok((status, body)) => eprintln!("removing volume {}: HTTP {status} {body}", self.name),
            Err(e) => eprintln!("removing volume {}: {e}", self.name),
        }
    }
}

// ---------------------------------------------------------- booting the image

/// How to boot the server image.
struct Boot<'a> {
    volume: &'a Volume,
    /// GIT_COLLAB_INITIAL_ADMIN_KEYS: OpenSSH public key lines.
    admin_keys: &'a str,
    env: Vec<(&'a str, &'a str)>,
    /// Mounted read-only at /etc/git-collab/server.toml.
    config_file: Option<&'a Path>,
    /// Mounted read-only at [`DB_URL_SECRET`] and named by
    /// `GIT_COLLAB_COLLAB_DB_FILE`: a file holding the collab database URL.
    db_url_file: Option<&'a Path>,
    ports: Ports,
}

/// Where a booted server listens.
#[derive(Clone, Copy)]
enum Ports {
    /// On the engine's bridge network, its ports published on ephemeral
    /// 127.0.0.1 ports of the host.
    Published,
    /// In the host's network namespace, on these 127.0.0.1 ports
    /// (`GIT_COLLAB_SSH__LISTEN`, `GIT_COLLAB_HTTP__LISTEN`).
    HostNetwork { ssh: u16, http: u16 },
}

/// A running server container and its ports on 127.0.0.1.
struct Server {
    container: ContainerAsync<GenericImage>,
    ssh_port: u16,
    http_port: u16,
    log: ContainerLog,
}

/// Everything the container printed, collected from its creation on, to
/// explain a failure (even one where the container is already gone).
#[derive(Clone, Default)]
struct ContainerLog(Arc<Mutex<Vec<u8>>>);

impl ContainerLog {
    fn consumer(&self) -> impl Fn(&LogFrame) + Send + Sync + 'static {
        let buffer = self.0.clone();
        move |frame: &LogFrame| buffer.lock().unwrap().extend_from_slice(frame.bytes())
    }

    async fn text(&self) -> String {
        // The consumer runs on its own task; give it a moment to catch up.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        format!("--- container output ---\n{text}--- end of container output ---")
    }
}

/// Publishes the given container ports on 127.0.0.1 only, each on an
/// ephemeral host port chosen by the engine. (testcontainers' own mapping
/// binds every interface, and Podman 4.3 then reports an empty HostIp that
/// `get_host_port_ipv4` cannot read.)
fn publish_on_loopback<I: testcontainers::Image>(
    request: ContainerRequest<I>,
    ports: &'static [u16],
) -> ContainerRequest<I> {
    request.with_host_config_modifier(move |host_config: &mut HostConfig| {
        let bindings = ports
            .iter()
            .map(|port| {
                let binding = PortBinding {
                    host_ip: Some("127.0.0.1".into()),
                    host_port: Some(String::new()),
                };
                (format!("{port}/tcp"), Some(vec![binding]))
            })
            .collect();
        host_config.port_bindings = Some(bindings);
        host_config.publish_all_ports = Some(false);
    })
}

/// The hardened way to run the image: read-only root filesystem, state on the
/// volume, a tmpfs /tmp.
fn hardened(
    request: ContainerRequest<GenericImage>,
    volume: &Volume,
) -> ContainerRequest<GenericImage> {
    request
        .with_mount(Mount::volume_mount(volume.name.as_str(), STATE_DIR))
        .with_mount(Mount::tmpfs_mount("/tmp"))
        .with_readonly_rootfs(true)
        .with_startup_timeout(READY_DEADLINE)
}

/// Boots the server (the image's own entrypoint and `serve`) and waits until
/// GET /readyz answers 200.
async fn boot(engine: &Engine, boot: Boot<'_>) -> Server {
    let image = match boot.ports {
        Ports::Published => engine
            .image()
            .with_exposed_port(SSH_PORT.tcp())
            .with_exposed_port(HTTP_PORT.tcp()),
        Ports::HostNetwork { .. } => engine.image(),
    };
    let mut request = hardened(
        image.with_env_var("GIT_COLLAB_INITIAL_ADMIN_KEYS", boot.admin_keys),
        boot.volume,
    );
    for (key, value) in boot.env {
        request = request.with_env_var(key, value);
    }
    if let Some(file) = boot.config_file {
        request = request.with_mount(
            Mount::bind_mount(
                file.to_str().expect("utf-8 temp path"),
                "/etc/git-collab/server.toml",
            )
            .with_access_mode(testcontainers::core::AccessMode::ReadOnly),
        );
    }
    if let Some(file) = boot.db_url_file {
        request = request
            .with_mount(
                Mount::bind_mount(file.to_str().expect("utf-8 temp path"), DB_URL_SECRET)
                    .with_access_mode(testcontainers::core::AccessMode::ReadOnly),
            )
            .with_env_var("GIT_COLLAB_COLLAB_DB_FILE", DB_URL_SECRET);
    }
    let log = ContainerLog::default();
    let request = match boot.ports {
        Ports::Published => publish_on_loopback(request, &[SSH_PORT, HTTP_PORT]),
        // Set on the host config: `with_network("host")` would have
        // testcontainers create a network named "host", which Podman refuses.
        Ports::HostNetwork { ssh, http } => request
            .with_host_config_modifier(|host_config: &mut HostConfig| {
                host_config.network_mode = Some("host".into());
            })
            .with_env_var("GIT_COLLAB_SSH__LISTEN", format!("127.0.0.1:{ssh}"))
            .with_env_var("GIT_COLLAB_HTTP__LISTEN", format!("127.0.0.1:{http}")),
    };
    let started = request.with_log_consumer(log.consumer()).start().await;
    let container = match started {
        Ok(container) => container,
        Err(e) => panic!("starting {}: {e}\n{}", engine.image_ref(), log.text().await),
    };
    let ports = async {
        match boot.ports {
            Ports::Published => {
                let ssh = container.get_host_port_ipv4(SSH_PORT).await?;
                let http = container.get_host_port_ipv4(HTTP_PORT).await?;
                Ok::<_, testcontainers::TestcontainersError>((ssh, http))
            }
            Ports::HostNetwork { ssh, http } => Ok((ssh, http)),
        }
    };
    let (ssh_port, http_port) = match ports.await {
        Ok(ports) => ports,
        Err(e) => panic!(
            "published ports of {}: {e}\n{}",
            engine.image_ref(),
            log.text().await
        ),
    };
    let server = Server {
        container,
        ssh_port,
        http_port,
        log,
    };
    server.wait_ready().await;
    server
}

impl Server {
    async fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            if let Ok((200, _)) = http_get(self.http_port, "/readyz") {
                return;
            }
            let running = self.container.is_running().await.unwrap_or(false);
            if !running || started.elapsed() > READY_DEADLINE {
                panic!(
                    "server never answered /readyz (running: {running}, waited {:?})\n{}",
                    started.elapsed(),
                    self.logs().await
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn logs(&self) -> String {
        self.log.text().await
    }

    /// Stops the container with SIGTERM (generous grace period) and returns
    /// its exit code.
    async fn stop(self) -> i64 {
        self.container
            .stop_with_timeout(Some(60))
            .await
            .expect("stop container");
        // Podman briefly reports the state "stopped", which the Docker API
        // client cannot parse; ask again until it settles on "exited".
        let mut attempts = 0;
        let code = loop {
            match self.container.exit_code().await {
                Ok(Some(code)) => break code,
                Ok(None) | Err(_) if attempts < 50 => attempts += 1,
                other => panic!("exit code of a stopped container: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if code != 0 {
            eprintln!("exit code {code}\n{}", self.logs().await);
        }
        self.container.rm().await.expect("remove container");
        code
    }
}

/// Output of a command run in a container with `exec`.
struct Exec {
    code: i64,
    stdout: String,
    stderr: String,
}

async fn exec(container: &ContainerAsync<GenericImage>, argv: &[&str]) -> Exec {
    let command =
        ExecCommand::new(argv.iter().copied()).with_cmd_ready_condition(CmdWaitFor::exit());
    let mut result = container
        .exec(command)
        .await
        .unwrap_or_else(|e| panic!("exec {argv:?}: {e}"));
    let stdout =
        String::from_utf8_lossy(&result.stdout_to_vec().await.expect("exec stdout")).into_owned();
    let stderr =
        String::from_utf8_lossy(&result.stderr_to_vec().await.expect("exec stderr")).into_owned();
    let code = result
        .exit_code()
        .await
        .expect("exec inspect")
        .expect("exec has exited");
    Exec {
        code,
        stdout,
        stderr,
    }
}

// ------------------------------------------------------------ host-side clients

/// GET over plain HTTP/1.0 on 127.0.0.1.
fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    parse_http_response(&response)
}

/// The text of an HTML page with the character references a template engine
/// may use for user content turned back into characters.
/// The issues page shows the claim's holder by display name (the admin
/// key's comment), with its fingerprint in a `title` attribute.
fn assert_claimed_by_admin(page: &str) {
    let claim = page
        .split("<span class=\"claim\">claimed by ")
        .nth(1)
        .and_then(|rest| rest.split("</span></span>").next())
        .unwrap_or_else(|| panic!("claim not on the page:\n{page}"));
    assert!(
        claim.starts_with("<span class=\"who\" title=\"SHA256:") && claim.ends_with(">admin"),
        "the claim's holder is not shown as `admin` with its fingerprint in a title: {claim}"
    );
}

fn html_text(html: &str) -> String {
    html.replace("&#x2f;", "/")
        .replace("&#x2F;", "/")
        .replace("&#47;", "/")
        .replace("&#x2b;", "+")
        .replace("&#43;", "+")
        .replace("&#x3d;", "=")
        .replace("&#61;", "=")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// One user on the host: an SSH key made by `ssh-keygen`, a known_hosts file,
/// an isolated git and `git-collab` configuration.
struct User {
    home: TempDir,
    key: PathBuf,
    public_key: String,
    fingerprint: String,
}

impl User {
    fn new(name: &str) -> User {
        let home = tempfile::Builder::new()
            .prefix("gc-e2e-")
            .tempdir()
            .expect("temp home");
        let key = home.path().join("id_ed25519");
        run_ok(
            Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
                .arg(&key),
        );
        let public_key = std::fs::read_to_string(key.with_extension("pub"))
            .expect("public key")
            .trim()
            .to_string();
        let listing = run_ok(
            Command::new("ssh-keygen")
                .arg("-lf")
                .arg(key.with_extension("pub")),
        );
        let fingerprint = listing
            .split_whitespace()
            .nth(1)
            .expect("ssh-keygen -lf prints a fingerprint")
            .to_string();
        std::fs::write(
            home.path().join("gitconfig"),
            format!("[user]\n\tname = {name}\n\temail = {name}@example.invalid\n[init]\n\tdefaultBranch = main\n"),
        )
        .expect("gitconfig");
        User {
            home,
            key,
            public_key,
            fingerprint,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.home.path().join(name)
    }

    /// The ssh command line (without host): this key only, no user or
    /// system ssh config, and one host key alias for every port, so a
    /// server whose host key changed is refused (accept-new keeps the first).
    fn ssh_command(&self) -> String {
        format!(
            "ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -i {} \
             -o UserKnownHostsFile={} -o StrictHostKeyChecking=accept-new \
             -o HostKeyAlias=git-collab-e2e -o LogLevel=ERROR",
            self.key.display(),
            self.path("known_hosts").display()
        )
    }

    /// Environment for git and git-collab: isolated config, our ssh.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        command
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.path("xdg"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", self.path("gitconfig"))
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_SSH_COMMAND", self.ssh_command())
            .env("GIT_COLLAB_SSH_COMMAND", self.ssh_command());
        command
    }

    fn git(&self, dir: &Path, args: &[&str]) -> String {
        run_ok(self.command("git").current_dir(dir).args(args))
    }

    fn collab(&self, dir: &Path, args: &[&str]) -> String {
        run_ok(
            self.command(collab_testkit::bin("git-collab"))
                .current_dir(dir)
                .args(args),
        )
    }

    /// Runs an exec verb on the server over the real OpenSSH client.
    fn ssh(&self, server: &Server, remote_command: &str) -> Output {
        self.ssh_to_port(server.ssh_port, remote_command)
    }

    /// Runs an exec verb over the real OpenSSH client on 127.0.0.1:`port`.
    fn ssh_to_port(&self, port: u16, remote_command: &str) -> Output {
        let mut command = Command::new("sh");
        command.arg("-c").arg(format!(
            "{} -p {port} git@127.0.0.1 \"$1\"",
            self.ssh_command(),
        ));
        command.arg("ssh").arg(remote_command);
        command.output().expect("run ssh")
    }

    /// An exec verb that must succeed and print one JSON object.
    fn ssh_json(&self, server: &Server, remote_command: &str) -> Value {
        let output = self.ssh(server, remote_command);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "ssh {remote_command:?} failed ({}): {}{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("ssh {remote_command:?} printed non-JSON ({e}): {stdout}"))
    }

    fn repo_url(&self, server: &Server, repo: &str) -> String {
        format!("ssh://git@127.0.0.1:{}/{repo}", server.ssh_port)
    }
}

/// Runs a command that must succeed; returns its stdout.
fn run_ok(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The full id of the issue with this title in `git-collab issue list
/// --json` (an array of issue summaries).
fn issue_id_by_title(list_json: &str, title: &str) -> String {
    let list: Value = serde_json::from_str(list_json.trim())
        .unwrap_or_else(|e| panic!("issue list --json is not JSON ({e}): {list_json}"));
    let issue = list
        .as_array()
        .unwrap_or_else(|| panic!("issue list --json is not an array: {list_json}"))
        .iter()
        .find(|issue| issue["title"] == title)
        .unwrap_or_else(|| panic!("no issue titled {title:?} in {list_json}"));
    issue["id"]
        .as_str()
        .expect("issue id is a string")
        .to_string()
}

/// The lease on `issue` in a `collab-lease list` reply.
fn lease_on<'a>(list: &'a Value, issue: &str) -> &'a Value {
    list["leases"]
        .as_array()
        .unwrap_or_else(|| panic!("collab-lease list has no leases array: {list}"))
        .iter()
        .find(|lease| lease["issue"] == issue)
        .unwrap_or_else(|| panic!("no lease on {issue} in {list}"))
}

// ------------------------------------------------------------------- tests

/// The image as built: metadata, non-root user, read-only root with a
/// writable volume and /tmp, git present. Needs no server behaviour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_runs_non_root_with_read_only_root_and_writable_volume() {
    let Some(engine) = engine() else { return };

    let config = &engine.image_inspect["Config"];
    assert_eq!(
        config["User"],
        format!("{APP_UID}:{APP_UID}"),
        "image config: {config}"
    );
    let entrypoint = config["Entrypoint"].as_array().expect("entrypoint");
    assert_eq!(
        entrypoint.last().and_then(Value::as_str),
        Some("git-collab-server")
    );
    assert_eq!(config["Cmd"], json!(["serve"]));
    assert!(
        config["Volumes"].get(STATE_DIR).is_some(),
        "no VOLUME {STATE_DIR}: {config}"
    );
    for port in ["2222/tcp", "8080/tcp"] {
        assert!(
            config["ExposedPorts"].get(port).is_some(),
            "{port} not exposed: {config}"
        );
    }
    // Podman drops HEALTHCHECK unless the image is built in docker format.
    assert_eq!(
        engine.healthcheck,
        json!(["CMD", "git-collab-server", "healthcheck"]),
        "image config: {config}"
    );

    let volume = Volume::new(engine, "image");
    // Same image and hardening as the server tests, but idle, to probe it.
    let container = hardened(engine.image().with_entrypoint("sleep").into(), &volume)
        .with_cmd(["infinity"])
        .start()
        .await
        .expect("start probe container");

    let id = exec(&container, &["id", "-u"]).await;
    assert_eq!(
        id.stdout.trim(),
        APP_UID,
        "runs as the image user: {}",
        id.stderr
    );
    let git = exec(&container, &["git", "--version"]).await;
    assert!(
        git.stdout.starts_with("git version"),
        "git in the image: {}{}",
        git.stdout,
        git.stderr
    );
    let server = exec(&container, &["git-collab-server", "--version"]).await;
    assert_eq!(
        server.code, 0,
        "the server binary runs in the image: {}",
        server.stderr
    );

    let probe = format!("{STATE_DIR}/probe");
    let on_volume = exec(
        &container,
        &["sh", "-c", &format!("echo x > {probe} && rm {probe}")],
    )
    .await;
    assert_eq!(
        on_volume.code, 0,
        "a fresh volume is writable by the user: {}",
        on_volume.stderr
    );
    let on_tmp = exec(&container, &["sh", "-c", "echo x > /tmp/probe"]).await;
    assert_eq!(on_tmp.code, 0, "/tmp is writable: {}", on_tmp.stderr);
    let on_root = exec(&container, &["sh", "-c", "echo x > /usr/local/bin/probe"]).await;
    assert_ne!(on_root.code, 0, "the root filesystem must be read-only");
    assert!(
        on_root.stderr.contains("Read-only file system"),
        "{}",
        on_root.stderr
    );

    container.rm().await.expect("remove probe container");
}

/// The whole journey over the real clients, then a restart on the same
/// volume: the repository, the issue, the live lease and its fencing token
/// and the SSH host key are all still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_clone_issue_and_lease_survive_a_restart() {
    let Some(engine) = engine() else { return };
    let volume = Volume::new(engine, "journey");
    let admin = User::new("admin");
    let work = admin.home.path();

    let server = boot(
        engine,
        Boot {
            volume: &volume,
            admin_keys: &admin.public_key,
            env: vec![],
            config_file: None,
            db_url_file: None,
            ports: Ports::Published,
        },
    )
    .await;

    let whoami = admin.ssh_json(&server, "collab-whoami");
    assert_eq!(
        whoami["fingerprint"],
        admin.fingerprint.as_str(),
        "whoami: {whoami}"
    );
    let principal = whoami["principal"].as_str().expect("principal").to_string();

    let created = admin.ssh(&server, "collab-repo create 'demo'");
    assert!(
        created.status.success(),
        "collab-repo create: {}{}",
        String::from_utf8_lossy(&created.stdout),
        String::from_utf8_lossy(&created.stderr)
    );
    let url = admin.repo_url(&server, "demo.git");

    // Push a commit.
    let source = work.join("source");
    std::fs::create_dir(&source).unwrap();
    admin.git(&source, &["init", "-q"]);
    std::fs::write(
        source.join("README.md"),
        "# demo\n\nPushed into a container.\n",
    )
    .unwrap();
    admin.git(&source, &["add", "README.md"]);
    admin.git(&source, &["commit", "-q", "-m", "First commit"]);
    let pushed_head = admin
        .git(&source, &["rev-parse", "HEAD"])
        .trim()
        .to_string();
    admin.git(&source, &["push", "-q", &url, "main"]);

    // Clone it back.
    admin.git(work, &["clone", "-q", &url, "clone"]);
    let clone = work.join("clone");
    assert_eq!(
        admin.git(&clone, &["rev-parse", "HEAD"]).trim(),
        pushed_head
    );
    assert_eq!(
        std::fs::read_to_string(clone.join("README.md")).unwrap(),
        "# demo\n\nPushed into a container.\n"
    );

    // Open an issue with the CLI (on the server, in one round trip).
    admin.collab(&clone, &["key", "generate"]);
    let title = "Container issue: lease me";
    let opened: Value =
        serde_json::from_str(&admin.collab(&clone, &["issue", "open", "-t", title, "--json"]))
            .expect("issue open --json prints JSON");
    let issue = opened["issue"]
        .as_str()
        .expect("issue open --json: issue")
        .to_string();
    assert!(
        issue.len() == 40 && issue.bytes().all(|b| b.is_ascii_hexdigit()),
        "an issue id is 40 hex: {issue}"
    );
    assert_eq!(
        issue_id_by_title(&admin.collab(&clone, &["issue", "list", "--json"]), title),
        issue
    );
    // The server holds it: one round trip, no sync.
    let shown = admin.ssh_json(&server, &format!("collab-issue show 'demo.git' '{issue}'"));
    assert_eq!(shown["title"], title, "{shown}");

    // Claim it.
    let acquired = admin.ssh_json(
        &server,
        &format!("collab-lease acquire 'demo.git' '{issue}' --ttl 300"),
    );
    assert_eq!(acquired["status"], "acquired", "{acquired}");
    assert_eq!(acquired["issue"], issue.as_str(), "{acquired}");
    assert_eq!(acquired["holder"], principal.as_str(), "{acquired}");
    assert_eq!(acquired["token"], 1, "{acquired}");
    let expires_at = acquired["expires_at"].clone();
    assert!(expires_at.is_string(), "{acquired}");

    let listed = admin.ssh_json(&server, "collab-lease list 'demo.git'");
    let lease = lease_on(&listed, &issue);
    assert_eq!(lease["holder"], principal.as_str(), "{listed}");
    assert_eq!(lease["token"], 1, "{listed}");
    assert_eq!(lease["expires_at"], expires_at, "{listed}");

    // A new repository is private: anonymous HTTP sees nothing. The operator
    // publishes it with a policy file in the repository on the volume.
    let (status, page) = http_get(server.http_port, "/demo/-/issues").expect("GET issues page");
    assert_eq!(
        status, 404,
        "a private repository must look missing:\n{page}"
    );
    let published = exec(
        &server.container,
        &[
            "sh",
            "-c",
            "printf 'public = true\\n' > /var/lib/git-collab/repos/demo.git/collab-policy.toml",
        ],
    )
    .await;
    assert_eq!(
        published.code, 0,
        "{}{}",
        published.stdout, published.stderr
    );
    let (status, page) = http_get(server.http_port, "/demo/-/issues").expect("GET issues page");
    assert_eq!(status, 200, "{page}");
    let page = html_text(&page);
    assert!(page.contains(title), "issue title not on the page:\n{page}");
    // The holder by display name: the admin key's comment.
    assert_claimed_by_admin(&page);

    // SIGTERM: the server shuts down cleanly (exit 0, not killed).
    assert_eq!(server.stop().await, 0, "exit code after SIGTERM");

    // A new container on the same volume.
    let server = boot(
        engine,
        Boot {
            volume: &volume,
            admin_keys: &admin.public_key,
            env: vec![],
            config_file: None,
            db_url_file: None,
            ports: Ports::Published,
        },
    )
    .await;

    // Same host key: ssh would refuse a changed key for the alias it knows.
    let whoami_again = admin.ssh_json(&server, "collab-whoami");
    assert_eq!(whoami_again["principal"], principal.as_str());
    let known_hosts = std::fs::read_to_string(admin.path("known_hosts")).unwrap();
    assert_eq!(
        known_hosts.lines().count(),
        1,
        "one host key across restarts:\n{known_hosts}"
    );

    // The repository.
    let url = admin.repo_url(&server, "demo.git");
    admin.git(work, &["clone", "-q", &url, "after-restart"]);
    let after = work.join("after-restart");
    assert_eq!(
        admin.git(&after, &["rev-parse", "HEAD"]).trim(),
        pushed_head
    );

    // The issue, as the server lists it to a fresh clone.
    assert_eq!(
        issue_id_by_title(&admin.collab(&after, &["issue", "list", "--json"]), title),
        issue
    );

    // The live lease, with its token and expiry unchanged.
    let listed = admin.ssh_json(&server, "collab-lease list 'demo.git'");
    let lease = lease_on(&listed, &issue);
    assert_eq!(lease["holder"], principal.as_str(), "{listed}");
    assert_eq!(lease["token"], 1, "{listed}");
    assert_eq!(lease["expires_at"], expires_at, "{listed}");
    let (status, page) = http_get(server.http_port, "/demo/-/issues").expect("GET issues page");
    assert_eq!(status, 200, "{page}");
    assert_claimed_by_admin(&html_text(&page));

    assert_eq!(server.stop().await, 0, "exit code after SIGTERM");
}

/// Configuration layers in the container: a mounted TOML file sets two keys,
/// the environment overrides one of them; env beats file, file beats the
/// built-in default. Also: the health check command and the non-root user
/// of the running server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounted_config_file_and_env_overrides_take_effect() {
    let Some(engine) = engine() else { return };
    let volume = Volume::new(engine, "config");
    let admin = User::new("admin");
    let config_file = admin.path("server.toml");
    std::fs::write(
        &config_file,
        "site_title = \"Title from the file\"\nmax_release_size = 4242424\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &config_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();

    let server = boot(
        engine,
        Boot {
            volume: &volume,
            admin_keys: &admin.public_key,
            env: vec![("GIT_COLLAB_SITE_TITLE", "Title from the env")],
            config_file: Some(&config_file),
            db_url_file: None,
            ports: Ports::Published,
        },
    )
    .await;

    let shown = exec(
        &server.container,
        &["git-collab-server", "config", "show", "--json"],
    )
    .await;
    assert_eq!(shown.code, 0, "config show: {}", shown.stderr);
    let shown: Value = serde_json::from_str(shown.stdout.trim())
        .unwrap_or_else(|e| panic!("config show --json is not JSON ({e}): {}", shown.stdout));
    // env beats file; file beats the default; untouched keys stay default.
    let file_layer = "file /etc/git-collab/server.toml";
    let (title, source) = config_entry(&shown, "site_title");
    assert_eq!(
        (title, source),
        (&json!("Title from the env"), "env GIT_COLLAB_SITE_TITLE")
    );
    let (size, source) = config_entry(&shown, "max_release_size");
    assert_eq!((size, source), (&json!(4242424), file_layer));
    let (state_dir, source) = config_entry(&shown, "state_dir");
    assert_eq!((state_dir, source), (&json!(STATE_DIR), "default"));

    let (status, page) = http_get(server.http_port, "/").expect("GET /");
    assert_eq!(status, 200, "{page}");
    let page = html_text(&page);
    assert!(
        page.contains("Title from the env"),
        "env title not on the page:\n{page}"
    );
    assert!(
        !page.contains("Title from the file"),
        "file title beat the env:\n{page}"
    );

    let health = exec(&server.container, &["git-collab-server", "healthcheck"]).await;
    assert_eq!(
        health.code, 0,
        "healthcheck of a ready server: {}{}",
        health.stdout, health.stderr
    );
    let uid = exec(
        &server.container,
        &["sh", "-c", "id -u; grep '^Uid:' /proc/1/status"],
    )
    .await;
    let mut lines = uid.stdout.lines();
    assert_eq!(lines.next(), Some(APP_UID), "{}", uid.stdout);
    let pid1_uids: Vec<&str> = lines
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .collect();
    assert_eq!(
        pid1_uids, [APP_UID; 4],
        "PID 1 runs as {APP_UID}: {}",
        uid.stdout
    );

    assert_eq!(server.stop().await, 0, "exit code after SIGTERM");
}

/// One key of `config show --json`: `{"<key>": {"value": …, "source": …}}`.
fn config_entry<'a>(shown: &'a Value, key: &str) -> (&'a Value, &'a str) {
    let entry = &shown[key];
    let source = entry["source"]
        .as_str()
        .unwrap_or_else(|| panic!("config show --json has no source for {key}: {shown}"));
    (&entry["value"], source)
}

/// Two free TCP ports on 127.0.0.1 for each of `n` servers: (ssh, http).
/// They are free when chosen; another process could still take one before
/// the server binds it, which would fail the boot loudly, not the race.
fn free_loopback_ports(n: usize) -> Vec<(u16, u16)> {
    let listeners: Vec<std::net::TcpListener> = (0..2 * n)
        .map(|_| std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind a free port"))
        .collect();
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().expect("local address").port())
        .collect();
    ports.chunks(2).map(|pair| (pair[0], pair[1])).collect()
}

/// Issue #17: two containers of the image on ONE named volume (the state
/// directory: repositories, host key, signing key, authorized_keys) and ONE
/// PostgreSQL database. 16 `ssh` racers, each with its own key, half through
/// container A and half through container B, race for the lease on one
/// issue: exactly one wins (exit 0) and the 15 others are told who holds it
/// (exit 4); both containers then report the same holder and token, and
/// present the same host key.
///
/// Networking: the test cluster listens on the host's 127.0.0.1 only, which a
/// container on podman's bridge network cannot reach (`host.containers.internal`
/// is the host's address on the bridge, where nothing listens). So both
/// containers run in the host's network namespace (`--network host`, which
/// rootful podman allows), where 127.0.0.1 is the host's loopback: the
/// database URL is the one the test itself uses, and each server listens on
/// its own free 127.0.0.1 ports through `GIT_COLLAB_SSH__LISTEN` /
/// `GIT_COLLAB_HTTP__LISTEN` (there is nothing to publish). Everything else is
/// as users run the image: read-only root, the state on a named volume, the
/// database URL in a mounted secret file named by `GIT_COLLAB_COLLAB_DB_FILE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_containers_on_one_volume_and_one_postgres_race_to_one_winner() {
    const RACERS: usize = 16;
    let Some(engine) = engine() else { return };
    if pg::admin_url().is_none() {
        return;
    }
    // Declared before the containers: dropped (database with FORCE, then
    // the volume) after them.
    // Created and dropped off the async workers (`pg::run`).
    let db = pg::TestDatabase::create();
    let volume = Volume::new(engine, "two-nodes");
    let admin = User::new("admin");

    // The URL as a secret file, readable by the image's user.
    let db_url_file = admin.path("collab_db");
    std::fs::write(&db_url_file, format!("{}\n", db.url)).unwrap();
    std::fs::set_permissions(
        &db_url_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();

    let ports = free_loopback_ports(2);
    let node = |(ssh, http): (u16, u16)| Boot {
        volume: &volume,
        admin_keys: &admin.public_key,
        env: vec![],
        config_file: None,
        db_url_file: Some(&db_url_file),
        ports: Ports::HostNetwork { ssh, http },
    };
    // A first, alone: it generates the host key and the signing key into the
    // empty volume and creates the schema; B finds all three.
    let a = boot(engine, node(ports[0])).await;
    let b = boot(engine, node(ports[1])).await;
    let nodes = [&a, &b];

    // Both on PostgreSQL: the schema is in the test database, and no SQLite
    // file appeared on the volume.
    let version = pg::query_i64(&db.url, "SELECT version FROM collab_schema")
        .expect("the servers migrated the PostgreSQL database");
    assert!(version > 0);
    let sqlite = exec(
        &b.container,
        &["sh", "-c", &format!("ls -a {STATE_DIR} {STATE_DIR}/repos")],
    )
    .await;
    assert_eq!(sqlite.code, 0, "{}", sqlite.stderr);
    assert!(
        !sqlite.stdout.contains("collab.db"),
        "a SQLite database on the PostgreSQL backend:\n{}",
        sqlite.stdout
    );
    // Only A generated the keys; B presents the same host key (the admin's
    // known_hosts holds one alias for every port, and ssh refuses a changed key).
    let (a_log, b_log) = (a.logs().await, b.logs().await);
    for generated in ["generated host key", "generated server signing key"] {
        assert!(
            a_log.contains(generated),
            "A did not log {generated:?}:\n{a_log}"
        );
        assert!(
            !b_log.contains(generated),
            "B logged {generated:?}:\n{b_log}"
        );
    }
    for node in nodes {
        let whoami = admin.ssh_json(node, "collab-whoami");
        assert_eq!(
            whoami["fingerprint"],
            admin.fingerprint.as_str(),
            "{whoami}"
        );
    }
    let known_hosts = std::fs::read_to_string(admin.path("known_hosts")).unwrap();
    assert_eq!(
        known_hosts.lines().count(),
        1,
        "one host key for both containers:\n{known_hosts}"
    );

    // The repository through A, the issue through B.
    let created = admin.ssh(&a, "collab-repo create 'race'");
    assert!(
        created.status.success(),
        "collab-repo create: {}{}",
        String::from_utf8_lossy(&created.stdout),
        String::from_utf8_lossy(&created.stderr)
    );
    let opened = admin.ssh_json(
        &b,
        "collab-issue open 'race.git' --title 'Race through two containers'",
    );
    let issue = opened["issue"]
        .as_str()
        .unwrap_or_else(|| panic!("collab-issue open: {opened}"))
        .to_string();

    // The racers: writers (not admins), admitted by a line each in the shared
    // authorized_keys, which both servers re-read when it changes.
    let racers: Vec<User> = (0..RACERS)
        .map(|i| User::new(&format!("racer{i}")))
        .collect();
    let mut append = vec![
        "sh",
        "-c",
        "printf '%s\\n' \"$@\" >> /var/lib/git-collab/authorized_keys",
        "sh",
    ];
    append.extend(racers.iter().map(|r| r.public_key.as_str()));
    let appended = exec(&a.container, &append).await;
    assert_eq!(appended.code, 0, "{}{}", appended.stdout, appended.stderr);

    // The race: racer i through node i % 2, all released at once.
    let acquire = format!("collab-lease acquire 'race.git' '{issue}' --ttl 600");
    let node_ports = [a.ssh_port, b.ssh_port];
    let start = Barrier::new(RACERS);
    let replies: Vec<(usize, Output)> = std::thread::scope(|s| {
        let handles: Vec<_> = racers
            .iter()
            .enumerate()
            .map(|(i, racer)| {
                let (start, acquire, port) = (&start, &acquire, node_ports[i % 2]);
                s.spawn(move || {
                    start.wait();
                    (i, racer.ssh_to_port(port, acquire))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    let mut winners = Vec::new();
    let mut named: BTreeMap<String, usize> = BTreeMap::new();
    for (i, output) in &replies {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let node = ["A", "B"][i % 2];
        let reply: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "racer {i} via {node}: not JSON ({e}), {}: {stdout}{stderr}",
                output.status
            )
        });
        match output.status.code() {
            Some(0) => {
                assert_eq!(reply["status"], "acquired", "racer {i} via {node}: {reply}");
                assert_eq!(reply["holder"], racers[*i].fingerprint.as_str(), "{reply}");
                assert_eq!(reply["token"], 1, "{reply}");
                winners.push((racers[*i].fingerprint.clone(), node));
            }
            Some(4) => {
                assert_eq!(reply["status"], "held", "racer {i} via {node}: {reply}");
                let holder = reply["holder"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{reply}"));
                *named.entry(holder.to_string()).or_default() += 1;
            }
            other => panic!("racer {i} via {node}: exit {other:?}: {stdout}{stderr}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one winner: {winners:?}");
    let (winner, via) = winners.pop().unwrap();
    eprintln!("two-node race: {winner} won through container {via}");
    assert_eq!(
        named,
        BTreeMap::from([(winner.clone(), RACERS - 1)]),
        "every loser names the winner"
    );

    // Both containers report the same holder and token.
    for (name, node) in [("A", &a), ("B", &b)] {
        let shown = admin.ssh_json(node, &format!("collab-lease show 'race.git' '{issue}'"));
        assert_eq!(shown["holder"], winner.as_str(), "{name}: {shown}");
        assert_eq!(shown["token"], 1, "{name}: {shown}");
    }

    // Both shut down cleanly on SIGTERM, B first.
    assert_eq!(b.stop().await, 0, "B's exit code after SIGTERM");
    assert_eq!(a.stop().await, 0, "A's exit code after SIGTERM");
}
