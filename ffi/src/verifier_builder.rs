//! `wid_verifier_builder`: a verifier configured one option at a time, in
//! the builder style of rustls-ffi (as `wid_issuer_builder`): each setter
//! checks its value at once and leaves the builder unchanged when it
//! refuses it, `build` makes a `wid_verifier` and leaves the builder usable.
//! Unlike `wid_verifier_options`, a `repr(C)` struct that cannot grow, a new
//! option is a new setter.

use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::boundary::{call, call_void, invalid, null, str_in};
use super::c_enum::CEnum;
use super::handle::{self, Castable, require_out};
use super::keyring::{keyring_ref, wid_keyring};
use super::verify::{
    CallbackStore, MAX_AUDIENCE, wid_alloc_lookup_fn, wid_node_lookup_fn, wid_verifier,
};
use super::{wid_node_tokens, wid_result};
use workload_identity::Error;
use workload_identity::Keyring;
use workload_identity::{Audience, NodeTokens, Verifier};

/// The least `wid_verifier_builder_set_proof_replay_capacity` accepts (the
/// Rust builder's floor).
const MIN_REPLAY_CAPACITY: usize = 16;

/// Which kinds of identity token a verifier accepts
/// (`wid_verifier_builder_set_node_tokens`), as C numbers: the C face of
/// `NodeTokens` (Rust). The claims decide a token's kind: a node token
/// carries `nomad_node_id` and none of the allocation claims; a token with
/// both kinds of claims, or a node token without `exp`, is
/// `WID_RESULT_MALFORMED_TOKEN`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeTokenMode {
    /// Allocation tokens only (the default): a node token is
    /// `WID_RESULT_TOKEN_KIND_REFUSED` (`WID_NODE_TOKENS_REFUSE`).
    Refuse = 0,
    /// Both kinds: allocation tokens bound to their allocation (the
    /// allocation lookup), node tokens to their node (the node lookup)
    /// (`WID_NODE_TOKENS_ACCEPT`).
    Accept = 1,
    /// Node tokens only: an allocation token is
    /// `WID_RESULT_TOKEN_KIND_REFUSED` (`WID_NODE_TOKENS_ONLY`).
    Only = 2,
}

impl From<NodeTokenMode> for NodeTokens {
    fn from(mode: NodeTokenMode) -> NodeTokens {
        match mode {
            NodeTokenMode::Refuse => NodeTokens::Refuse,
            NodeTokenMode::Accept => NodeTokens::Accept,
            NodeTokenMode::Only => NodeTokens::Only,
        }
    }
}

/// A verifier being configured (opaque; one owner, not reference counted):
/// made by `wid_verifier_builder_new`, turned into verifiers by
/// `wid_verifier_builder_build`, released by `wid_verifier_builder_free`.
///
/// Setters (each may be called any number of times; the last value wins):
/// leeway, key wait, max token bytes, require exp, cache entries, issuer,
/// require proof, max proof lifetime, proof replay capacity, node tokens
/// (which token kinds the verifier accepts) and the node lookup.
pub struct wid_verifier_builder {
    _private: [u8; 0],
}

/// What the builder holds: the required inputs and every option set so far
/// (`None`: the library's default).
pub(crate) struct Settings {
    keyring: Keyring,
    store: CallbackStore,
    audience: Audience,
    leeway: Option<Duration>,
    key_wait: Option<Duration>,
    max_token_bytes: Option<usize>,
    require_exp: bool,
    cache_entries: Option<usize>,
    issuer: Option<String>,
    require_proof: bool,
    max_proof_lifetime: Option<Duration>,
    proof_replay_capacity: Option<usize>,
    node_tokens: NodeTokens,
}

impl Castable for wid_verifier_builder {
    // A lock: setters change the settings behind a shared reference, and the
    // header promises every function is thread-safe.
    type Rust = Mutex<Settings>;
    const TAG: u64 = 0x5749_445f_5642_0001; // "WID_VB" v1
    const NAME: &'static str = "wid_verifier_builder";
    const OWNED: bool = true;
}

/// Applies `change` to the settings of builder `b`. Every setter checks its
/// value before it calls this, so a refused value never reaches the builder.
///
/// # Safety
/// `b` must be NULL or a live handle from this library.
unsafe fn update(
    b: *const wid_verifier_builder,
    change: impl FnOnce(&mut Settings),
) -> Result<(), Error> {
    // SAFETY: `b` is NULL or a live handle (this function's contract).
    let builder = unsafe { handle::borrow::<wid_verifier_builder>(b, "builder")? };
    // Settings are plain values assigned whole: a poisoned lock still holds
    // consistent ones.
    change(&mut builder.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(())
}

/// Checks that `b` is a live builder, first, so a NULL or wrong builder is
/// reported whatever the other arguments are.
///
/// # Safety
/// `b` must be NULL or a live handle from this library.
unsafe fn check_builder(b: *const wid_verifier_builder) -> Result<(), Error> {
    // SAFETY: `b` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow::<wid_verifier_builder>(b, "builder") }.map(|_| ())
}

/// A C flag: 0 or 1, anything else refused (a typo such as passing a count
/// is caught rather than read as "yes").
fn flag(value: u32, name: &'static str) -> Result<bool, Error> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        n => Err(invalid(name, format!("must be 0 or 1, got {n}"))),
    }
}

