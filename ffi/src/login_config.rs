//! What the built-in logins' C configs share (`wid_vault_login_config`,
//! `wid_consul_login_config`): a Rust login builder behind a lock, changed
//! by typed setters, each value checked as it is set where it can be, and
//! the whole when the login is added to a manager (its watcher told of
//! every token the login hands out).

use std::ffi::c_char;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::boundary::{bytes_in, invalid, str_in};
use super::handle::{self, Castable, require_out};
use super::identity_manager::{identity_in, update, wid_identity_manager_builder};
use workload_identity::Error;
use workload_identity::manager::{EventKind, IdentityId, TokenExchange};

/// The most bytes of a string setting.
pub(super) const MAX_STR: usize = 8192;
/// The most bytes of a CA bundle.
const MAX_PEM: usize = 1 << 20;
/// The longest time setting.
pub(super) const MAX_MS: u64 = 600_000;

/// A login builder the C config holds: checked and built when added, with
/// the watcher's callback as its `on_token`.
pub(super) trait LoginBuilder: Clone + Send + 'static {
    /// The login it builds.
    type Login: TokenExchange + 'static;
    /// Checks and builds.
    fn build_login(self) -> Result<Self::Login, Error>;
    /// This builder, handing every new token to `f`.
    fn with_on_token(self, f: impl Fn(&str, EventKind) + Send + Sync + 'static) -> Self;
}

/// Implements [`LoginBuilder`] for a library login builder `$builder` of
/// login `$login` (its `build` and `on_token`).
macro_rules! login_builder {
    ($builder:ty => $login:ty) => {
        impl $crate::login_config::LoginBuilder for $builder {
            type Login = $login;
            fn build_login(self) -> Result<$login, workload_identity::Error> {
                self.build()
            }
            fn with_on_token(
                self,
                f: impl Fn(&str, workload_identity::manager::EventKind) + Send + Sync + 'static,
            ) -> Self {
                self.on_token(f)
            }
        }
    };
}
pub(super) use login_builder;

