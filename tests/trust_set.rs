//! A trust set (issue 44 item 1): one verifier for several issuers, each an
//! `iss` or a SPIFFE trust domain with its own keys and rules. Tokens are
//! routed before any key is looked up, so no issuer's key ever verifies a
//! token that claims another issuer: the same kid, the same key material,
//! `iss` swapped, trust domain swapped, `iss` and trust domain disagreeing.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Value, json};
use workload_identity::model::{IssueRequest, NodeIdentityRequest};
use workload_identity::{
    Algorithm, Audience, Issuer, IssuerId, JwsAlgorithm, KeyDerivation, KeyId, KeyMaterial,
    KeyState, Keyring, MemoryStore, NodeTokens, OwnedKeyring, ResultCode, RootKey, TrustSet,
    TrustedIssuer,
};

const NOW: i64 = 1_700_000_000;
const EAST: &str = "https://east.example";
const WEST: &str = "https://west.example";
const SPIRE_TD: &str = "spire.example";
const OTHER_TD: &str = "other.example";

fn keyring(kid: &str, material: u8) -> Keyring {
    Keyring::from_keys([RootKey::new(
        KeyId::new(kid).unwrap(),
        KeyMaterial::from_slice(&[material; 32]).unwrap(),
        KeyDerivation::HkdfV1,
        KeyState::Active,
        NOW - 100,
    )])
    .unwrap()
}

fn aud(a: &str) -> Audience {
    Audience::new(a).unwrap()
}

fn store() -> Arc<MemoryStore> {
    let s = Arc::new(MemoryStore::new());
    s.upsert(&common::allocation());
    s
}

fn req() -> IssueRequest {
    common::issue_request_task()
}

/// A Nomad token signed with `kr`'s active key, carrying `iss`.
fn nomad_token(kr: &Keyring, iss: &str) -> String {
    Issuer::new(kr.clone())
        .issuer(iss)
        .issue(&req(), NOW)
        .unwrap()
        .token
}

/// The committed P-384 key (tests/vectors/p384.pk8): a SPIRE-like
/// JWT-SVID signer, and its public JWK with `alg` ES384.
struct Es384 {
    pair: EcdsaKeyPair,
}

impl Es384 {
    fn committed() -> Es384 {
        let pk8 = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/p384.pk8"
        ))
        .unwrap();
        Es384 {
            pair: EcdsaKeyPair::from_private_key_der(&ECDSA_P384_SHA384_FIXED_SIGNING, &pk8)
                .unwrap(),
        }
    }

    fn keyring(&self, kid: &str) -> Keyring {
        let point = self.pair.public_key().as_ref();
        let jwks = json!({"keys": [{
            "kty": "EC", "crv": "P-384", "alg": "ES384", "kid": kid,
            "x": B64.encode(&point[1..49]), "y": B64.encode(&point[49..]),
        }]});
        Keyring::from_jwks(&jwks.to_string()).unwrap().0
    }

    fn token(&self, kid: &str, claims: &Value) -> String {
        self.token_typed(kid, "JWT", claims)
    }

    fn token_typed(&self, kid: &str, typ: &str, claims: &Value) -> String {
        let header = json!({"alg": "ES384", "kid": kid, "typ": typ});
        let input = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(claims.to_string())
        );
        let sig = self
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .unwrap();
        format!("{input}.{}", B64.encode(sig.as_ref()))
    }
}

/// A JWT-SVID's claims (no Nomad claims at all).
fn svid(sub: &str) -> Value {
    json!({"sub": sub, "aud": ["svc"], "exp": NOW + 300, "iat": NOW})
}

/// Two Nomad issuers (same kid `k1`, different material), a SPIRE trust
/// domain (ES384, foreign), and another trust domain (same kid `spire-1`,
/// another P-384 key made here).
struct World {
    east: Keyring,
    west: Keyring,
    spire: Es384,
    other_pair: EcdsaKeyPair,
    trust: TrustSet,
}

