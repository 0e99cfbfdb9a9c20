//! `wid keyring ...`: keystore files, their keys and what relying parties fetch.
//!
//! Every command that changes the keyring saves it with `Keyring::save`
//! (mode 0600, temp file + fsync + rename) and prints what changed.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use std::sync::Arc;

use workload_identity::{
    Algorithm, KekFile, KeyId, KeyInfo, KeyState, KeyWrapper, Keyring, KeystoreLoadOptions,
    ResultCode, RotationAction, RotationPolicy, RsaKeySize, plan_rotation,
};

use crate::output::{Ctx, parse_duration, span, utc, when};
use crate::sources::{CustodyArgs, bad_flag, load_keystore, parse_alg, save_keystore};
use crate::{CliError, Exit};

#[derive(Debug, Subcommand)]
pub(crate) enum KeyringCommand {
    /// Create a keystore with one active key per --alg (default EdDSA);
    /// refuses to overwrite an existing file.
    Init(InitArgs),
    /// Make a new active key of --alg (default EdDSA); the previous one
    /// becomes inactive and keeps verifying.
    Rotate(RotateArgs),
    /// Show every key: ID, algorithm, state and times.
    List(KeystoreArgs),
    /// Show what the rotation policy says to do now (--apply does it).
    Plan(PlanArgs),
    /// Make a key the active key of its algorithm now.
    Promote(KeyArgs),
    /// Take an inactive or prepublished key out of the JWKS; it verifies no more.
    Deprecate(KeyArgs),
    /// Print the JWKS relying parties fetch (/.well-known/jwks.json).
    Jwks(KeystoreArgs),
    /// Print the OIDC discovery document (/.well-known/openid-configuration).
    Oidc(OidcArgs),
    /// Wrap a plaintext keystore with --kek-file (keystore version 3): the
    /// file then yields no key without the KEK.
    Wrap(KeystoreArgs),
    /// Write a wrapped keystore back in plaintext (version 2): anyone who can
    /// read the file then holds the keys.
    Unwrap(KeystoreArgs),
    /// Wrap a keystore's keys again: with --new-kek-file or
    /// --new-transit-key, move them to another KEK; without, rewrap them with
    /// their own KEK (fresh nonces; a Transit key's newest version).
    Rewrap(RewrapArgs),
    /// Make a new KEK file (32 random bytes, base64, mode 0600) for --kek-file;
    /// never replaces an existing file.
    GenerateKek(GenerateKekArgs),
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

#[derive(Debug, Args)]
pub(crate) struct KeystoreArgs {
    /// The keystore file.
    #[arg(long, value_name = "FILE")]
    keystore: PathBuf,
    #[command(flatten)]
    custody: CustodyArgs,
}

impl KeystoreArgs {
    fn load(&self) -> Result<Keyring, CliError> {
        load_keystore(&self.keystore, &self.custody)
    }
}

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    #[command(flatten)]
    store: KeystoreArgs,
    /// An algorithm to make an active key for (repeat for several).
    #[arg(long = "alg", value_name = "EdDSA|ES256|RS256", value_parser = parse_alg)]
    algs: Vec<Algorithm>,
    #[command(flatten)]
    rsa: RsaArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RotateArgs {
    #[command(flatten)]
    store: KeystoreArgs,
    /// The algorithm to rotate.
    #[arg(long, value_name = "EdDSA|ES256|RS256", value_parser = parse_alg, default_value = "EdDSA")]
    alg: Algorithm,
    #[command(flatten)]
    rsa: RsaArgs,
}

#[derive(Debug, Args)]
struct RsaArgs {
    /// Size of new RS256 keys: 2048, 3072 or 4096.
    #[arg(long, value_name = "BITS", default_value_t = 2048)]
    rsa_bits: u32,
}

impl RsaArgs {
    fn size(&self) -> Result<RsaKeySize, CliError> {
        RsaKeySize::from_bits(self.rsa_bits).ok_or_else(|| {
            bad_flag(
                "--rsa-bits",
                format!("{} is not 2048, 3072 or 4096", self.rsa_bits),
            )
        })
    }
}

#[derive(Debug, Args)]
pub(crate) struct PolicyArgs {
    /// How long a key signs before its successor takes over.
    #[arg(long, value_name = "DURATION", default_value = "720h", value_parser = parse_duration)]
    rotation_threshold: Duration,
    /// The longest TTL of the tokens in use. Unset: tokens without exp may be
    /// in use, so no key is ever planned for deprecation.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    longest_ttl: Option<Duration>,
}

impl PolicyArgs {
    pub(crate) fn policy(&self) -> RotationPolicy {
        RotationPolicy::new(self.longest_ttl).rotation_threshold(self.rotation_threshold)
    }
}

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    store: KeystoreArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Carry the plan out and save the keystore.
    #[arg(long)]
    apply: bool,
    #[command(flatten)]
    rsa: RsaArgs,
}

