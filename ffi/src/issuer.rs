//! `wid_issuer_builder` and `wid_issuer`: an issuer configured once (its
//! `iss`, default algorithm, SPIFFE profile, WIMSE trust domain and extra
//! claims policy) and then used for every request, in the builder style of
//! rustls-ffi: each setter checks its value at once, `build` makes an
//! immutable, shareable issuer.

use std::ffi::c_char;
use std::sync::{Mutex, PoisonError};

use super::boundary::{bytes_in, call, call_void, str_in};
use super::handle::{self, Castable, require_out};
use super::keyring::{MAX_JSON, MAX_PATH, alg_in, keyring_ref, wid_keyring};
use super::proof::MAX_TRUST_DOMAIN;
use super::{wid_alg, wid_bytes, wid_result};
use workload_identity::Error;
use workload_identity::Issuer;
use workload_identity::codec::{self, DecodeLimits};
use workload_identity::model::{IssueRequest, NodeIdentityRequest};
use workload_identity::profile::{ExtraClaimsPolicy, SpiffeProfile};

/// Longest SPIFFE path template read, in bytes (a rendered SPIFFE ID is at
/// most 2048 bytes; variables such as `${job.meta.<key>}` may be longer than
/// their values, so the template gets more room).
const MAX_PATH_TEMPLATE: usize = 8192;

/// An issuer being configured (opaque; one owner, not reference counted):
/// made by `wid_issuer_builder_new`, turned into issuers by
/// `wid_issuer_builder_build`, released by `wid_issuer_builder_free`.
pub struct wid_issuer_builder {
    _private: [u8; 0],
}

impl Castable for wid_issuer_builder {
    // A lock, not a bare `Issuer`: setters change the value behind a shared
    // reference, and the header promises every function is thread-safe.
    type Rust = Mutex<Issuer>;
    const TAG: u64 = 0x5749_445f_4942_0001; // "WID_IB" v1
    const NAME: &'static str = "wid_issuer_builder";
    const OWNED: bool = true;
}

/// A configured issuer (opaque; reference counted, immutable, safe to use
/// from many threads at once): made by `wid_issuer_builder_build`, released
/// by `wid_issuer_free`.
pub struct wid_issuer {
    _private: [u8; 0],
}

impl Castable for wid_issuer {
    type Rust = Issuer;
    const TAG: u64 = 0x5749_445f_4953_0001; // "WID_IS" v1
    const NAME: &'static str = "wid_issuer";
}

/// Replaces the issuer behind builder `b` with what `change` makes of a copy
/// of it; on an error the builder keeps its value.
///
/// # Safety
/// `b` must be NULL or a live handle from this library.
unsafe fn update(
    b: *const wid_issuer_builder,
    change: impl FnOnce(Issuer) -> Result<Issuer, Error>,
) -> Result<(), Error> {
    // SAFETY: `b` is NULL or a live handle (this function's contract).
    let builder = unsafe { handle::borrow::<wid_issuer_builder>(b, "builder")? };
    // A panic while the lock was held left a whole `Issuer` behind (values are
    // only ever replaced whole), so a poisoned lock still holds a valid one.
    let mut current = builder.lock().unwrap_or_else(PoisonError::into_inner);
    *current = change(current.clone())?;
    Ok(())
}

/// Starts configuring an issuer that signs with `kr`'s keys (shared: keys
/// inserted or rotated later are used; the builder and its issuers keep
/// their own reference to the keyring). The defaults are `wid_issue`'s:
/// EdDSA, no `iss`, Nomad's `sub`, no SPIFFE profile, no WIMSE trust domain
/// and no extra claims policy (a request whose identity names extra claims
/// is refused). `*out` receives a handle to free with
/// `wid_issuer_builder_free`.
///
/// # Safety
/// `kr` must be NULL or a live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issuer_builder_new(
    kr: *const wid_keyring,
    out: *mut *mut wid_issuer_builder,
) -> wid_result {
    call(|| {
        // SAFETY: `kr` is NULL or a live handle (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        require_out(out, "out")?;
        let issuer = Mutex::new(Issuer::new(keyring.clone()));
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw_owned(issuer)) }
    })
}

