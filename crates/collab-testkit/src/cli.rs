//! Test fixture for the `git-collab` CLI tests: a temp directory with a
//! bare "remote" and any number of clones, each with its own HOME,
//! XDG_CONFIG_HOME (so its own signing key) and git identity. Commands run
//! the real binary and the real `git`.

use std::path::{Path, PathBuf};

pub use crate::bins::cli_bin;
use std::process::{Command, Output, Stdio};

pub struct World {
    pub tmp: tempfile::TempDir,
    pub remote: PathBuf,
}

pub struct Clone {
    pub name: String,
    pub dir: PathBuf,
    pub home: PathBuf,
}

impl Default for World {
    fn default() -> World {
        World::new()
    }
}

impl World {
    /// A temporary directory holding an empty bare `remote.git`.
    pub fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let remote = tmp.path().join("remote.git");
        let out = Command::new("git")
            .args(["init", "-q", "--bare", "-b", "main"])
            .arg(&remote)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        World { tmp, remote }
    }

    /// Clones the remote, sets the clone's git identity, generates its own
    /// signing key and runs `git-collab init`.
    pub fn clone(&self, name: &str) -> Clone {
        let home = self.tmp.path().join(format!("home-{name}"));
        std::fs::create_dir_all(&home).unwrap();
        let dir = self.tmp.path().join(name);
        let c = Clone {
            name: name.to_string(),
            dir: dir.clone(),
            home,
        };
        let url = format!("file://{}", self.remote.display());
        c.git_in(self.tmp.path(), &["clone", "-q", &url, name]);
        c.git(&["config", "user.name", name]);
        c.git(&["config", "user.email", &format!("{name}@example.com")]);
        c.ok(&["key", "generate"]);
        c.ok(&["init"]);
        c
    }

    /// Runs `git-collab` against the bare remote itself (GIT_DIR), with no
    /// HOME of any clone.
    pub fn collab_bare(&self, args: &[&str]) -> Output {
        let home = self.tmp.path().join("home-bare");
        std::fs::create_dir_all(&home).unwrap();
        Command::new(cli_bin())
            .args(args)
            .current_dir(self.tmp.path())
            .env("GIT_DIR", &self.remote)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Clone {
    pub fn env(&self, cmd: &mut Command) {
        cmd.current_dir(&self.dir)
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_SSH_COMMAND")
            .stdin(Stdio::null());
    }

    pub fn collab(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(cli_bin());
        cmd.args(args);
        self.env(&mut cmd);
        cmd.output().unwrap()
    }

    /// Runs `git-collab`, asserts success and returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.collab(args);
        assert!(
            out.status.success(),
            "{} git-collab {:?} failed: {}{}",
            self.name,
            args,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `git-collab` with `input` on stdin, asserts success, returns stdout.
    pub fn ok_stdin(&self, args: &[&str], input: &str) -> String {
        use std::io::Write;
        let mut cmd = Command::new(cli_bin());
        cmd.args(args);
        self.env(&mut cmd);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `git-collab`, asserts exit status 1 with one `error:` line, and
    /// returns that line.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.collab(args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "git-collab {args:?} should fail: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let stderr = String::from_utf8(out.stderr).unwrap();
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one error line expected, got {stderr:?}");
        assert!(lines[0].starts_with("error: "), "{stderr:?}");
        lines[0].to_string()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        serde_json::from_str(&self.ok(args)).unwrap()
    }

    /// Opens an issue and returns its full id.
    pub fn open(&self, title: &str, extra: &[&str]) -> String {
        let mut args = vec!["issue", "open", "-t", title, "--json"];
        args.extend_from_slice(extra);
        self.json(&args)["issue"].as_str().unwrap().to_string()
    }

    pub fn git(&self, args: &[&str]) -> String {
        self.git_in(&self.dir, args)
    }

    fn git_in(&self, dir: &Path, args: &[&str]) -> String {
        let mut cmd = Command::new("git");
        cmd.args(args);
        self.env(&mut cmd);
        cmd.current_dir(dir);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs git with `input` on stdin; returns trimmed stdout.
    pub fn git_stdin(&self, args: &[&str], input: &[u8]) -> String {
        use std::io::Write;
        let mut cmd = Command::new("git");
        cmd.args(args);
        self.env(&mut cmd);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// Raw bytes of `<rev>:<path>`.
    pub fn blob(&self, rev: &str, path: &str) -> Vec<u8> {
        let mut cmd = Command::new("git");
        cmd.args(["cat-file", "blob", &format!("{rev}:{path}")]);
        self.env(&mut cmd);
        let out = cmd.output().unwrap();
        assert!(out.status.success());
        out.stdout
    }

    /// Writes an event commit by hand (git plumbing, no git-collab) with
    /// the given bytes, as a child of `parent`; returns its id.
    pub fn forge_event(&self, parent: &str, json: &[u8], sig: &[u8]) -> String {
        let json_blob = self.git_stdin(&["hash-object", "-w", "--stdin"], json);
        let sig_blob = self.git_stdin(&["hash-object", "-w", "--stdin"], sig);
        let tree = self.git_stdin(
            &["mktree"],
            format!("100644 blob {json_blob}\tevent.json\n100644 blob {sig_blob}\tevent.sig\n")
                .as_bytes(),
        );
        self.git(&["commit-tree", &tree, "-p", parent, "-m", "forged"])
            .trim()
            .to_string()
    }

    /// `git for-each-ref` over every ref: a snapshot to compare before and
    /// after a failing command.
    pub fn refs(&self) -> String {
        self.git(&["for-each-ref", "--format=%(objectname) %(refname)"])
    }

    pub fn public_key(&self) -> String {
        self.json(&["key", "show", "--json"])["public_key"]
            .as_str()
            .unwrap()
            .to_string()
    }
}
