//! `wid keyring migrate`: a keystore file into an empty replicated keyring,
//! or (`--to-keystore`) the replicated keys into a new keystore file, or
//! (`--authenticate-records`) a replicated keyring of the format before
//! sealed under its KEK.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use serde_json::json;
use workload_identity::{KeyWrapper, KeystoreLoadOptions, ResultCode};

use super::file::claim_new_file;
use crate::CliError;
use crate::etcd_args::EtcdArgs;
use crate::output::Ctx;
use crate::sources::{CustodyArgs, bad_flag, load_keystore_with};

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// The keystore file: copied into etcd, or with --to-keystore written
    /// from etcd.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "authenticate_records"
    )]
    keystore: Option<PathBuf>,
    /// Seal a replicated keyring written before its records were
    /// authenticated: a record key wrapped by the KEK, and a manifest of
    /// every key record and the policy as they are now, which from then on
    /// are the only ones any process follows. Check `wid keyring list`
    /// first. Once; afterwards it says there is nothing to do.
    #[arg(long, conflicts_with_all = ["keystore", "to_keystore"])]
    authenticate_records: bool,
    #[command(flatten)]
    custody: CustodyArgs,
    #[command(flatten)]
    etcd: EtcdArgs,
    /// Copy the other way: every key of the replicated keyring into a new
    /// keystore file (mode 0600, saved crash-safely), wrapped by the KEK.
    #[arg(long)]
    to_keystore: bool,
    /// With --to-keystore: write the file in plaintext (version 2) instead
    /// of wrapped; anyone who can read it then holds every private key.
    #[arg(long, requires = "to_keystore")]
    plaintext_keystore: bool,
    /// With --to-keystore: replace the file if it exists (default: refuse).
    #[arg(long, requires = "to_keystore")]
    force: bool,
}

pub(super) fn run(a: &MigrateArgs, ctx: &Ctx) -> Result<(), CliError> {
    if !a.etcd.given() {
        a.etcd.refuse_without_etcd()?;
        return Err(bad_flag(
            "--etcd",
            "is required: the etcd members the replicated keyring is on",
        ));
    }
    if a.authenticate_records {
        return authenticate(a, ctx);
    }
    if a.to_keystore {
        return to_file(a, ctx);
    }
    let Some(path) = &a.keystore else {
        return Err(bad_flag("--keystore", "is required: the file to copy"));
    };
    let wrapper = a.custody.wrapper()?;
    // A plaintext keystore may be the source: in etcd its keys are wrapped.
    // And one of the format before: the replicated keyring seals its keys.
    let mut options = KeystoreLoadOptions::default()
        .allow_plaintext(true)
        .allow_unauthenticated_metadata(true);
    if let Some(w) = &wrapper {
        options = options.wrapper(Arc::clone(w));
    }
    let keyring = load_keystore_with(path, &a.custody, &options)?;
    let r = a.etcd.open_with(wrapper.clone(), None, ctx)?;
    let n = r.import(&keyring).map_err(|e| {
        let code = e.code();
        let err = CliError::from(e);
        if code == ResultCode::KeyringConflict {
            err.hint("migrate copies into an empty prefix: choose another --etcd-prefix, or copy the replicated keys out with --to-keystore")
        } else {
            err
        }
    })?;
    // The file's policy goes with its keys.
    if let Some(policy) = keyring.policy() {
        r.set_policy(&policy)?;
    }
    // The file is no longer the keyring: writes to it are refused from now
    // on, saying where it went (reading it still works: a copy of the keys
    // as they were).
    let went = format!(
        "the replicated keyring ({}) on {}",
        a.etcd.flags(),
        crate::output::utc(ctx.now())
    );
    let marker = crate::sources::migrated_marker(path);
    std::fs::write(&marker, format!("{went}\n")).map_err(|e| {
        CliError::new(
            ResultCode::IoError,
            format!(
                "the keys were copied, but {} could not be written: {e}; do not change {} any more",
                marker.display(),
                path.display()
            ),
        )
    })?;
    let (kek, how) = kept_by(
        wrapper.as_ref(),
        "IN PLAINTEXT (--etcd-insecure-plaintext-keys)",
    );
    ctx.emit(
        &format!(
            "copied {n} keys from {} into etcd {}, {how}; {} now refuses changes (see {})",
            path.display(),
            r.prefix(),
            path.display(),
            marker.display()
        ),
        &json!({"from": {"keystore": path.display().to_string()},
                "to": {"etcd_prefix": r.prefix()},
                "keys": n, "kek_id": kek}),
    );
    Ok(())
}

