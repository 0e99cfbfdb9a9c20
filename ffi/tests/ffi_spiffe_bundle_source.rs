//! `wid_spiffe_bundle_source` through the C ABI
//! (`ffi/src/spiffe_bundle_source.rs`). With the cargo feature
//! `remote-jwks`: against an HTTP server on loopback serving a peer's
//! SPIFFE bundle (`wid_keyring_spiffe_bundle`'s `jwt-svid` ES256 keys, an
//! `x509-svid` entry, a `spiffe_sequence`), the bundle read and its X.509
//! entry skipped, a JWT-SVID of the peer's trust domain verified through a
//! trust set and a verifier over the source's keyring, a rotation followed,
//! rollbacks (a lower sequence, none after one was held) refused with the
//! held keys kept and counted, the operator's reset, the refresher, every
//! setter's refusals, NULL arguments, wrong handle types, and outputs
//! written only on success. Without it: every function exists and
//! refuses, naming the feature.

mod common;

use std::ptr::{null, null_mut};

use common::bytes::{is_sentinel, sentinel};
use common::ffi_text::error_says;
use common::result::expect;
use workload_identity_ffi::*;

impl common::handles::Handle for *mut wid_spiffe_bundle_source_builder {
    unsafe fn free(self) {
        // SAFETY: as `Handle::free`'s caller promises.
        unsafe { wid_spiffe_bundle_source_builder_free(self) }
    }
}

impl common::handles::Handle for *mut wid_spiffe_bundle_source {
    unsafe fn free(self) {
        // SAFETY: as `Handle::free`'s caller promises.
        unsafe { wid_spiffe_bundle_source_free(self) }
    }
}

#[cfg(not(feature = "remote-jwks"))]
#[test]
fn without_the_feature_every_function_refuses_naming_it() {
    let (td, url) = ("peer.example.org", "https://peer.example.org/bundle");
    let bad = WID_RESULT_INVALID_ARGUMENT;
    let mut b = std::ptr::dangling_mut::<wid_spiffe_bundle_source_builder>();
    let mut s = std::ptr::dangling_mut::<wid_spiffe_bundle_source>();
    let mut kr = std::ptr::dangling_mut::<wid_keyring>();
    let mut out = sentinel();
    let (mut prev, mut had) = (7u64, 7u32);
    let fake_b = std::ptr::dangling_mut::<wid_spiffe_bundle_source_builder>();
    let fake_s = std::ptr::dangling::<wid_spiffe_bundle_source>();
    unsafe {
        let rcs = [
            wid_spiffe_bundle_source_builder_new(
                td.as_ptr().cast(),
                td.len(),
                url.as_ptr().cast(),
                url.len(),
                &mut b,
            ),
            wid_spiffe_bundle_source_builder_new(null(), 0, null(), 0, null_mut()),
            wid_spiffe_bundle_source_builder_set_ca_bundle_pem(fake_b, null(), 0),
            wid_spiffe_bundle_source_builder_set_allow_http_loopback(fake_b, 1),
            wid_spiffe_bundle_source_builder_set_timeout_ms(fake_b, 1000),
            wid_spiffe_bundle_source_builder_set_refresh_bounds_ms(fake_b, 1, 2),
            wid_spiffe_bundle_source_builder_set_default_refresh_ms(fake_b, 1),
            wid_spiffe_bundle_source_builder_set_unknown_kid_cooldown_ms(fake_b, 1),
            wid_spiffe_bundle_source_builder_set_max_body_bytes(fake_b, 1),
            wid_spiffe_bundle_source_builder_set_max_keys(fake_b, 1),
            wid_spiffe_bundle_source_builder_build(fake_b, &mut s),
            wid_spiffe_bundle_source_keyring(fake_s, &mut kr),
            wid_spiffe_bundle_source_refresh(fake_s, &mut out),
            wid_spiffe_bundle_source_start_refresher(fake_s),
            wid_spiffe_bundle_source_stats(fake_s, &mut out),
            wid_spiffe_bundle_source_reset_sequence(fake_s, &mut prev, &mut had),
        ];
        for rc in rcs {
            expect(rc, bad);
        }
        error_says("`remote-jwks`");
        // The frees do nothing (no handle can exist), NULL or not.
        wid_spiffe_bundle_source_builder_free(null_mut());
        wid_spiffe_bundle_source_free(null());
        wid_spiffe_bundle_source_builder_free(fake_b);
        wid_spiffe_bundle_source_free(fake_s);
    }
    assert_eq!(b, std::ptr::dangling_mut());
    assert_eq!(s, std::ptr::dangling_mut());
    assert_eq!(kr, std::ptr::dangling_mut());
    assert!(is_sentinel(&out));
    assert_eq!((prev, had), (7, 7));
}

