//! The patches pages end to end: the real `git-collab-server`, a patch made
//! with the real `git-collab` CLI (two revisions across a rebase, votes,
//! comments) and pushed over SSH, pages fetched with `curl`. Covers the
//! list and its filters, the detail page (revisions, votes, timeline, the
//! revision diff and the interdiff), escaping, 404s, a private
//! repository answering like a missing one, and the detail page as headless
//! Chromium builds it (skipped without Chromium unless
//! `GIT_COLLAB_REQUIRE_BROWSER_TESTS=1`).

mod common;
mod web_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::ServerHarness;
use web_support::{collab, get, strip_tags};

/// A public repository with one open patch of two revisions (the second
/// rebased onto a newer main), and one closed patch; returns the clone and
/// the two patch ids.
fn repo_with_patches(h: &ServerHarness) -> (std::path::PathBuf, String, String) {
    let (clone, _, _) = web_support::public_repo_with_content(h, "forge");
    let git = |args: &[&str]| {
        h.git(&clone, args);
    };
    // These pages read client-written patch DAGs: keep the CLI local.
    git(&["config", "collab.mode", "local"]);
    git(&["checkout", "-q", "-b", "topic"]);
    h.commit_file(&clone, "src/lib.rs", b"pub fn v1() {}\n", "Add lib v1");
    let json = collab(
        h,
        &clone,
        &[
            "patch",
            "create",
            "--base",
            "main",
            "-t",
            "<script>alert('t')</script> Add lib",
            "-b",
            "Adds **lib** <img src=x onerror=alert(1)>",
            "--json",
        ],
    );
    let id = patch_id(&json);
    // main moves on; the author rebases and reworks.
    git(&["checkout", "-q", "main"]);
    h.commit_file(
        &clone,
        "README.md",
        b"# Demo\n\nupstream news\n",
        "Upstream",
    );
    h.ssh_push(&clone, &["main"]);
    git(&["checkout", "-q", "topic"]);
    git(&["rebase", "-q", "main"]);
    h.commit_file(&clone, "src/lib.rs", b"pub fn v2() {}\n", "Rework lib");
    collab(h, &clone, &["patch", "revise", &id]);
    collab(
        h,
        &clone,
        &[
            "patch",
            "review",
            &id,
            "--rev",
            "1",
            "--request-changes",
            "-m",
            "rename it",
        ],
    );
    collab(
        h,
        &clone,
        &[
            "patch",
            "review",
            &id,
            "--approve",
            "-m",
            "Good *now* <b>raw</b>",
        ],
    );
    collab(
        h,
        &clone,
        &[
            "patch",
            "comment",
            &id,
            "-m",
            "nit",
            "--path",
            "src/lib.rs",
            "--line",
            "1",
        ],
    );

    git(&["checkout", "-q", "-b", "other", "main"]);
    h.commit_file(&clone, "other.txt", b"x\n", "Other");
    let closed = patch_id(&collab(
        h,
        &clone,
        &["patch", "create", "-t", "Abandoned", "--json"],
    ));
    collab(h, &clone, &["patch", "close", &closed]);
    web_support::push_collab(h, &clone);
    (clone, id, closed)
}

fn patch_id(json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    v["patch"].as_str().unwrap().to_string()
}

