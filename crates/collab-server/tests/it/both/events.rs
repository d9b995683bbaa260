//! `collab-events watch` end to end: the real server, the real `ssh`
//! watching while real commands (repository creation, release uploads,
//! pushes) write events. Checks: replay then live with no gap and no
//! duplicate, reconnect with `--since`, visibility per repository, the
//! retention error, heartbeats, and the cut-off of a client that stops
//! reading while another keeps receiving.
use collab_testkit as common;

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{HarnessOptions, ServerHarness, NOT_FOUND};
use serde_json::Value;

/// Hang guard for waiting on a line (not a timing assertion).
const LINE_LIMIT: Duration = Duration::from_secs(60);

/// A running `ssh … collab-events watch …` with its stdout read line by line.
struct Watcher {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// What the watcher wrote on stderr, read once it ends (to say why a
    /// watch ended early).
    stderr: std::sync::Mutex<Option<std::thread::JoinHandle<String>>>,
}

impl Watcher {
    fn start(h: &ServerHarness, key: &Path, args: &str) -> Watcher {
        let mut child = Command::new("ssh")
            .args(h.ssh_options(key))
            .arg("git@127.0.0.1")
            .arg(format!("collab-events watch {args}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ssh");
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Watcher {
            child,
            lines,
            stderr: std::sync::Mutex::new(Some(stderr)),
        }
    }

    /// The next non-heartbeat line as JSON; panics after LINE_LIMIT.
    fn next_event(&self) -> Value {
        loop {
            let line = match self.lines.recv_timeout(LINE_LIMIT) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let why = self
                        .stderr
                        .lock()
                        .unwrap()
                        .take()
                        .map(|t| t.join().unwrap());
                    panic!("the watcher ended early; its stderr: {why:?}")
                }
                Err(e) => panic!("no event line in time: {e}"),
            };
            let value: Value = serde_json::from_str(&line).expect("a JSON line");
            assert!(value["seq"].is_i64(), "every line has a seq: {line}");
            if value["type"] != "heartbeat" {
                return value;
            }
        }
    }

    /// The next line, heartbeat or not.
    fn next_line(&self) -> Value {
        let line = self.lines.recv_timeout(LINE_LIMIT).expect("a line in time");
        serde_json::from_str(&line).expect("a JSON line")
    }

    /// Events until one satisfies `done` (included).
    fn events_until(&self, done: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let event = self.next_event();
            let stop = done(&event);
            seen.push(event);
            if stop {
                return seen;
            }
        }
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        drop(self.stderr);
    }
}

fn create_repo_over_ssh(h: &ServerHarness, name: &str) {
    let out = h.ssh_exec(&format!("collab-repo create '{name}'"));
    assert_eq!(out.code, 0, "{out:?}");
}

fn seqs(events: &[Value]) -> Vec<i64> {
    events.iter().map(|e| e["seq"].as_i64().unwrap()).collect()
}

/// Make `repo` readable only by admins.
fn make_private(h: &ServerHarness, repo: &str) {
    std::fs::write(
        h.repos_dir()
            .join(format!("{repo}.git"))
            .join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    )
    .unwrap();
}

