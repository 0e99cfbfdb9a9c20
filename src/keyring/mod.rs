//! The keyring: root keys made into EdDSA, ES256 and RS256 signing keys, their
//! rotation states, publication (JWKS, OIDC discovery) and persistence.
//!
//! A [`Keyring`] is shared (`Clone` is an `Arc` clone) and safe to use from many
//! threads: signers and verifiers look keys up under a read lock while another
//! thread rotates under the write lock, so a signer always sees exactly one active
//! key per algorithm (or none, before the first). Every key has one
//! [`Algorithm`], fixed when it is made; states, prepublishing and rotation apply
//! per algorithm. The key pair is made once, when a key enters the keyring —
//! never per signature — and lookups by key ID are a single hash-map probe
//! whatever the number of keys.

mod active_cache;
mod bundle_sequence;
mod external;
mod handles;
mod inspect;
mod jwks;
mod jwks_import;
mod keystore;
mod keystore_seal;
mod lifecycle;
mod lookup;
mod policy;
mod public_key;
#[cfg(feature = "etcd")]
mod replica;
mod root_key;
pub(crate) mod sigcheck;
mod signer;
mod spki;
mod stored_key;
mod stored_policy;
mod vartime_table;

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{
    Arc, Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak,
};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

pub use crate::algorithm::{Algorithm, JwsAlgorithm, RsaKeySize};
pub use crate::key_id::{KeyId, MAX_KEY_ID_LEN};
pub use crate::purpose::KeyPurpose;
use crate::purpose::{PAIR_COUNT, pair_index};
pub use external::ExternalSigner;
pub(crate) use handles::KeyRef;
use handles::Signing;
pub use handles::{ActiveKey, VerifyingHandle};
#[cfg(feature = "etcd")]
pub(crate) use inspect::info_of_record;
pub use inspect::{KeystoreSummary, inspect_keystore};
pub use jwks::{Jwk, Jwks, OidcDiscovery};
pub(crate) use jwks_import::proof_key_checker;
pub use jwks_import::{ImportReport, SkippedJwk};
pub use keystore::{
    KEYSTORE_FORMAT, KEYSTORE_PLAINTEXT_VERSION, KEYSTORE_VERSION, KeystoreLoadOptions,
};
pub use policy::{
    RotationAction, RotationPolicy, next_planned_change, plan_rotation, plan_rotation_for,
    plan_rotation_for_purpose,
};
pub(crate) use public_key::Checker;
pub use public_key::{MAX_RSA_BITS, MIN_RSA_BITS, PublicKey};
#[cfg(feature = "etcd")]
pub(crate) use replica::ReplicaKey;
pub use root_key::{
    HKDF_V1_SALT, KeyDerivation, KeyMaterial, KeyState, MATERIAL_LEN, MAX_PKCS8_LEN, RootKey,
};
pub use signer::HKDF_P256_SALT;
use signer::Signer;
#[cfg(feature = "etcd")]
pub(crate) use stored_key::{StoredKey, purpose_of, stored_aad};
pub(crate) use stored_policy::PolicyRecord;
pub use stored_policy::{KeyringPolicy, PolicyOverrides};