fn to_file(a: &MigrateArgs, ctx: &Ctx) -> Result<(), CliError> {
    let Some(path) = &a.keystore else {
        return Err(bad_flag("--keystore", "is required: the file to write"));
    };
    let kek = a.custody.wrapper()?;
    if kek.is_none() && !a.plaintext_keystore {
        return Err(bad_flag(
            "--to-keystore",
            "would write the keys in plaintext: give the KEK to wrap the file with (--kek-file, or --transit-addr and --transit-key), or --plaintext-keystore to write plaintext on purpose",
        ));
    }
    let r = a.etcd.open_with(kek.clone(), None, ctx)?;
    let wrapper = if a.plaintext_keystore { None } else { kek };
    let keyring = r.export()?;
    // The policy goes with the keys.
    keyring.set_policy(r.policy())?;
    if keyring.is_empty() {
        return Err(CliError::usage(format!(
            "the replicated keyring at {} holds no keys: nothing to copy",
            r.prefix()
        ))
        .hint("check --etcd-prefix"));
    }
    let claimed = !a.force;
    if claimed {
        claim_new_file(
            path,
            "migrate --to-keystore never replaces a file unless --force is given",
        )?;
    }
    let saved = match &wrapper {
        Some(w) => keyring.save_wrapped(path, &**w),
        None => keyring.save(path),
    };
    if saved.is_ok() {
        // A fresh copy of the replicated keyring: a marker left by an
        // earlier migration of this path no longer applies.
        let _ = std::fs::remove_file(crate::sources::migrated_marker(path));
    }
    if let Err(e) = saved {
        if claimed {
            // Only our empty placeholder can be there: the save renames last.
            let _ = std::fs::remove_file(path);
        }
        return Err(e.into());
    }
    let (kek, how) = kept_by(
        wrapper.as_ref(),
        "IN PLAINTEXT: anyone who can read the file holds the keys",
    );
    ctx.emit(
        &format!(
            "copied {} keys from etcd {} into {} (mode 0600), {how}",
            keyring.len(),
            r.prefix(),
            path.display()
        ),
        &json!({"from": {"etcd_prefix": r.prefix()},
                "to": {"keystore": path.display().to_string()},
                "keys": keyring.len(), "kek_id": kek}),
    );
    Ok(())
}

/// How the copied keys are kept: the KEK's ID, and for people `wrapped by
/// KEK ID` or, without a KEK, `plaintext`.
fn kept_by(wrapper: Option<&Arc<dyn KeyWrapper>>, plaintext: &str) -> (Option<String>, String) {
    match wrapper {
        Some(w) => {
            let id = w.kek_id().to_string();
            let how = format!("wrapped by KEK {id}");
            (Some(id), how)
        }
        None => (None, plaintext.to_string()),
    }
}

/// `--authenticate-records`: seals a replicated keyring of the format
/// before, listing what it sealed.
fn authenticate(a: &MigrateArgs, ctx: &Ctx) -> Result<(), CliError> {
    let wrapper = a.custody.wrapper()?;
    let r = a.etcd.open_sealing(wrapper, None, true, ctx)?;
    let sealed = r.authenticate_records()?;
    let keys = r.keyring().keys();
    let mut human = match sealed {
        Some(n) => vec![format!(
            "sealed {n} records of {} under the KEK: from now on every process follows only these",
            a.etcd.flags()
        )],
        None => vec![format!(
            "the records of {} are authenticated already: nothing to do",
            a.etcd.flags()
        )],
    };
    for k in &keys {
        human.push(format!(
            "  {} {} {} {}",
            k.kid,
            k.algorithm.name(),
            k.purpose.name(),
            k.state.name()
        ));
    }
    let doc = json!({
        "etcd_prefix": r.prefix(),
        "sealed": sealed,
        "keys": keys.iter().map(|k| json!({
            "kid": k.kid.as_str(),
            "algorithm": k.algorithm.name(),
            "purpose": k.purpose.name(),
            "state": k.state.name(),
        })).collect::<Vec<_>>(),
    });
    ctx.emit(&human.join("\n"), &doc);
    Ok(())
}
