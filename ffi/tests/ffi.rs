//! The C ABI through its Rust `extern "C"` definitions: result codes, NULL and
//! UTF-8 checks, outputs written only on success, the lookup callback failing
//! closed, and concurrent use. (`bindings/c/test.c` drives every function from C
//! under valgrind; this keeps the essentials in `cargo test`.)

mod common;

use std::ffi::{CStr, c_char, c_void};
use std::ptr::{null, null_mut};

use workload_identity_ffi::*;

const ALLOC: &str = common::ALLOC_ID;
const NOW: i64 = 1_700_000_000;

use common::ffi_text::{last_error, name};

/// userdata: a pointer to [stale_state, consistent_state, rc].
unsafe extern "C" fn lookup(
    userdata: *mut c_void,
    id: *const u8,
    len: usize,
    consistency: u32,
    out: *mut u32,
) -> wid_result {
    let cfg = unsafe { &*(userdata as *const [u32; 3]) };
    let id = unsafe { std::slice::from_raw_parts(id, len) };
    if cfg[2] != WID_RESULT_OK {
        return cfg[2];
    }
    let state = if id != ALLOC.as_bytes() {
        WID_ALLOC_MISSING
    } else {
        cfg[consistency as usize]
    };
    if state != u32::MAX - 1 {
        unsafe { *out = state };
    }
    WID_RESULT_OK
}

struct Fixture {
    kr: *mut wid_keyring,
    token: String,
}

fn fixture() -> Fixture {
    let mut kr = null_mut();
    assert_eq!(unsafe { wid_keyring_new(&mut kr) }, WID_RESULT_OK);
    let m = [9u8; 32];
    let rc = unsafe {
        wid_keyring_insert(
            kr,
            "k1".as_ptr().cast(),
            2,
            m.as_ptr(),
            32,
            WID_KEY_DERIVATION_HKDF_V1,
            WID_KEY_STATE_ACTIVE,
            0,
        )
    };
    assert_eq!(rc, WID_RESULT_OK, "{}", last_error());
    let req = common::go_vector("issue_request_task.msgpack");
    let mut out = wid_bytes {
        data: null_mut(),
        len: 0,
    };
    let rc = unsafe { wid_issue(kr, req.as_ptr(), req.len(), NOW, &mut out) };
    assert_eq!(rc, WID_RESULT_OK, "{}", last_error());
    let token = unsafe {
        std::str::from_utf8(std::slice::from_raw_parts(out.data, out.len))
            .unwrap()
            .to_string()
    };
    unsafe { wid_bytes_free(&mut out) };
    Fixture { kr, token }
}

fn verifier(kr: *const wid_keyring, cfg: &[u32; 3]) -> *mut wid_verifier {
    let mut v = null_mut();
    let opts = wid_verifier_options {
        leeway_secs: 0,
        key_wait_ms: -1,
        max_token_bytes: 0,
        require_exp: 0,
        cache_entries: 0,
        issuer: null(),
        issuer_len: 0,
    };
    let rc = unsafe {
        wid_verifier_new_with_options(
            kr,
            "vault.io".as_ptr().cast(),
            8,
            &opts,
            Some(lookup),
            cfg as *const _ as *mut c_void,
            &mut v,
        )
    };
    assert_eq!(rc, WID_RESULT_OK, "{}", last_error());
    v
}

fn verify(v: *const wid_verifier, token: &str) -> wid_result {
    unsafe { wid_verify(v, token.as_ptr().cast(), token.len(), NOW, null_mut()) }
}

#[test]
fn issue_and_verify_through_the_abi() {
    let f = fixture();
    let cfg = [WID_ALLOC_LIVE, WID_ALLOC_LIVE, WID_RESULT_OK];
    let v = verifier(f.kr, &cfg);
    let mut claims = wid_bytes {
        data: null_mut(),
        len: 0,
    };
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
    unsafe { wid_verifier_free(v) };
    unsafe { wid_keyring_free(f.kr) };
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
            assert!(
                last_error().contains("WID_RESULT_IO_ERROR"),
                "{}",
                last_error()
            );
        }
        unsafe { wid_verifier_free(v) };
    }
    unsafe { wid_keyring_free(f.kr) };
}

