//! The server's signed export of its issues, as a clone holds it: one DAG
//! per issue, in the ordinary issue event format, every event signed by the
//! server's Ed25519 key (`server_key` in `collab-whoami`), fetched into
//! `refs/collab-remotes/<remote>/export/issues/<issue id>` by
//! `git-collab issue fetch` or `sync`. It is read like any issue DAG (the
//! shared replay, the repository's allowlist), with two differences: the
//! issue id is the one in the ref name (an issue the server opened has a
//! random id, not its export root's), and the DAG's root is its one commit
//! without parents. This is what `issue list|show --offline` show and what
//! `verify` checks once the server's key is in the allowlist.
//!
//! Patches are exported the same way, in the ordinary patch DAG format
//! (`…/export/patches/<patch id>`, [`replay_patch_export`]).

use git2::{Oid, Repository};

use crate::error::{Error, Result};
use crate::patch::{self, PatchReplay};
use crate::refs;
use crate::replay::Checker;
use crate::state::{self, IssueReplay, IssueState};
use crate::store::{self, Content};
use crate::trust::TrustList;

/// `(ref name, issue id)` of every exported issue of `remote` held here,
/// sorted by id.
pub fn export_refs(repo: &Repository, remote: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for reference in repo.references_glob(&refs::export_issues_glob(remote))? {
        let reference = reference?;
        let Ok(name) = reference.name() else { continue };
        if let Some(id) = refs::export_issue_id_of(remote, name) {
            out.push((name.to_string(), id.to_string()));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// Replays the exported issue at `ref_name` (issue `issue_id`).
pub fn replay_export(
    repo: &Repository,
    ref_name: &str,
    issue_id: &str,
    checker: &mut Checker,
) -> Result<IssueReplay> {
    let tip = store::ref_tip(repo, ref_name)?
        .ok_or_else(|| Error::IssueNotFound(issue_id.to_string()))?;
    let dag = store::read_dag(repo, tip)?;
    let root = export_root(&dag, issue_id);
    let (mut state, dropped) = state::replay_with(&root, &dag, checker);
    if let Ok(s) = &mut state {
        s.id = issue_id.to_string();
    }
    Ok(IssueReplay {
        id: issue_id.to_string(),
        ref_name: ref_name.to_string(),
        tip,
        state,
        dropped,
        events: dag
            .iter()
            .filter(|c| !matches!(c.content, Content::Merge))
            .count(),
    })
}

/// The root of an export DAG: the issue's own id when the DAG holds that
/// commit, else its commit without parents (the smallest id if several, so
/// the choice is stable; replay then reports the others as misplaced).
fn export_root(dag: &[store::DagCommit], issue_id: &str) -> String {
    if let Ok(oid) = Oid::from_str(issue_id) {
        if dag.iter().any(|c| c.oid == oid) {
            return issue_id.to_string();
        }
    }
    dag.iter()
        .filter(|c| c.parents.is_empty())
        .map(|c| c.oid)
        .min()
        .map(|o| o.to_string())
        .unwrap_or_default()
}

/// Replays every exported issue of `remote`, valid or not, verifying every
/// event against `trust` (what `verify` runs).
pub fn replay_all(
    repo: &Repository,
    remote: &str,
    trust: Option<&TrustList>,
) -> Result<Vec<IssueReplay>> {
    let mut checker = Checker::new(trust);
    export_refs(repo, remote)?
        .iter()
        .map(|(name, id)| replay_export(repo, name, id, &mut checker))
        .collect()
}

/// Every valid exported issue of `remote`, newest first (ties by id), with
/// the repository's allowlist applied.
pub fn list_issues(repo: &Repository, remote: &str) -> Result<Vec<IssueState>> {
    let trust = TrustList::load(repo)?;
    let mut issues: Vec<IssueState> = replay_all(repo, remote, trust.as_ref())?
        .into_iter()
        .filter_map(|r| r.state.ok())
        .collect();
    issues.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
    Ok(issues)
}

/// Resolves a full id or a unique prefix of 4+ hex digits among the
/// exported issues of `remote` and replays that issue.
pub fn show_issue(repo: &Repository, remote: &str, id_or_prefix: &str) -> Result<IssueState> {
    let prefix = id_or_prefix.trim().to_ascii_lowercase();
    if prefix.len() < 4 || prefix.len() > 40 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::InvalidIssueId(id_or_prefix.to_string()));
    }
    let mut matches: Vec<(String, String)> = export_refs(repo, remote)?
        .into_iter()
        .filter(|(_, id)| id.starts_with(&prefix))
        .collect();
    let (name, id) = match matches.len() {
        0 => return Err(Error::IssueNotFound(id_or_prefix.to_string())),
        1 => matches.remove(0),
        _ => {
            return Err(Error::AmbiguousIssue {
                prefix: id_or_prefix.to_string(),
                candidates: matches.into_iter().map(|(_, id)| id).collect(),
            })
        }
    };
    let trust = TrustList::load(repo)?;
    replay_export(repo, &name, &id, &mut Checker::new(trust.as_ref()))?
        .state
        .map_err(|reason| Error::InvalidIssue { id, reason })
}

/// `(ref name, patch id)` of every exported patch of `remote` held here,
/// sorted by id (`refs/collab-remotes/<remote>/export/patches/<id>`).
pub fn patch_export_refs(repo: &Repository, remote: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for reference in repo.references_glob(&refs::export_patches_glob(remote))? {
        let reference = reference?;
        let Ok(name) = reference.name() else { continue };
        if let Some(id) = refs::export_patch_id_of(remote, name) {
            out.push((name.to_string(), id.to_string()));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// Replays the exported patch at `ref_name` (patch `patch_id`), in the
/// ordinary patch DAG format, signed by the server's key: like an issue
/// export, the id is the one in the ref name and the root is the chain's
/// commit without parents. Votes name their principal (`voter`), so one
/// key's votes for several people stay apart.
pub fn replay_patch_export(
    repo: &Repository,
    ref_name: &str,
    patch_id: &str,
    checker: &mut Checker,
) -> Result<PatchReplay> {
    let tip = store::ref_tip(repo, ref_name)?
        .ok_or_else(|| Error::Invalid(format!("no exported patch at {ref_name}")))?;
    let dag = store::read_dag(repo, tip)?;
    let root = export_root(&dag, patch_id);
    let (mut state, dropped) = patch::replay(&root, &dag, checker);
    if let Ok(s) = &mut state {
        s.id = patch_id.to_string();
    }
    Ok(PatchReplay {
        id: patch_id.to_string(),
        tip,
        state,
        dropped,
    })
}

/// Replays every exported patch of `remote`, valid or not, verifying every
/// event against `trust` (what `verify` runs).
pub fn replay_all_patches(
    repo: &Repository,
    remote: &str,
    trust: Option<&TrustList>,
) -> Result<Vec<PatchReplay>> {
    let mut checker = Checker::new(trust);
    patch_export_refs(repo, remote)?
        .iter()
        .map(|(name, id)| replay_patch_export(repo, name, id, &mut checker))
        .collect()
}
