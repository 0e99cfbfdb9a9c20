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
mod external;
mod jwks;
mod key_id;
mod keystore;
mod policy;
mod public_key;
#[cfg(feature = "etcd")]
mod replica;
mod root_key;
pub(crate) mod sigcheck;
mod signer;
mod spki;
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

use crate::algorithm::ALGORITHM_COUNT;
pub use crate::algorithm::{Algorithm, RsaKeySize};
pub use external::ExternalSigner;
pub(crate) use jwks::proof_key_checker;
pub use jwks::{ImportReport, Jwk, Jwks, OidcDiscovery, SkippedJwk};
pub use key_id::{KeyId, MAX_KEY_ID_LEN};
pub use keystore::{
    KEYSTORE_FORMAT, KEYSTORE_PLAINTEXT_VERSION, KEYSTORE_VERSION, KeystoreLoadOptions,
};
#[cfg(feature = "etcd")]
pub(crate) use keystore::{StoredKey, stored_aad};
pub use policy::{RotationAction, RotationPolicy, plan_rotation, plan_rotation_for};
pub(crate) use public_key::Checker;
pub use public_key::{MAX_RSA_BITS, MIN_RSA_BITS, PublicKey};
#[cfg(feature = "etcd")]
pub(crate) use replica::ReplicaKey;
pub use root_key::{
    HKDF_V1_SALT, KeyDerivation, KeyMaterial, KeyState, MATERIAL_LEN, MAX_PKCS8_LEN, RootKey,
};
pub use signer::HKDF_P256_SALT;
use signer::Signer;

impl Borrow<str> for KeyId {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

/// A key as the keyring holds it: the key pair, made once on insert.
pub(crate) struct KeyEntry {
    pub(crate) id: KeyId,
    /// The public key, checked and ready to verify with.
    check: Checker,
    /// `None` for verify-only keys (imported from a JWKS). In an allocation of
    /// its own, so moving an entry (into a `Vec`, then an `Arc`) copies a
    /// pointer and never leaves secret bytes behind in freed memory.
    secret: Option<Arc<Secret>>,
    /// For a key whose private half lives outside this process (a KMS such
    /// as Vault/OpenBao Transit): what signs with it. `secret` is then `None`.
    external: Option<Arc<dyn ExternalSigner>>,
}

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
    /// The active key of each algorithm, by [`Algorithm::index`].
    active: [Option<KeyId>; ALGORITHM_COUNT],
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
    /// The key's algorithm.
    pub algorithm: Algorithm,
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
    /// an external signer holds it.
    pub fn can_sign(&self) -> bool {
        self.derivation.is_some() || self.external.is_some()
    }
}

/// An active key, ready to sign. Holding it keeps the key alive even if it is
/// rotated out meanwhile; the signature still verifies while the key is inactive.
/// It can only be made from a key that holds its secret.
#[derive(Clone)]
pub struct ActiveKey {
    entry: Arc<KeyEntry>,
    signing: Signing,
}

/// What signs for an [`ActiveKey`].
#[derive(Clone)]
enum Signing {
    Local(Arc<Secret>),
    External(Arc<dyn ExternalSigner>),
}

impl ActiveKey {
    /// The key ID to put in the token's `kid`.
    pub fn id(&self) -> &KeyId {
        &self.entry.id
    }

    /// The key's algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.entry.check.algorithm()
    }

    /// Signs `message` with the key's algorithm: Ed25519 (RFC 8032), ECDSA
    /// P-256 with SHA-256 as `r || s` (RFC 7518 3.4), or RSASSA-PKCS1-v1_5 with
    /// SHA-256. Only a failure inside the crypto library is an error.
    ///
    /// A key held by an external signer signs there (a network round trip),
    /// and its signature is checked here against the key's public key before
    /// it is returned: a KMS that answers with another key's signature, or a
    /// corrupted one, yields `KeyCustodyFailed`, never a token.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>> {
        match &self.signing {
            Signing::Local(secret) => secret.signer.sign(message).map_err(|why| Error::Panic {
                message: format!("signing with key {} failed: {why}", self.entry.id),
            }),
            Signing::External(signer) => {
                let sig = signer.sign(message)?;
                if !self.entry.check.verify(message, &sig) {
                    return Err(Error::KeyCustody {
                        custodian: signer.describe(),
                        reason: format!(
                            "the external signer's signature does not verify under key {}'s public key: the signer holds another key, or answered wrongly",
                            self.entry.id
                        ),
                    });
                }
                Ok(sig)
            }
        }
    }

    /// The public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.entry.check.public
    }
}

