//! The patches pages end to end: the real `git-collab-server`, patches
//! opened and revised with `git push origin HEAD:refs/for/main` over SSH
//! (two revisions across a rebase, linked to an issue), reviewed, commented
//! and closed with `collab-patch` over ssh (a busy repository's patches are
//! seeded into the stopped server's collab database through its own
//! `collab_store::patches`), pages fetched over loopback HTTP. Covers
//! the list (filters, the cursor), the detail page (revisions with votes,
//! the merge rule's state, the revision diff with line numbers and inline
//! comments at their lines, the interdiff across the rebase, the timeline,
//! linked issues both ways, a merged patch's commit and merger), the
//! `.patch` and `.diff` texts, escaping, 404s, a private repository
//! answering like a missing one, and the detail page as headless Chromium
//! builds it (skipped without Chromium unless
//! `GIT_COLLAB_REQUIRE_BROWSER_TESTS=1`).
use collab_testkit as common;
use collab_testkit::web as web_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use collab_store::patches::{self, NewPatch, NewRevision, Person, WriteCtx};
use common::ServerHarness;
use web_support::{get, strip_tags};

/// A long file on `main`, so that a comment can point outside the hunk.
fn long_file() -> String {
    (1..=40).map(|i| format!("line {i}\n")).collect()
}

/// The 8-hex patch id a `refs/for` push printed.
fn printed_id(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("remote: patch "))
        .unwrap_or_else(|| panic!("no patch line: {stderr}"));
    line.split("remote: patch ").nth(1).unwrap()[..8].to_string()
}