#[test]
fn patches_list_and_detail_with_diff_and_interdiff() {
    let h = ServerHarness::start();
    let (_clone, id, closed) = repo_with_patches(&h);
    let short = &id[..8];

    let list = get(&h, "/forge/-/patches");
    assert_eq!(list.status, 200);
    let text = list.text();
    assert!(
        text.contains("&#60;script&#62;alert(&#39;t&#39;)&#60;/script&#62; Add lib"),
        "{text}"
    );
    assert!(!text.contains("<script"), "{text}");
    assert!(
        text.contains(&format!("href=\"/forge/-/patches/{short}\"")),
        "{text}"
    );
    assert!(!text.contains("Abandoned"), "open ones by default: {text}");
    assert!(
        text.contains("1 open") && text.contains("1 closed"),
        "{text}"
    );
    assert!(text.contains("+1 approved"), "{text}");
    assert!(text.contains("2 revisions"), "{text}");
    assert!(
        text.contains("Patches <span class=\"count\">1</span>"),
        "{text}"
    );
    let closed_list = get(&h, "/forge/-/patches?state=closed").text();
    assert!(closed_list.contains("Abandoned") && !closed_list.contains("Add lib"));
    assert!(get(&h, "/forge/-/patches?state=all")
        .text()
        .contains("Abandoned"));

    // The detail page: revisions, votes, timeline, and the latest diff.
    let detail = get(&h, &format!("/forge/-/patches/{id}"));
    assert_eq!(detail.status, 200);
    assert_eq!(
        get(&h, &format!("/forge/-/patches/{}", &id[..5])).body,
        detail.body
    );
    let text = detail.text();
    assert!(
        text.contains("<span class=\"state open\">open</span>"),
        "{text}"
    );
    assert!(text.contains("Adds <strong>lib</strong>"), "{text}");
    assert!(
        !text.contains("<img") && !text.contains("<script"),
        "{text}"
    );
    assert!(
        text.contains("<span class=\"vote approve\">git-collab: approved</span>"),
        "{text}"
    );
    assert!(
        text.contains("<span class=\"vote request_changes\">git-collab: changes requested</span>"),
        "{text}"
    );
    assert!(text.contains("requested changes on revision 1"), "{text}");
    assert!(
        text.contains("Good <em>now</em> &lt;b&gt;raw&lt;/b&gt;"),
        "{text}"
    );
    assert!(
        text.contains("commented on src/lib.rs line 1 of revision 2"),
        "{text}"
    );
    assert!(text.contains("Revision 2 against main"), "{text}");
    assert!(strip_tags(&text).contains("pub fn v2() {}"), "{text}");
    // The inline comment on line 1 sits under that line of the diff.
    let note = text.find("inline-comment").expect("an inline comment");
    assert!(
        text[note..]
            .split("</tr>")
            .next()
            .unwrap()
            .contains("<p>nit</p>"),
        "{text}"
    );
    assert!(
        text[..note].rfind("<td class=\"ln\">1</td>").is_some(),
        "{text}"
    );
    assert!(
        !text.contains("upstream news"),
        "the base's change is not the patch's: {text}"
    );

    let first = get(&h, &format!("/forge/-/patches/{short}?rev=1")).text();
    assert!(
        first.contains("Revision 1 against main") && strip_tags(&first).contains("pub fn v1() {}")
    );

    // The interdiff leaves out what the rebase brought in.
    let inter = get(&h, &format!("/forge/-/patches/{short}?from=1&to=2"));
    assert_eq!(inter.status, 200);
    let text = inter.text();
    assert!(
        text.contains("Interdiff: revision 1 → revision 2"),
        "{text}"
    );
    assert!(text.contains("replayed onto revision 2"), "{text}");
    let row = |kind: &str, old: &str, new: &str, sign: char, code: &str| {
        text.split("<tr").any(|r| {
            r.starts_with(&format!(" class=\"{kind}\"><td class=\"ln\">{old}</td><td class=\"ln\">{new}</td><td class=\"sign\">{sign}</td>"))
                && strip_tags(r.split("</tr>").next().unwrap()).contains(code)
        })
    };
    assert!(row("del", "1", "", '-', "pub fn v1() {}"), "{text}");
    assert!(row("add", "", "1", '+', "pub fn v2() {}"), "{text}");
    assert!(
        !text.contains("upstream news") && !text.contains("README.md</h4>"),
        "{text}"
    );
    assert!(text.contains("1 file changed"), "{text}");

    let closed_page = get(&h, &format!("/forge/-/patches/{}", &closed[..8])).text();
    assert!(closed_page.contains("<span class=\"state closed\">closed</span>"));
    assert!(closed_page.contains("closed the patch"));
    // A closed patch suggests no command that would fail.
    assert!(!closed_page.contains("patch review"), "{closed_page}");
    assert!(
        closed_page.contains("This patch is closed"),
        "{closed_page}"
    );
    let open_page = get(&h, &format!("/forge/-/patches/{}", &id[..8])).text();
    assert!(open_page.contains("git collab patch review"), "{open_page}");
    // A revision as text: its commits since its base, and its diff.
    let patch = get(&h, &format!("/forge/-/patches/{}.patch?rev=2", &id[..8]));
    assert_eq!(patch.status, 200);
    let text = patch.text();
    assert!(text.contains("Subject: [PATCH 2/2] Rework lib"), "{text}");
    assert!(text.contains("+pub fn v2() {}"), "{text}");
    let diff = get(&h, &format!("/forge/-/patches/{}.diff", &id[..8])).text();
    assert!(
        diff.starts_with("diff --git a/src/lib.rs b/src/lib.rs"),
        "{diff}"
    );
    assert!(diff.contains("+pub fn v2() {}"), "{diff}");
    assert!(!diff.contains("upstream news"), "{diff}");
    assert_eq!(
        get(&h, &format!("/forge/-/patches/{}.diff?rev=9", &id[..8])).status,
        404
    );

    for (path, says) in [
        (
            format!("/forge/-/patches/{short}?rev=3"),
            "No such revision.",
        ),
        (
            format!("/forge/-/patches/{short}?rev=x"),
            "No such revision.",
        ),
        (format!("/forge/-/patches/{short}?from=1"), "needs both"),
        ("/forge/-/patches/zzzz".to_string(), "No such patch."),
        ("/forge/-/patches/0000".to_string(), "No such patch."),
        (
            format!("/forge/-/patches/{}", "0".repeat(40)),
            "No such patch.",
        ),
    ] {
        let answer = get(&h, &path);
        assert_eq!(answer.status, 404, "{path}");
        assert!(answer.text().contains(says), "{path}: {}", answer.text());
    }
}