impl fmt::Debug for ActiveKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ActiveKey({})", self.entry.id)
    }
}

/// A key that verifies (active, prepublished or inactive).
#[derive(Clone)]
pub struct VerifyingHandle {
    entry: Arc<KeyEntry>,
    state: KeyState,
}

impl VerifyingHandle {
    /// The key ID.
    pub fn id(&self) -> &KeyId {
        &self.entry.id
    }

    /// The key's state when it was looked up.
    pub fn state(&self) -> KeyState {
        self.state
    }

    /// The key's algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.entry.check.algorithm()
    }

    /// The public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.entry.check.public
    }

    /// Whether `signature` is a valid signature of `message` under this key,
    /// with its algorithm's exact acceptance: Ed25519 as ed25519-dalek's
    /// `verify_strict` (small-order `R` and non-canonical `s` rejected, with this
    /// key's precomputed tables); ES256 64 bytes with `r`, `s` in `[1, n-1]`
    /// (high `s` accepted); RS256 exactly as long as the modulus.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        self.entry.check.verify(message, signature)
    }

    /// The Ed25519 check with its precomputed tables, for batching; `None` for
    /// other algorithms.
    pub(crate) fn ed25519(&self) -> Option<&sigcheck::SigCheck> {
        self.entry.check.ed25519()
    }
}

/// Which key entry verified something, compared by identity and never by kid:
/// a kid removed and re-inserted with other material is another key. Holds no
/// key data (a weak reference keeps only the allocation, so its address cannot
/// be reused by another entry while this exists).
#[derive(Clone)]
pub(crate) struct KeyRef(Weak<KeyEntry>);

impl KeyRef {
    /// A reference no key matches.
    #[cfg(test)]
    pub(crate) fn none() -> KeyRef {
        KeyRef(Weak::new())
    }
}

impl VerifyingHandle {
    /// This key, by identity.
    pub(crate) fn key_ref(&self) -> KeyRef {
        KeyRef(Arc::downgrade(&self.entry))
    }

    /// Whether this handle is the key `r` refers to (the same entry, not just
    /// the same kid).
    pub(crate) fn is(&self, r: &KeyRef) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.entry), r.0.as_ptr())
    }
}

