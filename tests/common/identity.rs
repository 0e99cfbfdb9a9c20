//! A small world for identity tests: a keyring with one known active key, a
//! memory store holding one live allocation, an issuer and a verifier.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use workload_identity::{Audience, Issuer, Keyring, MemoryStore, Verifier};
use workload_identity::{KeyDerivation, KeyId, KeyMaterial, KeyState, RootKey};

pub const NOW: i64 = 1_700_000_000;
pub const KID: &str = "key-1";
pub const AUD: &str = "vault.io";

pub struct World {
    pub keyring: Keyring,
    pub store: Arc<MemoryStore>,
    pub issuer: Issuer,
    pub verifier: Verifier,
}

pub fn root_key(id: &str, byte: u8, state: KeyState) -> RootKey {
    RootKey::new(
        KeyId::new(id).unwrap(),
        KeyMaterial::from_slice(&[byte; 32]).unwrap(),
        KeyDerivation::HkdfV1,
        state,
        NOW - 1000,
    )
}

pub fn world() -> World {
    let keyring = Keyring::from_keys([root_key(KID, 1, KeyState::Active)]).unwrap();
    let store = Arc::new(MemoryStore::new());
    store.upsert(&super::allocation());
    let verifier = Verifier::builder(keyring.clone(), store.clone(), Audience::new(AUD).unwrap())
        .key_wait(Duration::from_millis(50))
        .build();
    World {
        issuer: Issuer::new(keyring.clone()),
        keyring,
        store,
        verifier,
    }
}

impl World {
    /// A valid token for the sample task request.
    pub fn token(&self) -> String {
        self.issuer
            .issue(&super::issue_request_task(), NOW)
            .unwrap()
            .token
    }

    /// Signs raw segments with the active key: `<header_seg>.<payload_seg>.<sig>`.
    pub fn sign_segments(&self, header_seg: &str, payload_seg: &str) -> String {
        sign_segments_with(&self.keyring, header_seg, payload_seg)
    }

    /// Signs a header and payload (JSON text) with the active key.
    pub fn sign_json(&self, header: &str, payload: &str) -> String {
        sign_json_with(&self.keyring, header, payload)
    }
}

/// Signs raw segments with `keyring`'s active EdDSA key, whatever they say.
pub fn sign_segments_with(keyring: &Keyring, header_seg: &str, payload_seg: &str) -> String {
    sign_segments_alg(
        keyring,
        workload_identity::Algorithm::EdDsa,
        header_seg,
        payload_seg,
    )
}

/// Signs raw segments with `keyring`'s active key of `alg`, whatever they say.
pub fn sign_segments_alg(
    keyring: &Keyring,
    alg: workload_identity::Algorithm,
    header_seg: &str,
    payload_seg: &str,
) -> String {
    let input = format!("{header_seg}.{payload_seg}");
    let sig = keyring
        .active_for(alg)
        .unwrap()
        .sign(input.as_bytes())
        .unwrap();
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
}

/// Signs a header and payload (JSON text) with `keyring`'s active key.
pub fn sign_json_with(keyring: &Keyring, header: &str, payload: &str) -> String {
    sign_segments_with(
        keyring,
        &URL_SAFE_NO_PAD.encode(header),
        &URL_SAFE_NO_PAD.encode(payload),
    )
}

/// The payload of a valid token for the sample, as JSON text with `overrides`
/// merged in (a `null` override removes the claim).
pub fn payload_with(overrides: serde_json::Value) -> String {
    let mut p = serde_json::json!({
        "nomad_namespace": "default",
        "nomad_job_id": "web",
        "nomad_allocation_id": super::ALLOC_ID,
        "nomad_task": "server",
        "sub": "global:default:web:frontend:server:vault_default",
        "aud": ["vault.io", "consul.io"],
        "iat": NOW, "nbf": NOW, "exp": NOW + 3600,
        "jti": "0b9c6c6e-2d7a-4e2b-9f1c-3a2d4e5f6a7b"
    });
    for (k, v) in overrides.as_object().unwrap() {
        if v.is_null() {
            p.as_object_mut().unwrap().remove(k);
        } else {
            p[k] = v.clone();
        }
    }
    p.to_string()
}

pub const HEADER: &str = r#"{"alg":"EdDSA","kid":"key-1","typ":"JWT"}"#;

/// Segment `i` of a compact JWS, decoded as JSON (header 0, payload 1).
pub fn decode_segment(token: &str, i: usize) -> serde_json::Value {
    use base64::Engine;
    let seg = token.split('.').nth(i).expect("a segment");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(seg)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON")
}

/// `token` with segment `i` replaced by the base64url of `json` (the
/// signature is left as it was).
pub fn replace_segment(token: &str, i: usize, json: &str) -> String {
    use base64::Engine;
    let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
    parts[i] = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
    parts.join(".")
}