fn world_with(cache: bool) -> World {
    let east = keyring("k1", 1);
    let west = keyring("k1", 2);
    let spire = Es384::committed();
    let rng = SystemRandom::new();
    let other_pk8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, &rng).unwrap();
    let other = Es384 {
        pair: EcdsaKeyPair::from_pkcs8(&ECDSA_P384_SHA384_FIXED_SIGNING, other_pk8.as_ref())
            .unwrap(),
    };
    let s = store();
    let mut b = TrustSet::builder()
        .key_wait(Duration::ZERO)
        .issuer(TrustedIssuer::nomad(
            IssuerId::iss(EAST).unwrap(),
            east.clone(),
            s.clone(),
            aud("vault.io"),
        ))
        .issuer(TrustedIssuer::nomad(
            IssuerId::iss(WEST).unwrap(),
            west.clone(),
            s,
            aud("vault.io"),
        ))
        .issuer(TrustedIssuer::foreign(
            IssuerId::trust_domain(SPIRE_TD).unwrap(),
            spire.keyring("spire-1"),
            aud("svc"),
        ))
        .issuer(TrustedIssuer::foreign(
            IssuerId::trust_domain(OTHER_TD).unwrap(),
            OwnedKeyring::new(other.keyring("spire-1"), "kept alive"),
            aud("svc"),
        ));
    if cache {
        b = b.cache(64);
    }
    World {
        east,
        west,
        spire,
        other_pair: other.pair,
        trust: b.build().unwrap(),
    }
}

fn world() -> World {
    world_with(false)
}

fn code(r: &Result<impl std::fmt::Debug, workload_identity::Error>) -> ResultCode {
    r.as_ref().err().map_or(ResultCode::Ok, |e| e.code())
}

#[test]
fn tokens_route_to_the_issuer_they_claim_and_name_it() {
    let w = world();
    let e = w.trust.verify(&nomad_token(&w.east, EAST), NOW).unwrap();
    assert_eq!(e.issuer, EAST);
    assert_eq!(e.identity.claims.allocation_id, common::ALLOC_ID);
    let x = w.trust.verify(&nomad_token(&w.west, WEST), NOW).unwrap();
    assert_eq!(x.issuer, WEST);
    let s = w
        .trust
        .verify(
            &w.spire
                .token("spire-1", &svid("spiffe://spire.example/ns/prod/sa/web")),
            NOW,
        )
        .unwrap();
    assert_eq!(s.issuer, "spiffe://spire.example");
    assert_eq!(
        s.identity.claims.subject,
        "spiffe://spire.example/ns/prod/sa/web"
    );
    assert_eq!(s.identity.kid.as_str(), "spire-1");
    let stats = w.trust.stats();
    let accepted: Vec<u64> = stats.issuers.iter().map(|i| i.stats.accepted).collect();
    assert_eq!(accepted, [1, 1, 1, 0]);
    assert_eq!(
        stats.issuers[2].issuer,
        IssuerId::trust_domain(SPIRE_TD).unwrap()
    );
    assert_eq!(stats.unrouted, 0);
}

#[test]
fn a_key_of_one_issuer_never_verifies_a_token_claiming_another_same_kid() {
    let w = world();
    // West's key (kid k1) signs a token claiming east, and the reverse:
    // routed to the claimed issuer, whose k1 is other material.
    for (kr, claimed, decided) in [(&w.west, EAST, 0), (&w.east, WEST, 1)] {
        let forged = nomad_token(kr, claimed);
        let e = w.trust.verify(&forged, NOW).unwrap_err();
        assert_eq!(e.code(), ResultCode::BadSignature, "{claimed}: {e}");
        assert_eq!(w.trust.stats().issuers[decided].stats.rejected, 1);
    }
    // Trust domains swapped: the other domain's key (same kid spire-1)
    // signs a JWT-SVID of SPIRE's domain, and SPIRE's signs one of the other.
    let other = Es384 { pair: w.other_pair };
    let forged = other.token("spire-1", &svid("spiffe://spire.example/web"));
    assert_eq!(
        code(&w.trust.verify(&forged, NOW)),
        ResultCode::BadSignature
    );
    let forged = w
        .spire
        .token("spire-1", &svid("spiffe://other.example/web"));
    assert_eq!(
        code(&w.trust.verify(&forged, NOW)),
        ResultCode::BadSignature
    );
    // Each is accepted under its own domain.
    let own = other.token("spire-1", &svid("spiffe://other.example/web"));
    assert_eq!(
        w.trust.verify(&own, NOW).unwrap().issuer,
        "spiffe://other.example"
    );
}

