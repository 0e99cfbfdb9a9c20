//! The strict Ed25519 check, with per-key precomputation.
//!
//! It accepts exactly what ed25519-dalek's `verify_strict` accepts (proven by
//! differential tests), but is cheaper because a verifying key never changes:
//!
//! * the key `A` was checked once, on insert, not to be of small order;
//! * a table for the verification equation over `[B, -A]` is built once per key,
//!   on its first verification (`VartimeEdwardsPrecomputation`), instead of a
//!   table for `A` on every call;
//! * `R` is never decompressed. `verify_strict` decompresses `R` to reject
//!   small-order points, then checks `encode([s]B - [k]A) == R`. Here the equation
//!   is checked first; when it holds, `R` is the canonical encoding of a curve
//!   point, so "R is of small order" is exactly "R is one of the eight canonical
//!   small-order encodings" — a table lookup.
//!
//! `s` must be canonical (`s < l`), as in `verify_strict`.
//!
//! Memory: the table holds 64 precomputed multiples of each of the two points
//! (about 20 KiB per key on x86-64 with the AVX2 backend; measured in
//! BENCHMARKS.md), and is only built for keys that verify at least once.

use std::sync::OnceLock;

use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint, VartimeEdwardsPrecomputation};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::VartimePrecomputedMultiscalarMul;
use ed25519_dalek::VerifyingKey;
use sha2::{Digest, Sha512};

/// The canonical encodings of the eight points of small order.
fn small_order_encodings() -> &'static [[u8; 32]; 8] {
    static TABLE: OnceLock<[[u8; 32]; 8]> = OnceLock::new();
    TABLE
        .get_or_init(|| curve25519_dalek::constants::EIGHT_TORSION.map(|p| p.compress().to_bytes()))
}

/// Precomputed verification state for one key.
pub(crate) struct SigCheck {
    key: VerifyingKey,
    table: OnceLock<VartimeEdwardsPrecomputation>,
}

impl SigCheck {
    pub(crate) fn new(key: VerifyingKey) -> SigCheck {
        SigCheck {
            key,
            table: OnceLock::new(),
        }
    }

    fn table(&self) -> &VartimeEdwardsPrecomputation {
        self.table.get_or_init(|| {
            VartimeEdwardsPrecomputation::new([
                curve25519_dalek::constants::ED25519_BASEPOINT_POINT,
                -self.key.to_edwards(),
            ])
        })
    }

    /// Whether `signature` is a valid strict Ed25519 signature of `message`.
    /// The key is never of small order (the keyring rejects weak keys on insert).
    pub(crate) fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        self.expected_r(message, signature)
            .is_some_and(|p| accepts(signature, &p.compress()))
    }

    /// `[s]B - [k]A`, the point `R` must encode; `None` when `s` is not
    /// canonical. Split from [`accepts`] so a batch can share one inversion
    /// across all the encodings (`EdwardsPoint::compress_batch_alloc`).
    pub(crate) fn expected_r(&self, message: &[u8], signature: &[u8; 64]) -> Option<EdwardsPoint> {
        let (r, s) = signature.split_at(32);
        let s: [u8; 32] = s.try_into().ok()?;
        let s = Option::<Scalar>::from(Scalar::from_canonical_bytes(s))?;
        let mut h = Sha512::new();
        h.update(r);
        h.update(self.key.as_bytes());
        h.update(message);
        let k = Scalar::from_bytes_mod_order_wide(&h.finalize().into());
        Some(self.table().vartime_multiscalar_mul([s, k]))
    }
}

/// Whether the signature's `R` is exactly `expected` (the encoding of
/// `[s]B - [k]A`) and not of small order.
pub(crate) fn accepts(signature: &[u8; 64], expected: &CompressedEdwardsY) -> bool {
    expected.as_bytes()[..] == signature[..32]
        && !small_order_encodings().contains(expected.as_bytes())
}