/// Releases a builder (issuers built from it are not affected). NULL-safe.
///
/// # Safety
/// `b` must be NULL or a handle from `wid_issuer_builder_new` not yet freed,
/// with no call using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issuer_builder_free(b: *mut wid_issuer_builder) {
    // SAFETY: `b` is NULL or a live builder handle the caller gives up.
    call_void(|| unsafe { handle::free_owned(b) });
}

/// Sets the `iss` claim of every token (e.g. the OIDC issuer URL a verifier
/// requires); `(NULL, 0)` or empty means no `iss` (the default). Longer than
/// 4096 bytes or not UTF-8 is `WID_RESULT_INVALID_ARGUMENT`, and the builder
/// is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle; `iss` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issuer_builder_set_issuer(
    b: *mut wid_issuer_builder,
    iss: *const c_char,
    len: usize,
) -> wid_result {
    call(|| {
        // SAFETY: `b` is NULL or a live handle (the contract); checked first
        // so a NULL builder is reported whatever the other arguments.
        unsafe { handle::borrow::<wid_issuer_builder>(b, "builder")? };
        // SAFETY: `iss` is NULL or valid for `len` bytes (the contract).
        let iss = unsafe { str_in(iss, len, "iss", MAX_PATH)? };
        // SAFETY: as above.
        unsafe { update(b, |i| Ok(i.issuer(iss))) }
    })
}

/// Sets the algorithm tokens are signed with (a `WID_ALG_*`; default
/// `WID_ALG_EDDSA`): issuing needs an active key of it
/// (`WID_RESULT_NO_ACTIVE_KEY` otherwise). An unknown `alg` is
/// `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged. A SPIFFE
/// issuer needs `WID_ALG_ES256` or `WID_ALG_RS256` (checked when it issues).
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issuer_builder_set_algorithm(
    b: *mut wid_issuer_builder,
    alg: wid_alg,
) -> wid_result {
    call(|| {
        // SAFETY: `b` is NULL or a live handle (the contract).
        unsafe { handle::borrow::<wid_issuer_builder>(b, "builder")? };
        let alg = alg_in(alg)?;
        // SAFETY: as above.
        unsafe { update(b, |i| Ok(i.algorithm(alg))) }
    })
}

/// Makes every token a SPIFFE SVID: `sub` becomes
/// `spiffe://<trust_domain><path>`, the path rendered from `path_template`
/// over the request. `trust_domain` is required: 1 to 255 bytes of
/// lower-case letters, digits, `.`, `-` and `_`. `path_template` `(NULL, 0)`
/// or empty means the default,
/// `/${job.region}/${job.namespace}/${job.id}/${group.name}/${workload.name}/${identity.name}`;
/// otherwise it must start with `/`, and its segments (separated by `/`,
/// none empty, `.` or `..`) hold letters, digits, `.`, `-`, `_` and
/// variables over the request: `${job.region}`, `${job.namespace}`,
/// `${job.id}` (the parent's for a child job), `${job.parent_id}`,
/// `${job.node_pool}`, `${job.meta.<key>}`, `${group.name}`, `${alloc.id}`,
/// `${task.name}`, `${service.name}`, `${workload.name}` (the task or
/// service), `${identity.name}`, `${node.id}`, `${node.name}`,
/// `${node.datacenter}`, `${node.pool}`, `${node.class}` (the request's
/// `Node`), `${vault.cluster}`, `${vault.namespace}`, `${vault.role}` (the
/// task's `Vault` block, for a Vault identity; an empty one is refused, as
/// it would leave an empty segment). A bad trust domain or path, or an
/// unknown variable, is
/// `WID_RESULT_INVALID_ARGUMENT` naming the problem, and the builder is
/// unchanged. Setting it again replaces the profile.
///
/// Issuing a bearer token (a JWT-SVID) is then refused
/// (`WID_RESULT_INVALID_ARGUMENT`) unless the identity has an audience and a
/// TTL and the algorithm is ES256 or RS256 (no EdDSA JWT-SVIDs); a request
/// with a `ProofKey` gets a WIT-SVID (no WIMSE trust domain needed). A
/// request whose fields cannot form a SPIFFE ID (a job ID with `/`, a
/// missing variable) is refused naming the field.
///
/// # Safety
/// `b` must be NULL or a live handle; `trust_domain` and `path_template`
/// NULL or valid for their lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issuer_builder_set_spiffe(
    b: *mut wid_issuer_builder,
    trust_domain: *const c_char,
    trust_domain_len: usize,
    path_template: *const c_char,
    path_template_len: usize,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle; the strings NULL
        // or valid for their lengths (the contract).
        unsafe { handle::borrow::<wid_issuer_builder>(b, "builder")? };
        let td = unsafe {
            str_in(
                trust_domain,
                trust_domain_len,
                "trust_domain",
                MAX_TRUST_DOMAIN,
            )?
        };
        let path = unsafe {
            str_in(
                path_template,
                path_template_len,
                "path_template",
                MAX_PATH_TEMPLATE,
            )?
        };
        let mut profile = SpiffeProfile::new(td)?;
        if !path.is_empty() {
            profile = profile.path(path)?;
        }
        unsafe { update(b, |i| Ok(i.spiffe(profile))) }
    })
}

