//! The pack cache (issue 29) with the real server, `git` over `ssh` and
//! smart HTTP: identical concurrent clones share one `pack-objects` run
//! (counted through the server's own metric), a killed client does not
//! break the others, a force-push never serves stale objects, packs never
//! cross repositories, the size limit holds, a corrupted entry is
//! regenerated, and shallow and partial clones stay correct.
//! Runs once: the cache keeps nothing in the collab database.

use collab_testkit as common;
use collab_testkit::web as web_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// Cache every request from the first (the threshold is tested apart).
const EAGER: (&str, &str) = ("GIT_COLLAB_GIT__PACK_CACHE_MIN_OCCURRENCES", "1");

/// A metric's value from `/metrics`.
fn metric(h: &ServerHarness, name: &str) -> i64 {
    let text = web_support::get(h, "/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// `name` with a few MB of text and binary over some commits; its HEAD.
fn seed(h: &ServerHarness, name: &str, mb: usize) -> String {
    h.create_repo(name);
    let clone = h.clone_repo(name, &format!("{}-seed", name.replace('/', "-")));
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    };
    for c in 0..4 {
        let text: String = (0..mb * 4_000)
            .map(|i| format!("line {i} of commit {c}: some text to compress\n"))
            .collect();
        h.commit_file(&clone, &format!("text{c}.txt"), text.as_bytes(), "text");
        h.commit_file(
            &clone,
            &format!("blob{c}.bin"),
            &noise(mb * 64 * 1024),
            "binary",
        );
    }
    h.ssh_push(&clone, &["HEAD:main"]);
    h.rev_parse(&clone, "HEAD")
}

fn clone_cmd(h: &ServerHarness, url: &str, dest: &Path, extra: &[&str]) -> Command {
    let mut cmd = h.git_command(&h.ssh_client_key(), h.temp_dir());
    cmd.args(["clone", "-q"]).args(extra).arg(url).arg(dest);
    cmd
}

/// Clone `url` into the temporary directory's `name` (with `extra`
/// options), which must succeed.
fn cloned(h: &ServerHarness, url: &str, name: &str, extra: &[&str]) -> PathBuf {
    let dest = h.temp_dir().join(name);
    let out = clone_cmd(h, url, &dest, extra).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    dest
}

/// Force-push `commit` to `main` from the clone `w`, which must succeed.
fn force_push(h: &ServerHarness, w: &Path, commit: &str) {
    let out = h.git(
        w,
        &[
            "push",
            "-q",
            "-f",
            "origin",
            &format!("{commit}:refs/heads/main"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
}

fn check_clone(h: &ServerHarness, dir: &Path, head: &str) {
    let fsck = h.git(dir, &["fsck", "--no-progress"]);
    assert!(fsck.status.success(), "{fsck:?}");
    assert_eq!(h.rev_parse(dir, "HEAD"), head);
}

/// The cached packs (the hook's entries, which start as a pack does).
fn cache_entries(h: &ServerHarness) -> Vec<PathBuf> {
    all_entries(h)
        .into_iter()
        .filter(|p| std::fs::read(p).is_ok_and(|b| b.starts_with(b"PACK")))
        .collect()
}

/// What a cached smart HTTP answer (protocol v2 pkt-lines, not a pack)
/// answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// `GET info/refs`: starts with `version 2`.
    Advertisement,
    /// `ls-refs`: a ref line (`<oid> <name>`), an `unborn` line, or the
    /// flush packet of an empty list.
    RefList,
    /// `fetch`: a section header (`acknowledgments`, `packfile`…).
    Fetch,
}

fn answer_kind(answer: &[u8]) -> Answer {
    let first = answer.get(4..).unwrap_or_default();
    if first.starts_with(b"version 2\n") {
        Answer::Advertisement
    } else if answer.starts_with(b"0000")
        || first.starts_with(b"unborn ")
        || (first.len() > 41 && first[..40].iter().all(u8::is_ascii_hexdigit) && first[40] == b' ')
    {
        Answer::RefList
    } else {
        Answer::Fetch
    }
}

/// The cached smart HTTP answers of `kind`.
fn http_answers(h: &ServerHarness, kind: Answer) -> Vec<PathBuf> {
    all_entries(h)
        .into_iter()
        .filter(|p| {
            std::fs::read(p).is_ok_and(|b| !b.starts_with(b"PACK") && answer_kind(&b) == kind)
        })
        .collect()
}

/// The cached smart HTTP `fetch` answers.
fn answer_entries(h: &ServerHarness) -> Vec<PathBuf> {
    http_answers(h, Answer::Fetch)
}

fn all_entries(h: &ServerHarness) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(h.state_dir().join("pack-cache")) else {
        return Vec::new();
    };
    dir.flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pack"))
        .collect()
}

/// The protocol v2 requests the server answered itself from the cache, by
/// kind: (advertisements, ref lists, fetches). A clone asks one of each.
fn served(h: &ServerHarness) -> (i64, i64, i64) {
    (
        metric(h, "git_collab_pack_cache_advertisements_total"),
        metric(h, "git_collab_pack_cache_ref_lists_total"),
        metric(h, "git_collab_pack_cache_direct_total"),
    )
}

/// Wait until `n` fetch answers are kept: an answer becomes an entry just
/// after its last byte went out (once git exited), so the next request
/// must not race it.
fn answers_become(h: &ServerHarness, n: usize) {
    let start = Instant::now();
    while answer_entries(h).len() < n {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}\n{}",
            all_entries(h),
            h.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Flip a byte in the middle of every kept answer (not the hook's packs):
/// each entry and its corrupted bytes.
fn corrupt_answers(h: &ServerHarness) -> Vec<(PathBuf, Vec<u8>)> {
    let packs = cache_entries(h);
    let mut corrupted = Vec::new();
    for entry in all_entries(h).into_iter().filter(|p| !packs.contains(p)) {
        let mut bytes = std::fs::read(&entry).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x55;
        std::fs::write(&entry, &bytes).unwrap();
        corrupted.push((entry, bytes));
    }
    corrupted
}

#[test]
fn concurrent_identical_clones_share_one_pack_objects_over_ssh_and_http() {
    let h = server(&[EAGER]);
    let head = seed(&h, "fleet/app", 2);
    let runs_before = metric(&h, "git_collab_pack_objects_runs_total");

    let n = 8;
    let children: Vec<_> = (0..n)
        .map(|i| {
            let dest = h.temp_dir().join(format!("c{i}"));
            let child = clone_cmd(&h, &h.repo_url("fleet/app"), &dest, &[])
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            (dest, child)
        })
        .collect();
    for (dest, child) in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        check_clone(&h, &dest, &head);
    }
    let runs = metric(&h, "git_collab_pack_objects_runs_total") - runs_before;
    let hits = metric(&h, "git_collab_pack_cache_hits_total");
    println!("{n} concurrent clones: {runs} pack-objects runs, {hits} hits");
    assert_eq!(runs, 1, "identical clones ran pack-objects {runs} times");
    assert!(hits >= n - 1, "{hits} hits");
    assert!(metric(&h, "git_collab_pack_cache_bytes_served_total") > 0);
    // Every client got the same pack: one entry.
    assert_eq!(cache_entries(&h).len(), 1);

    // Smart HTTP goes through the same cache (public repository).
    web_support::make_public(&h, "fleet/app");
    let url = format!("{}/fleet/app.git", h.http_url());
    let before = metric(&h, "git_collab_pack_objects_runs_total");
    for i in 0..3 {
        let dest = cloned(&h, &url, &format!("http{i}"), &[]);
        check_clone(&h, &dest, &head);
    }
    let http_runs = metric(&h, "git_collab_pack_objects_runs_total") - before;
    assert!(
        http_runs <= 1,
        "3 identical HTTP clones ran pack-objects {http_runs} times"
    );
}

#[test]
fn a_client_killed_mid_stream_does_not_break_the_others() {
    // Slow producer: one thread, no deltas reused, a big random file.
    let h = server(&[EAGER]);
    let head = seed(&h, "big", 12);
    let url = h.repo_url("big");
    let first_dest = h.temp_dir().join("killed");
    let mut first = clone_cmd(&h, &url, &first_dest, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until its pack is being produced.
    let cache = h.state_dir().join("pack-cache");
    let start = Instant::now();
    while !std::fs::read_dir(&cache)
        .map(|d| {
            d.flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "tmp"))
        })
        .unwrap_or(false)
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no producer started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let others: Vec<_> = (0..3)
        .map(|i| {
            let dest = h.temp_dir().join(format!("other{i}"));
            let child = clone_cmd(&h, &url, &dest, &[]).spawn().unwrap();
            (dest, child)
        })
        .collect();
    first.kill().unwrap();
    first.wait().unwrap();
    for (dest, child) in others {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        check_clone(&h, &dest, &head);
    }
    assert_eq!(metric(&h, "git_collab_pack_objects_runs_total"), 1);
}

#[test]
fn a_force_push_between_identical_looking_requests_serves_the_new_objects() {
    let h = server(&[EAGER]);
    let old = seed(&h, "app", 1);
    let a = h.clone_repo("app", "a");
    check_clone(&h, &a, &old);
    // Rewrite main: same ref name, other commit.
    h.git(&a, &["reset", "-q", "--hard", "HEAD~1"]);
    let new = h.commit_file(&a, "other.txt", b"rewritten\n", "rewritten");
    h.git(&a, &["push", "-q", "-f", "origin", "HEAD:main"]);
    let b = h.clone_repo("app", "b");
    check_clone(&h, &b, &new);
    assert!(
        !h.git_as(&h.ssh_client_key(), &b, &["cat-file", "-e", &old])
            .status
            .success(),
        "the old, force-pushed-away commit reached a new clone"
    );
}

#[test]
fn a_private_repositorys_pack_never_serves_a_public_one() {
    let h = server(&[EAGER]);
    // The same objects in two repositories: one private, one public.
    let head = seed(&h, "secret", 1);
    let seed_clone = h.temp_dir().join("secret-seed");
    h.create_repo("open");
    h.git(
        &seed_clone,
        &["push", "-q", &h.repo_url("open"), "HEAD:main"],
    );
    web_support::make_public(&h, "open");

    let mine = h.clone_repo("secret", "mine");
    check_clone(&h, &mine, &head);
    // Anonymous HTTP: the public one clones, the private one does not exist.
    let open = h.temp_dir().join("anon-open");
    let out = clone_cmd(&h, &format!("{}/open.git", h.http_url()), &open, &[])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    check_clone(&h, &open, &head);
    let out = clone_cmd(
        &h,
        &format!("{}/secret.git", h.http_url()),
        &h.temp_dir().join("anon-secret"),
        &[],
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    // Byte-identical requests, two repositories: two entries, never one.
    assert_eq!(cache_entries(&h).len(), 2, "{:?}", cache_entries(&h));
    // The anonymous clone of the private one got no answer from the cache.
    assert_eq!(metric(&h, "git_collab_pack_cache_direct_total"), 0);
}

#[test]
fn http_fetches_are_answered_by_the_server_itself_never_stale_never_corrupt() {
    let h = server(&[
        EAGER,
        ("GIT_COLLAB_LOG__LEVEL", "info,collab_server::http=debug"),
    ]);
    let old = seed(&h, "app", 1);
    // The seed's own clone of the empty repository (over SSH, answered by
    // the server too) left entries: start from none.
    for entry in all_entries(&h) {
        std::fs::remove_file(entry).unwrap();
    }
    web_support::make_public(&h, "app");
    let url = format!("{}/app.git", h.http_url());
    let http_clone = |name: &str| cloned(&h, &url, name, &[]);
    // Each HTTP clone asks three things: the advertisement, the ref list,
    // the pack. How many of each the server answered itself:
    let served = || served(&h);
    let runs = || metric(&h, "git_collab_pack_objects_runs_total");
    let answers_become = |n: usize| answers_become(&h, n);

    // The first clone's answer is kept; the second is sent from it, with
    // no upload-pack (hence no pack-objects) at all.
    check_clone(&h, &http_clone("a"), &old);
    assert_eq!(served(), (0, 0, 0));
    answers_become(1);
    assert_eq!(
        http_answers(&h, Answer::RefList).len(),
        1,
        "the ref list is kept too"
    );
    assert_eq!(
        http_answers(&h, Answer::Advertisement).len(),
        1,
        "the advertisement is kept too"
    );
    let runs_before = runs();
    let hits_before = metric(&h, "git_collab_pack_cache_hits_total");
    check_clone(&h, &http_clone("b"), &old);
    // All three of the clone's requests.
    assert_eq!(served(), (1, 1, 1));
    assert_eq!(runs(), runs_before);
    assert_eq!(
        metric(&h, "git_collab_pack_cache_hits_total"),
        hits_before + 1
    );

    // A force-push: the identical-looking clone request now gets the new
    // objects, from upload-pack.
    let w = h.clone_repo("app", "w");
    // The writer's clone (over SSH) may itself have been answered from the
    // kept answers: count from here.
    let (a0, r0, d0) = served();
    let after = |n: i64| (a0 + n, r0 + n, d0 + n);
    h.git(&w, &["reset", "-q", "--hard", "HEAD~1"]);
    let new = h.commit_file(&w, "other.txt", b"rewritten\n", "rewritten");
    h.git(&w, &["push", "-q", "-f", "origin", "HEAD:main"]);
    let c = http_clone("c");
    check_clone(&h, &c, &new);
    assert!(
        !h.git_as(&h.ssh_client_key(), &c, &["cat-file", "-e", &old])
            .status
            .success(),
        "the old, force-pushed-away commit reached a new clone"
    );
    // No answer came from before the force-push: not the advertisement,
    // not the ref list (it would name the old commit), not the pack.
    assert_eq!(served(), after(0));
    answers_become(2);
    check_clone(&h, &http_clone("d"), &new);
    assert_eq!(served(), after(1));

    // Back to the old commit: the same ref values as the first answer's,
    // but a new ref state (the ref file was rewritten), so upload-pack
    // answers rather than an answer kept from before the force-push.
    force_push(&h, &w, &old);
    check_clone(&h, &http_clone("e"), &old);
    assert_eq!(served(), after(1));
    answers_become(3);

    // A corrupted answer is detected, removed, and written anew (the
    // advertisements', the ref lists' and the packs').
    let corrupt_before = metric(&h, "git_collab_pack_cache_corrupt_total");
    let corrupted = corrupt_answers(&h);
    check_clone(&h, &http_clone("f"), &old);
    let start = Instant::now();
    while corrupted
        .iter()
        .all(|(p, bytes)| std::fs::read(p).ok().is_none_or(|now| &now == bytes))
    {
        assert!(start.elapsed() < Duration::from_secs(20), "not rewritten");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(served(), after(1));
    assert_eq!(
        metric(&h, "git_collab_pack_cache_corrupt_total"),
        corrupt_before + 3,
        "the clone's advertisement, ref list and pack were all found corrupt"
    );
    check_clone(&h, &http_clone("g"), &old);
    assert_eq!(served(), after(2));
}

/// Issue 29 over SSH: a protocol v2 clone or fetch is a conversation on
/// one channel (advertisement, `ls-refs`, `fetch`), which the server now
/// speaks itself, so the answers kept for smart HTTP serve SSH too. Every
/// `git` the server starts goes through a wrapper that logs it: a clone
/// whose three answers are kept starts no upload-pack at all. Never stale
/// (a push, a force-push), corrupt entries rewritten, protocol v0 still
/// served by upload-pack, and hostile input refused with git's `ERR`.
#[test]
fn ssh_fetches_are_answered_by_the_server_itself_never_stale_never_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, log) = git_wrapper(tmp.path());
    let h = server(&[EAGER, ("PATH", &path)]);
    let old = seed(&h, "app", 1);
    let upload_packs = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.split(' ').any(|w| w == "upload-pack"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let ssh_clone = |name: &str, extra: &[&str]| cloned(&h, &h.repo_url("app"), name, extra);
    let fetch = |dir: &Path| {
        let out = h.git(dir, &["fetch", "-q", "origin"]);
        assert!(out.status.success(), "{out:?}");
        h.rev_parse(dir, "origin/main")
    };
    let served = || served(&h);
    let answers_become = |n: usize| answers_become(&h, n);

    // The first clone is answered by one stateless upload-pack per request
    // (never one holding the conversation), and its answers are kept.
    let before = upload_packs().len();
    let a = ssh_clone("a", &[]);
    check_clone(&h, &a, &old);
    assert_eq!(served(), (0, 0, 0));
    let first = upload_packs()[before..].to_vec();
    assert_eq!(first.len(), 3, "advertisement, ls-refs, fetch: {first:?}");
    assert!(
        first.iter().all(|l| l.contains("--stateless-rpc")),
        "{first:?}"
    );
    answers_become(1);
    // The second starts no git process: all three answers are kept ones.
    let before = upload_packs().len();
    let b = ssh_clone("b", &[]);
    check_clone(&h, &b, &old);
    assert_eq!(served(), (1, 1, 1));
    assert_eq!(upload_packs().len(), before, "{:?}", upload_packs());

    // A push: two clones at the same commit fetch it; the second fetch is
    // answered from what the first left.
    let w = h.clone_repo("app", "w");
    assert_eq!(served(), (2, 2, 2), "the writer's clone was a kept one too");
    let new = h.commit_file(&w, "new.txt", b"new\n", "new");
    h.ssh_push(&w, &["HEAD:main"]);
    assert_eq!(fetch(&a), new);
    answers_become(2);
    let before = upload_packs().len();
    assert_eq!(fetch(&b), new);
    assert_eq!(served(), (3, 3, 3));
    assert_eq!(upload_packs().len(), before, "{:?}", upload_packs());
    let fsck = h.git(&b, &["fsck", "--no-progress"]);
    assert!(fsck.status.success(), "{fsck:?}");

    // A force-push back to the old commit: the ref values of the first
    // answers, a new ref state; a clone gets the old commit and not the
    // pushed-away one, from upload-pack.
    force_push(&h, &w, &old);
    let c = ssh_clone("c", &[]);
    check_clone(&h, &c, &old);
    assert!(
        !h.git_as(&h.ssh_client_key(), &c, &["cat-file", "-e", &new])
            .status
            .success(),
        "a force-pushed-away commit reached a new clone"
    );
    assert_eq!(served(), (3, 3, 3));
    answers_become(3);

    // Corrupted answers are detected, removed and written anew.
    let corrupt_before = metric(&h, "git_collab_pack_cache_corrupt_total");
    corrupt_answers(&h);
    check_clone(&h, &ssh_clone("d", &[]), &old);
    assert_eq!(served(), (3, 3, 3));
    assert_eq!(
        metric(&h, "git_collab_pack_cache_corrupt_total"),
        corrupt_before + 3,
        "the clone's advertisement, ref list and pack were all found corrupt"
    );

    // Protocol v0 is served by an upload-pack holding the conversation.
    let before = upload_packs().len();
    check_clone(&h, &ssh_clone("v0", &["-c", "protocol.version=0"]), &old);
    let v0 = upload_packs()[before..].to_vec();
    assert!(
        v0.len() == 1 && !v0[0].contains("--stateless-rpc"),
        "{v0:?}"
    );

    // Hostile or broken input: git's ERR packet after the advertisement,
    // one line on stderr, exit 128; the server serves on.
    let v2 = |stdin: &[u8]| {
        h.ssh_raw(
            &h.ssh_client_key(),
            &[
                "-o",
                "SetEnv=GIT_PROTOCOL=version=2",
                "git@127.0.0.1",
                "git-upload-pack app.git",
            ],
            stdin,
        )
    };
    for (input, why) in [
        (&b"zzzz"[..], "bad packet length"),
        (b"0003", "bad packet length"),
        (b"0012command=ls-r", "ended inside a packet"),
        (b"0014command=ls-refs\n0001", "ended inside a request"),
    ] {
        let out = v2(input);
        assert_eq!(out.code, 128, "{input:?}: {out:?}");
        assert!(out.stdout.starts_with("000eversion 2\n"), "{out:?}");
        assert!(out.stdout.contains("ERR "), "{out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
        assert!(
            out.stderr.starts_with("error: ") && out.stderr.contains(why),
            "{out:?}"
        );
    }
    // A request longer than the cache looks up (a long list of prefixes)
    // is streamed to upload-pack as it arrives and answered whole.
    let pkt = |line: &str| format!("{:04x}{line}", line.len() + 4);
    let mut long = pkt("command=ls-refs\n") + "0001";
    for i in 0..9000 {
        long += &pkt(&format!("ref-prefix refs/heads/nothing-{i:05}\n"));
    }
    long += &pkt("ref-prefix refs/heads/main\n");
    long += "00000000";
    let long = long.into_bytes();
    assert!(long.len() > 256 * 1024);
    let out = v2(&long);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains(&format!("{old} refs/heads/main\n")),
        "{out:?}"
    );
    // A clean end right after the advertisement.
    let out = v2(b"0000");
    assert_eq!(out.code, 0, "{out:?}");
    check_clone(&h, &ssh_clone("e", &[]), &old);
}

#[test]
fn concurrent_identical_http_clones_wait_for_one_answer() {
    let h = server(&[EAGER]);
    let head = seed(&h, "app", 2);
    web_support::make_public(&h, "app");
    let url = format!("{}/app.git", h.http_url());
    let n = 8;
    let children: Vec<_> = (0..n)
        .map(|i| {
            let dest = h.temp_dir().join(format!("h{i}"));
            let child = clone_cmd(&h, &url, &dest, &[])
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            (dest, child)
        })
        .collect();
    for (dest, child) in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        check_clone(&h, &dest, &head);
    }
    // One request keeps the answer; the others wait for it (or find it
    // finished) and get it from the server, with no upload-pack.
    let direct = metric(&h, "git_collab_pack_cache_direct_total");
    println!("{n} concurrent HTTP clones: {direct} answered from the cache");
    assert!(direct >= n - 2, "{direct} of {n} answered from the cache");
}

#[test]
fn http_clones_waiting_for_a_killed_clients_answer_still_get_theirs() {
    use std::os::unix::process::CommandExt as _;
    let h = server(&[EAGER]);
    let head = seed(&h, "big", 12);
    web_support::make_public(&h, "big");
    let url = format!("{}/big.git", h.http_url());
    // The first clone keeps the answer (a `<key>.<server pid>.new` file).
    let mut first = clone_cmd(&h, &url, &h.temp_dir().join("killed"), &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let cache = h.state_dir().join("pack-cache");
    let mark = format!(".{}.new", h.pid());
    let start = Instant::now();
    while !std::fs::read_dir(&cache)
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(&mark))
        })
        .unwrap_or(false)
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no answer being kept"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Identical clones now wait for that answer; its client dies (the
    // whole process group: git and git-remote-http).
    let others: Vec<_> = (0..3)
        .map(|i| {
            let dest = h.temp_dir().join(format!("other{i}"));
            let child = clone_cmd(&h, &url, &dest, &[]).spawn().unwrap();
            (dest, child)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let killed = Command::new("kill")
        .args(["-9", "--", &format!("-{}", first.id())])
        .status()
        .unwrap();
    assert!(killed.success());
    first.wait().unwrap();
    let waited = Instant::now();
    for (dest, child) in others {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        check_clone(&h, &dest, &head);
    }
    // Not the 60 s a waiter gives a writer that never finishes: the dead
    // client's request let go of the answer at once.
    assert!(
        waited.elapsed() < Duration::from_secs(45),
        "the waiting clones took {:?}",
        waited.elapsed()
    );
}

#[test]
fn the_size_limit_holds_and_a_corrupted_entry_is_regenerated() {
    // The hook's entries: SSH conversations held by upload-pack (the
    // server's own answers would serve the clones before the hook runs).
    let h = server(&[EAGER, ("GIT_COLLAB_SSH_V2_IN_SERVER", "0")]);
    let head = seed(&h, "app", 1);
    h.clone_repo("app", "warm");
    let entries = cache_entries(&h);
    assert_eq!(entries.len(), 1);
    // Flip one byte in the middle of the cached pack.
    let mut bytes = std::fs::read(&entries[0]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&entries[0], &bytes).unwrap();
    let runs = metric(&h, "git_collab_pack_objects_runs_total");
    let again = h.clone_repo("app", "again");
    check_clone(&h, &again, &head);
    assert_eq!(metric(&h, "git_collab_pack_cache_corrupt_total"), 1);
    assert_eq!(metric(&h, "git_collab_pack_objects_runs_total"), runs + 1);
    // Regenerated: the entry is whole again and serves the next clone.
    let third = h.clone_repo("app", "third");
    check_clone(&h, &third, &head);
    assert_eq!(metric(&h, "git_collab_pack_objects_runs_total"), runs + 1);

    // A cache smaller than one pack keeps nothing, and still serves.
    let small = server(&[EAGER, ("GIT_COLLAB_GIT__PACK_CACHE_MAX_SIZE", "64KiB")]);
    let head = seed(&small, "app", 1);
    for i in 0..2 {
        let c = small.clone_repo("app", &format!("s{i}"));
        check_clone(&small, &c, &head);
    }
    assert!(
        cache_entries(&small).is_empty(),
        "{:?}",
        cache_entries(&small)
    );
}

#[test]
fn shallow_and_partial_clones_are_correct_and_cached_apart() {
    let h = server(&[EAGER]);
    let head = seed(&h, "app", 1);
    let url = h.repo_url("app");
    let shapes: [&[&str]; 2] = [&["--depth", "1"], &["--filter=blob:none"]];
    let mut runs_after_first = 0;
    for round in 0..2 {
        for (i, extra) in shapes.iter().enumerate() {
            let dest = cloned(&h, &url, &format!("p{round}-{i}"), extra);
            check_clone(&h, &dest, &head);
            if extra[0] == "--depth" {
                let count = h.git(&dest, &["rev-list", "--count", "HEAD"]);
                assert_eq!(String::from_utf8_lossy(&count.stdout).trim(), "1");
                assert!(dest.join(".git/shallow").exists());
            } else {
                let promisor = h.git(&dest, &["config", "remote.origin.promisor"]);
                assert_eq!(String::from_utf8_lossy(&promisor.stdout).trim(), "true");
            }
        }
        if round == 0 {
            runs_after_first = metric(&h, "git_collab_pack_objects_runs_total");
            // depth 1, filter, and the filtered clone's lazy blob fetch.
            assert!(runs_after_first >= 2, "{runs_after_first}");
        }
    }
    // The same shapes again: all from the cache.
    assert_eq!(
        metric(&h, "git_collab_pack_objects_runs_total"),
        runs_after_first
    );
    // A full clone is another request: its own run, its own entry.
    let full = h.clone_repo("app", "full");
    check_clone(&h, &full, &head);
    assert_eq!(
        metric(&h, "git_collab_pack_objects_runs_total"),
        runs_after_first + 1
    );
    assert!(cache_entries(&h).len() >= 3, "{:?}", cache_entries(&h));
}

#[test]
fn pack_objects_wait_their_turn_for_a_slot_with_progress_shown() {
    let h = server(&[EAGER, ("GIT_COLLAB_GIT__MAX_CONCURRENT_PACK_OBJECTS", "1")]);
    let head = seed(&h, "app", 1);
    // Hold the only slot from outside, as a running pack-objects would.
    let slots = h.state_dir().join("pack-cache/slots");
    std::fs::create_dir_all(&slots).unwrap();
    let holder = std::fs::File::create(slots.join("0")).unwrap();
    assert!(
        collab_server::flock::lock(&holder, collab_server::flock::Mode::Exclusive, false).unwrap()
    );
    std::thread::sleep(Duration::from_millis(300));
    let dest = h.temp_dir().join("queued");
    let mut cmd = h.git_command(&h.ssh_client_key(), h.temp_dir());
    cmd.args(["clone", "--progress", &h.repo_url("app")])
        .arg(&dest)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let client = cmd.spawn().unwrap();
    // It waits (not refused), and the queue gauge shows it.
    let start = Instant::now();
    while metric(&h, "git_collab_pack_objects_queued") < 1 {
        assert!(start.elapsed() < Duration::from_secs(30), "never queued");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(!dest.join("README").exists());
    drop(holder);
    let out = client.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("waiting for a pack-objects slot"),
        "{stderr}"
    );
    check_clone(&h, &dest, &head);
    assert_eq!(metric(&h, "git_collab_pack_objects_queued"), 0);
}

#[test]
fn fetches_after_a_push_share_one_pack() {
    let h = server(&[EAGER]);
    seed(&h, "app", 1);
    let agents: Vec<PathBuf> = (0..6)
        .map(|i| h.clone_repo("app", &format!("agent{i}")))
        .collect();
    let pusher = h.clone_repo("app", "pusher");
    let new = h.commit_file(&pusher, "merged.txt", b"merged\n", "a merge");
    h.ssh_push(&pusher, &["HEAD:main"]);
    let before = metric(&h, "git_collab_pack_objects_runs_total");
    let fetches: Vec<_> = agents
        .iter()
        .map(|dir| {
            h.git_command(&h.ssh_client_key(), dir)
                .args(["fetch", "-q", "origin"])
                .spawn()
                .unwrap()
        })
        .collect();
    for f in fetches {
        let out = f.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    for dir in &agents {
        assert_eq!(h.rev_parse(dir, "origin/main"), new);
        let fsck = h.git(dir, &["fsck", "--no-progress"]);
        assert!(fsck.status.success());
    }
    // Same haves, same wants: one pack-objects for all of them.
    assert_eq!(metric(&h, "git_collab_pack_objects_runs_total") - before, 1);
}

#[test]
fn a_one_off_request_is_not_cached_by_default() {
    let h = server(&[]);
    let head = seed(&h, "app", 1);
    let first = h.clone_repo("app", "first");
    check_clone(&h, &first, &head);
    assert!(cache_entries(&h).is_empty(), "{:?}", cache_entries(&h));
    // The second time (git.pack_cache_min_occurrences = 2) it is kept.
    let second = h.clone_repo("app", "second");
    check_clone(&h, &second, &head);
    assert_eq!(cache_entries(&h).len(), 1);
    let third = h.clone_repo("app", "third");
    check_clone(&h, &third, &head);
    assert_eq!(metric(&h, "git_collab_pack_objects_runs_total"), 2);
}

/// The niceness of process `pid` (field 19 of `/proc/<pid>/stat`).
fn niceness_of(stat: &str) -> i64 {
    let after_comm = stat.rsplit_once(')').unwrap().1;
    after_comm
        .split_whitespace()
        .nth(16)
        .unwrap()
        .parse()
        .unwrap()
}

/// A `git` wrapper in `dir/bin` that writes its own niceness and its
/// arguments to `dir/git.log`, then runs the real git: the PATH for a
/// server (the wrapper first) and the log.
fn git_wrapper(dir: &Path) -> (String, PathBuf) {
    let real_git = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|dir| dir.join("git"))
        .find(|p| p.is_file())
        .expect("git on PATH");
    let log = dir.join("git.log");
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let wrapper = bin.join("git");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nread -r stat < /proc/$$/stat\n\
             echo \"$(echo \"$stat\" | cut -d' ' -f19) $*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            real_git.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (path, log)
}

/// Issue 29's fairness: `upload-pack` (over SSH and smart HTTP) runs
/// `git.nice` steps below the server, while `receive-pack` keeps the
/// server's priority. Every `git` the server starts goes through a wrapper
/// on its PATH that writes down its own niceness and arguments before it
/// runs the real git. (The pack-cache hook and `pack-objects` are started
/// by upload-pack, which puts git's own exec path first, so they bypass
/// the wrapper; they inherit its niceness, as every child does.)
#[test]
fn upload_pack_runs_below_the_server_and_pushes_do_not() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, log) = git_wrapper(tmp.path());
    let h = server(&[("PATH", &path), ("GIT_COLLAB_GIT__NICE", "7")]);
    let own = niceness_of(&std::fs::read_to_string("/proc/self/stat").unwrap());
    assert_eq!(
        niceness_of(&std::fs::read_to_string(format!("/proc/{}/stat", h.pid())).unwrap()),
        own,
        "the server itself runs at the test's niceness"
    );

    let head = seed(&h, "app", 1);
    let dest = cloned(&h, &h.repo_url("app"), "over-ssh", &[]);
    check_clone(&h, &dest, &head);
    web_support::make_public(&h, "app");
    let url = format!("{}/app.git", h.http_url());
    let dest = cloned(&h, &url, "over-http", &[]);
    check_clone(&h, &dest, &head);

    let text = std::fs::read_to_string(&log).unwrap();
    let runs = |what: &str| -> Vec<i64> {
        text.lines()
            .filter(|l| l.split(' ').any(|w| w == what))
            .map(|l| l.split(' ').next().unwrap().parse().unwrap())
            .collect()
    };
    let lowered = (own + 7).min(19);
    let uploads = runs("upload-pack");
    // SSH: one; HTTP: the advertisement and at least one request.
    assert!(uploads.len() >= 3, "{text}");
    assert!(uploads.iter().all(|&n| n == lowered), "{text}");
    let pushes = runs("receive-pack");
    assert!(!pushes.is_empty(), "{text}");
    assert!(pushes.iter().all(|&n| n == own), "{text}");
}
