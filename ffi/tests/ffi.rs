//! The C ABI through its Rust `extern "C"` definitions: result codes, NULL and
//! UTF-8 checks, outputs written only on success, the lookup callback failing
//! closed, and concurrent use. (`bindings/c/test.c` drives every function from C
//! under valgrind; this keeps the essentials in `cargo test`.)

mod common;

use std::ffi::{CStr, c_char, c_void};
use std::ptr::{null, null_mut};

use common::bytes::{empty, sentinel, take};
use common::ffi_text::{error_says, last_error, name};
use common::handles::free;
use common::identity::{AUD, NOW};
use common::keys::{jwks, keyring, new_keyring};
use common::lookup::by_consistency as lookup;
use common::request::{issue, task_vector};
use common::strings::s;
use common::verifier::{verify, verify_batch};
use workload_identity_ffi::*;

const ALLOC: &str = common::ALLOC_ID;

/// The lookup's `cfg` for an allocation live at both consistencies.
static LIVE: [u32; 3] = [WID_ALLOC_LIVE, WID_ALLOC_LIVE, WID_RESULT_OK];

struct Fixture {
    kr: *mut wid_keyring,
    token: String,
}

/// A keyring with an active EdDSA key "k1", and a token it issued.
fn fixture() -> Fixture {
    let kr = keyring("k1", 9);
    let token = issue(kr);
    Fixture { kr, token }
}

/// A verifier for "vault.io" (no leeway, never waiting for keys, no cache)
/// whose lookup answers as `cfg` says.
fn verifier(kr: *const wid_keyring, cfg: &[u32; 3]) -> *mut wid_verifier {
    verifier_with_cache(kr, cfg, 0)
}

/// [`verifier`] with a cache of `cache_entries`.
fn verifier_with_cache(
    kr: *const wid_keyring,
    cfg: &[u32; 3],
    cache_entries: usize,
) -> *mut wid_verifier {
    let mut v = null_mut();
    let opts = wid_verifier_options {
        leeway_secs: 0,
        key_wait_ms: -1,
        max_token_bytes: 0,
        require_exp: 0,
        cache_entries,
        issuer: null(),
        issuer_len: 0,
    };
    let ((a, al), ud) = (s(AUD), cfg as *const _ as *mut c_void);
    let rc = unsafe { wid_verifier_new_with_options(kr, a, al, &opts, Some(lookup), ud, &mut v) };
    assert_eq!(rc, WID_RESULT_OK, "{}", last_error());
    v
}

#[test]
fn issue_and_verify_through_the_abi() {
    let f = fixture();
    let v = verifier(f.kr, &LIVE);
    let mut claims = empty();
    let rc = unsafe { wid_verify(v, f.token.as_ptr().cast(), f.token.len(), NOW, &mut claims) };
    assert_eq!(rc, WID_RESULT_OK, "{}", last_error());
    let json = unsafe { CStr::from_ptr(claims.data.cast()) }
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(json.len(), claims.len);
    assert!(json.contains(ALLOC), "{json}");
    unsafe { wid_bytes_free(&mut claims) };
    assert_eq!(last_error(), "", "success clears the detail");
    unsafe { free!(v, f.kr) };
}

#[test]
fn the_callback_fails_closed_and_the_fallback_is_consistent() {
    let f = fixture();
    let cases = [
        (
            [WID_ALLOC_LIVE, WID_ALLOC_LIVE, WID_RESULT_OK],
            WID_RESULT_OK,
        ),
        (
            [WID_ALLOC_MISSING, WID_ALLOC_LIVE, WID_RESULT_OK],
            WID_RESULT_OK,
        ),
        (
            [WID_ALLOC_MISSING, WID_ALLOC_MISSING, WID_RESULT_OK],
            WID_RESULT_ALLOCATION_NOT_FOUND,
        ),
        (
            [WID_ALLOC_TERMINAL, WID_ALLOC_LIVE, WID_RESULT_OK],
            WID_RESULT_ALLOCATION_TERMINAL,
        ),
        (
            [WID_ALLOC_MISSING, WID_ALLOC_TERMINAL, WID_RESULT_OK],
            WID_RESULT_ALLOCATION_TERMINAL,
        ),
        ([7, 7, WID_RESULT_OK], WID_RESULT_STORE_UNAVAILABLE),
        (
            [u32::MAX - 1, 0, WID_RESULT_OK],
            WID_RESULT_STORE_UNAVAILABLE,
        ),
        (
            [WID_ALLOC_LIVE, WID_ALLOC_LIVE, WID_RESULT_IO_ERROR],
            WID_RESULT_STORE_UNAVAILABLE,
        ),
        (
            [WID_ALLOC_LIVE, WID_ALLOC_LIVE, 999],
            WID_RESULT_STORE_UNAVAILABLE,
        ),
    ];
    for (cfg, want) in cases {
        let v = verifier(f.kr, &cfg);
        let rc = verify(v, &f.token);
        assert_eq!(name(rc), name(want), "{cfg:?}: {}", last_error());
        if cfg[2] == WID_RESULT_IO_ERROR {
            error_says("WID_RESULT_IO_ERROR");
        }
        unsafe { wid_verifier_free(v) };
    }
    unsafe { wid_keyring_free(f.kr) };
}

