//! Persisting an allocation's identities and derived secrets.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use super::{DerivedSecret, IdentityId, IdentityToken};
use crate::codec::wire_struct;
use crate::error::{Error, Result};
use crate::storage::envelope::EnvelopeFormat;

/// What is kept for one allocation across restarts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PersistedState {
    /// The identity tokens.
    pub identities: Vec<IdentityToken>,
    /// Secrets derived from them by token exchanges.
    pub secrets: Vec<DerivedSecret>,
}

/// Where a manager keeps its state. Called from the manager's thread.
pub trait IdentityDb: Send + Sync {
    /// The saved state of `alloc_id`; `Ok(None)` when nothing was saved. A
    /// corrupt record is an error (the manager then re-signs).
    fn load(&self, alloc_id: &str) -> Result<Option<PersistedState>>;
    /// Replaces the saved state of `alloc_id`, whole.
    fn store(&self, alloc_id: &str, state: &PersistedState) -> Result<()>;
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
}

wire_struct! {
    /// The body of an identity state file.
    pub(crate) struct StoredState {
        /// The identity tokens.
        pub(crate) identities: Vec<StoredToken> => "Identities",
        /// The derived secrets.
        pub(crate) secrets: Vec<StoredSecret> => "Secrets",
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
        /// The signing key's ID.
        pub(crate) kid: String => "KeyID",
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
        /// The secret.
        pub(crate) secret: String => "Secret",
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
/// 0600, like the keystore.
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
            source: e,
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
                kid: t.kid.clone(),
                name: t.key.name.clone(),
                token: t.token.clone(),
                workload: t.key.workload.clone(),
            })
            .collect(),
        secrets: state
            .secrets
            .iter()
            .map(|s| StoredSecret {
                derived_from: s.derived_from.clone(),
                exchange: s.exchange.clone(),
                name: s.identity.name.clone(),
                secret: s.secret.clone(),
                workload: s.identity.workload.clone(),
            })
            .collect(),
    }
}

fn from_stored(s: StoredState) -> PersistedState {
    PersistedState {
        identities: s
            .identities
            .into_iter()
            .map(|t| IdentityToken {
                key: IdentityId::new(&t.workload, &t.name),
                token: t.token,
                kid: t.kid,
                jwt_id: t.jwt_id,
                issued_at: t.issued_at,
                expires_at: (t.expires_at != 0).then_some(t.expires_at),
            })
            .collect(),
        secrets: s
            .secrets
            .into_iter()
            .map(|x| DerivedSecret {
                exchange: x.exchange,
                identity: IdentityId::new(&x.workload, &x.name),
                secret: x.secret,
                derived_from: x.derived_from,
            })
            .collect(),
    }
}

impl IdentityDb for FileIdentityDb {
    fn load(&self, alloc_id: &str) -> Result<Option<PersistedState>> {
        let path = self.path(alloc_id)?;
        if !path.exists() {
            return Ok(None);
        }
        ENVELOPE
            .load::<StoredState>(&path, crate::storage::atomic_file::FileAccess::OwnerOnly)
            .map(|s| Some(from_stored(s)))
    }

    fn store(&self, alloc_id: &str, state: &PersistedState) -> Result<()> {
        let path = self.path(alloc_id)?;
        self.ensure_dir()?;
        let stored = to_stored(state);
        let hint = 256
            + stored
                .identities
                .iter()
                .map(|t| t.token.len() + 256)
                .sum::<usize>()
            + stored
                .secrets
                .iter()
                .map(|s| s.secret.len() + 256)
                .sum::<usize>();
        ENVELOPE.save(&path, &stored, hint)
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
            assert_eq!(e.code(), crate::ResultCode::InvalidArgument, "{bad:?}");
        }
    }
}
