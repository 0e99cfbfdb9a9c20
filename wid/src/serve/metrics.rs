//! `/metrics`: what `wid serve` did, in Prometheus's text exposition format
//! (version 0.0.4): requests by route and status, keystore and certificate
//! reloads and their failures, the keys served, and the time until the next
//! planned key switch. Requests that never reach a route are not in the
//! request counts: hyper answers a malformed or oversized head itself (400,
//! 431) and closes a connection whose head does not arrive in time.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// The counters, shared by every connection.
#[derive(Default)]
pub(super) struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    pub(super) keystore_reloads: AtomicU64,
    pub(super) keystore_reload_failures: AtomicU64,
    pub(super) tls_reloads: AtomicU64,
    pub(super) tls_reload_failures: AtomicU64,
    pub(super) connections_refused_tls: AtomicU64,
}

/// The gauges, read when `/metrics` is asked.
pub(super) struct Gauges {
    /// Keys in the JWKS.
    pub(super) keys_served: usize,
    /// Seconds until the next planned key switch (`None`: none planned).
    pub(super) next_rotation_secs: Option<i64>,
    /// Whether the keys are current (no failed reload, not cut off).
    pub(super) current: bool,
    /// Connections open now.
    pub(super) connections: usize,
    /// Keys by state (every state, zeros included).
    pub(super) keys_by_state: Vec<(&'static str, usize)>,
    /// Seconds until the policy's next planned change of any kind
    /// (prepublish, promote, deprecate; `None`: none planned).
    pub(super) next_change_secs: Option<i64>,
    /// When the keys last changed here (Unix seconds).
    pub(super) last_change: i64,
    /// With --etcd: whether cut off from etcd.
    pub(super) cut_off: Option<bool>,
    /// With --rotator: whether this server's candidate is elected.
    pub(super) rotator_elected: Option<bool>,
}

/// The route names used as labels (a fixed set: a client asking for
/// random paths cannot grow the counters).
pub(super) fn route_label(path: &str) -> &'static str {
    match path {
        "/.well-known/jwks.json" => "jwks",
        "/wit/jwks.json" => "wit_jwks",
        "/spiffe/bundle.json" => "spiffe_bundle",
        "/.well-known/openid-configuration" => "discovery",
        "/health" => "health",
        "/metrics" => "metrics",
        _ => "other",
    }
}

impl Metrics {
    /// Counts one answer.
    pub(super) fn count(&self, route: &'static str, status: u16) {
        *self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((route, status))
            .or_default() += 1;
    }

    /// The exposition text.
    pub(super) fn render(&self, g: &Gauges) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        let _ = writeln!(
            out,
            "# HELP wid_serve_requests_total Requests answered, by route and status.\n# TYPE wid_serve_requests_total counter"
        );
        for ((route, status), n) in self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(
                out,
                "wid_serve_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        counter(
            &mut out,
            "wid_serve_keystore_reloads_total",
            "Times the keys were loaded again after their source changed.",
            self.keystore_reloads.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "wid_serve_keystore_reload_failures_total",
            "Reloads that failed (the last good keys kept being served).",
            self.keystore_reload_failures.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "wid_serve_tls_reloads_total",
            "Times the TLS certificate and key were loaded again after their files changed.",
            self.tls_reloads.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "wid_serve_tls_reload_failures_total",
            "TLS reloads that failed (the last good certificate kept being served).",
            self.tls_reload_failures.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "wid_serve_tls_handshake_failures_total",
            "TLS handshakes that failed or timed out.",
            self.connections_refused_tls.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "wid_serve_keys_served",
            "Keys in the served JWKS.",
            g.keys_served.to_string(),
        );
        gauge(
            &mut out,
            "wid_serve_keys_current",
            "1 when the served keys are current, 0 after a failed reload or while cut off from etcd.",
            u8::from(g.current).to_string(),
        );
        gauge(
            &mut out,
            "wid_serve_connections",
            "Connections open now.",
            g.connections.to_string(),
        );
        let _ = writeln!(
            out,
            "# HELP wid_serve_keys Keys by state.\n# TYPE wid_serve_keys gauge"
        );
        for (state, n) in &g.keys_by_state {
            let _ = writeln!(out, "wid_serve_keys{{state=\"{state}\"}} {n}");
        }
        gauge(
            &mut out,
            "wid_serve_last_key_change_timestamp_seconds",
            "When the keys last changed here (Unix seconds).",
            g.last_change.to_string(),
        );
        if let Some(secs) = g.next_change_secs {
            gauge(
                &mut out,
                "wid_serve_next_key_change_seconds",
                "Seconds until the rotation policy's next planned change of any kind: prepublish, promote, deprecate (0: due now).",
                secs.to_string(),
            );
        }
        if let Some(cut) = g.cut_off {
            gauge(
                &mut out,
                "wid_serve_etcd_cut_off",
                "1 while this server's copy of the replicated keyring is not proven current.",
                u8::from(cut).to_string(),
            );
        }
        if let Some(elected) = g.rotator_elected {
            gauge(
                &mut out,
                "wid_serve_rotator_elected",
                "1 while this server's rotation candidate is the elected rotator.",
                u8::from(elected).to_string(),
            );
        }
        if let Some(secs) = g.next_rotation_secs {
            gauge(
                &mut out,
                "wid_serve_next_rotation_seconds",
                "Seconds until the rotation policy's next planned key switch (negative: overdue).",
                secs.to_string(),
            );
        }
        out
    }
}

/// Connections open now (for `/metrics`).
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// Connections open now.
pub(super) fn open_connections() -> usize {
    OPEN.load(Ordering::Relaxed)
}

/// Counts one open connection for as long as it lives.
pub(super) struct Open;

impl Open {
    pub(super) fn new() -> Open {
        OPEN.fetch_add(1, Ordering::Relaxed);
        Open
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_gauges() {
        let m = Metrics::default();
        m.count("jwks", 200);
        m.count("jwks", 200);
        m.count("other", 404);
        m.keystore_reloads.fetch_add(1, Ordering::Relaxed);
        let text = m.render(&Gauges {
            keys_served: 3,
            next_rotation_secs: Some(86_400),
            current: true,
            connections: 1,
            keys_by_state: vec![("active", 1), ("deprecated", 0)],
            next_change_secs: Some(60),
            last_change: 1_700_000_000,
            cut_off: Some(false),
            rotator_elected: Some(true),
        });
        for line in [
            "wid_serve_requests_total{route=\"jwks\",status=\"200\"} 2",
            "wid_serve_requests_total{route=\"other\",status=\"404\"} 1",
            "wid_serve_keystore_reloads_total 1",
            "wid_serve_keys_served 3",
            "wid_serve_keys_current 1",
            "wid_serve_next_rotation_seconds 86400",
            "wid_serve_keys{state=\"active\"} 1",
            "wid_serve_keys{state=\"deprecated\"} 0",
            "wid_serve_next_key_change_seconds 60",
            "wid_serve_last_key_change_timestamp_seconds 1700000000",
            "wid_serve_etcd_cut_off 0",
            "wid_serve_rotator_elected 1",
            "# TYPE wid_serve_requests_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