impl Borrow<str> for KeyId {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

/// A key as the keyring holds it: the key pair, made once on insert.
pub(crate) struct KeyEntry {
    pub(crate) id: KeyId,
    /// What it signs (bearer tokens or WITs), fixed when the key is made.
    purpose: KeyPurpose,
    /// The public key, checked and ready to verify with.
    check: Checker,
    /// `None` for verify-only keys (imported from a JWKS). In an allocation of
    /// its own, so moving an entry (into a `Vec`, then an `Arc`) copies a
    /// pointer and never leaves secret bytes behind in freed memory.
    secret: Option<Arc<Secret>>,
    /// For a key whose private half lives outside this process (a KMS such
    /// as Vault/OpenBao Transit): what signs with it. `secret` is then `None`.
    external: Option<Arc<dyn ExternalSigner>>,
    /// The token headers this key signs under, encoded once by the token
    /// encoder at the key's first signature (the keyring does not read
    /// them; see [`ActiveKey::encoded_headers`]).
    headers: std::sync::OnceLock<EncodedHeaders>,
}

/// A signing key's JWS headers in their encoded form, one per token type
/// (made and read by `crate::jwt`).
pub(crate) type EncodedHeaders = [Box<str>; 2];

/// A key's secret half: zeroized on drop (ed25519-dalek's `SigningKey` and
/// [`KeyMaterial`] zeroize themselves; AWS-LC clears its keys when it frees
/// them).
struct Secret {
    signer: Signer,
    material: KeyMaterial,
    derivation: KeyDerivation,
}

/// A key's place in the rotation, changed only under the write lock.
#[derive(Clone, Copy)]
struct Meta {
    state: KeyState,
    create_time: i64,
    publish_time: i64,
    retired_time: i64,
}

impl Meta {
    fn of(key: &RootKey) -> Meta {
        Meta {
            state: key.state,
            create_time: key.create_time,
            publish_time: key.publish_time,
            retired_time: key.retired_time,
        }
    }
}

struct Slot {
    entry: Arc<KeyEntry>,
    meta: Meta,
}

#[derive(Default)]
struct Inner {
    keys: HashMap<KeyId, Slot>,
    /// The active key of each (purpose, algorithm) pair, by [`pair_index`].
    active: [Option<KeyId>; PAIR_COUNT],
}

struct Shared {
    inner: RwLock<Inner>,
    /// Bumped after every change; waiters for a key sleep on `changed_cv`.
    changes: Mutex<u64>,
    changed_cv: Condvar,
    /// Bumped whenever the keys may change (every write lock taken): a reader
    /// that saw the same generation before and after knows no key changed.
    generation: AtomicU64,
    /// The active keys as signers read them, without a shared write (see
    /// `active_cache`); emptied by every write.
    active_cache: active_cache::ActiveCache,
    /// Called when a verifier looks up a key ID this keyring does not hold.
    unknown_key_hook: RwLock<Option<UnknownKeyHook>>,
    /// The KEK (kind, ID) of the wrapped keystore this keyring was loaded
    /// from: [`Keyring::save`] then refuses to write it in plaintext.
    wrapped_by: Mutex<Option<(String, String)>>,
    /// Set for the copy of a replicated keyring (its source's name): local
    /// changes are refused, as the next change from the source would undo
    /// them.
    replica_of: std::sync::OnceLock<String>,
    /// The policy stored with the keys (see [`KeyringPolicy`]).
    policy: RwLock<Option<KeyringPolicy>>,
    /// Its longest token TTL in seconds, read by every issue without a lock
    /// (`u64::MAX`: no promise).
    longest_ttl: AtomicU64,
    /// The SPIFFE bundle sequence served, and for which contents.
    bundle_sequence: bundle_sequence::Recorded,
}

/// See [`Keyring::on_unknown_key`].
type UnknownKeyHook = Arc<dyn Fn(&KeyId) + Send + Sync>;

/// A shared, thread-safe keyring. Cloning is cheap and clones share the keys.
///
/// ```
/// use workload_identity::Keyring;
///
/// let now = 1_700_000_000; // Unix seconds
/// let keyring = Keyring::new();
/// let first = keyring.rotate(now)?; // a fresh active key
/// let second = keyring.rotate(now + 3600)?; // takes over; `first` still verifies
/// assert_eq!(keyring.active_id(), Some(second));
/// assert_eq!(keyring.jwks().keys.len(), 2); // both published
/// keyring.deprecate(&first, now + 7200)?; // out of the JWKS, verifies no more
/// assert_eq!(keyring.jwks().keys.len(), 1);
///
/// let dir = std::env::temp_dir().join(format!("wid-doc-keyring-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// keyring.save(dir.join("keystore"))?; // mode 0600, crash-safe
/// let loaded = Keyring::load(dir.join("keystore"))?;
/// assert_eq!(loaded.keys(), keyring.keys());
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Clone)]
pub struct Keyring {
    shared: Arc<Shared>,
}

/// Public facts about one key (never the material).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// The key ID (the `kid` of its tokens and JWKS entry).
    pub kid: KeyId,
    /// The key's algorithm (a verify-only one for some keys imported from
    /// another issuer; compare with an [`Algorithm`] directly).
    pub algorithm: JwsAlgorithm,
    /// What it signs: bearer tokens or WITs (and so where it is published).
    pub purpose: KeyPurpose,
    /// Its state.
    pub state: KeyState,
    /// How its seed was derived; `None` for verify-only keys.
    pub derivation: Option<KeyDerivation>,
    /// Creation time (Unix seconds).
    pub create_time: i64,
    /// For prepublished keys, when they become active (else 0).
    pub publish_time: i64,
    /// When it stopped signing (0 if it never did, or unknown).
    pub retired_time: i64,
    /// The public key.
    pub public_key: PublicKey,
    /// For a key held by an external signer (a KMS), where it lives, e.g.
    /// `transit:transit/wid-es256 v2`; `None` for keys held here.
    pub external: Option<String>,
}

