//! Vault/OpenBao Transit as a key custodian (feature `transit`): a Transit
//! encryption key wraps root keys ([`Transit`]), and Transit signing keys sign
//! tokens without their private half ever leaving Transit
//! ([`TransitSigner`]). Both talk to Transit through one [`TransitClient`].

mod answer;
mod client;
mod sign;
mod wrap;

pub use client::{TransitClient, TransitClientBuilder};
pub use sign::{TransitSigner, TransitSync};
pub use wrap::Transit;
