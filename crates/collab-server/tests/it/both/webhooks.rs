//! Webhooks end to end: the real server delivering to a real HTTP receiver
//! (axum on 127.0.0.1, in this process) that verifies every delivery the
//! way a user's receiver would: the `v1,` HMAC with the `standardwebhooks`
//! crate (which also checks the timestamp window) and the `v1a,` Ed25519
//! signature with `ed25519-dalek` against the `server_key` that
//! `collab-whoami` publishes, within the same five-minute window.

use collab_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use common::{HarnessOptions, ServerHarness};
use serde_json::Value;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Hang guard for waiting on deliveries (not a timing assertion).
const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// What `Mode::Leaky` answers; no reply may ever show it.
const LEAKED_BODY: &str = "INTERNAL-ADMIN-PANEL db_password=hunter2";

/// The Standard Webhooks timestamp tolerance receivers use.
const TOLERANCE: i64 = 5 * 60;

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Up,
    Down,
    /// 302 to the other listener.
    Redirect,
    /// 500 with a body an internal service would not want read.
    Leaky,
}

/// A verified, accepted delivery.
#[derive(Debug, Clone)]
struct Delivery {
    id: String,
    seq: i64,
    kind: String,
}

#[derive(Default)]
struct Seen {
    accepted: Vec<Delivery>,
    refused_while_down: usize,
    bad: Vec<String>,
    captured: Option<(HeaderMap, Vec<u8>)>,
    redirect_target_hits: usize,
}

struct Receiver {
    addr: SocketAddr,
    other: SocketAddr,
    state: Arc<Mutex<(Mode, Seen)>>,
    secret: String,
    server_key: Arc<Mutex<Option<ed25519_dalek::VerifyingKey>>>,
}

/// Verify the `v1a,` signature and the timestamp window, as of `now`.
fn check_ed25519(
    key: &ed25519_dalek::VerifyingKey,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<(), String> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .ok_or(format!("no {name}"))
    };
    let (id, ts, sigs) = (
        get("webhook-id")?,
        get("webhook-timestamp")?,
        get("webhook-signature")?,
    );
    let ts: i64 = ts.parse().map_err(|_| "bad timestamp")?;
    if (now - ts).abs() > TOLERANCE {
        return Err(format!("timestamp {ts} outside the window at {now}"));
    }
    let mut signed = format!("{id}.{ts}.").into_bytes();
    signed.extend_from_slice(body);
    for sig in sigs.split(' ') {
        if let Some(b64) = sig.strip_prefix("v1a,") {
            let bytes: [u8; 64] = B64
                .decode(b64)
                .map_err(|_| "bad base64")?
                .try_into()
                .map_err(|_| "bad length")?;
            return key
                .verify_strict(&signed, &ed25519_dalek::Signature::from_bytes(&bytes))
                .map_err(|e| format!("v1a mismatch: {e}"));
        }
    }
    Err("no v1a signature".into())
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

impl Receiver {
    /// A receiver that requires both signatures (`v1,` with its secret).
    fn start() -> Receiver {
        Receiver::start_with_secret(format!("whsec_{}", B64.encode(rand_bytes())))
    }

    /// A receiver for subscriptions without a secret: it requires the
    /// `v1a,` signature alone (and that no `v1,` one is sent).
    fn start_ed25519_only() -> Receiver {
        Receiver::start_with_secret(String::new())
    }

