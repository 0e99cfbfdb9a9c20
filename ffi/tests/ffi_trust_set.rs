//! The trust set through the C ABI (`ffi/src/trust_set.rs`): issuers by
//! `iss` (with an allocation lookup, and foreign without one) and by trust
//! domain, routing that names the issuer, cross-issuer substitution and
//! unknown issuers refused, refusals that leave the builder unchanged, NULL
//! arguments, and outputs written only on success.

mod common;

use std::ptr::{null, null_mut};

use common::bytes::{empty, take};
use common::ffi_text::error_says;
use common::handles::free;
use common::identity::{AUD, NOW};
use common::keys::keyring;
use common::lookup::sample_live as live;
use common::request::issue_with_issuer as issue;
use common::result::expect;
use workload_identity_ffi::*;

const ALLOC: &str = common::ALLOC_ID;
const EAST: &str = "https://east.example";
const WEST: &str = "https://west.example";

fn add_iss(
    b: *mut wid_trust_set_builder,
    iss: &str,
    kr: *const wid_keyring,
    lookup: wid_alloc_lookup_fn,
) -> wid_result {
    unsafe {
        wid_trust_set_builder_add_iss(
            b,
            iss.as_ptr().cast(),
            iss.len(),
            kr,
            AUD.as_ptr().cast(),
            AUD.len(),
            lookup,
            null_mut(),
        )
    }
}

fn verify(t: *const wid_trust_set, token: &str) -> (wid_result, Option<String>, Option<String>) {
    let (mut claims, mut issuer) = (empty(), empty());
    let rc = unsafe {
        wid_trust_set_verify(
            t,
            token.as_ptr().cast(),
            token.len(),
            NOW,
            &mut claims,
            &mut issuer,
        )
    };
    if rc != WID_RESULT_OK {
        assert!(
            claims.data.is_null() && issuer.data.is_null(),
            "no output on failure"
        );
        return (rc, None, None);
    }
    (rc, Some(take(&mut claims)), Some(take(&mut issuer)))
}

#[test]
fn a_trust_set_routes_each_token_to_the_issuer_it_claims() {
    let east = keyring("k1", 1);
    let west = keyring("k1", 2);
    let mut b = null_mut();
    expect(unsafe { wid_trust_set_builder_new(&mut b) }, WID_RESULT_OK);
    expect(add_iss(b, EAST, east, Some(live)), WID_RESULT_OK);
    // West: foreign tokens (no lookup); ours carry a sub, so they pass too.
    expect(add_iss(b, WEST, west, None), WID_RESULT_OK);
    // Refusals leave the builder as it was.
    expect(add_iss(b, "", east, None), WID_RESULT_INVALID_ARGUMENT);
    expect(add_iss(b, EAST, null(), None), WID_RESULT_NULL_ARGUMENT);
    let td = "Upper.Example";
    let rc = unsafe {
        wid_trust_set_builder_add_trust_domain(
            b,
            td.as_ptr().cast(),
            td.len(),
            east,
            "a".as_ptr().cast(),
            1,
            None,
            null_mut(),
        )
    };
    expect(rc, WID_RESULT_INVALID_ARGUMENT);
    let mut t = null_mut();
    expect(
        unsafe { wid_trust_set_builder_build(b, &mut t) },
        WID_RESULT_OK,
    );

    let (rc, claims, issuer) = verify(t, &issue(east, EAST));
    expect(rc, WID_RESULT_OK);
    assert_eq!(issuer.as_deref(), Some(EAST));
    assert!(claims.unwrap().contains(ALLOC));
    let (rc, _, issuer) = verify(t, &issue(west, WEST));
    expect(rc, WID_RESULT_OK);
    assert_eq!(issuer.as_deref(), Some(WEST));
    // West's key claiming east (same kid, other material), and the reverse.
    expect(verify(t, &issue(west, EAST)).0, WID_RESULT_BAD_SIGNATURE);
    expect(verify(t, &issue(east, WEST)).0, WID_RESULT_BAD_SIGNATURE);
    // An issuer nobody trusts, named in the message.
    expect(
        verify(t, &issue(east, "https://evil.example")).0,
        WID_RESULT_ISSUER_MISMATCH,
    );
    error_says("https://evil.example");

    // Two issuers under one iss: refused when built.
    expect(add_iss(b, EAST, west, None), WID_RESULT_OK);
    let mut t2 = null_mut();
    expect(
        unsafe { wid_trust_set_builder_build(b, &mut t2) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    assert!(t2.is_null(), "no output on failure");

    unsafe { free!(t, b, east, west) };
}

#[test]
fn null_and_wrong_handles_are_refused() {
    let mut t = null_mut();
    expect(
        unsafe { wid_trust_set_builder_build(null(), &mut t) },
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        unsafe { wid_trust_set_builder_new(null_mut()) },
        WID_RESULT_NULL_ARGUMENT,
    );
    let mut b = null_mut();
    expect(unsafe { wid_trust_set_builder_new(&mut b) }, WID_RESULT_OK);
    // No issuer at all.
    expect(
        unsafe { wid_trust_set_builder_build(b, &mut t) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(verify(null(), "x.y.z").0, WID_RESULT_NULL_ARGUMENT);
    // A keyring handle is no trust set.
    let kr = keyring("k1", 1);
    expect(verify(kr.cast(), "x.y.z").0, WID_RESULT_INVALID_ARGUMENT);
    unsafe {
        wid_trust_set_free(null());
        wid_trust_set_builder_free(null_mut());
        wid_trust_set_builder_free(b);
        wid_keyring_free(kr);
    }
}
