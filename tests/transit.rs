//! Key custody against a real OpenBao (feature `transit`): keystores wrapped
//! by a Transit key (wrap, unwrap, rewrap after a Transit rotation, a revoked
//! token, a policy without `decrypt`, an unreachable server, a wrong key
//! name), and tokens signed by Transit signing keys of all three algorithms,
//! verified here and by PyJWT from our JWKS. One server for the whole file,
//! its scenarios run in order (`bao server -dev` over TLS on loopback).

mod bao_support;
mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bao_support::Bao;
use workload_identity::{
    Algorithm, Audience, ExternalSigner, Issuer, KeyId, KeyState, KeyWrapper, Keyring,
    KeystoreLoadOptions, MemoryStore, PublicKey, ResultCode, Transit, TransitClient, TransitSigner,
    Verifier, unix_now,
};

/// Three algorithms and a verify-only key.
fn sample() -> Keyring {
    Keyring::from_keys([
        common::alg_key(Algorithm::EdDsa, "ed-1", 4, KeyState::Active, 20),
        common::alg_key(Algorithm::Es256, "es-1", 5, KeyState::Active, 30),
        common::alg_key(Algorithm::Rs256, "rs-1", 0, KeyState::Active, 40),
        common::alg_key(Algorithm::EdDsa, "ed-0", 6, KeyState::Inactive, 10),
    ])
    .unwrap()
}

