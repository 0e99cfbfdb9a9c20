//! No key material, seed or keystore body is left in freed heap memory.
//!
//! A counting global allocator scans every block as it is freed (reallocation
//! frees through the same path) for a known 32-byte material pattern, the
//! Ed25519 seed derived from it, and a slice of an RSA key's private part. The
//! whole key life cycle runs while it is armed, for EdDSA, ES256 (from the same
//! material) and RS256 (PKCS#8) keys: insert, rotate, issue, save, load (file
//! and bytes), wrapped save/load/rewrap with a KEK, export, the C ABI's insert/save/load, and dropping everything. The count of freed blocks holding
//! either pattern must be zero. (Stack copies are out of reach of any allocator;
//! the library keeps secrets on the heap in place and moves only pointers.)

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use workload_identity::{Algorithm, Issuer, Keyring};
use workload_identity::{KeyDerivation, KeyId, KeyMaterial, KeyState, RootKey};

/// The material: distinctive bytes that appear nowhere by chance.
const MATERIAL: [u8; 32] = [
    0xa5, 0x5a, 0x13, 0x37, 0xc0, 0xde, 0xfa, 0xce, 0x0b, 0xad, 0xf0, 0x0d, 0x8b, 0xad, 0x5e, 0xed,
    0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98,
];

/// Patterns searched for: the first 16 bytes of each secret (a match that long
/// is never chance). Written once before arming.
static mut PATTERNS: [[u8; 16]; 3] = [[0; 16]; 3];

/// Bytes from the private part of the committed RSA key (past the modulus and
/// the public exponent) are the third pattern.
use common::RSA_PKCS8;
const RSA_PRIVATE_AT: usize = 700;
static ARMED: AtomicBool = AtomicBool::new(false);
static HITS: AtomicUsize = AtomicUsize::new(0);
static SCANNED: AtomicUsize = AtomicUsize::new(0);

struct Scanning;

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

#[global_allocator]
static GLOBAL: Scanning = Scanning;

fn pattern(bytes: &[u8]) -> [u8; 16] {
    bytes[..16].try_into().unwrap()
}

