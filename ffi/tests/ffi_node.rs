//! Node identities through the C ABI (`wid_issue_node`,
//! `wid_issuer_issue_node`, `wid_verifier_builder_set_node_tokens`,
//! `wid_verifier_builder_set_node_lookup`): tokens issued from msgpack
//! requests carry Nomad 1.11's node claims, verify only where node tokens are
//! accepted, and are bound to the node lookup's answers (missing, down, a
//! failing or absent lookup fails closed); allocation tokens are refused by
//! a node-only verifier. NULLs, bad values, outputs untouched on failure and
//! wrong handle types. (`bindings/c/test.c` drives the same functions from C
//! under valgrind.)

mod common;

use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::Mutex;

use common::bytes::{is_sentinel, sentinel, text_of};
use common::ffi_text::{error_says, last_error};
use common::handles::free;
use common::handles::made;
use common::identity::{NOW, decode_segment};
use common::keys::{build_issuer, insert, issuer_builder, new_keyring};
use common::request::{NODE, issue as issue_alloc, node_request, task_vector as alloc_request};
use common::result::expect;
use common::strings::{opt, s};
use common::verifier::{build, claims_at, verify, verify_batch};
use workload_identity::codec;
use workload_identity::model::{GoDuration, NodeIdentityRequest};
use workload_identity_ffi::*;

const ALLOC: &str = common::ALLOC_ID;
const NODE_AUD: &str = "nomadproject.io";
const ISS: &str = "https://nomad.example.com";

fn encoded(req: &NodeIdentityRequest) -> Vec<u8> {
    codec::encode(req).unwrap()
}

/// A keyring with active EdDSA ("k1") and ES256 ("e1") keys.
fn keyring() -> *mut wid_keyring {
    let kr = new_keyring();
    for (alg, kid) in [(WID_ALG_EDDSA, "k1"), (WID_ALG_ES256, "e1")] {
        insert(kr, None, alg, kid, 9, 0);
    }
    kr
}

/// The node token `kr`'s key of `alg` issues for `req` at `NOW`, with `iss`
/// (or `None`: `(NULL, 0)`) as its issuer.
fn issue_node_with(kr: *const wid_keyring, alg: wid_alg, req: &[u8], iss: Option<&str>) -> String {
    let ((r, rl), (i, il)) = ((req.as_ptr(), req.len()), opt(iss));
    text_of(|out| unsafe { wid_issue_node(kr, alg, r, rl, i, il, NOW, out) })
}

/// [`issue_node_with`] the issuer `iss` ("" for none).
fn issue_node(kr: *const wid_keyring, alg: wid_alg, req: &[u8], iss: &str) -> String {
    issue_node_with(kr, alg, req, Some(iss))
}

fn header(token: &str) -> serde_json::Value {
    decode_segment(token, 0)
}

/// A keyring with "k1" and "e1", a node token of its EdDSA key (no
/// issuer), and an allocation lookup where the sample allocation is live.
fn world() -> (*mut wid_keyring, String, Table) {
    let kr = keyring();
    let token = issue_node(kr, WID_ALG_EDDSA, &encoded(&node_request()), "");
    (kr, token, live().0)
}

/// Allocation and node lookups where the sample allocation and node are
/// live.
fn live() -> (Table, Table) {
    (
        Table::new(ALLOC, WID_ALLOC_LIVE, WID_ALLOC_LIVE),
        Table::new(NODE, WID_NODE_LIVE, WID_NODE_LIVE),
    )
}

/// What a lookup callback answers, and the consistencies it was asked for.
struct Table {
    id: &'static str,
    stale: u32,
    consistent: u32,
    rc: wid_result,
    write: bool,
    seen: Mutex<Vec<(String, u32)>>,
}

impl Table {
    fn new(id: &'static str, stale: u32, consistent: u32) -> Table {
        Table {
            id,
            stale,
            consistent,
            rc: WID_RESULT_OK,
            write: true,
            seen: Mutex::new(Vec::new()),
        }
    }

    fn seen(&self) -> Vec<(String, u32)> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }

    fn ptr(&self) -> *mut c_void {
        self as *const Table as *mut c_void
    }
}