fn with(w: &Transit) -> KeystoreLoadOptions {
    KeystoreLoadOptions::default().wrapper(Arc::new(w.clone()))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[track_caller]
fn custody_err(r: Result<impl std::fmt::Debug, workload_identity::Error>, says: &[&str]) -> String {
    let e = r.expect_err("expected a key custody failure");
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    let text = e.to_string();
    for s in says {
        assert!(text.contains(s), "{s:?} not in: {text}");
    }
    text
}

#[test]
fn transit_against_a_real_openbao() {
    let bao = Bao::start();
    let dir = tempfile::tempdir().unwrap();
    wrapping(&bao, dir.path());
    rewrap_after_rotation(&bao, dir.path());
    refusals(&bao, dir.path());
    signing(&bao, dir.path());
    rotation_policy(&bao);
}

/// The rotation policy over Transit versions: prepublish a new version at
/// half the threshold, promote it at the threshold, deprecate the old one
/// once its tokens expired, as for local keys.
fn rotation_policy(bao: &Bao) {
    use workload_identity::{RotationAction, RotationPolicy};
    bao.cmd(&["write", "-f", "transit/keys/wid-pol", "type=ed25519"]);
    let s = TransitSigner::new(bao.client(&bao.root_token), "wid-pol").unwrap();
    let kr = Keyring::new();
    let t0 = unix_now();
    let policy = RotationPolicy::new(Some(Duration::from_secs(100)))
        .rotation_threshold(Duration::from_secs(1000));
    assert_eq!(s.apply_policy(&kr, &policy, t0, 60).unwrap(), vec![]);
    let v1 = KeyId::new("transit.wid-pol.v1").unwrap();
    let v2 = KeyId::new("transit.wid-pol.v2").unwrap();
    assert_eq!(kr.active_id(), Some(v1.clone()));

    let done = s.apply_policy(&kr, &policy, t0 + 600, 60).unwrap();
    assert!(
        matches!(
            done.as_slice(),
            [RotationAction::Prepublish {
                algorithm: Algorithm::EdDsa,
                purpose: workload_identity::KeyPurpose::Bearer,
                ..
            }]
        ),
        "{done:?}"
    );
    let info = kr
        .key_info(v2.as_str())
        .expect("v2 made in Transit and published");
    assert_eq!(info.state, KeyState::Prepublished);
    assert!(
        info.publish_time > t0 + 600,
        "signs later: {}",
        info.publish_time
    );
    assert_eq!(kr.active_id(), Some(v1.clone()), "v1 still signs");

    let at = info.publish_time;
    let done = s.apply_policy(&kr, &policy, at, 60).unwrap();
    assert_eq!(done, vec![RotationAction::Promote { kid: v2.clone() }]);
    assert_eq!(kr.active_id(), Some(v2.clone()));
    let t = Issuer::new(kr.clone())
        .issue(&common::issue_request_task(), at)
        .unwrap();
    assert_eq!(t.kid, v2);

    let done = s.apply_policy(&kr, &policy, at + 100 + 61, 60).unwrap();
    assert_eq!(done, vec![RotationAction::Deprecate { kid: v1.clone() }]);
    assert_eq!(
        kr.key_info(v1.as_str()).unwrap().state,
        KeyState::Deprecated
    );
    assert!(!kr.jwks().keys.iter().any(|k| k.kid == v1.as_str()));
}

/// Wrap and unwrap a keystore with a Transit key; the file holds Transit
/// ciphertexts and no material; the client's token can come from a file.
fn wrapping(bao: &Bao, dir: &std::path::Path) {
    bao.cmd(&["write", "-f", "transit/keys/wid-kek", "type=aes256-gcm96"]);
    let token_file = bao.token_file(dir, &bao.root_token);
    let client = TransitClient::builder(&bao.addr)
        .token_file(&token_file)
        .ca_bundle_pem(&bao.ca_pem())
        .build()
        .unwrap();
    assert!(
        !format!("{client:?}").contains(&bao.root_token),
        "Debug redacts the token"
    );
    let w = Transit::new(client, "wid-kek").unwrap();
    assert_eq!(w.kind(), "transit");
    assert_eq!(w.kek_id(), "transit/wid-kek");

    let kr = sample();
    let path = dir.join("keystore");
    kr.save_wrapped(&path, &w).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(contains(&bytes, b"vault:v1:"), "Transit ciphertexts");
    assert!(contains(&bytes, b"\xa7Version\x03"));
    for k in kr.keys() {
        let m = kr.root_key(k.kid.as_str()).unwrap();
        let secret = m.material().expose_secret();
        let secret = if k.algorithm == Algorithm::Rs256 {
            &secret[700..]
        } else {
            secret
        };
        assert!(!contains(&bytes, &secret[..16]), "{} in the clear", k.kid);
    }
    let back = Keyring::load_with(&path, &with(&w)).unwrap();
    assert_eq!(back.keys(), kr.keys());
    for alg in [Algorithm::EdDsa, Algorithm::Es256, Algorithm::Rs256] {
        Issuer::new(back.clone())
            .issue_with(alg, &common::issue_request_task(), 1_700_000_000)
            .unwrap();
    }
    // Without Transit: the error names the Transit key and the flags.
    let text = custody_err(Keyring::load(&path), &["transit/wid-kek", "--transit-addr"]);
    assert!(!text.contains(&bao.root_token));
    // A tampered ciphertext (a key moved to another ID): Transit's own AEAD
    // check refuses it, and the error names the key.
    let moved = bytes
        .windows(4)
        .position(|w| w == b"es-1")
        .map(|at| {
            let mut b = bytes.clone();
            b[at..at + 4].copy_from_slice(b"es-2");
            b
        })
        .unwrap();
    let e = Keyring::from_keystore_bytes_with(&moved, &with(&w)).unwrap_err();
    // The checksum sees the change first; the AEAD binding is checked with
    // the checksum recomputed in tests/custody.rs, and here through Transit:
    assert!(e.to_string().contains("checksum"), "{e}");
    let aad = workload_identity::associated_data(&KeyId::new("es-1").unwrap(), Algorithm::Es256);
    let wrapped = w.wrap(&[7; 32], &aad).unwrap();
    assert_eq!(&w.unwrap(&wrapped, &aad).unwrap()[..], &[7; 32]);
    let other_aad =
        workload_identity::associated_data(&KeyId::new("es-2").unwrap(), Algorithm::Es256);
    custody_err(
        w.unwrap(&wrapped, &other_aad),
        &["authentication failed", "altered"],
    );
}

/// After a Transit rotation, rewrapping moves every key to the new version;
/// once the old version may no longer decrypt, the keystore still loads.
fn rewrap_after_rotation(bao: &Bao, dir: &std::path::Path) {
    bao.cmd(&["write", "-f", "transit/keys/wid-kek2", "type=aes256-gcm96"]);
    let w = Transit::new(bao.client(&bao.root_token), "wid-kek2").unwrap();
    let kr = sample();
    let path = dir.join("keystore-rot");
    kr.save_wrapped(&path, &w).unwrap();
    bao.cmd(&["write", "-f", "transit/keys/wid-kek2/rotate"]);
    let n = Keyring::rewrap_keystore(&path, &with(&w), Some(&w)).unwrap();
    assert_eq!(n, 4);
    let bytes = std::fs::read(&path).unwrap();
    assert!(contains(&bytes, b"vault:v2:") && !contains(&bytes, b"vault:v1:"));
    bao.cmd(&[
        "write",
        "transit/keys/wid-kek2/config",
        "min_decryption_version=2",
    ]);
    assert_eq!(
        Keyring::load_with(&path, &with(&w)).unwrap().keys(),
        kr.keys()
    );
    // Transit's own rewrap endpoint ignores associated data (so we decrypt
    // and encrypt instead): if a future OpenBao takes it, this says so.
    let aad = workload_identity::associated_data(&KeyId::new("k").unwrap(), Algorithm::EdDsa);
    let c = String::from_utf8(w.wrap(&[1; 32], &aad).unwrap()).unwrap();
    let b64 = |b: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b);
    let out = bao.try_cmd(&[
        "write",
        "transit/rewrap/wid-kek2",
        &format!("ciphertext={c}"),
        &format!("associated_data={}", b64(&aad)),
    ]);
    assert!(
        !out.status.success(),
        "OpenBao's rewrap now takes associated_data: use it in Transit::rewrap"
    );
}

