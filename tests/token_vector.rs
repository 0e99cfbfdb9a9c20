//! The independently signed fixed token (`tests/vectors/token.json`, made by
//! Python `cryptography`) verifies through the full pipeline.

use std::sync::Arc;

use serde_json::Value;
use workload_identity::{AllocState, Audience, Keyring, MemoryStore, ResultCode, Verifier};
use workload_identity::{KeyDerivation, KeyId, KeyMaterial, KeyState, RootKey};

#[test]
fn the_fixed_token_verifies() {
    let v: Value = serde_json::from_str(include_str!("vectors/token.json")).unwrap();
    let s = |k: &str| v[k].as_str().unwrap().to_string();
    let hex = s("material_hex");
    let material: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let kr = Keyring::from_keys([RootKey::new(
        KeyId::new(&s("key_id")).unwrap(),
        KeyMaterial::from_slice(&material).unwrap(),
        KeyDerivation::HkdfV1,
        KeyState::Inactive,
        0,
    )])
    .unwrap();
    let store = Arc::new(MemoryStore::new());
    store.set_state("5f8c7d2e-3b1a-4c6d-9e0f-123456789abc", AllocState::Live);
    let verifier = Verifier::builder(kr, store, Audience::new("consul.io").unwrap())
        .issuer("https://nomad.example.com")
        .require_exp(true)
        .build();
    let now = v["now"].as_i64().unwrap();
    let ok = verifier.verify(&s("token"), now).unwrap();
    assert_eq!(
        ok.claims.subject,
        "global:default:web:frontend:server:vault_default"
    );
    assert_eq!(ok.claims.expires_at, Some(now + 3600));
    assert_eq!(ok.kid.as_str(), s("key_id"));
    let e = verifier.verify(&s("token"), now + 3660).unwrap_err();
    assert_eq!(e.code(), ResultCode::Expired);
}
