//! How an MCP tool call reaches the verbs: through the same dispatcher an
//! SSH exec request does (`ssh::exec::run_exec`, given as `RunExec`), with the session's
//! identity. The verb handlers answer on russh channels, and russh only
//! makes channels for a session, so each MCP session runs one in-process
//! SSH session over a memory pipe: its server side is [`Loopback`], a
//! handler that knows the caller already (the key that opened the MCP
//! session, re-checked at every call exactly as `ssh::Connection` does),
//! and its client side opens one channel per tool call. Nothing of it
//! listens anywhere; only `mcp::serve` can make one.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;

use russh::client;
use russh::keys::PrivateKey;
use russh::server::{Auth, ChannelOpenHandle, Msg, Session};
use russh::{Channel, ChannelId, ChannelMsg, MethodKind, MethodSet};

use crate::app::App;
use crate::authz;
use crate::identity::Identity;
use crate::ssh::context::{ChannelEnv, ExecContext};
use crate::ssh::reply::reply_and_close;

/// How a verb's command line runs: `ssh::exec::run_exec`, which the SSH
/// dispatcher passes in (`mcp` does not name it: it is named by it).
pub type RunExec = fn(
    ExecContext,
    Channel<Msg>,
    Vec<u8>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

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
    run_exec: RunExec,
    channels: HashMap<ChannelId, Channel<Msg>>,
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
        self.channels.remove(&id);
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
        let app = self.app.clone();
        let identity = self.identity.clone();
        // The same checks as `ssh::Connection::exec_request`: a key taken
        // out of authorized_keys or governance loses its MCP session's
        // calls at once, as it would its next ssh command.
        let refusal = if app.stopping.is_stopped() {
            Some("error: the server is shutting down")
        } else if !authz::is_admitted(&app, &identity) {
            Some("error: this key is no longer admitted")
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
        tokio::spawn(async move {
            let caller = authz::caller_for(&app, identity);
            let ctx = ExecContext {
                app,
                caller,
                env: ChannelEnv::default(),
                session: handle,
            };
            run_exec(ctx, channel, raw).await;
            drop(guard);
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

/// One MCP session's way to the verbs.
pub struct Verbs {
    handle: client::Handle<Trusting>,
}

/// What one verb answered.
#[derive(Debug, Default)]
pub struct Answer {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// `None`: the verb ended without one (it should not).
    pub exit_status: Option<u32>,
    /// Stdout went past the cap and was cut.
    pub truncated: bool,
}

impl Verbs {
    /// Start the in-process session for `identity`.
    pub async fn connect(
        app: Arc<App>,
        identity: Identity,
        run_exec: RunExec,
    ) -> anyhow::Result<Verbs> {
        let (server_end, client_end) = tokio::io::duplex(PIPE);
        let handler = Loopback {
            app,
            identity,
            run_exec,
            channels: HashMap::new(),
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
        Ok(Verbs { handle })
    }

    /// Start `line` on a new channel, with `stdin` (then EOF) when given.
    pub async fn start(
        &self,
        line: &str,
        stdin: Option<&str>,
    ) -> anyhow::Result<russh::Channel<client::Msg>> {
        let channel = self.handle.channel_open_session().await?;
        channel.exec(true, line.as_bytes().to_vec()).await?;
        if let Some(text) = stdin {
            channel.data(text.as_bytes()).await?;
        }
        channel.eof().await?;
        Ok(channel)
    }

    /// Run `line` to its end; stdout is kept up to `max_stdout` bytes.
    /// `None` when `stop` was notified first (the channel is closed).
    pub async fn run(
        &self,
        line: &str,
        stdin: Option<&str>,
        max_stdout: usize,
        stop: &Notify,
    ) -> anyhow::Result<Option<Answer>> {
        let mut channel = self.start(line, stdin).await?;
        let mut answer = Answer::default();
        loop {
            let msg = tokio::select! {
                msg = channel.wait() => msg,
                _ = stop.notified() => {
                    let _ = channel.close().await;
                    return Ok(None);
                }
            };
            let Some(msg) = msg else { break };
            match msg {
                ChannelMsg::Data { data } => {
                    if answer.stdout.len() + data.len() > max_stdout {
                        answer.truncated = true;
                        break;
                    }
                    answer.stdout.extend_from_slice(&data);
                }
                // One error line is all a verb sends there.
                ChannelMsg::ExtendedData { data, ext: 1 } if answer.stderr.len() < 64 * 1024 => {
                    answer.stderr.extend_from_slice(&data);
                }
                ChannelMsg::ExitStatus { exit_status } => answer.exit_status = Some(exit_status),
                ChannelMsg::Close => break,
                _ => {}
            }
        }
        let _ = channel.close().await;
        Ok(Some(answer))
    }
}
