//! Token profiles through the C ABI (`ffi/src/issuer.rs`): the issuer
//! builder (iss, algorithm, SPIFFE profile, WIMSE trust domain, extra claims
//! policy), issuers built from it, and `wid_keyring_spiffe_bundle`; result
//! codes, NULL and UTF-8 checks, values refused at once with the builder
//! unchanged, outputs written only on success, wrong handle types, and an
//! issuer shared by threads. (`bindings/c/test.c` drives the same functions
//! from C under valgrind.)

mod common;

use std::ptr::{null, null_mut};

use common::bytes::{empty, is_sentinel, json_of, sentinel, take, taken};
use common::ffi_text::{error_says, last_error};
use common::handles::free;
use common::handles::made;
use common::identity::decode_segment;
use common::keys::{bearer_and_wit_keyring, jwks, public_jwk, workload_key};
use common::keys::{build_issuer as build, issuer_builder as builder};
use common::live::ffi_live;
use common::request::proof_key;
use common::result::expect;
use common::strings::{StrArg, opt, s};
use workload_identity::codec;
use workload_identity::model::{IssueRequest, Node};
use workload_identity_ffi::*;

const NOW: i64 = 1_800_000_000;
const TD: &str = "example.org";
const ISS: &str = "https://nomad.example.com";
const POLICY: &str = r#"{"namespaces":{"default":{
    "required_extra_claims":{"unique_id":"${job.namespace}:${job.id}","owner":"${job.meta.owner}"},
    "optional_extra_claims":{"dc":"dc:${node.datacenter}","pool":"${job.node_pool}"}}}}"#;

/// The bearer-and-WIT keyring, its keys created just before `NOW`.
fn keyring() -> *mut wid_keyring {
    bearer_and_wit_keyring(NOW - 10)
}

/// A verifier for `audience` whose allocations are all live.
fn verifier(kr: *const wid_keyring, audience: &str) -> *mut wid_verifier {
    let (a, al) = s(audience);
    made(|out| unsafe { wid_verifier_new(kr, a, al, 0, Some(ffi_live), null_mut(), out) })
}

/// The bearer-and-WIT keyring, a verifier of its tokens for "vault.io" and
/// an issuer builder over it.
fn world() -> (*mut wid_keyring, *mut wid_verifier, *mut wid_issuer_builder) {
    let kr = keyring();
    (kr, verifier(kr, "vault.io"), builder(kr))
}

/// Sets `b` to sign with ES256 and to the SPIFFE profile of `TD` with
/// `path` (`None`: the default).
#[track_caller]
fn set_es256_spiffe(b: *mut wid_issuer_builder, path: Option<&str>) {
    expect(
        unsafe { wid_issuer_builder_set_algorithm(b, WID_ALG_ES256) },
        WID_RESULT_OK,
    );
    expect(set_spiffe(b, TD, path), WID_RESULT_OK);
}

/// `wid_issuer_builder_set_spiffe` with trust domain `td` and path `path`
/// (`None`: `(NULL, 0)`).
fn set_spiffe(b: *mut wid_issuer_builder, td: &str, path: Option<&str>) -> wid_result {
    let ((t, tl), (p, pl)) = (s(td), opt(path));
    unsafe { wid_issuer_builder_set_spiffe(b, t, tl, p, pl) }
}

/// `wid_issuer_builder_set_extra_claims_policy` with `json`.
fn set_policy(b: *mut wid_issuer_builder, json: &str) -> wid_result {
    let (j, jl) = s(json);
    unsafe { wid_issuer_builder_set_extra_claims_policy(b, j, jl) }
}

/// The token `iss` issues for `req` at `NOW`, or the code, the output
/// untouched.
fn issue(iss: *const wid_issuer, req: &IssueRequest) -> Result<String, wid_result> {
    let bytes = codec::encode(req).unwrap();
    let mut out = sentinel();
    let rc = unsafe { wid_issuer_issue(iss, bytes.as_ptr(), bytes.len(), NOW, &mut out) };
    taken(rc, &mut out, is_sentinel)
}

/// The claims of `token`, which must verify at `NOW`.
fn verify(v: *const wid_verifier, token: &str) -> serde_json::Value {
    common::verifier::claims_at(v, token, NOW)
}

/// `kr`'s SPIFFE bundle with refresh hint `hint`.
fn bundle(kr: *const wid_keyring, hint: u64) -> serde_json::Value {
    json_of(|out| unsafe { wid_keyring_spiffe_bundle(kr, hint, out) })
}

