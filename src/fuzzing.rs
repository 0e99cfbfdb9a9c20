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
use crate::model::{
    Allocation, ConsulExposeConfig, IssueRequest, NodeIdentityRequest, WorkloadIdentity,
};
use crate::{AllocState, Audience, Issuer, MemoryStore, Verifier};

/// The fixed time of every target.
const NOW: i64 = 1_700_000_000;
const ALLOC: &str = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc";
const NODE: &str = "fuzz-node";

struct World {
    keyring: Keyring,
    store: Arc<MemoryStore>,
    verifier: Verifier,
    cached: Verifier,
    /// Accepts node tokens too (node `fuzz-node` is live).
    nodes: Verifier,
}

/// The fuzz world's keys: one active key per algorithm (the RSA key is a
/// committed fixture, so seeds signed with it stay valid).
const KIDS: [(&str, Algorithm); 3] = [
    ("fuzz-key", Algorithm::EdDsa),
    ("fuzz-es", Algorithm::Es256),
    ("fuzz-rs", Algorithm::Rs256),
];

/// Its WIT keys (WITs are signed only by those), of the same material.
const WIT_KIDS: [(&str, Algorithm); 3] = [
    ("fuzz-wit-key", Algorithm::EdDsa),
    ("fuzz-wit-es", Algorithm::Es256),
    ("fuzz-wit-rs", Algorithm::Rs256),
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
        let keyring = Keyring::from_keys(
            KIDS.map(|(kid, alg)| world_key(kid, alg))
                .into_iter()
                .chain(
                    WIT_KIDS
                        .map(|(kid, alg)| world_key(kid, alg).with_purpose(crate::KeyPurpose::Wit)),
                ),
        )
        .unwrap_or_else(|_| unreachable!("one active key per (purpose, algorithm)"));
        let store = Arc::new(MemoryStore::new());
        store.set_state(ALLOC, AllocState::Live);
        store.set_node_state(NODE, crate::NodeState::Live);
        let audience = Audience::new("vault.io").unwrap_or_else(|_| unreachable!("non-empty"));
        let build = |cache: usize| {
            let b = Verifier::builder(keyring.clone(), store.clone(), audience.clone())
                .key_wait(Duration::ZERO);
            if cache > 0 { b.cache(cache) } else { b }.build()
        };
        World {
            verifier: build(0),
            cached: build(64),
            nodes: Verifier::builder(keyring.clone(), store.clone(), audience.clone())
                .key_wait(Duration::ZERO)
                .node_tokens(crate::NodeTokens::Accept)
                .build(),
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
        // explain runs the same checks step by step and prints each (its
        // time arithmetic once overflowed on extreme dates).
        let explained = w.verifier.explain(text, NOW);
        assert_eq!(
            single.as_ref().map_err(|e| e.code()),
            explained.result.as_ref().map_err(|e| e.code()),
            "explain changed the verdict"
        );
        for step in &explained.steps {
            std::hint::black_box(format!("{step:?}"));
        }
    }
    // The claims decide the kind: what the allocation-only verifier
    // accepts, the verifier of both kinds accepts as an allocation token;
    // a node token it accepts, the allocation-only verifier refuses.
    let both = w.nodes.verify_bytes(token, NOW);
    match (&single, &both) {
        (Ok(a), b) => assert!(
            b.as_ref()
                .is_ok_and(|b| b.claims == a.claims && b.claims.node.is_none()),
            "an allocation token changed verdict when node tokens are accepted: {b:?}"
        ),
        (Err(e), Ok(b)) => {
            assert!(b.claims.node.is_some(), "{e}");
            assert_eq!(e.code(), crate::ResultCode::TokenKindRefused, "{e}");
        }
        (Err(_), Err(_)) => {}
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
    round_trip::<crate::model::NodeIdentityRequest>(data);
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
        keystore_load_invariants(&kr);
    }
}

