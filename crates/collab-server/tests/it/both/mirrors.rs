//! `collab-repo mirror add|list|sync|remove`: pull mirrors from a second
//! git-collab server (smart HTTP) and from a plain `git daemon`, push
//! mirrors to a `git daemon` with receive-pack and to a second server over
//! ssh with a key credential; force-pushed upstreams, an unreachable one
//! backing off, pushes to mirrored refs refused, the SSRF guard and the
//! transports never allowed, credentials never shown. Real servers, `git`,
//! `git daemon` and `ssh` on loopback.

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use collab_testkit as common;
use serde_json::Value;

use common::git_daemon::{free_port, GitDaemon};
use common::{HarnessOptions, ServerHarness, NOT_FOUND};

/// What a server whose mirrors may reach loopback (where every test
/// upstream runs) is given: failures retried after 1s, 2s, 4s, … at most 4s.
pub fn mirroring_options() -> HarnessOptions {
    HarnessOptions {
        env: vec![
            (
                "GIT_COLLAB_MIRRORS__ALLOWED_HOSTS".into(),
                "127.0.0.1".into(),
            ),
            ("GIT_COLLAB_MIRRORS__MIN_INTERVAL_SECS".into(), "1".into()),
            ("GIT_COLLAB_MIRRORS__MAX_BACKOFF_SECS".into(), "4".into()),
            ("GIT_COLLAB_MIRRORS__TIMEOUT_SECS".into(), "30".into()),
        ],
        ..Default::default()
    }
}

fn mirroring_server() -> ServerHarness {
    ServerHarness::start_with(mirroring_options())
}

/// Plain local git with a fixed identity and no user configuration.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Up")
        .env("GIT_AUTHOR_EMAIL", "up@example.com")
        .env("GIT_COMMITTER_NAME", "Up")
        .env("GIT_COMMITTER_EMAIL", "up@example.com")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A work tree at `dir` with one commit on `main`; its id.
fn work_tree(dir: &Path, content: &str) -> String {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    commit(dir, content)
}

fn commit(dir: &Path, content: &str) -> String {
    std::fs::write(dir.join("file.txt"), content).unwrap();
    git(dir, &["add", "file.txt"]);
    git(dir, &["commit", "-q", "-m", content]);
    git(dir, &["rev-parse", "HEAD"])
}

