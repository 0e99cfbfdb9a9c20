//! Saving and loading a keyring: a versioned msgpack file with a checksum,
//! replaced crash-safely.
//!
//! # Format (version 2)
//!
//! The file is one msgpack map, the envelope, whose layout never changes between
//! versions: `Format` (`"workload-identity-keystore"`), `Version` (2), `Body`
//! (bin: the msgpack-encoded key list) and `SHA256` (bin: SHA-256 of `Body`). The
//! body is `{"Keys": [...]}`, each key a map of `ID`, `Algorithm` (`EdDSA`,
//! `ES256` or `RS256`), `Material` (bin: 32 bytes for EdDSA and ES256, the
//! PKCS#8 DER private key for RS256; empty for a verify-only key), `PublicKey`
//! (bin: the 32-byte Ed25519 key, the 65-byte uncompressed P-256 point
//! `04 || x || y`, or the RSA modulus, whose exponent is always 65537),
//! `Derivation` (`hkdf-v1`, `nomad-raw-seed` or `pkcs8`; empty for a
//! verify-only key), `State`, `CreateTime`, `PublishTime` and `RetiredTime`
//! (Unix seconds), and `Purpose` (`wit` for a key that signs WITs only;
//! absent for a bearer key, as in every keystore written before purposes
//! existed, which therefore loads unchanged; any other value is refused).
//! When the keyring has a policy ([`super::KeyringPolicy`]), the body also
//! holds `Policy`: the map of the replicated keyring's `policy` record
//! (`RotationThreshold`, `LongestTTL`, `LeadTime`, `Retention`, Go
//! durations); a body without it loads with no policy.
//!
//! # Version 3: wrapped keys
//!
//! The same envelope and body, with the material wrapped by a key-encryption
//! key ([`crate::KeyWrapper`]): the body gains `Wrapping` (`Kind`, `aead-kek`
//! or `transit` or a plugged-in KMS's name, and `KekID`, the KEK's
//! identifier), and every key with material carries it in `Wrapped` (bin)
//! with `Material` empty. The associated data of each key is
//! [`crate::associated_data`] (its ID and algorithm). Version 3 is
//! written only by [`Keyring::save_wrapped`]; [`Keyring::save`] writes version
//! 2. A version-3 body whose `Kind` is not the given wrapper's, or that names
//! another KEK, is refused before anything is unwrapped; a wrapped key that
//! fails to unwrap (altered, or moved to another ID or algorithm) fails the
//! whole load. Every key of a version-3 body carries `Wrapped`: a key
//! without it (which would be a verify-only key whose public key nothing
//! authenticates) is refused, so someone who can write the file but has no
//! KEK cannot add a key; `save_wrapped` refuses a keyring holding
//! verify-only keys. What the KEK does not authenticate: a key's state and
//! times, and which wrapped keys the file holds (an older file, or a key
//! left out, still loads).
//!
//! Version 1, written before keys had algorithms, is the same without
//! `Algorithm`: it still loads, every key as EdDSA (a committed fixture,
//! `tests/vectors/keystore-v1.bin`, proves it). A version 1 file that names an
//! algorithm, or a version 2 file that does not, is refused.
//!
//! Loading checks, in order: the envelope decodes, `Format` is ours, `Version` is
//! one this library reads, the checksum matches, the body decodes, and every key
//! is valid — including that its material makes exactly the stored public key.
//! Any failure is an error and no keyring is returned: never a partial one.
//! Files are written with mode 0600 through [`crate::storage::atomic_file`]'s
//! temporary-file-and-rename, so a crash leaves the old or the new file, whole.

use std::path::Path;

use super::Keyring;
use super::keystore_seal;
use super::stored_key::{StoredKey, corrupt, entry_of, stored_aad, stored_key};
use crate::codec::{Bin, wire_struct};
use crate::custody::{KeyWrapper, RecordKey, WrapItem, Wrapping};
use crate::error::{Error, Result, truncate_for_message};
use crate::storage::atomic_file::FileAccess;
use crate::storage::envelope::EnvelopeFormat;

