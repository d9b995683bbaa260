//! Protocol v2 fetches over SSH answered by the server itself (issue 29).
//!
//! Over SSH, `git upload-pack` holds the whole v2 conversation on one
//! channel: its capability advertisement, then one request after another
//! (`ls-refs`, `fetch` rounds, …), each a list of pkt-lines ending in a
//! flush packet, until the client sends a lone flush or closes. v2 is
//! stateless by design (smart HTTP sends each request as its own POST), so
//! the server speaks the conversation in upload-pack's place: it sends the
//! advertisement, reads each request off the channel, and answers it the
//! way smart HTTP does (`http/git_http.rs`): from the pack cache when the
//! same request, on the same repository in the same ref state, was
//! answered before (`upload_pack::answers`: the key, the ref-state digest,
//! the checks), else from `git upload-pack --stateless-rpc` run for that
//! one request, whose answer is kept for the next identical one. A fleet
//! cloning or fetching the same thing then starts no git process at all
//! once the answers are kept, where it started an upload-pack (and a hook)
//! per client before.
//!
//! Only when the client asked for v2 (`GIT_PROTOCOL` through `SendEnv`, as
//! OpenSSH clients of git do) and the pack cache is on for the repository;
//! otherwise `ssh/git.rs` runs upload-pack for the whole conversation, as
//! before. The caller was authorized for the repository (`ssh/git.rs`).
//!
//! Git process slots (issue 44): the conversation takes one from the git
//! process gate only while a git process of it runs (the advertisement
//! when none is kept, each `upload-pack --stateless-rpc`), never while it
//! waits for the client's next request or sends a kept answer; so idle
//! conversations, however many, never keep anyone's clone waiting. Past
//! `git.queue_timeout` without a slot, the request is answered with git's
//! `ERR` packet and the gate's `error:` line, exit status 1.
//!
//! Bounds: a request is read into memory up to
//! `answers::MAX_CACHED_REQUEST` (256 KiB); a longer one (a long `have`
//! list) is streamed to upload-pack as it arrives and never cached. A
//! malformed packet ends the conversation with git's `ERR` packet and
//! exit status 128, as upload-pack would.

use russh::server::Msg;
use russh::{Channel, ChannelMsg};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::context::ExecContext;
use super::reply::reply_and_close;
use crate::pack_cache::Settings;
use crate::repos::RepoEntry;
use crate::upload_pack::{self, answers};

/// Copy buffer: one SSH packet's worth.
const CHUNK: usize = 32 * 1024;

/// Channel data waiting to be parsed, in SSH packets (at most 32 KiB each):
/// the backpressure on a client that sends without reading.
const INPUT_QUEUE: usize = 8;

/// Whether v2 conversations are answered here (unless
/// `GIT_COLLAB_SSH_V2_IN_SERVER=0` in the server's environment, a switch
/// for comparing, as the benchmarks do); read once.
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("GIT_COLLAB_SSH_V2_IN_SERVER").is_none_or(|v| v != "0"))
}

