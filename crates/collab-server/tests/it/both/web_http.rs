//! The web UI and git over HTTP, end to end: the real `git-collab-server`,
//! repositories filled over SSH with real `git` and `git-collab`, pages
//! fetched with `curl`, clones made with `git clone http://…`.
//!
//! Every route is covered, with its 404s; a private repository must answer
//! every route exactly like a missing one.

use collab_testkit as common;
use collab_testkit::web as web_support;

use common::ServerHarness;
use web_support::{get, request};

/// The pages and endpoints of a repository, relative to `/<name>`.
fn repo_routes(commit: &str, issue: &str) -> Vec<String> {
    vec![
        String::new(),
        "/".into(),
        "/-/tree".into(),
        "/-/tree/main".into(),
        "/-/tree/main/src".into(),
        "/-/blob/main/README.md".into(),
        "/-/raw/main/README.md".into(),
        format!("/-/commit/{commit}"),
        "/-/log".into(),
        "/-/log/main".into(),
        "/-/log/main?page=1".into(),
        "/-/branches".into(),
        "/-/tags".into(),
        "/-/archive/main.tar.gz".into(),
        "/-/archive/main.zip".into(),
        format!("/-/commit/{commit}.patch"),
        format!("/-/commit/{commit}.diff"),
        "/-/issues".into(),
        "/-/issues?state=closed".into(),
        format!("/-/issues/{issue}"),
        format!("/-/issues/{}", &issue[..8]),
        "/info/refs?service=git-upload-pack".into(),
        "/info/refs?service=git-receive-pack".into(),
        "/info/refs".into(),
    ]
}

#[test]
fn index_lists_public_repositories_only() {
    let h = ServerHarness::start();
    web_support::public_repo_with_content(&h, "shown");
    h.create_repo("hidden");
    std::fs::write(
        h.repos_dir().join("shown.git/description"),
        "The <shown> repository\n",
    )
    .unwrap();
    let index = get(&h, "/");
    assert_eq!(index.status, 200);
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let text = index.text();
    assert!(text.contains("href=\"/shown\""), "{text}");
    assert!(text.contains("The &#60;shown&#62; repository"), "{text}");
    assert!(!text.contains("hidden"), "{text}");
}

#[test]
fn private_repository_answers_exactly_like_a_missing_one() {
    let h = ServerHarness::start();
    let (clone, _, commit) = web_support::public_repo_with_content(&h, "open");
    let issue = web_support::open_issue(&h, &clone, "An issue", "", &[]);
    web_support::push_collab(&h, &clone);
    // The same content, in a private repository (the default policy).
    h.create_repo("secret");
    h.git(&clone, &["remote", "add", "secret", &h.repo_url("secret")]);
    h.git(
        &clone,
        &["push", "secret", "main", "+refs/collab/*:refs/collab/*"],
    );
    // And a policy file that does not parse closes a repository too.
    h.create_repo("broken");
    std::fs::write(
        h.repos_dir().join("broken.git/collab-policy.toml"),
        "public = yes please\n",
    )
    .unwrap();

    for route in repo_routes(&commit, &issue) {
        let public = get(&h, &format!("/open{route}"));
        assert!(
            matches!(public.status, 200 | 303 | 403),
            "/open{route}: {} {}",
            public.status,
            public.text()
        );
        let missing = get(&h, &format!("/nothing-here{route}"));
        assert_eq!(missing.status, 404, "/nothing-here{route}");
        for private in ["secret", "secret.git", "broken"] {
            let answer = get(&h, &format!("/{private}{route}"));
            assert_eq!(answer.status, missing.status, "/{private}{route}");
            assert_eq!(answer.body, missing.body, "/{private}{route}");
            assert_eq!(
                answer.header("content-type"),
                missing.header("content-type"),
                "/{private}{route}"
            );
        }
    }
    for endpoint in ["git-upload-pack", "git-receive-pack"] {
        let body = b"0000";
        let missing = request(
            "POST",
            &format!("{}/nothing-here/{endpoint}", h.http_url()),
            &[("Content-Type", "application/x-git-upload-pack-request")],
            Some(body),
        );
        let private = request(
            "POST",
            &format!("{}/secret/{endpoint}", h.http_url()),
            &[("Content-Type", "application/x-git-upload-pack-request")],
            Some(body),
        );
        assert_eq!(missing.status, 404);
        assert_eq!(
            (private.status, &private.body),
            (missing.status, &missing.body)
        );
    }
    // Names that try to leave repos_dir are just missing.
    for path in [
        "/..%2F..%2Fetc/-/tree/main",
        "/a/../../x",
        "/%2e%2e/-/issues",
    ] {
        assert_eq!(get(&h, path).status, 404, "{path}");
    }
}

