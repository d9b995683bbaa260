//! Which copy of the issues the CLI works on: the **server** (a git-collab
//! server holds the issues; `git-collab issue ...` talks to it over
//! `collab-issue`) or the **local** DAGs (`refs/collab/issues/*`, exchanged
//! with `git-collab sync`, for remotes that are plain git hosts).
//!
//! The choice, first that applies:
//! 1. `--mode server|local` on the command line;
//! 2. git config `collab.mode` = `server` or `local` (set by the user;
//!    `auto` or unset goes on);
//! 3. what an earlier detection remembered for the remote, in
//!    `remote.<name>.collabMode`, while the remote's URL is still the one
//!    recorded beside it in `remote.<name>.collabModeUrl`;
//! 4. detection: a remote that is not an ssh URL (https, a path) is a
//!    plain git host (local, remembered) unless `git ls-remote` shows it
//!    carries a git-collab server's issue export (`refs/collab/export/`):
//!    then the issues are that server's and the command fails, saying to
//!    add the server's ssh URL (an https clone of a git-collab repository
//!    would otherwise list nothing and succeed); otherwise one round trip asks the server
//!    for the first issue of the repository (`collab-issue list '<repo>'
//!    --limit 1`): a page of issues, or the verb's own `repository not
//!    found`, comes from a git-collab server that holds issues (server);
//!    any other answer from the far side (`unknown command` from an older
//!    git-collab server, a git host or shell without such a command) means
//!    local. The probe asks for the verb itself rather than `collab-whoami`
//!    because a server may answer `collab-whoami` and still keep issues in
//!    git. The answer is remembered in the repository's own config. When
//!    ssh itself fails (unreachable host, refused key) nothing is decided
//!    or remembered: the command fails and says how to force a mode.

use git2::Repository;
use serde::Deserialize;

use crate::client::remote::{self, SshRemote};
use crate::client::remote_ssh;

/// Git config key that forces a mode for every remote of the repository.
pub const MODE_KEY: &str = "collab.mode";

/// Where issues live for a remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A git-collab server holds them; writes are one `collab-issue` call.
    Server,
    /// Signed DAGs in this clone, synced with `git-collab sync`.
    Local,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Server => "server",
            Mode::Local => "local",
        }
    }

    /// `server` or `local`; anything else is `None`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "server" => Some(Mode::Server),
            "local" => Some(Mode::Local),
            _ => None,
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the mode was chosen (shown by `--verbose` style messages and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Config,
    Remembered,
    Detected,
}

/// Why no mode could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid {MODE_KEY} '{0}': expected server, local or auto")]
    BadConfig(String),
    #[error(
        "cannot tell whether remote '{remote}' is a git-collab server: {detail}; \
         retry, or choose with --mode server|local (or git config {MODE_KEY})"
    )]
    Unreachable { remote: String, detail: String },
    #[error(
        "remote '{remote}' ({url}) is a git-collab server, whose issues and patches are \
         reached over ssh only: add its ssh URL as a remote (`git remote add collab \
         ssh://git@HOST:2222/REPO`, the web page's clone box shows it) and pass \
         --remote collab, or choose --mode local to use only the issues in this clone"
    )]
    ServerNotOverSsh { remote: String, url: String },
    #[error(transparent)]
    Remote(#[from] remote::Error),
    #[error("git: {}", .0.message())]
    Git(#[from] git2::Error),
}

/// The mode for `remote_name`, and how it was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chosen {
    pub mode: Mode,
    pub source: Source,
}

/// The part of `collab-whoami`'s reply detection reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Whoami {
    pub principal: String,
    /// The server's Ed25519 signing key (OpenSSH line): it signs the issue
    /// export. Present on servers that hold issues.
    #[serde(default)]
    pub server_key: Option<String>,
}

fn remembered_key(remote: &str) -> String {
    format!("remote.{remote}.collabMode")
}

fn remembered_url_key(remote: &str) -> String {
    format!("remote.{remote}.collabModeUrl")
}

