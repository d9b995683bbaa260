//! Helpers for the web tests: a real HTTP client (`curl`), and fixtures that
//! fill a repository on a running `ServerHarness` through the real `git`
//! and `git-collab` binaries, then make it public.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::harness::ServerHarness;

/// One HTTP response.
#[derive(Debug, Clone)]
pub struct Http {
    pub status: u16,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Http {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `curl` one request (no redirects followed) and parse the answer.
pub fn request(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Http {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-s",
        "-S",
        "-i",
        "--http1.1",
        "--path-as-is",
        "--max-time",
        "120",
    ]);
    if method == "HEAD" {
        cmd.arg("-I");
    } else {
        cmd.args(["-X", method]);
    }
    for (k, v) in headers {
        cmd.arg("-H").arg(format!("{k}: {v}"));
    }
    if body.is_some() {
        cmd.args(["--data-binary", "@-"]);
    }
    cmd.arg(url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run curl (is it installed?)");
    let mut stdin = child.stdin.take().unwrap();
    let data = body.map(<[u8]>::to_vec).unwrap_or_default();
    let writer = std::thread::spawn(move || {
        use std::io::Write as _;
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "curl {method} {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&out.stdout)
}

fn parse(raw: &[u8]) -> Http {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP header block");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Http {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

pub fn get(h: &ServerHarness, path: &str) -> Http {
    request("GET", &format!("{}{path}", h.http_url()), &[], None)
}

/// The server's `/metrics` page, as text.
pub fn metrics(h: &ServerHarness) -> String {
    String::from_utf8_lossy(&get(h, "/metrics").body).into_owned()
}

/// `git_collab_commands_running` now: the commands the server is running.
pub fn commands_running(h: &ServerHarness) -> u64 {
    metrics(h)
        .lines()
        .find_map(|l| l.strip_prefix("git_collab_commands_running "))
        .and_then(|v| v.trim().parse().ok())
        .expect("git_collab_commands_running in /metrics")
}

/// Write `collab-policy.toml` with `public = true` into a repository.
pub fn make_public(h: &ServerHarness, name: &str) {
    let dir = h.repos_dir().join(format!("{name}.git"));
    assert!(dir.is_dir(), "{} is not a repository", dir.display());
    crate::files::write_live(&dir.join("collab-policy.toml"), "public = true\n");
}

/// A public repository `r` with one commit and one issue; the issue id.
pub fn public_repo_with_issue(h: &ServerHarness) -> String {
    h.create_repo("r");
    let clone = h.clone_repo("r", "seed");
    h.commit_file(&clone, "README.md", b"hello\n", "first");
    h.ssh_push(&clone, &["HEAD:main"]);
    let issue = h.open_server_issue("r", "Something to claim");
    make_public(h, "r");
    issue
}

/// Run the `git-collab` CLI in `clone` as the harness's default key
/// (generating its signing key on first use); returns stdout.
pub fn collab(h: &ServerHarness, clone: &Path, args: &[&str]) -> String {
    let cli = crate::bins::bin("git-collab");
    let key = h.ssh_client_key();
    if !h.temp_dir().join("xdg").join("git-collab").exists() {
        let out = h
            .client_command(cli, &key, clone)
            .args(["key", "generate"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = h
        .client_command(cli, &key, clone)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git-collab {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Open an issue on the server (the CLI in server mode); returns its full id.
pub fn open_issue(
    h: &ServerHarness,
    clone: &Path,
    title: &str,
    body: &str,
    labels: &[&str],
) -> String {
    let mut args = vec!["issue", "open", "-t", title, "-b", body, "--json"];
    for l in labels {
        args.extend(["--label", l]);
    }
    let out = collab(h, clone, &args);
    let json: serde_json::Value = serde_json::from_str(out.trim()).expect("issue open --json");
    json["issue"].as_str().expect("an issue id").to_string()
}

/// Copy every `refs/collab/*` ref of `clone` (patch DAGs made with the
/// CLI) straight into the server's repository on disk, if there is any, as
/// a repository written before the upgrade holds them: the server refuses
/// them over a push, and imports them on the repository's first use.
pub fn push_collab(h: &ServerHarness, clone: &Path) {
    let refs = h.git(clone, &["for-each-ref", "refs/collab/"]);
    if refs.stdout.is_empty() {
        return;
    }
    let url = h.git(clone, &["remote", "get-url", "origin"]).stdout;
    let url = String::from_utf8_lossy(&url);
    let name = url.trim().rsplit_once(':').expect("an ssh url").1;
    let name = name.split_once('/').expect("a repository name").1;
    let mut bare = h.repos_dir().join(name);
    if !bare.exists() {
        bare = h.repos_dir().join(format!("{name}.git"));
    }
    h.git(
        clone,
        &[
            "push",
            "-q",
            bare.to_str().unwrap(),
            "+refs/collab/*:refs/collab/*",
        ],
    );
}

/// The README every fixture repository gets: Markdown with raw HTML and a
/// `javascript:` link, which must come out inert.
pub const README: &str = "# Demo project\n\nWelcome! <script>alert('readme')</script>\n\n\
<img src=x onerror=\"alert('img')\">\n\n[click me](javascript:alert('link'))\n\n* first item\n";

/// A public repository `name` with a README, a source file, a binary file,
/// two commits on `main` and a branch `feature/x`; returns the clone and
/// the ids of the two commits.
pub fn public_repo_with_content(h: &ServerHarness, name: &str) -> (PathBuf, String, String) {
    h.create_repo(name);
    let clone = h.clone_repo(name, &format!("{}-clone", name.replace('/', "-")));
    h.commit_file(&clone, "README.md", README.as_bytes(), "Add a README");
    let mut binary = vec![0u8, 159, 146, 150, 0, 1, 2, 3];
    binary.extend((0..4000u32).map(|i| (i * 7 % 256) as u8));
    std::fs::write(clone.join("logo.bin"), &binary).unwrap();
    h.git(&clone, &["add", "logo.bin"]);
    let first = h.commit_file(
        &clone,
        "src/main.rs",
        b"fn main() {\n    println!(\"<b>not bold</b>\");\n}\n",
        "Add main.rs",
    );
    let second = h.commit_file(
        &clone,
        "src/main.rs",
        b"fn main() {\n    println!(\"<b>not bold</b>\");\n    let added_line = 42;\n}\n",
        "Change main.rs: <em>escaped</em>",
    );
    h.git(&clone, &["branch", "feature/x"]);
    h.ssh_push(&clone, &["main", "feature/x"]);
    make_public(h, name);
    (clone, first, second)
}

/// `git` as the harness client, without any ssh key involved (HTTP).
pub fn git_http(h: &ServerHarness, dir: &Path, args: &[&str]) -> std::process::Output {
    h.git_as(&h.ssh_client_key(), dir, args)
}

/// The text of an HTML page or fragment with the tags removed and the
/// entities askama and syntect write decoded (highlighted code is split
/// into spans; this is what a reader sees).
pub fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&#60;", "<")
        .replace("&gt;", ">")
        .replace("&#62;", ">")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
        .replace("&#38;", "&")
}
