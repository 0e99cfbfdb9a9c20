//! The HTTP/1.1 of `wid serve`: one GET or HEAD per connection
//! (`Connection: close`), its request head bounded in size and read within
//! `HEAD_DEADLINE` for all of it, the answer written within
//! `ANSWER_DEADLINE` (not per read or write, which a client sending a byte
//! every few seconds would reset forever).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Longest request head read (request line and headers).
const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// How long a client may take to send its whole request head, from accept.
const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// How long a client may take to read the whole answer.
const ANSWER_DEADLINE: Duration = Duration::from_secs(5);

/// An answer: its status, body and the headers that vary.
pub(super) struct Response {
    status: u16,
    content_type: &'static str,
    cache: String,
    body: String,
    allow: bool,
}

impl Response {
    pub(super) fn json(status: u16, body: String, max_age: Option<u64>) -> Response {
        Response {
            status,
            content_type: "application/json",
            cache: max_age.map_or_else(|| "no-store".into(), |s| format!("max-age={s}")),
            body,
            allow: false,
        }
    }

    fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            cache: "no-store".into(),
            body: format!("{body}\n"),
            allow: false,
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Writes the answer within `ANSWER_DEADLINE` for all of it (each write's
/// timeout is what is left), then closes the sending side.
fn respond(stream: &TcpStream, head_only: bool, r: &Response) {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: {}\r\nConnection: close\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len(),
        r.cache
    );
    if r.allow {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    if !head_only {
        out.push_str(&r.body);
    }
    let deadline = Instant::now() + ANSWER_DEADLINE;
    let mut rest = out.as_bytes();
    while !rest.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_write_timeout(Some(left)).is_err() {
            break;
        }
        match (&*stream).write(rest) {
            Ok(0) => break,
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Reads the request head: everything up to the blank line, by `deadline`
/// for all of it (408 after).
fn read_head(mut stream: &TcpStream, deadline: Instant) -> Result<String, u16> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(end);
            return String::from_utf8(buf).map_err(|_| 400);
        }
        if buf.len() > MAX_REQUEST_HEAD {
            return Err(431);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(408);
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Err(0),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(408);
            }
            Err(_) => return Err(0),
        }
    }
}

/// Serves one connection: reads the request and answers a GET or HEAD of a
/// path with `route(path)`, anything else with an error of its own.
pub(super) fn handle(stream: TcpStream, route: impl FnOnce(&str) -> Response) {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let _ = stream.set_nonblocking(false);
    let head = match read_head(&stream, deadline) {
        Ok(h) => h,
        // The client went away or timed out: nobody to answer.
        Err(0) => return,
        Err(status) => {
            respond(&stream, false, &Response::text(status, reason(status)));
            return;
        }
    };
    let mut parts = head.lines().next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        respond(
            &stream,
            false,
            &Response::text(400, "malformed request line"),
        );
        return;
    };
    if !version.starts_with("HTTP/1.") {
        respond(&stream, false, &Response::text(400, "HTTP/1.x only"));
        return;
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        let mut r = Response::text(405, "GET or HEAD only");
        r.allow = true;
        respond(&stream, false, &r);
        return;
    }
    let path = target.split(['?', '#']).next().unwrap_or_default();
    respond(&stream, head_only, &route(path));
}