#[cfg(feature = "remote-jwks")]
mod with_the_feature {
    use std::time::{Duration, Instant};

    use super::*;
    use common::bytes::{empty, json, json_of, text_of};
    use common::ffi_text::last_error;
    use common::handles::{free, made};
    use common::http_server::Server;
    use common::identity::{AUD, NOW};
    use common::keys::{insert, issuer_builder, new_keyring};
    use common::lookup::sample_live as live;
    use common::request::task_vector;
    use common::strings::s;
    use common::verifier::verify;
    use serde_json::{Value, json};

    const TD: &str = "peer.example.org";

    // ---- The peer: an ES256 keyring whose issuer makes JWT-SVIDs of `TD`.

    /// The peer's keyring: one active ES256 bearer key "peer-es-1".
    fn peer_keyring() -> *mut wid_keyring {
        let kr = new_keyring();
        insert(
            kr,
            Some(WID_KEY_PURPOSE_BEARER),
            WID_ALG_ES256,
            "peer-es-1",
            21,
            NOW - 100,
        );
        kr
    }

    /// A JWT-SVID of `TD` the peer's keyring signs now (ES256, the task
    /// vector: audiences vault.io and consul.io, an hour's TTL).
    fn jwt_svid(peer: *const wid_keyring) -> String {
        let b = issuer_builder(peer);
        let (t, tl) = s(TD);
        unsafe {
            expect(
                wid_issuer_builder_set_algorithm(b, WID_ALG_ES256),
                WID_RESULT_OK,
            );
            expect(
                wid_issuer_builder_set_spiffe(b, t, tl, null(), 0),
                WID_RESULT_OK,
            );
        }
        let iss = made(|out| unsafe { wid_issuer_builder_build(b, out) });
        let req = task_vector();
        let token =
            text_of(|out| unsafe { wid_issuer_issue(iss, req.as_ptr(), req.len(), NOW, out) });
        unsafe {
            wid_issuer_free(iss);
            wid_issuer_builder_free(b);
        }
        token
    }

    /// The peer's SPIFFE bundle (a refresh hint of 300 s) with
    /// `spiffe_sequence` `sequence` (`None`: left out) and an `x509-svid`
    /// entry, as SPIRE's bundles carry.
    fn bundle(peer: *const wid_keyring, sequence: Option<u64>) -> String {
        let mut b = json_of(|out| unsafe { wid_keyring_spiffe_bundle(peer, 300, out) });
        let jwt = b["keys"][0].clone();
        assert_eq!(jwt["use"], "jwt-svid", "{b}");
        b["keys"].as_array_mut().unwrap().push(json!({
            "kty": "EC", "crv": "P-256", "use": "x509-svid",
            "x": jwt["x"], "y": jwt["y"], "x5c": ["MIIB"],
        }));
        match sequence {
            Some(n) => b["spiffe_sequence"] = json!(n),
            None => {
                b.as_object_mut().unwrap().remove("spiffe_sequence");
            }
        }
        b.to_string()
    }

    /// A builder for `TD` at `url`, plain http to loopback allowed.
    fn builder(url: &str) -> *mut wid_spiffe_bundle_source_builder {
        let ((t, tl), (u, ul)) = (s(TD), s(url));
        let b = made(|out| unsafe { wid_spiffe_bundle_source_builder_new(t, tl, u, ul, out) });
        expect(
            unsafe { wid_spiffe_bundle_source_builder_set_allow_http_loopback(b, 1) },
            WID_RESULT_OK,
        );
        b
    }

    fn build(b: *const wid_spiffe_bundle_source_builder) -> *mut wid_spiffe_bundle_source {
        made(|out| unsafe { wid_spiffe_bundle_source_builder_build(b, out) })
    }

    fn source_keyring(src: *const wid_spiffe_bundle_source) -> *mut wid_keyring {
        made(|out| unsafe { wid_spiffe_bundle_source_keyring(src, out) })
    }