/// The `Format` field of every keystore file.
pub const KEYSTORE_FORMAT: &str = "workload-identity-keystore";
/// The newest keystore version this library reads: 3, the version
/// [`Keyring::save_wrapped`] writes.
pub const KEYSTORE_VERSION: u32 = 3;
/// The version [`Keyring::save`] writes (plaintext material).
pub const KEYSTORE_PLAINTEXT_VERSION: u32 = 2;
/// The keystore's envelope format.
pub(super) const ENVELOPE: EnvelopeFormat = EnvelopeFormat {
    format: KEYSTORE_FORMAT,
    version: KEYSTORE_VERSION,
    oldest: 1,
    what: "keystore",
};

wire_struct! {
    /// The body (versions 1 to 3).
    pub(crate) struct Body {
        /// The keys, oldest first.
        pub(crate) keys: Vec<StoredKey> => "Keys",
        /// Which KEK wrapped the keys (version 3 only).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub(crate) wrapping: Option<Wrapping> => "Wrapping",
        /// The keyring's policy ([`super::KeyringPolicy`]), when one is set.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub(crate) policy: Option<super::PolicyRecord> => "Policy",
        /// The SPIFFE bundle sequence served for these keys
        /// ([`Keyring::spiffe_sequence`]); absent in keystores written
        /// before it was stored.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub(crate) sequence: Option<u64> => "Sequence",
        /// Version 3: HMAC-SHA256 under the record key of the body without
        /// it (`keystore_seal.rs`).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub(crate) mac: Option<Bin> => "MAC",
    }
}

impl Body {
    /// The body encoded without its `MAC`: what the MAC covers.
    fn unsealed_bytes(&self) -> Result<Vec<u8>> {
        let mut copy = self.clone();
        copy.mac = None;
        crate::codec::encode(&copy)
    }

    /// Seals a version-3 body (its keys wrapped already) under `wrapper`:
    /// `key`, or a new record key, wrapped into its `Wrapping`, then its MAC.
    fn seal(&mut self, wrapper: &dyn KeyWrapper, key: Option<RecordKey>) -> Result<()> {
        let (key, wrapped) = keystore_seal::sealing_key(wrapper, key)?;
        self.wrapping
            .get_or_insert_with(|| Wrapping::of(wrapper))
            .record_key = Some(wrapped);
        self.mac = Some(keystore_seal::mac(&key, &self.unsealed_bytes()?));
        Ok(())
    }

    /// Checks a version-3 body's MAC (see `keystore_seal::check`).
    fn check_seal(
        &self,
        wrapper: &dyn KeyWrapper,
        allow_unauthenticated: bool,
    ) -> Result<Option<RecordKey>> {
        keystore_seal::check(
            self.wrapping.as_ref().and_then(|w| w.record_key.as_ref()),
            self.mac.as_ref(),
            || self.unsealed_bytes(),
            wrapper,
            allow_unauthenticated,
        )
    }
}

/// How [`Keyring::load_with`] treats the keystore file.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct KeystoreLoadOptions {
    /// Load a keystore that group or others may read (default: refuse it).
    pub allow_readable_by_others: bool,
    /// The KEK that unwraps a version-3 keystore (default: none, and a
    /// wrapped keystore is refused).
    pub wrapper: Option<std::sync::Arc<dyn KeyWrapper>>,
    /// With a [`KeystoreLoadOptions::wrapper`], still load a plaintext
    /// (version 1 or 2) keystore (default: refuse it, so a plaintext file
    /// swapped in by someone without the KEK is never signed with).
    pub allow_plaintext: bool,
    /// Load a wrapped keystore written before its metadata (states,
    /// purposes, times, policy, which keys) carried a MAC under the KEK
    /// (default: refuse it; `wid keyring rewrap` seals it).
    pub allow_unauthenticated_metadata: bool,
}

impl KeystoreLoadOptions {
    /// Whether to load a keystore that group or others may read. Only for files
    /// whose mode you cannot control (some container volume mounts); the
    /// keystore holds every private key.
    pub fn allow_readable_by_others(mut self, allow: bool) -> KeystoreLoadOptions {
        self.allow_readable_by_others = allow;
        self
    }

