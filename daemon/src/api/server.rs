//! accordd's HTTP server: hyper's HTTP/1 connections with the deadlines
//! `axum::serve` cannot set (it builds hyper's connection itself and gives
//! it no timer, so hyper's header-read timeout never runs):
//!
//! - **idle** ([`IDLE_TIMEOUT`], [`super::timeout`]): no byte moved for
//!   that long closes the connection (a silent socket, an idle keep-alive
//!   connection, a client that stops reading the answer);
//! - **header read** ([`HEADER_READ_TIMEOUT`]): a request's line and
//!   headers must be complete within this long of their first byte; a
//!   client trickling a byte at a time (slowloris), which the idle timeout
//!   alone never ends, is disconnected. hyper's own
//!   `header_read_timeout`, on a per-connection timer whose clock starts
//!   at the first byte of the request rather than when the connection
//!   starts waiting for one: hyper's would otherwise close every idle
//!   keep-alive connection after it, racing agents' pooled connections
//!   (reqwest keeps them 90 s; see [`IDLE_TIMEOUT`]);
//! - **body read** ([`BODY_READ_TIMEOUT`]): a request's body must arrive
//!   within this long of its headers; a later one fails the request
//!   (400) and the connection closes.
//!
//! - **first byte** ([`FIRST_BYTE_TIMEOUT`]): a connection that sends
//!   nothing that long after it opens is closed (not held for the idle
//!   timeout).
//!
//! And bounds no client can push past: at most [`MAX_CONNECTIONS`] open
//! at once (fewer under a low file limit, [`connection_cap`]); when all are taken, a new connection takes the slot of the
//! oldest one that has not yet sent a whole request head (a flood of
//! stalled connections churns itself, and `/v1/health` and agents, whose
//! heads arrive at once, are served); each connection's unparsed request
//! head is at most [`MAX_HEADER_BYTES`] (hyper's read buffer; past it the
//! answer is 431 and the connection closes). `flood-figures` measures it.
//!
//! Shutdown as `axum::serve`'s graceful one: no new connections, requests
//! in flight answered, then [`serve`] returns once every connection has
//! closed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::serve::Listener;
use axum::Router;
use futures::StreamExt;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::timeout::{IdleTimeout, IDLE_TIMEOUT};

/// How long a request's line and headers may take from their first byte
/// (hyper's default; agents send theirs in one write).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a request's body may take after its headers: a report at the
/// 4 MiB body limit needs 70 KB/s.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Connections open at once, at most (fewer where the process's file
/// limit is low: [`connection_cap`]; the systemd unit sets
/// `LimitNOFILE=65536`).
pub const MAX_CONNECTIONS: usize = 1024;

/// File descriptors kept for all but API connections: the store, BMC
/// and Kubernetes clients, the journal, logs.
pub const RESERVED_FDS: u64 = 256;

/// The fewest connection slots: below this accordd serves anyway, and
/// says the file limit is too low.
pub const MIN_CONNECTIONS: usize = 16;

/// Connection slots under a soft file limit of `soft`: [`MAX_CONNECTIONS`]
/// or, where the limit leaves less after [`RESERVED_FDS`], what it leaves
/// (at least [`MIN_CONNECTIONS`]), so that a flood fills the slots and
/// never the file table (an `accept` that fails for want of a descriptor
/// would refuse `/v1/health` too).
pub fn connections_under(soft: u64) -> usize {
    let left = usize::try_from(soft.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX);
    left.clamp(MIN_CONNECTIONS, MAX_CONNECTIONS)
}

/// Raises the soft open-file limit to the hard one (as Go's runtime does
/// at start; 1,024 is a common soft default where no unit sets one) and
/// returns [`connections_under`] it, said once where it is below
/// [`MAX_CONNECTIONS`].
pub fn connection_cap() -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return MAX_CONNECTIONS;
    };
    let soft = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    let cap = connections_under(soft);
    if cap < MAX_CONNECTIONS {
        tracing::warn!(
            open_files = soft,
            connections = cap,
            "the open-file limit holds only {cap} API connections (of {MAX_CONNECTIONS}): \
             raise LimitNOFILE"
        );
    }
    cap
}

/// A connection's request line and headers, at most (hyper's read buffer,
/// whose minimum is 8 KiB): 1,024 connections hold at most 16 MiB of them.
pub const MAX_HEADER_BYTES: usize = 16 << 10;

/// How long a new connection may stay silent.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

