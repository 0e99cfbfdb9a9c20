//! Persisting an allocation's identities and derived secrets.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use super::{DerivedSecret, IdentityId, IdentityToken};
use zeroize::Zeroizing;

use crate::codec::{Bin, wire_struct};
use crate::error::{DecodeError, Error, Result};
use crate::keyring::Algorithm;
use crate::pop::WorkloadKey;
use crate::storage::envelope::EnvelopeFormat;

/// What is kept for one allocation across restarts. `Debug` shows no token
/// and no secret.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PersistedState {
    /// The identity tokens, with the workload keys of proof-bound ones (an
    /// [`IdentityDb`] must keep those as secrets: see [`FileIdentityDb`]).
    pub identities: Vec<IdentityToken>,
    /// Secrets derived from them by token exchanges.
    pub secrets: Vec<DerivedSecret>,
    /// Secrets taken out of use (replaced, or not confirmed at a restore)
    /// and not yet revoked: saved in the same write as what replaced them,
    /// so that a process killed before a revocation reached its server
    /// leaves it to the next start, which revokes each once its slot's
    /// secret is delivered (see [`IdentityManager::restore`](super::IdentityManager::restore)).
    pub releasing: Vec<DerivedSecret>,
}

/// Where a manager keeps its state. Called from the manager's thread.
pub trait IdentityDb: Send + Sync {
    /// The saved state of `alloc_id`; `Ok(None)` when nothing was saved. A
    /// corrupt record is an error (the manager then re-signs).
    fn load(&self, alloc_id: &str) -> Result<Option<PersistedState>>;
    /// Replaces the saved state of `alloc_id`, whole.
    fn store(&self, alloc_id: &str, state: &PersistedState) -> Result<()>;
    /// Forgets `alloc_id` (its allocation ended): a later `load` finds
    /// nothing. Forgetting what was never saved is not an error. Default:
    /// stores an empty state (implement it to delete the record).
    fn remove(&self, alloc_id: &str) -> Result<()> {
        self.store(alloc_id, &PersistedState::default())
    }
}

/// An in-memory database (for tests and embedding without restarts).
#[derive(Debug, Default)]
pub struct MemoryIdentityDb {
    states: Mutex<HashMap<String, PersistedState>>,
}

impl IdentityDb for MemoryIdentityDb {
    fn load(&self, alloc_id: &str) -> Result<Option<PersistedState>> {
        Ok(self
            .states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(alloc_id)
            .cloned())
    }
    fn store(&self, alloc_id: &str, state: &PersistedState) -> Result<()> {
        self.states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(alloc_id.to_string(), state.clone());
        Ok(())
    }
    fn remove(&self, alloc_id: &str) -> Result<()> {
        self.states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(alloc_id);
        Ok(())
    }
}

wire_struct! {
    /// The body of an identity state file.
    pub(crate) struct StoredState {
        /// The identity tokens.
        pub(crate) identities: Vec<StoredToken> => "Identities",
        /// The derived secrets.
        pub(crate) secrets: Vec<StoredSecret> => "Secrets",
        /// Secrets taken out of use, not yet revoked (none in files saved
        /// before these were kept).
        pub(crate) releasing: Vec<StoredSecret> => "Releasing",
    }
}

wire_struct! {
    /// One identity token.
    pub(crate) struct StoredToken {
        /// `exp`, Unix seconds (0: none).
        pub(crate) expires_at: i64 => "ExpiresAt",
        /// `iat`, Unix seconds.
        pub(crate) issued_at: i64 => "IssuedAt",
        /// `jti`.
        pub(crate) jwt_id: String => "JTI",
        /// The workload key's algorithm (`EdDSA` or `ES256`) for a WIT;
        /// empty for a bearer token.
        pub(crate) key_alg: String => "KeyAlg",
        /// The signing key's ID.
        pub(crate) kid: String => "KeyID",
        /// The workload key's secret ([`WorkloadKey::secret`]) for a WIT;
        /// empty for a bearer token. Zeroized on drop.
        pub(crate) key_secret: Bin => "KeySecret",
        /// The identity's name.
        pub(crate) name: String => "Name",
        /// The compact JWS.
        pub(crate) token: String => "Token",
        /// The task or service.
        pub(crate) workload: String => "Workload",
    }
}