    /// The KEK that unwraps the keystore's keys.
    pub fn wrapper(mut self, wrapper: std::sync::Arc<dyn KeyWrapper>) -> KeystoreLoadOptions {
        self.wrapper = Some(wrapper);
        self
    }

    /// Whether a plaintext keystore loads although a wrapper was given (to
    /// move a deployment to wrapped keystores one file at a time).
    pub fn allow_plaintext(mut self, allow: bool) -> KeystoreLoadOptions {
        self.allow_plaintext = allow;
        self
    }

    /// Whether a wrapped keystore of the format before loads although its
    /// metadata is not authenticated (to seal it: [`Keyring::rewrap_keystore`]
    /// writes it back sealed). A keystore whose MAC is there but does not
    /// verify is refused whatever this says.
    pub fn allow_unauthenticated_metadata(mut self, allow: bool) -> KeystoreLoadOptions {
        self.allow_unauthenticated_metadata = allow;
        self
    }
}

/// A body of any version made plaintext: a version-3 body's keys unwrapped
/// with the options' wrapper (after checking it is the KEK the body names),
/// a plaintext body checked to carry nothing wrapped.
fn unwrap_body(
    version: u32,
    mut body: Body,
    wrapper: Option<&dyn KeyWrapper>,
    allow_plaintext: bool,
) -> Result<Body> {
    if version < 3 {
        if body.wrapping.is_some() || body.keys.iter().any(|k| k.wrapped.is_some()) {
            return Err(corrupt(
                "Wrapping".into(),
                format!(
                    "a version {version} keystore is plaintext, but this one carries wrapped keys"
                ),
            ));
        }
        if let Some(w) = wrapper {
            if !allow_plaintext {
                return Err(Error::KeyCustody {
                    custodian: format!("KEK {}", w.kek_id()),
                    reason: format!(
                        "a KEK was given but the keystore is plaintext (version {version}); wrap it first (`wid keyring wrap`, Keyring::rewrap_keystore), or allow plaintext explicitly"
                    ),
                });
            }
        }
        return Ok(body);
    }
    let Some(wrapping) = body.wrapping.take() else {
        return Err(corrupt(
            "Wrapping".into(),
            "a version 3 keystore names its KEK in Wrapping, and this one has none",
        ));
    };
    let Some(wrapper) = wrapper else {
        let known = matches!(
            wrapping.kind.as_str(),
            crate::custody::KIND_AEAD_KEK | crate::custody::KIND_TRANSIT
        );
        let how = match wrapping.kind.as_str() {
            crate::custody::KIND_AEAD_KEK => "give its KEK file (--kek-file, KekFile)",
            crate::custody::KIND_TRANSIT => {
                "give its Transit key (--transit-addr and --transit-key, Transit)"
            }
            _ => {
                "this library knows only \"aead-kek\" and \"transit\"; give a KeyWrapper of that kind"
            }
        };
        return Err(Error::KeyCustody {
            custodian: format!("KEK {}", truncate_for_message(&wrapping.kek_id)),
            reason: format!(
                "the keystore is wrapped by {} KEK {:?} and no KEK was given: {how}",
                if known { "the" } else { "an unknown kind of" },
                truncate_for_message(&wrapping.kek_id),
            ) + &if known {
                String::new()
            } else {
                format!(" (Kind {:?})", truncate_for_message(&wrapping.kind))
            },
        });
    };
    wrapping.check(wrapper, "keystore")?;
    let mut slots = Vec::new();
    let mut aads = Vec::new();
    for (i, k) in body.keys.iter().enumerate() {
        if !k.material.as_slice().is_empty() {
            return Err(corrupt(
                format!("Keys[{i}].Material"),
                "a version 3 keystore holds material only wrapped, and this key has plaintext material",
            ));
        }
        // Every key must carry its wrapped material: a key without it would
        // be verify-only with a public key nothing authenticates, which
        // anyone able to write the file (but without the KEK) could add.
        match &k.wrapped {
            Some(w) if !w.as_slice().is_empty() => {
                slots.push(i);
                aads.push(stored_aad(k).map_err(|e| match e {
                    Error::Decode(d) => corrupt(format!("Keys[{i}].{}", d.path), d.reason),
                    other => other,
                })?);
            }
            _ => {
                return Err(corrupt(
                    format!("Keys[{i}].Wrapped"),
                    format!(
                        "key {:?} has no wrapped material: every key of a version 3 keystore carries it (a verify-only key has nothing the KEK can authenticate, so a wrapped keystore never holds one)",
                        truncate_for_message(&k.id)
                    ),
                ));
            }
        }
    }
    let items: Vec<WrapItem<'_>> = slots
        .iter()
        .zip(&aads)
        .map(|(&i, aad)| {
            let k = &body.keys[i];
            let w = k.wrapped.as_ref().map_or(&[][..], Bin::as_slice);
            WrapItem::new(&k.id, w, aad)
        })
        .collect();
    let plain = wrapper.unwrap_many(&items)?;
    drop(items);
    if plain.len() != slots.len() {
        return Err(Error::KeyCustody {
            custodian: format!("KEK {}", wrapper.kek_id()),
            reason: format!(
                "the wrapper returned {} keys for {}",
                plain.len(),
                slots.len()
            ),
        });
    }
    for (i, material) in slots.into_iter().zip(plain) {
        let k = &mut body.keys[i];
        if material.is_empty() {
            return Err(Error::KeyCustody {
                custodian: format!("KEK {}", wrapper.kek_id()),
                reason: format!(
                    "key {:?} unwrapped to nothing: the wrapper answered wrongly",
                    truncate_for_message(&k.id)
                ),
            });
        }
        k.material = Bin(material);
        k.wrapped = None;
    }
    Ok(body)
}

