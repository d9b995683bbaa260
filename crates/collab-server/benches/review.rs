//! Push-to-review as clients see it, over SSH with the real `git`: a
//! `git push origin HEAD:refs/for/main` of a small change (which opens a
//! patch: the `proc-receive` hook, a revision ref and the database write)
//! against a plain push of the same kind of change to a new branch; and a
//! push to `main` on a repository with 1,000 open patches targeting it (the
//! post-receive merge scan reads every one) against the same push on a
//! repository with none.
//!
//! Run: `cargo bench --bench review` (release build). `BENCH_RUNS`
//! (default 30) pushes per row, `BENCH_PATCHES` (default 1000) open
//! patches. Writes docs/benchmarks.md under "## Push-to-review".
use collab_testkit::bench as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use collab_store::issues::Person;
use collab_store::patches::{self, NewPatch, NewRevision, WriteCtx};
use collab_testkit::ServerHarness;
use git2::{Oid, Repository, Signature};
use support::{env_usize, fmt, median, timed, write_section};

const SECTION: &str = "## Push-to-review";

/// A clone of `repo` as the harness's client, with `main` checked out.
fn clone(h: &ServerHarness, repo: &str, dir: &str) -> PathBuf {
    let key = h.ssh_client_key();
    h.clone_as(&key, repo, dir)
}

fn git(h: &ServerHarness, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = h.git_command(&h.ssh_client_key(), dir);
    cmd.args(args);
    cmd
}

/// A new commit on top of HEAD changing one small file.
fn small_change(h: &ServerHarness, dir: &Path, i: usize) {
    std::fs::write(dir.join(format!("f{}.txt", i % 8)), format!("change {i}\n")).unwrap();
    timed(&mut git(h, dir, &["add", "-A"]));
    timed(&mut git(
        h,
        dir,
        &["commit", "-q", "-m", &format!("Change {i}")],
    ));
}

