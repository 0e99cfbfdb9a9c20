//! Proof of possession through the C ABI (`ffi/src/proof.rs`): workload keys,
//! WIT issuance from a msgpack request carrying `ProofKey`, proofs and their
//! verification; result codes, NULL and UTF-8 checks, outputs written only on
//! success, wrong handle types, and a proof accepted once across threads.
//! (`bindings/c/test.c` drives the same functions from C under valgrind.)

mod common;

use std::ffi::c_char;
use std::ptr::{null, null_mut};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::bytes::{empty, is_empty, is_sentinel, json, sentinel, take, taken};
use common::ffi_text::{error_says, name};
use common::handles::free;
use common::identity::{AUD, decode_segment};
use common::keys::workload_key as generate;
use common::keys::{bearer_and_wit_keyring, jwks, new_keyring, public_jwk};
use common::lookup::{LIVE, TERMINAL, sample_state, state};
use common::proof::{issue_wit_into, prove, verify_proof};
use common::request::with_proof_key as request_for;
use common::result::expect;
use sha2::{Digest, Sha256};
use workload_identity::codec;
use workload_identity::model::{GoDuration, IssueRequest};
use workload_identity_ffi::*;

const NOW: i64 = 1_800_000_000;
const TARGET: &str = "https://vault.example.com/v1/auth/jwt/login";
const TD: &str = "nomad.example.com";
const ISS: &str = "https://nomad.example.com";

/// The bearer-and-WIT keyring, its keys created just before `NOW`.
fn keyring() -> *mut wid_keyring {
    bearer_and_wit_keyring(NOW - 10)
}

/// A verifier for "vault.io" requiring `ISS`, never waiting for keys, whose
/// lookup reports `alloc` for the sample allocation.
fn verifier(kr: *const wid_keyring, alloc: &'static u32) -> *mut wid_verifier {
    let opts = wid_verifier_options {
        leeway_secs: 0,
        key_wait_ms: -1,
        max_token_bytes: 0,
        require_exp: 0,
        cache_entries: 0,
        issuer: ISS.as_ptr().cast(),
        issuer_len: ISS.len(),
    };
    let mut v = null_mut();
    let rc = unsafe {
        wid_verifier_new_with_options(
            kr,
            AUD.as_ptr().cast(),
            AUD.len(),
            &opts,
            Some(sample_state),
            state(alloc),
            &mut v,
        )
    };
    expect(rc, WID_RESULT_OK);
    v
}

/// The bearer-and-WIT keyring, a verifier of its WITs for a live sample
/// allocation, and a fresh workload key of `alg`.
fn world(alg: wid_alg) -> (*mut wid_keyring, *mut wid_verifier, *mut wid_workload_key) {
    let kr = keyring();
    (kr, verifier(kr, &LIVE), generate(alg))
}

/// A WIT `kr`'s WIT key of `alg` issues for `request` (issuer `ISS`, trust
/// domain `TD`, at `NOW`), or the code, the output untouched.
fn issue_wit(kr: *const wid_keyring, alg: wid_alg, request: &[u8]) -> Result<String, wid_result> {
    let mut out = empty();
    let rc = issue_wit_into(
        kr,
        alg,
        request,
        ISS.as_bytes(),
        TD.as_bytes(),
        NOW,
        &mut out,
    );
    taken(rc, &mut out, is_empty)
}

fn sha256_b64(s: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(s.as_bytes()))
}

