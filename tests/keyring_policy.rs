//! The policy stored with a keyring (`KeyringPolicy`): kept in a keystore
//! file's body across save and load (plaintext and wrapped), and its longest
//! TTL a promise every issuer of the keyring keeps — bearer tokens, node
//! identities and tokens without `exp` alike.

mod common;

use std::time::Duration;

use workload_identity::model::GoDuration;
use workload_identity::{
    Algorithm, Issuer, KekFile, Keyring, KeyringPolicy, KeystoreLoadOptions, PolicyOverrides,
    ResultCode, RootKey,
};

const NOW: i64 = 1_700_000_000;

fn keyring() -> Keyring {
    Keyring::from_keys([RootKey::generate_for(
        Algorithm::Es256,
        workload_identity::KeyState::Active,
        NOW,
    )
    .unwrap()])
    .unwrap()
}

fn policy() -> KeyringPolicy {
    KeyringPolicy::new(Some(Duration::from_secs(3600)))
        .rotation_threshold(Duration::from_secs(24 * 3600))
        .lead_time(Duration::from_secs(5))
        .retention(Duration::from_secs(600))
}

#[test]
fn a_keystore_keeps_its_policy_through_save_and_load() {
    let dir = tempfile::tempdir().unwrap();
    let kr = keyring();
    assert_eq!(kr.policy(), None);
    kr.set_policy(Some(policy())).unwrap();
    let plain = dir.path().join("plain.bin");
    kr.save(&plain).unwrap();
    assert_eq!(Keyring::load(&plain).unwrap().policy(), Some(policy()));

    let kek = KekFile::from_bytes(&[9u8; 32]).unwrap();
    let wrapped = dir.path().join("wrapped.bin");
    kr.save_wrapped(&wrapped, &kek).unwrap();
    let loaded = Keyring::load_with(
        &wrapped,
        &KeystoreLoadOptions::default().wrapper(std::sync::Arc::new(kek)),
    )
    .unwrap();
    assert_eq!(loaded.policy(), Some(policy()));
    assert_eq!(loaded.longest_token_ttl(), Some(Duration::from_secs(3600)));

    // Cleared, the body holds no Policy and loads without one.
    kr.set_policy(None).unwrap();
    kr.save(&plain).unwrap();
    assert_eq!(Keyring::load(&plain).unwrap().policy(), None);
}

#[test]
fn invalid_policies_are_refused_naming_the_field() {
    let kr = keyring();
    let e = kr
        .set_policy(Some(KeyringPolicy::new(Some(Duration::ZERO))))
        .unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    assert!(e.to_string().contains("LongestTTL"), "{e}");
    let e = kr
        .set_policy(Some(
            KeyringPolicy::new(None).rotation_threshold(Duration::ZERO),
        ))
        .unwrap_err();
    assert!(e.to_string().contains("RotationThreshold"), "{e}");
    assert_eq!(kr.policy(), None, "a refused policy changes nothing");
}

#[test]
fn issuers_keep_the_longest_ttl_promise() {
    let kr = keyring();
    let issuer = Issuer::new(kr.clone()).algorithm(Algorithm::Es256);
    let mut req = common::issue_request_task();
    req.identity.ttl = GoDuration::from_secs(2 * 3600);
    // No policy: any TTL.
    issuer.issue(&req, NOW).unwrap();

    kr.set_policy(Some(policy())).unwrap();
    let e = issuer.issue(&req, NOW).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    let msg = e.to_string();
    assert!(
        msg.contains("Identity.TTL") && msg.contains("2h") && msg.contains("LongestTTL (1h)"),
        "{msg}"
    );
    // A token that never expires breaks the promise too.
    req.identity.ttl = GoDuration::from_secs(0);
    let e = issuer.issue(&req, NOW).unwrap_err();
    assert!(e.to_string().contains("never expires"), "{e}");
    // At the limit, and under it, tokens are signed.
    req.identity.ttl = GoDuration::from_secs(3600);
    let signed = issuer.issue(&req, NOW).unwrap();
    assert_eq!(signed.claims.expires_at, Some(NOW + 3600));

    // Node identities (24 h unless asked) are bound as well.
    let node = common::node_identity_request();
    let e = issuer.issue_node(&node, NOW).unwrap_err();
    assert!(e.to_string().contains("NodeIdentityRequest"), "{e}");
    let mut short = node.clone();
    short.ttl = GoDuration::from_secs(1800);
    issuer.issue_node(&short, NOW).unwrap();
}

#[test]
fn given_values_that_differ_from_the_stored_policy_are_named() {
    let stored = policy();
    let mut given = PolicyOverrides::none();
    assert!(stored.differences(&given).is_empty());
    given.lead_time = Some(Duration::from_secs(5));
    assert!(stored.differences(&given).is_empty(), "same value");
    given.longest_token_ttl = Some(Some(Duration::from_secs(60)));
    given.rotation_threshold = Some(Duration::from_secs(60));
    let d = stored.differences(&given);
    assert_eq!(
        d,
        vec![
            ("RotationThreshold", "24h".to_string()),
            ("LongestTTL", "1h".to_string())
        ]
    );
    // A policy with every value given, applied, is that policy.
    assert_eq!(
        PolicyOverrides::all(&stored).apply(KeyringPolicy::default()),
        stored
    );
}

/// A `now` that is plainly milliseconds or nanoseconds is refused, saying
/// which; a terminal allocation gets no new identity; `issue_now` reads the
/// system clock.
#[test]
fn issuers_refuse_milliseconds_and_stopped_allocations() {
    let kr = keyring();
    let issuer = Issuer::new(kr).algorithm(Algorithm::Es256);
    let req = common::issue_request_task();
    let e = issuer.issue(&req, 1_796_416_546_000).unwrap_err();
    assert_eq!(e.code(), ResultCode::InvalidArgument);
    assert!(
        e.to_string().contains("milliseconds") && e.to_string().contains("1796416546"),
        "{e}"
    );
    let e = issuer.issue(&req, 1_796_416_546_000_000_000).unwrap_err();
    assert!(e.to_string().contains("nanoseconds"), "{e}");
    let e = issuer
        .issue_node(&common::node_identity_request(), 1_796_416_546_000)
        .unwrap_err();
    assert!(e.to_string().contains("milliseconds"), "{e}");

    for status in ["complete", "failed", "lost"] {
        let mut stopped = req.clone();
        stopped.allocation.client_status = status.into();
        let e = issuer.issue(&stopped, NOW).unwrap_err();
        assert_eq!(e.code(), ResultCode::InvalidArgument);
        assert!(
            e.to_string().contains("Allocation.ClientStatus") && e.to_string().contains(status),
            "{e}"
        );
    }
    let mut pending = req.clone();
    pending.allocation.client_status = "pending".into();
    issuer.issue(&pending, NOW).unwrap();

    let before = workload_identity::unix_now();
    let signed = issuer.issue_now(&req).unwrap();
    let iat = signed.claims.issued_at.unwrap();
    assert!(
        iat >= before && iat <= workload_identity::unix_now(),
        "{iat}"
    );
}