#[test]
fn summary_shows_description_readme_branches_commits_and_clone_urls() {
    let h = ServerHarness::start();
    let (_, first, second) = web_support::public_repo_with_content(&h, "demo");
    std::fs::write(h.repos_dir().join("demo.git/description"), "Demo things\n").unwrap();
    let page = get(&h, "/demo");
    assert_eq!(page.status, 200);
    let text = page.text();
    assert!(
        text.contains("<p class=\"description\">Demo things</p>"),
        "{text}"
    );
    // The README is rendered Markdown...
    assert!(text.contains("<h1>Demo project</h1>"), "{text}");
    assert!(text.contains("<li>first item</li>"), "{text}");
    // ...with its raw HTML shown as text, never passed through.
    assert!(
        text.contains("&lt;script&gt;alert('readme')&lt;/script&gt;"),
        "{text}"
    );
    assert!(!text.contains("<script"), "{text}");
    assert!(!text.contains("<img src=x"), "{text}");
    assert!(!text.contains("javascript:"), "{text}");
    // Branches, recent commits, clone URLs.
    assert!(text.contains("href=\"/demo/-/tree/feature/x\""), "{text}");
    assert!(text.contains("href=\"/demo/-/tree/main\""), "{text}");
    assert!(text.contains(&format!("/demo/-/commit/{first}")), "{text}");
    assert!(text.contains(&format!("/demo/-/commit/{second}")), "{text}");
    assert!(
        text.contains("Change main.rs: &#60;em&#62;escaped&#60;/em&#62;"),
        "{text}"
    );
    assert!(
        text.contains(&format!("ssh://git@127.0.0.1:{}/demo.git", h.ssh_port())),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}/demo.git", h.http_url())),
        "{text}"
    );
    // The navigation links every section, patches and releases included.
    for section in ["tree", "log", "issues", "patches", "releases"] {
        assert!(
            text.contains(&format!("href=\"/demo/-/{section}\"")),
            "{section}"
        );
    }
    // `/demo.git` and `/demo/` are the same page.
    assert_eq!(get(&h, "/demo.git").body, page.body);
    assert_eq!(get(&h, "/demo/").body, page.body);
    // Every HTML page forbids scripts outright.
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(!csp.contains("script-src"), "{csp}");
}

#[test]
fn empty_repository_has_a_summary_and_no_tree() {
    let h = ServerHarness::start();
    h.create_repo("empty");
    web_support::make_public(&h, "empty");
    let page = get(&h, "/empty");
    assert_eq!(page.status, 200);
    assert!(
        page.text().contains("This repository is empty"),
        "{}",
        page.text()
    );
    let tree = get(&h, "/empty/-/tree");
    assert_eq!(tree.status, 404);
    assert!(tree.text().contains("This repository is empty"));
    assert_eq!(get(&h, "/empty/-/log").status, 404);
    assert_eq!(get(&h, "/empty/-/issues").status, 200);
}

