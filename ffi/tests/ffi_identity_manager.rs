//! The identity manager through the C ABI (`wid_identity_manager_*`): an
//! in-process issuer or a host signer callback, host exchanges as
//! derive/refresh/release callbacks, the watcher (a token told before the
//! secrets derived from it), a restart with a new handle on the same state
//! directory confirming the saved secret, callbacks that fail or answer
//! nothing failing closed, health, NULLs, wrong handles, a builder that
//! builds once. (`bindings/c/test.c` drives the same functions from C under
//! valgrind; the Go binding's seed-001 loop drives them against OpenBao.)

mod common;

use std::ffi::{c_char, c_void};
use std::ptr::{null, null_mut};
use std::sync::Mutex;

use common::bytes::{empty, json, json_of, take};
use common::ffi_text::{error_says, last_error, name};
use common::handles::{free, made};
use common::keys::{issuer, keyring as keyring_of};
use common::result::expect;
#[cfg(any(feature = "vault", feature = "consul"))]
use common::strings::StrArg;
use common::strings::{s, text};
use workload_identity::codec;
use workload_identity::model::{GoDuration, IssueRequest};
use workload_identity_ffi::*;

const T0: i64 = 1_700_000_000_000;

/// The task's identity `vault_default`, 1 h.
fn request() -> IssueRequest {
    let mut r = common::issue_request_task();
    r.identity.ttl = GoDuration::from_secs(3600);
    r
}

/// A keyring with an active EdDSA key `k1`.
fn keyring() -> *mut wid_keyring {
    keyring_of("k1", 7)
}

/// A keyring with another key under the same ID.
fn keyring_with_other_key() -> *mut wid_keyring {
    keyring_of("k1", 9)
}

/// What the callbacks saw, in order.
#[derive(Default)]
struct Log {
    events: Mutex<Vec<String>>,
    /// What the next refresh answers: `None` fails.
    refresh: Mutex<Option<u32>>,
    /// What the signer does: "ok", "fail", "nothing", "other".
    signer: Mutex<&'static str>,
    kr: usize,
    derived: Mutex<u32>,
}

