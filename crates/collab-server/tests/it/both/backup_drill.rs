//! The restore drill, on both backends: the real server under a storm of
//! pushes, lease operations and issue writes, `git-collab-server backup` as
//! its own process beside it, `restore` into a fresh state directory (and,
//! on PostgreSQL, a fresh empty database: the backup holds a `pg_dump`
//! archive of one snapshot), and a second real server started on what was
//! restored.
//!
//! The drill's promise: everything acknowledged before the backup started
//! is in the restore (every push's commit, every lease with its token, every
//! issue and comment), every repository is fsck-clean, and fencing tokens
//! continue above the restored high-water mark. A restore into a database
//! or state directory that is not empty is refused and changes nothing.

use collab_testkit as common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{host_cli, pg, stdout_json, ServerHarness, SshOutput};

/// Repositories pushed to during the storm.
const REPOS: usize = 3;
/// Issues whose leases are taken one by one during the storm.
const HELD_ISSUES: usize = 8;

fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

fn lease(h: &ServerHarness, args: &str) -> SshOutput {
    h.ssh_exec(&format!("collab-lease {args}"))
}

/// The commit a branch points at on the server, from `git ls-remote`.
fn remote_tip(h: &ServerHarness, repo: &str, branch: &str) -> String {
    let out = h.ls_remote_as(&h.ssh_client_key(), repo);
    assert!(out.success(), "{out:?}");
    out.stdout
        .lines()
        .find(|l| l.ends_with(&format!("\trefs/heads/{branch}")))
        .and_then(|l| l.split('\t').next())
        .unwrap_or_else(|| panic!("{repo} has no {branch}: {out:?}"))
        .to_string()
}

/// What the storm's clients had acknowledged, each with the moment the
/// acknowledgement arrived.
#[derive(Default)]
struct Acks {
    /// Per repository: every pushed commit in push order, with its ack time.
    pushes: Vec<Vec<(Instant, String)>>,
    /// Leases taken and kept: (ack time, issue, token).
    held: Vec<(Instant, String, i64)>,
    /// Tokens of the churned issue (acquire, release, acquire, ...).
    churn: Vec<(Instant, i64)>,
    /// Server-held issues opened, and comments on them: (ack time, id).
    issues: Vec<(Instant, String)>,
    comments: Vec<(Instant, String, String)>,
}

