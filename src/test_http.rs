//! Test support for the unit tests that stand a tiny HTTP server on
//! loopback: reading a whole request before answering it.

use std::io::Read;
use std::net::TcpStream;

/// Reads one HTTP/1.1 request: the head up to its blank line, then as many
/// body bytes as its Content-Length names. A server that answers and closes
/// with request bytes still unread makes the kernel send a reset, which the
/// client may see before the answer (it did, once, in CI).
pub(crate) fn read_request(c: &mut TcpStream) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while got.len() < head_end + length {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}
