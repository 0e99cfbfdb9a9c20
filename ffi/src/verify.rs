//! `wid_verifier`: verification with caller-supplied allocation (and node)
//! lookups.

use std::ffi::{c_char, c_void};
use std::sync::Arc;
use std::time::Duration;

use super::boundary::{bytes_in, call, call_void, invalid, null, str_in};
use super::handle::{self, Castable, out_optional, require_out};
use super::keyring::{keyring_ref, wid_keyring};
use super::{WID_RESULT_OK, wid_alloc, wid_bytes, wid_consistency, wid_node, wid_result};
use workload_identity::Error;
use workload_identity::{AllocState, Consistency, NodeState, StateStore, StoreError};
use workload_identity::{Audience, Verifier};

/// A verifier (opaque; reference counted).
pub struct wid_verifier {
    _private: [u8; 0],
}

impl Castable for wid_verifier {
    type Rust = Verifier;
    const TAG: u64 = 0x5749_445f_5646_0001; // "WID_VF" v1
    const NAME: &'static str = "wid_verifier";
}

/// Looks up an allocation: writes its state (`WID_ALLOC_MISSING`, `LIVE` or
/// `TERMINAL`) to `*out_state` and returns `WID_RESULT_OK`, or returns an error
/// code. It is called from whichever thread calls `wid_verify`, possibly from
/// several at once, with `consistency` `WID_CONSISTENCY_STALE` first and
/// `WID_CONSISTENCY_CONSISTENT` only when the stale answer was missing. An
/// error code, or a state other than 0, 1 or 2, fails closed
/// (`WID_RESULT_STORE_UNAVAILABLE`). `alloc_id` is not NUL-terminated and is
/// valid only during the call.
pub type wid_alloc_lookup_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        alloc_id: *const u8,
        alloc_id_len: usize,
        consistency: wid_consistency,
        out_state: *mut wid_alloc,
    ) -> wid_result,
>;

/// Verifier options for `wid_verifier_new_with_options`. Zero values mean the
/// defaults (so `{0}` is all defaults; note that `wid_verifier_new`'s own
/// `leeway_secs` argument of 0 means no leeway).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct wid_verifier_options {
    /// Clock skew allowed on exp/nbf/iat, in seconds (0: the default, 60;
    /// -1: none; other negative values are invalid).
    pub leeway_secs: i64,
    /// How long to wait for an unknown `kid`, in milliseconds (0: 1000; -1: no wait).
    pub key_wait_ms: i64,
    /// Longest token accepted, in bytes (0: 8192; larger than 1048576 (1 MiB):
    /// clamped to 1 MiB, nothing longer is ever read).
    pub max_token_bytes: usize,
    /// Non-zero: tokens must carry `exp`.
    pub require_exp: u32,
    /// Verified-token cache entries (0: no cache; larger than 1048576: clamped
    /// to 1048576). Memory grows with the entries cached, not with this number.
    pub cache_entries: usize,
    /// Required `iss` (NULL: none), UTF-8, `issuer_len` bytes.
    pub issuer: *const c_char,
    /// Length of `issuer`.
    pub issuer_len: usize,
}

/// All defaults (every field zero).
const DEFAULT_OPTIONS: wid_verifier_options = wid_verifier_options {
    leeway_secs: 0,
    key_wait_ms: 0,
    max_token_bytes: 0,
    require_exp: 0,
    cache_entries: 0,
    issuer: std::ptr::null(),
    issuer_len: 0,
};

/// Longest audience or issuer read, in bytes.
pub(super) const MAX_AUDIENCE: usize = 4096;
/// Largest batch accepted by `wid_verify_batch`.
const MAX_BATCH: usize = 1 << 16;

/// Looks up a client node, for node identity tokens: writes its state
/// (`WID_NODE_MISSING`, `LIVE` or `DOWN`) to `*out_state` and returns
/// `WID_RESULT_OK`, or returns an error code. Called as `wid_alloc_lookup_fn`
/// is (from whichever thread verifies, possibly from several at once;
/// `WID_CONSISTENCY_STALE` first and `WID_CONSISTENCY_CONSISTENT` only when
/// the stale answer was missing). An error code, or a state other than 0, 1
/// or 2, fails closed (`WID_RESULT_STORE_UNAVAILABLE`). `node_id` is not
/// NUL-terminated and is valid only during the call. Set with
/// `wid_verifier_builder_set_node_lookup`.
pub type wid_node_lookup_fn = Option<
    unsafe extern "C" fn(
        userdata: *mut c_void,
        node_id: *const u8,
        node_id_len: usize,
        consistency: wid_consistency,
        out_state: *mut wid_node,
    ) -> wid_result,
>;

