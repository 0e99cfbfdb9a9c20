//! The strict Ed25519 check, with per-key precomputation.
//!
//! It accepts exactly what ed25519-dalek's `verify_strict` accepts (proven by
//! differential tests), but is cheaper because a verifying key never changes:
//!
//! * the key `A` was checked once, on insert, not to be of small order;
//! * `[s]B - [k]A` is computed with two fixed-base comb tables: curve25519-dalek's
//!   static table for the base point `B`, and one built once per key for `A`
//!   (`EdwardsBasepointTable::create`, on the key's first verification). A comb
//!   multiplication costs 64 additions and 4 doublings where a double-scalar
//!   multiplication walks 253 doublings; the two together take about 0.65 x the
//!   time of `verify_strict` (BENCHMARKS.md, "Ed25519 verification"). The
//!   result is the same group element, so acceptance is unchanged;
//! * `R` is never decompressed. `verify_strict` decompresses `R` to reject
//!   small-order points, then checks `encode([s]B - [k]A) == R`. Here the equation
//!   is checked first; when it holds, `R` is the canonical encoding of a curve
//!   point, so "R is of small order" is exactly "R is one of the eight canonical
//!   small-order encodings" — a table lookup.
//!
//! `s` must be canonical (`s < l`), as in `verify_strict`.
//!
//! Half-length scalars (Pornin's lattice reduction, `v*R = (v*s)*B - u*A` with
//! `u`, `v` of about 127 bits) were measured and not taken: on curve25519-dalek's
//! public point arithmetic (serial field arithmetic, a Niels conversion per
//! addition, and no multi-point multiplication that skips leading zeros) a
//! four-point loop over half-length scalars came to 0.92 x `verify_strict`.
//!
//! Memory: the per-key comb table is 30 KiB (32 x 8 affine Niels points), built
//! in under 1 ms, and only for keys that verify at least once.

use std::sync::OnceLock;

use curve25519_dalek::constants::ED25519_BASEPOINT_TABLE;
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsBasepointTable, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::BasepointTable;
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
    /// The comb table for `A` (boxed: 30 KiB).
    table: OnceLock<Box<EdwardsBasepointTable>>,
}

impl SigCheck {
    pub(crate) fn new(key: VerifyingKey) -> SigCheck {
        SigCheck {
            key,
            table: OnceLock::new(),
        }
    }

    fn table(&self) -> &EdwardsBasepointTable {
        self.table
            .get_or_init(|| Box::new(EdwardsBasepointTable::create(&self.key.to_edwards())))
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
        Some(ED25519_BASEPOINT_TABLE * &s - self.table() * &k)
    }
}

/// Whether the signature's `R` is exactly `expected` (the encoding of
/// `[s]B - [k]A`) and not of small order.
pub(crate) fn accepts(signature: &[u8; 64], expected: &CompressedEdwardsY) -> bool {
    expected.as_bytes()[..] == signature[..32]
        && !small_order_encodings().contains(expected.as_bytes())
}