#[test]
fn a_wit_and_its_proof_round_trip_for_every_key_and_signer() {
    let kr = keyring();
    let v = verifier(kr, &LIVE);
    for (key_alg, alg_name, kty, crv) in [
        (WID_ALG_EDDSA, "EdDSA", "OKP", "Ed25519"),
        (WID_ALG_ES256, "ES256", "EC", "P-256"),
    ] {
        let key = generate(key_alg);
        let jwk = public_jwk(key);
        assert_eq!(jwk["alg"], alg_name);
        assert_eq!(jwk["kty"], kty);
        assert_eq!(jwk["crv"], crv);
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(jwk["x"].as_str().unwrap())
                .unwrap()
                .len(),
            32
        );
        assert_eq!(jwk.get("y").is_some(), key_alg == WID_ALG_ES256, "{jwk}");
        assert!(jwk.get("d").is_none(), "never the private key: {jwk}");
        let request = request_for(&jwk);
        for signer in [WID_ALG_EDDSA, WID_ALG_ES256] {
            let wit = issue_wit(kr, signer, &request).unwrap();
            let header = decode_segment(&wit, 0);
            assert_eq!(header["typ"], "wit+jwt", "{header}");
            let claims = decode_segment(&wit, 1);
            assert_eq!(
                claims["sub"],
                "wimse://nomad.example.com/global/default/web/frontend/server/vault_default"
            );
            assert_eq!(claims["exp"], NOW + 3600);
            assert_eq!(claims["iss"], ISS);
            assert_eq!(
                claims["cnf"]["jwk"], jwk,
                "cnf.jwk is the workload key's JWK"
            );

            let wpt = prove(
                key,
                &wit,
                &format!("{TARGET}?role=web#x"),
                Some("at-1"),
                0,
                NOW,
            )
            .unwrap();
            let wpt_header = decode_segment(&wpt, 0);
            assert_eq!(
                wpt_header,
                serde_json::json!({"alg": alg_name, "typ": "wpt+jwt"})
            );
            let wpt_claims = decode_segment(&wpt, 1);
            assert_eq!(wpt_claims["aud"], TARGET, "query and fragment dropped");
            assert_eq!(wpt_claims["exp"], NOW + 60, "ttl 0: the default 60 s");
            assert_eq!(wpt_claims["wth"], sha256_b64(&wit));
            assert_eq!(wpt_claims["ath"], sha256_b64("at-1"));

            let verified = verify_proof(v, &wit, &wpt, TARGET, Some("at-1"), NOW).unwrap();
            assert_eq!(verified["nomad_allocation_id"], common::ALLOC_ID);
            assert_eq!(verified["cnf"]["jwk"], jwk);
            assert_eq!(verified["sub"], claims["sub"]);

            // The same proof again: a replay.
            expect(
                verify_proof(v, &wit, &wpt, TARGET, Some("at-1"), NOW + 1).unwrap_err(),
                WID_RESULT_PROOF_REPLAYED,
            );
            error_says("jti");
            // A WIT is never a bearer token.
            let mut out = sentinel();
            let rc = unsafe { wid_verify(v, wit.as_ptr().cast(), wit.len(), NOW, &mut out) };
            expect(rc, WID_RESULT_PROOF_REQUIRED);
            assert!(is_sentinel(&out));
            // Another target, a missing or different access token: refused.
            let fresh = prove(key, &wit, TARGET, Some("at-1"), 0, NOW).unwrap();
            for (target, token) in [
                ("https://vault.example.com/v1/other", Some("at-1")),
                ("https://evil.example.com/v1/auth/jwt/login", Some("at-1")),
                (TARGET, None),
                (TARGET, Some("at-2")),
            ] {
                expect(
                    verify_proof(v, &wit, &fresh, target, token, NOW).unwrap_err(),
                    WID_RESULT_PROOF_INVALID,
                );
            }
            // None of those refusals used it up; NULL claims output is fine.
            let rc = unsafe {
                wid_verify_proof(
                    v,
                    wit.as_ptr().cast(),
                    wit.len(),
                    fresh.as_ptr().cast(),
                    fresh.len(),
                    TARGET.as_ptr().cast(),
                    TARGET.len(),
                    "at-1".as_ptr().cast(),
                    4,
                    NOW,
                    null_mut(),
                )
            };
            expect(rc, WID_RESULT_OK);
        }
        unsafe { wid_workload_key_free(key) };
    }
    unsafe { free!(v, kr) };
}

