//! The verifier builder, `wid_explain` and `wid_verifier_stats` through the
//! C ABI (`ffi/src/verifier_builder.rs`, `ffi/src/explain.rs`): every
//! setter's refusals with the builder unchanged, builds that do not consume
//! the builder, each option's effect on the verifiers built, explanations
//! with the verdict (the same JSON as `Verifier::explain`'s), stats, NULL
//! arguments, outputs written only on success, and wrong handle types.
//! (`bindings/c/test.c` drives the same functions from C under valgrind.)

mod common;

use std::ptr::{null, null_mut};

use common::bytes::{empty, is_sentinel, json, json_of, sentinel, take};
use common::ffi_text::{error_says, last_error};
use common::handles::free;
use common::identity::{AUD, NOW};
use common::keys::{keyring, public_jwk, rotated_keyring, workload_key};
use common::lookup::{LIVE, MISSING, TERMINAL, sample_state, state};
use common::proof::issue_wit_into;
use common::request::{issue_with_issuer as issue, with_proof_key};
use common::result::{expect, ok};
use common::strings::s;
use common::verifier::{build, stats, verify, verify_at};
use workload_identity_ffi::*;

const ISS: &str = "https://nomad.example.com";
const TARGET: &str = "https://vault.example.com/v1/auth/jwt/login";

/// A keyring with an active EdDSA key "k1".
fn k1() -> *mut wid_keyring {
    keyring("k1", 9)
}

/// A keyring with "k1", a token of it (no issuer), a builder over it for
/// a live sample allocation and a verifier built from that.
fn live_world() -> (
    *mut wid_keyring,
    String,
    *mut wid_verifier_builder,
    *mut wid_verifier,
) {
    let kr = k1();
    let token = issue(kr, "");
    let b = builder(kr, &LIVE);
    let v = build(b);
    (kr, token, b, v)
}

/// A builder for `AUD` whose lookup reports `alloc` for the sample
/// allocation (others are missing).
fn builder(kr: *const wid_keyring, alloc: &'static u32) -> *mut wid_verifier_builder {
    common::verifier::builder(kr, Some(sample_state), state(alloc), AUD)
}

/// One value for each of the verifier builder's setters (the issuer `None`
/// is `(NULL, 0)`).
#[derive(Clone, Copy)]
struct Settings {
    leeway_secs: i64,
    key_wait_ms: i64,
    max_token_bytes: usize,
    require_exp: u32,
    cache_entries: usize,
    issuer: Option<&'static str>,
    require_proof: u32,
    max_proof_lifetime_secs: i64,
    proof_replay_capacity: usize,
}

/// Calls every setter on `b` with `values`, in the header's order, each
/// answering `want`.
#[track_caller]
fn set_all(b: *mut wid_verifier_builder, values: &Settings, want: wid_result) {
    let Settings {
        leeway_secs: leeway,
        key_wait_ms: wait,
        max_token_bytes: max,
        require_exp: exp,
        cache_entries: cache,
        issuer,
        require_proof,
        max_proof_lifetime_secs: lifetime,
        proof_replay_capacity: capacity,
    } = *values;
    let (iss, iss_len) = common::strings::opt(issuer);
    // SAFETY: the issuer is valid for its length (or (NULL, 0)).
    unsafe {
        expect(wid_verifier_builder_set_leeway_secs(b, leeway), want);
        expect(wid_verifier_builder_set_key_wait_ms(b, wait), want);
        expect(wid_verifier_builder_set_max_token_bytes(b, max), want);
        expect(wid_verifier_builder_set_require_exp(b, exp), want);
        expect(wid_verifier_builder_set_cache_entries(b, cache), want);
        expect(wid_verifier_builder_set_issuer(b, iss, iss_len), want);
    }
    set_proof_options(b, require_proof, lifetime, capacity, want);
}

/// Sets `b`'s proof options (required, the longest lifetime, the replay
/// cache's capacity), each answering `want`.
#[track_caller]
fn set_proof_options(
    b: *mut wid_verifier_builder,
    require: u32,
    lifetime_secs: i64,
    capacity: usize,
    want: wid_result,
) {
    // SAFETY: plain values; `b` is whatever the test passes.
    unsafe {
        expect(wid_verifier_builder_set_require_proof(b, require), want);
        expect(
            wid_verifier_builder_set_max_proof_lifetime_secs(b, lifetime_secs),
            want,
        );
        expect(
            wid_verifier_builder_set_proof_replay_capacity(b, capacity),
            want,
        );
    }
}

