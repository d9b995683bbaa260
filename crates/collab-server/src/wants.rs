//! Which commits a fetch may ask for (issue 44). Protocol v2's `fetch`
//! takes a `want` of any object the repository holds: git checks no
//! reachability there, whatever `uploadpack.allow*SHA1InWant` say (those
//! govern protocol v0 only). A commit deleted or force-pushed away (a
//! leaked secret) therefore stayed fetchable by its id until a prune.
//!
//! Every `git upload-pack` the server runs, over SSH and smart HTTP, hands
//! its wants to the pack-objects hook (`pack_cache`), which calls
//! [`check`] before it sends a byte, cached or not: a want that is a
//! commit (or a tag of one) must be reachable from some ref of the
//! repository. Every ref counts: a reader of a repository may read all of
//! its refs (`refs/collab/*`, a patch's revision refs) and the server
//! hides none from upload-pack. Trees and blobs are not checked: a
//! partial clone (`--filter=blob:none`) fetches them by id later, knowing
//! them only from trees it was given; the id of a tree or blob of a
//! refused commit cannot be learnt from the server. Maintenance prunes
//! unreachable objects after a grace period (`maintenance::run`).
//!
//! The check is one libgit2 walk in the hook's own process (no `git`
//! process per request: a cache hit stays one hook process): the wanted
//! commits pushed, every ref hidden; it yields a commit exactly when some
//! want reaches a commit no ref reaches, and stops where the wants'
//! history meets the refs' (wants that are ref tips end it at once).

/// The wants of a pack-objects `--revs` request, as upload-pack writes it:
/// `--shallow <id>` lines, then one id per want, then `--not` and the
/// haves. `None` when the `--not` line is not in `request` (a request cut
/// short: its wants cannot all be known).
pub fn of_request(request: &[u8]) -> Option<Vec<String>> {
    let mut wants = Vec::new();
    for line in request.split(|&b| b == b'\n') {
        let line = std::str::from_utf8(line).ok()?;
        if line == "--not" {
            return Some(wants);
        }
        if line.starts_with("--") || line.is_empty() {
            continue;
        }
        wants.push(line.to_string());
    }
    None
}

/// Whether every commit `wants` reaches is reachable from a ref of the
/// repository upload-pack runs the hook in (`GIT_DIR`, the current
/// directory). `Err` carries the one line to give the client: the same
/// words as git's own refusal of an id the repository does not hold, so
/// the answer does not tell a deleted commit from one that never was.
/// Trees and blobs pass; a tag is judged by the commit it peels to.
pub fn check(wants: &[String]) -> Result<(), String> {
    let refuse = |id: &str| Err(format!("upload-pack: not our ref {id}"));
    if let Some(bad) = wants.iter().find(|w| !is_hex_id(w)) {
        return refuse(bad);
    }
    if wants.is_empty() {
        return Ok(());
    }
    let Ok(repo) = git2::Repository::open_from_env() else {
        // A repository libgit2 cannot open (the reftable backend): git
        // itself walks, in a process of its own.
        return match rev_list(wants) {
            Ok(None) => Ok(()),
            Ok(Some(_)) => refuse(&wants[0]),
            Err(e) => Err(format!("checking the wants: {e}")),
        };
    };
    let mut commits = Vec::with_capacity(wants.len());
    for want in wants {
        let Ok(object) = git2::Oid::from_str(want).and_then(|id| repo.find_object(id, None)) else {
            return refuse(want);
        };
        match object.kind() {
            Some(git2::ObjectType::Commit) => commits.push((want, object.id())),
            Some(git2::ObjectType::Tag) => {
                if let Ok(commit) = object.peel(git2::ObjectType::Commit) {
                    commits.push((want, commit.id()));
                }
            }
            _ => {}
        }
    }
    let ids: Vec<git2::Oid> = commits.iter().map(|(_, id)| *id).collect();
    match first_unreachable(&repo, &ids) {
        None => Ok(()),
        // The walk names the first commit it meets that no ref reaches,
        // which may be an ancestor of a want: name that want, else the
        // first.
        Some(found) => refuse(
            commits
                .iter()
                .find(|(_, id)| *id == found)
                .or(commits.first())
                .map_or(wants[0].as_str(), |(want, _)| want.as_str()),
        ),
    }
}

