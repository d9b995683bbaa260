//! `git-lfs-transfer '<repo>' upload|download`: git-lfs's pure SSH
//! transfer (git-lfs >= 3.0), on the same login as git's own transport.
//!
//! The server advertises `version=1` and `locking`, then answers requests
//! until `quit`: `version`, `batch` (which objects to send or fetch),
//! `put-object`, `verify-object`, `get-object`, and the lock commands
//! (`lfs_locks`). Every answer starts with `status <http code>`; a
//! refusal is that status, a delimiter and one line, and the session goes
//! on. Only a stream that is not pkt-lines ends it, with one `error:` line
//! on stderr and exit status 1.
//!
//! Access is decided once, for the session: `download` needs read,
//! `upload` (objects and locks) write; a repository the caller may not
//! read is the one not-found reply, as for every verb. Objects stream
//! through: an upload goes from the channel to a blocking writer through a
//! small bounded queue ([`QUEUED_CHUNKS`]), a download from the file to
//! the channel in packets, each waiting for the client's window. Storage
//! and its guarantees (nothing partial visible, nothing stored lost) are
//! `lfs::store`'s; the limits (`lfs.max_object_size`, `lfs.max_repo_size`)
//! are checked at `batch` and again at each `put-object`.

use russh::server::Msg;
use russh::Channel;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite};

use super::context::{authorize_or_reply, ExecContext};
use super::reply::{reply_and_close, reply_on};
use crate::lfs::pktline::{self, FrameError, Packet, Writer, MAX_PAYLOAD};
use crate::lfs::store::{valid_oid, Incoming, LfsStore, UploadError, Usage};
use crate::repos::RepoEntry;
use crate::service::command::LfsOperation;

/// The reply to `git-lfs-authenticate`, which older git-lfs runs to get an
/// HTTP endpoint and a token: there is none.
pub const AUTHENTICATE: &str =
    "error: git-lfs-authenticate: this server has no LFS HTTP endpoint; \
                                use the SSH transfer (git-lfs >= 3.0)";

/// Arguments one request may carry.
const MAX_ARGS: usize = 32;
/// Objects one `batch` may name (git-lfs sends 100 at a time).
pub(super) const MAX_BATCH: usize = 10_000;
/// Upload packets queued between the channel and the disk writer.
const QUEUED_CHUNKS: usize = 8;

/// Uploads check the repository's quota and become visible one at a time,
/// so two uploads cannot both fit in the last bytes of it.
static COMMIT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One request: its command line, its arguments, and whether a delimiter
/// followed them (lines or data come next, up to a flush).
pub(super) struct Request {
    pub command: String,
    pub args: Vec<String>,
    pub delim: bool,
}

impl Request {
    /// The value of argument `key` (`key=value`).
    pub fn arg(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find_map(|a| a.strip_prefix(key)?.strip_prefix('='))
    }
}

/// A refused request: its status and one line for the user.
pub(super) struct Refusal {
    pub code: u16,
    pub message: String,
}

pub(super) fn refusal(code: u16, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

/// Why a session ended before `quit`.
pub(super) enum Broken {
    /// The stream is not pkt-lines, or ended inside a request.
    Frame(FrameError),
    /// A request that cannot be answered and leaves the stream unreadable.
    Protocol(String),
}

impl From<FrameError> for Broken {
    fn from(e: FrameError) -> Broken {
        Broken::Frame(e)
    }
}

impl From<std::io::Error> for Broken {
    fn from(e: std::io::Error) -> Broken {
        Broken::Frame(FrameError::Io(e))
    }
}

/// One session's state.
pub(super) struct Session<'a, R, W> {
    pub ctx: &'a ExecContext,
    pub entry: RepoEntry,
    /// The repository's lasting id: where its objects and locks are kept.
    pub repo_id: String,
    pub operation: LfsOperation,
    store: LfsStore,
    input: R,
    pub out: Writer<W>,
    /// Objects this session stored, for the event and the metrics.
    uploaded: Usage,
}