/// A revoked token, a policy without decrypt, an unreachable server, a wrong
/// key name, a key of the wrong type, plain http: each fails closed and says
/// which.
fn refusals(bao: &Bao, dir: &std::path::Path) {
    bao.cmd(&["write", "-f", "transit/keys/wid-kek3", "type=aes256-gcm96"]);
    let root = Transit::new(bao.client(&bao.root_token), "wid-kek3").unwrap();
    let kr = sample();
    let path = dir.join("keystore-refusals");
    kr.save_wrapped(&path, &root).unwrap();
    let before = std::fs::read(&path).unwrap();

    // Encrypt and read, but no decrypt.
    bao.policy(
        "no-decrypt",
        r#"path "transit/keys/wid-kek3" { capabilities = ["read"] }
path "transit/encrypt/wid-kek3" { capabilities = ["update"] }"#,
    );
    let t = bao.token_with("no-decrypt");
    let w = Transit::new(bao.client(&t), "wid-kek3").unwrap();
    custody_err(
        Keyring::load_with(&path, &with(&w)),
        &["permission denied", "policy"],
    );
    // It can still wrap.
    kr.save_wrapped(dir.join("by-no-decrypt"), &w).unwrap();

    // A revoked token.
    bao.policy(
        "wrap-unwrap",
        r#"path "transit/keys/wid-kek3" { capabilities = ["read"] }
path "transit/encrypt/wid-kek3" { capabilities = ["update"] }
path "transit/decrypt/wid-kek3" { capabilities = ["update"] }"#,
    );
    let t = bao.token_with("wrap-unwrap");
    let w = Transit::new(bao.client(&t), "wid-kek3").unwrap();
    Keyring::load_with(&path, &with(&w)).unwrap();
    bao.cmd(&["token", "revoke", &t]);
    let text = custody_err(
        Keyring::load_with(&path, &with(&w)),
        &["token was refused", "revoked"],
    );
    assert!(!text.contains(&t), "the token is never printed");

    // An unreachable server (nothing listens there): fails closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = TransitClient::builder(&format!("https://127.0.0.1:{port}"))
        .token("x")
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    custody_err(Transit::new(gone, "wid-kek3"), &["cannot reach Transit"]);

    // A wrong key name, a key of the wrong type.
    custody_err(
        Transit::new(bao.client(&bao.root_token), "no-such-key"),
        &["not found", "key name"],
    );
    bao.cmd(&["write", "-f", "transit/keys/not-aead", "type=ed25519"]);
    custody_err(
        Transit::new(bao.client(&bao.root_token), "not-aead"),
        &["aes256-gcm96"],
    );
    // Plain http to the TLS server is refused before anything is sent, and
    // plain http elsewhere than loopback is never allowed.
    let e = TransitClient::builder("http://vault.example.com:8200")
        .token("x")
        .allow_http_loopback(true)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("https is required"), "{e}");
    // Another server's CA: the TLS handshake fails, nothing is trusted.
    let other_ca = Bao::start();
    let wrong_ca = TransitClient::builder(&bao.addr)
        .token(&bao.root_token)
        .ca_bundle_pem(&other_ca.ca_pem())
        .build()
        .unwrap();
    custody_err(
        Transit::new(wrong_ca, "wid-kek3"),
        &["cannot reach Transit"],
    );
    drop(other_ca);

    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "nothing was rewritten"
    );
}