/// Push a tag `tag` to `repo` and upload a release file to it.
fn upload_release(h: &ServerHarness, repo: &str, tag: &str) {
    let clone = h.clone_repo(repo, &format!("clone-{repo}-{tag}"));
    h.commit_file(&clone, "f.txt", tag.as_bytes(), "a commit");
    h.git(&clone, &["tag", tag]);
    h.ssh_push(
        &clone,
        &["HEAD:refs/heads/main", &format!("refs/tags/{tag}")],
    );
    let out = h.ssh_exec_with_stdin(
        &format!("collab-release create '{repo}' '{tag}' 'notes.txt'"),
        b"release notes",
    );
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn replay_then_live_then_reconnect_sees_every_event_exactly_once() {
    let h = ServerHarness::start();
    let key = h.ssh_client_key();
    for i in 0..5 {
        create_repo_over_ssh(&h, &format!("before-{i}"));
    }
    // Replay from the start, then live.
    let first = Watcher::start(&h, &key, "--since 0 --type 'repo.*'");
    let replayed = first.events_until(|e| e["repo"] == "before-4.git");
    assert_eq!(seqs(&replayed), vec![1, 2, 3, 4, 5]);
    assert_eq!(replayed[0]["type"], "repo.created");
    assert_eq!(replayed[0]["schema"], 1);
    assert!(replayed[0]["actor"]
        .as_str()
        .unwrap()
        .starts_with("SHA256:"));
    for i in 0..5 {
        create_repo_over_ssh(&h, &format!("live-{i}"));
    }
    let live = first.events_until(|e| e["repo"] == "live-2.git");
    first.kill();
    let last_seen = *seqs(&live).last().unwrap();
    // Events written while nobody watches.
    for i in 0..3 {
        create_repo_over_ssh(&h, &format!("gap-{i}"));
    }
    let second = Watcher::start(&h, &key, &format!("--since {last_seen}"));
    let resumed = second.events_until(|e| e["repo"] == "gap-2.git");
    create_repo_over_ssh(&h, "after");
    let tail = second.events_until(|e| e["repo"] == "after.git");
    second.kill();

    let mut all = replayed;
    all.extend(live);
    all.extend(resumed);
    all.extend(tail);
    let got = seqs(&all);
    let expected: Vec<i64> = (1..=14).collect();
    assert_eq!(
        got, expected,
        "every event once, in order, across the reconnect"
    );
    let names: BTreeSet<&str> = all.iter().map(|e| e["repo"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 14);
}

#[test]
fn no_follow_replays_and_exits() {
    let h = ServerHarness::start();
    for i in 0..3 {
        create_repo_over_ssh(&h, &format!("r{i}"));
    }
    let out = h.ssh_exec("collab-events watch --since 1 --no-follow");
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(seqs(&lines), vec![2, 3]);
    // Nothing yet after the head: an empty replay.
    let out = h.ssh_exec("collab-events watch --no-follow");
    assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{out:?}");
}

#[test]
fn private_repository_events_never_reach_a_reader_without_access() {
    let h = ServerHarness::start();
    h.create_repo("open");
    h.create_repo("secret");
    make_private(&h, "secret");
    let user = h.authorized_key("user");
    let admin = h.ssh_client_key();

    // Naming the private repository is answered like a missing one.
    for name in ["secret", "missing"] {
        let out = h.ssh_exec_as(&user, &format!("collab-events watch '{name}'"), b"");
        assert_eq!((out.code, out.stderr.as_str()), (1, NOT_FOUND), "{out:?}");
    }

    let user_watch = Watcher::start(&h, &user, "--since 0");
    let admin_watch = Watcher::start(&h, &admin, "--since 0");
    upload_release(&h, "secret", "v1");
    upload_release(&h, "open", "v1");

    // The admin sees both repositories' events; the user only the open one.
    let admin_seen =
        admin_watch.events_until(|e| e["type"] == "release.uploaded" && e["repo"] == "open.git");
    let user_seen =
        user_watch.events_until(|e| e["type"] == "release.uploaded" && e["repo"] == "open.git");
    admin_watch.kill();
    user_watch.kill();
    let repos = |events: &[Value]| -> BTreeSet<String> {
        events
            .iter()
            .map(|e| e["repo"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        repos(&admin_seen),
        BTreeSet::from(["open.git".to_string(), "secret.git".to_string()])
    );
    assert_eq!(repos(&user_seen), BTreeSet::from(["open.git".to_string()]));
    let uploaded = admin_seen
        .iter()
        .find(|e| e["type"] == "release.uploaded" && e["repo"] == "secret.git")
        .expect("the admin saw the private upload");
    assert_eq!(uploaded["object_id"], "v1");
    assert_eq!(uploaded["payload"]["file"]["name"], "notes.txt");
    // Nothing about the secret repository, not even its creation.
    for event in &user_seen {
        assert!(!event.to_string().contains("secret"), "{event}");
    }
}

#[test]
fn heartbeats_carry_the_position() {
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_EVENTS__HEARTBEAT_SECS".into(), "1".into())],
        ..Default::default()
    });
    create_repo_over_ssh(&h, "r");
    let watch = Watcher::start(&h, &h.ssh_client_key(), "--since 0");
    assert_eq!(watch.next_line()["type"], "repo.created");
    let beat = watch.next_line();
    assert_eq!(beat["type"], "heartbeat", "{beat}");
    assert_eq!(beat["seq"], 1);
    watch.kill();
}

#[test]
fn since_older_than_retention_names_the_oldest_seq() {
    let mut h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_EVENTS__RETENTION_DAYS".into(), "1".into())],
        ..Default::default()
    });
    for i in 0..4 {
        create_repo_over_ssh(&h, &format!("r{i}"));
    }
    h.stop();
    // Age the first two events past the retention; the restarted server
    // prunes them at start.
    let db = collab_store::open(collab_store::Location::parse(&h.db_setting())).unwrap();
    db.execute("UPDATE events SET at = at - 3 * 86400 WHERE seq <= 2", [])
        .unwrap();
    drop(db);
    h.start_again();
    h.wait_for_log("pruned 2 events");
    let out = h.ssh_exec("collab-events watch --since 0 --no-follow");
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .starts_with("error: events after seq 0 are no longer kept")
            && out.stderr.contains("the oldest available seq is 3"),
        "{out:?}"
    );
    let out = h.ssh_exec("collab-events watch --since 2 --no-follow");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.lines().count(), 2, "{out:?}");
}