/// The deadlines of every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    pub idle: Duration,
    pub header_read: Duration,
    pub body_read: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            idle: IDLE_TIMEOUT,
            header_read: HEADER_READ_TIMEOUT,
            body_read: BODY_READ_TIMEOUT,
        }
    }
}

/// Serves `router` on `listener` with `deadlines` until `shutdown`
/// resolves, then lets the requests in flight finish and returns once
/// every connection has closed.
pub async fn serve<L>(
    listener: L,
    router: Router,
    deadlines: Deadlines,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: Listener,
    L::Addr: std::fmt::Debug,
{
    let mut listener = IdleTimeout::new(listener, deadlines.idle);
    let router = with_body_deadline(router, deadlines.body_read);
    // Dropped at shutdown: every connection then finishes gracefully.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    // Each connection holds a receiver; `closed` once all are gone.
    let (closed_tx, closed_rx) = tokio::sync::watch::channel(());
    let admission = Admission::new(connection_cap());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            conn = listener.accept() => conn,
            () = &mut shutdown => break,
        };
        let Some(admitted) = admission.admit().await else {
            tracing::debug!(
                ?peer,
                "connection refused: every slot holds a connection that sent a request"
            );
            continue;
        };
        tracing::trace!(?peer, "connection accepted");
        let (router, mut stop, closed) = (router.clone(), stop_rx.clone(), closed_rx.clone());
        tokio::spawn(async move {
            let stop = async move {
                // Err once the sender is dropped: the server is stopping.
                let _ = stop.changed().await;
            };
            serve_connection(io, router, deadlines.header_read, stop, admitted).await;
            drop(closed);
        });
    }
    drop(listener);
    drop(stop_tx);
    drop(closed_rx);
    closed_tx.closed().await;
    Ok(())
}

/// The connection slots: a permit per open connection, and the open
/// connections that have not yet sent a whole request head, oldest
/// first, each with the signal that closes it.
#[derive(Debug, Clone)]
pub struct Admission {
    slots: Arc<tokio::sync::Semaphore>,
    unproven: Arc<std::sync::Mutex<Unproven>>,
}

#[derive(Debug, Default)]
struct Unproven {
    next: u64,
    open: std::collections::BTreeMap<u64, Arc<tokio::sync::Notify>>,
}

/// One admitted connection: its slot, and its place among the unproven.
#[derive(Debug)]
pub struct Admitted {
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
    id: u64,
    evict: Arc<tokio::sync::Notify>,
    unproven: Option<Arc<std::sync::Mutex<Unproven>>>,
}

impl Admitted {
    /// A connection outside any admission (tests of one connection).
    pub fn alone() -> Admitted {
        Admitted {
            _slot: None,
            id: 0,
            evict: Arc::new(tokio::sync::Notify::new()),
            unproven: None,
        }
    }

    /// Its first request head arrived: no longer evictable.
    fn proven(&self) {
        if let Some(u) = &self.unproven {
            u.lock()
                .unwrap_or_else(|e| e.into_inner())
                .open
                .remove(&self.id);
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.proven();
    }
}

impl Admission {
    pub fn new(max: usize) -> Admission {
        Admission {
            slots: Arc::new(tokio::sync::Semaphore::new(max)),
            unproven: Default::default(),
        }
    }

    /// A slot for a new connection: a free one, else the one of the oldest
    /// connection that has not sent a whole request head (closed for it).
    /// `None` when every slot holds a connection that has.
    pub async fn admit(&self) -> Option<Admitted> {
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                let oldest = {
                    let mut u = self.unproven.lock().unwrap_or_else(|e| e.into_inner());
                    u.open.pop_first()
                };
                oldest?.1.notify_one();
                // The evicted connection's task drops its slot at once.
                tokio::time::timeout(Duration::from_secs(1), self.slots.clone().acquire_owned())
                    .await
                    .ok()?
                    .ok()?
            }
        };
        let evict = Arc::new(tokio::sync::Notify::new());
        let id = {
            let mut u = self.unproven.lock().unwrap_or_else(|e| e.into_inner());
            u.next += 1;
            let id = u.next;
            u.open.insert(id, evict.clone());
            id
        };
        Some(Admitted {
            _slot: Some(slot),
            id,
            evict,
            unproven: Some(self.unproven.clone()),
        })
    }
}

/// A hyper service that says when its first request head has arrived.
struct OnFirstRequest<S> {
    inner: S,
    admitted: Arc<Admitted>,
    seen: std::sync::atomic::AtomicBool,
}

