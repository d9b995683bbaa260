//! Repository names, their safe resolution under `repos_dir`, per-repo policy
//! (`collab-policy.toml`), listing and creation.
//!
//! A name is one or more `/`-separated segments of `[A-Za-z0-9._-]`, no
//! segment `.` or `..`, with an optional `.git` suffix; `r` finds `r.git`.
//! Resolution canonicalizes the path (symlinks included) and refuses anything
//! that lands outside `repos_dir`, and anything that is not a *top-level*
//! repository of the namespace: a directory inside another repository (say
//! `secret.git/refs/x`, which a writer of `secret.git` can make look like a
//! repository by pushing refs named `refs/x/HEAD`, `refs/x/objects/...`) is
//! never a repository of its own. This module decides nothing about access:
//! it only reads the policy file so that `authz` can.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;

use crate::config::ServerConfig;

/// The per-repository policy file, kept in the bare repository directory.
pub const POLICY_FILE: &str = "collab-policy.toml";

/// The administrative repository that holds `governance.toml`.
pub const GOVERNANCE_REPO: &str = "_governance.git";

/// Longest accepted repository name, in bytes.
const MAX_NAME_LEN: usize = 512;

/// A served repository: its canonical name (relative to `repos_dir`, with the
/// on-disk suffix, e.g. `team/app.git`), its path and its policy.
#[derive(Debug, Clone)]
pub struct RepoEntry {
    pub name: String,
    pub path: PathBuf,
    pub policy: RepoPolicy,
}

impl RepoEntry {
    /// The name without `.git`: what grants and policies match against.
    pub fn short_name(&self) -> &str {
        self.name.strip_suffix(".git").unwrap_or(&self.name)
    }

    /// Whether this is the governance repository (`_governance.git`).
    pub fn is_governance(&self) -> bool {
        self.name == GOVERNANCE_REPO || self.name == "_governance"
    }
}

/// Ungoverned access rules for one repository (`collab-policy.toml`).
///
/// Each list holds principals (`SHA256:` fingerprints) or `*` (any admitted
/// key). A missing key keeps its default: `read = ["*"]`, `checks = []`,
/// `write = ["*"]`,
/// `rewind = []` (admins always rewind), `public = false`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoPolicy {
    #[serde(default = "everyone")]
    pub read: Vec<String>,
    /// Principals who may read and post commit checks but not push (CI).
    #[serde(default)]
    pub checks: Vec<String>,
    #[serde(default = "everyone")]
    pub write: Vec<String>,
    #[serde(default)]
    pub rewind: Vec<String>,
    /// Anonymous read over HTTP.
    #[serde(default)]
    pub public: bool,
    /// Ref globs a push may touch only with the pusher's live lease token
    /// (`-o collab-lease=<issue>:<token>`; see `hooks::fencing`).
    #[serde(default)]
    pub fenced_refs: Vec<String>,
    /// Patterns naming the issue a fenced ref belongs to
    /// (`refs/heads/issue/{issue}`): such a ref needs the live lease of that
    /// issue. Unset is `hooks::fencing::DEFAULT_REF_ISSUE`; `[]` ties no ref.
    #[serde(default)]
    pub fenced_ref_issue: Option<Vec<String>>,
    /// When `collab-patch merge` may merge a patch (`merge = { approvals =
    /// 1, ... }`); unset is `MergeRule::default()`.
    #[serde(default)]
    pub merge: Option<collab_store::patches::MergeRule>,
    /// Set when the policy file exists but does not parse: the repository is
    /// then closed to everyone but admins (fail closed).
    #[serde(skip)]
    pub broken: Option<String>,
}

fn everyone() -> Vec<String> {
    vec!["*".to_string()]
}

impl Default for RepoPolicy {
    fn default() -> Self {
        RepoPolicy {
            read: everyone(),
            checks: Vec::new(),
            write: everyone(),
            rewind: Vec::new(),
            public: false,
            fenced_refs: Vec::new(),
            fenced_ref_issue: None,
            merge: None,
            broken: None,
        }
    }
}

impl RepoPolicy {
    /// A policy that grants nothing (used when the file is unreadable).
    fn closed(reason: String) -> Self {
        RepoPolicy {
            read: Vec::new(),
            checks: Vec::new(),
            write: Vec::new(),
            rewind: Vec::new(),
            public: false,
            fenced_refs: Vec::new(),
            fenced_ref_issue: None,
            merge: None,
            broken: Some(reason),
        }
    }