/// Serve one `git-lfs-transfer` session on `channel`.
pub async fn run(ctx: &ExecContext, channel: Channel<Msg>, repo: &str, operation: LfsOperation) {
    let what = match operation {
        LfsOperation::Upload => "git-lfs uploads need",
        LfsOperation::Download => "git-lfs downloads need",
    };
    let needed = operation.needed_access();
    let Some((entry, channel)) = authorize_or_reply(ctx, channel, repo, needed, what).await else {
        return;
    };
    let name = entry.name.clone();
    let repo_id = ctx
        .app
        .writer
        .write("git-lfs repository id", move |conn, now| {
            Ok(collab_store::repo_ids::id_of(conn, &name, now)?)
        })
        .await;
    let repo_id = match repo_id {
        Ok(id) => id,
        Err(e) => {
            tracing::error!(repo = entry.name, "git-lfs-transfer: repository id: {e:#}");
            return reply_and_close(channel, "error: internal error", 1).await;
        }
    };
    let (mut read, write) = channel.split();
    let mut session = Session {
        ctx,
        entry,
        repo_id,
        operation,
        store: LfsStore::new(&ctx.app.config.state_dir),
        input: tokio::io::BufReader::with_capacity(64 * 1024, read.make_reader()),
        out: Writer::new(write.make_writer()),
        uploaded: Usage::default(),
    };
    let ended = session.serve().await;
    let (entry, repo_id, uploaded) = (
        session.entry.clone(),
        session.repo_id.clone(),
        session.uploaded,
    );
    drop(session);
    if uploaded.objects > 0 {
        uploaded_objects(ctx, &entry, &repo_id, uploaded).await;
    }
    match ended {
        Ok(()) => {
            super::reply::note_exit_status(0);
            let _ = write.exit_status(0).await;
            let _ = write.eof().await;
            let _ = write.close().await;
        }
        // The connection is gone: nobody to answer; what it was uploading
        // went with its temporary file.
        Err(Broken::Frame(FrameError::Io(e))) => {
            tracing::info!(
                principal = ctx.caller.principal(),
                repo = entry.name,
                "git-lfs-transfer: {e}"
            );
        }
        // Input ended inside a request (a cut-off upload): refused, if
        // the client still listens.
        Err(Broken::Frame(e)) => {
            tracing::info!(repo = entry.name, "git-lfs-transfer refused: {e}");
            reply_on(write, &format!("error: git-lfs-transfer: {e}"), 1).await;
        }
        Err(Broken::Protocol(why)) => {
            tracing::info!(repo = entry.name, "git-lfs-transfer refused: {why}");
            reply_on(write, &format!("error: git-lfs-transfer: {why}"), 1).await;
        }
    }
}

/// Record `lfs.uploaded` and refresh the repository's metrics.
async fn uploaded_objects(ctx: &ExecContext, entry: &RepoEntry, repo_id: &str, uploaded: Usage) {
    tracing::info!(
        principal = ctx.caller.principal(),
        repo = entry.name,
        objects = uploaded.objects,
        bytes = uploaded.bytes,
        "git-lfs objects stored"
    );
    crate::events::Recorded::lfs_uploaded(
        &entry.name,
        uploaded.objects,
        uploaded.bytes,
        ctx.caller.principal(),
    )
    .record_or_log(&ctx.app.writer)
    .await;
    crate::metrics::lfs_uploaded(uploaded.objects, uploaded.bytes);
    if crate::authz::anonymous_can_read(&ctx.app, entry) {
        let (store, id) = (
            LfsStore::new(&ctx.app.config.state_dir),
            repo_id.to_string(),
        );
        if let Ok(usage) = blocking(move || store.usage(&id)).await {
            crate::metrics::lfs_stored(&entry.name, usage.objects, usage.bytes);
        }
    }
}

/// Run blocking storage work off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// A storage error: logged, and the client gets only `internal error`.
fn internal(e: impl std::fmt::Display) -> Refusal {
    tracing::error!("git-lfs storage: {e}");
    refusal(500, "internal error")
}

