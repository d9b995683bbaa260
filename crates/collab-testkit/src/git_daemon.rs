//! A plain `git daemon` on a loopback port, serving the bare repositories
//! under one directory (receive-pack enabled): the upstream or downstream
//! of the mirror suites that is not a git-collab server.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `git daemon`, killed when dropped.
pub struct GitDaemon {
    child: Child,
    pub port: u16,
    pub base: PathBuf,
}

impl GitDaemon {
    /// Serve `base` (created if missing) on a free loopback port; returns
    /// once it accepts connections.
    pub fn start(base: &Path) -> GitDaemon {
        std::fs::create_dir_all(base).unwrap();
        let port = free_port();
        let child = Command::new("git")
            .arg("daemon")
            .arg("--export-all")
            .arg("--enable=receive-pack")
            .arg("--reuseaddr")
            .arg("--listen=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            .arg(base)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("git daemon");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "git daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        GitDaemon {
            child,
            port,
            base: base.to_path_buf(),
        }
    }

    /// `git://127.0.0.1:PORT/NAME`
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }

    /// A new empty bare repository `name` (default branch `main`).
    pub fn bare(&self, name: &str) -> PathBuf {
        let path = self.base.join(name);
        let out = Command::new("git")
            .args(["init", "-q", "--bare", "-b", "main"])
            .arg(&path)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        path
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on (just now).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