/// Transit signing keys of all three algorithms sign our tokens; they verify
/// here and in PyJWT from our JWKS; a rotation is prepublished before it
/// signs; a signer holding another key never yields a token.
fn signing(bao: &Bao, dir: &std::path::Path) {
    let kr = Keyring::new();
    let now = unix_now();
    let mut signers = Vec::new();
    for (name, kind, alg) in [
        ("wid-ed", "ed25519", Algorithm::EdDsa),
        ("wid-es", "ecdsa-p256", Algorithm::Es256),
        ("wid-rs", "rsa-2048", Algorithm::Rs256),
    ] {
        bao.cmd(&[
            "write",
            "-f",
            &format!("transit/keys/{name}"),
            &format!("type={kind}"),
        ]);
        let s = TransitSigner::new(bao.client(&bao.root_token), name).unwrap();
        let report = s.sync(&kr, now, 600).unwrap();
        assert_eq!(report.algorithm, Some(alg));
        assert_eq!(
            report.added,
            vec![KeyId::new(&format!("transit.{name}.v1")).unwrap()]
        );
        let info = kr.key_info(&format!("transit.{name}.v1")).unwrap();
        assert_eq!(
            info.state,
            KeyState::Active,
            "the first version signs at once"
        );
        assert!(info.can_sign() && info.derivation.is_none());
        assert_eq!(
            info.external.as_deref(),
            Some(&*format!("transit:transit/{name} v1"))
        );
        signers.push((s, alg));
    }
    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let verifier = Verifier::builder(kr.clone(), store, Audience::new("vault.io").unwrap()).build();
    let mut tokens = Vec::new();
    for (_, alg) in &signers {
        let t = Issuer::new(kr.clone())
            .issue_with(*alg, &common::issue_request_task(), now)
            .unwrap();
        assert!(t.kid.as_str().starts_with("transit.wid-"));
        verifier.verify(&t.token, now).unwrap();
        tokens.push(t.token);
    }

    // PyJWT checks them from our JWKS.
    let jwks = dir.join("transit-jwks.json");
    std::fs::write(&jwks, kr.jwks().to_json()).unwrap();
    let toks = dir.join("transit-tokens.txt");
    std::fs::write(&toks, tokens.join("\n")).unwrap();
    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/transit_pyjwt.py"
        ))
        .arg(&jwks)
        .arg(&toks)
        .output()
        .expect("python3 runs (with PyJWT[crypto], as CI installs)");
    assert!(
        out.status.success(),
        "PyJWT refused Transit-signed tokens: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 tokens verified"));

    // Rotation: the new version is published at once and signs only after
    // the lead time.
    let (ed, _) = &signers[0];
    assert_eq!(ed.rotate().unwrap(), 2);
    let report = ed.sync(&kr, now, 600).unwrap();
    let v2 = KeyId::new("transit.wid-ed.v2").unwrap();
    assert_eq!(report.added, vec![v2.clone()]);
    assert!(report.promoted.is_empty());
    assert_eq!(
        kr.key_info(v2.as_str()).unwrap().state,
        KeyState::Prepublished
    );
    assert!(
        kr.jwks().keys.iter().any(|k| k.kid == v2.as_str()),
        "in the JWKS now"
    );
    let t = Issuer::new(kr.clone())
        .issue_with(Algorithm::EdDsa, &common::issue_request_task(), now)
        .unwrap();
    assert_eq!(t.kid.as_str(), "transit.wid-ed.v1", "v1 still signs");
    let later = now + 700;
    let report = ed.sync(&kr, later, 600).unwrap();
    assert_eq!(report.promoted, vec![v2.clone()]);
    let t = Issuer::new(kr.clone())
        .issue_with(Algorithm::EdDsa, &common::issue_request_task(), later)
        .unwrap();
    assert_eq!(t.kid, v2);
    assert_eq!(
        kr.key_info("transit.wid-ed.v1").unwrap().state,
        KeyState::Inactive
    );

    // A substituted key: our v1 entry's public key, but a signer that signs
    // with another Transit key. Refused before any token exists.
    #[derive(Debug)]
    struct Substitute(Keyring);
    impl ExternalSigner for Substitute {
        fn sign(&self, m: &[u8]) -> Result<Vec<u8>, workload_identity::Error> {
            self.0.active_for(Algorithm::Es256)?.sign(m)
        }
        fn describe(&self) -> String {
            "substitute".into()
        }
    }
    let es_public: PublicKey = kr.key_info("transit.wid-es.v1").unwrap().public_key;
    let victim = Keyring::new();
    let other = Keyring::from_keys([common::alg_key(
        Algorithm::Es256,
        "other",
        9,
        KeyState::Active,
        0,
    )])
    .unwrap();
    victim
        .insert_external(
            KeyId::new("transit.wid-es.v1").unwrap(),
            es_public,
            Arc::new(Substitute(other)),
            KeyState::Active,
            0,
            0,
        )
        .unwrap();
    let e = Issuer::new(victim)
        .issue_with(Algorithm::Es256, &common::issue_request_task(), now)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::KeyCustodyFailed, "{e}");
    assert!(e.to_string().contains("does not verify"), "{e}");

    // A key of a type that cannot sign our tokens.
    bao.cmd(&["write", "-f", "transit/keys/wid-p384", "type=ecdsa-p384"]);
    let s = TransitSigner::new(bao.client(&bao.root_token), "wid-p384").unwrap();
    custody_err(
        s.sync(&Keyring::new(), now, 0),
        &["ecdsa-p384", "ed25519, ecdsa-p256"],
    );
}
