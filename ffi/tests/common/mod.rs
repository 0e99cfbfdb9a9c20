//! The library's shared test values (tests/common in the repository root)
//! and the C ABI's own test helpers.
#![allow(dead_code, unused_imports)]

#[path = "../../../tests/common/mod.rs"]
mod shared;
pub use shared::*;

pub mod ffi_text;
pub mod live;