/// Sets the WIMSE trust domain (e.g. `nomad.example.com`): the authority of
/// the `wimse://` workload identifier in the WIT issued for a request that
/// carries a `ProofKey` (as `wid_issue_wit`'s `trust_domain`); without it
/// (and without a SPIFFE profile) such a request is
/// `WID_RESULT_INVALID_ARGUMENT`. 1 to 253 bytes of lower-case letters,
/// digits, `-` and `.` without empty labels; anything else (`(NULL, 0)`
/// included) is `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle; `trust_domain` NULL or valid for
/// `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issuer_builder_set_wimse_trust_domain(
    b: *mut wid_issuer_builder,
    trust_domain: *const c_char,
    len: usize,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle; `trust_domain`
        // NULL or valid for `len` bytes (the contract).
        unsafe { handle::borrow::<wid_issuer_builder>(b, "builder")? };
        let td = unsafe { str_in(trust_domain, len, "trust_domain", MAX_TRUST_DOMAIN)? };
        unsafe { update(b, |i| i.trust_domain(td)) }
    })
}

/// Sets the extra claims tokens carry, per namespace, from the policy's JSON
/// form (Nomad 2.0.3's required and optional extra claims):
/// `{"namespaces": {"<namespace>": {"required_extra_claims": {"<name>":
/// "<template>", ...}, "optional_extra_claims": {...}}}}`; the namespace
/// `"*"` gives its claims to every namespace. Required claims are in every
/// identity of the namespace, optional ones in an identity whose
/// `Identity.ExtraClaims` names them (naming a claim the namespace does not
/// have is `WID_RESULT_INVALID_ARGUMENT` when issuing); a token carries them
/// as one claim, `"extra_claims":{"<name>":"<value>",...}`. Values are
/// templates over the request (the variables of
/// `wid_issuer_builder_set_spiffe`). Malformed JSON, an unknown member, a
/// duplicate key, a reserved claim name (`sub`, `iss`, `aud`, `exp`, `cnf`,
/// `nomad_*`, ..., in any case), an unknown variable or more than 32 claims
/// for a namespace is `WID_RESULT_INVALID_ARGUMENT` naming the problem, and
/// the builder is unchanged. At most 1 MiB. Setting it again replaces the
/// policy.
///
/// # Safety
/// `b` must be NULL or a live handle; `json` NULL or valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issuer_builder_set_extra_claims_policy(
    b: *mut wid_issuer_builder,
    json: *const c_char,
    len: usize,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle; `json` NULL or
        // valid for `len` bytes (the contract).
        unsafe { handle::borrow::<wid_issuer_builder>(b, "builder")? };
        let json = unsafe { str_in(json, len, "json", MAX_JSON)? };
        let policy = ExtraClaimsPolicy::from_json(json)?;
        unsafe { update(b, |i| Ok(i.extra_claims(policy))) }
    })
}

/// Makes an issuer with the builder's current settings; `*out` receives a
/// handle to free with `wid_issuer_free`. The builder is not consumed: it
/// can be changed and built again, and changes do not reach issuers already
/// built.
///
/// # Safety
/// `b` must be NULL or a live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issuer_builder_build(
    b: *const wid_issuer_builder,
    out: *mut *mut wid_issuer,
) -> wid_result {
    call(|| {
        // SAFETY: `b` is NULL or a live handle (the contract).
        let builder = unsafe { handle::borrow::<wid_issuer_builder>(b, "builder")? };
        require_out(out, "out")?;
        // As in `update`: a poisoned lock still holds a whole `Issuer`.
        let issuer = builder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw::<wid_issuer>(issuer)) }
    })
}

