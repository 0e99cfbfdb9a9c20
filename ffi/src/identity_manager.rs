//! `wid_identity_manager`: one allocation's identities kept signed, renewed,
//! saved in a state directory and restored after a restart, with token
//! exchanges (the built-in Vault and Consul logins, or the host's own) that
//! confirm or re-derive their secrets on restore: the Rust
//! `IdentityManager`, for C and Go hosts (seed 001).

mod running;

use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::boundary::{bytes_in, call, call_void, invalid, null, str_in};
use super::handle::{self, Castable, require_out};
use super::host_callbacks::{
    Events, HostExchange, HostSigner, Userdata, wid_exchange_derive_fn, wid_exchange_refresh_fn,
    wid_exchange_release_fn, wid_identity_sign_fn, wid_identity_watch_fn,
};
use super::issuer::wid_issuer;
use super::keyring::{MAX_PATH, alg_in, keyring_ref, wid_keyring};
use super::{wid_alg, wid_result};
pub use running::{
    wid_identity_manager_current, wid_identity_manager_end_allocation,
    wid_identity_manager_health_json, wid_identity_manager_next_due_ms,
    wid_identity_manager_restore, wid_identity_manager_secret, wid_identity_manager_start,
    wid_identity_manager_tick,
};
use workload_identity::Error;
use workload_identity::codec::{self, DecodeLimits};
use workload_identity::manager::{
    FileIdentityDb, IdentityId, IdentityManager, IdentitySigner, TokenExchange,
};
use workload_identity::model::IssueRequest;
use workload_identity::{Algorithm, Keyring};

/// The most bytes of a name (workload, identity, exchange).
const MAX_NAME: usize = 1024;

/// An identity manager being configured (opaque; one owner, not reference
/// counted): made by `wid_identity_manager_builder_new`, turned into one
/// manager by `wid_identity_manager_builder_build`, released by
/// `wid_identity_manager_builder_free`.
pub struct wid_identity_manager_builder {
    _private: [u8; 0],
}

/// An identity manager (opaque; reference counted, safe to use from many
/// threads at once): made by `wid_identity_manager_builder_build`, released
/// by `wid_identity_manager_free`.
pub struct wid_identity_manager {
    _private: [u8; 0],
}

/// What a builder holds.
pub(crate) struct Settings {
    keyring: Keyring,
    state_dir: PathBuf,
    requests: Vec<IssueRequest>,
    signer: Option<Arc<dyn IdentitySigner>>,
    pub(super) exchanges: Vec<Arc<dyn TokenExchange>>,
    proof: Vec<(IdentityId, Algorithm)>,
    /// Shared with the exchanges added, which deliver through it.
    pub(super) events: Arc<Events>,
    /// Whether a manager was built (the exchanges added deliver to it, so a
    /// builder builds one manager).
    built: bool,
}

impl Castable for wid_identity_manager_builder {
    type Rust = Mutex<Settings>;
    const TAG: u64 = 0x5749_445f_4942_0001; // "WID_IB" v1
    const NAME: &'static str = "wid_identity_manager_builder";
    const OWNED: bool = true;
}

/// A manager and the watcher it tells.
pub(crate) struct HostManager {
    manager: IdentityManager,
    events: Arc<Events>,
}

impl Castable for wid_identity_manager {
    type Rust = HostManager;
    const TAG: u64 = 0x5749_445f_494d_0001; // "WID_IM" v1
    const NAME: &'static str = "wid_identity_manager";
}

/// Applies `change` to builder `b`'s settings (giving back what it gives),
/// refused once it has built.
///
/// # Safety
/// `b` must be NULL or a live handle from this library.
pub(super) unsafe fn update<T>(
    b: *const wid_identity_manager_builder,
    change: impl FnOnce(&mut Settings) -> Result<T, Error>,
) -> Result<T, Error> {
    // SAFETY: `b` is NULL or a live handle (this function's contract).
    let builder = unsafe { handle::borrow::<wid_identity_manager_builder>(b, "builder")? };
    let mut settings = builder.lock().unwrap_or_else(PoisonError::into_inner);
    if settings.built {
        return Err(invalid(
            "builder",
            "has already built its manager (a builder builds one manager: make a new builder)",
        ));
    }
    change(&mut settings)
}

/// The manager behind handle `m`.
///
/// # Safety
/// `m` must be NULL or a live handle from this library.
pub(super) unsafe fn manager_ref<'a>(
    m: *const wid_identity_manager,
) -> Result<&'a HostManager, Error> {
    // SAFETY: `m` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(m, "m") }
}

