//! ES256 key derivation against the independent P-256 vectors in
//! `tests/vectors/p256.json` (made by `scripts/keyring-vectors.py` with Python
//! `cryptography`; `scripts/keyring-vectors-check.sh` regenerates and diffs
//! them): for every case the key's public point, and its JWKS entry, are the
//! vector's `x` and `y`, and a signature of the keyring's active ES256 key
//! verifies under the vector's point with RustCrypto's P-256 (through
//! `jsonwebtoken`), an implementation other than the library's aws-lc-rs.

use std::error::Error;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use workload_identity::{
    Algorithm, HKDF_P256_SALT, KeyDerivation, KeyId, KeyMaterial, KeyState, Keyring, PublicKey,
    RootKey,
};

type TestResult = Result<(), Box<dyn Error>>;

fn hex(s: &str) -> Vec<u8> {
    assert_eq!(s.len() % 2, 0, "odd-length hex {s:?}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn b64_32(s: &str) -> [u8; 32] {
    let raw = URL_SAFE_NO_PAD.decode(s).unwrap();
    raw.try_into()
        .unwrap_or_else(|raw: Vec<u8>| panic!("{s:?} is {} bytes, want 32", raw.len()))
}

fn document() -> Value {
    serde_json::from_str(include_str!("vectors/p256.json")).unwrap()
}

fn field<'a>(v: &'a Value, name: &str) -> &'a str {
    v[name]
        .as_str()
        .unwrap_or_else(|| panic!("vector field {name:?} missing or not a string: {v}"))
}

#[test]
fn the_vector_file_states_the_contract_and_covers_the_cases() {
    let doc = document();
    assert_eq!(
        doc["salt"].as_str().unwrap().as_bytes(),
        HKDF_P256_SALT,
        "the file's salt is the library's"
    );
    assert_eq!(doc["okm_len"], 48);
    assert_eq!(
        doc["n_hex"],
        "ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551"
    );
    assert!(field(&doc, "generator").contains("scripts/keyring-vectors.py"));
    let vectors = doc["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 9);
    let materials: Vec<&str> = vectors.iter().map(|v| field(v, "material_hex")).collect();
    let kids: Vec<&str> = vectors.iter().map(|v| field(v, "key_id")).collect();
    assert!(
        materials.contains(&"00".repeat(32).as_str()),
        "all-zero material"
    );
    assert!(
        materials.contains(&"ff".repeat(32).as_str()),
        "all-0xff material"
    );
    assert!(
        kids.iter().any(|k| k.len() == 128),
        "a 128-character key ID"
    );
    assert!(
        kids.iter()
            .any(|k| k.len() == 36 && k.matches('-').count() == 4),
        "a UUID key ID"
    );
    for v in vectors {
        assert_eq!(field(v, "derivation"), "hkdf-v1");
        assert_eq!(hex(field(v, "d_hex")).len(), 32);
    }
}

#[test]
fn es256_keys_match_the_independent_vectors() -> TestResult {
    let doc = document();
    let vectors = doc["vectors"].as_array().unwrap();
    let mut checked = 0;
    for v in vectors {
        let name = field(v, "name");
        let kid = field(v, "key_id");
        let material = hex(field(v, "material_hex"));
        let (want_x, want_y) = (field(v, "x"), field(v, "y"));
        let key = RootKey::for_algorithm(
            Algorithm::Es256,
            KeyId::new(kid)?,
            KeyMaterial::from_slice(&material)?,
            KeyDerivation::HkdfV1,
            KeyState::Active,
            0,
        );
        assert_eq!(key.algorithm(), Algorithm::Es256, "{name}");

        // The public point, straight from the root key.
        let want = PublicKey::P256 {
            x: b64_32(want_x),
            y: b64_32(want_y),
        };
        assert!(key.public_key()? == want, "{name}: public key");

        // Through the keyring's JWKS, as a relying party reads it.
        let keyring = Keyring::new();
        keyring.insert(key)?;
        let jwks = keyring.jwks();
        assert_eq!(jwks.keys.len(), 1, "{name}");
        let jwk = &jwks.keys[0];
        assert_eq!(jwk.kty, "EC", "{name}");
        assert_eq!(jwk.crv, Some("P-256"), "{name}");
        assert_eq!(jwk.x.as_deref(), Some(want_x), "{name}: JWKS x");
        assert_eq!(jwk.y.as_deref(), Some(want_y), "{name}: JWKS y");
        assert_eq!(jwk.n, None, "{name}");
        assert_eq!(jwk.e, None, "{name}");
        assert_eq!(jwk.kid, kid, "{name}");
        assert_eq!(jwk.alg, "ES256", "{name}");
        assert_eq!(jwk.use_, "sig", "{name}");
        let json: Value = serde_json::to_value(&jwks)?;
        assert_eq!(json["keys"][0]["x"], want_x, "{name}: serialized JWKS x");
        assert_eq!(json["keys"][0]["y"], want_y, "{name}: serialized JWKS y");

        // A signature of the derived key verifies under the vector's point.
        let active = keyring.active_for(Algorithm::Es256)?;
        assert_eq!(active.id().as_str(), kid, "{name}");
        assert!(active.public_key() == &want, "{name}: active key's point");
        let msg = format!("p256 vector {name}");
        let sig = active.sign(msg.as_bytes())?;
        assert_eq!(sig.len(), 64, "{name}: ES256 signature is r || s");
        // RustCrypto's P-256, explicitly (the crate is built with both of its
        // providers for the benches); a second install in this process is a no-op.
        let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
        let decoding = jsonwebtoken::DecodingKey::from_ec_components(want_x, want_y)?;
        let sig_b64 = URL_SAFE_NO_PAD.encode(&sig);
        assert!(
            jsonwebtoken::crypto::verify(
                &sig_b64,
                msg.as_bytes(),
                &decoding,
                jsonwebtoken::Algorithm::ES256
            )?,
            "{name}: RustCrypto P-256 rejects the library's signature"
        );
        assert!(
            !jsonwebtoken::crypto::verify(
                &sig_b64,
                b"another message",
                &decoding,
                jsonwebtoken::Algorithm::ES256
            )?,
            "{name}: RustCrypto P-256 accepts the signature for another message"
        );
        let handle = keyring.verifying_key(kid).expect("inserted key verifies");
        assert!(
            handle.verify(msg.as_bytes(), &sig),
            "{name}: keyring verify"
        );
        checked += 1;
    }
    assert_eq!(checked, 9);
    Ok(())
}

#[test]
fn the_key_id_is_part_of_the_derivation() -> TestResult {
    // Same material, different key IDs: different points (the vectors pair
    // every repeated material with two IDs; check it here too).
    let doc = document();
    let vectors = doc["vectors"].as_array().unwrap();
    let mut pairs = 0;
    for (i, a) in vectors.iter().enumerate() {
        for b in &vectors[i + 1..] {
            if field(a, "material_hex") == field(b, "material_hex") {
                assert_ne!(field(a, "key_id"), field(b, "key_id"));
                assert_ne!(field(a, "x"), field(b, "x"), "{a} vs {b}");
                pairs += 1;
            }
        }
    }
    assert!(pairs >= 3, "only {pairs} same-material pairs");
    Ok(())
}
