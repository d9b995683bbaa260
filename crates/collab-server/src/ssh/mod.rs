//! The SSH server (russh): the accept loop with clean shutdown, and the
//! per-connection `Connection` handler.
//!
//! Authentication is public key only. `auth_publickey_offered` (key not yet
//! proven) only answers whether a key would be admitted; the identity is
//! bound in `auth_publickey`, after russh has verified the signature, and
//! only to that key (GHSA-pchf-49fh-w34r: never to a key merely offered).
//! An OpenSSH user certificate is decided in `auth_openssh_certificate`,
//! also after the signature (`identity::certs` says whether it admits,
//! and as which principal); with a CA configured every offer is let
//! through to the signature, since russh shows the offer without its
//! certificate. Host certificates (`ssh.host_certificate`) are russh's to
//! present.
//! Exec requests go to `exec::run_exec`, which stops the command when its
//! client closes the channel or the connection goes (`leaving`); a
//! channel with a pty that asks
//! for a shell or runs `tui` gets the terminal UI (`crate::tui`), any
//! other command on a pty and a shell without one get a hint;
//! every other channel request is refused with an answer when one is
//! wanted.
//!
//! Limits (see `crate::limits`): a connection is accepted only within
//! `ssh.max_connections`, and while it has not authenticated it also holds
//! a `MaxStartups` place (`ssh.max_startups`, `ssh.max_startups_per_ip`),
//! released by a successful login; `ssh.login_grace_time` bounds how long
//! it may hold it. A connection whose address has every handshake place
//! taken waits in that address's queue (`ssh.max_queued_per_ip`) instead of
//! being reset, once it has sent its version line (within 2 s: an idle one
//! is dropped), until a place frees or the login grace time ends. One connection may have `ssh.max_sessions` channels
//! open; more are refused with `resource shortage`.
//!
//! Fair shares: once authenticated, a connection also holds one of its
//! key's `ssh.max_connections_per_principal` places; past that share the
//! login is answered with a disconnect naming the limit, so one key cannot
//! hold every connection slot. Authenticated connections with no channel
//! open are closed after `ssh.idle_timeout`, sooner near the cap
//! (`limits::idle`; the reaper runs in `serve`).

// The verb families the service answers (`crate::service`), by the names
// the SSH side has always used.
pub use crate::service::{
    admin, check, command, issue, lease, mirror, patch, queue, search, webhook,
};
pub mod call;
pub mod context;
pub mod exec;
pub mod git;
mod git_v2;
pub mod leaving;
pub mod lfs;
mod lfs_locks;
mod quick_ack;
pub mod release;
pub mod reply;
pub mod watch;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use russh::keys::ssh_key::Certificate;
use russh::keys::PrivateKey;
use russh::server::{Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId, ChannelOpenFailure, Disconnect, MethodKind, MethodSet, SshId};
use tokio::task::JoinSet;

use crate::app::App;
use crate::authz;
use crate::identity::{fingerprint, Identity};
use crate::limits::idle::{self, Activity, IdleConn};
use crate::limits::{self, ConnPermit, Share};
use crate::shutdown::DRAIN_LIMIT;
use crate::shutdown::{stop_pair, Stop};
use context::{ChannelEnv, ExecContext, PtyRequest};
use reply::reply_and_close;

/// The one-line answer to a shell without a pty, and to any verb but
/// `tui` on a pty.
pub const SHELL_HINT: &str = "error: git-collab-server has no shell; use git over ssh, a verb such as `ssh HOST collab-whoami`, or the terminal UI: `ssh -t HOST`";

/// The transport ciphers of `ssh.ciphers`, in its order. The config
/// checked every name against `config::keys::SSH_CIPHERS`, which lists only
/// names russh speaks; the client's order picks among those offered, so
/// leaving one out is how an operator steers clients away from it
/// (docs/git-traffic.md: AES-GCM costs a clone storm half the CPU of
/// ChaCha20-Poly1305 on a machine with AES instructions).
fn ciphers(names: &[String]) -> Vec<russh::cipher::Name> {
    names
        .iter()
        .filter_map(|name| russh::cipher::Name::try_from(name.as_str()).ok())
        .collect()
}

