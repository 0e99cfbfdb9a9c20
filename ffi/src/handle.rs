//! Handles and outputs: the one place C pointers become Rust references.
//!
//! A handle (`wid_keyring *`, `wid_verifier *`) is an `Arc` turned into a raw
//! pointer to a [`Handle`]: a type tag first, then the value. The model is
//! rustls-ffi's `Castable`/`arc_castable!`: each opaque C type names its Rust
//! value and tag once ([`Castable`]), and every function reaches it through
//! [`into_raw`], [`borrow`] and [`free`]. Outputs are written only through
//! [`out`] (required) and [`out_optional`] (may be NULL).
//!
//! # The safety argument, once
//!
//! * A pointer from [`into_raw`] points into a live `Arc<Handle<T>>` until the
//!   caller's matching `_free` drops the last reference; one from
//!   [`into_raw_owned`] (`wid_workload_key`, which has one owner) into a live
//!   `Box<Handle<T>>` until its `_free` ([`free_owned`]). Each handle type is
//!   made by exactly one of the two (`Castable::OWNED`, checked at compile
//!   time), so its `_free` knows which it holds. The C contract of every
//!   function is that a handle argument is NULL or such a live pointer; using
//!   a freed handle is undefined behaviour, as in every C library, and is not
//!   reliably detected.
//! * [`borrow`] checks NULL, alignment and the tag before it returns a
//!   reference. `Handle` is `repr(C)` with the tag first, so for a live handle of
//!   *another* type the tag read stays in bounds (every handle starts with it)
//!   and differs: a wrong handle type is `INVALID_ARGUMENT`, not a
//!   misinterpretation. A handle whose last reference was dropped has its tag
//!   overwritten first, which catches many (not all) uses after free.
//! * The reference [`borrow`] returns lives no longer than the call: the C
//!   caller must not free the handle while a call on it is running (the
//!   contract every function states).
//! * [`out`] and [`out_optional`] write through a pointer the C contract says
//!   is NULL or valid and writable for one `T`; NULL is checked here.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::boundary::{invalid, null};
use workload_identity::Error;

/// Written over a handle's tag when its last reference goes.
const DEAD: u64 = 0xdead_dead_dead_dead;

/// An opaque C handle type and the Rust value behind it.
pub(crate) trait Castable {
    /// The Rust value the handle shares.
    type Rust: Send + Sync;
    /// This type's tag (distinct per type).
    const TAG: u64;
    /// The C type's name, for messages (`wid_keyring`).
    const NAME: &'static str;
    /// `true` for a type handed out by [`into_raw_owned`] (a `Box`), `false`
    /// for one handed out by [`into_raw`] (an `Arc`); checked at compile time,
    /// so a handle can never be freed as the other kind.
    const OWNED: bool = false;
}

/// What a handle pointer points to: the tag first (see the module docs).
#[repr(C)]
struct Handle<T> {
    tag: AtomicU64,
    value: T,
}

/// Shares `value` with C as a new handle of type `C` (one reference, released
/// by [`free`]).
pub(crate) fn into_raw<C: Castable>(value: C::Rust) -> *mut C {
    const { assert!(!C::OWNED, "an owned handle type is made by into_raw_owned") };
    Arc::into_raw(Arc::new(Handle {
        tag: AtomicU64::new(C::TAG),
        value,
    }))
    .cast_mut()
    .cast()
}

/// The value behind handle `ptr` (argument `arg`), checked for NULL, alignment
/// and type.
///
/// # Safety
/// `ptr` must be NULL or a live handle from [`into_raw`] (of any type), not
/// freed while the returned reference is used.
pub(crate) unsafe fn borrow<'a, C: Castable>(
    ptr: *const C,
    arg: &'static str,
) -> Result<&'a C::Rust, Error> {
    if ptr.is_null() {
        return Err(null(arg));
    }
    if ptr.align_offset(align_of::<Handle<C::Rust>>()) != 0 {
        return Err(invalid(
            arg,
            format!("is not a {} handle (misaligned)", C::NAME),
        ));
    }
    // SAFETY: the contract makes `ptr` a live handle; its tag is its first field
    // whatever its type (repr(C)), so this read is in bounds.
    let handle = unsafe { &*ptr.cast::<Handle<C::Rust>>() };
    if handle.tag.load(Ordering::Relaxed) != C::TAG {
        return Err(invalid(arg, format!("is not a live {} handle", C::NAME)));
    }
    Ok(&handle.value)
}