#[test]
fn proofs_from_another_key_for_another_wit_or_out_of_time_are_refused() {
    let (kr, v, key) = world(WID_ALG_ES256);
    let thief = generate(WID_ALG_ES256);
    let request = request_for(&public_jwk(key));
    let wit = issue_wit(kr, WID_ALG_EDDSA, &request).unwrap();
    let other_wit = issue_wit(kr, WID_ALG_ES256, &request).unwrap();

    // A stolen WIT with a proof from the thief's key.
    let stolen = prove(thief, &wit, TARGET, None, 0, NOW).unwrap();
    expect(
        verify_proof(v, &wit, &stolen, TARGET, None, NOW).unwrap_err(),
        WID_RESULT_PROOF_INVALID,
    );
    // A proof made for another WIT of the same key.
    let for_other = prove(key, &other_wit, TARGET, None, 0, NOW).unwrap();
    expect(
        verify_proof(v, &wit, &for_other, TARGET, None, NOW).unwrap_err(),
        WID_RESULT_PROOF_INVALID,
    );
    error_says("wth");
    // ttl_secs sets exp; a proof past it (beyond the 60 s leeway) is refused,
    // and so is one that lives longer than proofs may (300 s by default).
    let short = prove(key, &wit, TARGET, None, 5, NOW).unwrap();
    assert_eq!(decode_segment(&short, 1)["exp"], NOW + 5);
    expect(
        verify_proof(v, &wit, &short, TARGET, None, NOW + 5 + 61).unwrap_err(),
        WID_RESULT_PROOF_INVALID,
    );
    let long = prove(key, &wit, TARGET, None, 3600, NOW).unwrap();
    expect(
        verify_proof(v, &wit, &long, TARGET, None, NOW).unwrap_err(),
        WID_RESULT_PROOF_INVALID,
    );
    // A bearer token where the WIT belongs.
    let bearer = {
        let req = common::issue_request_task();
        let bytes = codec::encode(&req).unwrap();
        let mut out = empty();
        let rc = unsafe { wid_issue(kr, bytes.as_ptr(), bytes.len(), NOW, &mut out) };
        expect(rc, WID_RESULT_OK);
        take(&mut out)
    };
    let over_bearer = prove(key, &bearer, TARGET, None, 0, NOW).unwrap();
    expect(
        verify_proof(v, &bearer, &over_bearer, TARGET, None, NOW).unwrap_err(),
        WID_RESULT_PROOF_INVALID,
    );
    // The WIT's own failures keep their codes: expired, a dead allocation.
    let good = prove(key, &wit, TARGET, None, 0, NOW + 3600 + 61).unwrap();
    expect(
        verify_proof(v, &wit, &good, TARGET, None, NOW + 3600 + 61).unwrap_err(),
        WID_RESULT_EXPIRED,
    );
    let dead = verifier(kr, &TERMINAL);
    let fresh = prove(key, &wit, TARGET, None, 0, NOW).unwrap();
    expect(
        verify_proof(dead, &wit, &fresh, TARGET, None, NOW).unwrap_err(),
        WID_RESULT_ALLOCATION_TERMINAL,
    );
    // And the genuine proof still verifies with a live allocation.
    verify_proof(v, &wit, &fresh, TARGET, None, NOW).unwrap();
    unsafe { free!(dead, thief, key, v, kr) };
}

