//! The principal is bound only to the key that completed authentication.
//!
//! The attack (Soft Serve GHSA-pchf-49fh-w34r): a client offers the admin's
//! public key (which anyone may know) without signing, the server remembers
//! it as "the user", and the client then authenticates with its own
//! unprivileged key, inheriting the admin's identity. A library client lets
//! us make exactly that sequence of requests on one connection.

use collab_testkit as common;

use common::client;
use common::{fingerprint, ServerHarness, NOT_FOUND};

#[tokio::test(flavor = "multi_thread")]
async fn an_offered_but_unsigned_key_grants_nothing() {
    let h = ServerHarness::start();
    let private = h.create_repo("admin-only");
    std::fs::write(
        private.join("collab-policy.toml"),
        "read = []\nwrite = []\n",
    )
    .unwrap();
    let user_path = h.authorized_key("user");
    let admin = client::load_key(&h.ssh_client_key());
    let user = client::load_key(&user_path);

    let mut conn = client::connect(h.ssh_addr).await;
    // The server accepts the offer of the admin key (it is admitted) and
    // asks for a signature, which the attacker cannot give.
    assert!(client::offer_without_signing(&mut conn, &admin).await);
    assert!(client::authenticate(&mut conn, &user).await.success());

    let who = client::exec(&conn, b"collab-whoami").await;
    assert_eq!(who.exit_status, Some(0), "{who:?}");
    let v: serde_json::Value = serde_json::from_slice(&who.stdout).unwrap();
    assert_eq!(v["principal"], fingerprint(&user_path).as_str());
    assert_eq!(v["admin"], false);

    let hidden = client::exec(&conn, b"git-upload-pack 'admin-only'").await;
    assert_eq!(hidden.exit_status, Some(1));
    assert_eq!(String::from_utf8_lossy(&hidden.stderr), NOT_FOUND);
    let create = client::exec(&conn, b"collab-repo create 'mine'").await;
    assert_eq!(create.exit_status, Some(1));
    assert!(!h.repos_dir().join("mine.git").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn offering_an_unknown_key_is_refused_before_any_signature() {
    let h = ServerHarness::start();
    let stranger = client::load_key(&h.named_key("stranger"));
    let mut conn = client::connect(h.ssh_addr).await;
    assert!(!client::offer_without_signing(&mut conn, &stranger).await);
    // Signing with it does not help either.
    assert!(!client::authenticate(&mut conn, &stranger).await.success());
    // The connection can still authenticate properly with an admitted key.
    let admin_path = h.ssh_client_key();
    let admin = client::load_key(&admin_path);
    assert!(client::authenticate(&mut conn, &admin).await.success());
    let who = client::exec(&conn, b"collab-whoami").await;
    let v: serde_json::Value = serde_json::from_slice(&who.stdout).unwrap();
    assert_eq!(v["principal"], fingerprint(&admin_path).as_str());
}
