//! `wid keyring ...`: keystore files (or, with `--etcd`, the replicated
//! keyring), their keys and what relying parties fetch.
//!
//! Every command that changes a keystore file saves it with `Keyring::save`
//! (mode 0600, temp file + fsync + rename) and prints what changed. With
//! `--etcd` each change is one `EtcdKeyring` transaction instead (nothing is
//! saved locally), and `wid keyring migrate` copies keys between the two.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use workload_identity::{
    Algorithm, EtcdKeyring, KekFile, KeyId, KeyInfo, KeyState, KeyWrapper, Keyring,
    KeystoreLoadOptions, ResultCode, RotationAction, RotationPolicy, RsaKeySize, plan_rotation,
};

use crate::etcd_args::{EtcdArgs, Opened, StoreArgs};
use crate::output::{Ctx, parse_duration, span, utc, when};
use crate::sources::{CustodyArgs, bad_flag, load_keystore_with, parse_alg, save_keystore};
use crate::{CliError, Exit};

#[derive(Debug, Subcommand)]
pub(crate) enum KeyringCommand {
    /// Create a keystore with one active key per --alg (default EdDSA);
    /// refuses to overwrite an existing file (with --etcd: to add to a
    /// prefix that already holds keys).
    Init(InitArgs),
    /// Make a new active key of --alg (default EdDSA); the previous one
    /// becomes inactive and keeps verifying. With --etcd the first key is
    /// active at once and later ones are prepublished for the lead time
    /// first (--immediate: at once).
    Rotate(RotateArgs),
    /// Show every key: ID, algorithm, state and times.
    List(StoreArgs),
    /// Show what the rotation policy says to do now (--apply does it).
    Plan(PlanArgs),
    /// Make a key the active key of its algorithm now.
    Promote(KeyArgs),
    /// Take an inactive or prepublished key out of the JWKS; it verifies no more.
    Deprecate(KeyArgs),
    /// Print the JWKS relying parties fetch (/.well-known/jwks.json).
    Jwks(StoreArgs),
    /// Print the OIDC discovery document (/.well-known/openid-configuration).
    Oidc(OidcArgs),
    /// Copy a keystore file's keys into an empty replicated keyring in etcd
    /// (wrapped by the KEK), or with --to-keystore the replicated keys into
    /// a new keystore file.
    Migrate(MigrateArgs),
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
pub(crate) struct InitArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// An algorithm to make an active key for (repeat for several).
    #[arg(long = "alg", value_name = "EdDSA|ES256|RS256", value_parser = parse_alg)]
    algs: Vec<Algorithm>,
    #[command(flatten)]
    rsa: RsaArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RotateArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The algorithm to rotate.
    #[arg(long, value_name = "EdDSA|ES256|RS256", value_parser = parse_alg, default_value = "EdDSA")]
    alg: Algorithm,
    #[command(flatten)]
    rsa: RsaArgs,
    /// With --etcd: replace the active key at once instead of prepublishing
    /// its successor for the lead time (for a compromised key). Servers sign
    /// with the new key as soon as the watch brings it; a verifier that has
    /// not seen it yet waits for it. (A keystore file always rotates at once.)
    #[arg(long, requires = "etcd", help_heading = crate::etcd_args::HEADING)]
    immediate: bool,
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

    /// The size for a replicated change the library makes only at its
    /// default size (`rotate_now`, `prepublish`): refuses any other.
    fn default_only(&self, what: &str) -> Result<(), CliError> {
        if self.size()? == RsaKeySize::default() {
            return Ok(());
        }
        Err(bad_flag(
            "--rsa-bits",
            format!(
                "{what} with --etcd makes {}-bit RS256 keys only (the replicated keyring has no sized variant of it yet); `wid keyring rotate --etcd ... --alg RS256 --rsa-bits {}` prepublishes a key of that size",
                RsaKeySize::default().bits(),
                self.rsa_bits
            ),
        ))
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
    store: StoreArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Carry the plan out and save the keystore (with --etcd: each action
    /// one transaction; a prepublished key is promoted only after the lead
    /// time).
    #[arg(long)]
    apply: bool,
    #[command(flatten)]
    rsa: RsaArgs,
}

#[derive(Debug, Args)]
pub(crate) struct KeyArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The key ID.
    #[arg(value_name = "KID")]
    kid: String,
}

#[derive(Debug, Args)]
pub(crate) struct OidcArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The issuer URL tokens carry in iss (https).
    #[arg(long, value_name = "URL")]
    issuer: String,
}

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// The keystore file: copied into etcd, or with --to-keystore written
    /// from etcd.
    #[arg(long, value_name = "FILE")]
    keystore: PathBuf,
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

