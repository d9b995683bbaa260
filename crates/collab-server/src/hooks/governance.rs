//! Governance validation: a push to `_governance.git` that moves its default
//! branch must leave a `governance.toml` that parses and still names an
//! admin the pusher can reach (`GovernanceConf::check_keeps_admin`), so a
//! bad push can never lock everyone out. Other repositories pass untouched.
//!
//! The server reloads the file after a successful push (`ssh/git.rs`).

use super::check::Refusal;
use super::context::HookContext;
use super::updates::RefUpdate;
use crate::governance::conf::{GovernanceConf, CONF_FILE};
use crate::repos::GOVERNANCE_REPO;

pub fn check(ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), Refusal> {
    if ctx.repo != GOVERNANCE_REPO {
        return Ok(());
    }
    let repo = ctx.open_repo().map_err(Refusal::one)?;
    let head = repo
        .find_reference("HEAD")
        .ok()
        .and_then(|h| h.symbolic_target().ok().flatten().map(str::to_string))
        .ok_or_else(|| Refusal::one("_governance.git has no HEAD branch"))?;
    for update in updates.iter().filter(|u| u.refname == head) {
        let Some(new) = update.new else {
            return Err(Refusal::one(format!(
                "{head} holds {CONF_FILE} and cannot be deleted"
            )));
        };
        let text = conf_text(&repo, new).ok_or_else(|| {
            Refusal::one(format!(
                "{CONF_FILE} is missing from {head} (or is not a file of at most 1 MiB); \
                 keep it to stay governed"
            ))
        })?;
        let text =
            String::from_utf8(text).map_err(|_| Refusal::one(format!("{CONF_FILE}: not UTF-8")))?;
        let parsed = GovernanceConf::parse(&text).map_err(|e| Refusal::one(e.to_string()))?;
        parsed
            .check_keeps_admin(&ctx.fingerprint)
            .map_err(|e| Refusal::one(e.to_string()))?;
    }
    Ok(())
}

/// The largest `governance.toml` a push may bring: its size comes from
/// the object header (for a delta, the size it declares) before libgit2
/// inflates it whole (issue 44, the libgit2 1.9.5 advisory).
const MAX_CONF_BYTES: usize = 1024 * 1024;

/// The bytes of `governance.toml` at the root of commit `new`; `None`
/// when it is missing, not a blob, or larger than [`MAX_CONF_BYTES`].
fn conf_text(repo: &git2::Repository, new: git2::Oid) -> Option<Vec<u8>> {
    let tree = repo.find_commit(new).ok()?.tree().ok()?;
    let entry = tree.get_name(CONF_FILE)?;
    if entry.kind() != Some(git2::ObjectType::Blob) {
        return None;
    }
    let (size, _) = repo.odb().ok()?.read_header(entry.id()).ok()?;
    if size > MAX_CONF_BYTES {
        return None;
    }
    let blob = repo.find_blob(entry.id()).ok()?;
    Some(blob.content().to_vec())
}
