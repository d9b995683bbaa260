//! What a hook knows about the push it runs for: the contract between the
//! server (`ssh/git.rs`, which sets these variables on `git receive-pack`)
//! and the hook process (which reads them back). Both sides use
//! [`HookContext`], so a variable is named in this file only.
//!
//! A hook run without this context (receive-pack started some other way)
//! refuses the push: it fails closed.

use std::path::PathBuf;

use collab_proto::Access;

const ENV_PRINCIPAL: &str = "GIT_COLLAB_PRINCIPAL";
const ENV_FINGERPRINT: &str = "GIT_COLLAB_FINGERPRINT";
const ENV_REPO: &str = "GIT_COLLAB_REPO";
const ENV_ACCESS: &str = "GIT_COLLAB_ACCESS";
const ENV_STATE_DIR: &str = "GIT_COLLAB_STATE_DIR";
const ENV_COLLAB_DB: &str = "GIT_COLLAB_DB";
const ENV_FENCED_REFS: &str = "GIT_COLLAB_FENCED_REFS";
const ENV_FENCED_REF_ISSUE: &str = "GIT_COLLAB_FENCED_REF_ISSUE";
const ENV_OTHERS_MAY_REVISE: &str = "GIT_COLLAB_OTHERS_MAY_REVISE";
const ENV_MAX_BODY: &str = "GIT_COLLAB_MAX_BODY";
const ENV_WEB_URL: &str = "GIT_COLLAB_WEB_URL";

/// `max_body` when the server did not pass one (`max_issue_body`'s default).
const DEFAULT_MAX_BODY: usize = 256 * 1024;

/// The pusher and the repository, as the server decided them before
/// starting `git receive-pack`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookContext {
    /// The governed name, else the key's fingerprint (the lease holder).
    pub principal: String,
    /// `SHA256:…` of the key that authenticated.
    pub fingerprint: String,
    /// Canonical repository name, e.g. `team/app.git`.
    pub repo: String,
    /// The pusher's level on this repository, as `authz` decided it.
    pub access: Access,
    pub state_dir: PathBuf,
    /// `collab.db` (or its configured location): hooks may read it with
    /// their own connection, and write only through `collab_store::*` functions in
    /// their own short transaction.
    pub collab_db: collab_store::Location,
    /// Ref globs a push may touch only with a live lease token
    /// (`hooks::fencing`): the repository policy's and governance's, as the
    /// server resolved them. Passed one per line.
    pub fenced_refs: Vec<String>,
    /// Which fenced refs belong to which issue (`fenced_ref_issue`
    /// patterns such as `refs/heads/issue/{issue}`; `hooks::fencing`): such
    /// a ref needs the live lease of that very issue. Passed one per line.
    pub fenced_ref_issue: Vec<String>,
    /// The merge rule's `others_may_revise`: whether a writer may push a
    /// revision onto someone else's patch (`hooks::review`).
    pub others_may_revise: bool,
    /// `max_issue_body`: the largest patch description a push may set.
    pub max_body: usize,
    /// Where the web UI is reached (`http://host:port`), for the addresses
    /// push-to-review prints; empty when unknown.
    pub web_url: String,
}

impl HookContext {
    /// The variables to set on `git receive-pack`.
    pub fn to_env(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        vec![
            (ENV_PRINCIPAL, self.principal.clone().into()),
            (ENV_FINGERPRINT, self.fingerprint.clone().into()),
            (ENV_REPO, self.repo.clone().into()),
            (ENV_ACCESS, self.access.as_str().into()),
            (ENV_STATE_DIR, self.state_dir.clone().into_os_string()),
            (ENV_COLLAB_DB, self.collab_db.to_setting().into()),
            (ENV_FENCED_REFS, self.fenced_refs.join("\n").into()),
            (
                ENV_FENCED_REF_ISSUE,
                self.fenced_ref_issue.join("\n").into(),
            ),
            (
                ENV_OTHERS_MAY_REVISE,
                if self.others_may_revise { "1" } else { "0" }.into(),
            ),
            (ENV_MAX_BODY, self.max_body.to_string().into()),
            (ENV_WEB_URL, self.web_url.clone().into()),
        ]
    }

