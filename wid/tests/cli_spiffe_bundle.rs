//! `wid serve`'s SPIFFE bundle endpoint (`/spiffe/bundle.json`): the bundle
//! format, `spiffe_sequence` rising with each change of its keys (a hand
//! deprecation too) and equal across servers and restarts, `spiffe_refresh_hint`, and the caching rules the
//! JWKS follows (ETag, If-None-Match, Cache-Control).
#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../../tests/serve_support/mod.rs"]
mod serve_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use serve_support::{Served, http_with, wid_ok};
use workload_identity::{
    Algorithm, Audience, Issuer, Keyring, MemoryStore, SpiffeBundleSource, Verifier,
};

const T0: i64 = 1_700_000_000;

fn init(dir: &Path) -> String {
    let ks = dir.join("keystore").display().to_string();
    let now = T0.to_string();
    wid_ok(&[
        "keyring",
        "init",
        "--keystore",
        &ks,
        "--alg",
        "EdDSA",
        "--alg",
        "ES256",
        "--alg",
        "RS256",
        "--now",
        &now,
    ]);
    ks
}

fn rotate(ks: &str, alg: &str, now: i64) {
    wid_ok(&[
        "keyring",
        "rotate",
        "--keystore",
        ks,
        "--alg",
        alg,
        "--now",
        &now.to_string(),
    ]);
}

fn serve(ks: &str, extra: &[&str]) -> Served {
    let mut args = vec!["--keystore", ks, "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    Served::start(&args)
}

fn sequence(bundle: &Value) -> u64 {
    bundle["spiffe_sequence"].as_u64().expect("spiffe_sequence")
}

#[test]
fn bundle_endpoint_serves_jwt_svid_keys_with_a_rising_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let ks = init(dir.path());
    let served = serve(&ks, &["--spiffe-refresh-hint", "2m"]);

    let first = served.get("/spiffe/bundle.json");
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("Content-Type"), Some("application/json"));
    let bundle = first.json();
    let keys = bundle["keys"].as_array().unwrap();
    // ES256 and RS256 bearer keys; EdDSA is no JWT-SVID algorithm.
    let mut algs: Vec<&str> = keys.iter().map(|k| k["alg"].as_str().unwrap()).collect();
    algs.sort_unstable();
    assert_eq!(algs, ["ES256", "RS256"], "{bundle}");
    assert!(keys.iter().all(|k| k["use"] == "jwt-svid"), "{bundle}");
    assert_eq!(bundle["spiffe_refresh_hint"], 120);
    let seq1 = sequence(&bundle);
    assert_eq!(seq1, T0 as u64);
    // The same keys as the JWKS publishes (its ES/RS entries).
    let jwks = served.jwks().json();
    for k in keys {
        let kid = k["kid"].as_str().unwrap();
        assert!(
            jwks["keys"]
                .as_array()
                .unwrap()
                .iter()
                .any(|j| j["kid"] == kid),
            "{kid} not in {jwks}"
        );
    }

    // Cached like the JWKS: an ETag of its own, 304 on If-None-Match, the
    // JWKS's max-age.
    let tag = first.header("ETag").expect("an ETag").to_string();
    assert_ne!(served.jwks().header("ETag"), Some(tag.as_str()));
    let again = http_with(
        &served.addr,
        "GET",
        "/spiffe/bundle.json",
        &[("If-None-Match", &tag)],
    );
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    // The JWKS's max-age, capped by the refresh hint. (The keys were made
    // at T0, long past: under the policy init stored their rotation is
    // overdue, so the JWKS's max-age is short, not the 15 minutes of keys
    // far from a switch.)
    let jwks_age = served.jwks().max_age();
    assert_eq!(first.max_age(), jwks_age.min(120));
    let head = http_with(&served.addr, "HEAD", "/spiffe/bundle.json", &[]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());

    // A rotation later on: a new key, a higher sequence, a new ETag.
    rotate(&ks, "ES256", T0 + 3600);
    let rotated = served.get("/spiffe/bundle.json");
    let bundle2 = rotated.json();
    assert_eq!(sequence(&bundle2), (T0 + 3600) as u64);
    assert_eq!(bundle2["keys"].as_array().unwrap().len(), 3, "{bundle2}");
    assert_ne!(rotated.header("ETag"), Some(tag.as_str()));
    assert_eq!(
        http_with(
            &served.addr,
            "GET",
            "/spiffe/bundle.json",
            &[("If-None-Match", &tag)]
        )
        .status,
        200
    );
    // An EdDSA rotation changes no bundle key: same sequence, same ETag.
    let tag2 = rotated.header("ETag").unwrap().to_string();
    rotate(&ks, "EdDSA", T0 + 7200);
    let same = served.get("/spiffe/bundle.json");
    assert_eq!(sequence(&same.json()), (T0 + 3600) as u64);
    assert_eq!(same.header("ETag"), Some(tag2.as_str()));

    // Another server on the same keystore (and so a restart) serves the
    // same bundle, byte for byte.
    let other = serve(&ks, &["--spiffe-refresh-hint", "2m"]);
    let there = other.get("/spiffe/bundle.json");
    assert_eq!(there.body, same.body);
    assert_eq!(there.header("ETag"), same.header("ETag"));

    // A deprecation by hand (the first ES256 key, inactive since the
    // rotation) moves no recorded moment, yet the bundle loses a key: the
    // sequence rises by one, on both servers alike.
    let old_es256 = keys
        .iter()
        .find(|k| k["alg"] == "ES256")
        .and_then(|k| k["kid"].as_str())
        .unwrap()
        .to_string();
    wid_ok(&[
        "keyring",
        "deprecate",
        "--keystore",
        &ks,
        &old_es256,
        "--force",
        "--now",
        &(T0 + 7300).to_string(),
    ]);
    let deprecated = served.get("/spiffe/bundle.json").json();
    assert_eq!(sequence(&deprecated), (T0 + 3601) as u64, "{deprecated}");
    assert_eq!(deprecated["keys"].as_array().unwrap().len(), 2);
    let there = other.get("/spiffe/bundle.json").json();
    assert_eq!(there, deprecated);

    let m = served.get("/metrics").body;
    assert!(
        m.lines()
            .any(|l| l.contains("route=\"spiffe_bundle\"") && l.contains("status=\"200\"")),
        "{m}"
    );
}

