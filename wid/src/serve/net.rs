//! The network side of `wid serve`: hyper's HTTP/1.1 server on a tokio
//! runtime, over plain TCP or rustls.
//!
//! Bounds, so that slow or idle clients cannot hold the server shut:
//! - at most `--max-connections` connections at once; further ones wait in
//!   the kernel's backlog (not accepted, not refused) until one closes;
//! - a TLS handshake must finish within `--request-timeout` (default 5 s);
//! - every request head, including the wait for the next request on a
//!   kept-alive connection, must arrive whole within `--request-timeout`
//!   (not per read: a byte every few seconds does not extend it), and be at
//!   most [`MAX_HEAD_BYTES`];
//! - an answer that cannot be written (a client that does not read, or
//!   pipelines requests without reading) must be written whole within
//!   `--request-timeout` from when the write first had to wait; the
//!   connection is cut after;
//! - a connection lives at most [`CONNECTION_LIFETIME`], then finishes its
//!   request in flight and closes.
//!
//! The process's open-file limit is raised to its hard limit at start, and
//! `--max-connections` must fit in it (with room for the keystore, the
//! certificates and the runtime), so a full house of connections cannot
//! starve a reload of descriptors.
//!
//! A stop (SIGTERM/SIGINT) stops accepting, abandons TLS handshakes, asks
//! every connection to finish its request in flight and close, and waits for
//! them: [`DRAIN`], or `--request-timeout` when that is longer (a request
//! half-sent at the stop has that long to arrive, and its answer that long
//! to be written).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, IF_NONE_MATCH};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Semaphore, watch};

use super::metrics::{Open, route_label};
use super::respond::Response;
use super::routes::route;
use super::server::Server;
use super::tls::Tls;
use crate::CliError;

/// The longest request head (request line and headers); more is 431.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// How long one connection is kept (then closed after its request in flight).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// How long a stop, or a connection's end, waits for requests in flight (at
/// least; `--request-timeout` when that is longer).
pub(super) const DRAIN: Duration = Duration::from_secs(5);
/// Descriptors kept for everything but connections (the keystore, the
/// certificates, the runtime, etcd).
const RESERVED_FDS: u64 = 64;
/// How often the accept loop looks at the stop flag and the certificate
/// files.
const POLL: Duration = Duration::from_millis(50);
/// How often the certificate files are looked at.
const TLS_CHECK: Duration = Duration::from_secs(1);

/// Serves `listener` until `stop` is set, then drains; `resign` runs when
/// accepting stops (the rotator gives up its lease). Returns how many
/// connections were still open when the drain ended.
/// The bounds of [`serve`].
pub(super) struct Limits {
    /// Connections served at once.
    pub(super) max_connections: usize,
    /// The deadline for a TLS handshake and for each request head.
    pub(super) request_timeout: Duration,
}

pub(super) fn serve(
    server: Arc<Server>,
    listener: std::net::TcpListener,
    tls: Option<Arc<Tls>>,
    stop: &AtomicBool,
    limits: Limits,
    resign: impl FnOnce(),
) -> Result<usize, CliError> {
    let Limits {
        max_connections,
        request_timeout,
    } = limits;
    let drain = DRAIN.max(request_timeout);
    let wanted = max_connections as u64 + RESERVED_FDS;
    let fds = rlimit::increase_nofile_limit(wanted)
        .map_err(|e| CliError::io("raising the open-file limit", &e))?;
    if fds < wanted {
        return Err(crate::sources::bad_flag(
            "--max-connections",
            format!(
                "{max_connections} connections need {wanted} open files, but this process may open {fds} (its hard limit)"
            ),
        )
        .hint("raise the limit (`ulimit -n`, systemd's LimitNOFILE=) or lower --max-connections"));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_io()
        .enable_time()
        .thread_name("wid-serve")
        .build()
        .map_err(|e| CliError::io("starting the server's runtime", &e))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| CliError::io("configuring the listener", &e))?;
        let slots = Arc::new(Semaphore::new(max_connections));
        let (closing, closing_rx) = watch::channel(false);
        let mut poll = tokio::time::interval(POLL);
        let mut tls_check = tokio::time::interval(TLS_CHECK);
        let mut slot = None;
        while !stop.load(Ordering::SeqCst) {
            tokio::select! {
                _ = poll.tick() => {}
                _ = tls_check.tick(), if tls.is_some() => {
                    if let Some(tls) = &tls {
                        tls.reload_if_changed(&server.metrics);
                    }
                }
                // A free slot first: while all are taken, new connections
                // stay in the kernel's backlog.
                permit = Arc::clone(&slots).acquire_owned(), if slot.is_none() => {
                    slot = permit.ok();
                }
                accepted = listener.accept(), if slot.is_some() => match accepted {
                    Ok((stream, _peer)) => {
                        let permit = slot.take();
                        let _ = stream.set_nodelay(true);
                        let server = Arc::clone(&server);
                        let tls = tls.clone();
                        let closing = closing_rx.clone();
                        tokio::spawn(async move {
                            let _open = Open::new();
                            connection(stream, server, tls, closing, request_timeout, drain).await;
                            drop(permit);
                        });
                    }
                    Err(e) => {
                        // EMFILE and the like: back off rather than spin.
                        serve_log!(Info,"accept failed: {e}");
                        tokio::time::sleep(POLL).await;
                    }
                },
            }
        }
        drop(listener);
        drop(slot);
        resign();
        let _ = closing.send(true);
        let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
        let drained = tokio::time::timeout(drain, slots.acquire_many(all)).await;
        Ok(match drained {
            Ok(_) => 0,
            Err(_) => max_connections - slots.available_permits(),
        })
    })
}

