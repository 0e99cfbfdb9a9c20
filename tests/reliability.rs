//! The reliability suite: concurrency under a rotation schedule (zero false
//! rejections, zero panics over 100,000+ operations) and resource bounds (the
//! verified-token cache and the per-key tables stay within their bounds under a
//! stream of 1,000,000 distinct tokens, measured as resident memory).
//!
//! Release builds only (`cargo test --release --test reliability`, as `.ci/run`
//! does): a million signatures and verifications take a minute optimised and
//! far longer in a debug build.
#![cfg(not(debug_assertions))]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use workload_identity::KeyState;
use workload_identity::{Audience, Issuer, Keyring, MemoryStore, ResultCode, Verifier};

const NOW: i64 = 1_700_000_000;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    statm
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 4096
}

#[test]
fn concurrent_issue_and_verify_under_a_rotation_schedule() {
    let keyring = Keyring::new();
    keyring.rotate(NOW).unwrap();
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let verifier = Verifier::builder(keyring.clone(), store, Audience::new("vault.io").unwrap())
        .key_wait(Duration::ZERO)
        .cache(1000)
        .build();
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let documented_rejections = Arc::new(AtomicU64::new(0));
    const TARGET_OPS: u64 = 100_000;
    const WORKERS: u64 = 4;
    /// Ten rounds of rotate, prepublish, promote, deprecate at least.
    const MIN_STEPS: u64 = 40;

    let workers: Vec<_> = (0..WORKERS as usize)
        .map(|w| {
            let (keyring, verifier, stop, ops, documented) = (
                keyring.clone(),
                verifier.clone(),
                stop.clone(),
                ops.clone(),
                documented_rejections.clone(),
            );
            std::thread::spawn(move || {
                let issuer = Issuer::new(keyring.clone());
                let req = common::issue_request_task();
                let mut held: Vec<String> = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Issue (the active key is always there), verify fresh, and
                    // re-verify an older token that may have lost its key since.
                    let signed = issuer
                        .issue(&req, NOW)
                        .expect("a signer always finds an active key");
                    ops.fetch_add(1, Ordering::Relaxed);
                    let fresh = verifier.verify(&signed.token, NOW);
                    ops.fetch_add(1, Ordering::Relaxed);
                    check(&keyring, &signed.token, fresh, &documented, w);
                    if i % 8 == 0 {
                        held.push(signed.token);
                    }
                    if let Some(old) = held.get((i as usize * 7) % held.len().max(1)) {
                        let r = verifier.verify(old, NOW);
                        ops.fetch_add(1, Ordering::Relaxed);
                        check(&keyring, old, r, &documented, w);
                    }
                    if held.len() > 64 {
                        held.remove(0);
                    }
                    i += 1;
                }
            })
        })
        .collect();

    // The fifth thread: rotate, prepublish, promote and deprecate on a schedule,
    // until the operations reach their target and the schedule its minimum.
    // After each change it waits for the workers to run on the new state (an
    // operation begun after the change), so every change is made during the
    // operations however the host schedules the threads.
    let scheduler = {
        let (keyring, stop, ops) = (keyring.clone(), stop.clone(), ops.clone());
        std::thread::spawn(move || {
            let mut t = NOW;
            let mut steps = 0u64;
            while ops.load(Ordering::Relaxed) < TARGET_OPS || steps < MIN_STEPS {
                t += 10;
                match steps % 4 {
                    0 => drop(keyring.rotate(t).unwrap()),
                    1 => drop(keyring.prepublish(t, t + 5).unwrap()),
                    2 => drop(keyring.promote_due(t + 5)),
                    _ => {
                        // Deprecate the oldest inactive key: tokens it signed are
                        // then rejected, for the documented reason.
                        if let Some(k) = keyring
                            .keys()
                            .into_iter()
                            .find(|k| k.state == KeyState::Inactive)
                        {
                            keyring.deprecate(&k.kid, t).unwrap();
                        }
                    }
                }
                steps += 1;
                // A worker has at most one operation under way: past these,
                // one began after the change.
                let after = ops.load(Ordering::Relaxed) + WORKERS;
                std::thread::sleep(Duration::from_micros(500));
                let waiting = Instant::now();
                while ops.load(Ordering::Relaxed) <= after {
                    // Only to catch workers that all stopped (a panic).
                    assert!(
                        waiting.elapsed() < Duration::from_secs(120),
                        "no operation for 120 s after change {steps}: did the workers panic?"
                    );
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            stop.store(true, Ordering::Relaxed);
            steps
        })
    };
    // A scheduler that panicked (or gave up waiting for workers that did) set
    // no stop flag: set it, so that the workers can be joined and a worker's
    // panic is the one reported.
    let steps = match scheduler.join() {
        Ok(steps) => steps,
        Err(_) => {
            stop.store(true, Ordering::Relaxed);
            for w in workers {
                w.join().expect("no worker panicked");
            }
            panic!("the scheduler panicked");
        }
    };
    for w in workers {
        w.join().expect("no worker panicked");
    }
    let total = ops.load(Ordering::Relaxed);
    assert!(total >= TARGET_OPS, "{total} operations");
    assert!(steps >= MIN_STEPS, "the schedule ran ({steps} steps)");
    println!(
        "{total} operations, {steps} keyring changes, {} rejections all for a deprecated key",
        documented_rejections.load(Ordering::Relaxed)
    );
}

/// A rejection is only acceptable for a documented reason: the token's key was
/// deprecated (`UnknownKey`, "deprecated").
fn check(
    keyring: &Keyring,
    token: &str,
    result: Result<workload_identity::VerifiedIdentity, workload_identity::Error>,
    documented: &AtomicU64,
    worker: usize,
) {
    if let Err(e) = result {
        let kid = token_kid(token);
        let deprecated = keyring
            .key_info(&kid)
            .is_some_and(|k| k.state == KeyState::Deprecated);
        assert!(
            e.code() == ResultCode::UnknownKey
                && deprecated
                && e.to_string().contains("deprecated"),
            "worker {worker}: false rejection of a token of key {kid}: {e}"
        );
        documented.fetch_add(1, Ordering::Relaxed);
    }
}

fn token_kid(token: &str) -> String {
    use base64::Engine;
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.split('.').next().unwrap())
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&header).unwrap();
    v["kid"].as_str().unwrap().to_string()
}