/// `refname` in the bare repository at `repo`, if it exists.
fn ref_of(repo: &Path, refname: &str) -> Option<String> {
    let out = Command::new("git")
        .args(["--git-dir"])
        .arg(repo)
        .args(["rev-parse", "--verify", "--quiet", refname])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn refs_of(repo: &Path) -> String {
    git(repo, &["for-each-ref", "--format=%(refname) %(objectname)"])
}

fn add_mirror(h: &ServerHarness, args: &str) -> Value {
    let out = h.ssh_exec(&format!("collab-repo mirror add {args}"));
    assert_eq!(out.code, 0, "{out:?}");
    out.json()["mirror"].clone()
}

fn list(h: &ServerHarness, repo: &str) -> Vec<Value> {
    let out = h.ssh_exec(&format!("collab-repo mirror list {repo}"));
    assert_eq!(out.code, 0, "{out:?}");
    out.json()["mirrors"].as_array().unwrap().clone()
}

/// `ref.updated` events of `repo` as `(ref, new, actor)`.
fn ref_events(h: &ServerHarness, repo: &str) -> Vec<(String, String, String)> {
    let out = h.ssh_exec(&format!(
        "collab-events watch {repo} --since 0 --no-follow --type ref.updated"
    ));
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout
        .lines()
        .map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            (
                e["payload"]["ref"].as_str().unwrap().to_string(),
                e["payload"]["new"].as_str().unwrap().to_string(),
                e["actor"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn public(h: &ServerHarness, repo: &str) {
    let out = h.ssh_exec(&format!("collab-repo visibility {repo} public"));
    assert_eq!(out.code, 0, "{out:?}");
}

/// A page as an anonymous reader gets it.
fn web_page(h: &ServerHarness, path: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20"])
        .arg(format!("{}/{path}", h.http_url()))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_pull_mirror_of_another_forge_follows_force_pushes_and_refuses_pushes() {
    let up = ServerHarness::start();
    up.create_repo("up");
    public(&up, "up");
    let seed = up.clone_repo("up", "seed");
    let first = up.commit_file(&seed, "a.txt", b"one\n", "one");
    up.git(&seed, &["tag", "v1"]);
    up.ssh_push(&seed, &["HEAD:refs/heads/main", "v1"]);

    let h = mirroring_server();
    h.create_repo("down");
    let url = format!("{}/up.git", up.http_url());
    let mirror = add_mirror(&h, &format!("down '{url}' --interval 1h"));
    let id = mirror["id"].as_str().unwrap().to_string();
    assert_eq!(mirror["direction"], "pull");
    assert_eq!(mirror["credential"], false);
    let sync = h.ssh_exec(&format!("collab-repo mirror sync down {id}"));
    assert_eq!(sync.code, 0, "{sync:?}");
    assert_eq!(sync.json()["synced"][0]["outcome"], "synced");
    let down = h.repos_dir().join("down.git");
    assert_eq!(
        ref_of(&down, "refs/heads/main").as_deref(),
        Some(first.as_str())
    );
    assert!(ref_of(&down, "refs/tags/v1").is_some());

    // The upstream rewrites main: the mirror follows.
    up.git(&seed, &["reset", "-q", "--hard", "HEAD"]);
    up.git(&seed, &["commit", "-q", "--amend", "-m", "one, rewritten"]);
    let rewritten = up.rev_parse(&seed, "HEAD");
    up.git(
        &seed,
        &["push", "-q", "--force", "origin", "HEAD:refs/heads/main"],
    );
    let sync = h.ssh_exec("collab-repo mirror sync down");
    assert_eq!(sync.code, 0, "{sync:?}");
    assert_eq!(ref_of(&down, "refs/heads/main"), Some(rewritten.clone()));

    // Each move is a ref.updated event by `mirror`.
    let events = ref_events(&h, "down");
    for (refname, new) in [("refs/heads/main", &first), ("refs/heads/main", &rewritten)] {
        assert!(
            events
                .iter()
                .any(|(r, n, a)| r == refname && n == new && a == "mirror"),
            "{events:?}"
        );
    }

    // A push to a mirrored ref is refused whole; the ref stays.
    let clone = h.clone_repo("down", "down-clone");
    h.commit_file(&clone, "b.txt", b"mine\n", "mine");
    let push = h.git_as(
        &h.ssh_client_key(),
        &clone,
        &[
            "push",
            "origin",
            "HEAD:refs/heads/main",
            "HEAD:refs/heads/other",
        ],
    );
    assert!(!push.status.success());
    let stderr = String::from_utf8_lossy(&push.stderr);
    assert!(stderr.contains("is a pull mirror"), "{stderr}");
    assert_eq!(ref_of(&down, "refs/heads/main"), Some(rewritten));
    assert_eq!(ref_of(&down, "refs/heads/other"), None);

    let listed = list(&h, "down");
    assert_eq!(listed.len(), 1);
    assert!(listed[0]["last_success_at"].is_string(), "{listed:?}");
    assert!(listed[0]["last_error"].is_null(), "{listed:?}");
    assert_eq!(listed[0]["failures"], 0);

    // Removed, the repository keeps its refs and takes pushes again.
    let removed = h.ssh_exec(&format!("collab-repo mirror remove down {id}"));
    assert_eq!(removed.code, 0, "{removed:?}");
    assert!(list(&h, "down").is_empty());
    h.ssh_push(&clone, &["HEAD:refs/heads/other"]);
    let again = h.ssh_exec(&format!("collab-repo mirror remove down {id}"));
    assert_eq!(
        (again.code, again.stderr.trim()),
        (1, "error: mirror not found")
    );
}

#[test]
fn a_pull_mirror_of_git_daemon_prunes_and_never_touches_the_forges_record_refs() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(&tmp.path().join("daemon"));
    let upstream = daemon.bare("up.git");
    let work = tmp.path().join("work");
    let main = work_tree(&work, "one");
    git(&work, &["branch", "gone"]);
    git(
        &work,
        &["push", "-q", upstream.to_str().unwrap(), "main", "gone"],
    );
    // The upstream has refs under refs/collab/ of its own.
    commit(&work, "two");
    git(
        &work,
        &[
            "push",
            "-q",
            upstream.to_str().unwrap(),
            "HEAD:refs/collab/export/issues/abcd",
            "HEAD:refs/collab/elsewhere",
        ],
    );

    let h = mirroring_server();
    h.create_repo("down");
    let down = h.repos_dir().join("down.git");
    // The forge's own record ref, which the upstream also names.
    git(
        &down,
        &[
            "fetch",
            "-q",
            upstream.to_str().unwrap(),
            "main:refs/heads/seed",
        ],
    );
    git(
        &down,
        &["update-ref", "refs/collab/export/issues/abcd", &main],
    );
    git(&down, &["update-ref", "-d", "refs/heads/seed"]);
    git(&down, &["update-ref", "refs/heads/stale", &main]);

    add_mirror(&h, &format!("down '{}'", daemon.url("up.git")));
    let sync = h.ssh_exec("collab-repo mirror sync down");
    assert_eq!(sync.code, 0, "{sync:?}");
    let refs = refs_of(&down);
    assert_eq!(
        ref_of(&down, "refs/heads/main"),
        Some(main.clone()),
        "{refs}"
    );
    assert!(ref_of(&down, "refs/heads/gone").is_some(), "{refs}");
    assert_eq!(ref_of(&down, "refs/heads/stale"), None, "pruned: {refs}");
    assert_eq!(
        ref_of(&down, "refs/collab/export/issues/abcd"),
        Some(main.clone()),
        "the forge's record is its own: {refs}"
    );
    assert_eq!(ref_of(&down, "refs/collab/elsewhere"), None, "{refs}");

    // A branch deleted upstream goes here too.
    git(&upstream, &["update-ref", "-d", "refs/heads/gone"]);
    assert_eq!(h.ssh_exec("collab-repo mirror sync down").code, 0);
    assert_eq!(ref_of(&down, "refs/heads/gone"), None);
    assert!(ref_events(&h, "down")
        .iter()
        .any(|(r, n, a)| r == "refs/heads/gone" && n.bytes().all(|b| b == b'0') && a == "mirror"));

    // A renamed repository keeps its mirror, under the new name.
    let renamed = h.ssh_exec("collab-repo rename down moved");
    assert_eq!(renamed.code, 0, "{renamed:?}");
    assert_eq!(list(&h, "moved").len(), 1);
    git(
        &work,
        &[
            "push",
            "-q",
            upstream.to_str().unwrap(),
            "HEAD:refs/heads/later",
        ],
    );
    assert_eq!(h.ssh_exec("collab-repo mirror sync moved").code, 0);
    let moved = h.repos_dir().join("moved.git");
    assert!(
        ref_of(&moved, "refs/heads/later").is_some(),
        "{}",
        refs_of(&moved)
    );
    let clone = h.clone_repo("moved", "moved-clone");
    let push = h.git_as(
        &h.ssh_client_key(),
        &clone,
        &["push", "origin", "HEAD:refs/heads/mine"],
    );
    assert!(!push.status.success(), "{push:?}");
}

#[test]
fn an_unreachable_upstream_backs_off_and_shows_its_error_in_the_list_and_on_the_web() {
    let h = mirroring_server();
    h.create_repo("down");
    public(&h, "down");
    // Nothing listens there.
    let url = format!("git://127.0.0.1:{}/nowhere.git", free_port());
    let id = add_mirror(&h, &format!("down '{url}' --interval 1h"))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let sync = h.ssh_exec(&format!("collab-repo mirror sync down {id}"));
    assert_eq!(sync.code, 1, "{sync:?}");
    assert!(
        sync.stderr
            .starts_with(&format!("error: mirror {id} failed: ")),
        "{sync:?}"
    );
    assert_eq!(sync.stderr.trim().lines().count(), 1, "{sync:?}");

    // The schedule retries on its own, backing off: 1s, 2s, 4s, 4s …
    wait_until("three failures in a row", || {
        list(&h, "down")[0]["failures"].as_i64().unwrap() >= 3
    });
    let m = &list(&h, "down")[0];
    let error = m["last_error"].as_str().unwrap();
    assert!(!error.is_empty());
    assert!(m["last_success_at"].is_null());
    let at = |k: &str| chrono::DateTime::parse_from_rfc3339(m[k].as_str().unwrap()).unwrap();
    let delay = (at("next_sync_at") - at("last_attempt_at")).num_seconds();
    assert!((2..=4).contains(&delay), "backing off: {m}");

    let page = web_page(&h, "down");
    assert!(page.contains("Mirror of"), "{page}");
    assert!(page.contains("The last sync failed"), "{page}");
    // Empty, it says it is a mirror and when it syncs, not to push to it
    // (pushes to a pull mirror are refused).
    assert!(!page.contains("Push to it"), "{page}");
    assert!(
        page.contains("This repository is an empty pull mirror: it takes no pushes")
            && page.contains("then every 1h"),
        "{page}"
    );
    let metrics = web_page(&h, "metrics");
    assert!(
        metrics.contains("git_collab_mirror_syncs_total{direction=\"pull\",outcome=\"error\"}"),
        "{metrics}"
    );
}

#[test]
fn push_mirrors_follow_pushes_to_git_daemon_and_push_to_another_forge_with_a_key() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(&tmp.path().join("daemon"));
    let target = daemon.bare("copy.git");

    let h = mirroring_server();
    h.create_repo("src");
    public(&h, "src");
    let src = h.repos_dir().join("src.git");
    add_mirror(&h, &format!("src '{}' --push", daemon.url("copy.git")));
    let clone = h.clone_repo("src", "src-clone");
    let first = h.commit_file(&clone, "a.txt", b"a\n", "a");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    // The forge's record is not pushed.
    git(
        &src,
        &["update-ref", "refs/collab/export/issues/abcd", &first],
    );
    // Soon after the push, without a sync: the push mirror follows.
    wait_until("the push reached the daemon", || {
        ref_of(&target, "refs/heads/main").as_deref() == Some(first.as_str())
    });
    let second = h.commit_file(&clone, "b.txt", b"b\n", "b");
    h.ssh_push(&clone, &["HEAD:refs/heads/main", "HEAD:refs/heads/topic"]);
    wait_until("the second push reached the daemon", || {
        ref_of(&target, "refs/heads/topic").as_deref() == Some(second.as_str())
    });
    // Deleted here, deleted there.
    h.ssh_push(&clone, &[":refs/heads/topic"]);
    let sync = h.ssh_exec("collab-repo mirror sync src");
    assert_eq!(sync.code, 0, "{sync:?}");
    assert_eq!(ref_of(&target, "refs/heads/topic"), None);
    assert_eq!(ref_of(&target, "refs/heads/main"), Some(second.clone()));
    assert!(
        !refs_of(&target).contains("refs/collab/"),
        "{}",
        refs_of(&target)
    );

    // To another forge over ssh, with a key as the credential.
    let other = ServerHarness::start();
    other.create_repo("dst");
    let bot = other.named_key("bot");
    other.authorize_key(&bot, true);
    let key_text = std::fs::read_to_string(&bot).unwrap();
    let url = format!("ssh://git@127.0.0.1:{}/dst.git", other.ssh_port());
    let add = h.ssh_exec_with_stdin(
        &format!("collab-repo mirror add src '{url}' --push --credential-file bot"),
        key_text.as_bytes(),
    );
    assert_eq!(add.code, 0, "{add:?}");
    let id = add.json()["mirror"]["id"].as_str().unwrap().to_string();
    assert_eq!(add.json()["mirror"]["credential"], true);
    let sync = h.ssh_exec(&format!("collab-repo mirror sync src {id}"));
    assert_eq!(sync.code, 0, "{sync:?}");
    let dst = other.repos_dir().join("dst.git");
    assert_eq!(ref_of(&dst, "refs/heads/main"), Some(second));

    // The key is nowhere to be seen: not in the list, the page, the events,
    // the log, `config show`.
    let secret_lines: Vec<&str> = key_text
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 20)
        .collect();
    assert!(!secret_lines.is_empty());
    let listed = h.ssh_exec("collab-repo mirror list src").stdout;
    let events = h
        .ssh_exec("collab-events watch --since 0 --no-follow")
        .stdout;
    let page = web_page(&h, "src");
    let config = Command::new(common::bin("git-collab-server"))
        .arg("--state-dir")
        .arg(h.state_dir())
        .args(["config", "show"])
        .output()
        .unwrap();
    let config = String::from_utf8_lossy(&config.stdout).into_owned();
    for (what, text) in [
        ("list", &listed),
        ("events", &events),
        ("page", &page),
        ("log", &h.log()),
        ("config", &config),
    ] {
        for line in &secret_lines {
            assert!(!text.contains(line), "the key shows in the {what}");
        }
    }
    // No key file is left behind.
    let keys = h.state_dir().join("mirrors/keys");
    assert_eq!(std::fs::read_dir(keys).unwrap().count(), 0);
}

/// A one-shot HTTP server that answers 401 to every request and keeps
/// what it was sent.
fn capture_http() -> (u16, std::sync::mpsc::Receiver<String>) {
    serve_http(
        b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
    )
}

/// An HTTP server that answers `reply` to every request and keeps what it
/// was sent.
fn serve_http(reply: Vec<u8>) -> (u16, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
            let _ = stream.write_all(&reply);
        }
    });
    (port, rx)
}

