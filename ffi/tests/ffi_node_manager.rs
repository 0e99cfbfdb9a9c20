//! The node identity manager through the C ABI
//! (`wid_node_identity_manager_*`): a first token, renewal only when due,
//! a restart with a new handle on the same state directory taking the saved
//! token back, a failed renewal keeping the current token and reporting it
//! in the health JSON, NULLs, bad values, wrong handle types, outputs
//! untouched on failure, and many threads at once. (`bindings/c/test.c`
//! drives the same functions from C under valgrind.)

mod common;

use std::ptr::{null, null_mut};

use common::bytes::{is_sentinel, json_of, sentinel, text_of};
use common::ffi_text::{error_says, last_error, name};
use common::handles::{free, made};
use common::keys::{issuer, new_keyring};
use common::request::node_request;
use common::result::expect;
use common::strings::s;
use workload_identity::codec;
use workload_identity::model::NodeIdentityRequest;
use workload_identity_ffi::*;

const T0: i64 = 1_700_000_000_000;
const DAY_MS: i64 = 24 * 3600 * 1000;

/// The node request, with Nomad's defaults: audience `nomadproject.io`, 24 h.
fn request() -> Vec<u8> {
    codec::encode(&node_request()).unwrap()
}

/// A keyring with an active EdDSA key `k1` of fixed material.
fn keyring() -> *mut wid_keyring {
    common::keys::keyring("k1", 7)
}

/// A temporary state directory, a keyring with `k1` and an issuer over it.
fn world() -> (tempfile::TempDir, *mut wid_keyring, *mut wid_issuer) {
    let kr = keyring();
    (tempfile::tempdir().unwrap(), kr, issuer(kr))
}

/// `wid_node_identity_manager_new` of `req` over `dir`, into `out`.
fn new_manager(
    iss: *const wid_issuer,
    kr: *const wid_keyring,
    req: &[u8],
    dir: &str,
    out: *mut *mut wid_node_identity_manager,
) -> wid_result {
    let ((r, rl), (d, dl)) = ((req.as_ptr(), req.len()), s(dir));
    unsafe { wid_node_identity_manager_new(iss, kr, r, rl, d, dl, out) }
}

/// A manager of [`request`] over `dir`.
fn manager(
    iss: *const wid_issuer,
    kr: *const wid_keyring,
    dir: &std::path::Path,
) -> *mut wid_node_identity_manager {
    let dir = dir.to_str().unwrap();
    made(|out| new_manager(iss, kr, &request(), dir, out))
}

fn current(m: *const wid_node_identity_manager, now: i64) -> String {
    text_of(|out| unsafe { wid_node_identity_manager_current(m, now, out) })
}

fn health(m: *const wid_node_identity_manager, now: i64) -> serde_json::Value {
    json_of(|out| unsafe { wid_node_identity_manager_health_json(m, now, out) })
}

fn next_due(m: *const wid_node_identity_manager) -> i64 {
    let mut due = 0;
    expect(
        unsafe { wid_node_identity_manager_next_due_ms(m, &mut due) },
        WID_RESULT_OK,
    );
    due
}