/// Chooses the mode for `remote_name` (see the module docs), running
/// detection and remembering its answer when nothing else decides.
pub fn choose(repo: &Repository, remote_name: &str, flag: Option<Mode>) -> Result<Chosen, Error> {
    if let Some(mode) = flag {
        return Ok(Chosen {
            mode,
            source: Source::Flag,
        });
    }
    if let Some(chosen) = known_with_source(repo, remote_name)? {
        return Ok(chosen);
    }
    let url = remote_url(repo, remote_name);
    let remote = match remote_ssh::ssh_remote(repo, remote_name) {
        Ok(remote) => remote,
        // https, a path, file://: a plain git host, unless what it
        // serves says it is a git-collab server that holds the issues
        // (reached only over ssh).
        Err(remote::Error::NotSsh { url, .. }) => {
            return match serves_export(repo, &url) {
                Some(true) => Err(Error::ServerNotOverSsh {
                    remote: remote_name.to_string(),
                    url,
                }),
                Some(false) => {
                    remember(repo, remote_name, &url, Mode::Local)?;
                    Ok(Chosen {
                        mode: Mode::Local,
                        source: Source::Detected,
                    })
                }
                // Unreachable or not readable anonymously: the DAGs in
                // this clone are what there is, as before; ask again next
                // time.
                None => Ok(Chosen {
                    mode: Mode::Local,
                    source: Source::Detected,
                }),
            };
        }
        Err(e) => return Err(e.into()),
    };
    let mode = detect(&remote).map_err(|detail| Error::Unreachable {
        remote: remote_name.to_string(),
        detail,
    })?;
    remember(repo, remote_name, &url, mode)?;
    Ok(Chosen {
        mode,
        source: Source::Detected,
    })
}

/// The mode for `remote_name` when it is known without asking the network
/// (config, remembered detection, or no remote URL at all).
pub fn known(repo: &Repository, remote_name: &str) -> Result<Option<Mode>, Error> {
    Ok(known_with_source(repo, remote_name)?.map(|c| c.mode))
}

fn known_with_source(repo: &Repository, remote_name: &str) -> Result<Option<Chosen>, Error> {
    let config = repo.config()?;
    if let Ok(value) = config.get_string(MODE_KEY) {
        match Mode::parse(&value) {
            Some(mode) => {
                return Ok(Some(Chosen {
                    mode,
                    source: Source::Config,
                }))
            }
            None if value.trim().eq_ignore_ascii_case("auto") || value.trim().is_empty() => {}
            None => return Err(Error::BadConfig(value)),
        }
    }
    let url = remote_url(repo, remote_name);
    // No remote (or no URL): nothing to ask, the DAGs here are all there is.
    if url.is_empty() {
        return Ok(Some(Chosen {
            mode: Mode::Local,
            source: Source::Detected,
        }));
    }
    let remembered = config
        .get_string(&remembered_key(remote_name))
        .ok()
        .and_then(|m| Mode::parse(&m));
    let remembered_url = config.get_string(&remembered_url_key(remote_name)).ok();
    Ok(match (remembered, remembered_url) {
        (Some(mode), Some(for_url)) if for_url == url => Some(Chosen {
            mode,
            source: Source::Remembered,
        }),
        _ => None,
    })
}

fn remote_url(repo: &Repository, remote_name: &str) -> String {
    match repo.find_remote(remote_name) {
        Ok(remote) => remote.url().unwrap_or_default().to_string(),
        Err(_) => String::new(),
    }
}

/// Whether the git repository at `url` (https, a path) carries a
/// git-collab server's signed issue export (`refs/collab/export/...`):
/// then its issues live in that server's database, not in DAGs a clone
/// syncs. `None` when git could not ask (unreachable, private).
fn serves_export(repo: &Repository, url: &str) -> Option<bool> {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo.path())
        .env_remove("GIT_DIR")
        .args(["ls-remote", "--end-of-options", url])
        .arg(format!("{}*", collab_record::refs::EXPORT_PREFIX))
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| !String::from_utf8_lossy(&out.stdout).trim().is_empty())
}

/// One round trip: `Ok(mode)` when the far side answered, `Err(ssh's
/// words)` when ssh could not reach it.
pub fn detect(remote: &SshRemote) -> Result<Mode, String> {
    let probe = collab_proto::verbs::Call::new("collab-issue", "list")
        .arg(&remote.path)
        .int("--limit", 1)
        .line();
    let out = remote_ssh::run_remote_retrying(remote, &probe, b"").map_err(|e| e.to_string())?;
    // 255 is ssh's own failure: connection, host key, authentication.
    if out.code == 255 || out.code < 0 {
        let stderr = out.stderr_text();
        let last = stderr
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("ssh failed");
        return Err(last.to_string());
    }
    let page = out.success()
        && serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .is_ok_and(|v| v.get("issues").is_some_and(|i| i.is_array()));
    // The verb exists (it parsed the command) but this key may not see the
    // repository: still a server that holds issues.
    let hidden = out.code == 1 && out.stderr_text().trim() == "error: repository not found";
    Ok(if page || hidden {
        Mode::Server
    } else {
        Mode::Local
    })
}