/// What every loaded keystore holds (see [`keystore_load`]).
fn keystore_load_invariants(kr: &Keyring) {
    {
        let keys = kr.keys();
        for purpose in crate::KeyPurpose::ALL {
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
    assert_eq!(e.code(), crate::ResultCode::KeyCustodyFailed, "{e}");
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

/// Arbitrary msgpack into issuance; whatever issues must verify.
pub fn issue_request(data: &[u8]) {
    let w = world();
    if let Ok(req) = codec::decode::<NodeIdentityRequest>(data) {
        let alg = Algorithm::ALL[data.len() % Algorithm::ALL.len()];
        if let Ok(signed) = Issuer::new(w.keyring.clone()).issue_node_with(alg, &req, NOW) {
            let claims = crate::verify::check_signature(&w.keyring, &signed.token)
                .unwrap_or_else(|e| panic!("an issued node token must verify: {e}"));
            assert_eq!(claims, signed.claims);
            assert!(claims.node.is_some() && claims.allocation_id.is_empty());
        }
    }
    let Ok(req) = codec::decode::<IssueRequest>(data) else {
        return;
    };
    // Every algorithm in turn, chosen by the input's length, and the
    // profiles: none, SPIFFE, extra claims, both.
    let alg = Algorithm::ALL[data.len() % Algorithm::ALL.len()];
    let mut issuer = Issuer::new(w.keyring.clone());
    let profile = (data.len() / Algorithm::ALL.len()) % 4;
    if profile & 1 == 1 {
        let spiffe = crate::profile::SpiffeProfile::new("fuzz.example.org")
            .unwrap_or_else(|e| panic!("the fuzz trust domain is valid: {e}"));
        issuer = issuer.spiffe(spiffe);
    }
    if profile & 2 == 2 {
        issuer = issuer.extra_claims(fuzz_policy());
    }
    let Ok(signed) = issuer.issue_with(alg, &req, NOW) else {
        return;
    };
    if profile & 1 == 1 {
        assert_eq!(
            crate::profile::spiffe_id_problem(&signed.claims.subject),
            None
        );
    }
    let claims = crate::verify::check_signature(&w.keyring, &signed.token)
        .unwrap_or_else(|e| panic!("an issued token must verify: {e}"));
    assert_eq!(claims, signed.claims);
    if req.allocation.id == ALLOC && req.identity.audience.iter().any(|a| a == "vault.io") {
        w.store.set_state(ALLOC, AllocState::Live);
        let r = w.verifier.verify(&signed.token, NOW);
        assert!(r.is_ok(), "{r:?}");
    }
}

/// An extra-claims policy for every namespace naming every template variable.
fn fuzz_policy() -> crate::profile::ExtraClaimsPolicy {
    let all = [
        ("dc", "${node.datacenter}"),
        ("owner", "${job.meta.owner}"),
        (
            "where",
            "${node.id}/${node.name}/${node.pool}/${node.class}",
        ),
        (
            "what",
            "${alloc.id}/${group.name}/${workload.name}/${identity.name}",
        ),
        ("parent", "${job.parent_id}@${job.node_pool}"),
    ];
    let mut policy = crate::profile::ExtraClaimsPolicy::new()
        .require("*", "unique_id", "${job.region}:${job.namespace}:${job.id}")
        .unwrap_or_else(|e| panic!("the fuzz policy is valid: {e}"));
    for (name, template) in all {
        policy = policy
            .offer("*", name, template)
            .unwrap_or_else(|e| panic!("the fuzz policy is valid: {e}"));
    }
    policy
}

/// The C ABI driven through its Rust definitions.
pub fn ffi(data: &[u8]) {
    crate::ffi::fuzz_entry(data);
}

/// The target URI of every proof in the `verify_proof` target.
const PROOF_TARGET: &str = "https://vault.example.com/v1/auth/jwt/login";
/// The access token and other token (HTTP header `x-fuzz-token`) the request
/// of shape 7 carries, which its proofs must bind (`ath`, `oth`).
const PROOF_ACCESS_TOKEN: &str = "fuzz-access-token";
const PROOF_OTHER_HEADER: &str = "x-fuzz-token";
const PROOF_OTHER_TOKEN: &str = "fuzz-other-token";

/// A fixed P-256 workload key (PKCS#8 DER, made by Python `cryptography`
/// from d = 0x5eed…5eed), so committed ES256 seeds stay valid.
const P256_WORKLOAD_KEY: [u8; 138] = [
    0x30, 0x81, 0x87, 0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02,
    0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x04, 0x6d, 0x30, 0x6b, 0x02,
    0x01, 0x01, 0x04, 0x20, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed,
    0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed, 0x5e, 0xed,
    0x5e, 0xed, 0x5e, 0xed, 0xa1, 0x44, 0x03, 0x42, 0x00, 0x04, 0xf7, 0x27, 0x01, 0x91, 0x45, 0x26,
    0x8d, 0x2b, 0x07, 0x42, 0xa4, 0x17, 0x11, 0xb0, 0xce, 0x23, 0xd5, 0xcd, 0xe0, 0xf1, 0x9a, 0x0b,
    0xa5, 0x9a, 0xcf, 0x1a, 0x48, 0x6a, 0x27, 0x66, 0xf9, 0xdd, 0xd0, 0xec, 0x21, 0xbf, 0x75, 0xda,
    0xb3, 0x0b, 0x23, 0x00, 0x8a, 0xb4, 0x13, 0x19, 0x3b, 0xc9, 0x2e, 0x3a, 0xcf, 0x90, 0xbf, 0x2c,
    0x21, 0xa2, 0x0a, 0x57, 0xdd, 0x46, 0xe6, 0x0f, 0x95, 0xcc,
];

/// The `verify_proof` target's world: two workload keys and a WIT for each,
/// fixed (the WITs' `jti` too), so committed WPT seeds keep their `wth`.
struct ProofWorld {
    /// The EdDSA workload key's WIT is signed by the fuzz world's EdDSA key;
    /// the ES256 workload key's by its RS256 key (deterministic signatures).
    wits: [(crate::WorkloadKey, String); 2],
}

fn proof_world() -> &'static ProofWorld {
    static WORLD: OnceLock<ProofWorld> = OnceLock::new();
    WORLD.get_or_init(|| {
        let w = world();
        let ed = crate::WorkloadKey::from_secret(Algorithm::EdDsa, &[9; 32])
            .unwrap_or_else(|e| panic!("the fixed Ed25519 workload key: {e}"));
        let es = crate::WorkloadKey::from_secret(Algorithm::Es256, &P256_WORKLOAD_KEY)
            .unwrap_or_else(|e| panic!("the fixed P-256 workload key: {e}"));
        let issuer = Issuer::new(w.keyring.clone())
            .trust_domain("fuzz.example.org")
            .unwrap_or_else(|e| panic!("a valid trust domain: {e}"));
        let wit = |key: &crate::WorkloadKey, signer: Algorithm, jti: &str| {
            let req = IssueRequest {
                region: "global".into(),
                allocation: Allocation {
                    id: ALLOC.into(),
                    namespace: "default".into(),
                    job_id: "web".into(),
                    task_group: "frontend".into(),
                    ..Allocation::default()
                },
                task: "server".into(),
                identity: WorkloadIdentity {
                    name: "vault_default".into(),
                    audience: vec!["vault.io".into()],
                    ttl: crate::model::GoDuration::from_secs(3600),
                    ..WorkloadIdentity::default()
                },
                proof_key: Some(key.proof_key().clone()),
                ..IssueRequest::default()
            };
            let mut claims = issuer
                .issue_with(signer, &req, NOW)
                .unwrap_or_else(|e| panic!("the fuzz WIT issues: {e}"))
                .claims;
            // The issued jti is random: a fixed one keeps the WIT (and every
            // seed's wth) the same from run to run.
            claims.jwt_id = jti.into();
            let json = serde_json::to_vec(&claims)
                .unwrap_or_else(|e| panic!("the fuzz WIT's claims encode: {e}"));
            let signing = w
                .keyring
                .active_for_purpose(crate::KeyPurpose::Wit, signer)
                .unwrap_or_else(|e| panic!("the fuzz world's {signer} WIT key: {e}"));
            crate::jwt::encode_typed(&signing, crate::jwt::TokenType::Wit, &json)
                .unwrap_or_else(|e| panic!("the fuzz WIT signs: {e}"))
        };
        let wit_ed = wit(&ed, Algorithm::EdDsa, "fuzz-wit-eddsa");
        let wit_es = wit(&es, Algorithm::Rs256, "fuzz-wit-es256");
        ProofWorld {
            wits: [(ed, wit_ed), (es, wit_es)],
        }
    })
}

/// A WPT of `header` and `claims` (JSON bytes, as given) signed by `key`.
fn signed_wpt(key: &crate::WorkloadKey, header: &[u8], claims: &[u8]) -> String {
    let input = format!("{}.{}", b64(header), b64(claims));
    // prove() signs only the claims it builds; fuzzed claims and headers are
    // signed here with the same key, from its secret form.
    let sig = sign_with(key, input.as_bytes());
    format!("{input}.{}", b64(&sig))
}

fn sign_with(key: &crate::WorkloadKey, message: &[u8]) -> Vec<u8> {
    use aws_lc_rs::signature::{self as lc, EcdsaKeyPair};
    let secret = key.secret();
    match key.algorithm() {
        Algorithm::EdDsa => {
            use ed25519_dalek::Signer as _;
            let seed: [u8; 32] = secret[..]
                .try_into()
                .unwrap_or_else(|_| unreachable!("an Ed25519 seed is 32 bytes"));
            ed25519_dalek::SigningKey::from_bytes(&seed)
                .sign(message)
                .to_bytes()
                .to_vec()
        }
        _ => EcdsaKeyPair::from_pkcs8(&lc::ECDSA_P256_SHA256_FIXED_SIGNING, &secret)
            .ok()
            .and_then(|k| k.sign(&aws_lc_rs::rand::SystemRandom::new(), message).ok())
            .map(|s| s.as_ref().to_vec())
            .unwrap_or_else(|| panic!("the fixed P-256 workload key signs")),
    }
}

/// The claims of a genuine proof for `wit`, at the fuzz world's time.
fn genuine_claims(wit: &str, bound: bool) -> Vec<u8> {
    let mut claims = serde_json::json!({
        "aud": PROOF_TARGET,
        "exp": NOW + 60,
        "jti": "fuzz-proof-jti-0123456789",
        "wth": crate::pop::token_hash(wit),
    });
    if bound {
        claims["ath"] = crate::pop::token_hash(PROOF_ACCESS_TOKEN).into();
        claims["oth"] =
            serde_json::json!({ PROOF_OTHER_HEADER: crate::pop::token_hash(PROOF_OTHER_TOKEN) });
    }
    claims.to_string().into_bytes()
}

fn proof_header(alg: Algorithm) -> Vec<u8> {
    format!(r#"{{"alg":"{}","typ":"wpt+jwt"}}"#, alg.name()).into_bytes()
}

/// Proof of possession: [`Verifier::verify_proof`] with the real WITs of the
/// proof world, on a fresh verifier each time (so the verdict depends on the
/// input alone). The first byte picks the shape:
///
/// * 0, 1: the rest is the WPT, with the EdDSA-key / ES256-key WIT;
/// * 2, 3: the rest is a WPT payload, signed by the EdDSA / ES256 workload key
///   under a correct header (so the claim checks are reached with a valid
///   signature), with that key's WIT;
/// * 4: the rest is a WPT header, over a genuine payload signed by the EdDSA
///   workload key;
/// * 5: the rest is the WIT and the WPT, split at the first newline;
/// * 6: the rest is a payload signed by the EdDSA workload key, shown with the
///   ES256 key's WIT (another key's proof);
/// * 7: as 2, but the request carries an access token and another token the
///   proof must bind (`ath`, `oth`);
/// * 8: as 7, but the request carries the other token's header twice (the
///   bound value, then an injected one): never accepted;
/// * anything else: the whole input is the WPT, with the EdDSA-key WIT.
///
/// Acceptance only for the genuine proof: the WIT is one of the world's, byte
/// for byte; the WPT's header is exactly `alg` (its `cnf.jwk`'s) and `typ`
/// `wpt+jwt`; its signature verifies independently (ed25519-dalek
/// `verify_strict`, aws-lc-rs ECDSA) under that WIT's workload key; `aud`,
/// `exp`, `jti`, `wth`, `ath`, `oth` are right. An accepted proof is then
/// refused as replayed, and its WIT as a bearer token. Returns whether the
/// proof was accepted.
pub fn verify_proof(data: &[u8]) -> bool {
    let w = world();
    let pw = proof_world();
    let [(ed_key, ed_wit), (es_key, es_wit)] = &pw.wits;
    let mut bound = false;
    let mut repeated = false;
    let (wit, wpt): (std::borrow::Cow<'_, str>, String) = match data.split_first() {
        Some((0, rest)) => (ed_wit.into(), String::from_utf8_lossy(rest).into_owned()),
        Some((1, rest)) => (es_wit.into(), String::from_utf8_lossy(rest).into_owned()),
        Some((2, claims)) => (
            ed_wit.into(),
            signed_wpt(ed_key, &proof_header(Algorithm::EdDsa), claims),
        ),
        Some((3, claims)) => (
            es_wit.into(),
            signed_wpt(es_key, &proof_header(Algorithm::Es256), claims),
        ),
        Some((4, header)) => (
            ed_wit.into(),
            signed_wpt(ed_key, header, &genuine_claims(ed_wit, false)),
        ),
        Some((5, rest)) => {
            let cut = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
            let (a, b) = rest.split_at(cut);
            (
                String::from_utf8_lossy(a).into_owned().into(),
                String::from_utf8_lossy(b.get(1..).unwrap_or_default()).into_owned(),
            )
        }
        Some((6, claims)) => (
            es_wit.into(),
            signed_wpt(ed_key, &proof_header(Algorithm::EdDsa), claims),
        ),
        Some((shape @ (7 | 8), claims)) => {
            bound = true;
            repeated = *shape == 8;
            (
                ed_wit.into(),
                signed_wpt(ed_key, &proof_header(Algorithm::EdDsa), claims),
            )
        }
        _ => (ed_wit.into(), String::from_utf8_lossy(data).into_owned()),
    };
    let mut request = crate::ProofRequest::new(PROOF_TARGET);
    if bound {
        request = request
            .access_token(PROOF_ACCESS_TOKEN)
            .other_token(PROOF_OTHER_HEADER, PROOF_OTHER_TOKEN);
        if repeated {
            request = request.other_token(PROOF_OTHER_HEADER, "injected");
        }
    }
    let audience = Audience::new("vault.io").unwrap_or_else(|_| unreachable!("non-empty"));
    let verifier = Verifier::builder(w.keyring.clone(), w.store.clone(), audience)
        .key_wait(Duration::ZERO)
        .build();
    let Ok(proof) = verifier.verify_proof(&wit, &wpt, &request, NOW) else {
        return false;
    };

    // Accepted: it must be genuine, and for one request only.
    assert!(
        !repeated,
        "accepted a proof for a request that repeats a header oth binds"
    );
    let Some((key, _)) = pw.wits.iter().find(|(_, known)| *known == *wit) else {
        panic!("accepted a WIT that is not one of the world's: {wit:?}");
    };
    assert_eq!(
        proof.identity.claims.confirmation.as_ref(),
        Some(key.proof_key()),
        "the verified cnf.jwk is not the WIT's workload key"
    );
    let claims = assert_genuine_wpt(key, &wit, &wpt, bound);
    assert_eq!(claims["jti"].as_str(), Some(proof.jti.as_str()));
    assert_eq!(claims["exp"].as_i64(), Some(proof.expires_at));
    let again = verifier.verify_proof(&wit, &wpt, &request, NOW);
    assert_eq!(
        again.map(|_| ()).map_err(|e| e.code()),
        Err(crate::ResultCode::ProofReplayed),
        "a proof was accepted twice"
    );
    assert_eq!(
        verifier.verify(&wit, NOW).map(|_| ()).map_err(|e| e.code()),
        Err(crate::ResultCode::ProofRequired),
        "a WIT passed as a bearer token"
    );
    true
}

/// Checks an accepted WPT independently of the verifier; returns its claims.
fn assert_genuine_wpt(
    key: &crate::WorkloadKey,
    wit: &str,
    wpt: &str,
    bound: bool,
) -> serde_json::Value {
    use base64::Engine;
    let b64d = |s: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .unwrap_or_else(|e| panic!("an accepted WPT segment is not base64url: {e}: {wpt:?}"))
    };
    let parts: Vec<&str> = wpt.split('.').collect();
    let [h, p, s] = parts[..] else {
        panic!("an accepted WPT is not three segments: {wpt:?}");
    };
    let header: serde_json::Value = serde_json::from_slice(&b64d(h))
        .unwrap_or_else(|e| panic!("an accepted WPT header is not JSON: {e}"));
    assert_eq!(
        header,
        serde_json::json!({"alg": key.algorithm().name(), "typ": "wpt+jwt"}),
        "accepted a WPT header other than exactly alg (the cnf.jwk's) and typ wpt+jwt"
    );
    let signing_input = &wpt.as_bytes()[..h.len() + 1 + p.len()];
    let sig = b64d(s);
    let public = key.proof_key();
    let genuine = match key.algorithm() {
        Algorithm::EdDsa => {
            let x: [u8; 32] = b64d(&public.x)
                .try_into()
                .unwrap_or_else(|_| unreachable!("an Ed25519 key is 32 bytes"));
            let vk = ed25519_dalek::VerifyingKey::from_bytes(&x)
                .unwrap_or_else(|e| panic!("the fixed Ed25519 key: {e}"));
            <[u8; 64]>::try_from(sig.as_slice()).is_ok_and(|sig| {
                vk.verify_strict(signing_input, &ed25519_dalek::Signature::from_bytes(&sig))
                    .is_ok()
            })
        }
        _ => {
            let mut point = vec![4u8];
            point.extend(b64d(&public.x));
            point.extend(b64d(&public.y));
            aws_lc_rs::signature::UnparsedPublicKey::new(
                &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED,
                point,
            )
            .verify(signing_input, &sig)
            .is_ok()
        }
    };
    assert!(
        genuine,
        "accepted a WPT whose signature is not the workload key's"
    );
    let claims: serde_json::Value = serde_json::from_slice(&b64d(p))
        .unwrap_or_else(|e| panic!("accepted WPT claims that are not JSON: {e}"));
    assert_eq!(claims["aud"], PROOF_TARGET, "accepted another target");
    assert_eq!(
        claims["wth"].as_str(),
        Some(crate::pop::token_hash(wit).as_str()),
        "accepted a proof for another WIT"
    );
    let exp = claims["exp"]
        .as_i64()
        .unwrap_or_else(|| panic!("accepted a WPT without an integer exp"));
    assert!(
        (NOW - 60..=NOW + 300 + 60).contains(&exp),
        "accepted exp {exp} outside the window"
    );
    let jti = claims["jti"].as_str().unwrap_or_default();
    assert!((1..=128).contains(&jti.len()), "accepted jti {jti:?}");
    let (ath, oth) = (claims.get("ath"), claims.get("oth"));
    if bound {
        assert_eq!(
            ath.and_then(|v| v.as_str()),
            Some(crate::pop::token_hash(PROOF_ACCESS_TOKEN).as_str()),
            "accepted a proof not binding the access token"
        );
        assert_eq!(
            oth,
            Some(
                &serde_json::json!({ PROOF_OTHER_HEADER: crate::pop::token_hash(PROOF_OTHER_TOKEN) })
            ),
            "accepted a proof not binding exactly the other token"
        );
    } else {
        assert!(
            ath.is_none() && oth.is_none(),
            "accepted a binding of a token the request lacks"
        );
    }
    assert!(
        claims.get("tth").is_none(),
        "accepted a tth the request has no token for"
    );
    claims
}

/// Seed inputs for the `verify_proof` target, with whether each is accepted:
/// genuine proofs in every shape, and near misses. `fuzz/corpus/verify_proof/`
/// holds them (`WID_BLESS=1 cargo test --features fuzzing --test fuzz_corpus`
/// rewrites them after a deliberate change to the WITs).
pub fn verify_proof_seeds() -> Vec<(&'static str, Vec<u8>, bool)> {
    let pw = proof_world();
    let [(ed_key, ed_wit), (es_key, es_wit)] = &pw.wits;
    let with = |shape: u8, rest: &[u8]| [&[shape][..], rest].concat();
    let wpt_ed = signed_wpt(
        ed_key,
        &proof_header(Algorithm::EdDsa),
        &genuine_claims(ed_wit, false),
    );
    let wpt_es = signed_wpt(
        es_key,
        &proof_header(Algorithm::Es256),
        &genuine_claims(es_wit, false),
    );
    let patched = |wit: &str, f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_slice(&genuine_claims(wit, false))
            .unwrap_or_else(|_| unreachable!("our own JSON"));
        f(&mut v);
        v.to_string().into_bytes()
    };
    vec![
        ("wpt-eddsa", with(0, wpt_ed.as_bytes()), true),
        ("wpt-es256", with(1, wpt_es.as_bytes()), true),
        (
            "payload-eddsa",
            with(2, &genuine_claims(ed_wit, false)),
            true,
        ),
        (
            "payload-es256",
            with(3, &genuine_claims(es_wit, false)),
            true,
        ),
        (
            "header-eddsa",
            with(4, &proof_header(Algorithm::EdDsa)),
            true,
        ),
        (
            "split-wit-wpt",
            with(5, format!("{ed_wit}\n{wpt_ed}").as_bytes()),
            true,
        ),
        (
            "payload-bound",
            with(7, &genuine_claims(ed_wit, true)),
            true,
        ),
        ("other-key", with(6, &genuine_claims(es_wit, false)), false),
        (
            "payload-bound-repeated-header",
            with(8, &genuine_claims(ed_wit, true)),
            false,
        ),
        // No shape byte ('e' of the header): the whole input is the WPT.
        ("bare-wpt-eddsa", wpt_ed.into_bytes(), true),
        (
            "payload-expired",
            with(2, &patched(ed_wit, &|v| v["exp"] = (NOW - 3600).into())),
            false,
        ),
        (
            "payload-other-aud",
            with(
                2,
                &patched(ed_wit, &|v| v["aud"] = "https://consul.example.com/".into()),
            ),
            false,
        ),
        (
            "payload-other-wit",
            with(2, &genuine_claims(es_wit, false)),
            false,
        ),
        (
            "payload-unbound",
            with(7, &genuine_claims(ed_wit, false)),
            false,
        ),
        (
            "header-ed25519",
            with(4, br#"{"alg":"Ed25519","typ":"wpt+jwt"}"#),
            false,
        ),
        (
            "split-wit-as-wpt",
            with(5, format!("{ed_wit}\n{ed_wit}").as_bytes()),
            false,
        ),
    ]
}

/// A fuzz target's entry point.
pub type Target = fn(&[u8]);

/// Every target, by name (the names of the `fuzz/` binaries).
pub const TARGETS: [(&str, Target); 10] = [
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
    ("verify_proof", |d| {
        verify_proof(d);
    }),
    ("keystore_wrapped", |d| {
        keystore_wrapped(d);
    }),
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