#[derive(Debug, Args)]
pub(crate) struct KeyArgs {
    #[command(flatten)]
    store: KeystoreArgs,
    /// The key ID.
    #[arg(value_name = "KID")]
    kid: String,
}

#[derive(Debug, Args)]
pub(crate) struct OidcArgs {
    #[command(flatten)]
    store: KeystoreArgs,
    /// The issuer URL tokens carry in iss (https).
    #[arg(long, value_name = "URL")]
    issuer: String,
}

pub(crate) fn run(cmd: KeyringCommand, ctx: &Ctx) -> Result<(), CliError> {
    match cmd {
        KeyringCommand::Init(a) => init(&a, ctx),
        KeyringCommand::Rotate(a) => rotate(&a, ctx),
        KeyringCommand::List(a) => list(&a, ctx),
        KeyringCommand::Plan(a) => plan(&a, ctx),
        KeyringCommand::Promote(a) => promote(&a, ctx),
        KeyringCommand::Deprecate(a) => deprecate(&a, ctx),
        KeyringCommand::Jwks(a) => {
            let keyring = a.load()?;
            ctx.print_json(&to_value(&keyring.jwks().to_json()));
            Ok(())
        }
        KeyringCommand::Wrap(a) => convert(&a, Conversion::Wrap, ctx),
        KeyringCommand::Unwrap(a) => convert(&a, Conversion::Unwrap, ctx),
        KeyringCommand::Rewrap(a) => {
            let to: Option<Arc<dyn KeyWrapper>> = match (&a.new_kek_file, &a.new_transit_key) {
                (Some(file), _) => Some(Arc::new(KekFile::load(file)?)),
                (None, Some(key)) => Some(Arc::new(a.store.custody.transit(key)?)),
                (None, None) => None,
            };
            convert(&a.store, Conversion::Rewrap(to), ctx)
        }
        KeyringCommand::GenerateKek(a) => {
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
        KeyringCommand::Oidc(a) => {
            let keyring = a.store.load()?;
            let doc = keyring.oidc_discovery(&a.issuer)?;
            ctx.print_json(&to_value(&doc.to_json()));
            Ok(())
        }
    }
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
            KeystoreLoadOptions::default().wrapper(kek),
            None,
            "unwrapped",
        ),
        Conversion::Rewrap(None) => (
            KeystoreLoadOptions::default().wrapper(kek.clone()),
            Some(kek),
            "rewrapped",
        ),
        Conversion::Rewrap(Some(new)) => (
            KeystoreLoadOptions::default().wrapper(kek),
            Some(new),
            "rewrapped",
        ),
    };
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

/// A document the library rendered, as a value to print.
fn to_value(json: &str) -> Value {
    // The library renders these documents from plain strings: always JSON.
    serde_json::from_str(json).unwrap_or(Value::Null)
}

/// One change to the keyring, as printed.
enum Change {
    /// A key became active; `previous` (if any) became inactive.
    Activated {
        kid: KeyId,
        alg: Algorithm,
        previous: Option<KeyId>,
        how: &'static str,
    },
    /// A key was added that signs from `publish_at`.
    Prepublished {
        kid: KeyId,
        alg: Algorithm,
        publish_at: i64,
    },
    /// A key left the JWKS.
    Deprecated { kid: KeyId, alg: Algorithm },
}