wire_struct! {
    /// One derived secret.
    pub(crate) struct StoredSecret {
        /// The `jti` of the identity token it was derived from.
        pub(crate) derived_from: String => "DerivedFrom",
        /// The exchange's name.
        pub(crate) exchange: String => "Exchange",
        /// The identity's name.
        pub(crate) name: String => "Name",
        /// Where it was minted (the exchange's origin; "" before origins).
        pub(crate) origin: String => "Origin",
        /// The secret. Zeroized on drop.
        pub(crate) secret: Zeroizing<String> => "Secret",
        /// The task or service.
        pub(crate) workload: String => "Workload",
    }
}

const ENVELOPE: EnvelopeFormat = EnvelopeFormat {
    format: "workload-identity-identities",
    version: 1,
    oldest: 1,
    what: "identity state",
};

/// A file per allocation under a directory: `<dir>/<alloc id>.identities`,
/// an envelope (versioned, checksummed msgpack; plaintext) and replaced crash-safely with mode
/// 0600, like the keystore. It holds the tokens and, for proof-bound
/// identities, their workload keys' secrets (the secret bytes pass only
/// through buffers zeroized on drop); loading refuses a file group or others
/// can read.
#[derive(Debug, Clone)]
pub struct FileIdentityDb {
    dir: PathBuf,
}

impl FileIdentityDb {
    /// A database in `dir`. The directory is created (mode 0700, with any
    /// missing parents) on the first save if it does not exist; a directory
    /// that cannot be created makes that save, and so `IdentityManager::start`,
    /// fail with the I/O error.
    pub fn new(dir: impl Into<PathBuf>) -> FileIdentityDb {
        FileIdentityDb { dir: dir.into() }
    }

    fn ensure_dir(&self) -> Result<()> {
        if self.dir.is_dir() {
            return Ok(());
        }
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&self.dir).map_err(|e| Error::Io {
            context: format!("creating identity state directory {}", self.dir.display()),
            error: e,
        })
    }

    /// The file holding `alloc_id`'s state. The ID must be a safe file name:
    /// 1 to 128 of `A-Z a-z 0-9 . _ : -`, not starting with `.`, as Nomad's
    /// UUIDs are (so it can never name a path outside the directory).
    pub fn path(&self, alloc_id: &str) -> Result<PathBuf> {
        let safe = !alloc_id.is_empty()
            && alloc_id.len() <= 128
            && !alloc_id.starts_with('.')
            && alloc_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        if !safe {
            return Err(Error::invalid(
                "FileIdentityDb",
                "alloc_id",
                format!(
                    "{:?} is not a safe file name: expected 1-128 of A-Z a-z 0-9 . _ : - not starting with \".\"",
                    crate::error::truncate_for_message(alloc_id)
                ),
            ));
        }
        Ok(self.dir.join(format!("{alloc_id}.identities")))
    }
}

fn to_stored(state: &PersistedState) -> StoredState {
    StoredState {
        identities: state
            .identities
            .iter()
            .map(|t| StoredToken {
                expires_at: t.expires_at.unwrap_or(0),
                issued_at: t.issued_at,
                jwt_id: t.jwt_id.clone(),
                key_alg: t
                    .workload_key
                    .as_ref()
                    .map(|k| k.algorithm().name().to_string())
                    .unwrap_or_default(),
                kid: t.kid.clone(),
                key_secret: t
                    .workload_key
                    .as_ref()
                    .map(|k| Bin(k.secret()))
                    .unwrap_or_default(),
                name: t.key.name.clone(),
                token: t.token.clone(),
                workload: t.key.workload.clone(),
            })
            .collect(),
        secrets: state.secrets.iter().map(stored_secret).collect(),
        releasing: state.releasing.iter().map(stored_secret).collect(),
    }
}