#[test]
fn a_key_of_one_issuer_never_verifies_a_token_claiming_another_other_kid() {
    let east = keyring("east-1", 1);
    let west = keyring("west-1", 2);
    let s = store();
    let trust = TrustSet::builder()
        .key_wait(Duration::ZERO)
        .issuer(TrustedIssuer::nomad(
            IssuerId::iss(EAST).unwrap(),
            east.clone(),
            s.clone(),
            aud("vault.io"),
        ))
        .issuer(TrustedIssuer::nomad(
            IssuerId::iss(WEST).unwrap(),
            west.clone(),
            s,
            aud("vault.io"),
        ))
        .build()
        .unwrap();
    for (kr, claimed, kid) in [(&west, EAST, "west-1"), (&east, WEST, "east-1")] {
        let e = trust.verify(&nomad_token(kr, claimed), NOW).unwrap_err();
        assert_eq!(e.code(), ResultCode::UnknownKey, "{e}");
        assert!(e.to_string().contains(kid), "{e}");
    }
}

/// One key material under two issuers: a token is still judged by the rules
/// of the issuer it claims (here, their audiences differ), never by the
/// other's, though the other's key would verify the signature.
#[test]
fn the_same_key_material_under_two_issuers_keeps_each_issuers_rules() {
    let east = keyring("k1", 9);
    let west = keyring("k1", 9);
    let s = store();
    let trust = TrustSet::builder()
        .issuer(TrustedIssuer::nomad(
            IssuerId::iss(EAST).unwrap(),
            east.clone(),
            s.clone(),
            aud("vault.io"),
        ))
        .issuer(TrustedIssuer::nomad(
            IssuerId::iss(WEST).unwrap(),
            west.clone(),
            s,
            aud("west-only"),
        ))
        .build()
        .unwrap();
    let t = nomad_token(&west, EAST);
    assert_eq!(trust.verify(&t, NOW).unwrap().issuer, EAST);
    let t = nomad_token(&east, WEST);
    let e = trust.verify(&t, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::AudienceMismatch, "{e}");
    let stats = trust.stats();
    assert_eq!(
        (
            stats.issuers[0].stats.accepted,
            stats.issuers[1].stats.rejected
        ),
        (1, 1)
    );
}

#[test]
fn iss_and_trust_domain_naming_two_issuers_are_refused_before_any_key() {
    let w = world();
    // East's own key, a token claiming east by iss and SPIRE by its sub.
    let mut r = req();
    r.identity.ttl = workload_identity::model::GoDuration::from_secs(600);
    let claims =
        json!({"iss": EAST, "sub": "spiffe://spire.example/web", "aud": "svc", "exp": NOW + 60});
    let t = w.spire.token("spire-1", &claims);
    let e = w.trust.verify(&t, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::IssuerMismatch, "{e}");
    let msg = e.to_string();
    assert!(msg.contains(EAST) && msg.contains(SPIRE_TD), "{msg}");
    assert!(msg.contains("two different trusted issuers"), "{msg}");
    assert_eq!(w.trust.stats().unrouted, 1);
    assert!(
        w.trust
            .stats()
            .issuers
            .iter()
            .all(|i| i.stats.rejected == 0)
    );
}

#[test]
fn an_unknown_issuer_is_refused_naming_it_and_the_trusted_ones() {
    let w = world();
    let e = w
        .trust
        .verify(&nomad_token(&w.east, "https://evil.example"), NOW)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::IssuerMismatch);
    let msg = e.to_string();
    for want in ["https://evil.example", EAST, WEST, SPIRE_TD, OTHER_TD] {
        assert!(msg.contains(want), "{want}: {msg}");
    }
    // No iss at all, and a sub that is no SPIFFE ID.
    let t = Issuer::new(w.east.clone())
        .issue(&req(), NOW)
        .unwrap()
        .token;
    let e = w.trust.verify(&t, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::IssuerMismatch);
    assert!(e.to_string().contains("iss none"), "{e}");
    // A trust domain nobody trusts.
    let t = w.spire.token("spire-1", &svid("spiffe://evil.example/x"));
    let e = w.trust.verify(&t, NOW).unwrap_err();
    assert!(e.to_string().contains("\"evil.example\""), "{e}");
    // A long iss is truncated, never quoted whole.
    let long = format!("https://{}.example", "a".repeat(500));
    let e = w
        .trust
        .verify(&nomad_token(&w.east, &long), NOW)
        .unwrap_err();
    assert!(
        !e.to_string().contains(&long) && e.to_string().contains('…'),
        "{e}"
    );
    assert_eq!(w.trust.stats().unrouted, 4);
}