/// Releases an issuer handle (reference counted). NULL-safe.
///
/// # Safety
/// `iss` must be NULL or a handle from this library not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issuer_free(iss: *const wid_issuer) {
    // SAFETY: `iss` is NULL or a live issuer handle the caller gives up.
    call_void(|| unsafe { handle::free(iss) });
}

/// Signs the identity a msgpack `IssueRequest` asks for (decoded as
/// `wid_issue` decodes it: at most 4 MiB, nesting at most 32) at
/// `now_unix`, as the issuer is configured: its algorithm, `iss`, SPIFFE
/// `sub` and extra claims. A request with a `ProofKey` gets a WIT (typ
/// `wit+jwt`; the issuer needs a WIMSE trust domain or a SPIFFE profile),
/// any other a bearer JWT. `*out_token` receives the token. Errors are
/// `wid_issue_alg`'s: an invalid request or a refused SVID is
/// `WID_RESULT_INVALID_ARGUMENT` naming the field, bytes that are not such a
/// map `WID_RESULT_DECODE_ERROR`, no active key of the algorithm
/// `WID_RESULT_NO_ACTIVE_KEY`.
///
/// # Safety
/// `iss` must be NULL or a live handle; `request_msgpack` NULL or valid for
/// `len` bytes; `out_token` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issuer_issue(
    iss: *const wid_issuer,
    request_msgpack: *const u8,
    len: usize,
    now_unix: i64,
    out_token: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `iss` is NULL or a live handle,
        // `request_msgpack` NULL or valid for `len` bytes (the contract).
        let issuer = unsafe { handle::borrow::<wid_issuer>(iss, "iss")? };
        let limits = DecodeLimits::default();
        let request =
            unsafe { bytes_in(request_msgpack, len, "request_msgpack", limits.max_bytes)? };
        require_out(out_token, "out_token")?;
        let req: IssueRequest = codec::decode_with(request, &limits)?;
        let signed = issuer.issue(&req, now_unix)?;
        let token = wid_bytes::from_vec(signed.token.into_bytes());
        // SAFETY: `out_token` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out_token, "out_token", || token) }
    })
}

/// Signs a client node's own identity from a msgpack `NodeIdentityRequest`
/// (decoded as `wid_issue_node` decodes it) at `now_unix`, with the
/// issuer's algorithm and `iss`: the token `wid_issue_node` makes with
/// those. The issuer's SPIFFE profile, WIMSE trust domain and extra claims
/// policy do not apply to node identities (their `sub` is always
/// `node:<region>:<node pool>:<node ID>:default`). `*out_token` receives
/// the token. Errors are `wid_issue_node`'s: an invalid request is
/// `WID_RESULT_INVALID_ARGUMENT` naming every problem, bytes that are not
/// such a map `WID_RESULT_DECODE_ERROR`, no active key of the issuer's
/// algorithm `WID_RESULT_NO_ACTIVE_KEY`.
///
/// # Safety
/// `iss` must be NULL or a live handle; `request_msgpack` NULL or valid for
/// `len` bytes; `out_token` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_issuer_issue_node(
    iss: *const wid_issuer,
    request_msgpack: *const u8,
    len: usize,
    now_unix: i64,
    out_token: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `iss` is NULL or a live handle,
        // `request_msgpack` NULL or valid for `len` bytes (the contract).
        let issuer = unsafe { handle::borrow::<wid_issuer>(iss, "iss")? };
        let limits = DecodeLimits::default();
        let request =
            unsafe { bytes_in(request_msgpack, len, "request_msgpack", limits.max_bytes)? };
        require_out(out_token, "out_token")?;
        let req: NodeIdentityRequest = codec::decode_with(request, &limits)?;
        let signed = issuer.issue_node(&req, now_unix)?;
        let token = wid_bytes::from_vec(signed.token.into_bytes());
        // SAFETY: `out_token` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out_token, "out_token", || token) }
    })
}