fn stored_secret(s: &DerivedSecret) -> StoredSecret {
    StoredSecret {
        derived_from: s.derived_from.clone(),
        exchange: s.exchange.clone(),
        name: s.identity.name.clone(),
        origin: s.origin.clone(),
        secret: Zeroizing::new(s.secret.clone()),
        workload: s.identity.workload.clone(),
    }
}

fn derived_secret(mut x: StoredSecret) -> DerivedSecret {
    DerivedSecret {
        identity: IdentityId::new(&x.workload, &x.name),
        // Moved out, leaving the zeroizing wrapper empty.
        secret: std::mem::take(&mut *x.secret),
        exchange: std::mem::take(&mut x.exchange),
        derived_from: std::mem::take(&mut x.derived_from),
        origin: std::mem::take(&mut x.origin),
    }
}

/// The workload key saved with identity `who`'s token, if it has one. Both
/// parts or neither; a key that cannot be rebuilt makes the file unreadable
/// (the manager then re-signs with fresh keys).
fn stored_key(who: &IdentityId, alg: &str, secret: &Bin) -> Result<Option<Arc<WorkloadKey>>> {
    let corrupt = |reason: String| {
        Error::Decode(DecodeError {
            type_name: "identity state",
            path: "Identities.KeySecret".into(),
            reason: format!("identity {who}: {reason}"),
        })
    };
    match (alg.is_empty(), secret.as_slice().is_empty()) {
        (true, true) => Ok(None),
        (false, false) => {
            let alg = Algorithm::from_name(alg).ok_or_else(|| {
                corrupt(format!(
                    "KeyAlg is {:?}, expected \"EdDSA\" or \"ES256\"",
                    crate::error::truncate_for_message(alg)
                ))
            })?;
            // The error names what was wrong, never the secret.
            WorkloadKey::from_secret(alg, secret.as_slice())
                .map(|k| Some(Arc::new(k)))
                .map_err(|e| corrupt(format!("its workload key cannot be rebuilt: {e}")))
        }
        _ => Err(corrupt(
            "KeyAlg and KeySecret must be both set (a WIT) or both empty (a bearer token)".into(),
        )),
    }
}

