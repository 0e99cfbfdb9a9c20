//! Root keys: secret material, how a signing key is seeded from it, and the key's
//! place in the rotation (state and times).

use std::fmt;

use ed25519_dalek::SigningKey;
use hkdf::Hkdf;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::{Algorithm, KeyId, KeyPurpose, PublicKey, RsaKeySize};
use crate::error::{Error, Result};

/// Length of root key material, in bytes.
pub const MATERIAL_LEN: usize = 32;

/// The HKDF salt of derivation v1 (fixed by the contract).
pub const HKDF_V1_SALT: &[u8] = b"workload-identity/ed25519/v1";

/// Secret root key material: 32 bytes (EdDSA and ES256 keys derive from it), or
/// an RSA key's PKCS#8 DER private key (RS256). Zeroized on drop; never printed;
/// compared in constant time.
///
/// The bytes live in a heap allocation of their own, of exactly their size,
/// written in place and never moved: moving a `KeyMaterial` (or a key holding
/// one) copies only a pointer, so no copy of the secret is left behind in
/// memory freed without zeroizing.
pub struct KeyMaterial(Zeroizing<Vec<u8>>);

/// The longest PKCS#8 material accepted (an 8192-bit RSA key is about 4.8 KiB).
pub const MAX_PKCS8_LEN: usize = 16 * 1024;

impl KeyMaterial {
    fn zeroed() -> KeyMaterial {
        KeyMaterial::zeroed_len(MATERIAL_LEN)
    }

    fn zeroed_len(len: usize) -> KeyMaterial {
        KeyMaterial(Zeroizing::new(vec![0u8; len]))
    }

    /// Material for an RS256 key: its PKCS#8 DER private key (checked when the
    /// key is made: an RSA key of 2048 to 8192 bits with e = 65537).
    pub fn from_pkcs8_der(der: &[u8]) -> Result<KeyMaterial> {
        if der.is_empty() || der.len() > MAX_PKCS8_LEN {
            return Err(Error::invalid(
                "RootKey",
                "material",
                format!(
                    "a PKCS#8 private key must be 1 to {MAX_PKCS8_LEN} bytes, got {} bytes",
                    der.len()
                ),
            ));
        }
        let mut m = KeyMaterial::zeroed_len(der.len());
        m.0.copy_from_slice(der);
        Ok(m)
    }

    /// Its length in bytes (32, or a PKCS#8 key's length).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it is empty (never, for material a key was made from).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Material from exactly 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<KeyMaterial> {
        if bytes.len() != MATERIAL_LEN {
            return Err(Error::invalid(
                "RootKey",
                "material",
                format!(
                    "must be exactly {MATERIAL_LEN} bytes, got {} bytes",
                    bytes.len()
                ),
            ));
        }
        let mut m = KeyMaterial::zeroed();
        m.0.copy_from_slice(bytes);
        Ok(m)
    }

    /// Fresh material from the operating system's CSPRNG.
    pub fn generate() -> Result<KeyMaterial> {
        let mut m = KeyMaterial::zeroed();
        getrandom::fill(m.0.as_mut_slice()).map_err(|e| Error::Io {
            context: "reading key material from the OS random source".into(),
            error: std::io::Error::other(e.to_string()),
        })?;
        Ok(m)
    }

    /// The secret bytes. Handle with care: copies are not zeroized for you.
    pub fn expose_secret(&self) -> &[u8] {
        &self.0
    }
}

impl Clone for KeyMaterial {
    fn clone(&self) -> KeyMaterial {
        let mut m = KeyMaterial::zeroed_len(self.0.len());
        m.0.copy_from_slice(self.0.as_slice());
        m
    }
}

impl PartialEq for KeyMaterial {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_slice().ct_eq(other.0.as_slice()).into()
    }
}

impl Eq for KeyMaterial {}

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyMaterial([redacted])")
    }
}

