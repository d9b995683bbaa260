//! Commits no ref reaches (issue 44): a branch deleted or force-pushed
//! away takes its commits out of every answer, although their objects stay
//! on disk until maintenance prunes them. Fetching one by id (protocol v2
//! over SSH and smart HTTP, the pack cache on and off) is refused as an
//! unknown id is; the web's commit, tree, raw and archive pages answer
//! 404; maintenance drops them after the grace period. Reachable commits
//! that are no ref's tip, and a partial clone's blob fetches, still work.
//! Runs once: nothing here is in the collab database.

use std::path::Path;
use std::time::{Duration, SystemTime};

use collab_testkit as common;
use collab_testkit::web as web_support;
use common::{HarnessOptions, ServerHarness};

fn server(env: &[(&str, &str)]) -> ServerHarness {
    ServerHarness::start_with(HarnessOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    })
}

/// A public repository `app` with two commits on `main`; a commit with a
/// secret pushed on a branch then deleted, and one pushed on `main` then
/// force-pushed away. (the clone, a reachable non-tip, the two orphans).
fn orphans(h: &ServerHarness) -> (std::path::PathBuf, String, String, String) {
    let (clone, first, second) = web_support::public_repo_with_content(h, "app");
    h.git(&clone, &["checkout", "-q", "-b", "leak"]);
    let deleted = h.commit_file(&clone, "secret.txt", b"password=hunter2\n", "oops");
    h.ssh_push(&clone, &["leak"]);
    h.ssh_push(&clone, &[":leak"]);
    h.git(&clone, &["checkout", "-q", "main"]);
    let replaced = h.commit_file(&clone, "key.pem", b"PRIVATE KEY\n", "oops again");
    h.ssh_push(&clone, &["main"]);
    h.git(&clone, &["reset", "-q", "--hard", &second]);
    h.ssh_push(&clone, &["+main"]);
    (clone, first, deleted, replaced)
}

