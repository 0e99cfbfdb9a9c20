//! Changes to a keystore file's keyring, made in memory at once
//! (`change::report` saves the file), and claiming a new keystore's name.

use std::path::Path;

use workload_identity::{Algorithm, Keyring};

use super::flags::Pair;

use super::change::Change;
use super::flags::RsaArgs;
use crate::CliError;

/// A new active key of `alg` (a purpose and an algorithm); the previous one
/// becomes inactive.
pub(super) fn rotate(
    keyring: &Keyring,
    alg: Pair,
    rsa: &RsaArgs,
    now: i64,
    how: &'static str,
) -> Result<Change, CliError> {
    let previous = keyring.active_id_for_purpose(alg.purpose, alg.signing()?);
    let kid = match alg.signing()? {
        Algorithm::Rs256 => keyring.rotate_rsa_purpose(alg.purpose, rsa.size()?, now)?,
        other => keyring.rotate_purpose(alg.purpose, other, now)?,
    };
    Ok(Change::Activated {
        kid,
        alg,
        previous,
        how,
    })
}

/// A successor of `alg` in the JWKS now, signing from `publish_at`.
pub(super) fn prepublish(
    keyring: &Keyring,
    alg: Pair,
    rsa: &RsaArgs,
    now: i64,
    publish_at: i64,
) -> Result<Change, CliError> {
    let kid = match alg.signing()? {
        Algorithm::Rs256 => {
            keyring.prepublish_rsa_purpose(alg.purpose, rsa.size()?, now, publish_at)?
        }
        other => keyring.prepublish_purpose(alg.purpose, other, now, publish_at)?,
    };
    Ok(Change::Prepublished {
        kid,
        alg,
        publish_at,
    })
}

/// Makes the directories a new keystore goes in (private, as the keystore)
/// and claims its name, so a file that appears meanwhile is never replaced;
/// the save renames over this empty placeholder.
pub(super) fn claim_new_file(path: &Path, refusal_hint: &str) -> Result<(), CliError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(dir)
            .map_err(|e| CliError::io(format!("creating directory {}", dir.display()), &e))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            let err = CliError::io(format!("creating keystore {}", path.display()), &e);
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                err.hint(refusal_hint)
            } else {
                err
            }
        })?;
    Ok(())
}