/// Serve the v2 conversation on `channel` for `entry` (`protocol`: the
/// client's `GIT_PROTOCOL`, sane and v2); ends the channel.
pub async fn serve(
    ctx: &ExecContext,
    channel: Channel<Msg>,
    entry: &RepoEntry,
    settings: Settings,
    protocol: String,
) {
    let nice = ctx.app.config.git.nice;
    let advertisement = match advertisement(ctx, &settings, entry, &protocol, nice).await {
        Ok(bytes) => bytes,
        Err(Advertised::Busy(message)) => return reply_and_close(channel, &message, 1).await,
        Err(Advertised::Failed(e)) => {
            tracing::error!("git upload-pack --advertise-refs {}: {e}", entry.name);
            return reply_and_close(channel, "error: internal error", 1).await;
        }
    };
    let (mut rx, tx) = channel.split();
    // Client -> queue, in its own task, which drains the channel until it
    // closes (an undrained channel stalls the whole connection).
    let (queue, input) = mpsc::channel::<Vec<u8>>(INPUT_QUEUE);
    tokio::spawn(async move {
        let mut queue = Some(queue);
        while let Some(msg) = rx.wait().await {
            match msg {
                ChannelMsg::Data { data } => {
                    if let Some(q) = &queue {
                        if q.send(data.to_vec()).await.is_err() {
                            queue = None;
                        }
                    }
                }
                ChannelMsg::Eof => queue = None,
                ChannelMsg::Close => break,
                _ => {}
            }
        }
    });
    let mut conversation = Conversation {
        input: Input {
            queue: input,
            buf: Vec::new(),
        },
        out: tx.make_writer(),
        err: tx.make_writer_ext(Some(1)),
        entry,
        settings,
        protocol,
        nice,
        ctx,
    };
    let code = match conversation.run(&advertisement).await {
        Ok(code) => code,
        Err(Ended::Gone(e)) => {
            // Nobody reads the rest; any git process is ended on drop.
            tracing::info!(
                "git upload-pack for {} (v2, in the server): {e}",
                entry.name
            );
            return;
        }
        Err(Ended::Malformed(what)) => {
            let line = format!("ERR {what}\n");
            let _ = conversation
                .out
                .write_all(pkt(line.as_bytes()).as_slice())
                .await;
            let _ = conversation
                .err
                .write_all(format!("error: {what}\n").as_bytes())
                .await;
            128
        }
    };
    let _ = conversation.out.flush().await;
    let _ = conversation.err.flush().await;
    tracing::info!(
        principal = ctx.caller.principal(),
        repo = entry.name,
        "git upload-pack (v2, answered in the server) exited {code}"
    );
    super::reply::note_exit_status(code);
    let _ = tx.exit_status(code).await;
    let _ = tx.eof().await;
    let _ = tx.close().await;
}

/// How a conversation ended early.
enum Ended {
    /// The client went away (a write failed).
    Gone(std::io::Error),
    /// The client sent what is not protocol v2.
    Malformed(&'static str),
}

impl From<std::io::Error> for Ended {
    fn from(e: std::io::Error) -> Ended {
        Ended::Gone(e)
    }
}

/// Why there is no advertisement.
enum Advertised {
    /// No git process slot: the `error:` line.
    Busy(String),
    Failed(anyhow::Error),
}

/// The capability advertisement: kept, or printed by upload-pack (and
/// kept), holding a process slot while it runs.
async fn advertisement(
    ctx: &ExecContext,
    settings: &Settings,
    entry: &RepoEntry,
    protocol: &str,
    nice: u64,
) -> Result<Vec<u8>, Advertised> {
    match upload_pack::kept_advertisement(settings, &entry.path, protocol).await {
        Ok(bytes) => Ok(bytes),
        Err(keep) => {
            let _slot = super::context::git_process_slot(ctx, "upload-pack")
                .await
                .map_err(Advertised::Busy)?;
            upload_pack::advertise(&entry.path, Some(protocol), nice, keep)
                .await
                .map_err(Advertised::Failed)
        }
    }
}

/// The channel's bytes, read a pkt-line at a time.
struct Input {
    queue: mpsc::Receiver<Vec<u8>>,
    /// Read, not yet parsed.
    buf: Vec<u8>,
}

/// One pkt-line as read: its bytes, length header included.
enum Packet {
    /// `0000`.
    Flush,
    /// `0001` (delimiter) or `0002` (response end).
    Special(Vec<u8>),
    Data(Vec<u8>),
}

impl Packet {
    fn bytes(&self) -> &[u8] {
        match self {
            Packet::Flush => b"0000",
            Packet::Special(b) | Packet::Data(b) => b,
        }
    }
}

impl Input {
    /// The next packet; `None` at the end of the input.
    async fn packet(&mut self) -> Result<Option<Packet>, Ended> {
        while self.buf.len() < 4 {
            if !self.more().await {
                return match self.buf.is_empty() {
                    true => Ok(None),
                    false => Err(Ended::Malformed("the input ended inside a packet")),
                };
            }
        }
        let len = std::str::from_utf8(&self.buf[..4])
            .ok()
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or(Ended::Malformed("protocol error: bad packet length"))?;
        match len {
            0 => {
                self.buf.drain(..4);
                return Ok(Some(Packet::Flush));
            }
            1 | 2 => return Ok(Some(Packet::Special(self.buf.drain(..4).collect()))),
            3 => return Err(Ended::Malformed("protocol error: bad packet length")),
            _ => {}
        }
        while self.buf.len() < len {
            if !self.more().await {
                return Err(Ended::Malformed("the input ended inside a packet"));
            }
        }
        Ok(Some(Packet::Data(self.buf.drain(..len).collect())))
    }

