//! Immediate ACKs on SSH connections.
//!
//! OpenSSH clients leave Nagle's algorithm on for sessions without a
//! terminal (every `ssh host verb`, every git fetch), so a small packet a
//! client writes right after another one waits until the server has
//! acknowledged the first: the key exchange's ECDH init after the client's
//! KEXINIT, `exec` after `no-more-sessions@openssh.com`. When the server
//! has nothing to send back at that moment, Linux delays the ACK (up to
//! 40 ms, less in its quick-ACK phase), and the client's next packet waits
//! that long: measured, about half of all fresh `ssh … collab-whoami`
//! calls took ~55 ms instead of ~15 ms. So after every read the server asks
//! the kernel to send the pending ACK now (`TCP_QUICKACK`, which Linux
//! clears again by itself; hence after each read). It costs one system
//! call per read and an ACK segment that would otherwise have been merged
//! into a later reply. `GIT_COLLAB_SSH_QUICK_ACK=0` in the server's
//! environment turns it off, for comparison (`benches/lease_ssh.rs`).

use std::io;
use std::os::fd::AsRawFd as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A TCP stream that acknowledges what it reads at once (unless off).
pub struct QuickAck {
    stream: TcpStream,
    on: bool,
}

impl QuickAck {
    pub fn new(stream: TcpStream) -> QuickAck {
        let on = enabled();
        if on {
            quick_ack(&stream);
        }
        QuickAck { stream, on }
    }
}

/// Unless `GIT_COLLAB_SSH_QUICK_ACK=0`; read once.
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("GIT_COLLAB_SSH_QUICK_ACK").is_none_or(|v| v != "0"))
}

/// Send any delayed ACK now and leave the kernel's "interactive" mode.
fn quick_ack(stream: &TcpStream) {
    let one: libc::c_int = 1;
    // SAFETY: a valid socket descriptor and an int-sized option value; a
    // failure (not TCP, say) only means no quick ACK.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

impl AsyncRead for QuickAck {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if self.on && matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            quick_ack(&self.stream);
        }
        read
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