#[test]
fn a_million_distinct_tokens_keep_the_cache_and_key_tables_bounded() {
    const TOKENS: u64 = 1_000_000;
    const CACHE: usize = 10_000;
    let keyring = Keyring::new();
    keyring.rotate(NOW).unwrap();
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let verifier = Verifier::builder(keyring.clone(), store, Audience::new("vault.io").unwrap())
        .cache(CACHE)
        .build();
    let issuer = Issuer::new(keyring.clone());
    let req = common::issue_request_task();
    // Warm up to the full cache, then measure growth over the rest.
    for _ in 0..(2 * CACHE) {
        verifier
            .verify(&issuer.issue(&req, NOW).unwrap().token, NOW)
            .unwrap();
    }
    let warm = rss_bytes();
    let done = AtomicU64::new(2 * CACHE as u64);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while done.fetch_add(1, Ordering::Relaxed) < TOKENS {
                    let token = issuer.issue(&req, NOW).unwrap().token;
                    verifier.verify(&token, NOW).unwrap();
                }
            });
        }
    });
    let grown = rss_bytes().saturating_sub(warm);
    let stats = verifier.stats();
    assert!(
        stats.cache_entries <= CACHE as u64,
        "{} entries",
        stats.cache_entries
    );
    assert!(stats.accepted >= TOKENS, "{} accepted", stats.accepted);
    assert_eq!(keyring.len(), 1, "no per-token key state");
    // 10,000 entries of ~0.7 KiB are ~7 MiB; a cache that kept every token would
    // need ~700 MiB. Allow allocator slack, nothing more.
    assert!(
        grown < 32 << 20,
        "resident memory grew {grown} bytes after warm-up"
    );
    println!(
        "{} tokens verified; cache {} entries; resident memory after warm-up grew {} KiB",
        stats.accepted,
        stats.cache_entries,
        grown / 1024
    );
}