/// Releases one reference to handle `ptr`; NULL and wrong-type handles are
/// ignored. The last reference marks the tag dead before the value drops.
///
/// # Safety
/// As [`borrow`]; `ptr` must not be used by the caller afterwards.
pub(crate) unsafe fn free<C: Castable>(ptr: *const C) {
    const { assert!(!C::OWNED, "an owned handle type is freed by free_owned") };
    // SAFETY: `ptr` is NULL or a live handle (this function's contract).
    if unsafe { borrow::<C>(ptr, "handle") }.is_err() {
        return;
    }
    // SAFETY: `borrow` checked this is a live handle of type C, so it came from
    // `Arc::into_raw` of an `Arc<Handle<C::Rust>>` in `into_raw`, and the
    // caller gives its reference back here.
    let arc = unsafe { Arc::from_raw(ptr.cast::<Handle<C::Rust>>()) };
    if Arc::strong_count(&arc) == 1 {
        arc.tag.store(DEAD, Ordering::Relaxed);
    }
    drop(arc);
}

/// Hands `value` to C as a new *owned* handle of type `C`: a `Box`, not an
/// `Arc` (one owner, no reference count), released by [`free_owned`]. It has
/// the same layout as a shared handle (the tag first), so [`borrow`] reads
/// both and a handle of the wrong type is detected the same way.
pub(crate) fn into_raw_owned<C: Castable>(value: C::Rust) -> *mut C {
    const { assert!(C::OWNED, "a shared handle type is made by into_raw") };
    Box::into_raw(Box::new(Handle {
        tag: AtomicU64::new(C::TAG),
        value,
    }))
    .cast()
}

/// Releases an owned handle from [`into_raw_owned`]; NULL and wrong-type
/// handles are ignored. The tag is marked dead before the value drops.
///
/// # Safety
/// `ptr` must be NULL or a live handle from this module (of any type) that
/// no other call is using; the caller must not use it afterwards.
pub(crate) unsafe fn free_owned<C: Castable>(ptr: *mut C) {
    const { assert!(C::OWNED, "a shared handle type is freed by free") };
    // SAFETY: `ptr` is NULL or a live handle (this function's contract).
    if unsafe { borrow::<C>(ptr, "handle") }.is_err() {
        return;
    }
    // SAFETY: `borrow` checked this is a live handle with C's tag; handles of
    // type C are only ever made by `into_raw_owned` (`C::OWNED`, checked at
    // compile time above and in `into_raw`), so this is the
    // `Box<Handle<C::Rust>>` it leaked, and the caller gives it back here,
    // with no call using it.
    let owned = unsafe { Box::from_raw(ptr.cast::<Handle<C::Rust>>()) };
    owned.tag.store(DEAD, Ordering::Relaxed);
    drop(owned);
}

/// Fails with `NULL_ARGUMENT` when a required output is NULL: checked before
/// any work, so nothing is done for a call that could not report it.
pub(crate) fn require_out<T>(out: *mut T, name: &'static str) -> Result<(), Error> {
    if out.is_null() {
        Err(null(name))
    } else {
        Ok(())
    }
}

/// Writes a required output, made by `value` only once `out` is known to be
/// non-NULL (a handle or `wid_bytes` made and not handed out would leak).
///
/// # Safety
/// `out` must be NULL or valid and writable for one `T`.
pub(crate) unsafe fn out<T>(
    out: *mut T,
    name: &'static str,
    value: impl FnOnce() -> T,
) -> Result<(), Error> {
    require_out(out, name)?;
    // SAFETY: non-NULL, and writable per the contract.
    unsafe { out.write(value()) };
    Ok(())
}

/// Writes an output that only reports (a new key ID, a count): NULL means the
/// caller does not want it, and then `value` is not even made (a `wid_bytes`
/// made and not handed out would leak).
///
/// # Safety
/// As [`out`].
pub(crate) unsafe fn out_optional<T>(out: *mut T, value: impl FnOnce() -> T) {
    if !out.is_null() {
        // SAFETY: non-NULL, and writable per the contract.
        unsafe { out.write(value()) };
    }
}