impl Keyring {
    /// The keys as a keystore body (material included).
    fn keystore_body(&self) -> (Body, usize) {
        let keys: Vec<StoredKey> = self
            .stored()
            .into_iter()
            // Keys held by an external signer live in their KMS, not here.
            .filter(|(info, _)| info.external.is_none())
            .map(|(info, material)| stored_key(&info, material.as_ref()))
            .collect();
        let hint = 64
            + keys
                .iter()
                .map(|k| {
                    256 + k.id.len() + k.material.as_slice().len() + k.public_key.as_slice().len()
                })
                .sum::<usize>();
        (
            Body {
                keys,
                wrapping: None,
                policy: self.policy().map(super::KeyringPolicy::record),
                sequence: Some(self.spiffe_sequence()),
                mac: None,
            },
            hint,
        )
    }

    /// The keys as a version-3 body: each key's material wrapped by `wrapper`.
    fn wrapped_body(&self, wrapper: &dyn KeyWrapper) -> Result<(Body, usize)> {
        let (mut body, _) = self.keystore_body();
        if let Some(k) = body.keys.iter().find(|k| k.material.as_slice().is_empty()) {
            return Err(Error::invalid(
                "Keyring",
                "keys",
                format!(
                    "key {} is verify-only (a public key, imported from a JWKS): a wrapped keystore holds only keys whose material the KEK wraps, which is what authenticates them; remove it (keep such keys in a JWKS you import at start)",
                    k.id
                ),
            ));
        }
        let aads = body
            .keys
            .iter()
            .map(stored_aad)
            .collect::<Result<Vec<_>>>()?;
        let (signing, aads): (Vec<usize>, Vec<Vec<u8>>) = body
            .keys
            .iter()
            .zip(aads)
            .enumerate()
            .filter(|(_, (k, _))| !k.material.as_slice().is_empty())
            .map(|(i, (_, aad))| (i, aad))
            .unzip();
        let items: Vec<WrapItem<'_>> = signing
            .iter()
            .zip(&aads)
            .map(|(&i, aad)| {
                let k = &body.keys[i];
                WrapItem::new(&k.id, k.material.as_slice(), aad)
            })
            .collect();
        let wrapped = wrapper.wrap_many(&items)?;
        drop(items);
        if wrapped.len() != signing.len() {
            return Err(Error::KeyCustody {
                custodian: format!("KEK {}", wrapper.kek_id()),
                reason: format!(
                    "the wrapper returned {} wrapped keys for {}",
                    wrapped.len(),
                    signing.len()
                ),
            });
        }
        for (i, w) in signing.into_iter().zip(wrapped) {
            let k = &mut body.keys[i];
            k.material = Bin::default();
            k.wrapped = Some(Bin::new(w));
        }
        body.wrapping = Some(Wrapping::of(wrapper));
        body.seal(wrapper, None)?;
        let hint = 64
            + body
                .keys
                .iter()
                .map(|k| {
                    320 + k.id.len()
                        + k.wrapped.as_ref().map_or(0, |w| w.as_slice().len())
                        + k.public_key.as_slice().len()
                })
                .sum::<usize>();
        Ok((body, hint))
    }

