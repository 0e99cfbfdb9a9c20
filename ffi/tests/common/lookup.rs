//! Allocation lookup callbacks for the C ABI's verifiers, beside
//! `live::ffi_live` (every allocation live): the sample allocation
//! (`ALLOC_ID`) live and every other missing, the sample allocation in the
//! state the userdata points to, or answers by consistency (and a code) that
//! the userdata gives.

use std::ffi::c_void;

use workload_identity_ffi::*;

use super::ALLOC_ID;

/// Userdata for [`sample_state`]: the sample allocation is live.
pub static LIVE: u32 = WID_ALLOC_LIVE;
/// Userdata for [`sample_state`]: the sample allocation is terminal.
pub static TERMINAL: u32 = WID_ALLOC_TERMINAL;
/// Userdata for [`sample_state`]: the sample allocation is missing.
pub static MISSING: u32 = WID_ALLOC_MISSING;

/// `state` as [`sample_state`]'s userdata.
pub fn state(state: &'static u32) -> *mut c_void {
    (state as *const u32).cast_mut().cast()
}

/// The allocation state of `id`: `known` for the sample allocation, missing
/// for any other.
fn of(id: *const u8, len: usize, known: u32) -> u32 {
    // SAFETY: the library passes an ID valid for `len` bytes.
    let id = unsafe { std::slice::from_raw_parts(id, len) };
    if id == ALLOC_ID.as_bytes() {
        known
    } else {
        WID_ALLOC_MISSING
    }
}

/// The sample allocation is live, every other missing (userdata unused).
///
/// # Safety
/// As a `wid_alloc_lookup_fn` called by the library.
pub unsafe extern "C" fn sample_live(
    _userdata: *mut c_void,
    id: *const u8,
    len: usize,
    _consistency: u32,
    out: *mut u32,
) -> wid_result {
    // SAFETY: the library passes a valid output.
    unsafe { *out = of(id, len, WID_ALLOC_LIVE) };
    WID_RESULT_OK
}

/// The sample allocation is in the state `userdata` points to (see
/// [`state`]), every other missing.
///
/// # Safety
/// As a `wid_alloc_lookup_fn` called by the library, with `userdata` from
/// [`state`].
pub unsafe extern "C" fn sample_state(
    userdata: *mut c_void,
    id: *const u8,
    len: usize,
    _consistency: u32,
    out: *mut u32,
) -> wid_result {
    // SAFETY: `userdata` points to a `u32` (from `state`).
    let known = unsafe { *(userdata as *const u32) };
    // SAFETY: the library passes a valid output.
    unsafe { *out = of(id, len, known) };
    WID_RESULT_OK
}

/// Userdata for [`by_consistency`]: `[stale_state, consistent_state, rc]`.
pub type ByConsistency = [u32; 3];

/// Answers as the [`ByConsistency`] `userdata` points to says: its `rc` if
/// that is not OK; else, for the sample allocation, the state for the read's
/// consistency (`u32::MAX - 1`: nothing written), and missing for any other.
///
/// # Safety
/// As a `wid_alloc_lookup_fn` called by the library, with `userdata`
/// pointing to a [`ByConsistency`].
pub unsafe extern "C" fn by_consistency(
    userdata: *mut c_void,
    id: *const u8,
    len: usize,
    consistency: u32,
    out: *mut u32,
) -> wid_result {
    // SAFETY: `userdata` points to a `ByConsistency`.
    let cfg = unsafe { &*(userdata as *const ByConsistency) };
    // SAFETY: the library passes an ID valid for `len` bytes.
    let id = unsafe { std::slice::from_raw_parts(id, len) };
    if cfg[2] != WID_RESULT_OK {
        return cfg[2];
    }
    let state = if id != ALLOC_ID.as_bytes() {
        WID_ALLOC_MISSING
    } else {
        cfg[consistency as usize]
    };
    if state != u32::MAX - 1 {
        // SAFETY: the library passes a valid output.
        unsafe { *out = state };
    }
    WID_RESULT_OK
}