/// The full id and the repository name (as the database holds it) of the
/// patch `short`.
fn full_id(h: &ServerHarness, short: &str) -> (String, String) {
    let conn = collab_store::open_reader(collab_store::Location::parse(&h.db_setting())).unwrap();
    conn.query_row(
        "SELECT id, repo FROM patches WHERE id LIKE ?1",
        [format!("{short}%")],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

/// Run `f` on the stopped server's collab database (either backend) in one
/// transaction, then start the server again.
fn with_db(h: &mut ServerHarness, f: impl FnOnce(&collab_store::sql::Connection)) {
    h.stop();
    {
        let conn = collab_store::open(collab_store::Location::parse(&h.db_setting())).unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        f(&tx);
        tx.commit().unwrap();
    }
    h.start_again();
}

fn seeder() -> Person {
    Person {
        principal: "seed".into(),
        name: "Seed <b>S</b>".into(),
        key: None,
    }
}

struct Fixture {
    clone: PathBuf,
    /// The open patch (two revisions, linked to `issue`).
    id: String,
    /// A closed patch.
    closed: String,
    issue: String,
}

/// A public repository `forge` with an issue, a patch of two revisions
/// (the second rebased onto a newer main) linked to it, votes and inline
/// comments, and a closed patch.
fn repo_with_patches(h: &ServerHarness) -> Fixture {
    let (clone, _, _) = web_support::public_repo_with_content(h, "forge");
    h.commit_file(&clone, "long.txt", long_file().as_bytes(), "Add long.txt");
    h.ssh_push(&clone, &["main"]);
    let issue = h.open_server_issue("forge", "Lib is missing");
    let git = |args: &[&str]| h.git(&clone, args);
    git(&["checkout", "-q", "-b", "topic"]);
    h.commit_file(
        &clone,
        "src/lib.rs",
        b"pub fn v1() {}\n",
        "<script>alert('t')</script> Add lib\n\nAdds **lib** <img src=x onerror=alert(1)>",
    );
    let out = git(&[
        "push",
        "-o",
        &format!("issue={}", &issue[..8]),
        "origin",
        "HEAD:refs/for/main",
    ]);
    let short = printed_id(&out);
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
    let mut long = long_file().replace("line 2\n", "line two\n");
    long.push_str("line 41\n");
    h.commit_file(&clone, "long.txt", long.as_bytes(), "Touch long.txt");
    let out = git(&[
        "push",
        "-o",
        &format!("patch={short}"),
        "origin",
        "HEAD:refs/for/main",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("updated: revision 2"),
        "{out:?}"
    );

    git(&["checkout", "-q", "-b", "other", "main"]);
    h.commit_file(&clone, "other.txt", b"x\n", "Abandoned");
    let closed_short = printed_id(&git(&["push", "origin", "HEAD:refs/for/main"]));
    let (id, _) = full_id(h, &short);
    let (closed, _) = full_id(h, &closed_short);

    // Bob reviews and comments over ssh with `collab-patch`.
    let bob = h.authorized_key("bob");
    let patch = |key: &Path, args: &str, stdin: &str| {
        let out = h.ssh_exec_as(key, &format!("collab-patch {args}"), stdin.as_bytes());
        assert_eq!(out.code, 0, "collab-patch {args}: {out:?}");
    };
    patch(
        &bob,
        &format!("review 'forge' '{id}' --request-changes --rev 1 --body-stdin"),
        "rename it",
    );
    patch(
        &bob,
        &format!("review 'forge' '{id}' --approve --rev 2 --body-stdin"),
        "Good *now* <b>raw</b>",
    );
    for (body, path, line) in [
        ("nit <i>x</i>", "src/lib.rs", 1),
        ("far from the change", "long.txt", 25),
        ("about the readme", "README.md", 1),
    ] {
        patch(
            &bob,
            &format!("comment 'forge' '{id}' --path '{path}' --line {line} --rev 2 --body-stdin"),
            body,
        );
    }
    patch(
        &bob,
        &format!("comment 'forge' '{id}' --body-stdin"),
        "Overall **fine**",
    );
    patch(
        &h.ssh_client_key(),
        &format!("close 'forge' '{closed}'"),
        "",
    );
    Fixture {
        clone,
        id,
        closed,
        issue,
    }
}

/// Whether `html` has a diff row of `kind` with these line numbers, sign
/// and code.
fn row(html: &str, kind: &str, old: &str, new: &str, sign: char, code: &str) -> bool {
    html.split("<tr").any(|r| {
        r.starts_with(&format!(
            " class=\"{kind}\"><td class=\"ln\">{old}</td><td class=\"ln\">{new}</td><td class=\"sign\">{sign}</td>"
        )) && strip_tags(r.split("</tr>").next().unwrap()).contains(code)
    })
}

#[test]
fn patches_list_and_detail_from_the_server() {
    let h = ServerHarness::start();
    let f = repo_with_patches(&h);
    let (id, short) = (&f.id, &f.id[..8]);
    std::fs::write(
        h.repos_dir().join("forge.git").join("collab-policy.toml"),
        "public = true\nmerge = { approvals = 2 }\n",
    )
    .unwrap();

    // The list.
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
        text.contains("1 open") && text.contains("1 closed") && text.contains("0 merged"),
        "{text}"
    );
    assert!(text.contains("2 revisions"), "{text}");
    assert!(
        text.contains("+1 approved") && !text.contains("changes requested"),
        "only the latest revision's votes count: {text}"
    );
    assert!(
        text.contains("Patches <span class=\"count\">1</span>"),
        "{text}"
    );
    let closed_list = get(&h, "/forge/-/patches?state=closed").text();
    assert!(closed_list.contains("Abandoned") && !closed_list.contains("Add lib"));
    let all = get(&h, "/forge/-/patches?state=all").text();
    assert!(
        all.contains("Abandoned") && all.contains("Add lib"),
        "{all}"
    );

    // The detail page: revisions, votes, merge rule, issues, timeline.
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
        !text.contains("<img") && !text.contains("<script") && !text.contains("<b>"),
        "{text}"
    );
    let bob = common::fingerprint(&h.temp_dir().join("keys").join("bob"));
    // The voter by display name (the key's comment), the key in `title`.
    let vote = |verdict: &str, label: &str| {
        text.split(&format!("<span class=\"vote {verdict}\">"))
            .nth(1)
            .is_some_and(|v| {
                v.starts_with(&format!(
                    "<span class=\"who\" title=\"{bob}\">bob</span>: {label}</span>"
                ))
            })
    };
    assert!(vote("approve", "approved"), "{text}");
    assert!(vote("request_changes", "changes requested"), "{text}");
    assert!(
        text.contains(
            "<strong>Not ready to merge</strong>: needs 1 more approval on revision 2 (1 of 2)."
        ),
        "{text}"
    );
    assert!(text.contains("Merge rule: 2 approvals"), "{text}");
    assert!(
        text.contains(&format!("href=\"/forge/-/issues/{}\"", &f.issue[..8]))
            && text.contains("Lib is missing"),
        "{text}"
    );
    assert!(text.contains("requested changes on revision 1"), "{text}");
    assert!(text.contains("approved revision 2"), "{text}");
    assert!(
        text.contains("Good <em>now</em> &lt;b&gt;raw&lt;/b&gt;"),
        "{text}"
    );
    assert!(text.contains("Overall <strong>fine</strong>"), "{text}");
    assert!(
        text.contains("commented on src/lib.rs line 1 of revision 2"),
        "{text}"
    );
    assert!(text.contains("pushed revision 2"), "{text}");

    // Revision 2's diff with line numbers, against the server's base.
    assert!(text.contains("Revision 2 against main"), "{text}");
    assert!(row(&text, "add", "", "1", '+', "pub fn v2() {}"), "{text}");
    assert!(row(&text, "del", "2", "", '-', "line 2"), "{text}");
    assert!(row(&text, "add", "", "2", '+', "line two"), "{text}");
    assert!(
        !text.contains("upstream news"),
        "the base's change is not the patch's: {text}"
    );
    // The inline comment on src/lib.rs line 1 sits under that line.
    let diff_at = text.find("id=\"diff\"").expect("the diff");
    let note = diff_at
        + text[diff_at..]
            .find("nit &lt;i&gt;x&lt;/i&gt;")
            .expect("the inline comment");
    let before = &text[..note];
    let row_start = before.rfind("<tr class=\"line-note\">").unwrap();
    assert!(
        before[..row_start].rfind("<tr").is_some_and(|r| {
            strip_tags(&before[r..row_start]).contains("pub fn v2() {}")
                && before[r..row_start].contains("<td class=\"ln\">1</td>")
        }),
        "{text}"
    );
    // Line 25 of long.txt is outside the hunks: listed under the file.
    let file_notes = text
        .find("Comments on long.txt outside the lines shown")
        .expect(&text);
    assert!(
        text[file_notes..].contains("far from the change")
            && text[file_notes..].find("far from the change")
                < text[file_notes..].find("</section>"),
        "{text}"
    );
    assert!(text[file_notes..].contains("line 25"), "{text}");
    // README.md is not in the diff: listed after it.
    let off = text
        .find("Comments on files this diff does not show")
        .expect(&text);
    assert!(
        text[off..].contains("README.md line 1") && text[off..].contains("about the readme"),
        "{text}"
    );

    // Revision 1: its own diff, no revision-2 comments.
    let first = get(&h, &format!("/forge/-/patches/{short}?rev=1")).text();
    assert!(
        first.contains("Revision 1 against main") && strip_tags(&first).contains("pub fn v1() {}")
    );
    assert!(
        !first.contains("<div class=\"post inline-comment\">"),
        "{first}"
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
    assert!(row(&text, "del", "1", "", '-', "pub fn v1() {}"), "{text}");
    assert!(row(&text, "add", "", "1", '+', "pub fn v2() {}"), "{text}");
    assert!(
        !text.contains("upstream news") && !text.contains("README.md</h4>"),
        "{text}"
    );
    assert!(text.contains("2 files changed"), "{text}");

    // The issue page links back.
    let issue = get(&h, &format!("/forge/-/issues/{}", &f.issue[..8])).text();
    assert!(
        issue.contains(&format!("href=\"/forge/-/patches/{short}\"")),
        "{issue}"
    );
    assert!(issue.contains("Add lib"), "{issue}");

    let closed_page = get(&h, &format!("/forge/-/patches/{}", &f.closed[..8])).text();
    assert!(closed_page.contains("<span class=\"state closed\">closed</span>"));
    assert!(!closed_page.contains("patch review"), "{closed_page}");
    assert!(!closed_page.contains("ready to merge"), "{closed_page}");
    assert!(
        closed_page.contains("This patch is closed"),
        "{closed_page}"
    );

    // A revision as text: its commits since its base, and its diff.
    let patch = get(&h, &format!("/forge/-/patches/{short}.patch?rev=2"));
    assert_eq!(patch.status, 200);
    let text = patch.text();
    assert!(text.contains("Subject: [PATCH 2/3] Rework lib"), "{text}");
    assert!(text.contains("+pub fn v2() {}"), "{text}");
    let diff = get(&h, &format!("/forge/-/patches/{short}.diff")).text();
    assert!(
        diff.starts_with("diff --git a/long.txt b/long.txt"),
        "{diff}"
    );
    assert!(diff.contains("+pub fn v2() {}"), "{diff}");
    assert!(!diff.contains("upstream news"), "{diff}");
    assert_eq!(
        get(&h, &format!("/forge/-/patches/{short}.diff?rev=9")).status,
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

    // Merged by a plain push of the revision to main: the page names the
    // merge commit and who merged, and no rule state.
    // (The restarted server listens on a new port.)
    h.git(
        &f.clone,
        &["remote", "set-url", "origin", &h.repo_url("forge")],
    );
    h.git(&f.clone, &["push", "-q", "origin", "topic:main"]);
    let head = h.rev_parse(&f.clone, "topic");
    let merged = get(&h, &format!("/forge/-/patches/{short}")).text();
    assert!(
        merged.contains("<span class=\"state merged\">merged</span>"),
        "{merged}"
    );
    assert!(
        merged.contains(&format!(
            "merged in <a class=\"id\" href=\"/forge/-/commit/{head}\">{}</a> by ",
            &head[..8]
        )),
        "{merged}"
    );
    assert!(!merged.contains("ready to merge"), "{merged}");
    assert!(merged.contains("merged the patch"), "{merged}");
    assert!(get(&h, "/forge/-/patches?state=merged")
        .text()
        .contains("Add lib"));
}

#[test]
fn ready_to_merge_and_the_list_cursor() {
    let mut h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "forge");
    h.git(&clone, &["checkout", "-q", "-b", "topic"]);
    h.commit_file(&clone, "a.txt", b"a\n", "Add a");
    let short = printed_id(&h.git(&clone, &["push", "origin", "HEAD:refs/for/main"]));
    // The default rule needs no approval.
    let page = get(&h, &format!("/forge/-/patches/{short}")).text();
    assert!(
        page.contains("<strong>Ready to merge</strong>: the merge rule is met."),
        "{page}"
    );

    // 60 more patches, seeded in the database: 50 a page, then the cursor.
    let (_, repo) = full_id(&h, &short);
    with_db(&mut h, move |conn| {
        let who = seeder();
        for i in 0..60i64 {
            let w = WriteCtx {
                repo: &repo,
                actor: &who,
                max_body: 1024,
                now: 1_700_000_000 + i / 2,
            };
            patches::open(
                conn,
                &w,
                &NewPatch {
                    title: format!("seeded {i:02}"),
                    body: String::new(),
                    base: "main".into(),
                    revision: NewRevision {
                        head: format!("{:040x}", i + 1),
                        base_commit: "f".repeat(40),
                        base_tip: None,
                    },
                    issues: vec![],
                    change_id: None,
                    depends_on: None,
                },
            )
            .unwrap();
        }
    });
    let first = get(&h, "/forge/-/patches").text();
    assert!(first.contains("61 patches"), "{first}");
    assert_eq!(first.matches("<li class=\"patch open\"").count(), 50);
    assert!(
        first.contains("Add a") && first.contains("seeded 59"),
        "{first}"
    );
    let next = first
        .split("<a rel=\"next\" href=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect(&first)
        .replace("&#38;", "&")
        .replace("&amp;", "&");
    let second = get(&h, &next).text();
    assert_eq!(
        second.matches("<li class=\"patch open\"").count(),
        11,
        "{second}"
    );
    assert!(second.contains("seeded 00") && !second.contains("seeded 59"));
    assert!(second.contains("First page") && !second.contains("rel=\"next\""));
    // A seeded patch whose commits are not here still has a page.
    let seeded = get(&h, "/forge/-/patches?state=all").text();
    let seeded_short = seeded
        .split("<code>")
        .nth(2)
        .and_then(|s| s.split('<').next())
        .unwrap()
        .to_string();
    let page = get(&h, &format!("/forge/-/patches/{seeded_short}"));
    assert_eq!(page.status, 200);
    assert!(
        page.text().contains("is not in this repository"),
        "{}",
        page.text()
    );
}

#[test]
fn a_private_repositorys_patches_answer_like_a_missing_repository() {
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "forge");
    h.create_repo("secret");
    h.git(&clone, &["remote", "add", "secret", &h.repo_url("secret")]);
    h.git(&clone, &["push", "-q", "secret", "main"]);
    h.git(&clone, &["checkout", "-q", "-b", "topic"]);
    h.commit_file(&clone, "a.txt", b"a\n", "Add a");
    let public = printed_id(&h.git(&clone, &["push", "origin", "HEAD:refs/for/main"]));
    let secret = printed_id(&h.git(&clone, &["push", "secret", "HEAD:refs/for/main"]));
    for route in [
        "/-/patches".to_string(),
        "/-/patches?state=all".to_string(),
        "/-/patches/{id}".to_string(),
        "/-/patches/{id}.patch".to_string(),
        "/-/patches/{id}.diff".to_string(),
    ] {
        let at = |repo: &str, id: &str| get(&h, &format!("/{repo}{}", route.replace("{id}", id)));
        assert_eq!(at("forge", &public).status, 200, "{route}");
        let missing = at("nothing-here", &secret);
        let private = at("secret", &secret);
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
    let f = repo_with_patches(&h);
    let url = format!("{}/forge/-/patches/{}", h.http_url(), &f.id[..8]);
    let dom = chromium_run(&browser, &["--dump-dom".into()], &url);
    // The hostile title is text in the DOM, never an element.
    assert!(
        dom.contains("&lt;script&gt;alert('t')&lt;/script&gt; Add lib"),
        "{dom}"
    );
    assert_eq!(dom.matches("<script").count(), 0, "{dom}");
    assert!(dom.contains("Revision 2 against main"), "{dom}");
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
    for (name, size) in [("patch-desktop", "1280,2000"), ("patch-phone", "390,1800")] {
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