impl Change {
    fn human(&self, now: i64) -> String {
        match self {
            Change::Activated {
                kid,
                alg,
                previous,
                how,
            } => {
                let mut s = format!("{how} {alg}: key {kid} is now active");
                if let Some(p) = previous {
                    s.push_str(&format!("; {p} is now inactive (still verifies)"));
                }
                s
            }
            Change::Prepublished {
                kid,
                alg,
                publish_at,
            } => format!(
                "prepublished {alg}: key {kid} is in the JWKS now and signs from {}",
                when(*publish_at, now)
            ),
            Change::Deprecated { kid, alg } => {
                format!("deprecated {alg}: key {kid} left the JWKS and verifies no more")
            }
        }
    }

    fn json(&self) -> Value {
        match self {
            Change::Activated {
                kid,
                alg,
                previous,
                how,
            } => json!({"action": how, "algorithm": alg.name(), "kid": kid.as_str(),
                        "state": "active", "previous": previous.as_ref().map(KeyId::as_str)}),
            Change::Prepublished {
                kid,
                alg,
                publish_at,
            } => json!({"action": "prepublished", "algorithm": alg.name(), "kid": kid.as_str(),
                        "state": "prepublished", "publish_time": publish_at}),
            Change::Deprecated { kid, alg } => json!({"action": "deprecated",
                        "algorithm": alg.name(), "kid": kid.as_str(), "state": "deprecated"}),
        }
    }
}

/// Saves the keyring and prints the changes (nothing is saved without one).
fn save_and_report(
    keyring: &Keyring,
    store: &KeystoreArgs,
    changes: &[Change],
    ctx: &Ctx,
) -> Result<(), CliError> {
    let path = &store.keystore;
    if !changes.is_empty() {
        save_keystore(keyring, path, &store.custody)?;
    }
    let now = ctx.now();
    let mut human: Vec<String> = changes.iter().map(|c| c.human(now)).collect();
    if changes.is_empty() {
        human.push("nothing changed".into());
    } else {
        human.push(format!("saved {}", path.display()));
    }
    ctx.emit(
        &human.join("\n"),
        &json!({
            "keystore": path.display().to_string(),
            "saved": !changes.is_empty(),
            "changes": changes.iter().map(Change::json).collect::<Vec<_>>(),
        }),
    );
    Ok(())
}

fn rotate_one(
    keyring: &Keyring,
    alg: Algorithm,
    rsa: &RsaArgs,
    now: i64,
    how: &'static str,
) -> Result<Change, CliError> {
    let previous = keyring.active_id_for(alg);
    let kid = match alg {
        Algorithm::Rs256 => keyring.rotate_rsa(rsa.size()?, now)?,
        other => keyring.rotate_alg(other, now)?,
    };
    Ok(Change::Activated {
        kid,
        alg,
        previous,
        how,
    })
}

fn init(a: &InitArgs, ctx: &Ctx) -> Result<(), CliError> {
    let path = &a.store.keystore;
    let mut algs = a.algs.clone();
    if algs.is_empty() {
        algs.push(Algorithm::EdDsa);
    }
    algs.sort();
    algs.dedup();
    if algs.contains(&Algorithm::Rs256) {
        a.rsa.size()?;
    }
    // A new deployment's directory (/var/lib/wid) may not exist yet: make it,
    // private, as the keystore it will hold.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(dir)
            .map_err(|e| CliError::io(format!("creating directory {}", dir.display()), &e))?;
    }
    // Claim the name first, so a keystore that appears meanwhile (another
    // init) is never replaced; the save below renames over this placeholder.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            let err = CliError::io(format!("creating keystore {}", path.display()), &e);
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                err.hint("wid keyring init never overwrites a keystore: rotate it with `wid keyring rotate`, or remove the file first")
            } else {
                err
            }
        })?;
    let keyring = Keyring::new();
    let now = ctx.now();
    let made: Result<Vec<Change>, CliError> = algs
        .iter()
        .map(|&alg| rotate_one(&keyring, alg, &a.rsa, now, "created"))
        .collect();
    let result = made.and_then(|changes| save_and_report(&keyring, &a.store, &changes, ctx));
    if result.is_err() {
        // Only our empty placeholder can be there: the save is the last step.
        let _ = std::fs::remove_file(path);
    }
    result
}

