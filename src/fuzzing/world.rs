//! The fuzz world: a keyring with one active key per algorithm and purpose,
//! a store where the fuzz allocation and node are live, and verifiers over
//! them, made once and shared by every target.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::keyring::{Algorithm, KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, RootKey};
use crate::state::{AllocState, MemoryStore};
use crate::verify::{Audience, Verifier};

/// The fixed time of every target.
pub(super) const NOW: i64 = 1_700_000_000;
pub(super) const ALLOC: &str = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc";
const NODE: &str = "fuzz-node";

pub(super) struct World {
    pub(super) keyring: Keyring,
    pub(super) store: Arc<MemoryStore>,
    pub(super) verifier: Verifier,
    pub(super) cached: Verifier,
    /// Accepts node tokens too (node `fuzz-node` is live).
    pub(super) nodes: Verifier,
}

/// The fuzz world's keys: one active key per algorithm (the RSA key is a
/// committed fixture, so seeds signed with it stay valid).
pub(super) const KIDS: [(&str, Algorithm); 3] = [
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
            KeyMaterial::from_pkcs8_der(include_bytes!("../../tests/vectors/rsa2048.pk8")),
            KeyDerivation::Pkcs8,
        ),
        _ => (KeyMaterial::from_slice(&[7; 32]), KeyDerivation::HkdfV1),
    };
    let material = material.unwrap_or_else(|_| unreachable!("fixed valid material"));
    RootKey::for_algorithm(alg, id, material, derivation, KeyState::Active, 0)
}

pub(super) fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let keyring = Keyring::from_keys(
            KIDS.map(|(kid, alg)| world_key(kid, alg))
                .into_iter()
                .chain(WIT_KIDS.map(|(kid, alg)| {
                    world_key(kid, alg).with_purpose(crate::keyring::KeyPurpose::Wit)
                })),
        )
        .unwrap_or_else(|_| unreachable!("one active key per (purpose, algorithm)"));
        let store = Arc::new(MemoryStore::new());
        store.set_state(ALLOC, AllocState::Live);
        store.set_node_state(NODE, crate::state::NodeState::Live);
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
                .node_tokens(crate::verify::NodeTokens::Accept)
                .build(),
            keyring,
            store,
        }
    })
}

pub(super) fn b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}
