//! `ProofKey`: the workload's public key, sent with a request for a WIMSE
//! workload identity token (WIT) and carried in the WIT as `cnf.jwk`.

use crate::codec::wire_struct;

wire_struct! {
    /// A workload's public key as JWK members, under Go-style codec names
    /// (`Alg`, `Crv`, `Kty`, `X`, `Y`; base64url without padding for `X` and
    /// `Y`, as in a JWK).
    ///
    /// * Ed25519: `Kty` `OKP`, `Crv` `Ed25519`, `Alg` `EdDSA`, `X` the 32-byte key.
    /// * P-256: `Kty` `EC`, `Crv` `P-256`, `Alg` `ES256`, `X` and `Y` 32 bytes each.
    ///
    /// Only the public half ever travels: the private key stays with the
    /// workload ([`crate::WorkloadKey`]). In JSON (`cnf.jwk`) the members are
    /// the JWK names `kty`, `crv`, `x`, `y`, `alg`.
    pub struct ProofKey {
        /// `EdDSA` or `ES256`: the algorithm proofs made with this key use.
        pub alg: String => "Alg",
        /// `Ed25519` or `P-256`.
        pub crv: String => "Crv",
        /// `OKP` or `EC`.
        pub kty: String => "Kty",
        /// The Ed25519 public key, or the P-256 point's x coordinate.
        pub x: String => "X",
        /// The P-256 point's y coordinate (empty for Ed25519).
        pub y: String => "Y",
    }
}