/// Host and user-signature algorithms. `ssh-rsa` (RSA with SHA-1) is left
/// out unless the operator allows it (`ssh.allow_sha1_rsa`), as OpenSSH
/// >= 8.8 does; RSA keys still work with rsa-sha2-256/512.
fn key_algorithms(allow_sha1_rsa: bool) -> Vec<russh::keys::Algorithm> {
    use russh::keys::{Algorithm, EcdsaCurve, HashAlg};
    let mut algorithms = vec![
        Algorithm::Ed25519,
        Algorithm::Ecdsa {
            curve: EcdsaCurve::NistP256,
        },
        Algorithm::Ecdsa {
            curve: EcdsaCurve::NistP384,
        },
        Algorithm::Ecdsa {
            curve: EcdsaCurve::NistP521,
        },
        Algorithm::Rsa {
            hash: Some(HashAlg::Sha512),
        },
        Algorithm::Rsa {
            hash: Some(HashAlg::Sha256),
        },
    ];
    if allow_sha1_rsa {
        algorithms.push(Algorithm::Rsa { hash: None });
    }
    algorithms
}

fn russh_config(
    host_keys: Vec<PrivateKey>,
    host_certificates: Vec<Certificate>,
    ssh: &crate::config::SshConfig,
) -> russh::server::Config {
    let allow_sha1_rsa = ssh.allow_sha1_rsa;
    let preferred = russh::Preferred {
        cipher: ciphers(&ssh.ciphers).into(),
        key: key_algorithms(allow_sha1_rsa).into(),
        ..russh::Preferred::DEFAULT
    };
    russh::server::Config {
        server_id: SshId::Standard("SSH-2.0-git-collab".into()),
        keys: host_keys,
        // Offered first to clients that trust a host CA (@cert-authority).
        certificates: host_certificates,
        preferred,
        methods: MethodSet::from(&[MethodKind::PublicKey][..]),
        auth_rejection_time: Duration::from_secs(1),
        // OpenSSH probes "none" first; don't make every login wait for it.
        auth_rejection_time_initial: Some(Duration::from_secs(0)),
        inactivity_timeout: Some(Duration::from_secs(3600)),
        nodelay: true,
        ..Default::default()
    }
}