/// The shape both lookup callbacks share.
pub(super) type LookupFn =
    unsafe extern "C" fn(*mut c_void, *const u8, usize, u32, *mut u32) -> wid_result;

/// A caller's lookup callback and its userdata.
#[derive(Clone, Copy)]
pub(super) struct Callback {
    lookup: LookupFn,
    userdata: *mut c_void,
}

impl Callback {
    /// Asks the callback about `id`: the state number it wrote, or why it
    /// failed (`what` names the callback in the message).
    fn ask(&self, id: &str, consistency: Consistency, what: &str) -> Result<u32, StoreError> {
        // A sentinel: a callback that returns OK without writing fails closed.
        let mut state = u32::MAX;
        // SAFETY: the callback's contract; `id` outlives the call.
        let rc = unsafe {
            (self.lookup)(
                self.userdata,
                id.as_ptr(),
                id.len(),
                consistency as u32,
                &mut state,
            )
        };
        if rc != WID_RESULT_OK {
            let name = workload_identity::ResultCode::from_u32(rc)
                .map_or("WID_RESULT_UNKNOWN", workload_identity::ResultCode::name);
            return Err(StoreError::new(format!(
                "the {what} callback returned {name} ({rc})"
            )));
        }
        Ok(state)
    }
}

/// The state store over a caller's callbacks: the allocation lookup
/// (required) and the node lookup (optional: without it node lookups fail
/// closed, as `StateStore::node_state`'s default does).
#[derive(Clone, Copy)]
pub(super) struct CallbackStore {
    alloc: Callback,
    node: Option<Callback>,
}

impl CallbackStore {
    /// The store over a caller's `lookup` (required) and its `userdata`.
    pub(super) fn new(
        lookup: wid_alloc_lookup_fn,
        userdata: *mut c_void,
    ) -> Result<CallbackStore, Error> {
        let lookup = lookup.ok_or_else(|| null("lookup"))?;
        Ok(CallbackStore {
            alloc: Callback { lookup, userdata },
            node: None,
        })
    }

    /// This store with node lookups answered by `lookup` and its `userdata`
    /// (a `wid_node_lookup_fn` checked non-NULL by the caller).
    pub(super) fn with_node_lookup(self, lookup: LookupFn, userdata: *mut c_void) -> CallbackStore {
        CallbackStore {
            node: Some(Callback { lookup, userdata }),
            ..self
        }
    }
}

// SAFETY: the documented contract of wid_alloc_lookup_fn and
// wid_node_lookup_fn is that the callbacks and their userdata may be used
// from any thread that calls wid_verify, at once.
unsafe impl Send for CallbackStore {}
// SAFETY: as above.
unsafe impl Sync for CallbackStore {}

impl StateStore for CallbackStore {
    fn allocation_state(
        &self,
        alloc_id: &str,
        consistency: Consistency,
    ) -> Result<AllocState, StoreError> {
        let state = self.alloc.ask(alloc_id, consistency, "lookup")?;
        AllocState::from_u32(state).ok_or_else(|| {
            StoreError::new(format!(
                "the lookup callback reported state {state}: expected WID_ALLOC_MISSING (0), LIVE (1) or TERMINAL (2)"
            ))
        })
    }

    fn node_state(&self, node_id: &str, consistency: Consistency) -> Result<NodeState, StoreError> {
        let Some(node) = &self.node else {
            return Err(StoreError::new(
                "this verifier has no node lookup (wid_verifier_builder_set_node_lookup), so node identity tokens fail closed",
            ));
        };
        let state = node.ask(node_id, consistency, "node lookup")?;
        NodeState::from_u32(state).ok_or_else(|| {
            StoreError::new(format!(
                "the node lookup callback reported state {state}: expected WID_NODE_MISSING (0), LIVE (1) or DOWN (2)"
            ))
        })
    }
}

/// The verifier behind handle `v`.
///
/// # Safety
/// `v` must be NULL or a live handle from this library.
pub(super) unsafe fn verifier_ref<'a>(v: *const wid_verifier) -> Result<&'a Verifier, Error> {
    // SAFETY: `v` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(v, "v") }
}