    /// Read the context inside the hook process.
    pub fn from_env() -> Result<HookContext, String> {
        Self::from_lookup(|name| std::env::var_os(name))
    }

    fn from_lookup(
        get: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<HookContext, String> {
        let missing = |name: &str| format!("push refused: the hook was run without {name}");
        let text = |name: &str| -> Result<String, String> {
            get(name)
                .and_then(|v| v.into_string().ok())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| missing(name))
        };
        let path = |name: &str| -> Result<PathBuf, String> {
            get(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .ok_or_else(|| missing(name))
        };
        let access = match text(ENV_ACCESS)?.as_str() {
            "read" => Access::Read,
            "checks" => Access::Checks,
            "write" => Access::Write,
            "rewind" => Access::Rewind,
            _ => return Err(missing(ENV_ACCESS)),
        };
        let lines = |name: &str| -> Vec<String> {
            get(name)
                .and_then(|v| v.into_string().ok())
                .map(|v| {
                    v.lines()
                        .filter(|l| !l.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok(HookContext {
            principal: text(ENV_PRINCIPAL)?,
            fingerprint: text(ENV_FINGERPRINT)?,
            repo: text(ENV_REPO)?,
            access,
            state_dir: path(ENV_STATE_DIR)?,
            collab_db: collab_store::Location::parse(&text(ENV_COLLAB_DB)?),
            fenced_refs: lines(ENV_FENCED_REFS),
            fenced_ref_issue: lines(ENV_FENCED_REF_ISSUE),
            // Anything but "1" is the safe default: only the author revises.
            others_may_revise: get(ENV_OTHERS_MAY_REVISE).is_some_and(|v| v == "1"),
            max_body: get(ENV_MAX_BODY)
                .and_then(|v| v.into_string().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_MAX_BODY),
            web_url: get(ENV_WEB_URL)
                .and_then(|v| v.into_string().ok())
                .unwrap_or_default(),
        })
    }

    /// The repository the hook runs in, opened the way git set it up for
    /// the hook: `GIT_DIR` plus the quarantine object directory, so the
    /// pushed objects are readable although not yet in the repository.
    pub fn open_repo(&self) -> Result<git2::Repository, String> {
        git2::Repository::open_from_env().map_err(|e| format!("opening the repository: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn round_trips_through_the_environment() {
        let ctx = HookContext {
            principal: "alice".into(),
            fingerprint: "SHA256:abc".into(),
            repo: "team/app.git".into(),
            access: Access::Write,
            state_dir: "/srv/state".into(),
            collab_db: "/srv/state/repos/collab.db".into(),
            fenced_refs: vec!["refs/heads/issue/*".into(), "refs/heads/wip/**".into()],
            fenced_ref_issue: vec!["refs/heads/issue/{issue}".into()],
            others_may_revise: true,
            max_body: 1000,
            web_url: "http://forge.example:8080".into(),
        };
        let env: HashMap<&str, std::ffi::OsString> = ctx.to_env().into_iter().collect();
        let back = HookContext::from_lookup(|n| env.get(n).cloned()).unwrap();
        assert_eq!(back, ctx);
    }

    #[test]
    fn missing_or_bad_context_fails_closed() {
        let err = HookContext::from_lookup(|_| None).unwrap_err();
        assert!(err.contains("GIT_COLLAB_ACCESS"), "{err}");
        let err =
            HookContext::from_lookup(|n| Some(if n == ENV_ACCESS { "admin" } else { "x" }.into()))
                .unwrap_err();
        assert!(err.contains("GIT_COLLAB_ACCESS"), "{err}");
    }
}