impl Log {
    /// A log whose host signer signs ("ok") with `kr`'s keys.
    fn signing_with(kr: *const wid_keyring) -> Log {
        let log = Log {
            kr: kr as usize,
            ..Log::default()
        };
        *log.signer.lock().unwrap() = "ok";
        log
    }
    /// `self` as the callbacks' userdata.
    fn ud(&self) -> *mut c_void {
        (self as *const Log).cast_mut().cast()
    }
    fn push(&self, e: String) {
        self.events.lock().unwrap().push(e);
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

unsafe extern "C" fn watch(
    userdata: *mut c_void,
    what: u32,
    workload: *const c_char,
    workload_len: usize,
    name: *const c_char,
    name_len: usize,
    value: *const c_char,
    value_len: usize,
    kind: u32,
) {
    let log = unsafe { &*userdata.cast::<Log>() };
    let value = text(value, value_len);
    let shown = if what == WID_MANAGED_IDENTITY {
        format!("jwt:{}", value.split('.').count())
    } else {
        value.to_string()
    };
    log.push(format!(
        "watch {what} {}/{} {shown} {kind}",
        text(workload, workload_len),
        text(name, name_len)
    ));
}

unsafe extern "C" fn derive(
    userdata: *mut c_void,
    token: *const c_char,
    token_len: usize,
    now_ms: i64,
    out_secret: *mut wid_output,
    out_refresh_at_ms: *mut i64,
) -> wid_result {
    let log = unsafe { &*userdata.cast::<Log>() };
    assert_eq!(text(token, token_len).split('.').count(), 3);
    assert_eq!(unsafe { *out_refresh_at_ms }, 0, "preset to none");
    let n = {
        let mut d = log.derived.lock().unwrap();
        *d += 1;
        *d
    };
    let secret = format!("s{n}");
    log.push(format!("derive -> {secret}"));
    unsafe {
        *out_refresh_at_ms = now_ms + 600_000;
        wid_output_set(out_secret, secret.as_ptr(), secret.len())
    }
}

unsafe extern "C" fn refresh(
    userdata: *mut c_void,
    secret: *const c_char,
    secret_len: usize,
    _token: *const c_char,
    _token_len: usize,
    reason: u32,
    _now_ms: i64,
    out_outcome: *mut u32,
    out_new_secret: *mut wid_output,
    _out_refresh_at_ms: *mut i64,
) -> wid_result {
    let log = unsafe { &*userdata.cast::<Log>() };
    assert_eq!(unsafe { *out_outcome }, 0, "preset to fail closed");
    log.push(format!("refresh {} {reason}", text(secret, secret_len)));
    match *log.refresh.lock().unwrap() {
        None => {
            let why = "the secret server is down";
            unsafe { wid_output_set(out_new_secret, why.as_ptr(), why.len()) };
            WID_RESULT_STORE_UNAVAILABLE
        }
        Some(outcome) => {
            if outcome == WID_REFRESHED_REPLACED {
                let n = {
                    let mut d = log.derived.lock().unwrap();
                    *d += 1;
                    *d
                };
                let s = format!("s{n}");
                unsafe { wid_output_set(out_new_secret, s.as_ptr(), s.len()) };
            }
            if outcome != 0 {
                unsafe { *out_outcome = outcome };
            }
            WID_RESULT_OK
        }
    }
}

unsafe extern "C" fn release(userdata: *mut c_void, secret: *const c_char, secret_len: usize) {
    let log = unsafe { &*userdata.cast::<Log>() };
    log.push(format!("release {}", text(secret, secret_len)));
}

/// A host signer over an issuer of the test's keyring (`Log::kr`), doing
/// what `Log::signer` says.
unsafe extern "C" fn sign(
    userdata: *mut c_void,
    request: *const u8,
    request_len: usize,
    now_unix: i64,
    out_token: *mut wid_output,
) -> wid_result {
    let log = unsafe { &*userdata.cast::<Log>() };
    let mode = *log.signer.lock().unwrap();
    log.push(format!("sign {mode}"));
    let bytes = unsafe { std::slice::from_raw_parts(request, request_len) };
    let mut req: IssueRequest = codec::decode(bytes).unwrap();
    match mode {
        "fail" => {
            let why = "the servers are unreachable";
            unsafe { wid_output_set(out_token, why.as_ptr(), why.len()) };
            return WID_RESULT_STORE_UNAVAILABLE;
        }
        "nothing" => return WID_RESULT_OK,
        "other" => req.identity.name = "vault_other".into(),
        _ => {}
    }
    let bytes = codec::encode(&req).unwrap();
    let kr = log.kr as *const wid_keyring;
    let mut t = empty();
    let rc = unsafe { wid_issue(kr, bytes.as_ptr(), bytes.len(), now_unix, &mut t) };
    if rc != WID_RESULT_OK {
        return rc;
    }
    let token = take(&mut t);
    unsafe { wid_output_set(out_token, token.as_ptr(), token.len()) }
}

/// A temporary state directory, and its path.
fn state_dir() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    (dir, path)
}

/// A host exchange's callbacks: derive, refresh, release.
type Callbacks = (
    wid_exchange_derive_fn,
    wid_exchange_refresh_fn,
    wid_exchange_release_fn,
);

/// Adds to `b` the host exchange `name` of identity `server/<identity>`,
/// its callbacks `cb` called with `ud`.
fn add_exchange(
    b: *mut wid_identity_manager_builder,
    name: &str,
    identity: &str,
    (derive, refresh, release): Callbacks,
    ud: *mut c_void,
) -> wid_result {
    let ((n, nl), (w, wl), (i, il)) = (s(name), s("server"), s(identity));
    unsafe {
        wid_identity_manager_builder_add_exchange(
            b, n, nl, w, wl, i, il, derive, refresh, release, ud,
        )
    }
}

/// A builder over `kr` and `dir` with the task's identity (no watcher, no
/// exchange, no signer yet).
fn task_builder(kr: *const wid_keyring, dir: &str) -> *mut wid_identity_manager_builder {
    let (d, dl) = s(dir);
    let b = made(|out| unsafe { wid_identity_manager_builder_new(kr, d, dl, out) });
    let req = codec::encode(&request()).unwrap();
    expect(
        unsafe { wid_identity_manager_builder_add_identity(b, req.as_ptr(), req.len()) },
        WID_RESULT_OK,
    );
    b
}

/// A builder over `kr` and `dir` with the task's identity, a watcher and a
/// host exchange `x`, all reporting to `log`.
fn builder(kr: *const wid_keyring, dir: &str, log: &Log) -> *mut wid_identity_manager_builder {
    let b = task_builder(kr, dir);
    expect(
        unsafe { wid_identity_manager_builder_set_watcher(b, Some(watch), log.ud()) },
        WID_RESULT_OK,
    );
    let callbacks = (Some(derive as _), Some(refresh as _), Some(release as _));
    expect(
        add_exchange(b, "x", "vault_default", callbacks, log.ud()),
        WID_RESULT_OK,
    );
    b
}

fn build(b: *mut wid_identity_manager_builder) -> *mut wid_identity_manager {
    made(|out| unsafe { wid_identity_manager_builder_build(b, out) })
}

/// [`builder`] with the in-process issuer of `kr`, built (the builder
/// freed).
fn manager(kr: *const wid_keyring, dir: &str, log: &Log) -> *mut wid_identity_manager {
    let b = builder(kr, dir, log);
    in_process(b, kr);
    let m = build(b);
    unsafe { free!(b) };
    m
}

/// [`builder`] with the host signer `sign` reporting to `log`, built (the
/// builder freed).
fn host_signed(kr: *const wid_keyring, dir: &str, log: &Log) -> *mut wid_identity_manager {
    let b = builder(kr, dir, log);
    expect(
        unsafe { wid_identity_manager_builder_set_signer(b, Some(sign), log.ud()) },
        WID_RESULT_OK,
    );
    let m = build(b);
    unsafe { free!(b) };
    m
}

/// The text a manager's call wrote to `out` on success, or the library's
/// detail, `out` checked unwritten.
fn text_or_detail(rc: wid_result, out: &mut wid_bytes) -> Result<String, String> {
    if rc == WID_RESULT_OK {
        Ok(take(out))
    } else {
        assert!(out.data.is_null(), "not written on failure");
        Err(last_error())
    }
}

fn secret(m: *const wid_identity_manager) -> Result<String, String> {
    let mut out = empty();
    let (n, nl) = s("x");
    let rc = unsafe { wid_identity_manager_secret(m, n, nl, &mut out) };
    text_or_detail(rc, &mut out)
}

fn current(m: *const wid_identity_manager, now: i64) -> Result<String, String> {
    let mut out = empty();
    let ((w, wl), (i, il)) = (s("server"), s("vault_default"));
    let rc = unsafe { wid_identity_manager_current(m, w, wl, i, il, now, &mut out) };
    text_or_detail(rc, &mut out)
}

fn health(m: *const wid_identity_manager, now: i64) -> serde_json::Value {
    json_of(|out| unsafe { wid_identity_manager_health_json(m, now, out) })
}

fn in_process(b: *mut wid_identity_manager_builder, kr: *const wid_keyring) {
    let iss = issuer(kr);
    expect(
        unsafe { wid_identity_manager_builder_set_issuer(b, iss) },
        WID_RESULT_OK,
    );
    unsafe { free!(iss) };
}

#[test]
fn start_restore_and_a_secret_that_cannot_be_confirmed() {
    let (_dir, dir) = state_dir();
    let kr = keyring();
    let log = Log::default();
    *log.refresh.lock().unwrap() = Some(WID_REFRESHED_KEPT);

    let b = builder(kr, &dir, &log);
    in_process(b, kr);
    let m = build(b);
    // A builder builds one manager: its exchanges deliver to that one.
    let mut again = null_mut();
    expect(
        unsafe { wid_identity_manager_builder_build(b, &mut again) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("already built");
    assert!(again.is_null());
    unsafe { wid_identity_manager_builder_free(b) };

    assert!(secret(m).unwrap_err().contains("holds no secret"));
    expect(unsafe { wid_identity_manager_start(m, T0) }, WID_RESULT_OK);
    // The token is told before the secret derived from it.
    assert_eq!(
        log.take(),
        [
            "derive -> s1",
            &format!("watch {WID_MANAGED_IDENTITY} server/vault_default jwt:3 {WID_EVENT_INITIAL}"),
            &format!("watch {WID_MANAGED_SECRET} server/x s1 {WID_EVENT_INITIAL}"),
        ]
    );
    assert_eq!(secret(m).unwrap(), "s1");
    let token = current(m, T0).unwrap();
    let h = health(m, T0);
    assert_eq!(h["at_risk"], false, "{h}");
    assert_eq!(h["identities"][0]["valid"], true);
    assert_eq!(h["identities"][0]["expires_in_ms"], 3_600_000);
    assert_eq!(h["exchanges"][0]["has_secret"], true);
    assert!(!h.to_string().contains(&token) && !h.to_string().contains("s1\""));
    // Nothing due yet; the exchange asked for a refresh in 10 min.
    let mut next = 0;
    expect(
        unsafe { wid_identity_manager_tick(m, T0 + 1000, &mut next) },
        WID_RESULT_OK,
    );
    assert_eq!(next, T0 + 600_000);
    assert!(log.take().is_empty());
    unsafe { wid_identity_manager_free(m) };

    // A restart: a new manager on the same directory confirms the saved
    // secret (refresh, reason RESTORED) and delivers it as restored.
    let m = manager(kr, &dir, &log);
    let mut report = empty();
    expect(
        unsafe { wid_identity_manager_restore(m, T0 + 5_000, &mut report) },
        WID_RESULT_OK,
    );
    let report = json(&mut report);
    assert_eq!(report["reused"], true, "{report}");
    assert_eq!(report["rederived"], serde_json::json!([]));
    assert_eq!(current(m, T0 + 5_000).unwrap(), token, "the saved token");
    assert_eq!(
        log.take(),
        [
            format!("refresh s1 {WID_REFRESH_REASON_RESTORED}"),
            format!("watch {WID_MANAGED_IDENTITY} server/vault_default jwt:3 {WID_EVENT_RESTORED}"),
            format!("watch {WID_MANAGED_SECRET} server/x s1 {WID_EVENT_RESTORED}"),
        ]
    );
    unsafe { wid_identity_manager_free(m) };

    // Another restart, and the refresh fails: the saved secret is never
    // handed out unconfirmed (not delivered, not readable), and is released
    // only after its successor was delivered.
    *log.refresh.lock().unwrap() = None;
    let m = manager(kr, &dir, &log);
    expect(
        unsafe { wid_identity_manager_restore(m, T0 + 6_000, null_mut()) },
        WID_RESULT_TOKEN_EXCHANGE_FAILED,
    );
    let why = last_error();
    assert!(
        why.contains("WID_RESULT_STORE_UNAVAILABLE") && why.contains("the secret server is down"),
        "{why}"
    );
    assert_eq!(
        log.take(),
        [
            format!("refresh s1 {WID_REFRESH_REASON_RESTORED}"),
            format!("watch {WID_MANAGED_IDENTITY} server/vault_default jwt:3 {WID_EVENT_RESTORED}"),
        ]
    );
    assert!(secret(m).is_err());
    let h = health(m, T0 + 6_000);
    assert_eq!(h["at_risk"], true);
    assert_eq!(h["exchanges"][0]["held_back"], true);
    assert_eq!(h["exchanges"][0]["failures"], 1);
    assert!(
        h["exchanges"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains("secret server is down")
    );
    // The retry (1 s later) derives a new one: delivered, then the held one
    // released.
    *log.refresh.lock().unwrap() = Some(WID_REFRESHED_REPLACED);
    let mut next = 0;
    expect(
        unsafe { wid_identity_manager_next_due_ms(m, &mut next) },
        WID_RESULT_OK,
    );
    assert_eq!(next, T0 + 7_000);
    expect(
        unsafe { wid_identity_manager_tick(m, next, null_mut()) },
        WID_RESULT_OK,
    );
    assert_eq!(
        log.take(),
        [
            // Held back, it is no longer the exchange's: a new one is derived.
            "derive -> s2".to_string(),
            format!("watch {WID_MANAGED_SECRET} server/x s2 {WID_EVENT_RESTORED}"),
            "release s1".to_string(),
        ]
    );
    assert_eq!(secret(m).unwrap(), "s2");
    assert_eq!(health(m, next)["at_risk"], false);

    // An answer of OK without an outcome fails closed (at the refresh s2's
    // derive asked for, 10 min on).
    *log.refresh.lock().unwrap() = Some(0);
    let at = T0 + 7_000 + 600_000;
    expect(
        unsafe { wid_identity_manager_tick(m, at, null_mut()) },
        WID_RESULT_OK,
    );
    assert_eq!(log.take(), [format!("refresh s2 {WID_REFRESH_REASON_DUE}")]);
    let h = health(m, at);
    assert!(
        h["exchanges"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains("with outcome 0"),
        "{h}"
    );
    unsafe { free!(m, kr) };
}

#[test]
fn a_host_signer_is_checked_and_fails_closed() {
    let (_dir, dir) = state_dir();
    let kr = keyring();
    let log = Log::signing_with(kr);
    *log.refresh.lock().unwrap() = Some(WID_REFRESHED_KEPT);
    let m = host_signed(kr, &dir, &log);
    expect(unsafe { wid_identity_manager_start(m, T0) }, WID_RESULT_OK);
    assert_eq!(log.take()[..2], ["sign ok", "derive -> s1"]);
    assert!(current(m, T0).is_ok());

    for (k, (mode, why)) in [
        (
            "fail",
            "the host's signer failed: the servers are unreachable (WID_RESULT_STORE_UNAVAILABLE)",
        ),
        ("nothing", "without setting a token"),
        ("other", "is not identity server/vault_default"),
    ]
    .into_iter()
    .enumerate()
    {
        *log.signer.lock().unwrap() = mode;
        // Renewal is due half-way (plus jitter): late enough for any jitter,
        // and past each failure's backoff.
        let at = T0 + 2_100_000 + i64::try_from(k).unwrap() * 120_000;
        expect(
            unsafe { wid_identity_manager_tick(m, at, null_mut()) },
            WID_RESULT_OK,
        );
        let h = health(m, at);
        let e = h["last_sign_error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(e.contains(why), "{mode}: {e}");
        assert_eq!(h["at_risk"], true);
        // The token in use stays.
        assert!(current(m, at).is_ok());
        // Never delivered anything.
        assert!(log.take().iter().all(|e| e.starts_with("sign")), "{mode}");
    }
    // A token no key of the keyring signed is refused.
    let other = keyring_with_other_key();
    let foreign = Log::signing_with(other);
    let m2 = host_signed(kr, &dir, &foreign);
    expect(
        unsafe { wid_identity_manager_start(m2, T0) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("does not verify against the manager's keyring");
    assert!(current(m2, T0).is_err());
    unsafe { free!(m2, m, other, kr) };
}

#[test]
fn builder_refusals_nulls_and_wrong_handles() {
    let (_dir, d) = state_dir();
    let kr = keyring();
    let log = Log::default();
    let (dp, dl) = s(&d);
    let mut b = null_mut();
    expect(
        unsafe { wid_identity_manager_builder_new(null(), dp, dl, &mut b) },
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        unsafe { wid_identity_manager_builder_new(kr, dp, dl, null_mut()) },
        WID_RESULT_NULL_ARGUMENT,
    );
    let missing = format!("{d}/nope");
    let (mp, ml) = s(&missing);
    expect(
        unsafe { wid_identity_manager_builder_new(kr, mp, ml, &mut b) },
        WID_RESULT_IO_ERROR,
    );
    assert!(b.is_null());
    // A keyring handle given as a builder is refused, not used.
    expect(
        unsafe { wid_identity_manager_builder_add_identity(kr.cast(), [0x80u8].as_ptr(), 1) },
        WID_RESULT_INVALID_ARGUMENT,
    );

    // No signer.
    let b = builder(kr, &d, &log);
    let mut m = null_mut();
    expect(
        unsafe { wid_identity_manager_builder_build(b, &mut m) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("has no signer");
    assert!(m.is_null());
    // Two exchanges of one name.
    in_process(b, kr);
    let ud = log.ud();
    let derive_only = (Some(derive as _), None, None);
    expect(
        add_exchange(b, "x", "vault_default", derive_only, ud),
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_identity_manager_builder_build(b, &mut m) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("two exchanges are named \"x\"");
    // No derive; an empty name; bytes that are no request.
    expect(
        add_exchange(b, "x", "vault_default", (None, None, None), ud),
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        add_exchange(b, "", "vault_default", derive_only, ud),
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        unsafe { wid_identity_manager_builder_add_identity(b, [0xc1u8].as_ptr(), 1) },
        WID_RESULT_DECODE_ERROR,
    );
    unsafe { wid_identity_manager_builder_free(b) };

    // An exchange of an identity not requested.
    let b = builder(kr, &d, &log);
    in_process(b, kr);
    expect(
        add_exchange(b, "y", "vault_other", derive_only, ud),
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_identity_manager_builder_build(b, &mut m) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("not requested");
    unsafe { wid_identity_manager_builder_free(b) };

    // The manager's functions refuse NULL and other handles.
    expect(
        unsafe { wid_identity_manager_start(null(), T0) },
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        unsafe { wid_identity_manager_tick(kr.cast(), T0, null_mut()) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    let mut next = 7;
    let m = manager(kr, &d, &log);
    expect(
        unsafe { wid_identity_manager_next_due_ms(m, &mut next) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    assert_eq!(next, 7, "not written on failure");
    let mut out = empty();
    let ((ow, owl), (i, il)) = (s("nope"), s("vault_default"));
    expect(
        unsafe { wid_identity_manager_current(m, ow, owl, i, il, T0, &mut out) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    assert!(out.data.is_null());
    // wid_output_set refuses what is not a wid_output.
    let mut not_output = [0u64; 4];
    expect(
        unsafe { wid_output_set(not_output.as_mut_ptr().cast(), b"x".as_ptr(), 1) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        unsafe { wid_output_set(null_mut(), b"x".as_ptr(), 1) },
        WID_RESULT_NULL_ARGUMENT,
    );
    unsafe {
        wid_identity_manager_free(m);
        wid_identity_manager_free(null());
        wid_identity_manager_builder_free(null_mut());
        wid_keyring_free(kr);
    }
}

/// A login's workload, identity and role (or auth method), as
/// `(pointer, length)` pairs.
#[cfg(any(feature = "vault", feature = "consul"))]
fn login_of() -> (StrArg, StrArg, StrArg) {
    (s("server"), s("vault_default"), s("nomad-workloads"))
}

#[cfg(feature = "vault")]
#[test]
fn a_vault_login_is_checked_when_added() {
    let (_dir, d) = state_dir();
    let (kr, log) = (keyring(), Log::default());
    let mut cfg = null_mut();
    let ((w, wl), (i, il), (r, rl)) = login_of();
    let (a, al) = s("http://vault.example.com:8200");
    expect(
        unsafe { wid_vault_login_config_new(a, al, w, wl, i, il, r, rl, &mut cfg) },
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_vault_login_config_set_timeout_ms(cfg, 0) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        unsafe { wid_vault_login_config_set_allow_http_loopback(cfg, 2) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    let b = builder(kr, &d, &log);
    // Plain http to a host that is not loopback carries tokens in the clear.
    expect(
        unsafe { wid_identity_manager_builder_add_vault_login(b, cfg) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("http");
    unsafe { wid_vault_login_config_free(cfg) };
    let ((a, al), (n, nl)) = (s("https://vault.example.com:8200"), s("x"));
    expect(
        unsafe { wid_vault_login_config_new(a, al, w, wl, i, il, r, rl, &mut cfg) },
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_vault_login_config_set_name(cfg, n, nl) },
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_identity_manager_builder_add_vault_login(b, cfg) },
        WID_RESULT_OK,
    );
    in_process(b, kr);
    // Named as the host exchange already added: refused at build.
    let mut m = null_mut();
    expect(
        unsafe { wid_identity_manager_builder_build(b, &mut m) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("two exchanges are named \"x\"");
    unsafe { free!(cfg, b, kr) };
}

#[cfg(feature = "consul")]
#[test]
fn a_consul_login_is_checked_when_added() {
    let (_dir, d) = state_dir();
    let (kr, log) = (keyring(), Log::default());
    let mut cfg = null_mut();
    let ((w, wl), (i, il), (m, ml)) = login_of();
    let (a, al) = s("http://consul.example.com:8500");
    expect(
        unsafe { wid_consul_login_config_new(a, al, w, wl, i, il, m, ml, null_mut()) },
        WID_RESULT_NULL_ARGUMENT,
    );
    expect(
        unsafe { wid_consul_login_config_new(a, al, w, wl, i, il, m, ml, &mut cfg) },
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_consul_login_config_set_service(cfg, 2) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        unsafe { wid_consul_login_config_set_leeway_ms(cfg, 600_001) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    let ((k, kl), (v, vl)) = (s("cluster"), s("east"));
    expect(
        unsafe { wid_consul_login_config_set_meta(cfg, k, kl, v, vl) },
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_consul_login_config_set_meta(cfg, null(), 3, v, vl) },
        WID_RESULT_NULL_ARGUMENT,
    );
    let b = builder(kr, &d, &log);
    // Plain http to a host that is not loopback carries tokens in the clear.
    expect(
        unsafe { wid_identity_manager_builder_add_consul_login(b, cfg) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("http");
    // A Vault config is not a Consul one.
    expect(
        unsafe { wid_identity_manager_builder_add_consul_login(b, kr.cast()) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    unsafe { wid_consul_login_config_free(cfg) };
    let (a, al) = s("https://consul.example.com:8501");
    expect(
        unsafe { wid_consul_login_config_new(a, al, w, wl, i, il, m, ml, &mut cfg) },
        WID_RESULT_OK,
    );
    expect(
        unsafe { wid_identity_manager_builder_add_consul_login(b, cfg) },
        WID_RESULT_OK,
    );
    in_process(b, kr);
    let mgr = build(b);
    let h = health(mgr, T0);
    let names: Vec<_> = h["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["x", "consul"]);
    unsafe { free!(cfg, b, mgr, kr) };
}

/// The manager's functions from many threads at once: readers (`current`,
/// `secret`, `health_json`, `next_due_ms`) while one thread ticks through
/// renewals and another ticks at the same times (a tick waits for the one
/// under way and does only what is still due).
#[test]
fn many_threads_at_once() {
    let (_dir, d) = state_dir();
    let kr = keyring();
    let log = Log::default();
    *log.refresh.lock().unwrap() = Some(WID_REFRESHED_RENEWED);
    let m = manager(kr, &d, &log);
    expect(unsafe { wid_identity_manager_start(m, T0) }, WID_RESULT_OK);
    let handle = m as usize;
    let done = std::sync::atomic::AtomicBool::new(false);
    let renewals = 20;
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let m = handle as *const wid_identity_manager;
                let mut reads = 0u32;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || reads < 10 {
                    // Every token read is a whole, signed one.
                    if let Ok(t) = current(m, T0) {
                        assert_eq!(t.split('.').count(), 3);
                    }
                    assert!(secret(m).unwrap().starts_with('s'));
                    let h = health(m, T0);
                    assert_eq!(h["identities"][0]["workload"], "server");
                    let mut next = 0;
                    expect(
                        unsafe { wid_identity_manager_next_due_ms(m, &mut next) },
                        WID_RESULT_OK,
                    );
                    reads += 1;
                }
            });
        }
        // Two tickers at the same due times: each renewal happens once.
        let mut at = T0;
        for _ in 0..renewals {
            let mut next = 0;
            expect(
                unsafe { wid_identity_manager_next_due_ms(m, &mut next) },
                WID_RESULT_OK,
            );
            at = next.max(at);
            std::thread::scope(|inner| {
                for _ in 0..2 {
                    inner.spawn(|| {
                        expect(
                            unsafe {
                                wid_identity_manager_tick(
                                    handle as *const wid_identity_manager,
                                    at,
                                    null_mut(),
                                )
                            },
                            WID_RESULT_OK,
                        );
                    });
                }
            });
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    // Each due time did its work once: one refresh per renewal or due
    // refresh, never two for one time, and no secret released twice.
    let events = log.take();
    let refreshes = events.iter().filter(|e| e.starts_with("refresh")).count();
    assert_eq!(
        refreshes, renewals,
        "one refresh per due time, whichever ticker got there first: {events:?}"
    );
    assert!(
        events.iter().all(|e| !e.starts_with("release")),
        "{events:?}"
    );
    unsafe { free!(m, kr) };
}

/// The manager a re-entering callback calls back into, and what it saw.
#[derive(Default)]
struct Reentry {
    manager: std::sync::atomic::AtomicUsize,
    /// Callbacks running now on this test's thread (a nested one is a
    /// watcher told from inside its own callback).
    depth: std::sync::atomic::AtomicUsize,
    calls: Mutex<Vec<String>>,
    told: Mutex<Vec<String>>,
    watch_reentered: std::sync::atomic::AtomicBool,
}

impl Reentry {
    fn m(&self) -> *const wid_identity_manager {
        self.manager.load(std::sync::atomic::Ordering::SeqCst) as *const _
    }
    /// Calls start, restore, tick and current from inside a callback.
    fn call_back(&self, from: &str, now: i64) {
        let m = self.m();
        let mut due = 0i64;
        let start = unsafe { wid_identity_manager_start(m, now) };
        let start_msg = last_error();
        let restore = unsafe { wid_identity_manager_restore(m, now, null_mut()) };
        let tick = unsafe { wid_identity_manager_tick(m, now, &mut due) };
        let current = current(m, now).map(|_| ());
        let mut calls = self.calls.lock().unwrap();
        calls.push(format!(
            "{from}: start {} restore {} tick {} current {}",
            name(start),
            name(restore),
            name(tick),
            current.is_ok()
        ));
        if start != WID_RESULT_OK {
            calls.push(format!("{from}: {start_msg}"));
        }
    }
}

unsafe extern "C" fn reentering_watch(
    userdata: *mut c_void,
    what: u32,
    _workload: *const c_char,
    _workload_len: usize,
    _name: *const c_char,
    _name_len: usize,
    value: *const c_char,
    value_len: usize,
    kind: u32,
) {
    use std::sync::atomic::Ordering::SeqCst;
    let r = unsafe { &*userdata.cast::<Reentry>() };
    let nested = r.depth.fetch_add(1, SeqCst) > 0;
    let shown = if what == WID_MANAGED_IDENTITY {
        format!("jwt {kind}")
    } else {
        format!("secret {} {kind}", text(value, value_len))
    };
    r.told.lock().unwrap().push(if nested {
        format!("NESTED {shown}")
    } else {
        shown
    });
    // The first identity token: a host that renews at once from its watcher.
    if what == WID_MANAGED_IDENTITY && !r.watch_reentered.swap(true, SeqCst) {
        r.call_back("watch", T0 + 3_000_000);
    }
    r.depth.fetch_sub(1, SeqCst);
}

unsafe extern "C" fn reentering_derive(
    userdata: *mut c_void,
    _token: *const c_char,
    _token_len: usize,
    now_ms: i64,
    out_secret: *mut wid_output,
    _out_refresh_at_ms: *mut i64,
) -> wid_result {
    let r = unsafe { &*userdata.cast::<Reentry>() };
    let n = {
        let mut calls = r.calls.lock().unwrap();
        calls.push("derive".into());
        calls.iter().filter(|c| *c == "derive").count()
    };
    if n == 1 {
        r.call_back("derive", now_ms);
    }
    let secret = format!("s{n}");
    unsafe { wid_output_set(out_secret, secret.as_ptr(), secret.len()) }
}

type Reentered = (wid_result, Vec<String>, Vec<String>, Result<String, String>);

/// A manager of one identity whose watcher (and, `with_exchange`, whose
/// exchange) call back into it, started on a thread of its own, so that a
/// regression fails the test instead of hanging the suite.
fn start_reentering(with_exchange: bool) -> Reentered {
    let (_dir, dir) = state_dir();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let kr = keyring();
        let r = Box::leak(Box::new(Reentry::default()));
        let ud = (r as *const Reentry).cast_mut().cast::<c_void>();
        let b = task_builder(kr, &dir);
        expect(
            unsafe { wid_identity_manager_builder_set_watcher(b, Some(reentering_watch), ud) },
            WID_RESULT_OK,
        );
        if with_exchange {
            let callbacks = (Some(reentering_derive as _), None, None);
            expect(
                add_exchange(b, "x", "vault_default", callbacks, ud),
                WID_RESULT_OK,
            );
        }
        in_process(b, kr);
        let m = build(b);
        unsafe { wid_identity_manager_builder_free(b) };
        r.manager
            .store(m as usize, std::sync::atomic::Ordering::SeqCst);
        let rc = unsafe { wid_identity_manager_start(m, T0) };
        let calls = r.calls.lock().unwrap().clone();
        let told = r.told.lock().unwrap().clone();
        let secret = secret(m);
        unsafe { free!(m, kr) };
        tx.send((rc, calls, told, secret)).unwrap();
    });
    rx.recv_timeout(std::time::Duration::from_secs(120))
        .expect("a callback calling back into its manager deadlocked")
}

/// Security round 4 (issue 51, item 7): callbacks that call back into
/// their own manager used to hang forever. From inside the manager's work
/// (an exchange's callback, or the watcher told while it runs), `_start`
/// and `_restore` fail with `WID_RESULT_INVALID_ARGUMENT`, saying why,
/// `_tick` does nothing and `_current` answers.
#[test]
fn a_callback_inside_the_managers_work_is_refused_start_and_restore() {
    let (rc, calls, told, secret) = start_reentering(true);
    assert_eq!(rc, WID_RESULT_OK, "{calls:?}");
    let refused = "start WID_RESULT_INVALID_ARGUMENT restore WID_RESULT_INVALID_ARGUMENT tick WID_RESULT_OK current true";
    // The exchange's callback, and the watcher (told the token by the
    // exchange's own tick, while the start still runs): the same answers.
    for from in ["derive", "watch"] {
        assert!(
            calls.contains(&format!("{from}: {refused}")),
            "{from}: {calls:?}"
        );
        assert!(
            calls.iter().any(|c| c.starts_with(&format!("{from}: "))
                && c.contains("from inside one of this manager's own callbacks")),
            "{from}: {calls:?}"
        );
    }
    assert_eq!(
        calls.iter().filter(|c| *c == "derive").count(),
        1,
        "nothing more was signed or derived: {calls:?}"
    );
    assert_eq!(told, ["jwt 1", "secret s1 1"], "{told:?}");
    assert_eq!(secret.as_deref(), Ok("s1"));
}

/// A watcher told after the call returned may call anything: here a tick
/// that renews at once. The token that renewal makes is told after the
/// watcher's callback returns, in order, never from inside it.
#[test]
fn a_watcher_may_drive_its_manager_and_is_told_after_it_returns() {
    let (rc, calls, told, _) = start_reentering(false);
    assert_eq!(rc, WID_RESULT_OK, "{calls:?}");
    assert_eq!(calls.len(), 1, "{calls:?}");
    // Its start signs anew (the manager was idle: the call that told the
    // watcher had returned).
    assert!(
        calls[0].starts_with("watch: start WID_RESULT_OK"),
        "{calls:?}"
    );
    // The token its start signed is told after the callback returned.
    assert_eq!(told.len(), 2, "the first token and the new one: {told:?}");
    assert!(told.iter().all(|t| t.starts_with("jwt")), "{told:?}");
    assert_eq!(told[0], "jwt 1");
}

#[test]
fn ending_an_allocation_revokes_its_secrets_and_removes_its_state_file() {
    let (tmp, dir) = state_dir();
    let kr = keyring();
    let log = Log::default();
    *log.refresh.lock().unwrap() = Some(WID_REFRESHED_REPLACED);
    let m = manager(kr, &dir, &log);
    expect(unsafe { wid_identity_manager_start(m, T0) }, WID_RESULT_OK);
    // The exchange's refresh replaces s1 by s2: s1 is released.
    let mut next = 0;
    expect(
        unsafe { wid_identity_manager_tick(m, T0 + 600_000, &mut next) },
        WID_RESULT_OK,
    );
    assert_eq!(secret(m).unwrap(), "s2");
    assert!(log.take().contains(&"release s1".to_string()));
    unsafe { wid_identity_manager_free(m) };
    let file = tmp
        .path()
        .join(format!("{}.identities", request().allocation.id));
    assert!(file.exists());

    // A host restarted after the allocation stopped: a new handle, never
    // started, ends it from the state file.
    let m = manager(kr, &dir, &log);
    expect(
        unsafe { wid_identity_manager_end_allocation(m) },
        WID_RESULT_OK,
    );
    assert_eq!(log.take(), ["release s2"]);
    assert!(!file.exists(), "the state file is removed");
    // Ended: nothing is signed again.
    expect(
        unsafe { wid_identity_manager_start(m, T0 + 700_000) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    error_says("was ended");
    expect(
        unsafe { wid_identity_manager_restore(m, T0 + 700_000, null_mut()) },
        WID_RESULT_INVALID_ARGUMENT,
    );
    expect(
        unsafe { wid_identity_manager_tick(m, T0 + 700_000, &mut next) },
        WID_RESULT_OK,
    );
    assert_eq!(next, -1);
    assert!(current(m, T0 + 700_000).is_err());
    assert!(log.take().is_empty(), "no callback ran");
    // Again: nothing left to do.
    expect(
        unsafe { wid_identity_manager_end_allocation(m) },
        WID_RESULT_OK,
    );
    unsafe { wid_identity_manager_free(m) };
    expect(
        unsafe { wid_identity_manager_end_allocation(null()) },
        WID_RESULT_NULL_ARGUMENT,
    );
    unsafe { wid_keyring_free(kr) };
}
