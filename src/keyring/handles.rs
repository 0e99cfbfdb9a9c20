//! The handles a keyring hands out: [`ActiveKey`] (a key to sign with, kept
//! alive while held) and [`VerifyingHandle`] (a key to verify with), and the
//! weak reference a cache keeps to a key.

use super::*;

/// An active key, ready to sign. Holding it keeps the key alive even if it is
/// rotated out meanwhile; the signature still verifies while the key is inactive.
/// It can only be made from a key that holds its secret.
#[derive(Clone)]
pub struct ActiveKey {
    pub(super) entry: Arc<KeyEntry>,
    /// The entry's algorithm, a signing one (only a key of a signing
    /// algorithm is ever active).
    pub(super) alg: Algorithm,
    pub(super) signing: Signing,
}

/// What signs for an [`ActiveKey`].
#[derive(Clone)]
pub(super) enum Signing {
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
        self.alg
    }

    /// What the key signs: bearer tokens or WITs.
    pub fn purpose(&self) -> KeyPurpose {
        self.entry.purpose
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
        self.sign_with(message, <[u8]>::to_vec)
    }

    /// [`ActiveKey::sign`], handing the signature to `f` where it was made
    /// (no allocation for a local Ed25519 or ECDSA key).
    pub(crate) fn sign_with<R>(&self, message: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        match &self.signing {
            Signing::Local(secret) => {
                secret
                    .signer
                    .sign_with(message, f)
                    .map_err(|why| Error::Panic {
                        message: format!("signing with key {} failed: {why}", self.entry.id),
                    })
            }
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
                Ok(f(&sig))
            }
        }
    }

    /// The public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.entry.check.public
    }

    /// The key's encoded token headers, made by `make` at the key's first
    /// use and kept with the key (its kid and algorithm never change).
    pub(crate) fn encoded_headers(
        &self,
        make: impl FnOnce() -> super::EncodedHeaders,
    ) -> &super::EncodedHeaders {
        self.entry.headers.get_or_init(make)
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
    pub(super) entry: Arc<KeyEntry>,
    pub(super) state: KeyState,
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

    /// What the key signs: bearer tokens or WITs.
    pub fn purpose(&self) -> KeyPurpose {
        self.entry.purpose
    }

    /// The key's algorithm: the header `alg` its tokens must name. A key
    /// imported from another issuer may have a verify-only one
    /// ([`JwsAlgorithm::is_verify_only`]).
    pub fn algorithm(&self) -> JwsAlgorithm {
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