    pub fn parse(text: &str) -> Result<RepoPolicy, toml::de::Error> {
        let policy: RepoPolicy = toml::from_str(text)?;
        crate::hooks::fencing::compile(&policy.fenced_refs)
            .map_err(<toml::de::Error as serde::de::Error>::custom)?;
        if let Some(rule) = &policy.merge {
            rule.validate()
                .map_err(<toml::de::Error as serde::de::Error>::custom)?;
        }
        if let Some(patterns) = &policy.fenced_ref_issue {
            crate::hooks::fencing::compile_ref_issue(patterns)
                .map_err(<toml::de::Error as serde::de::Error>::custom)?;
        }
        Ok(policy)
    }

    /// Read `collab-policy.toml` from a repository directory; a missing file
    /// is the default policy, a bad one is a closed policy.
    pub fn load(repo_dir: &Path) -> RepoPolicy {
        let path = repo_dir.join(POLICY_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => match RepoPolicy::parse(&text) {
                Ok(p) => p,
                Err(e) => {
                    let reason = format!("{}: {}", path.display(), e.message());
                    tracing::error!("bad repository policy, closing the repository: {reason}");
                    RepoPolicy::closed(reason)
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => RepoPolicy::default(),
            Err(e) => {
                let reason = format!("{}: {e}", path.display());
                tracing::error!("unreadable repository policy, closing the repository: {reason}");
                RepoPolicy::closed(reason)
            }
        }
    }

    fn list_allows(list: &[String], principal: &str) -> bool {
        list.iter().any(|p| p == "*" || p == principal)
    }

    pub fn allows_read(&self, principal: &str) -> bool {
        Self::list_allows(&self.read, principal) || self.allows_checks(principal)
    }

    /// Posting commit checks: the `checks` list, or write.
    pub fn allows_checks(&self, principal: &str) -> bool {
        Self::list_allows(&self.checks, principal) || self.allows_write(principal)
    }

    pub fn allows_write(&self, principal: &str) -> bool {
        Self::list_allows(&self.write, principal) || self.allows_rewind(principal)
    }

    pub fn allows_rewind(&self, principal: &str) -> bool {
        Self::list_allows(&self.rewind, principal)
    }
}

/// Why a repository name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("repository name is empty")]
    Empty,
    #[error("repository name is too long")]
    TooLong,
    #[error("repository name has an empty segment")]
    EmptySegment,
    #[error("repository name may not contain a '.' or '..' segment")]
    DotSegment,
    #[error("repository names use only letters, digits, '.', '_', '-' and '/'")]
    BadChar,
}

/// Validate a requested name and return it in canonical form: no leading
/// `/`, segments checked, suffix untouched. `"/team/app.git"` ->
/// `"team/app.git"`.
pub fn normalize_repo_name(requested: &str) -> Result<String, NameError> {
    let name = requested.strip_prefix('/').unwrap_or(requested);
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong);
    }
    for segment in name.split('/') {
        if segment.is_empty() {
            return Err(NameError::EmptySegment);
        }
        if segment == "." || segment == ".." {
            return Err(NameError::DotSegment);
        }
        if !segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(NameError::BadChar);
        }
    }
    // `x/.git` would make the last segment `.git`: allowed characters, but
    // stripping the suffix would leave an empty segment.
    if name == ".git" || name.ends_with("/.git") {
        return Err(NameError::EmptySegment);
    }
    Ok(name.to_string())
}

/// Whether a directory looks like a bare git repository.
pub fn is_bare_repo(dir: &Path) -> bool {
    dir.join("HEAD").is_file() && dir.join("objects").is_dir() && dir.join("refs").is_dir()
}

/// Whether `path` (canonical) is a repository the server serves: a bare
/// repository strictly inside `root` (canonical) none of whose ancestors
/// below `root` is a repository. This is exactly what `list_repos` finds
/// and `create_repo_in` makes.
fn is_top_level_repo(root: &Path, path: &Path) -> bool {
    if !path.starts_with(root) || path == root || !is_bare_repo(path) {
        return false;
    }
    path.ancestors()
        .skip(1)
        .take_while(|dir| *dir != root)
        .all(|dir| !is_bare_repo(dir))
}