#[test]
fn null_and_bad_arguments_are_codes_and_outputs_stay_untouched() {
    let f = fixture();
    let sentinel = || wid_bytes {
        data: std::ptr::dangling_mut::<u8>(),
        len: 12345,
    };
    let mut out = sentinel();
    unsafe {
        assert_eq!(
            wid_keyring_rotate(null(), NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT
        );
        // out_key_id only reports: NULL is fine (a key is still made).
        let before = {
            let mut n = wid_bytes {
                data: null_mut(),
                len: 0,
            };
            assert_eq!(wid_keyring_jwks(f.kr, &mut n), WID_RESULT_OK);
            let keys = std::slice::from_raw_parts(n.data, n.len).to_vec();
            wid_bytes_free(&mut n);
            keys
        };
        assert_eq!(wid_keyring_rotate(f.kr, NOW, null_mut()), WID_RESULT_OK);
        let mut after = wid_bytes {
            data: null_mut(),
            len: 0,
        };
        assert_eq!(wid_keyring_jwks(f.kr, &mut after), WID_RESULT_OK);
        assert!(
            after.len > before.len(),
            "rotate with a NULL out_key_id made a key"
        );
        wid_bytes_free(&mut after);
        assert_eq!(wid_keyring_jwks(f.kr, null_mut()), WID_RESULT_NULL_ARGUMENT);
        assert_eq!(wid_keyring_new(null_mut()), WID_RESULT_NULL_ARGUMENT);
        let bad_utf8 = [0xffu8, 0xfe];
        let m = [1u8; 32];
        let rc = wid_keyring_insert(f.kr, bad_utf8.as_ptr().cast(), 2, m.as_ptr(), 32, 1, 2, 0);
        assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT);
        assert!(last_error().contains("not valid UTF-8"), "{}", last_error());
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
        let req = common::go_vector("issue_request_task.msgpack");
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
            "vault.io".as_ptr().cast(),
            8,
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
    let cfg = [WID_ALLOC_LIVE, WID_ALLOC_LIVE, WID_RESULT_OK];
    let v = verifier(f.kr, &cfg);
    let mut id = wid_bytes {
        data: null_mut(),
        len: 0,
    };
    assert_eq!(
        unsafe { wid_keyring_rotate(f.kr, NOW, &mut id) },
        WID_RESULT_OK
    );
    assert_eq!(id.len, 36);
    unsafe { wid_bytes_free(&mut id) };
    let req = common::go_vector("issue_request_task.msgpack");
    let mut out = wid_bytes {
        data: null_mut(),
        len: 0,
    };
    assert_eq!(
        unsafe { wid_issue(f.kr, req.as_ptr(), req.len(), NOW, &mut out) },
        WID_RESULT_OK
    );
    let fresh = unsafe {
        std::str::from_utf8(std::slice::from_raw_parts(out.data, out.len))
            .unwrap()
            .to_string()
    };
    unsafe { wid_bytes_free(&mut out) };
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
    let mut results = [u32::MAX; 2];
    let rc = unsafe {
        wid_verify_batch(
            v,
            tokens.as_ptr(),
            lens.as_ptr(),
            2,
            NOW,
            results.as_mut_ptr(),
        )
    };
    assert_eq!(rc, WID_RESULT_OK);
    assert_eq!(results, [WID_RESULT_OK, WID_RESULT_MALFORMED_TOKEN]);
    unsafe { wid_verifier_free(v) };
}

fn bytes_string(b: &mut wid_bytes) -> String {
    let s = unsafe { std::str::from_utf8(std::slice::from_raw_parts(b.data, b.len)) }
        .unwrap()
        .to_string();
    unsafe { wid_bytes_free(b) };
    s
}

fn empty() -> wid_bytes {
    wid_bytes {
        data: null_mut(),
        len: 0,
    }
}

#[test]
fn every_algorithm_through_the_abi_and_its_argument_checks() {
    let mut kr = null_mut();
    assert_eq!(unsafe { wid_keyring_new(&mut kr) }, WID_RESULT_OK);
    let req = common::go_vector("issue_request_task.msgpack");
    let cfg = [WID_ALLOC_LIVE, WID_ALLOC_LIVE, WID_RESULT_OK];
    let v = verifier(kr, &cfg);
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
    assert!(
        last_error().contains("no active ES256 key"),
        "{}",
        last_error()
    );

    // Rotate in ES256 (key ID reported) and RS256 (output NULL allowed).
    let mut kid = empty();
    let rc = unsafe { wid_keyring_rotate_alg(kr, WID_ALG_ES256, NOW, &mut kid) };
    assert_eq!(rc, WID_RESULT_OK, "{}", last_error());
    let es_kid = bytes_string(&mut kid);
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
        let token = bytes_string(&mut out);
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
        assert!(
            last_error().contains("not a WID_ALG_* value"),
            "{}",
            last_error()
        );
        let rc = unsafe { wid_keyring_rotate_alg(kr, bad, NOW, null_mut()) };
        assert_eq!(rc, WID_RESULT_INVALID_ARGUMENT);
        let m = [1u8; 32];
        let rc = unsafe {
            wid_keyring_insert_alg(
                kr,
                bad,
                "x".as_ptr().cast(),
                1,
                m.as_ptr(),
                32,
                WID_KEY_DERIVATION_HKDF_V1,
                WID_KEY_STATE_INACTIVE,
                0,
            )
        };
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
        let rc = unsafe {
            wid_keyring_insert_alg(
                kr,
                alg,
                "pair".as_ptr().cast(),
                4,
                material.as_ptr(),
                material.len(),
                derivation,
                WID_KEY_STATE_INACTIVE,
                0,
            )
        };
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
    let mut json = empty();
    assert_eq!(unsafe { wid_keyring_jwks(kr, &mut json) }, WID_RESULT_OK);
    let jwks: serde_json::Value = serde_json::from_str(&bytes_string(&mut json)).unwrap();
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

    unsafe { wid_verifier_free(v) };
    unsafe { wid_keyring_free(kr) };
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
    let cfg = [WID_ALLOC_LIVE, WID_ALLOC_LIVE, WID_RESULT_OK];
    for entries in [usize::MAX, usize::MAX / 2 + 1, 1 << 40] {
        let mut v = null_mut();
        let opts = wid_verifier_options {
            leeway_secs: 0,
            key_wait_ms: -1,
            max_token_bytes: 0,
            require_exp: 0,
            cache_entries: entries,
            issuer: null(),
            issuer_len: 0,
        };
        let rc = unsafe {
            wid_verifier_new_with_options(
                f.kr,
                "vault.io".as_ptr().cast(),
                8,
                &opts,
                Some(lookup),
                &cfg as *const _ as *mut c_void,
                &mut v,
            )
        };
        assert_eq!(rc, WID_RESULT_OK, "{}", last_error());
        for _ in 0..3 {
            assert_eq!(verify(v, &f.token), WID_RESULT_OK, "{}", last_error());
        }
        unsafe { wid_verifier_free(v) };
    }
    unsafe { wid_keyring_free(f.kr) };
}