impl fmt::Debug for VerifyingHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "VerifyingHandle({}, {})",
            self.entry.id,
            self.state.name()
        )
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
            format!("must not be in the past: publish_at {publish_at} < now {now}"),
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
            check: Checker::new(public).map_err(|why| bad_key_error(&key.id, why))?,
            secret: Some(Arc::new(Secret {
                signer,
                material: key.material.clone(),
                derivation: key.derivation,
            })),
            external: None,
        })
    }

    fn public_only(id: KeyId, public: PublicKey) -> Result<KeyEntry> {
        let check = Checker::new(public).map_err(|why| bad_key_error(&id, why))?;
        Ok(KeyEntry {
            id,
            check,
            secret: None,
            external: None,
        })
    }

    /// Whether this keyring can sign with this key (here or externally).
    pub(crate) fn can_sign(&self) -> bool {
        self.secret.is_some() || self.external.is_some()
    }

    pub(crate) fn algorithm(&self) -> Algorithm {
        self.check.algorithm()
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
            alg: self.entry.algorithm(),
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
    fn check_insert(&self, id: &KeyId, alg: Algorithm, state: KeyState) -> Result<()> {
        if self.keys.contains_key(id) {
            return Err(Error::DuplicateKey {
                kid: id.to_string(),
            });
        }
        if state == KeyState::Active {
            if let Some(active) = &self.active[alg.index()] {
                return Err(Error::invalid(
                    "Keyring",
                    "state",
                    format!(
                        "cannot insert {id} as a second active {alg} key: {active} is active; insert it as inactive or prepublished, or rotate"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn put(&mut self, entry: KeyEntry, meta: Meta) {
        let id = entry.id.clone();
        if meta.state == KeyState::Active {
            self.active[entry.algorithm().index()] = Some(id.clone());
        }
        self.keys.insert(
            id,
            Slot {
                entry: Arc::new(entry),
                meta,
            },
        );
    }

    /// Makes `id` the active key of its algorithm; the previous active key of
    /// that algorithm becomes inactive.
    fn activate(&mut self, id: &KeyId, now: i64) {
        let Some(alg) = self.keys.get(id).map(|s| s.entry.algorithm()) else {
            return;
        };
        if let Some(prev) = self.active[alg.index()].take() {
            if let Some(slot) = self.keys.get_mut(&prev) {
                slot.meta.state = KeyState::Inactive;
                slot.meta.retired_time = now;
            }
        }
        if let Some(slot) = self.keys.get_mut(id) {
            slot.meta.state = KeyState::Active;
            slot.meta.retired_time = 0;
            self.active[alg.index()] = Some(id.clone());
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

    /// Adds verify-only keys (public keys only; they can never sign), inactive.
    pub(crate) fn insert_public_keys(&self, keys: Vec<(KeyId, PublicKey)>) -> Result<()> {
        let meta = Meta {
            state: KeyState::Inactive,
            create_time: 0,
            publish_time: 0,
            retired_time: 0,
        };
        let entries = keys
            .into_iter()
            .map(|(id, public)| Ok((KeyEntry::public_only(id, public)?, meta)))
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
            let mut new_active: [Option<&KeyId>; ALGORITHM_COUNT] = Default::default();
            for (entry, meta) in &entries {
                let alg = entry.algorithm();
                inner.check_insert(&entry.id, alg, meta.state)?;
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
                if meta.state == KeyState::Active {
                    if let Some(first) = new_active[alg.index()] {
                        return Err(Error::invalid(
                            "Keyring",
                            "state",
                            format!(
                                "cannot insert two active {alg} keys ({first} and {})",
                                entry.id
                            ),
                        ));
                    }
                    new_active[alg.index()] = Some(&entry.id);
                }
            }
            for (entry, meta) in entries {
                inner.put(entry, meta);
            }
        }
        self.changed();
        Ok(())
    }

    /// Rotates EdDSA: a new key with fresh OS-random material becomes active,
    /// and the previous active EdDSA key becomes inactive (it keeps verifying).
    /// Returns the new ID.
    ///
    /// This changes the keyring in memory only: **save it** ([`Keyring::save`],
    /// or `save_wrapped`) before the new key signs anything, or a restart
    /// loads the old keys and every token the new key signed stops verifying.
    /// (`wid keyring rotate` and the replicated keyring save for you.)
    pub fn rotate(&self, now: i64) -> Result<KeyId> {
        self.rotate_alg(Algorithm::EdDsa, now)
    }

    /// Rotates the keys of `alg`: a new key (fresh material; a 2048-bit RSA key
    /// for RS256) becomes the active key of `alg`, and the previous one becomes
    /// inactive. Keys of other algorithms are untouched. Returns the new ID.
    /// In memory only, as [`Keyring::rotate`]: save the keyring afterwards.
    pub fn rotate_alg(&self, alg: Algorithm, now: i64) -> Result<KeyId> {
        self.rotate_to(RootKey::generate_for(alg, KeyState::Inactive, now)?, now)
    }

    /// Rotates RS256 to a fresh RSA key of `size`.
    pub fn rotate_rsa(&self, size: RsaKeySize, now: i64) -> Result<KeyId> {
        self.rotate_to(RootKey::generate_rsa(size, KeyState::Inactive, now)?, now)
    }

    fn rotate_to(&self, key: RootKey, now: i64) -> Result<KeyId> {
        self.refuse_if_replica()?;
        let id = key.id.clone();
        let entry = KeyEntry::from_root(&key)?;
        {
            let mut inner = self.write();
            inner.check_insert(&id, key.alg, KeyState::Inactive)?;
            inner.put(
                entry,
                Meta {
                    state: KeyState::Inactive,
                    create_time: now,
                    publish_time: 0,
                    retired_time: 0,
                },
            );
            inner.activate(&id, now);
        }
        self.changed();
        Ok(id)
    }

    /// Adds a new EdDSA key that is published (in the JWKS, verifying) but does
    /// not sign until `publish_at`, when [`Keyring::promote_due`] makes it active.
    pub fn prepublish(&self, now: i64, publish_at: i64) -> Result<KeyId> {
        self.prepublish_alg(Algorithm::EdDsa, now, publish_at)
    }

    /// [`Keyring::prepublish`] for a key of `alg`; at `publish_at` it replaces
    /// the active key of `alg`.
    pub fn prepublish_alg(&self, alg: Algorithm, now: i64, publish_at: i64) -> Result<KeyId> {
        check_publish_at(now, publish_at)?;
        self.insert_prepublished(
            RootKey::generate_for(alg, KeyState::Prepublished, now)?,
            publish_at,
        )
    }

    /// [`Keyring::prepublish_alg`] for RS256 with a fresh RSA key of `size`.
    pub fn prepublish_rsa(&self, size: RsaKeySize, now: i64, publish_at: i64) -> Result<KeyId> {
        check_publish_at(now, publish_at)?;
        self.insert_prepublished(
            RootKey::generate_rsa(size, KeyState::Prepublished, now)?,
            publish_at,
        )
    }

    fn insert_prepublished(&self, key: RootKey, publish_at: i64) -> Result<KeyId> {
        let key = key.with_publish_time(publish_at);
        let id = key.id.clone();
        self.insert(key)?;
        Ok(id)
    }

    /// Makes `kid` the active key of its algorithm now (a prepublished key
    /// early, or an inactive one back); the previous active key of that
    /// algorithm becomes inactive.
    pub fn promote(&self, kid: &str, now: i64) -> Result<()> {
        self.refuse_if_replica()?;
        {
            let mut inner = self.write();
            let slot = inner.slot(kid)?;
            match slot.meta.state {
                KeyState::Active => return Ok(()),
                KeyState::Deprecated => {
                    return Err(Error::invalid(
                        "Keyring",
                        "state",
                        format!("cannot promote {kid}: it is deprecated"),
                    ));
                }
                KeyState::Prepublished | KeyState::Inactive => {}
            }
            if !slot.entry.can_sign() {
                return Err(Error::invalid(
                    "Keyring",
                    "state",
                    format!("cannot promote {kid}: it is a verify-only key without material"),
                ));
            }
            let id = slot.entry.id.clone();
            inner.activate(&id, now);
        }
        self.changed();
        Ok(())
    }

    /// Promotes every prepublished key whose publish time has come, earliest
    /// first (ties by ID), so the latest due key of each algorithm ends up
    /// active. Returns the IDs promoted, in order. The copy of a replicated
    /// keyring promotes nothing (its source's rotator does).
    pub fn promote_due(&self, now: i64) -> Vec<KeyId> {
        if self.refuse_if_replica().is_err() {
            return Vec::new();
        }
        let promoted = {
            let mut inner = self.write();
            let mut due: Vec<(i64, KeyId)> = inner
                .keys
                .values()
                // Prepublished keys always hold their secret (insertion
                // refuses a verify-only one), so each can sign once active.
                .filter(|s| s.meta.state == KeyState::Prepublished && s.meta.publish_time <= now)
                .map(|s| (s.meta.publish_time, s.entry.id.clone()))
                .collect();
            due.sort();
            for (_, id) in &due {
                inner.activate(id, now);
            }
            due.into_iter().map(|(_, id)| id).collect::<Vec<_>>()
        };
        if !promoted.is_empty() {
            self.changed();
        }
        promoted
    }

    /// Deprecates `kid`: it no longer verifies and leaves the JWKS. An active
    /// key cannot be deprecated (rotate first).
    pub fn deprecate(&self, kid: &str, now: i64) -> Result<()> {
        self.refuse_if_replica()?;
        {
            let mut inner = self.write();
            let active = inner.is_active(kid);
            let slot = inner.slot(kid)?;
            if active {
                return Err(Error::invalid(
                    "Keyring",
                    "state",
                    format!("cannot deprecate {kid}: it is the active key; rotate first"),
                ));
            }
            let id = slot.entry.id.clone();
            if let Some(slot) = inner.keys.get_mut(&id) {
                if slot.meta.retired_time == 0 {
                    slot.meta.retired_time = now;
                }
                slot.meta.state = KeyState::Deprecated;
            }
        }
        self.changed();
        Ok(())
    }

    /// Removes `kid`. The active key cannot be removed (rotate first).
    pub fn remove(&self, kid: &str) -> Result<()> {
        self.refuse_if_replica()?;
        {
            let mut inner = self.write();
            inner.slot(kid)?;
            if inner.is_active(kid) {
                return Err(Error::invalid(
                    "Keyring",
                    "state",
                    format!("cannot remove {kid}: it is the active key; rotate first"),
                ));
            }
            inner.keys.remove(kid);
        }
        self.changed();
        Ok(())
    }

    /// The active EdDSA key, or `NoActiveKey`.
    pub fn active(&self) -> Result<ActiveKey> {
        self.active_for(Algorithm::EdDsa)
    }

    /// The active key of `alg`, or `NoActiveKey`.
    pub fn active_for(&self, alg: Algorithm) -> Result<ActiveKey> {
        // Insertion refuses an active key that cannot sign; if one ever could
        // not, there is nothing to sign with and this is `NoActiveKey`.
        self.with_active(alg, |key| Ok(key.clone()))
    }

    /// The key `kid` if it verifies (active, prepublished or inactive); one hash
    /// lookup.
    pub fn verifying_key(&self, kid: &str) -> Option<VerifyingHandle> {
        self.read().keys.get(kid)?.verifying_handle()
    }

    /// Like [`Keyring::verifying_key`], but when the key is absent waits up to
    /// `timeout` for it to be inserted (a replica that has not seen a new key
    /// yet). A deprecated key is not waited for. A `timeout` too long for the
    /// clock (`Duration::MAX`) saturates.
    pub fn wait_for_key(&self, kid: &str, timeout: Duration) -> Option<VerifyingHandle> {
        self.wait_for_key_until(kid, crate::deadline::deadline_after(timeout))
    }

    /// [`Keyring::wait_for_key`] with an absolute deadline (a batch shares one).
    pub(crate) fn wait_for_key_until(
        &self,
        kid: &str,
        deadline: Instant,
    ) -> Option<VerifyingHandle> {
        let mut changes = self
            .shared
            .changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            let seen = *changes;
            {
                let inner = self.read();
                if let Some(slot) = inner.keys.get(kid) {
                    return slot.verifying_handle();
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            changes = self
                .shared
                .changed_cv
                .wait_timeout_while(changes, left, |n| *n == seen)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Registers `hook`, called when a verifier looks up a well-formed key ID
    /// this keyring has never held (not a deprecated one), before it waits for
    /// the key to arrive: a source of keys (a remote JWKS) can fetch it then,
    /// and the waiting verifier sees it as soon as it is inserted. The hook
    /// runs on the verifying thread and must not block; it replaces any
    /// earlier hook. To avoid a reference cycle it should hold this keyring
    /// (or whatever owns it) only weakly.
    pub fn on_unknown_key(&self, hook: impl Fn(&KeyId) + Send + Sync + 'static) {
        let mut slot = self
            .shared
            .unknown_key_hook
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *slot = Some(Arc::new(hook));
    }

    /// Tells the hook (if any) that `kid` was looked up and is unknown.
    pub(crate) fn notify_unknown_key(&self, kid: &str) {
        let hook = self
            .shared
            .unknown_key_hook
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let (Some(hook), Ok(id)) = (hook, KeyId::new(kid)) {
            hook(&id);
        }
    }

    /// Facts about `kid`, whatever its state.
    pub fn key_info(&self, kid: &str) -> Option<KeyInfo> {
        self.read().keys.get(kid).map(Slot::info)
    }

    /// Facts about every key, oldest first (by create time, then ID).
    pub fn keys(&self) -> Vec<KeyInfo> {
        let mut v: Vec<KeyInfo> = self.read().keys.values().map(Slot::info).collect();
        v.sort_by(|a, b| (a.create_time, &a.kid).cmp(&(b.create_time, &b.kid)));
        v
    }

    /// The ID of the active EdDSA key, if any.
    pub fn active_id(&self) -> Option<KeyId> {
        self.active_id_for(Algorithm::EdDsa)
    }

    /// The ID of the active key of `alg`, if any.
    pub fn active_id_for(&self, alg: Algorithm) -> Option<KeyId> {
        self.read().active[alg.index()].clone()
    }

    /// The algorithms of the keys that verify (in the JWKS), in
    /// [`Algorithm`] order.
    pub fn algorithms(&self) -> Vec<Algorithm> {
        let inner = self.read();
        Algorithm::ALL
            .iter()
            .copied()
            .filter(|alg| {
                inner
                    .keys
                    .values()
                    .any(|s| s.meta.state.verifies() && s.entry.algorithm() == *alg)
            })
            .collect()
    }

    /// Number of keys, in any state.
    pub fn len(&self) -> usize {
        self.read().keys.len()
    }

    /// Whether the keyring holds no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every key with its material (if held), oldest first, for persistence.
    pub(crate) fn stored(&self) -> Vec<(KeyInfo, Option<KeyMaterial>)> {
        let inner = self.read();
        let mut v: Vec<(KeyInfo, Option<KeyMaterial>)> = inner
            .keys
            .values()
            .map(|s| {
                (
                    s.info(),
                    s.entry.secret.as_ref().map(|k| k.material.clone()),
                )
            })
            .collect();
        v.sort_by(|a, b| (a.0.create_time, &a.0.kid).cmp(&(b.0.create_time, &b.0.kid)));
        v
    }

    /// The root key `kid` with its material, if this keyring holds the material.
    pub fn root_key(&self, kid: &str) -> Option<RootKey> {
        self.read().keys.get(kid).and_then(Slot::root_key)
    }
}
