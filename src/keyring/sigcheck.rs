//! The strict Ed25519 check, with per-key precomputation.
//!
//! It accepts exactly what ed25519-dalek's `verify_strict` accepts (proven by
//! differential tests), but is cheaper because a verifying key never changes
//! and everything it multiplies is public:
//!
//! * the key `A` was checked once, on insert, not to be of small order;
//! * `[s]B - [k]A` is computed from two fixed-base tables of multiples
//!   ([`VartimeTable`]): a static one for the base point `B` (10-bit windows,
//!   2.0 MiB, built once per process in about 4 ms) and one per key for `A`
//!   (6-bit windows, 220 KiB, built on the key's first verification in about
//!   0.45 ms). With signed digits a multiplication is one point addition per
//!   window and no doubling: 26 additions for `[s]B`, 43 for `[k]A`, where a
//!   double-scalar multiplication walks 253 doublings. (Issue 56 widened them
//!   from 8 and 5 bits, 660 and 130 KiB: 32 + 51 additions.) Variable time
//!   is sound here because `s`, `k`, `B` and `A` are all public. The result
//!   is the same group element, so acceptance is unchanged;
//! * `R` is never decompressed. `verify_strict` decompresses `R` to reject
//!   small-order points, then checks `encode([s]B - [k]A) == R`. Here the equation
//!   is checked first; when it holds, `R` is the canonical encoding of a curve
//!   point, so "R is of small order" is exactly "R is one of the eight canonical
//!   small-order encodings" — a table lookup.
//!
//! `s` must be canonical (`s < l`), as in `verify_strict`.
//!
//! Measured alternatives (BENCHMARKS.md, "Ed25519 verification"): two comb
//! tables (curve25519-dalek's `EdwardsBasepointTable`, constant-time scans, 30
//! KiB per key) came to 0.66 x `verify_strict`; half-length scalars (Pornin's
//! lattice reduction, `v*R = (v*s)*B - u*A` with `u`, `v` of about 127 bits) on
//! curve25519-dalek's public point arithmetic came to 0.92 x, because its only
//! multi-point multiplication walks all 256 bits whatever the scalars' length.

use std::sync::OnceLock;

use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use ed25519_dalek::VerifyingKey;
use sha2::{Digest, Sha512};

use super::vartime_table::VartimeTable;

/// Window width of the base point's table (static, so it can be large).
const BASE_WINDOW: usize = 10;
/// Window width of each key's table.
const KEY_WINDOW: usize = 6;

/// The base point's table, built on first use.
fn base_table() -> &'static VartimeTable {
    static TABLE: OnceLock<VartimeTable> = OnceLock::new();
    TABLE.get_or_init(|| VartimeTable::new(&ED25519_BASEPOINT_POINT, BASE_WINDOW))
}

/// The canonical encodings of the eight points of small order.
fn small_order_encodings() -> &'static [[u8; 32]; 8] {
    static TABLE: OnceLock<[[u8; 32]; 8]> = OnceLock::new();
    TABLE
        .get_or_init(|| curve25519_dalek::constants::EIGHT_TORSION.map(|p| p.compress().to_bytes()))
}

/// Precomputed verification state for one key.
pub(crate) struct SigCheck {
    key: VerifyingKey,
    /// The table of multiples of `A` (220 KiB).
    table: OnceLock<VartimeTable>,
    /// Whether the first verification builds the table (a keyring's keys,
    /// which verify for their whole life) or only [`SigCheck::build_table`]
    /// does (a workload's proof key, which signs a handful of proofs: the
    /// table would cost more to build, and far more memory, than it saves).
    build_on_use: bool,
}

impl SigCheck {
    /// For a keyring's key: the table is built on the first verification.
    pub(crate) fn new(key: VerifyingKey) -> SigCheck {
        SigCheck {
            key,
            table: OnceLock::new(),
            build_on_use: true,
        }
    }

    /// For a short-lived key: no table until [`SigCheck::build_table`];
    /// until then `[k]A` is a variable-time double-scalar multiplication.
    pub(crate) fn untabled(key: VerifyingKey) -> SigCheck {
        SigCheck {
            key,
            table: OnceLock::new(),
            build_on_use: false,
        }
    }

    /// Builds the table now (for a key that turned out to verify often).
    pub(crate) fn build_table(&self) {
        self.table_now();
    }

    /// Whether the table has been built.
    #[cfg(test)]
    pub(crate) fn has_table(&self) -> bool {
        self.table.get().is_some()
    }

    fn table_now(&self) -> &VartimeTable {
        self.table
            .get_or_init(|| VartimeTable::new(&self.key.to_edwards(), KEY_WINDOW))
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
        let table = if self.build_on_use {
            Some(self.table_now())
        } else {
            self.table.get()
        };
        Some(match table {
            Some(t) => base_table().mul(&s) - t.mul(&k),
            // The same group element, [s]B + [-k]A, by curve25519-dalek's
            // Straus (precomputed B, a small per-call table for A).
            None => {
                EdwardsPoint::vartime_double_scalar_mul_basepoint(&-k, &self.key.to_edwards(), &s)
            }
        })
    }
}

/// Whether the signature's `R` is exactly `expected` (the encoding of
/// `[s]B - [k]A`) and not of small order.
pub(crate) fn accepts(signature: &[u8; 64], expected: &CompressedEdwardsY) -> bool {
    expected.as_bytes()[..] == signature[..32]
        && !small_order_encodings().contains(expected.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    /// The untabled path (proof keys) and the tabled one (keyring keys) agree
    /// with `verify_strict` on genuine, altered and non-canonical signatures.
    #[test]
    fn untabled_and_tabled_checks_agree_with_verify_strict() {
        for seed in 0u8..24 {
            let sk = SigningKey::from_bytes(&[seed.wrapping_mul(37).wrapping_add(1); 32]);
            let vk = sk.verifying_key();
            let tabled = SigCheck::new(vk);
            let untabled = SigCheck::untabled(vk);
            let message = [seed; 40];
            let good = sk.sign(&message).to_bytes();
            let mut cases = vec![good];
            for bit in [0usize, 7, 100, 255, 256, 300, 511] {
                let mut bad = good;
                bad[bit / 8] ^= 1 << (bit % 8);
                cases.push(bad);
            }
            // s + l: the same point, a non-canonical s.
            let mut high = good;
            high[63] |= 0x80;
            cases.push(high);
            for sig in cases {
                let strict = vk
                    .verify_strict(&message, &ed25519_dalek::Signature::from_bytes(&sig))
                    .is_ok();
                assert_eq!(untabled.verify(&message, &sig), strict, "seed {seed}");
                assert_eq!(tabled.verify(&message, &sig), strict, "seed {seed}");
            }
            assert!(
                !untabled.has_table(),
                "verifying never builds a proof key's table"
            );
            assert!(tabled.has_table());
            untabled.build_table();
            assert!(untabled.has_table());
            assert!(untabled.verify(&message, &good));
        }
    }
}