/// Accept SSH connections until `stopping` fires; then stop accepting, let
/// running commands finish (at most `DRAIN_LIMIT`) and disconnect the rest.
pub async fn serve(
    app: Arc<App>,
    host_keys: Vec<PrivateKey>,
    host_certificates: Vec<Certificate>,
    listener: tokio::net::TcpListener,
    stopping: Stop,
) -> anyhow::Result<()> {
    let config = Arc::new(russh_config(host_keys, host_certificates, &app.config.ssh));
    let login_grace = app.config.ssh.login_grace_time;
    let (disconnect_all, disconnecting) = stop_pair();
    let mut sessions = JoinSet::new();
    let registry = Registry::default();
    let reaper = tokio::spawn(reap_idle(app.clone(), registry.clone(), stopping.clone()));
    loop {
        tokio::select! {
            _ = stopping.clone().wait() => break,
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
            accepted = listener.accept() => {
                let (socket, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: back off, keep serving.
                        tracing::warn!("ssh accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Some((connection, turn)) = admit(&app, peer) else {
                    drop(socket);
                    continue;
                };
                // `Config::nodelay` is applied only by russh's own accept
                // loop; without it a reply's last small packets wait for a
                // delayed ACK (~40 ms per command on a shared connection).
                if let Err(e) = socket.set_nodelay(config.nodelay) {
                    tracing::debug!("ssh set_nodelay for {peer}: {e}");
                }
                let authenticated = Arc::new(AtomicBool::new(false));
                let shared = Arc::new(Shared::default());
                let app = app.clone();
                let config = config.clone();
                let disconnecting = disconnecting.clone();
                let registry = registry.clone();
                sessions.spawn(async move {
                    // Held until the session ends, however it ends.
                    let _connection = connection;
                    let started = tokio::time::Instant::now();
                    let startup = match turn {
                        Turn::Now(startup) => startup,
                        Turn::Queued(queued) => {
                            match wait_turn(&app, &socket, peer, started + login_grace, queued).await {
                                Some(startup) => startup,
                                None => return,
                            }
                        }
                    };
                    let handler = Connection::new(
                        app.clone(),
                        peer,
                        authenticated.clone(),
                        startup,
                        shared.clone(),
                    );
                    let socket = quick_ack::QuickAck::new(socket);
                    let stream = russh::server::run_stream(config, socket, handler);
                    let session = match tokio::time::timeout(login_grace, stream).await {
                        Ok(Ok(s)) => {
                            crate::metrics::ssh_session_opened();
                            s
                        }
                        Ok(Err(e)) => {
                            tracing::debug!("ssh handshake with {peer}: {e:#}");
                            return;
                        }
                        Err(_) => {
                            tracing::info!("ssh: {peer} sent no version line in time");
                            return;
                        }
                    };
                    let handle = session.handle();
                    // Known to the idle reaper until the session ends.
                    let _registered = registry.add(shared, handle.clone());
                    // Like OpenSSH's LoginGraceTime: a connection that has not
                    // authenticated in time is dropped, so silent or stalled
                    // clients cannot pile up.
                    let grace = async {
                        tokio::time::sleep_until(started + login_grace).await;
                        if authenticated.load(Ordering::Acquire) {
                            std::future::pending::<()>().await;
                        }
                    };
                    tokio::select! {
                        result = session => {
                            if let Err(e) = result {
                                tracing::debug!("ssh session with {peer}: {e:#}");
                            }
                        }
                        _ = disconnecting.wait() => {
                            let _ = handle
                                .disconnect(Disconnect::ByApplication, "server shutting down".into(), String::new())
                                .await;
                        }
                        _ = grace => {
                            tracing::info!("ssh: {peer} did not authenticate in time");
                            let _ = handle
                                .disconnect(Disconnect::ByApplication, "authentication timed out".into(), String::new())
                                .await;
                        }
                    }
                });
            }
        }
    }
    drop(listener);
    reaper.abort();
    if !app.work.wait_idle(DRAIN_LIMIT).await {
        tracing::warn!(
            "{} commands still running; disconnecting",
            app.work.in_flight()
        );
    }
    // A finished command's last messages (exit status, close) are queued,
    // not yet sent: let clients hang up by themselves first.
    if !all_closed(&mut sessions, Duration::from_secs(1)).await {
        disconnect_all.trigger();
        all_closed(&mut sessions, Duration::from_secs(1)).await;
    }
    Ok(())
}

/// When a connection admitted by `admit` may start its handshake.
enum Turn {
    /// Now: it holds its `MaxStartups` place.
    Now(ConnPermit),
    /// When one of its address's handshake places frees up: it holds a
    /// place in the address's queue meanwhile.
    Queued(ConnPermit),
}

/// How long a queued connection has to send its SSH version line (every
/// client sends it on connecting, unprompted): one that has not is an idle
/// flood and is dropped, rather than held for the login grace time.
const QUEUED_VERSION_WAIT: Duration = Duration::from_secs(2);

/// Admit a new connection from `peer`: a place under `ssh.max_connections`,
/// and a `MaxStartups` place (released at login), or, when its address
/// has all its handshake places (`ssh.max_startups_per_ip`) taken, a place
/// in that address's queue (`ssh.max_queued_per_ip`). `None` (logged and
/// counted) when a limit refuses it; the caller closes the socket.
fn admit(app: &App, peer: SocketAddr) -> Option<(ConnPermit, Turn)> {
    let limits = &app.limits;
    let connection = match limits.ssh_conns.try_admit(peer.ip(), 0) {
        Ok(p) => p,
        Err(refusal) => {
            let open = limits.ssh_conns.open();
            limits::note_refusal("ssh", refusal.label(), || {
                format!("refused {peer} ({open} connections open)")
            });
            return None;
        }
    };
    // A fleet behind one address logging in at once waits its turn
    // instead of being reset (OpenSSH's client does not retry).
    if !limits.ssh_startups.client_has_room(peer.ip()) {
        return match limits.ssh_queued.try_admit(peer.ip(), 0) {
            Ok(queued) => Some((connection, Turn::Queued(queued))),
            Err(_) => {
                limits::note_refusal("ssh_startups", "per_ip", || {
                    format!("dropped {peer}: its address has a full handshake queue")
                });
                None
            }
        };
    }
    match limits.ssh_startups.try_admit(peer.ip(), limits::roll()) {
        Ok(startup) => Some((connection, Turn::Now(startup))),
        Err(refusal) => {
            let waiting = limits.ssh_startups.open();
            limits::note_refusal("ssh_startups", refusal.label(), || {
                format!("dropped {peer} ({waiting} connections not authenticated yet)")
            });
            None
        }
    }
}

/// Hold a queued connection until its address has a handshake place free
/// (and the server is under `MaxStartups`' `full`): its `MaxStartups` place,
/// or `None` (logged and counted) when it sent no version line in time or
/// its turn did not come before `deadline` (the login grace time).
async fn wait_turn(
    app: &App,
    socket: &tokio::net::TcpStream,
    peer: SocketAddr,
    deadline: tokio::time::Instant,
    queued: ConnPermit,
) -> Option<ConnPermit> {
    let version_by = (tokio::time::Instant::now() + QUEUED_VERSION_WAIT).min(deadline);
    if !sent_version_line(socket, version_by).await {
        limits::note_refusal("ssh_startups", "queued_idle", || {
            format!("dropped {peer}: queued, and sent no version line")
        });
        return None;
    }
    let limits = &app.limits;
    let turn = limits.ssh_startups.admit_waiting(peer.ip(), deadline).await;
    drop(queued);
    match turn {
        Ok(startup) => Some(startup),
        Err(refusal) => {
            let label = match refusal {
                limits::conns::Refusal::Total => "queue_timeout_full",
                _ => "queue_timeout",
            };
            limits::note_refusal("ssh_startups", label, || {
                format!("dropped {peer}: queued, and its turn did not come ({label})")
            });
            None
        }
    }
}

/// Whether the client's SSH version line (`SSH-2.0-…\r\n`) has arrived
/// by `by`, looked at without reading it (russh reads it later).
async fn sent_version_line(socket: &tokio::net::TcpStream, by: tokio::time::Instant) -> bool {
    let mut buf = [0u8; 256];
    let look = async {
        loop {
            match socket.peek(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) if buf[..n].contains(&b'\n') || n == buf.len() => return true,
                // Part of a line: look again shortly.
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    tokio::time::timeout_at(by, look).await.unwrap_or(false)
}

/// What the accept loop and the idle reaper share with a `Connection`.
#[derive(Default)]
struct Shared {
    /// The key's fingerprint, set once the login holds its share.
    principal: OnceLock<String>,
    /// Channels open (each a `ChannelSlot`) and since when.
    activity: Arc<Activity>,
    /// Told to disconnect by the reaper: it still counts as open until its
    /// client has gone, but must not be chosen (or counted) again.
    closing: AtomicBool,
}

/// A live session: what it shares, and how to disconnect it.
type Live = (Arc<Shared>, russh::server::Handle);

/// The live SSH sessions the idle reaper looks at.
#[derive(Clone, Default)]
struct Registry {
    next: Arc<AtomicU64>,
    live: Arc<Mutex<HashMap<u64, Live>>>,
}

/// A session in the registry; dropping it takes it out.
struct Registered {
    id: u64,
    registry: Registry,
}

impl Registry {
    fn add(&self, shared: Arc<Shared>, handle: russh::server::Handle) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, (shared, handle));
        Registered {
            id,
            registry: self.clone(),
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

/// Close idle authenticated connections (see `limits::idle`), looking
/// every `IdlePolicy::tick`, until the server stops.
async fn reap_idle(app: Arc<App>, registry: Registry, stopping: Stop) {
    let policy = app.limits.ssh_idle;
    let mut tick = tokio::time::interval(policy.tick());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stopping.clone().wait() => return,
            _ = tick.tick() => {}
        }
        let now = tokio::time::Instant::now();
        let mut closing = 0;
        let (candidates, handles): (Vec<IdleConn>, HashMap<u64, Live>) = {
            let live = registry.live.lock().unwrap_or_else(|e| e.into_inner());
            live.iter()
                .filter_map(|(id, (shared, handle))| {
                    if shared.closing.load(Ordering::Acquire) {
                        closing += 1;
                        return None;
                    }
                    // Unauthenticated ones are the login grace time's.
                    let principal = shared.principal.get()?;
                    let idle_for = shared.activity.idle_for(now)?;
                    let conn = IdleConn {
                        id: *id,
                        principal_holds: app.limits.ssh_per_principal.held(principal),
                        idle_for,
                    };
                    Some((conn, (*id, (shared.clone(), handle.clone()))))
                })
                .unzip()
        };
        if candidates.is_empty() {
            continue;
        }
        // Connections already told to go are on their way out: without
        // this, a slow client would make the next look reclaim one more.
        let open = app.limits.ssh_conns.open().saturating_sub(closing);
        for (id, why) in idle::victims(&policy, open, candidates) {
            let Some((shared, handle)) = handles.get(&id) else {
                continue;
            };
            shared.closing.store(true, Ordering::Release);
            crate::metrics::ssh_idle_closed(why.label());
            tracing::debug!("ssh: closing an idle connection ({})", why.label());
            let _ = handle
                .disconnect(
                    Disconnect::ByApplication,
                    why.message(&policy),
                    String::new(),
                )
                .await;
        }
    }
}

/// Wait up to `limit` for every session task to end.
async fn all_closed(sessions: &mut JoinSet<()>, limit: Duration) -> bool {
    let wait = async { while sessions.join_next().await.is_some() {} };
    tokio::time::timeout(limit, wait).await.is_ok()
}

/// Log a refused key at info level with its fingerprint, so an operator
/// can admit it; at most [`REFUSED_LOG_BURST`] lines per minute, so a
/// stranger cycling keys cannot flood the log.
fn log_refused_key(peer: &SocketAddr, fingerprint: &str, why: &str) {
    rate_limited(|| tracing::info!(peer = %peer, key = fingerprint, "ssh key refused: {why}"));
}

/// Log a refused certificate: its own line (not "key refused"), with what
/// the operator needs to find it (key id, serial, CA) and why.
fn log_refused_certificate(peer: &SocketAddr, cert: &Certificate, why: &str) {
    let ca = fingerprint(&russh::keys::ssh_key::PublicKey::new(
        cert.signature_key().clone(),
        "",
    ));
    // The key id is the CA's text: quoted (`?`) so it cannot forge a line.
    rate_limited(|| {
        tracing::info!(
            peer = %peer,
            key_id = ?cert.key_id(),
            serial = cert.serial(),
            ca = ca,
            "ssh certificate refused: {why}"
        )
    });
}

/// Run `log` at most [`REFUSED_LOG_BURST`] times a minute (refusals of
/// keys and certificates together), then say how many were left out.
fn rate_limited(log: impl FnOnce()) {
    static WINDOW: std::sync::Mutex<(Option<std::time::Instant>, u32)> =
        std::sync::Mutex::new((None, 0));
    let mut window = WINDOW.lock().unwrap_or_else(|e| e.into_inner());
    let now = std::time::Instant::now();
    if window
        .0
        .is_none_or(|start| now.duration_since(start) >= Duration::from_secs(60))
    {
        if window.1 > REFUSED_LOG_BURST {
            tracing::info!(
                "ssh: {} more refused keys not logged",
                window.1 - REFUSED_LOG_BURST
            );
        }
        *window = (Some(now), 0);
    }
    window.1 += 1;
    if window.1 <= REFUSED_LOG_BURST {
        log();
    }
}

/// Refused-key log lines per minute.
const REFUSED_LOG_BURST: u32 = 20;

/// One SSH connection.
pub struct Connection {
    app: Arc<App>,
    peer: SocketAddr,
    /// Set only by `auth_publickey`, from the key whose signature verified.
    identity: Option<Identity>,
    /// Raised with `identity`; the accept loop's login grace timer reads it.
    authenticated: Arc<AtomicBool>,
    /// The `MaxStartups` place, held until the login succeeds.
    startup: Option<ConnPermit>,
    /// One of the key's `ssh.max_connections_per_principal` places, held
    /// for the connection's life once the login is in.
    _principal_share: Option<Share>,
    /// Set when the login succeeded past the key's share: the one line the
    /// client is disconnected with.
    over_share: Option<String>,
    /// Channels open on this connection (for `ssh.max_sessions` and the
    /// idle reaper). Each holds a `ChannelSlot`: in `slots` until a command
    /// takes the channel, then in the command's task. russh reports only
    /// client-initiated closes, so the count must follow the command, not
    /// `channel_close`.
    shared: Arc<Shared>,
    slots: HashMap<ChannelId, ChannelSlot>,
    /// The commands running on this connection, stopped when the client
    /// closes their channel or when this connection is dropped (`leaving`).
    callers: leaving::Callers,
    channels: HashMap<ChannelId, Channel<Msg>>,
    envs: HashMap<ChannelId, ChannelEnv>,
    /// Channels that asked for a pty: a shell or `tui` gets the terminal
    /// UI, any other exec the hint.
    ptys: HashMap<ChannelId, PtyRequest>,
}

impl Connection {
    fn new(
        app: Arc<App>,
        peer: SocketAddr,
        authenticated: Arc<AtomicBool>,
        startup: ConnPermit,
        shared: Arc<Shared>,
    ) -> Self {
        Connection {
            app,
            peer,
            identity: None,
            authenticated,
            startup: Some(startup),
            _principal_share: None,
            over_share: None,
            shared,
            slots: HashMap::new(),
            callers: leaving::Callers::default(),
            channels: HashMap::new(),
            envs: HashMap::new(),
            ptys: HashMap::new(),
        }
    }

    /// Bind the connection to `identity`, whose key (or certificate) has
    /// just been verified and admitted. The principal's share of
    /// connections: past it the login goes through only to be answered
    /// with a disconnect that says why (`auth_succeeded`); a rejected key
    /// would read "Permission denied".
    fn log_in(&mut self, identity: Identity) -> Auth {
        let peer = self.peer;
        let share_key = identity.share_key();
        let share = match self
            .app
            .limits
            .ssh_per_principal
            .take("ssh", &share_key, |limit| {
                format!("refused a connection from {peer}: {limit} open with this key")
            }) {
            Ok(share) => share,
            Err(limit) => {
                self.over_share = Some(format!(
                    "too many connections with this key ({limit} open); close one and try again"
                ));
                return Auth::Accept;
            }
        };
        self._principal_share = Some(share);
        let _ = self.shared.principal.set(share_key);
        self.identity = Some(identity);
        self.authenticated.store(true, Ordering::Release);
        // Authenticated: no longer one of the MaxStartups.
        self.startup = None;
        Auth::Accept
    }

    /// Take the channel out of the map and answer on it in the background.
    fn reply_on(&mut self, id: ChannelId, message: &'static str) {
        if let Some(channel) = self.channels.remove(&id) {
            let slot = self.slots.remove(&id);
            self.envs.remove(&id);
            self.ptys.remove(&id);
            tokio::spawn(async move {
                reply_and_close(channel, message, 1).await;
                drop(slot);
            });
        }
    }

    /// Run one command line on channel `id` (an exec request, or `tui` for
    /// a shell on a pty) as the authenticated caller.
    fn run_command(
        &mut self,
        id: ChannelId,
        data: &[u8],
        pty: Option<PtyRequest>,
        session: &mut Session,
    ) -> Result<(), anyhow::Error> {
        let (Some(identity), Some(channel)) = (self.identity.clone(), self.channels.remove(&id))
        else {
            session.channel_failure(id)?;
            return Ok(());
        };
        // Accept the request and answer on the channel: a refused exec
        // request shows the user nothing but "exec request failed".
        session.channel_success(id)?;
        let mut env = self.envs.remove(&id).unwrap_or_default();
        env.pty = pty;
        let slot = self.slots.remove(&id);
        let app = self.app.clone();
        let refusal = if app.stopping.is_stopped() {
            Some("error: the server is shutting down")
        } else if !authz::is_admitted(&app, &identity) {
            Some("error: this key is no longer admitted")
        } else {
            None
        };
        if let Some(message) = refusal {
            tokio::spawn(async move {
                reply_and_close(channel, message, 1).await;
                drop(slot);
            });
            return Ok(());
        }
        let guard = app.work.track();
        let raw = data.to_vec();
        let handle = session.handle();
        let left = self.callers.arrive(id);
        tokio::spawn(async move {
            let caller = authz::caller_for(&app, identity);
            let ctx = ExecContext {
                call: crate::service::Context::new(app, caller),
                env,
                session: handle,
            };
            exec::run_exec(ctx, channel, raw, left).await;
            drop(guard);
            drop(slot);
        });
        Ok(())
    }
}

/// One open channel counted against `ssh.max_sessions`; dropping it (the
/// command finished, or the client closed the channel) frees the place.
struct ChannelSlot(Arc<Activity>);

impl ChannelSlot {
    fn open(activity: &Arc<Activity>) -> ChannelSlot {
        activity.opened();
        ChannelSlot(activity.clone())
    }
}

impl Drop for ChannelSlot {
    fn drop(&mut self) {
        self.0.closed();
    }
}

impl russh::server::Handler for Connection {
    type Error = anyhow::Error;

    async fn auth_publickey_offered(
        &mut self,
        _user: &str,
        offer: PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        // Ownership is not proven here: answer the probe, bind nothing.
        let fp = fingerprint(offer.public_key);
        if *offer.algorithm == (russh::keys::Algorithm::Rsa { hash: None })
            && !self.app.config.ssh.allow_sha1_rsa
        {
            log_refused_key(&self.peer, &fp, "ssh-rsa (SHA-1) signature");
            return Ok(Auth::reject());
        }
        match authz::admission(&self.app, offer.public_key.key_data(), self.peer.ip()) {
            Ok(()) => Ok(Auth::Accept),
            // russh shows us a certificate's key here, not the certificate:
            // with CAs configured any key may be one, so let the client
            // sign; `auth_publickey` or `auth_openssh_certificate` decides.
            Err(_)
                if self.app.certs.enabled()
                    && self
                        .app
                        .certs
                        .key_revoked(offer.public_key.key_data())
                        .is_none() =>
            {
                Ok(Auth::Accept)
            }
            Err(why) => {
                log_refused_key(&self.peer, &fp, &why);
                Ok(Auth::reject())
            }
        }
    }

    async fn auth_publickey(
        &mut self,
        _user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        let fp = fingerprint(key.public_key);
        if let Err(why) = authz::admission(&self.app, key.public_key.key_data(), self.peer.ip()) {
            log_refused_key(&self.peer, &fp, &why);
            return Ok(Auth::reject());
        }
        if *key.algorithm == (russh::keys::Algorithm::Rsa { hash: None })
            && !self.app.config.ssh.allow_sha1_rsa
        {
            log_refused_key(&self.peer, &fp, "ssh-rsa (SHA-1) signature");
            return Ok(Auth::reject());
        }
        tracing::debug!(peer = %self.peer, key = fp, "authenticated");
        Ok(self.log_in(Identity {
            fingerprint: fp,
            key: key.public_key.clone(),
            admin: false,
            peer: self.peer.ip(),
            certificate: None,
        }))
    }

    /// russh has checked the certificate's signature and validity window
    /// (refusing with its own "Certificate is expired or not yet valid"
    /// warning before we see it) and that the client holds its key.
    async fn auth_openssh_certificate(
        &mut self,
        user: &str,
        certificate: &Certificate,
    ) -> Result<Auth, Self::Error> {
        let now = crate::identity::unix_now().max(0) as u64;
        let login = match self.app.certs.check(certificate, user, self.peer.ip(), now) {
            Ok(login) => login,
            Err(why) => {
                log_refused_certificate(&self.peer, certificate, &why);
                return Ok(Auth::reject());
            }
        };
        let key = russh::keys::ssh_key::PublicKey::new(certificate.public_key().clone(), "");
        let fp = fingerprint(&key);
        // The key id is the CA's text: quoted (`?`) so it cannot forge a line.
        tracing::info!(
            peer = %self.peer,
            principal = login.principal,
            key_id = ?login.key_id,
            serial = login.serial,
            ca = login.ca,
            key = fp,
            "ssh certificate login"
        );
        Ok(self.log_in(Identity {
            fingerprint: fp,
            key,
            admin: false,
            peer: self.peer.ip(),
            certificate: Some(login),
        }))
    }

    async fn auth_succeeded(&mut self, session: &mut Session) -> Result<(), Self::Error> {
        if let Some(message) = self.over_share.take() {
            session.disconnect(Disconnect::TooManyConnections, &message, "")?;
        }
        Ok(())
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        if self.identity.is_none() {
            return Ok(()); // dropping `reply` rejects
        }
        let max = self.app.config.ssh.max_sessions;
        if self.shared.activity.channels() >= max {
            let peer = self.peer;
            limits::note_refusal("ssh_channel", "max_sessions", || {
                format!("{peer} asked for more than {max} channels on one connection")
            });
            reply.reject(ChannelOpenFailure::ResourceShortage).await;
            return Ok(());
        }
        self.slots
            .insert(channel.id(), ChannelSlot::open(&self.shared.activity));
        self.channels.insert(channel.id(), channel);
        reply.accept().await;
        Ok(())
    }

    async fn channel_close(&mut self, id: ChannelId, _s: &mut Session) -> Result<(), Self::Error> {
        // The caller left: its command stops (a write to a closed channel
        // would wait for window space forever).
        self.callers.leave(id);
        self.slots.remove(&id);
        self.channels.remove(&id);
        self.envs.remove(&id);
        self.ptys.remove(&id);
        Ok(())
    }

    async fn env_request(
        &mut self,
        id: ChannelId,
        name: &str,
        value: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        if name == "GIT_PROTOCOL" && self.channels.contains_key(&id) {
            self.envs.entry(id).or_default().git_protocol = Some(value.to_string());
            session.channel_success(id)?;
        } else if name == "NO_COLOR" && self.channels.contains_key(&id) {
            // no-color.org: set and not empty, colour is off.
            self.envs.entry(id).or_default().no_color = !value.is_empty();
            session.channel_success(id)?;
        } else {
            session.channel_failure(id)?;
        }
        Ok(())
    }

    async fn exec_request(
        &mut self,
        id: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let pty = self.ptys.remove(&id);
        if pty.is_some() && data.trim_ascii() != b"tui" {
            session.channel_success(id)?;
            self.reply_on(id, SHELL_HINT);
            return Ok(());
        }
        self.run_command(id, data, pty, session)
    }

    async fn shell_request(
        &mut self,
        id: ChannelId,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        match self.ptys.remove(&id) {
            // `ssh -t HOST`: the terminal UI, exactly as `ssh -t HOST tui`.
            Some(pty) => self.run_command(id, b"tui", Some(pty), session),
            None => {
                session.channel_success(id)?;
                self.reply_on(id, SHELL_HINT);
                Ok(())
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn pty_request(
        &mut self,
        id: ChannelId,
        term: &str,
        cols: u32,
        rows: u32,
        _pw: u32,
        _ph: u32,
        _modes: &[(russh::Pty, u32)],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        // Only the terminal UI is served on a pty: the shell or `tui` that
        // follows gets it, any other exec the hint (answering now would
        // make OpenSSH report a failed exec).
        session.channel_success(id)?;
        if self.channels.contains_key(&id) {
            let term = term.chars().take(64).collect();
            self.ptys.insert(id, PtyRequest { term, cols, rows });
        }
        Ok(())
    }

    async fn subsystem_request(
        &mut self,
        id: ChannelId,
        _name: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(id)?;
        self.reply_on(id, "error: unknown command");
        Ok(())
    }

    // Every other channel request is refused, and answered when the client
    // wants an answer (`channel_failure` sends nothing otherwise): a request
    // left unanswered would make the client wait forever, or pair the next
    // reply with the wrong request. Forwarding (X11, agent, TCP, sockets)
    // is never offered: russh refuses those channel opens and global
    // requests by default, and the agent request below.

    async fn x11_request(
        &mut self,
        id: ChannelId,
        _single_connection: bool,
        _x11_auth_protocol: &str,
        _x11_auth_cookie: &str,
        _x11_screen_number: u32,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_failure(id)?;
        Ok(())
    }

    async fn window_change_request(
        &mut self,
        id: ChannelId,
        _cols: u32,
        _rows: u32,
        _pw: u32,
        _ph: u32,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_failure(id)?;
        Ok(())
    }

    async fn signal(
        &mut self,
        id: ChannelId,
        _signal: russh::Sig,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_failure(id)?;
        Ok(())
    }
}

#[cfg(test)]
mod cipher_tests {
    use crate::config::keys::SSH_CIPHERS;

    /// `ssh.ciphers` only accepts names russh speaks, so none is dropped
    /// on the way to the transport.
    #[test]
    fn every_configurable_cipher_is_one_russh_speaks() {
        let names: Vec<String> = SSH_CIPHERS.iter().map(|s| s.to_string()).collect();
        let offered = super::ciphers(&names);
        let offered: Vec<&str> = offered.iter().map(|n| n.as_ref()).collect();
        assert_eq!(offered, SSH_CIPHERS);
    }
}