impl KeyInfo {
    /// Whether this keyring can sign with this key: it holds the secret, or
    /// an external signer holds it, and its algorithm is one that signs (a
    /// verify-only key never does).
    pub fn can_sign(&self) -> bool {
        (self.derivation.is_some() || self.external.is_some()) && self.algorithm.signing().is_some()
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.read();
        f.debug_struct("Keyring")
            .field("keys", &inner.keys.len())
            .field("active", &inner.active)
            .finish()
    }
}

impl Default for Keyring {
    fn default() -> Self {
        Keyring::new()
    }
}

fn check_publish_at(now: i64, publish_at: i64) -> Result<()> {
    if publish_at < now {
        return Err(Error::invalid(
            "Keyring",
            "publish_at",
            format!(
                "must not be in the past: {} is before now ({})",
                crate::clock::rfc3339(publish_at),
                crate::clock::rfc3339(now)
            ),
        ));
    }
    Ok(())
}

fn key_error(kid: &str, reason: impl Into<String>) -> Error {
    Error::UnknownKey {
        kid: crate::error::truncate_for_message(kid),
        reason: reason.into(),
    }
}

fn bad_key_error(id: &KeyId, why: String) -> Error {
    Error::invalid("RootKey", "public_key", format!("key {id}: {why}"))
}

impl KeyEntry {
    fn from_root(key: &RootKey) -> Result<KeyEntry> {
        let (signer, public) = Signer::new(key.alg, key.derivation, &key.material, &key.id)
            .map_err(|why| {
                Error::invalid("RootKey", "material", format!("key {}: {why}", key.id))
            })?;
        Ok(KeyEntry {
            id: key.id.clone(),
            purpose: key.purpose,
            check: Checker::new(public).map_err(|why| bad_key_error(&key.id, why))?,
            secret: Some(Arc::new(Secret {
                signer,
                material: key.material.clone(),
                derivation: key.derivation,
            })),
            external: None,
            headers: Default::default(),
        })
    }

    fn public_only(id: KeyId, purpose: KeyPurpose, public: PublicKey) -> Result<KeyEntry> {
        let check = Checker::new(public).map_err(|why| bad_key_error(&id, why))?;
        Ok(KeyEntry {
            id,
            purpose,
            check,
            secret: None,
            external: None,
            headers: Default::default(),
        })
    }

    /// Whether this keyring can sign with this key (here or externally):
    /// never a key of a verify-only algorithm.
    pub(crate) fn can_sign(&self) -> bool {
        (self.secret.is_some() || self.external.is_some()) && self.signing_algorithm().is_some()
    }

    pub(crate) fn algorithm(&self) -> JwsAlgorithm {
        self.check.algorithm()
    }

    /// The algorithm it can sign with; `None` for a verify-only key.
    pub(crate) fn signing_algorithm(&self) -> Option<Algorithm> {
        self.algorithm().signing()
    }

    /// Its (purpose, algorithm) pair's place in per-pair tables; `None` for
    /// a verify-only key, which is never active.
    fn pair(&self) -> Option<usize> {
        Some(pair_index(self.purpose, self.signing_algorithm()?))
    }

    pub(crate) fn public_key(&self) -> &PublicKey {
        &self.check.public
    }
}

impl Slot {
    /// A handle if this key verifies (active, prepublished or inactive).
    fn verifying_handle(&self) -> Option<VerifyingHandle> {
        self.meta.state.verifies().then(|| VerifyingHandle {
            entry: Arc::clone(&self.entry),
            state: self.meta.state,
        })
    }

    fn info(&self) -> KeyInfo {
        KeyInfo {
            kid: self.entry.id.clone(),
            algorithm: self.entry.algorithm(),
            purpose: self.entry.purpose,
            state: self.meta.state,
            derivation: self.entry.secret.as_ref().map(|s| s.derivation),
            create_time: self.meta.create_time,
            publish_time: self.meta.publish_time,
            retired_time: self.meta.retired_time,
            public_key: self.entry.public_key().clone(),
            external: self.entry.external.as_ref().map(|e| e.describe()),
        }
    }

