//! Connections that make no progress are closed: a client that opens a
//! socket and sends nothing, stops halfway through its headers or body,
//! stops reading the answer, or keeps an idle keep-alive connection, holds
//! it for at most [`IDLE_TIMEOUT`]. axum's `serve` has no timeouts of its
//! own (hyper's header timeout needs a timer axum does not give it), so
//! the listener's connections carry one: every read or write that moves
//! bytes restarts the clock; a read or write still waiting when it runs
//! out fails with `TimedOut`, and hyper drops the connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// How long a connection may make no progress. Above reqwest's 90 s pool
/// idle timeout, so an agent's pooled connection is dropped by the agent
/// first and a request never races the server's close; agents heartbeat
/// far more often than this.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// A listener whose connections close after `idle` without progress.
#[derive(Debug)]
pub struct IdleTimeout<L> {
    inner: L,
    idle: Duration,
}

impl<L> IdleTimeout<L> {
    pub fn new(inner: L, idle: Duration) -> Self {
        IdleTimeout { inner, idle }
    }
}

impl<L: Listener> Listener for IdleTimeout<L> {
    type Io = TimeoutIo<L::Io>;
    type Addr = L::Addr;

    fn accept(&mut self) -> impl Future<Output = (Self::Io, Self::Addr)> + Send {
        let idle = self.idle;
        let accept = self.inner.accept();
        async move {
            let (io, addr) = accept.await;
            (TimeoutIo::new(io, idle), addr)
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection with an idle deadline.
#[derive(Debug)]
pub struct TimeoutIo<T> {
    inner: T,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<T> TimeoutIo<T> {
    pub fn new(inner: T, idle: Duration) -> Self {
        TimeoutIo {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    fn progressed(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// `Pending` from the inner IO: fails once the deadline has passed.
    fn waiting<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no progress on the connection for {:?}", self.idle),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimeoutIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.progressed();
                }
                Poll::Ready(r)
            }
            Poll::Pending => this.waiting(cx),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimeoutIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                if matches!(r, Ok(n) if n > 0) {
                    this.progressed();
                }
                Poll::Ready(r)
            }
            Poll::Pending => this.waiting(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                if matches!(r, Ok(n) if n > 0) {
                    this.progressed();
                }
                Poll::Ready(r)
            }
            Poll::Pending => this.waiting(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => this.waiting(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => this.waiting(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_times_out_and_progress_restarts_the_clock() {
        let (client, server) = tokio::io::duplex(64);
        let mut server = TimeoutIo::new(server, Duration::from_secs(10));
        let mut client = client;
        let mut buf = [0u8; 8];
        // Bytes every 6 s keep it open past 10 s.
        let writer = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(6)).await;
                client.write_all(b"x").await.unwrap();
            }
            // Then silence, with the connection left open.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(client);
        });
        let started = Instant::now();
        for _ in 0..3 {
            assert_eq!(server.read(&mut buf).await.unwrap(), 1);
        }
        let e = server.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(28) && took < Duration::from_secs(29),
            "{took:?}"
        );
        writer.abort();
    }
}