#[test]
fn bundle_carries_wit_svid_keys_apart() {
    let dir = tempfile::tempdir().unwrap();
    let ks = init(dir.path());
    wid_ok(&[
        "keyring",
        "rotate",
        "--keystore",
        &ks,
        "--purpose",
        "wit",
        "--alg",
        "ES256",
        "--now",
        &(T0 + 60).to_string(),
    ]);
    let served = serve(&ks, &[]);
    let bundle = served.get("/spiffe/bundle.json").json();
    let wit: Vec<&Value> = bundle["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["use"] == "wit-svid")
        .collect();
    assert_eq!(wit.len(), 1, "{bundle}");
    let wit_set = served.get("/wit/jwks.json").json();
    assert_eq!(wit[0]["kid"], wit_set["keys"][0]["kid"]);
    assert_eq!(sequence(&bundle), (T0 + 60) as u64);
    // The default refresh hint: 5 minutes.
    assert_eq!(bundle["spiffe_refresh_hint"], 300);
}

/// Our reading side against our publishing side: a `SpiffeBundleSource`
/// follows a real `wid serve`'s bundle endpoint; a token of the keystore's
/// ES256 key verifies through it; after a rotation, the new key's first
/// token (an unknown kid) makes the source fetch the bundle again, whose
/// sequence is higher.
#[test]
fn spiffe_bundle_source_follows_wid_serve() {
    let dir = tempfile::tempdir().unwrap();
    let ks = init(dir.path());
    let served = serve(&ks, &["--spiffe-refresh-hint", "1m"]);
    let source = SpiffeBundleSource::builder(
        "prod.example.org",
        &format!("http://{}/spiffe/bundle.json", served.addr),
    )
    .allow_http_loopback(true)
    .unknown_kid_cooldown(Duration::ZERO)
    .build()
    .unwrap();
    let report = source.refresh().unwrap();
    assert_eq!(report.sequence, Some(T0 as u64));
    assert_eq!(report.refresh_hint, Some(Duration::from_secs(60)));
    assert_eq!(report.keys.len(), 2, "the ES256 and RS256 keys");

    let store = Arc::new(MemoryStore::new());
    store.upsert(&common::allocation());
    let verifier = Verifier::builder(
        source.keyring().clone(),
        store,
        Audience::new("vault.io").unwrap(),
    )
    .key_wait(Duration::from_secs(10))
    .build();
    let token = |now: i64| {
        Issuer::new(Keyring::load(&ks).unwrap())
            .issue_with(Algorithm::Es256, &common::issue_request_task(), now)
            .unwrap()
            .token
    };
    verifier.verify(&token(T0 + 60), T0 + 60).unwrap();

    rotate(&ks, "ES256", T0 + 3600);
    verifier.verify(&token(T0 + 3600), T0 + 3600).unwrap();
    let stats = source.stats();
    assert_eq!(stats.sequence, Some((T0 + 3600) as u64));
    assert_eq!(stats.unknown_kid_fetches, 1);
    assert_eq!(stats.keys, 3);
}
