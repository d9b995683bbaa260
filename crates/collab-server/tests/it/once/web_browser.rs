//! The web UI in a real browser: headless Chromium loads the repository,
//! issues and issue pages of a running `git-collab-server`; the test reads
//! what the browser built (`--dump-dom`) and saves screenshots, desktop and
//! phone sized, under `target/test-artifacts/`.
//!
//! Hostile content (a README and an issue title carrying `<script>`) must
//! arrive in the DOM as text, never as an element. Without Chromium the
//! tests skip with a message, unless `GIT_COLLAB_REQUIRE_BROWSER_TESTS=1`.

use collab_testkit as common;
use collab_testkit::web as web_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::ServerHarness;

/// Hang guard for one browser run (not a performance assertion).
const BROWSER_LIMIT: Duration = Duration::from_secs(120);

/// The Chromium binary, or `None` (after saying why) when the test should
/// skip.
fn chromium() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("CHROMIUM").map(PathBuf::from),
        Some(PathBuf::from("/usr/bin/chromium")),
        Some(PathBuf::from("/usr/bin/chromium-browser")),
    ];
    let found = candidates.into_iter().flatten().find(|p| p.is_file());
    if found.is_none() {
        let required = std::env::var("GIT_COLLAB_REQUIRE_BROWSER_TESTS").as_deref() == Ok("1");
        assert!(
            !required,
            "GIT_COLLAB_REQUIRE_BROWSER_TESTS=1 but no Chromium at /usr/bin/chromium (or $CHROMIUM)"
        );
        eprintln!("skipping: Chromium is not installed (apt-get install chromium); set GIT_COLLAB_REQUIRE_BROWSER_TESTS=1 to make this a failure");
    }
    found
}