/// `wid_explain` of `token` at `now`, which must succeed.
fn explain_at(v: *const wid_verifier, token: &[u8], now: i64) -> serde_json::Value {
    let (t, tl) = (token.as_ptr().cast(), token.len());
    json_of(|out| unsafe { wid_explain(v, t, tl, now, out) })
}

#[test]
fn builder_new_checks_its_arguments() {
    let kr = k1();
    let ud = state(&LIVE);
    let sentinel_b = std::ptr::dangling_mut::<wid_verifier_builder>();
    let mut b = sentinel_b;
    let new = |kr, f: wid_alloc_lookup_fn, aud: *const u8, len, out| unsafe {
        wid_verifier_builder_new(kr, f, ud, aud.cast(), len, out)
    };
    expect(
        new(null(), Some(sample_state), AUD.as_ptr(), 8, &mut b),
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        new(kr, None, AUD.as_ptr(), 8, &mut b),
        WID_RESULT_NULL_ARGUMENT,
    );
    error_says("lookup");
    expect(
        new(kr, Some(sample_state), null(), 8, &mut b),
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        new(kr, Some(sample_state), AUD.as_ptr(), 8, null_mut()),
        WID_RESULT_NULL_ARGUMENT,
    );
    // The audience is required, UTF-8, at most 4096 bytes.
    expect(
        new(kr, Some(sample_state), null(), 0, &mut b),
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        new(kr, Some(sample_state), b"\xff\xfe".as_ptr(), 2, &mut b),
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        new(kr, Some(sample_state), AUD.as_ptr(), usize::MAX, &mut b),
        WID_RESULT_INVALID_ARGUMENT,
    );
    let long = vec![b'a'; 4097];
    expect(
        new(kr, Some(sample_state), long.as_ptr(), long.len(), &mut b),
        WID_RESULT_INVALID_ARGUMENT,
    );
    // A verifier handle is not a keyring.
    let good = builder(kr, &LIVE);
    let v = build(good);
    expect(
        new(v.cast(), Some(sample_state), AUD.as_ptr(), 8, &mut b),
        WID_RESULT_INVALID_ARGUMENT,
    );
    assert_eq!(b, sentinel_b, "outputs are written only on success");
    unsafe { free!(v, good, kr) };
}

