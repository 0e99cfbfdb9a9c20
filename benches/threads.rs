//! How verification scales with threads: cache hits and full verifications on
//! 1, 2 and as many threads as the machine has (one `Verifier`, one keyring,
//! one `MemoryStore` shared by all of them).
//!
//! `cargo bench --bench threads`
//!
//! Each measurement runs the same number of verifications on every thread at
//! once and reports the throughput of all threads together (criterion's
//! `elem/s`): perfect scaling is N times the one-thread figure. Every thread
//! walks its own stride through a pool of 256 tokens for 256 live allocations,
//! so the threads share the verifier, the key, the store and the cache, but
//! not one token.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use workload_identity::model::IssueRequest;
use workload_identity::unix_now;
use workload_identity::{Audience, Issuer, Keyring, MemoryStore, Verifier};
use workload_identity::{KeyDerivation, KeyId, KeyMaterial, KeyState, RootKey};

#[path = "../tests/common/mod.rs"]
mod common;

/// Tokens (and allocations) in the pool.
const POOL: usize = 256;

fn request(i: usize) -> IssueRequest {
    let mut req = common::issue_request_task();
    req.allocation.id = format!("5f8c7d2e-3b1a-4c6d-9e0f-{i:012}");
    req
}

/// Runs `iters` verifications on each of `threads` threads at once and
/// returns the wall time from the common start to the last thread's end.
fn run(verifier: &Verifier, tokens: &[String], now: i64, threads: usize, iters: u64) -> Duration {
    let start = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let start = &start;
                scope.spawn(move || {
                    // Each thread starts elsewhere in the pool and walks it
                    // with an odd stride, so no two threads share a token.
                    let mut i = t * POOL / threads;
                    start.wait();
                    for _ in 0..iters {
                        black_box(verifier.verify(black_box(&tokens[i]), now).unwrap());
                        i = (i + 17) % POOL;
                    }
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        for w in workers {
            w.join().unwrap();
        }
        t0.elapsed()
    })
}

fn bench(c: &mut Criterion) {
    let now = unix_now();
    let kr = Keyring::from_keys([RootKey::new(
        KeyId::new("bench-key").unwrap(),
        KeyMaterial::from_slice(&[7; 32]).unwrap(),
        KeyDerivation::NomadRawSeed,
        KeyState::Active,
        0,
    )])
    .unwrap();
    let store = Arc::new(MemoryStore::new());
    let issuer = Issuer::new(kr.clone());
    let tokens: Vec<String> = (0..POOL)
        .map(|i| {
            let req = request(i);
            store.upsert(&req.allocation);
            issuer.issue(&req, now).unwrap().token
        })
        .collect();
    let audience = Audience::new("vault.io").unwrap();
    let full = Verifier::builder(kr.clone(), store.clone(), audience.clone()).build();
    let cached = Verifier::builder(kr, store, audience)
        .cache(4 * POOL)
        .build();
    for t in &tokens {
        full.verify(t, now).unwrap();
        cached.verify(t, now).unwrap();
    }
    assert_eq!(cached.stats().cache_entries, POOL as u64);

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut counts = vec![1, 2, cores];
    counts.sort_unstable();
    counts.dedup();

    for (name, verifier) in [("cache hit", &cached), ("full verification", &full)] {
        let mut g = c.benchmark_group(format!("threads/{name}"));
        for &threads in &counts {
            g.throughput(Throughput::Elements(threads as u64));
            g.bench_with_input(BenchmarkId::from_parameter(threads), &threads, |b, &n| {
                b.iter_custom(|iters| run(verifier, &tokens, now, n, iters))
            });
        }
        g.finish();
    }
    let hits = cached.stats().cache_hits;
    assert!(hits > 0, "the cache-hit rows never hit the cache");
}

criterion_group!(benches, bench);
criterion_main!(benches);