#[test]
fn generate_takes_eddsa_and_es256_only_and_outputs_stay_untouched() {
    let sentinel_key = 8 as *mut wid_workload_key;
    for (alg, want) in [
        (WID_ALG_RS256, WID_RESULT_UNSUPPORTED_ALGORITHM),
        (0, WID_RESULT_INVALID_ARGUMENT),
        (4, WID_RESULT_INVALID_ARGUMENT),
        (u32::MAX, WID_RESULT_INVALID_ARGUMENT),
    ] {
        let mut key = sentinel_key;
        expect(unsafe { wid_workload_key_generate(alg, &mut key) }, want);
        assert_eq!(key, sentinel_key, "alg {alg}");
    }
    expect(
        unsafe { wid_workload_key_generate(WID_ALG_EDDSA, null_mut()) },
        WID_RESULT_NULL_ARGUMENT,
    );
    // Fresh keys each time.
    let (a, b) = (generate(WID_ALG_EDDSA), generate(WID_ALG_EDDSA));
    assert_ne!(public_jwk(a)["x"], public_jwk(b)["x"]);
    let mut out = sentinel();
    expect(
        unsafe { wid_workload_key_public_jwk(null(), &mut out) },
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        unsafe { wid_workload_key_public_jwk(a, null_mut()) },
        WID_RESULT_NULL_ARGUMENT,
    );
    assert!(is_sentinel(&out));
    unsafe {
        wid_workload_key_free(a);
        wid_workload_key_free(b);
        wid_workload_key_free(null_mut());
    }
}

