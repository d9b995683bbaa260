//! The governed regime: the admin repository `{repos_dir}/_governance.git`,
//! whose default branch holds `governance.toml` (see `conf`).
//!
//! Governance is active once that branch has the file. A push to it is
//! validated before anything changes: `git receive-pack` runs the server's
//! `pre-receive` hook, whose `hooks::governance` check parses the new file;
//! a bad file rejects the whole push with the parse error. After
//! a successful receive-pack the server reloads the file and swaps it in
//! atomically (`Governance::reload`).

pub mod conf;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use conf::{GovernanceConf, CONF_FILE};

use crate::repos::GOVERNANCE_REPO;

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
