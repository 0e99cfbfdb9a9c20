//! Trust across issuers, end to end (issue 44's check): one `TrustSet`
//! verifies the tokens of two `wid serve` issuers of different trust domains
//! and a JWT-SVID that PyJWT signs with ES384, and refuses every token that
//! claims one issuer while signed by another's key:
//!
//! * issuer A, trust domain `a.example`: JWT-SVIDs of one `wid serve`, its
//!   keys followed from its JWKS (`RemoteJwks`);
//! * issuer B, trust domain `b.example`: JWT-SVIDs of another `wid serve`,
//!   its keys followed from its bundle endpoint (`SpiffeBundleSource`:
//!   federation);
//! * issuer C, trust domain `spire.example`: a foreign issuer (no Nomad
//!   claims, no allocation store), an ES384 key whose JWKS PyJWT writes,
//!   with the same `kid` as A's ES256 key;
//! * issuer D, `iss` `https://a.example`: Nomad identity tokens signed by
//!   A's keys (one key source under two issuers), routed by `iss`.
//!
//! Needs python3 with PyJWT and cryptography (`.ci/run` installs them).
#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../../tests/serve_support/mod.rs"]
mod serve_support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use serve_support::{Served, wid_ok};
use workload_identity::profile::SpiffeProfile;
use workload_identity::{
    Algorithm, Audience, Issuer, IssuerId, Keyring, MemoryStore, RemoteJwks, ResultCode,
    SpiffeBundleSource, TrustSet, TrustedIssuer,
};

const T0: i64 = 1_700_000_000;
const TD_A: &str = "a.example";
const ISS_D: &str = "https://a.example";
const TD_B: &str = "b.example";
const TD_C: &str = "spire.example";

fn keystore(dir: &Path, name: &str, algs: &[&str]) -> String {
    let ks = dir.join(name).display().to_string();
    let mut args = vec!["keyring", "init", "--keystore", &ks];
    for a in algs {
        args.extend_from_slice(&["--alg", a]);
    }
    let now = T0.to_string();
    args.extend_from_slice(&["--now", &now]);
    wid_ok(&args);
    ks
}

fn serve(ks: &str) -> Served {
    Served::start(&["--keystore", ks, "--listen", "127.0.0.1:0"])
}

/// PyJWT makes an ES384 key with `kid`, and signs with it a JWT-SVID for
/// each of `claims`: returns the public JWKS and the tokens.
fn pyjwt_es384(kid: &str, claims: &[Value]) -> (String, Vec<String>) {
    let script = r#"
import json, sys, jwt
from cryptography.hazmat.primitives.asymmetric import ec
kid, claims = sys.argv[1], json.loads(sys.argv[2])
key = ec.generate_private_key(ec.SECP384R1())
jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
jwk.update({"kid": kid, "alg": "ES384", "use": "jwt-svid"})
tokens = [jwt.encode(c, key, algorithm="ES384", headers={"kid": kid, "typ": "JWT"}) for c in claims]
print(json.dumps({"jwks": {"keys": [jwk]}, "tokens": tokens}))
"#;
    let out = Command::new("python3")
        .args(["-c", script, kid, &Value::from(claims.to_vec()).to_string()])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "PyJWT (pip install 'PyJWT[crypto]' cryptography): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tokens = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    (v["jwks"].to_string(), tokens)
}

/// `token`'s payload as JSON.
fn payload(token: &str) -> Value {
    let seg = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(seg).unwrap()).unwrap()
}

/// A token with `header` and `payload`, signed by `keyring`'s active key of
/// `alg`: what a holder of that key can make, claiming whatever it likes.
fn forge(keyring: &Keyring, alg: Algorithm, header: &Value, payload: &Value) -> String {
    common::identity::sign_segments_alg(
        keyring,
        alg,
        &URL_SAFE_NO_PAD.encode(header.to_string()),
        &URL_SAFE_NO_PAD.encode(payload.to_string()),
    )
}

