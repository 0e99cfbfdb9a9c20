//! A running `wid serve` for the tests that need one (wid/tests/: `cli`,
//! `cli_serve`, `cli_etcd`, `vault`, `consul`, through `#[path]`): started
//! with the given arguments, its address read from its first line, its
//! stderr drained all along (a chatty server never blocks on a full pipe),
//! killed on drop (also when a test fails); and a one-request HTTP/1.1
//! client to talk to it. Only the `wid` package's tests can use it:
//! `CARGO_BIN_EXE_wid` is the `wid` binary, which cargo builds for them.
#![allow(dead_code)] // each user of this module uses part of it

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const WID: &str = env!("CARGO_BIN_EXE_wid");

/// `wid ARGS`, its output.
pub fn wid(args: &[&str]) -> Output {
    Command::new(WID)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `wid ARGS`, which must succeed: its stdout.
#[track_caller]
pub fn wid_ok(args: &[&str]) -> String {
    let o = wid(args);
    assert!(
        o.status.success(),
        "wid {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Waits (up to 60 s, only to catch a hang) until `ok` holds.
#[track_caller]
pub fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A running `wid serve`.
pub struct Served {
    child: Child,
    pub addr: String,
    first_line: String,
    err: Arc<Mutex<String>>,
}

impl Served {
    /// `wid serve ARGS`, once it names its address.
    pub fn start<S: AsRef<OsStr>>(args: &[S]) -> Served {
        let mut child = Command::new(WID)
            .arg("serve")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_remove("WID_ETCD_PASSWORD")
            .spawn()
            .expect("wid serve starts");
        let err = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = Arc::clone(&err);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .expect("wid serve names its address");
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .or_else(|| line.trim().strip_prefix("listening on https://"))
            .unwrap_or_else(|| {
                panic!(
                    "unexpected first line {line:?}; stderr: {}",
                    err.lock().unwrap()
                )
            })
            .to_string();
        Served {
            child,
            addr,
            first_line: line,
            err,
        }
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Http {
        http(&self.addr, "GET", path)
    }

    /// `GET /.well-known/jwks.json`.
    pub fn jwks(&self) -> Http {
        self.get("/.well-known/jwks.json")
    }

    /// The URL of its JWKS.
    pub fn jwks_url(&self) -> String {
        format!("http://{}/.well-known/jwks.json", self.addr)
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Sends SIGTERM.
    pub fn signal_term(&self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
    }

    /// The exit status, if it exits within `limit`.
    pub fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM; the exit status and everything it wrote after its first
    /// line: the rest of stdout, then stderr.
    pub fn terminate(mut self) -> (std::process::ExitStatus, String) {
        self.signal_term();
        let status = self
            .exit_within(Duration::from_secs(20))
            .expect("wid serve stops on SIGTERM within 20 s");
        let mut rest = String::new();
        let _ = self.child.stdout.take().unwrap().read_to_string(&mut rest);
        // The drain thread ends at EOF, which the exit has made certain;
        // wait for it to have taken the last bytes.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(&self.err) > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        (status, format!("{rest}{}", self.stderr()))
    }

    /// The first line it printed (its address).
    pub fn first_line(&self) -> &str {
        &self.first_line
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP answer.
#[derive(Debug)]
pub struct Http {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Http {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `kid`s of a JWKS answer, sorted.
    pub fn kids(&self) -> Vec<String> {
        let mut kids: Vec<String> = self.json()["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_string())
            .collect();
        kids.sort();
        kids
    }

    pub fn max_age(&self) -> u64 {
        let cc = self.header("Cache-Control").expect("Cache-Control");
        cc.strip_prefix("max-age=")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("Cache-Control {cc:?}"))
    }
}

/// A tiny HTTP/1.1 client: one request (`Connection: close`), read to the
/// end; the body's length is checked against `Content-Length`.
pub fn http(addr: &str, method: &str, path: &str) -> Http {
    http_with(addr, method, path, &[])
}

/// [`http`] with extra request headers.
pub fn http_with(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> Http {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let extra: String = headers
        .iter()
        .map(|(n, v)| format!("{n}: {v}\r\n"))
        .collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: */*\r\nConnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("a response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head");
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_string(), v.trim().to_string())
        })
        .collect::<Vec<_>>();
    // A 304 has no body and no length.
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("Content-Length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    assert_eq!(
        body.len(),
        if method == "HEAD" { 0 } else { len },
        "Content-Length"
    );
    Http {
        status,
        headers,
        body: body.to_string(),
    }
}