/// Each string setter of `b` given `value`, every one refused: the issuer,
/// the SPIFFE trust domain (no path), the SPIFFE path (`spiffe`: a trust
/// domain and the path), the WIMSE trust domain and the claims policy.
#[track_caller]
fn refuse_strings(
    b: *mut wid_issuer_builder,
    (v, vl): StrArg,
    ((t, tl), (p, pl)): (StrArg, StrArg),
) {
    let bad = WID_RESULT_INVALID_ARGUMENT;
    unsafe {
        expect(wid_issuer_builder_set_issuer(b, v, vl), bad);
        expect(wid_issuer_builder_set_spiffe(b, v, vl, null(), 0), bad);
        expect(wid_issuer_builder_set_spiffe(b, t, tl, p, pl), bad);
        expect(wid_issuer_builder_set_wimse_trust_domain(b, v, vl), bad);
        expect(wid_issuer_builder_set_extra_claims_policy(b, v, vl), bad);
    }
}

/// The sample task request (a child job of "web"; audiences vault.io and
/// consul.io; TTL 1 h) without the Nomad 2.0.3 fields.
fn task_request() -> IssueRequest {
    let mut r = common::issue_request_task();
    r.identity.extra_claims.clear();
    r
}

#[test]
fn an_es256_spiffe_issuer_signs_jwt_svids_that_verify() {
    let (kr, v, b) = world();
    set_es256_spiffe(b, None);
    expect(
        unsafe { wid_issuer_builder_set_issuer(b, ISS.as_ptr().cast(), ISS.len()) },
        WID_RESULT_OK,
    );
    let iss = build(b);
    let token = issue(iss, &task_request()).unwrap();
    let header = decode_segment(&token, 0);
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["kid"], "es");
    let claims = verify(v, &token);
    assert_eq!(
        claims["sub"],
        "spiffe://example.org/global/default/web/frontend/server/vault_default"
    );
    assert_eq!(claims["iss"], ISS);
    assert_eq!(claims["exp"], NOW + 3600);
    assert_eq!(claims["nomad_allocation_id"], common::ALLOC_ID);
    assert!(claims.get("extra_claims").is_none(), "{claims}");

    // EdDSA cannot sign a JWT-SVID: refused when issuing.
    let eddsa_b = builder(kr);
    expect(set_spiffe(eddsa_b, TD, None), WID_RESULT_OK);
    let eddsa = build(eddsa_b);
    expect(
        issue(eddsa, &task_request()).unwrap_err(),
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("ES256 or RS256");
    // No audience, no TTL: refused.
    let mut r = task_request();
    r.identity.audience.clear();
    expect(issue(iss, &r).unwrap_err(), WID_RESULT_INVALID_ARGUMENT);
    let mut r = task_request();
    r.identity.ttl = Default::default();
    expect(issue(iss, &r).unwrap_err(), WID_RESULT_INVALID_ARGUMENT);

    // The builder is not consumed; a changed path does not reach `iss`.
    expect(
        set_spiffe(b, TD, Some("/pool/${node.pool}/${workload.name}")),
        WID_RESULT_OK,
    );
    let pooled = build(b);
    let mut r = task_request();
    r.node = Some(Node {
        node_pool: "gpu".into(),
        ..Node::default()
    });
    assert_eq!(
        verify(v, &issue(pooled, &r).unwrap())["sub"],
        "spiffe://example.org/pool/gpu/server"
    );
    expect(
        issue(pooled, &task_request()).unwrap_err(),
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("Node.NodePool");
    assert_eq!(
        verify(v, &issue(iss, &r).unwrap())["sub"],
        "spiffe://example.org/global/default/web/frontend/server/vault_default"
    );

    // Issuers outlive the builder and the keyring handle, and see rotations.
    let mut new_kid = empty();
    expect(
        unsafe { wid_keyring_rotate_alg(kr, WID_ALG_ES256, NOW, &mut new_kid) },
        WID_RESULT_OK,
    );
    let new_kid = take(&mut new_kid);
    unsafe { free!(b, eddsa_b, kr) };
    let token = issue(iss, &task_request()).unwrap();
    assert_eq!(decode_segment(&token, 0)["kid"], new_kid);
    verify(v, &token);
    unsafe { free!(iss, pooled, eddsa, v) };
}

#[test]
fn extra_claims_from_a_policy_reach_the_verified_claims() {
    let (kr, v, b) = world();
    expect(set_policy(b, POLICY), WID_RESULT_OK);
    let iss = build(b);

    // The sample request with the 2.0.3 fields: Job.Meta owner, NodePool
    // gpu, the Node in dc1, the identity naming "dc" and "owner" (which is
    // required anyway).
    let claims = verify(v, &issue(iss, &common::issue_request_extra()).unwrap());
    assert_eq!(
        claims["extra_claims"],
        serde_json::json!({"dc": "dc:dc1", "owner": "team-a", "unique_id": "default:web"})
    );
    // A claim the namespace does not offer: refused, naming it.
    let mut r = common::issue_request_extra();
    r.identity.extra_claims = vec!["nope".into()];
    expect(issue(iss, &r).unwrap_err(), WID_RESULT_INVALID_ARGUMENT);
    error_says("nope");
    let mut r = common::issue_request_extra();
    r.identity.extra_claims = vec!["dc".into(), "pool".into()];
    let claims = verify(v, &issue(iss, &r).unwrap());
    assert_eq!(
        claims["extra_claims"],
        serde_json::json!({"dc": "dc:dc1", "owner": "team-a", "pool": "gpu", "unique_id": "default:web"})
    );
    r.identity.extra_claims.clear();
    let token = issue(iss, &r).unwrap();
    let claims = verify(v, &token);
    assert_eq!(
        claims["extra_claims"],
        serde_json::json!({"owner": "team-a", "unique_id": "default:web"})
    );
    // As the token carries it (the verified JSON is the same claim).
    assert_eq!(
        decode_segment(&token, 1)["extra_claims"],
        claims["extra_claims"]
    );
    // A required claim whose field the request lacks.
    let mut r = common::issue_request_extra();
    r.identity.extra_claims = vec!["dc".into()];
    r.allocation.job.as_mut().unwrap().meta.clear();
    expect(issue(iss, &r).unwrap_err(), WID_RESULT_INVALID_ARGUMENT);
    error_says("Meta");

    // Without a policy, an identity naming claims is refused; wid_issue too.
    let plain_b = builder(kr);
    let plain = build(plain_b);
    let mut r = common::issue_request_extra();
    r.identity.extra_claims = vec!["dc".into()];
    expect(issue(plain, &r).unwrap_err(), WID_RESULT_INVALID_ARGUMENT);
    let bytes = codec::encode(&r).unwrap();
    let mut out = sentinel();
    expect(
        unsafe { wid_issue(kr, bytes.as_ptr(), bytes.len(), NOW, &mut out) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    assert!(is_sentinel(&out));
    unsafe { free!(iss, plain, b, plain_b, v, kr) };
}

#[test]
fn a_proof_key_request_gets_a_wit_with_a_trust_domain() {
    let kr = keyring();
    let b = builder(kr);
    let key = workload_key(WID_ALG_ES256);
    let jwk = public_jwk(key);
    let mut r = task_request();
    r.proof_key = Some(proof_key(&jwk));
    let no_td = build(b);
    expect(issue(no_td, &r).unwrap_err(), WID_RESULT_INVALID_ARGUMENT);
    error_says("trust domain");
    let td = "nomad.example.com";
    expect(
        unsafe { wid_issuer_builder_set_wimse_trust_domain(b, td.as_ptr().cast(), td.len()) },
        WID_RESULT_OK,
    );
    let wimse = build(b);
    let wit = issue(wimse, &r).unwrap();
    assert_eq!(decode_segment(&wit, 0)["typ"], "wit+jwt");
    let claims = decode_segment(&wit, 1);
    assert_eq!(
        claims["sub"],
        "wimse://nomad.example.com/global/default/web/frontend/server/vault_default"
    );
    assert_eq!(claims["cnf"]["jwk"], jwk);
    // With a SPIFFE profile too, a WIT-SVID: never EdDSA (the WIT-SVID
    // draft allows RS, ES and PS only), so the issuer's EdDSA is refused.
    expect(set_spiffe(b, TD, None), WID_RESULT_OK);
    let ed_svid = build(b);
    expect(issue(ed_svid, &r).unwrap_err(), WID_RESULT_INVALID_ARGUMENT);
    error_says("WIT-SVID");
    expect(
        unsafe { wid_issuer_builder_set_algorithm(b, WID_ALG_ES256) },
        WID_RESULT_OK,
    );
    let svid = build(b);
    let wit = issue(svid, &r).unwrap();
    let header = decode_segment(&wit, 0);
    assert_eq!(
        (&header["alg"], &header["kid"]),
        (&"ES256".into(), &"wit-es".into())
    );
    let claims = decode_segment(&wit, 1);
    assert_eq!(
        claims["sub"],
        "spiffe://example.org/global/default/web/frontend/server/vault_default"
    );
    assert!(
        claims.get("aud").is_none(),
        "a WIT carries no aud: {claims}"
    );
    unsafe { free!(ed_svid, no_td, wimse, svid, b, key, kr) };
}

#[test]
fn bad_values_are_refused_at_once_and_leave_the_builder_unchanged() {
    let (kr, v, b) = world();
    // A valid configuration first.
    set_es256_spiffe(b, Some("/ns/${job.namespace}"));
    expect(
        unsafe { wid_issuer_builder_set_issuer(b, ISS.as_ptr().cast(), ISS.len()) },
        WID_RESULT_OK,
    );

    // SPIFFE: bad trust domains and paths, each named.
    for (td, path, needle) in [
        ("Bad.Domain", None, "lower-case"),
        ("", None, "bytes"),
        ("a b", None, "' '"),
        (TD, Some("/a/../b"), "may not contain"),
        (TD, Some("a/b"), "start with '/'"),
        (TD, Some("/a//b"), "empty"),
        (TD, Some("/x/${nope}"), "nope"),
        (TD, Some("/é"), "é"),
    ] {
        expect(set_spiffe(b, td, path), WID_RESULT_INVALID_ARGUMENT);
        assert!(
            last_error().contains(needle),
            "{td} {path:?}: {}",
            last_error()
        );
    }
    // The WIMSE trust domain.
    for td in ["", "Bad.Domain", "a..b", "-a"] {
        let rc =
            unsafe { wid_issuer_builder_set_wimse_trust_domain(b, td.as_ptr().cast(), td.len()) };
        expect(rc, WID_RESULT_INVALID_ARGUMENT);
    }
    // Policies: a reserved name (any case, or nomad_*), malformed JSON, an
    // unknown member, an unknown variable, a duplicate key, too many claims.
    let many: Vec<String> = (0..33).map(|i| format!("\"c{i}\":\"x\"")).collect();
    let too_many = format!(
        r#"{{"namespaces":{{"default":{{"required_extra_claims":{{{}}}}}}}}}"#,
        many.join(",")
    );
    for (json, needle) in [
        (
            r#"{"namespaces":{"default":{"required_extra_claims":{"sub":"x"}}}}"#,
            "reserved",
        ),
        (
            r#"{"namespaces":{"default":{"optional_extra_claims":{"SUB":"x"}}}}"#,
            "reserved",
        ),
        (
            r#"{"namespaces":{"default":{"required_extra_claims":{"nomad_x":"x"}}}}"#,
            "reserved",
        ),
        (r#"{"namespaces":"#, "namespaces"),
        ("", "namespaces"),
        (r#"{"namespace":{}}"#, "namespace"),
        (
            r#"{"namespaces":{"default":{"required_extra_claims":{"a":"${job.nope}"}}}}"#,
            "job.nope",
        ),
        (
            r#"{"namespaces":{"default":{"required_extra_claims":{"a":"x","a":"y"}}}}"#,
            "a",
        ),
        (too_many.as_str(), "32"),
    ] {
        expect(set_policy(b, json), WID_RESULT_INVALID_ARGUMENT);
        assert!(last_error().contains(needle), "{json}: {}", last_error());
    }
    // The algorithm.
    for alg in [0, 4, 99, u32::MAX] {
        expect(
            unsafe { wid_issuer_builder_set_algorithm(b, alg) },
            WID_RESULT_INVALID_ARGUMENT,
        );
    }
    // Not UTF-8, anywhere; lengths past the caps, refused from the length
    // alone (never read).
    let (bad, one) = ([0xffu8, 0xfe], [b'a']);
    let (bad, one) = ((bad.as_ptr().cast(), 2), one.as_ptr().cast());
    refuse_strings(b, bad, (s(TD), bad));
    refuse_strings(b, (one, usize::MAX), ((one, 1), (one, 1 << 30)));

    // After all that, the builder is as it was.
    let iss = build(b);
    let claims = verify(v, &issue(iss, &task_request()).unwrap());
    assert_eq!(claims["sub"], "spiffe://example.org/ns/default");
    assert_eq!(claims["iss"], ISS);
    assert!(claims.get("extra_claims").is_none());
    // (NULL, 0) clears the issuer; an empty path is the default path.
    unsafe {
        expect(wid_issuer_builder_set_issuer(b, null(), 0), WID_RESULT_OK);
    }
    expect(set_spiffe(b, TD, Some("")), WID_RESULT_OK);
    let cleared = build(b);
    let claims = verify(v, &issue(cleared, &task_request()).unwrap());
    assert!(claims.get("iss").is_none(), "{claims}");
    assert_eq!(
        claims["sub"],
        "spiffe://example.org/global/default/web/frontend/server/vault_default"
    );
    unsafe { free!(iss, cleared, b, v, kr) };
}

#[test]
fn nulls_decoding_errors_and_wrong_handles() {
    let kr = keyring();
    let b = builder(kr);
    let iss = build(b);
    let req = codec::encode(&task_request()).unwrap();
    let mut out = sentinel();
    unsafe {
        // NULL handles and outputs.
        let na = WID_RESULT_NULL_ARGUMENT;
        let ((i, il), (t, tl), p) = (s(ISS), s(TD), POLICY.as_ptr().cast());
        let (r, rl) = (req.as_ptr(), req.len());
        let mut b_out = std::ptr::dangling_mut::<wid_issuer_builder>();
        expect(wid_issuer_builder_new(null(), &mut b_out), na);
        assert_eq!(b_out, std::ptr::dangling_mut());
        expect(wid_issuer_builder_new(kr, null_mut()), na);
        expect(wid_issuer_builder_set_issuer(null_mut(), i, il), na);
        expect(wid_issuer_builder_set_issuer(b, null(), 3), na);
        expect(
            wid_issuer_builder_set_algorithm(null_mut(), WID_ALG_ES256),
            na,
        );
        expect(
            wid_issuer_builder_set_spiffe(null_mut(), t, tl, null(), 0),
            na,
        );
        expect(wid_issuer_builder_set_spiffe(b, null(), 3, null(), 0), na);
        expect(wid_issuer_builder_set_spiffe(b, t, tl, null(), 3), na);
        let empty_td = wid_issuer_builder_set_spiffe(b, null(), 0, null(), 0);
        expect(empty_td, WID_RESULT_INVALID_ARGUMENT);
        expect(
            wid_issuer_builder_set_wimse_trust_domain(null_mut(), t, tl),
            na,
        );
        expect(wid_issuer_builder_set_wimse_trust_domain(b, null(), 3), na);
        expect(
            wid_issuer_builder_set_extra_claims_policy(null_mut(), p, 3),
            na,
        );
        expect(wid_issuer_builder_set_extra_claims_policy(b, null(), 3), na);
        let mut iss_out = std::ptr::dangling_mut::<wid_issuer>();
        expect(wid_issuer_builder_build(null(), &mut iss_out), na);
        assert_eq!(iss_out, std::ptr::dangling_mut());
        expect(wid_issuer_builder_build(b, null_mut()), na);
        expect(wid_issuer_issue(null(), r, rl, NOW, &mut out), na);
        expect(wid_issuer_issue(iss, null(), 5, NOW, &mut out), na);
        expect(wid_issuer_issue(iss, r, rl, NOW, null_mut()), na);
        expect(wid_keyring_spiffe_bundle(null(), 0, &mut out), na);
        expect(wid_keyring_spiffe_bundle(kr, 0, null_mut()), na);
        // Bytes that are not a request; a length past the 4 MiB cap.
        for cut in [0, 1, req.len() / 2, req.len() - 1] {
            expect(
                wid_issuer_issue(iss, req.as_ptr(), cut, NOW, &mut out),
                WID_RESULT_DECODE_ERROR,
            );
        }
        expect(
            wid_issuer_issue(iss, req.as_ptr(), usize::MAX, NOW, &mut out),
            WID_RESULT_INVALID_ARGUMENT,
        );
        assert!(is_sentinel(&out));

        // Wrong handle types: detected; frees through the wrong function
        // are ignored.
        let iss_as_b = iss.cast::<wid_issuer_builder>();
        let kr_as_b = kr.cast::<wid_issuer_builder>();
        let b_as_iss = b.cast::<wid_issuer>().cast_const();
        let kr_as_iss = kr.cast::<wid_issuer>().cast_const();
        let iss_as_kr = iss.cast::<wid_keyring>().cast_const();
        let b_as_kr = b.cast::<wid_keyring>().cast_const();
        for handle in [b_as_iss, kr_as_iss] {
            expect(
                wid_issuer_issue(handle, req.as_ptr(), req.len(), NOW, &mut out),
                WID_RESULT_INVALID_ARGUMENT,
            );
            error_says("wid_issuer");
        }
        for handle in [iss_as_b, kr_as_b] {
            expect(
                wid_issuer_builder_build(handle, &mut iss_out),
                WID_RESULT_INVALID_ARGUMENT,
            );
            expect(
                wid_issuer_builder_set_algorithm(handle, WID_ALG_ES256),
                WID_RESULT_INVALID_ARGUMENT,
            );
            expect(set_policy(handle, POLICY), WID_RESULT_INVALID_ARGUMENT);
        }
        for handle in [iss_as_kr, b_as_kr] {
            expect(
                wid_keyring_spiffe_bundle(handle, 0, &mut out),
                WID_RESULT_INVALID_ARGUMENT,
            );
            expect(
                wid_issuer_builder_new(handle, &mut b_out),
                WID_RESULT_INVALID_ARGUMENT,
            );
        }
        assert!(is_sentinel(&out));
        assert_eq!(iss_out, std::ptr::dangling_mut());
        assert_eq!(b_out, std::ptr::dangling_mut());
        wid_issuer_free(b_as_iss);
        wid_issuer_free(kr_as_iss);
        wid_issuer_builder_free(iss_as_b);
        wid_issuer_builder_free(kr_as_b);
        wid_keyring_free(iss_as_kr);
        wid_keyring_free(b_as_kr);
        // All three still work; the frees are NULL-safe.
        issue(iss, &task_request()).unwrap();
        wid_issuer_free(build(b));
        bundle(kr, 0);
        wid_issuer_free(null());
        wid_issuer_builder_free(null_mut());
        wid_issuer_free(iss);
        wid_issuer_builder_free(b);
        wid_keyring_free(kr);
    }
}

#[test]
fn the_spiffe_bundle_lists_jwt_authorities() {
    let kr = keyring();
    let b = bundle(kr, 60);
    assert_eq!(b["spiffe_refresh_hint"], 60);
    let keys = b["keys"].as_array().unwrap();
    // The Ed25519 keys are left out, and WIT keys are never JWT-SVID
    // authorities (nor listed at all: some validators ignore `use`).
    assert_eq!(keys.len(), 1, "{b}");
    assert_eq!(keys[0]["use"], "jwt-svid");
    assert_eq!(keys[0]["kid"], "es");
    assert_eq!(keys[0]["kty"], "EC");
    assert_eq!(keys[0]["alg"], "ES256");
    assert_eq!(bundle(kr, 0)["spiffe_refresh_hint"], 300, "0: the default");
    assert_eq!(bundle(kr, u64::MAX)["spiffe_refresh_hint"], u64::MAX);
    // The same keys as the JWKS, apart from `use`.
    let jwks: serde_json::Value = serde_json::from_str(&jwks(kr)).unwrap();
    let mut es = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == "es")
        .unwrap()
        .clone();
    es["use"] = "jwt-svid".into();
    assert_eq!(keys[0], es);
    unsafe { wid_keyring_free(kr) };
}

#[test]
fn an_issuer_is_shared_by_threads() {
    let (kr, v, b) = world();
    set_es256_spiffe(b, None);
    expect(set_policy(b, POLICY), WID_RESULT_OK);
    let iss = build(b);
    let (iss_addr, v_addr, b_addr) = (iss as usize, v as usize, b as usize);
    let mut r = common::issue_request_extra();
    r.identity.extra_claims = vec!["dc".into()];
    std::thread::scope(|s| {
        for t in 0..4 {
            let r = &r;
            s.spawn(move || {
                for _ in 0..25 {
                    let token = issue(iss_addr as *const wid_issuer, r).unwrap();
                    let claims = verify(v_addr as *const wid_verifier, &token);
                    assert_eq!(claims["extra_claims"]["dc"], "dc:dc1");
                }
                // The builder is locked, not raced: setters from threads.
                let b = b_addr as *mut wid_issuer_builder;
                let iss = format!("https://nomad-{t}.example.com");
                expect(
                    unsafe { wid_issuer_builder_set_issuer(b, iss.as_ptr().cast(), iss.len()) },
                    WID_RESULT_OK,
                );
                unsafe { wid_issuer_free(build(b)) };
            });
        }
    });
    unsafe { free!(iss, b, v, kr) };
}
