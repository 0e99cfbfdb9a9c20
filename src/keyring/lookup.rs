//! Reading a keyring: the active key of an algorithm, a key to verify with
//! (waiting a bounded time for one that is not there yet), and the public
//! facts about its keys.

use super::*;

impl Keyring {
    /// The active EdDSA key, or `NoActiveKey`.
    pub fn active(&self) -> Result<ActiveKey> {
        self.active_for(Algorithm::EdDsa)
    }

    /// The active bearer key of `alg`, or `NoActiveKey`.
    pub fn active_for(&self, alg: Algorithm) -> Result<ActiveKey> {
        self.active_for_purpose(KeyPurpose::Bearer, alg)
    }

    /// The active key of the (`purpose`, `alg`) pair, or `NoActiveKey` (whose
    /// message says how to make one).
    pub fn active_for_purpose(&self, purpose: KeyPurpose, alg: Algorithm) -> Result<ActiveKey> {
        // Insertion refuses an active key that cannot sign; if one ever could
        // not, there is nothing to sign with and this is `NoActiveKey`.
        self.with_active(purpose, alg, |key| Ok(key.clone()))
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

    /// The ID of the active bearer key of `alg`, if any.
    pub fn active_id_for(&self, alg: Algorithm) -> Option<KeyId> {
        self.active_id_for_purpose(KeyPurpose::Bearer, alg)
    }

    /// The ID of the active key of the (`purpose`, `alg`) pair, if any.
    pub fn active_id_for_purpose(&self, purpose: KeyPurpose, alg: Algorithm) -> Option<KeyId> {
        self.read().active[pair_index(purpose, alg)].clone()
    }

    /// The algorithms of the bearer keys that verify (in the JWKS and the
    /// discovery document), in [`Algorithm`] order.
    pub fn algorithms(&self) -> Vec<Algorithm> {
        self.algorithms_for(KeyPurpose::Bearer)
    }

    /// The algorithms of the keys of `purpose` that verify, in
    /// [`Algorithm`] order.
    pub fn algorithms_for(&self, purpose: KeyPurpose) -> Vec<Algorithm> {
        let inner = self.read();
        Algorithm::ALL
            .iter()
            .copied()
            .filter(|alg| {
                inner.keys.values().any(|s| {
                    s.meta.state.verifies()
                        && s.entry.algorithm() == *alg
                        && s.entry.purpose == purpose
                })
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