/// Starts configuring a verifier over `kr` (shared: keys inserted, rotated
/// or imported later are seen; the builder and its verifiers keep their own
/// reference) that accepts tokens for `audience` (required: 1 to 4096 bytes
/// of UTF-8) and asks `lookup` (required; see `wid_alloc_lookup_fn`) whether
/// a token's allocation is live; `userdata` is passed to `lookup` untouched
/// and must stay valid until every verifier built from this builder is
/// freed. The defaults are the Rust library's: 60 s leeway, a 1 s wait for
/// an unknown `kid`, 8192-byte tokens, `exp` optional, no cache, no issuer
/// required, bearer tokens accepted, proofs valid for at most 5 minutes and
/// a proof replay cache of 100000 entries. `*out` receives a handle to free
/// with `wid_verifier_builder_free`.
///
/// # Safety
/// `kr` must be NULL or a live handle; `audience` NULL or valid for
/// `audience_len` bytes; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_new(
    kr: *const wid_keyring,
    lookup: wid_alloc_lookup_fn,
    userdata: *mut c_void,
    audience: *const c_char,
    audience_len: usize,
    out: *mut *mut wid_verifier_builder,
) -> wid_result {
    call(|| {
        // SAFETY: `kr` is NULL or a live handle; `audience` NULL or valid for
        // `audience_len` bytes (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let store = CallbackStore::new(lookup, userdata)?;
        let audience = unsafe { str_in(audience, audience_len, "audience", MAX_AUDIENCE)? };
        require_out(out, "out")?;
        let settings = Mutex::new(Settings {
            keyring: keyring.clone(),
            store,
            audience: Audience::new(audience)?,
            leeway: None,
            key_wait: None,
            max_token_bytes: None,
            require_exp: false,
            cache_entries: None,
            issuer: None,
            require_proof: false,
            max_proof_lifetime: None,
            proof_replay_capacity: None,
            node_tokens: NodeTokens::Refuse,
        });
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw_owned(settings)) }
    })
}

/// Releases a builder (verifiers built from it are not affected). NULL-safe.
///
/// # Safety
/// `b` must be NULL or a handle from `wid_verifier_builder_new` not yet
/// freed, with no call using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_free(b: *mut wid_verifier_builder) {
    // SAFETY: `b` is NULL or a live builder handle the caller gives up.
    call_void(|| unsafe { handle::free_owned(b) });
}

/// Sets the clock skew allowed on `exp`, `nbf` and `iat`, in seconds
/// (default 60): exactly `secs`, so 0 means none. Negative is
/// `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_set_leeway_secs(
    b: *mut wid_verifier_builder,
    secs: i64,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle (the contract).
        unsafe { check_builder(b)? };
        let secs = u64::try_from(secs)
            .map_err(|_| invalid("secs", format!("must be >= 0 (0: no leeway), got {secs}")))?;
        unsafe { update(b, |s| s.leeway = Some(Duration::from_secs(secs))) }
    })
}

/// Sets how long a verification waits for an unknown `kid` to reach the
/// keyring, in milliseconds (default 1000): exactly `ms`, so 0 means no
/// wait (an unknown `kid` is `WID_RESULT_UNKNOWN_KEY` at once). A batch
/// shares one such wait. Negative is `WID_RESULT_INVALID_ARGUMENT`, and the
/// builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_set_key_wait_ms(
    b: *mut wid_verifier_builder,
    ms: i64,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle (the contract).
        unsafe { check_builder(b)? };
        let ms = u64::try_from(ms)
            .map_err(|_| invalid("ms", format!("must be >= 0 (0: no wait), got {ms}")))?;
        unsafe { update(b, |s| s.key_wait = Some(Duration::from_millis(ms))) }
    })
}

/// Sets the longest token accepted, in bytes (default 8192); a longer
/// token is `WID_RESULT_MALFORMED_TOKEN` without being read. Larger than
/// 1048576 (1 MiB) is clamped to 1 MiB. 0 is `WID_RESULT_INVALID_ARGUMENT`
/// (no token would fit), and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_set_max_token_bytes(
    b: *mut wid_verifier_builder,
    max: usize,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle (the contract).
        unsafe { check_builder(b)? };
        if max == 0 {
            return Err(invalid("max", "must be at least 1 byte, got 0"));
        }
        let max = max.min(workload_identity::MAX_TOKEN_BYTES_LIMIT);
        unsafe { update(b, |s| s.max_token_bytes = Some(max)) }
    })
}

