//! Differential tests: the keyring's precomputed strict check accepts exactly
//! what ed25519-dalek's `verify_strict` accepts — for valid, malleated,
//! non-canonical, small-order and torsioned signatures, and mixed-order keys.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use proptest::prelude::*;
use sha2::{Digest, Sha512};
use workload_identity::Keyring;

/// The group order l, little-endian.
const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// A handle to `vk` through a verify-only keyring (the code path under test).
fn ours(vk: &VerifyingKey) -> Option<workload_identity::VerifyingHandle> {
    let jwks = format!(
        r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","kid":"k","x":"{}"}}]}}"#,
        URL_SAFE_NO_PAD.encode(vk.as_bytes())
    );
    let (kr, _) = Keyring::from_jwks(&jwks).ok()?;
    kr.verifying_key("k")
}

/// Both checks on the same input; returns the common verdict.
fn same(vk: &VerifyingKey, msg: &[u8], sig: &[u8; 64]) -> bool {
    let dalek = vk.verify_strict(msg, &Signature::from_bytes(sig)).is_ok();
    let handle = ours(vk).expect("a non-weak canonical key imports");
    let mine = handle.verify(msg, sig);
    assert_eq!(mine, dalek, "disagreement on msg {msg:?} sig {sig:?}");
    mine
}

fn add_l(s: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut carry = 0u16;
    for i in 0..32 {
        let v = u16::from(s[i]) + u16::from(L[i]) + carry;
        out[i] = v as u8;
        carry = v >> 8;
    }
    out
}

fn challenge(r: &[u8; 32], vk: &VerifyingKey, msg: &[u8]) -> Scalar {
    Scalar::from_bytes_mod_order_wide(
        &Sha512::new()
            .chain_update(r)
            .chain_update(vk.as_bytes())
            .chain_update(msg)
            .finalize()
            .into(),
    )
}

/// A signature with nonce point `R = [r]B + extra`, correct for the key.
fn sign_with_r(sk: &SigningKey, msg: &[u8], r: Scalar, extra: EdwardsPoint) -> [u8; 64] {
    let big_r = (ED25519_BASEPOINT_POINT * r + extra).compress().to_bytes();
    let k = challenge(&big_r, &sk.verifying_key(), msg);
    let s = r + k * sk.to_scalar();
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(&big_r);
    sig[32..].copy_from_slice(s.as_bytes());
    sig
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn valid_signatures_agree(seed in any::<[u8; 32]>(), msg in proptest::collection::vec(any::<u8>(), 0..300)) {
        let sk = SigningKey::from_bytes(&seed);
        let sig = sk.sign(&msg).to_bytes();
        prop_assert!(same(&sk.verifying_key(), &msg, &sig));
        // s + l: the same signature with a non-canonical scalar.
        let mut malleated = sig;
        malleated[32..].copy_from_slice(&add_l(&sig[32..]));
        prop_assert!(!same(&sk.verifying_key(), &msg, &malleated));
    }

    #[test]
    fn corrupted_signatures_agree(
        seed in any::<[u8; 32]>(),
        msg in proptest::collection::vec(any::<u8>(), 0..100),
        flip in 0usize..512,
    ) {
        let sk = SigningKey::from_bytes(&seed);
        let mut sig = sk.sign(&msg).to_bytes();
        sig[flip / 8] ^= 1 << (flip % 8);
        prop_assert!(!same(&sk.verifying_key(), &msg, &sig));
    }

    #[test]
    fn random_signatures_agree(seed in any::<[u8; 32]>(), sig in any::<[u8; 32]>(), s in any::<[u8; 32]>()) {
        let sk = SigningKey::from_bytes(&seed);
        let mut full = [0u8; 64];
        full[..32].copy_from_slice(&sig);
        full[32..].copy_from_slice(&s);
        same(&sk.verifying_key(), b"m", &full);
    }

    #[test]
    fn torsioned_nonces_agree(seed in any::<[u8; 32]>(), r in any::<[u8; 32]>(), t in 0usize..8) {
        let sk = SigningKey::from_bytes(&seed);
        let r = Scalar::from_bytes_mod_order(r);
        let sig = sign_with_r(&sk, b"torsion", r, EIGHT_TORSION[t]);
        // Valid only without torsion (t = 0 is the identity).
        prop_assert_eq!(same(&sk.verifying_key(), b"torsion", &sig), t == 0);
    }

    #[test]
    fn mixed_order_keys_agree(seed in any::<[u8; 32]>(), t in 1usize..8, n in 0u32..16) {
        // A' = A + T: not small order (importable), verify_strict checks it as is.
        let sk = SigningKey::from_bytes(&seed);
        let mixed = VerifyingKey::from_bytes(
            &(sk.verifying_key().to_edwards() + EIGHT_TORSION[t]).compress().to_bytes(),
        ).unwrap();
        let msg = n.to_le_bytes();
        let sig = sk.sign(&msg).to_bytes();
        same(&mixed, &msg, &sig);
    }
}