/// Map a requested name to the canonical path of an existing bare repository
/// inside `repos_dir`. `None` when the name is invalid, the repository does
/// not exist, the path would leave `repos_dir` (`..`, absolute paths,
/// symlinks pointing elsewhere), or it lies inside another repository.
pub fn resolve_repo_path(repos_dir: &Path, requested: &str) -> Option<PathBuf> {
    let name = normalize_repo_name(requested).ok()?;
    let root = repos_dir.canonicalize().ok()?;
    let mut candidates = vec![name.clone()];
    if !name.ends_with(".git") {
        candidates.push(format!("{name}.git"));
    }
    for candidate in candidates {
        let Ok(path) = root.join(&candidate).canonicalize() else {
            continue;
        };
        if is_top_level_repo(&root, &path) {
            return Some(path);
        }
    }
    None
}

/// The entry for a path returned by `resolve_repo_path`: canonical name and
/// policy. `None` if the path is not a repository inside `repos_dir`.
pub fn entry_for_path(repos_dir: &Path, resolved: &Path) -> Option<RepoEntry> {
    let root = repos_dir.canonicalize().ok()?;
    let path = resolved.canonicalize().ok()?;
    let relative = path.strip_prefix(&root).ok()?;
    let name = relative.to_str()?.to_string();
    normalize_repo_name(&name).ok()?;
    if !is_top_level_repo(&root, &path) {
        return None;
    }
    let policy = RepoPolicy::load(&path);
    Some(RepoEntry { name, path, policy })
}

/// Resolve and describe a repository in one step.
pub fn find_repo(repos_dir: &Path, requested: &str) -> Option<RepoEntry> {
    let path = resolve_repo_path(repos_dir, requested)?;
    entry_for_path(repos_dir, &path)
}

/// Every repository under `repos_dir`, sorted by name. Symlinks are not
/// followed and a repository's own subdirectories are not searched.
pub fn list_repos(repos_dir: &Path) -> Vec<RepoEntry> {
    let Ok(root) = repos_dir.canonicalize() else {
        return Vec::new();
    };
    let mut names = BTreeSet::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        for item in read.flatten() {
            let Ok(kind) = item.file_type() else { continue };
            if !kind.is_dir() {
                continue;
            }
            let path = item.path();
            let Some(rel) = path.strip_prefix(&root).ok().and_then(|r| r.to_str()) else {
                continue;
            };
            if normalize_repo_name(rel).is_err() {
                continue;
            }
            if is_bare_repo(&path) {
                names.insert(rel.to_string());
            } else {
                stack.push(path);
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            let path = root.join(&name);
            let policy = RepoPolicy::load(&path);
            RepoEntry { name, path, policy }
        })
        .collect()
}

/// Why a repository could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("invalid repository name: {0}")]
    Name(#[from] NameError),
    #[error("repository already exists: {0}")]
    Exists(String),
    #[error("a repository cannot be created inside another repository")]
    Nested,
    #[error("{0:#}")]
    Io(anyhow::Error),
}

/// Create a bare repository `name` (normalized to end in `.git`) under
/// `repos_dir`, with `HEAD` on `main`; errors if the name is invalid or the
/// repository exists. The repository is built in a scratch directory beside
/// the target and renamed into place, so a failure leaves nothing behind.
pub fn create_repo(config: &ServerConfig, name: &str) -> anyhow::Result<(String, PathBuf)> {
    Ok(create_repo_in(&config.repos_dir, name)?)
}