#[test]
fn an_https_token_is_sent_as_a_header_and_never_shown() {
    let h = mirroring_server();
    h.create_repo("down");
    public(&h, "down");
    let (port, requests) = capture_http();
    let token = "alice:s3cret-token-4242";
    let add = h.ssh_exec_with_stdin(
        &format!(
            "collab-repo mirror add down 'http://127.0.0.1:{port}/x.git' --credential-file tok"
        ),
        format!("{token}\n").as_bytes(),
    );
    assert_eq!(add.code, 0, "{add:?}");
    let sync = h.ssh_exec("collab-repo mirror sync down");
    assert_eq!(sync.code, 1, "{sync:?}");
    let sent: Vec<String> = requests.try_iter().collect();
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode(token);
    assert!(
        sent.iter()
            .any(|r| r.contains(&format!("Authorization: Basic {basic}"))),
        "{sent:?}"
    );
    let listed = h.ssh_exec("collab-repo mirror list down").stdout;
    let page = web_page(&h, "down");
    for text in [&sync.stderr, &listed, &page, &h.log()] {
        assert!(!text.contains("s3cret-token"), "{text}");
        assert!(!text.contains(&basic), "{text}");
    }
    // The credential is stored sealed, never as given.
    assert!(!format!("{:?}", list(&h, "down")).contains("s3cret"));
    // `--credential-stdin` (what the MCP tool sends) is the same, no file
    // named (a push mirror: the repository has its one pull mirror).
    let again = h.ssh_exec_with_stdin(
        &format!(
            "collab-repo mirror add down 'http://127.0.0.1:{port}/y.git' --push --credential-stdin"
        ),
        b"bob:other-token\n",
    );
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(again.json()["mirror"]["credential"], true);
    let empty = h.ssh_exec_with_stdin(
        &format!("collab-repo mirror add down 'http://127.0.0.1:{port}/z.git' --credential-stdin"),
        b"",
    );
    assert_eq!(empty.code, 1, "{empty:?}");
    assert!(
        empty.stderr.contains("the credential is empty"),
        "{empty:?}"
    );
}

