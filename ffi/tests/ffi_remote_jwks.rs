//! `wid_remote_jwks` through the C ABI (`ffi/src/remote_jwks.rs`). With the
//! cargo feature `remote-jwks`: against an HTTP server on loopback serving
//! a JWKS written by `wid_keyring_jwks` (and an OIDC discovery document),
//! every builder setter's refusals, refresh reports, verification through
//! the source's keyring, a rotation picked up by an unknown kid, the last
//! good set kept on failure, stats, the refresher stopping with the handle,
//! and wrong handle types. Without it: every function exists and refuses,
//! naming the feature. (`bindings/c/test.c` drives the same functions from
//! C under valgrind.)

mod common;

use std::ptr::{null, null_mut};

use common::bytes::{is_sentinel, sentinel};
use common::ffi_text::error_says;
use common::result::expect;
use workload_identity_ffi::*;

#[cfg(not(feature = "remote-jwks"))]
#[test]
fn without_the_feature_every_function_refuses_naming_it() {
    let url = "https://issuer.example.com/jwks.json";
    let bad = WID_RESULT_INVALID_ARGUMENT;
    let mut b = std::ptr::dangling_mut::<wid_remote_jwks_builder>();
    let mut r = std::ptr::dangling_mut::<wid_remote_jwks>();
    let mut kr = std::ptr::dangling_mut::<wid_keyring>();
    let mut out = sentinel();
    let fake_b = std::ptr::dangling_mut::<wid_remote_jwks_builder>();
    let fake_r = std::ptr::dangling::<wid_remote_jwks>();
    unsafe {
        let rcs = [
            wid_remote_jwks_builder_new(url.as_ptr().cast(), url.len(), &mut b),
            wid_remote_jwks_builder_new_discover(url.as_ptr().cast(), url.len(), &mut b),
            wid_remote_jwks_builder_new(null(), 0, null_mut()),
            wid_remote_jwks_builder_set_ca_bundle_pem(fake_b, null(), 0),
            wid_remote_jwks_builder_set_allow_http_loopback(fake_b, 1),
            wid_remote_jwks_builder_set_timeout_ms(fake_b, 1000),
            wid_remote_jwks_builder_set_refresh_bounds_ms(fake_b, 1, 2),
            wid_remote_jwks_builder_set_default_refresh_ms(fake_b, 1),
            wid_remote_jwks_builder_set_unknown_kid_cooldown_ms(fake_b, 1),
            wid_remote_jwks_builder_set_max_body_bytes(fake_b, 1),
            wid_remote_jwks_builder_set_max_keys(fake_b, 1),
            wid_remote_jwks_builder_build(fake_b, &mut r),
            wid_remote_jwks_keyring(fake_r, &mut kr),
            wid_remote_jwks_refresh(fake_r, &mut out),
            wid_remote_jwks_start_refresher(fake_r),
            wid_remote_jwks_stats(fake_r, &mut out),
        ];
        for rc in rcs {
            expect(rc, bad);
        }
        expect(wid_remote_jwks_refresh(null(), null_mut()), bad);
        error_says("`remote-jwks`");
        // The frees do nothing (no handle can exist), NULL or not.
        wid_remote_jwks_builder_free(null_mut());
        wid_remote_jwks_free(null());
        wid_remote_jwks_builder_free(fake_b);
        wid_remote_jwks_free(fake_r);
    }
    assert_eq!(b, std::ptr::dangling_mut());
    assert_eq!(r, std::ptr::dangling_mut());
    assert_eq!(kr, std::ptr::dangling_mut());
    assert!(is_sentinel(&out));
}

#[cfg(feature = "remote-jwks")]
mod with_the_feature {
    use std::time::{Duration, Instant};

    use super::*;
    use common::bytes::{empty, json, json_of};
    use common::ffi_text::last_error;
    use common::handles::{free, made};
    use common::http_server::Server;
    use common::identity::{AUD, NOW};
    use common::keys::{jwks, new_keyring, rotated_keyring};
    use common::lookup::sample_live as live;
    use common::request::issue;
    use common::strings::s;
    use common::verifier::verify;

    // ---- Fixtures.

    /// The issuer's keyring, with one fresh active EdDSA key.
    fn issuer_keyring() -> *mut wid_keyring {
        rotated_keyring(NOW)
    }

    /// A server serving the JWKS of an issuer's keyring at `/jwks.json`, the
    /// keyring, and a builder for that URL.
    fn serving() -> (Server, *mut wid_keyring, *mut wid_remote_jwks_builder) {
        let server = Server::start();
        let issuer = issuer_keyring();
        server.set("/jwks.json", 200, &jwks(issuer));
        let b = builder(&server.url("/jwks.json"));
        (server, issuer, b)
    }

