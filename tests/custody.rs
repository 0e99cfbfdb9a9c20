//! Key custody: keystores wrapped by a KEK file (version 3). No plaintext
//! material reaches the file; loading without the KEK, with another KEK, or
//! after any change to a wrapped key fails whole and says which; plaintext
//! keystores convert in one call, both ways.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use workload_identity::{
    Algorithm, Issuer, KEYSTORE_VERSION, KekFile, KeyState, KeyWrapper, Keyring,
    KeystoreLoadOptions, ResultCode, associated_data,
};

const KEK_A: [u8; 32] = [0x11; 32];
const KEK_B: [u8; 32] = [0x22; 32];

/// Three algorithms and several states.
fn sample() -> Keyring {
    Keyring::from_keys([
        common::alg_key(Algorithm::EdDsa, "ed-old", 3, KeyState::Inactive, 10),
        common::alg_key(Algorithm::EdDsa, "ed-1", 4, KeyState::Active, 20),
        common::alg_key(Algorithm::Es256, "es-1", 5, KeyState::Active, 30),
        common::alg_key(Algorithm::Rs256, "rs-1", 0, KeyState::Active, 40),
    ])
    .unwrap()
}

/// A JWKS with one EdDSA key nobody else holds (an attacker's, say).
fn foreign_jwks() -> String {
    Keyring::from_keys([common::alg_key(
        Algorithm::EdDsa,
        "imported",
        9,
        KeyState::Active,
        0,
    )])
    .unwrap()
    .jwks()
    .to_json()
}

fn kek(bytes: [u8; 32]) -> Arc<dyn KeyWrapper> {
    Arc::new(KekFile::from_bytes(&bytes).unwrap())
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn write_0600(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn a_wrapped_keystore_round_trips_and_holds_no_plaintext_material() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keystore");
    let kr = sample();
    kr.save_wrapped(&path, &*kek(KEK_A)).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(contains(&bytes, b"\xa7Version\x03"), "written as version 3");
    assert!(contains(&bytes, b"aead-kek"));
    for k in kr.keys().iter().filter(|k| k.can_sign()) {
        let material = kr.root_key(k.kid.as_str()).unwrap();
        let secret = material.material().expose_secret();
        // An RSA key's PKCS#8 holds its public modulus too (stored in the
        // clear as PublicKey): check its private part, past byte 700.
        let secret = if k.algorithm == Algorithm::Rs256 {
            &secret[700..]
        } else {
            secret
        };
        // 16 bytes of a secret never appear by chance.
        for window in secret.chunks(16).filter(|c| c.len() == 16) {
            assert!(!contains(&bytes, window), "{} material in the file", k.kid);
        }
    }

    let back = Keyring::load_wrapped(&path, kek(KEK_A)).unwrap();
    assert_eq!(back.keys(), kr.keys());
    // Loaded wrapped, it is never saved in plaintext by accident.
    let e = back.save(dir.path().join("plain")).unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    assert!(e.to_string().contains("save_wrapped"), "{e}");
    assert!(!dir.path().join("plain").exists());
    back.save_wrapped(&path, &*kek(KEK_A)).unwrap();
    for alg in [Algorithm::EdDsa, Algorithm::Es256, Algorithm::Rs256] {
        let t = Issuer::new(back.clone())
            .issue_with(alg, &common::issue_request_task(), 1_700_000_000)
            .unwrap();
        assert_eq!(t.kid, kr.active_id_for(alg).unwrap());
    }
    // Bytes too.
    let bytes = kr.to_wrapped_keystore_bytes(&*kek(KEK_A)).unwrap();
    let again = Keyring::from_keystore_bytes_with(
        &bytes,
        &KeystoreLoadOptions::default().wrapper(kek(KEK_A)),
    )
    .unwrap();
    assert_eq!(again.keys(), kr.keys());
}

#[test]
fn without_the_kek_or_with_another_the_load_fails_and_says_which() {
    let kr = sample();
    let a = kek(KEK_A);
    let bytes = kr.to_wrapped_keystore_bytes(&*a).unwrap();

    let e = Keyring::from_keystore_bytes(&bytes).unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    let text = e.to_string();
    assert!(
        text.contains(a.kek_id())
            && text.contains("no KEK was given")
            && text.contains("--kek-file"),
        "{text}"
    );

    let b = kek(KEK_B);
    let e = Keyring::from_keystore_bytes_with(
        &bytes,
        &KeystoreLoadOptions::default().wrapper(b.clone()),
    )
    .unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&format!(
            "wrapped by KEK {:?}, not by the given KEK {:?}",
            a.kek_id(),
            b.kek_id()
        )),
        "{text}"
    );
}

