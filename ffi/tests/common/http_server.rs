//! An HTTP server on loopback for the remote key sources' tests: one
//! request per connection (read to its blank line), one reply per path set
//! by the test (404 elsewhere), and how many requests each path had.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What the server answers, and what it was asked.
#[derive(Default)]
pub struct Routes {
    /// By path: status, body.
    replies: Mutex<HashMap<String, (u16, String)>>,
    hits: Mutex<HashMap<String, usize>>,
    stopped: AtomicBool,
}

/// The server, stopped on drop.
pub struct Server {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    routes: Arc<Routes>,
}

impl Server {
    pub fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let routes = Arc::new(Routes::default());
        let r = routes.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if r.stopped.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(conn) = conn {
                    let r = r.clone();
                    std::thread::spawn(move || serve(conn, &r));
                }
            }
        });
        Server { base, routes }
    }

    pub fn set(&self, path: &str, status: u16, body: &str) {
        self.routes
            .replies
            .lock()
            .unwrap()
            .insert(path.into(), (status, body.into()));
    }

    pub fn hits(&self, path: &str) -> usize {
        *self.routes.hits.lock().unwrap().get(path).unwrap_or(&0)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.routes.stopped.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(self.base.trim_start_matches("http://"));
    }
}

fn serve(mut conn: TcpStream, routes: &Routes) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let path = target.split('?').next().unwrap_or("/").to_string();
    *routes.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
    let (status, body) = routes
        .replies
        .lock()
        .unwrap()
        .get(&path)
        .cloned()
        .unwrap_or((404, "{}".into()));
    let reply = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(reply.as_bytes());
}