#[test]
fn routing_uses_the_verifiers_parser_and_limits() {
    let w = world();
    let t = nomad_token(&w.east, EAST);
    // Non-canonical base64 in the payload: malformed, before any issuer.
    let bad = t.replacen('.', ".=", 1);
    assert_eq!(code(&w.trust.verify(&bad, NOW)), ResultCode::MalformedToken);
    let long = "a".repeat(9000);
    assert_eq!(
        code(&w.trust.verify(&long, NOW)),
        ResultCode::MalformedToken
    );
    // Duplicate claims are refused when routing, as when verifying.
    let dup = w.spire.token(
        "spire-1",
        &json!({"sub": "spiffe://spire.example/a", "aud": "svc", "exp": NOW + 60}),
    );
    let (h, rest) = dup.split_once('.').unwrap();
    let sig = rest.split_once('.').unwrap().1;
    let payload = B64.encode(
        r#"{"sub":"spiffe://spire.example/a","sub":"spiffe://other.example/a","aud":"svc","exp":1700000060}"#,
    );
    let e = w
        .trust
        .verify(&format!("{h}.{payload}.{sig}"), NOW)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::MalformedToken, "{e}");
    assert!(e.to_string().contains("duplicate"), "{e}");
    assert_eq!(w.trust.stats().unrouted, 3);
}