fn artifacts_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run headless Chromium with `extra` arguments on `url`; returns stdout.
fn run_chromium(browser: &Path, extra: &[String], url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
        out
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > BROWSER_LIMIT {
            let _ = child.kill();
            panic!("chromium did not finish loading {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "chromium failed on {url}: {status}");
    reader.join().unwrap()
}

/// The DOM Chromium built for `url`.
fn dump_dom(browser: &Path, url: &str) -> String {
    run_chromium(browser, &["--dump-dom".to_string()], url)
}

/// Save a screenshot of `url` at `width`x`height` as `name`.png.
fn screenshot(browser: &Path, url: &str, name: &str, width: u32, height: u32) -> PathBuf {
    let path = artifacts_dir().join(format!("{name}.png"));
    let _ = std::fs::remove_file(&path);
    run_chromium(
        browser,
        &[
            format!("--screenshot={}", path.display()),
            format!("--window-size={width},{height}"),
            "--hide-scrollbars".to_string(),
        ],
        url,
    );
    let png =
        std::fs::read(&path).unwrap_or_else(|e| panic!("no screenshot {}: {e}", path.display()));
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        path.display()
    );
    assert!(
        png.len() > 5_000,
        "{} is suspiciously small",
        path.display()
    );
    path
}

/// Text of the DOM with the tags removed (to check what a reader sees).
fn visible_text(dom: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in dom.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let out = out
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&");
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn repository_issues_and_issue_pages_render_in_chromium() {
    let Some(browser) = chromium() else { return };
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "browse");
    std::fs::write(
        h.repos_dir().join("browse.git/description"),
        "Browsed by Chromium\n",
    )
    .unwrap();
    let hostile = web_support::open_issue(
        &h,
        &clone,
        "<script>document.title='pwned'</script>",
        "Steps:\n\n1. open the page\n2. <b>nothing</b> runs",
        &["security"],
    );
    let claimed = web_support::open_issue(&h, &clone, "Render the issues page", "", &["web", "ui"]);
    web_support::collab(
        &h,
        &clone,
        &[
            "issue",
            "comment",
            &claimed[..8],
            "-m",
            "Working on it, see `issues.rs`.",
        ],
    );
    web_support::push_collab(&h, &clone);
    let out = h.ssh_exec(&format!("collab-lease acquire browse {claimed} --ttl 3600"));
    assert!(out.success(), "{out:?}");
    // Shown by display name: the key's comment.
    let holder = "client";
    let base = h.http_url();

    // The repository page.
    let dom = dump_dom(&browser, &format!("{base}/browse"));
    let text = visible_text(&dom);
    assert!(dom.contains("<title>browse · git-collab</title>"), "{dom}");
    assert!(text.contains("Browsed by Chromium"), "{text}");
    assert!(text.contains("Demo project"), "{text}");
    assert!(
        text.contains("<script>alert('readme')</script>"),
        "raw HTML shown as text: {text}"
    );
    assert!(
        !dom.contains("<script"),
        "a script element reached the DOM: {dom}"
    );
    assert!(
        text.contains(&format!("ssh://git@127.0.0.1:{}/browse.git", h.ssh_port())),
        "{text}"
    );
    assert!(text.contains("Change main.rs: <em>escaped</em>"), "{text}");
    screenshot(
        &browser,
        &format!("{base}/browse"),
        "web-summary",
        1200,
        900,
    );

    // The issues page: both issues, the claim, the labels; the hostile
    // title is text and did not run (the title is unchanged).
    let dom = dump_dom(&browser, &format!("{base}/browse/-/issues"));
    let text = visible_text(&dom);
    assert!(
        dom.contains("<title>Issues · browse · git-collab</title>"),
        "{dom}"
    );
    assert!(
        text.contains("<script>document.title='pwned'</script>"),
        "{text}"
    );
    assert!(!dom.contains("<script"), "{dom}");
    assert!(text.contains("Render the issues page"), "{text}");
    assert!(text.contains(&format!("claimed by {holder}")), "{text}");
    assert!(text.contains("2 open"), "{text}");
    for label in ["security", "web", "ui"] {
        assert!(
            dom.contains(&format!(">{label}</a>")),
            "label {label}: {dom}"
        );
    }
    screenshot(
        &browser,
        &format!("{base}/browse/-/issues"),
        "web-issues",
        1200,
        900,
    );
    screenshot(
        &browser,
        &format!("{base}/browse/-/issues"),
        "web-issues-phone",
        390,
        844,
    );

    // The issue page, by prefix: comments, claim, labels.
    let url = format!("{base}/browse/-/issues/{}", &claimed[..8]);
    let dom = dump_dom(&browser, &url);
    let text = visible_text(&dom);
    assert!(text.contains("Render the issues page"), "{text}");
    assert!(text.contains(&format!("claimed by {holder}")), "{text}");
    assert!(text.contains("Working on it, see issues.rs."), "{text}");
    assert!(dom.contains("<code>issues.rs</code>"), "{dom}");
    assert!(text.contains("open"), "{text}");
    screenshot(&browser, &url, "web-issue-detail", 1200, 900);

    // The hostile issue's own page.
    let dom = dump_dom(&browser, &format!("{base}/browse/-/issues/{hostile}"));
    let text = visible_text(&dom);
    assert!(!dom.contains("<script"), "{dom}");
    assert!(!dom.contains("<b>nothing</b>"), "{dom}");
    assert!(text.contains("<b>nothing</b> runs"), "{text}");
    assert!(
        dom.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt; · Issue"),
        "{dom}"
    );

    // A file with line numbers, on a phone.
    let url = format!("{base}/browse/-/blob/main/src/main.rs");
    let text = visible_text(&dump_dom(&browser, &url));
    assert!(text.contains("let added_line = 42;"), "{text}");
    screenshot(&browser, &url, "web-blob-phone", 390, 844);
}

/// The log of a 20,000-commit repository (git fast-import) in Chromium:
/// page 1, a deep page (walked by `git rev-list`) and the branch/tag
/// switcher. How long the pages take against `git log` is measured in
/// benches/web_log.rs, not here.
#[test]
fn the_log_of_a_big_history_renders_in_chromium() {
    let Some(browser) = chromium() else { return };
    let h = ServerHarness::start();
    h.create_repo("big");
    let dir = h.repos_dir().join("big.git");
    common::synthetic_history(&dir, "main", 20_000);
    h.git(&dir, &["tag", "v1.0", "main~100"]);
    web_support::make_public(&h, "big");
    let base = h.http_url();

    let numbers = |text: &str| -> Vec<usize> {
        text.split("Commit number ")
            .skip(1)
            .filter_map(|t| t.split('<').next()?.trim().parse().ok())
            .collect()
    };
    let url = format!("{base}/big/-/log/main");
    let dom = dump_dom(&browser, &url);
    let text = visible_text(&dom);
    assert!(
        dom.contains("<title>Log of main · big · git-collab</title>"),
        "{dom}"
    );
    assert_eq!(
        numbers(&dom),
        (19_951..=20_000).rev().collect::<Vec<_>>(),
        "{dom}"
    );
    assert!(dom.contains("<details class=\"switcher\">"), "{dom}");
    assert!(dom.contains("href=\"/big/-/log/v1.0\""), "{dom}");
    assert!(text.contains("Older →"), "{text}");
    screenshot(&browser, &url, "web-log-20000", 1200, 900);

    let dom = dump_dom(&browser, &format!("{base}/big/-/log/main?page=300"));
    let text = visible_text(&dom);
    assert_eq!(
        numbers(&dom),
        (5_001..=5_050).rev().collect::<Vec<_>>(),
        "{dom}"
    );
    assert!(
        text.contains("← Newer") && text.contains("Older →"),
        "{text}"
    );
}

/// The code pages in Chromium, kept as screenshots in
/// `target/test-artifacts/`: a highlighted blob, a diff with line numbers,
/// a file's blame, the tags page and a patch with an inline comment.
#[test]
fn code_pages_render_in_chromium() {
    let Some(browser) = chromium() else { return };
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "code");
    h.commit_file(
        &clone,
        "src/lib.rs",
        b"//! A small library.\n\nuse std::collections::HashMap;\n\n/// Counts words.\npub fn count(text: &str) -> HashMap<&str, usize> {\n    let mut seen = HashMap::new();\n    for word in text.split_whitespace() {\n        *seen.entry(word).or_insert(0) += 1;\n    }\n    seen\n}\n",
        "Add a word counter",
    );
    let changed = h.commit_file(
        &clone,
        "src/lib.rs",
        b"//! A small library.\n\nuse std::collections::HashMap;\n\n/// Counts words, ignoring case.\npub fn count(text: &str) -> HashMap<String, usize> {\n    let mut seen = HashMap::new();\n    for word in text.split_whitespace() {\n        *seen.entry(word.to_lowercase()).or_insert(0) += 1;\n    }\n    seen\n}\n",
        "Count words ignoring case",
    );
    h.git(&clone, &["tag", "-a", "v1.0", "-m", "First release"]);
    h.git(&clone, &["tag", "v1.1-rc"]);
    h.ssh_push(&clone, &["main", "v1.0", "v1.1-rc"]);
    // A patch with an inline comment on line 1 of the file it adds.
    h.git(&clone, &["checkout", "-q", "-b", "topic"]);
    h.commit_file(
        &clone,
        "src/words.rs",
        b"pub fn words(text: &str) -> Vec<&str> {\n    text.split_whitespace().collect()\n}\n",
        "Add words()",
    );
    let out = h.git(&clone, &["push", "origin", "HEAD:refs/for/main"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let short = stderr
        .split("remote: patch ")
        .nth(1)
        .map(|s| s[..8].to_string())
        .unwrap_or_else(|| panic!("{stderr}"));
    let out = h.ssh_exec_with_stdin(
        &format!("collab-patch comment 'code' '{short}' --path src/words.rs --line 1 --body-stdin"),
        b"Should this return an `impl Iterator`?",
    );
    assert_eq!(out.code, 0, "{out:?}");
    let patch = short;
    let base = h.http_url();
    let mut shots = Vec::new();

    // A highlighted blob: coloured spans reach the DOM, no script does.
    let url = format!("{base}/code/-/blob/main/src/lib.rs");
    let dom = dump_dom(&browser, &url);
    assert!(dom.contains("<span class=\"hl-"), "{dom}");
    assert!(!dom.contains("<script"), "{dom}");
    shots.push(screenshot(
        &browser,
        &url,
        "web-blob-highlighted",
        1200,
        700,
    ));

    // A diff with old and new line numbers.
    let url = format!("{base}/code/-/commit/{changed}");
    let dom = dump_dom(&browser, &url);
    assert!(
        dom.contains("<td class=\"ln\">5</td><td class=\"ln\"></td>"),
        "{dom}"
    );
    assert!(
        dom.contains("<td class=\"ln\"></td><td class=\"ln\">5</td>"),
        "{dom}"
    );
    shots.push(screenshot(
        &browser,
        &url,
        "web-diff-line-numbers",
        1200,
        900,
    ));

    let url = format!("{base}/code/-/blame/main/src/lib.rs");
    let dom = dump_dom(&browser, &url);
    assert!(dom.contains("title=\"Count words ignoring case\""), "{dom}");
    shots.push(screenshot(&browser, &url, "web-blame", 1200, 700));

    // The tags page.
    let url = format!("{base}/code/-/tags");
    let text = visible_text(&dump_dom(&browser, &url));
    assert!(text.contains("v1.0") && text.contains("v1.1-rc"), "{text}");
    shots.push(screenshot(&browser, &url, "web-tags", 1200, 700));

    // The patch page: the inline comment sits under line 1 of the diff.
    let url = format!("{base}/code/-/patches/{}", &patch[..8]);
    let dom = dump_dom(&browser, &url);
    let at = dom
        .find("class=\"post inline-comment\"")
        .expect("an inline comment");
    let before = &dom[..at];
    assert!(
        before
            .rfind("<td class=\"ln\">1</td>")
            .is_some_and(|l| before[l..].matches("<tr").count() <= 2),
        "the comment follows line 1: {dom}"
    );
    assert!(dom[at..].contains("<code>impl Iterator</code>"), "{dom}");
    shots.push(screenshot(
        &browser,
        &url,
        "web-patch-inline-comment",
        1200,
        1400,
    ));

    for shot in shots {
        eprintln!("screenshot: {}", shot.display());
    }
}

/// The WCAG relative luminance of an sRGB colour.
fn luminance([r, g, b]: [f64; 3]) -> f64 {
    let linear = |c: f64| {
        let c = c / 255.0;
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b)
}

/// The WCAG contrast ratio of two colours (1 to 21).
fn contrast(a: [f64; 3], b: [f64; 3]) -> f64 {
    let (la, lb) = (luminance(a), luminance(b));
    (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
}

/// `rgb(r, g, b)` as the browser computes it; an `rgba` with any
/// transparency is refused (the test would not know what shows through).
fn rgb(computed: &str) -> [f64; 3] {
    let inner = computed
        .trim()
        .strip_prefix("rgb(")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not an opaque rgb() colour: {computed}"));
    let parts: Vec<f64> = inner
        .split(',')
        .map(|p| p.trim().parse().unwrap())
        .collect();
    [parts[0], parts[1], parts[2]]
}

/// Lists each `.state` badge as `classes|text colour|background`: the
/// background is the first one not transparent from the badge outwards
/// (white, the canvas, when none is).
const STATE_COLOURS: &str = "<script>
const rows = [];
for (const el of document.querySelectorAll('.state')) {
  let bg = 'rgb(255, 255, 255)';
  for (let n = el; n; n = n.parentElement) {
    const c = getComputedStyle(n).backgroundColor;
    if (c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent') { bg = c; break; }
  }
  rows.push([el.className, getComputedStyle(el).color, bg].join('|'));
}
const pre = document.createElement('pre');
pre.id = 'state-colours';
pre.textContent = rows.join('\\n');
document.body.appendChild(pre);
</script>";

/// Every state badge (checks, merge groups, issues, patches) is readable
/// and the check states look different: Chromium computes the colours of
/// the real commit page, with the server's stylesheet, and each badge's
/// text must have WCAG AA contrast (4.5:1) on its background.
#[test]
fn state_badges_have_distinct_readable_colours_in_chromium() {
    let Some(browser) = chromium() else { return };
    let h = ServerHarness::start();
    let (_clone, _, head) = web_support::public_repo_with_content(&h, "states");
    let check_states = ["pending", "success", "failure", "error", "skipped"];
    for state in check_states {
        let out = h.ssh_exec(&format!(
            "collab-check set 'states' {head} ci/{state} --state {state}"
        ));
        assert!(out.success(), "{out:?}");
    }
    let page = web_support::get(&h, &format!("/states/-/commit/{head}"));
    assert_eq!(page.status, 200);
    let html = page.text();
    let link = r#"<link rel="stylesheet" href="/-/static/style.css">"#;
    assert!(html.contains(link), "{html}");
    let css = web_support::get(&h, "/-/static/style.css").text();
    // The merge queue's group states and the issue and patch states use
    // the same badge (templates/queue.html: `state {{ g.state }}`).
    let others: String = ["testing", "merged", "failed", "stale", "open", "closed"]
        .iter()
        .map(|s| format!(r#"<p><span class="state {s}">{s}</span></p>"#))
        .collect();
    let probe = html
        .replace(link, &format!("<style>{css}</style>"))
        .replace("</body>", &format!("{others}{STATE_COLOURS}</body>"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("states.html");
    std::fs::write(&file, probe).unwrap();
    let dom = dump_dom(&browser, &format!("file://{}", file.display()));
    let listed = dom
        .split_once(r#"<pre id="state-colours">"#)
        .and_then(|(_, rest)| rest.split_once("</pre>"))
        .unwrap_or_else(|| panic!("the probe did not run: {dom}"))
        .0;
    let mut backgrounds = std::collections::HashMap::new();
    for row in listed.lines() {
        let [classes, fg, bg] = row.split('|').collect::<Vec<_>>()[..] else {
            panic!("{row}");
        };
        let ratio = contrast(rgb(fg), rgb(bg));
        assert!(
            ratio >= 4.5,
            "`{classes}`: {fg} on {bg} has contrast {ratio:.2}, below 4.5"
        );
        backgrounds.insert(classes.to_string(), bg.to_string());
    }
    for state in check_states.iter().chain(&["testing", "failed", "stale"]) {
        assert!(
            backgrounds.contains_key(&format!("state {state}")),
            "no badge for {state}: {listed}"
        );
    }
    // Pending, success and failure (and the other states) look different.
    let distinct: std::collections::HashSet<&String> = check_states
        .iter()
        .map(|s| &backgrounds[&format!("state {s}")])
        .collect();
    assert_eq!(distinct.len(), check_states.len(), "{listed}");
    screenshot(
        &browser,
        &format!("{}/states/-/commit/{head}", h.http_url()),
        "web-check-states",
        1000,
        700,
    );
}

/// Where Chromium lays out each blame row's date, and the cell holding it:
/// `date left|date right|cell left|cell right`, one row per line.
const BLAME_DATES: &str = "<script>
const rows = [];
for (const tr of document.querySelectorAll('table.blame tr.blame-start')) {
  const walk = document.createTreeWalker(tr, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const m = /\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC/.exec(n.data);
    if (!m) continue;
    const r = document.createRange();
    r.setStart(n, m.index);
    r.setEnd(n, m.index + m[0].length);
    const d = r.getBoundingClientRect();
    const c = n.parentElement.closest('td').getBoundingClientRect();
    rows.push([d.left, d.right, c.left, c.right].map(Math.round).join('|'));
  }
}
const pre = document.createElement('pre');
pre.id = 'blame-dates';
pre.textContent = rows.join('\\n');
document.body.appendChild(pre);
</script>";

/// Issue 50: the blame page's date was cut by the author cell's ellipsis.
/// With a long author name, every date lies whole inside its cell.
#[test]
fn blame_dates_are_shown_whole_in_chromium() {
    let Some(browser) = chromium() else { return };
    let h = ServerHarness::start();
    let (clone, _, _) = web_support::public_repo_with_content(&h, "blame");
    std::fs::write(clone.join("notes.txt"), "one\ntwo\n").unwrap();
    h.git(&clone, &["add", "notes.txt"]);
    let out = h
        .git_command(&h.ssh_client_key(), &clone)
        .env("GIT_AUTHOR_NAME", "Maximiliane Oberhauser-Wittgenstein")
        .args(["commit", "-q", "-m", "Add notes"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    let page = web_support::get(&h, "/blame/-/blame/main/notes.txt");
    assert_eq!(page.status, 200);
    let html = page.text();
    let link = r#"<link rel="stylesheet" href="/-/static/style.css">"#;
    assert!(html.contains(link), "{html}");
    let css = web_support::get(&h, "/-/static/style.css").text();
    let probe = html
        .replace(link, &format!("<style>{css}</style>"))
        .replace("</body>", &format!("{BLAME_DATES}</body>"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("blame.html");
    std::fs::write(&file, probe).unwrap();
    let dom = dump_dom(&browser, &format!("file://{}", file.display()));
    let listed = dom
        .split_once(r#"<pre id="blame-dates">"#)
        .and_then(|(_, rest)| rest.split_once("</pre>"))
        .unwrap_or_else(|| panic!("the probe did not run: {dom}"))
        .0;
    assert!(!listed.trim().is_empty(), "no dates on the page: {html}");
    for row in listed.lines() {
        let [left, right, cell_left, cell_right] = row
            .split('|')
            .map(|n| n.parse::<i64>().unwrap())
            .collect::<Vec<_>>()[..]
        else {
            panic!("{row}");
        };
        assert!(
            left >= cell_left && right <= cell_right,
            "a date is cut: it spans {left}..{right} in a cell of {cell_left}..{cell_right}"
        );
    }
}