#[test]
fn one_trust_set_four_issuers_and_no_substitution() {
    let dir = tempfile::tempdir().unwrap();
    let ks_a = keystore(dir.path(), "a", &["ES256"]);
    let ks_b = keystore(dir.path(), "b", &["ES256"]);
    let served_a = serve(&ks_a);
    let served_b = serve(&ks_b);
    let keys_a = Keyring::load(&ks_a).unwrap();
    let keys_b = Keyring::load(&ks_b).unwrap();
    let kid_a = keys_a
        .active_for(Algorithm::Es256)
        .unwrap()
        .id()
        .as_str()
        .to_string();
    let kid_b = keys_b
        .active_for(Algorithm::Es256)
        .unwrap()
        .id()
        .as_str()
        .to_string();

    // A through its JWKS, B through its bundle endpoint: both from the
    // running servers, over loopback HTTP.
    let jwks_a = RemoteJwks::builder(&served_a.jwks_url())
        .allow_http_loopback(true)
        .build()
        .unwrap();
    jwks_a.refresh().unwrap();
    let bundle_b = SpiffeBundleSource::builder(
        TD_B,
        &format!("http://{}/spiffe/bundle.json", served_b.addr),
    )
    .allow_http_loopback(true)
    .build()
    .unwrap();
    assert_eq!(bundle_b.refresh().unwrap().keys.len(), 1);

    // C: PyJWT's ES384 key, published under A's kid.
    let now = T0 + 60;
    let svid = |td: &str| {
        json!({"sub": format!("spiffe://{td}/ns/prod/sa/api"), "aud": ["my-service"],
               "iat": now, "exp": now + 300})
    };
    let claims_as_a = svid(TD_A);
    let (jwks_c, tokens_c) = pyjwt_es384(&kid_a, &[svid(TD_C), svid(TD_B), claims_as_a]);
    let keys_c = Keyring::new();
    keys_c.import_jwks(&jwks_c).unwrap();

    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let trust = TrustSet::builder()
        .issuer(TrustedIssuer::nomad(
            IssuerId::trust_domain(TD_A).unwrap(),
            jwks_a.clone(),
            store.clone(),
            Audience::new("vault.io").unwrap(),
        ))
        .issuer(TrustedIssuer::nomad(
            IssuerId::iss(ISS_D).unwrap(),
            jwks_a,
            store.clone(),
            Audience::new("vault.io").unwrap(),
        ))
        .issuer(TrustedIssuer::nomad(
            IssuerId::trust_domain(TD_B).unwrap(),
            bundle_b,
            store,
            Audience::new("vault.io").unwrap(),
        ))
        .issuer(TrustedIssuer::foreign(
            IssuerId::trust_domain(TD_C).unwrap(),
            keys_c,
            Audience::new("my-service").unwrap(),
        ))
        // A forged kid is not waited for: refused at once.
        .key_wait(Duration::ZERO)
        .build()
        .unwrap();

    // Each issuer's own token verifies, and says who decided.
    let req = common::issue_request_task();
    let token_a = Issuer::new(keys_a.clone())
        .algorithm(Algorithm::Es256)
        .spiffe(SpiffeProfile::new(TD_A).unwrap())
        .issue(&req, now)
        .unwrap()
        .token;
    let token_d = Issuer::new(keys_a.clone())
        .issuer(ISS_D)
        .issue_with(Algorithm::Es256, &req, now)
        .unwrap()
        .token;
    let token_b = Issuer::new(keys_b.clone())
        .algorithm(Algorithm::Es256)
        .spiffe(SpiffeProfile::new(TD_B).unwrap())
        .issue(&req, now)
        .unwrap()
        .token;
    assert!(
        payload(&token_b)["sub"]
            .as_str()
            .unwrap()
            .starts_with("spiffe://b.example/"),
        "{}",
        payload(&token_b)
    );
    let verified = trust.verify(&token_a, now).unwrap();
    assert_eq!(verified.issuer, "spiffe://a.example");
    let verified = trust.verify(&token_d, now).unwrap();
    assert_eq!(verified.issuer, ISS_D);
    let verified = trust.verify(&token_b, now).unwrap();
    assert_eq!(verified.issuer, "spiffe://b.example");
    let verified = trust.verify(&tokens_c[0], now).unwrap();
    assert_eq!(verified.issuer, "spiffe://spire.example");

    // Every substitution is refused. What each claims, whose key signed it:
    let mut refusals = Vec::new();
    let mut refused = |what: &str, token: &str| {
        let e = trust
            .verify(token, now)
            .expect_err(&format!("{what} must be refused"));
        refusals.push(format!("{what}: {:?}", e.code()));
        e
    };
    // C's key claiming B's trust domain: routed to B, whose keys alone are
    // tried (C's kid is A's, which B does not have).
    refused("C's ES384 key, B's trust domain", &tokens_c[1]);
    // C's key claiming A's trust domain, under A's own kid: A's ES256 key
    // under that kid never checks an ES384 signature.
    let e = refused(
        "C's ES384 key under A's kid, A's trust domain",
        &tokens_c[2],
    );
    assert!(
        matches!(
            e.code(),
            ResultCode::UnsupportedAlgorithm | ResultCode::BadSignature
        ),
        "{e}"
    );
    // A's key claiming B's trust domain (A's token with a SPIFFE sub of B):
    // routed to B, which does not hold A's key.
    let header_a = json!({"alg": "ES256", "kid": kid_a, "typ": "JWT"});
    let mut as_b = payload(&token_a);
    as_b["sub"] = json!("spiffe://b.example/ns/default/job/web");
    refused(
        "A's key, B's trust domain",
        &forge(&keys_a, Algorithm::Es256, &header_a, &as_b),
    );
    // B's key claiming A's trust domain, and D's iss: routed to A or D,
    // which do not hold B's key.
    let header_b = json!({"alg": "ES256", "kid": kid_b, "typ": "JWT"});
    let mut as_a = payload(&token_b);
    as_a["sub"] = json!("spiffe://a.example/ns/default/job/web");
    refused(
        "B's key, A's trust domain",
        &forge(&keys_b, Algorithm::Es256, &header_b, &as_a),
    );
    let mut as_d = payload(&token_d);
    as_d["iss"] = json!(ISS_D);
    refused(
        "B's key, D's iss",
        &forge(&keys_b, Algorithm::Es256, &header_b, &as_d),
    );
    // A's key and kid, claiming C's trust domain: C's keys alone are tried.
    refused(
        "A's key, C's trust domain",
        &forge(&keys_a, Algorithm::Es256, &header_a, &svid(TD_C)),
    );
    // One token naming two issuers (D's iss, B's trust domain) goes nowhere.
    let mut both = payload(&token_d);
    both["sub"] = json!("spiffe://b.example/ns/default/job/web");
    let e = refused(
        "D's iss with B's trust domain",
        &forge(&keys_a, Algorithm::Es256, &header_a, &both),
    );
    assert_eq!(e.code(), ResultCode::IssuerMismatch, "{e}");
    // An issuer nobody trusts is refused by name.
    let mut stranger = payload(&token_d);
    stranger["iss"] = json!("https://evil.example");
    let e = refused(
        "an unknown iss",
        &forge(&keys_a, Algorithm::Es256, &header_a, &stranger),
    );
    assert_eq!(e.code(), ResultCode::IssuerMismatch, "{e}");
    assert!(e.to_string().contains("https://evil.example"), "{e}");
    assert_eq!(refusals.len(), 8, "{refusals:?}");
    eprintln!("refused: {refusals:#?}");

    // And the issuers' own tokens still verify after all that.
    trust.verify(&token_a, now).unwrap();
    trust.verify(&token_b, now).unwrap();
    trust.verify(&tokens_c[0], now).unwrap();
    trust.verify(&token_d, now).unwrap();
    // The stats say which issuer decided each verdict; the two tokens that
    // named no single trusted issuer were decided by none.
    let stats = trust.stats();
    let counts: Vec<(u64, u64)> = stats
        .issuers
        .iter()
        .map(|i| (i.stats.accepted, i.stats.rejected))
        .collect();
    assert_eq!(counts, [(2, 2), (2, 1), (2, 2), (2, 1)], "{stats:?}");
    assert_eq!(stats.unrouted, 2, "{stats:?}");
}