#[test]
fn urls_in_gits_errors_are_kept_and_shown_without_user_password_or_query() {
    let h = mirroring_server();
    h.create_repo("down");
    public(&h, "down");
    // An upstream whose error page quotes URLs with credentials in them;
    // git prints it (`remote: …`) before its own line quoting our URL.
    let body =
        "moved: see https://mallory:tok-SECRET@forge.example/o/x.git?private_token=tok-SECRET \
                or http://forge.example/x-access-token:tok-SECRET@github.com/o/x.git\n";
    let (port, _requests) = serve_http(
        format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    );
    let id = add_mirror(
        &h,
        &format!("down 'http://127.0.0.1:{port}/x.git' --interval 1h"),
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    let sync = h.ssh_exec(&format!("collab-repo mirror sync down {id}"));
    assert_eq!(sync.code, 1, "{sync:?}");
    assert_eq!(sync.stderr.trim().lines().count(), 1, "{sync:?}");
    let listed = list(&h, "down");
    let error = listed[0]["last_error"].as_str().unwrap().to_string();
    let page = web_page(&h, "down");
    for text in [&sync.stderr, &error, &page] {
        assert!(!text.contains("tok-SECRET"), "{text}");
        assert!(!text.contains("mallory"), "{text}");
    }
    // What is left says where: scheme, host and path.
    for text in [&sync.stderr, &error] {
        assert!(
            text.contains("remote: moved: see https://forge.example/o/x.git or http://forge.example/[redacted]/o/x.git"),
            "{text}"
        );
        assert!(
            text.contains(&format!("http://127.0.0.1:{port}/x.git")),
            "{text}"
        );
    }
    assert!(page.contains("The last sync failed"), "{page}");
    assert!(page.contains("https://forge.example/o/x.git"), "{page}");

    // An ssh URL's user name is shown nowhere either: `scheme://host/path`
    // (a push mirror: the repository has its one pull mirror).
    let ssh = add_mirror(
        &h,
        &format!(
            "down 'ssh://deploy@127.0.0.1:{}/o/x.git' --push --interval 1h",
            free_port()
        ),
    );
    assert!(
        ssh["url"].as_str().unwrap().starts_with("ssh://127.0.0.1:"),
        "{ssh}"
    );
}

#[test]
fn refusals_ssrf_transports_passwords_rights_and_caps() {
    // No allowlist: loopback is refused like any internal address.
    let h = ServerHarness::start();
    h.create_repo("r");
    let refused = |args: &str, says: &str| {
        let out = h.ssh_exec(&format!("collab-repo mirror add r {args}"));
        assert_eq!(out.code, 1, "{args}: {out:?}");
        assert!(out.stderr.contains(says), "{args}: {out:?}");
        assert_eq!(out.stderr.trim().lines().count(), 1, "{out:?}");
        out
    };
    refused("'http://127.0.0.1:9/x.git'", "loopback");
    refused("'https://169.254.169.254/latest/x'", "link-local");
    refused("'git://10.1.2.3/x.git'", "private");
    refused("'ssh://git@192.168.1.1/x.git'", "private");
    refused("'https://[::1]/x.git'", "loopback");
    refused("'file:///etc/passwd'", "file://");
    refused("'ext::sh -c touch% /tmp/pwned'", "ext::");
    refused("'fd::3'", "ext::");
    refused("'git@127.0.0.1:x.git'", "scp-like");
    refused("/srv/x.git", "scp-like");
    // Credentials anywhere in the URL: refused at add with one line that
    // does not repeat them (issue 44).
    for (url, says) in [
        ("https://bob:hunter2@example.com/x.git", "password"),
        ("ssh://git:hunter2@example.com/x.git", "password"),
        ("https://example.com/x.git?token=hunter2", "no query"),
        ("https://example.com/x.git?access_token=hunter2", "no query"),
        (
            "https://example.com/g/x.git?private_token=hunter2",
            "no query",
        ),
        (
            "https://example.com/x-access-token:hunter2@github.com/o/x.git",
            "'@'",
        ),
        ("https://example.com/bob:hunter2%40/x.git", "'@'"),
    ] {
        let out = refused(&format!("'{url}'"), says);
        assert!(out.stderr.contains("--credential-file"), "{out:?}");
        assert!(!out.stderr.contains("hunter2"), "{out:?}");
    }
    refused("'https://example.com/x.git' --interval 1s", "at least 60s");
    assert!(!h.log().contains("hunter2"));
    assert!(list(&h, "r").is_empty(), "nothing was stored");

    // Not an administrator: refused before the repository is looked up.
    let user = h.authorized_key("user");
    for repo in ["r", "missing"] {
        for verb in [
            format!("mirror add {repo} 'https://example.com/x.git'"),
            format!("mirror list {repo}"),
            format!("mirror sync {repo}"),
            format!("mirror remove {repo} mr000000000000"),
        ] {
            let out = h.ssh_exec_as(&user, &format!("collab-repo {verb}"), b"");
            assert_eq!(out.code, 1, "{out:?}");
            assert_eq!(
                out.stderr.trim(),
                "error: permission denied: mirrors are for server administrators"
            );
        }
    }
    // The governance repository's changes are checked at push: no fetch
    // may write it.
    assert_eq!(h.ssh_exec("collab-repo create '_governance'").code, 0);
    let gov = h.ssh_exec("collab-repo mirror add _governance 'https://example.com/g.git'");
    assert_eq!(gov.code, 1, "{gov:?}");
    assert!(gov.stderr.contains("cannot be a pull mirror"), "{gov:?}");
    let missing = h.ssh_exec("collab-repo mirror list missing");
    assert_eq!((missing.code, missing.stderr.trim()), (1, NOT_FOUND.trim()));

    // Allowlisted loopback is still only loopback; the cap holds; a
    // credential must fit its transport.
    let m = mirroring_server();
    m.create_repo("r");
    let out = m.ssh_exec("collab-repo mirror add r 'http://10.0.0.1/x.git'");
    assert!(out.stderr.contains("mirrors.allowed_hosts"), "{out:?}");
    let token_for_ssh = m.ssh_exec_with_stdin(
        "collab-repo mirror add r 'ssh://git@127.0.0.1:1/x.git' --credential-file t",
        b"token",
    );
    assert!(
        token_for_ssh.stderr.contains("private key"),
        "{token_for_ssh:?}"
    );
    let empty = m.ssh_exec_with_stdin(
        "collab-repo mirror add r 'http://127.0.0.1:1/x.git' --credential-file t",
        b"",
    );
    assert!(empty.stderr.contains("standard input"), "{empty:?}");
    add_mirror(&m, "r 'git://127.0.0.1:1/0.git' --interval 1h");
    // A second pull mirror would prune the first one's refs at every sync
    // (and the first the second's): refused, in one line.
    let second = m.ssh_exec("collab-repo mirror add r 'git://127.0.0.1:1/other.git'");
    assert_eq!(second.code, 1, "{second:?}");
    assert!(
        second
            .stderr
            .starts_with("error: the repository has a pull mirror already ("),
        "{second:?}"
    );
    assert_eq!(second.stderr.trim().lines().count(), 1, "{second:?}");
    for i in 1..4 {
        add_mirror(
            &m,
            &format!("r 'git://127.0.0.1:1/{i}.git' --push --interval 1h"),
        );
    }
    let dup = m.ssh_exec("collab-repo mirror add r 'git://127.0.0.1:1/0.git'");
    assert!(dup.stderr.contains("mirror"), "{dup:?}");
    let full = m.ssh_exec("collab-repo mirror add r 'git://127.0.0.1:1/9.git' --push");
    assert!(full.stderr.contains("mirrors.max_per_repo"), "{full:?}");
    assert_eq!(list(&m, "r").len(), 4);
}

#[test]
fn a_push_mirror_counts_the_refs_it_pushed() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(&tmp.path().join("daemon"));
    // Retried after an hour: only the syncs asked for run once the first
    // one failed, so each sync's count is known.
    let mut options = mirroring_options();
    for (key, value) in options.env.iter_mut() {
        if key.contains("MIN_INTERVAL") || key.contains("MAX_BACKOFF") {
            *value = "3600".into();
        }
    }
    let h = ServerHarness::start_with(options);
    h.create_repo("src");
    let clone = h.clone_repo("src", "src-clone");
    h.commit_file(&clone, "a.txt", b"a\n", "a");
    h.ssh_push(&clone, &["HEAD:refs/heads/main", "HEAD:refs/heads/topic"]);
    // The target does not exist yet: the sync that follows the add fails.
    add_mirror(
        &h,
        &format!("src '{}' --push --interval 2h", daemon.url("late.git")),
    );
    wait_until("the first sync failed", || {
        list(&h, "src")[0]["failures"].as_i64() >= Some(1)
    });
    let target = daemon.bare("late.git");
    let synced = |what: &str| {
        let sync = h.ssh_exec("collab-repo mirror sync src");
        assert_eq!(sync.code, 0, "{what}: {sync:?}");
        sync.json()["synced"][0]["refs_updated"].clone()
    };
    assert_eq!(synced("both branches"), 2);
    assert!(ref_of(&target, "refs/heads/topic").is_some());
    assert_eq!(synced("nothing new"), 0);
}