/// `require` 1: tokens must carry `exp` (`WID_RESULT_MALFORMED_TOKEN`
/// otherwise); 0: `exp` is optional (the default, as Nomad's default
/// identity has none). Any other value is `WID_RESULT_INVALID_ARGUMENT`,
/// and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_set_require_exp(
    b: *mut wid_verifier_builder,
    require: u32,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle (the contract).
        unsafe { check_builder(b)? };
        let require = flag(require, "require")?;
        unsafe { update(b, |s| s.require_exp = require) }
    })
}

/// Sets the verified-token cache's room, in tokens: 0 means no cache (the
/// default); larger than 1048576 is clamped to 1048576. Memory grows with
/// the tokens cached, not with this number. A cached token skips parsing
/// and the signature; its times, audience and allocation are checked every
/// time.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_set_cache_entries(
    b: *mut wid_verifier_builder,
    entries: usize,
) -> wid_result {
    call(|| {
        // SAFETY: `b` is NULL or a live handle (the contract).
        unsafe { update(b, |s| s.cache_entries = (entries > 0).then_some(entries)) }
    })
}

/// Sets the `iss` tokens must carry (`WID_RESULT_ISSUER_MISMATCH`
/// otherwise); `(NULL, 0)` or empty means none is required (the default).
/// Longer than 4096 bytes or not UTF-8 is `WID_RESULT_INVALID_ARGUMENT`,
/// and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle; `issuer` NULL or valid for `len`
/// bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_set_issuer(
    b: *mut wid_verifier_builder,
    issuer: *const c_char,
    len: usize,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle; `issuer` NULL or
        // valid for `len` bytes (the contract).
        unsafe { check_builder(b)? };
        let issuer = unsafe { str_in(issuer, len, "issuer", MAX_AUDIENCE)? };
        let issuer = (!issuer.is_empty()).then(|| issuer.to_string());
        unsafe { update(b, |s| s.issuer = issuer) }
    })
}

/// `require` 1: the verifier requires proof of possession: `wid_verify` and
/// `wid_verify_batch` refuse every token (`WID_RESULT_PROOF_REQUIRED`), and
/// only a WIT with a valid proof passes `wid_verify_proof`; 0: bearer tokens
/// are accepted (the default; a WIT is never accepted as a bearer token).
/// Any other value is `WID_RESULT_INVALID_ARGUMENT`, and the builder is
/// unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_set_require_proof(
    b: *mut wid_verifier_builder,
    require: u32,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle (the contract).
        unsafe { check_builder(b)? };
        let require = flag(require, "require")?;
        unsafe { update(b, |s| s.require_proof = require) }
    })
}

/// Sets the longest a proof (WPT) may be valid for, counted from now, in
/// seconds (default 300): `wid_verify_proof` refuses a proof whose `exp` is
/// further ahead (beyond the leeway) with `WID_RESULT_PROOF_INVALID`. Less
/// than 1 is `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_set_max_proof_lifetime_secs(
    b: *mut wid_verifier_builder,
    secs: i64,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle (the contract).
        unsafe { check_builder(b)? };
        let secs = u64::try_from(secs)
            .ok()
            .filter(|&s| s >= 1)
            .ok_or_else(|| invalid("secs", format!("must be at least 1 second, got {secs}")))?;
        unsafe {
            update(b, |s| {
                s.max_proof_lifetime = Some(Duration::from_secs(secs))
            })
        }
    })
}

/// Sets the room in the proof replay cache: the most proofs (by `jti`)
/// remembered at once until they expire (default 100000). When it is full
/// of unexpired proofs, new proofs are refused (`WID_RESULT_PROOF_REPLAYED`),
/// never an old one forgotten; one workload key may hold at most 1/64 of
/// it. Memory grows with the proofs remembered, not with this number. Less
/// than 16 is `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_set_proof_replay_capacity(
    b: *mut wid_verifier_builder,
    entries: usize,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle (the contract).
        unsafe { check_builder(b)? };
        if entries < MIN_REPLAY_CAPACITY {
            return Err(invalid(
                "entries",
                format!("must be at least {MIN_REPLAY_CAPACITY}, got {entries}"),
            ));
        }
        unsafe { update(b, |s| s.proof_replay_capacity = Some(entries)) }
    })
}