impl<R, S: hyper::service::Service<R>> hyper::service::Service<R> for OnFirstRequest<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, request: R) -> S::Future {
        if !self.seen.swap(true, Ordering::Relaxed) {
            self.admitted.proven();
        }
        self.inner.call(request)
    }
}

/// `router` with every request body cut off `within` after its headers.
pub fn with_body_deadline(router: Router, within: Duration) -> Router {
    router.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| async move {
            next.run(request.map(|body| deadline_body(body, within)))
                .await
        },
    ))
}

/// The body, failing with [`BodyTimeout`] when it is not all there by
/// `within` from now.
fn deadline_body(body: Body, within: Duration) -> Body {
    let deadline = tokio::time::Instant::now() + within;
    let chunks = futures::stream::unfold(Some(body.into_data_stream()), move |data| async move {
        let mut data = data?;
        match tokio::time::timeout_at(deadline, data.next()).await {
            Ok(Some(chunk)) => Some((chunk, Some(data))),
            Ok(None) => None,
            Err(_) => Some((Err(axum::Error::new(BodyTimeout { within })), None)),
        }
    });
    Body::from_stream(chunks)
}

/// A request body that did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("request body not received within {} s of its headers", within.as_secs())]
pub struct BodyTimeout {
    within: Duration,
}

/// One connection: HTTP/1 with the header-read deadline counted from each
/// request's first byte, until it closes or `stop` resolves (then the
/// request in flight is answered and the connection closed).
pub async fn serve_connection<I>(
    io: I,
    router: Router,
    header_read: Duration,
    stop: impl Future<Output = ()>,
    admitted: Admitted,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let read = Arc::new(AtomicU64::new(0));
    let io = TokioIo::new(CountedIo {
        inner: io,
        read: read.clone(),
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(FromFirstByte { read: read.clone() })
        .header_read_timeout(header_read)
        .max_buf_size(MAX_HEADER_BYTES);
    let admitted = Arc::new(admitted);
    let evict = admitted.evict.clone();
    let service = OnFirstRequest {
        inner: TowerToHyperService::new(router),
        admitted,
        seen: Default::default(),
    };
    let conn = builder.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut stop = std::pin::pin!(stop);
    let mut stopping = false;
    let silent = tokio::time::sleep(FIRST_BYTE_TIMEOUT);
    let mut silent = std::pin::pin!(silent);
    let mut heard = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection closed");
                }
                return;
            }
            () = &mut stop, if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            () = evict.notified() => {
                tracing::debug!("connection closed: its slot went to a newer one (no request head yet)");
                return;
            }
            () = &mut silent, if !heard => {
                heard = read.load(Ordering::Relaxed) > 0;
                if !heard {
                    tracing::debug!("connection closed: nothing sent within {} s", FIRST_BYTE_TIMEOUT.as_secs());
                    return;
                }
            }
        }
    }
}

/// A connection that counts the bytes read from it, for [`FromFirstByte`].
struct CountedIo<T> {
    inner: T,
    read: Arc<AtomicU64>,
}

impl<T: AsyncRead + Unpin> AsyncRead for CountedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            this.read.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CountedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// hyper's timer for one connection. hyper's HTTP/1 server uses its timer
/// for the header-read timeout only: it asks for a sleep when it starts
/// waiting for a request's head and polls it whenever a read leaves the
/// head incomplete. This timer's sleeps start counting at the first byte
/// read after they were made, so waiting for a request costs nothing and
/// the deadline is the request's own. (Bytes of a pipelined request read
/// before its sleep was made do not start it: such a stall is ended by the
/// idle timeout.)
#[derive(Debug, Clone)]
struct FromFirstByte {
    read: Arc<AtomicU64>,
}

impl hyper::rt::Timer for FromFirstByte {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HeadSleep {
            read: self.read.clone(),
            read_at_start: self.read.load(Ordering::Relaxed),
            duration,
            running: None,
        })
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        // hyper asks for `now() + header_read_timeout`.
        self.sleep(deadline.saturating_duration_since(std::time::Instant::now()))
    }
}

