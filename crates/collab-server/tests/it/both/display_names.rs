//! People by display name (issue 32 item 12): the web pages, the CLI's text
//! output and the SSH replies name a key by its authorized_keys `name="…"`
//! option, else its comment, else a short fingerprint, and keep the full
//! fingerprint in a `title` attribute and in `--json`. A `name=` that is not
//! printable refuses its line, as other bad options do.

use collab_testkit as common;
use collab_testkit::web as web_support;
use collab_testkit::{cli_bin, SshOutput};

use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;

use common::{fingerprint, generate_key, public_key_line, ServerHarness};
use web_support::{get, strip_tags};

/// A new key pair with `comment`, its line appended to authorized_keys
/// behind `options` (the server re-reads the file on the next lookup).
fn add_key(h: &ServerHarness, name: &str, comment: &str, options: &str) -> std::path::PathBuf {
    let key = h.temp_dir().join("keys").join(name);
    generate_key(&key, comment);
    let line = public_key_line(&key);
    // `ssh-keygen -C ''` still writes the key; keep only type and base64.
    let line = if comment.is_empty() {
        line.split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        line
    };
    let line = if options.is_empty() {
        format!("{line}\n")
    } else {
        format!("{options} {line}\n")
    };
    std::fs::OpenOptions::new()
        .append(true)
        .open(h.authorized_keys_path())
        .unwrap()
        .write_all(line.as_bytes())
        .unwrap();
    key
}

fn ssh_ok(h: &ServerHarness, key: &Path, cmd: &str) -> serde_json::Value {
    let out = h.ssh_exec_as(key, cmd, b"");
    assert!(out.success(), "{cmd}: {out:?}");
    out.json()
}

