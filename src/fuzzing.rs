//! Entry points shared by the fuzz targets (`fuzz/`) and the corpus replay test
//! (`tests/fuzz_corpus.rs`). Not a stable API.
//!
//! Each function takes arbitrary bytes, must never panic, hang or allocate
//! without bound, and checks an invariant where one exists (a decoded value
//! re-encodes to itself, an issued token verifies).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::codec::{self, WireType};
use crate::keyring::{Algorithm, KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, RootKey};
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

/// The fuzz world's keys: one active key per algorithm (the RSA key is a
/// committed fixture, so seeds signed with it stay valid).
const KIDS: [(&str, Algorithm); 3] = [
    ("fuzz-key", Algorithm::EdDsa),
    ("fuzz-es", Algorithm::Es256),
    ("fuzz-rs", Algorithm::Rs256),
];

fn world_key(kid: &str, alg: Algorithm) -> RootKey {
    let id = KeyId::new(kid).unwrap_or_else(|_| unreachable!("a valid literal"));
    let (material, derivation) = match alg {
        Algorithm::Rs256 => (
            KeyMaterial::from_pkcs8_der(include_bytes!("../tests/vectors/rsa2048.pk8")),
            KeyDerivation::Pkcs8,
        ),
        _ => (KeyMaterial::from_slice(&[7; 32]), KeyDerivation::HkdfV1),
    };
    let material = material.unwrap_or_else(|_| unreachable!("fixed valid material"));
    RootKey::for_algorithm(alg, id, material, derivation, KeyState::Active, 0)
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let keyring = Keyring::from_keys(KIDS.map(|(kid, alg)| world_key(kid, alg)))
            .unwrap_or_else(|_| unreachable!("one active key per algorithm"));
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

/// Token parsing alone; the input as a claims payload must read the same by
/// the claims scan and by serde.
pub fn jwt_decode(data: &[u8]) {
    let _ = crate::jwt::parse(data, crate::jwt::DEFAULT_MAX_TOKEN_BYTES);
    claims_paths_agree(data);
}

/// Wherever the claims scan accepts a payload, serde reads the same claims.
fn claims_paths_agree(payload: &[u8]) {
    if let Some(fast) = crate::claims::canonical::parse(payload) {
        let slow = serde_json::from_slice::<crate::Claims>(payload).ok();
        assert_eq!(
            slow.as_ref(),
            Some(&fast),
            "the claims scan and serde disagree"
        );
    }
}

fn b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

const FIXED_PAYLOAD: &[u8] =
    br#"{"nomad_allocation_id":"5f8c7d2e-3b1a-4c6d-9e0f-123456789abc","aud":"vault.io"}"#;

/// The whole verification pipeline. A first byte of 0, 2 or 3 makes the rest a
/// payload signed with the real EdDSA, ES256 or RS256 key (so claims parsing is
/// reached with a valid signature); 1 makes it a header signed by the EdDSA key
/// with a fixed payload (4 and 5: by the ES256 and RS256 keys); anything else
/// is a token as is. Single, batch and cached verification must agree.
/// Returns whether the token was accepted.
pub fn verify(data: &[u8]) -> bool {
    let w = world();
    let header_for = |alg: Algorithm| {
        let kid = KIDS.iter().find(|(_, a)| *a == alg).map_or("", |(k, _)| *k);
        format!(r#"{{"alg":"{}","kid":"{kid}","typ":"JWT"}}"#, alg.name()).into_bytes()
    };
    if let Some((0 | 2 | 3, payload)) = data.split_first() {
        claims_paths_agree(payload);
    }
    let token: Vec<u8> = match data.split_first() {
        Some((0, payload)) => signed(w, Algorithm::EdDsa, &header_for(Algorithm::EdDsa), payload),
        Some((2, payload)) => signed(w, Algorithm::Es256, &header_for(Algorithm::Es256), payload),
        Some((3, payload)) => signed(w, Algorithm::Rs256, &header_for(Algorithm::Rs256), payload),
        Some((1, header)) => signed(w, Algorithm::EdDsa, header, FIXED_PAYLOAD),
        Some((4, header)) => signed(w, Algorithm::Es256, header, FIXED_PAYLOAD),
        Some((5, header)) => signed(w, Algorithm::Rs256, header, FIXED_PAYLOAD),
        _ => data.to_vec(),
    };
    verdicts_agree(w, &token)
}

/// Verifies `token` singly, cached and in a batch; the verdicts must agree.
fn verdicts_agree(w: &World, token: &[u8]) -> bool {
    let single = w.verifier.verify_bytes(token, NOW);
    let cached = w.cached.verify_bytes(token, NOW);
    assert_eq!(
        single.as_ref().map_err(|e| e.code()),
        cached.as_ref().map_err(|e| e.code()),
        "cache changed the verdict"
    );
    if let Ok(text) = std::str::from_utf8(token) {
        let batch = w.verifier.verify_batch(&[text], NOW);
        assert_eq!(
            single.as_ref().map_err(|e| e.code()),
            batch[0].as_ref().map_err(|e| e.code()),
            "batch changed the verdict"
        );
    }
    single.is_ok()
}

/// Algorithm confusion, structured: byte 0 picks the `kid` (the EdDSA, ES256
/// or RS256 key, or an unknown one), byte 1 the header's `alg` (ours, RFC
/// 9864's `Ed25519`, and ones that must never pass), byte 2 the key that
/// signs (or a signature made of the input), the rest is the payload. A token
/// is accepted only if the header names the kid's algorithm and the kid's own
/// key signed it; single, batch and cached verification agree.
pub fn verify_algorithms(data: &[u8]) {
    const ALGS: [&str; 8] = [
        "EdDSA", "Ed25519", "ES256", "RS256", "HS256", "none", "PS256", "ES384",
    ];
    let w = world();
    let [k, a, s, payload @ ..] = data else {
        return;
    };
    let kid = KIDS
        .get(usize::from(*k % 4))
        .map_or("fuzz-none", |(kid, _)| *kid);
    let alg = ALGS[usize::from(*a) % ALGS.len()];
    let header = format!(r#"{{"alg":"{alg}","kid":"{kid}","typ":"JWT"}}"#);
    let input = format!("{}.{}", b64(header.as_bytes()), b64(payload));
    let signer = KIDS.get(usize::from(*s % 4)).copied();
    let sig = match signer {
        Some((_, by)) => w
            .keyring
            .active_for(by)
            .and_then(|key| key.sign(input.as_bytes()))
            .unwrap_or_else(|e| panic!("the fuzz world's {by} key signs: {e}")),
        None => payload.iter().rev().take(300).copied().collect(),
    };
    let token = format!("{input}.{}", b64(&sig));
    if verdicts_agree(w, token.as_bytes()) {
        let (kid_alg, signer_alg) = match (KIDS.iter().find(|(k, _)| *k == kid), signer) {
            (Some((_, kid_alg)), Some((_, signer_alg))) => (*kid_alg, signer_alg),
            _ => panic!("accepted a token of an unknown kid or an arbitrary signature"),
        };
        assert_eq!(kid_alg, signer_alg, "accepted another key's signature");
        assert_eq!(
            crate::keyring::Algorithm::from_header(alg),
            Some(kid_alg),
            "accepted alg {alg} for a {kid_alg} key"
        );
    }
}

fn signed(w: &World, alg: Algorithm, header: &[u8], payload: &[u8]) -> Vec<u8> {
    let input = format!("{}.{}", b64(header), b64(payload));
    let sig = match w
        .keyring
        .active_for(alg)
        .and_then(|k| k.sign(input.as_bytes()))
    {
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

/// Keystore loading; a loaded keyring has at most one active key per
/// algorithm, every key that signs or will (active, prepublished) holds its
/// secret, and the active keys sign.
pub fn keystore_load(data: &[u8]) {
    if let Ok(kr) = Keyring::from_keystore_bytes(data) {
        let keys = kr.keys();
        for alg in Algorithm::ALL {
            let active = keys
                .iter()
                .filter(|k| k.state == KeyState::Active && k.algorithm == *alg)
                .count();
            assert!(active <= 1, "{active} active {alg} keys");
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

/// Arbitrary msgpack into issuance; whatever issues must verify.
pub fn issue_request(data: &[u8]) {
    let w = world();
    let Ok(req) = codec::decode::<IssueRequest>(data) else {
        return;
    };
    // Every algorithm in turn, chosen by the input's length.
    let alg = Algorithm::ALL[data.len() % Algorithm::ALL.len()];
    let Ok(signed) = Issuer::new(w.keyring.clone()).issue_with(alg, &req, NOW) else {
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
pub const TARGETS: [(&str, Target); 8] = [
    ("jwt_decode", jwt_decode),
    ("verify", |d| {
        verify(d);
    }),
    ("verify_algorithms", verify_algorithms),
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