#[test]
fn null_and_bad_arguments_are_codes_and_outputs_stay_untouched() {
    let f = fixture();
    let mut out = sentinel();
    unsafe {
        assert_eq!(
            wid_keyring_rotate(null(), NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT
        );
        // out_key_id only reports: NULL is fine (a key is still made).
        let before = jwks(f.kr);
        assert_eq!(wid_keyring_rotate(f.kr, NOW, null_mut()), WID_RESULT_OK);
        let after = jwks(f.kr);
        assert!(
            after.len() > before.len(),
            "rotate with a NULL out_key_id made a key"
        );
        assert_eq!(wid_keyring_jwks(f.kr, null_mut()), WID_RESULT_NULL_ARGUMENT);
        assert_eq!(wid_keyring_new(null_mut()), WID_RESULT_NULL_ARGUMENT);
        let bad_utf8 = [0xffu8, 0xfe];
        let m = [1u8; 32];
        let rc = wid_keyring_insert(f.kr, bad_utf8.as_ptr().cast(), 2, m.as_ptr(), 32, 1, 2, 0);
        assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT);
        error_says("not valid UTF-8");
        for (len, deriv, state) in [
            (31, 1, 2),
            (33, 1, 2),
            (32, 0, 2),
            (32, 3, 2),
            (32, 1, 0),
            (32, 1, 5),
        ] {
            let rc = wid_keyring_insert(
                f.kr,
                "k2".as_ptr().cast(),
                2,
                m.as_ptr(),
                len,
                deriv,
                state,
                0,
            );
            assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT, "{len} {deriv} {state}");
        }
        let rc = wid_keyring_insert(f.kr, "k1".as_ptr().cast(), 2, m.as_ptr(), 32, 1, 2, 0);
        assert_eq!(rc, WID_RESULT_DUPLICATE_KEY);
        // Truncated msgpack at every length: a decode error, the output untouched.
        let req = task_vector();
        for cut in 0..req.len() {
            let rc = wid_issue(f.kr, req.as_ptr(), cut, NOW, &mut out);
            assert_eq!(rc, WID_RESULT_DECODE_ERROR, "cut {cut}");
        }
        // A huge length is refused before any read.
        let rc = wid_issue(f.kr, req.as_ptr(), usize::MAX, NOW, &mut out);
        assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT);
        assert_eq!(
            (out.data as usize, out.len),
            (1, 12345),
            "outputs only on success"
        );
        let mut handle = 8 as *mut wid_keyring;
        assert_eq!(
            wid_keyring_load("/nonexistent".as_ptr().cast(), 12, &mut handle),
            WID_RESULT_IO_ERROR
        );
        assert_eq!(handle as usize, 8);
        // A verifier handle where a keyring is expected.
        let cfg = [1, 1, 0];
        let v = verifier(f.kr, &cfg);
        assert_eq!(
            wid_keyring_jwks(v.cast(), &mut out),
            WID_RESULT_INVALID_ARGUMENT
        );
        let bad_token = [0xffu8; 10];
        assert_eq!(
            wid_verify(v, bad_token.as_ptr().cast(), 10, NOW, null_mut()),
            WID_RESULT_MALFORMED_TOKEN
        );
        assert_eq!(
            wid_verify(v, bad_token.as_ptr().cast(), usize::MAX, NOW, null_mut()),
            WID_RESULT_MALFORMED_TOKEN
        );
        assert_eq!(
            wid_verify(null(), null(), 0, NOW, null_mut()),
            WID_RESULT_NULL_ARGUMENT
        );
        assert_eq!(
            wid_verify(v, null(), 0, NOW, null_mut()),
            WID_RESULT_MALFORMED_TOKEN
        );
        assert_eq!(
            wid_verify(v, null(), 5, NOW, null_mut()),
            WID_RESULT_NULL_ARGUMENT
        );
        let mut none = null_mut();
        let rc = wid_verifier_new(
            f.kr,
            AUD.as_ptr().cast(),
            AUD.len(),
            60,
            None,
            null_mut(),
            &mut none,
        );
        assert_eq!(rc, WID_RESULT_NULL_ARGUMENT);
        let rc = wid_verifier_new(f.kr, null(), 0, 60, Some(lookup), null_mut(), &mut none);
        assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT, "an empty audience");
        let rc = wid_verifier_new(
            f.kr,
            "a".as_ptr().cast(),
            1,
            -1,
            Some(lookup),
            null_mut(),
            &mut none,
        );
        assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT, "a negative leeway");
        assert!(none.is_null());
        wid_verifier_free(v);
        wid_keyring_free(null());
        wid_verifier_free(null());
        wid_bytes_free(null_mut());
        wid_keyring_free(f.kr);
    }
}