/// Sets which kinds of identity token the verifiers accept (a
/// `WID_NODE_TOKENS_*`): `WID_NODE_TOKENS_REFUSE` (the default) allocation
/// tokens only, a node token (`wid_issue_node`) being
/// `WID_RESULT_TOKEN_KIND_REFUSED`; `WID_NODE_TOKENS_ACCEPT` both kinds;
/// `WID_NODE_TOKENS_ONLY` node tokens only, an allocation token being
/// `WID_RESULT_TOKEN_KIND_REFUSED`. A node token passes only when the node
/// lookup (`wid_verifier_builder_set_node_lookup`) says its node is live: a
/// missing node is `WID_RESULT_NODE_NOT_FOUND`, a down one
/// `WID_RESULT_NODE_DOWN`, and without a node lookup every node token fails
/// closed (`WID_RESULT_STORE_UNAVAILABLE`). Any other `mode` is
/// `WID_RESULT_INVALID_ARGUMENT`, and the builder is unchanged.
///
/// # Safety
/// `b` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_set_node_tokens(
    b: *mut wid_verifier_builder,
    mode: wid_node_tokens,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle (the contract).
        unsafe { check_builder(b)? };
        let mode = NodeTokenMode::from_number(mode).ok_or_else(|| {
            invalid(
                "mode",
                format!(
                    "must be WID_NODE_TOKENS_REFUSE (0), WID_NODE_TOKENS_ACCEPT (1) or WID_NODE_TOKENS_ONLY (2), got {mode}"
                ),
            )
        })?;
        unsafe { update(b, |s| s.node_tokens = mode.into()) }
    })
}

/// Sets the node lookup (required: NULL is `WID_RESULT_NULL_ARGUMENT`, and
/// the builder is unchanged): asked whether a node token's node is live,
/// as the allocation lookup is asked about allocations (see
/// `wid_node_lookup_fn`: `WID_CONSISTENCY_STALE` first, `CONSISTENT` only on
/// missing; an error code or an unknown state fails closed,
/// `WID_RESULT_STORE_UNAVAILABLE`). `userdata` is passed to `lookup`
/// untouched and must stay valid until every verifier built with it is
/// freed. Without a node lookup (the default) node tokens fail closed
/// (`WID_RESULT_STORE_UNAVAILABLE`); it matters only for verifiers that
/// accept node tokens (`wid_verifier_builder_set_node_tokens`). Setting it
/// again replaces it for verifiers built afterwards.
///
/// # Safety
/// `b` must be NULL or a live handle; `lookup` NULL or a function that
/// keeps `wid_node_lookup_fn`'s contract with `userdata`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_set_node_lookup(
    b: *mut wid_verifier_builder,
    lookup: wid_node_lookup_fn,
    userdata: *mut c_void,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` is NULL or a live handle (the contract).
        unsafe { check_builder(b)? };
        let lookup = lookup.ok_or_else(|| null("lookup"))?;
        unsafe { update(b, |s| s.store = s.store.with_node_lookup(lookup, userdata)) }
    })
}

/// Makes a verifier with the builder's current settings; `*out` receives a
/// handle to free with `wid_verifier_free`, used as any other verifier
/// (`wid_verify`, `wid_verify_batch`, `wid_verify_proof`, `wid_explain`,
/// `wid_verifier_stats`). The builder is not consumed: it can be changed
/// and built again, and changes do not reach verifiers already built (each
/// has its own cache, replay cache and stats).
///
/// # Safety
/// `b` must be NULL or a live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_builder_build(
    b: *const wid_verifier_builder,
    out: *mut *mut wid_verifier,
) -> wid_result {
    call(|| {
        // SAFETY: `b` is NULL or a live handle (the contract).
        let builder = unsafe { handle::borrow::<wid_verifier_builder>(b, "builder")? };
        require_out(out, "out")?;
        let verifier = {
            // As in `update`: a poisoned lock still holds consistent settings.
            let s = builder.lock().unwrap_or_else(PoisonError::into_inner);
            // Each verifier gets its own copy of the callbacks: a node lookup
            // set later does not reach verifiers already built.
            let mut v = Verifier::builder(s.keyring.clone(), Arc::new(s.store), s.audience.clone())
                .require_exp(s.require_exp)
                .require_proof(s.require_proof)
                .node_tokens(s.node_tokens);
            if let Some(leeway) = s.leeway {
                v = v.leeway(leeway);
            }
            if let Some(wait) = s.key_wait {
                v = v.key_wait(wait);
            }
            if let Some(max) = s.max_token_bytes {
                v = v.max_token_bytes(max);
            }
            if let Some(entries) = s.cache_entries {
                v = v.cache(entries);
            }
            if let Some(issuer) = &s.issuer {
                v = v.issuer(issuer);
            }
            if let Some(lifetime) = s.max_proof_lifetime {
                v = v.max_proof_lifetime(lifetime);
            }
            if let Some(entries) = s.proof_replay_capacity {
                v = v.proof_replay_capacity(entries);
            }
            v.build()
        };
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw::<wid_verifier>(verifier)) }
    })
}
