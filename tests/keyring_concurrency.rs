//! One thread rotates 1,000 times while two threads sign and verify with
//! whatever key is active: every signature made verifies, and nothing deadlocks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use workload_identity::{KeyId, Keyring};

const SIGNERS: usize = 2;
const ROTATIONS: i64 = 1000;
/// Only to catch a hang: the run takes well under a second.
const LIMIT: Duration = Duration::from_secs(120);

/// Sets the flag when dropped: a rotator that panics still lets the signers
/// stop.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// What the rotator waits on: the key each signer last signed with, and
/// whether a signer panicked (then nothing more will come).
struct Progress {
    last_signed: Vec<Option<KeyId>>,
    signer_failed: bool,
}

type Shared = Arc<(Mutex<Progress>, Condvar)>;

/// Tells the rotator when its signer panics, so that it stops waiting.
struct SignerGuard(Shared);

impl Drop for SignerGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let (progress, changed) = &*self.0;
            progress
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .signer_failed = true;
            changed.notify_all();
        }
    }
}

#[test]
fn rotation_under_concurrent_signing_and_verifying() {
    let kr = Keyring::new();
    let first = kr.rotate(0).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let signed = Arc::new(AtomicU64::new(0));
    // The key each signer last signed with, and a signal when one changes: the
    // rotator rotates again only once every signer has signed with the
    // current key, so the signers run across every rotation however the
    // threads are scheduled.
    let progress: Shared = Arc::new((
        Mutex::new(Progress {
            last_signed: vec![None; SIGNERS],
            signer_failed: false,
        }),
        Condvar::new(),
    ));
    let (tx, rx) = mpsc::channel();

    let mut workers = Vec::new();
    for t in 0..SIGNERS {
        let (kr, done, signed, progress, tx) = (
            kr.clone(),
            done.clone(),
            signed.clone(),
            progress.clone(),
            tx.clone(),
        );
        workers.push(std::thread::spawn(move || {
            let _guard = SignerGuard(progress.clone());
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
                if kids.insert(key.id().clone()) {
                    let (state, changed) = &*progress;
                    state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .last_signed[t] = Some(key.id().clone());
                    changed.notify_all();
                }
                n += 1;
            }
            signed.fetch_add(n, Ordering::Relaxed);
            tx.send(Some(kids.len())).unwrap();
        }));
    }
    let rotator = {
        let (kr, done, tx) = (kr.clone(), done.clone(), tx.clone());
        std::thread::spawn(move || {
            let _stop_signers = SetOnDrop(done);
            let deadline = Instant::now() + LIMIT;
            let all_signed_with = |kid: &KeyId| {
                let (state, changed) = &*progress;
                let left = deadline.saturating_duration_since(Instant::now());
                let (state, wait) = changed
                    .wait_timeout_while(state.lock().unwrap(), left, |p| {
                        !p.signer_failed && p.last_signed.iter().any(|k| k.as_ref() != Some(kid))
                    })
                    .unwrap();
                // Not asserted under the lock, which would poison it for the signers.
                let (failed, last) = (state.signer_failed, state.last_signed.clone());
                drop(state);
                assert!(!failed, "a signer panicked");
                assert!(
                    !wait.timed_out(),
                    "the signers never signed with {kid} within {LIMIT:?} (last: {last:?})"
                );
            };
            all_signed_with(&first);
            for i in 1..=ROTATIONS {
                let kid = kr.rotate(i).unwrap();
                // Readers of the JWKS run alongside too.
                if i % 100 == 0 {
                    assert!(kr.jwks().keys.len() as i64 > i);
                }
                all_signed_with(&kid);
            }
            tx.send(None).unwrap();
        })
    };
    drop(tx);
    // Three reports (two workers, one rotator) within a generous bound, or a
    // deadlock. A thread that panicked sends nothing, but every other one then
    // ends too: they are joined below, the signers first, with their messages.
    let mut distinct_keys = Vec::new();
    for _ in 0..=SIGNERS {
        match rx.recv_timeout(LIMIT) {
            Ok(Some(n)) => distinct_keys.push(n),
            Ok(None) => {}
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!("no progress for {LIMIT:?}: deadlock"),
        }
    }
    for w in workers {
        w.join().unwrap();
    }
    rotator.join().unwrap();
    assert_eq!(kr.len(), 1001);
    assert_eq!(
        kr.keys()
            .iter()
            .filter(|k| k.state == workload_identity::KeyState::Active)
            .count(),
        1
    );
    let total = signed.load(Ordering::Relaxed);
    assert!(total >= 1001 * SIGNERS as u64, "signed {total}");
    // The signers really did run across rotations: each signed with every key.
    assert_eq!(distinct_keys, [1001; SIGNERS], "keys seen per signer");
    println!(
        "signed and verified {total} messages across 1,000 rotations; keys seen per signer: {distinct_keys:?}"
    );
}