#[test]
fn jwt_svid_rules_hold_for_a_trust_domain_issuer() {
    let w = world();
    // The SPIFFE JWT-SVID spec allows typ JOSE beside JWT: both verify, and
    // another typ is refused.
    for typ in ["JWT", "JOSE"] {
        let t = w
            .spire
            .token_typed("spire-1", typ, &svid("spiffe://spire.example/a"));
        w.trust
            .verify(&t, NOW)
            .unwrap_or_else(|e| panic!("typ {typ}: {e}"));
    }
    let t = w
        .spire
        .token_typed("spire-1", "JOSE+JSON", &svid("spiffe://spire.example/a"));
    let e = w.trust.verify(&t, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::MalformedToken, "{e}");
    assert!(e.to_string().contains("\"JOSE\""), "{e}");
    // exp is required.
    let t = w.spire.token(
        "spire-1",
        &json!({"sub": "spiffe://spire.example/a", "aud": "svc"}),
    );
    let e = w.trust.verify(&t, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::MalformedToken);
    assert!(e.to_string().contains("exp"), "{e}");
    // A sub that is not a valid SPIFFE ID (a `..` segment).
    let t = w
        .spire
        .token("spire-1", &svid("spiffe://spire.example/a/../b"));
    let e = w.trust.verify(&t, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::MalformedToken, "{e}");
    // The audience is the issuer's own.
    let t = w.spire.token(
        "spire-1",
        &json!({"sub": "spiffe://spire.example/a", "aud": "vault.io", "exp": NOW + 60}),
    );
    assert_eq!(code(&w.trust.verify(&t, NOW)), ResultCode::AudienceMismatch);
    // EdDSA never passes for a trust domain, even from its own keyring.
    let ed = keyring("ed-1", 5);
    let trust = TrustSet::builder()
        .issuer(TrustedIssuer::foreign(
            IssuerId::trust_domain(SPIRE_TD).unwrap(),
            ed.clone(),
            aud("svc"),
        ))
        .build()
        .unwrap();
    let input = format!(
        "{}.{}",
        B64.encode(r#"{"alg":"EdDSA","kid":"ed-1","typ":"JWT"}"#),
        B64.encode(svid("spiffe://spire.example/a").to_string())
    );
    let sig = ed.active().unwrap().sign(input.as_bytes()).unwrap();
    let t = format!("{input}.{}", B64.encode(sig));
    let e = trust.verify(&t, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::UnsupportedAlgorithm, "{e}");
    assert!(e.to_string().contains("RS, ES or PS"), "{e}");
}

#[test]
fn a_trust_domain_issuer_may_require_an_iss_and_is_routed_by_it() {
    let spire = Es384::committed();
    let trust = TrustSet::builder()
        .issuer(
            TrustedIssuer::foreign(
                IssuerId::trust_domain(SPIRE_TD).unwrap(),
                spire.keyring("s1"),
                aud("svc"),
            )
            .require_iss("https://oidc.spire.example"),
        )
        .build()
        .unwrap();
    let mut c = svid("spiffe://spire.example/a");
    c["iss"] = json!("https://oidc.spire.example");
    assert_eq!(
        trust.verify(&spire.token("s1", &c), NOW).unwrap().issuer,
        "spiffe://spire.example"
    );
    // Its iss, but a sub outside its domain.
    c["sub"] = json!("spiffe://elsewhere.example/a");
    let e = trust.verify(&spire.token("s1", &c), NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::IssuerMismatch, "{e}");
    // Its domain, but another iss.
    c["sub"] = json!("spiffe://spire.example/a");
    c["iss"] = json!("https://someone.else");
    let e = trust.verify(&spire.token("s1", &c), NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::IssuerMismatch, "{e}");
}

#[test]
fn a_foreign_iss_issuer_needs_no_store_and_no_nomad_claims_but_a_sub() {
    let spire = Es384::committed();
    let k8s = "https://kubernetes.default.svc";
    let trust = TrustSet::builder()
        .issuer(TrustedIssuer::foreign(
            IssuerId::iss(k8s).unwrap(),
            spire.keyring("k8s-1"),
            aud("svc"),
        ))
        .build()
        .unwrap();
    let c = json!({"iss": k8s, "sub": "system:serviceaccount:default:web", "aud": ["svc"],
                   "exp": NOW + 60, "kubernetes.io": {"namespace": "default"}});
    let v = trust.verify(&spire.token("k8s-1", &c), NOW).unwrap();
    assert_eq!(
        v.identity.claims.subject,
        "system:serviceaccount:default:web"
    );
    assert_eq!(v.identity.claims.allocation_id, "");
    let c = json!({"iss": k8s, "aud": "svc", "exp": NOW + 60});
    let e = trust.verify(&spire.token("k8s-1", &c), NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::MalformedToken);
    assert!(e.to_string().contains("sub"), "{e}");
}

#[test]
fn nomad_issuers_check_allocations_and_node_tokens_in_their_store() {
    let east = keyring("k1", 1);
    let west = keyring("k2", 2);
    let s = store();
    s.upsert_node(&common::node_identity_request().node);
    let trust = TrustSet::builder()
        .issuer(
            TrustedIssuer::nomad(
                IssuerId::iss(EAST).unwrap(),
                east.clone(),
                s.clone(),
                aud("vault.io"),
            )
            .node_tokens(NodeTokens::Accept),
        )
        .issuer(TrustedIssuer::nomad(
            IssuerId::iss(WEST).unwrap(),
            west.clone(),
            s.clone(),
            aud("consul.io"),
        ))
        .build()
        .unwrap();
    let node = |kr: &Keyring, iss: &str| {
        let mut r: NodeIdentityRequest = common::node_identity_request();
        r.audience = vec!["vault.io".into(), "consul.io".into()];
        Issuer::new(kr.clone())
            .issuer(iss)
            .issue_node(&r, NOW)
            .unwrap()
            .token
    };
    let v = trust.verify(&node(&east, EAST), NOW).unwrap();
    assert_eq!(v.identity.claims.node.unwrap().node_id, common::NODE_ID);
    let e = trust.verify(&node(&west, WEST), NOW).unwrap_err();
    assert_eq!(
        e.code(),
        ResultCode::TokenKindRefused,
        "west refuses node tokens: {e}"
    );
    // The allocation stops: both issuers' tokens are refused.
    let t_east = nomad_token(&east, EAST);
    let t_west = nomad_token(&west, WEST);
    assert!(trust.verify(&t_east, NOW).is_ok() && trust.verify(&t_west, NOW).is_ok());
    let mut a = common::allocation();
    a.client_status = "complete".into();
    s.upsert(&a);
    assert_eq!(
        code(&trust.verify(&t_east, NOW)),
        ResultCode::AllocationTerminal
    );
    assert_eq!(
        code(&trust.verify(&t_west, NOW)),
        ResultCode::AllocationTerminal
    );
}

#[test]
fn allowed_algorithms_are_per_issuer() {
    let kr = keyring("k1", 1);
    kr.rotate_alg(Algorithm::Es256, NOW).unwrap();
    let trust = TrustSet::builder()
        .issuer(
            TrustedIssuer::nomad(
                IssuerId::iss(EAST).unwrap(),
                kr.clone(),
                store(),
                aud("vault.io"),
            )
            .algorithms(&[JwsAlgorithm::Es256]),
        )
        .build()
        .unwrap();
    let ed = nomad_token(&kr, EAST);
    let e = trust.verify(&ed, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::UnsupportedAlgorithm, "{e}");
    assert!(e.to_string().contains("\"ES256\""), "{e}");
    let es = Issuer::new(kr)
        .issuer(EAST)
        .algorithm(Algorithm::Es256)
        .issue(&req(), NOW)
        .unwrap()
        .token;
    assert_eq!(trust.verify(&es, NOW).unwrap().issuer, EAST);
}

#[test]
fn building_refuses_ambiguous_or_empty_sets() {
    let kr = keyring("k1", 1);
    assert!(TrustSet::builder().build().is_err());
    let e = TrustSet::builder()
        .issuer(TrustedIssuer::foreign(
            IssuerId::iss(EAST).unwrap(),
            kr.clone(),
            aud("a"),
        ))
        .issuer(TrustedIssuer::foreign(
            IssuerId::iss(EAST).unwrap(),
            kr.clone(),
            aud("b"),
        ))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("two trusted issuers"), "{e}");
    let e = TrustSet::builder()
        .issuer(TrustedIssuer::foreign(
            IssuerId::iss(EAST).unwrap(),
            kr.clone(),
            aud("a"),
        ))
        .issuer(
            TrustedIssuer::foreign(
                IssuerId::trust_domain(SPIRE_TD).unwrap(),
                kr.clone(),
                aud("b"),
            )
            .require_iss(EAST),
        )
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("two trusted issuers"), "{e}");
    let e = TrustSet::builder()
        .issuer(
            TrustedIssuer::foreign(IssuerId::trust_domain(SPIRE_TD).unwrap(), kr, aud("b"))
                .algorithms(&[JwsAlgorithm::EdDsa]),
        )
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("no algorithm"), "{e}");
    assert!(IssuerId::trust_domain("Upper.Example").is_err());
    assert!(IssuerId::iss("").is_err());
    // Made directly, the same values are refused when the set is built.
    for id in [
        IssuerId::Iss(String::new()),
        IssuerId::TrustDomain("Upper.Example".into()),
    ] {
        let issuer = TrustedIssuer::foreign(id, keyring("k1", 1), aud("a"));
        assert!(TrustSet::builder().issuer(issuer).build().is_err());
    }
    fn shared<T: Send + Sync + Clone>() {}
    shared::<TrustSet>();
}