/// `size=N` (or the second word of the command line), as a number.
fn size_of(req: &Request, rest: &str) -> Result<u64, Refusal> {
    let given = req.arg("size").or_else(|| rest.split(' ').nth(1));
    match given {
        None => Err(refusal(400, "missing size argument")),
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| refusal(400, format!("invalid size {}", shown(text)))),
    }
}

/// A client's value in a reply: at most 80 characters.
pub(super) fn shown(text: &str) -> String {
    let mut cut: String = text.chars().take(80).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Session<'_, R, W> {
    /// Advertise, then answer requests until `quit`.
    async fn serve(&mut self) -> Result<(), Broken> {
        self.out.line("version=1").await?;
        self.out.line("locking").await?;
        self.out.flush().await?;
        loop {
            let Some(req) = self.next_request().await? else {
                // Closed between requests without `quit`: an end all the same.
                return Ok(());
            };
            let command = req.command.clone();
            let (word, rest) = command.split_once(' ').unwrap_or((&command, ""));
            let upload = self.operation == LfsOperation::Upload;
            match word {
                "quit" => {
                    self.skip_body(&req).await?;
                    self.out.line("status 200").await?;
                    self.out.flush().await?;
                    return Ok(());
                }
                "version" => {
                    self.skip_body(&req).await?;
                    if rest == "1" {
                        self.status(200, &[]).await?;
                    } else {
                        self.refuse(refusal(400, format!("unsupported version {}", shown(rest))))
                            .await?;
                    }
                }
                "batch" => self.batch(&req).await?,
                "put-object" if upload => self.put_object(&req, rest).await?,
                "verify-object" if upload => self.verify_object(&req, rest).await?,
                "get-object" if !upload => self.get_object(&req, rest).await?,
                "lock" if upload => self.lock(&req).await?,
                "unlock" if upload => self.unlock(&req, rest).await?,
                "list-lock" | "list-locks" => self.list_locks(&req).await?,
                "put-object" | "verify-object" | "lock" | "unlock" => {
                    self.skip_body(&req).await?;
                    self.refuse(refusal(
                        403,
                        format!("{word} needs an upload session (git-lfs-transfer … upload)"),
                    ))
                    .await?;
                }
                "get-object" => {
                    self.skip_body(&req).await?;
                    self.refuse(refusal(
                        403,
                        "get-object needs a download session (git-lfs-transfer … download)",
                    ))
                    .await?;
                }
                _ => {
                    self.skip_body(&req).await?;
                    self.refuse(refusal(400, format!("unknown command {}", shown(word))))
                        .await?;
                }
            }
        }
    }

    /// The next request's command and arguments; `None` when the client
    /// closed between requests.
    async fn next_request(&mut self) -> Result<Option<Request>, Broken> {
        let command = match pktline::read(&mut self.input).await? {
            None => return Ok(None),
            Some(Packet::Data(line)) => pktline::text(&line)
                .ok_or_else(|| Broken::Protocol("a command that is not UTF-8".into()))?
                .to_string(),
            Some(_) => return Err(Broken::Protocol("expected a command".into())),
        };
        let mut args = Vec::new();
        loop {
            match pktline::read(&mut self.input).await? {
                None => return Err(Broken::Frame(FrameError::Truncated)),
                Some(Packet::Flush) => {
                    return Ok(Some(Request {
                        command,
                        args,
                        delim: false,
                    }))
                }
                Some(Packet::Delim) => {
                    return Ok(Some(Request {
                        command,
                        args,
                        delim: true,
                    }))
                }
                Some(Packet::Data(arg)) => {
                    if args.len() == MAX_ARGS {
                        return Err(Broken::Protocol(format!("more than {MAX_ARGS} arguments")));
                    }
                    let arg = pktline::text(&arg)
                        .ok_or_else(|| Broken::Protocol("an argument that is not UTF-8".into()))?;
                    args.push(arg.to_string());
                }
            }
        }
    }

    /// Skip what follows a request's delimiter, up to its flush.
    pub(super) async fn skip_body(&mut self, req: &Request) -> Result<(), Broken> {
        if !req.delim {
            return Ok(());
        }
        loop {
            match pktline::read(&mut self.input).await? {
                Some(Packet::Flush) => return Ok(()),
                Some(Packet::Delim) => {
                    return Err(Broken::Protocol("a second delimiter in one request".into()))
                }
                Some(Packet::Data(_)) => {}
                None => return Err(Broken::Frame(FrameError::Truncated)),
            }
        }
    }

    /// The text lines after a request's delimiter, up to its flush; past
    /// `max` lines the rest is read and dropped, and the request refused.
    async fn body_lines(
        &mut self,
        req: &Request,
        max: usize,
    ) -> Result<Result<Vec<String>, Refusal>, Broken> {
        let mut lines = Vec::new();
        let mut over = false;
        if !req.delim {
            return Ok(Ok(lines));
        }
        loop {
            match pktline::read(&mut self.input).await? {
                Some(Packet::Flush) => break,
                Some(Packet::Delim) => {
                    return Err(Broken::Protocol("a second delimiter in one request".into()))
                }
                Some(Packet::Data(line)) => {
                    if lines.len() == max {
                        over = true;
                        continue;
                    }
                    match pktline::text(&line) {
                        Some(text) => lines.push(text.to_string()),
                        None => over = true,
                    }
                }
                None => return Err(Broken::Frame(FrameError::Truncated)),
            }
        }
        if over {
            return Ok(Err(refusal(
                413,
                format!("more than {max} lines, or a line that is not UTF-8"),
            )));
        }
        Ok(Ok(lines))
    }

    /// `status <code>`, arguments, flush.
    pub(super) async fn status(&mut self, code: u16, args: &[String]) -> Result<(), Broken> {
        self.out.line(&format!("status {code}")).await?;
        for arg in args {
            self.out.line(arg).await?;
        }
        self.out.flush().await?;
        Ok(())
    }

    /// `status <code>`, arguments, delimiter, lines, flush.
    pub(super) async fn status_with_lines(
        &mut self,
        code: u16,
        args: &[String],
        lines: &[String],
    ) -> Result<(), Broken> {
        self.out.line(&format!("status {code}")).await?;
        for arg in args {
            self.out.line(arg).await?;
        }
        self.out.delim().await?;
        for line in lines {
            self.out.line(line).await?;
        }
        self.out.flush().await?;
        Ok(())
    }

    /// A refusal: its status, a delimiter, its one line, flush.
    pub(super) async fn refuse(&mut self, refused: Refusal) -> Result<(), Broken> {
        tracing::info!(
            principal = self.ctx.caller.principal(),
            repo = self.entry.name,
            status = refused.code,
            "git-lfs-transfer: {}",
            refused.message
        );
        self.status_with_lines(refused.code, &[], &[refused.message])
            .await
    }

    fn limits(&self) -> (u64, u64) {
        let lfs = &self.ctx.app.config.lfs;
        (lfs.max_object_size, lfs.max_repo_size)
    }

    async fn usage(&self) -> Result<Usage, Refusal> {
        let (store, id) = (self.store.clone(), self.repo_id.clone());
        blocking(move || store.usage(&id)).await.map_err(internal)
    }

    /// `batch`: for each object, what to do with it (`upload`, `download`
    /// or `noop`).
    async fn batch(&mut self, req: &Request) -> Result<(), Broken> {
        let lines = match self.body_lines(req, MAX_BATCH).await? {
            Ok(lines) => lines,
            Err(refused) => return self.refuse(refused).await,
        };
        match self.batch_lines(req, &lines).await {
            Ok(answer) => {
                self.status_with_lines(200, &["hash-algo=sha256".to_string()], &answer)
                    .await
            }
            Err(refused) => self.refuse(refused).await,
        }
    }

    async fn batch_lines(&self, req: &Request, lines: &[String]) -> Result<Vec<String>, Refusal> {
        if !req.delim {
            return Err(refusal(
                400,
                "batch: expected a delimiter, then object lines",
            ));
        }
        if let Some(algo) = req.arg("hash-algo").filter(|a| *a != "sha256") {
            return Err(refusal(
                409,
                format!("unsupported hash algorithm {}: only sha256", shown(algo)),
            ));
        }
        let mut objects: Vec<(String, u64)> = Vec::with_capacity(lines.len());
        for line in lines {
            let mut words = line.split(' ');
            let (Some(oid), Some(size)) = (words.next(), words.next()) else {
                return Err(refusal(422, format!("invalid object line {}", shown(line))));
            };
            if !valid_oid(oid) {
                return Err(refusal(
                    422,
                    format!(
                        "invalid object id {}: not 64 lowercase hex digits",
                        shown(oid)
                    ),
                ));
            }
            let Ok(size) = size.parse::<u64>() else {
                return Err(refusal(422, format!("invalid size {}", shown(size))));
            };
            objects.push((oid.to_string(), size));
        }
        let (store, id, oids) = (
            self.store.clone(),
            self.repo_id.clone(),
            objects.iter().map(|(o, _)| o.clone()).collect::<Vec<_>>(),
        );
        // An upload's batch freshens what it finds held: the push that
        // follows may point at it again, and the collection's grace must
        // cover it as it covers a new upload (`LfsStore::collect`).
        let upload = self.operation == LfsOperation::Upload;
        let stored: Vec<Option<u64>> = blocking(move || {
            oids.iter()
                .map(|oid| {
                    if upload {
                        store.freshen(&id, oid)
                    } else {
                        store.size_of(&id, oid)
                    }
                })
                .collect()
        })
        .await
        .map_err(internal)?;
        if self.operation == LfsOperation::Download {
            return Ok(objects
                .iter()
                .zip(&stored)
                .map(|((oid, size), stored)| match stored {
                    Some(stored) => format!("{oid} {stored} download"),
                    None => format!("{oid} {size} noop"),
                })
                .collect());
        }
        let (max_object, max_repo) = self.limits();
        let mut new_bytes = 0u64;
        let mut counted = std::collections::HashSet::new();
        for ((oid, size), stored) in objects.iter().zip(&stored) {
            if stored.is_some() || !counted.insert(oid.as_str()) {
                continue;
            }
            if *size > max_object {
                return Err(refusal(
                    413,
                    format!(
                        "object {oid} is {size} bytes, over lfs.max_object_size ({max_object} bytes)"
                    ),
                ));
            }
            new_bytes = new_bytes.saturating_add(*size);
        }
        if new_bytes > 0 {
            let held = self.usage().await?.bytes;
            if held.saturating_add(new_bytes) > max_repo {
                return Err(refusal(
                    413,
                    format!(
                        "{} holds {held} bytes of LFS objects; {new_bytes} more would be over \
                         lfs.max_repo_size ({max_repo} bytes)",
                        self.entry.name
                    ),
                ));
            }
        }
        Ok(objects
            .iter()
            .zip(&stored)
            .map(|((oid, size), stored)| match stored {
                Some(_) => format!("{oid} {size} noop"),
                None => format!("{oid} {size} upload"),
            })
            .collect())
    }

    /// Whether `put-object` may store `oid` of `size`: `Ok(false)` when
    /// the repository has it already.
    async fn may_put(&self, oid: &str, size: u64) -> Result<bool, Refusal> {
        if !valid_oid(oid) {
            return Err(refusal(
                400,
                format!(
                    "invalid object id {}: not 64 lowercase hex digits",
                    shown(oid)
                ),
            ));
        }
        let (max_object, max_repo) = self.limits();
        if size > max_object {
            return Err(refusal(
                413,
                format!(
                    "object {oid} is {size} bytes, over lfs.max_object_size ({max_object} bytes)"
                ),
            ));
        }
        let (store, id, o) = (self.store.clone(), self.repo_id.clone(), oid.to_string());
        if blocking(move || store.freshen(&id, &o))
            .await
            .map_err(internal)?
            .is_some()
        {
            return Ok(false);
        }
        let held = self.usage().await?.bytes;
        if held.saturating_add(size) > max_repo {
            return Err(quota_refusal(&self.entry.name, held, size, max_repo));
        }
        Ok(true)
    }

    /// `put-object <oid>`, `size=N`, delimiter, the data, flush.
    async fn put_object(&mut self, req: &Request, rest: &str) -> Result<(), Broken> {
        if !req.delim {
            return self
                .refuse(refusal(
                    400,
                    "put-object: expected a delimiter, then the data",
                ))
                .await;
        }
        let oid = rest.split(' ').next().unwrap_or("");
        let checked = match size_of(req, "") {
            Ok(size) => self.may_put(oid, size).await.map(|new| (new, size)),
            Err(refused) => Err(refused),
        };
        let size = match checked {
            Ok((true, size)) => size,
            Ok((false, _)) => {
                // Stored already (the same bytes, by their hash).
                self.skip_body(req).await?;
                return self.status(200, &[]).await;
            }
            Err(refused) => {
                self.skip_body(req).await?;
                return self.refuse(refused).await;
            }
        };
        let (store, id, o) = (self.store.clone(), self.repo_id.clone(), oid.to_string());
        let incoming = match blocking(move || store.begin(&id, &o, size)).await {
            Ok(incoming) => incoming,
            Err(e) => {
                self.skip_body(req).await?;
                return self.refuse(internal(e)).await;
            }
        };
        let written = self.receive(incoming).await?;
        let refused = match written {
            Ok(incoming) => match self.commit(incoming, size).await {
                Ok(()) => {
                    self.uploaded.objects += 1;
                    self.uploaded.bytes += size;
                    return self.status(200, &[]).await;
                }
                Err(refused) => refused,
            },
            Err(UploadError::Io(e)) => internal(e),
            Err(e) => refusal(400, e.to_string()),
        };
        self.refuse(refused).await
    }

    /// Stream an upload's packets into `incoming` through a blocking
    /// writer, up to the flush. A refusal of the data (more than its size,
    /// a disk error) still reads the rest, so the conversation goes on.
    async fn receive(
        &mut self,
        incoming: Incoming,
    ) -> Result<Result<Incoming, UploadError>, Broken> {
        let (chunks, mut queued) = tokio::sync::mpsc::channel::<Vec<u8>>(QUEUED_CHUNKS);
        let writer = tokio::task::spawn_blocking(move || {
            let mut incoming = incoming;
            while let Some(chunk) = queued.blocking_recv() {
                incoming.write(&chunk)?;
            }
            Ok::<_, UploadError>(incoming)
        });
        let mut chunks = Some(chunks);
        let ended = loop {
            match pktline::read(&mut self.input).await {
                Ok(Some(Packet::Data(data))) => {
                    if let Some(queue) = &chunks {
                        // A closed queue: the writer stopped with an error.
                        if queue.send(data).await.is_err() {
                            chunks = None;
                        }
                    }
                }
                Ok(Some(Packet::Flush)) => break Ok(()),
                Ok(Some(Packet::Delim)) => {
                    break Err(Broken::Protocol("a delimiter inside object data".into()))
                }
                Ok(None) => break Err(Broken::Frame(FrameError::Truncated)),
                Err(e) => break Err(Broken::Frame(e)),
            }
        };
        drop(chunks);
        let written = writer
            .await
            .unwrap_or_else(|e| Err(UploadError::Io(std::io::Error::other(e))));
        match ended {
            Ok(()) => Ok(written),
            Err(broken) => {
                // Its temporary file goes with it.
                let _ = tokio::task::spawn_blocking(move || drop(written)).await;
                Err(broken)
            }
        }
    }

    /// Check the quota again (other uploads may have landed meanwhile) and
    /// make the object visible, one upload at a time.
    async fn commit(&self, incoming: Incoming, size: u64) -> Result<(), Refusal> {
        let _one = COMMIT.lock().await;
        let (_, max_repo) = self.limits();
        let held = self.usage().await?.bytes;
        if held.saturating_add(size) > max_repo {
            let _ = tokio::task::spawn_blocking(move || drop(incoming)).await;
            return Err(quota_refusal(&self.entry.name, held, size, max_repo));
        }
        match tokio::task::spawn_blocking(move || incoming.finish()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(UploadError::Io(e))) => Err(internal(e)),
            Ok(Err(e)) => Err(refusal(422, e.to_string())),
            Err(e) => Err(internal(e)),
        }
    }

    /// `verify-object <oid>`, `size=N`: whether the object is stored whole.
    async fn verify_object(&mut self, req: &Request, rest: &str) -> Result<(), Broken> {
        self.skip_body(req).await?;
        let oid = rest.split(' ').next().unwrap_or("");
        let answer = match (valid_oid(oid), size_of(req, rest)) {
            (false, _) => Err(refusal(
                400,
                format!(
                    "invalid object id {}: not 64 lowercase hex digits",
                    shown(oid)
                ),
            )),
            (true, Err(refused)) => Err(refused),
            (true, Ok(size)) => {
                let (store, id, o) = (self.store.clone(), self.repo_id.clone(), oid.to_string());
                match blocking(move || store.size_of(&id, &o)).await {
                    Ok(Some(stored)) if stored == size => Ok(()),
                    Ok(Some(stored)) => Err(refusal(
                        422,
                        format!("object {oid} is {stored} bytes, not {size}"),
                    )),
                    Ok(None) => Err(refusal(404, format!("object {oid} not found"))),
                    Err(e) => Err(internal(e)),
                }
            }
        };
        match answer {
            Ok(()) => self.status(200, &[]).await,
            Err(refused) => self.refuse(refused).await,
        }
    }

    /// `get-object <oid>`: `status 200`, `size=N`, delimiter, the data in
    /// packets, flush.
    async fn get_object(&mut self, req: &Request, rest: &str) -> Result<(), Broken> {
        self.skip_body(req).await?;
        let oid = rest.split(' ').next().unwrap_or("");
        if !valid_oid(oid) {
            let refused = refusal(
                400,
                format!(
                    "invalid object id {}: not 64 lowercase hex digits",
                    shown(oid)
                ),
            );
            return self.refuse(refused).await;
        }
        let (store, id, o) = (self.store.clone(), self.repo_id.clone(), oid.to_string());
        let (file, size) = match blocking(move || store.open(&id, &o)).await {
            Ok(Some(found)) => found,
            Ok(None) => {
                return self
                    .refuse(refusal(404, format!("object {oid} not found")))
                    .await
            }
            Err(e) => return self.refuse(internal(e)).await,
        };
        self.out.line("status 200").await?;
        self.out.line(&format!("size={size}")).await?;
        self.out.delim().await?;
        let mut file = tokio::fs::File::from_std(file);
        let mut buf = vec![0u8; MAX_PAYLOAD];
        let mut sent = 0u64;
        while sent < size {
            let want = (size - sent).min(MAX_PAYLOAD as u64) as usize;
            let n = file.read(&mut buf[..want]).await?;
            if n == 0 {
                // Shorter than it was when opened: the framing cannot be
                // kept; end the session rather than send a wrong object.
                return Err(Broken::Protocol(format!("object {oid} changed while sent")));
            }
            self.out.data(&buf[..n]).await?;
            sent += n as u64;
        }
        self.out.flush().await?;
        Ok(())
    }
}

fn quota_refusal(repo: &str, held: u64, size: u64, max_repo: u64) -> Refusal {
    refusal(
        413,
        format!(
            "{repo} holds {held} bytes of LFS objects; {size} more would be over \
             lfs.max_repo_size ({max_repo} bytes)"
        ),
    )
}