#[test]
fn bad_watch_arguments_get_usage() {
    let h = ServerHarness::start();
    for bad in [
        "collab-events watch --since x",
        "collab-events watch --type 'a b'",
        "collab-events tail",
    ] {
        let out = h.ssh_exec(bad);
        assert_eq!(out.code, 1, "{bad}: {out:?}");
        assert!(
            out.stderr.starts_with("error: usage: collab-events watch"),
            "{out:?}"
        );
    }
}

#[test]
fn whoami_publishes_the_server_signing_key() {
    let mut h = ServerHarness::start();
    let key = h.ssh_exec("collab-whoami").json()["server_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(key.starts_with("ssh-ed25519 "), "{key}");
    h.restart();
    let again = h.ssh_exec("collab-whoami").json()["server_key"].clone();
    assert_eq!(again, key.as_str(), "the key survives a restart");
    assert!(h.state_dir().join("collab_signing_key").is_file());
}

#[test]
fn pushes_record_one_ref_updated_event_per_ref() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let key = h.ssh_client_key();
    let watch = Watcher::start(&h, &key, "'r' --type 'ref.*'");
    let clone = h.clone_repo("r", "work");
    let first = h.commit_file(&clone, "a.txt", b"a", "first");
    h.git(&clone, &["tag", "v1"]);
    h.ssh_push(&clone, &["HEAD:refs/heads/main", "refs/tags/v1"]);
    let second = h.commit_file(&clone, "a.txt", b"b", "second");
    h.ssh_push(&clone, &["HEAD:refs/heads/main", ":refs/tags/v1"]);
    let seen: Vec<Value> = (0..4).map(|_| watch.next_event()).collect();
    watch.kill();
    let zero = "0".repeat(40);
    let moves: BTreeSet<(String, String, String)> = seen
        .iter()
        .map(|e| {
            assert_eq!(e["type"], "ref.updated");
            assert_eq!(e["repo"], "r.git");
            assert_eq!(e["object_id"], e["payload"]["ref"]);
            assert_eq!(e["actor"], e["payload"]["pusher"]);
            let p = &e["payload"];
            (
                p["ref"].as_str().unwrap().to_string(),
                p["old"].as_str().unwrap().to_string(),
                p["new"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let s = |v: &str| v.to_string();
    assert_eq!(
        moves,
        BTreeSet::from([
            (s("refs/heads/main"), zero.clone(), first.clone()),
            (s("refs/tags/v1"), zero.clone(), first.clone()),
            (s("refs/heads/main"), first.clone(), second.clone()),
            (s("refs/tags/v1"), first.clone(), zero.clone()),
        ])
    );
}

/// A watcher whose client stops reading is cut off with a last line that
/// says where to resume, while another watcher keeps receiving everything.
#[test]
fn a_watcher_that_stops_reading_is_cut_off_while_others_keep_receiving() {
    const TAGS: usize = 5000;
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_EVENTS__STALL_TIMEOUT_SECS".into(), "2".into())],
        ..Default::default()
    });
    h.create_repo("r");
    let key = h.ssh_client_key();
    let reader = Watcher::start(&h, &key, "'r' --type ref.updated");
    // The stalled client: ssh runs, but nobody reads its stdout.
    let mut stalled = Command::new("ssh")
        .args(h.ssh_options(&key))
        .arg("git@127.0.0.1")
        .arg("collab-events watch 'r' --type ref.updated")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let both watchers start before the burst (their start is the head).
    let probe = h.clone_repo("r", "probe");
    h.commit_file(&probe, "p", b"p", "probe");
    // To main, which HEAD names: a push that leaves HEAD dangling would
    // add a `repo.settings_changed` row between the `ref.updated` ones.
    h.ssh_push(&probe, &["HEAD:refs/heads/main"]);
    assert_eq!(reader.next_event()["object_id"], "refs/heads/main");

    // One push of TAGS long tag names: several MiB of event lines, more
    // than the stalled client's SSH window and pipe can hold.
    let clone = h.clone_repo("r", "work");
    let head = h.commit_file(&clone, "a.txt", b"a", "first");
    let long = "x".repeat(180);
    let mut script = String::new();
    for i in 0..TAGS {
        script.push_str(&format!("create refs/tags/t{i:05}-{long} {head}\n"));
    }
    let mut update = h
        .git_command(&key, &clone)
        .args(["update-ref", "--stdin"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(update.stdin.as_mut().unwrap(), script.as_bytes()).unwrap();
    drop(update.stdin.take());
    assert!(update.wait().unwrap().success());
    h.ssh_push(&clone, &["--tags"]);

    // The reading watcher gets every tag event, in order.
    let got = reader.events_until(|e| {
        e["object_id"]
            .as_str()
            .is_some_and(|r| r.starts_with(&format!("refs/tags/t{:05}-", TAGS - 1)))
    });
    assert_eq!(got.len(), TAGS);
    let got_seqs = seqs(&got);
    assert!(got_seqs.windows(2).all(|w| w[1] == w[0] + 1), "no gap");

    // The stalled one was cut off; now read what it was sent.
    h.wait_for_log("event watcher cut off");
    let mut out = String::new();
    stalled
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    stalled
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = stalled.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: too slow"), "{err}");
    assert!(err.contains("resume with --since"), "{err}");
    // Whole lines only count; they are a gap-free prefix after the probe.
    let complete: Vec<Value> = out
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stalled_seqs = seqs(&complete);
    assert!(!stalled_seqs.is_empty());
    assert!(stalled_seqs.len() < TAGS + 1, "it was cut before the end");
    assert!(stalled_seqs.windows(2).all(|w| w[1] == w[0] + 1), "no gap");
    assert_eq!(complete[0]["object_id"], "refs/heads/main");
    reader.kill();
}

#[test]
fn the_cli_replays_the_remote_repository_events() {
    let h = ServerHarness::start();
    h.create_repo("r");
    h.create_repo("other");
    let clone = h.clone_repo("r", "work");
    h.commit_file(&clone, "a.txt", b"a", "first");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    let cli = collab_testkit::bin("git-collab");
    let key = h.ssh_client_key();
    let out = h
        .client_command(cli, &key, &clone)
        .args(["events", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["repo.created", "ref.updated"], "only r's events");
    assert!(lines.iter().all(|e| e["repo"] == "r.git"));
    let since = lines[0]["seq"].as_i64().unwrap();
    let out = h
        .client_command(cli, &key, &clone)
        .args(["events", "--since", &since.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("ref.updated") && text.contains("refs/heads/main"),
        "{text}"
    );
    // --all adds the other repository.
    let out = h
        .client_command(cli, &key, &clone)
        .args(["events", "--all", "--json", "--type", "repo.*"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
}

/// The payload's keys, sorted.
fn keys(event: &Value) -> Vec<String> {
    let mut keys: Vec<String> = event["payload"]
        .as_object()
        .unwrap_or_else(|| panic!("an object payload: {event}"))
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

fn run_ok(h: &ServerHarness, cmd: &str) -> Value {
    let out = h.ssh_exec(cmd);
    assert_eq!(out.code, 0, "{cmd}: {out:?}\n{}", h.log());
    if out.stdout.trim().is_empty() {
        Value::Null
    } else {
        out.json()
    }
}

/// Issue 15's "every change is an event": repository creation and settings,
/// pushes, releases, every issue write and lease operation append their
/// documented event (docs/events.md), with the documented payload fields,
/// and a deleted or renamed-away repository's events stay visible to an
/// administrator.
#[test]
fn every_change_appends_its_documented_event() {
    let h = ServerHarness::start();
    let admin = h.ssh_client_key();
    // Watch from the start, live, so events of the repository are read
    // while it still exists too.
    let watch = Watcher::start(&h, &admin, "--since 0");
    run_ok(&h, "collab-repo create 'r'");
    let clone = h.clone_repo("r", "work");
    h.commit_file(&clone, "a.txt", b"a", "first");
    h.git(&clone, &["tag", "v1"]);
    h.ssh_push(
        &clone,
        &[
            "HEAD:refs/heads/main",
            "HEAD:refs/heads/dev",
            "refs/tags/v1",
        ],
    );
    run_ok(&h, "collab-repo describe 'r' 'The app'");
    run_ok(&h, "collab-repo visibility 'r' public");
    run_ok(&h, "collab-repo set-head 'r' dev");
    let up = h.ssh_exec_with_stdin("collab-release create 'r' 'v1' 'notes.txt'", b"notes");
    assert_eq!(up.code, 0, "{up:?}");
    run_ok(&h, "collab-release delete 'r' 'v1'");

    let one = h.open_server_issue("r", "One");
    let two = h.open_server_issue("r", "Two");
    run_ok(&h, &format!("collab-issue comment 'r' '{one}' --body 'hi'"));
    run_ok(&h, &format!("collab-issue edit 'r' '{one}' --title 'One!'"));
    run_ok(&h, &format!("collab-issue label 'r' '{one}' --add bug"));
    run_ok(&h, &format!("collab-issue link 'r' '{one}' blocks '{two}'"));
    run_ok(
        &h,
        &format!("collab-issue unlink 'r' '{one}' blocks '{two}'"),
    );
    run_ok(&h, &format!("collab-lease acquire 'r' '{one}' --ttl 600"));
    run_ok(&h, &format!("collab-lease renew 'r' '{one}' --ttl 900"));
    run_ok(&h, &format!("collab-lease release 'r' '{one}'"));
    run_ok(&h, &format!("collab-lease acquire 'r' '{one}' --ttl 600"));
    run_ok(
        &h,
        &format!("collab-lease break 'r' '{one}' --reason 'stuck'"),
    );
    run_ok(&h, &format!("collab-lease acquire 'r' '{one}' --ttl 600"));
    run_ok(&h, &format!("collab-issue close 'r' '{one}' --reason done"));
    run_ok(&h, &format!("collab-issue reopen 'r' '{one}'"));
    run_ok(&h, "collab-repo rename 'r' 'r2'");
    run_ok(&h, "collab-repo delete 'r2' --confirm 'r2'");

    let events = watch.events_until(|e| e["type"] == "repo.deleted");
    watch.kill();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "repo.created",
            "ref.updated",
            "ref.updated",
            "ref.updated",
            "repo.settings_changed",
            "repo.settings_changed",
            "repo.settings_changed",
            "release.uploaded",
            "release.deleted",
            "issue.opened",
            "issue.opened",
            "issue.commented",
            "issue.edited",
            "issue.labeled",
            "issue.linked",
            "issue.unlinked",
            "lease.acquired",
            "lease.renewed",
            "lease.released",
            "lease.acquired",
            "lease.broken",
            "lease.acquired",
            "issue.closed",
            "lease.released",
            "issue.reopened",
            "repo.renamed",
            "repo.deleted",
        ],
        "{events:#?}"
    );
    let expected: &[(&str, &[&str])] = &[
        ("repo.created", &["repo"]),
        ("ref.updated", &["new", "old", "pusher", "ref"]),
        ("repo.settings_changed", &["description"]),
        ("repo.settings_changed", &["public"]),
        ("repo.settings_changed", &["head"]),
        ("release.uploaded", &["file", "tag"]),
        ("release.deleted", &["files", "tag"]),
        ("issue.opened", &["author", "body", "labels", "title"]),
        ("issue.commented", &["comment"]),
        ("issue.edited", &["title"]),
        ("issue.labeled", &["add", "remove"]),
        (
            "issue.linked",
            &["kind", "target", "target_id", "target_repo"],
        ),
        (
            "issue.unlinked",
            &["kind", "target", "target_id", "target_repo"],
        ),
        (
            "lease.acquired",
            &[
                "acquired_at",
                "expires_at",
                "holder",
                "note",
                "token",
                "transitions",
            ],
        ),
        ("lease.renewed", &["expires_at", "holder", "note", "token"]),
        ("lease.released", &["holder", "token"]),
        ("lease.broken", &["by", "holder", "reason", "token"]),
        ("issue.closed", &["reason"]),
        ("lease.released", &["holder", "reason", "token"]),
        ("issue.reopened", &[]),
        ("repo.renamed", &["from", "to"]),
        ("repo.deleted", &[]),
    ];
    // Each expected (type, keys) is met by an event of that type, in order.
    let mut rest = events.iter();
    for (kind, want) in expected {
        let found = rest
            .by_ref()
            .find(|e| e["type"] == *kind && keys(e) == *want)
            .unwrap_or_else(|| panic!("no {kind} with payload {want:?} in order: {events:#?}"));
        assert_eq!(found["schema"], 1);
        assert!(found["seq"].is_i64() && found["at"].is_string(), "{found}");
    }
    let seqs = seqs(&events);
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "gap-free: {seqs:?}"
    );
    for e in &events[..events.len() - 2] {
        assert_eq!(
            e["repo"], "r.git",
            "rows keep the name they were written under: {e}"
        );
    }
    assert_eq!(events[events.len() - 2]["repo"], "r2.git");
    let issue_events = events.iter().filter(|e| {
        e["type"].as_str().unwrap().starts_with("issue.")
            || e["type"].as_str().unwrap().starts_with("lease.")
    });
    for e in issue_events {
        assert!(
            e["object_id"] == one.as_str() || e["object_id"] == two.as_str(),
            "{e}"
        );
    }
    let closed_lease = events
        .iter()
        .rfind(|e| e["type"] == "lease.released")
        .unwrap();
    assert_eq!(closed_lease["payload"]["reason"], "issue_closed");

    // Replayed afterwards, the renamed-away and deleted repository's events
    // are still there for the administrator, and for nobody else.
    let replay = h.ssh_exec("collab-events watch --since 0 --no-follow");
    assert_eq!(replay.stdout.lines().count(), events.len(), "{replay:?}");
    let user = h.authorized_key("user");
    let theirs = h.ssh_exec_as(&user, "collab-events watch --since 0 --no-follow", b"");
    assert_eq!((theirs.code, theirs.stdout.as_str()), (0, ""), "{theirs:?}");
}

/// A push that creates a repository (`push_to_create`) records
/// `repo.created`, and the server's repair of a dangling HEAD after a push
/// records `repo.settings_changed` with the reason.
#[test]
fn push_to_create_and_head_repair_are_events() {
    let h = ServerHarness::start_with(HarnessOptions {
        env: vec![("GIT_COLLAB_PUSH_TO_CREATE".into(), "true".into())],
        ..Default::default()
    });
    let admin = h.ssh_client_key();
    let watch = Watcher::start(&h, &admin, "--since 0");
    let work = h.temp_dir().join("fresh");
    std::fs::create_dir_all(&work).unwrap();
    h.git(&work, &["init", "-q", "-b", "trunk"]);
    h.commit_file(&work, "a.txt", b"a", "first");
    h.git(&work, &["remote", "add", "origin", &h.repo_url("made")]);
    let out = h.ssh_push(&work, &["HEAD:refs/heads/trunk"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = watch.events_until(|e| e["type"] == "repo.settings_changed");
    watch.kill();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["repo.created", "ref.updated", "repo.settings_changed"]
    );
    assert_eq!(events[0]["repo"], "made.git");
    assert_eq!(events[0]["actor"], events[1]["actor"]);
    let head = &events[2];
    assert_eq!(head["actor"], Value::Null);
    assert_eq!(head["payload"]["reason"], "dangling");
    assert!(
        head["payload"]["head"].as_str().unwrap().contains("trunk"),
        "{head}"
    );
}