#[test]
fn ssh_mirrors_to_two_servers_on_one_host_keep_a_host_key_each() {
    let h = mirroring_server();
    h.create_repo("src");
    let clone = h.clone_repo("src", "src-clone");
    let head = h.commit_file(&clone, "a.txt", b"a\n", "a");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    // Two servers on 127.0.0.1, each with its own host key and port.
    let others: Vec<ServerHarness> = (0..2).map(|_| ServerHarness::start()).collect();
    for (i, other) in others.iter().enumerate() {
        other.create_repo("dst");
        let bot = other.named_key("bot");
        other.authorize_key(&bot, true);
        let url = format!("ssh://git@127.0.0.1:{}/dst.git", other.ssh_port());
        let add = h.ssh_exec_with_stdin(
            &format!("collab-repo mirror add src '{url}' --push --credential-file bot"),
            std::fs::read_to_string(&bot).unwrap().as_bytes(),
        );
        assert_eq!(add.code, 0, "{add:?}");
        let id = add.json()["mirror"]["id"].as_str().unwrap().to_string();
        let sync = h.ssh_exec(&format!("collab-repo mirror sync src {id}"));
        assert_eq!(sync.code, 0, "server {i}: {sync:?}");
        let dst = other.repos_dir().join("dst.git");
        assert_eq!(
            ref_of(&dst, "refs/heads/main").as_deref(),
            Some(head.as_str())
        );
    }
    // Each key is kept under `[host]:port`, as OpenSSH names them.
    let known = std::fs::read_to_string(h.state_dir().join("mirrors/known_hosts")).unwrap();
    for other in &others {
        let alias = format!("[127.0.0.1]:{} ", other.ssh_port());
        assert!(known.lines().any(|l| l.starts_with(&alias)), "{known}");
    }
}

