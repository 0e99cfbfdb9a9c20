//! Keyring costs: `rotate` and a JWKS export at 1, 10 and 1,000 keys, plus a
//! verifying-key lookup (which must not grow with the number of keys); and
//! loading a 1,000-key keystore in plaintext (version 2) beside the same keys
//! wrapped by a KEK file (version 3, AES-256-GCM per key): the goal is at
//! most 1.3 x.
//!
//! `cargo bench --bench keyring`

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::sync::Arc;
use workload_identity::{KekFile, Keyring, KeystoreLoadOptions};

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

    let mut g = c.benchmark_group("keystore_load");
    g.sample_size(20);
    let kr = keyring_of(1000);
    let kek = KekFile::from_bytes(&[0x42; 32]).unwrap();
    let dir = std::env::temp_dir().join(format!("wid-bench-keystore-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    kr.save(dir.join("plain")).unwrap();
    let plain = std::fs::read(dir.join("plain")).unwrap();
    let wrapped = kr.to_wrapped_keystore_bytes(&kek).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let options = KeystoreLoadOptions::default().wrapper(Arc::new(kek));
    g.bench_function("plaintext_1000", |b| {
        b.iter(|| Keyring::from_keystore_bytes(black_box(&plain)).unwrap())
    });
    g.bench_function("wrapped_kek_file_1000", |b| {
        b.iter(|| Keyring::from_keystore_bytes_with(black_box(&wrapped), &options).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
