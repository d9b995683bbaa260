//! [`ServerHarness`]: the real `git-collab-server` on ephemeral loopback
//! ports with a temporary state directory (or a fresh PostgreSQL database),
//! driven by the real OpenSSH `ssh` and the real `git`; keys from
//! `ssh-keygen`; the host commands (`server_cli`, `host_cli`); crash
//! helpers ([`ServerHarness::kill`]); [`synthetic_history`].

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use collab_store::sql::test_database as pg;

use crate::bins::bin;

/// How long to wait for the server's `listening` line before giving up (a
/// hang guard for a broken build, not a performance assertion).
const START_LIMIT: Duration = Duration::from_secs(120);

/// The option that marks an admin key in authorized_keys.
pub const ADMIN_OPTION: &str = "environment=\"GIT_COLLAB_ROLE=admin\"";

/// The reply for unknown and unauthorized repositories.
pub const NOT_FOUND: &str = "error: repository not found\n";

/// What an `ssh` command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshOutput {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

impl SshOutput {
    /// A finished process's output as text and its exit code.
    pub fn from_output(out: Output) -> Self {
        SshOutput {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            code: out.status.code().unwrap_or(-1),
        }
    }

    /// stdout parsed as one JSON value (panics with the whole output if not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    pub fn success(&self) -> bool {
        self.code == 0
    }
}

/// `git-collab-server`, with no `GIT_COLLAB_*` setting from the test's
/// environment (the harness sets what a server should see).
pub fn server_command() -> Command {
    let mut cmd = Command::new(bin("git-collab-server"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GIT_COLLAB_") {
            cmd.env_remove(&key);
        }
    }
    cmd
}

/// `git-collab-server ARGS` on the host ([`server_command`]), with the
/// collab database at `db_url` (`None`: wherever the arguments say).
pub fn server_cli(db_url: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = server_command();
    if let Some(url) = db_url {
        cmd.env("GIT_COLLAB_COLLAB_DB", url);
    }
    cmd.args(args).output().expect("run git-collab-server")
}

/// `git-collab-server --state-dir STATE ARGS` on the host, with the collab
/// database at `db_url` (`None`: SQLite in the state directory).
pub fn host_cli(state_dir: &Path, db_url: Option<&str>, args: &[&str]) -> Output {
    let state_dir = state_dir.to_str().expect("UTF-8 state directory");
    let mut all = vec!["--state-dir", state_dir];
    all.extend_from_slice(args);
    server_cli(db_url, &all)
}

/// A command's stdout parsed as one JSON value (panics with the whole
/// output if not).
pub fn stdout_json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Extra settings for `ServerHarness::start_with`.
#[derive(Debug, Clone, Default)]
pub struct HarnessOptions {
    /// Extra environment for the server process.
    pub env: Vec<(String, String)>,
    /// Extra global flags, placed before `serve`.
    pub args: Vec<String>,
    /// Soft and hard `RLIMIT_NOFILE` of the server process, if set.
    pub open_files: Option<u64>,
}

/// A running server plus the client-side tools to talk to it.
pub struct ServerHarness {
    tmp: tempfile::TempDir,
    state_dir: PathBuf,
    options: HarnessOptions,
    child: Option<Child>,
    log: Arc<Mutex<String>>,
    pub ssh_addr: SocketAddr,
    pub http_addr: SocketAddr,
    client_key: PathBuf,
    /// The PostgreSQL database this server keeps its state in
    /// (`GIT_COLLAB_TEST_BACKEND=postgres`), dropped after the server.
    pub pg: Option<pg::TestDatabase>,
    /// The PostgreSQL URL the server is given (its own `pg`, or the one of
    /// the node it shares a database with).
    db_url: Option<String>,
}

