//! Variable-time fixed-base multiplication for public points and scalars.
//!
//! A [`VartimeTable`] holds, for one point `P` and a window of `w` bits, the
//! multiples `d * 2^(w*i) * P` for every digit position `i` and every digit
//! `d` in `1..=2^(w-1)`. A scalar written in signed radix `2^w`
//! (`s = sum d_i * 2^(w*i)`, `d_i` in `-2^(w-1)..=2^(w-1)`) is then
//! `sum ±table[i][|d_i|]`: one point addition per non-zero digit and no
//! doubling at all, where a comb table costs 64 additions, 4 doublings and a
//! constant-time scan per addition.
//!
//! **Only for public data.** Which entries are read, and whether an addition
//! happens, depend on the scalar: the timing and the memory access pattern
//! reveal it. Signature verification uses it for `s`, `k = H(R || A || M)`, the
//! base point and the public key, all of which an attacker already knows.
//! Signing never comes here (it uses ed25519-dalek's constant-time code).
//!
//! The result is exactly `s * P` as a group element (the recoding is an
//! identity between integers), so a check built on it accepts what the same
//! check built on any other correct multiplication accepts.

use curve25519_dalek::edwards::EdwardsPoint;
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::Identity;

/// Scalars here are below `2^253` (canonical scalars are below `l < 2^253`).
const SCALAR_BITS: usize = 253;

/// The most digit positions any supported window needs (`w = 4`).
const MAX_DIGITS: usize = SCALAR_BITS.div_ceil(4);

/// The multiples of one point, for one window width.
pub(crate) struct VartimeTable {
    /// Window width in bits, 4..=10.
    w: usize,
    /// Row-major: `entries[i * half + (d - 1)] = d * 2^(w*i) * P`.
    entries: Box<[EdwardsPoint]>,
}

impl VartimeTable {
    /// The table of `point` for windows of `w` bits (4..=10).
    pub(crate) fn new(point: &EdwardsPoint, w: usize) -> VartimeTable {
        assert!((4..=10).contains(&w), "window width {w} outside 4..=10");
        let half = 1usize << (w - 1);
        let rows = SCALAR_BITS.div_ceil(w);
        let mut entries = Vec::with_capacity(rows * half);
        let mut base = *point;
        for _ in 0..rows {
            let mut multiple = base;
            for _ in 0..half {
                entries.push(multiple);
                multiple += base;
            }
            // 2^w * base: `multiple` is now (half + 1) * base; double `base`.
            for _ in 0..w {
                base = base + base;
            }
        }
        VartimeTable {
            w,
            entries: entries.into_boxed_slice(),
        }
    }

    /// `scalar * P`, in variable time (public scalars only).
    pub(crate) fn mul(&self, scalar: &Scalar) -> EdwardsPoint {
        let mut digits = [0i16; MAX_DIGITS];
        let n = signed_digits(&scalar.to_bytes(), self.w, &mut digits);
        let half = 1usize << (self.w - 1);
        let mut acc = EdwardsPoint::identity();
        for (row, &d) in digits[..n].iter().enumerate() {
            if d == 0 {
                continue;
            }
            let entry = &self.entries[row * half + usize::from(d.unsigned_abs()) - 1];
            if d > 0 {
                acc += entry;
            } else {
                acc -= entry;
            }
        }
        acc
    }
}

/// Writes the signed radix-`2^w` digits of the little-endian integer `bytes`
/// (below `2^253`) into `out` and returns how many there are: `d_i` in
/// `-2^(w-1)..=2^(w-1)` with `sum d_i * 2^(w*i)` equal to the integer.
fn signed_digits(bytes: &[u8; 32], w: usize, out: &mut [i16; MAX_DIGITS]) -> usize {
    debug_assert!(bytes[31] < 0x20, "scalar not below 2^253");
    let n = SCALAR_BITS.div_ceil(w);
    let mask = (1u16 << w) - 1;
    let radix = 1i16 << w;
    let mut carry = 0i16;
    for (i, digit) in out[..n].iter_mut().enumerate() {
        let bit = i * w;
        let byte = bit / 8;
        // Three bytes hold any window of up to 17 bits from `bit % 8`.
        let at = |k: usize| u32::from(*bytes.get(byte + k).unwrap_or(&0));
        let window = at(0) | at(1) << 8 | at(2) << 16;
        let mut d = ((window >> (bit % 8)) & u32::from(mask)) as i16 + carry;
        carry = 0;
        if d > radix / 2 {
            d -= radix;
            carry = 1;
        }
        *digit = d;
    }
    // The top window holds at most `253 - w*(n-1) <= w - 1` bits, so its
    // digit plus a carry never exceeds 2^(w-1): nothing carries out.
    debug_assert_eq!(carry, 0);
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;

    fn scalars() -> Vec<Scalar> {
        let mut out = vec![
            Scalar::ZERO,
            Scalar::ONE,
            -Scalar::ONE,
            Scalar::from(0x80u64),
            Scalar::from(0x7fu64),
            Scalar::from(u64::MAX),
        ];
        // Every byte 0x80 (carries all the way up) and every byte 0xff.
        out.push(Scalar::from_bytes_mod_order([0x80; 32]));
        out.push(Scalar::from_bytes_mod_order([0xff; 32]));
        let mut x = [7u8; 64];
        for i in 0..200u8 {
            x[usize::from(i) % 64] ^= i.wrapping_mul(151).wrapping_add(3);
            x[usize::from(i) * 7 % 64] = x[usize::from(i) * 7 % 64].wrapping_add(i);
            out.push(Scalar::from_bytes_mod_order_wide(&x));
        }
        out
    }

    #[test]
    fn digits_recompose_the_integer() {
        for s in scalars() {
            for w in 4..=10 {
                let mut d = [0i16; MAX_DIGITS];
                let n = signed_digits(&s.to_bytes(), w, &mut d);
                let limit = 1i16 << (w - 1);
                assert!(d[..n].iter().all(|&x| -limit <= x && x <= limit));
                let recomposed = d[..n].iter().rev().fold(Scalar::ZERO, |acc, &x| {
                    let digit = Scalar::from(u64::from(x.unsigned_abs()));
                    acc * Scalar::from(1u64 << w) + if x < 0 { -digit } else { digit }
                });
                assert_eq!(recomposed, s, "w = {w}");
            }
        }
    }

    #[test]
    fn multiplication_matches_the_constant_time_one() {
        let p = Scalar::from(987_654_321u64) * ED25519_BASEPOINT_POINT;
        for w in 4..=10 {
            let table = VartimeTable::new(&p, w);
            for s in scalars().iter().step_by(7) {
                assert_eq!(table.mul(s), s * p, "w = {w}");
            }
        }
        let b = VartimeTable::new(&ED25519_BASEPOINT_POINT, 8);
        for s in scalars() {
            assert_eq!(b.mul(&s), s * ED25519_BASEPOINT_POINT);
        }
    }
}