    /// A builder for `url`, plain http to loopback allowed.
    fn builder(url: &str) -> *mut wid_remote_jwks_builder {
        let (u, ul) = s(url);
        let b = made(|out| unsafe { wid_remote_jwks_builder_new(u, ul, out) });
        expect(
            unsafe { wid_remote_jwks_builder_set_allow_http_loopback(b, 1) },
            WID_RESULT_OK,
        );
        b
    }

    fn build(b: *const wid_remote_jwks_builder) -> *mut wid_remote_jwks {
        made(|out| unsafe { wid_remote_jwks_builder_build(b, out) })
    }

    fn remote_keyring(r: *const wid_remote_jwks) -> *mut wid_keyring {
        made(|out| unsafe { wid_remote_jwks_keyring(r, out) })
    }

    /// A verifier for `AUD` over `kr` (the sample allocation live), waiting
    /// `key_wait_ms` for unknown keys.
    fn verifier(kr: *const wid_keyring, key_wait_ms: i64) -> *mut wid_verifier {
        let b = common::verifier::builder(kr, Some(live), null_mut(), AUD);
        expect(
            unsafe { wid_verifier_builder_set_key_wait_ms(b, key_wait_ms) },
            WID_RESULT_OK,
        );
        let v = common::verifier::build(b);
        unsafe { wid_verifier_builder_free(b) };
        v
    }

    fn refresh(r: *const wid_remote_jwks) -> Result<serde_json::Value, wid_result> {
        let mut out = empty();
        match unsafe { wid_remote_jwks_refresh(r, &mut out) } {
            WID_RESULT_OK => Ok(json(&mut out)),
            rc => Err(rc),
        }
    }

    fn stats(r: *const wid_remote_jwks) -> serde_json::Value {
        json_of(|out| unsafe { wid_remote_jwks_stats(r, out) })
    }

    fn kid_of(kr: *const wid_keyring) -> String {
        let j: serde_json::Value = serde_json::from_str(&jwks(kr)).unwrap();
        j["keys"][0]["kid"].as_str().unwrap().to_string()
    }

    // ---- Tests.

    #[test]
    fn builder_arguments_are_checked_at_once() {
        let bad = WID_RESULT_INVALID_ARGUMENT;
        let mut b = std::ptr::dangling_mut::<wid_remote_jwks_builder>();
        let new =
            |u: &str, out| unsafe { wid_remote_jwks_builder_new(u.as_ptr().cast(), u.len(), out) };
        let discover = |u: &str, out| unsafe {
            wid_remote_jwks_builder_new_discover(u.as_ptr().cast(), u.len(), out)
        };
        for url in [
            "",
            "ftp://example.com/jwks",
            "http://example.com/jwks",
            "https://example.com/jwks#frag",
            "https://user:pw@example.com/jwks",
            "https://example.com/j wks",
            "/jwks",
        ] {
            expect(new(url, &mut b), bad);
        }
        expect(new("http://example.com/j?secret=1", &mut b), bad);
        assert!(!last_error().contains("secret"), "{}", last_error());
        expect(discover("https://issuer.example.com?x=1", &mut b), bad);
        unsafe {
            expect(
                wid_remote_jwks_builder_new(null(), 5, &mut b),
                WID_RESULT_NULL_ARGUMENT,
            );
            expect(
                wid_remote_jwks_builder_new(b"\xff".as_ptr().cast(), 1, &mut b),
                bad,
            );
            expect(
                wid_remote_jwks_builder_new("x".as_ptr().cast(), usize::MAX, &mut b),
                bad,
            );
        }
        expect(
            new("https://example.com/jwks", null_mut()),
            WID_RESULT_NULL_ARGUMENT,
        );
        assert_eq!(b, std::ptr::dangling_mut(), "written only on success");

        // Loopback http passes new, and build only when allowed.
        let url = "http://127.0.0.1:9/jwks.json";
        let mut b = null_mut();
        expect(new(url, &mut b), WID_RESULT_OK);
        let mut r = std::ptr::dangling_mut::<wid_remote_jwks>();
        expect(unsafe { wid_remote_jwks_builder_build(b, &mut r) }, bad);
        error_says("http");
        assert_eq!(r, std::ptr::dangling_mut());

        unsafe {
            // Every setter's values and refusals (shared with the SPIFFE
            // bundle source's builder).
            common::fetch_setters::REMOTE_JWKS.check(b);
            let na = WID_RESULT_NULL_ARGUMENT;
            expect(wid_remote_jwks_builder_build(null(), &mut r), na);
            expect(wid_remote_jwks_builder_build(b, null_mut()), na);
        }
        // The builder kept loopback allowed: it builds now, and again.
        let r1 = build(b);
        let r2 = build(b);
        unsafe { free!(r1, r2, b) };
    }

