//! Loading a 1,000-key keystore wrapped by a KEK file (version 3) beside the
//! same keys in plaintext (version 2), interleaved (plaintext, wrapped,
//! plaintext, ...) so that a busy or drifting host weighs on both alike; prints
//! the medians of 30 rounds and their ratio (the goal: at most 1.3).
//!
//! `cargo run --release --example keystore_load_ratio`

use std::sync::Arc;
use std::time::{Duration, Instant};
use workload_identity::{KekFile, Keyring, KeystoreLoadOptions};
fn main() {
    let kr = Keyring::new();
    for i in 0..1000 {
        kr.rotate(i).unwrap();
    }
    let kek = KekFile::from_bytes(&[0x42; 32]).unwrap();
    let dir = std::env::temp_dir().join("wid-keystore-load-ratio");
    std::fs::create_dir_all(&dir).unwrap();
    kr.save(dir.join("p")).unwrap();
    let plain = std::fs::read(dir.join("p")).unwrap();
    let wrapped = kr.to_wrapped_keystore_bytes(&kek).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let opts = KeystoreLoadOptions::default().wrapper(Arc::new(kek));
    let mut p = Vec::new();
    let mut w = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        drop(Keyring::from_keystore_bytes(&plain).unwrap());
        p.push(t.elapsed());
        let t = Instant::now();
        drop(Keyring::from_keystore_bytes_with(&wrapped, &opts).unwrap());
        w.push(t.elapsed());
    }
    p.sort();
    w.sort();
    let med = |v: &Vec<Duration>| v[v.len() / 2];
    println!(
        "plain median {:?}, wrapped median {:?}, ratio {:.3}",
        med(&p),
        med(&w),
        med(&w).as_secs_f64() / med(&p).as_secs_f64()
    );
}
