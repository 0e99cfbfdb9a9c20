//! No key material, seed or keystore body is left in freed heap memory.
//!
//! A counting global allocator scans every block as it is freed (reallocation
//! frees through the same path) for a known 32-byte material pattern, the
//! Ed25519 seed derived from it, and a slice of an RSA key's private part. The
//! whole key life cycle runs while it is armed, for EdDSA, ES256 (from the same
//! material) and RS256 (PKCS#8) keys: insert, rotate, issue, save, load (file
//! and bytes), wrapped save/load/rewrap with a KEK, export, and dropping everything. The count of freed blocks holding
//! either pattern must be zero. (Stack copies are out of reach of any allocator;
//! the library keeps secrets on the heap in place and moves only pointers.)

mod common;
#[path = "zeroize_support/scanner.rs"]
mod scanner;

use common::RSA_PKCS8;
use scanner::{MATERIAL, Scanning};
use workload_identity::{Algorithm, Issuer, Keyring};
use workload_identity::{KeyDerivation, KeyId, KeyMaterial, KeyState, RootKey};

#[global_allocator]
static GLOBAL: Scanning = Scanning;

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
}

#[test]
fn no_secret_is_left_in_freed_memory() {
    scanner::check(RSA_PKCS8, life_cycle);
}