    fn root_key(&self) -> Option<RootKey> {
        let secret = self.entry.secret.as_ref()?;
        Some(RootKey {
            id: self.entry.id.clone(),
            // A key with a secret was made from a root key of a signing
            // algorithm, so this is always `Some`.
            alg: self.entry.signing_algorithm()?,
            purpose: self.entry.purpose,
            material: secret.material.clone(),
            derivation: secret.derivation,
            state: self.meta.state,
            create_time: self.meta.create_time,
            publish_time: self.meta.publish_time,
            retired_time: self.meta.retired_time,
        })
    }
}

impl Inner {
    fn check_insert(
        &self,
        id: &KeyId,
        purpose: KeyPurpose,
        alg: JwsAlgorithm,
        state: KeyState,
    ) -> Result<()> {
        if self.keys.contains_key(id) {
            return Err(Error::DuplicateKey {
                kid: id.to_string(),
            });
        }
        let signing = match alg.signing() {
            Some(signing) => signing,
            None if state.signs_or_will() => return Err(Error::verify_only(alg, id.as_str())),
            None => return Ok(()),
        };
        Error::unless_purpose_allows(purpose, signing, &format!("key {id}"))?;
        if state == KeyState::Active {
            if let Some(active) = &self.active[pair_index(purpose, signing)] {
                return Err(Error::invalid(
                    "Keyring",
                    "state",
                    format!(
                        "cannot insert {id} as a second active {alg} {purpose} key: {active} is active; insert it as inactive or prepublished, or rotate"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn put(&mut self, entry: KeyEntry, meta: Meta) {
        let id = entry.id.clone();
        if let (KeyState::Active, Some(pair)) = (meta.state, entry.pair()) {
            self.active[pair] = Some(id.clone());
        }
        self.keys.insert(
            id,
            Slot {
                entry: Arc::new(entry),
                meta,
            },
        );
    }

    /// Makes `id` the active key of its (purpose, algorithm) pair; the
    /// previous active key of that pair becomes inactive.
    fn activate(&mut self, id: &KeyId, now: i64) {
        let Some(pair) = self.keys.get(id).and_then(|s| s.entry.pair()) else {
            return;
        };
        if let Some(prev) = self.active[pair].take() {
            if let Some(slot) = self.keys.get_mut(&prev) {
                slot.meta.state = KeyState::Inactive;
                slot.meta.retired_time = now;
            }
        }
        if let Some(slot) = self.keys.get_mut(id) {
            slot.meta.state = KeyState::Active;
            slot.meta.retired_time = 0;
            self.active[pair] = Some(id.clone());
        }
    }

    fn is_active(&self, kid: &str) -> bool {
        self.active.iter().flatten().any(|a| a.as_str() == kid)
    }

    fn slot(&self, kid: &str) -> Result<&Slot> {
        self.keys
            .get(kid)
            .ok_or_else(|| key_error(kid, "no key with this ID is in the keyring"))
    }
}

impl Keyring {
    /// An empty keyring. Signing fails with `NoActiveKey` until a key is active.
    pub fn new() -> Keyring {
        Keyring {
            shared: Arc::new(Shared {
                inner: RwLock::new(Inner::default()),
                changes: Mutex::new(0),
                changed_cv: Condvar::new(),
                generation: AtomicU64::new(1),
                active_cache: Default::default(),
                unknown_key_hook: RwLock::new(None),
                wrapped_by: Mutex::new(None),
                replica_of: std::sync::OnceLock::new(),
                policy: RwLock::new(None),
                longest_ttl: AtomicU64::new(u64::MAX),
                bundle_sequence: Default::default(),
            }),
        }
    }

    /// A keyring holding `keys` (all or nothing).
    pub fn from_keys(keys: impl IntoIterator<Item = RootKey>) -> Result<Keyring> {
        let kr = Keyring::new();
        let keys: Vec<RootKey> = keys.into_iter().collect();
        kr.insert_all(&keys)?;
        Ok(kr)
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        // No code panics while holding the lock, but if a panic ever did, the
        // keyring's data is still consistent: every change is a single assignment.
        self.shared
            .inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        let guard = self
            .shared
            .inner
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        // Bumped with the lock held and before any change: a reader that
        // loads the new value and then takes the read lock sees the change.
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        self.shared.active_cache.clear();
        guard
    }

    /// The keyring's generation: it changes before any key is inserted,
    /// removed, replaced or changes state, and never goes back. Starts at 1, so
    /// 0 can stand for "not seen yet". Read it before building something from
    /// the keys (a JWKS, a cache): while it is unchanged, so are the keys
    /// that thing was built from. (Clones share it; another keyring has its
    /// own.)
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// `InvalidArgument` for the copy of a replicated keyring.
    fn refuse_if_replica(&self) -> Result<()> {
        match self.shared.replica_of.get() {
            None => Ok(()),
            Some(source) => Err(Error::invalid(
                "Keyring",
                "keys",
                format!(
                    "this keyring is the copy of the replicated keyring at {source}: change its keys through EtcdKeyring (rotate, promote, deprecate, remove), not here (the next change from etcd would undo a local one)"
                ),
            )),
        }
    }

    /// Wakes everything waiting for a key.
    fn changed(&self) {
        let mut n = self
            .shared
            .changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *n = n.wrapping_add(1);
        self.shared.changed_cv.notify_all();
    }

    /// Inserts a key. A duplicate ID is `DuplicateKey`; a second active key of
    /// its algorithm, material that cannot make a key of its algorithm (an RSA
    /// key under 2048 bits or with e != 65537, say), or a weak public key is
    /// `InvalidArgument`. On error the keyring is unchanged.
    pub fn insert(&self, key: RootKey) -> Result<()> {
        self.insert_all(std::slice::from_ref(&key))
    }

    /// Inserts several keys atomically: all of them, or none on error.
    pub fn insert_all(&self, keys: &[RootKey]) -> Result<()> {
        // Derive outside the lock; it is the expensive part.
        let entries = keys
            .iter()
            .map(|k| Ok((KeyEntry::from_root(k)?, Meta::of(k))))
            .collect::<Result<Vec<_>>>()?;
        self.insert_entries(entries)
    }

    /// Adds verify-only keys, each of its purpose (public keys only; they can
    /// never sign), inactive.
    pub(crate) fn insert_public_keys(
        &self,
        keys: Vec<(KeyId, PublicKey, KeyPurpose)>,
    ) -> Result<()> {
        let meta = Meta {
            state: KeyState::Inactive,
            create_time: 0,
            publish_time: 0,
            retired_time: 0,
        };
        let entries = keys
            .into_iter()
            .map(|(id, public, purpose)| Ok((KeyEntry::public_only(id, purpose, public)?, meta)))
            .collect::<Result<Vec<_>>>()?;
        self.insert_entries(entries)
    }

    /// Inserts prepared entries: all, or none if any ID is taken (in the keyring
    /// or twice in `entries`) or more than one key would be active.
    fn insert_entries(&self, entries: Vec<(KeyEntry, Meta)>) -> Result<()> {
        self.refuse_if_replica()?;
        {
            let mut inner = self.write();
            let mut seen: Vec<&KeyId> = Vec::with_capacity(entries.len());
            let mut new_active: [Option<&KeyId>; PAIR_COUNT] = Default::default();
            for (entry, meta) in &entries {
                let alg = entry.algorithm();
                inner.check_insert(&entry.id, entry.purpose, alg, meta.state)?;
                if !entry.can_sign() && meta.state.signs_or_will() {
                    return Err(Error::invalid(
                        "Keyring",
                        "state",
                        format!(
                            "key {} is {} but has no private material: a verify-only key can only be inactive or deprecated",
                            entry.id,
                            meta.state.name()
                        ),
                    ));
                }
                if seen.contains(&&entry.id) {
                    return Err(Error::DuplicateKey {
                        kid: entry.id.to_string(),
                    });
                }
                seen.push(&entry.id);
                if let (KeyState::Active, Some(pair)) = (meta.state, entry.pair()) {
                    if let Some(first) = new_active[pair] {
                        return Err(Error::invalid(
                            "Keyring",
                            "state",
                            format!(
                                "cannot insert two active {alg} {} keys ({first} and {})",
                                entry.purpose, entry.id
                            ),
                        ));
                    }
                    new_active[pair] = Some(&entry.id);
                }
            }
            for (entry, meta) in entries {
                inner.put(entry, meta);
            }
        }
        self.changed();
        Ok(())
    }
}