/// An identity named by (pointer, length) workload and name.
///
/// # Safety
/// Each pointer NULL or valid for its length.
pub(super) unsafe fn identity_in(
    workload: *const c_char,
    workload_len: usize,
    name: *const c_char,
    name_len: usize,
) -> Result<IdentityId, Error> {
    // SAFETY: the contract.
    let workload = unsafe { str_in(workload, workload_len, "workload", MAX_NAME)? };
    // SAFETY: the contract.
    let name = unsafe { str_in(name, name_len, "identity", MAX_NAME)? };
    if name.is_empty() {
        return Err(invalid(
            "identity",
            "is empty (expected the identity's name)",
        ));
    }
    Ok(IdentityId::new(workload, name))
}

/// Starts configuring a manager whose tokens are checked against `kr` (the
/// keyring the signer's keys are in: a token that does not verify against
/// it, restored or newly signed, is never used) and saved in the directory
/// `state_dir` (UTF-8, at most 4096 bytes; it must exist: a missing one, or
/// a path that is not a directory, is `WID_RESULT_IO_ERROR`; its state file
/// holds tokens and secrets, mode 0600). Then add the identities
/// (`_add_identity`), one signer (`_set_issuer` or `_set_signer`), any
/// exchanges and a watcher, and build. `*out` receives a handle to free
/// with `wid_identity_manager_builder_free`.
///
/// # Safety
/// `kr` must be NULL or a live handle; `state_dir` NULL or valid for
/// `state_dir_len` bytes; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_builder_new(
    kr: *const wid_keyring,
    state_dir: *const c_char,
    state_dir_len: usize,
    out: *mut *mut wid_identity_manager_builder,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `kr` is NULL or a live handle, `state_dir`
        // NULL or valid for its length (the contract).
        let keyring = unsafe { keyring_ref(kr)? };
        let dir = unsafe { str_in(state_dir, state_dir_len, "state_dir", MAX_PATH)? };
        require_out(out, "out")?;
        if dir.is_empty() {
            return Err(invalid("state_dir", "is empty (expected a directory path)"));
        }
        let meta = std::fs::metadata(Path::new(dir)).map_err(|e| Error::Io {
            context: format!("identity state directory {dir}"),
            error: e,
        })?;
        if !meta.is_dir() {
            return Err(Error::Io {
                context: format!("identity state directory {dir}"),
                error: std::io::Error::other("exists but is not a directory"),
            });
        }
        let settings = Settings {
            keyring: keyring.clone(),
            state_dir: PathBuf::from(dir),
            requests: Vec::new(),
            signer: None,
            exchanges: Vec::new(),
            proof: Vec::new(),
            events: Arc::new(Events::default()),
            built: false,
        };
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe {
            handle::out(out, "out", || {
                handle::into_raw_owned::<wid_identity_manager_builder>(Mutex::new(settings))
            })
        }
    })
}

/// Releases a builder (the exchanges and signer it holds stay with a manager
/// built from it). NULL-safe.
///
/// # Safety
/// `b` must be NULL or a handle from this library not yet freed, with no
/// call using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_builder_free(b: *mut wid_identity_manager_builder) {
    // SAFETY: `b` is NULL or a live builder handle the caller gives up.
    call_void(|| unsafe { handle::free_owned(b) });
}

/// Adds an identity: a msgpack `IssueRequest` (as `wid_issue` takes it),
/// checked at once (an invalid request is `WID_RESULT_INVALID_ARGUMENT`
/// naming every problem, bytes that are not one `WID_RESULT_DECODE_ERROR`).
/// Every identity must be of one allocation, named once (workload and
/// identity name), without a `ProofKey` (checked by `_build`).
///
/// # Safety
/// `b` must be NULL or a live handle; `request_msgpack` NULL or valid for
/// `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_builder_add_identity(
    b: *mut wid_identity_manager_builder,
    request_msgpack: *const u8,
    len: usize,
) -> wid_result {
    call(|| {
        let limits = DecodeLimits::default();
        // SAFETY: `request_msgpack` NULL or valid for `len` bytes; `b` NULL or
        // live (the contract).
        unsafe {
            handle::borrow::<wid_identity_manager_builder>(b, "builder")?;
            let request = bytes_in(request_msgpack, len, "request_msgpack", limits.max_bytes)?;
            let req: IssueRequest = codec::decode_with(request, &limits)?;
            req.validate()?;
            update(b, |s| {
                s.requests.push(req);
                Ok(())
            })
        }
    })
}