#[test]
fn setters_refuse_bad_values_and_leave_the_builder_unchanged() {
    let kr = k1();
    let token = issue(kr, ISS);
    let b = builder(kr, &LIVE);
    // A valid configuration first.
    let valid = Settings {
        leeway_secs: 0,
        key_wait_ms: 0,
        max_token_bytes: 4096,
        require_exp: 1,
        cache_entries: 64,
        issuer: Some(ISS),
        require_proof: 0,
        max_proof_lifetime_secs: 60,
        proof_replay_capacity: 1000,
    };
    set_all(b, &valid, WID_RESULT_OK);
    // Every refusal.
    unsafe {
        let bad = WID_RESULT_INVALID_ARGUMENT;
        expect(wid_verifier_builder_set_leeway_secs(b, -1), bad);
        error_says("-1");
        expect(wid_verifier_builder_set_leeway_secs(b, i64::MIN), bad);
        expect(wid_verifier_builder_set_key_wait_ms(b, -1), bad);
        expect(wid_verifier_builder_set_max_token_bytes(b, 0), bad);
        expect(wid_verifier_builder_set_require_exp(b, 2), bad);
        error_says("0 or 1");
        expect(wid_verifier_builder_set_require_proof(b, u32::MAX), bad);
        expect(
            wid_verifier_builder_set_issuer(b, b"\xff".as_ptr().cast(), 1),
            bad,
        );
        expect(
            wid_verifier_builder_set_issuer(b, "x".as_ptr().cast(), usize::MAX),
            bad,
        );
        expect(
            wid_verifier_builder_set_issuer(b, null(), 3),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(wid_verifier_builder_set_max_proof_lifetime_secs(b, 0), bad);
        expect(wid_verifier_builder_set_max_proof_lifetime_secs(b, -5), bad);
        expect(wid_verifier_builder_set_proof_replay_capacity(b, 15), bad);
        error_says("16");
        // NULL builders, whatever the value.
        let null_arg = WID_RESULT_NULL_ARGUMENT;
        let whatever = Settings {
            leeway_secs: -1,
            key_wait_ms: 0,
            max_token_bytes: 0,
            require_exp: 9,
            cache_entries: 1,
            issuer: None,
            require_proof: 0,
            max_proof_lifetime_secs: 0,
            proof_replay_capacity: 0,
        };
        set_all(null_mut(), &whatever, null_arg);
        let mut v = std::ptr::dangling_mut::<wid_verifier>();
        expect(wid_verifier_builder_build(null(), &mut v), null_arg);
        expect(wid_verifier_builder_build(b, null_mut()), null_arg);
        assert_eq!(v, std::ptr::dangling_mut());
    }
    // The builder kept the valid configuration: no leeway, the issuer
    // required, exp required, a 4096-byte cap.
    let v = build(b);
    expect(verify(v, &token), WID_RESULT_OK);
    expect(verify_at(v, &token, NOW + 3600), WID_RESULT_EXPIRED);
    let other = issue(kr, "https://other.example.com");
    expect(verify(v, &other), WID_RESULT_ISSUER_MISMATCH);
    let long = format!("{token}{}", "A".repeat(4096));
    expect(verify(v, &long), WID_RESULT_MALFORMED_TOKEN);
    error_says("4096");
    // The cache was on: a second verification is a hit.
    expect(verify(v, &token), WID_RESULT_OK);
    let s = stats(v);
    assert_eq!(s["cache_hits"], 1, "{s}");
    assert_eq!(s["cache_entries"], 1, "{s}");
    // (NULL, 0) clears the issuer requirement; the builder is not consumed,
    // and verifiers already built keep their settings.
    unsafe {
        expect(wid_verifier_builder_set_issuer(b, null(), 0), WID_RESULT_OK);
        expect(wid_verifier_builder_set_cache_entries(b, 0), WID_RESULT_OK);
    }
    let v2 = build(b);
    expect(verify(v2, &other), WID_RESULT_OK);
    expect(verify(v, &other), WID_RESULT_ISSUER_MISMATCH);
    expect(verify(v2, &token), WID_RESULT_OK);
    assert_eq!(stats(v2)["cache_hits"], 0);
    // Verifiers outlive the builder and the keyring handle.
    unsafe { free!(b, kr) };
    expect(verify(v2, &token), WID_RESULT_OK);
    unsafe { free!(v, v2) };
}

#[test]
fn the_defaults_are_the_rust_builders() {
    let (kr, token, b, v) = live_world();
    // 60 s leeway: valid until exp + 60.
    expect(verify_at(v, &token, NOW + 3600 + 59), WID_RESULT_OK);
    expect(verify_at(v, &token, NOW + 3600 + 60), WID_RESULT_EXPIRED);
    // A terminal allocation is refused.
    let bt = builder(kr, &TERMINAL);
    let vt = build(bt);
    expect(verify(vt, &token), WID_RESULT_ALLOCATION_TERMINAL);
    // A wrong audience.
    let b2 = common::verifier::builder(kr, Some(sample_state), state(&LIVE), "nomad.io");
    let v2 = build(b2);
    expect(verify(v2, &token), WID_RESULT_AUDIENCE_MISMATCH);
    unsafe {
        for v in [v, vt, v2] {
            wid_verifier_free(v);
        }
        for b in [b, bt, b2] {
            wid_verifier_builder_free(b);
        }
        wid_keyring_free(kr);
    }
}

#[test]
fn key_wait_leeway_and_max_token_bytes_take_effect() {
    let kr = k1();
    let token = issue(kr, "");
    let b = builder(kr, &LIVE);
    unsafe {
        expect(wid_verifier_builder_set_leeway_secs(b, 5), WID_RESULT_OK);
        expect(wid_verifier_builder_set_key_wait_ms(b, 50), WID_RESULT_OK);
        // Clamped to 1 MiB, not refused.
        expect(
            wid_verifier_builder_set_max_token_bytes(b, usize::MAX),
            WID_RESULT_OK,
        );
    }
    let v = build(b);
    expect(verify_at(v, &token, NOW + 3604), WID_RESULT_OK);
    expect(verify_at(v, &token, NOW + 3605), WID_RESULT_EXPIRED);
    // An unknown kid is waited for (50 ms), then refused.
    let other = {
        let k = rotated_keyring(NOW);
        let t = issue(k, "");
        unsafe { wid_keyring_free(k) };
        t
    };
    let started = std::time::Instant::now();
    expect(verify(v, &other), WID_RESULT_UNKNOWN_KEY);
    assert!(started.elapsed() >= std::time::Duration::from_millis(40));
    assert_eq!(stats(v)["key_waits"], 1);
    // A token over the default 8 KiB but under 1 MiB is read and refused
    // for what it is, not for its length.
    let big = format!("{token}{}", "A".repeat(10_000));
    expect(verify(v, &big), WID_RESULT_MALFORMED_TOKEN);
    assert!(!last_error().contains("-byte limit"), "{}", last_error());
    unsafe { free!(v, b, kr) };
}

// ---- Proof options.

/// A workload key and a WIT for it (from an EdDSA WIT key rotated into
/// `kr`, issuer `ISS`).
fn wit_and_key(kr: *const wid_keyring) -> (*mut wid_workload_key, String) {
    let key = workload_key(WID_ALG_ES256);
    let req = with_proof_key(&public_jwk(key));
    let td = "nomad.example.com";
    // WITs are signed only by WIT keys.
    expect(
        unsafe {
            wid_keyring_rotate_purpose(kr, WID_KEY_PURPOSE_WIT, WID_ALG_EDDSA, NOW, null_mut())
        },
        WID_RESULT_OK,
    );
    let mut out = empty();
    let rc = issue_wit_into(
        kr,
        WID_ALG_EDDSA,
        &req,
        ISS.as_bytes(),
        td.as_bytes(),
        NOW,
        &mut out,
    );
    expect(rc, WID_RESULT_OK);
    (key, take(&mut out))
}

/// `key`'s proof for `wit` and `TARGET`, living `ttl` seconds.
fn prove(key: *const wid_workload_key, wit: &str, ttl: i64) -> String {
    ok(common::proof::prove(key, wit, TARGET, None, ttl, NOW))
}

/// The verdict on `wit` and its proof `wpt` for `TARGET` (no claims out).
fn verify_proof(v: *const wid_verifier, wit: &str, wpt: &str) -> wid_result {
    let ((w, wl), (p, pl), (t, tl)) = (s(wit), s(wpt), s(TARGET));
    unsafe { wid_verify_proof(v, w, wl, p, pl, t, tl, null(), 0, NOW, null_mut()) }
}

#[test]
fn proof_options_take_effect() {
    let kr = k1();
    let bearer = issue(kr, "");
    let (key, wit) = wit_and_key(kr);
    let b = builder(kr, &LIVE);
    // 16 entries: one workload key may hold 16/64, rounded up to 1.
    set_proof_options(b, 1, 30, 16, WID_RESULT_OK);
    let v = build(b);
    // Bearer tokens are refused outright, and explain says where.
    expect(verify(v, &bearer), WID_RESULT_PROOF_REQUIRED);
    let x = explain_at(v, bearer.as_bytes(), NOW);
    assert_eq!(x["code"], "WID_RESULT_PROOF_REQUIRED", "{x}");
    assert_eq!(x["result"], WID_RESULT_PROOF_REQUIRED, "{x}");
    assert_eq!(
        x["steps"].as_array().unwrap().last().unwrap()["name"],
        "structure"
    );
    // A proof valid for 200 s is more than the 30 s allowed (and the 60 s leeway).
    let long = prove(key, &wit, 200);
    expect(verify_proof(v, &wit, &long), WID_RESULT_PROOF_INVALID);
    // One within it passes; the key's share of the replay cache is then
    // full, so its next proof is refused.
    let short = prove(key, &wit, 20);
    expect(verify_proof(v, &wit, &short), WID_RESULT_OK);
    let next = prove(key, &wit, 20);
    expect(verify_proof(v, &wit, &next), WID_RESULT_PROOF_REPLAYED);
    // The default verifier from the same builder, reset: takes both.
    set_proof_options(b, 0, 300, 100_000, WID_RESULT_OK);
    let v2 = build(b);
    expect(verify(v2, &bearer), WID_RESULT_OK);
    expect(verify_proof(v2, &wit, &long), WID_RESULT_OK);
    expect(verify_proof(v2, &wit, &next), WID_RESULT_OK);
    unsafe { free!(v, v2, b, key, kr) };
}

// ---- Explain and stats.

#[test]
fn explain_gives_the_steps_and_the_verdict() {
    let (kr, token, b, v) = live_world();

    let ok = explain_at(v, token.as_bytes(), NOW);
    assert_eq!(ok["accepted"], true, "{ok}");
    assert_eq!(ok["code"], serde_json::Value::Null);
    assert_eq!(ok["result"], 0);
    let names: Vec<&str> = ok["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "length",
            "structure",
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
        ok["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["passed"] == true)
    );

    let late = explain_at(v, token.as_bytes(), NOW + 7200);
    assert_eq!(late["accepted"], false);
    assert_eq!(late["code"], "WID_RESULT_EXPIRED");
    assert_eq!(late["result"], WID_RESULT_EXPIRED);
    let last = late["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["name"], "times");
    assert_eq!(last["passed"], false);
    assert!(last["detail"].as_str().unwrap().contains("exp"), "{last}");

    // The same object `Explanation::to_json` gives (what `wid inspect
    // --json` prints), plus the number.
    let store = std::sync::Arc::new(workload_identity::MemoryStore::new());
    let x = {
        // A keyring with the same key, and no allocation: the allocation
        // step fails in both.
        let rust_kr = workload_identity::Keyring::new();
        let key = workload_identity::RootKey::new(
            workload_identity::KeyId::new("k1").unwrap(),
            workload_identity::KeyMaterial::from_slice(&[9u8; 32]).unwrap(),
            workload_identity::KeyDerivation::HkdfV1,
            workload_identity::KeyState::Active,
            0,
        );
        rust_kr.insert(key).unwrap();
        workload_identity::Verifier::builder(
            rust_kr,
            store,
            workload_identity::Audience::new(AUD).unwrap(),
        )
        .build()
        .explain(&token, NOW)
    };
    let bm = builder(kr, &MISSING);
    let vm = build(bm);
    let mut from_c = explain_at(vm, token.as_bytes(), NOW);
    assert_eq!(from_c["result"], WID_RESULT_ALLOCATION_NOT_FOUND);
    from_c.as_object_mut().unwrap().remove("result");
    let from_rust: serde_json::Value = serde_json::from_str(&x.to_json()).unwrap();
    assert_eq!(from_c, from_rust);

    // Explain does not count in the stats (nor fill the cache).
    let s = stats(v);
    assert_eq!(s["accepted"], 0, "{s}");
    assert_eq!(s["rejected"], 0, "{s}");

    // Over the cap: the length step alone, the token unread (a length far
    // past the buffer is never dereferenced).
    let over = unsafe {
        let mut out = empty();
        expect(
            wid_explain(v, token.as_ptr().cast(), usize::MAX, NOW, &mut out),
            WID_RESULT_OK,
        );
        json(&mut out)
    };
    assert_eq!(over["code"], "WID_RESULT_MALFORMED_TOKEN", "{over}");
    assert_eq!(over["steps"].as_array().unwrap().len(), 1);
    assert_eq!(over["steps"][0]["name"], "length");
    assert!(
        over["steps"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("8192")
    );

    // Garbage: explained (structure), not an error.
    let bad = explain_at(v, b"not.a.token", NOW);
    assert_eq!(bad["code"], "WID_RESULT_MALFORMED_TOKEN");
    assert_eq!(bad["steps"].as_array().unwrap().len(), 2);
    // Empty: (NULL, 0) is an empty token, explained.
    let mut out = empty();
    expect(
        unsafe { wid_explain(v, null(), 0, NOW, &mut out) },
        WID_RESULT_OK,
    );
    assert_eq!(json(&mut out)["accepted"], false);

    // Failures write nothing.
    let mut out = sentinel();
    unsafe {
        expect(
            wid_explain(v, b"\xff\xfe".as_ptr().cast(), 2, NOW, &mut out),
            WID_RESULT_MALFORMED_TOKEN,
        );
        error_says("UTF-8");
        expect(
            wid_explain(null(), token.as_ptr().cast(), token.len(), NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_explain(v, null(), 5, NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_explain(v, token.as_ptr().cast(), token.len(), NOW, null_mut()),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_explain(kr.cast(), token.as_ptr().cast(), token.len(), NOW, &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
        expect(
            wid_explain(b.cast(), token.as_ptr().cast(), token.len(), NOW, &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
    }
    assert!(is_sentinel(&out));

    unsafe { free!(v, vm, b, bm, kr) };
}

#[test]
fn stats_count_what_the_verifier_did() {
    let (kr, token, b, v) = live_world();
    assert_eq!(
        stats(v),
        serde_json::json!({"accepted":0,"rejected":0,"consistent_fallbacks":0,
            "key_waits":0,"cache_hits":0,"cache_entries":0})
    );
    expect(verify(v, &token), WID_RESULT_OK);
    expect(verify(v, &token), WID_RESULT_OK);
    expect(verify(v, "x.y.z"), WID_RESULT_MALFORMED_TOKEN);
    let s = stats(v);
    assert_eq!(s["accepted"], 2, "{s}");
    assert_eq!(s["rejected"], 1, "{s}");
    // Missing, then asked consistently.
    let bm = builder(kr, &MISSING);
    let vm = build(bm);
    expect(verify(vm, &token), WID_RESULT_ALLOCATION_NOT_FOUND);
    assert_eq!(stats(vm)["consistent_fallbacks"], 1);

    let mut out = sentinel();
    let (na, bad) = (WID_RESULT_NULL_ARGUMENT, WID_RESULT_INVALID_ARGUMENT);
    unsafe {
        expect(wid_verifier_stats(null(), &mut out), na);
        expect(wid_verifier_stats(v, null_mut()), na);
        expect(wid_verifier_stats(kr.cast(), &mut out), bad);
        expect(wid_verifier_stats(b.cast(), &mut out), bad);
    }
    assert!(is_sentinel(&out));
    unsafe { free!(v, vm, b, bm, kr) };
}

#[test]
fn wrong_handle_types_are_refused_and_frees_ignored() {
    let (kr, token, b, v) = live_world();
    let bad = WID_RESULT_INVALID_ARGUMENT;
    let kr_as_b: *mut wid_verifier_builder = kr.cast();
    let v_as_b: *mut wid_verifier_builder = v.cast();
    let b_as_v: *const wid_verifier = b.cast();
    let mut out_v = std::ptr::dangling_mut::<wid_verifier>();
    let values = Settings {
        leeway_secs: 1,
        key_wait_ms: 1,
        max_token_bytes: 1,
        require_exp: 1,
        cache_entries: 1,
        issuer: None,
        require_proof: 1,
        max_proof_lifetime_secs: 1,
        proof_replay_capacity: 16,
    };
    unsafe {
        for wrong in [kr_as_b, v_as_b] {
            set_all(wrong, &values, bad);
            expect(wid_verifier_builder_build(wrong, &mut out_v), bad);
            wid_verifier_builder_free(wrong);
        }
        assert_eq!(out_v, std::ptr::dangling_mut());
        expect(
            wid_verify(b_as_v, token.as_ptr().cast(), token.len(), NOW, null_mut()),
            bad,
        );
        wid_verifier_free(b_as_v);
    }
    // All three still work.
    expect(verify(v, &token), WID_RESULT_OK);
    let v2 = build(b);
    expect(verify(v2, &token), WID_RESULT_OK);
    unsafe {
        wid_verifier_free(v);
        wid_verifier_free(v2);
        wid_verifier_builder_free(b);
        wid_verifier_builder_free(null_mut());
        wid_keyring_free(kr);
    }
}

#[test]
fn a_builder_and_its_verifiers_are_shared_by_threads() {
    let kr = k1();
    let token = issue(kr, "");
    let b = builder(kr, &LIVE) as usize;
    let v = build(b as *const _) as usize;
    std::thread::scope(|s| {
        for i in 0..4 {
            let token = token.as_str();
            s.spawn(move || {
                for _ in 0..50 {
                    let b = b as *mut wid_verifier_builder;
                    expect(
                        unsafe { wid_verifier_builder_set_leeway_secs(b, i) },
                        WID_RESULT_OK,
                    );
                    let built = build(b);
                    expect(verify(built, token), WID_RESULT_OK);
                    expect(verify(v as *const _, token), WID_RESULT_OK);
                    unsafe { wid_verifier_free(built) };
                }
            });
        }
    });
    assert_eq!(stats(v as *const _)["accepted"], 200);
    unsafe {
        wid_verifier_free(v as *const _);
        wid_verifier_builder_free(b as *mut _);
        wid_keyring_free(kr);
    }
}