    #[test]
    fn a_remote_keyring_verifies_and_follows_rotation() {
        let (server, issuer, b) = serving();
        unsafe {
            expect(
                wid_remote_jwks_builder_set_unknown_kid_cooldown_ms(b, 0),
                WID_RESULT_OK,
            );
        }
        let r = build(b);
        let kr = remote_keyring(r);
        let v = verifier(kr, 3000);

        // Nothing fetched yet.
        let s = stats(r);
        assert_eq!(s["fetches"], 0, "{s}");
        assert_eq!(s["keys"], 0, "{s}");

        let report = refresh(r).unwrap();
        let kid = kid_of(issuer);
        assert_eq!(report["keys"], serde_json::json!([kid]), "{report}");
        assert_eq!(report["added"], serde_json::json!([kid]), "{report}");
        assert_eq!(report["removed"], serde_json::json!([]), "{report}");
        assert_eq!(report["jwks_uri"], server.url("/jwks.json"));
        assert_eq!(report["max_age_ms"], serde_json::Value::Null);
        assert_eq!(report["next_refresh_in_ms"], 3_600_000);
        // The optional output may be NULL.
        expect(
            unsafe { wid_remote_jwks_refresh(r, null_mut()) },
            WID_RESULT_OK,
        );
        assert_eq!(server.hits("/jwks.json"), 2);

        let token = issue(issuer);
        expect(verify(v, &token), WID_RESULT_OK);

        // A rotation: the new kid is unknown, which starts a fetch while the
        // verifier waits for it.
        expect(
            unsafe { wid_keyring_rotate(issuer, NOW + 1, null_mut()) },
            WID_RESULT_OK,
        );
        server.set("/jwks.json", 200, &jwks(issuer));
        let rotated = issue(issuer);
        expect(verify(v, &rotated), WID_RESULT_OK);
        let s = stats(r);
        assert_eq!(s["unknown_kid_fetches"], 1, "{s}");
        assert_eq!(s["keys"], 2, "{s}");
        assert_eq!(s["stale"], false, "{s}");

        // A failure keeps the last good set.
        server.set("/jwks.json", 500, "{}");
        expect(
            refresh(r).map(|_| WID_RESULT_OK).unwrap_or_else(|rc| rc),
            WID_RESULT_IO_ERROR,
        );
        error_says("500");
        let s = stats(r);
        assert_eq!(s["failures"], 1, "{s}");
        assert_eq!(s["stale"], true, "{s}");
        assert!(s["last_error"].as_str().unwrap().contains("500"), "{s}");
        assert_eq!(s["keys"], 2, "{s}");
        expect(verify(v, &token), WID_RESULT_OK);
        // Not a JWKS: a decode error, the set kept.
        server.set("/jwks.json", 200, "not json");
        expect(
            refresh(r).map(|_| WID_RESULT_OK).unwrap_or_else(|rc| rc),
            WID_RESULT_DECODE_ERROR,
        );
        expect(verify(v, &rotated), WID_RESULT_OK);

        // A key that leaves the remote set stops verifying.
        let only_new = {
            let mut j: serde_json::Value = serde_json::from_str(&jwks(issuer)).unwrap();
            let keys = j["keys"].as_array_mut().unwrap();
            keys.retain(|k| k["kid"] != kid.as_str());
            j.to_string()
        };
        server.set("/jwks.json", 200, &only_new);
        let report = refresh(r).unwrap();
        assert_eq!(report["removed"], serde_json::json!([kid]), "{report}");
        let v0 = verifier(kr, 0);
        expect(verify(v0, &token), WID_RESULT_UNKNOWN_KEY);
        expect(verify(v0, &rotated), WID_RESULT_OK);

        // The keyring outlives the source; it is no longer refreshed.
        unsafe { free!(r, b) };
        expect(verify(v, &rotated), WID_RESULT_OK);
        unsafe { free!(v, v0, kr, issuer) };
    }