    /// Saves every key to `path` (mode 0600), crash-safely: after a crash at any
    /// point the file holds the previous keyring or this one, whole.
    ///
    /// The material is written in plaintext (version 2): anyone who can read
    /// the file holds the keys. See [`Keyring::save_wrapped`]. A keyring
    /// loaded from a wrapped keystore refuses (`KeyCustodyFailed`): save it
    /// with `save_wrapped`, or unwrap the file on purpose with
    /// [`Keyring::rewrap_keystore`].
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let wrapped_by = self
            .shared
            .wrapped_by
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some((kind, kek_id)) = wrapped_by {
            return Err(Error::KeyCustody {
                custodian: format!("KEK {kek_id}"),
                reason: format!(
                    "this keyring was loaded from a keystore wrapped by a {kind:?} KEK; save it with save_wrapped (saving it in plaintext would undo the wrapping; to do that on purpose, unwrap the file with rewrap_keystore)"
                ),
            });
        }
        self.save_plaintext(path.as_ref())
    }

    fn save_plaintext(&self, path: &Path) -> Result<()> {
        let (body, hint) = self.keystore_body();
        ENVELOPE.save_as(path, KEYSTORE_PLAINTEXT_VERSION, &body, hint)
    }

    /// Saves every key as [`Keyring::save`] does, with each key's material
    /// wrapped by `wrapper` (version 3): the file alone yields no key.
    /// Nothing is written unless every key wrapped.
    pub fn save_wrapped(&self, path: impl AsRef<Path>, wrapper: &dyn KeyWrapper) -> Result<()> {
        let (body, hint) = self.wrapped_body(wrapper)?;
        ENVELOPE.save_as(path.as_ref(), KEYSTORE_VERSION, &body, hint)
    }

    /// The keystore file's bytes with each key wrapped by `wrapper` (see
    /// [`Keyring::save_wrapped`]).
    pub fn to_wrapped_keystore_bytes(&self, wrapper: &dyn KeyWrapper) -> Result<Vec<u8>> {
        let (body, hint) = self.wrapped_body(wrapper)?;
        Ok(ENVELOPE.encode_as(KEYSTORE_VERSION, &body, hint)?.to_vec())
    }

    /// Converts the keystore at `path` in place, crash-safely: loads it with
    /// `options` (its KEK, if it is wrapped) and writes it back wrapped by
    /// `to`, or in plaintext (version 2) when `to` is `None`. Plaintext to
    /// wrapped, wrapped to another KEK, and wrapped back to plaintext are each
    /// this one call. When `to` is the KEK the keystore is already wrapped by,
    /// each key is rewrapped with [`KeyWrapper::rewrap`] (for Transit: its
    /// newest key version, by decrypting and encrypting, as Transit's own
    /// rewrap endpoint ignores associated data). Every key
    /// is checked as a load checks it before the file is replaced; on any
    /// failure the file is left as it was. Returns the number of keys.
    pub fn rewrap_keystore(
        path: impl AsRef<Path>,
        options: &KeystoreLoadOptions,
        to: Option<&dyn KeyWrapper>,
    ) -> Result<usize> {
        let path = path.as_ref();
        let access = if options.allow_readable_by_others {
            FileAccess::AnyMode
        } else {
            FileAccess::OwnerOnly
        };
        let (version, body): (u32, Body) = ENVELOPE.load_versioned(path, access)?;
        let same_kek = match (&body.wrapping, to) {
            (Some(w), Some(to)) => {
                version == KEYSTORE_VERSION && w.kind == to.kind() && w.kek_id == to.kek_id()
            }
            _ => false,
        };
        if let (true, Some(to)) = (same_kek, to) {
            let mut body = body;
            let wrapping = body.wrapping.clone().unwrap_or_default();
            wrapping.check(to, "keystore")?;
            // Only a body that verifies (or one of the format before, when
            // allowed: this is how it is sealed) is rewritten.
            let key = body.check_seal(to, options.allow_unauthenticated_metadata)?;
            for k in &mut body.keys {
                let Some(w) = k.wrapped.as_ref().filter(|w| !w.as_slice().is_empty()) else {
                    continue;
                };
                let aad = stored_aad(k)?;
                let again = to
                    .rewrap(w.as_slice(), &aad)
                    .map_err(|e| WrapItem::new(&k.id, &[], &aad).name_in(e))?;
                k.wrapped = Some(Bin::new(again));
            }
            body.seal(to, key)?;
            // Checked whole, as a load would, before anything is written.
            let kr = Keyring::from_body(version, body.clone(), Some(to), false, false)?;
            let hint = 64 + kr.len() * 1024;
            ENVELOPE.save_as(path, KEYSTORE_VERSION, &body, hint)?;
            return Ok(kr.len());
        }
        let kr = Keyring::from_body(
            version,
            body,
            options.wrapper.as_deref(),
            options.allow_plaintext,
            options.allow_unauthenticated_metadata,
        )?;
        match to {
            Some(to) => kr.save_wrapped(path, to)?,
            // Unwrapping is what the caller asked for.
            None => kr.save_plaintext(path)?,
        }
        Ok(kr.len())
    }

    /// Loads a keystore written by [`Keyring::save_wrapped`], unwrapping its
    /// keys with `wrapper` (see [`KeystoreLoadOptions::wrapper`]).
    pub fn load_wrapped(
        path: impl AsRef<Path>,
        wrapper: std::sync::Arc<dyn KeyWrapper>,
    ) -> Result<Keyring> {
        Keyring::load_with(path, &KeystoreLoadOptions::default().wrapper(wrapper))
    }

    /// Loads a keyring saved by [`Keyring::save`]. A truncated, corrupted or
    /// foreign file, or one from a newer format version, is an error; no partial
    /// keyring is ever returned. On Unix a file that group or others may read is
    /// refused (`IoError`, naming its mode), as ssh refuses such private keys:
    /// see [`Keyring::load_with`] to opt out.
    pub fn load(path: impl AsRef<Path>) -> Result<Keyring> {
        Keyring::load_with(path, &KeystoreLoadOptions::default())
    }

    /// [`Keyring::load`] with options.
    pub fn load_with(path: impl AsRef<Path>, options: &KeystoreLoadOptions) -> Result<Keyring> {
        let access = if options.allow_readable_by_others {
            FileAccess::AnyMode
        } else {
            FileAccess::OwnerOnly
        };
        let (version, body) = ENVELOPE.load_versioned(path.as_ref(), access)?;
        Keyring::from_body(
            version,
            body,
            options.wrapper.as_deref(),
            options.allow_plaintext,
            options.allow_unauthenticated_metadata,
        )
    }

    /// Decodes a keystore file's bytes (see [`Keyring::load`]).
    pub fn from_keystore_bytes(bytes: &[u8]) -> Result<Keyring> {
        Keyring::from_keystore_bytes_with(bytes, &KeystoreLoadOptions::default())
    }

    /// Decodes a keystore file's bytes with options (see
    /// [`Keyring::load_with`]; the file-mode option does not apply).
    pub fn from_keystore_bytes_with(
        bytes: &[u8],
        options: &KeystoreLoadOptions,
    ) -> Result<Keyring> {
        let (version, body) = ENVELOPE.decode_versioned(bytes)?;
        Keyring::from_body(
            version,
            body,
            options.wrapper.as_deref(),
            options.allow_plaintext,
            options.allow_unauthenticated_metadata,
        )
    }

    fn from_body(
        version: u32,
        body: Body,
        wrapper: Option<&dyn KeyWrapper>,
        allow_plaintext: bool,
        allow_unauthenticated: bool,
    ) -> Result<Keyring> {
        // The body as written, for its MAC, checked once every key unwrapped
        // (an error about one key names it).
        let sealed = (version >= KEYSTORE_VERSION).then(|| body.clone());
        let wrapped_by = body
            .wrapping
            .as_ref()
            .map(|w| (w.kind.clone(), w.kek_id.clone()));
        let policy = body
            .policy
            .as_ref()
            .map(|p| super::KeyringPolicy::from_parts(p, "Policy"))
            .transpose()?;
        let sequence = body.sequence;
        let body = unwrap_body(version, body, wrapper, allow_plaintext)?;
        if let (Some(sealed), Some(w)) = (&sealed, wrapper) {
            sealed.check_seal(w, allow_unauthenticated)?;
        }
        let entries = body
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| entry_of(version, i, k))
            .collect::<Result<Vec<_>>>()?;
        let kr = Keyring::new();
        kr.insert_entries(entries)?;
        kr.adopt_policy(policy);
        kr.adopt_sequence(sequence);
        if version >= KEYSTORE_VERSION {
            *kr.shared
                .wrapped_by
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = wrapped_by;
        }
        Ok(kr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyring::{KeyDerivation, KeyEntry, KeyId, KeyMaterial, KeyPurpose, KeyState, Meta};

    fn body_with(state: &str, material: Vec<u8>, derivation: &str) -> Vec<u8> {
        let kr = Keyring::from_keys([super::super::RootKey::new(
            KeyId::new("k1").unwrap(),
            KeyMaterial::from_slice(&[5; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Inactive,
            0,
        )])
        .unwrap();
        let public = kr.key_info("k1").unwrap().public_key.to_bytes();
        let body = Body {
            keys: vec![StoredKey {
                algorithm: "EdDSA".into(),
                create_time: 0,
                derivation: derivation.into(),
                id: "k1".into(),
                material: Bin::new(material),
                public_key: Bin::new(public),
                publish_time: 0,
                retired_time: 0,
                state: state.into(),
                wrapped: None,
                purpose: None,
            }],
            wrapping: None,
            policy: None,
            sequence: None,
            mac: None,
        };
        ENVELOPE.encode_as(2, &body, 512).unwrap().to_vec()
    }

    /// A verify-only key (no material) may never be one that signs: loading it
    /// as active used to make issuing reach an `unreachable!`.
    #[test]
    fn a_verify_only_key_that_would_sign_is_refused_on_load() {
        for state in ["active", "prepublished"] {
            let e = Keyring::from_keystore_bytes(&body_with(state, vec![], "")).unwrap_err();
            assert_eq!(e.code(), crate::error::ResultCode::DecodeError, "{e}");
            let text = e.to_string();
            assert!(
                text.contains("Keys[0].Material") && text.contains("no private material"),
                "{text}"
            );
        }
        for state in ["inactive", "deprecated"] {
            let kr = Keyring::from_keystore_bytes(&body_with(state, vec![], "")).unwrap();
            assert!(!kr.key_info("k1").unwrap().can_sign());
            assert_eq!(
                kr.active().unwrap_err().code(),
                crate::error::ResultCode::NoActiveKey
            );
        }
        // With its material, the same key loads active and signs.
        let kr =
            Keyring::from_keystore_bytes(&body_with("active", vec![5; 32], "hkdf-v1")).unwrap();
        kr.active().unwrap().sign(b"m").unwrap();
    }

    #[test]
    fn the_keyring_itself_refuses_a_verify_only_signer() {
        let kr = Keyring::new();
        let vk = Keyring::from_keys([super::super::RootKey::new(
            KeyId::new("k2").unwrap(),
            KeyMaterial::from_slice(&[6; 32]).unwrap(),
            KeyDerivation::HkdfV1,
            KeyState::Inactive,
            0,
        )])
        .unwrap()
        .key_info("k2")
        .unwrap()
        .public_key;
        let entry =
            KeyEntry::public_only(KeyId::new("k2").unwrap(), KeyPurpose::Bearer, vk).unwrap();
        let meta = Meta {
            state: KeyState::Active,
            create_time: 0,
            publish_time: 0,
            retired_time: 0,
        };
        let e = kr.insert_entries(vec![(entry, meta)]).unwrap_err();
        assert_eq!(e.code(), crate::error::ResultCode::InvalidArgument, "{e}");
        assert!(kr.is_empty());
    }
}
