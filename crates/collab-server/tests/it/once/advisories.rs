//! The peer forges' advisories as tests: each attack that hit Soft Serve,
//! Gitea, Gogs, Gitblit, Forgejo, Go's x/crypto/ssh, russh or git itself,
//! replayed against our server with the real `ssh` and `git` where they can
//! express it, a library SSH client (russh) or raw TCP where they cannot.
//! docs/security.md's advisory table names the test covering each row;
//! rows covered by older suites (offer-A-sign-B in `auth_binding`, `SetEnv`
//! in `hostile_input`) are named there too.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use collab_proto::verbs::{Arity, Kind, VERBS};
use collab_testkit as common;
use common::{client, fingerprint, ServerHarness};

/// The server's resident set, in KiB (Linux `/proc`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// `ssh` as `key` running `command`, stopped after `limit` (a verb that
/// follows, such as `collab-events watch`, would otherwise never end):
/// the exit code (-2: stopped), stdout and stderr.
fn ssh_bounded(
    h: &ServerHarness,
    key: &Path,
    command: &str,
    limit: Duration,
) -> (i32, String, String) {
    let mut child = Command::new("ssh")
        .args(h.ssh_options(key))
        .arg("git@127.0.0.1")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drained as they come, so a chatty verb never blocks on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code().unwrap_or(-1);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break -2;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (code, out.join().unwrap(), err.join().unwrap())
}

/// A value of `kind` that the table accepts, built from `word` where the
/// kind allows any word.
fn value_of(kind: Kind, word: &str) -> String {
    match kind {
        Kind::Int { min, .. } => min.max(1).to_string(),
        Kind::Choice(words) => words[0].to_string(),
        _ => word.to_string(),
    }
}

/// A whole remote command for `verb`: its words, then every positional
/// argument and every flag filled, `repo` in repository slots and `word`
/// everywhere a free value goes, each shell-quoted.
fn fill(verb: &collab_proto::verbs::Verb, repo: &str, word: &str) -> String {
    let mut line = verb.name();
    for arg in verb.args {
        let value = if arg.kind == Kind::Repo || arg.kind == Kind::RepoGlob {
            repo.to_string()
        } else {
            value_of(arg.kind, word)
        };
        line.push(' ');
        line.push_str(&collab_proto::tokens::shell_quote(&value));
        if let Arity::Many(_) = arg.arity {
            line.push(' ');
            line.push_str(&collab_proto::tokens::shell_quote(&value));
        }
    }
    for flag in verb.flags {
        line.push(' ');
        line.push_str(flag.long);
        if let Some((_, kind)) = flag.value {
            line.push(' ');
            line.push_str(&collab_proto::tokens::shell_quote(&value_of(kind, word)));
        }
    }
    line
}

/// Soft Serve GHSA-…-argument-injection, Gogs 2025–26 (`-`-led branch
/// names reaching `git diff`/`rebase`): values that look like git or ssh
/// options, in every argument and flag of every verb of the table (as an
/// admin, so each call gets past access checks into its handler), never
/// reach a program as options. The canary file would be made by any of
/// them that did; each refusal is one line, and the server still serves.
#[test]
fn option_looking_values_in_every_verb_reach_no_program() {
    let h = ServerHarness::start();
    h.create_repo("adv");
    let clone = h.clone_repo("adv", "c");
    h.commit_file(&clone, "f", b"1", "one");
    h.ssh_push(&clone, &["HEAD:main"]);
    let canary = h.temp_dir().join("PWNED");
    let payloads = [
        format!("--upload-pack=touch {}", canary.display()),
        format!("-c core.sshCommand=touch {}", canary.display()),
        format!("--output={}", canary.display()),
        format!("--exec=touch {}", canary.display()),
    ];
    let admin = h.ssh_client_key();
    let mut calls = 0;
    for verb in VERBS {
        // Deleting or renaming the repository would end the run early;
        // their names are still filled with payloads in the first pass.
        let destructive = matches!(verb.action, "delete" | "rename");
        for payload in &payloads {
            // The payload as the repository, then as every other value.
            let mut lines = vec![fill(verb, payload, payload)];
            if !destructive {
                lines.push(fill(verb, "adv", payload));
            }
            for line in lines {
                let (code, stdout, stderr) =
                    ssh_bounded(&h, &admin, &line, Duration::from_secs(10));
                calls += 1;
                assert!(!canary.exists(), "{line} made the canary file");
                // A non-zero exit with a reply on stdout is an answer
                // (`next` found nothing ready); without one it is a refusal.
                if code != 0 && code != -2 && stdout.trim().is_empty() {
                    let lines: Vec<&str> = stderr.lines().filter(|l| !l.is_empty()).collect();
                    assert!(
                        !lines.is_empty() && lines.len() <= 2,
                        "{line}: a refusal is one clear line (plus git's own \
                         `fatal: Could not read` for git verbs), got {stderr:?}"
                    );
                }
            }
        }
    }
    assert!(
        calls > 2 * VERBS.len(),
        "every verb was tried ({calls} calls)"
    );
    let who = h.ssh_exec("collab-whoami");
    assert_eq!(who.code, 0, "the server still serves: {who:?}");
    assert!(
        h.log().lines().all(|l| !l.contains("panicked")),
        "{}",
        h.log()
    );
}