/// Creates a verifier over `kr` (shared: keys inserted or rotated later are
/// seen) for `audience` (required, non-empty), with exactly `leeway_secs` of
/// clock skew (>= 0; here 0 means NO leeway, unlike the options struct where 0
/// means the 60 s default) and the allocation `lookup` (required; see
/// `wid_alloc_lookup_fn`).
/// `*out` receives a handle to free with `wid_verifier_free`.
///
/// # Safety
/// Pointers must be NULL or valid; `userdata` is passed to `lookup` untouched
/// and must stay valid until the verifier is freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_new(
    kr: *const wid_keyring,
    audience: *const c_char,
    audience_len: usize,
    leeway_secs: i64,
    lookup: wid_alloc_lookup_fn,
    userdata: *mut c_void,
    out: *mut *mut wid_verifier,
) -> wid_result {
    let options = wid_verifier_options {
        leeway_secs,
        ..DEFAULT_OPTIONS
    };
    // SAFETY: the same pointers under the same contract (wid_verifier_new's).
    unsafe {
        new_verifier(
            kr,
            audience,
            audience_len,
            &options,
            true,
            lookup,
            userdata,
            out,
        )
    }
}

/// Like `wid_verifier_new`, with `wid_verifier_options` (NULL: defaults).
/// `*out` receives a handle to free with `wid_verifier_free`.
///
/// # Safety
/// As `wid_verifier_new`; `options` NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_new_with_options(
    kr: *const wid_keyring,
    audience: *const c_char,
    audience_len: usize,
    options: *const wid_verifier_options,
    lookup: wid_alloc_lookup_fn,
    userdata: *mut c_void,
    out: *mut *mut wid_verifier,
) -> wid_result {
    let options = if options.is_null() {
        DEFAULT_OPTIONS
    } else {
        // SAFETY: `options` is NULL or valid for reading (the contract).
        unsafe { *options }
    };
    // SAFETY: the same pointers under the same contract.
    unsafe {
        new_verifier(
            kr,
            audience,
            audience_len,
            &options,
            false,
            lookup,
            userdata,
            out,
        )
    }
}

/// Both constructors: `exact_leeway` says how `o.leeway_secs` reads (see
/// `leeway_of`, the one place that decides it).
///
/// # Safety
/// `kr` NULL or a live handle; `audience` and `o.issuer` NULL or valid for
/// their lengths; `out` NULL or writable.
#[allow(clippy::too_many_arguments)]
unsafe fn new_verifier(
    kr: *const wid_keyring,
    audience: *const c_char,
    audience_len: usize,
    o: &wid_verifier_options,
    exact_leeway: bool,
    lookup: wid_alloc_lookup_fn,
    userdata: *mut c_void,
    out: *mut *mut wid_verifier,
) -> wid_result {
    call(|| {
        // SAFETY: `kr` is NULL or a live handle; `audience` and `o.issuer` are
        // NULL or valid for their lengths (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let audience = unsafe { str_in(audience, audience_len, "audience", MAX_AUDIENCE)? };
        let issuer = unsafe { str_in(o.issuer, o.issuer_len, "options.issuer", MAX_AUDIENCE)? };
        let store = Arc::new(CallbackStore::new(lookup, userdata)?);
        require_out(out, "out")?;
        let leeway = leeway_of(o.leeway_secs, exact_leeway)?;
        if o.key_wait_ms < -1 {
            return Err(invalid(
                "key_wait_ms",
                format!("must be >= -1, got {}", o.key_wait_ms),
            ));
        }
        let mut b = Verifier::builder(keyring.clone(), store, Audience::new(audience)?);
        if let Some(leeway) = leeway {
            b = b.leeway(leeway);
        }
        match o.key_wait_ms {
            0 => {}
            -1 => b = b.key_wait(Duration::ZERO),
            ms => b = b.key_wait(Duration::from_millis(ms as u64)),
        }
        if o.max_token_bytes > 0 {
            b = b.max_token_bytes(o.max_token_bytes);
        }
        b = b.require_exp(o.require_exp != 0);
        if o.cache_entries > 0 {
            b = b.cache(o.cache_entries);
        }
        if !issuer.is_empty() {
            b = b.issuer(issuer);
        }
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw(b.build())) }
    })
}

/// The one place a C leeway gets its meaning: `None` is the default (60 s).
/// `wid_verifier_new` passes its argument `exact`ly (0 is none); in
/// `wid_verifier_options` 0 is the default and -1 none.
fn leeway_of(secs: i64, exact: bool) -> Result<Option<Duration>, Error> {
    let seconds = |n: i64| Some(Duration::from_secs(n.unsigned_abs()));
    match (exact, secs) {
        (true, n) if n >= 0 => Ok(seconds(n)),
        (true, n) => Err(invalid(
            "leeway_secs",
            format!("must be >= 0 (0: no leeway), got {n}"),
        )),
        (false, 0) => Ok(None),
        (false, -1) => Ok(Some(Duration::ZERO)),
        (false, n) if n > 0 => Ok(seconds(n)),
        (false, n) => Err(invalid(
            "options.leeway_secs",
            format!("must be >= -1 (0: the default 60 s, -1: none), got {n}"),
        )),
    }
}