#[test]
fn restore_drill_during_a_storm_of_pushes_leases_and_issue_writes() {
    let h = ServerHarness::start();
    let mut clones = Vec::new();
    for r in 0..REPOS {
        let name = format!("r{r}");
        h.create_repo(&name);
        let clone = h.clone_repo(&name, &format!("work{r}"));
        h.commit_file(&clone, "f", b"0", "start");
        assert!(h
            .ssh_push(&clone, &["HEAD:refs/heads/main"])
            .status
            .success());
        clones.push(clone);
    }
    let issues: Vec<String> = (0..=HELD_ISSUES)
        .map(|i| h.open_server_issue("r0", &format!("issue {i}")))
        .collect();
    assert_eq!(issues.len(), HELD_ISSUES + 1);
    let churned = issues[0].clone();

    let backup_dir = h.temp_dir().join("backup");
    let stop = AtomicBool::new(false);
    let acks = Mutex::new(Acks {
        pushes: vec![Vec::new(); REPOS],
        ..Acks::default()
    });
    let mut backup_started = None;
    let mut backup_reply = None;
    std::thread::scope(|s| {
        // If this thread panics (a failed backup, a storm that never got
        // going), the storm must still stop, or the scope waits for it
        // forever and the failure becomes a hang.
        let _stop_on_exit = StopOnDrop(&stop);
        for (r, clone) in clones.iter().enumerate() {
            let (h, stop, acks) = (&h, &stop, &acks);
            s.spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let commit = h.commit_file(clone, "f", n.to_string().as_bytes(), "storm");
                    let out = h.ssh_push(clone, &["HEAD:refs/heads/main"]);
                    assert!(out.status.success(), "push {n} to r{r} failed");
                    acks.lock().unwrap().pushes[r].push((Instant::now(), commit));
                }
            });
        }
        {
            let (h, stop, acks, issues) = (&h, &stop, &acks, &issues);
            s.spawn(move || {
                for issue in &issues[1..] {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let out = lease(h, &format!("acquire 'r0' '{issue}'"));
                    assert_eq!(out.code, 0, "{out:?}");
                    let token = out.json()["token"].as_i64().unwrap();
                    acks.lock()
                        .unwrap()
                        .held
                        .push((Instant::now(), issue.clone(), token));
                    std::thread::sleep(Duration::from_millis(150));
                }
            });
        }
        {
            let (h, stop, acks, churned) = (&h, &stop, &acks, &churned);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let out = lease(h, &format!("acquire 'r0' '{churned}'"));
                    assert_eq!(out.code, 0, "{out:?}");
                    let token = out.json()["token"].as_i64().unwrap();
                    acks.lock().unwrap().churn.push((Instant::now(), token));
                    let out = lease(h, &format!("release 'r0' '{churned}'"));
                    assert_eq!(out.code, 0, "{out:?}");
                }
            });
        }
        {
            let (h, stop, acks) = (&h, &stop, &acks);
            s.spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let out = h.ssh_exec(&format!("collab-issue open 'r1' --title 'storm {n}'"));
                    assert_eq!(out.code, 0, "{out:?}");
                    let id = out.json()["issue"].as_str().unwrap().to_string();
                    acks.lock()
                        .unwrap()
                        .issues
                        .push((Instant::now(), id.clone()));
                    let body = format!("comment on storm {n}");
                    let out =
                        h.ssh_exec(&format!("collab-issue comment 'r1' '{id}' --body '{body}'"));
                    assert_eq!(out.code, 0, "{out:?}");
                    acks.lock()
                        .unwrap()
                        .comments
                        .push((Instant::now(), id, body));
                }
            });
        }
        // Let the storm build up (every pusher and the lease churn have
        // been acknowledged at least once, however slow the machine), back
        // up in the middle of it, let it go on.
        let storm_is_up = || {
            let a = acks.lock().unwrap();
            a.pushes.iter().all(|p| !p.is_empty()) && !a.churn.is_empty() && !a.comments.is_empty()
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while !storm_is_up() {
            assert!(Instant::now() < deadline, "the storm never got going");
            std::thread::sleep(Duration::from_millis(50));
        }
        backup_started = Some(Instant::now());
        let out = h.host_cli(&["backup", "--to", path_str(&backup_dir), "--json"]);
        assert!(
            out.status.success(),
            "backup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        backup_reply = Some(stdout_json(&out));
        // Every pusher, and the issue writer, is acknowledged once more
        // after the backup began (what the checks below assume).
        let started = backup_started.unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let storm_went_on = || {
            let a = acks.lock().unwrap();
            a.pushes.iter().all(|p| p.iter().any(|(t, _)| *t > started))
                && a.issues.iter().any(|(t, _)| *t > started)
        };
        while !storm_went_on() {
            assert!(Instant::now() < deadline, "the storm stopped");
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let started = backup_started.unwrap();
    let reply = backup_reply.unwrap();
    let acks = acks.into_inner().unwrap();
    assert_eq!(reply["status"], "ok", "{reply}");
    assert_eq!(reply["counts"]["repos"], REPOS as u64, "{reply}");

    // The storm really overlapped the backup.
    for pushes in &acks.pushes {
        assert!(pushes.iter().any(|(t, _)| *t < started), "no push before");
        assert!(pushes.iter().any(|(t, _)| *t > started), "no push after");
    }
    let churn_before: Vec<i64> = acks
        .churn
        .iter()
        .filter(|(t, _)| *t < started)
        .map(|(_, token)| *token)
        .collect();
    assert!(!churn_before.is_empty());
    let churn_high_water = *churn_before.iter().max().unwrap();
    assert!(reply["counts"]["max_token"].as_i64().unwrap() >= churn_high_water);

    let key = reply["fingerprint"]
        .as_str()
        .expect("the signing key's fingerprint");
    assert!(key.starts_with("SHA256:"), "{reply}");
    let ok = h.host_cli(&[
        "backup",
        "--verify",
        path_str(&backup_dir),
        "--key",
        key,
        "--json",
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    assert_eq!(stdout_json(&ok)["problems"], serde_json::json!([]));

    // Restore into a fresh state directory (and a fresh database).
    let fresh = tempfile::tempdir().unwrap();
    let new_state = fresh.path().join("state");
    let new_db = h.pg.is_some().then(pg::TestDatabase::create);
    let new_url = new_db.as_ref().map(|db| db.url.clone());
    let out = host_cli(
        &new_state,
        new_url.as_deref(),
        &[
            "restore",
            "--from",
            path_str(&backup_dir),
            "--key",
            key,
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "restore failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let restored = stdout_json(&out);
    assert_eq!(restored["status"], "restored", "{restored}");
    assert_eq!(restored["checks"]["git_fsck"], "clean");
    assert_eq!(restored["checks"]["database_integrity"], "ok");
    assert_eq!(restored["signed_by"], key, "{restored}");

    // Every restored repository is whole. Checked before a server starts
    // on them: its start-up maintenance may repack beside a running fsck,
    // which then reports objects moving under it.
    for i in 0..acks.pushes.len() {
        let name = format!("r{i}");
        let fsck = Command::new("git")
            .args(["-c", "safe.directory=*", "-C"])
            .arg(new_state.join("repos").join(format!("{name}.git")))
            .args(["fsck", "--no-dangling"])
            .output()
            .unwrap();
        assert!(
            fsck.status.success(),
            "{name}: {}{}",
            String::from_utf8_lossy(&fsck.stdout),
            String::from_utf8_lossy(&fsck.stderr)
        );
    }

    // A server starts on it as on any other state directory.
    let r = ServerHarness::start_in_database(new_state.clone(), h.ssh_client_key(), new_url);
    for (i, pushes) in acks.pushes.iter().enumerate() {
        let name = format!("r{i}");
        let tip = remote_tip(&r, &name, "main");
        let tip_at = pushes
            .iter()
            .position(|(_, c)| *c == tip)
            .unwrap_or_else(|| panic!("{name}: restored tip {tip} was never pushed"));
        let last_acked_before = pushes.iter().rposition(|(t, _)| *t < started).unwrap();
        assert!(
            tip_at >= last_acked_before,
            "{name}: push {last_acked_before} was acknowledged before the backup, \
             the restore has only {tip_at}"
        );
    }
    let listed = lease(&r, "list 'r0'");
    assert_eq!(listed.code, 0, "{listed:?}");
    let listed = listed.json();
    let rows = listed["leases"].as_array().expect("a lease list");
    for (t, issue, token) in &acks.held {
        if *t >= started {
            continue;
        }
        let row = rows
            .iter()
            .find(|row| row["issue"] == issue.as_str())
            .unwrap_or_else(|| panic!("lease on {issue} acknowledged before the backup is gone"));
        assert_eq!(row["token"], *token, "{row}");
    }
    assert!(acks.held.iter().any(|(t, _, _)| *t < started));
    // Every issue and comment acknowledged before the backup is there.
    assert!(
        acks.issues.iter().any(|(t, _)| *t < started),
        "no issue before"
    );
    assert!(
        acks.issues.iter().any(|(t, _)| *t > started),
        "no issue after"
    );
    for (t, id) in &acks.issues {
        if *t < started {
            let shown = r.ssh_exec(&format!("collab-issue show 'r1' '{id}'"));
            assert_eq!(
                shown.code, 0,
                "issue {id} acknowledged before the backup: {shown:?}"
            );
        }
    }
    for (t, id, body) in &acks.comments {
        if *t < started {
            let shown = r.ssh_exec(&format!("collab-issue show 'r1' '{id}'"));
            assert!(
                shown.stdout.contains(body.as_str()),
                "comment {body:?} acknowledged before the backup is gone: {shown:?}"
            );
        }
    }
    // Fencing continues above the restored high-water mark.
    lease(&r, &format!("release 'r0' '{churned}'"));
    let next = lease(&r, &format!("acquire 'r0' '{churned}'"));
    assert_eq!(next.code, 0, "{next:?}");
    let next_token = next.json()["token"].as_i64().unwrap();
    assert!(
        next_token > churn_high_water,
        "token {next_token} after restore, {churn_high_water} was handed out before the backup"
    );
    // And it takes pushes.
    let clone = r.clone_repo("r1", "after-restore");
    r.commit_file(&clone, "g", b"after", "after restore");
    assert!(r
        .ssh_push(&clone, &["HEAD:refs/heads/main"])
        .status
        .success());

    // A non-empty state directory is refused and left as it was.
    let before = std::fs::read(h.authorized_keys_path()).unwrap();
    let out = h.host_cli(&["restore", "--from", path_str(&backup_dir), "--key", key]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: refusing to restore into"),
        "{stderr}"
    );
    assert!(stderr.contains("not empty"), "{stderr}");
    assert_eq!(std::fs::read(h.authorized_keys_path()).unwrap(), before);

    // On PostgreSQL, so is a database that is not empty (the live one), even
    // with an empty state directory: one line, nothing written anywhere.
    if h.pg.is_some() {
        let leases_before = lease(&h, "list 'r0'").stdout;
        let elsewhere = fresh.path().join("other-state");
        let out = host_cli(
            &elsewhere,
            Some(&h.db_setting()),
            &["restore", "--from", path_str(&backup_dir), "--key", key],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("already holds"), "{stderr}");
        assert!(!stderr.contains("password"), "{stderr}");
        assert!(!elsewhere.exists(), "nothing was written");
        assert_eq!(lease(&h, "list 'r0'").stdout, leases_before);
    }
}

/// Sets its flag when dropped, on a panic's unwinding too.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