    /// Read more of the channel into `buf`; false at its end.
    async fn more(&mut self) -> bool {
        match self.queue.recv().await {
            Some(data) => {
                self.buf.extend_from_slice(&data);
                true
            }
            None => false,
        }
    }
}

/// One request as read.
enum Request {
    /// The client is done (a lone flush, or the end of the input).
    End,
    /// A whole request, flush included.
    Whole(Vec<u8>),
    /// The start of a request longer than the cache looks up; the rest is
    /// still on the channel.
    Long(Vec<u8>),
}

struct Conversation<'a, W: tokio::io::AsyncWrite + Unpin, E: tokio::io::AsyncWrite + Unpin> {
    input: Input,
    out: W,
    err: E,
    entry: &'a RepoEntry,
    settings: Settings,
    protocol: String,
    nice: u64,
    /// For the git process gate, as the caller.
    ctx: &'a ExecContext,
}

impl<W: tokio::io::AsyncWrite + Unpin, E: tokio::io::AsyncWrite + Unpin> Conversation<'_, W, E> {
    /// The advertisement, then each request's answer; the exit status.
    async fn run(&mut self, advertisement: &[u8]) -> Result<u32, Ended> {
        self.out.write_all(advertisement).await?;
        self.out.flush().await?;
        loop {
            let code = match self.request().await? {
                Request::End => return Ok(0),
                Request::Whole(request) => self.answer(request).await?,
                Request::Long(start) => self.run_upload_pack(start, true, None).await?,
            };
            if code != 0 {
                return Ok(code);
            }
        }
    }

    /// Read the next request, up to `MAX_CACHED_REQUEST` bytes.
    async fn request(&mut self) -> Result<Request, Ended> {
        let mut request = Vec::new();
        loop {
            let Some(packet) = self.input.packet().await? else {
                return match request.is_empty() {
                    true => Ok(Request::End),
                    false => Err(Ended::Malformed("the input ended inside a request")),
                };
            };
            let flush = matches!(packet, Packet::Flush);
            if flush && request.is_empty() {
                return Ok(Request::End);
            }
            request.extend_from_slice(packet.bytes());
            if flush {
                return Ok(Request::Whole(request));
            }
            if request.len() > answers::MAX_CACHED_REQUEST {
                return Ok(Request::Long(request));
            }
        }
    }

    /// Answer a whole request: kept, or from upload-pack (kept when it is
    /// a `fetch` or `ls-refs` seen often enough).
    async fn answer(&mut self, request: Vec<u8>) -> Result<u32, Ended> {
        let Some(command) = answers::v2_command(&request) else {
            return self.run_upload_pack(request, false, None).await;
        };
        let found = upload_pack::cached_or_fill(
            &self.settings,
            &self.entry.path,
            &self.protocol,
            command,
            request.clone(),
        )
        .await;
        match found {
            Ok((file, len)) => {
                let mut from = tokio::io::BufReader::with_capacity(
                    4 * CHUNK,
                    tokio::fs::File::from_std(file).take(len),
                );
                let sent = tokio::io::copy_buf(&mut from, &mut self.out).await?;
                if sent != len {
                    // The entry was checked when it was opened; a file cut
                    // since cannot be mended mid-answer.
                    return Err(Ended::Gone(std::io::Error::other(
                        "a kept answer was shorter than its entry said",
                    )));
                }
                self.out.flush().await?;
                Ok(0)
            }
            Err(fill) => self.run_upload_pack(request, false, fill).await,
        }
    }

    /// Run `upload-pack --stateless-rpc` for one request: `start` (all of
    /// it, or its first bytes when `more`: then the rest is read off the
    /// channel up to its flush); its answer goes to the client, and into
    /// `fill` when given. Its exit status.
    async fn run_upload_pack(
        &mut self,
        start: Vec<u8>,
        more: bool,
        fill: Option<upload_pack::Fill>,
    ) -> Result<u32, Ended> {
        // A slot only while git runs (the module's doc).
        let _slot = match super::context::git_process_slot(self.ctx, "upload-pack").await {
            Ok(slot) => slot,
            Err(message) => {
                let busy = message.trim_start_matches("error: ");
                self.out
                    .write_all(&pkt(format!("ERR {busy}\n").as_bytes()))
                    .await?;
                self.out.flush().await?;
                self.err
                    .write_all(format!("{message}\n").as_bytes())
                    .await?;
                return Ok(1);
            }
        };
        let mut cmd = upload_pack::stateless(
            &self.entry.path,
            Some(&self.protocol),
            false,
            self.nice,
            Some(&self.settings),
        );
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                tracing::error!("cannot run git upload-pack: {e}");
                self.err.write_all(b"error: internal error\n").await?;
                return Ok(1);
            }
        };
        let (Some(mut stdin), Some(mut stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(Ended::Gone(std::io::Error::other("git's pipes")));
        };
        // What git says on stderr, bounded, read while it runs.
        let said = tokio::spawn(async move {
            let mut said = Vec::new();
            let _ = stderr.take(64 * 1024).read_to_end(&mut said).await;
            said
        });
        // git reads the whole request before it answers. A write error is
        // git having ended early: its exit status says why.
        let mut fed = stdin.write_all(&start).await.is_ok();
        if more {
            loop {
                let Some(packet) = self.input.packet().await? else {
                    return Err(Ended::Malformed("the input ended inside a request"));
                };
                if fed {
                    fed = stdin.write_all(packet.bytes()).await.is_ok();
                }
                if matches!(packet, Packet::Flush) {
                    break;
                }
            }
        }
        drop(stdin);
        let (mut writer, check) = match fill {
            Some(upload_pack::Fill { writer, check }) => (Some(writer), Some(check)),
            None => (None, None),
        };
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = stdout.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            if writer.as_mut().is_some_and(|w| w.write(&buf[..n]).is_err()) {
                writer = None;
            }
            self.out.write_all(&buf[..n]).await?;
        }
        self.out.flush().await?;
        let status = child.wait().await?;
        let said = said.await.unwrap_or_default();
        if !said.is_empty() {
            self.err.write_all(&said).await?;
            self.err.flush().await?;
        }
        if !status.success() {
            tracing::info!(
                "git upload-pack {} (v2 over SSH) exited with {status}: {}",
                self.entry.path.display(),
                String::from_utf8_lossy(&said).trim()
            );
            return Ok(status.code().unwrap_or(128).max(1) as u32);
        }
        if let (Some(w), Some(check)) = (writer, check) {
            let _ = tokio::task::spawn_blocking(move || check.keep(w)).await;
        }
        Ok(0)
    }
}