    fn refresh(src: *const wid_spiffe_bundle_source) -> Result<Value, wid_result> {
        let mut out = sentinel();
        match unsafe { wid_spiffe_bundle_source_refresh(src, &mut out) } {
            WID_RESULT_OK => Ok(json(&mut out)),
            rc => {
                assert!(is_sentinel(&out), "no report on failure");
                Err(rc)
            }
        }
    }

    fn stats(src: *const wid_spiffe_bundle_source) -> Value {
        json_of(|out| unsafe { wid_spiffe_bundle_source_stats(src, out) })
    }

    /// `wid_spiffe_bundle_source_reset_sequence`: (had, previous).
    fn reset(src: *const wid_spiffe_bundle_source) -> (u32, u64) {
        let (mut prev, mut had) = (u64::MAX, u32::MAX);
        expect(
            unsafe { wid_spiffe_bundle_source_reset_sequence(src, &mut prev, &mut had) },
            WID_RESULT_OK,
        );
        (had, prev)
    }

    /// A trust set trusting `TD` with `kr`'s keys, for `AUD` (the sample
    /// allocation live).
    fn trust_set(kr: *const wid_keyring) -> *mut wid_trust_set {
        let b = made(|out| unsafe { wid_trust_set_builder_new(out) });
        let ((t, tl), (a, al)) = (s(TD), s(AUD));
        expect(
            unsafe {
                wid_trust_set_builder_add_trust_domain(b, t, tl, kr, a, al, Some(live), null_mut())
            },
            WID_RESULT_OK,
        );
        let ts = made(|out| unsafe { wid_trust_set_builder_build(b, out) });
        unsafe { wid_trust_set_builder_free(b) };
        ts
    }

    /// `wid_trust_set_verify` of `token` at `NOW`: the issuer that verified
    /// it, or the code.
    fn ts_verify(ts: *const wid_trust_set, token: &str) -> Result<String, wid_result> {
        let (mut claims, mut issuer) = (empty(), empty());
        let (t, tl) = s(token);
        match unsafe { wid_trust_set_verify(ts, t, tl, NOW, &mut claims, &mut issuer) } {
            WID_RESULT_OK => {
                let c = json(&mut claims);
                assert!(
                    c["sub"]
                        .as_str()
                        .unwrap()
                        .starts_with("spiffe://peer.example.org/")
                );
                Ok(common::bytes::take(&mut issuer))
            }
            rc => Err(rc),
        }
    }

    /// A verifier for `AUD` over `kr` that waits for no unknown key.
    fn verifier(kr: *const wid_keyring) -> *mut wid_verifier {
        let b = common::verifier::builder(kr, Some(live), null_mut(), AUD);
        expect(
            unsafe { wid_verifier_builder_set_key_wait_ms(b, 0) },
            WID_RESULT_OK,
        );
        let v = common::verifier::build(b);
        unsafe { wid_verifier_builder_free(b) };
        v
    }

    // ---- Tests.