#[test]
fn tree_blob_and_raw_pages() {
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "files");
    // A huge text file, a file name that needs escaping, a nested directory.
    let huge: String = (0..60_000)
        .map(|i| format!("line number {i:08}\n"))
        .collect();
    h.commit_file(&clone, "big.txt", huge.as_bytes(), "Add a big file");
    h.commit_file(
        &clone,
        "docs/a b&c.md",
        b"# spaced <out>\n",
        "Add a spaced name",
    );
    h.ssh_push(&clone, &["main"]);

    let root = get(&h, "/files/-/tree/main");
    assert_eq!(root.status, 200);
    let text = root.text();
    for link in [
        "href=\"/files/-/tree/main/src\"",
        "href=\"/files/-/tree/main/docs\"",
        "href=\"/files/-/blob/main/README.md\"",
        "href=\"/files/-/blob/main/logo.bin\"",
    ] {
        assert!(text.contains(link), "{link} missing:\n{text}");
    }
    // The directory's README is rendered below the listing, escaped.
    assert!(text.contains("<h1>Demo project</h1>"), "{text}");
    assert!(!text.contains("<script"), "{text}");
    // The default tree redirects to the default branch.
    let default = get(&h, "/files/-/tree");
    assert_eq!(default.status, 303);
    assert_eq!(default.header("location"), Some("/files/-/tree/main"));

    let docs = get(&h, "/files/-/tree/main/docs");
    assert!(
        docs.text()
            .contains("href=\"/files/-/blob/main/docs/a%20b%26c.md\""),
        "{}",
        docs.text()
    );
    let spaced = get(&h, "/files/-/blob/main/docs/a%20b%26c.md");
    assert_eq!(spaced.status, 200);
    assert!(
        web_support::strip_tags(&spaced.text()).contains("# spaced <out>"),
        "{}",
        spaced.text()
    );

    // A source file with line numbers and escaped content.
    let blob = get(&h, "/files/-/blob/main/src/main.rs");
    assert_eq!(blob.status, 200);
    let text = blob.text();
    assert!(
        text.contains("<tr id=\"L3\"><td class=\"ln\"><a href=\"#L3\">3</a>"),
        "{text}"
    );
    let plain = web_support::strip_tags(&text);
    assert!(plain.contains("println!(\"<b>not bold</b>\");"), "{text}");
    assert!(!text.contains("<b>not bold"), "{text}");
    assert!(plain.contains("let added_line = 42;"), "{text}");
    assert!(text.contains("4 lines"), "{text}");
    // The same path on another ref: the branch with a slash has the file too.
    let on_branch = get(&h, "/files/-/blob/feature/x/src/main.rs");
    assert_eq!(on_branch.status, 200);
    assert!(web_support::strip_tags(&on_branch.text()).contains("let added_line = 42;"));
    // By commit id, full or short.
    let head = h.rev_parse(&clone, "HEAD");
    assert_eq!(
        get(&h, &format!("/files/-/blob/{head}/big.txt")).status,
        200
    );
    assert_eq!(
        get(&h, &format!("/files/-/tree/{}/src", &head[..10])).status,
        200
    );

    // Binary files are described, not shown; huge ones show their first part.
    let bin = get(&h, "/files/-/blob/main/logo.bin");
    assert_eq!(bin.status, 200);
    assert!(
        bin.text().contains("Binary file, not shown."),
        "{}",
        bin.text()
    );
    let big = get(&h, "/files/-/blob/main/big.txt");
    assert_eq!(big.status, 200);
    assert!(big.text().contains("This file is large"), "{}", big.text());
    assert!(big.text().contains("line number 00000001"));
    assert!(!big.text().contains("line number 00059999"));

    // Raw bytes, exactly, as inert text or a download.
    let raw = get(&h, "/files/-/raw/main/README.md");
    assert_eq!(raw.status, 200);
    assert_eq!(raw.body, web_support::README.as_bytes());
    assert_eq!(
        raw.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert!(raw
        .header("content-security-policy")
        .unwrap()
        .contains("sandbox"));
    let raw_bin = get(&h, "/files/-/raw/main/logo.bin");
    assert_eq!(
        raw_bin.header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(raw_bin.body, std::fs::read(clone.join("logo.bin")).unwrap());
    assert_eq!(get(&h, "/files/-/raw/main/big.txt").body, huge.as_bytes());

    // A file under /tree and a directory under /blob redirect.
    let redirect = get(&h, "/files/-/tree/main/README.md");
    assert_eq!(redirect.status, 303);
    assert_eq!(
        redirect.header("location"),
        Some("/files/-/blob/main/README.md")
    );
    let redirect = get(&h, "/files/-/blob/main/src");
    assert_eq!(redirect.header("location"), Some("/files/-/tree/main/src"));

    // Missing things inside a visible repository: 404 saying what.
    let no_ref = get(&h, "/files/-/tree/no-such-branch");
    assert_eq!(no_ref.status, 404);
    assert!(no_ref.text().contains("No such branch, tag or commit."));
    let no_path = get(&h, "/files/-/blob/main/nope.txt");
    assert_eq!(no_path.status, 404);
    assert!(no_path.text().contains("No such file."));
    assert_eq!(get(&h, "/files/-/raw/main/src").status, 404);
    assert_eq!(get(&h, "/files/-/tree/main/nope").status, 404);
}

#[test]
fn commit_and_log_pages() {
    let h = ServerHarness::start();
    let (clone, first, second) = web_support::public_repo_with_content(&h, "hist");
    let commit = get(&h, &format!("/hist/-/commit/{second}"));
    assert_eq!(commit.status, 200);
    let text = commit.text();
    assert!(
        text.contains("Change main.rs: &#60;em&#62;escaped&#60;/em&#62;"),
        "{text}"
    );
    assert!(text.contains("1 file changed"), "{text}");
    let added = text
        .split("<tr class=\"add\">")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .expect("an added line");
    assert!(
        added.starts_with("<td class=\"ln\"></td><td class=\"ln\">3</td><td class=\"sign\">+</td>"),
        "{added}"
    );
    assert!(
        web_support::strip_tags(added).contains("    let added_line = 42;"),
        "{added}"
    );
    assert!(text.contains("<tr class=\"hunk\">"), "{text}");
    assert!(
        text.contains(&format!("href=\"/hist/-/commit/{first}\"")),
        "parent link: {text}"
    );
    // A short id works; the root commit has no parent and shows additions.
    assert_eq!(
        get(&h, &format!("/hist/-/commit/{}", &second[..7])).body,
        commit.body
    );
    let root = h.rev_parse(&clone, "HEAD~2");
    let root_page = get(&h, &format!("/hist/-/commit/{root}")).text();
    assert!(root_page.contains("none (root commit)"), "{root_page}");
    assert!(
        root_page.contains("<span class=\"status\">added</span> README.md"),
        "{root_page}"
    );
    // A binary file in a diff is named, not dumped.
    let bin_page = get(&h, &format!("/hist/-/commit/{first}")).text();
    assert!(bin_page.contains("logo.bin"), "{bin_page}");
    assert!(bin_page.contains("Binary file."), "{bin_page}");
    for bad in ["0000000000000000000000000000000000000000", "zzzz", "12"] {
        assert_eq!(
            get(&h, &format!("/hist/-/commit/{bad}")).status,
            404,
            "{bad}"
        );
    }

    // 60 more commits: the log pages by 50.
    for i in 0..60 {
        h.git(
            &clone,
            &[
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                &format!("Empty commit {i}"),
            ],
        );
    }
    h.ssh_push(&clone, &["main"]);
    let page1 = get(&h, "/hist/-/log/main");
    assert_eq!(page1.status, 200);
    let text = page1.text();
    assert_eq!(text.matches("<a class=\"id\"").count(), 50, "{text}");
    assert!(text.contains("Empty commit 59"), "{text}");
    assert!(text.contains("href=\"/hist/-/log/main?page=2\""), "{text}");
    let page2 = get(&h, "/hist/-/log/main?page=2").text();
    assert_eq!(page2.matches("<a class=\"id\"").count(), 13, "{page2}");
    assert!(page2.contains("Add a README"), "{page2}");
    assert!(!page2.contains("?page=3"), "{page2}");
    assert!(page2.contains("href=\"/hist/-/log/main\""), "{page2}");
    assert_eq!(get(&h, "/hist/-/log/main?page=9").status, 404);
    assert_eq!(get(&h, "/hist/-/log/main?page=x").status, 400);
    let default = get(&h, "/hist/-/log");
    assert_eq!(default.header("location"), Some("/hist/-/log/main"));
    assert_eq!(get(&h, "/hist/-/log/feature/x").status, 200);
    assert_eq!(get(&h, "/hist/-/log/nope").status, 404);
}

#[test]
fn issues_list_and_detail() {
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "tracker");
    let evil = web_support::open_issue(
        &h,
        &clone,
        "<script>alert(1)</script>",
        "Body with **bold** and <img src=x onerror=alert(2)>",
        &["bug", "<i>label</i>"],
    );
    let plain = web_support::open_issue(&h, &clone, "Plain issue", "", &["docs"]);
    let closed = web_support::open_issue(&h, &clone, "Closed issue", "", &[]);
    web_support::collab(
        &h,
        &clone,
        &[
            "issue",
            "comment",
            &evil[..8],
            "-m",
            "A *comment* <b>raw</b>",
        ],
    );
    web_support::collab(&h, &clone, &["issue", "close", &closed[..8], "-r", "done"]);
    web_support::push_collab(&h, &clone);

    let list = get(&h, "/tracker/-/issues");
    assert_eq!(list.status, 200);
    let text = list.text();
    assert!(
        text.contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
        "{text}"
    );
    assert!(!text.contains("<script"), "{text}");
    assert!(
        text.contains(&format!("href=\"/tracker/-/issues/{}\"", &evil[..8])),
        "{text}"
    );
    assert!(text.contains("Plain issue"), "{text}");
    assert!(!text.contains("Closed issue"), "open by default: {text}");
    assert!(text.contains("2 open"), "{text}");
    assert!(text.contains("1 closed"), "{text}");
    assert!(text.contains("&#60;i&#62;label&#60;/i&#62;"), "{text}");
    assert!(text.contains("label=%3Ci%3Elabel%3C%2Fi%3E"), "{text}");
    assert!(text.contains("1 comment"), "{text}");
    // The nav badge counts open issues.
    assert!(
        text.contains("Issues <span class=\"count\">2</span>"),
        "{text}"
    );

    let closed_list = get(&h, "/tracker/-/issues?state=closed").text();
    assert!(closed_list.contains("Closed issue") && !closed_list.contains("Plain issue"));
    let all = get(&h, "/tracker/-/issues?state=all").text();
    assert!(all.contains("Closed issue") && all.contains("Plain issue"));
    let docs = get(&h, "/tracker/-/issues?state=all&label=docs").text();
    assert!(
        docs.contains("Plain issue") && !docs.contains("Closed issue"),
        "{docs}"
    );
    assert!(!docs.contains("alert(1)"), "{docs}");

    // The detail page: by full id and by prefix.
    let detail = get(&h, &format!("/tracker/-/issues/{evil}"));
    assert_eq!(detail.status, 200);
    let text = detail.text();
    assert_eq!(
        get(&h, &format!("/tracker/-/issues/{}", &evil[..6])).body,
        detail.body
    );
    assert!(
        text.contains("<span class=\"state open\">open</span>"),
        "{text}"
    );
    assert!(text.contains("<strong>bold</strong>"), "{text}");
    assert!(
        text.contains("&lt;img src=x onerror=alert(2)&gt;"),
        "{text}"
    );
    assert!(
        text.contains("A <em>comment</em> &lt;b&gt;raw&lt;/b&gt;"),
        "{text}"
    );
    assert!(
        !text.contains("<script") && !text.contains("<img"),
        "{text}"
    );
    assert!(text.contains(&evil), "{text}");
    let closed_page = get(&h, &format!("/tracker/-/issues/{}", &closed[..8])).text();
    assert!(
        closed_page.contains("<span class=\"state closed\">closed</span>"),
        "{closed_page}"
    );
    assert!(closed_page.contains("closed: done"), "{closed_page}");
    let plain_page = get(&h, &format!("/tracker/-/issues/{}", &plain[..8])).text();
    assert!(plain_page.contains("No description."), "{plain_page}");

    for bad in [
        "0000",
        "zzzz",
        "ab",
        "0000000000000000000000000000000000000000",
    ] {
        let answer = get(&h, &format!("/tracker/-/issues/{bad}"));
        assert_eq!(answer.status, 404, "{bad}");
        assert!(answer.text().contains("No such issue."), "{bad}");
    }
}

