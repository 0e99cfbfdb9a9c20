//! Keystores, plaintext and wrapped by a KEK.

use super::world::world;
use crate::keyring::{Algorithm, KeyState, Keyring};

/// Keystore loading; a loaded keyring has at most one active key per
/// algorithm, every key that signs or will (active, prepublished) holds its
/// secret, and the active keys sign.
pub fn keystore_load(data: &[u8]) {
    if let Ok(kr) = Keyring::from_keystore_bytes(data) {
        keystore_load_invariants(&kr);
    }
}

/// What every loaded keystore holds (see [`keystore_load`]).
fn keystore_load_invariants(kr: &Keyring) {
    {
        let keys = kr.keys();
        for purpose in crate::keyring::KeyPurpose::ALL {
            for alg in Algorithm::ALL {
                let active = keys
                    .iter()
                    .filter(|k| {
                        k.state == KeyState::Active && k.algorithm == *alg && k.purpose == *purpose
                    })
                    .count();
                assert!(active <= 1, "{active} active {alg} {purpose} keys");
            }
        }
        for k in &keys {
            assert!(
                !k.state.signs_or_will() || k.can_sign(),
                "a verify-only key loaded as {}",
                k.state.name()
            );
        }
        for alg in Algorithm::ALL {
            if kr.active_id_for(*alg).is_some() {
                let active = kr
                    .active_for(*alg)
                    .unwrap_or_else(|e| panic!("the active {alg} key: {e}"));
                active
                    .sign(b"fuzz")
                    .unwrap_or_else(|e| panic!("the active {alg} key signs: {e}"));
            }
        }
    }
}

/// The KEK of the `keystore_wrapped` target (fixed, so committed seeds stay
/// wrapped by it).
pub const FUZZ_KEK: [u8; 32] = [0x4b; 32];

/// Wrapped keystore loading (version 3) with [`FUZZ_KEK`]: whatever loads
/// obeys the `keystore_load` invariants, was wrapped by that KEK (it saves
/// and loads again to the same keys), and never loads without the KEK or
/// with another; and a plaintext keystore never loads with a KEK unless
/// plaintext is allowed. Returns whether it loaded.
pub fn keystore_wrapped(data: &[u8]) -> bool {
    use crate::custody::{KekFile, KeyWrapper};
    use crate::keyring::KeystoreLoadOptions;
    use std::sync::Arc;
    // The KEK is 32 bytes: KekFile::from_bytes cannot refuse it.
    let kek: Arc<dyn KeyWrapper> = match KekFile::from_bytes(&FUZZ_KEK) {
        Ok(k) => Arc::new(k),
        Err(e) => panic!("the fuzz KEK: {e}"),
    };
    let with = KeystoreLoadOptions::default().wrapper(Arc::clone(&kek));
    let loaded = Keyring::from_keystore_bytes_with(data, &with);
    let plain = Keyring::from_keystore_bytes(data);
    match (&loaded, &plain) {
        (Ok(_), Ok(_)) => panic!("one keystore loaded both wrapped and in plaintext"),
        (Err(_), Ok(_)) => {
            let allowed = with.clone().allow_plaintext(true);
            let kr = Keyring::from_keystore_bytes_with(data, &allowed).unwrap_or_else(|e| {
                panic!("a plaintext keystore refused with plaintext allowed: {e}")
            });
            assert_eq!(
                kr.keys(),
                plain.as_ref().map(Keyring::keys).unwrap_or_default()
            );
        }
        _ => {}
    }
    let Ok(kr) = loaded else {
        return false;
    };
    keystore_load_invariants(&kr);
    let other: Arc<dyn KeyWrapper> = match KekFile::from_bytes(&[0x4c; 32]) {
        Ok(k) => Arc::new(k),
        Err(e) => panic!("the other KEK: {e}"),
    };
    let e = Keyring::from_keystore_bytes_with(data, &KeystoreLoadOptions::default().wrapper(other))
        .err()
        .unwrap_or_else(|| panic!("a keystore wrapped by the fuzz KEK loaded with another"));
    assert_eq!(e.code(), crate::error::ResultCode::KeyCustodyFailed, "{e}");
    let again = kr
        .to_wrapped_keystore_bytes(&*kek)
        .unwrap_or_else(|e| panic!("a loaded keyring wraps again: {e}"));
    let back = Keyring::from_keystore_bytes_with(&again, &with)
        .unwrap_or_else(|e| panic!("our own wrapped keystore loads: {e}"));
    assert_eq!(back.keys(), kr.keys());
    true
}

/// Seeds of `keystore_wrapped`: (name, bytes, loads).
pub fn keystore_wrapped_seeds() -> Vec<(&'static str, Vec<u8>, bool)> {
    use crate::custody::KekFile;
    let kek = match KekFile::from_bytes(&FUZZ_KEK) {
        Ok(k) => k,
        Err(e) => panic!("the fuzz KEK: {e}"),
    };
    let kr = world().keyring.clone();
    let wrapped = kr
        .to_wrapped_keystore_bytes(&kek)
        .unwrap_or_else(|e| panic!("seed keystore: {e}"));
    let other = match KekFile::from_bytes(&[0x4c; 32]) {
        Ok(k) => kr.to_wrapped_keystore_bytes(&k),
        Err(e) => panic!("the other KEK: {e}"),
    }
    .unwrap_or_else(|e| panic!("seed keystore: {e}"));
    let mut plain = Vec::new();
    if let Ok(dir) = tempdir_path() {
        let path = dir.join("plain");
        if kr.save(&path).is_ok() {
            plain = std::fs::read(&path).unwrap_or_default();
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    // One byte of the first wrapped key changed, the checksum recomputed.
    let tampered = retag(&wrapped);
    vec![
        ("tampered-key", tampered, false),
        ("three-algorithms", wrapped, true),
        ("other-kek", other, false),
        ("plaintext", plain, false),
    ]
}

/// `bytes` (a keystore) with the byte after the first `Wrapped` key's bin
/// header flipped and the body's checksum made right again.
fn retag(bytes: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let mut out = bytes.to_vec();
    let (Some(body), Some(sum), Some(w)) = (
        find(&out, b"\xa4Body"),
        find(&out, b"\xa6SHA256\xc4\x20"),
        find(&out, b"\xa7Wrapped\xc4"),
    ) else {
        return out;
    };
    out[w + 10] ^= 0x01;
    let at = body + 5;
    let (len, start) = match out.get(at) {
        Some(0xc4) => (usize::from(out[at + 1]), at + 2),
        Some(0xc5) => (
            usize::from(u16::from_be_bytes([out[at + 1], out[at + 2]])),
            at + 3,
        ),
        _ => return out,
    };
    let digest = Sha256::digest(&out[start..start + len]);
    out[sum + 9..sum + 41].copy_from_slice(&digest);
    out
}

/// A fresh private directory under the system temp dir.
fn tempdir_path() -> std::io::Result<std::path::PathBuf> {
    let mut n = [0u8; 8];
    getrandom::fill(&mut n).map_err(|e| std::io::Error::other(e.to_string()))?;
    let dir = std::env::temp_dir().join(format!("wid-fuzz-seed-{}", u64::from_le_bytes(n)));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}