struct HeadSleep {
    read: Arc<AtomicU64>,
    read_at_start: u64,
    duration: Duration,
    running: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Future for HeadSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.running.is_none() {
            if this.read.load(Ordering::Relaxed) == this.read_at_start {
                // No byte yet: hyper polls this again after its next read
                // (the read registered the wake-up).
                return Poll::Pending;
            }
            this.running = Some(Box::pin(tokio::time::sleep(this.duration)));
        }
        match &mut this.running {
            Some(sleep) => sleep.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

impl hyper::rt::Sleep for HeadSleep {}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::{get, post};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
    use tokio::time::Instant;

    use crate::api::timeout::TimeoutIo;

    const IDLE: Duration = Duration::from_secs(120);
    const HEAD: Duration = Duration::from_secs(30);
    const BODY: Duration = Duration::from_secs(60);

    fn app() -> Router {
        let r = Router::new()
            .route("/ping", get(|| async { "pong" }))
            .route(
                "/echo",
                post(|b: axum::body::Bytes| async move { b.len().to_string() }),
            );
        with_body_deadline(r, BODY)
    }

    /// One served connection as production has it (idle deadline, then
    /// hyper with the header deadline); the client's end.
    /// One `GET /ping` on a kept-alive connection, and its answer.
    async fn ping(client: &mut DuplexStream) -> String {
        client
            .write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf))
            .await
            .expect("no answer within 5 s")
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    fn connect() -> DuplexStream {
        let (client, server) = tokio::io::duplex(1 << 16);
        tokio::spawn(serve_connection(
            TimeoutIo::new(server, IDLE),
            app(),
            HEAD,
            std::future::pending(),
            Admitted::alone(),
        ));
        client
    }