#[test]
fn explain_names_the_chosen_issuer() {
    let w = world();
    let x = w.trust.explain(&nomad_token(&w.west, WEST), NOW);
    assert!(x.result.is_ok(), "{:?}", x.steps);
    assert_eq!(x.issuer.as_deref(), Some(WEST));
    let names: Vec<&str> = x.steps.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "length",
            "structure",
            "route",
            "header",
            "key",
            "algorithm",
            "signature",
            "claims",
            "times",
            "audience",
            "issuer",
            "allocation"
        ]
    );
    assert!(
        x.steps[2].detail.contains(WEST) && x.steps[2].detail.contains("iss"),
        "{:?}",
        x.steps[2]
    );
    assert!(
        x.to_json().contains(r#""issuer":"https://west.example""#),
        "{}",
        x.to_json()
    );
    // A forged token: routed to east, refused at the signature, east named.
    let x = w.trust.explain(&nomad_token(&w.west, EAST), NOW);
    assert_eq!(x.issuer.as_deref(), Some(EAST));
    assert_eq!(x.failed_step().unwrap().name, "signature");
    // A JWT-SVID: by trust domain, no allocation step.
    let x = w.trust.explain(
        &w.spire.token("spire-1", &svid("spiffe://spire.example/a")),
        NOW,
    );
    assert_eq!(x.issuer.as_deref(), Some("spiffe://spire.example"));
    assert!(
        x.steps[2].detail.contains("trust domain"),
        "{:?}",
        x.steps[2]
    );
    assert_eq!(x.steps.last().unwrap().name, "issuer");
    // Unknown: no issuer chosen.
    let x = w
        .trust
        .explain(&nomad_token(&w.east, "https://evil.example"), NOW);
    assert_eq!(x.issuer, None);
    assert_eq!(x.failed_step().unwrap().name, "route");
    assert_eq!(x.result.unwrap_err().code(), ResultCode::IssuerMismatch);
    // Explaining counts nothing.
    assert!(
        w.trust
            .stats()
            .issuers
            .iter()
            .all(|i| i.stats.accepted + i.stats.rejected == 0)
    );
}