#[test]
fn a_private_repositorys_patches_answer_like_a_missing_repository() {
    let h = ServerHarness::start();
    let (clone, id, _) = repo_with_patches(&h);
    h.create_repo("secret");
    h.git(&clone, &["remote", "add", "secret", &h.repo_url("secret")]);
    h.git(
        &clone,
        &[
            "push",
            "-q",
            "secret",
            "main",
            "+refs/collab/*:refs/collab/*",
        ],
    );
    for route in [
        "/-/patches".to_string(),
        "/-/patches?state=all".to_string(),
        format!("/-/patches/{id}"),
        format!("/-/patches/{}?from=1&to=2", &id[..8]),
    ] {
        assert_eq!(get(&h, &format!("/forge{route}")).status, 200, "{route}");
        let missing = get(&h, &format!("/nothing-here{route}"));
        let private = get(&h, &format!("/secret{route}"));
        assert_eq!(missing.status, 404, "{route}");
        assert_eq!(
            (private.status, &private.body),
            (missing.status, &missing.body),
            "{route}"
        );
    }
}

/// Headless Chromium, or `None` (after saying why) when the test skips.
fn chromium() -> Option<PathBuf> {
    let found = [
        std::env::var_os("CHROMIUM").map(PathBuf::from),
        Some("/usr/bin/chromium".into()),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("GIT_COLLAB_REQUIRE_BROWSER_TESTS").as_deref() != Ok("1"),
            "GIT_COLLAB_REQUIRE_BROWSER_TESTS=1 but no Chromium"
        );
        eprintln!("skipping: Chromium is not installed");
    }
    found
}

/// Runs headless Chromium on `url` with `extra` arguments; returns stdout.
fn chromium_run(browser: &Path, extra: &[String], url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("timeout")
        .arg("120")
        .arg(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium on {url}: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_patch_page_renders_in_chromium() {
    let Some(browser) = chromium() else { return };
    let h = ServerHarness::start();
    let (_clone, id, _) = repo_with_patches(&h);
    let url = format!("{}/forge/-/patches/{}?from=1&to=2", h.http_url(), &id[..8]);
    let dom = chromium_run(&browser, &["--dump-dom".into()], &url);
    // The hostile title is text in the DOM, never an element.
    assert!(
        dom.contains("&lt;script&gt;alert('t')&lt;/script&gt; Add lib"),
        "{dom}"
    );
    assert_eq!(dom.matches("<script").count(), 0, "{dom}");
    assert!(dom.contains("Interdiff: revision 1 → revision 2"), "{dom}");
    assert!(
        dom.contains("<select name=\"from\">"),
        "the interdiff form needs no JavaScript: {dom}"
    );
    assert!(strip_tags(&dom).contains("pub fn v2() {}"), "{dom}");

    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    for (name, size) in [("patch-desktop", "1280,1600"), ("patch-phone", "390,1400")] {
        let png = artifacts.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&png);
        chromium_run(
            &browser,
            &[
                format!("--screenshot={}", png.display()),
                format!("--window-size={size}"),
            ],
            &url,
        );
        let bytes = std::fs::read(&png).unwrap();
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 5_000,
            "{}",
            png.display()
        );
    }
}