    #[test]
    fn a_bundle_verifies_its_jwt_svids_and_rollbacks_are_refused() {
        let peer = peer_keyring();
        let old_token = jwt_svid(peer);
        let old_bundle = bundle(peer, Some(5));
        let old_unsequenced = bundle(peer, None);
        let server = Server::start();
        server.set("/bundle", 200, &old_bundle);
        let b = builder(&server.url("/bundle"));
        let src = build(b);
        let kr = source_keyring(src);
        let ts = trust_set(kr);
        let v = verifier(kr);

        // Nothing fetched yet.
        let st = stats(src);
        assert_eq!(st["trust_domain"], TD, "{st}");
        assert_eq!(st["bundle_url"], server.url("/bundle"), "{st}");
        assert_eq!(st["fetches"], 0, "{st}");
        assert_eq!(st["keys"], 0, "{st}");
        assert_eq!(st["sequence"], Value::Null, "{st}");
        assert_eq!(st["sequence_refusals"], 0, "{st}");

        // The bundle: its jwt-svid key in, its x509-svid entry skipped.
        let report = refresh(src).unwrap();
        assert_eq!(report["keys"], json!(["peer-es-1"]), "{report}");
        assert_eq!(report["added"], json!(["peer-es-1"]), "{report}");
        assert_eq!(report["skipped"], 1, "{report}");
        assert_eq!(report["sequence"], 5, "{report}");
        assert_eq!(report["refresh_hint_ms"], 300_000, "{report}");
        assert_eq!(report["next_refresh_in_ms"], 300_000, "{report}");
        assert_eq!(report["bundle_url"], server.url("/bundle"), "{report}");
        let st = stats(src);
        assert_eq!(
            (&st["keys"], &st["sequence"]),
            (&json!(1), &json!(5)),
            "{st}"
        );

        // The peer's JWT-SVID verifies through the trust set and a verifier.
        assert_eq!(
            ts_verify(ts, &old_token).unwrap(),
            "spiffe://peer.example.org"
        );
        expect(verify(v, &old_token), WID_RESULT_OK);

        // The peer rotates and raises its sequence: followed.
        expect(
            unsafe { wid_keyring_rotate_alg(peer, WID_ALG_ES256, NOW - 10, null_mut()) },
            WID_RESULT_OK,
        );
        let new_token = jwt_svid(peer);
        let new_bundle = bundle(peer, Some(7));
        server.set("/bundle", 200, &new_bundle);
        let report = refresh(src).unwrap();
        assert_eq!(report["sequence"], 7, "{report}");
        assert_eq!(report["added"].as_array().unwrap().len(), 1, "{report}");
        assert_eq!(
            ts_verify(ts, &new_token).unwrap(),
            "spiffe://peer.example.org"
        );

        // A rolled-back bundle (a lower sequence): refused, the held keys
        // kept, the refusal counted.
        server.set("/bundle", 200, &old_bundle);
        expect(refresh(src).unwrap_err(), WID_RESULT_DECODE_ERROR);
        error_says("spiffe_sequence went backwards");
        let st = stats(src);
        assert_eq!(st["sequence"], 7, "{st}");
        assert_eq!(st["sequence_refusals"], 1, "{st}");
        assert_eq!(st["failures"], 1, "{st}");
        assert_eq!(st["stale"], true, "{st}");
        assert_eq!(st["keys"], 2, "{st}");
        assert!(
            st["last_error"]
                .as_str()
                .unwrap()
                .contains("went backwards"),
            "{st}"
        );
        expect(verify(v, &new_token), WID_RESULT_OK);

        // The same key set with no sequence at all, once one was held:
        // refused too.
        server.set("/bundle", 200, &old_unsequenced);
        expect(refresh(src).unwrap_err(), WID_RESULT_DECODE_ERROR);
        error_says("carries no spiffe_sequence");
        let st = stats(src);
        assert_eq!(st["sequence_refusals"], 2, "{st}");
        assert_eq!(st["keys"], 2, "{st}");
        expect(verify(v, &new_token), WID_RESULT_OK);

        // The operator resets the sequence: the next bundle is taken as it
        // is (the rotated key leaves the keyring).
        assert_eq!(reset(src), (1, 7));
        assert_eq!(stats(src)["sequence"], Value::Null);
        let report = refresh(src).unwrap();
        assert_eq!(report["sequence"], Value::Null, "{report}");
        assert_eq!(report["keys"], json!(["peer-es-1"]), "{report}");
        assert_eq!(report["removed"].as_array().unwrap().len(), 1, "{report}");
        expect(verify(v, &old_token), WID_RESULT_OK);
        let st = stats(src);
        assert_eq!(st["keys"], 1, "{st}");
        assert_eq!(
            (&st["sequence_refusals"], &st["stale"]),
            (&json!(2), &json!(false))
        );
        // Nothing held: a reset says so; its outputs may be NULL.
        assert_eq!(reset(src), (0, 0));
        expect(
            unsafe { wid_spiffe_bundle_source_reset_sequence(src, null_mut(), null_mut()) },
            WID_RESULT_OK,
        );
        // A sequence is held again once a bundle carries one; a lower one
        // after it is refused again.
        server.set("/bundle", 200, &new_bundle);
        assert_eq!(refresh(src).unwrap()["sequence"], 7);
        server.set("/bundle", 200, &old_bundle);
        expect(refresh(src).unwrap_err(), WID_RESULT_DECODE_ERROR);
        assert_eq!(stats(src)["sequence_refusals"], 3);
        // The optional report may be NULL.
        server.set("/bundle", 200, &new_bundle);
        expect(
            unsafe { wid_spiffe_bundle_source_refresh(src, null_mut()) },
            WID_RESULT_OK,
        );

        // The keyring outlives the source; it is no longer refreshed.
        unsafe { free!(src, b) };
        assert_eq!(
            ts_verify(ts, &new_token).unwrap(),
            "spiffe://peer.example.org"
        );
        unsafe { free!(ts, v, kr, peer) };
    }