#[test]
fn a_batch_mixing_issuers_accepts_exactly_what_single_verification_does() {
    for cache in [false, true] {
        let single = world_with(cache);
        let batch = world_with(cache);
        // The same keys in both worlds except the random "other" domain.
        let tokens = vec![
            nomad_token(&single.east, EAST),
            nomad_token(&single.west, WEST),
            single
                .spire
                .token("spire-1", &svid("spiffe://spire.example/a")),
            nomad_token(&single.west, EAST),
            nomad_token(&single.east, "https://evil.example"),
            single
                .spire
                .token("spire-1", &svid("spiffe://other.example/a")),
            nomad_token(&single.east, EAST).replacen('.', ".=", 1),
            {
                let t = nomad_token(&single.west, WEST);
                let (rest, sig) = t.rsplit_once('.').unwrap();
                let mut s = B64.decode(sig).unwrap();
                s[0] ^= 1;
                format!("{rest}.{}", B64.encode(s))
            },
            nomad_token(&single.west, WEST),
        ];
        let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
        let one: Vec<ResultCode> = refs
            .iter()
            .map(|t| code(&single.trust.verify(t, NOW)))
            .collect();
        let many: Vec<ResultCode> = batch
            .trust
            .verify_batch(&refs, NOW)
            .iter()
            .map(code)
            .collect();
        assert_eq!(one, many, "cache {cache}");
        assert_eq!(
            many,
            [
                ResultCode::Ok,
                ResultCode::Ok,
                ResultCode::Ok,
                ResultCode::BadSignature,
                ResultCode::IssuerMismatch,
                ResultCode::BadSignature,
                ResultCode::MalformedToken,
                ResultCode::BadSignature,
                ResultCode::Ok,
            ]
        );
        let names: Vec<String> = batch
            .trust
            .verify_batch(&refs[..3], NOW)
            .into_iter()
            .map(|r| r.unwrap().issuer)
            .collect();
        assert_eq!(names, [EAST, WEST, "spiffe://spire.example"]);
        let (a, b) = (single.trust.stats(), batch.trust.stats());
        let counts = |s: &workload_identity::TrustSetStats| -> Vec<(u64, u64)> {
            s.issuers
                .iter()
                .map(|i| (i.stats.accepted, i.stats.rejected))
                .collect()
        };
        assert_eq!(counts(&a), [(1, 1), (2, 1), (1, 0), (0, 1)]);
        assert_eq!(counts(&b), [(2, 1), (3, 1), (2, 0), (0, 1)]);
        assert_eq!((a.unrouted, b.unrouted), (2, 2));
    }
}

#[test]
fn the_cache_serves_each_issuer_and_never_another() {
    let w = world_with(true);
    let t = nomad_token(&w.west, WEST);
    for _ in 0..3 {
        assert_eq!(w.trust.verify(&t, NOW).unwrap().issuer, WEST);
    }
    let stats = w.trust.stats();
    assert_eq!(stats.issuers[1].stats.cache_hits, 2);
    assert_eq!(stats.issuers[1].stats.cache_entries, 1);
    assert_eq!(stats.issuers[0].stats.cache_entries, 0);
    // A forged token is never cached, however often it comes.
    let forged = nomad_token(&w.west, EAST);
    for _ in 0..2 {
        assert_eq!(
            code(&w.trust.verify(&forged, NOW)),
            ResultCode::BadSignature
        );
    }
    assert_eq!(w.trust.stats().issuers[0].stats.cache_hits, 0);
    // A hit still checks time.
    assert_eq!(code(&w.trust.verify(&t, NOW + 7200)), ResultCode::Expired);
}