/// How a key is obtained from its material.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum KeyDerivation {
    /// HKDF-SHA256 of the 32-byte material with the key ID as info: salt
    /// `workload-identity/ed25519/v1` and 32 bytes for EdDSA, salt
    /// `workload-identity/p256/v1` and 48 bytes reduced to a P-256 scalar for
    /// ES256. The default.
    #[default]
    HkdfV1 = 1,
    /// The material itself is the seed, as Nomad does; for keyrings and tokens
    /// from such clusters. EdDSA only.
    NomadRawSeed = 2,
    /// The material is a PKCS#8 DER private key. RS256 only.
    Pkcs8 = 3,
}

impl KeyDerivation {
    /// Its name in vectors and files: `hkdf-v1`, `nomad-raw-seed` or `pkcs8`.
    pub const fn name(self) -> &'static str {
        match self {
            KeyDerivation::HkdfV1 => "hkdf-v1",
            KeyDerivation::NomadRawSeed => "nomad-raw-seed",
            KeyDerivation::Pkcs8 => "pkcs8",
        }
    }

    /// The derivation with this name.
    pub fn from_name(name: &str) -> Option<KeyDerivation> {
        [
            KeyDerivation::HkdfV1,
            KeyDerivation::NomadRawSeed,
            KeyDerivation::Pkcs8,
        ]
        .into_iter()
        .find(|d| d.name() == name)
    }

    /// The Ed25519 seed for `material` under key `id`. Material that makes no
    /// Ed25519 key (`Pkcs8`, or raw-seed material that is not 32 bytes, which a
    /// keyring refuses) gets the HKDF v1 seed, so this never panics.
    pub fn seed(self, material: &KeyMaterial, id: &KeyId) -> Zeroizing<[u8; 32]> {
        let mut seed = Zeroizing::new([0u8; 32]);
        match self {
            KeyDerivation::NomadRawSeed if material.len() == MATERIAL_LEN => {
                seed.copy_from_slice(material.expose_secret())
            }
            _ => {
                let hk = Hkdf::<Sha256>::new(Some(HKDF_V1_SALT), material.expose_secret());
                // 32 bytes is far below HKDF-SHA256's 8160-byte output limit.
                hk.expand(id.as_str().as_bytes(), seed.as_mut())
                    .expect("32 bytes is a valid HKDF-SHA256 output length");
            }
        }
        seed
    }

    /// The Ed25519 signing key for `material` under key `id`.
    pub fn signing_key(self, material: &KeyMaterial, id: &KeyId) -> SigningKey {
        SigningKey::from_bytes(&self.seed(material, id))
    }
}

/// Where a key is in its life.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyState {
    /// Signs new tokens; exactly one key is active when signing is possible.
    Active = 1,
    /// No longer signs; still verifies tokens it signed.
    Inactive = 2,
    /// Published (in the JWKS) ahead of signing; verifies; becomes active at its
    /// publish time.
    Prepublished = 3,
    /// Neither signs nor verifies; left out of the JWKS.
    Deprecated = 4,
}