/// `data` as one pkt-line.
fn pkt(data: &[u8]) -> Vec<u8> {
    let mut line = format!("{:04x}", data.len() + 4).into_bytes();
    line.extend_from_slice(data);
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(chunks: &[&[u8]]) -> Input {
        let (tx, rx) = mpsc::channel(chunks.len().max(1));
        for c in chunks {
            tx.try_send(c.to_vec()).unwrap();
        }
        Input {
            queue: rx,
            buf: Vec::new(),
        }
    }

    async fn packets(chunks: &[&[u8]]) -> Result<Vec<Vec<u8>>, &'static str> {
        let mut input = input(chunks);
        let mut out = Vec::new();
        loop {
            match input.packet().await {
                Ok(Some(p)) => out.push(p.bytes().to_vec()),
                Ok(None) => return Ok(out),
                Err(Ended::Malformed(what)) => return Err(what),
                Err(Ended::Gone(e)) => panic!("{e}"),
            }
        }
    }

    #[tokio::test]
    async fn packets_are_read_across_chunk_boundaries() {
        let got = packets(&[b"0012comm", b"and=fetch\n00", b"0100000009done\n0000"])
            .await
            .unwrap();
        let want: Vec<&[u8]> = vec![
            b"0012command=fetch\n",
            b"0001",
            b"0000",
            b"0009done\n",
            b"0000",
        ];
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn malformed_or_cut_input_is_refused() {
        assert!(packets(&[b"zzzz"]).await.is_err());
        assert!(packets(&[b"0003"]).await.is_err());
        assert!(packets(&[b"+012"]).await.is_err());
        assert!(packets(&[b"0012command"]).await.is_err());
        assert!(packets(&[b"00"]).await.is_err());
        assert_eq!(packets(&[]).await.unwrap(), Vec::<Vec<u8>>::new());
    }

    #[test]
    fn pkt_lines_carry_their_length() {
        assert_eq!(pkt(b"ERR no\n"), b"000bERR no\n".to_vec());
    }
}