#[test]
fn git_clone_and_fetch_over_http() {
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "cloneme");
    h.create_repo("private");
    h.git(&clone, &["push", &h.repo_url("private"), "main"]);
    let tmp = h.temp_dir();
    let url = |name: &str| format!("{}/{name}", h.http_url());

    // Protocol v2 (git's default) and v0.
    let out = web_support::git_http(&h, tmp, &["clone", "-q", &url("cloneme.git"), "v2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = web_support::git_http(
        &h,
        tmp,
        &[
            "-c",
            "protocol.version=0",
            "clone",
            "-q",
            &url("cloneme"),
            "v0",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = h.rev_parse(&clone, "HEAD");
    assert_eq!(h.rev_parse(&tmp.join("v2"), "HEAD"), head);
    assert_eq!(h.rev_parse(&tmp.join("v0"), "HEAD"), head);
    assert_eq!(
        std::fs::read(tmp.join("v2/logo.bin")).unwrap(),
        std::fs::read(clone.join("logo.bin")).unwrap()
    );
    // The v2 advertisement has no service announcement; v0 has one.
    let v2 = request(
        "GET",
        &url("cloneme/info/refs?service=git-upload-pack"),
        &[("Git-Protocol", "version=2")],
        None,
    );
    assert!(v2.text().starts_with("000eversion 2\n"), "{}", v2.text());
    let v0 = get(&h, "/cloneme/info/refs?service=git-upload-pack");
    assert!(
        v0.text().starts_with("001e# service=git-upload-pack\n0000"),
        "{}",
        v0.text()
    );
    assert_eq!(
        v0.header("content-type"),
        Some("application/x-git-upload-pack-advertisement")
    );

    // An incremental fetch whose negotiation is big enough for git to
    // gzip its request body. The local commits are dated after everything
    // the server has, so git's negotiator offers them (unknown to the
    // server) first and needs a second round, whose body of 48 haves is
    // gzipped; with equal dates it may offer the common commit in the
    // first round of 16 and finish small.
    let v2_clone = tmp.join("v2");
    for i in 0..64 {
        // 2090-01-01, a second apart.
        let date = format!("2090-01-01 00:{:02}:{:02} +0000", i / 60, i % 60);
        let out = h
            .git_command(&h.ssh_client_key(), &v2_clone)
            .env("GIT_COMMITTER_DATE", date)
            .args(["commit", "-q", "--allow-empty", "-m", &format!("local {i}")])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let new_head = h.commit_file(&clone, "new.txt", b"new\n", "Newer commit");
    h.ssh_push(&clone, &["main"]);
    let out = h
        .git_command(&h.ssh_client_key(), &v2_clone)
        .env("GIT_TRACE_CURL", "1")
        .env("GIT_TRACE_CURL_NO_DATA", "1")
        .args(["fetch", "origin"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Content-Encoding: gzip"),
        "the fetch did not exercise a gzipped request"
    );
    assert_eq!(h.rev_parse(&v2_clone, "origin/main"), new_head);

    // A private repository fails exactly like a missing one.
    let private = web_support::git_http(&h, tmp, &["clone", &url("private.git"), "p"]);
    let missing = web_support::git_http(&h, tmp, &["clone", &url("absent.git"), "p"]);
    assert!(!private.status.success() && !missing.status.success());
    assert_eq!(private.status.code(), missing.status.code());
    let normalize = |out: &std::process::Output, name: &str| {
        String::from_utf8_lossy(&out.stderr).replace(name, "NAME")
    };
    assert_eq!(
        normalize(&private, "private.git"),
        normalize(&missing, "absent.git")
    );
    assert!(normalize(&missing, "absent.git").contains("repository not found"));
    assert!(!tmp.join("p").exists());

    // Pushing over HTTP is refused with a message git shows.
    h.git(&v2_clone, &["reset", "-q", "--hard", "origin/main"]);
    h.commit_file(&v2_clone, "x.txt", b"x\n", "Try to push");
    let push = web_support::git_http(&h, &v2_clone, &["push", "origin", "main"]);
    assert!(!push.status.success());
    let stderr = String::from_utf8_lossy(&push.stderr);
    assert!(
        stderr.contains("remote: push over HTTP is not supported"),
        "{stderr}"
    );
    assert!(stderr.contains("403"), "{stderr}");
    assert_eq!(h.rev_parse(&clone, "HEAD"), new_head);
    let direct = request("POST", &url("cloneme/git-receive-pack"), &[], Some(b"0000"));
    assert_eq!(direct.status, 403);
    // Dumb HTTP is not served.
    assert_eq!(get(&h, "/cloneme/info/refs").status, 403);
}

#[test]
fn nested_repository_names() {
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "team/app");
    let id = web_support::open_issue(&h, &clone, "Nested issue", "", &[]);
    web_support::push_collab(&h, &clone);
    assert!(get(&h, "/").text().contains("href=\"/team/app\""));
    let summary = get(&h, "/team/app");
    assert_eq!(summary.status, 200);
    assert!(summary
        .text()
        .contains("<h1 class=\"repo-name\"><a href=\"/team/app\">team/app</a>"));
    assert_eq!(get(&h, "/team/app/-/tree/feature/x/src").status, 200);
    assert_eq!(get(&h, "/team/app.git/-/blob/main/README.md").status, 200);
    let issue = get(&h, &format!("/team/app/-/issues/{}", &id[..8]));
    assert!(issue.text().contains("Nested issue"));
    assert_eq!(get(&h, "/team").status, 404);
    let out = web_support::git_http(
        &h,
        h.temp_dir(),
        &[
            "clone",
            "-q",
            &format!("{}/team/app.git", h.http_url()),
            "nested",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn probes_metrics_static_and_unknown_paths() {
    let h = ServerHarness::start();
    let live = get(&h, "/livez");
    assert_eq!((live.status, live.text().as_str()), (200, "ok"));
    let ready = get(&h, "/readyz");
    assert_eq!(ready.status, 200, "{}", ready.text());

    let css = get(&h, "/-/static/style.css");
    assert_eq!(css.status, 200);
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
    assert!(css.text().contains("@media (max-width"));

    let unknown = get(&h, "/-/nothing");
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.body, get(&h, "/no-such-repo").body);
    let post = request("POST", &format!("{}/livez", h.http_url()), &[], Some(b"x"));
    assert_eq!(post.status, 405);

    // An SSH session and an exec verb show up in the counters.
    assert!(h.ssh_exec("collab-whoami").success());
    let metrics = get(&h, "/metrics");
    assert_eq!(metrics.status, 200);
    assert_eq!(
        metrics.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = metrics.text();
    assert!(
        text.contains("# TYPE git_collab_ssh_sessions_total counter"),
        "{text}"
    );
    assert!(text.contains("git_collab_ssh_sessions_total 1\n"), "{text}");
    assert!(
        text.contains("git_collab_ssh_verbs_total{verb=\"collab-whoami\",outcome=\"ok\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("git_collab_http_requests_total{status=\"404\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains("git_collab_http_requests_total{status=\"405\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE git_collab_lease_operations_total counter"),
        "{text}"
    );

    // readyz fails once collab.db can no longer be opened (a SQLite file
    // to move away; on PostgreSQL the same query answers, checked above).
    if h.pg.is_some() {
        return;
    }
    let db = h.state_dir().join("repos").join("collab.db");
    assert!(db.exists(), "collab.db is at {}", db.display());
    let moved = h.state_dir().join("collab.db.moved");
    std::fs::rename(&db, &moved).unwrap();
    let not_ready = get(&h, "/readyz");
    assert_eq!(not_ready.status, 503);
    assert!(
        not_ready.text().contains("collab_db"),
        "{}",
        not_ready.text()
    );
    std::fs::rename(&moved, &db).unwrap();
    assert_eq!(get(&h, "/readyz").status, 200);
}

#[test]
fn branches_tags_switcher_archives_and_commit_text() {
    let h = ServerHarness::start();
    let (clone, first, second) = web_support::public_repo_with_content(&h, "refs");
    h.git(
        &clone,
        &["tag", "-a", "v1.0", "-m", "First <release>", &first],
    );
    h.ssh_push(&clone, &["v1.0"]);

    // The branches page: both branches, the default marked, archive links.
    let page = get(&h, "/refs/-/branches");
    assert_eq!(page.status, 200);
    let text = page.text();
    assert!(text.contains("href=\"/refs/-/tree/main\""), "{text}");
    assert!(text.contains("href=\"/refs/-/tree/feature/x\""), "{text}");
    assert!(
        text.contains("<span class=\"badge\">default</span>"),
        "{text}"
    );
    assert!(
        text.contains("href=\"/refs/-/archive/feature/x.tar.gz\""),
        "{text}"
    );
    assert!(text.contains(&second[..7]), "{text}");
    // The tags page: the tag, its message, its commit.
    let text = get(&h, "/refs/-/tags").text();
    assert!(text.contains("href=\"/refs/-/tree/v1.0\""), "{text}");
    assert!(text.contains("First &#60;release&#62;"), "{text}");
    assert!(text.contains(&first[..7]), "{text}");
    assert!(text.contains("href=\"/refs/-/archive/v1.0.zip\""), "{text}");

    // The switcher: the same page at another branch or tag.
    let text = get(&h, "/refs/-/tree/main/src").text();
    assert!(text.contains("<details class=\"switcher\">"), "{text}");
    assert!(
        text.contains("href=\"/refs/-/tree/feature/x/src\""),
        "{text}"
    );
    assert!(text.contains("href=\"/refs/-/tree/v1.0/src\""), "{text}");
    let text = get(&h, "/refs/-/log/feature/x").text();
    assert!(text.contains("href=\"/refs/-/log/main\""), "{text}");
    assert!(text.contains("href=\"/refs/-/log/v1.0\""), "{text}");
    assert_eq!(get(&h, "/refs/-/tree/v1.0").status, 200);

    // Archives: a tar.gz and a zip of a ref, under <repo>-<ref>/.
    let tgz = get(&h, "/refs/-/archive/feature/x.tar.gz");
    assert_eq!(tgz.status, 200, "{}", tgz.text());
    assert_eq!(tgz.header("content-type"), Some("application/gzip"));
    assert_eq!(
        tgz.header("content-disposition"),
        Some("attachment; filename=\"refs-feature-x.tar.gz\"")
    );
    let saved = h.temp_dir().join("a.tar.gz");
    std::fs::write(&saved, &tgz.body).unwrap();
    let listing = std::process::Command::new("tar")
        .arg("tzf")
        .arg(&saved)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("refs-feature-x/README.md"), "{listing}");
    assert!(listing.contains("refs-feature-x/src/main.rs"), "{listing}");
    let zip = get(&h, "/refs/-/archive/v1.0.zip");
    assert_eq!(zip.status, 200);
    assert_eq!(zip.header("content-type"), Some("application/zip"));
    assert!(zip.body.starts_with(b"PK"), "not a zip");
    let by_id = get(&h, &format!("/refs/-/archive/{}.tar.gz", &second[..10]));
    assert_eq!(by_id.status, 200);
    for bad in ["nope.tar.gz", "main.rar", "main", "main/README.md.zip"] {
        assert_eq!(
            get(&h, &format!("/refs/-/archive/{bad}")).status,
            404,
            "{bad}"
        );
    }

    // A commit as a patch and as a diff.
    let patch = get(&h, &format!("/refs/-/commit/{second}.patch"));
    assert_eq!(patch.status, 200);
    assert_eq!(
        patch.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    let text = patch.text();
    assert!(text.starts_with(&format!("From {second} ")), "{text}");
    assert!(
        text.contains("Subject: [PATCH] Change main.rs: <em>escaped</em>"),
        "{text}"
    );
    assert!(text.contains("+    let added_line = 42;"), "{text}");
    let diff = get(&h, &format!("/refs/-/commit/{}.diff", &second[..8])).text();
    assert!(
        diff.starts_with("diff --git a/src/main.rs b/src/main.rs"),
        "{diff}"
    );
    assert!(diff.contains("+    let added_line = 42;"), "{diff}");
    let root = h.rev_parse(&clone, "HEAD~2");
    let root_diff = get(&h, &format!("/refs/-/commit/{root}.diff")).text();
    assert!(root_diff.contains("+++ b/README.md"), "{root_diff}");
    let page = get(&h, &format!("/refs/-/commit/{second}")).text();
    assert!(
        page.contains(&format!("href=\"/refs/-/commit/{second}.patch\"")),
        "{page}"
    );
    assert_eq!(get(&h, "/refs/-/commit/zzzz.patch").status, 404);
}

/// A 20,000-commit history (git fast-import): the log's first, a deep and
/// the last page list the right commits, and the summary its newest ones.
/// (The cost against `git log` is measured in benches/web_log.rs.)
#[test]
fn log_pages_of_a_big_history() {
    let h = ServerHarness::start();
    h.create_repo("big");
    let dir = h.repos_dir().join("big.git");
    common::synthetic_history(&dir, "main", 20_000);
    web_support::make_public(&h, "big");
    let numbers = |text: &str| -> Vec<usize> {
        text.split("Commit number ")
            .skip(1)
            .filter_map(|t| t.split('<').next()?.trim().parse().ok())
            .collect()
    };
    let page1 = get(&h, "/big/-/log/main").text();
    assert_eq!(
        numbers(&page1),
        (19_951..=20_000).rev().collect::<Vec<_>>(),
        "{page1}"
    );
    assert!(page1.contains("href=\"/big/-/log/main?page=2\""));
    // Page 201 skips 10,000 commits (walked by git rev-list).
    let deep = get(&h, "/big/-/log/main?page=201").text();
    assert_eq!(
        numbers(&deep),
        (9_951..=10_000).rev().collect::<Vec<_>>(),
        "{deep}"
    );
    let last = get(&h, "/big/-/log/main?page=400").text();
    assert_eq!(numbers(&last), (1..=50).rev().collect::<Vec<_>>());
    assert!(!last.contains("?page=401"), "{last}");
    assert_eq!(get(&h, "/big/-/log/main?page=401").status, 404);
    // After maintenance's split commit-graph, the same answers.
    h.git(&dir, &["commit-graph", "write", "--reachable", "--split"]);
    assert_eq!(get(&h, "/big/-/log/main?page=201").text(), deep);
    let summary = get(&h, "/big").text();
    assert!(summary.contains("Commit number 20000"), "{summary}");
    assert!(summary.contains("Commit number 19991"), "{summary}");
}

/// Browsers ask for `/favicon.ico` on the first visit to a site; it used
/// to be a 404, a console error on every first page load (issue 32). Every
/// page links the icon.
#[test]
fn the_site_has_an_icon() {
    let h = ServerHarness::start();
    let icon = get(&h, "/favicon.ico");
    assert_eq!(icon.status, 200, "{}", icon.text());
    assert_eq!(icon.header("content-type"), Some("image/svg+xml"));
    assert!(icon.text().starts_with("<svg"), "{}", icon.text());
    let index = get(&h, "/");
    assert!(index
        .text()
        .contains("<link rel=\"icon\" href=\"/favicon.ico\">"));
}