    fn start_with_secret(secret: String) -> Receiver {
        let state = Arc::new(Mutex::new((Mode::Up, Seen::default())));
        let server_key: Arc<Mutex<Option<ed25519_dalek::VerifyingKey>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let (st, sk, sec) = (state.clone(), server_key.clone(), secret.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let main = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let other_addr = other.local_addr().unwrap();
                tx.send((main.local_addr().unwrap(), other_addr)).unwrap();
                let hits = st.clone();
                let other_app = axum::Router::new().fallback(move || {
                    let hits = hits.clone();
                    async move {
                        hits.lock().unwrap().1.redirect_target_hits += 1;
                        StatusCode::OK
                    }
                });
                tokio::spawn(async move { axum::serve(other, other_app).await.unwrap() });
                let app = axum::Router::new().fallback(
                    move |headers: HeaderMap, body: axum::body::Bytes| {
                        let (st, sk, sec) = (st.clone(), sk.clone(), sec.clone());
                        async move { handle(&st, &sk, &sec, other_addr, headers, body.to_vec()) }
                    },
                );
                axum::serve(main, app).await.unwrap();
            });
        });
        let (addr, other) = rx.recv().unwrap();
        Receiver {
            addr,
            other,
            state,
            secret,
            server_key,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn set_mode(&self, mode: Mode) {
        self.state.lock().unwrap().0 = mode;
    }

    /// Check signatures against `h`'s signing key (its `collab-whoami`).
    fn trust(&self, h: &ServerHarness) {
        let whoami = h.ssh_exec("collab-whoami").json();
        let line = whoami["server_key"].as_str().unwrap();
        let key = russh::keys::ssh_key::PublicKey::from_openssh(line).unwrap();
        let bytes = key.key_data().ed25519().unwrap().0;
        *self.server_key.lock().unwrap() =
            Some(ed25519_dalek::VerifyingKey::from_bytes(&bytes).unwrap());
    }

    fn with<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.state.lock().unwrap().1)
    }

    /// Wait until `done` holds (hang guard).
    fn wait(&self, what: &str, done: impl Fn(&Seen) -> bool) {
        let start = Instant::now();
        while !self.with(&done) {
            assert!(start.elapsed() < WAIT_LIMIT, "never happened: {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn rand_bytes() -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = (std::process::id() as u8)
            .wrapping_mul(31)
            .wrapping_add(i as u8 * 7);
    }
    out
}

fn handle(
    state: &Mutex<(Mode, Seen)>,
    server_key: &Mutex<Option<ed25519_dalek::VerifyingKey>>,
    secret: &str,
    other: SocketAddr,
    headers: HeaderMap,
    body: Vec<u8>,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let mut guard = state.lock().unwrap();
    let (mode, seen) = &mut *guard;
    match *mode {
        Mode::Down => {
            seen.refused_while_down += 1;
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        Mode::Redirect => {
            return (
                StatusCode::FOUND,
                [("location", format!("http://{other}/private"))],
            )
                .into_response()
        }
        Mode::Leaky => {
            return (StatusCode::INTERNAL_SERVER_ERROR, LEAKED_BODY).into_response();
        }
        Mode::Up => {}
    }
    // HMAC and timestamp window: the well-known library.
    let hmac = if secret.is_empty() {
        let signatures = headers["webhook-signature"].to_str().unwrap_or_default();
        if signatures.split(' ').any(|s| s.starts_with("v1,")) {
            Err(standardwebhooks::WebhookError::InvalidSignature)
        } else {
            Ok(())
        }
    } else {
        standardwebhooks::Webhook::new(secret)
            .unwrap()
            .verify(&body, &headers)
    };
    let ed = match server_key.lock().unwrap().as_ref() {
        Some(key) => check_ed25519(key, &headers, &body, now()),
        None => Err("no server key yet".into()),
    };
    if let Err(e) = hmac {
        seen.bad.push(format!("v1: {e:?}"));
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if let Err(e) = ed {
        seen.bad.push(e);
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let value: Value = serde_json::from_slice(&body).unwrap();
    let id = headers["webhook-id"].to_str().unwrap().to_string();
    if value["type"] != "webhook.test" {
        seen.accepted.push(Delivery {
            id,
            seq: value["data"]["seq"].as_i64().unwrap(),
            kind: value["type"].as_str().unwrap().to_string(),
        });
    }
    seen.captured = Some((headers, body));
    StatusCode::NO_CONTENT.into_response()
}

fn hook_add(h: &ServerHarness, args: &str, secret: Option<&str>) -> common::SshOutput {
    match secret {
        Some(secret) => h.ssh_exec_with_stdin(
            &format!("collab-hook add {args} --secret-stdin"),
            secret.as_bytes(),
        ),
        None => h.ssh_exec(&format!("collab-hook add {args}")),
    }
}

/// Create `count` tags in `clone` and push them in one push.
fn push_tags(h: &ServerHarness, clone: &Path, prefix: &str, count: usize) {
    let head = h.rev_parse(clone, "HEAD");
    let mut script = String::new();
    for i in 0..count {
        script.push_str(&format!("create refs/tags/{prefix}-{i:05} {head}\n"));
    }
    let mut update = h
        .git_command(&h.ssh_client_key(), clone)
        .args(["update-ref", "--stdin"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(update.stdin.as_mut().unwrap(), script.as_bytes()).unwrap();
    drop(update.stdin.take());
    assert!(update.wait().unwrap().success());
    h.ssh_push(clone, &["--tags"]);
}

fn server_with(allowed: bool, extra: &[(&str, &str)]) -> ServerHarness {
    let mut env = vec![
        (
            "GIT_COLLAB_WEBHOOKS__RETRY_BASE_SECS".to_string(),
            "1".to_string(),
        ),
        (
            "GIT_COLLAB_WEBHOOKS__RETRY_MAX_SECS".to_string(),
            "2".to_string(),
        ),
    ];
    if allowed {
        env.push((
            "GIT_COLLAB_WEBHOOKS__ALLOWED_HOSTS".into(),
            "127.0.0.1".into(),
        ));
    }
    for (k, v) in extra {
        env.push((k.to_string(), v.to_string()));
    }
    ServerHarness::start_with(HarnessOptions {
        env,
        ..Default::default()
    })
}

fn sigkill(h: &mut ServerHarness) {
    // SAFETY: plain kill(2) on the server child this test owns.
    unsafe {
        libc::kill(h.pid() as i32, libc::SIGKILL);
    }
    h.wait_exit();
}

#[test]
fn every_event_is_delivered_once_per_webhook_id_in_order_across_outage_crash_and_burst() {
    let receiver = Receiver::start();
    let mut h = server_with(true, &[]);
    receiver.trust(&h);
    h.create_repo("r");
    let clone = h.clone_repo("r", "work");
    h.commit_file(&clone, "a.txt", b"a", "first");
    let added = hook_add(
        &h,
        &format!("'r' '{}'", receiver.url()),
        Some(&receiver.secret),
    );
    assert_eq!(added.code, 0, "{added:?}");
    let hook = added.json()["webhook"].clone();
    let id = hook["id"].as_str().unwrap().to_string();
    let start_seq = hook["cursor"].as_i64().unwrap();
    assert_eq!(hook["secret"], true, "the secret itself is never shown");

    // Receiver up.
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    push_tags(&h, &clone, "up", 5);
    receiver.wait("6 deliveries", |s| s.accepted.len() >= 6);

    // Receiver down: deliveries are retried; then the server is killed in
    // the middle of the retries and started again.
    receiver.set_mode(Mode::Down);
    push_tags(&h, &clone, "down", 5);
    receiver.wait("retries while down", |s| s.refused_while_down >= 3);
    sigkill(&mut h);
    h.start_again();
    // The restarted server listens on a new port.
    h.git(&clone, &["remote", "set-url", "origin", &h.repo_url("r")]);
    receiver.wait("a retry after the restart", |s| s.refused_while_down >= 4);
    receiver.set_mode(Mode::Up);
    receiver.wait("the outage backlog", |s| s.accepted.len() >= 11);

    // The delivery log shows the failed attempts and the successes.
    let log = h.ssh_exec(&format!("collab-hook deliveries '{id}' --limit 100"));
    assert_eq!(log.code, 0, "{log:?}");
    let log = log.json();
    let outcomes: Vec<(String, Option<i64>)> = log["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["outcome"].as_str().unwrap().to_string(),
                a["status"].as_i64(),
            )
        })
        .collect();
    assert!(outcomes.contains(&("failed".to_string(), Some(503))));
    assert!(outcomes.contains(&("delivered".to_string(), Some(204))));

    // A burst of 1,000 events in one push.
    push_tags(&h, &clone, "burst", 1000);
    receiver.wait("the burst", |s| {
        s.accepted
            .iter()
            .any(|d| d.id.ends_with(&format!("-{}", start_seq + 1011)))
    });

    // What the server's own log says was due: every event of `r` after the
    // subscription started.
    let out = h.ssh_exec(&format!(
        "collab-events watch 'r' --since {start_seq} --no-follow"
    ));
    assert_eq!(out.code, 0, "{out:?}");
    let due: Vec<i64> = out
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(due.len(), 1011, "1 branch + 5 + 5 + 1000 tags");

    receiver.with(|seen| {
        assert!(
            seen.bad.is_empty(),
            "every delivery verified: {:?}",
            seen.bad
        );
        // One webhook-id per event, and the id names the event.
        let mut ids_by_seq: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
        for d in &seen.accepted {
            assert_eq!(d.id, format!("{id}-{}", d.seq));
            assert_eq!(d.kind, "ref.updated");
            ids_by_seq.entry(d.seq).or_default().insert(d.id.clone());
        }
        assert!(ids_by_seq.values().all(|ids| ids.len() == 1));
        // Deduplicated by webhook-id: exactly the due events, in order.
        let mut first_seen = Vec::new();
        let mut known = BTreeSet::new();
        for d in &seen.accepted {
            if known.insert(d.id.clone()) {
                first_seen.push(d.seq);
            }
        }
        assert_eq!(first_seen, due, "every due event once, in seq order");
        // Redeliveries after the crash, if any, repeat an id, never skip.
        assert!(
            seen.accepted.len() - first_seen.len() <= 2,
            "at most the in-flight ones repeat"
        );
    });

    // Redelivery by id: same webhook-id, verified again.
    let first_id = format!("{id}-{}", due[0]);
    let before = receiver.with(|s| s.accepted.len());
    let again = h.ssh_exec(&format!("collab-hook redeliver '{first_id}'"));
    assert_eq!(again.code, 0, "{again:?}");
    receiver.wait("the redelivery", |s| s.accepted.len() > before);
    receiver.with(|s| assert_eq!(s.accepted.last().unwrap().id, first_id));

    // A captured delivery replayed later fails the receiver's check: the
    // signature still matches, the timestamp is out of the window...
    let (headers, body) = receiver.with(|s| s.captured.clone().unwrap());
    let key = receiver.server_key.lock().unwrap().unwrap();
    check_ed25519(&key, &headers, &body, now()).expect("fresh: valid");
    let later = check_ed25519(&key, &headers, &body, now() + TOLERANCE + 60).unwrap_err();
    assert!(later.contains("outside the window"), "{later}");
    // ...and moving the timestamp breaks both signatures.
    let mut stale = headers.clone();
    stale.insert(
        "webhook-timestamp",
        (now() - 3600).to_string().parse().unwrap(),
    );
    assert!(standardwebhooks::Webhook::new(&receiver.secret)
        .unwrap()
        .verify(&body, &stale)
        .is_err());
    let mut moved = headers.clone();
    moved.insert("webhook-timestamp", now().to_string().parse().unwrap());
    if moved["webhook-timestamp"] != headers["webhook-timestamp"] {
        assert!(check_ed25519(&key, &moved, &body, now()).is_err());
    }
}

#[test]
fn private_and_loopback_targets_are_refused_without_the_allowlist() {
    let receiver = Receiver::start();
    let h = server_with(false, &[]);
    h.create_repo("r");
    for url in [
        receiver.url(),
        format!("http://localhost:{}/", receiver.addr.port()),
        format!("http://[::1]:{}/", receiver.addr.port()),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://[::ffff:10.0.0.1]/".to_string(),
        "http://0.0.0.0:80/".to_string(),
    ] {
        let out = hook_add(&h, &format!("'r' '{url}'"), None);
        assert_eq!(out.code, 1, "{url}: {out:?}");
        assert!(out.stderr.starts_with("error: refused:"), "{url}: {out:?}");
        assert!(out.stderr.contains("webhooks.allowed_hosts"), "{out:?}");
    }
    for bad in [
        "ftp://example.com/",
        "http://user:pw@example.com/",
        "not a url",
    ] {
        let out = hook_add(&h, &format!("'r' '{bad}'"), None);
        assert_eq!(out.code, 1, "{bad}: {out:?}");
    }
    assert_eq!(receiver.with(|s| s.accepted.len() + s.bad.len()), 0);
    let list = h.ssh_exec("collab-hook list").json();
    assert_eq!(list["webhooks"].as_array().unwrap().len(), 0);
}

#[test]
fn redirects_are_not_followed_and_a_failing_subscription_is_disabled() {
    let receiver = Receiver::start();
    let h = server_with(true, &[("GIT_COLLAB_WEBHOOKS__DISABLE_AFTER_SECS", "10")]);
    receiver.trust(&h);
    h.create_repo("r");
    let added = hook_add(
        &h,
        &format!("'r' '{}' --event 'ref.*'", receiver.url()),
        None,
    );
    assert_eq!(added.code, 0, "{added:?}");
    let id = added.json()["webhook"]["id"].as_str().unwrap().to_string();
    receiver.set_mode(Mode::Redirect);
    let test = h.ssh_exec(&format!("collab-hook test '{id}'"));
    assert_eq!(test.code, 1, "{test:?}");
    assert!(test.stderr.contains("HTTP 302"), "{test:?}");
    assert!(test.stderr.contains("not followed"), "{test:?}");

    // Real events keep failing on the redirect until the subscription is
    // disabled, with an event saying so.
    let clone = h.clone_repo("r", "work");
    h.commit_file(&clone, "a", b"a", "a");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    let start = Instant::now();
    loop {
        let list = h.ssh_exec("collab-hook list").json();
        let hook = &list["webhooks"][0];
        if hook["active"] == false {
            assert!(hook["disabled_reason"]
                .as_str()
                .unwrap()
                .contains("failing since"));
            break;
        }
        assert!(start.elapsed() < WAIT_LIMIT, "never disabled: {list}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let events = h.ssh_exec("collab-events watch --since 0 --no-follow --type 'webhook.*'");
    let disabled: Value = serde_json::from_str(events.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(disabled["type"], "webhook.disabled");
    assert_eq!(disabled["object_id"], id.as_str());
    assert_eq!(disabled["repo"], Value::Null);
    // A user who is not an administrator does not see server-wide events.
    let user = h.authorized_key("user");
    let theirs = h.ssh_exec_as(
        &user,
        "collab-events watch --since 0 --no-follow --type 'webhook.*'",
        b"",
    );
    assert_eq!((theirs.code, theirs.stdout.as_str()), (0, ""), "{theirs:?}");
    // Nothing ever reached the redirect target.
    assert_eq!(receiver.with(|s| s.redirect_target_hits), 0);
    let log = h.ssh_exec(&format!("collab-hook deliveries '{id}'")).json();
    assert!(log["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["status"] == 302));
    // Someone else cannot see or touch the subscription.
    for verb in ["test", "remove", "deliveries", "enable"] {
        let out = h.ssh_exec_as(&user, &format!("collab-hook {verb} '{id}'"), b"");
        assert_eq!(out.stderr, "error: webhook not found\n", "{verb}: {out:?}");
    }
    let _ = receiver.other;
}

/// `governance.toml` naming the harness's admin key `alice` (rewind on
/// everything) and declaring `hooks` verbatim.
fn governance_toml(h: &ServerHarness, hooks: &str) -> String {
    format!(
        "[principals.alice]\nkeys = [\"{}\"]\n\n[[grants]]\nrepos = [\"**\"]\nto = [\"alice\"]\naccess = \"rewind\"\n{hooks}",
        common::public_key_line(&h.ssh_client_key())
    )
}

fn push_governance(h: &ServerHarness, clone: &Path, text: &str) -> std::process::Output {
    std::fs::write(clone.join("governance.toml"), text).unwrap();
    h.git(clone, &["add", "governance.toml"]);
    h.git(clone, &["commit", "-q", "-m", "governance"]);
    h.git_command(&h.ssh_client_key(), clone)
        .args(["push", "origin", "HEAD:main"])
        .output()
        .unwrap()
}

/// The ids of the subscriptions `collab-hook list` shows, once `done` holds
/// (the server syncs declarations in the background; hang guard).
fn wait_hooks(h: &ServerHarness, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let list = h.ssh_exec("collab-hook list").json();
        let hooks = list["webhooks"].as_array().unwrap().clone();
        if done(&hooks) {
            return hooks;
        }
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "never happened: {what}: {list}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn subscriptions_declared_in_governance_toml_deliver_and_follow_the_file() {
    let receiver = Receiver::start_ed25519_only();
    let h = server_with(true, &[]);
    receiver.trust(&h);
    assert_eq!(h.ssh_exec("collab-repo create '_governance'").code, 0);
    assert_eq!(h.ssh_exec("collab-repo create 'team/app'").code, 0);
    assert_eq!(h.ssh_exec("collab-repo create 'other'").code, 0);
    let gov = h.clone_repo("_governance", "gov");
    let out = push_governance(&h, &gov, &governance_toml(&h, ""));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A bad declaration is refused with the push, naming the entry.
    for (bad, needle) in [
        ("[[webhooks]]\nname = \"ci\"\nrepo = \"team/*\"\nurl = \"ftp://x/\"\n", "webhooks[0].url"),
        ("[[webhooks]]\nname = \"bad name\"\nrepo = \"*\"\nurl = \"http://x/\"\n", "webhooks[0].name"),
        ("[[webhooks]]\nname = \"ci\"\nrepo = \"*\"\nurl = \"http://x/\"\nsecret = \"whsec_AAAA\"\n", "secret"),
        ("[[webhooks]]\nname = \"ci\"\nrepo = \"*\"\nurl = \"http://x/\"\nevents = [\"ref updated\"]\n", "webhooks[0].events"),
    ] {
        let out = push_governance(&h, &gov, &governance_toml(&h, &format!("\n{bad}")));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(needle), "{bad}: {stderr}");
        h.git(&gov, &["reset", "-q", "--hard", "HEAD~1"]);
    }

    let declared = format!(
        "\n[[webhooks]]\nname = \"ci\"\nrepo = \"team/*\"\nurl = \"{}\"\nevents = [\"ref.updated\"]\n",
        receiver.url()
    );
    let out = push_governance(&h, &gov, &governance_toml(&h, &declared));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hooks = wait_hooks(&h, "the governance subscription", |hooks| {
        hooks.iter().any(|w| w["id"] == "governance-ci")
    });
    let hook = hooks.iter().find(|w| w["id"] == "governance-ci").unwrap();
    assert_eq!(hook["origin"], "governance", "{hook}");
    assert_eq!(hook["repo"], "team/*", "{hook}");
    assert_eq!(hook["secret"], false, "{hook}");
    let removed = h.ssh_exec("collab-hook remove 'governance-ci'");
    assert_eq!(removed.code, 1, "{removed:?}");
    assert!(removed.stderr.contains("governance.toml"), "{removed:?}");

    // Pushes to team/app reach the receiver, signed with the server key;
    // pushes to other do not match the glob.
    let other = h.clone_repo("other", "other");
    h.commit_file(&other, "o", b"o", "o");
    h.ssh_push(&other, &["HEAD:refs/heads/main"]);
    let app = h.clone_repo("team/app", "app");
    h.commit_file(&app, "a", b"a", "a");
    h.ssh_push(&app, &["HEAD:refs/heads/main"]);
    receiver.wait("the team/app push", |s| !s.accepted.is_empty());
    receiver.with(|s| {
        assert!(s.bad.is_empty(), "{:?}", s.bad);
        assert_eq!(s.accepted.len(), 1);
        assert!(
            s.accepted[0].id.starts_with("governance-ci-"),
            "{:?}",
            s.accepted
        );
        assert_eq!(s.accepted[0].kind, "ref.updated");
    });

    // Changing the declaration moves the running subscription: now `other`.
    let moved = declared.replace("team/*", "other");
    let out = push_governance(&h, &gov, &governance_toml(&h, &moved));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_hooks(&h, "the changed glob", |hooks| {
        hooks
            .iter()
            .any(|w| w["id"] == "governance-ci" && w["repo"] == "other")
    });
    h.commit_file(&other, "o", b"o2", "o2");
    h.ssh_push(&other, &["HEAD:refs/heads/main"]);
    receiver.wait("the other push", |s| s.accepted.len() >= 2);

    // The metrics count the deliveries (the worker counts an attempt just
    // after the receiver answered it: poll) and show the backlog and
    // watchers.
    let read_metrics = || {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(h.http_addr).unwrap();
        write!(stream, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    };
    let start = Instant::now();
    let metrics = loop {
        let metrics = read_metrics();
        let delivered: u64 = metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix("git_collab_webhook_deliveries_total{outcome=\"delivered\"} ")
            })
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        if delivered >= 2 {
            break metrics;
        }
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "deliveries never counted: {metrics}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for name in [
        "git_collab_webhook_queue_depth ",
        "git_collab_webhook_oldest_undelivered_seconds ",
        "git_collab_event_watchers ",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(name)),
            "{name}: {metrics}"
        );
    }

    // Dropping it from the file removes the subscription.
    let out = push_governance(&h, &gov, &governance_toml(&h, ""));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_hooks(&h, "the subscription removed", |hooks| {
        !hooks.iter().any(|w| w["id"] == "governance-ci")
    });
    receiver.with(|s| assert!(s.bad.is_empty(), "{:?}", s.bad));
}

/// `key`'s line removed from authorized_keys (the server picks it up live).
fn revoke(h: &ServerHarness, key: &Path) {
    let line = common::public_key_line(key);
    let line = line.trim();
    let path = h.authorized_keys_path();
    let kept: String = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| !l.contains(line))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, kept).unwrap();
}

/// `repo`'s policy: `rewind` for `keys` (they may subscribe to it).
fn grant_rewind(repo_dir: &Path, keys: &[&Path]) {
    let list: Vec<String> = keys
        .iter()
        .map(|k| format!("\"{}\"", common::fingerprint(k)))
        .collect();
    std::fs::write(
        repo_dir.join("collab-policy.toml"),
        format!("rewind = [{}]\n", list.join(", ")),
    )
    .unwrap();
}

/// `collab-hook add ARGS` as `owner` (a non-administrator, so it waits
/// for approval), approved by the administrator; its id.
fn add_approved(h: &ServerHarness, owner: &Path, args: &str) -> String {
    let added = h.ssh_exec_as(owner, &format!("collab-hook add {args}"), b"");
    assert_eq!(added.code, 0, "{added:?}");
    let id = added.json()["webhook"]["id"].as_str().unwrap().to_string();
    assert_eq!(h.ssh_exec(&format!("collab-hook approve '{id}'")).code, 0);
    id
}

fn hook_list(h: &ServerHarness) -> Vec<Value> {
    h.ssh_exec("collab-hook list").json()["webhooks"]
        .as_array()
        .unwrap()
        .clone()
}

/// Issue 25: a target the operator's allowlist lets through although it is
/// not on the public internet is the administrators'. Another owner's
/// subscription to it waits inactive (and cannot be enabled, tested or
/// delivered) until an administrator approves it; `test` shows the status
/// only, never the body.
#[test]
fn a_non_administrators_internal_target_waits_for_approval() {
    let receiver = Receiver::start_ed25519_only();
    let h = server_with(true, &[]);
    receiver.trust(&h);
    let dir = h.create_repo("r");
    let user = h.authorized_key("user");
    grant_rewind(&dir, &[&user]);
    let added = h.ssh_exec_as(
        &user,
        &format!("collab-hook add 'r' '{}' --event 'ref.*'", receiver.url()),
        b"",
    );
    assert_eq!(added.code, 0, "{added:?}");
    let added = added.json();
    assert_eq!(added["status"], "pending_approval", "{added}");
    assert_eq!(added["webhook"]["active"], false);
    assert_eq!(added["webhook"]["needs_approval"], true);
    let id = added["webhook"]["id"].as_str().unwrap().to_string();

    // The owner can neither switch it on nor reach the target with it.
    let enable = h.ssh_exec_as(&user, &format!("collab-hook enable '{id}'"), b"");
    assert_eq!(enable.code, 1, "{enable:?}");
    assert!(enable.stderr.contains("approval"), "{enable:?}");
    let test = h.ssh_exec_as(&user, &format!("collab-hook test '{id}'"), b"");
    assert_eq!(test.code, 1, "{test:?}");
    assert!(test.stderr.contains("no response"), "{test:?}");
    let clone = h.clone_repo("r", "work");
    h.commit_file(&clone, "a", b"a", "a");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    // Only an administrator approves.
    let approve = h.ssh_exec_as(&user, &format!("collab-hook approve '{id}'"), b"");
    assert_eq!(approve.code, 1, "{approve:?}");
    assert!(approve.stderr.contains("permission denied"), "{approve:?}");
    assert_eq!(receiver.with(|s| s.accepted.len() + s.bad.len()), 0);

    let approved = h.ssh_exec(&format!("collab-hook approve '{id}'"));
    assert_eq!(approved.code, 0, "{approved:?}");
    h.commit_file(&clone, "b", b"b", "b");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    receiver.wait("the push after approval", |s| {
        s.accepted.iter().any(|d| d.kind == "ref.updated")
    });
    let hook = hook_list(&h)
        .into_iter()
        .find(|x| x["id"] == id.as_str())
        .unwrap();
    assert_eq!(
        (hook["active"].clone(), hook["needs_approval"].clone()),
        (Value::Bool(true), Value::Bool(false))
    );
    assert!(hook["approved_by"].is_string(), "{hook}");

    // A receiver that answers with a body: the owner sees the status only.
    receiver.set_mode(Mode::Leaky);
    let test = h.ssh_exec_as(&user, &format!("collab-hook test '{id}'"), b"");
    assert_eq!(test.code, 1, "{test:?}");
    assert!(test.stderr.ends_with("failed: HTTP 500\n"), "{test:?}");
    let log = h.ssh_exec_as(&user, &format!("collab-hook deliveries '{id}'"), b"");
    assert!(!log.stdout.contains("hunter2"), "{log:?}");
    assert!(!test.stderr.contains("hunter2"), "{test:?}");
}

/// Issue 25: what an attempt that got no response says does not tell a
/// closed port from one that never answers (no port oracle).
#[test]
fn failures_without_a_response_all_read_the_same() {
    let h = server_with(true, &[("GIT_COLLAB_WEBHOOKS__ATTEMPT_TIMEOUT_SECS", "1")]);
    h.create_repo("r");
    // A port nobody listens on, and a listener that accepts and never
    // answers.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let mut replies = Vec::new();
    for port in [closed, silent_port] {
        let added = hook_add(&h, &format!("'r' 'http://127.0.0.1:{port}/hook'"), None);
        assert_eq!(added.code, 0, "{added:?}");
        let id = added.json()["webhook"]["id"].as_str().unwrap().to_string();
        let test = h.ssh_exec(&format!("collab-hook test '{id}'"));
        assert_eq!(test.code, 1, "{test:?}");
        // The message id differs per attempt; the rest must not.
        let (_, what) = test
            .stderr
            .split_once(" failed: ")
            .expect("one failure line");
        replies.push(what.to_string());
        let log = h.ssh_exec(&format!("collab-hook deliveries '{id}'")).json();
        let attempt = &log["deliveries"][0];
        replies.push(format!(
            "{} {} {}",
            attempt["outcome"], attempt["response"], attempt["latency_ms"]
        ));
    }
    drop(silent);
    assert!(replies[0].starts_with("no response"), "{replies:?}");
    assert_eq!(replies[0], replies[2], "{replies:?}");
    assert_eq!(replies[1], replies[3], "{replies:?}");
}

/// Issue 25: subscriptions are capped per owner and per repository.
#[test]
fn subscriptions_are_capped_per_owner_and_per_repository() {
    let receiver = Receiver::start();
    let h = server_with(
        true,
        &[
            ("GIT_COLLAB_WEBHOOKS__MAX_PER_OWNER", "2"),
            ("GIT_COLLAB_WEBHOOKS__MAX_PER_REPO", "3"),
        ],
    );
    let dir = h.create_repo("r");
    h.create_repo("s");
    let (one, two) = (h.authorized_key("one"), h.authorized_key("two"));
    grant_rewind(&dir, &[&one, &two]);
    let url = receiver.url();
    for _ in 0..2 {
        let out = hook_add(&h, &format!("'r' '{url}'"), None);
        assert_eq!(out.code, 0, "{out:?}");
    }
    let third = hook_add(&h, &format!("'s' '{url}'"), None);
    assert_eq!(third.code, 1, "{third:?}");
    assert!(third.stderr.contains("webhooks.max_per_owner"), "{third:?}");
    // A second owner fills `r` up to its cap; a third subscription on it
    // from anyone is refused, even through a glob.
    let out = h.ssh_exec_as(&one, &format!("collab-hook add 'r' '{url}'"), b"");
    assert_eq!(out.code, 0, "{out:?}");
    for glob in ["r", "*"] {
        let out = h.ssh_exec_as(&two, &format!("collab-hook add '{glob}' '{url}'"), b"");
        assert_eq!(out.code, 1, "{glob}: {out:?}");
        assert!(
            out.stderr.contains("webhooks.max_per_repo")
                || out.stderr.contains("permission denied"),
            "{glob}: {out:?}"
        );
    }
    let out = h.ssh_exec_as(&two, &format!("collab-hook add 'r' '{url}'"), b"");
    assert!(out.stderr.contains("webhooks.max_per_repo"), "{out:?}");
    assert_eq!(hook_list(&h).len(), 3);
}

/// Issue 25: at delivery the owner must still be admitted; a subscription
/// whose owner's key line was removed delivers nothing more and is
/// disabled with the reason.
#[test]
fn a_removed_owners_subscription_stops_and_is_disabled() {
    let receiver = Receiver::start_ed25519_only();
    let h = server_with(true, &[]);
    receiver.trust(&h);
    let dir = h.create_repo("r");
    let user = h.authorized_key("user");
    grant_rewind(&dir, &[&user]);
    let id = add_approved(
        &h,
        &user,
        &format!("'r' '{}' --event 'ref.*'", receiver.url()),
    );
    let clone = h.clone_repo("r", "work");
    h.commit_file(&clone, "a", b"a", "a");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    receiver.wait("the first push", |s| s.accepted.len() == 1);

    revoke(&h, &user);
    // The key is out once the server no longer lets it in.
    let start = Instant::now();
    while h.ssh_exec_as(&user, "collab-whoami", b"").code == 0 {
        assert!(start.elapsed() < WAIT_LIMIT, "the key stayed admitted");
        std::thread::sleep(Duration::from_millis(100));
    }
    h.commit_file(&clone, "b", b"b", "b");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    let start = Instant::now();
    let hook = loop {
        let hook = hook_list(&h)
            .into_iter()
            .find(|x| x["id"] == id.as_str())
            .unwrap();
        if hook["active"] == false {
            break hook;
        }
        assert!(start.elapsed() < WAIT_LIMIT, "never disabled: {hook}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        hook["disabled_reason"]
            .as_str()
            .unwrap()
            .contains("no longer admitted"),
        "{hook}"
    );
    assert_eq!(receiver.with(|s| s.accepted.len()), 1);
}

/// Issue 25: a subscription matching a reused name never receives the
/// deleted predecessor's events, even when they are still in its backlog
/// once the new repository exists, nor by redelivery.
#[test]
fn a_reused_names_subscription_never_gets_the_deleted_repositorys_events() {
    let receiver = Receiver::start_ed25519_only();
    let h = server_with(true, &[]);
    receiver.trust(&h);
    let dir = h.create_repo("pa");
    let user = h.authorized_key("user");
    grant_rewind(&dir, &[&user]);
    let id = add_approved(&h, &user, &format!("'p*' '{}'", receiver.url()));
    // The receiver is down: the subscription stalls on its first event and
    // the rest wait behind it.
    receiver.set_mode(Mode::Down);
    let run = |cmd: &str| {
        let out = h.ssh_exec(cmd);
        assert_eq!(out.code, 0, "{cmd}: {out:?}");
    };
    run("collab-issue open 'pa' --title 'first'");
    receiver.wait("a refused attempt", |s| s.refused_while_down > 0);
    run("collab-repo create 'p'");
    std::fs::write(
        h.repos_dir().join("p.git").join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    )
    .unwrap();
    run("collab-issue open 'p' --title 'SECRET-old-p'");
    run("collab-repo delete 'p' --confirm 'p'");
    run("collab-repo create 'p'");
    run("collab-issue open 'p' --title 'fresh'");
    let events = h.ssh_exec("collab-events watch --since 0 --no-follow");
    let events: Vec<Value> = events
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let secret_seq = events
        .iter()
        .find(|e| e.to_string().contains("SECRET-old-p"))
        .unwrap()["seq"]
        .as_i64()
        .unwrap();
    let last = events.last().unwrap()["seq"].as_i64().unwrap();
    let old_id = events.iter().find(|e| e["seq"] == secret_seq).unwrap()["repo_id"].clone();
    let old_seqs: Vec<i64> = events
        .iter()
        .filter(|e| e["repo_id"] == old_id)
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(old_seqs.len(), 3, "created, opened, deleted: {events:?}");

    receiver.set_mode(Mode::Up);
    receiver.wait("the new repository's issue", |s| {
        s.accepted.iter().any(|d| d.seq == last)
    });
    let got: Vec<i64> = receiver.with(|s| s.accepted.iter().map(|d| d.seq).collect());
    for seq in &old_seqs {
        assert!(!got.contains(seq), "old-p event {seq} delivered: {got:?}");
    }
    // Nor can it be had by redelivery.
    let again = h.ssh_exec_as(
        &user,
        &format!("collab-hook redeliver '{id}-{secret_seq}'"),
        b"",
    );
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("no such delivery"), "{again:?}");
    assert!(receiver.with(|s| s.accepted.iter().all(|d| !old_seqs.contains(&d.seq))));
}

/// Issue 44: a subscription whose owner's key was limited with `from=`
/// after it was added delivers nothing more and is disabled (a delivery
/// happens with nobody connected, so no address can match); the key still
/// logs in from where it may, and may not add another subscription.
#[test]
fn a_from_limited_owners_subscription_stops_and_cannot_be_added_again() {
    let receiver = Receiver::start_ed25519_only();
    let h = server_with(true, &[]);
    receiver.trust(&h);
    let dir = h.create_repo("r");
    let user = h.authorized_key("user");
    grant_rewind(&dir, &[&user]);
    let id = add_approved(
        &h,
        &user,
        &format!("'r' '{}' --event 'ref.*'", receiver.url()),
    );
    let clone = h.clone_repo("r", "work");
    h.commit_file(&clone, "a", b"a", "a");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    receiver.wait("the first push", |s| s.accepted.len() == 1);

    h.limit_key_from_loopback(&user);
    // The key itself still logs in from loopback (the file is read again
    // at each login), but a new subscription is refused with one line.
    assert_eq!(h.ssh_exec_as(&user, "collab-whoami", b"").code, 0);
    let refused = h.ssh_exec_as(
        &user,
        &format!("collab-hook add 'r' '{}'", receiver.url()),
        b"",
    );
    assert!(
        refused.code == 1
            && refused.stderr.starts_with("error: ")
            && refused.stderr.contains("from=")
            && refused.stderr.lines().count() == 1,
        "{refused:?}"
    );

    h.commit_file(&clone, "b", b"b", "b");
    h.ssh_push(&clone, &["HEAD:refs/heads/main"]);
    let start = Instant::now();
    let hook = loop {
        let hook = hook_list(&h)
            .into_iter()
            .find(|x| x["id"] == id.as_str())
            .unwrap();
        if hook["active"] == false {
            break hook;
        }
        assert!(start.elapsed() < WAIT_LIMIT, "never disabled: {hook}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        hook["disabled_reason"].as_str().unwrap().contains("from="),
        "{hook}"
    );
    assert_eq!(receiver.with(|s| s.accepted.len()), 1);
}