/// The parsed reply of a successful `collab-whoami`.
pub fn whoami_of(out: &remote_ssh::RemoteOutput) -> Option<Whoami> {
    if !out.success() {
        return None;
    }
    serde_json::from_slice::<Whoami>(&out.stdout).ok()
}

/// Records `mode` as detected for `remote_name` at `url`, in the
/// repository's own config.
pub fn remember(repo: &Repository, remote_name: &str, url: &str, mode: Mode) -> Result<(), Error> {
    let mut local = repo.config()?.open_level(git2::ConfigLevel::Local)?;
    local.set_str(&remembered_key(remote_name), mode.as_str())?;
    local.set_str(&remembered_url_key(remote_name), url)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_with(url: Option<&str>) -> (tempfile::TempDir, Repository) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        if let Some(url) = url {
            repo.remote("origin", url).unwrap();
        }
        (dir, repo)
    }

    fn set(repo: &Repository, key: &str, value: &str) {
        let mut local = repo
            .config()
            .unwrap()
            .open_level(git2::ConfigLevel::Local)
            .unwrap();
        local.set_str(key, value).unwrap();
    }

    #[test]
    fn flag_beats_config_beats_memory() {
        let (_d, repo) = repo_with(Some("ssh://git@127.0.0.1:1/r"));
        set(&repo, "remote.origin.collabMode", "server");
        set(
            &repo,
            "remote.origin.collabModeUrl",
            "ssh://git@127.0.0.1:1/r",
        );
        let chosen = choose(&repo, "origin", None).unwrap();
        assert_eq!(
            (chosen.mode, chosen.source),
            (Mode::Server, Source::Remembered)
        );
        set(&repo, MODE_KEY, "local");
        let chosen = choose(&repo, "origin", None).unwrap();
        assert_eq!((chosen.mode, chosen.source), (Mode::Local, Source::Config));
        let chosen = choose(&repo, "origin", Some(Mode::Server)).unwrap();
        assert_eq!((chosen.mode, chosen.source), (Mode::Server, Source::Flag));
        set(&repo, MODE_KEY, "sometimes");
        assert!(matches!(
            choose(&repo, "origin", None),
            Err(Error::BadConfig(_))
        ));
    }

    #[test]
    fn plain_remotes_and_no_remote_are_local_without_asking() {
        for url in [None, Some("https://example.com/r.git"), Some("/srv/r.git")] {
            let (_d, repo) = repo_with(url);
            let chosen = choose(&repo, "origin", None).unwrap();
            assert_eq!(chosen.mode, Mode::Local, "{url:?}");
            assert!(repo
                .config()
                .unwrap()
                .get_string("remote.origin.collabMode")
                .is_err());
        }
    }

    #[test]
    fn memory_is_ignored_once_the_url_changes() {
        let (_d, repo) = repo_with(Some("https://example.com/r.git"));
        set(&repo, "remote.origin.collabMode", "server");
        set(&repo, "remote.origin.collabModeUrl", "ssh://old/r");
        // The URL moved to a plain https host: detected again, as local.
        let chosen = choose(&repo, "origin", None).unwrap();
        assert_eq!(
            (chosen.mode, chosen.source),
            (Mode::Local, Source::Detected)
        );
    }

    #[test]
    fn detection_asks_for_the_verb_and_reports_ssh_failures() {
        let mut remote = remote_ssh::parse_ssh_remote("ssh://git@h/r").unwrap();
        // The probe names the repository; the fake server checks it.
        remote.ssh_command = r#"f() { [ "$2" = "collab-issue list 'r' --limit 1" ] && echo '{"repo":"r","issues":[],"next":null}'; }; f"#.into();
        assert_eq!(detect(&remote), Ok(Mode::Server));
        remote.ssh_command = "f() { echo 'error: repository not found' >&2; exit 1; }; f".into();
        assert_eq!(detect(&remote), Ok(Mode::Server));
        remote.ssh_command = "f() { echo 'error: unknown command' >&2; exit 1; }; f".into();
        assert_eq!(detect(&remote), Ok(Mode::Local));
        remote.ssh_command = r#"f() { echo '{"principal":"p"}'; }; f"#.into();
        assert_eq!(detect(&remote), Ok(Mode::Local));
        remote.ssh_command = "f() { echo 'no shell access' >&2; exit 1; }; f".into();
        assert_eq!(detect(&remote), Ok(Mode::Local));
        remote.ssh_command =
            "f() { echo 'ssh: connect to host h: refused' >&2; exit 255; }; f".into();
        assert_eq!(
            detect(&remote),
            Err("ssh: connect to host h: refused".to_string())
        );
    }
}