    #[test]
    fn builder_arguments_are_checked_at_once() {
        let bad = WID_RESULT_INVALID_ARGUMENT;
        let na = WID_RESULT_NULL_ARGUMENT;
        let mut b = std::ptr::dangling_mut::<wid_spiffe_bundle_source_builder>();
        let new = |td: &str, url: &str, out| {
            let ((t, tl), (u, ul)) = (s(td), s(url));
            unsafe { wid_spiffe_bundle_source_builder_new(t, tl, u, ul, out) }
        };
        let url = "https://peer.example.org/bundle";
        for td in [
            "",
            "Peer.example.org",
            "peer example",
            "spiffe://peer.example.org",
        ] {
            expect(new(td, url, &mut b), bad);
            error_says("trust_domain");
        }
        expect(new(&"a".repeat(256), url, &mut b), bad);
        for u in [
            "",
            "ftp://peer.example.org/bundle",
            "http://peer.example.org/bundle",
            "https://peer.example.org/bundle#frag",
            "https://user:pw@peer.example.org/bundle",
            "/bundle",
        ] {
            expect(new(TD, u, &mut b), bad);
            error_says("bundle_url");
        }
        expect(new(TD, "http://example.com/b?secret=1", &mut b), bad);
        assert!(!last_error().contains("secret"), "{}", last_error());
        unsafe {
            let (u, ul) = s(url);
            let (t, tl) = s(TD);
            expect(
                wid_spiffe_bundle_source_builder_new(null(), 3, u, ul, &mut b),
                na,
            );
            expect(
                wid_spiffe_bundle_source_builder_new(t, tl, null(), 3, &mut b),
                na,
            );
            expect(
                wid_spiffe_bundle_source_builder_new(b"\xff".as_ptr().cast(), 1, u, ul, &mut b),
                bad,
            );
            expect(
                wid_spiffe_bundle_source_builder_new(t, tl, u, usize::MAX, &mut b),
                bad,
            );
        }
        expect(new(TD, url, null_mut()), na);
        assert_eq!(b, std::ptr::dangling_mut(), "written only on success");

        // Loopback http passes new, and build only when allowed.
        let mut b = null_mut();
        expect(new(TD, "http://127.0.0.1:9/bundle", &mut b), WID_RESULT_OK);
        let mut src = std::ptr::dangling_mut::<wid_spiffe_bundle_source>();
        expect(
            unsafe { wid_spiffe_bundle_source_builder_build(b, &mut src) },
            bad,
        );
        error_says("http");
        assert_eq!(src, std::ptr::dangling_mut());

        unsafe {
            // Every setter's values and refusals (shared with the remote
            // JWKS builder).
            common::fetch_setters::SPIFFE_BUNDLE_SOURCE.check(b);
            expect(wid_spiffe_bundle_source_builder_build(null(), &mut src), na);
            expect(wid_spiffe_bundle_source_builder_build(b, null_mut()), na);
        }
        assert_eq!(src, std::ptr::dangling_mut());
        // The builder kept loopback allowed through the refusals: it
        // builds now, and again.
        let s1 = build(b);
        let s2 = build(b);
        assert_eq!(stats(s1)["trust_domain"], TD);
        unsafe { free!(s1, s2, b) };
    }