/// `git rev-list -n 1 --stdin --not --all` in the current directory:
/// the first commit reachable from `wants` and from no ref, if any (an
/// error, such as an id git does not hold, counts as one). Revisions read
/// from stdin are not negated by the command line's `--not`.
fn rev_list(wants: &[String]) -> std::io::Result<Option<String>> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    // git-args: fixed words only; the wants go on stdin, never as arguments.
    let mut child = Command::new("git")
        .args(["rev-list", "-n", "1", "--stdin", "--not", "--all"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped");
    let input: String = wants.iter().map(|w| format!("{w}\n")).collect();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let out = child.wait_with_output()?;
    let _ = feeder.join();
    if !out.status.success() {
        return Ok(Some(String::new()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().next().map(|l| l.trim().to_string()))
}

fn is_hex_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether some ref of `repo` reaches commit `id`, for the pages and
/// verbs that read a commit through libgit2 (the web's commit, tree, raw
/// and archive pages; `collab-check set`).
pub fn reachable(repo: &git2::Repository, id: git2::Oid) -> bool {
    first_unreachable(repo, &[id]).is_none()
}

/// The first commit reachable from `ids` and from no ref (an error
/// counts as `ids[0]`): one walk from `ids` with every ref hidden, which
/// stops where their history meets the refs'.
fn first_unreachable(repo: &git2::Repository, ids: &[git2::Oid]) -> Option<git2::Oid> {
    let first = *ids.first()?;
    let walk = || -> Result<Option<git2::Oid>, git2::Error> {
        let mut walk = repo.revwalk()?;
        for id in ids {
            walk.push(*id)?;
        }
        // `refs/*` (libgit2's `*` crosses `/`); refs to non-commits are
        // skipped.
        walk.hide_glob("*")?;
        let _ = walk.hide_head();
        walk.next().transpose()
    };
    walk().unwrap_or(Some(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wants_are_the_ids_before_not() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let req = format!("--shallow {b}\n{a}\n--not\n{b}\n\n");
        assert_eq!(of_request(req.as_bytes()), Some(vec![a.clone()]));
        // Cut before `--not`: the wants are not all known.
        assert_eq!(of_request(format!("{a}\n").as_bytes()), None);
        assert_eq!(
            check(&["../../etc".to_string()]),
            Err("upload-pack: not our ref ../../etc".to_string())
        );
    }

    /// A repository libgit2 cannot open (reftable refs): git walks
    /// instead, with the same answers.
    #[test]
    fn a_reftable_repository_is_checked_by_git_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("r.git");
        let git = |args: &[&str], input: &str| -> String {
            use std::io::Write as _;
            let mut child = std::process::Command::new("git")
                .args(args)
                .current_dir(tmp.path())
                .env("GIT_AUTHOR_NAME", "T")
                .env("GIT_AUTHOR_EMAIL", "t@example.com")
                .env("GIT_COMMITTER_NAME", "T")
                .env("GIT_COMMITTER_EMAIL", "t@example.com")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "git {args:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        git(
            &["init", "-q", "--bare", "--ref-format=reftable", "r.git"],
            "",
        );
        let r = repo.to_str().unwrap();
        let tree = git(&["-C", r, "mktree"], "");
        let kept = git(&["-C", r, "commit-tree", &tree, "-m", "kept"], "");
        git(&["-C", r, "update-ref", "refs/heads/main", &kept], "");
        let orphan = git(
            &["-C", r, "commit-tree", &tree, "-p", &kept, "-m", "orphan"],
            "",
        );
        assert!(git2::Repository::open(&repo).is_err(), "libgit2 opened it");
        std::env::set_current_dir(&repo).unwrap();
        assert_eq!(check(std::slice::from_ref(&kept)), Ok(()));
        assert_eq!(
            check(std::slice::from_ref(&orphan)),
            Err(format!("upload-pack: not our ref {orphan}"))
        );
    }
}