/// The file's bytes with its body edited in place by `edit` (same length)
/// and the checksum recomputed: what an attacker who can write the file, but
/// has no KEK, can make.
fn reforged(bytes: &[u8], edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut out = bytes.to_vec();
    let find =
        |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle).unwrap();
    let at = find(&out, b"\xa4Body") + 5;
    let (len, start) = match out[at] {
        0xc4 => (out[at + 1] as usize, at + 2),
        0xc5 => (
            u16::from_be_bytes([out[at + 1], out[at + 2]]) as usize,
            at + 3,
        ),
        0xc6 => (
            u32::from_be_bytes(out[at + 1..at + 5].try_into().unwrap()) as usize,
            at + 5,
        ),
        other => panic!("Body is not a bin (0x{other:02x})"),
    };
    edit(&mut out[start..start + len]);
    let sha = Sha256::digest(&out[start..start + len]);
    let at = find(&out, b"\xa6SHA256\xc4\x20") + 9;
    out[at..at + 32].copy_from_slice(&sha);
    out
}

#[test]
fn any_change_to_a_wrapped_key_fails_the_whole_load_naming_the_key() {
    let kr = sample();
    let a = kek(KEK_A);
    let bytes = kr.to_wrapped_keystore_bytes(&*a).unwrap();
    let with_a = KeystoreLoadOptions::default().wrapper(a.clone());

    // One byte changed anywhere in the file: the checksum says so.
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x01;
    let e = Keyring::from_keystore_bytes_with(&flipped, &with_a).unwrap_err();
    assert!(e.to_string().contains("checksum"), "{e}");

    // One byte of a wrapped key changed and the checksum recomputed: the
    // KEK's authentication says so, naming the key.
    let needle = b"\xa7Wrapped";
    let e = Keyring::from_keystore_bytes_with(
        &reforged(&bytes, |body| {
            let at = body
                .windows(needle.len())
                .position(|w| w == needle)
                .unwrap();
            // Past the key name and the bin header (c4 len): inside the nonce or ciphertext.
            body[at + needle.len() + 5] ^= 0x80;
        }),
        &with_a,
    )
    .unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    assert!(
        e.to_string().contains("authentication failed") && e.to_string().contains("key \""),
        "{e}"
    );

    // A key's ID changed (its wrapped material kept): the associated data
    // binds material to ID, so it no longer unwraps.
    let e = Keyring::from_keystore_bytes_with(
        &reforged(&bytes, |body| {
            let at = body.windows(4).position(|w| w == b"es-1").unwrap();
            body[at..at + 4].copy_from_slice(b"es-2");
        }),
        &with_a,
    )
    .unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    assert!(e.to_string().contains("key \"es-2\""), "{e}");
}

#[test]
fn the_associated_data_is_the_pinned_one() {
    // Another implementation unwraps with only the KEK and DESIGN.md: check
    // our wrapping against AES-256-GCM done by hand with aws-lc-rs.
    use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    let kr = Keyring::from_keys([common::alg_key(
        Algorithm::Es256,
        "k-es",
        7,
        KeyState::Active,
        0,
    )])
    .unwrap();
    let w = KekFile::from_bytes(&KEK_A).unwrap();
    let wrapped = w
        .wrap(
            &[7; 32],
            &associated_data(
                &workload_identity::KeyId::new("k-es").unwrap(),
                Algorithm::Es256,
            ),
        )
        .unwrap();
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &KEK_A).unwrap());
    let mut buf = wrapped[12..].to_vec();
    let plain = key
        .open_in_place(
            Nonce::try_assume_unique_for_key(&wrapped[..12]).unwrap(),
            Aad::from(b"workload-identity/kek/v1\0k-es\0ES256"),
            &mut buf,
        )
        .unwrap();
    assert_eq!(plain, &[7; 32]);
    drop(kr);
}