/// Releases a verifier handle. NULL-safe.
///
/// # Safety
/// `v` must be NULL or a handle from this library not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verifier_free(v: *const wid_verifier) {
    // SAFETY: `v` is NULL or a live verifier handle the caller gives up.
    call_void(|| unsafe { handle::free(v) });
}

/// Borrows a token: a length over the verifier's cap is `MalformedToken` from
/// the length alone, before any byte is read.
///
/// # Safety
/// `ptr` must be NULL or valid for `len` bytes.
pub(super) unsafe fn token_in<'a>(
    ptr: *const c_char,
    len: usize,
    max: usize,
) -> Result<&'a [u8], Error> {
    if len > max {
        return Err(Error::MalformedToken {
            reason: format!("token is {len} bytes, longer than the {max}-byte limit"),
        });
    }
    // SAFETY: the caller's contract makes `ptr` valid for `len` bytes; and
    // `len <= max <= MAX_TOKEN_BYTES_LIMIT` (1 MiB, the verifier clamps every
    // cap it is given), so the slice `bytes_in` makes is far below isize::MAX.
    debug_assert!(max <= workload_identity::MAX_TOKEN_BYTES_LIMIT);
    unsafe { bytes_in(ptr.cast(), len, "token", max) }
}

/// Verifies `token` at `now_unix`; on success `*out_claims_json` (may be NULL
/// when not wanted) receives the verified claims as JSON.
///
/// # Safety
/// `token` must be NULL or valid for `token_len` bytes; `out_claims_json` NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verify(
    v: *const wid_verifier,
    token: *const c_char,
    token_len: usize,
    now_unix: i64,
    out_claims_json: *mut wid_bytes,
) -> wid_result {
    call(|| {
        // SAFETY: `v` is NULL or a live handle; `token` NULL or valid for
        // `token_len` bytes (the contract).
        let verifier = unsafe { verifier_ref(v)? };
        let token = unsafe { token_in(token, token_len, verifier.max_token_bytes())? };
        let verified = verifier.verify_bytes(token, now_unix)?;
        // SAFETY: `out_claims_json` is NULL or writable (the contract).
        unsafe {
            out_optional(out_claims_json, || {
                wid_bytes::from_vec(verified.claims.to_json().into_bytes())
            })
        };
        Ok(())
    })
}

/// Verifies `count` tokens at once (`tokens[i]` of `token_lens[i]` bytes),
/// writing each token's result code to `out_results[i]`. Accepts exactly what
/// `wid_verify` accepts. Returns `WID_RESULT_OK` when the call itself worked
/// (whatever the tokens' results); per-token details are not kept.
///
/// # Safety
/// `tokens`, `token_lens` and `out_results` must be NULL or valid for `count`
/// elements, each token for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_verify_batch(
    v: *const wid_verifier,
    tokens: *const *const c_char,
    token_lens: *const usize,
    count: usize,
    now_unix: i64,
    out_results: *mut wid_result,
) -> wid_result {
    call(|| {
        // SAFETY: `v` is NULL or a live handle (the contract).
        let verifier = unsafe { verifier_ref(v)? };
        if count > MAX_BATCH {
            return Err(invalid(
                "count",
                format!("{count} is more than the {MAX_BATCH}-token limit"),
            ));
        }
        if count > 0 && (tokens.is_null() || token_lens.is_null() || out_results.is_null()) {
            return Err(null("tokens, token_lens or out_results"));
        }
        let mut texts: Vec<&str> = Vec::with_capacity(count);
        let mut early: Vec<Option<wid_result>> = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: `tokens` and `token_lens` are valid for `count` elements
            // and each token for its length (the contract; NULL checked above).
            let (ptr, len) = unsafe { (*tokens.add(i), *token_lens.add(i)) };
            let text = unsafe { token_in(ptr, len, verifier.max_token_bytes()) }.and_then(|b| {
                std::str::from_utf8(b).map_err(|_| Error::MalformedToken {
                    reason: "the token is not UTF-8".into(),
                })
            });
            match text {
                Ok(s) => {
                    texts.push(s);
                    early.push(None);
                }
                Err(e) => early.push(Some(e.code().as_u32())),
            }
        }
        let mut results = verifier.verify_batch(&texts, now_unix).into_iter();
        for (i, e) in early.into_iter().enumerate() {
            let code = match e {
                Some(code) => code,
                None => results.next().map_or(super::WID_RESULT_PANIC, |r| {
                    r.map_or_else(|e| e.code().as_u32(), |_| WID_RESULT_OK)
                }),
            };
            // SAFETY: `out_results` is valid for `count` elements (the
            // contract; NULL checked above), and i < count.
            unsafe { out_results.add(i).write(code) };
        }
        Ok(())
    })
}
