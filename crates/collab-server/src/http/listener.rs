//! The HTTP accept loop: hyper's HTTP/1.1 connection driver under our own
//! limits, instead of `axum::serve` (which has no caps or timeouts).
//!
//! - A connection is admitted only while `http.max_connections` (fitted to
//!   the descriptor budget) and `http.max_connections_per_ip` allow; past
//!   them it gets a best-effort `503` and is closed at once.
//! - `http.header_read_timeout`: a request's headers (and the wait for the
//!   next request on a kept-alive connection) must arrive within it, so a
//!   client trickling header lines cannot hold a connection.
//! - `http.idle_timeout`: a connection that moves no byte in either
//!   direction for that long is closed (a stalled body upload, a client
//!   that stops reading its response).
//!
//! HTTP/2 is not served: clients speak HTTP/1.1 to us, or HTTP/2 to a
//! reverse proxy in front.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt as _;

use crate::app::App;
use crate::limits;
use crate::shutdown::DRAIN_LIMIT;

/// Written (best effort, never waited for) to a connection refused by a cap.
const REFUSED_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\n\
Content-Type: text/plain\r\nContent-Length: 31\r\nConnection: close\r\n\r\n\
too many connections; try later";

/// Accept and serve until `shutdown` resolves; then stop accepting and let
/// open requests finish for a bounded time.
pub async fn serve<S>(
    app: Arc<App>,
    listener: TcpListener,
    service: S,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()>
where
    S: tower::Service<
            axum::extract::Request,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let http = &app.config.http;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(http.header_read_timeout)
        .max_headers(100);
    let idle = http.idle_timeout;
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: back off, keep serving.
                    tracing::warn!("http accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let permit = match app.limits.http_conns.try_admit(peer.ip(), 0) {
            Ok(p) => p,
            Err(refusal) => {
                let open = app.limits.http_conns.open();
                limits::note_refusal("http", refusal.label(), || {
                    format!("refused {peer} ({open} connections open)")
                });
                let _ = stream.try_write(REFUSED_RESPONSE);
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let per_connection = tower::service_fn(move |request: hyper::Request<Incoming>| {
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(ConnectInfo(peer));
            service.clone().oneshot(request)
        });
        let connection = builder.serve_connection(
            TokioIo::new(IdleTimeout::new(stream, idle)),
            TowerToHyperService::new(per_connection),
        );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("http connection from {peer}: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_LIMIT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("http connections still open after the drain limit");
    }
    Ok(())
}

/// An I/O stream that fails with `TimedOut` once neither a read nor a write
/// has made progress for `timeout` while one of them waits.
pub struct IdleTimeout<T> {
    inner: T,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<T> IdleTimeout<T> {
    pub fn new(inner: T, timeout: Duration) -> Self {
        IdleTimeout {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    fn progressed(&mut self) {
        let next = Instant::now() + self.timeout;
        self.deadline.as_mut().reset(next);
    }

    /// Called when the inner stream is not ready: time out, or wait.
    fn waiting<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle for too long",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    self.progressed();
                }
                Poll::Ready(result)
            }
            Poll::Pending => self.waiting(cx),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, data) {
            Poll::Ready(result) => {
                if matches!(result, Ok(n) if n > 0) {
                    self.progressed();
                }
                Poll::Ready(result)
            }
            Poll::Pending => self.waiting(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => {
                if matches!(result, Ok(n) if n > 0) {
                    self.progressed();
                }
                Poll::Ready(result)
            }
            Poll::Pending => self.waiting(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(result) => Poll::Ready(result),
            Poll::Pending => self.waiting(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_shutdown(cx) {
            Poll::Ready(result) => Poll::Ready(result),
            Poll::Pending => self.waiting(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test(start_paused = true)]
    async fn idle_streams_time_out_and_progress_resets_the_clock() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut timed = IdleTimeout::new(a, Duration::from_secs(10));
        let mut buf = [0u8; 8];
        // Data every 6 s keeps it alive past 10 s.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            b.write_all(b"x").await.unwrap();
            assert_eq!(timed.read(&mut buf).await.unwrap(), 1);
        }
        // Then silence: the read fails after 10 s.
        let err = timed.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_stops_reading_times_out_the_writer() {
        let (a, _b) = tokio::io::duplex(16);
        let mut timed = IdleTimeout::new(a, Duration::from_secs(5));
        let err = timed.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }
}