#[test]
fn plaintext_keystores_still_load_and_convert_in_one_call_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keystore");
    let kr = sample();
    kr.save(&path).unwrap();
    let plain = std::fs::read(&path).unwrap();
    assert!(
        contains(&plain, b"\xa7Version\x02"),
        "save writes version 2"
    );
    assert_eq!(Keyring::load(&path).unwrap().keys(), kr.keys());

    // A KEK given for a plaintext file is refused unless allowed: a plaintext
    // keystore swapped in by someone without the KEK is not signed with.
    let e = Keyring::load_wrapped(&path, kek(KEK_A)).unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    assert!(e.to_string().contains("plaintext"), "{e}");
    let opts = KeystoreLoadOptions::default()
        .wrapper(kek(KEK_A))
        .allow_plaintext(true);
    assert_eq!(Keyring::load_with(&path, &opts).unwrap().keys(), kr.keys());

    // plaintext -> KEK A
    let n = Keyring::rewrap_keystore(&path, &KeystoreLoadOptions::default(), Some(&*kek(KEK_A)))
        .unwrap();
    assert_eq!(n, kr.len());
    assert_eq!(
        Keyring::load_wrapped(&path, kek(KEK_A)).unwrap().keys(),
        kr.keys()
    );
    // KEK A -> KEK A again (rewrap: fresh nonces, same keys)
    let before = std::fs::read(&path).unwrap();
    let with_a = KeystoreLoadOptions::default().wrapper(kek(KEK_A));
    Keyring::rewrap_keystore(&path, &with_a, Some(&*kek(KEK_A))).unwrap();
    let after = std::fs::read(&path).unwrap();
    assert_ne!(before, after);
    assert_eq!(
        Keyring::load_wrapped(&path, kek(KEK_A)).unwrap().keys(),
        kr.keys()
    );
    // KEK A -> KEK B
    Keyring::rewrap_keystore(&path, &with_a, Some(&*kek(KEK_B))).unwrap();
    assert!(Keyring::load_wrapped(&path, kek(KEK_A)).is_err());
    assert_eq!(
        Keyring::load_wrapped(&path, kek(KEK_B)).unwrap().keys(),
        kr.keys()
    );
    // A failed conversion (wrong KEK) leaves the file as it was.
    let kept = std::fs::read(&path).unwrap();
    assert!(Keyring::rewrap_keystore(&path, &with_a, None).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), kept);
    // KEK B -> plaintext
    let with_b = KeystoreLoadOptions::default().wrapper(kek(KEK_B));
    Keyring::rewrap_keystore(&path, &with_b, None).unwrap();
    assert_eq!(Keyring::load(&path).unwrap().keys(), kr.keys());
    assert_eq!(KEYSTORE_VERSION, 3);
}

#[test]
fn kek_files_raw_or_base64_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let id = KekFile::from_bytes(&KEK_A).unwrap().kek_id().to_string();
    let raw = dir.path().join("raw");
    write_0600(&raw, &KEK_A);
    assert_eq!(KekFile::load(&raw).unwrap().kek_id(), id);
    let b64 = "ERERERERERERERERERERERERERERERERERERERERERE=";
    for (name, text) in [("b64", b64.to_string()), ("b64nl", format!("{b64}\n"))] {
        let p = dir.path().join(name);
        write_0600(&p, text.as_bytes());
        assert_eq!(KekFile::load(&p).unwrap().kek_id(), id, "{name}");
    }
    for (name, bytes, says) in [
        ("short", vec![1u8; 31], "holds 31 bytes"),
        ("crlf", format!("{b64}\r\n").into_bytes(), "holds 46 bytes"),
        (
            "notb64",
            vec![b'!'; 44],
            "neither 32 raw bytes nor valid base64",
        ),
    ] {
        let p = dir.path().join(name);
        write_0600(&p, &bytes);
        let e = KekFile::load(&p).unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument, "{name}: {e}");
        assert!(e.to_string().contains(says), "{name}: {e}");
        assert!(
            e.to_string().contains("expected exactly 32 raw bytes"),
            "{name}: {e}"
        );
    }
    std::fs::set_permissions(&raw, std::fs::Permissions::from_mode(0o640)).unwrap();
    let e = KekFile::load(&raw).unwrap_err();
    assert_eq!(e.code(), ResultCode::IoError, "{e}");
    assert!(e.to_string().contains("mode 0640"), "{e}");

    let made = dir.path().join("made");
    let k = KekFile::generate(&made).unwrap();
    assert_eq!(
        std::fs::metadata(&made).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(std::fs::read(&made).unwrap().len(), 45);
    assert_eq!(KekFile::load(&made).unwrap().kek_id(), k.kek_id());
    let e = KekFile::generate(&made).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    assert_eq!(KekFile::load(&made).unwrap().kek_id(), k.kek_id(), "kept");
    assert!(!format!("{k:?}").contains("0x"), "Debug shows only the ID");
}