    /// Reads until the server closes the connection, within `within`
    /// (paused time): what it sent, and when it closed.
    async fn read_to_close(client: &mut DuplexStream, within: Duration, what: &str) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout(within, client.read(&mut buf)).await {
                Err(_) => panic!("{what}: still open after {within:?}; got {got:?}"),
                Ok(Ok(0)) | Ok(Err(_)) => return String::from_utf8_lossy(&got).into_owned(),
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickled_request_line_is_cut_at_the_header_deadline() {
        let (mut reader, mut writer) = tokio::io::split(connect());
        let started = Instant::now();
        writer.write_all(b"GET /pi").await.unwrap();
        // A byte every 9 s: the idle deadline (120 s) would never end it.
        let trickle = tokio::spawn(async move {
            for b in b"ng HTTP/1.1\r\nHost: x\r\n" {
                tokio::time::sleep(Duration::from_secs(9)).await;
                if writer.write_all(&[*b]).await.is_err() {
                    return;
                }
            }
        });
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(300), reader.read(&mut buf))
            .await
            .expect("the trickling client was not disconnected within 300 s")
            .unwrap_or(0);
        let took = started.elapsed();
        assert_eq!(n, 0, "answered instead of closed: {:?}", &buf[..n]);
        assert!(
            took >= HEAD && took < HEAD + Duration::from_secs(1),
            "closed after {took:?}, the header deadline is {HEAD:?}"
        );
        trickle.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_sends_nothing_is_closed_at_the_first_byte_deadline() {
        let mut client = connect();
        let from = Instant::now();
        let rest =
            read_to_close(&mut client, Duration::from_secs(300), "a silent connection").await;
        let took = from.elapsed();
        assert_eq!(rest, "");
        assert!(
            took >= FIRST_BYTE_TIMEOUT && took < FIRST_BYTE_TIMEOUT + Duration::from_secs(1),
            "a silent connection closed after {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_head_past_the_limit_is_refused_and_the_connection_closed() {
        let mut client = connect();
        let head = format!(
            "GET /ping HTTP/1.1\r\nX-Big: {}",
            "a".repeat(MAX_HEADER_BYTES * 2)
        );
        // The server stops reading at the limit: the write may not finish.
        let (mut reader, mut writer) = tokio::io::split(&mut client);
        let write = async move {
            let _ = writer.write_all(head.as_bytes()).await;
        };
        let read = async move {
            let mut answer = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(300), reader.read_to_end(&mut answer))
                .await;
            String::from_utf8_lossy(&answer).into_owned()
        };
        let ((), answer) = tokio::join!(write, read);
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    }

    #[test]
    fn connection_slots_stay_under_the_open_file_limit() {
        // A common soft default (1,024) leaves 768 slots, not 1,024 that
        // would fill the file table before the slots.
        assert_eq!(connections_under(1024), 1024 - 256);
        assert_eq!(connections_under(65_536), MAX_CONNECTIONS);
        assert_eq!(connections_under(100), MIN_CONNECTIONS);
        assert_eq!(connections_under(u64::MAX), MAX_CONNECTIONS);
        // The soft limit is raised to the hard one, and the cap is under it.
        let cap = connection_cap();
        let (soft, hard) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        assert!(
            soft == hard || hard == nix::sys::resource::RLIM_INFINITY,
            "the soft limit is raised: {soft} of {hard}"
        );
        assert_eq!(cap, connections_under(soft));
    }

    #[tokio::test]
    async fn when_every_slot_is_taken_the_oldest_silent_connection_gives_way() {
        let admission = Admission::new(2);
        let a = admission.admit().await.expect("a slot");
        let b = admission.admit().await.expect("a slot");
        b.proven();
        let told = a.evict.clone();
        let newcomer = tokio::spawn({
            let admission = admission.clone();
            async move { admission.admit().await }
        });
        tokio::time::timeout(Duration::from_secs(10), told.notified())
            .await
            .expect("the oldest connection without a request was told to close");
        drop(a);
        let c = tokio::time::timeout(Duration::from_secs(10), newcomer)
            .await
            .expect("the newcomer admitted within 10 s")
            .unwrap()
            .expect("the newcomer took a's slot");
        c.proven();
        // Every slot holds a connection that sent a request: refused.
        assert!(admission.admit().await.is_none());
        drop(b);
        assert!(admission.admit().await.is_some(), "a freed slot is taken");
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_request_is_left_to_the_idle_deadline() {
        let mut client = connect();
        let answer = ping(&mut client).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("pong"), "{answer}");
        // Kept alive, silent: not closed by the header deadline (30 s),
        // only by the idle one (120 s).
        let idle_from = Instant::now();
        let rest = read_to_close(&mut client, Duration::from_secs(300), "an idle keep-alive").await;
        let took = idle_from.elapsed();
        assert_eq!(rest, "");
        assert!(
            took >= IDLE && took < IDLE + Duration::from_secs(1),
            "an idle keep-alive connection closed after {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_request_on_a_connection_has_its_own_header_deadline() {
        let mut client = connect();
        ping(&mut client).await;
        // 100 s of keep-alive silence, then half a request line.
        tokio::time::sleep(Duration::from_secs(100)).await;
        client.write_all(b"GET /pi").await.unwrap();
        let started = Instant::now();
        let rest = read_to_close(
            &mut client,
            Duration::from_secs(300),
            "a stalled 2nd request",
        )
        .await;
        let took = started.elapsed();
        assert_eq!(rest, "");
        assert!(
            took >= HEAD && took < HEAD + Duration::from_secs(1),
            "closed {took:?} after the second request's first byte"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickled_body_fails_at_the_body_deadline() {
        let mut client = connect();
        client
            .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
            .await
            .unwrap();
        let started = Instant::now();
        let (mut reader, mut writer) = tokio::io::split(client);
        let trickle = tokio::spawn(async move {
            for _ in 0..90 {
                tokio::time::sleep(Duration::from_secs(9)).await;
                if writer.write_all(b"x").await.is_err() {
                    return;
                }
            }
        });
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = tokio::time::timeout(Duration::from_secs(300), reader.read(&mut buf))
                .await
                .expect("the trickled body was still read after 300 s")
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let took = started.elapsed();
        let answer = String::from_utf8_lossy(&got);
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(
            answer.contains("request body not received within 60 s of its headers"),
            "{answer}"
        );
        assert!(
            took >= BODY && took < BODY + Duration::from_secs(1),
            "refused after {took:?}"
        );
        trickle.abort();
    }

    /// The whole server on a real socket, with short deadlines (real
    /// time): a stalled request line is cut, a request is answered, and
    /// shutdown returns once the connections are closed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serve_cuts_a_stalled_client_on_a_real_socket_and_stops() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let deadlines = Deadlines {
            idle: Duration::from_secs(30),
            header_read: Duration::from_millis(300),
            body_read: Duration::from_secs(30),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, app(), deadlines, async {
            let _ = stopped.await;
        }));
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = std::time::Instant::now();
        slow.write_all(b"GET /pi").await.unwrap();
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(10), slow.read(&mut buf))
            .await
            .expect("a stalled request line was not cut within 10 s (deadline 300 ms)")
            .unwrap_or(0);
        let took = started.elapsed();
        assert_eq!(n, 0);
        assert!(took >= Duration::from_millis(300), "{took:?}");

        let mut good = tokio::net::TcpStream::connect(addr).await.unwrap();
        good.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(10), good.read_to_string(&mut answer))
            .await
            .expect("no answer within 10 s")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

        // An idle connection does not hold up shutdown.
        let _idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("serve did not return within 10 s of shutdown")
            .unwrap()
            .unwrap();
    }
}
