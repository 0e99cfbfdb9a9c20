use super::*;
use crate::keyring::{KeyState, KeyringPolicy, PublicKey};

const ISSUER: &str = "https://cluster.example/k8s";
const NOW: i64 = 1_800_000_000;

fn keyring(longest: u64) -> Keyring {
    let kr = Keyring::new();
    kr.set_policy(Some(KeyringPolicy::new(Some(Duration::from_secs(longest)))))
        .unwrap();
    kr.rotate_purpose(KeyPurpose::Kubernetes, Algorithm::Es256, NOW - 100)
        .unwrap();
    kr
}

fn b64(json: &serde_json::Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(json).unwrap())
}

fn apiserver_claims(iat: i64, exp: i64) -> serde_json::Value {
    serde_json::json!({
        "aud": ["https://kubernetes.default.svc"],
        "exp": exp, "iat": iat, "nbf": iat,
        "iss": ISSUER,
        "jti": "6d5a7a0e-3c1b-4c1e-9a43-0b0c0f2f9b11",
        "sub": "system:serviceaccount:default:builder",
        "kubernetes.io": {
            "namespace": "default",
            "serviceaccount": {"name": "builder", "uid": "0b1c"},
        },
    })
}

fn problem(e: &Error) -> String {
    assert_eq!(e.code(), crate::error::ResultCode::InvalidArgument, "{e}");
    e.to_string()
}

#[test]
fn signs_what_the_apiserver_sends_with_the_kubernetes_key() {
    let kr = keyring(3600);
    let signer = ServiceAccountSigner::new(&kr, ISSUER, Algorithm::Es256).unwrap();
    signer.check_ready().unwrap();
    let claims = b64(&apiserver_claims(NOW, NOW + 3600));
    let signed = signer.sign(&claims, NOW).unwrap();
    let header: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&signed.header).unwrap()).unwrap();
    let kid = kr
        .active_id_for_purpose(KeyPurpose::Kubernetes, Algorithm::Es256)
        .unwrap();
    assert_eq!(
        header,
        serde_json::json!({"alg": "ES256", "kid": kid.as_str(), "typ": "JWT"})
    );
    assert_eq!(signed.kid, kid);
    assert_eq!(signed.expires_at, NOW + 3600);
    assert_eq!(
        signed.subject.as_deref(),
        Some("system:serviceaccount:default:builder")
    );
    // Raw r||s over header "." claims, under the key FetchKeys lists.
    let sig = URL_SAFE_NO_PAD.decode(&signed.signature).unwrap();
    assert_eq!(sig.len(), 64);
    let keys = signer.keys();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].key_id, kid);
    assert!(!keys[0].exclude_from_oidc_discovery);
    let info = kr.keys().into_iter().find(|k| k.kid == kid).unwrap();
    let PublicKey::P256 { x, y } = info.public_key else {
        panic!("not a P-256 key")
    };
    let point = [&[4u8][..], &x, &y].concat();
    assert_eq!(&keys[0].spki_der[keys[0].spki_der.len() - 65..], &point[..]);
    let input = format!("{}.{claims}", signed.header);
    aws_lc_rs::signature::UnparsedPublicKey::new(
        &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED,
        &point,
    )
    .verify(input.as_bytes(), &sig)
    .expect("the signature verifies under the listed key");
    // A service-account token is no workload identity: verify refuses its key.
    let token = format!("{input}.{}", signed.signature);
    let verifier = crate::verify::Verifier::builder(
        kr.clone(),
        std::sync::Arc::new(crate::state::MemoryStore::new()),
        crate::verify::Audience::new("https://kubernetes.default.svc").unwrap(),
    )
    .build();
    let err = verifier
        .verify(&token, NOW)
        .expect_err("a kubernetes key's token verified as a workload identity");
    assert!(err.to_string().contains("kubernetes key"), "{err}");
}