/// `create_repo` on a bare `repos_dir`; returns the canonical name and path.
pub fn create_repo_in(repos_dir: &Path, name: &str) -> Result<(String, PathBuf), CreateError> {
    let mut name = normalize_repo_name(name)?;
    if !name.ends_with(".git") {
        name.push_str(".git");
    }
    let short = name.trim_end_matches(".git").to_string();
    std::fs::create_dir_all(repos_dir)
        .with_context(|| format!("creating {}", repos_dir.display()))
        .map_err(CreateError::Io)?;
    let target = repos_dir.join(&name);
    // `r` and `r.git` name the same repository.
    if target.exists() || is_bare_repo(&repos_dir.join(&short)) {
        return Err(CreateError::Exists(name));
    }
    // A repository inside another repository's directory would be served
    // from its objects dir's neighbour: refuse.
    let mut ancestor = target.parent();
    while let Some(dir) = ancestor {
        if dir == repos_dir {
            break;
        }
        if is_bare_repo(dir) {
            return Err(CreateError::Nested);
        }
        ancestor = dir.parent();
    }
    let parent = target.parent().unwrap_or(repos_dir).to_path_buf();
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("creating {}", parent.display()))
        .map_err(CreateError::Io)?;
    // Never leave the tree: the parent must still be inside repos_dir once
    // symlinks are resolved.
    let root = repos_dir
        .canonicalize()
        .map_err(|e| CreateError::Io(e.into()))?;
    let real_parent = parent
        .canonicalize()
        .map_err(|e| CreateError::Io(e.into()))?;
    if !real_parent.starts_with(&root) {
        return Err(CreateError::Name(NameError::DotSegment));
    }
    // '#' cannot appear in a repository name, so the scratch directory can
    // never be resolved or listed as a repository.
    let scratch = real_parent.join(format!(".#creating-{}", rand::random::<u64>()));
    let result = (|| -> anyhow::Result<()> {
        let mut opts = git2::RepositoryInitOptions::new();
        opts.bare(true).initial_head("main").no_reinit(true);
        git2::Repository::init_opts(&scratch, &opts)
            .with_context(|| format!("initializing {}", scratch.display()))?;
        std::fs::rename(&scratch, &target)
            .with_context(|| format!("moving the new repository to {}", target.display()))?;
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&scratch);
        return Err(CreateError::Io(e));
    }
    let path = target
        .canonicalize()
        .map_err(|e| CreateError::Io(e.into()))?;
    Ok((name, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_with_a_bad_required_check_name_is_refused() {
        let ok = RepoPolicy::parse("merge = { required_checks = [\"ci/test\"] }\n").unwrap();
        assert_eq!(ok.merge.unwrap().required_checks, ["ci/test"]);
        let e = RepoPolicy::parse("merge = { required_checks = [\"ci test\"] }\n").unwrap_err();
        assert!(e.message().contains("required_checks"), "{e}");
        let checks = RepoPolicy::parse("checks = [\"SHA256:ci\"]\nwrite = []\n").unwrap();
        assert!(checks.allows_checks("SHA256:ci") && !checks.allows_write("SHA256:ci"));
        assert!(checks.allows_read("SHA256:ci"));
    }

    #[test]
    fn normalizes_and_validates_names() {
        assert_eq!(normalize_repo_name("/r.git").unwrap(), "r.git");
        assert_eq!(normalize_repo_name("team/app").unwrap(), "team/app");
        assert_eq!(normalize_repo_name("a_b-c.d").unwrap(), "a_b-c.d");
        for bad in [
            "",
            "/",
            "//r",
            "a//b",
            "../r",
            "a/../b",
            ".",
            "a/.",
            "/etc/passwd/..",
            "r;x",
            "r x",
            "r\0",
            "~r",
            "a\\b",
            ".git",
            "a/.git",
            "é",
        ] {
            assert!(normalize_repo_name(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            normalize_repo_name(&"a".repeat(MAX_NAME_LEN + 1)),
            Err(NameError::TooLong)
        );
    }

    #[test]
    fn resolves_inside_repos_dir_only() {
        let tmp = tempfile::tempdir().unwrap();
        let repos = tmp.path().join("repos");
        create_repo_in(&repos, "r").unwrap();
        create_repo_in(&repos, "team/app.git").unwrap();
        let outside = tmp.path().join("outside.git");
        git2::Repository::init_bare(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, repos.join("link.git")).unwrap();

        let r = resolve_repo_path(&repos, "r").unwrap();
        assert_eq!(r, resolve_repo_path(&repos, "/r.git").unwrap());
        assert!(resolve_repo_path(&repos, "team/app").is_some());
        assert!(resolve_repo_path(&repos, "team").is_none());
        assert!(resolve_repo_path(&repos, "link.git").is_none());
        assert!(resolve_repo_path(&repos, "../outside.git").is_none());
        assert!(resolve_repo_path(&repos, "missing").is_none());
        let entry = entry_for_path(&repos, &r).unwrap();
        assert_eq!(entry.name, "r.git");
        assert_eq!(entry.short_name(), "r");
        let names: Vec<_> = list_repos(&repos).into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec!["r.git", "team/app.git"]);
    }

    #[test]
    fn a_directory_inside_a_repository_is_never_one() {
        let tmp = tempfile::tempdir().unwrap();
        let repos = tmp.path().join("repos");
        create_repo_in(&repos, "secret").unwrap();
        // What pushing refs/x/HEAD, refs/x/objects/keep, refs/x/refs/keep
        // leaves on disk: a directory that looks like a bare repository.
        let inner = repos.join("secret.git/refs/x");
        std::fs::create_dir_all(inner.join("objects")).unwrap();
        std::fs::create_dir_all(inner.join("refs")).unwrap();
        std::fs::write(
            inner.join("HEAD"),
            "0000000000000000000000000000000000000000\n",
        )
        .unwrap();
        assert!(is_bare_repo(&inner));
        assert!(resolve_repo_path(&repos, "secret.git/refs/x").is_none());
        assert!(resolve_repo_path(&repos, "secret/refs/x").is_none());
        assert!(entry_for_path(&repos, &inner).is_none());
        assert!(resolve_repo_path(&repos, "secret").is_some());
        // A symlink elsewhere in the namespace does not launder it either.
        std::os::unix::fs::symlink(&inner, repos.join("alias.git")).unwrap();
        assert!(resolve_repo_path(&repos, "alias").is_none());
        let names: Vec<_> = list_repos(&repos).into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec!["secret.git"]);
    }

    #[test]
    fn create_refuses_existing_and_leaves_no_scratch() {
        let tmp = tempfile::tempdir().unwrap();
        let repos = tmp.path().join("repos");
        create_repo_in(&repos, "r").unwrap();
        assert!(matches!(
            create_repo_in(&repos, "r.git"),
            Err(CreateError::Exists(_))
        ));
        assert!(matches!(
            create_repo_in(&repos, "../x"),
            Err(CreateError::Name(_))
        ));
        let leftovers: Vec<_> = std::fs::read_dir(&repos)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".#"))
            .collect();
        assert!(leftovers.is_empty());
        let head = std::fs::read_to_string(repos.join("r.git/HEAD")).unwrap();
        assert_eq!(head.trim(), "ref: refs/heads/main");
    }

    #[test]
    fn policy_defaults_and_levels() {
        let p = RepoPolicy::default();
        assert!(p.allows_write("SHA256:x") && !p.allows_rewind("SHA256:x") && !p.public);
        let p = RepoPolicy::parse(
            "read = [\"SHA256:r\"]\nwrite = [\"SHA256:w\"]\nrewind = [\"SHA256:x\"]\npublic = true\n",
        )
        .unwrap();
        assert!(p.allows_read("SHA256:r") && !p.allows_write("SHA256:r"));
        assert!(p.allows_read("SHA256:w") && p.allows_write("SHA256:w"));
        assert!(p.allows_rewind("SHA256:x") && p.allows_read("SHA256:x"));
        assert!(!p.allows_read("SHA256:other"));
        assert!(RepoPolicy::parse("reed = []").is_err());
        let p = RepoPolicy::parse("fenced_refs = [\"refs/heads/issue/*\"]\n").unwrap();
        assert_eq!(p.fenced_refs, ["refs/heads/issue/*"]);
        let err = RepoPolicy::parse("fenced_refs = [\"refs/[\"]\n").unwrap_err();
        assert!(err.to_string().contains("fenced_refs"), "{err}");
        let p =
            RepoPolicy::parse("merge = { approvals = 1, author_may_approve = true }\n").unwrap();
        let rule = p.merge.unwrap();
        assert_eq!((rule.approvals, rule.author_may_approve), (1, true));
        assert!(rule.no_changes_requested, "unset keys keep their default");
        assert!(RepoPolicy::parse("merge = { approvals = 1, quorum = 2 }\n").is_err());
        assert!(
            !rule.others_may_revise,
            "others_may_revise is off by default"
        );
        let p = RepoPolicy::parse("merge = { others_may_revise = true }\n").unwrap();
        assert!(p.merge.unwrap().others_may_revise);
        assert_eq!(RepoPolicy::default().fenced_ref_issue, None);
        let p = RepoPolicy::parse("fenced_ref_issue = [\"refs/heads/t/{issue}\"]\n").unwrap();
        assert_eq!(p.fenced_ref_issue.unwrap(), ["refs/heads/t/{issue}"]);
        let err = RepoPolicy::parse("fenced_ref_issue = [\"refs/heads/t/*\"]\n").unwrap_err();
        assert!(err.to_string().contains("fenced_ref_issue"), "{err}");
    }

    #[test]
    fn bad_policy_file_closes_the_repo() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(POLICY_FILE), "read = 3").unwrap();
        let p = RepoPolicy::load(tmp.path());
        assert!(p.broken.is_some());
        assert!(!p.allows_read("SHA256:any"));
    }
}
