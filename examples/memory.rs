//! Resident memory of the per-key verification tables and of cache entries,
//! measured from /proc/self/statm (Linux).
//!
//! `cargo run --release --example memory`

use std::sync::Arc;

use workload_identity::model::IssueRequest;
use workload_identity::{Audience, Issuer, Keyring, MemoryStore, Verifier};
use workload_identity::{KeyDerivation, KeyId, KeyMaterial, KeyState, RootKey};

#[path = "../tests/common/mod.rs"]
mod common;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The shared sample task request, for a distinct allocation per `i`.
fn request(i: usize) -> IssueRequest {
    let mut req = common::issue_request_task();
    req.allocation.id = format!("5f8c7d2e-3b1a-4c6d-9e0f-{i:012}");
    req
}

fn main() {
    const KEYS: usize = 1000;
    const TOKENS: usize = 100_000;
    let now = 1_700_000_000;
    let store = Arc::new(MemoryStore::new());

    // Per-key tables: 1,000 keys, one verification each (tables are built lazily).
    let keyring = Keyring::new();
    let mut tokens = Vec::with_capacity(KEYS);
    for k in 0..KEYS {
        let mut m = [0u8; 32];
        m[..8].copy_from_slice(&(k as u64).to_le_bytes());
        let key = |state| {
            RootKey::new(
                KeyId::new(&format!("k{k}")).unwrap(),
                KeyMaterial::from_slice(&m).unwrap(),
                KeyDerivation::HkdfV1,
                state,
                0,
            )
        };
        let single = Keyring::from_keys([key(KeyState::Active)]).unwrap();
        keyring.insert(key(KeyState::Inactive)).unwrap();
        let req = request(k);
        store.upsert(&req.allocation);
        tokens.push(Issuer::new(single).issue(&req, now).unwrap().token);
    }
    let verifier =
        Verifier::builder(keyring, store.clone(), Audience::new("vault.io").unwrap()).build();
    let before = rss_bytes();
    // The first verification also builds the base point's table (once per
    // process); each later one builds its key's table.
    let started = std::time::Instant::now();
    verifier.verify(&tokens[0], now).unwrap();
    let first = started.elapsed();
    let started = std::time::Instant::now();
    for t in &tokens[1..] {
        verifier.verify(t, now).unwrap();
    }
    let each = started.elapsed() / (KEYS as u32 - 1);
    let per_key = (rss_bytes() - before) as f64 / KEYS as f64;
    println!("verification tables: {per_key:.0} bytes per key (resident, {KEYS} keys)");
    println!(
        "first verification in the process (base point's table, one key's): {first:.2?}; each new key's first: {each:.2?}"
    );

    // Cache entries: 100,000 distinct tokens.
    let kr = Keyring::new();
    kr.rotate(0).unwrap();
    let issuer = Issuer::new(kr.clone());
    let cached = Verifier::builder(kr, store.clone(), Audience::new("vault.io").unwrap())
        .cache(TOKENS)
        .build();
    let req = request(0);
    let tokens: Vec<String> = (0..TOKENS)
        .map(|_| issuer.issue(&req, now).unwrap().token)
        .collect();
    cached.verify(&tokens[0], now).unwrap();
    let before = rss_bytes();
    for t in &tokens {
        cached.verify(t, now).unwrap();
    }
    let per_entry = (rss_bytes() - before) as f64 / TOKENS as f64;
    println!(
        "token cache: {per_entry:.0} bytes per entry (resident, {} entries)",
        cached.stats().cache_entries
    );
}
