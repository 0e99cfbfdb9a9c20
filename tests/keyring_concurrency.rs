//! One thread rotates 1,000 times while two threads sign and verify with
//! whatever key is active: every signature made verifies, and nothing deadlocks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use workload_identity::Keyring;

#[test]
fn rotation_under_concurrent_signing_and_verifying() {
    let kr = Keyring::new();
    kr.rotate(0).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let signed = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();

    let mut workers = Vec::new();
    for t in 0..2u64 {
        let (kr, done, signed, tx) = (kr.clone(), done.clone(), signed.clone(), tx.clone());
        workers.push(std::thread::spawn(move || {
            let mut n = 0u64;
            let mut kids = std::collections::HashSet::new();
            while !done.load(Ordering::Acquire) || n < 100 {
                let key = kr.active().expect("a signer always sees an active key");
                let msg = format!("thread {t} message {n}");
                let sig = key.sign(msg.as_bytes()).unwrap();
                let vk = kr
                    .verifying_key(key.id().as_str())
                    .unwrap_or_else(|| panic!("key {} vanished", key.id()));
                assert!(vk.verify(msg.as_bytes(), &sig), "{msg} under {}", key.id());
                kids.insert(key.id().clone());
                n += 1;
            }
            signed.fetch_add(n, Ordering::Relaxed);
            tx.send(kids.len()).unwrap();
        }));
    }
    let rotator = {
        let (kr, done, tx) = (kr.clone(), done.clone(), tx.clone());
        std::thread::spawn(move || {
            for i in 1..=1000 {
                kr.rotate(i).unwrap();
                // Readers of the JWKS run alongside too.
                if i % 100 == 0 {
                    assert!(kr.jwks().keys.len() as i64 > i);
                }
            }
            done.store(true, Ordering::Release);
            tx.send(0).unwrap();
        })
    };
    drop(tx);
    // Three reports (two workers, one rotator) within a generous bound, or a deadlock.
    let mut distinct_keys = Vec::new();
    for _ in 0..3 {
        distinct_keys.push(
            rx.recv_timeout(Duration::from_secs(120))
                .expect("no progress for 120 s: deadlock"),
        );
    }
    rotator.join().unwrap();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(kr.len(), 1001);
    assert_eq!(
        kr.keys()
            .iter()
            .filter(|k| k.state == workload_identity::KeyState::Active)
            .count(),
        1
    );
    let total = signed.load(Ordering::Relaxed);
    assert!(total >= 200, "signed {total}");
    // The signers really did run across rotations (more than one key used).
    assert!(distinct_keys.iter().any(|&n| n > 1), "{distinct_keys:?}");
    println!(
        "signed and verified {total} messages across 1,000 rotations; keys seen per signer: {distinct_keys:?}"
    );
}