#[test]
fn refuses_claims_it_must_not_sign() {
    let kr = keyring(3600);
    let signer = ServiceAccountSigner::new(&kr, ISSUER, Algorithm::Es256).unwrap();
    let mut other_issuer = apiserver_claims(NOW, NOW + 600);
    other_issuer["iss"] = "https://other.example".into();
    let mut no_exp = apiserver_claims(NOW, NOW + 600);
    no_exp.as_object_mut().unwrap().remove("exp");
    let mut no_iss = apiserver_claims(NOW, NOW + 600);
    no_iss.as_object_mut().unwrap().remove("iss");
    let mut float_exp = apiserver_claims(NOW, NOW + 600);
    float_exp["exp"] = serde_json::json!(1.5e9);
    let cases: Vec<(String, &str)> = vec![
        ("not base64!".into(), "not base64url"),
        (URL_SAFE_NO_PAD.encode(b"{not json"), "not JSON"),
        (URL_SAFE_NO_PAD.encode(b"[1,2]"), "not an object"),
        // An unasked claim whose string is not UTF-8 (serde reads past it).
        (
            URL_SAFE_NO_PAD.encode(
                [
                    format!(r#"{{"iss":"{ISSUER}","exp":{},"x":""#, NOW + 60).as_bytes(),
                    b"\x8c\"}",
                ]
                .concat(),
            ),
            "not UTF-8",
        ),
        (URL_SAFE_NO_PAD.encode(b" [\"iss\""), "not JSON"),
        (
            URL_SAFE_NO_PAD.encode(format!(
                r#"{{"iss":"{ISSUER}","iss":"https://other","exp":1}}"#
            )),
            "duplicate field",
        ),
        (b64(&other_issuer), "not this signer's issuer"),
        (b64(&no_iss), "no iss"),
        (b64(&no_exp), "no exp"),
        (b64(&float_exp), "exp is not an integer"),
        (
            b64(&apiserver_claims(NOW, NOW + 3601)),
            "longer than the keyring's LongestTTL of 3600 s",
        ),
        (b64(&apiserver_claims(NOW, NOW)), "is not after iat"),
        ("A".repeat(MAX_CLAIMS_CHARS + 1), "more than the"),
    ];
    for (claims, expected) in cases {
        let e = signer.sign(&claims, NOW).expect_err(expected);
        let message = problem(&e);
        assert!(message.contains(expected), "{expected:?} not in {message}");
    }
    // Padding is refused: the segment is exactly the JWT's.
    let padded = base64::engine::general_purpose::URL_SAFE.encode(b"{\"a\":1}");
    assert!(padded.ends_with('='));
    problem(&signer.sign(&padded, NOW).unwrap_err());
    // Without iat the lifetime counts from now.
    let mut no_iat = apiserver_claims(NOW, NOW + 3601);
    no_iat.as_object_mut().unwrap().remove("iat");
    signer.sign(&b64(&no_iat), NOW + 1).unwrap();
    problem(&signer.sign(&b64(&no_iat), NOW).unwrap_err());
}

#[test]
fn what_it_needs_before_it_serves() {
    // No kubernetes key: NoActiveKey, naming the command.
    let kr = Keyring::new();
    kr.set_policy(Some(KeyringPolicy::new(Some(Duration::from_secs(3600)))))
        .unwrap();
    kr.rotate_purpose(KeyPurpose::Bearer, Algorithm::Es256, NOW)
        .unwrap();
    let signer = ServiceAccountSigner::new(&kr, ISSUER, Algorithm::Es256).unwrap();
    let e = signer.check_ready().unwrap_err();
    assert_eq!(e.code(), crate::error::ResultCode::NoActiveKey, "{e}");
    assert!(
        e.to_string()
            .contains("wid keyring rotate --purpose kubernetes --alg ES256"),
        "{e}"
    );
    // A bearer key never signs for the cluster.
    let e = signer
        .sign(&b64(&apiserver_claims(NOW, NOW + 600)), NOW)
        .unwrap_err();
    assert_eq!(e.code(), crate::error::ResultCode::NoActiveKey, "{e}");
    assert!(signer.keys().is_empty());
    // A LongestTTL under 600 s, or none.
    for policy in [Some(599), None] {
        let kr = Keyring::new();
        kr.set_policy(policy.map(|s| KeyringPolicy::new(Some(Duration::from_secs(s)))))
            .unwrap();
        kr.rotate_purpose(KeyPurpose::Kubernetes, Algorithm::Rs256, NOW)
            .unwrap();
        let signer = ServiceAccountSigner::new(&kr, ISSUER, Algorithm::Rs256).unwrap();
        let message = problem(&signer.check_ready().unwrap_err());
        assert!(message.contains("600 s"), "{message}");
    }
    // EdDSA is no algorithm of the purpose, for a signer or a key.
    problem(&ServiceAccountSigner::new(&kr, ISSUER, Algorithm::EdDsa).unwrap_err());
    let message = problem(
        &kr.rotate_purpose(KeyPurpose::Kubernetes, Algorithm::EdDsa, NOW)
            .unwrap_err(),
    );
    assert!(message.contains("ES256 or RS256"), "{message}");
    problem(
        &kr.prepublish_purpose(KeyPurpose::Kubernetes, Algorithm::EdDsa, NOW, NOW + 60)
            .unwrap_err(),
    );
    problem(&ServiceAccountSigner::new(&kr, " ", Algorithm::Es256).unwrap_err());
}

#[test]
fn fetch_keys_follows_a_rotation_and_the_timestamp_its_records() {
    let kr = keyring(3600);
    let signer = ServiceAccountSigner::new(&kr, ISSUER, Algorithm::Es256).unwrap();
    let first = kr
        .active_id_for_purpose(KeyPurpose::Kubernetes, Algorithm::Es256)
        .unwrap();
    assert_eq!(signer.data_timestamp(), NOW - 100);
    // A prepublished successor is listed before it signs.
    let next = kr
        .prepublish_purpose(KeyPurpose::Kubernetes, Algorithm::Es256, NOW, NOW + 30)
        .unwrap();
    let listed: Vec<KeyId> = signer.keys().into_iter().map(|k| k.key_id).collect();
    assert!(
        listed.contains(&first) && listed.contains(&next),
        "{listed:?}"
    );
    assert_eq!(signer.data_timestamp(), NOW + 30);
    assert_eq!(
        signer
            .sign(&b64(&apiserver_claims(NOW, NOW + 60)), NOW)
            .unwrap()
            .kid,
        first
    );
    // Promoted: it signs, and the retired key still verifies its tokens.
    kr.promote_due(NOW + 30);
    assert_eq!(
        signer
            .sign(&b64(&apiserver_claims(NOW + 30, NOW + 90)), NOW + 30)
            .unwrap()
            .kid,
        next
    );
    let keys = signer.keys();
    assert_eq!(keys.len(), 2);
    assert!(keys.iter().all(|k| !k.exclude_from_oidc_discovery));
    // Deprecated: no longer listed.
    kr.deprecate(first.as_str(), NOW + 4000).unwrap();
    let listed: Vec<KeyId> = signer.keys().into_iter().map(|k| k.key_id).collect();
    assert_eq!(listed, vec![next.clone()]);
    assert!(
        kr.keys()
            .iter()
            .any(|k| k.kid == first && k.state == KeyState::Deprecated)
    );
    // Bearer and WIT keys are never listed.
    kr.rotate_purpose(KeyPurpose::Bearer, Algorithm::Es256, NOW)
        .unwrap();
    kr.rotate_purpose(KeyPurpose::Wit, Algorithm::Es256, NOW)
        .unwrap();
    assert_eq!(signer.keys().len(), 1);
    // The hint: half the lead time (30 s by default), within 1..=60 s.
    assert_eq!(signer.refresh_hint(), Duration::from_secs(15));
}

#[test]
fn imported_keys_verify_but_are_left_out_of_discovery() {
    let old = keyring(3600);
    let jwks = old.jwks_for(KeyPurpose::Kubernetes).to_json();
    let kr = keyring(3600);
    kr.import_jwks_as(&jwks, KeyPurpose::Kubernetes).unwrap();
    let signer = ServiceAccountSigner::new(&kr, ISSUER, Algorithm::Es256).unwrap();
    let keys = signer.keys();
    assert_eq!(keys.len(), 2);
    let imported = old
        .active_id_for_purpose(KeyPurpose::Kubernetes, Algorithm::Es256)
        .unwrap();
    for k in keys {
        assert_eq!(k.exclude_from_oidc_discovery, k.key_id == imported, "{k:?}");
    }
    assert_ne!(
        signer
            .sign(&b64(&apiserver_claims(NOW, NOW + 60)), NOW)
            .unwrap()
            .kid,
        imported
    );
}
