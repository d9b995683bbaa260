//! Tampered events (edited `event.json`, a signature by the wrong key, a
//! truncated signature, non-canonical JSON) and untrusted keys are dropped
//! from the materialized state and reported by `git-collab verify`.

use collab_testkit::cli as cli_support;

use cli_support::{Clone, World};
use serde_json::Value;

fn issue_ref(id: &str) -> String {
    format!("refs/collab/issues/{id}")
}

fn tip(c: &Clone, id: &str) -> String {
    c.git(&["rev-parse", &issue_ref(id)]).trim().to_string()
}

fn comments(c: &Clone, id: &str) -> Vec<String> {
    c.json(&["issue", "show", id, "--json"])["comments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["body"].as_str().unwrap().to_string())
        .collect()
}

/// Runs `verify --json`, asserts its exit status, returns the report.
fn verify(c: &Clone, ok: bool) -> Value {
    let out = c.collab(&["verify", "--json"]);
    assert_eq!(out.status.code(), Some(if ok { 0 } else { 1 }));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], ok);
    report
}

fn dropped(report: &Value) -> Vec<(String, String)> {
    report["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["commit"].as_str().unwrap().to_string(),
                d["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn tampered_events_are_dropped_and_reported() {
    let w = World::new();
    let (a, b) = (w.clone("a"), w.clone("b"));
    let x = a.open("Target", &[]);
    a.ok(&["issue", "comment", &x, "-m", "genuine"]);
    let clean = verify(&a, true);
    assert_eq!(clean["events"], 2);

    let genuine = tip(&a, &x);
    let json = a.blob(&genuine, "event.json");
    let sig = a.blob(&genuine, "event.sig");
    let text = String::from_utf8(json.clone()).unwrap();
    assert!(text.contains(r#""body":"genuine""#), "{text}");

    // 1. event.json edited after signing.
    let edited = a.forge_event(&genuine, text.replace("genuine", "forged").as_bytes(), &sig);
    // 2. the author key swapped for b's: the signature is by the wrong key.
    let wrong_key = a.forge_event(
        &edited,
        text.replace(&a.public_key(), &b.public_key())
            .replace("genuine", "wrong key")
            .as_bytes(),
        &sig,
    );
    // 3. the genuine bytes with a truncated signature.
    let truncated = a.forge_event(&wrong_key, &json, &sig[..sig.len() / 2]);
    // 4. the genuine event re-encoded with whitespace (not canonical).
    let pretty: Value = serde_json::from_slice(&json).unwrap();
    let not_canonical = a.forge_event(
        &truncated,
        serde_json::to_string_pretty(&pretty).unwrap().as_bytes(),
        &sig,
    );
    a.git(&["update-ref", &issue_ref(&x), &not_canonical, &genuine]);

    // A genuine event on top still applies.
    a.ok(&["issue", "comment", &x, "-m", "after"]);
    assert_eq!(comments(&a, &x), vec!["genuine", "after"]);

    let report = verify(&a, false);
    let mut want = vec![
        (edited, "bad_signature".to_string()),
        (wrong_key, "bad_signature".to_string()),
        (truncated, "bad_signature".to_string()),
        (not_canonical, "bad_event".to_string()),
    ];
    want.sort();
    assert_eq!(dropped(&report), want);
    assert!(report["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["issue"] == x.as_str()));

    // The text report names each dropped commit and fails.
    let out = a.collab(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.matches("dropped ").count(), 4, "{text}");
    assert!(text.contains("signature does not match"), "{text}");
    assert!(text.contains("not a base64 Ed25519 signature"), "{text}");
}

#[test]
fn the_allowlist_drops_untrusted_keys_and_can_be_edited() {
    let w = World::new();
    let (a, b) = (w.clone("a"), w.clone("b"));
    let x = a.open("From a", &[]);
    a.ok(&["sync"]);
    b.ok(&["sync"]);
    let y = b.open("From b", &[]);
    b.ok(&["issue", "comment", &x, "-m", "b was here"]);
    b.ok(&["sync"]);
    a.ok(&["sync"]);
    assert_eq!(comments(&a, &x), vec!["b was here"]);

    let listed = a.json(&["trust", "list", "--json"]);
    assert_eq!(listed["allowlist"], false);
    let a_pub = a.home.join(".config/git-collab/signing_key.pub");
    let out = a.ok(&["trust", "add", a_pub.to_str().unwrap()]);
    assert!(out.contains("allowlist is now active"), "{out}");

    // Only a's key counts now: b's comment and b's whole issue are gone.
    assert!(comments(&a, &x).is_empty());
    let list = a.json(&["issue", "list", "--all", "--json"]);
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![x.as_str()]);
    let err = a.fails(&["issue", "show", &y]);
    assert!(err.contains("root event dropped"), "{err}");
    let report = verify(&a, false);
    let reasons: Vec<String> = dropped(&report).into_iter().map(|d| d.1).collect();
    assert_eq!(reasons, vec!["untrusted", "untrusted"]);
    assert_eq!(report["invalid_issues"][0]["issue"], y.as_str());

    // Trusting b's key line restores everything.
    let b_key = b.public_key();
    a.ok(&["trust", "add", &b_key]);
    assert_eq!(a.ok(&["trust", "add", &b_key]).trim(), "already trusted");
    verify(&a, true);
    assert_eq!(comments(&a, &x), vec!["b was here"]);
    let listed = a.json(&["trust", "list", "--json"]);
    assert_eq!(listed["allowlist"], true);
    assert_eq!(listed["keys"].as_array().unwrap().len(), 2);

    // Removing b by fingerprint drops b's events again.
    let b_fpr = b.json(&["key", "show", "--json"])["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    let out = a.ok(&["trust", "remove", &b_fpr]);
    assert!(out.contains(&b_fpr), "{out}");
    verify(&a, false);
    let err = a.fails(&["trust", "remove", &b_fpr]);
    assert!(err.contains("no key matches"), "{err}");
    let err = a.fails(&["trust", "add", "ssh-ed25519 not-base64"]);
    assert!(err.contains("neither a key file nor"), "{err}");
}