#[test]
fn an_unknown_kind_is_refused() {
    #[derive(Debug)]
    struct Rot13Kms;
    impl KeyWrapper for Rot13Kms {
        fn kind(&self) -> &str {
            "example-kms"
        }
        fn kek_id(&self) -> &str {
            "kms-key-1"
        }
        fn wrap(&self, m: &[u8], _: &[u8]) -> Result<Vec<u8>, workload_identity::Error> {
            Ok(m.iter().map(|b| b ^ 0x5a).collect())
        }
        fn unwrap(
            &self,
            w: &[u8],
            _: &[u8],
        ) -> Result<zeroize::Zeroizing<Vec<u8>>, workload_identity::Error> {
            Ok(zeroize::Zeroizing::new(
                w.iter().map(|b| b ^ 0x5a).collect(),
            ))
        }
    }
    let kr = sample();
    let bytes = kr.to_wrapped_keystore_bytes(&Rot13Kms).unwrap();
    // A user's own KMS round-trips.
    let back = Keyring::from_keystore_bytes_with(
        &bytes,
        &KeystoreLoadOptions::default().wrapper(Arc::new(Rot13Kms)),
    )
    .unwrap();
    assert_eq!(back.keys(), kr.keys());
    // Without it, the reader does not know the kind and says so.
    let e = Keyring::from_keystore_bytes(&bytes).unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    assert!(e.to_string().contains("\"example-kms\""), "{e}");
    // With a KEK file, the kinds differ.
    let e = Keyring::from_keystore_bytes_with(
        &bytes,
        &KeystoreLoadOptions::default().wrapper(kek(KEK_A)),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("wrapped by a \"example-kms\" KEK"),
        "{e}"
    );
}

/// The keystore's msgpack, as another program (or an attacker with write
/// access and no KEK) would edit it.
mod raw {
    use serde::{Deserialize, Serialize};
    use workload_identity::codec::Bin;

    #[derive(Serialize, Deserialize)]
    pub struct Envelope {
        #[serde(rename = "Body")]
        pub body: Bin,
        #[serde(rename = "Format")]
        pub format: String,
        #[serde(rename = "SHA256")]
        pub sha256: Bin,
        #[serde(rename = "Version")]
        pub version: u32,
    }

    #[derive(Serialize, Deserialize)]
    pub struct Body {
        #[serde(rename = "Keys")]
        pub keys: Vec<Key>,
        #[serde(rename = "Wrapping")]
        pub wrapping: Wrapping,
        #[serde(rename = "Sequence", default, skip_serializing_if = "Option::is_none")]
        pub sequence: Option<u64>,
        #[serde(rename = "MAC", default, skip_serializing_if = "Option::is_none")]
        pub mac: Option<Bin>,
    }

    #[derive(Serialize, Deserialize)]
    pub struct Wrapping {
        #[serde(rename = "KekID")]
        pub kek_id: String,
        #[serde(rename = "Kind")]
        pub kind: String,
        #[serde(rename = "RecordKey", default, skip_serializing_if = "Option::is_none")]
        pub record_key: Option<Bin>,
    }