/// The issuers share one cache, but each keeps its own bound: a flood of
/// one issuer's tokens evicts only that issuer's entries.
#[test]
fn one_issuers_flood_never_evicts_another_issuers_entries() {
    let w = world_with(true);
    let quiet = nomad_token(&w.west, WEST);
    w.trust.verify(&quiet, NOW).unwrap();
    let issuer = Issuer::new(w.east.clone()).issuer(EAST);
    for _ in 0..200 {
        let t = issuer.issue(&req(), NOW).unwrap().token;
        assert_eq!(w.trust.verify(&t, NOW).unwrap().issuer, EAST);
    }
    let stats = w.trust.stats();
    assert_eq!(
        stats.issuers[0].stats.cache_entries, 64,
        "east at its bound"
    );
    assert_eq!(stats.issuers[1].stats.cache_entries, 1, "west's entry kept");
    w.trust.verify(&quiet, NOW).unwrap();
    assert_eq!(w.trust.stats().issuers[1].stats.cache_hits, 1);
}

#[test]
fn an_unknown_kid_is_waited_for_only_in_the_chosen_issuers_keyring() {
    let east = keyring("k1", 1);
    let west = keyring("k2", 2);
    let trust = TrustSet::builder()
        .key_wait(Duration::from_millis(300))
        .issuer(TrustedIssuer::nomad(
            IssuerId::iss(EAST).unwrap(),
            east.clone(),
            store(),
            aud("vault.io"),
        ))
        .issuer(TrustedIssuer::nomad(
            IssuerId::iss(WEST).unwrap(),
            west.clone(),
            store(),
            aud("vault.io"),
        ))
        .build()
        .unwrap();
    // West's k2 is in west's keyring, never looked at for a token claiming east.
    let started = Instant::now();
    let e = trust.verify(&nomad_token(&west, EAST), NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::UnknownKey);
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(trust.stats().issuers[0].stats.key_waits, 1);
    assert_eq!(trust.stats().issuers[1].stats.key_waits, 0);
    // An unknown issuer is refused without any wait.
    let started = Instant::now();
    let _ = trust
        .verify(&nomad_token(&west, "https://nobody"), NOW)
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(200));
}

/// The verifier rules the trust set is made of, on a plain `Verifier`.
#[test]
fn a_plain_verifier_takes_foreign_tokens_spiffe_rules_and_allowed_algorithms() {
    let spire = Es384::committed();
    let v = workload_identity::Verifier::foreign_builder(spire.keyring("s1"), aud("svc"))
        .spiffe_trust_domain(SPIRE_TD)
        .unwrap()
        .build();
    let t = spire.token("s1", &svid("spiffe://spire.example/a"));
    assert_eq!(
        v.verify(&t, NOW).unwrap().claims.subject,
        "spiffe://spire.example/a"
    );
    let x = v.explain(&t, NOW);
    assert!(x.result.is_ok());
    assert_eq!(x.steps.last().unwrap().name, "issuer", "no allocation step");
    assert_eq!(x.issuer, None);
    let e = v
        .verify(&spire.token("s1", &svid("spiffe://other.example/a")), NOW)
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::IssuerMismatch, "{e}");
    assert!(
        workload_identity::Verifier::foreign_builder(Keyring::new(), aud("svc"))
            .spiffe_trust_domain("spiffe://x")
            .is_err()
    );
    // Allowed algorithms are checked before any key is looked up: a
    // disallowed alg with an unknown kid is refused at once, never waited for.
    let v = workload_identity::Verifier::foreign_builder(Keyring::new(), aud("svc"))
        .allowed_algorithms(&[JwsAlgorithm::Rs256])
        .key_wait(Duration::from_secs(5))
        .build();
    let started = Instant::now();
    let e = v.verify(&t, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::UnsupportedAlgorithm, "{e}");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(v.stats().key_waits, 0);
}
