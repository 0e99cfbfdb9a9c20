//! Where a trusted issuer's keys come from: anything that keeps a
//! [`Keyring`] up to date.

use std::any::Any;
use std::fmt;

use crate::keyring::Keyring;

/// A source of one issuer's verification keys: a [`Keyring`] handle that
/// the source keeps up to date in place (keys inserted, rotated or removed
/// in it are seen by every verifier over it), and whatever must stay alive
/// for it to stay up to date.
///
/// A [`TrustSet`](crate::TrustSet) keeps each issuer's source alive as long
/// as the trust set lives, and verifies with [`KeySource::keyring`] only.
/// Implemented for a plain [`Keyring`], for a
/// [`RemoteJwks`](crate::RemoteJwks) and a
/// [`SpiffeBundleSource`](crate::SpiffeBundleSource) (feature `remote-jwks`:
/// a peer trust domain's bundle endpoint), and for [`OwnedKeyring`] (a
/// keyring plus any owner object, e.g. a refresher thread's handle);
/// implement it for any other source that keeps a keyring in step.
pub trait KeySource: Send + Sync + 'static {
    /// The keyring this source keeps up to date (a shared handle: a clone
    /// of it sees every later change).
    fn keyring(&self) -> Keyring;
}

impl KeySource for Keyring {
    fn keyring(&self) -> Keyring {
        self.clone()
    }
}

#[cfg(feature = "remote-jwks")]
impl KeySource for crate::remote_jwks::RemoteJwks {
    fn keyring(&self) -> Keyring {
        crate::remote_jwks::RemoteJwks::keyring(self).clone()
    }
}

#[cfg(feature = "remote-jwks")]
impl KeySource for crate::remote_jwks::SpiffeBundleSource {
    fn keyring(&self) -> Keyring {
        crate::remote_jwks::SpiffeBundleSource::keyring(self).clone()
    }
}

/// A keyring and an owner object kept alive with it: for a source whose
/// keyring is updated by something that must not be dropped (a
/// [`Refresher`](crate::Refresher), a thread's handle, a watcher).
pub struct OwnedKeyring {
    keyring: Keyring,
    _owner: Box<dyn Any + Send + Sync>,
}

impl OwnedKeyring {
    /// `keyring`, kept up to date by `owner` (dropped with this value).
    pub fn new(keyring: Keyring, owner: impl Any + Send + Sync) -> OwnedKeyring {
        OwnedKeyring {
            keyring,
            _owner: Box::new(owner),
        }
    }
}

impl fmt::Debug for OwnedKeyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedKeyring")
            .field("keyring", &self.keyring)
            .finish_non_exhaustive()
    }
}

impl KeySource for OwnedKeyring {
    fn keyring(&self) -> Keyring {
        self.keyring.clone()
    }
}