    #[derive(Serialize, Deserialize, Clone)]
    pub struct Key {
        #[serde(rename = "Algorithm")]
        pub algorithm: String,
        #[serde(rename = "CreateTime")]
        pub create_time: i64,
        #[serde(rename = "Derivation")]
        pub derivation: String,
        #[serde(rename = "ID")]
        pub id: String,
        #[serde(rename = "Material")]
        pub material: Bin,
        #[serde(rename = "PublicKey")]
        pub public_key: Bin,
        #[serde(rename = "PublishTime")]
        pub publish_time: i64,
        #[serde(rename = "RetiredTime")]
        pub retired_time: i64,
        #[serde(rename = "State")]
        pub state: String,
        #[serde(rename = "Wrapped", default, skip_serializing_if = "Option::is_none")]
        pub wrapped: Option<Bin>,
    }

    /// `bytes` with its body edited by `edit` and the checksum made right.
    pub fn edit(bytes: &[u8], edit: impl FnOnce(&mut Body)) -> Vec<u8> {
        use sha2::{Digest, Sha256};
        let mut env: Envelope = rmp_serde::from_slice(bytes).unwrap();
        let mut body: Body = rmp_serde::from_slice(env.body.as_slice()).unwrap();
        edit(&mut body);
        let encoded = rmp_serde::to_vec_named(&body).unwrap();
        env.sha256 = Bin::new(Sha256::digest(&encoded).to_vec());
        env.body = Bin::new(encoded);
        rmp_serde::to_vec_named(&env).unwrap()
    }
}

