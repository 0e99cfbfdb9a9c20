//! The library's shared test values (tests/common in the repository root)
//! and the C ABI's own test harness, one module for each kind of thing the
//! tests set up or read: `result` (asserting a call's code), `ffi_text` (the
//! last error, what it says, a code's name), `bytes` (`wid_bytes` outputs),
//! `strings` (`(pointer, length)` arguments, text handed back),
//! `fetch_setters` (the remote key sources' builder setters), `http_server`
//! (a loopback server for them), `handles`
//! (handles made through an output, freed), `keys` (keyrings, issuers,
//! workload keys), `request` (the committed request vector and tokens from
//! it, proof keys, node requests), `lookup` (allocation lookup callbacks),
//! `verifier` (verifiers, verifying), `proof` (WITs, proofs, their
//! verification) and `live` (the live verifiers of the benchmarks).
#![allow(dead_code, unused_imports)]

#[path = "../../../tests/common/mod.rs"]
mod shared;
pub use shared::*;

pub mod bytes;
pub mod fetch_setters;
pub mod ffi_text;
pub mod handles;
pub mod http_server;
pub mod keys;
pub mod live;
pub mod lookup;
pub mod proof;
pub mod request;
pub mod result;
pub mod strings;
pub mod verifier;
