//! How an MCP tool call reaches the verbs: through the same dispatcher an
//! SSH exec request does (`ssh::exec::run_exec`, given as `RunExec`), with the session's
//! identity. The verb handlers answer on russh channels, and russh only
//! makes channels for a session, so each MCP session runs one in-process
//! SSH session over a memory pipe: its server side is [`Loopback`], a
//! handler that knows the caller already (the key that opened the MCP
//! session, re-checked at every call exactly as `ssh::Connection` does),
//! and its client side opens one channel per tool call. Nothing of it
//! listens anywhere; only `mcp::serve` can make one.
//!
//! A call's verb ends with the call: closing the call's channel stops it
//! (`ssh::leaving`, as for any SSH client), and the call learns when the
//! verb's task has ended ([`VerbEnd`]), so its slot is held until then.
//! The link between the two sides is the channel's `CALL_ENV` variable:
//! the call's number, under which the client leaves the token the verb's
//! task holds until it ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::oneshot;

use russh::client;
use russh::keys::PrivateKey;
use russh::server::{Auth, ChannelOpenHandle, Msg, Session};
use russh::{Channel, ChannelId, MethodKind, MethodSet};

use crate::app::App;
use crate::authz;
use crate::identity::Identity;
use crate::ssh::context::{ChannelEnv, ExecContext};
use crate::ssh::leaving::{Callers, Left};
use crate::ssh::reply::reply_and_close;

/// How a verb's command line runs: `ssh::exec::run_exec`, which the SSH
/// dispatcher passes in (`mcp` does not name it: it is named by it).
pub type RunExec = fn(
    ExecContext,
    Channel<Msg>,
    Vec<u8>,
    Left,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// The channel variable that carries a call's number.
const CALL_ENV: &str = "COLLAB_MCP_CALL";

/// Tokens by call number: left by the client before it sends the exec
/// request, taken by the verb's task, dropped when that task ends.
type Tokens = Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>>;

/// Bytes buffered in the memory pipe each way.
const PIPE: usize = 256 * 1024;

/// No cipher and no MAC: the pipe is memory inside this process, with
/// nothing to protect from, and a tool call should not pay for encrypting
/// its way from one task to another (the one key exchange per session is
/// kept: russh's client does not take "none" there). The network server's
/// configuration (`ssh::russh_config`) offers neither.
fn in_process() -> russh::Preferred {
    use std::borrow::Cow;
    russh::Preferred {
        kex: Cow::Owned(vec![russh::kex::CURVE25519]),
        key: Cow::Owned(vec![russh::keys::Algorithm::Ed25519]),
        cipher: Cow::Owned(vec![russh::cipher::NONE]),
        mac: Cow::Owned(vec![russh::mac::NONE]),
        compression: Cow::Owned(vec![russh::compression::NONE]),
        ..russh::Preferred::DEFAULT
    }
}

/// The in-process server's configuration: one throwaway host key per
/// process (nobody outside ever sees it), "none" authentication (the
/// caller is fixed when the session is made), no crypto ([`in_process`]).
fn server_config() -> Arc<russh::server::Config> {
    static CONFIG: OnceLock<Arc<russh::server::Config>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let seed: [u8; 32] = rand::random();
            let pair = russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed);
            let key = PrivateKey::from(pair);
            Arc::new(russh::server::Config {
                keys: vec![key],
                preferred: in_process(),
                methods: MethodSet::from(&[MethodKind::None][..]),
                auth_rejection_time: Duration::ZERO,
                auth_rejection_time_initial: Some(Duration::ZERO),
                // The MCP session's own idle timeout governs.
                inactivity_timeout: None,
                nodelay: true,
                ..Default::default()
            })
        })
        .clone()
}

/// The server side: every exec request runs `run_exec` as `identity`.
struct Loopback {
    app: Arc<App>,
    identity: Identity,
    /// This session's number, which its calls run under
    /// (`service::Context::mcp_session`).
    session: u64,
    run_exec: RunExec,
    channels: HashMap<ChannelId, Channel<Msg>>,
    /// Each channel's call number (`CALL_ENV`).
    calls: HashMap<ChannelId, u64>,
    tokens: Tokens,
    /// The verbs running, stopped when their call closes its channel or
    /// the MCP session ends (this handler is dropped).
    callers: Callers,
}

impl russh::server::Handler for Loopback {
    type Error = anyhow::Error;

    async fn auth_none(&mut self, _user: &str) -> Result<Auth, Self::Error> {
        Ok(Auth::Accept)
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.channels.insert(channel.id(), channel);
        reply.accept().await;
        Ok(())
    }

    async fn channel_close(&mut self, id: ChannelId, _s: &mut Session) -> Result<(), Self::Error> {
        self.callers.leave(id);
        self.channels.remove(&id);
        self.calls.remove(&id);
        Ok(())
    }

    async fn env_request(
        &mut self,
        id: ChannelId,
        name: &str,
        value: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        match value.parse() {
            Ok(call) if name == CALL_ENV && self.channels.contains_key(&id) => {
                self.calls.insert(id, call);
                session.channel_success(id)?;
            }
            _ => session.channel_failure(id)?,
        }
        Ok(())
    }