    #[test]
    fn discovery_finds_the_jwks() {
        let server = Server::start();
        let issuer = issuer_keyring();
        server.set("/keys", 200, &jwks(issuer));
        server.set(
            "/.well-known/openid-configuration",
            200,
            &serde_json::json!({"issuer": server.base, "jwks_uri": server.url("/keys")})
                .to_string(),
        );
        let mut b = null_mut();
        let base = server.base.clone();
        expect(
            unsafe {
                wid_remote_jwks_builder_new_discover(base.as_ptr().cast(), base.len(), &mut b)
            },
            WID_RESULT_OK,
        );
        expect(
            unsafe { wid_remote_jwks_builder_set_allow_http_loopback(b, 1) },
            WID_RESULT_OK,
        );
        let r = build(b);
        assert_eq!(stats(r)["jwks_uri"], serde_json::Value::Null);
        let report = refresh(r).unwrap();
        assert_eq!(report["jwks_uri"], server.url("/keys"));
        assert_eq!(stats(r)["jwks_uri"], server.url("/keys"));
        let kr = remote_keyring(r);
        let v = verifier(kr, 0);
        expect(verify(v, &issue(issuer)), WID_RESULT_OK);
        unsafe { free!(v, kr, r, b, issuer) };
    }

    #[test]
    fn the_refresher_runs_until_the_handle_is_freed() {
        let (server, issuer, b) = serving();
        unsafe {
            expect(
                wid_remote_jwks_builder_set_refresh_bounds_ms(b, 20, 50),
                WID_RESULT_OK,
            );
            expect(
                wid_remote_jwks_builder_set_default_refresh_ms(b, 20),
                WID_RESULT_OK,
            );
        }
        let r = build(b);
        expect(unsafe { wid_remote_jwks_start_refresher(r) }, WID_RESULT_OK);
        // A second start does nothing more.
        expect(unsafe { wid_remote_jwks_start_refresher(r) }, WID_RESULT_OK);
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.hits("/jwks.json") < 3 {
            assert!(Instant::now() < deadline, "the refresher did not refetch");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(stats(r)["keys"], 1);
        unsafe { free!(r, b) };
        // Stopped (joined) by the free: no more requests.
        let after = server.hits("/jwks.json");
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(server.hits("/jwks.json"), after);
        unsafe { wid_keyring_free(issuer) };
    }

    #[test]
    fn wrong_handles_null_arguments_and_untouched_outputs() {
        let b = builder("http://127.0.0.1:9/jwks.json");
        let r = build(b);
        let kr = new_keyring();
        let bad = WID_RESULT_INVALID_ARGUMENT;
        let na = WID_RESULT_NULL_ARGUMENT;
        let mut out = sentinel();
        let mut out_kr = std::ptr::dangling_mut::<wid_keyring>();
        let mut out_r = std::ptr::dangling_mut::<wid_remote_jwks>();
        let r_as_b: *mut wid_remote_jwks_builder = r.cast();
        let kr_as_b: *mut wid_remote_jwks_builder = kr.cast();
        let b_as_r: *const wid_remote_jwks = b.cast();
        let kr_as_r: *const wid_remote_jwks = kr.cast();
        unsafe {
            for wrong in [r_as_b, kr_as_b] {
                common::fetch_setters::REMOTE_JWKS.all_answer(wrong, bad);
                expect(wid_remote_jwks_builder_build(wrong, &mut out_r), bad);
                wid_remote_jwks_builder_free(wrong);
            }
            for wrong in [b_as_r, kr_as_r] {
                expect(wid_remote_jwks_keyring(wrong, &mut out_kr), bad);
                expect(wid_remote_jwks_refresh(wrong, &mut out), bad);
                expect(wid_remote_jwks_start_refresher(wrong), bad);
                expect(wid_remote_jwks_stats(wrong, &mut out), bad);
                wid_remote_jwks_free(wrong);
            }
            // A source is not a keyring.
            expect(wid_keyring_jwks(r.cast(), &mut out), bad);
            expect(wid_remote_jwks_keyring(null(), &mut out_kr), na);
            expect(wid_remote_jwks_keyring(r, null_mut()), na);
            expect(wid_remote_jwks_refresh(null(), &mut out), na);
            expect(wid_remote_jwks_start_refresher(null()), na);
            expect(wid_remote_jwks_stats(null(), &mut out), na);
            expect(wid_remote_jwks_stats(r, null_mut()), na);
            // A failed fetch (nothing listens on port 9) writes nothing.
            expect(wid_remote_jwks_refresh(r, &mut out), WID_RESULT_IO_ERROR);
            wid_remote_jwks_free(null());
            wid_remote_jwks_builder_free(null_mut());
        }
        assert!(is_sentinel(&out));
        assert_eq!(out_kr, std::ptr::dangling_mut());
        assert_eq!(out_r, std::ptr::dangling_mut());
        // Everything still works after the wrong frees.
        assert_eq!(stats(r)["failures"], 1);
        let r2 = build(b);
        unsafe { free!(r, r2, b, kr) };
    }
}
