//! Entry points shared by the fuzz targets (`fuzz/`) and the corpus replay test
//! (`tests/fuzz_corpus.rs`). Not a stable API.
//!
//! Each function takes arbitrary bytes, must never panic, hang or allocate
//! without bound, and checks an invariant where one exists (a decoded value
//! re-encodes to itself, an issued token verifies).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::codec::{self, WireType};
use crate::keyring::{KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, RootKey};
use crate::model::{Allocation, ConsulExposeConfig, IssueRequest, WorkloadIdentity};
use crate::{AllocState, Audience, Issuer, MemoryStore, Verifier};

/// The fixed time of every target.
const NOW: i64 = 1_700_000_000;
const ALLOC: &str = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc";

struct World {
    keyring: Keyring,
    store: Arc<MemoryStore>,
    verifier: Verifier,
    cached: Verifier,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let keyring = Keyring::from_keys([RootKey::new(
            KeyId::new("fuzz-key").unwrap_or_else(|_| unreachable!("a valid literal")),
            KeyMaterial::from_slice(&[7; 32]).unwrap_or_else(|_| unreachable!("32 bytes")),
            KeyDerivation::HkdfV1,
            KeyState::Active,
            0,
        )])
        .unwrap_or_else(|_| unreachable!("one active key"));
        let store = Arc::new(MemoryStore::new());
        store.set_state(ALLOC, AllocState::Live);
        let audience = Audience::new("vault.io").unwrap_or_else(|_| unreachable!("non-empty"));
        let build = |cache: usize| {
            let b = Verifier::builder(keyring.clone(), store.clone(), audience.clone())
                .key_wait(Duration::ZERO);
            if cache > 0 { b.cache(cache) } else { b }.build()
        };
        World {
            verifier: build(0),
            cached: build(64),
            keyring,
            store,
        }
    })
}

/// Token parsing alone.
pub fn jwt_decode(data: &[u8]) {
    let _ = crate::jwt::parse(data, crate::jwt::DEFAULT_MAX_TOKEN_BYTES);
}

fn b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

/// The whole verification pipeline. A first byte of 0 makes the rest a payload
/// signed with the real key (so claims parsing is reached with a valid
/// signature); 1 makes it a header signed with a fixed payload; anything else is
/// a token as is. Single, batch and cached verification must agree. Returns
/// whether the token was accepted.
pub fn verify(data: &[u8]) -> bool {
    let w = world();
    let token: Vec<u8> = match data.split_first() {
        Some((0, payload)) => signed(
            w,
            br#"{"alg":"EdDSA","kid":"fuzz-key","typ":"JWT"}"#,
            payload,
        ),
        Some((1, header)) => signed(
            w,
            header,
            br#"{"nomad_allocation_id":"5f8c7d2e-3b1a-4c6d-9e0f-123456789abc","aud":"vault.io"}"#,
        ),
        _ => data.to_vec(),
    };
    let single = w.verifier.verify_bytes(&token, NOW);
    let cached = w.cached.verify_bytes(&token, NOW);
    assert_eq!(
        single.as_ref().map_err(|e| e.code()),
        cached.as_ref().map_err(|e| e.code()),
        "cache changed the verdict"
    );
    if let Ok(text) = std::str::from_utf8(&token) {
        let batch = w.verifier.verify_batch(&[text], NOW);
        assert_eq!(
            single.as_ref().map_err(|e| e.code()),
            batch[0].as_ref().map_err(|e| e.code()),
            "batch changed the verdict"
        );
    }
    single.is_ok()
}

fn signed(w: &World, header: &[u8], payload: &[u8]) -> Vec<u8> {
    let input = format!("{}.{}", b64(header), b64(payload));
    let sig = match w.keyring.active().and_then(|k| k.sign(input.as_bytes())) {
        Ok(sig) => sig,
        Err(_) => return input.into_bytes(),
    };
    format!("{input}.{}", b64(&sig)).into_bytes()
}

