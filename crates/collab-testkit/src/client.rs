//! A library SSH client (russh) for what OpenSSH cannot do on purpose:
//! offering a key without signing with it, or sending bytes such as NUL in
//! an exec command.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use russh::client::{self, AuthResult, Handle};
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::ChannelMsg;

/// Accepts any host key (the tests talk to their own server on loopback).
pub struct AcceptAnyHost;

impl client::Handler for AcceptAnyHost {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        _key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

/// What an exec request produced.
#[derive(Debug, Default)]
pub struct ExecResult {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_status: Option<u32>,
}

pub fn load_key(path: &Path) -> PrivateKey {
    russh::keys::load_secret_key(path, None).expect("load private key")
}

pub async fn connect(addr: SocketAddr) -> Handle<AcceptAnyHost> {
    let config = Arc::new(client::Config::default());
    client::connect(config, addr, AcceptAnyHost)
        .await
        .expect("ssh connect")
}

/// Authenticate with a key, signing (the normal way).
pub async fn authenticate(handle: &mut Handle<AcceptAnyHost>, key: &PrivateKey) -> AuthResult {
    handle
        .authenticate_publickey(
            "git",
            PrivateKeyWithHashAlg::new(Arc::new(key.clone()), None),
        )
        .await
        .expect("authenticate")
}

/// Authenticate with an OpenSSH certificate (the file `cert`) of `key`,
/// whatever its type: OpenSSH's client will not even offer some (a host
/// certificate as a user one), which the server must still refuse.
pub async fn authenticate_with_certificate(
    handle: &mut Handle<AcceptAnyHost>,
    key: &PrivateKey,
    cert: &Path,
) -> AuthResult {
    let text = std::fs::read_to_string(cert).expect("read certificate");
    let cert = russh::keys::ssh_key::Certificate::from_openssh(text.trim()).expect("certificate");
    handle
        .authenticate_openssh_cert("git", Arc::new(key.clone()), cert)
        .await
        .expect("authenticate")
}

/// Refuses every signature request, and remembers that it was asked.
pub struct RefuseToSign {
    pub asked: bool,
}

#[derive(Debug)]
pub enum RefusedError {
    Refused,
    Send,
}

impl From<russh::SendError> for RefusedError {
    fn from(_: russh::SendError) -> Self {
        RefusedError::Send
    }
}

impl russh::Signer for RefuseToSign {
    type Error = RefusedError;

    async fn auth_sign(
        &mut self,
        _key: &russh::keys::agent::AgentIdentity,
        _hash_alg: Option<russh::keys::HashAlg>,
        _to_sign: Vec<u8>,
    ) -> Result<Vec<u8>, Self::Error> {
        self.asked = true;
        Err(RefusedError::Refused)
    }
}

/// Offer `key` (a public key only) and never prove ownership. Returns whether
/// the server accepted the offer (asked for a signature).
pub async fn offer_without_signing(handle: &mut Handle<AcceptAnyHost>, key: &PrivateKey) -> bool {
    let mut signer = RefuseToSign { asked: false };
    let result = handle
        .authenticate_publickey_with("git", key.public_key().clone(), None, &mut signer)
        .await;
    match result {
        Err(RefusedError::Refused) => assert!(signer.asked),
        Ok(AuthResult::Success) => panic!("authenticated without a signature"),
        Ok(AuthResult::Failure { .. }) => assert!(!signer.asked),
        Err(RefusedError::Send) => panic!("connection lost"),
    }
    signer.asked
}

/// Run one exec request (raw bytes) and collect its output.
pub async fn exec(handle: &Handle<AcceptAnyHost>, command: &[u8]) -> ExecResult {
    let mut channel = handle.channel_open_session().await.expect("open session");
    channel.exec(true, command.to_vec()).await.expect("exec");
    let mut result = ExecResult::default();
    while let Some(msg) = channel.wait().await {
        match msg {
            ChannelMsg::Data { data } => result.stdout.extend_from_slice(&data),
            ChannelMsg::ExtendedData { data, ext: 1 } => result.stderr.extend_from_slice(&data),
            ChannelMsg::ExitStatus { exit_status } => result.exit_status = Some(exit_status),
            ChannelMsg::Close => break,
            _ => {}
        }
    }
    result
}
