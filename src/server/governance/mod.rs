//! The governed regime: the admin repository `{repos_dir}/_governance.git`,
//! whose default branch holds `governance.toml` (see `conf`).
//!
//! Governance is active once that branch has the file. A push to it is
//! validated before anything changes: `git receive-pack` runs the server's
//! `pre-receive` hook (`core.hooksPath` = the server hooks dir), which runs
//! this binary (`git-collab-server hook pre-receive`, see `hook`) to parse
//! the new file; a bad file rejects the whole push with the parse error. After
//! a successful receive-pack the server reloads the file and swaps it in
//! atomically (`Governance::reload`).

pub mod conf;

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use conf::{GovernanceConf, CONF_FILE};

use crate::repos::GOVERNANCE_REPO;

/// Environment variables the server sets for `git receive-pack`, read by the
/// hook.
pub const ENV_REPO: &str = "GIT_COLLAB_REPO";
pub const ENV_FINGERPRINT: &str = "GIT_COLLAB_FINGERPRINT";

/// What the governance repository currently says.
#[derive(Debug, Clone)]
pub enum GovState {
    /// No `_governance.git`, or its branch has no `governance.toml` yet.
    Inactive,
    Active(Arc<GovernanceConf>),
    /// Active but unreadable (edited on the host by hand): everyone is
    /// refused until it is fixed; the reason is logged.
    Broken(String),
}

/// The live governance state, shared by every connection.
#[derive(Debug)]
pub struct Governance {
    repo_path: PathBuf,
    state: RwLock<Arc<GovState>>,
}

impl Governance {
    /// Read the current state from `{repos_dir}/_governance.git`.
    pub fn load(repos_dir: &Path) -> Governance {
        let g = Governance {
            repo_path: repos_dir.join(GOVERNANCE_REPO),
            state: RwLock::new(Arc::new(GovState::Inactive)),
        };
        g.reload();
        g
    }

    /// The state as of the last reload.
    pub fn state(&self) -> Arc<GovState> {
        self.state.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Re-read the governance file and swap the new state in at once.
    pub fn reload(&self) -> Arc<GovState> {
        let next = Arc::new(read_state(&self.repo_path));
        match next.as_ref() {
            GovState::Broken(reason) => {
                tracing::error!("governance is active but unusable, refusing every key: {reason}")
            }
            GovState::Active(c) => {
                tracing::info!("governance active: {} principals", c.principals().count())
            }
            GovState::Inactive => {}
        }
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = next.clone();
        next
    }
}

fn read_state(repo_path: &Path) -> GovState {
    if !repo_path.exists() {
        return GovState::Inactive;
    }
    match read_conf_text(repo_path) {
        Ok(None) => GovState::Inactive,
        Ok(Some(text)) => match GovernanceConf::parse(&text) {
            Ok(c) => GovState::Active(Arc::new(c)),
            Err(e) => GovState::Broken(e.to_string()),
        },
        Err(e) => GovState::Broken(format!("{}: {e}", repo_path.display())),
    }
}

/// `governance.toml` at the tip of the branch HEAD names; `None` when the
/// branch is unborn or lacks the file.
fn read_conf_text(repo_path: &Path) -> Result<Option<String>, git2::Error> {
    let repo = git2::Repository::open_bare(repo_path)?;
    let head = match repo.head() {
        Ok(h) => h,
        Err(e)
            if matches!(
                e.code(),
                git2::ErrorCode::UnbornBranch | git2::ErrorCode::NotFound
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let tree = head.peel_to_tree()?;
    let Some(entry) = tree.get_name(CONF_FILE) else {
        return Ok(None);
    };
    let blob = entry.to_object(&repo)?.peel_to_blob()?;
    Ok(Some(String::from_utf8_lossy(blob.content()).into_owned()))
}

/// The `pre-receive` hook, run by `git receive-pack` inside the repository
/// (with git's quarantine environment, so the pushed objects are readable
/// through the `git` CLI but not yet in the repository).
pub mod hook {
    use super::*;
    use std::process::Command;

    const ZERO: &str = "0000000000000000000000000000000000000000";

    /// Run the named hook; returns the process exit code. Only `pre-receive`
    /// exists, and it only acts on the governance repository.
    pub fn run(name: &str) -> u8 {
        if name != "pre-receive" {
            return 0;
        }
        let repo = std::env::var(ENV_REPO).unwrap_or_default();
        if repo != GOVERNANCE_REPO {
            return 0;
        }
        let pusher = std::env::var(ENV_FINGERPRINT).ok();
        let updates: Vec<String> = std::io::stdin()
            .lock()
            .lines()
            .map_while(Result::ok)
            .collect();
        match check_updates(&updates, pusher.as_deref()) {
            Ok(()) => 0,
            Err(msg) => {
                eprintln!("error: {msg}");
                1
            }
        }
    }

    fn git(args: &[&str]) -> Result<Vec<u8>, String> {
        let out = Command::new("git")
            .args(args)
            .output()
            .map_err(|e| format!("cannot run git: {e}"))?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    fn check_updates(updates: &[String], pusher: Option<&str>) -> Result<(), String> {
        let head = String::from_utf8_lossy(&git(&["symbolic-ref", "HEAD"])?)
            .trim()
            .to_string();
        for line in updates {
            let mut parts = line.split_whitespace();
            let (Some(_old), Some(new), Some(refname)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(format!("malformed hook input {line:?}"));
            };
            if refname != head {
                continue;
            }
            if new == ZERO {
                return Err(format!("{refname} holds {CONF_FILE} and cannot be deleted"));
            }
            let spec = format!("{new}:{CONF_FILE}");
            let text = git(&["cat-file", "blob", &spec]).map_err(|_| {
                format!("{CONF_FILE} is missing from {refname}; keep it to stay governed")
            })?;
            let text = String::from_utf8(text).map_err(|_| format!("{CONF_FILE}: not UTF-8"))?;
            let parsed = GovernanceConf::parse(&text).map_err(|e| e.to_string())?;
            if let Some(fp) = pusher {
                parsed.check_keeps_admin(fp).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }
}