#[test]
fn a_verifier_sees_later_rotations_and_many_threads_verify_at_once() {
    let f = fixture();
    let v = verifier(f.kr, &LIVE);
    let mut id = empty();
    assert_eq!(
        unsafe { wid_keyring_rotate(f.kr, NOW, &mut id) },
        WID_RESULT_OK
    );
    assert_eq!(take(&mut id).len(), 36);
    let fresh = issue(f.kr);
    assert_eq!(verify(v, &fresh), WID_RESULT_OK);
    assert_eq!(
        verify(v, &f.token),
        WID_RESULT_OK,
        "the old key is inactive, still verifying"
    );
    // The keyring handle can go; the verifier keeps its own reference.
    unsafe { wid_keyring_free(f.kr) };
    let v_addr = v as usize;
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let token = fresh.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    assert_eq!(verify(v_addr as *const wid_verifier, &token), WID_RESULT_OK);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let tokens = [fresh.as_ptr().cast::<c_char>(), "x.y.z".as_ptr().cast()];
    let lens = [fresh.len(), 5];
    let results = verify_batch(v, &tokens, &lens);
    assert_eq!(results, [WID_RESULT_OK, WID_RESULT_MALFORMED_TOKEN]);
    unsafe { wid_verifier_free(v) };
}

#[test]
fn every_algorithm_through_the_abi_and_its_argument_checks() {
    let kr = new_keyring();
    let req = task_vector();
    let v = verifier(kr, &LIVE);
    // An inactive key of `alg` (`wid_keyring_insert_alg`), created at 0.
    let insert = |alg: u32, kid: &str, material: &[u8], derivation: u32| unsafe {
        wid_keyring_insert_alg(
            kr,
            alg,
            kid.as_ptr().cast(),
            kid.len(),
            material.as_ptr(),
            material.len(),
            derivation,
            WID_KEY_STATE_INACTIVE,
            0,
        )
    };
    let issue = |alg: u32, issuer: &str, out: &mut wid_bytes| unsafe {
        wid_issue_alg(
            kr,
            alg,
            req.as_ptr(),
            req.len(),
            if issuer.is_empty() {
                null()
            } else {
                issuer.as_ptr().cast()
            },
            issuer.len(),
            NOW,
            out,
        )
    };

    // No key of the algorithm yet: NO_ACTIVE_KEY, output untouched.
    let mut out = empty();
    assert_eq!(issue(WID_ALG_ES256, "", &mut out), WID_RESULT_NO_ACTIVE_KEY);
    assert!(out.data.is_null());
    error_says("no active ES256 key");

    // Rotate in ES256 (key ID reported) and RS256 (output NULL allowed).
    let mut kid = empty();
    let rc = unsafe { wid_keyring_rotate_alg(kr, WID_ALG_ES256, NOW, &mut kid) };
    assert_eq!(rc, WID_RESULT_OK, "{}", last_error());
    let es_kid = take(&mut kid);
    assert_eq!(es_kid.len(), 36);
    let rc = unsafe { wid_keyring_rotate_alg(kr, WID_ALG_RS256, NOW, null_mut()) };
    assert_eq!(rc, WID_RESULT_OK, "{}", last_error());

    for (alg, name, issuer) in [
        (WID_ALG_ES256, "ES256", "https://nomad.example.com"),
        (WID_ALG_RS256, "RS256", ""),
    ] {
        let mut out = empty();
        assert_eq!(
            issue(alg, issuer, &mut out),
            WID_RESULT_OK,
            "{}",
            last_error()
        );
        let token = take(&mut out);
        let header = token.split('.').next().unwrap();
        assert!(
            header.starts_with(&base64_of(&format!(r#"{{"alg":"{name}""#))[..12]),
            "{token}"
        );
        assert_eq!(verify(v, &token), WID_RESULT_OK, "{}", last_error());
    }
    // wid_issue still means EdDSA: no EdDSA key here.
    let mut out = empty();
    let rc = unsafe { wid_issue(kr, req.as_ptr(), req.len(), NOW, &mut out) };
    assert_eq!(rc, WID_RESULT_NO_ACTIVE_KEY);

    // Unknown algorithms are INVALID_ARGUMENT everywhere.
    for bad in [0, 4, u32::MAX] {
        let mut out = empty();
        assert_eq!(issue(bad, "", &mut out), WID_RESULT_INVALID_ARGUMENT);
        error_says("not a WID_ALG_* value");
        let rc = unsafe { wid_keyring_rotate_alg(kr, bad, NOW, null_mut()) };
        assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT);
        let rc = insert(bad, "x", &[1u8; 32], WID_KEY_DERIVATION_HKDF_V1);
        assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT);
    }
    // Pairings the contract forbids, and weak RSA keys.
    let m = [1u8; 32];
    let weak = include_bytes!("../../tests/vectors/rsa1024.pk8");
    for (alg, material, derivation, why) in [
        (
            WID_ALG_ES256,
            &m[..],
            WID_KEY_DERIVATION_NOMAD_RAW_SEED,
            "cannot use the nomad-raw-seed",
        ),
        (
            WID_ALG_RS256,
            &m[..],
            WID_KEY_DERIVATION_HKDF_V1,
            "cannot use the hkdf-v1",
        ),
        (
            WID_ALG_EDDSA,
            &m[..],
            WID_KEY_DERIVATION_PKCS8,
            "cannot use the pkcs8",
        ),
        (
            WID_ALG_RS256,
            &weak[..],
            WID_KEY_DERIVATION_PKCS8,
            "too small",
        ),
        (
            WID_ALG_ES256,
            &m[..31],
            WID_KEY_DERIVATION_HKDF_V1,
            "exactly 32 bytes",
        ),
    ] {
        let rc = insert(alg, "pair", material, derivation);
        assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT, "{why}");
        assert!(last_error().contains(why), "{why}: {}", last_error());
    }
    // wid_keyring_insert keeps meaning EdDSA: PKCS#8 is refused there.
    let rc = unsafe {
        wid_keyring_insert(
            kr,
            "k".as_ptr().cast(),
            1,
            m.as_ptr(),
            32,
            WID_KEY_DERIVATION_PKCS8,
            WID_KEY_STATE_INACTIVE,
            0,
        )
    };
    assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT);

    // The JWKS has the EC and RSA entries in the contract's form.
    let jwks: serde_json::Value = serde_json::from_str(&jwks(kr)).unwrap();
    let keys = jwks["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    let ec = keys.iter().find(|k| k["kid"] == es_kid.as_str()).unwrap();
    let names: Vec<&String> = ec.as_object().unwrap().keys().collect();
    assert_eq!(names.len(), 7, "{ec}");
    assert_eq!(
        (&ec["kty"], &ec["crv"], &ec["alg"], &ec["use"]),
        (
            &"EC".into(),
            &"P-256".into(),
            &"ES256".into(),
            &"sig".into()
        )
    );
    let rsa = keys.iter().find(|k| k["kty"] == "RSA").unwrap();
    assert_eq!((&rsa["e"], &rsa["alg"]), (&"AQAB".into(), &"RS256".into()));
    assert_eq!(rsa.as_object().unwrap().len(), 6, "{rsa}");

    unsafe { free!(v, kr) };
}

fn base64_of(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

/// `cache_entries = SIZE_MAX` (and other huge sizes) once overflowed
/// `capacity + 1` (a panic in debug builds, one slot spinning forever in
/// release) or allocated the whole table up front: now it is clamped, and a
/// verifier with it verifies (and re-verifies) tokens.
#[test]
fn a_huge_cache_size_is_clamped_and_works() {
    let f = fixture();
    for entries in [usize::MAX, usize::MAX / 2 + 1, 1 << 40] {
        let v = verifier_with_cache(f.kr, &LIVE, entries);
        for _ in 0..3 {
            assert_eq!(verify(v, &f.token), WID_RESULT_OK, "{}", last_error());
        }
        unsafe { wid_verifier_free(v) };
    }
    unsafe { wid_keyring_free(f.kr) };
}