fn run_checked(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Generate an Ed25519 key pair at `path` (and `path.pub`).
pub fn generate_key(path: &Path, comment: &str) {
    run_checked(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
            .arg(path),
    );
}

/// The `ssh-ed25519 AAAA… comment` line of a key.
pub fn public_key_line(key: &Path) -> String {
    let mut pub_path = key.as_os_str().to_owned();
    pub_path.push(".pub");
    std::fs::read_to_string(PathBuf::from(pub_path))
        .expect("public key file")
        .trim()
        .to_string()
}

/// `SHA256:…` as `ssh-keygen -lf` prints it.
pub fn fingerprint(key: &Path) -> String {
    let out = run_checked(Command::new("ssh-keygen").arg("-lf").arg(key));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .expect("fingerprint")
        .to_string()
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl ServerHarness {
    /// Start a server with a fresh state directory and an admin client key.
    pub fn start() -> Self {
        Self::start_with(HarnessOptions::default())
    }

    pub fn start_with(options: HarnessOptions) -> Self {
        Self::start_on(options, pg::wanted().then(pg::TestDatabase::create))
    }

    /// Start a server on a fresh PostgreSQL database of its own, whatever
    /// the backend of the run; `None` (after saying why) where no
    /// PostgreSQL server is available to the tests.
    pub fn start_on_postgres(options: HarnessOptions) -> Option<Self> {
        pg::admin_url()?;
        Some(Self::start_on(options, Some(pg::TestDatabase::create())))
    }

    /// `nodes` server processes on one fresh PostgreSQL database and one
    /// state directory: the first started with `options`, the others its
    /// `start_node`s. `None` as for `start_on_postgres`.
    pub fn start_cluster_on_postgres(options: HarnessOptions, nodes: usize) -> Option<Vec<Self>> {
        let first = Self::start_on_postgres(options)?;
        let others: Vec<Self> = (1..nodes).map(|_| first.start_node()).collect();
        Some(std::iter::once(first).chain(others).collect())
    }

    /// Start a server on the PostgreSQL database at `url`: one the test
    /// made itself (on a cluster of its own that it restarts, stops or
    /// fails over, say), dropped by the test.
    pub fn start_on_url(options: HarnessOptions, url: &str) -> Self {
        Self::start_with_db(options, None, Some(url.to_string()))
    }

    /// Another server process (a node) on this one's state directory,
    /// repositories and database, with its own ports. Its options are this
    /// one's.
    pub fn start_node(&self) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(tmp.path().join("keys")).unwrap();
        std::fs::create_dir_all(tmp.path().join("home")).unwrap();
        let mut h = ServerHarness {
            tmp,
            state_dir: self.state_dir.clone(),
            options: HarnessOptions {
                env: self.options.env.clone(),
                args: self.options.args.clone(),
                open_files: self.options.open_files,
            },
            child: None,
            log: Arc::new(Mutex::new(String::new())),
            ssh_addr: "127.0.0.1:0".parse().unwrap(),
            http_addr: "127.0.0.1:0".parse().unwrap(),
            client_key: self.client_key.clone(),
            pg: None,
            db_url: self.db_url.clone(),
        };
        h.spawn();
        h
    }

    fn start_on(options: HarnessOptions, pg: Option<pg::TestDatabase>) -> Self {
        let url = pg.as_ref().map(|db| db.url.clone());
        Self::start_with_db(options, pg, url)
    }

    fn start_with_db(
        options: HarnessOptions,
        pg: Option<pg::TestDatabase>,
        db_url: Option<String>,
    ) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let state_dir = tmp.path().join("state");
        std::fs::create_dir_all(tmp.path().join("keys")).unwrap();
        std::fs::create_dir_all(tmp.path().join("home")).unwrap();
        let client_key = tmp.path().join("keys").join("client");
        generate_key(&client_key, "client");
        // authorized_keys exists before the first start, with the admin key.
        std::fs::create_dir_all(&state_dir).unwrap();
        std::fs::write(
            state_dir.join("authorized_keys"),
            format!("{ADMIN_OPTION} {}\n", public_key_line(&client_key)),
        )
        .unwrap();
        if let Some(url) = &db_url {
            // Host commands (`repo create`, `import`, …) run by the tests
            // inherit it; the server gets it explicitly in `spawn`.
            std::env::set_var("GIT_COLLAB_COLLAB_DB", url);
        }
        Self::launch(tmp, state_dir, options, client_key, db_url, pg)
    }

    /// Start a server on an existing state directory (a restored one, say),
    /// talking to it with `client_key`, which that directory must admit.
    pub fn start_in(state_dir: PathBuf, client_key: PathBuf) -> Self {
        Self::start_in_with(state_dir, client_key, HarnessOptions::default())
    }

    /// `start_in` with the collab database at `db_url` (`None`: SQLite in
    /// the state directory), as a restored PostgreSQL server needs.
    pub fn start_in_database(
        state_dir: PathBuf,
        client_key: PathBuf,
        db_url: Option<String>,
    ) -> Self {
        Self::start_in_on(state_dir, client_key, HarnessOptions::default(), db_url)
    }

    /// `start_in` with `options` (the directory need not exist yet when
    /// `options` admit `client_key`, through `initial_admin_keys`, say).
    pub fn start_in_with(state_dir: PathBuf, client_key: PathBuf, options: HarnessOptions) -> Self {
        Self::start_in_on(state_dir, client_key, options, None)
    }

    fn start_in_on(
        state_dir: PathBuf,
        client_key: PathBuf,
        options: HarnessOptions,
        db_url: Option<String>,
    ) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(tmp.path().join("keys")).unwrap();
        std::fs::create_dir_all(tmp.path().join("home")).unwrap();
        Self::launch(tmp, state_dir, options, client_key, db_url, None)
    }

    /// A harness over `state_dir` whose server is started.
    fn launch(
        tmp: tempfile::TempDir,
        state_dir: PathBuf,
        options: HarnessOptions,
        client_key: PathBuf,
        db_url: Option<String>,
        pg: Option<pg::TestDatabase>,
    ) -> Self {
        let mut h = ServerHarness {
            tmp,
            state_dir,
            options,
            child: None,
            log: Arc::new(Mutex::new(String::new())),
            ssh_addr: "127.0.0.1:0".parse().unwrap(),
            http_addr: "127.0.0.1:0".parse().unwrap(),
            client_key,
            db_url,
            pg,
        };
        h.spawn();
        h
    }

    /// A following watcher (`ssh … collab-events watch --since SINCE` as the
    /// admin): the `seq` of each event it reads, as they come (heartbeats
    /// left out). Kill the child to stop it.
    pub fn event_watcher(&self, since: i64) -> (Child, mpsc::Receiver<i64>) {
        let mut child = Command::new("ssh")
            .args(self.ssh_options(&self.client_key()))
            .arg("git@127.0.0.1")
            .arg(format!("collab-events watch --since {since}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn ssh");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<i64>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                if v["type"] == "heartbeat" {
                    continue;
                }
                if let Some(seq) = v["seq"].as_i64() {
                    if tx.send(seq).is_err() {
                        break;
                    }
                }
            }
        });
        (child, rx)
    }

    /// `git-collab-server --state-dir STATE ARGS` on the host (a command
    /// such as `backup`), with this server's collab database and no other
    /// `GIT_COLLAB_*` setting from the test's environment.
    pub fn host_cli(&self, args: &[&str]) -> Output {
        host_cli(&self.state_dir, self.db_url.as_deref(), args)
    }

    fn spawn(&mut self) {
        let mut cmd = server_command();
        if let Some(url) = &self.db_url {
            cmd.env("GIT_COLLAB_COLLAB_DB", url);
        }
        cmd.arg("--state-dir")
            .arg(&self.state_dir)
            .args([
                "--ssh-listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
            ])
            .args(&self.options.args)
            .arg("serve")
            // The harness makes new forges: a state directory it did not
            // create is created by the server (`once::config` tests the
            // refusal without --init).
            .arg("--init")
            // The server's working directory is the test's own, so a stray
            // file created by a command would show up there.
            .current_dir(self.tmp.path())
            .envs(self.options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(limit) = self.options.open_files {
            use std::os::unix::process::CommandExt as _;
            // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let rl = libc::rlimit {
                        rlim_cur: limit as libc::rlim_t,
                        rlim_max: limit as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().expect("spawn git-collab-server");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let log = self.log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.starts_with("listening ssh=") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(line.clone());
                    }
                }
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        self.child = Some(child);
        let line = match rx.recv_timeout(START_LIMIT) {
            Ok(line) => line,
            Err(_) => panic!("server did not start; log:\n{}", self.log()),
        };
        // listening ssh=ADDR http=ADDR
        let mut parts = line.split_whitespace().skip(1);
        let ssh = parts.next().unwrap().trim_start_matches("ssh=");
        let http = parts.next().unwrap().trim_start_matches("http=");
        self.ssh_addr = ssh.parse().expect("ssh address");
        self.http_addr = http.parse().expect("http address");
        if let Some(url) = &self.db_url {
            // A server that fell back to SQLite would pass the tests
            // without testing PostgreSQL: the schema must be in the database.
            let version = pg::query_i64(url, "SELECT version FROM collab_schema")
                .expect("the server migrated its PostgreSQL database");
            assert!(version > 0);
        }
    }

    /// Everything the server wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Send SIGTERM and wait for the process to exit.
    pub fn stop(&mut self) -> ExitStatus {
        self.terminate();
        self.wait_exit()
    }

    /// SIGKILL the server and reap it: a crash, nothing flushed or closed.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL the server without reaping it (`kill` needs `&mut`; this
    /// works while other threads still talk to it). Drop reaps it.
    pub fn sigkill(&self) {
        if let Some(child) = &self.child {
            // SAFETY: plain kill(2) on the child we spawned and still own.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGKILL);
            }
        }
    }

    /// The admin client key this harness talks with.
    pub fn client_key(&self) -> PathBuf {
        self.client_key.clone()
    }

    /// Send SIGTERM without waiting.
    pub fn terminate(&self) {
        let pid = self.child.as_ref().expect("server is running").id();
        // SAFETY: plain kill(2) on the child we spawned and still own.
        unsafe {
            libc::kill(pid as i32, libc::SIGTERM);
        }
    }

    /// Wait for the server process to exit (after `terminate`).
    pub fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server is running");
        child.wait().expect("wait for server")
    }

    /// Wait until the server's log contains `needle` (hang guard: panics
    /// after START_LIMIT).
    pub fn wait_for_log(&self, needle: &str) {
        let start = std::time::Instant::now();
        while !self.log().contains(needle) {
            assert!(
                start.elapsed() < START_LIMIT,
                "{needle:?} never logged:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop (SIGTERM) and start again on the same state directory. The
    /// ports change.
    pub fn restart(&mut self) {
        let status = self.stop();
        assert!(
            status.success(),
            "server exited with {status}; log:\n{}",
            self.log()
        );
        self.spawn();
    }

    /// Start the server again after `stop`, on the same state directory.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "server is still running");
        self.spawn();
    }

    /// From the next start on, keep the collab database in the PostgreSQL
    /// database at `url` (after `db migrate --to`, say).
    pub fn use_database(&mut self, url: &str) {
        self.db_url = Some(url.to_string());
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn temp_dir(&self) -> &Path {
        self.tmp.path()
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    pub fn repos_dir(&self) -> PathBuf {
        self.state_dir.join("repos")
    }

    /// Where this server keeps its collab database, as `collab_db` would
    /// say it: the PostgreSQL URL, or the SQLite file. Tests that look into
    /// the database open it with `collab_store::open_reader(collab_store::Location::parse(…))`
    /// and so read either backend.
    pub fn db_setting(&self) -> String {
        match &self.db_url {
            Some(url) => url.clone(),
            None => self.repos_dir().join("collab.db").display().to_string(),
        }
    }

    pub fn authorized_keys_path(&self) -> PathBuf {
        self.state_dir.join("authorized_keys")
    }

    /// `key`'s authorized_keys line limited to loopback with `from=`: the
    /// key still logs in from here, but no longer acts while it is not
    /// connected (queued merges, webhooks: docs/security.md, "Who acts
    /// later").
    pub fn limit_key_from_loopback(&self, key: &Path) {
        let line = public_key_line(key);
        let line = line.trim();
        let path = self.authorized_keys_path();
        let text: String = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| match l.strip_prefix(line) {
                Some("") => format!("from=\"127.0.0.1,::1\" {l}\n"),
                _ => format!("{l}\n"),
            })
            .collect();
        std::fs::write(&path, text).unwrap();
    }

    pub fn ssh_port(&self) -> u16 {
        self.ssh_addr.port()
    }

    pub fn http_url(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    /// The default client key: authorized, and marked admin.
    pub fn ssh_client_key(&self) -> PathBuf {
        self.client_key.clone()
    }

    /// A new key pair, NOT authorized (for governance enrollment, or for
    /// testing refusal).
    pub fn named_key(&self, name: &str) -> PathBuf {
        let path = self.tmp.path().join("keys").join(name);
        generate_key(&path, name);
        path
    }

    /// A new key pair, authorized without admin rights.
    pub fn authorized_key(&self, name: &str) -> PathBuf {
        let key = self.named_key(name);
        self.authorize_key(&key, false);
        key
    }

    /// Append a key to authorized_keys (the server picks it up live).
    pub fn authorize_key(&self, key: &Path, admin: bool) {
        let line = public_key_line(key);
        let line = if admin {
            format!("{ADMIN_OPTION} {line}\n")
        } else {
            format!("{line}\n")
        };
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.authorized_keys_path())
            .unwrap();
        f.write_all(line.as_bytes()).unwrap();
    }

    /// ssh options shared by every client invocation (includes `-p PORT`).
    pub fn ssh_options(&self, key: &Path) -> Vec<String> {
        vec![
            "-F".into(),
            "/dev/null".into(),
            "-i".into(),
            key.display().to_string(),
            "-p".into(),
            self.ssh_port().to_string(),
            "-o".into(),
            "UserKnownHostsFile=/dev/null".into(),
            "-o".into(),
            "StrictHostKeyChecking=no".into(),
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            "IdentitiesOnly=yes".into(),
            "-o".into(),
            "LogLevel=ERROR".into(),
        ]
    }

    /// Run an exec verb with the default key.
    pub fn ssh_exec(&self, remote_cmd: &str) -> SshOutput {
        self.ssh_exec_as(&self.client_key.clone(), remote_cmd, b"")
    }

    /// Run an exec verb with the default key, feeding `stdin`.
    pub fn ssh_exec_with_stdin(&self, remote_cmd: &str, stdin: &[u8]) -> SshOutput {
        self.ssh_exec_as(&self.client_key.clone(), remote_cmd, stdin)
    }

    /// Run an exec verb as `key`, feeding `stdin`.
    pub fn ssh_exec_as(&self, key: &Path, remote_cmd: &str, stdin: &[u8]) -> SshOutput {
        self.ssh_raw(key, &["git@127.0.0.1", remote_cmd], stdin)
    }

    /// Run `ssh` with the harness options plus `args` (for `-tt`, no command…).
    pub fn ssh_raw(&self, key: &Path, args: &[&str], stdin: &[u8]) -> SshOutput {
        let mut child = Command::new("ssh")
            .args(self.ssh_options(key))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ssh");
        let mut input = child.stdin.take().unwrap();
        let data = stdin.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = input.write_all(&data);
        });
        let out = child.wait_with_output().expect("ssh output");
        let _ = writer.join();
        SshOutput::from_output(out)
    }

    /// A GIT_SSH_COMMAND / GIT_COLLAB_SSH_COMMAND value that uses `key`.
    pub fn git_ssh_command(&self, key: &Path) -> String {
        let mut opts = self.ssh_options(key);
        // git adds its own -p from the URL.
        let p = opts.iter().position(|o| o == "-p").unwrap();
        opts.drain(p..p + 2);
        let quoted: Vec<String> = opts.iter().map(|o| shell_quote(o)).collect();
        format!("ssh {}", quoted.join(" "))
    }

    /// `ssh://git@127.0.0.1:PORT/NAME`
    pub fn repo_url(&self, name: &str) -> String {
        format!("ssh://git@127.0.0.1:{}/{}", self.ssh_port(), name)
    }

    /// Create a bare repository with the host-side CLI.
    pub fn create_repo(&self, name: &str) -> PathBuf {
        let out = run_checked(
            Command::new(bin("git-collab-server"))
                .arg("--state-dir")
                .arg(&self.state_dir)
                .args(["repo", "create", name]),
        );
        let text = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(text.trim().trim_start_matches("created "))
    }

    /// Repository `name` whose `refs/heads/issue/*` are fenced (pushes
    /// need a live lease token), with a first commit on `main`; the seed
    /// clone it was pushed from.
    pub fn create_fenced_repo(&self, name: &str) -> PathBuf {
        let dir = self.create_repo(name);
        std::fs::write(
            dir.join("collab-policy.toml"),
            "fenced_refs = [\"refs/heads/issue/*\"]\n",
        )
        .unwrap();
        let seed = self.clone_repo(name, "seed");
        self.commit_file(&seed, "README", b"hello\n", "Start");
        self.ssh_push(&seed, &["HEAD:refs/heads/main"]);
        seed
    }

    /// The client environment: a private HOME, no system git config, a
    /// fixed author, and ssh commands that use `key`.
    pub fn client_env(&self, key: &Path) -> Vec<(String, String)> {
        let home = self.tmp.path().join("home").display().to_string();
        let ssh = self.git_ssh_command(key);
        [
            ("HOME", home),
            (
                "XDG_CONFIG_HOME",
                self.tmp.path().join("xdg").display().to_string(),
            ),
            ("GIT_CONFIG_NOSYSTEM", "1".into()),
            ("GIT_AUTHOR_NAME", "Test".into()),
            ("GIT_AUTHOR_EMAIL", "test@example.com".into()),
            ("GIT_COMMITTER_NAME", "Test".into()),
            ("GIT_COMMITTER_EMAIL", "test@example.com".into()),
            ("GIT_SSH_COMMAND", ssh.clone()),
            ("GIT_COLLAB_SSH_COMMAND", ssh),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// `program` with the inherited GIT_* variables removed and
    /// `client_env(key)` applied.
    pub fn client_command(&self, program: &str, key: &Path, dir: &Path) -> Command {
        let mut cmd = Command::new(program);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("GIT_") {
                cmd.env_remove(&k);
            }
        }
        cmd.current_dir(dir).envs(self.client_env(key));
        cmd
    }

    /// A `git` command with a clean, test-local environment using `key`.
    pub fn git_command(&self, key: &Path, dir: &Path) -> Command {
        let mut cmd = self.client_command("git", key, dir);
        cmd.args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "advice.detachedHead=false",
        ]);
        cmd
    }

    /// Run git as `key` in `dir`; returns the raw output (success or not).
    pub fn git_as(&self, key: &Path, dir: &Path, args: &[&str]) -> Output {
        self.git_command(key, dir)
            .args(args)
            .output()
            .expect("run git")
    }

    /// Run git with the default key; panics on failure.
    pub fn git(&self, dir: &Path, args: &[&str]) -> Output {
        run_checked(self.git_command(&self.client_key, dir).args(args))
    }

    /// Clone `name` into a new directory under the temp dir, as `key`.
    pub fn clone_as(&self, key: &Path, name: &str, dir_name: &str) -> PathBuf {
        let dest = self.tmp.path().join(dir_name);
        run_checked(
            self.git_command(key, self.tmp.path())
                .arg("clone")
                .arg(self.repo_url(name))
                .arg(&dest),
        );
        dest
    }

    /// Clone `name` with the default key.
    pub fn clone_repo(&self, name: &str, dir_name: &str) -> PathBuf {
        self.clone_as(&self.client_key.clone(), name, dir_name)
    }

    /// Commit a file in a clone; returns the new commit id.
    pub fn commit_file(&self, clone: &Path, file: &str, contents: &[u8], message: &str) -> String {
        let path = clone.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, contents).unwrap();
        self.git(clone, &["add", file]);
        self.git(clone, &["commit", "-q", "-m", message]);
        self.rev_parse(clone, "HEAD")
    }

    pub fn rev_parse(&self, dir: &Path, rev: &str) -> String {
        let out = self.git(dir, &["rev-parse", rev]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `git push origin <refspecs>` from a clone with the default key.
    pub fn ssh_push(&self, clone: &Path, refspecs: &[&str]) -> Output {
        let mut args = vec!["push", "origin"];
        args.extend_from_slice(refspecs);
        self.git(clone, &args)
    }

    /// The refs the server has for a repository (`git ls-remote`), as key.
    pub fn ls_remote_as(&self, key: &Path, name: &str) -> SshOutput {
        SshOutput::from_output(self.git_as(
            key,
            self.tmp.path(),
            &["ls-remote", &self.repo_url(name)],
        ))
    }

    /// Open an issue with the `git-collab` CLI in a clone of this server
    /// (server mode: the server holds it, no push needed); returns its full
    /// id.
    pub fn open_issue(&self, clone: &Path, title: &str) -> String {
        let cli = bin("git-collab");
        let key = self.client_key.clone();
        let out = run_checked(
            self.client_command(cli, &key, clone)
                .args(["issue", "open", "-t", title, "--json"]),
        );
        let reply: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("issue open --json");
        reply["issue"].as_str().expect("the issue id").to_string()
    }

    /// Open an issue with `collab-issue` over ssh; returns its full id.
    pub fn open_server_issue(&self, repo: &str, title: &str) -> String {
        let out = self.ssh_exec(&format!(
            "collab-issue open {} --title {}",
            shell_quote(repo),
            shell_quote(title)
        ));
        assert_eq!(out.code, 0, "{out:?}");
        out.json()["issue"]
            .as_str()
            .expect("the issue id")
            .to_string()
    }
}

impl Drop for ServerHarness {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Fill the bare repository `git_dir` with a linear history of `commits`
/// commits on `refs/heads/<branch>` (one small file changed per commit,
/// one second apart, `Commit number N` as the message of the Nth), written
/// by `git fast-import` in one pack: 20,000 commits take about a second.
pub fn synthetic_history(git_dir: &Path, branch: &str, commits: usize) {
    let mut stream = String::with_capacity(commits * 200);
    let start = 1_600_000_000u64;
    for n in 1..=commits {
        let message = format!("Commit number {n}\n");
        let content = format!("line {n}\n");
        stream.push_str(&format!(
            "commit refs/heads/{branch}\nmark :{n}\n\
             author Synth <synth@example.com> {t} +0000\n\
             committer Synth <synth@example.com> {t} +0000\n\
             data {}\n{message}",
            message.len(),
            t = start + n as u64,
        ));
        if n > 1 {
            stream.push_str(&format!("from :{}\n", n - 1));
        }
        stream.push_str(&format!(
            "M 100644 inline f{}.txt\ndata {}\n{content}\n",
            n % 100,
            content.len()
        ));
    }
    stream.push_str("done\n");
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["fast-import", "--quiet", "--done"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("git fast-import");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "git fast-import failed");
}