/// The lookup for both kinds: the userdata is a `Table`; IDs other than its
/// own are missing (0 is both WID_ALLOC_MISSING and WID_NODE_MISSING).
unsafe extern "C" fn lookup(
    table: *mut c_void,
    id: *const u8,
    len: usize,
    consistency: u32,
    out: *mut u32,
) -> wid_result {
    let t = unsafe { &*(table as *const Table) };
    let id = unsafe { std::str::from_utf8(std::slice::from_raw_parts(id, len)) }
        .unwrap()
        .to_string();
    let known = id == t.id;
    t.seen.lock().unwrap().push((id, consistency));
    if t.rc != WID_RESULT_OK {
        return t.rc;
    }
    if t.write {
        let state = match (known, consistency) {
            (false, _) => 0,
            (true, WID_CONSISTENCY_STALE) => t.stale,
            (true, _) => t.consistent,
        };
        unsafe { *out = state };
    }
    WID_RESULT_OK
}

/// A builder for `aud` whose allocation lookup is `allocs`.
fn builder(kr: *const wid_keyring, aud: &str, allocs: &Table) -> *mut wid_verifier_builder {
    let b = common::verifier::builder(kr, Some(lookup), allocs.ptr(), aud);
    expect(
        unsafe { wid_verifier_builder_set_key_wait_ms(b, 0) },
        WID_RESULT_OK,
    );
    b
}

/// A verifier for `aud`, accepting `mode`, with `nodes` as its node lookup
/// (None: no node lookup).
fn node_verifier(
    kr: *const wid_keyring,
    aud: &str,
    mode: u32,
    allocs: &Table,
    nodes: Option<&Table>,
) -> *mut wid_verifier {
    let b = builder(kr, aud, allocs);
    set_node_tokens(b, mode, nodes, WID_RESULT_OK);
    let v = build(b);
    unsafe { wid_verifier_builder_free(b) };
    v
}

/// Sets `b` to take node tokens as `mode` says and, with `nodes`, to ask it
/// about nodes; each answering `want`.
#[track_caller]
fn set_node_tokens(
    b: *mut wid_verifier_builder,
    mode: u32,
    nodes: Option<&Table>,
    want: wid_result,
) {
    expect(
        unsafe { wid_verifier_builder_set_node_tokens(b, mode) },
        want,
    );
    if let Some(nodes) = nodes {
        let n = nodes.ptr();
        expect(
            unsafe { wid_verifier_builder_set_node_lookup(b, Some(lookup), n) },
            want,
        );
    }
}

fn verify_claims(v: *const wid_verifier, token: &str) -> serde_json::Value {
    claims_at(v, token, NOW)
}

#[test]
fn node_tokens_issued_from_c_carry_nomads_node_claims() {
    let kr = keyring();
    let req = encoded(&node_request());
    let (allocs, nodes) = live();
    let v = node_verifier(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, Some(&nodes));

    let token = issue_node(kr, WID_ALG_EDDSA, &req, ISS);
    assert_eq!(header(&token)["alg"], "EdDSA");
    let c = verify_claims(v, &token);
    assert_eq!(c["nomad_node_id"], NODE);
    assert_eq!(c["nomad_node_pool"], "default");
    assert_eq!(c["nomad_node_class"], "gpu");
    assert_eq!(c["nomad_node_datacenter"], "dc1");
    assert_eq!(c["sub"], format!("node:global:default:{NODE}:default"));
    assert_eq!(c["aud"], NODE_AUD);
    assert_eq!(c["iat"], NOW);
    assert_eq!(c["nbf"], NOW);
    assert_eq!(c["exp"], NOW + 24 * 3600);
    assert_eq!(c["iss"], ISS);
    assert_eq!(c["jti"].as_str().unwrap().len(), 36);
    for absent in [
        "nomad_namespace",
        "nomad_job_id",
        "nomad_allocation_id",
        "nomad_task",
    ] {
        assert!(c.get(absent).is_none(), "{absent}: {c}");
    }
    // Asked about the node once, stale; the allocation lookup never.
    assert_eq!(nodes.seen(), [(NODE.to_string(), WID_CONSISTENCY_STALE)]);
    assert!(allocs.seen().is_empty());

    // ES256, the request's audiences and TTL, no issuer ((NULL, 0) and "").
    let custom = NodeIdentityRequest {
        audience: vec!["consul.io".into(), NODE_AUD.into()],
        ttl: GoDuration::from_secs(3600),
        ..node_request()
    };
    let req = encoded(&custom);
    let token = issue_node_with(kr, WID_ALG_ES256, &req, None);
    assert_eq!(header(&token)["alg"], "ES256");
    assert_eq!(header(&token)["kid"], "e1");
    let c = verify_claims(v, &token);
    assert_eq!(c["aud"], serde_json::json!(["consul.io", NODE_AUD]));
    assert_eq!(c["exp"], NOW + 3600);
    assert!(c.get("iss").is_none());
    let token = issue_node(kr, WID_ALG_EDDSA, &req, "");
    assert!(verify_claims(v, &token).get("iss").is_none());

    unsafe { free!(v, kr) };
}

