//! Issue latency with keys held by Vault/OpenBao Transit beside local keys
//! (feature `transit`): p50 and p99 of `Issuer::issue_with` for EdDSA, ES256
//! and RS256, each signed locally and through Transit on loopback.
//!
//! `scripts/transit-bench.sh` starts an OpenBao dev server and runs this; by
//! hand: `WID_TRANSIT_ADDR=http://127.0.0.1:8200 BAO_TOKEN=... cargo run
//! --release --features transit --example transit_latency` (it creates the
//! keys `bench-ed`, `bench-es`, `bench-rs` in `transit/`).

use std::time::{Duration, Instant};

#[path = "../tests/common/mod.rs"]
mod common;

use workload_identity::{
    Algorithm, Issuer, KeyState, Keyring, RsaKeySize, TransitClient, TransitSigner, unix_now,
};

fn percentiles(mut d: Vec<Duration>) -> (Duration, Duration) {
    d.sort();
    let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

fn measure(keyring: &Keyring, alg: Algorithm, n: usize) -> (Duration, Duration) {
    let issuer = Issuer::new(keyring.clone());
    let req = common::issue_request_task();
    let now = unix_now();
    for _ in 0..20 {
        issuer.issue_with(alg, &req, now).expect("warm-up issue");
    }
    let times = (0..n)
        .map(|_| {
            let t = Instant::now();
            issuer.issue_with(alg, &req, now).expect("issue");
            t.elapsed()
        })
        .collect();
    percentiles(times)
}

fn main() {
    let addr =
        std::env::var("WID_TRANSIT_ADDR").expect("WID_TRANSIT_ADDR (e.g. http://127.0.0.1:8200)");
    let n: usize = std::env::var("WID_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let mut client = TransitClient::builder(&addr).allow_http_loopback(true);
    if let Ok(ca) = std::env::var("WID_TRANSIT_CA") {
        client = client.ca_bundle_pem(&std::fs::read(ca).expect("the CA bundle"));
    }
    let client = client
        .build()
        .expect("a Transit client (token from VAULT_TOKEN or BAO_TOKEN)");

    let local = Keyring::new();
    local.rotate_alg(Algorithm::EdDsa, 0).unwrap();
    local.rotate_alg(Algorithm::Es256, 0).unwrap();
    local.rotate_rsa(RsaKeySize::Bits2048, 0).unwrap();
    let remote = Keyring::new();
    for name in ["bench-ed", "bench-es", "bench-rs"] {
        let s = TransitSigner::new(client.clone(), name).unwrap();
        s.sync(&remote, unix_now(), 0).unwrap_or_else(|e| {
            panic!("{name}: {e} (create it: bao write -f transit/keys/{name} type=...)")
        });
    }
    assert!(remote.keys().iter().all(|k| k.state == KeyState::Active));

    println!("issue latency, {n} samples each (loopback Transit at {addr})");
    println!("| algorithm | local p50 | local p99 | Transit p50 | Transit p99 |");
    println!("|---|---|---|---|---|");
    for alg in [Algorithm::EdDsa, Algorithm::Es256, Algorithm::Rs256] {
        let (lp50, lp99) = measure(&local, alg, n);
        let (tp50, tp99) = measure(&remote, alg, n);
        println!("| {alg} | {lp50:.1?} | {lp99:.1?} | {tp50:.1?} | {tp99:.1?} |");
    }
}