#[test]
fn mirrors_say_that_lfs_objects_are_not_mirrored() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(&tmp.path().join("daemon"));
    let upstream = daemon.bare("up.git");
    let work = tmp.path().join("work");
    work_tree(&work, "one");
    git(&work, &["push", "-q", upstream.to_str().unwrap(), "main"]);

    let h = mirroring_server();
    h.create_repo("down");
    let down = h.repos_dir().join("down.git");
    let added = add_mirror(&h, &format!("down '{}'", daemon.url("up.git")));
    assert_eq!(added["lfs"], "not mirrored", "{added}");
    assert_eq!(h.ssh_exec("collab-repo mirror sync down").code, 0);
    assert_eq!(list(&h, "down")[0]["lfs"], "not mirrored");

    // The upstream starts tracking files with git-lfs: a pointer, as
    // `git lfs track` and `git add` write them.
    let oid = "4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393";
    std::fs::write(
        work.join(".gitattributes"),
        "*.bin filter=lfs diff=lfs merge=lfs -text\n",
    )
    .unwrap();
    std::fs::write(
        work.join("model.bin"),
        format!("version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize 12345\n"),
    )
    .unwrap();
    git(&work, &["add", ".gitattributes", "model.bin"]);
    git(&work, &["commit", "-q", "-m", "Track models with git-lfs"]);
    git(&work, &["push", "-q", upstream.to_str().unwrap(), "main"]);
    assert_eq!(h.ssh_exec("collab-repo mirror sync down").code, 0);
    assert!(ref_of(&down, "refs/heads/main").is_some());
    let shown = list(&h, "down");
    let lfs = shown[0]["lfs"].as_str().unwrap();
    assert!(
        lfs.starts_with("not mirrored: .gitattributes at HEAD sends files to git-lfs"),
        "{lfs}"
    );
    // Nothing was fetched into the LFS store.
    assert!(
        !h.state_dir().join("lfs").exists()
            || std::fs::read_dir(h.state_dir().join("lfs"))
                .unwrap()
                .next()
                .is_none()
    );
}