#[test]
fn an_issuer_handle_issues_node_tokens_with_its_algorithm_and_iss() {
    let kr = keyring();
    let b = issuer_builder(kr);
    expect(
        unsafe { wid_issuer_builder_set_algorithm(b, WID_ALG_ES256) },
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_issuer_builder_set_issuer(b, ISS.as_ptr().cast(), ISS.len()) },
        WID_RESULT_OK,
    );
    // A SPIFFE profile does not apply to node identities.
    let td = "example.org";
    expect(
        unsafe { wid_issuer_builder_set_spiffe(b, td.as_ptr().cast(), td.len(), null(), 0) },
        WID_RESULT_OK,
    );
    let iss = build_issuer(b);
    let req = encoded(&node_request());
    let token =
        text_of(|out| unsafe { wid_issuer_issue_node(iss, req.as_ptr(), req.len(), NOW, out) });
    assert_eq!(header(&token)["alg"], "ES256");

    let (allocs, nodes) = live();
    let v = node_verifier(kr, NODE_AUD, WID_NODE_TOKENS_ONLY, &allocs, Some(&nodes));
    let c = verify_claims(v, &token);
    assert_eq!(c["iss"], ISS);
    assert_eq!(c["sub"], format!("node:global:default:{NODE}:default"));
    assert_eq!(c["nomad_node_id"], NODE);

    // No active key of the issuer's algorithm.
    expect(
        unsafe { wid_issuer_builder_set_algorithm(b, WID_ALG_RS256) },
        WID_RESULT_OK,
    );
    let rs = build_issuer(b);
    let mut out = sentinel();
    let rc = unsafe { wid_issuer_issue_node(rs, req.as_ptr(), req.len(), NOW, &mut out) };
    expect(rc, WID_RESULT_NO_ACTIVE_KEY);
    assert!(is_sentinel(&out));

    unsafe { free!(rs, iss, b, v, kr) };
}