    async fn exec_request(
        &mut self,
        id: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let Some(channel) = self.channels.remove(&id) else {
            session.channel_failure(id)?;
            return Ok(());
        };
        session.channel_success(id)?;
        // The call's token; none when the call has been given up before
        // its verb could start (its `VerbEnd` took the token back).
        let token = self
            .calls
            .remove(&id)
            .and_then(|call| lock(&self.tokens).remove(&call));
        let app = self.app.clone();
        let identity = self.identity.clone();
        // The same checks as `ssh::Connection::exec_request`: a key taken
        // out of authorized_keys or governance loses its MCP session's
        // calls at once, as it would its next ssh command.
        let refusal = if app.stopping.is_stopped() {
            Some("error: the server is shutting down")
        } else if !authz::is_admitted(&app, &identity) {
            Some("error: this key is no longer admitted")
        } else if token.is_none() {
            Some("error: the call was cancelled")
        } else {
            None
        };
        if let Some(message) = refusal {
            tokio::spawn(reply_and_close(channel, message, 1));
            return Ok(());
        }
        let guard = app.work.track();
        let raw = data.to_vec();
        let handle = session.handle();
        let run_exec = self.run_exec;
        let left = self.callers.arrive(id);
        let env = ChannelEnv::default();
        let mcp_session = Some(self.session);
        tokio::spawn(async move {
            let caller = authz::caller_for(&app, identity);
            let mut call = crate::service::Context::new(app, caller);
            call.mcp_session = mcp_session;
            let ctx = ExecContext {
                call,
                env,
                session: handle,
            };
            run_exec(ctx, channel, raw, left).await;
            drop(guard);
            // Last: the call may give its slot up now.
            drop(token);
        });
        Ok(())
    }
}

/// The client side of the memory pipe accepts the one host key there is.
struct Trusting;

impl client::Handler for Trusting {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        _key: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

fn lock(tokens: &Tokens) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<()>>> {
    tokens.lock().unwrap_or_else(|e| e.into_inner())
}

/// One MCP session's way to the verbs.
pub struct Verbs {
    handle: client::Handle<Trusting>,
    /// This session's number, which its calls run under
    /// (`service::Context::mcp_session`).
    number: u64,
    next_call: AtomicU64,
    tokens: Tokens,
}

/// Resolves once the verb started for one call has ended (`wait`).
pub struct VerbEnd {
    call: u64,
    tokens: Tokens,
    ended: Option<oneshot::Receiver<()>>,
}

impl VerbEnd {
    /// Wait until the verb's task has ended: at once if it never started
    /// (its token is taken back, so it never will).
    pub async fn wait(mut self) {
        if lock(&self.tokens).remove(&self.call).is_some() {
            return;
        }
        if let Some(ended) = self.ended.take() {
            // Err: the token was dropped, which is the verb's end.
            let _ = ended.await;
        }
    }
}

impl Drop for VerbEnd {
    fn drop(&mut self) {
        lock(&self.tokens).remove(&self.call);
    }
}

impl Verbs {
    /// Start the in-process session for `identity`.
    pub async fn connect(
        app: Arc<App>,
        identity: Identity,
        run_exec: RunExec,
    ) -> anyhow::Result<Verbs> {
        let (server_end, client_end) = tokio::io::duplex(PIPE);
        let tokens = Tokens::default();
        // Numbers only tell this process's sessions apart.
        static SESSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let number = SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let handler = Loopback {
            app,
            identity,
            session: number,
            run_exec,
            channels: HashMap::new(),
            calls: HashMap::new(),
            tokens: tokens.clone(),
            callers: Callers::default(),
        };
        let config = Arc::new(client::Config {
            inactivity_timeout: None,
            preferred: in_process(),
            ..Default::default()
        });
        // Both ends at once: each waits for the other's version line.
        let (running, handle) = tokio::join!(
            russh::server::run_stream(server_config(), server_end, handler),
            client::connect_stream(config, client_end, Trusting),
        );
        let running = running?;
        let mut handle = handle?;
        tokio::spawn(async move {
            if let Err(e) = running.await {
                tracing::debug!("mcp loopback session: {e:#}");
            }
        });
        let auth = handle.authenticate_none("mcp").await?;
        anyhow::ensure!(auth.success(), "the loopback session refused its caller");
        Ok(Verbs {
            handle,
            number,
            next_call: AtomicU64::new(0),
            tokens,
        })
    }

    /// This session's number (`service::Context::mcp_session`).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Start `line` on a new channel, with `stdin` (then EOF) when given;
    /// closing the channel stops the verb, and the [`VerbEnd`] says when
    /// it has.
    pub async fn start(
        &self,
        line: &str,
        stdin: Option<&str>,
    ) -> anyhow::Result<(russh::Channel<client::Msg>, VerbEnd)> {
        let call = self.next_call.fetch_add(1, Ordering::Relaxed);
        let (token, ended) = oneshot::channel();
        lock(&self.tokens).insert(call, token);
        let end = VerbEnd {
            call,
            tokens: self.tokens.clone(),
            ended: Some(ended),
        };
        let channel = self.handle.channel_open_session().await?;
        channel.set_env(false, CALL_ENV, call.to_string()).await?;
        channel.exec(true, line.as_bytes().to_vec()).await?;
        if let Some(text) = stdin {
            channel.data(text.as_bytes()).await?;
        }
        channel.eof().await?;
        Ok((channel, end))
    }
}