#[test]
fn issue_wit_needs_a_proof_key_a_trust_domain_and_a_ttl() {
    let kr = keyring();
    let key = generate(WID_ALG_EDDSA);
    let request = request_for(&public_jwk(key));
    let issue = |request: &[u8], alg: wid_alg, iss: &[u8], td: &[u8]| {
        let mut out = sentinel();
        let rc = issue_wit_into(kr, alg, request, iss, td, NOW, &mut out);
        if rc == WID_RESULT_OK {
            take(&mut out);
        } else {
            assert!(is_sentinel(&out), "outputs only on success");
        }
        rc
    };
    expect(
        issue(&request, WID_ALG_EDDSA, b"", TD.as_bytes()),
        WID_RESULT_OK,
    );

    // A request without ProofKey: use wid_issue_alg for a bearer token.
    let bearer = codec::encode(&common::issue_request_task()).unwrap();
    expect(
        issue(&bearer, WID_ALG_EDDSA, b"", TD.as_bytes()),
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("ProofKey");
    // The committed Go request (no ProofKey) likewise.
    let go = common::go_vector("issue_request_task.msgpack");
    expect(
        issue(&go, WID_ALG_EDDSA, b"", TD.as_bytes()),
        WID_RESULT_INVALID_ARGUMENT,
    );
    // Trust domains: required, a lower-case DNS name.
    for td in [
        &b""[..],
        b"Nomad.Example.com",
        b"a..b",
        b"wimse://x",
        b"\xff",
    ] {
        expect(
            issue(&request, WID_ALG_EDDSA, b"", td),
            WID_RESULT_INVALID_ARGUMENT,
        );
    }
    error_says("trust_domain");
    // No active RS256 key; an unknown alg.
    expect(
        issue(&request, WID_ALG_RS256, b"", TD.as_bytes()),
        WID_RESULT_NO_ACTIVE_KEY,
    );
    expect(
        issue(&request, 9, b"", TD.as_bytes()),
        WID_RESULT_INVALID_ARGUMENT,
    );
    let edits: [fn(&mut IssueRequest); 2] = [
        // A WIT must expire: TTL 0 is refused.
        |req| req.identity.ttl = GoDuration::from_nanos(0),
        // A ProofKey that is not a usable public key.
        |req| req.proof_key.as_mut().unwrap().x = "AAAA".into(),
    ];
    for edit in edits {
        let mut req: IssueRequest = codec::decode(&request).unwrap();
        edit(&mut req);
        let req = codec::encode(&req).unwrap();
        expect(
            issue(&req, WID_ALG_EDDSA, b"", TD.as_bytes()),
            WID_RESULT_INVALID_ARGUMENT,
        );
    }
    // Bytes: truncated at every length, an issuer that is not UTF-8.
    for cut in 0..request.len() {
        let rc = issue(&request[..cut], WID_ALG_EDDSA, b"", TD.as_bytes());
        expect(rc, WID_RESULT_DECODE_ERROR);
    }
    expect(
        issue(&request, WID_ALG_EDDSA, b"\xff\xfe", TD.as_bytes()),
        WID_RESULT_INVALID_ARGUMENT,
    );
    // NULL arguments.
    let mut out = sentinel();
    unsafe {
        let td = TD.as_ptr().cast();
        let r = request.as_ptr();
        let n = request.len();
        expect(
            wid_issue_wit(null(), 1, r, n, null(), 0, td, TD.len(), NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_issue_wit(kr, 1, null(), n, null(), 0, td, TD.len(), NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_issue_wit(kr, 1, r, n, null(), 3, td, TD.len(), NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_issue_wit(kr, 1, r, n, null(), 0, null(), TD.len(), NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_issue_wit(kr, 1, r, n, null(), 0, td, TD.len(), NOW, null_mut()),
            WID_RESULT_NULL_ARGUMENT,
        );
        // A huge length is refused before any read.
        expect(
            wid_issue_wit(kr, 1, r, usize::MAX, null(), 0, td, TD.len(), NOW, &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
        // NULL issuer: no iss.
        expect(
            wid_issue_wit(kr, 1, r, n, null(), 0, td, TD.len(), NOW, &mut out),
            WID_RESULT_OK,
        );
    }
    let wit = take(&mut out);
    assert!(decode_segment(&wit, 1).get("iss").is_none());
    unsafe { free!(key, kr) };
}

#[test]
fn prove_and_verify_proof_check_their_arguments() {
    let (kr, v, key) = world(WID_ALG_EDDSA);
    let wit = issue_wit(kr, WID_ALG_EDDSA, &request_for(&public_jwk(key))).unwrap();
    let t = TARGET.as_ptr().cast::<c_char>();
    let tl = TARGET.len();
    let w = wit.as_ptr().cast::<c_char>();
    let wl = wit.len();
    let mut out = sentinel();
    unsafe {
        // prove: NULLs.
        expect(
            wid_workload_key_prove(null(), w, wl, t, tl, null(), 0, 0, NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_workload_key_prove(key, null(), wl, t, tl, null(), 0, 0, NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_workload_key_prove(key, w, wl, null(), tl, null(), 0, 0, NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_workload_key_prove(key, w, wl, t, tl, null(), 2, 0, NOW, &mut out),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_workload_key_prove(key, w, wl, t, tl, null(), 0, 0, NOW, null_mut()),
            WID_RESULT_NULL_ARGUMENT,
        );
        // prove: bad values.
        expect(
            wid_workload_key_prove(key, null(), 0, t, tl, null(), 0, 0, NOW, &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
        expect(
            wid_workload_key_prove(key, w, wl, null(), 0, null(), 0, 0, NOW, &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
        expect(
            wid_workload_key_prove(key, w, wl, t, tl, null(), 0, -1, NOW, &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
        let bad = [0xffu8, 0xfe, 0x80];
        expect(
            wid_workload_key_prove(
                key,
                bad.as_ptr().cast(),
                3,
                t,
                tl,
                null(),
                0,
                0,
                NOW,
                &mut out,
            ),
            WID_RESULT_MALFORMED_TOKEN,
        );
        expect(
            wid_workload_key_prove(
                key,
                w,
                wl,
                bad.as_ptr().cast(),
                3,
                null(),
                0,
                0,
                NOW,
                &mut out,
            ),
            WID_RESULT_INVALID_ARGUMENT,
        );
        expect(
            wid_workload_key_prove(key, w, wl, t, tl, bad.as_ptr().cast(), 3, 0, NOW, &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
        // Lengths past the caps are refused from the length alone.
        expect(
            wid_workload_key_prove(key, w, usize::MAX, t, tl, null(), 0, 0, NOW, &mut out),
            WID_RESULT_MALFORMED_TOKEN,
        );
        expect(
            wid_workload_key_prove(key, w, wl, t, usize::MAX, null(), 0, 0, NOW, &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
        // A handle of another type.
        expect(
            wid_workload_key_prove(kr.cast(), w, wl, t, tl, null(), 0, 0, NOW, &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
        expect(
            wid_workload_key_public_jwk(v.cast(), &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
        expect(
            wid_keyring_jwks(key.cast(), &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
        // Freeing the wrong type is ignored: both handles stay usable.
        wid_workload_key_free(kr.cast());
        wid_keyring_free(key.cast());
        wid_verifier_free(key.cast());
        assert!(is_sentinel(&out), "outputs only on success");
    }
    let wpt = prove(key, &wit, TARGET, None, 0, NOW).unwrap();
    assert!(
        decode_segment(&wpt, 1).get("ath").is_none(),
        "no access token, no ath"
    );
    let p = wpt.as_ptr().cast::<c_char>();
    let pl = wpt.len();
    let mut claims = sentinel();
    unsafe {
        // verify_proof: NULLs.
        expect(
            wid_verify_proof(null(), w, wl, p, pl, t, tl, null(), 0, NOW, &mut claims),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_verify_proof(v, null(), wl, p, pl, t, tl, null(), 0, NOW, &mut claims),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_verify_proof(v, w, wl, null(), pl, t, tl, null(), 0, NOW, &mut claims),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_verify_proof(v, w, wl, p, pl, null(), tl, null(), 0, NOW, &mut claims),
            WID_RESULT_NULL_ARGUMENT,
        );
        expect(
            wid_verify_proof(v, w, wl, p, pl, t, tl, null(), 1, NOW, &mut claims),
            WID_RESULT_NULL_ARGUMENT,
        );
        // verify_proof: bad values; over-long tokens are not read.
        expect(
            wid_verify_proof(v, w, usize::MAX, p, pl, t, tl, null(), 0, NOW, &mut claims),
            WID_RESULT_MALFORMED_TOKEN,
        );
        expect(
            wid_verify_proof(v, w, wl, p, 100_000, t, tl, null(), 0, NOW, &mut claims),
            WID_RESULT_PROOF_INVALID,
        );
        let bad = [0xffu8; 8];
        expect(
            wid_verify_proof(
                v,
                bad.as_ptr().cast(),
                8,
                p,
                pl,
                t,
                tl,
                null(),
                0,
                NOW,
                &mut claims,
            ),
            WID_RESULT_MALFORMED_TOKEN,
        );
        expect(
            wid_verify_proof(
                v,
                w,
                wl,
                bad.as_ptr().cast(),
                8,
                t,
                tl,
                null(),
                0,
                NOW,
                &mut claims,
            ),
            WID_RESULT_PROOF_INVALID,
        );
        expect(
            wid_verify_proof(v, w, wl, null(), 0, t, tl, null(), 0, NOW, &mut claims),
            WID_RESULT_PROOF_INVALID,
        );
        expect(
            wid_verify_proof(v, w, wl, p, pl, null(), 0, null(), 0, NOW, &mut claims),
            WID_RESULT_INVALID_ARGUMENT,
        );
        expect(
            wid_verify_proof(kr.cast(), w, wl, p, pl, t, tl, null(), 0, NOW, &mut claims),
            WID_RESULT_INVALID_ARGUMENT,
        );
        assert!(is_sentinel(&claims), "outputs only on success");
        // After all that, the proof is still unused.
        expect(
            wid_verify_proof(v, w, wl, p, pl, t, tl, null(), 0, NOW, &mut claims),
            WID_RESULT_OK,
        );
        assert!(take(&mut claims).contains("\"cnf\""));
        wid_workload_key_free(key);
        wid_verifier_free(v);
        wid_keyring_free(kr);
    }
}

#[test]
fn a_proof_is_accepted_once_across_threads() {
    let (kr, v, key) = world(WID_ALG_ES256);
    let wit = issue_wit(kr, WID_ALG_ES256, &request_for(&public_jwk(key))).unwrap();
    let wpt = prove(key, &wit, TARGET, Some("token"), 30, NOW).unwrap();
    let v_addr = v as usize;
    let results: Vec<wid_result> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (wit, wpt) = (&wit, &wpt);
                s.spawn(move || {
                    let v = v_addr as *const wid_verifier;
                    verify_proof(v, wit, wpt, TARGET, Some("token"), NOW)
                        .map_or_else(|rc| rc, |_| WID_RESULT_OK)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = results.iter().filter(|&&r| r == WID_RESULT_OK).count();
    let replayed = results
        .iter()
        .filter(|&&r| r == WID_RESULT_PROOF_REPLAYED)
        .count();
    assert_eq!((ok, replayed), (1, 7), "{results:?}");
    // Keys prove from many threads at once too.
    let key_addr = key as usize;
    let proofs: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let wit = &wit;
                s.spawn(move || {
                    prove(
                        key_addr as *const wid_workload_key,
                        wit,
                        TARGET,
                        None,
                        0,
                        NOW,
                    )
                    .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for wpt in &proofs {
        verify_proof(v, &wit, wpt, TARGET, None, NOW).unwrap();
    }
    unsafe { free!(key, v, kr) };
}

#[test]
fn the_new_codes_have_their_names() {
    for (code, want) in [
        (WID_RESULT_PROOF_REQUIRED, "WID_RESULT_PROOF_REQUIRED"),
        (WID_RESULT_PROOF_INVALID, "WID_RESULT_PROOF_INVALID"),
        (WID_RESULT_PROOF_REPLAYED, "WID_RESULT_PROOF_REPLAYED"),
    ] {
        assert_eq!(name(code), want);
    }
    assert_eq!(
        (
            WID_RESULT_PROOF_REQUIRED,
            WID_RESULT_PROOF_INVALID,
            WID_RESULT_PROOF_REPLAYED
        ),
        (50, 51, 52)
    );
    assert_eq!(wid_abi_version(), 1);
}

/// The key-purpose calls (issue 40): WIT keys are only in the WIT key set;
/// a verifier fed the JWKS cannot take a WIT, one fed the WIT key set can;
/// a keyring without a WIT key signs no WIT and says how to make one;
/// unknown purposes are refused and leave the outputs untouched.
#[test]
fn wit_keys_through_the_c_abi() {
    let kr = keyring();
    let jwks_of = |purpose: wid_key_purpose| -> serde_json::Value {
        let mut out = empty();
        expect(
            unsafe { wid_keyring_jwks_purpose(kr, purpose, &mut out) },
            WID_RESULT_OK,
        );
        json(&mut out)
    };
    let kids = |set: &serde_json::Value| -> Vec<String> {
        set["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_string())
            .collect()
    };
    let bearer = jwks_of(WID_KEY_PURPOSE_BEARER);
    let wit_set = jwks_of(WID_KEY_PURPOSE_WIT);
    assert_eq!(kids(&bearer), ["ed", "es"]);
    assert_eq!(kids(&wit_set), ["wit-ed", "wit-es"]);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&jwks(kr)).unwrap(),
        bearer,
        "wid_keyring_jwks is the bearer key set"
    );
    // Unknown purposes: refused, outputs untouched.
    let mut out = sentinel();
    for bad in [0, 4, u32::MAX] {
        expect(
            unsafe { wid_keyring_jwks_purpose(kr, bad, &mut out) },
            WID_RESULT_INVALID_ARGUMENT,
        );
        error_says("WID_KEY_PURPOSE_");
        expect(
            unsafe { wid_keyring_rotate_purpose(kr, bad, WID_ALG_EDDSA, NOW, &mut out) },
            WID_RESULT_INVALID_ARGUMENT,
        );
        assert!(is_sentinel(&out));
    }

    // A WIT, and verifiers fed each key set.
    let key = generate(WID_ALG_ES256);
    let request = request_for(&public_jwk(key));
    let wit = issue_wit(kr, WID_ALG_ES256, &request).unwrap();
    assert_eq!(decode_segment(&wit, 0)["kid"], "wit-es");
    let wpt = prove(key, &wit, TARGET, None, 60, NOW).unwrap();
    for (purpose, set, want) in [
        (WID_KEY_PURPOSE_BEARER, &bearer, WID_RESULT_UNKNOWN_KEY),
        (WID_KEY_PURPOSE_WIT, &wit_set, WID_RESULT_OK),
    ] {
        let rp = new_keyring();
        let json = set.to_string();
        let mut n = 0usize;
        expect(
            unsafe {
                wid_keyring_import_jwks_purpose(
                    rp,
                    purpose,
                    json.as_ptr().cast(),
                    json.len(),
                    &mut n,
                )
            },
            WID_RESULT_OK,
        );
        assert_eq!(n, 2);
        let v = verifier(rp, &LIVE);
        let got = verify_proof(v, &wit, &wpt, TARGET, None, NOW);
        expect(got.err().unwrap_or(WID_RESULT_OK), want);
        unsafe { free!(v, rp) };
    }

    // Bearer keys only: no WIT, and the message names the fix; then one.
    let bearer_only = new_keyring();
    expect(
        unsafe { wid_keyring_rotate_alg(bearer_only, WID_ALG_ES256, NOW, null_mut()) },
        WID_RESULT_OK,
    );
    expect(
        issue_wit(bearer_only, WID_ALG_ES256, &request).unwrap_err(),
        WID_RESULT_NO_ACTIVE_KEY,
    );
    error_says("--purpose wit");
    let mut kid = empty();
    expect(
        unsafe {
            wid_keyring_rotate_purpose(
                bearer_only,
                WID_KEY_PURPOSE_WIT,
                WID_ALG_ES256,
                NOW,
                &mut kid,
            )
        },
        WID_RESULT_OK,
    );
    let kid = take(&mut kid);
    let wit = issue_wit(bearer_only, WID_ALG_ES256, &request).unwrap();
    assert_eq!(decode_segment(&wit, 0)["kid"], kid.as_str());
    unsafe { free!(key, bearer_only, kr) };
}

/// The kubernetes purpose through the C ABI: ES256 and RS256 keys only,
/// published in their own key set, never in the JWKS or the WIT key set,
/// and never signing a bearer token or a WIT.
#[test]
fn kubernetes_keys_are_their_own_purpose() {
    let kr = new_keyring();
    expect(
        // SAFETY: kr is live; a NULL out_key_id is allowed.
        unsafe {
            wid_keyring_rotate_purpose(
                kr,
                WID_KEY_PURPOSE_KUBERNETES,
                WID_ALG_EDDSA,
                NOW,
                null_mut(),
            )
        },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("ES256 or RS256");
    for alg in [WID_ALG_ES256, WID_ALG_RS256] {
        expect(
            // SAFETY: as above.
            unsafe {
                wid_keyring_rotate_purpose(kr, WID_KEY_PURPOSE_KUBERNETES, alg, NOW, null_mut())
            },
            WID_RESULT_OK,
        );
    }
    let mut out = empty();
    // SAFETY: kr is live, out a valid output.
    expect(
        unsafe { wid_keyring_jwks_purpose(kr, WID_KEY_PURPOSE_KUBERNETES, &mut out) },
        WID_RESULT_OK,
    );
    let set = json(&mut out);
    assert_eq!(set["keys"].as_array().unwrap().len(), 2, "{set}");
    let bearer: serde_json::Value = serde_json::from_str(&jwks(kr)).unwrap();
    assert_eq!(bearer["keys"], serde_json::json!([]));
    let mut out = empty();
    // SAFETY: as above.
    expect(
        unsafe { wid_keyring_jwks_purpose(kr, WID_KEY_PURPOSE_WIT, &mut out) },
        WID_RESULT_OK,
    );
    assert_eq!(json(&mut out)["keys"], serde_json::json!([]));
    // No bearer or WIT key: nothing signs for a workload.
    let key = generate(WID_ALG_ES256);
    let refused = issue_wit(kr, WID_ALG_ES256, &request_for(&public_jwk(key)));
    assert_eq!(refused.err(), Some(WID_RESULT_NO_ACTIVE_KEY));
    // SAFETY: both are live and freed once.
    unsafe { free!(key, kr) };
}
