//! Keyring costs: `rotate` and a JWKS export at 1, 10 and 1,000 keys, plus a
//! verifying-key lookup (which must not grow with the number of keys).
//!
//! `cargo bench --bench keyring`

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use workload_identity::Keyring;

fn keyring_of(n: usize) -> Keyring {
    let kr = Keyring::new();
    for i in 0..n {
        kr.rotate(i as i64).unwrap();
    }
    kr
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyring");
    for n in [1usize, 10, 1000] {
        let kr = keyring_of(n);
        let mut now = n as i64;
        g.bench_with_input(BenchmarkId::new("rotate", n), &n, |b, _| {
            b.iter(|| {
                now += 1;
                // Keep the size constant: drop the key that just became inactive.
                let prev = kr.active_id().unwrap();
                let id = kr.rotate(now).unwrap();
                kr.remove(prev.as_str()).unwrap();
                id
            })
        });
        let kr = keyring_of(n);
        g.bench_with_input(BenchmarkId::new("jwks_json", n), &n, |b, _| {
            b.iter(|| black_box(kr.jwks().to_json()))
        });
        let kid = kr.active_id().unwrap();
        g.bench_with_input(BenchmarkId::new("verifying_key_lookup", n), &n, |b, _| {
            b.iter(|| black_box(kr.verifying_key(black_box(kid.as_str()))).is_some())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
