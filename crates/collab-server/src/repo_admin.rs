//! Changing a served repository on disk: description, visibility (the
//! ungoverned policy file), HEAD, rename and delete. Who may do it is
//! `authz`'s decision and what the collab database holds for the
//! repository is `collab_store::repos`'; this module only touches the filesystem,
//! each change all-or-nothing (write a temp file, then rename).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use crate::repos::{self, RepoEntry, POLICY_FILE};

/// Longest description accepted, in bytes.
pub const MAX_DESCRIPTION: usize = 1024;

/// What git writes into a new repository's `description`; shown as none.
const GIT_DEFAULT_DESCRIPTION: &str =
    "Unnamed repository; edit this file 'description' to name the repository.";

/// The repository's description (git's `description` file), if set.
pub fn description(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path.join("description")).ok()?;
    let text = text.trim();
    (!text.is_empty() && text != GIT_DEFAULT_DESCRIPTION).then(|| text.to_string())
}

/// Check a description: one line, printable, at most [`MAX_DESCRIPTION`].
pub fn check_description(text: &str) -> Result<(), String> {
    if text.len() > MAX_DESCRIPTION {
        return Err(format!(
            "description is {} bytes; at most {MAX_DESCRIPTION}",
            text.len()
        ));
    }
    if text.chars().any(char::is_control) {
        return Err("description must be one line without control characters".into());
    }
    collab_record::text::check_line("description", text)
}

/// Replace the description (empty clears it).
pub fn set_description(path: &Path, text: &str) -> anyhow::Result<()> {
    write_atomically(&path.join("description"), format!("{text}\n").as_bytes())
}

/// Set `public` in the ungoverned policy file, keeping everything else in
/// it (comments included).
pub fn set_public(path: &Path, public: bool) -> anyhow::Result<()> {
    let file = path.join(POLICY_FILE);
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
    };
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{} does not parse; fix it by hand first", file.display()))?;
    doc["public"] = toml_edit::value(public);
    let out = doc.to_string();
    // Never write a policy the server would then read as broken (closed).
    repos::RepoPolicy::parse(&out).context("the updated policy would not parse")?;
    write_atomically(&file, out.as_bytes())
}

/// Point HEAD at an existing branch.
pub fn set_head(path: &Path, branch: &str) -> anyhow::Result<()> {
    let repo = git2::Repository::open_bare(path)?;
    let refname = format!("refs/heads/{branch}");
    if !git2::Reference::is_valid_name(&refname) || repo.find_reference(&refname).is_err() {
        bail!("no branch {branch:?} in this repository");
    }
    repo.set_head(&refname)?;
    Ok(())
}

/// After a push: when HEAD names a branch that does not exist and some
/// branch does, point HEAD at the branch a user would expect (the only one,
/// else `main`, else `master`, else the first by name), so a repository
/// whose branch is not `main` does not look empty. Returns the new branch.
pub fn repair_dangling_head(path: &Path) -> anyhow::Result<Option<String>> {
    let repo = git2::Repository::open_bare(path)?;
    let head = repo.find_reference("HEAD")?;
    let Some(target) = head.symbolic_target().ok().flatten() else {
        return Ok(None); // detached: the operator's choice
    };
    if repo.find_reference(target).is_ok() {
        return Ok(None);
    }
    let mut branches: Vec<String> = repo
        .references_glob("refs/heads/*")?
        .filter_map(|r| r.ok()?.name().ok().map(str::to_string))
        .collect();
    branches.sort();
    let pick = if branches.len() == 1 {
        branches.first()
    } else {
        ["refs/heads/main", "refs/heads/master"]
            .iter()
            .find_map(|want| branches.iter().find(|b| b == want))
            .or(branches.first())
    };
    let Some(pick) = pick else { return Ok(None) };
    repo.set_head(pick)?;
    Ok(pick.strip_prefix("refs/heads/").map(str::to_string))
}

