//! placeholder
#![cfg(all(feature = "cli", feature = "consul"))]