impl KeyState {
    /// Lower-case name: `active`, `inactive`, `prepublished`, `deprecated`.
    pub const fn name(self) -> &'static str {
        match self {
            KeyState::Active => "active",
            KeyState::Inactive => "inactive",
            KeyState::Prepublished => "prepublished",
            KeyState::Deprecated => "deprecated",
        }
    }

    /// The state with this name.
    pub fn from_name(name: &str) -> Option<KeyState> {
        [
            KeyState::Active,
            KeyState::Inactive,
            KeyState::Prepublished,
            KeyState::Deprecated,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    /// Whether tokens signed by a key in this state verify.
    pub const fn verifies(self) -> bool {
        !matches!(self, KeyState::Deprecated)
    }

    /// Whether a key in this state signs now (`active`) or will without any
    /// operator action (`prepublished`): such a key must hold its secret.
    pub const fn signs_or_will(self) -> bool {
        matches!(self, KeyState::Active | KeyState::Prepublished)
    }
}

/// A root key: ID, algorithm, secret material, derivation, state and times
/// (Unix seconds).
///
/// `Debug` shows everything but the material.
#[derive(Clone, PartialEq, Eq)]
pub struct RootKey {
    pub(crate) id: KeyId,
    pub(crate) alg: Algorithm,
    pub(crate) purpose: KeyPurpose,
    pub(crate) material: KeyMaterial,
    pub(crate) derivation: KeyDerivation,
    pub(crate) state: KeyState,
    pub(crate) create_time: i64,
    pub(crate) publish_time: i64,
    pub(crate) retired_time: i64,
}

impl RootKey {
    /// An EdDSA key from existing material (e.g. imported from a Nomad keyring).
    pub fn new(
        id: KeyId,
        material: KeyMaterial,
        derivation: KeyDerivation,
        state: KeyState,
        create_time: i64,
    ) -> RootKey {
        RootKey::for_algorithm(
            Algorithm::EdDsa,
            id,
            material,
            derivation,
            state,
            create_time,
        )
    }

    /// A key of algorithm `alg` from existing material: 32 bytes with `HkdfV1`
    /// for ES256 (or `HkdfV1`/`NomadRawSeed` for EdDSA), a PKCS#8 DER private
    /// key with `Pkcs8` for RS256. The pairing and the material are checked when
    /// the key enters a keyring.
    pub fn for_algorithm(
        alg: Algorithm,
        id: KeyId,
        material: KeyMaterial,
        derivation: KeyDerivation,
        state: KeyState,
        create_time: i64,
    ) -> RootKey {
        RootKey {
            id,
            alg,
            purpose: KeyPurpose::Bearer,
            material,
            derivation,
            state,
            create_time,
            publish_time: 0,
            retired_time: 0,
        }
    }

    /// A new EdDSA key with a fresh UUID and fresh OS-random material, HKDF v1.
    pub fn generate(state: KeyState, now: i64) -> Result<RootKey> {
        RootKey::generate_for(Algorithm::EdDsa, state, now)
    }

    /// A new key of algorithm `alg` with a fresh UUID: 32 bytes of OS-random
    /// material (HKDF v1) for EdDSA and ES256, a fresh 2048-bit RSA key for
    /// RS256 (see [`RootKey::generate_rsa`] for other sizes).
    pub fn generate_for(alg: Algorithm, state: KeyState, now: i64) -> Result<RootKey> {
        match alg {
            Algorithm::Rs256 => RootKey::generate_rsa(RsaKeySize::default(), state, now),
            _ => Ok(RootKey::for_algorithm(
                alg,
                KeyId::generate(),
                KeyMaterial::generate()?,
                KeyDerivation::HkdfV1,
                state,
                now,
            )),
        }
    }

    /// A new RS256 key of `size` from the OS CSPRNG (e = 65537), stored as
    /// PKCS#8.
    pub fn generate_rsa(size: RsaKeySize, state: KeyState, now: i64) -> Result<RootKey> {
        let material = super::signer::generate_rsa(size).map_err(|why| Error::Io {
            context: format!("generating a {}-bit RSA key", size.bits()),
            error: std::io::Error::other(why),
        })?;
        Ok(RootKey::for_algorithm(
            Algorithm::Rs256,
            KeyId::generate(),
            material,
            KeyDerivation::Pkcs8,
            state,
            now,
        ))
    }

    /// Sets the key's purpose (bearer unless set): a `Wit` key signs only
    /// workload identity tokens and is published only in the WIT key set.
    pub fn with_purpose(mut self, purpose: KeyPurpose) -> RootKey {
        self.purpose = purpose;
        self
    }

    /// Sets the publish time (when a prepublished key becomes active).
    pub fn with_publish_time(mut self, publish_time: i64) -> RootKey {
        self.publish_time = publish_time;
        self
    }

    /// The key ID.
    pub fn id(&self) -> &KeyId {
        &self.id
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// What it signs: bearer tokens or WITs.
    pub fn purpose(&self) -> KeyPurpose {
        self.purpose
    }

    /// The secret material.
    pub fn material(&self) -> &KeyMaterial {
        &self.material
    }

    /// The derivation.
    pub fn derivation(&self) -> KeyDerivation {
        self.derivation
    }

    /// The state.
    pub fn state(&self) -> KeyState {
        self.state
    }

    /// When the key was created.
    pub fn create_time(&self) -> i64 {
        self.create_time
    }

    /// When a prepublished key becomes active (0 when not set).
    pub fn publish_time(&self) -> i64 {
        self.publish_time
    }

    /// When the key stopped signing (0 when it never did or it is unknown).
    pub fn retired_time(&self) -> i64 {
        self.retired_time
    }

    /// The public key this key's signatures verify under (`InvalidArgument`
    /// when the material cannot make a key of its algorithm).
    pub fn public_key(&self) -> Result<PublicKey> {
        super::signer::Signer::new(self.alg, self.derivation, &self.material, &self.id)
            .map(|(_, public)| public)
            .map_err(|why| Error::invalid("RootKey", "material", format!("key {}: {why}", self.id)))
    }
}

impl fmt::Debug for RootKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RootKey")
            .field("id", &self.id)
            .field("algorithm", &self.alg)
            .field("purpose", &self.purpose)
            .field("material", &self.material)
            .field("derivation", &self.derivation)
            .field("state", &self.state)
            .field("create_time", &self.create_time)
            .field("publish_time", &self.publish_time)
            .field("retired_time", &self.retired_time)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn material_must_be_32_bytes_and_the_message_never_shows_it() {
        for len in [0, 1, 31, 33, 64] {
            let bytes = vec![0xABu8; len];
            let e = KeyMaterial::from_slice(&bytes).unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("exactly 32 bytes, got {len} bytes")),
                "{e}"
            );
            assert!(!e.to_string().to_lowercase().contains("ab"), "{e}");
        }
        KeyMaterial::from_slice(&[7; 32]).unwrap();
    }

    #[test]
    fn debug_never_prints_material() {
        let key = RootKey::new(
            KeyId::new("k1").unwrap(),
            KeyMaterial::from_slice(&[0x5a; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Active,
            100,
        );
        let dbg = format!("{key:?}");
        assert!(dbg.contains("[redacted]"), "{dbg}");
        assert!(!dbg.contains("90") && !dbg.contains("5a"), "{dbg}");
        assert!(dbg.contains("\"k1\""), "{dbg}");
    }

    #[test]
    fn derivations_differ_and_hkdf_depends_on_the_key_id() {
        let m = KeyMaterial::from_slice(&[1; 32]).unwrap();
        let a = KeyId::new("a").unwrap();
        let b = KeyId::new("b").unwrap();
        let hk_a = KeyDerivation::HkdfV1.seed(&m, &a);
        let hk_b = KeyDerivation::HkdfV1.seed(&m, &b);
        assert_ne!(*hk_a, *hk_b);
        let raw_a = KeyDerivation::NomadRawSeed.seed(&m, &a);
        assert_eq!(*raw_a, [1; 32]);
        assert_eq!(*raw_a, *KeyDerivation::NomadRawSeed.seed(&m, &b));
    }

    #[test]
    fn numbers_and_names_are_the_contract() {
        assert_eq!(KeyState::Active.as_u32(), 1);
        assert_eq!(KeyState::Inactive.as_u32(), 2);
        assert_eq!(KeyState::Prepublished.as_u32(), 3);
        assert_eq!(KeyState::Deprecated.as_u32(), 4);
        assert_eq!(KeyDerivation::HkdfV1.as_u32(), 1);
        assert_eq!(KeyDerivation::NomadRawSeed.as_u32(), 2);
        assert_eq!(KeyDerivation::Pkcs8.as_u32(), 3);
        for n in 0..6 {
            assert_eq!(
                KeyState::from_u32(n).map(KeyState::as_u32),
                (1..=4).contains(&n).then_some(n)
            );
            assert_eq!(
                KeyDerivation::from_u32(n).map(KeyDerivation::as_u32),
                (1..=3).contains(&n).then_some(n)
            );
        }
        assert_eq!(
            KeyDerivation::from_name("hkdf-v1"),
            Some(KeyDerivation::HkdfV1)
        );
        assert_eq!(
            KeyDerivation::from_name("nomad-raw-seed"),
            Some(KeyDerivation::NomadRawSeed)
        );
        assert_eq!(KeyDerivation::from_name("raw"), None);
        assert_eq!(KeyDerivation::default(), KeyDerivation::HkdfV1);
    }
}