fn rotate(a: &RotateArgs, ctx: &Ctx) -> Result<(), CliError> {
    let keyring = a.store.load()?;
    let change = rotate_one(&keyring, a.alg, &a.rsa, ctx.now(), "rotated")?;
    save_and_report(&keyring, &a.store, &[change], ctx)
}

fn key_json(k: &KeyInfo) -> Value {
    let nonzero = |t: i64| (t != 0).then_some(t);
    json!({
        "kid": k.kid.as_str(),
        "algorithm": k.algorithm.name(),
        "state": k.state.name(),
        "create_time": k.create_time,
        "publish_time": nonzero(k.publish_time),
        "retired_time": nonzero(k.retired_time),
        "can_sign": k.can_sign(),
        "rsa_bits": k.public_key.rsa_bits(),
    })
}

fn list(a: &KeystoreArgs, ctx: &Ctx) -> Result<(), CliError> {
    let keyring = a.load()?;
    let keys = keyring.keys();
    if ctx.json {
        let v: Vec<Value> = keys.iter().map(key_json).collect();
        outln!(
            "{}",
            json!({ "keystore": a.keystore.display().to_string(), "keys": v })
        );
        return Ok(());
    }
    if keys.is_empty() {
        outln!("{}: no keys", a.keystore.display());
        return Ok(());
    }
    let now = ctx.now();
    let mut rows = vec![[
        "KID".to_string(),
        "ALG".into(),
        "STATE".into(),
        "CREATED".into(),
        "SIGNS FROM".into(),
        "RETIRED".into(),
    ]];
    for k in &keys {
        let mut state = k.state.name().to_string();
        if !k.can_sign() {
            state.push_str(" (verify-only)");
        }
        let mut alg = k.algorithm.name().to_string();
        if let Some(bits) = k.public_key.rsa_bits() {
            alg.push_str(&format!("/{bits}"));
        }
        rows.push([
            k.kid.to_string(),
            alg,
            state,
            when(k.create_time, now),
            when(k.publish_time, now),
            when(k.retired_time, now),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        outln!("{}", line.join("  ").trim_end());
    }
    Ok(())
}

fn plan(a: &PlanArgs, ctx: &Ctx) -> Result<(), CliError> {
    let keyring = a.store.load()?;
    let now = ctx.now();
    let policy = a.policy.policy();
    let actions = plan_rotation(&keyring.keys(), now, &policy);
    let describe = |action: &RotationAction| -> (String, Value) {
        match action {
            RotationAction::Rotate { algorithm } => (
                format!("rotate {algorithm}: no active {algorithm} key; make one now"),
                json!({"action": "rotate", "algorithm": algorithm.name()}),
            ),
            RotationAction::Prepublish {
                algorithm,
                publish_at,
            } => (
                format!(
                    "prepublish {algorithm}: a successor, in the JWKS now, signing from {}",
                    when(*publish_at, now)
                ),
                json!({"action": "prepublish", "algorithm": algorithm.name(), "publish_at": publish_at}),
            ),
            RotationAction::Promote { kid } => (
                format!("promote {kid}: its publish time has come"),
                json!({"action": "promote", "kid": kid.as_str()}),
            ),
            RotationAction::Deprecate { kid } => (
                format!("deprecate {kid}: every token it signed has expired"),
                json!({"action": "deprecate", "kid": kid.as_str()}),
            ),
            other => (
                format!("{other:?} (not understood by this wid)"),
                json!({"action": "unknown", "debug": format!("{other:?}")}),
            ),
        }
    };
    let described: Vec<(String, Value)> = actions.iter().map(describe).collect();
    let mut human = vec![format!(
        "plan at {} (rotation threshold {}, longest token TTL {}):",
        utc(now),
        span(policy.rotation_threshold.as_secs()),
        policy
            .longest_token_ttl
            .map_or("unset: no key is ever deprecated".to_string(), |d| span(
                d.as_secs()
            ))
    )];
    if described.is_empty() {
        human.push("  nothing to do".into());
    }
    human.extend(described.iter().map(|(h, _)| format!("  {h}")));

    if !a.apply {
        ctx.emit(
            &human.join("\n"),
            &json!({"now": now, "actions": described.iter().map(|(_, j)| j.clone()).collect::<Vec<_>>(), "applied": false}),
        );
        return Ok(());
    }
    if !ctx.json {
        outln!("{}", human.join("\n"));
    }
    let mut changes = Vec::new();
    for action in &actions {
        match action {
            RotationAction::Rotate { algorithm } => {
                changes.push(rotate_one(&keyring, *algorithm, &a.rsa, now, "rotated")?);
            }
            RotationAction::Prepublish {
                algorithm,
                publish_at,
            } => {
                let kid = match algorithm {
                    Algorithm::Rs256 => keyring.prepublish_rsa(a.rsa.size()?, now, *publish_at)?,
                    other => keyring.prepublish_alg(*other, now, *publish_at)?,
                };
                changes.push(Change::Prepublished {
                    kid,
                    alg: *algorithm,
                    publish_at: *publish_at,
                });
            }
            RotationAction::Promote { kid } => {
                changes.push(promote_one(&keyring, kid.as_str(), now)?);
            }
            RotationAction::Deprecate { kid } => {
                let alg = alg_of(&keyring, kid.as_str())?;
                keyring.deprecate(kid.as_str(), now)?;
                changes.push(Change::Deprecated {
                    kid: kid.clone(),
                    alg,
                });
            }
            other => {
                return Err(CliError::new(
                    ResultCode::InvalidArgument,
                    format!("cannot apply {other:?}: this wid does not know that action"),
                )
                .exit(Exit::Internal));
            }
        }
    }
    save_and_report(&keyring, &a.store, &changes, ctx)
}

fn alg_of(keyring: &Keyring, kid: &str) -> Result<Algorithm, CliError> {
    keyring.key_info(kid).map(|k| k.algorithm).ok_or_else(|| {
        CliError::new(
            ResultCode::UnknownKey,
            format!("no key {kid:?} in the keystore"),
        )
        .hint("`wid keyring list` shows the key IDs")
        .exit(Exit::Usage)
    })
}

fn promote_one(keyring: &Keyring, kid: &str, now: i64) -> Result<Change, CliError> {
    let alg = alg_of(keyring, kid)?;
    let previous = keyring.active_id_for(alg);
    keyring.promote(kid, now)?;
    Ok(Change::Activated {
        kid: KeyId::new(kid)?,
        alg,
        previous,
        how: "promoted",
    })
}

fn promote(a: &KeyArgs, ctx: &Ctx) -> Result<(), CliError> {
    let keyring = a.store.load()?;
    let alg = alg_of(&keyring, &a.kid)?;
    if keyring.active_id_for(alg).as_ref().map(KeyId::as_str) == Some(a.kid.as_str()) {
        ctx.note(&format!("{} is already the active {alg} key", a.kid));
        return save_and_report(&keyring, &a.store, &[], ctx);
    }
    let change = promote_one(&keyring, &a.kid, ctx.now())?;
    save_and_report(&keyring, &a.store, &[change], ctx)
}

fn deprecate(a: &KeyArgs, ctx: &Ctx) -> Result<(), CliError> {
    let keyring = a.store.load()?;
    let alg = alg_of(&keyring, &a.kid)?;
    if keyring.key_info(&a.kid).map(|k| k.state) == Some(KeyState::Deprecated) {
        ctx.note(&format!("{} is already deprecated", a.kid));
        return save_and_report(&keyring, &a.store, &[], ctx);
    }
    keyring.deprecate(&a.kid, ctx.now()).map_err(|e| {
        let err = CliError::from(e);
        if keyring.active_id_for(alg).as_ref().map(KeyId::as_str) == Some(a.kid.as_str()) {
            err.hint(format!(
                "rotate first (`wid keyring rotate --alg {alg}`), then deprecate the old key once its tokens have expired"
            ))
        } else {
            err
        }
    })?;
    let change = Change::Deprecated {
        kid: KeyId::new(&a.kid)?,
        alg,
    };
    save_and_report(&keyring, &a.store, &[change], ctx)
}