/// `git fetch <url> <id>` into a fresh repository; (success, stderr).
fn fetch_id(h: &ServerHarness, url: &str, id: &str, name: &str) -> (bool, String) {
    let dir = h.temp_dir().join(name);
    h.git(
        h.temp_dir(),
        &["init", "-q", "--bare", dir.to_str().unwrap()],
    );
    let out = h.git_as(&h.ssh_client_key(), &dir, &["fetch", "-q", url, id]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check_fetches(h: &ServerHarness, first: &str, orphans: &[&str], tag: &str) {
    let unknown = "1234567890123456789012345678901234567890";
    let urls = [
        ("ssh", h.repo_url("app")),
        ("http", format!("{}/app.git", h.http_url())),
    ];
    for (transport, url) in &urls {
        let (ok, stderr) = fetch_id(h, url, first, &format!("{tag}-{transport}-first"));
        assert!(ok, "{tag} {transport}: a reachable commit: {stderr}");
        let (ok, stderr) = fetch_id(h, url, unknown, &format!("{tag}-{transport}-unknown"));
        assert!(
            !ok && stderr.contains("not our ref"),
            "{tag} {transport}: {stderr}"
        );
        for (n, id) in orphans.iter().enumerate() {
            // Twice: the second would be a pack cache hit.
            for round in 0..2 {
                let (ok, stderr) =
                    fetch_id(h, url, id, &format!("{tag}-{transport}-orphan{n}-{round}"));
                assert!(!ok, "{tag} {transport}: orphan {id} was fetched");
                assert!(
                    stderr.contains(&format!("not our ref {id}")),
                    "{tag} {transport}: {stderr}"
                );
                assert!(!stderr.contains("hunter2"), "{stderr}");
            }
        }
    }
}

#[test]
fn commits_no_ref_reaches_are_not_fetched_or_shown_and_are_pruned() {
    let h = server(&[("GIT_COLLAB_GIT__PACK_CACHE_MIN_OCCURRENCES", "1")]);
    let (_clone, first, deleted, replaced) = orphans(&h);
    let repo_dir = h.repos_dir().join("app.git");
    for id in [&deleted, &replaced] {
        let out = h.git(&repo_dir, &["cat-file", "-t", id]);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "commit");
    }
    check_fetches(&h, &first, &[&deleted, &replaced], "cached");

    // A partial clone fetches blobs by id later: still served.
    let partial = h.temp_dir().join("partial");
    let out = web_support::git_http(
        &h,
        h.temp_dir(),
        &[
            "clone",
            "-q",
            "--filter=blob:none",
            &format!("{}/app.git", h.http_url()),
            partial.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(partial.join("src/main.rs").is_file());

    // The web: 404 exactly as for an unknown id; the reachable one is shown.
    assert_eq!(
        web_support::get(&h, &format!("/app/-/commit/{first}")).status,
        200
    );
    let unknown = web_support::get(&h, "/app/-/commit/1234567890123456789012345678901234567890");
    assert_eq!(unknown.status, 404);
    for id in [&deleted, &replaced] {
        for path in [
            format!("/app/-/commit/{id}"),
            format!("/app/-/commit/{id}.patch"),
            format!("/app/-/commit/{id}.diff"),
            format!("/app/-/commit/{}", &id[..12]),
            format!("/app/-/tree/{id}"),
            format!("/app/-/blob/{id}/secret.txt"),
            format!("/app/-/raw/{id}/secret.txt"),
            format!("/app/-/raw/{id}/key.pem"),
            format!("/app/-/log/{id}"),
            format!("/app/-/archive/{id}.tar.gz"),
        ] {
            let page = web_support::get(&h, &path);
            assert_eq!(page.status, 404, "{path}");
            assert!(!page.text().contains("hunter2"), "{path}");
            assert!(!page.text().contains("PRIVATE KEY"), "{path}");
        }
        let page = web_support::get(&h, &format!("/app/-/commit/{id}"));
        assert_eq!(
            page.text(),
            unknown
                .text()
                .replace("1234567890123456789012345678901234567890", id)
        );
    }

    // Maintenance: a pruning run drops what no ref reaches once it is past
    // the grace period (two days, by the files' times)...
    let gc = || {
        let out = h.ssh_exec("collab-repo gc 'app'");
        assert_eq!(out.code, 0, "{out:?}");
    };
    let on_disk = |id: &str| {
        h.git_as(&h.ssh_client_key(), &repo_dir, &["cat-file", "-e", id])
            .status
            .success()
    };
    age(
        &repo_dir.join("objects"),
        Duration::from_secs(3 * 24 * 3600),
    );
    gc();
    for id in [&deleted, &replaced] {
        assert!(!on_disk(id), "{id} is still on disk");
    }
    // ...and keeps a young one (a push landing is young too).
    let clone = h.clone_repo("app", "young");
    h.git(&clone, &["checkout", "-q", "-b", "young"]);
    let young = h.commit_file(&clone, "young.txt", b"young\n", "young");
    h.ssh_push(&clone, &["young"]);
    h.ssh_push(&clone, &[":young"]);
    age(
        &repo_dir.join("objects/info"),
        Duration::from_secs(2 * 24 * 3600),
    );
    gc();
    assert!(on_disk(&young), "a young orphan was pruned");
    let out = h.git_as(&h.ssh_client_key(), &repo_dir, &["fsck", "--no-progress"]);
    assert!(out.status.success(), "{out:?}");
    let again = h.clone_repo("app", "after-prune");
    assert!(again.join("src/main.rs").is_file());
    check_fetches(&h, &first, &[], "pruned");
}

/// With the pack cache off, upload-pack holds the SSH conversation
/// itself (no server-side answers): the same refusal.
#[test]
fn commits_no_ref_reaches_are_refused_with_the_pack_cache_off() {
    let h = server(&[("GIT_COLLAB_GIT__PACK_CACHE", "false")]);
    let (_clone, first, deleted, replaced) = orphans(&h);
    check_fetches(&h, &first, &[&deleted, &replaced], "off");
}

/// Set the modification time of every file under `dir` to `ago` ago.
fn age(dir: &Path, ago: Duration) {
    let when = SystemTime::now() - ago;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            age(&path, ago);
        } else if let Ok(f) = std::fs::File::options().write(true).open(&path) {
            f.set_modified(when).unwrap();
        } else {
            // Read-only pack files: open for reading is enough to set times.
            let f = std::fs::File::open(&path).unwrap();
            f.set_modified(when).unwrap();
        }
    }
}