fn round_trip<T: WireType + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(v) = codec::decode::<T>(data) {
        let again =
            codec::encode(&v).unwrap_or_else(|e| panic!("a decoded value must encode: {e}"));
        let back: T =
            codec::decode(&again).unwrap_or_else(|e| panic!("our encoding must decode: {e}"));
        assert_eq!(back, v, "re-encoding changed the value");
    }
}

/// Every msgpack wire type, and the keystore.
pub fn msgpack_decode(data: &[u8]) {
    round_trip::<Allocation>(data);
    round_trip::<WorkloadIdentity>(data);
    round_trip::<IssueRequest>(data);
    round_trip::<ConsulExposeConfig>(data);
    keystore_load(data);
}

/// JWKS import; an imported set re-exports and re-imports to the same keys.
pub fn jwks_import(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((kr, _)) = Keyring::from_jwks(text) {
        let (again, report) = Keyring::from_jwks(&kr.jwks().to_json())
            .unwrap_or_else(|e| panic!("our JWKS must import: {e}"));
        assert!(report.skipped.is_empty());
        assert_eq!(again.keys(), kr.keys());
    }
}

/// Keystore loading; a loaded keyring has at most one active key, every key
/// that signs or will (active, prepublished) holds its secret, and the active
/// key signs.
pub fn keystore_load(data: &[u8]) {
    if let Ok(kr) = Keyring::from_keystore_bytes(data) {
        let keys = kr.keys();
        assert!(keys.iter().filter(|k| k.state == KeyState::Active).count() <= 1);
        for k in &keys {
            assert!(
                !k.state.signs_or_will() || k.can_sign(),
                "a verify-only key loaded as {}",
                k.state.name()
            );
        }
        if kr.active_id().is_some() {
            let active = kr
                .active()
                .unwrap_or_else(|e| panic!("the active key: {e}"));
            let _ = active.sign(b"fuzz");
        }
    }
}

/// Arbitrary msgpack into issuance; whatever issues must verify.
pub fn issue_request(data: &[u8]) {
    let w = world();
    let Ok(req) = codec::decode::<IssueRequest>(data) else {
        return;
    };
    let Ok(signed) = Issuer::new(w.keyring.clone()).issue(&req, NOW) else {
        return;
    };
    let claims = crate::verify::check_signature(&w.keyring, &signed.token)
        .unwrap_or_else(|e| panic!("an issued token must verify: {e}"));
    assert_eq!(claims, signed.claims);
    if req.allocation.id == ALLOC && req.identity.audience.iter().any(|a| a == "vault.io") {
        w.store.set_state(ALLOC, AllocState::Live);
        let r = w.verifier.verify(&signed.token, NOW);
        assert!(r.is_ok(), "{r:?}");
    }
}

/// The C ABI driven through its Rust definitions.
pub fn ffi(data: &[u8]) {
    crate::ffi::fuzz_entry(data);
}

/// A fuzz target's entry point.
pub type Target = fn(&[u8]);

/// Every target, by name (the names of the `fuzz/` binaries).
pub const TARGETS: [(&str, Target); 7] = [
    ("jwt_decode", jwt_decode),
    ("verify", |d| {
        verify(d);
    }),
    ("msgpack_decode", msgpack_decode),
    ("jwks_import", jwks_import),
    ("keystore_load", keystore_load),
    ("issue_request", issue_request),
    ("ffi", ffi),
];

/// Replays every input of every target's corpus under `corpus_root`, with a few
/// truncations of each; returns the number of inputs per target.
pub fn replay_corpora(
    corpus_root: &std::path::Path,
) -> std::io::Result<Vec<(&'static str, usize)>> {
    let mut counts = Vec::new();
    for (name, target) in TARGETS {
        let mut inputs = 0;
        let mut paths: Vec<_> = std::fs::read_dir(corpus_root.join(name))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        paths.sort();
        for path in paths {
            let data = std::fs::read(&path)?;
            target(&data);
            for cut in [
                0,
                data.len() / 3,
                data.len() / 2,
                data.len().saturating_sub(1),
            ] {
                target(&data[..cut]);
            }
            inputs += 1;
        }
        counts.push((name, inputs));
    }
    Ok(counts)
}