/// Soft Serve's repository-name traversal (2023, 2025): every verb that
/// names a repository answers a traversing or absolute name exactly as it
/// answers a repository that does not exist: no other repository is
/// reached, and a private one's existence is not revealed.
#[test]
fn traversal_in_every_repository_name_is_not_found() {
    let h = ServerHarness::start();
    let secret = h.create_repo("team/secret");
    collab_testkit::write_live(
        &secret.join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    );
    h.create_repo("team/open");
    let user = h.authorized_key("user");
    // Each form names the private repository (`secret`) and, for the
    // comparison, one that does not exist (`nosuch`).
    let forms = [
        "team/open/../{}",
        "team/../team/{}",
        "./team/{}",
        "team//{}",
        "team/{}/.",
        "/team/{}",
        "../../../../team/{}",
        "team/{}.git/..",
        "team%2f{}",
        "team/{}",
    ];
    let mut checked = 0;
    for verb in VERBS.iter().filter(|v| v.names_repo()) {
        for form in forms {
            let hidden = form.replace("{}", "secret");
            let absent = form.replace("{}", "nosuch");
            let limit = Duration::from_secs(10);
            let (code, stdout, stderr) = ssh_bounded(&h, &user, &fill(verb, &hidden, "x"), limit);
            let (absent_code, absent_stdout, absent_stderr) =
                ssh_bounded(&h, &user, &fill(verb, &absent, "x"), limit);
            assert_ne!(code, 0, "{} {hidden:?} succeeded: {stdout}", verb.name());
            assert_eq!(
                (code, stdout, stderr.replace("secret", "NAME")),
                (
                    absent_code,
                    absent_stdout,
                    absent_stderr.replace("nosuch", "NAME")
                ),
                "{} {hidden:?} answers otherwise than a repository that does not exist",
                verb.name()
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} calls were compared");
}

/// Go x/crypto CVE-2024-45337: a server that took the identity from the
/// last key its callback saw. Offer the caller's own key, then the
/// admin's (both without signing), then sign with the caller's: the
/// identity is the key that signed.
#[tokio::test(flavor = "multi_thread")]
async fn the_identity_is_the_key_that_signed_not_the_last_offered() {
    let h = ServerHarness::start();
    let user_path = h.authorized_key("user");
    let admin = client::load_key(&h.ssh_client_key());
    let user = client::load_key(&user_path);

    let mut conn = client::connect(h.ssh_addr).await;
    assert!(client::offer_without_signing(&mut conn, &user).await);
    assert!(client::offer_without_signing(&mut conn, &admin).await);
    assert!(client::authenticate(&mut conn, &user).await.success());
    let who = client::exec(&conn, b"collab-whoami").await;
    let v: serde_json::Value = serde_json::from_slice(&who.stdout).unwrap();
    assert_eq!(v["principal"], fingerprint(&user_path).as_str());
    assert_eq!(v["admin"], false, "{v}");
}

/// Gitblit CVE-2024-28080 (authentication fell back to a method that did
/// not check): after a refused key, `none`, `password` and
/// `keyboard-interactive` all fail, whatever the user name; only a
/// signed admitted key gets in.
#[tokio::test(flavor = "multi_thread")]
async fn no_method_falls_back_to_letting_a_stranger_in() {
    let h = ServerHarness::start();
    let stranger_path = h.temp_dir().join("stranger");
    common::generate_key(&stranger_path, "stranger");
    let stranger = client::load_key(&stranger_path);
    for user in ["git", "root", "admin", ""] {
        let mut conn = client::connect(h.ssh_addr).await;
        let signed = conn
            .authenticate_publickey(
                user,
                russh::keys::PrivateKeyWithHashAlg::new(
                    std::sync::Arc::new(stranger.clone()),
                    None,
                ),
            )
            .await
            .unwrap();
        assert!(!signed.success(), "an unknown key got in as {user:?}");
        let none = conn.authenticate_none(user).await;
        assert!(!none.is_ok_and(|r| r.success()), "`none` let {user:?} in");
        let password = conn.authenticate_password(user, "").await;
        assert!(
            !password.is_ok_and(|r| r.success()),
            "an empty password let {user:?} in"
        );
        let password = conn.authenticate_password(user, user).await;
        assert!(
            !password.is_ok_and(|r| r.success()),
            "a password let {user:?} in"
        );
        let kbd = conn
            .authenticate_keyboard_interactive_start(user, None::<String>)
            .await;
        assert!(
            matches!(
                kbd,
                Err(_) | Ok(russh::client::KeyboardInteractiveAuthResponse::Failure { .. })
            ),
            "keyboard-interactive did not fail for {user:?}: {kbd:?}"
        );
    }
    let who = h.ssh_exec("collab-whoami");
    assert_eq!(who.code, 0, "{who:?}");
}

/// Terrapin (CVE-2023-48795): the server takes part in strict key
/// exchange, so a prefix-truncation attack on the handshake breaks it.
/// OpenSSH's client says when both sides agreed to it.
#[test]
fn key_exchange_is_strict_against_terrapin() {
    let h = ServerHarness::start();
    let out = h.ssh_raw(
        &h.ssh_client_key(),
        &["-vvv", "git@127.0.0.1", "collab-whoami"],
        b"",
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("will use strict KEX ordering"),
        "the server did not agree to strict KEX: {}",
        out.stderr
            .lines()
            .filter(|l| l.contains("kex"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// russh's 2026 pre-auth allocation advisories: length prefixes allocated
/// before they are checked. Before any key exchange, connections send a
/// packet whose length field says 4 GiB, and a KEXINIT whose name-list
/// length says 4 GiB; the server's memory stays bounded, it drops them,
/// and it still serves everyone else.
#[test]
fn pre_auth_length_prefixes_of_4_gib_allocate_nothing() {
    let h = ServerHarness::start();
    let before = rss_kib(h.pid());
    let mut held = Vec::new();
    for i in 0..96u32 {
        let Ok(mut stream) = TcpStream::connect(h.ssh_addr) else {
            continue;
        };
        stream
            .set_write_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let _ = stream.write_all(b"SSH-2.0-hostile_0.1\r\n");
        let packet: Vec<u8> = if i % 2 == 0 {
            // packet_length 0xffff_fff0, then a little of the "packet".
            let mut p = 0xffff_fff0u32.to_be_bytes().to_vec();
            p.extend_from_slice(&[4u8; 4096]);
            p
        } else {
            // A well-sized packet holding KEXINIT whose first name-list
            // claims 4 GiB.
            let mut payload = vec![20u8];
            payload.extend_from_slice(&[7u8; 16]);
            payload.extend_from_slice(&0xffff_ffffu32.to_be_bytes());
            payload.extend_from_slice(b"curve25519-sha256");
            let padding = 8 - ((payload.len() + 5) % 8) + 8;
            let mut p = ((payload.len() + padding + 1) as u32)
                .to_be_bytes()
                .to_vec();
            p.push(padding as u8);
            p.extend_from_slice(&payload);
            p.extend(std::iter::repeat_n(0u8, padding));
            p
        };
        let _ = stream.write_all(&packet);
        held.push(stream);
    }
    std::thread::sleep(Duration::from_secs(2));
    let during = rss_kib(h.pid());
    let who = h.ssh_exec("collab-whoami");
    assert_eq!(who.code, 0, "others are still served: {who:?}");
    assert!(
        during < before + 64 * 1024,
        "server RSS grew from {before} KiB to {during} KiB under 4 GiB length prefixes"
    );
    // Each hostile connection is dropped, not left to hold a slot.
    let deadline = Instant::now() + Duration::from_secs(60);
    for mut stream in held {
        stream
            .set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(10)),
            ))
            .unwrap();
        let mut sink = [0u8; 4096];
        loop {
            match stream.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        assert!(
            Instant::now() < deadline,
            "a hostile connection was kept open"
        );
    }
}

/// git's unbounded `have` lines: a fetch negotiating with ten million
/// `have` lines passes through the server without the server holding
/// them: its memory stays bounded, and others are served meanwhile.
#[test]
fn ten_million_have_lines_do_not_grow_the_server() {
    let h = ServerHarness::start();
    h.create_repo("big");
    let clone = h.clone_repo("big", "c");
    let head = h.commit_file(&clone, "f", b"1", "one");
    h.ssh_push(&clone, &["HEAD:main"]);
    let before = rss_kib(h.pid());
    let mut child = Command::new("ssh")
        .args(h.ssh_options(&h.ssh_client_key()))
        .arg("git@127.0.0.1")
        .arg("git-upload-pack 'big'")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let pid = h.pid();
    let writer = std::thread::spawn(move || {
        let mut peak = 0;
        let mut sent = 0u64;
        let want = format!("want {head} multi_ack_detailed no-done\n");
        let _ = stdin.write_all(format!("{:04x}{want}0000", want.len() + 4).as_bytes());
        // Ids the server does not have: each `have` is looked up and
        // dropped by git; no round of them is kept by the server.
        let mut chunk = Vec::with_capacity(56 * 10_000);
        for round in 0..1000u64 {
            chunk.clear();
            for i in 0..10_000u64 {
                let id = round * 10_000 + i;
                chunk.extend_from_slice(format!("0032have {id:040x}\n").as_bytes());
            }
            if stdin.write_all(&chunk).is_err() {
                break;
            }
            sent += 10_000;
            if round % 100 == 0 {
                peak = peak.max(rss_kib(pid));
            }
        }
        let _ = stdin.write_all(b"0009done\n");
        (peak, sent)
    });
    let (peak, sent) = writer.join().unwrap();
    assert_eq!(
        sent, 10_000_000,
        "the server stopped taking haves after {sent}"
    );
    let _ = child.wait();
    let who = h.ssh_exec("collab-whoami");
    assert_eq!(who.code, 0, "{who:?}");
    assert!(
        peak < before + 64 * 1024,
        "server RSS grew from {before} KiB to {peak} KiB while relaying haves"
    );
}

/// node-ssh2's window underflow: a client that ignores the channel window
/// and sends far more than the server granted. The server neither
/// buffers it without bound nor falls over. paramiko lets a client lie
/// about its window; it comes from Debian's python3-paramiko.
#[test]
fn a_client_overrunning_the_window_is_bounded() {
    let python = "/usr/bin/python3";
    let has_paramiko = Command::new(python)
        .args(["-c", "import paramiko"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_paramiko {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3-paramiko is missing (scripts/install-deps.sh installs it)"
        );
        eprintln!("skipped: no python3-paramiko");
        return;
    }
    let h = ServerHarness::start();
    h.create_repo("adv");
    let before = rss_kib(h.pid());
    let script = r#"
import sys, paramiko
port, key = int(sys.argv[1]), sys.argv[2]
t = paramiko.Transport(("127.0.0.1", port))
t.connect(username="git", pkey=paramiko.Ed25519Key.from_private_key_file(key))
ch = t.open_session()
ch.exec_command("collab-events watch --since 0")
# Lie about the window the server granted, then send 64 MiB.
ch.out_window_size = 1 << 40
block = b"x" * 32000
sent = 0
try:
    while sent < 64 << 20:
        ch.sendall(block)
        sent += len(block)
except Exception as e:
    print("stopped after", sent, type(e).__name__)
print("sent", sent)
"#;
    let out = Command::new(python)
        .args(["-c", script])
        .arg(h.ssh_port().to_string())
        .arg(h.ssh_client_key())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "paramiko: {said}{}; rss {before} -> {}",
        String::from_utf8_lossy(&out.stderr),
        rss_kib(h.pid())
    );
    assert!(said.contains("sent"), "the client did not run: {out:?}");
    let during = rss_kib(h.pid());
    let who = h.ssh_exec("collab-whoami");
    assert_eq!(who.code, 0, "{who:?}");
    assert!(
        during < before + 32 * 1024,
        "server RSS grew from {before} KiB to {during} KiB; client said {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Soft Serve's webhook SSRF (2025) and the classic URL forms of
/// loopback: none reaches a listener on this machine, whether refused
/// when added or when delivered, and none tells a non-admin more than
/// that it was refused.
#[test]
fn webhook_urls_in_every_form_of_loopback_reach_nothing() {
    let h = ServerHarness::start();
    h.create_repo("adv");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let forms = [
        format!("http://127.0.0.1:{port}/"),
        format!("http://127.1:{port}/"),
        format!("http://2130706433:{port}/"),
        format!("http://0x7f000001:{port}/"),
        format!("http://0177.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://localhost.:{port}/"),
        format!("http://LOCALHOST:{port}/"),
        format!("http://user@127.0.0.1:{port}/"),
        format!("http://[::1]:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://[::ffff:7f00:1]:{port}/"),
        format!("http://[::127.0.0.1]:{port}/"),
        format!("http://[64:ff9b::7f00:1]:{port}/"),
        format!("http://[2002:7f00:1::1]:{port}/"),
        format!("http://0.0.0.0:{port}/"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "file:///etc/passwd".to_string(),
        "gopher://127.0.0.1:25/".to_string(),
    ];
    let owner = h.authorized_key("owner");
    for url in &forms {
        let add = h.ssh_exec_as(
            &owner,
            &format!(
                "collab-hook add 'adv' {} --event 'issue.*'",
                collab_proto::tokens::shell_quote(url)
            ),
            b"",
        );
        if add.code != 0 {
            continue;
        }
        let id = add.json()["id"].as_str().unwrap().to_string();
        let test = h.ssh_exec_as(&owner, &format!("collab-hook test '{id}'"), b"");
        assert!(
            !test.stdout.contains("\"ok\":true") && !test.stdout.contains("\"ok\": true"),
            "{url}: {test:?}"
        );
    }
    h.open_server_issue("adv", "an event for every hook");
    std::thread::sleep(Duration::from_secs(3));
    match listener.accept() {
        Ok((_, from)) => panic!("a webhook reached the loopback listener (from {from})"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
    }
}

/// Gitea GHSA-82f7-87hm-852x and Gogs GHSA-g2f5-gjr4-qjvm (2026): a
/// migration or mirror URL vetted once, then git followed an HTTP redirect
/// to an internal address. Mirror URLs in loopback spellings are refused at
/// `add`; an allowed host that redirects inward gets no request through.
#[test]
fn mirror_urls_reach_no_internal_address_not_even_through_a_redirect() {
    let listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let h = ServerHarness::start();
    h.create_repo("adv");
    for url in [
        format!("http://127.0.0.2:{port}/x.git"),
        format!("http://127.1:{port}/x.git"),
        format!("http://2130706434:{port}/x.git"),
        format!("https://localhost:{port}/x.git"),
        format!("git://[::ffff:127.0.0.2]:{port}/x.git"),
        format!("ssh://git@[::1]:{port}/x.git"),
        format!("git://0.0.0.0:{port}/x.git"),
        "http://169.254.169.254/latest/meta-data/x".to_string(),
        format!("file:///{}", h.repos_dir().join("adv.git").display()),
        "ext::sh -c 'touch canary'".to_string(),
    ] {
        let add = h.ssh_exec(&format!(
            "collab-repo mirror add adv {}",
            collab_proto::tokens::shell_quote(&url)
        ));
        assert_eq!(add.code, 1, "{url}: {add:?}");
    }
    // The operator allows 127.0.0.1, whose server redirects to 127.0.0.2.
    let redirector = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let redirect_port = redirector.local_addr().unwrap().port();
    let redirected = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = redirected.clone();
    std::thread::spawn(move || {
        for stream in redirector.incoming() {
            let Ok(mut stream) = stream else { return };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                format!(
                    "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.2:{port}/x.git/info/refs?service=git-upload-pack\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            );
        }
    });
    let allowed = ServerHarness::start_with(common::HarnessOptions {
        env: vec![(
            "GIT_COLLAB_MIRRORS__ALLOWED_HOSTS".into(),
            "127.0.0.1".into(),
        )],
        ..Default::default()
    });
    allowed.create_repo("adv");
    let add = allowed.ssh_exec(&format!(
        "collab-repo mirror add adv 'http://127.0.0.1:{redirect_port}/x.git'"
    ));
    assert_eq!(add.code, 0, "{add:?}");
    let sync = allowed.ssh_exec("collab-repo mirror sync adv");
    assert_eq!(sync.code, 1, "{sync:?}");
    // The redirect was offered (the test is not passing for another reason) ...
    assert!(
        redirected.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "{sync:?}"
    );
    assert!(
        sync.stderr.contains("302") || sync.stderr.contains("redirect"),
        "{sync:?}"
    );
    // ... and not taken.
    match listener.accept() {
        Ok((_, from)) => panic!("a mirror reached the internal listener (from {from})"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
    }
}

/// Soft Serve's ANSI injection (2024): escape sequences in a title are
/// refused, and in a body they never reach the reader's terminal raw.
#[test]
fn terminal_escapes_never_reach_a_terminal() {
    let h = ServerHarness::start();
    h.create_repo("adv");
    let title = "fine\u{1b}]0;owned\u{7}\u{1b}[2J";
    let refused = h.ssh_exec(&format!(
        "collab-issue open 'adv' --title {}",
        collab_proto::tokens::shell_quote(title)
    ));
    assert_ne!(refused.code, 0, "{refused:?}");
    assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
    assert!(!refused.stderr.contains('\u{1b}'), "{refused:?}");

    let body = "body \u{1b}[31mred\u{1b}[0m \u{1b}]8;;http://evil/\u{7}link\u{1b}]8;;\u{7}";
    let opened = h.ssh_exec_with_stdin(
        "collab-issue open 'adv' --title 'plain' --body-stdin",
        body.as_bytes(),
    );
    if opened.code != 0 {
        assert_eq!(opened.stderr.lines().count(), 1, "{opened:?}");
        assert!(!opened.stderr.contains('\u{1b}'), "{opened:?}");
        return;
    }
    // Accepted: then no reader's terminal gets the raw bytes.
    let id = opened.json()["id"].as_str().unwrap().to_string();
    let clone = h.clone_repo("adv", "c");
    let shown = Command::new(common::cli_bin())
        .args(["issue", "show", &id])
        .current_dir(&clone)
        .envs(h.client_env(&h.ssh_client_key()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{shown:?}");
    assert!(
        !text.contains('\u{1b}'),
        "a raw ESC reached the terminal: {text:?}"
    );
}

/// Every `git` the server or the CLI runs with a value it did not choose
/// itself ends its options first (`--end-of-options`), so a value that
/// begins with `-` is never an option (Gogs 2025–26, Soft Serve 2023).
/// The check reads the source: each `Command::new("git")` outside tests
/// either has `--end-of-options` in its statement or carries a
/// `git-args:` comment saying why its arguments are the program's own.
#[test]
fn every_git_invocation_ends_its_options() {
    let root = common::workspace_root().join("crates");
    let mut files = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(
                    name.as_str(),
                    "tests" | "benches" | "collab-testkit" | "target"
                ) {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") && !name.ends_with("tests.rs") {
                files.push(path);
            }
        }
    }
    let mut sites = 0;
    let mut bad = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests at the end of a file run git on their own fixtures.
        let text = text.split("#[cfg(test)]").next().unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !line.contains("Command::new(\"git\")") {
                continue;
            }
            sites += 1;
            let above = &lines[i.saturating_sub(8)..i];
            if above.iter().any(|l| l.contains("git-args:")) {
                continue;
            }
            // The statement: up to the line that ends it at the
            // indentation it began with.
            let indent = line.len() - line.trim_start().len();
            let statement = lines[i..]
                .iter()
                .take_while(|l| {
                    let t = l.trim_start();
                    t.is_empty() || l.len() - t.len() >= indent
                })
                .take(150)
                .copied()
                .collect::<Vec<_>>()
                .join("\n");
            if !statement.contains("--end-of-options") {
                bad.push(format!("{}:{}", file.display(), i + 1));
            }
        }
    }
    assert!(sites >= 6, "the scan found only {sites} git invocations");
    assert!(
        bad.is_empty(),
        "git invoked without `--end-of-options` or a `git-args:` reason: {bad:#?}"
    );
}

/// Run git in `dir` with `input` on stdin; stdout trimmed, panics on failure.
fn git_stdin(h: &ServerHarness, dir: &Path, args: &[&str], input: &[u8]) -> String {
    let mut child = h
        .git_command(&h.ssh_client_key(), dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A commit of `tree` on top of HEAD, written with `hash-object --literally`
/// so that git's own checks on the client cannot stop it.
fn literal_commit(h: &ServerHarness, dir: &Path, text: &str) -> String {
    git_stdin(
        h,
        dir,
        &[
            "hash-object",
            "-t",
            "commit",
            "-w",
            "--literally",
            "--stdin",
        ],
        text.as_bytes(),
    )
}

/// git CVE-2025-48384 and malformed objects (issue 44): a `.gitmodules`
/// whose submodule path keeps a carriage return inside its quotes, and a
/// commit with no committer, are refused at push with nothing changed;
/// the same `.gitmodules` with CRLF line ends is an ordinary file.
#[test]
fn malformed_objects_and_a_cr_in_gitmodules_are_refused_at_push() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "c");
    h.commit_file(&clone, "a.txt", b"a\n", "first");
    h.ssh_push(&clone, &["HEAD:main"]);
    let main_before = h.rev_parse(&clone, "HEAD");
    let push = |refspec: &str| h.git_as(&h.ssh_client_key(), &clone, &["push", "origin", refspec]);

    // CVE-2025-48384: the CR survives git's reading of the quoted value.
    let evil = "[submodule \"s\"]\n\tpath = \"s\r\"\n\turl = ./s\n";
    h.commit_file(&clone, ".gitmodules", evil.as_bytes(), "submodule");
    let out = push("HEAD:refs/heads/evil");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("CVE-2025-48384"), "{stderr}");
    // Hidden behind an ordinary commit on top, and through push-to-review.
    h.commit_file(&clone, "b.txt", b"b\n", "innocent");
    for refspec in ["HEAD:refs/heads/evil", "HEAD:refs/for/main"] {
        let out = push(refspec);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{refspec}: {stderr}");
        assert!(stderr.contains("CVE-2025-48384"), "{refspec}: {stderr}");
    }
    let refs = h.git(&clone, &["ls-remote", "origin"]);
    let refs = String::from_utf8_lossy(&refs.stdout).to_string();
    assert!(!refs.contains("refs/heads/evil"), "{refs}");
    assert_eq!(
        h.ssh_exec("collab-patch list 'r'").json()["patches"],
        serde_json::json!([])
    );

    // CRLF line ends are not the attack.
    h.git(&clone, &["reset", "-q", "--hard", &main_before]);
    let crlf = "[submodule \"s\"]\r\n\tpath = s\r\n\turl = ./s\r\n";
    h.commit_file(&clone, ".gitmodules", crlf.as_bytes(), "crlf submodule");
    let out = push("HEAD:refs/heads/crlf");
    assert!(out.status.success(), "{out:?}");

    // A commit with no committer: git's fsck of the pushed objects.
    let tree = h.rev_parse(&clone, "HEAD^{tree}");
    let bad = literal_commit(
        &h,
        &clone,
        &format!(
            "tree {tree}\nparent {main_before}\nauthor A <a@example.com> 1 +0000\n\nno committer\n"
        ),
    );
    let out = push(&format!("{bad}:refs/heads/bad"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("missingcommitter"),
        "{stderr}"
    );
    let refs = h.git(&clone, &["ls-remote", "origin"]);
    let refs = String::from_utf8_lossy(&refs.stdout).to_string();
    assert!(!refs.contains("refs/heads/bad"), "{refs}");
}

/// Gitea's 2026 IDOR series (issue 44): an object id that exists only in
/// another repository (a private one) given to a verb or page of this
/// one is answered exactly as an id that exists nowhere: the same one
/// line, the same status, no content. Repositories share no object store
/// (no alternates), and every lookup is in the named repository only.
#[test]
fn an_object_id_of_another_repository_is_answered_as_an_unknown_one() {
    let h = ServerHarness::start();
    let (_clone, _first, _second) = common::web::public_repo_with_content(&h, "app");
    h.create_repo("private");
    let other = h.clone_repo("private", "private-clone");
    let foreign = h.commit_file(&other, "secret.txt", b"password=hunter2\n", "private");
    h.ssh_push(&other, &["HEAD:main"]);
    let foreign_blob = h.rev_parse(&other, "HEAD:secret.txt");
    let unknown = "1234567890123456789012345678901234567890";
    assert!(
        !h.repos_dir()
            .join("app.git/objects/info/alternates")
            .exists(),
        "repositories must not share an object store"
    );
    let same = |what: &str, a: String, b: String| {
        assert_eq!(
            a.replace(&foreign, unknown).replace(&foreign_blob, unknown),
            b,
            "{what}"
        );
        assert!(!a.contains("hunter2"), "{what}: {a}");
    };

    // Verbs that take a commit id.
    for verb in [
        "collab-check set 'app' {id} ci/test --state success",
        "collab-check list 'app' {id}",
    ] {
        let a = h.ssh_exec(&verb.replace("{id}", &foreign));
        let b = h.ssh_exec(&verb.replace("{id}", unknown));
        if verb.contains(" set ") {
            assert_ne!(a.code, 0, "{verb}: {a:?}");
        }
        assert_eq!(a.code, b.code, "{verb}");
        same(verb, a.stdout, b.stdout);
        same(verb, a.stderr, b.stderr);
    }

    // Web pages naming a commit or a blob by id.
    for path in [
        "/app/-/commit/{id}",
        "/app/-/commit/{id}.patch",
        "/app/-/tree/{id}",
        "/app/-/raw/{id}/secret.txt",
        "/app/-/blob/{id}/secret.txt",
        "/app/-/log/{id}",
        "/app/-/archive/{id}.tar.gz",
    ] {
        let a = common::web::get(&h, &path.replace("{id}", &foreign));
        let b = common::web::get(&h, &path.replace("{id}", unknown));
        assert_eq!(a.status, 404, "{path}");
        assert_eq!(a.status, b.status, "{path}");
        same(path, a.text(), b.text());
    }

    // git fetch by id, over SSH (protocol v2 and v0) and smart HTTP, of the
    // commit and of the blob.
    let urls = [h.repo_url("app"), format!("{}/app.git", h.http_url())];
    for url in &urls {
        for version in ["2", "0"] {
            for (n, id) in [&foreign, &foreign_blob].into_iter().enumerate() {
                let fetch = |id: &str, name: &str| {
                    let dir = h.temp_dir().join(name);
                    h.git(
                        h.temp_dir(),
                        &["init", "-q", "--bare", dir.to_str().unwrap()],
                    );
                    h.git_as(
                        &h.ssh_client_key(),
                        &dir,
                        &[
                            "-c",
                            &format!("protocol.version={version}"),
                            "fetch",
                            "-q",
                            url,
                            id,
                        ],
                    )
                };
                let tag = format!("{}-v{version}-{n}", url.len());
                let a = fetch(id, &format!("idor-a-{tag}"));
                let b = fetch(unknown, &format!("idor-b-{tag}"));
                assert!(!a.status.success(), "{url} v{version}: {id} was fetched");
                assert_eq!(a.status.code(), b.status.code(), "{url} v{version}");
                // git's own line and the server's may arrive in either
                // order (two streams): compared as sorted lines.
                let lines = |out: &std::process::Output| {
                    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .map(str::to_string)
                        .collect();
                    lines.sort();
                    lines.join("\n")
                };
                same(url, lines(&a), lines(&b));
            }
        }
    }
}

/// A pack entry's header: type and inflated size.
fn pack_entry_header(kind: u8, mut size: u64) -> Vec<u8> {
    let mut out = vec![(kind << 4) | (size & 0x0f) as u8];
    size >>= 4;
    while size > 0 {
        *out.last_mut().unwrap() |= 0x80;
        out.push((size & 0x7f) as u8);
        size >>= 7;
    }
    out
}

/// A delta header's size: little-endian base-128.
fn delta_varint(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn deflate(bytes: &[u8]) -> Vec<u8> {
    use flate2::write::ZlibEncoder;
    let mut z = ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(bytes).unwrap();
    z.finish().unwrap()
}

/// A pack of one 64 KiB blob and one delta against it whose header says
/// the result is 4 GiB, and whose 65,536 one-byte "copy 64 KiB" commands
/// really make it that large: `ofs` picks an OFS_DELTA, else a REF_DELTA.
fn delta_bomb_pack(ofs: bool) -> (Vec<u8>, String) {
    let base = vec![b'a'; 64 * 1024];
    let base_id = git2::Oid::hash_object(git2::ObjectType::Blob, &base)
        .unwrap()
        .to_string();
    let result: u64 = 4 << 30;
    let mut delta = Vec::new();
    delta_varint(base.len() as u64, &mut delta);
    delta_varint(result, &mut delta);
    // 0x80: copy, offset 0, size 0 meaning 0x10000.
    delta.extend(std::iter::repeat_n(0x80u8, (result / 0x10000) as usize));

    let mut pack = b"PACK".to_vec();
    pack.extend_from_slice(&2u32.to_be_bytes());
    pack.extend_from_slice(&2u32.to_be_bytes());
    let base_at = pack.len();
    pack.extend(pack_entry_header(3, base.len() as u64));
    pack.extend(deflate(&base));
    let delta_at = pack.len();
    if ofs {
        pack.extend(pack_entry_header(6, delta.len() as u64));
        let mut n = (delta_at - base_at) as u64;
        let mut enc = vec![(n & 0x7f) as u8];
        n >>= 7;
        while n > 0 {
            n -= 1;
            enc.insert(0, 0x80 | (n & 0x7f) as u8);
            n >>= 7;
        }
        pack.extend(enc);
    } else {
        pack.extend(pack_entry_header(7, delta.len() as u64));
        pack.extend(git2::Oid::from_str(&base_id).unwrap().as_bytes());
    }
    pack.extend(deflate(&delta));
    let sum = Command::new("sha1sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(&pack)?;
            c.wait_with_output()
        })
        .unwrap();
    let hex = String::from_utf8(sum.stdout).unwrap();
    let hex = hex.split_whitespace().next().unwrap();
    pack.extend((0..20).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()));
    (pack, base_id)
}

fn pkt_line(text: &str) -> Vec<u8> {
    let mut out = format!("{:04x}", text.len() + 4).into_bytes();
    out.extend_from_slice(text.as_bytes());
    out
}

/// The libgit2 1.9.5 advisory (issue 44): a pack whose delta declares a
/// 4 GiB result (and whose copy commands really build it) is refused at
/// push before anything is allocated for it: `receive-pack` and its
/// `index-pack` run under `GIT_ALLOC_LIMIT` (2 GiB), which git checks
/// before each allocation; nothing lands, and the server goes on serving.
/// The pack is written by hand and sent with the real `ssh` speaking
/// git's push protocol, as no git client would write it.
#[test]
fn a_delta_declaring_a_4_gib_result_is_refused_at_push_unallocated() {
    let h = ServerHarness::start();
    h.create_repo("r");
    let clone = h.clone_repo("r", "c");
    h.commit_file(&clone, "a.txt", b"a\n", "first");
    h.ssh_push(&clone, &["HEAD:main"]);
    for ofs in [false, true] {
        let (pack, base) = delta_bomb_pack(ofs);
        let zero = "0".repeat(40);
        let mut input = pkt_line(&format!(
            "{zero} {base} refs/tags/bomb\0 report-status agent=test\n"
        ));
        input.extend_from_slice(b"0000");
        input.extend_from_slice(&pack);
        let started = Instant::now();
        let out = h.ssh_exec_as(&h.ssh_client_key(), "git-receive-pack 'r'", &input);
        let took = started.elapsed();
        assert!(!out.stdout.contains("unpack ok"), "ofs {ofs}: {out:?}");
        assert!(out.stdout.contains("unpack "), "ofs {ofs}: {out:?}");
        assert!(
            out.stderr.contains("over limit"),
            "ofs {ofs}: not refused by the allocation limit: {out:?}"
        );
        // Refused before the 4 GiB were built (that takes tens of seconds).
        assert!(took < Duration::from_secs(20), "ofs {ofs}: {took:?}");
        let refs = h.git(&clone, &["ls-remote", "origin"]);
        let refs = String::from_utf8_lossy(&refs.stdout).to_string();
        assert!(!refs.contains("bomb"), "{refs}");
    }
    // Still serving.
    h.commit_file(&clone, "b.txt", b"b\n", "second");
    h.ssh_push(&clone, &["HEAD:main"]);
}