    #[test]
    fn the_refresher_runs_until_the_handle_is_freed() {
        let peer = peer_keyring();
        let server = Server::start();
        server.set("/bundle", 200, &bundle(peer, Some(1)));
        let b = builder(&server.url("/bundle"));
        unsafe {
            // The bundle's hint (300 s) clamped down to 50 ms.
            expect(
                wid_spiffe_bundle_source_builder_set_refresh_bounds_ms(b, 20, 50),
                WID_RESULT_OK,
            );
        }
        let src = build(b);
        expect(
            unsafe { wid_spiffe_bundle_source_start_refresher(src) },
            WID_RESULT_OK,
        );
        // A second start does nothing more.
        expect(
            unsafe { wid_spiffe_bundle_source_start_refresher(src) },
            WID_RESULT_OK,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.hits("/bundle") < 3 {
            assert!(Instant::now() < deadline, "the refresher did not refetch");
            std::thread::sleep(Duration::from_millis(10));
        }
        let st = stats(src);
        assert_eq!(
            (&st["keys"], &st["sequence"]),
            (&json!(1), &json!(1)),
            "{st}"
        );
        unsafe { free!(src, b) };
        // Stopped (joined) by the free: no more requests.
        let after = server.hits("/bundle");
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(server.hits("/bundle"), after);
        unsafe { wid_keyring_free(peer) };
    }

    #[test]
    fn wrong_handles_null_arguments_and_untouched_outputs() {
        let b = builder("http://127.0.0.1:9/bundle");
        let src = build(b);
        let kr = new_keyring();
        let remote = {
            let (u, ul) = s("https://issuer.example.com/jwks.json");
            made(|out| unsafe { wid_remote_jwks_builder_new(u, ul, out) })
        };
        let bad = WID_RESULT_INVALID_ARGUMENT;
        let na = WID_RESULT_NULL_ARGUMENT;
        let mut out = sentinel();
        let mut out_kr = std::ptr::dangling_mut::<wid_keyring>();
        let mut out_s = std::ptr::dangling_mut::<wid_spiffe_bundle_source>();
        let (mut prev, mut had) = (7u64, 7u32);
        unsafe {
            for wrong in [
                src.cast::<wid_spiffe_bundle_source_builder>(),
                kr.cast(),
                remote.cast(),
            ] {
                common::fetch_setters::SPIFFE_BUNDLE_SOURCE.all_answer(wrong, bad);
                expect(
                    wid_spiffe_bundle_source_builder_build(wrong, &mut out_s),
                    bad,
                );
                wid_spiffe_bundle_source_builder_free(wrong);
            }
            for wrong in [
                b.cast_const().cast::<wid_spiffe_bundle_source>(),
                kr.cast_const().cast(),
            ] {
                expect(wid_spiffe_bundle_source_keyring(wrong, &mut out_kr), bad);
                expect(wid_spiffe_bundle_source_refresh(wrong, &mut out), bad);
                expect(wid_spiffe_bundle_source_start_refresher(wrong), bad);
                expect(wid_spiffe_bundle_source_stats(wrong, &mut out), bad);
                expect(
                    wid_spiffe_bundle_source_reset_sequence(wrong, &mut prev, &mut had),
                    bad,
                );
                wid_spiffe_bundle_source_free(wrong);
            }
            // A source is neither a keyring nor a remote JWKS.
            expect(wid_keyring_jwks(src.cast(), &mut out), bad);
            expect(wid_remote_jwks_stats(src.cast(), &mut out), bad);
            expect(wid_spiffe_bundle_source_keyring(null(), &mut out_kr), na);
            expect(wid_spiffe_bundle_source_keyring(src, null_mut()), na);
            expect(wid_spiffe_bundle_source_refresh(null(), &mut out), na);
            expect(wid_spiffe_bundle_source_start_refresher(null()), na);
            expect(wid_spiffe_bundle_source_stats(null(), &mut out), na);
            expect(wid_spiffe_bundle_source_stats(src, null_mut()), na);
            expect(
                wid_spiffe_bundle_source_reset_sequence(null(), &mut prev, &mut had),
                na,
            );
            // A failed fetch (nothing listens on port 9) writes nothing.
            expect(
                wid_spiffe_bundle_source_refresh(src, &mut out),
                WID_RESULT_IO_ERROR,
            );
            wid_spiffe_bundle_source_free(null());
            wid_spiffe_bundle_source_builder_free(null_mut());
        }
        assert!(is_sentinel(&out));
        assert_eq!(out_kr, std::ptr::dangling_mut());
        assert_eq!(out_s, std::ptr::dangling_mut());
        assert_eq!((prev, had), (7, 7));
        // Everything still works after the wrong frees.
        assert_eq!(stats(src)["failures"], 1);
        let s2 = build(b);
        unsafe { free!(src, s2, b, kr, remote) };
    }
}
