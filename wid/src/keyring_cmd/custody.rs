//! Key custody of a keystore file: `wid keyring wrap | unwrap | rewrap`
//! convert the file between plaintext and wrapped by a KEK (or from one KEK
//! to another), and `generate-kek` makes a KEK file.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use serde_json::json;
use workload_identity::{KekFile, KeyWrapper, Keyring, KeystoreLoadOptions, ResultCode};

use crate::CliError;
use crate::output::Ctx;
use crate::sources::{CustodyArgs, bad_flag};

/// A keystore file only (the commands that convert the file itself).
#[derive(Debug, Args)]
pub(crate) struct KeystoreArgs {
    /// The keystore file.
    #[arg(long, value_name = "FILE")]
    keystore: PathBuf,
    #[command(flatten)]
    custody: CustodyArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RewrapArgs {
    #[command(flatten)]
    store: KeystoreArgs,
    /// The KEK file to move the keys to.
    #[arg(long, value_name = "FILE", conflicts_with = "new_transit_key")]
    new_kek_file: Option<PathBuf>,
    /// The Transit key (same server and mount) to move the keys to.
    #[arg(long, value_name = "NAME", requires = "transit_addr")]
    new_transit_key: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct GenerateKekArgs {
    /// Where to write the new KEK.
    #[arg(long, value_name = "FILE")]
    kek_file: PathBuf,
}

pub(super) fn wrap(a: &KeystoreArgs, ctx: &Ctx) -> Result<(), CliError> {
    convert(a, Conversion::Wrap, ctx)
}

pub(super) fn unwrap(a: &KeystoreArgs, ctx: &Ctx) -> Result<(), CliError> {
    convert(a, Conversion::Unwrap, ctx)
}

pub(super) fn rewrap(a: &RewrapArgs, ctx: &Ctx) -> Result<(), CliError> {
    let to: Option<Arc<dyn KeyWrapper>> = match (&a.new_kek_file, &a.new_transit_key) {
        (Some(file), _) => Some(Arc::new(KekFile::load(file)?)),
        (None, Some(key)) => Some(Arc::new(a.store.custody.transit(key)?)),
        (None, None) => None,
    };
    convert(&a.store, Conversion::Rewrap(to), ctx)
}

pub(super) fn generate_kek(a: &GenerateKekArgs, ctx: &Ctx) -> Result<(), CliError> {
    let kek = KekFile::generate(&a.kek_file)?;
    ctx.emit(
        &format!(
            "wrote KEK {} to {} (mode 0600); keep it off the keystore's disk",
            kek.kek_id(),
            a.kek_file.display()
        ),
        &json!({"kek_file": a.kek_file.display().to_string(), "kek_id": kek.kek_id()}),
    );
    Ok(())
}

/// What `wid keyring wrap | unwrap | rewrap` does.
enum Conversion {
    Wrap,
    Unwrap,
    Rewrap(Option<Arc<dyn KeyWrapper>>),
}

fn convert(store: &KeystoreArgs, how: Conversion, ctx: &Ctx) -> Result<(), CliError> {
    let path = &store.keystore;
    let Some(kek) = store.custody.wrapper()? else {
        return Err(bad_flag(
            "--kek-file",
            "(or --transit-addr with --transit-key) is required: the KEK to wrap with (wrap), or that the keystore is wrapped by (unwrap, rewrap)",
        ));
    };
    let (from, to, verb) = match how {
        Conversion::Wrap => (KeystoreLoadOptions::default(), Some(kek), "wrapped"),
        Conversion::Unwrap => (
            KeystoreLoadOptions::default()
                // The way a keystore of the format before is sealed.
                .allow_unauthenticated_metadata(true)
                .wrapper(kek),
            None,
            "unwrapped",
        ),
        Conversion::Rewrap(None) => (
            KeystoreLoadOptions::default()
                // The way a keystore of the format before is sealed.
                .allow_unauthenticated_metadata(true)
                .wrapper(kek.clone()),
            Some(kek),
            "rewrapped",
        ),
        Conversion::Rewrap(Some(new)) => (
            KeystoreLoadOptions::default()
                // The way a keystore of the format before is sealed.
                .allow_unauthenticated_metadata(true)
                .wrapper(kek),
            Some(new),
            "rewrapped",
        ),
    };
    crate::sources::refuse_if_migrated(path)?;
    let keys = Keyring::rewrap_keystore(path, &from, to.as_deref()).map_err(|e| {
        let plaintext =
            e.code() == ResultCode::KeyCustodyFailed && e.to_string().contains("plaintext");
        let err = CliError::from(e);
        if plaintext {
            err.hint("it is not wrapped yet: `wid keyring wrap --keystore FILE --kek-file KEK`")
        } else {
            err
        }
    })?;
    let (human, kek_id) = match &to {
        Some(w) => (
            format!(
                "{verb} {keys} keys in {} with KEK {}",
                path.display(),
                w.kek_id()
            ),
            Some(w.kek_id().to_string()),
        ),
        None => (
            format!(
                "{verb} {keys} keys in {}: the file now holds them in plaintext",
                path.display()
            ),
            None,
        ),
    };
    ctx.emit(
        &human,
        &json!({"keystore": path.display().to_string(), "action": verb, "keys": keys, "kek_id": kek_id}),
    );
    Ok(())
}
