//! Operations benchmarks, each against a baseline measured in the same run:
//!
//! - "## Backup and restore": `git-collab-server backup`, `backup --verify`
//!   and `restore` of a server with BENCH_OPS_REPOS (default 100)
//!   repositories, one of them holding BENCH_OPS_ISSUES (default 10,000)
//!   issues in git, next to a plain `cp -a` of the state directory (what a
//!   stopped copy costs; it proves nothing and is not consistent online).
//! - "## Clone after many small pushes": a repository pushed to
//!   BENCH_OPS_PUSHES (default 1,000) times, one small commit per push,
//!   cloned over SSH through the server before and after its maintenance
//!   (`collab-repo gc`), and a copy of it after `git gc --aggressive` as the
//!   baseline: wall time of the client's `git clone` and CPU time of the
//!   server process and its children (`git upload-pack`, `pack-objects`),
//!   median of BENCH_OPS_CLONES (default 5).
//!
//! Writes both sections of docs/benchmarks.md. Run:
//! `cargo bench --bench ops` (fewer with BENCH_OPS_PUSHES=200 ...).

use collab_testkit::bench as support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use collab_testkit::ServerHarness;
use support::{env_usize, fmt, git, median, timed, write_section};

fn server_cli(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_git-collab-server"));
    cmd.args(args);
    cmd
}

fn du_bytes(path: &Path) -> u64 {
    let out = Command::new("du").args(["-sb"]).arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// CPU time (user + system) of `pid` and its waited-for children, from
/// /proc/PID/stat, in clock ticks converted to a Duration.
fn cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesized command name; utime is field 14.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // rest[0] is field 3 (state), so field N is rest[N - 3].
    let ticks = fields[11] + fields[12] + fields[13] + fields[14];
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64(ticks as f64 / hz)
}

