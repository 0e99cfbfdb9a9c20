//! The scanning allocator of the zeroize tests (tests/zeroize_freed.rs for the
//! library, ffi/tests/zeroize_freed.rs for the C ABI): every block freed while
//! it is armed is searched for a known key material, the Ed25519 seed derived
//! from it, and a slice of an RSA key's private part.
//!
//! A test crate installs it (`#[global_allocator] static GLOBAL: Scanning =
//! Scanning;`) and runs its key life cycle through [`check`].
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use workload_identity::{KeyDerivation, KeyId, KeyMaterial};

/// The material: distinctive bytes that appear nowhere by chance.
pub const MATERIAL: [u8; 32] = [
    0xa5, 0x5a, 0x13, 0x37, 0xc0, 0xde, 0xfa, 0xce, 0x0b, 0xad, 0xf0, 0x0d, 0x8b, 0xad, 0x5e, 0xed,
    0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98,
];

/// Patterns searched for: the first 16 bytes of each secret (a match that long
/// is never chance). Written once before arming.
static mut PATTERNS: [[u8; 16]; 3] = [[0; 16]; 3];

/// Bytes from the private part of the committed RSA key (past the modulus and
/// the public exponent) are the third pattern.
const RSA_PRIVATE_AT: usize = 700;
static ARMED: AtomicBool = AtomicBool::new(false);
static HITS: AtomicUsize = AtomicUsize::new(0);
static SCANNED: AtomicUsize = AtomicUsize::new(0);

pub struct Scanning;

fn contains(hay: &[u8], needle: &[u8; 16]) -> bool {
    hay.windows(16).any(|w| w == needle)
}

unsafe impl GlobalAlloc for Scanning {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ARMED.load(Ordering::Relaxed) {
            // SAFETY: the block is still ours until System.dealloc below.
            let block = unsafe { std::slice::from_raw_parts(ptr, layout.size()) };
            // SAFETY: PATTERNS is written before ARMED is set and never after.
            let patterns = unsafe { &*std::ptr::addr_of!(PATTERNS) };
            SCANNED.fetch_add(1, Ordering::Relaxed);
            if patterns.iter().any(|p| contains(block, p)) {
                HITS.fetch_add(1, Ordering::Relaxed);
            }
        }
        unsafe { System.dealloc(ptr, layout) }
    }
    // `realloc` is left to the trait's default: alloc, copy, then `dealloc`
    // of the old block, which is scanned like any other.
}

fn pattern(bytes: &[u8]) -> [u8; 16] {
    bytes[..16].try_into().unwrap()
}

/// Arms the scan for `rsa_pkcs8`'s private part and the material (and its
/// `zeroize-key` seed), checks that the scan sees a freed copy, runs
/// `life_cycle` armed, and fails if any freed block held a secret.
pub fn check(rsa_pkcs8: &[u8], life_cycle: impl FnOnce(&std::path::Path)) {
    let seed = KeyDerivation::HkdfV1.seed(
        &KeyMaterial::from_slice(&MATERIAL).unwrap(),
        &KeyId::new("zeroize-key").unwrap(),
    );
    // SAFETY: written once, before the allocator reads it (ARMED is false).
    unsafe {
        PATTERNS = [
            pattern(&MATERIAL),
            pattern(&seed[..]),
            pattern(&rsa_pkcs8[RSA_PRIVATE_AT..]),
        ];
    }
    drop(seed);
    let dir = tempfile::tempdir().unwrap();
    // The scan itself must work: a freed block that holds the material counts.
    ARMED.store(true, Ordering::SeqCst);
    drop(std::hint::black_box(MATERIAL.to_vec()));
    ARMED.store(false, Ordering::SeqCst);
    assert_eq!(
        HITS.swap(0, Ordering::SeqCst),
        1,
        "the scanner sees a plain Vec"
    );

    ARMED.store(true, Ordering::SeqCst);
    life_cycle(dir.path());
    ARMED.store(false, Ordering::SeqCst);
    let scanned = SCANNED.load(Ordering::SeqCst);
    let hits = HITS.load(Ordering::SeqCst);
    assert!(scanned > 100, "only {scanned} blocks were scanned");
    assert_eq!(
        hits, 0,
        "{hits} freed blocks (of {scanned}) still held key material, a seed or an RSA private key"
    );
}