/// Move repository `entry` to `new_name` (normalized, `.git` added) inside
/// `repos_dir`; returns the new canonical name. Refuses an existing target
/// or a target inside another repository.
pub fn rename(repos_dir: &Path, entry: &RepoEntry, new_name: &str) -> anyhow::Result<String> {
    let mut name = repos::normalize_repo_name(new_name).map_err(|e| anyhow::anyhow!("{e}"))?;
    if !name.ends_with(".git") {
        name.push_str(".git");
    }
    let short = name.trim_end_matches(".git");
    let target = repos_dir.join(&name);
    if target.exists() || repos_dir.join(short).exists() {
        bail!("a repository named {name} already exists");
    }
    let mut ancestor = target.parent();
    while let Some(dir) = ancestor {
        if dir == repos_dir {
            break;
        }
        if dir.join("HEAD").is_file() && dir.join("objects").is_dir() {
            bail!("a repository cannot be moved inside another repository");
        }
        ancestor = dir.parent();
    }
    let parent = target.parent().unwrap_or(repos_dir);
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let root = repos_dir.canonicalize()?;
    if !parent.canonicalize()?.starts_with(&root) {
        bail!("invalid repository name");
    }
    std::fs::rename(&entry.path, &target)
        .with_context(|| format!("moving {} to {}", entry.path.display(), target.display()))?;
    Ok(name)
}

/// Take repository `entry` out of service at once (a rename into
/// `trash_dir`, outside `repos_dir`, so it can never be served again) and
/// then remove it. Returns where it was moved if removal failed.
pub fn delete(entry: &RepoEntry, trash_dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(trash_dir)
        .with_context(|| format!("creating {}", trash_dir.display()))?;
    let parked: PathBuf = trash_dir.join(format!(
        "{}-{:016x}",
        entry.name.replace('/', "_"),
        rand::random::<u64>()
    ));
    match std::fs::rename(&entry.path, &parked) {
        Ok(()) => std::fs::remove_dir_all(&parked)
            .with_context(|| format!("removing {}", parked.display())),
        // Another filesystem: remove in place.
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => std::fs::remove_dir_all(&entry.path)
            .with_context(|| format!("removing {}", entry.path.display())),
        Err(e) => Err(e).with_context(|| format!("moving {} aside", entry.path.display())),
    }
}

/// Write `bytes` to `path` through a temp file and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("tmp-{:016x}", rand::random::<u64>()));
    let result = (|| {
        std::fs::write(&tmp, bytes)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dangling_head_moves_to_the_only_branch_and_prefers_main_then_master() {
        let tmp = tempfile::tempdir().unwrap();
        let repos = tmp.path();
        let (_, path) = repos::create_repo_in(repos, "r").unwrap();
        let repo = git2::Repository::open_bare(&path).unwrap();
        assert_eq!(repair_dangling_head(&path).unwrap(), None, "no branch yet");
        let sig = git2::Signature::now("t", "t@t").unwrap();
        let tree = repo
            .find_tree(repo.treebuilder(None).unwrap().write().unwrap())
            .unwrap();
        let c = repo.commit(None, &sig, &sig, "m", &tree, &[]).unwrap();
        repo.reference("refs/heads/trunk", c, false, "").unwrap();
        assert_eq!(
            repair_dangling_head(&path).unwrap().as_deref(),
            Some("trunk")
        );
        assert_eq!(
            repair_dangling_head(&path).unwrap(),
            None,
            "HEAD is fine now"
        );
        repo.set_head("refs/heads/gone").unwrap();
        repo.reference("refs/heads/master", c, false, "").unwrap();
        assert_eq!(
            repair_dangling_head(&path).unwrap().as_deref(),
            Some("master")
        );
    }

    #[test]
    fn visibility_keeps_the_rest_of_the_policy() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join(POLICY_FILE),
            "# who may push\nwrite = [\"SHA256:abc\"]\n",
        )
        .unwrap();
        set_public(tmp.path(), true).unwrap();
        let text = std::fs::read_to_string(tmp.path().join(POLICY_FILE)).unwrap();
        assert!(text.contains("# who may push"), "{text}");
        let policy = repos::RepoPolicy::parse(&text).unwrap();
        assert!(policy.public);
        assert_eq!(policy.write, vec!["SHA256:abc".to_string()]);
    }

    #[test]
    fn descriptions_are_one_bounded_line() {
        assert!(check_description("A forge").is_ok());
        assert!(check_description("two\nlines").is_err());
        assert!(check_description("\u{1b}[2J").is_err());
        assert!(check_description(&"x".repeat(MAX_DESCRIPTION + 1)).is_err());
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(description(tmp.path()), None);
        set_description(tmp.path(), "A forge").unwrap();
        assert_eq!(description(tmp.path()).as_deref(), Some("A forge"));
    }
}