/// `count` commits off `main` of the bare repository at `bare`, each
/// pinned as a revision and recorded as an open patch against `main` in
/// the stopped server's collab.db.
fn seed_open_patches(bare: &Path, db_path: &Path, repo_name: &str, count: usize) {
    let repo = Repository::open_bare(bare).unwrap();
    let main = repo.find_reference("refs/heads/main").unwrap();
    let base = main.peel_to_commit().unwrap();
    let sig = Signature::now("seed", "seed@example.com").unwrap();
    let conn = collab_store::leases::open(db_path).unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    let who = Person {
        principal: "SHA256:seed".into(),
        name: "seed".into(),
        key: None,
    };
    for i in 0..count {
        let blob = repo.blob(format!("patch {i}\n").as_bytes()).unwrap();
        let mut tree = repo.treebuilder(Some(&base.tree().unwrap())).unwrap();
        tree.insert(format!("p{i}.txt"), blob, 0o100644).unwrap();
        let tree = repo.find_tree(tree.write().unwrap()).unwrap();
        let head: Oid = repo
            .commit(None, &sig, &sig, &format!("Patch {i}"), &tree, &[&base])
            .unwrap();
        let w = WriteCtx {
            repo: repo_name,
            actor: &who,
            max_body: 1 << 16,
            now: 1_800_000_000 + i as i64,
        };
        let new = NewPatch {
            title: format!("Patch {i}"),
            body: String::new(),
            base: "main".into(),
            revision: NewRevision {
                head: head.to_string(),
                base_commit: base.id().to_string(),
                base_tip: Some(base.id().to_string()),
            },
            issues: Vec::new(),
            change_id: None,
            depends_on: None,
        };
        let written = patches::open(&tx, &w, &new).unwrap();
        repo.reference(
            &format!("refs/collab/revisions/{}/1", written.patch),
            head,
            false,
            "seed",
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

fn exported(db_path: &Path, repo: &str) -> i64 {
    let conn = rusqlite::Connection::open(db_path).unwrap();
    conn.query_row(
        "SELECT COUNT(*) FROM patch_exports WHERE repo = ?1",
        [repo],
        |r| r.get(0),
    )
    .unwrap_or(0)
}

fn open_patches(db_path: &Path, repo: &str) -> i64 {
    let conn = rusqlite::Connection::open(db_path).unwrap();
    conn.query_row(
        "SELECT COUNT(*) FROM patches WHERE repo = ?1 AND status = 'open' AND base = 'main'",
        [repo],
        |r| r.get(0),
    )
    .unwrap()
}

fn main() {
    let runs = env_usize("BENCH_RUNS", 30).max(1);
    let count = env_usize("BENCH_PATCHES", 1000);
    let mut h = ServerHarness::start();
    for name in ["plain", "review", "quiet", "busy"] {
        h.create_repo(name);
        let seed = clone(&h, name, &format!("seed-{name}"));
        h.commit_file(&seed, "README", b"hello\n", "Initial commit");
        h.ssh_push(&seed, &["HEAD:refs/heads/main"]);
    }

    // A refs/for push against a plain push of the same kind of change,
    // interleaved so both rows see the same machine.
    let plain_dir = clone(&h, "plain", "plain");
    let review_dir = clone(&h, "review", "review");
    let plain_push = |i: usize| {
        small_change(&h, &plain_dir, i);
        timed(&mut git(
            &h,
            &plain_dir,
            &[
                "push",
                "-q",
                "origin",
                &format!("HEAD:refs/heads/topic-{i}"),
            ],
        ))
    };
    let review_push = |i: usize| {
        small_change(&h, &review_dir, i);
        timed(&mut git(
            &h,
            &review_dir,
            &["push", "-q", "origin", "HEAD:refs/for/main"],
        ))
    };
    plain_push(runs + 1000);
    review_push(runs + 1000);
    let (mut plain_samples, mut review_samples) = (Vec::new(), Vec::new());
    for i in 0..runs {
        plain_samples.push(plain_push(i));
        review_samples.push(review_push(i));
    }
    let (plain, review) = (median(plain_samples), median(review_samples));

    // A push to main with `count` open patches on it, against none.
    h.stop();
    let db_path = h.repos_dir().join("collab.db");
    seed_open_patches(&h.repos_dir().join("busy.git"), &db_path, "busy.git", count);
    h.start_again();
    // The server's signed export catches up on the seeded patches at start
    // (one signed chain and one database write each); the pushes are
    // measured after it, in the steady state.
    let caught_up = std::time::Instant::now();
    while exported(&db_path, "busy.git") < count as i64 {
        assert!(
            caught_up.elapsed() < Duration::from_secs(600),
            "the patch export did not catch up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "export caught up on {count} patches in {}",
        fmt(caught_up.elapsed())
    );
    // Both repositories as the server's maintenance leaves them (it runs
    // after a number of pushes or when a repository is idle): refs packed.
    for name in ["quiet", "busy"] {
        let out = h.ssh_exec(&format!("collab-repo gc '{name}'"));
        assert_eq!(out.code, 0, "{out:?}");
    }
    let quiet_dir = clone(&h, "quiet", "quiet");
    let busy_dir = clone(&h, "busy", "busy");
    let to_main = |dir: &Path, i: usize| {
        small_change(&h, dir, i);
        timed(&mut git(
            &h,
            dir,
            &["push", "-q", "origin", "HEAD:refs/heads/main"],
        ))
    };
    // Interleaved, so both rows see the same machine.
    let mut quiet_samples = Vec::new();
    let mut busy_samples = Vec::new();
    to_main(&quiet_dir, 9999);
    to_main(&busy_dir, 9999);
    for i in 0..runs {
        quiet_samples.push(to_main(&quiet_dir, i));
        busy_samples.push(to_main(&busy_dir, i));
    }
    let (quiet, busy) = (median(quiet_samples), median(busy_samples));
    let still_open = open_patches(&db_path, "busy.git");

    let ratio =
        |d: Duration, base: Duration| format!("{:.2}x", d.as_secs_f64() / base.as_secs_f64());
    let section = format!(
        "{SECTION}\n\n\
         `cargo bench --bench review` (release build), one run on {date}, {cores} CPUs shared \
         with other work, loopback, OpenSSH client, real `git push`. Medians of {runs} pushes \
         per row; each push sends one new commit changing one small file, over a fresh SSH \
         connection, and is timed from `git push` starting to it exiting (the hooks included).\n\n\
         | push | median | vs baseline | target |\n\
         |---|---:|---:|---|\n\
         | baseline: `git push origin HEAD:refs/heads/topic-N` (a new branch) | {} | 1.00x | |\n\
         | `git push origin HEAD:refs/for/main` (opens a patch: proc-receive, revision ref, database write) | {} | {} | ≤ 1.2x |\n\
         | baseline: `git push origin HEAD:refs/heads/main` (fast-forward), no open patch | {} | 1.00x | |\n\
         | the same push with {count} open patches targeting `main` (the merge scan checks each) | {} | {} | ≤ 1.2x |\n\n\
         Both repositories of the second pair went through the server's maintenance \
         (`collab-repo gc`: refs packed) after the seeding and the export's catch-up, as a \
         busy repository is between pushes. The {count} patches are open before and after ({still_open} open when the run ended: \
         none of their heads is reachable from the pushed commits, so the scan reads each one \
         and merges none).\n",
        fmt(plain),
        fmt(review),
        ratio(review, plain),
        fmt(quiet),
        fmt(busy),
        ratio(busy, quiet),
        date = chrono::Utc::now().format("%Y-%m-%d"),
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
    );
    println!("{section}");
    write_section(
        &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md"),
        &section,
    );
}