/// One connection: the TLS handshake (within its deadline) if any, then
/// HTTP/1.1 with keep-alive until the client closes, a deadline, the
/// connection's lifetime or the server's stop.
async fn connection(
    stream: tokio::net::TcpStream,
    server: Arc<Server>,
    tls: Option<Arc<Tls>>,
    mut closing: watch::Receiver<bool>,
    timeout: Duration,
    drain: Duration,
) {
    match tls {
        None => {
            let io = WriteDeadline::new(TokioIo::new(stream), timeout);
            http(io, server, true, closing, timeout, drain).await;
        }
        Some(tls) => {
            // A handshake in progress at a stop is abandoned.
            let handshake = tokio::select! {
                done = tokio::time::timeout(timeout, tls.acceptor.accept(stream)) => done.ok().and_then(Result::ok),
                _ = closing.changed() => None,
            };
            match handshake {
                Some(stream) => {
                    let has_cert = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .is_some_and(|c| !c.is_empty());
                    // Without --tls-client-ca every route is open.
                    let authenticated = !tls.client_auth || has_cert;
                    let io = WriteDeadline::new(TokioIo::new(stream), timeout);
                    http(io, server, authenticated, closing, timeout, drain).await;
                }
                None => {
                    server
                        .metrics
                        .connections_refused_tls
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

async fn http<I>(
    io: I,
    server: Arc<Server>,
    authenticated: bool,
    mut closing: watch::Receiver<bool>,
    timeout: Duration,
    drain: Duration,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        let answer = answer(&server, &req, authenticated);
        async move { Ok::<_, Infallible>(answer) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let lifetime = tokio::time::sleep(CONNECTION_LIFETIME);
    tokio::pin!(lifetime);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = &mut lifetime => {}
        _ = closing.changed() => {}
    }
    // Finish the request in flight (if any), then close; the write deadline
    // cuts a client that does not take its answer.
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(drain, conn).await;
}

/// A connection whose writes must finish in time: once a write (or flush)
/// has to wait, everything pending must be written within the deadline,
/// else the connection fails with `TimedOut` (and is closed). Reads pass
/// through (hyper's head deadline covers them).
struct WriteDeadline<T> {
    inner: T,
    timeout: Duration,
    /// Armed when a write first waited; disarmed when all is flushed.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteDeadline<T> {
    fn new(inner: T, timeout: Duration) -> WriteDeadline<T> {
        WriteDeadline {
            inner,
            timeout,
            sleep: None,
        }
    }

    /// After a write or flush had to wait: arm the deadline (once), and
    /// fail if it has passed.
    fn waited<R>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<R>> {
        let timeout = self.timeout;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client did not take its answer in time",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.waited(cx),
            done => done,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.waited(cx),
            done => done,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.waited(cx),
            Poll::Ready(Ok(())) => {
                // Everything was written: the next wait starts a new deadline.
                self.sleep = None;
                Poll::Ready(Ok(()))
            }
            done => done,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.inner).poll_shutdown(cx) {
            Poll::Pending => self.waited(cx),
            done => done,
        }
    }
}

/// The answer to one request: GET or HEAD only; without a verified client
/// certificate (when `--tls-client-ca` asks for one) only the documents.
fn answer(
    server: &Server,
    req: &Request<Incoming>,
    authenticated: bool,
) -> hyper::Response<Full<Bytes>> {
    let path = req.uri().path();
    let label = route_label(path);
    let method = req.method();
    let response = if method != Method::GET && method != Method::HEAD {
        Response::method_not_allowed()
    } else if !authenticated
        && !matches!(label, "jwks" | "wit_jwks" | "spiffe_bundle" | "discovery")
    {
        Response::json(
            StatusCode::FORBIDDEN,
            r#"{"error":"a client certificate is required for this route: only the JWKS and the discovery document are served without one"}"#,
            None,
        )
    } else {
        route(server, path)
    };
    // Repeated If-None-Match lines are one list (RFC 9110, section 5.3).
    let asked: Vec<&str> = req
        .headers()
        .get_all(IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let asked = (!asked.is_empty())
        .then(|| HeaderValue::from_str(&asked.join(", ")).ok())
        .flatten();
    let answer = response.into_http(method, asked.as_ref());
    server.metrics.count(label, answer.status().as_u16());
    if server.log_requests {
        // The path only (a query could carry anything), and at most 200
        // characters of it: a client chooses it.
        let shown: String = path.chars().take(200).collect();
        serve_log!(
            Info,
            "{method} {}{} {}",
            shown.escape_debug(),
            if shown.len() < path.len() { "..." } else { "" },
            answer.status().as_u16()
        );
    }
    answer
}