/// Someone who can write the keystore but has no KEK cannot add a key: a
/// key without wrapped material (a verify-only key, whose public key nothing
/// authenticates) is refused, and a keyring holding one is not saved wrapped.
#[test]
fn a_key_the_kek_did_not_wrap_is_refused() {
    let kr = sample();
    let a = kek(KEK_A);
    let bytes = kr.to_wrapped_keystore_bytes(&*a).unwrap();
    let with_a = KeystoreLoadOptions::default().wrapper(a.clone());
    // The round trip through the mirror changes nothing.
    let same = raw::edit(&bytes, |_| {});
    assert_eq!(
        Keyring::from_keystore_bytes_with(&same, &with_a)
            .unwrap()
            .keys(),
        kr.keys()
    );

    let (attacker, _) = Keyring::from_jwks(&foreign_jwks()).unwrap();
    let public = attacker.keys()[0].public_key.clone();
    let public_bytes = match &public {
        workload_identity::PublicKey::Ed25519(vk) => vk.to_bytes().to_vec(),
        other => panic!("{other:?}"),
    };
    for (what, wrapped) in [("no Wrapped", None), ("an empty Wrapped", Some(Vec::new()))] {
        let forged = raw::edit(&bytes, |body| {
            let mut k = body.keys[0].clone();
            k.id = "evil".into();
            k.state = "inactive".into();
            k.derivation = String::new();
            k.public_key = workload_identity::codec::Bin::new(public_bytes.clone());
            k.wrapped = wrapped.map(workload_identity::codec::Bin::new);
            body.keys.push(k);
        });
        let e = Keyring::from_keystore_bytes_with(&forged, &with_a).unwrap_err();
        assert_eq!(e.code(), ResultCode::DecodeError, "{what}: {e}");
        assert!(
            e.to_string().contains("Keys[4].Wrapped") && e.to_string().contains("\"evil\""),
            "{what}: {e}"
        );
    }

    // A keyring holding a verify-only key is not written wrapped.
    let mixed = sample();
    mixed.import_jwks(&foreign_jwks()).unwrap();
    let e = mixed.to_wrapped_keystore_bytes(&*a).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument, "{e}");
    assert!(e.to_string().contains("imported is verify-only"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    assert!(mixed.save_wrapped(dir.path().join("k"), &*a).is_err());
    assert!(!dir.path().join("k").exists(), "nothing written");
}

/// A wrapper that answers with nothing does not turn a key into a
/// verify-only one.
#[test]
fn an_empty_unwrap_is_an_error() {
    #[derive(Debug)]
    struct Empty(KekFile);
    impl KeyWrapper for Empty {
        fn kind(&self) -> &str {
            self.0.kind()
        }
        fn kek_id(&self) -> &str {
            self.0.kek_id()
        }
        fn wrap(&self, m: &[u8], aad: &[u8]) -> Result<Vec<u8>, workload_identity::Error> {
            self.0.wrap(m, aad)
        }
        fn unwrap(
            &self,
            _: &[u8],
            _: &[u8],
        ) -> Result<zeroize::Zeroizing<Vec<u8>>, workload_identity::Error> {
            Ok(zeroize::Zeroizing::new(Vec::new()))
        }
    }
    let w = Arc::new(Empty(KekFile::from_bytes(&KEK_A).unwrap()));
    let bytes = sample().to_wrapped_keystore_bytes(&*w).unwrap();
    let e = Keyring::from_keystore_bytes_with(&bytes, &KeystoreLoadOptions::default().wrapper(w))
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    assert!(e.to_string().contains("unwrapped to nothing"), "{e}");
}

/// Security round 4 (issue 51, item 1), for keystore files: the KEK wraps
/// each key's material, and the body's MAC (under the record key the KEK
/// wraps) authenticates the rest. Someone who can write the file but holds
/// no KEK changes a key's state or takes a key out, checksum made right:
/// refused. The MAC taken out (a body of the format before): refused unless
/// allowed, and `rewrap_keystore` with the allowance seals it again.
#[test]
fn a_keystore_whose_metadata_was_changed_without_the_kek_is_refused() {
    let kr = sample();
    let a = kek(KEK_A);
    let bytes = kr.to_wrapped_keystore_bytes(&*a).unwrap();
    let with_a = KeystoreLoadOptions::default().wrapper(a.clone());
    Keyring::from_keystore_bytes_with(&bytes, &with_a).unwrap();
    let state_changed = raw::edit(&bytes, |body| {
        let k = body.keys.iter_mut().find(|k| k.state == "active").unwrap();
        k.state = "inactive".into();
    });
    let e = Keyring::from_keystore_bytes_with(&state_changed, &with_a).unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    assert!(e.to_string().contains("MAC does not verify"), "{e}");
    let key_removed = raw::edit(&bytes, |body| {
        body.keys.pop();
    });
    let e = Keyring::from_keystore_bytes_with(&key_removed, &with_a).unwrap_err();
    assert!(e.to_string().contains("MAC does not verify"), "{e}");
    let sequence_lowered = raw::edit(&bytes, |body| body.sequence = Some(1));
    let e = Keyring::from_keystore_bytes_with(&sequence_lowered, &with_a).unwrap_err();
    assert!(e.to_string().contains("MAC does not verify"), "{e}");

    // Of the format before: no record key, no MAC.
    let old = raw::edit(&bytes, |body| {
        body.mac = None;
        body.wrapping.record_key = None;
    });
    let e = Keyring::from_keystore_bytes_with(&old, &with_a).unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    assert!(
        e.to_string().contains("not authenticated") && e.to_string().contains("wid keyring rewrap"),
        "{e}"
    );
    let allowed = with_a.clone().allow_unauthenticated_metadata(true);
    assert_eq!(
        Keyring::from_keystore_bytes_with(&old, &allowed)
            .unwrap()
            .keys(),
        kr.keys()
    );
    // Only the MAC taken out (the record key left): refused even so.
    let half = raw::edit(&bytes, |body| body.mac = None);
    assert!(Keyring::from_keystore_bytes_with(&half, &allowed).is_err());
    // A tampered body with a MAC is refused whatever the allowance.
    assert!(Keyring::from_keystore_bytes_with(&state_changed, &allowed).is_err());

    // rewrap_keystore seals a body of the format before, in place.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keystore");
    std::fs::write(&path, &old).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert!(Keyring::load_with(&path, &with_a).is_err());
    Keyring::rewrap_keystore(&path, &allowed, Some(&*a)).unwrap();
    assert_eq!(
        Keyring::load_with(&path, &with_a).unwrap().keys(),
        kr.keys()
    );
}
