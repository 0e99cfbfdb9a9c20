//! Driving the C ABI with arbitrary bytes (for `workload_identity::fuzzing::ffi`). Lengths
//! given to the ABI never exceed the buffers they describe — a lying length is
//! undefined behaviour for any C function — but everything else is arbitrary.

use std::ffi::c_void;
use std::ptr::{null, null_mut};

use crate::*;

unsafe extern "C" fn lookup(
    userdata: *mut c_void,
    _id: *const u8,
    _len: usize,
    consistency: u32,
    out: *mut u32,
) -> wid_result {
    // userdata carries the answers: [stale state, consistent state, rc] as bytes.
    let cfg = unsafe { &*(userdata as *const [u8; 3]) };
    unsafe { *out = u32::from(cfg[consistency.min(1) as usize]) };
    u32::from(cfg[2]) % 40
}

/// Splits `data` into pieces at 0xff bytes.
fn pieces(data: &[u8]) -> Vec<&[u8]> {
    data.split(|b| *b == 0xff).collect()
}

/// The C ABI driven through its Rust definitions with arbitrary bytes; must
/// never crash, hang or leak.
pub fn ffi(data: &[u8]) {
    let p = pieces(data);
    let get = |i: usize| p.get(i).copied().unwrap_or(&[]);
    let byte = |i: usize| get(i).first().copied().unwrap_or(0);
    unsafe {
        let mut kr = null_mut();
        if wid_keyring_new(&mut kr) != WID_RESULT_OK {
            return;
        }
        let (id, material) = (get(0), get(1));
        let _ = wid_keyring_insert(
            kr,
            id.as_ptr().cast(),
            id.len(),
            material.as_ptr(),
            material.len(),
            u32::from(byte(2)) % 4,
            u32::from(byte(3)) % 6,
            i64::from(byte(4)),
        );
        let m = [9u8; 32];
        let _ = wid_keyring_insert(kr, "k".as_ptr().cast(), 1, m.as_ptr(), 32, 1, 1, 0);
        let mut out = wid_bytes {
            data: null_mut(),
            len: 0,
        };
        let req = get(5);
        if wid_issue(kr, req.as_ptr(), req.len(), NOW_FOR_FUZZ, &mut out) == WID_RESULT_OK {
            wid_bytes_free(&mut out);
        }
        let jwks = get(6);
        let _ = wid_keyring_import_jwks(kr, jwks.as_ptr().cast(), jwks.len(), null_mut());
        let cfg: [u8; 3] = [byte(7) % 4, byte(8) % 4, byte(9) % 3];
        let aud = get(10);
        let mut v = null_mut();
        // Never wait for unknown keys: a fuzz input must not cost a second.
        let opts = wid_verifier_options {
            leeway_secs: i64::from(byte(11)),
            key_wait_ms: -1,
            max_token_bytes: usize::from(byte(16)) * 64,
            require_exp: u32::from(byte(17) & 1),
            cache_entries: usize::from(byte(18) % 4),
            issuer: null(),
            issuer_len: 0,
        };
        if wid_verifier_new_with_options(
            kr,
            aud.as_ptr().cast(),
            aud.len(),
            &opts,
            Some(lookup),
            &cfg as *const _ as *mut c_void,
            &mut v,
        ) == WID_RESULT_OK
        {
            let token = get(12);
            if wid_verify(
                v,
                token.as_ptr().cast(),
                token.len(),
                NOW_FOR_FUZZ,
                &mut out,
            ) == WID_RESULT_OK
            {
                wid_bytes_free(&mut out);
            }
            let toks = [token.as_ptr().cast(), get(13).as_ptr().cast()];
            let lens = [token.len(), get(13).len()];
            let mut results = [0u32; 2];
            let _ = wid_verify_batch(
                v,
                toks.as_ptr(),
                lens.as_ptr(),
                2,
                NOW_FOR_FUZZ,
                results.as_mut_ptr(),
            );
            if wid_explain(
                v,
                token.as_ptr().cast(),
                token.len(),
                NOW_FOR_FUZZ,
                &mut out,
            ) == WID_RESULT_OK
            {
                wid_bytes_free(&mut out);
            }
            if wid_verifier_stats(v, &mut out) == WID_RESULT_OK {
                wid_bytes_free(&mut out);
            }
            wid_verifier_free(v);
        }
        // The request as a NodeIdentityRequest, with any algorithm and
        // issuer; a node token made is verified by the builder's verifier.
        let node_iss = get(26);
        let mut node_token = wid_bytes {
            data: null_mut(),
            len: 0,
        };
        let _ = wid_issue_node(
            kr,
            u32::from(byte(35)) % 4,
            req.as_ptr(),
            req.len(),
            node_iss.as_ptr().cast(),
            node_iss.len(),
            NOW_FOR_FUZZ,
            &mut node_token,
        );
        // The verifier builder with arbitrary settings (never a key wait).
        let mut vb = null_mut();
        if wid_verifier_builder_new(
            kr,
            Some(lookup),
            &cfg as *const _ as *mut c_void,
            aud.as_ptr().cast(),
            aud.len(),
            &mut vb,
        ) == WID_RESULT_OK
        {
            let wide = |i: usize| {
                let b = get(i);
                let mut w = [0u8; 8];
                w[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
                i64::from_le_bytes(w)
            };
            let iss = get(26);
            let _ = wid_verifier_builder_set_key_wait_ms(vb, 0);
            let _ = wid_verifier_builder_set_leeway_secs(vb, wide(25));
            let _ = wid_verifier_builder_set_max_token_bytes(vb, wide(27) as usize);
            let _ = wid_verifier_builder_set_require_exp(vb, u32::from(byte(28)));
            let _ = wid_verifier_builder_set_cache_entries(vb, usize::from(byte(29) % 4));
            let _ = wid_verifier_builder_set_issuer(vb, iss.as_ptr().cast(), iss.len());
            let _ = wid_verifier_builder_set_require_proof(vb, u32::from(byte(30)));
            let _ = wid_verifier_builder_set_max_proof_lifetime_secs(vb, wide(31));
            let _ = wid_verifier_builder_set_proof_replay_capacity(vb, wide(32) as usize);
            // Node tokens: any mode (3 is refused); the node lookup is the
            // same table (its answers are node states too) unless byte 34
            // leaves it out, so node tokens fail closed.
            let _ = wid_verifier_builder_set_node_tokens(vb, u32::from(byte(33)) % 4);
            if byte(34) & 1 == 1 {
                let _ = wid_verifier_builder_set_node_lookup(
                    vb,
                    Some(lookup),
                    &cfg as *const _ as *mut c_void,
                );
            }
            let mut v = null_mut();
            if wid_verifier_builder_build(vb, &mut v) == WID_RESULT_OK {
                let token = get(12);
                let _ = wid_verify(
                    v,
                    token.as_ptr().cast(),
                    token.len(),
                    NOW_FOR_FUZZ,
                    null_mut(),
                );
                if !node_token.data.is_null()
                    && wid_verify(
                        v,
                        node_token.data.cast(),
                        node_token.len,
                        NOW_FOR_FUZZ,
                        &mut out,
                    ) == WID_RESULT_OK
                {
                    wid_bytes_free(&mut out);
                }
                if wid_explain(
                    v,
                    token.as_ptr().cast(),
                    token.len(),
                    NOW_FOR_FUZZ,
                    &mut out,
                ) == WID_RESULT_OK
                {
                    wid_bytes_free(&mut out);
                }
                wid_verifier_free(v);
            }
            wid_verifier_builder_free(vb);
        }
        wid_bytes_free(&mut node_token);
        if wid_keyring_jwks(kr, &mut out) == WID_RESULT_OK {
            wid_bytes_free(&mut out);
        }
        // The issuer builder with arbitrary settings, then the request.
        let mut b = null_mut();
        if wid_issuer_builder_new(kr, &mut b) == WID_RESULT_OK {
            let (td, path, policy) = (get(19), get(20), get(21));
            let _ = wid_issuer_builder_set_algorithm(b, u32::from(byte(22)) % 4);
            if byte(23) & 1 == 1 {
                let _ = wid_issuer_builder_set_spiffe(
                    b,
                    td.as_ptr().cast(),
                    td.len(),
                    path.as_ptr().cast(),
                    path.len(),
                );
            }
            if byte(23) & 2 == 2 {
                let _ = wid_issuer_builder_set_wimse_trust_domain(b, td.as_ptr().cast(), td.len());
            }
            let _ =
                wid_issuer_builder_set_extra_claims_policy(b, policy.as_ptr().cast(), policy.len());
            let mut iss = null_mut();
            if wid_issuer_builder_build(b, &mut iss) == WID_RESULT_OK {
                if wid_issuer_issue(iss, req.as_ptr(), req.len(), NOW_FOR_FUZZ, &mut out)
                    == WID_RESULT_OK
                {
                    wid_bytes_free(&mut out);
                }
                if wid_issuer_issue_node(iss, req.as_ptr(), req.len(), NOW_FOR_FUZZ, &mut out)
                    == WID_RESULT_OK
                {
                    wid_bytes_free(&mut out);
                }
                wid_issuer_free(iss);
            }
            wid_issuer_builder_free(b);
        }
        if wid_keyring_spiffe_bundle(kr, u64::from(byte(24)), &mut out) == WID_RESULT_OK {
            wid_bytes_free(&mut out);
        }
        let mut small = [0 as std::ffi::c_char; 8];
        let _ = wid_last_error_message(small.as_mut_ptr(), usize::from(byte(14)) % 9);
        let _ = wid_result_name(u32::from(byte(15)) * 3);
        let _ = wid_verify(null(), null(), 0, 0, null_mut());
        wid_keyring_free(kr);
    }
}

const NOW_FOR_FUZZ: i64 = 1_700_000_000;