fn life_cycle(dir: &std::path::Path) {
    let id = KeyId::new("zeroize-key").unwrap();
    let key = RootKey::new(
        id.clone(),
        KeyMaterial::from_slice(&MATERIAL).unwrap(),
        KeyDerivation::HkdfV1,
        KeyState::Active,
        1_700_000_000,
    );
    let kr = Keyring::from_keys([key]).unwrap();
    let other = Keyring::new();
    other
        .insert(RootKey::new(
            KeyId::new("zeroize-raw").unwrap(),
            KeyMaterial::from_slice(&MATERIAL).unwrap(),
            KeyDerivation::NomadRawSeed,
            KeyState::Inactive,
            1_700_000_000,
        ))
        .unwrap();
    let token = Issuer::new(kr.clone())
        .issue(&common::issue_request_task(), 1_700_000_000)
        .unwrap();
    assert!(!token.token.is_empty());
    let path = dir.join("keys");
    kr.save(&path).unwrap();
    other.save(dir.join("raw")).unwrap();
    let loaded = Keyring::load(&path).unwrap();
    assert_eq!(loaded.len(), 1);
    let again = Keyring::load(dir.join("raw")).unwrap();
    assert_eq!(again.len(), 1);
    assert!(loaded.root_key("zeroize-key").is_some());
    let _ = loaded.keys();
    kr.rotate(1_700_000_100).unwrap();
    kr.save(&path).unwrap();
    let _ = Keyring::load(&path).unwrap();
    let _ = kr.jwks();
    let _ = kr.keys();

    // ES256 from the same material, RS256 from a PKCS#8 key.
    let algs = Keyring::from_keys([
        RootKey::for_algorithm(
            Algorithm::Es256,
            KeyId::new("zeroize-es").unwrap(),
            KeyMaterial::from_slice(&MATERIAL).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Active,
            0,
        ),
        common::alg_key(Algorithm::Rs256, "zeroize-rs", 0, KeyState::Active, 0),
    ])
    .unwrap();
    for alg in [Algorithm::Es256, Algorithm::Rs256] {
        Issuer::new(algs.clone())
            .issue_with(alg, &common::issue_request_task(), 1_700_000_000)
            .unwrap();
    }
    let alg_path = dir.join("algs");
    algs.save(&alg_path).unwrap();
    let back = Keyring::load(&alg_path).unwrap();
    assert_eq!(back.keys(), algs.keys());
    assert!(back.root_key("zeroize-rs").is_some());
    let _ = back.jwks();

    // Wrapped by a KEK (keystore version 3): save, load, rewrap with the same
    // KEK and with another, and back to plaintext; the material passes
    // through wrap and unwrap buffers each time.
    let kek: std::sync::Arc<dyn workload_identity::KeyWrapper> =
        std::sync::Arc::new(workload_identity::KekFile::from_bytes(&[0x3c; 32]).unwrap());
    let kek2: std::sync::Arc<dyn workload_identity::KeyWrapper> =
        std::sync::Arc::new(workload_identity::KekFile::from_bytes(&[0x3d; 32]).unwrap());
    let wrapped_path = dir.join("wrapped");
    for keys in [&kr, &algs] {
        keys.save_wrapped(&wrapped_path, &*kek).unwrap();
        let w = Keyring::load_wrapped(&wrapped_path, kek.clone()).unwrap();
        assert_eq!(w.keys(), keys.keys());
        let bytes = keys.to_wrapped_keystore_bytes(&*kek).unwrap();
        let _ = Keyring::from_keystore_bytes_with(
            &bytes,
            &workload_identity::KeystoreLoadOptions::default().wrapper(kek.clone()),
        )
        .unwrap();
    }
    let with = |k: &std::sync::Arc<dyn workload_identity::KeyWrapper>| {
        workload_identity::KeystoreLoadOptions::default().wrapper(k.clone())
    };
    Keyring::rewrap_keystore(&wrapped_path, &with(&kek), Some(&*kek)).unwrap();
    Keyring::rewrap_keystore(&wrapped_path, &with(&kek), Some(&*kek2)).unwrap();
    Keyring::rewrap_keystore(&wrapped_path, &with(&kek2), None).unwrap();
    assert_eq!(Keyring::load(&wrapped_path).unwrap().keys(), algs.keys());

    // The C ABI path.
    unsafe {
        use workload_identity::ffi::*;
        let mut h = std::ptr::null_mut();
        assert_eq!(wid_keyring_new(&mut h), WID_RESULT_OK);
        let kid = "ffi-key";
        let rc = wid_keyring_insert(
            h,
            kid.as_ptr().cast(),
            kid.len(),
            MATERIAL.as_ptr(),
            32,
            WID_KEY_DERIVATION_HKDF_V1,
            WID_KEY_STATE_ACTIVE,
            0,
        );
        assert_eq!(rc, WID_RESULT_OK);
        let kid = "ffi-rsa";
        let rc = wid_keyring_insert_alg(
            h,
            WID_ALG_RS256,
            kid.as_ptr().cast(),
            kid.len(),
            RSA_PKCS8.as_ptr(),
            RSA_PKCS8.len(),
            WID_KEY_DERIVATION_PKCS8,
            WID_KEY_STATE_ACTIVE,
            0,
        );
        assert_eq!(rc, WID_RESULT_OK);
        let p = dir.join("ffi-keys");
        let p = p.to_str().unwrap();
        assert_eq!(
            wid_keyring_save(h, p.as_ptr().cast(), p.len()),
            WID_RESULT_OK
        );
        let mut loaded = std::ptr::null_mut();
        assert_eq!(
            wid_keyring_load(p.as_ptr().cast(), p.len(), &mut loaded),
            WID_RESULT_OK
        );
        wid_keyring_free(loaded);
        wid_keyring_free(h);
    }
}

#[test]
fn no_secret_is_left_in_freed_memory() {
    let seed = KeyDerivation::HkdfV1.seed(
        &KeyMaterial::from_slice(&MATERIAL).unwrap(),
        &KeyId::new("zeroize-key").unwrap(),
    );
    // SAFETY: written once, before the allocator reads it (ARMED is false).
    unsafe {
        PATTERNS = [
            pattern(&MATERIAL),
            pattern(&seed[..]),
            pattern(&RSA_PKCS8[RSA_PRIVATE_AT..]),
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