pub(crate) fn run(cmd: KeyringCommand, ctx: &Ctx) -> Result<(), CliError> {
    match cmd {
        KeyringCommand::Init(a) => init(&a, ctx),
        KeyringCommand::Rotate(a) => rotate(&a, ctx),
        KeyringCommand::List(a) => list(&a, ctx),
        KeyringCommand::Plan(a) => plan(&a, ctx),
        KeyringCommand::Promote(a) => promote(&a, ctx),
        KeyringCommand::Deprecate(a) => deprecate(&a, ctx),
        KeyringCommand::Jwks(a) => {
            let opened = a.open(ctx)?;
            ctx.print_json(&to_value(&opened.keyring().jwks().to_json()));
            Ok(())
        }
        KeyringCommand::Migrate(a) => migrate(&a, ctx),
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
            let opened = a.store.open(ctx)?;
            let doc = opened.keyring().oidc_discovery(&a.issuer)?;
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
    /// A successor was already waiting; nothing was added.
    Pending {
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
            Change::Pending {
                kid,
                alg,
                publish_at,
            } => format!(
                "a successor of the active {alg} key is already prepublished: key {kid}, signing from {}; nothing added",
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
            Change::Pending {
                kid,
                alg,
                publish_at,
            } => json!({"action": "already-pending", "algorithm": alg.name(), "kid": kid.as_str(),
                        "state": "prepublished", "publish_time": publish_at}),
            Change::Deprecated { kid, alg } => json!({"action": "deprecated",
                        "algorithm": alg.name(), "kid": kid.as_str(), "state": "deprecated"}),
        }
    }

    /// Whether the keyring changed.
    fn changed(&self) -> bool {
        !matches!(self, Change::Pending { .. })
    }
}

/// Saves a keystore file and prints the changes (nothing is saved without
/// one); for the replicated keyring the changes are committed already, and
/// only printed.
fn report(
    opened: &Opened,
    custody: &CustodyArgs,
    changes: &[Change],
    ctx: &Ctx,
) -> Result<(), CliError> {
    let changed = changes.iter().any(Change::changed);
    let now = ctx.now();
    let mut human: Vec<String> = changes.iter().map(|c| c.human(now)).collect();
    let mut doc = opened.json_fields();
    match opened {
        Opened::File { path, keyring } => {
            if changed {
                save_keystore(keyring, path, custody)?;
                human.push(format!("saved {}", path.display()));
            } else if changes.is_empty() {
                human.push("nothing changed".into());
            }
            doc.insert("saved".into(), json!(changed));
        }
        Opened::Etcd(r) => {
            if changed {
                human.push(format!("committed to etcd {}", r.prefix()));
            } else if changes.is_empty() {
                human.push("nothing changed".into());
            }
            if changes
                .iter()
                .any(|c| matches!(c, Change::Prepublished { .. } | Change::Pending { .. }))
            {
                human.push(format!(
                    "a prepublished key signs once it is promoted after the lead time ({}): by the elected rotator (`wid serve --etcd ... --rotator`), `wid keyring plan --apply --etcd ...` or `wid keyring promote --etcd ... KID`",
                    span(r.lead_time().as_secs())
                ));
            }
            doc.insert("committed".into(), json!(changed));
        }
    }
    doc.insert(
        "changes".into(),
        Value::Array(changes.iter().map(Change::json).collect()),
    );
    ctx.emit(&human.join("\n"), &Value::Object(doc));
    Ok(())
}

/// The lead time in whole seconds, rounded up (as the library counts it).
fn lead_secs(r: &EtcdKeyring) -> i64 {
    let lead = r.lead_time();
    i64::try_from(lead.as_secs()).unwrap_or(i64::MAX) + i64::from(lead.subsec_nanos() > 0)
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

/// `EtcdKeyring::rotate`: the first key of `alg` active at once, otherwise
/// a successor prepublished for the lead time (or the one already waiting).
fn rotate_replicated(
    r: &EtcdKeyring,
    alg: Algorithm,
    rsa: &RsaArgs,
    now: i64,
    how: &'static str,
) -> Result<Change, CliError> {
    let kr = r.keyring();
    let previous = kr.active_id_for(alg);
    let pending_before: Vec<KeyId> = kr
        .keys()
        .into_iter()
        .filter(|k| k.algorithm == alg && k.state == KeyState::Prepublished)
        .map(|k| k.kid)
        .collect();
    let kid = match alg {
        Algorithm::Rs256 => r.rotate_rsa(rsa.size()?, now)?,
        other => r.rotate(other, now)?,
    };
    // The change is committed: say what it was from what `rotate` does
    // (first key active at once, else a successor prepublished for the lead
    // time, else the one already waiting), with the times from the copy,
    // which holds the change when the call returns.
    let info = r.keyring().key_info(kid.as_str());
    let publish_at = info
        .as_ref()
        .map_or(now.saturating_add(lead_secs(r)), |k| k.publish_time);
    let active = info.map_or(previous.is_none(), |k| k.state == KeyState::Active);
    Ok(if active {
        Change::Activated {
            kid,
            alg,
            previous,
            how,
        }
    } else if pending_before.contains(&kid) {
        Change::Pending {
            kid,
            alg,
            publish_at,
        }
    } else {
        Change::Prepublished {
            kid,
            alg,
            publish_at,
        }
    })
}

/// Makes the directories a new keystore goes in (private, as the keystore)
/// and claims its name, so a file that appears meanwhile is never replaced;
/// the save renames over this empty placeholder.
fn claim_new_file(path: &Path, refusal_hint: &str) -> Result<(), CliError> {
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

fn init(a: &InitArgs, ctx: &Ctx) -> Result<(), CliError> {
    let mut algs = a.algs.clone();
    if algs.is_empty() {
        algs.push(Algorithm::EdDsa);
    }
    algs.sort();
    algs.dedup();
    if algs.contains(&Algorithm::Rs256) {
        a.rsa.size()?;
    }
    let now = ctx.now();
    let Some(path) = &a.store.keystore else {
        let opened = a.store.open(ctx)?;
        let Opened::Etcd(r) = &opened else {
            return Err(bad_flag("--keystore", "or --etcd is required"));
        };
        let held = r.keyring().len();
        if held > 0 {
            return Err(CliError::new(
                ResultCode::KeyringConflict,
                format!(
                    "the replicated keyring at {} already holds {held} keys",
                    r.prefix()
                ),
            )
            .hint("wid keyring init never adds to a keyring that has keys: rotate it with `wid keyring rotate --etcd ...`, or choose another --etcd-prefix"));
        }
        let changes = algs
            .iter()
            .map(|&alg| rotate_replicated(r, alg, &a.rsa, now, "created"))
            .collect::<Result<Vec<_>, _>>()?;
        return report(&opened, &a.store.custody, &changes, ctx);
    };
    claim_new_file(
        path,
        "wid keyring init never overwrites a keystore: rotate it with `wid keyring rotate`, or remove the file first",
    )?;
    let keyring = Keyring::new();
    let made: Result<Vec<Change>, CliError> = algs
        .iter()
        .map(|&alg| rotate_one(&keyring, alg, &a.rsa, now, "created"))
        .collect();
    let opened = Opened::File {
        path: path.clone(),
        keyring,
    };
    let result = made.and_then(|changes| report(&opened, &a.store.custody, &changes, ctx));
    if result.is_err() {
        // Only our empty placeholder can be there: the save is the last step.
        let _ = std::fs::remove_file(path);
    }
    result
}

fn rotate(a: &RotateArgs, ctx: &Ctx) -> Result<(), CliError> {
    if a.immediate && !a.store.etcd.given() {
        return Err(bad_flag(
            "--immediate",
            "applies with --etcd only: a keystore file always rotates at once",
        ));
    }
    let opened = a.store.open(ctx)?;
    let now = ctx.now();
    let change = match &opened {
        Opened::File { keyring, .. } => rotate_one(keyring, a.alg, &a.rsa, now, "rotated")?,
        Opened::Etcd(r) if a.immediate => {
            if a.alg == Algorithm::Rs256 {
                a.rsa.default_only("rotate --immediate")?;
            }
            let previous = r.keyring().active_id_for(a.alg);
            let kid = r.rotate_now(a.alg, now)?;
            Change::Activated {
                kid,
                alg: a.alg,
                previous,
                how: "rotated at once",
            }
        }
        Opened::Etcd(r) => rotate_replicated(r, a.alg, &a.rsa, now, "rotated")?,
    };
    report(&opened, &a.store.custody, &[change], ctx)
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

fn list(a: &StoreArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.open(ctx)?;
    let keys = opened.keyring().keys();
    if ctx.json {
        let mut doc = opened.json_fields();
        doc.insert(
            "keys".into(),
            Value::Array(keys.iter().map(key_json).collect()),
        );
        outln!("{}", Value::Object(doc));
        return Ok(());
    }
    if keys.is_empty() {
        outln!("{}: no keys", opened.describe());
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
    let opened = a.store.open(ctx)?;
    let keyring = opened.keyring();
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
    // Every key planned on was in the copy by now.
    let seen = Instant::now();
    let mut changes = Vec::new();
    for action in &actions {
        let change = match &opened {
            Opened::File { keyring, .. } => apply_to_file(keyring, action, &a.rsa, now)?,
            Opened::Etcd(r) => apply_replicated(r, action, &a.rsa, now, seen, ctx)?,
        };
        changes.extend(change);
    }
    report(&opened, &a.store.custody, &changes, ctx)
}

fn unknown_action(action: &RotationAction) -> CliError {
    CliError::new(
        ResultCode::InvalidArgument,
        format!("cannot apply {action:?}: this wid does not know that action"),
    )
    .exit(Exit::Internal)
}

/// One planned action, on a keystore's keyring (saved afterwards).
fn apply_to_file(
    keyring: &Keyring,
    action: &RotationAction,
    rsa: &RsaArgs,
    now: i64,
) -> Result<Option<Change>, CliError> {
    Ok(Some(match action {
        RotationAction::Rotate { algorithm } => {
            rotate_one(keyring, *algorithm, rsa, now, "rotated")?
        }
        RotationAction::Prepublish {
            algorithm,
            publish_at,
        } => {
            let kid = match algorithm {
                Algorithm::Rs256 => keyring.prepublish_rsa(rsa.size()?, now, *publish_at)?,
                other => keyring.prepublish_alg(*other, now, *publish_at)?,
            };
            Change::Prepublished {
                kid,
                alg: *algorithm,
                publish_at: *publish_at,
            }
        }
        RotationAction::Promote { kid } => promote_one(keyring, kid.as_str(), now)?,
        RotationAction::Deprecate { kid } => {
            let alg = alg_of(keyring, kid.as_str())?;
            keyring.deprecate(kid.as_str(), now)?;
            Change::Deprecated {
                kid: kid.clone(),
                alg,
            }
        }
        other => return Err(unknown_action(other)),
    }))
}

/// One planned action as an etcd transaction, the way the elected rotator
/// does it: a prepublished key is published for at least the lead time and
/// promoted only after it (`None`: not yet).
fn apply_replicated(
    r: &EtcdKeyring,
    action: &RotationAction,
    rsa: &RsaArgs,
    now: i64,
    seen: Instant,
    ctx: &Ctx,
) -> Result<Option<Change>, CliError> {
    let kr = r.keyring();
    Ok(Some(match action {
        RotationAction::Rotate { algorithm } => {
            rotate_replicated(r, *algorithm, rsa, now, "rotated")?
        }
        RotationAction::Prepublish {
            algorithm,
            publish_at,
        } => {
            if *algorithm == Algorithm::Rs256 {
                rsa.default_only("plan --apply (prepublish)")?;
            }
            let at = (*publish_at).max(now.saturating_add(lead_secs(r)));
            let kid = r.prepublish(*algorithm, now, at)?;
            Change::Prepublished {
                kid,
                alg: *algorithm,
                publish_at: at,
            }
        }
        RotationAction::Promote { kid } => {
            let ready = kr.key_info(kid.as_str()).is_some_and(|k| {
                k.state != KeyState::Prepublished
                    || k.create_time.saturating_add(lead_secs(r)) <= now
            });
            if !ready {
                ctx.note(&format!(
                    "not promoting {kid} yet: it has not been published for the lead time ({})",
                    span(r.lead_time().as_secs())
                ));
                return Ok(None);
            }
            promote_replicated(r, kid.as_str(), seen, ctx)?
        }
        RotationAction::Deprecate { kid } => {
            let alg = alg_of(&kr, kid.as_str())?;
            r.deprecate(kid.as_str(), now)?;
            Change::Deprecated {
                kid: kid.clone(),
                alg,
            }
        }
        other => return Err(unknown_action(other)),
    }))
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
    let opened = a.store.open(ctx)?;
    let seen = Instant::now();
    let keyring = opened.keyring();
    let alg = alg_of(&keyring, &a.kid)?;
    if keyring.active_id_for(alg).as_ref().map(KeyId::as_str) == Some(a.kid.as_str()) {
        ctx.note(&format!("{} is already the active {alg} key", a.kid));
        return report(&opened, &a.store.custody, &[], ctx);
    }
    let change = match &opened {
        Opened::File { keyring, .. } => promote_one(keyring, &a.kid, ctx.now())?,
        Opened::Etcd(r) => promote_replicated(r, &a.kid, seen, ctx)?,
    };
    report(&opened, &a.store.custody, &[change], ctx)
}

/// Promotes `kid` in the replicated keyring. The library promotes a
/// prepublished key only once this process has held it for the lead time
/// (so every watcher has it), measured from when this copy first saw it,
/// which is no later than `seen`: a one-shot `wid` waits out that time
/// first, and says so. A key published too recently by the clock is
/// refused at once (the library says when it may be promoted).
fn promote_replicated(
    r: &EtcdKeyring,
    kid: &str,
    seen: Instant,
    ctx: &Ctx,
) -> Result<Change, CliError> {
    let kr = r.keyring();
    let alg = alg_of(&kr, kid)?;
    let due = kr.key_info(kid).is_some_and(|k| {
        k.state == KeyState::Prepublished && k.create_time.saturating_add(lead_secs(r)) <= ctx.now()
    });
    if due {
        // A margin over the library's own monotonic measure.
        let until = seen + r.lead_time() + Duration::from_millis(100);
        let left = until.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            ctx.note(&format!(
                "waiting {} ms before promoting {kid}: a prepublished key is promoted only once this process has held it for the lead time ({}), as every server then has it",
                left.as_millis(),
                span(r.lead_time().as_secs())
            ));
            std::thread::sleep(left);
        }
    }
    let previous = r.keyring().active_id_for(alg);
    r.promote(kid, ctx.now())?;
    Ok(Change::Activated {
        kid: KeyId::new(kid)?,
        alg,
        previous,
        how: "promoted",
    })
}

fn deprecate(a: &KeyArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.store.open(ctx)?;
    let keyring = opened.keyring();
    let alg = alg_of(&keyring, &a.kid)?;
    if keyring.key_info(&a.kid).map(|k| k.state) == Some(KeyState::Deprecated) {
        ctx.note(&format!("{} is already deprecated", a.kid));
        return report(&opened, &a.store.custody, &[], ctx);
    }
    let now = ctx.now();
    let done = match &opened {
        Opened::File { keyring, .. } => keyring.deprecate(&a.kid, now),
        Opened::Etcd(r) => r.deprecate(&a.kid, now),
    };
    done.map_err(|e| {
        let err = CliError::from(e);
        if keyring.active_id_for(alg).as_ref().map(KeyId::as_str) == Some(a.kid.as_str()) {
            err.hint(format!(
                "rotate first (`wid keyring rotate {} --alg {alg}`), then deprecate the old key once its tokens have expired",
                a.store.flags()
            ))
        } else {
            err
        }
    })?;
    let change = Change::Deprecated {
        kid: KeyId::new(&a.kid)?,
        alg,
    };
    report(&opened, &a.store.custody, &[change], ctx)
}

/// `wid keyring migrate`: a keystore file into an empty replicated keyring,
/// or (`--to-keystore`) the replicated keys into a new keystore file.
fn migrate(a: &MigrateArgs, ctx: &Ctx) -> Result<(), CliError> {
    if !a.etcd.given() {
        a.etcd.refuse_without_etcd()?;
        return Err(bad_flag(
            "--etcd",
            "is required: the etcd members the replicated keyring is on",
        ));
    }
    let path = &a.keystore;
    if a.to_keystore {
        return migrate_to_file(a, ctx);
    }
    let wrapper = a.custody.wrapper()?;
    // A plaintext keystore may be the source: in etcd its keys are wrapped.
    let mut options = KeystoreLoadOptions::default().allow_plaintext(true);
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
    let kek = wrapper.as_ref().map(|w| w.kek_id().to_string());
    let how = match &kek {
        Some(id) => format!("wrapped by KEK {id}"),
        None => "IN PLAINTEXT (--etcd-insecure-plaintext-keys)".into(),
    };
    ctx.emit(
        &format!(
            "copied {n} keys from {} into etcd {}, {how}",
            path.display(),
            r.prefix()
        ),
        &json!({"from": {"keystore": path.display().to_string()},
                "to": {"etcd_prefix": r.prefix()},
                "keys": n, "kek_id": kek}),
    );
    Ok(())
}

fn migrate_to_file(a: &MigrateArgs, ctx: &Ctx) -> Result<(), CliError> {
    let path = &a.keystore;
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
    if let Err(e) = saved {
        if claimed {
            // Only our empty placeholder can be there: the save renames last.
            let _ = std::fs::remove_file(path);
        }
        return Err(e.into());
    }
    let kek = wrapper.as_ref().map(|w| w.kek_id().to_string());
    let how = match &kek {
        Some(id) => format!("wrapped by KEK {id}"),
        None => "IN PLAINTEXT: anyone who can read the file holds the keys".into(),
    };
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