#[test]
fn the_node_lookup_decides_and_fails_closed() {
    let (kr, token, allocs) = world();

    // Missing after a stale and a consistent read.
    let nodes = Table::new(NODE, WID_NODE_MISSING, WID_NODE_MISSING);
    let v = node_verifier(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, Some(&nodes));
    expect(verify(v, &token), WID_RESULT_NODE_NOT_FOUND);
    error_says(NODE);
    assert_eq!(
        nodes.seen(),
        [
            (NODE.to_string(), WID_CONSISTENCY_STALE),
            (NODE.to_string(), WID_CONSISTENCY_CONSISTENT)
        ]
    );
    unsafe { wid_verifier_free(v) };

    // A lagging replica: missing when stale, live when consistent.
    let nodes = Table::new(NODE, WID_NODE_MISSING, WID_NODE_LIVE);
    let v = node_verifier(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, Some(&nodes));
    expect(verify(v, &token), WID_RESULT_OK);
    assert_eq!(nodes.seen().len(), 2);
    unsafe { wid_verifier_free(v) };

    // Down: no consistent read needed.
    let nodes = Table::new(NODE, WID_NODE_DOWN, WID_NODE_LIVE);
    let v = node_verifier(kr, NODE_AUD, WID_NODE_TOKENS_ONLY, &allocs, Some(&nodes));
    expect(verify(v, &token), WID_RESULT_NODE_DOWN);
    assert_eq!(nodes.seen().len(), 1);
    unsafe { wid_verifier_free(v) };

    // The callback's error, an unknown state, no write: fail closed.
    let mut failing = Table::new(NODE, WID_NODE_LIVE, WID_NODE_LIVE);
    failing.rc = WID_RESULT_IO_ERROR;
    let v = node_verifier(
        kr,
        NODE_AUD,
        WID_NODE_TOKENS_ACCEPT,
        &allocs,
        Some(&failing),
    );
    expect(verify(v, &token), WID_RESULT_STORE_UNAVAILABLE);
    error_says("WID_RESULT_IO_ERROR");
    unsafe { wid_verifier_free(v) };
    let odd = Table::new(NODE, 7, WID_NODE_LIVE);
    let v = node_verifier(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, Some(&odd));
    expect(verify(v, &token), WID_RESULT_STORE_UNAVAILABLE);
    error_says("state 7");
    unsafe { wid_verifier_free(v) };
    let mut silent = Table::new(NODE, WID_NODE_LIVE, WID_NODE_LIVE);
    silent.write = false;
    let v = node_verifier(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, Some(&silent));
    expect(verify(v, &token), WID_RESULT_STORE_UNAVAILABLE);
    unsafe { wid_verifier_free(v) };

    // No node lookup at all: node tokens fail closed, allocation tokens are
    // unaffected.
    let v = node_verifier(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, None);
    expect(verify(v, &token), WID_RESULT_STORE_UNAVAILABLE);
    error_says("wid_verifier_builder_set_node_lookup");
    unsafe { wid_verifier_free(v) };
    let alloc_token = issue_alloc(kr);
    let v = node_verifier(kr, "vault.io", WID_NODE_TOKENS_ACCEPT, &allocs, None);
    expect(verify(v, &alloc_token), WID_RESULT_OK);
    unsafe { wid_verifier_free(v) };

    // A node lookup that knows another node: not found.
    let other = Table::new("another-node", WID_NODE_LIVE, WID_NODE_LIVE);
    let v = node_verifier(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, Some(&other));
    expect(verify(v, &token), WID_RESULT_NODE_NOT_FOUND);
    unsafe { wid_verifier_free(v) };

    // Batches give the same verdicts.
    let nodes = Table::new(NODE, WID_NODE_DOWN, WID_NODE_DOWN);
    let v = node_verifier(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, Some(&nodes));
    let toks = [token.as_ptr().cast(), token.as_ptr().cast()];
    let lens = [token.len(), 3];
    let results = verify_batch(v, &toks, &lens);
    assert_eq!(results, [WID_RESULT_NODE_DOWN, WID_RESULT_MALFORMED_TOKEN]);
    unsafe { free!(v, kr) };
}