/// Signs with `iss` in this process (its algorithm, `iss`, profiles; a
/// proof-bound identity needs its WIMSE trust domain). Replaces a signer set
/// before. The builder keeps its own reference.
///
/// # Safety
/// `b` and `iss` must be NULL or live handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_builder_set_issuer(
    b: *mut wid_identity_manager_builder,
    iss: *const wid_issuer,
) -> wid_result {
    call(|| {
        // SAFETY: `b` and `iss` are NULL or live handles (the contract).
        unsafe {
            handle::borrow::<wid_identity_manager_builder>(b, "builder")?;
            let issuer = handle::borrow::<wid_issuer>(iss, "iss")?.clone();
            update(b, |s| {
                s.signer = Some(Arc::new(issuer));
                Ok(())
            })
        }
    })
}

/// Signs through the host: `sign` (see `wid_identity_sign_fn`) is called for
/// each identity with its request and returns the token the host's servers
/// signed; each is checked against the builder's keyring and compared with
/// its request before it is used. Replaces a signer set before. `userdata`
/// is passed to `sign` untouched; it and `sign` must stay usable, from any
/// thread that drives the manager, until the manager is freed.
///
/// # Safety
/// `b` must be NULL or a live handle; `sign` NULL or a function of that
/// type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_builder_set_signer(
    b: *mut wid_identity_manager_builder,
    sign: wid_identity_sign_fn,
    userdata: *mut c_void,
) -> wid_result {
    call(|| {
        // SAFETY: `b` is NULL or a live handle (the contract).
        unsafe { handle::borrow::<wid_identity_manager_builder>(b, "builder")? };
        let sign = sign.ok_or_else(|| null("sign"))?;
        // SAFETY: as above.
        unsafe {
            update(b, |s| {
                s.signer = Some(Arc::new(HostSigner {
                    sign,
                    userdata: Userdata(userdata),
                    keyring: s.keyring.clone(),
                }));
                Ok(())
            })
        }
    })
}