fn from_stored(s: StoredState) -> Result<PersistedState> {
    let identities = s
        .identities
        .into_iter()
        .map(|t| {
            let key = IdentityId::new(&t.workload, &t.name);
            let workload_key = stored_key(&key, &t.key_alg, &t.key_secret)?;
            Ok(IdentityToken {
                key,
                token: t.token,
                kid: t.kid,
                jwt_id: t.jwt_id,
                issued_at: t.issued_at,
                expires_at: (t.expires_at != 0).then_some(t.expires_at),
                workload_key,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(PersistedState {
        identities,
        secrets: s.secrets.into_iter().map(derived_secret).collect(),
        releasing: s.releasing.into_iter().map(derived_secret).collect(),
    })
}

impl IdentityDb for FileIdentityDb {
    fn load(&self, alloc_id: &str) -> Result<Option<PersistedState>> {
        let path = self.path(alloc_id)?;
        if !path.exists() {
            return Ok(None);
        }
        ENVELOPE
            .load::<StoredState>(&path, crate::storage::atomic_file::FileAccess::OwnerOnly)
            .and_then(|s| from_stored(s).map(Some))
    }

    fn store(&self, alloc_id: &str, state: &PersistedState) -> Result<()> {
        let path = self.path(alloc_id)?;
        self.ensure_dir()?;
        let stored = to_stored(state);
        let hint = 256
            + stored
                .identities
                .iter()
                .map(|t| t.token.len() + t.key_secret.as_slice().len() + 256)
                .sum::<usize>()
            + stored
                .secrets
                .iter()
                .chain(&stored.releasing)
                .map(|s| s.secret.len() + 256)
                .sum::<usize>();
        ENVELOPE.save(&path, &stored, hint)
    }

    fn remove(&self, alloc_id: &str) -> Result<()> {
        let path = self.path(alloc_id)?;
        match std::fs::remove_file(&path) {
            Ok(()) => crate::storage::atomic_file::sync_parent(&path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::Io {
                context: format!("removing identity state {}", path.display()),
                error: e,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_file_names_stay_inside_the_directory() {
        let db = FileIdentityDb::new("/var/lib/wid");
        let ok = db.path("5f8c7d2e-3b1a-4c6d-9e0f-123456789abc").unwrap();
        assert_eq!(
            ok,
            PathBuf::from("/var/lib/wid/5f8c7d2e-3b1a-4c6d-9e0f-123456789abc.identities")
        );
        let long = "a".repeat(129);
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "../x",
            "a b",
            "é",
            long.as_str(),
        ] {
            let e = db.path(bad).unwrap_err();
            assert_eq!(
                e.code(),
                crate::error::ResultCode::InvalidArgument,
                "{bad:?}"
            );
        }
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;
    use crate::keyring::Algorithm;

    fn state(key: Option<Arc<WorkloadKey>>) -> PersistedState {
        PersistedState {
            identities: vec![IdentityToken {
                key: IdentityId::new("server", "vault_default"),
                token: "h.p.s".into(),
                kid: "key-1".into(),
                jwt_id: "jti".into(),
                issued_at: 1,
                expires_at: Some(2),
                workload_key: key,
            }],
            secrets: Vec::new(),
            releasing: Vec::new(),
        }
    }

    #[test]
    fn workload_keys_round_trip_through_the_stored_form() {
        for alg in [Algorithm::EdDsa, Algorithm::Es256] {
            let key = Arc::new(WorkloadKey::generate(alg).unwrap());
            let saved = state(Some(key.clone()));
            let stored = to_stored(&saved);
            assert_eq!(stored.identities[0].key_alg, alg.name());
            assert_eq!(
                stored.identities[0].key_secret.as_slice(),
                &key.secret()[..]
            );
            // Debug of the stored form shows the secret's length only.
            let shown = format!("{stored:?}");
            assert!(shown.contains("Bin("), "{shown}");
            let back = from_stored(stored).unwrap();
            assert_eq!(back, saved);
            let restored = back.identities[0].workload_key.as_ref().unwrap();
            assert_eq!(restored.secret(), key.secret());
        }
        let bearer = state(None);
        let stored = to_stored(&bearer);
        assert!(stored.identities[0].key_alg.is_empty());
        assert!(stored.identities[0].key_secret.as_slice().is_empty());
        assert_eq!(from_stored(stored).unwrap(), bearer);
    }

    #[test]
    fn a_stored_key_that_cannot_be_rebuilt_makes_the_state_unreadable() {
        let key = Arc::new(WorkloadKey::generate(Algorithm::EdDsa).unwrap());
        let good = to_stored(&state(Some(key.clone())));
        type Tamper = fn(&mut StoredToken);
        let cases: [(&str, Tamper, &str); 4] = [
            ("no secret", |t| t.key_secret = Bin::default(), "both set"),
            ("no alg", |t| t.key_alg.clear(), "both set"),
            ("RS256", |t| t.key_alg = "RS256".into(), "a workload key"),
            (
                "short seed",
                |t| t.key_secret = Bin::new(vec![7; 31]),
                "cannot be rebuilt",
            ),
        ];
        for (what, tamper, why) in cases {
            let mut stored = good.clone();
            tamper(&mut stored.identities[0]);
            let e = from_stored(stored).unwrap_err();
            assert_eq!(
                e.code(),
                crate::error::ResultCode::DecodeError,
                "{what}: {e}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains(why) && msg.contains("server/vault_default"),
                "{what}: {msg}"
            );
            assert!(!msg.contains(&format!("{:?}", &key.secret()[..4])));
        }
    }
}