#[test]
fn each_kind_is_accepted_only_where_the_mode_allows_it() {
    let kr = keyring();
    // A node token for vault.io too, so one audience serves both kinds.
    let node_req = NodeIdentityRequest {
        audience: vec!["vault.io".into()],
        ..node_request()
    };
    let node_token = issue_node(kr, WID_ALG_EDDSA, &encoded(&node_req), "");
    let alloc_token = issue_alloc(kr);
    let (allocs, nodes) = live();

    for (mode, node_rc, alloc_rc) in [
        (
            WID_NODE_TOKENS_REFUSE,
            WID_RESULT_TOKEN_KIND_REFUSED,
            WID_RESULT_OK,
        ),
        (WID_NODE_TOKENS_ACCEPT, WID_RESULT_OK, WID_RESULT_OK),
        (
            WID_NODE_TOKENS_ONLY,
            WID_RESULT_OK,
            WID_RESULT_TOKEN_KIND_REFUSED,
        ),
    ] {
        let v = node_verifier(kr, "vault.io", mode, &allocs, Some(&nodes));
        expect(verify(v, &node_token), node_rc);
        expect(verify(v, &alloc_token), alloc_rc);
        unsafe { wid_verifier_free(v) };
    }
    // A refused kind is refused before any lookup.
    assert_eq!(nodes.seen().len(), 2);
    assert_eq!(allocs.seen().len(), 2);

    // The default builder, and the older constructors: allocation tokens only.
    let b = builder(kr, "vault.io", &allocs);
    let v = build(b);
    let mut out = sentinel();
    let (t, tl) = s(&node_token);
    let rc = unsafe { wid_verify(v, t, tl, NOW, &mut out) };
    expect(rc, WID_RESULT_TOKEN_KIND_REFUSED);
    error_says(NODE);
    assert!(is_sentinel(&out));
    let (a, al) = s("vault.io");
    let old =
        made(|out| unsafe { wid_verifier_new(kr, a, al, 60, Some(lookup), allocs.ptr(), out) });
    expect(verify(old, &node_token), WID_RESULT_TOKEN_KIND_REFUSED);
    expect(verify(old, &alloc_token), WID_RESULT_OK);

    // Setting the mode back to refuse.
    expect(
        unsafe { wid_verifier_builder_set_node_tokens(b, WID_NODE_TOKENS_ONLY) },
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_verifier_builder_set_node_tokens(b, WID_NODE_TOKENS_REFUSE) },
        WID_RESULT_OK,
    );
    let v2 = build(b);
    expect(verify(v2, &node_token), WID_RESULT_TOKEN_KIND_REFUSED);
    expect(verify(v2, &alloc_token), WID_RESULT_OK);

    unsafe { free!(old, v, v2, b, kr) };
}

#[test]
fn settings_reach_only_verifiers_built_after_them() {
    let (kr, token, allocs) = world();
    let live = Table::new(NODE, WID_NODE_LIVE, WID_NODE_LIVE);
    let down = Table::new(NODE, WID_NODE_DOWN, WID_NODE_DOWN);
    let b = builder(kr, NODE_AUD, &allocs);
    expect(
        unsafe { wid_verifier_builder_set_node_tokens(b, WID_NODE_TOKENS_ACCEPT) },
        WID_RESULT_OK,
    );
    let no_lookup = build(b);
    expect(
        unsafe { wid_verifier_builder_set_node_lookup(b, Some(lookup), live.ptr()) },
        WID_RESULT_OK,
    );
    let v_live = build(b);
    expect(
        unsafe { wid_verifier_builder_set_node_lookup(b, Some(lookup), down.ptr()) },
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_verifier_builder_set_node_tokens(b, WID_NODE_TOKENS_REFUSE) },
        WID_RESULT_OK,
    );
    let v_refuse = build(b);
    expect(
        unsafe { wid_verifier_builder_set_node_tokens(b, WID_NODE_TOKENS_ONLY) },
        WID_RESULT_OK,
    );
    let v_down = build(b);
    unsafe { wid_verifier_builder_free(b) };

    expect(verify(no_lookup, &token), WID_RESULT_STORE_UNAVAILABLE);
    expect(verify(v_live, &token), WID_RESULT_OK);
    expect(verify(v_refuse, &token), WID_RESULT_TOKEN_KIND_REFUSED);
    expect(verify(v_down, &token), WID_RESULT_NODE_DOWN);
    unsafe {
        for v in [no_lookup, v_live, v_refuse, v_down] {
            wid_verifier_free(v);
        }
        wid_keyring_free(kr);
    }
}