/// Adds the host's own token exchange, named `name` (unique among the
/// manager's exchanges: its secret is saved under it), consuming identity
/// (`workload`, `identity`): `derive` (required) trades the identity's token
/// for a secret; `refresh` (NULL: the secret never expires, and after a
/// restore it is derived again, as it cannot be confirmed) keeps it usable;
/// `release` (NULL: nothing) revokes a replaced one. Secrets are delivered
/// through the watcher (`WID_MANAGED_SECRET`) and readable with
/// `wid_identity_manager_secret`. The callbacks and `userdata` must stay
/// usable, from any thread that drives the manager, until it is freed.
///
/// # Safety
/// `b` must be NULL or a live handle; the strings NULL or valid for their
/// lengths; the callbacks NULL or functions of their types.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_builder_add_exchange(
    b: *mut wid_identity_manager_builder,
    name: *const c_char,
    name_len: usize,
    workload: *const c_char,
    workload_len: usize,
    identity: *const c_char,
    identity_len: usize,
    derive: wid_exchange_derive_fn,
    refresh: wid_exchange_refresh_fn,
    release: wid_exchange_release_fn,
    userdata: *mut c_void,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` NULL or live, the strings NULL or valid
        // for their lengths (the contract).
        unsafe { handle::borrow::<wid_identity_manager_builder>(b, "builder")? };
        let name = unsafe { str_in(name, name_len, "name", MAX_NAME)? };
        if name.is_empty() {
            return Err(invalid("name", "is empty (expected the exchange's name)"));
        }
        let identity = unsafe { identity_in(workload, workload_len, identity, identity_len)? };
        let derive = derive.ok_or_else(|| null("derive"))?;
        unsafe {
            update(b, |s| {
                s.exchanges.push(Arc::new(HostExchange {
                    name: name.to_string(),
                    identity,
                    derive,
                    refresh,
                    release,
                    userdata: Userdata(userdata),
                    events: s.events.clone(),
                }));
                Ok(())
            })
        }
    })
}

/// Makes identity (`workload`, `identity`) proof-bound: a WIMSE WIT bound to
/// a fresh workload key of `alg` (`WID_ALG_EDDSA` or `WID_ALG_ES256`) for
/// every WIT (the signer must sign WITs). Checked by `_build`.
///
/// # Safety
/// `b` must be NULL or a live handle; the strings NULL or valid for their
/// lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_builder_set_proof_of_possession(
    b: *mut wid_identity_manager_builder,
    workload: *const c_char,
    workload_len: usize,
    identity: *const c_char,
    identity_len: usize,
    alg: wid_alg,
) -> wid_result {
    call(|| {
        // SAFETY (this block): `b` NULL or live, the strings NULL or valid
        // for their lengths (the contract).
        unsafe { handle::borrow::<wid_identity_manager_builder>(b, "builder")? };
        let identity = unsafe { identity_in(workload, workload_len, identity, identity_len)? };
        let alg = alg_in(alg)?;
        unsafe {
            update(b, |s| {
                s.proof.push((identity, alg));
                Ok(())
            })
        }
    })
}

/// Sets the watcher (see `wid_identity_watch_fn`), replacing one set before:
/// told of every new token and every delivered secret, on the thread that
/// drives the manager, before `_start`, `_restore` or `_tick` returns. It
/// must not call `_start`, `_restore` or `_tick` of the same manager (they
/// wait for each other); reading (`_current`, `_secret`) is fine.
///
/// # Safety
/// `b` must be NULL or a live handle; `watch` NULL or a function of that
/// type; it and `userdata` usable until the manager is freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_builder_set_watcher(
    b: *mut wid_identity_manager_builder,
    watch: wid_identity_watch_fn,
    userdata: *mut c_void,
) -> wid_result {
    call(|| {
        // SAFETY: `b` is NULL or a live handle (the contract).
        unsafe { handle::borrow::<wid_identity_manager_builder>(b, "builder")? };
        let watch = watch.ok_or_else(|| null("watch"))?;
        // SAFETY: as above.
        unsafe {
            update(b, |s| {
                s.events.set_callback(watch, Userdata(userdata));
                Ok(())
            })
        }
    })
}

/// Builds the manager (a builder builds one). Refused with
/// `WID_RESULT_INVALID_ARGUMENT`, saying why, when: no identity was added,
/// no signer was set, the identities are not of one allocation or one is
/// added twice, an exchange consumes an identity not added, two exchanges
/// share a name, or a proof-bound identity is not added. Nothing is signed
/// yet: call `wid_identity_manager_start` (a new allocation) or
/// `wid_identity_manager_restore` (after a restart). `*out` receives a
/// handle to free with `wid_identity_manager_free`.
///
/// # Safety
/// `b` must be NULL or a live handle; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_builder_build(
    b: *mut wid_identity_manager_builder,
    out: *mut *mut wid_identity_manager,
) -> wid_result {
    call(|| {
        // SAFETY: `b` is NULL or a live handle (the contract).
        unsafe { handle::borrow::<wid_identity_manager_builder>(b, "builder")? };
        require_out(out, "out")?;
        // SAFETY: as above.
        let manager = unsafe {
            update(b, |s| {
                let signer = s.signer.clone().ok_or_else(|| {
                    invalid(
                        "builder",
                        "has no signer (set one with wid_identity_manager_builder_set_issuer or _set_signer)",
                    )
                })?;
                let mut builder = IdentityManager::builder(
                    s.requests.clone(),
                    signer,
                    Arc::new(FileIdentityDb::new(s.state_dir.clone())),
                    s.keyring.clone(),
                );
                for x in &s.exchanges {
                    builder = builder.exchange(x.clone());
                }
                for (identity, alg) in &s.proof {
                    builder = builder.proof_of_possession(identity.clone(), *alg);
                }
                let manager = builder.build()?;
                let watchers = s
                    .requests
                    .iter()
                    .map(|r| {
                        let key = IdentityId::of(r);
                        manager.watch(&key).map(|w| (key, w))
                    })
                    .collect::<Result<Vec<_>, Error>>()?;
                s.events.set_watchers(watchers);
                s.built = true;
                Ok(HostManager {
                    manager,
                    events: s.events.clone(),
                })
            })?
        };
        // SAFETY: `out` is writable (checked non-NULL; the contract).
        unsafe { handle::out(out, "out", || handle::into_raw(manager)) }
    })
}

/// Releases a manager handle (reference counted). Its state stays in its
/// directory for a later `wid_identity_manager_restore`; no secret is
/// released (a restarted host confirms and reuses it). NULL-safe.
///
/// # Safety
/// `m` must be NULL or a handle from this library not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wid_identity_manager_free(m: *const wid_identity_manager) {
    // SAFETY: `m` is NULL or a live manager handle the caller gives up.
    call_void(|| unsafe { handle::free(m) });
}
