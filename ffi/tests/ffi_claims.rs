//! Claims without a JSON parser (`wid_claims`): a verified token's strings,
//! times, audiences and identity name through the C ABI, absent and
//! mistyped claims refused with what was wrong, NULLs, outputs untouched on
//! failure. (`bindings/c/test.c` drives the same functions from C.)

mod common;

use std::ptr::{null, null_mut};

use common::bytes::empty;
use common::ffi_text::{error_says, last_error};
use common::identity::{AUD, NOW};
use common::keys::keyring;
use common::live::ffi_live;
use common::result::expect;
use common::strings::{nul_text, s};
use workload_identity::codec;
use workload_identity_ffi::*;

fn get(c: *const wid_claims, key: &str) -> Result<String, String> {
    let (k, kl) = s(key);
    let (mut p, mut n) = (null(), 777usize);
    let rc = unsafe { wid_claims_str(c, k, kl, &mut p, &mut n) };
    if rc == WID_RESULT_OK {
        Ok(nul_text(p, n).to_string())
    } else {
        assert!(p.is_null() && n == 777, "not written on failure");
        Err(last_error())
    }
}

/// A verified task token's claims, as a handle.
fn verified() -> (*mut wid_keyring, *mut wid_verifier, *mut wid_claims) {
    let kr = keyring("k1", 5);
    let req = codec::encode(&common::issue_request_task()).unwrap();
    let mut token = empty();
    expect(
        unsafe { wid_issue(kr, req.as_ptr(), req.len(), NOW, &mut token) },
        WID_RESULT_OK,
    );
    let mut v = null_mut();
    let (a, al) = s(AUD);
    expect(
        unsafe { wid_verifier_new(kr, a, al, 0, Some(ffi_live), null_mut(), &mut v) },
        WID_RESULT_OK,
    );
    let mut c = null_mut();
    expect(
        unsafe { wid_verify_claims(v, token.data.cast(), token.len, NOW + 1, &mut c) },
        WID_RESULT_OK,
    );
    // A token that does not verify gives no handle, with wid_verify's code.
    let mut none = null_mut();
    expect(
        unsafe { wid_verify_claims(v, token.data.cast(), token.len, NOW + 10 * 3600, &mut none) },
        WID_RESULT_EXPIRED,
    );
    assert!(none.is_null());
    unsafe { wid_bytes_free(&mut token) };
    (kr, v, c)
}

#[test]
fn a_verified_tokens_claims_without_json() {
    let (kr, v, c) = verified();
    assert_eq!(get(c, WID_CLAIM_ALLOCATION_ID).unwrap(), common::ALLOC_ID);
    assert_eq!(get(c, WID_CLAIM_NAMESPACE).unwrap(), "default");
    assert_eq!(get(c, WID_CLAIM_JOB_ID).unwrap(), "web");
    assert_eq!(get(c, WID_CLAIM_TASK).unwrap(), "server");
    let e = get(c, WID_CLAIM_SERVICE).unwrap_err();
    assert!(e.contains("\"nomad_service\" is not in the token"), "{e}");
    let e = get(c, WID_CLAIM_ISSUED_AT).unwrap_err();
    assert!(e.contains("\"iat\" is a number, not a string"), "{e}");
    let mut t = -1;
    let (k, kl) = s(WID_CLAIM_ISSUED_AT);
    expect(unsafe { wid_claims_i64(c, k, kl, &mut t) }, WID_RESULT_OK);
    assert_eq!(t, NOW);
    let (k, kl) = s(WID_CLAIM_EXPIRES);
    expect(unsafe { wid_claims_i64(c, k, kl, &mut t) }, WID_RESULT_OK);
    assert_eq!(t, NOW + 3600);
    let (k, kl) = s(WID_CLAIM_TASK);
    let mut untouched = 5;
    expect(
        unsafe { wid_claims_i64(c, k, kl, &mut untouched) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    assert_eq!(untouched, 5);
    let mut n = 0;
    expect(
        unsafe { wid_claims_audience_count(c, &mut n) },
        WID_RESULT_OK,
    );
    let auds: Vec<String> = (0..n)
        .map(|i| {
            let (mut p, mut l) = (null(), 0);
            expect(
                unsafe { wid_claims_audience(c, i, &mut p, &mut l) },
                WID_RESULT_OK,
            );
            nul_text(p, l).to_string()
        })
        .collect();
    assert_eq!(auds, ["vault.io", "consul.io"]);
    let (mut p, mut l) = (null(), 0);
    expect(
        unsafe { wid_claims_audience(c, n, &mut p, &mut l) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        unsafe { wid_claims_identity_name(c, &mut p, &mut l) },
        WID_RESULT_OK,
    );
    assert_eq!(nul_text(p, l), "vault_default");
    // NULLs and other handles.
    expect(
        unsafe { wid_claims_identity_name(null(), &mut p, &mut l) },
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        unsafe { wid_claims_str(c, k, kl, null_mut(), &mut l) },
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        unsafe { wid_claims_audience_count(kr.cast(), &mut n) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    unsafe {
        wid_claims_free(c);
        wid_claims_free(null_mut());
        wid_verifier_free(v);
        wid_keyring_free(kr);
    }
}

#[test]
fn claims_json_from_elsewhere_and_subjects_without_an_identity() {
    let json = br#"{"nomad_namespace":"d","nomad_job_id":"w","nomad_allocation_id":"a","sub":"spiffe://example.org/ns/d/w","aud":"one","exp":5,"jti":"j","cnf":{"jwk":{}}}"#;
    let mut c = null_mut();
    expect(
        unsafe { wid_claims_parse(json.as_ptr(), json.len(), &mut c) },
        WID_RESULT_OK,
    );
    assert_eq!(
        get(c, WID_CLAIM_SUBJECT).unwrap(),
        "spiffe://example.org/ns/d/w"
    );
    let mut n = 0;
    expect(
        unsafe { wid_claims_audience_count(c, &mut n) },
        WID_RESULT_OK,
    );
    assert_eq!(n, 1, "a single aud string is one audience");
    let (mut p, mut l) = (null(), 0);
    expect(
        unsafe { wid_claims_identity_name(c, &mut p, &mut l) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("names no identity");
    assert!(p.is_null());
    unsafe { wid_claims_free(c) };
    for bad in [&b"[1,2]"[..], b"{", b""] {
        let mut c = null_mut();
        expect(
            unsafe { wid_claims_parse(bad.as_ptr(), bad.len(), &mut c) },
            WID_RESULT_INVALID_ARGUMENT,
        );
        assert!(c.is_null());
    }
    expect(
        unsafe { wid_claims_parse(null(), 3, &mut c) },
        WID_RESULT_NULL_ARGUMENT,
    );
}
