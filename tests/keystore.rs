//! Keystore persistence: round trips, and every truncated, corrupted, foreign or
//! newer file is a clear error that never yields a partial keyring.

use std::os::unix::fs::PermissionsExt;

use workload_identity::ResultCode;
use workload_identity::{KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, RootKey};

fn sample() -> Keyring {
    let kr = Keyring::from_keys([
        RootKey::new(
            KeyId::new("old").unwrap(),
            KeyMaterial::from_slice(&[1; 32]).unwrap(),
            KeyDerivation::NomadRawSeed,
            KeyState::Deprecated,
            10,
        ),
        RootKey::new(
            KeyId::new("5b6f0c6e-8d7a-4e2b-9f1c-3a2d4e5f6a7b").unwrap(),
            KeyMaterial::from_slice(&[2; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Active,
            20,
        ),
    ])
    .unwrap();
    kr.prepublish(30, 900).unwrap();
    kr.rotate(40).unwrap();
    kr
}

#[test]
fn save_and_load_round_trip_everything_with_mode_0600() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keystore");
    let kr = sample();
    kr.save(&path).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let back = Keyring::load(&path).unwrap();
    assert_eq!(back.keys(), kr.keys());
    assert_eq!(back.active_id(), kr.active_id());
    for k in kr.keys() {
        assert_eq!(back.root_key(k.kid.as_str()), kr.root_key(k.kid.as_str()));
    }
    // The loaded keyring signs with the same key.
    let sig = back.active().unwrap().sign(b"m").unwrap();
    let vk = kr.verifying_key(kr.active_id().unwrap().as_str()).unwrap();
    assert!(vk.verify(b"m", &sig));
    // Saving again over the file works and is byte-identical (deterministic).
    let first = std::fs::read(&path).unwrap();
    back.save(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), first);
}

/// A kubernetes key keeps its purpose through a keystore (record
/// `Purpose` `kubernetes`), and an EdDSA key of the purpose is never taken.
#[test]
fn kubernetes_keys_keep_their_purpose_and_algorithms() {
    use workload_identity::{Algorithm, KeyPurpose};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ks");
    let kr = Keyring::new();
    let kid = kr
        .rotate_purpose(KeyPurpose::Kubernetes, Algorithm::Rs256, 50)
        .unwrap();
    kr.save(&path).unwrap();
    let back = Keyring::load(&path).unwrap();
    assert_eq!(back.keys(), kr.keys());
    assert_eq!(
        back.active_id_for_purpose(KeyPurpose::Kubernetes, Algorithm::Rs256),
        Some(kid)
    );
    assert!(back.jwks().keys.is_empty());
    // However a key comes in, an EdDSA key of the purpose is refused.
    let ed = RootKey::generate_for(Algorithm::EdDsa, KeyState::Active, 60)
        .unwrap()
        .with_purpose(KeyPurpose::Kubernetes);
    let e = Keyring::from_keys([ed]).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    assert!(e.to_string().contains("ES256 or RS256"), "{e}");
}

#[test]
fn verify_only_keys_survive_a_round_trip() {
    let (kr, _) = Keyring::from_jwks(&sample().jwks().to_json()).unwrap();
    let bytes_dir = tempfile::tempdir().unwrap();
    let path = bytes_dir.path().join("ks");
    kr.save(&path).unwrap();
    let back = Keyring::load(&path).unwrap();
    assert_eq!(back.keys(), kr.keys());
    assert!(back.keys().iter().all(|k| !k.can_sign()));
}

#[test]
fn material_never_appears_in_debug_or_errors() {
    let kr = sample();
    let dbg = format!("{kr:?} {:?}", kr.keys());
    assert!(!dbg.contains("[2, 2, 2"), "{dbg}");
    let root = kr.root_key("5b6f0c6e-8d7a-4e2b-9f1c-3a2d4e5f6a7b").unwrap();
    assert!(format!("{root:?}").contains("[redacted]"));
}

fn load_err(bytes: &[u8]) -> workload_identity::Error {
    match Keyring::from_keystore_bytes(bytes) {
        Ok(kr) => panic!("expected an error, got a keyring with {} keys", kr.len()),
        Err(e) => e,
    }
}

fn saved_bytes() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ks");
    sample().save(&path).unwrap();
    std::fs::read(path).unwrap()
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = saved_bytes();
    Keyring::from_keystore_bytes(&bytes).unwrap();
    for cut in 0..bytes.len() {
        let e = load_err(&bytes[..cut]);
        assert_eq!(e.code(), ResultCode::DecodeError, "cut at {cut}: {e}");
    }
}

#[test]
fn every_single_byte_corruption_is_an_error() {
    let bytes = saved_bytes();
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = bytes.clone();
            bad[i] ^= flip;
            let e = load_err(&bad);
            assert_eq!(
                e.code(),
                ResultCode::DecodeError,
                "byte {i} ^ {flip:#x}: {e}"
            );
        }
    }
    // A flip inside the body is caught by the checksum, with that message.
    let mut bad = bytes.clone();
    let at = bytes.windows(3).position(|w| w == b"old").unwrap();
    bad[at] ^= 0x20;
    let e = load_err(&bad);
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
}

#[test]
fn foreign_files_are_rejected_clearly() {
    for foreign in [
        &b""[..],
        b"{\"keys\":[]}",
        b"\x00\x01\x02\x03garbage",
        b"\x81\xa4Name\xa3bob",
        b"\x80",
    ] {
        let e = load_err(foreign);
        assert_eq!(e.code(), ResultCode::DecodeError);
        assert!(
            e.to_string().contains("not a workload-identity keystore"),
            "{e}"
        );
    }
}

#[test]
fn a_newer_format_version_says_so() {
    let bytes = saved_bytes();
    let needle = b"\xa7Version\x02";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    let mut newer = bytes.clone();
    newer[at + needle.len() - 1] = 0x04;
    let e = load_err(&newer);
    assert!(
        e.to_string()
            .contains("keystore format version 4 is newer than this library reads (up to 3)"),
        "{e}"
    );
    // A plaintext body under a version 3 envelope: version 3 is wrapped and
    // names its KEK, so plaintext material there is refused.
    newer[at + needle.len() - 1] = 0x03;
    let e = load_err(&newer);
    assert!(
        e.to_string()
            .contains("a version 3 keystore names its KEK in Wrapping, and this one has none"),
        "{e}"
    );
    // A version 2 body under a version 1 envelope: version 1 keys have no
    // algorithm, so one that names it is refused rather than guessed at.
    newer[at + needle.len() - 1] = 0x01;
    let e = load_err(&newer);
    assert!(
        e.to_string()
            .contains("Keys[0].Algorithm: a version 1 keystore has no algorithms"),
        "{e}"
    );
    newer[at + needle.len() - 1] = 0x00;
    assert!(
        load_err(&newer)
            .to_string()
            .contains("version 0 is not valid")
    );
}

#[test]
fn io_errors_name_the_path() {
    let e = Keyring::load("/nonexistent/dir/keystore").unwrap_err();
    assert_eq!(e.code(), ResultCode::IoError);
    assert!(
        e.to_string()
            .contains("reading keystore /nonexistent/dir/keystore"),
        "{e}"
    );
    let e = sample().save("/nonexistent/dir/keystore").unwrap_err();
    assert_eq!(e.code(), ResultCode::IoError);
}