/// A new config handle in `*out`: `make(addr, identity, own)`'s builder.
/// The strings are the server's address, the identity whose token logs in
/// (its workload and name), and the login's own (a role, an auth method)
/// with its name (`role`).
///
/// # Safety
/// Each string NULL or valid for its length; `out` NULL or writable.
pub(super) unsafe fn new_config<C, B>(
    [addr, workload, identity]: [(*const c_char, usize); 3],
    (own, own_len, own_name): (*const c_char, usize, &'static str),
    make: impl FnOnce(&str, IdentityId, &str) -> B,
    out: *mut *mut C,
) -> Result<(), Error>
where
    C: Castable<Rust = Mutex<Option<B>>>,
{
    // SAFETY (this block): the strings are NULL or valid for their
    // lengths, `out` NULL or writable (the contract).
    let addr = unsafe { str_in(addr.0, addr.1, "addr", MAX_STR)? };
    let identity = unsafe { identity_in(workload.0, workload.1, identity.0, identity.1)? };
    let own = unsafe { str_in(own, own_len, own_name, MAX_STR)? };
    require_out(out, "out")?;
    let b = make(addr, identity, own);
    unsafe {
        handle::out(out, "out", || {
            handle::into_raw_owned::<C>(Mutex::new(Some(b)))
        })
    }
}

/// Releases a config handle. NULL-safe.
///
/// # Safety
/// `cfg` NULL or a handle from this library not yet freed, with no call
/// using it.
pub(super) unsafe fn free_config<C: Castable>(cfg: *mut C) -> Result<(), Error> {
    // SAFETY: the contract.
    unsafe { handle::free_owned(cfg) };
    Ok(())
}

/// Replaces the builder behind `cfg` with `change(builder)`.
///
/// # Safety
/// `cfg` must be NULL or a live handle from this library.
pub(super) unsafe fn change<C, B>(cfg: *const C, change: impl FnOnce(B) -> B) -> Result<(), Error>
where
    C: Castable<Rust = Mutex<Option<B>>>,
{
    // SAFETY: `cfg` is NULL or a live handle (this function's contract).
    let cell = unsafe { handle::borrow::<C>(cfg, "cfg")? };
    let mut slot = cell.lock().unwrap_or_else(PoisonError::into_inner);
    let b = slot
        .take()
        .ok_or_else(|| invalid("cfg", "lost its settings to a panic"))?;
    *slot = Some(change(b));
    Ok(())
}

/// Sets a string setting (UTF-8, at most 8 KiB).
///
/// # Safety
/// `cfg` NULL or a live handle; `value` NULL or valid for `len` bytes.
pub(super) unsafe fn set_str<C, B>(
    cfg: *const C,
    value: *const c_char,
    len: usize,
    name: &'static str,
    set: impl FnOnce(B, &str) -> B,
) -> Result<(), Error>
where
    C: Castable<Rust = Mutex<Option<B>>>,
{
    // SAFETY (this block): the contract.
    unsafe { handle::borrow::<C>(cfg, "cfg")? };
    let value = unsafe { str_in(value, len, name, MAX_STR)? };
    unsafe { change(cfg, |b| set(b, value)) }
}

/// Sets the CA bundle (PEM, not empty, at most 1 MiB).
///
/// # Safety
/// `cfg` NULL or a live handle; `pem` NULL or valid for `len` bytes.
pub(super) unsafe fn set_pem<C, B>(
    cfg: *const C,
    pem: *const u8,
    len: usize,
    set: impl FnOnce(B, &[u8]) -> B,
) -> Result<(), Error>
where
    C: Castable<Rust = Mutex<Option<B>>>,
{
    // SAFETY (this block): the contract.
    unsafe { handle::borrow::<C>(cfg, "cfg")? };
    let pem = unsafe { bytes_in(pem, len, "pem", MAX_PEM)? };
    if pem.is_empty() {
        return Err(invalid("pem", "is empty (expected PEM certificates)"));
    }
    unsafe { change(cfg, |b| set(b, pem)) }
}

/// Sets a time setting, `least` to 600 000 ms.
///
/// # Safety
/// `cfg` NULL or a live handle.
pub(super) unsafe fn set_ms<C, B>(
    cfg: *const C,
    ms: u64,
    name: &'static str,
    least: u64,
    set: impl FnOnce(B, Duration) -> B,
) -> Result<(), Error>
where
    C: Castable<Rust = Mutex<Option<B>>>,
{
    // SAFETY (this block): the contract.
    unsafe { handle::borrow::<C>(cfg, "cfg")? };
    if !(least..=MAX_MS).contains(&ms) {
        return Err(invalid(
            name,
            format!("is {ms} ms: expected {least} to {MAX_MS}"),
        ));
    }
    unsafe { change(cfg, |b| set(b, Duration::from_millis(ms))) }
}

/// Sets a flag (0 or 1; anything else refused).
///
/// # Safety
/// `cfg` NULL or a live handle.
pub(super) unsafe fn set_flag<C, B>(
    cfg: *const C,
    value: u32,
    name: &'static str,
    set: impl FnOnce(B, bool) -> B,
) -> Result<(), Error>
where
    C: Castable<Rust = Mutex<Option<B>>>,
{
    // SAFETY (this block): the contract.
    unsafe { handle::borrow::<C>(cfg, "cfg")? };
    let value = match value {
        0 => false,
        1 => true,
        n => return Err(invalid(name, format!("must be 0 or 1, got {n}"))),
    };
    unsafe { change(cfg, |b| set(b, value)) }
}

/// Adds the login `cfg` configures to manager builder `b`: checked now; its
/// tokens are told to the manager's watcher as its secrets.
///
/// # Safety
/// `b` and `cfg` NULL or live handles.
pub(super) unsafe fn add<C, B>(
    b: *mut wid_identity_manager_builder,
    cfg: *const C,
) -> Result<(), Error>
where
    C: Castable<Rust = Mutex<Option<B>>>,
    B: LoginBuilder,
{
    // SAFETY (this block): `b` and `cfg` NULL or live (the contract).
    unsafe { handle::borrow::<wid_identity_manager_builder>(b, "builder")? };
    let cell = unsafe { handle::borrow::<C>(cfg, "cfg")? };
    let builder = cell
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .ok_or_else(|| invalid("cfg", "lost its settings to a panic"))?;
    unsafe {
        update(b, |s| {
            let events = s.events.clone();
            // Checked first, and its identity and name read for the watcher;
            // then built again, delivering through it.
            let checked = builder.clone().build_login()?;
            let identity = checked.identity().clone();
            let name = checked.name().to_string();
            let login = builder
                .with_on_token(move |secret: &str, kind| {
                    events.deliver(&identity, &name, secret, kind)
                })
                .build_login()?;
            s.exchanges.push(Arc::new(login));
            Ok(())
        })
    }
}