/// `git-collab ARGS` in `dir` as `key`.
fn collab(h: &ServerHarness, key: &Path, dir: &Path, args: &[&str]) -> SshOutput {
    let out = h
        .client_command(cli_bin(), key, dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run git-collab");
    SshOutput::from_output(out)
}

/// `SHA256:` and the first 8 base64 characters, then an ellipsis.
fn short(fp: &str) -> String {
    format!("{}\u{2026}", &fp[..15])
}

fn who(fp: &str, name: &str) -> String {
    format!("<span class=\"who\" title=\"{fp}\">{name}</span>")
}

#[test]
fn people_show_by_name_with_the_full_fingerprint_kept() {
    let h = ServerHarness::start();
    let (_, _, _) = web_support::public_repo_with_content(&h, "names");
    let alice = add_key(&h, "alice", "alice@laptop", "");
    let bot = add_key(&h, "bot", "ci@runner-7", "no-pty,name=\"Build Bot\"");
    let anon = add_key(&h, "anon", "", "");
    let (alice_fp, bot_fp, anon_fp) = (fingerprint(&alice), fingerprint(&bot), fingerprint(&anon));

    // Alice opens an issue over SSH; the bot and the anonymous key comment,
    // and the bot claims it.
    let opened = ssh_ok(&h, &alice, "collab-issue open names --title 'From Alice'");
    let id = opened["issue"].as_str().unwrap().to_string();
    ssh_ok(
        &h,
        &bot,
        &format!("collab-issue comment names {id} --body 'bot here'"),
    );
    ssh_ok(
        &h,
        &anon,
        &format!("collab-issue comment names {id} --body 'anon here'"),
    );
    let claimed = ssh_ok(&h, &bot, &format!("collab-lease acquire names {id}"));
    assert_eq!(claimed["holder"], bot_fp.as_str(), "{claimed}");
    assert_eq!(claimed["holder_name"], "Build Bot", "{claimed}");

    // Alice pushes a patch for review from her own clone.
    let clone = h.clone_as(&alice, "names", "alice-clone");
    h.commit_file(&clone, "alice.txt", b"from alice\n", "Add alice.txt");
    let out = h.git_as(&alice, &clone, &["push", "origin", "HEAD:refs/for/main"]);
    assert!(out.status.success(), "{out:?}");
    let listed = ssh_ok(&h, &alice, "collab-patch list names");
    let patch = listed["patches"][0]["id"]
        .as_str()
        .expect("a patch")
        .to_string();
    assert_eq!(
        listed["patches"][0]["author"]["principal"],
        alice_fp.as_str()
    );
    assert_eq!(
        listed["patches"][0]["author"]["display_name"],
        "alice@laptop"
    );

    // The issue list: the author by comment, the claim by `name=`.
    let page = get(&h, "/names/-/issues").text();
    assert!(
        page.contains(&format!("by {}", who(&alice_fp, "alice@laptop"))),
        "{page}"
    );
    assert!(
        page.contains(&format!("claimed by {}", who(&bot_fp, "Build Bot"))),
        "{page}"
    );
    // The issue page: every person named, no fingerprint in the visible text.
    let page = get(&h, &format!("/names/-/issues/{}", &id[..8])).text();
    assert!(page.contains(&who(&alice_fp, "alice@laptop")), "{page}");
    assert!(page.contains(&who(&bot_fp, "Build Bot")), "{page}");
    assert!(page.contains(&who(&anon_fp, &short(&anon_fp))), "{page}");
    let text = strip_tags(&page);
    for fp in [&alice_fp, &bot_fp, &anon_fp] {
        assert!(!text.contains(fp.as_str()), "{fp} shown in full: {text}");
    }
    assert!(
        !text.contains("ci@runner-7"),
        "name= wins over the comment: {text}"
    );
    // The patch list and page (the page named its author six times).
    let page = get(&h, "/names/-/patches").text();
    assert!(
        page.contains(&format!("by {}", who(&alice_fp, "alice@laptop"))),
        "{page}"
    );
    let page = get(&h, &format!("/names/-/patches/{}", &patch[..8])).text();
    assert!(page.contains(&who(&alice_fp, "alice@laptop")), "{page}");
    assert!(!strip_tags(&page).contains(&alice_fp), "{page}");

    // The CLI's text names people; `--json` keeps the fingerprint and adds
    // the display name beside it.
    let shown = collab(&h, &alice, &clone, &["issue", "show", &id[..8]]);
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(
        shown.stdout.contains("\nauthor: alice@laptop\n"),
        "{shown:?}"
    );
    assert!(shown.stdout.contains(" Build Bot at "), "{shown:?}");
    assert!(
        shown.stdout.contains(&format!(" {} at ", short(&anon_fp))),
        "{shown:?}"
    );
    assert!(!shown.stdout.contains(&alice_fp), "{shown:?}");
    let json = collab(&h, &alice, &clone, &["issue", "show", &id[..8], "--json"]);
    assert_eq!(json.code, 0, "{json:?}");
    let v = json.json();
    assert_eq!(v["author"]["principal"], alice_fp.as_str(), "{v}");
    assert_eq!(v["author"]["name"], alice_fp.as_str(), "unchanged: {v}");
    assert_eq!(v["author"]["display_name"], "alice@laptop", "{v}");
    assert_eq!(v["lease"]["holder"], bot_fp.as_str(), "{v}");
    assert_eq!(v["lease"]["holder_name"], "Build Bot", "{v}");
    let claims = collab(&h, &alice, &clone, &["issue", "claims"]);
    assert!(claims.stdout.contains("  Build Bot  token 1"), "{claims:?}");

    // Renaming the key renames it everywhere: names are read, not stored.
    let keys = std::fs::read_to_string(h.authorized_keys_path()).unwrap();
    std::fs::write(
        h.authorized_keys_path(),
        keys.replace("alice@laptop", "Alice Liddell"),
    )
    .unwrap();
    let page = get(&h, "/names/-/issues").text();
    assert!(page.contains(&who(&alice_fp, "Alice Liddell")), "{page}");
}

#[test]
fn a_name_with_control_characters_refuses_its_line() {
    let h = ServerHarness::start();
    let evil = add_key(&h, "evil", "evil", "name=\"Admin\u{7}\u{1b}[2J\"");
    let out = h.ssh_exec_as(&evil, "collab-whoami", b"");
    assert_ne!(out.code, 0, "{out:?}");
    h.wait_for_log("name=");
    let log = h.log();
    assert!(
        log.contains("not printable") && log.contains("this line admits no key"),
        "{log}"
    );
    // A bidi override is refused the same way; a plain name is fine.
    let bidi = add_key(&h, "bidi", "bidi", "name=\"evil\u{202e}gnp.exe\"");
    assert_ne!(h.ssh_exec_as(&bidi, "collab-whoami", b"").code, 0);
    let fine = add_key(&h, "fine", "fine", "name=\"Fine Name\"");
    let who = ssh_ok(&h, &fine, "collab-whoami");
    assert_eq!(who["fingerprint"], fingerprint(&fine).as_str(), "{who}");
}