#[test]
fn nulls_bad_values_and_wrong_handles_leave_everything_untouched() {
    let kr = keyring();
    let req = encoded(&node_request());
    let (allocs, nodes) = live();
    let issue = |kr: *const wid_keyring, alg: u32, r: *const u8, n: usize, out: *mut wid_bytes| unsafe {
        wid_issue_node(kr, alg, r, n, null(), 0, NOW, out)
    };

    // wid_issue_node
    let mut out = sentinel();
    expect(
        issue(null(), WID_ALG_EDDSA, req.as_ptr(), req.len(), &mut out),
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        issue(kr, WID_ALG_EDDSA, null(), 5, &mut out),
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        issue(kr, WID_ALG_EDDSA, req.as_ptr(), req.len(), null_mut()),
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        issue(kr, 0, req.as_ptr(), req.len(), &mut out),
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        issue(kr, 4, req.as_ptr(), req.len(), &mut out),
        WID_RESULT_INVALID_ARGUMENT,
    );
    // A length past the 4 MiB cap is refused before anything is read.
    expect(
        issue(kr, WID_ALG_EDDSA, req.as_ptr(), usize::MAX, &mut out),
        WID_RESULT_INVALID_ARGUMENT,
    );
    // Empty, truncated, trailing bytes, not a map.
    expect(
        issue(kr, WID_ALG_EDDSA, null(), 0, &mut out),
        WID_RESULT_DECODE_ERROR,
    );
    expect(
        issue(kr, WID_ALG_EDDSA, req.as_ptr(), req.len() - 1, &mut out),
        WID_RESULT_DECODE_ERROR,
    );
    let mut trailing = req.clone();
    trailing.push(0xc0);
    expect(
        issue(
            kr,
            WID_ALG_EDDSA,
            trailing.as_ptr(),
            trailing.len(),
            &mut out,
        ),
        WID_RESULT_DECODE_ERROR,
    );
    expect(
        issue(kr, WID_ALG_EDDSA, [0x93u8, 1, 2, 3].as_ptr(), 4, &mut out),
        WID_RESULT_DECODE_ERROR,
    );
    // Invalid requests, every problem named.
    let bad = NodeIdentityRequest {
        region: "a:b".into(),
        audience: vec![String::new()],
        ttl: GoDuration::from_nanos(3600),
        ..NodeIdentityRequest::default()
    };
    let bad = encoded(&bad);
    expect(
        issue(kr, WID_ALG_EDDSA, bad.as_ptr(), bad.len(), &mut out),
        WID_RESULT_INVALID_ARGUMENT,
    );
    let e = last_error();
    for field in [
        "Node.ID",
        "Node.Datacenter",
        "Node.NodePool",
        "Region",
        "Audience[0]",
        "TTL",
    ] {
        assert!(e.contains(field), "{field}: {e}");
    }
    // An allocation request is no node request (no Node), and the reverse.
    let alloc = alloc_request();
    expect(
        issue(kr, WID_ALG_EDDSA, alloc.as_ptr(), alloc.len(), &mut out),
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("Node.ID");
    let rc = unsafe { wid_issue(kr, req.as_ptr(), req.len(), NOW, &mut out) };
    expect(rc, WID_RESULT_INVALID_ARGUMENT);
    // The issuer string.
    let (r, rl, ed) = (req.as_ptr(), req.len(), WID_ALG_EDDSA);
    let not_utf8 = [0xffu8, 0xfe];
    let rc = unsafe { wid_issue_node(kr, ed, r, rl, not_utf8.as_ptr().cast(), 2, NOW, &mut out) };
    expect(rc, WID_RESULT_INVALID_ARGUMENT);
    error_says("UTF-8");
    let rc = unsafe { wid_issue_node(kr, ed, r, rl, null(), 3, NOW, &mut out) };
    expect(rc, WID_RESULT_NULL_ARGUMENT);
    // No active key of the algorithm.
    expect(
        issue(kr, WID_ALG_RS256, req.as_ptr(), req.len(), &mut out),
        WID_RESULT_NO_ACTIVE_KEY,
    );
    assert!(is_sentinel(&out));

    // wid_issuer_issue_node
    let ib = issuer_builder(kr);
    let iss = build_issuer(ib);
    let node_of = |iss: *const wid_issuer, r: *const u8, n: usize, out: *mut wid_bytes| unsafe {
        wid_issuer_issue_node(iss, r, n, NOW, out)
    };
    expect(
        node_of(null(), req.as_ptr(), req.len(), &mut out),
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(node_of(iss, null(), 1, &mut out), WID_RESULT_NULL_ARGUMENT);
    expect(
        node_of(iss, req.as_ptr(), req.len(), null_mut()),
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        node_of(iss, req.as_ptr(), usize::MAX, &mut out),
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        node_of(iss, b"\xc1".as_ptr(), 1, &mut out),
        WID_RESULT_DECODE_ERROR,
    );
    expect(
        node_of(iss, bad.as_ptr(), bad.len(), &mut out),
        WID_RESULT_INVALID_ARGUMENT,
    );
    assert!(is_sentinel(&out));

    // Wrong handle types: a keyring as the issuer, an issuer or a builder as
    // the keyring.
    expect(
        node_of(kr.cast::<wid_issuer>(), req.as_ptr(), req.len(), &mut out),
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        issue(
            iss.cast::<wid_keyring>(),
            WID_ALG_EDDSA,
            req.as_ptr(),
            req.len(),
            &mut out,
        ),
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        node_of(ib.cast::<wid_issuer>(), req.as_ptr(), req.len(), &mut out),
        WID_RESULT_INVALID_ARGUMENT,
    );
    assert!(is_sentinel(&out));

    // The setters: NULL builders whatever the values, bad values, wrong
    // handles; the builder unchanged (checked by what it builds).
    let b = builder(kr, NODE_AUD, &allocs);
    set_node_tokens(b, WID_NODE_TOKENS_ONLY, Some(&nodes), WID_RESULT_OK);
    expect(
        unsafe { wid_verifier_builder_set_node_tokens(null_mut(), 9) },
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        unsafe { wid_verifier_builder_set_node_lookup(null_mut(), None, null_mut()) },
        WID_RESULT_NULL_ARGUMENT,
    );
    for mode in [3, 4, u32::MAX] {
        expect(
            unsafe { wid_verifier_builder_set_node_tokens(b, mode) },
            WID_RESULT_INVALID_ARGUMENT,
        );
        error_says(&format!("got {mode}"));
    }
    expect(
        unsafe { wid_verifier_builder_set_node_lookup(b, None, nodes.ptr()) },
        WID_RESULT_NULL_ARGUMENT,
    );
    error_says("lookup");
    for wrong in [
        kr.cast::<wid_verifier_builder>(),
        iss.cast::<wid_verifier_builder>(),
    ] {
        let bad = WID_RESULT_INVALID_ARGUMENT;
        set_node_tokens(wrong, WID_NODE_TOKENS_ACCEPT, Some(&nodes), bad);
    }
    let v = build(b);
    let token = issue_node(kr, WID_ALG_EDDSA, &req, "");
    expect(verify(v, &token), WID_RESULT_OK);
    let alloc_token = issue_alloc(kr);
    let v_alloc_aud = {
        let b2 = builder(kr, "vault.io", &allocs);
        expect(
            unsafe { wid_verifier_builder_set_node_tokens(b2, WID_NODE_TOKENS_ONLY) },
            WID_RESULT_OK,
        );
        let v = build(b2);
        unsafe { wid_verifier_builder_free(b2) };
        v
    };
    expect(
        verify(v_alloc_aud, &alloc_token),
        WID_RESULT_TOKEN_KIND_REFUSED,
    );
    assert_eq!(nodes.seen().len(), 1);

    unsafe { free!(v, v_alloc_aud, b, iss, ib, kr) };
}

#[test]
fn many_threads_verify_node_tokens_at_once() {
    let (kr, token, allocs) = world();
    let nodes = Table::new(NODE, WID_NODE_MISSING, WID_NODE_LIVE);
    let v = node_verifier(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, Some(&nodes));
    let v_addr = v as usize;
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..50 {
                    expect(verify(v_addr as *const wid_verifier, &token), WID_RESULT_OK);
                }
            });
        }
    });
    // Each verification read stale, then consistent.
    let seen = nodes.seen();
    assert_eq!(seen.len(), 400);
    assert_eq!(
        seen.iter()
            .filter(|(_, c)| *c == WID_CONSISTENCY_CONSISTENT)
            .count(),
        200
    );
    unsafe { free!(v, kr) };
}