#[test]
fn small_order_nonces_are_rejected_by_both() {
    let sk = SigningKey::from_bytes(&[5; 32]);
    let vk = sk.verifying_key();
    let msg = b"small order R";
    for t in EIGHT_TORSION {
        let r = t.compress().to_bytes();
        // s = k·a makes [s]B - [k]A the identity: the equation holds only for
        // R = identity, which verify (not strict) would accept.
        let k = challenge(&r, &vk, msg);
        let s = k * sk.to_scalar();
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(&r);
        sig[32..].copy_from_slice(s.as_bytes());
        assert!(!same(&vk, msg, &sig), "R = {r:?}");
        // And with an arbitrary s.
        sig[32..].copy_from_slice(Scalar::from(7u8).as_bytes());
        assert!(!same(&vk, msg, &sig));
    }
}

#[test]
fn non_canonical_nonce_encodings_are_rejected_by_both() {
    let sk = SigningKey::from_bytes(&[6; 32]);
    let vk = sk.verifying_key();
    // y >= p: p = 2^255 - 19, so y = p + i for i in 0..19 (bytes ed ff .. 7f).
    for i in 0u8..19 {
        let mut r = [0xffu8; 32];
        r[0] = 0xed + i;
        r[31] = 0x7f;
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(&r);
        sig[32..].copy_from_slice(Scalar::from(3u8).as_bytes());
        assert!(!same(&vk, b"x", &sig));
    }
    // "Negative zero": x = 0 with the sign bit set.
    let mut r = CompressedEdwardsY::default().to_bytes();
    r[0] = 1;
    r[31] |= 0x80;
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(&r);
    assert!(!same(&vk, b"x", &sig));
}

#[test]
fn weak_keys_never_enter_a_keyring() {
    for t in EIGHT_TORSION {
        let x = URL_SAFE_NO_PAD.encode(t.compress().to_bytes());
        let jwks = format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","kid":"w","x":"{x}"}}]}}"#);
        let e = Keyring::from_jwks(&jwks).unwrap_err();
        assert!(e.to_string().contains("small-order"), "{e}");
    }
}

/// A long randomized differential run over a few keys (honest, and mixed-order
/// `A + T`), each signature valid or broken in one of the ways an attacker can
/// choose: `s + l`, a flipped bit, a torsioned or random `R`, a small-order `R`,
/// another message. `WID_SIG_DIFF_CASES` sets the count (default 4,000; the
/// run recorded in BENCHMARKS.md used 1,000,000).
#[test]
fn long_randomized_differential_run() {
    let cases: u64 = std::env::var("WID_SIG_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4_000);
    let keys: Vec<(SigningKey, VerifyingKey)> = (0u8..8)
        .map(|i| {
            let sk = SigningKey::from_bytes(&[i.wrapping_mul(37).wrapping_add(11); 32]);
            let honest = sk.verifying_key();
            // Keys 4..8 carry a torsion component (mixed order).
            let vk = if i < 4 {
                honest
            } else {
                let mixed = honest.to_edwards() + EIGHT_TORSION[usize::from(i) - 3];
                VerifyingKey::from_bytes(&mixed.compress().to_bytes()).unwrap()
            };
            (sk, vk)
        })
        .collect();
    let handles: Vec<_> = keys.iter().map(|(_, vk)| ours(vk).unwrap()).collect();
    let (mut accepted, mut rejected) = (0u64, 0u64);
    for case in 0..cases {
        let rnd: [u8; 64] = Sha512::digest(case.to_le_bytes()).into();
        let which = usize::from(rnd[0]) % keys.len();
        let (sk, vk) = &keys[which];
        let msg = &rnd[1..1 + usize::from(rnd[1] % 40)];
        let r = Scalar::from_bytes_mod_order(rnd[32..64].try_into().unwrap());
        let mut sig = match rnd[2] % 8 {
            0 | 1 => sk.sign(msg).to_bytes(),
            2 => sign_with_r(sk, msg, r, EIGHT_TORSION[usize::from(rnd[3] % 8)]),
            3 => {
                let mut s = sk.sign(msg).to_bytes();
                let malleated = add_l(&s[32..]);
                s[32..].copy_from_slice(&malleated);
                s
            }
            4 => {
                let mut s = sk.sign(msg).to_bytes();
                s[usize::from(rnd[3] % 64)] ^= 1 << (rnd[4] % 8);
                s
            }
            5 => {
                // s = k·a over a small-order R: the equation holds for R = 0 only.
                let small = EIGHT_TORSION[usize::from(rnd[3] % 8)].compress().to_bytes();
                let k = challenge(&small, vk, msg);
                let mut s = [0u8; 64];
                s[..32].copy_from_slice(&small);
                s[32..].copy_from_slice((k * sk.to_scalar()).as_bytes());
                s
            }
            6 => {
                let mut s = sk.sign(msg).to_bytes();
                s[..32].copy_from_slice(&rnd[32..64]);
                s
            }
            _ => sk.sign(b"another message").to_bytes(),
        };
        if rnd[5] == 0 {
            // Now and then, a fully random signature.
            sig[..32].copy_from_slice(&rnd[8..40]);
        }
        let dalek = vk.verify_strict(msg, &Signature::from_bytes(&sig)).is_ok();
        assert_eq!(
            handles[which].verify(msg, &sig),
            dalek,
            "case {case}: sig {sig:?}"
        );
        if dalek {
            accepted += 1;
        } else {
            rejected += 1;
        }
    }
    // Both outcomes were exercised (honest keys accept their own signatures).
    assert!(
        accepted > cases / 10 && rejected > cases / 2,
        "{accepted} accepted, {rejected} rejected"
    );
    eprintln!("{cases} cases: {accepted} accepted, {rejected} rejected, all agreeing");
}
