//! What every C-numbered enum offers: its values, their stable numbers and
//! their C names. A leaf module (it imports nothing of this crate), so the
//! panic boundary can name results without depending on the enums' owners.

/// A C-numbered enum: its values, their stable numbers and their C names.
/// The library's enums get `ALL`, `from_u32` and `as_u32` from the core crate;
/// this trait adds the C name and gives the C ABI's own enums the same three.
pub trait CEnum: Copy + Sized + 'static {
    /// Every value, in declaration order.
    const VALUES: &'static [Self];
    /// The stable number (the C enumerator's value).
    fn number(self) -> u32;
    /// The C name, NUL-terminated (e.g. `WID_RESULT_EXPIRED`).
    fn c_name(self) -> &'static std::ffi::CStr;
    /// The value with this number, if there is one.
    fn from_number(n: u32) -> Option<Self> {
        Self::VALUES.iter().copied().find(|v| v.number() == n)
    }
}