fn backup_section(repos: usize, issues: usize) -> String {
    let h = ServerHarness::start();
    eprintln!("ops bench: {repos} repositories, {issues} issues");
    let seed = tempfile::tempdir().unwrap();
    let work = seed.path().join("work");
    run(Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .arg(&work));
    for i in 0..5 {
        std::fs::write(work.join("README"), format!("revision {i}\n").repeat(50)).unwrap();
        run(Command::new("git")
            .arg("-C")
            .arg(&work)
            .args(["add", "README"]));
        run(Command::new("git")
            .arg("-C")
            .arg(&work)
            .args(["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm"])
            .arg(format!("rev {i}")));
    }
    for r in 0..repos {
        let path = h.create_repo(&format!("repo{r:03}"));
        run(Command::new("git")
            .arg("-C")
            .arg(&work)
            .args(["push", "-q"])
            .arg(&path)
            .arg("main"));
    }
    let issue_repo = git2::Repository::open_bare(h.repos_dir().join("repo000.git")).unwrap();
    let key = collab_record::sign::SigningKey::generate(&seed.path().join("key"), "bench", false)
        .unwrap();
    support::build(&issue_repo, &key, issues, 3);
    git(&h.repos_dir().join("repo000.git"), &["gc", "-q"]);
    // Issues live in collab.db: import the DAGs into it (what the server
    // does with a repository that held issues before), so the backup
    // carries 10,000 issues in the database as well as their DAGs.
    let import = timed(
        server_cli(&["--state-dir"])
            .arg(h.state_dir())
            .args(["import", "repo000"]),
    );
    eprintln!("ops bench: imported {issues} issues in {}", fmt(import));

    let state = h.state_dir().to_path_buf();
    let scratch = tempfile::tempdir().unwrap();
    let copy_dir = scratch.path().join("cp-copy");
    let cp = timed(Command::new("cp").arg("-a").arg(&state).arg(&copy_dir));
    let cp_bytes = du_bytes(&copy_dir);

    let backup_dir = scratch.path().join("backup");
    let backup = timed(
        server_cli(&["--state-dir"])
            .arg(&state)
            .args(["backup", "--to"])
            .arg(&backup_dir),
    );
    let backup_bytes = du_bytes(&backup_dir);
    let verify = timed(server_cli(&["backup", "--verify"]).arg(&backup_dir));
    let restored = scratch.path().join("restored");
    let restore = timed(
        server_cli(&["--state-dir"])
            .arg(&restored)
            .args(["restore", "--from"])
            .arg(&backup_dir),
    );
    let ratio = |d: Duration| d.as_secs_f64() / cp.as_secs_f64();
    format!(
        "## Backup and restore\n\n\
         Measured by `cargo bench --bench ops` on {date}, 2 CPU cores shared with other jobs: \
         a running server with {repos} repositories (5 commits each), one of them also holding \
         {issues} issues of 3 events each, in `collab.db` (imported) and as their DAGs in git \
         (packed), every file on the same local disk. \
         The baseline is `cp -a` of the state directory in the same run: what a stopped copy \
         costs, with no consistency under writes and no check.\n\n\
         | what | time | vs `cp -a` | size |\n|---|---|---|---|\n\
         | `cp -a` of the state directory (baseline) | {cp_t} | 1.00x | {cp_b} |\n\
         | `backup --to` (online: database snapshot, per-repository lock + ref read + copy, SHA-256 of every file) | {b_t} | {b_r:.2}x | {b_b} |\n\
         | `backup --verify` (every hash, database integrity, `git fsck` of every repository) | {v_t} | {v_r:.2}x | |\n\
         | `restore` (check, copy, then `git fsck` of every repository, integrity and census of the database) | {r_t} | {r_r:.2}x | |\n\n\
         Backup costs a copy plus hashing; `--verify` and `restore` are dominated by `git fsck`, \
         which reads and checks every object of every repository (the part a plain copy skips).\n",
        date = chrono::Utc::now().format("%Y-%m-%d"),
        cp_t = fmt(cp),
        cp_b = mib(cp_bytes),
        b_t = fmt(backup),
        b_r = ratio(backup),
        b_b = mib(backup_bytes),
        v_t = fmt(verify),
        v_r = ratio(verify),
        r_t = fmt(restore),
        r_r = ratio(restore),
    )
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Median wall time of the client's clone and CPU of the server, over `runs`.
fn measure_clone(h: &ServerHarness, repo: &str, runs: usize) -> (Duration, Duration) {
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    for i in 0..runs {
        let dest = h.temp_dir().join(format!("clone-{repo}-{i}"));
        let before = cpu_of(h.pid());
        let start = Instant::now();
        let out = h
            .git_command(&h.ssh_client_key(), h.temp_dir())
            .args(["clone", "-q", "--bare"])
            .arg(h.repo_url(repo))
            .arg(&dest)
            .output()
            .unwrap();
        let wall = start.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The server reaps upload-pack right after the client is done.
        std::thread::sleep(Duration::from_millis(200));
        cpus.push(cpu_of(h.pid()).saturating_sub(before));
        walls.push(wall);
        std::fs::remove_dir_all(&dest).unwrap();
    }
    (median(walls), median(cpus))
}

fn clone_section(pushes: usize, runs: usize) -> String {
    let h = ServerHarness::start_with(collab_testkit::HarnessOptions {
        // Only the explicit `collab-repo gc` below maintains.
        env: vec![
            ("GIT_COLLAB_MAINTENANCE__AFTER_PUSHES".into(), "0".into()),
            ("GIT_COLLAB_MAINTENANCE__IDLE_SECS".into(), "0".into()),
        ],
        ..Default::default()
    });
    let bare = h.create_repo("many");
    let seed = tempfile::tempdir().unwrap();
    let work = seed.path().join("work");
    run(Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .arg(&work));
    eprintln!("ops bench: {pushes} pushes");
    for i in 0..pushes {
        // A small change to one of 50 files, as a typical small push.
        let file = work.join(format!("src/file{:02}.txt", i % 50));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let mut text = std::fs::read_to_string(&file).unwrap_or_default();
        text.push_str(&format!("line {i}: some change to the code\n"));
        std::fs::write(&file, text).unwrap();
        run(Command::new("git").arg("-C").arg(&work).args(["add", "-A"]));
        run(Command::new("git")
            .arg("-C")
            .arg(&work)
            .args(["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm"])
            .arg(format!("change {i}")));
        // receive-pack, as for a push through the server: few objects stay loose.
        run(Command::new("git")
            .arg("-C")
            .arg(&work)
            .args(["push", "-q"])
            .arg(&bare)
            .arg("main"));
    }
    let (packs, loose) = count(&bare);
    let before = measure_clone(&h, "many", runs);

    // The baseline: the same repository after `git gc --aggressive`.
    let aggressive_path = h.repos_dir().join("aggressive.git");
    run(Command::new("cp")
        .arg("-a")
        .arg(&bare)
        .arg(&aggressive_path));
    let gc_aggressive = timed(Command::new("git").arg("-C").arg(&aggressive_path).args([
        "gc",
        "-q",
        "--aggressive",
        "--prune=now",
    ]));
    let aggressive = measure_clone(&h, "aggressive", runs);

    let start = Instant::now();
    let out = h.ssh_exec("collab-repo gc 'many'");
    let maintenance = start.elapsed();
    assert_eq!(out.code, 0, "{out:?}");
    let (packs_after, loose_after) = count(&bare);
    let after = measure_clone(&h, "many", runs);
    let row = |name: &str, (wall, cpu): (Duration, Duration)| {
        format!(
            "| {name} | {} | {:.2}x | {} | {:.2}x |\n",
            fmt(wall),
            wall.as_secs_f64() / aggressive.0.as_secs_f64(),
            fmt(cpu),
            cpu.as_secs_f64() / aggressive.1.as_secs_f64().max(1e-3),
        )
    };
    format!(
        "## Clone after many small pushes\n\n\
         Measured by `cargo bench --bench ops` on {date}, 2 CPU cores shared with other jobs. \
         A repository got {pushes} pushes of one small commit each (a line added to one of 50 \
         files), through `git receive-pack` as a push to the server does: {loose} loose objects, \
         {packs} packs. Each row is the median of {runs} `git clone --bare` over SSH through the \
         server; CPU is the server process and its children (`git upload-pack`, \
         `pack-objects`). The baseline is a copy of the same repository after \
         `git gc --aggressive --prune=now` ({gc_t}), served by the same server.\n\n\
         | repository | clone wall | vs baseline | server CPU | vs baseline |\n|---|---|---|---|---|\n\
         {r_before}{r_after}{r_base}\n\
         The maintenance run (`collab-repo gc`: pack-refs, geometric repack with a multi-pack \
         bitmap, commit-graph) took {m_t} and left {loose_after} loose objects in \
         {packs_after} pack(s).\n",
        date = chrono::Utc::now().format("%Y-%m-%d"),
        gc_t = fmt(gc_aggressive),
        r_before = row("before maintenance", before),
        r_after = row("after maintenance", after),
        r_base = row("`git gc --aggressive` copy (baseline)", aggressive),
        m_t = fmt(maintenance),
    )
}

/// Packs and loose objects of a bare repository.
fn count(repo: &Path) -> (usize, usize) {
    let packs = std::fs::read_dir(repo.join("objects/pack"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
                .count()
        })
        .unwrap_or(0);
    let loose = std::fs::read_dir(repo.join("objects"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().len() == 2)
        .map(|e| std::fs::read_dir(e.path()).map_or(0, |d| d.count()))
        .sum();
    (packs, loose)
}

fn main() {
    let repos = env_usize("BENCH_OPS_REPOS", 100).max(1);
    let issues = env_usize("BENCH_OPS_ISSUES", 10_000);
    let pushes = env_usize("BENCH_OPS_PUSHES", 1_000).max(1);
    let runs = env_usize("BENCH_OPS_CLONES", 5).max(1);
    let doc = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("docs/benchmarks.md");
    let section = backup_section(repos, issues);
    println!("{section}");
    write_section(&doc, &section);
    let section = clone_section(pushes, runs);
    println!("{section}");
    write_section(&doc, &section);
}