#[test]
fn starts_renews_when_due_and_a_new_handle_restores_the_saved_token() {
    let (dir, kr, iss) = world();
    let m = manager(iss, kr, dir.path());

    // Nothing yet: no token, nothing scheduled, at risk.
    let mut t = sentinel();
    expect(
        unsafe { wid_node_identity_manager_current(m, T0, &mut t) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("no valid node identity");
    assert!(is_sentinel(&t));
    let mut due = -7;
    expect(
        unsafe { wid_node_identity_manager_next_due_ms(m, &mut due) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    assert_eq!(due, -7);
    let h = health(m, T0);
    assert_eq!(h["at_risk"], true);
    assert!(h["expires_in_ms"].is_null() && h["expires_at"].is_null());

    expect(
        unsafe { wid_node_identity_manager_start(m, T0) },
        WID_RESULT_OK,
    );
    let first = current(m, T0);
    assert_eq!(first.split('.').count(), 3);
    let due = next_due(m);
    assert!((T0 + DAY_MS * 2 / 3 - DAY_MS / 20..=T0 + DAY_MS * 2 / 3).contains(&due));

    // Before due: nothing happens.
    expect(
        unsafe { wid_node_identity_manager_tick(m, due - 1) },
        WID_RESULT_OK,
    );
    assert_eq!(current(m, due - 1), first);
    let h = health(m, T0 + 1000);
    let keys: Vec<&str> = h.as_object().unwrap().keys().map(String::as_str).collect();
    for k in [
        "expires_in_ms",
        "renewal_overdue_ms",
        "at_risk",
        "signed",
        "failures",
        "consecutive_failures",
        "expires_at",
        "next_attempt_ms",
        "expires_before_next_attempt",
        "last_error",
    ] {
        assert!(keys.contains(&k), "{k} missing from {h}");
    }
    assert_eq!(keys.len(), 10, "{h}");
    assert_eq!(h["signed"], 1);
    assert_eq!(h["failures"], 0);
    assert_eq!(h["consecutive_failures"], 0);
    assert_eq!(h["at_risk"], false);
    assert_eq!(h["renewal_overdue_ms"], 0);
    assert_eq!(h["expires_at"], T0 / 1000 + 86_400);
    assert_eq!(h["expires_in_ms"], DAY_MS - 1000);
    assert_eq!(h["next_attempt_ms"], due);
    assert_eq!(h["expires_before_next_attempt"], false);
    assert!(h["last_error"].is_null());

    // A "restart": a new handle on the same directory takes the token back.
    unsafe { wid_node_identity_manager_free(m) };
    let m2 = manager(iss, kr, dir.path());
    let mut reused = 99;
    expect(
        unsafe { wid_node_identity_manager_restore(m2, T0 + 60_000, &mut reused) },
        WID_RESULT_OK,
    );
    assert_eq!(reused, 1);
    assert_eq!(current(m2, T0 + 60_000), first);
    assert_eq!(health(m2, T0 + 60_000)["signed"], 0);
    // NULL `out_reused` is allowed.
    expect(
        unsafe { wid_node_identity_manager_restore(m2, T0 + 60_000, null_mut()) },
        WID_RESULT_OK,
    );

    // Due: renewed.
    let due2 = next_due(m2);
    expect(
        unsafe { wid_node_identity_manager_tick(m2, due2) },
        WID_RESULT_OK,
    );
    let second = current(m2, due2);
    assert_ne!(second, first);
    assert_eq!(health(m2, due2)["signed"], 1);
    assert!(next_due(m2) > due2 + DAY_MS / 2);

    // Another directory has nothing saved: restore signs anew.
    let other = tempfile::tempdir().unwrap();
    let m3 = manager(iss, kr, other.path());
    let mut reused = 99;
    expect(
        unsafe { wid_node_identity_manager_restore(m3, T0, &mut reused) },
        WID_RESULT_OK,
    );
    assert_eq!(reused, 0);

    unsafe { free!(m2, m3, iss, kr) };
}

#[test]
fn a_failed_renewal_keeps_the_token_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    // The issuer signs with its own keyring; the manager checks against
    // another holding the same key, until the issuer's rotates away from it.
    let signing = keyring();
    let checking = keyring();
    let iss = issuer(signing);
    let m = manager(iss, checking, dir.path());
    expect(
        unsafe { wid_node_identity_manager_start(m, T0) },
        WID_RESULT_OK,
    );
    let first = current(m, T0);
    expect(
        unsafe { wid_keyring_rotate(signing, 1, null_mut()) },
        WID_RESULT_OK,
    );

    let due = next_due(m);
    let rc = unsafe { wid_node_identity_manager_tick(m, due) };
    assert_ne!(rc, WID_RESULT_OK);
    error_says("does not verify");
    assert_eq!(current(m, due), first);
    let h = health(m, due);
    assert_eq!(h["at_risk"], true);
    assert_eq!(h["failures"], 1);
    assert_eq!(h["consecutive_failures"], 1);
    assert_eq!(h["next_attempt_ms"], due + 1000);
    assert!(
        h["last_error"]
            .as_str()
            .unwrap()
            .contains("does not verify")
    );
    assert_eq!(next_due(m), due + 1000);

    // Once it has expired there is no valid identity.
    let mut t = sentinel();
    expect(
        unsafe { wid_node_identity_manager_current(m, T0 + DAY_MS, &mut t) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    assert!(is_sentinel(&t));

    // No key at all: start fails with the signer's code.
    let none = new_keyring();
    let iss2 = issuer(none);
    let d2 = tempfile::tempdir().unwrap();
    let m2 = manager(iss2, none, d2.path());
    expect(
        unsafe { wid_node_identity_manager_start(m2, T0) },
        WID_RESULT_NO_ACTIVE_KEY,
    );
    let mut reused = 99;
    expect(
        unsafe { wid_node_identity_manager_restore(m2, T0, &mut reused) },
        WID_RESULT_NO_ACTIVE_KEY,
    );
    assert_eq!(reused, 99);
    assert_eq!(health(m2, T0)["failures"], 2);

    unsafe { free!(m, m2, iss, iss2, signing, checking, none) };
}

#[test]
fn nulls_bad_values_and_wrong_handles_leave_outputs_untouched() {
    let (dir, kr, iss) = world();
    let d = dir.path().to_str().unwrap();
    let req = request();
    let sentinel_m = std::ptr::dangling_mut::<wid_node_identity_manager>();
    let new = new_manager;
    let mut m = sentinel_m;
    expect(new(null(), kr, &req, d, &mut m), WID_RESULT_NULL_ARGUMENT);
    expect(new(iss, null(), &req, d, &mut m), WID_RESULT_NULL_ARGUMENT);
    expect(new(iss, kr, &req, d, null_mut()), WID_RESULT_NULL_ARGUMENT);
    expect(
        unsafe {
            wid_node_identity_manager_new(iss, kr, null(), 5, d.as_ptr().cast(), d.len(), &mut m)
        },
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        unsafe {
            wid_node_identity_manager_new(iss, kr, req.as_ptr(), req.len(), null(), 3, &mut m)
        },
        WID_RESULT_NULL_ARGUMENT,
    );
    // Wrong handle types.
    expect(
        new(kr.cast(), kr, &req, d, &mut m),
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        new(iss, iss.cast(), &req, d, &mut m),
        WID_RESULT_INVALID_ARGUMENT,
    );
    // Bad request, bad directory.
    expect(new(iss, kr, b"\xc1", d, &mut m), WID_RESULT_DECODE_ERROR);
    let bad = codec::encode(&NodeIdentityRequest::default()).unwrap();
    expect(new(iss, kr, &bad, d, &mut m), WID_RESULT_INVALID_ARGUMENT);
    expect(new(iss, kr, &req, "", &mut m), WID_RESULT_INVALID_ARGUMENT);
    let missing = format!("{d}/missing");
    expect(new(iss, kr, &req, &missing, &mut m), WID_RESULT_IO_ERROR);
    let file = format!("{d}/file");
    std::fs::write(&file, b"x").unwrap();
    expect(new(iss, kr, &req, &file, &mut m), WID_RESULT_IO_ERROR);
    assert_eq!(m, sentinel_m);
    assert!(std::fs::read_dir(d).unwrap().count() == 1, "only the file");

    let real = manager(iss, kr, dir.path());
    let wrong: *const wid_node_identity_manager = kr.cast();
    for h in [null(), wrong] {
        let want = if h.is_null() {
            WID_RESULT_NULL_ARGUMENT
        } else {
            WID_RESULT_INVALID_ARGUMENT
        };
        expect(unsafe { wid_node_identity_manager_start(h, T0) }, want);
        let mut reused = 99;
        expect(
            unsafe { wid_node_identity_manager_restore(h, T0, &mut reused) },
            want,
        );
        assert_eq!(reused, 99);
        expect(unsafe { wid_node_identity_manager_tick(h, T0) }, want);
        let mut due = -7;
        expect(
            unsafe { wid_node_identity_manager_next_due_ms(h, &mut due) },
            want,
        );
        assert_eq!(due, -7);
        let mut t = sentinel();
        expect(
            unsafe { wid_node_identity_manager_current(h, T0, &mut t) },
            want,
        );
        assert!(is_sentinel(&t));
        let mut j = sentinel();
        expect(
            unsafe { wid_node_identity_manager_health_json(h, T0, &mut j) },
            want,
        );
        assert!(is_sentinel(&j));
        // Freeing NULL or a wrong handle does nothing.
        unsafe { wid_node_identity_manager_free(h) };
    }
    expect(
        unsafe { wid_node_identity_manager_start(real, T0) },
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_node_identity_manager_next_due_ms(real, null_mut()) },
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        unsafe { wid_node_identity_manager_current(real, T0, null_mut()) },
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        unsafe { wid_node_identity_manager_health_json(real, T0, null_mut()) },
        WID_RESULT_NULL_ARGUMENT,
    );
    // A manager handle is not a keyring.
    let mut jwks = sentinel();
    expect(
        unsafe { wid_keyring_jwks(real.cast(), &mut jwks) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    assert!(is_sentinel(&jwks));

    unsafe { free!(real, iss, kr) };
}

#[test]
fn many_threads_share_one_manager() {
    let (dir, kr, iss) = world();
    let m = manager(iss, kr, dir.path());
    expect(
        unsafe { wid_node_identity_manager_start(m, T0) },
        WID_RESULT_OK,
    );
    let due = next_due(m);
    let first = current(m, T0);
    let addr = m as usize;
    // Ticks before due, reads and health checks from many threads at once.
    // (Concurrent ticks *at* the due time are not raced here: the Rust
    // manager does not re-check the due time once it holds its renewal lock.)
    std::thread::scope(|s| {
        for i in 0..8i64 {
            let first = first.clone();
            s.spawn(move || {
                let m = addr as *const wid_node_identity_manager;
                for j in 0..50 {
                    let now = T0 + i * 1000 + j;
                    expect(
                        unsafe { wid_node_identity_manager_tick(m, now) },
                        WID_RESULT_OK,
                    );
                    assert_eq!(current(m, now), first);
                    assert_eq!(next_due(m), due);
                    assert_eq!(health(m, now)["signed"], 1);
                }
            });
        }
    });
    expect(
        unsafe { wid_node_identity_manager_tick(m, due) },
        WID_RESULT_OK,
    );
    assert_eq!(health(m, due)["signed"], 2);
    unsafe { free!(m, iss, kr) };
}

/// `now_ms` anywhere in `int64_t`, `INT64_MIN` and `INT64_MAX` included:
/// never `WID_RESULT_PANIC` (an overflow in a debug build), and the health
/// JSON's distances saturate instead of wrapping.
#[test]
fn extreme_times_are_answered_never_a_panic() {
    const EDGES: [i64; 6] = [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX - 1, i64::MAX];
    let not_panic = |rc: wid_result, what: &str| {
        assert_ne!(name(rc), name(WID_RESULT_PANIC), "{what}: {}", last_error());
    };
    let (dir, kr, iss) = world();

    // A token of today, looked at from either end of time.
    let m = manager(iss, kr, dir.path());
    expect(
        unsafe { wid_node_identity_manager_start(m, T0) },
        WID_RESULT_OK,
    );
    let h = health(m, i64::MIN);
    assert_eq!(h["expires_in_ms"], i64::MAX, "saturated: {h}");
    assert_eq!(h["renewal_overdue_ms"], 0, "{h}");
    for now in EDGES {
        let _ = health(m, now);
        not_panic(
            unsafe { wid_node_identity_manager_tick(m, now) },
            &format!("tick at {now}"),
        );
        let _ = health(m, now);
    }
    // A signing far before the current token fails (the token would not
    // outlive it), and its warning's distance to the expiry does not fit.
    not_panic(
        unsafe { wid_node_identity_manager_start(m, i64::MIN) },
        "start at INT64_MIN after a token of today",
    );
    unsafe { wid_node_identity_manager_free(m) };

    // A token signed at the start of time, looked at from its end.
    let other = tempfile::tempdir().unwrap();
    let m = manager(iss, kr, other.path());
    expect(
        unsafe { wid_node_identity_manager_start(m, i64::MIN) },
        WID_RESULT_OK,
    );
    let h = health(m, i64::MAX);
    assert_eq!(h["expires_in_ms"], i64::MIN, "saturated: {h}");
    assert_eq!(h["renewal_overdue_ms"], i64::MAX, "saturated: {h}");
    assert_eq!(h["at_risk"], true);
    for now in EDGES {
        not_panic(
            unsafe { wid_node_identity_manager_tick(m, now) },
            &format!("tick at {now}"),
        );
        let _ = health(m, now);
    }
    unsafe { free!(m, iss, kr) };
}
