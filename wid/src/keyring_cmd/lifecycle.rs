//! The commands that change the keys, written once for a keystore file and
//! the replicated keyring alike: init, rotate, plan (--apply), promote,
//! deprecate. Each change is made by `file` or `etcd`, and `report`ed.

use std::time::Instant;

use clap::Args;
use serde_json::{Value, json};
use workload_identity::{
    Algorithm, KeyId, KeyPurpose, KeyState, Keyring, KeyringPolicy, ResultCode, RotationAction,
    plan_rotation,
};

use super::change::{Change, report};
use super::flags::{Pair, PolicyArgs, PurposeArgs, RsaArgs, StoredPolicyArgs, parse_purpose};
use super::{etcd, file};
use crate::etcd_args::{Opened, StoreArgs};
use crate::output::{Ctx, span, utc, when};
use crate::sources::{bad_flag, parse_alg};
use crate::{CliError, Exit};

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// An algorithm to make an active key for (repeat for several).
    #[arg(long = "alg", value_name = "EdDSA|ES256|RS256", value_parser = parse_alg)]
    algs: Vec<Algorithm>,
    #[command(flatten)]
    rsa: RsaArgs,
    #[command(flatten)]
    purpose: PurposeArgs,
    /// The policy stored with the new keys (every value not given takes its
    /// default; `wid keyring policy set` changes it later).
    #[command(flatten)]
    policy_values: StoredPolicyArgs,
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
    #[command(flatten)]
    purpose: PurposeArgs,
    /// With --etcd: replace the active key at once instead of prepublishing
    /// its successor for the lead time (for a compromised key). Servers sign
    /// with the new key as soon as the watch brings it; a verifier that has
    /// not seen it yet waits for it. (A keystore file always rotates at once.)
    #[arg(long, requires = "etcd", help_heading = crate::etcd_args::HEADING)]
    immediate: bool,
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
    /// Plan for the keys of this purpose only (`bearer` or `wit`; default:
    /// every purpose that has keys, as the elected rotator does).
    #[arg(long, value_name = "bearer|wit", value_parser = parse_purpose)]
    purpose: Option<KeyPurpose>,
}

#[derive(Debug, Args)]
pub(crate) struct KeyArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The key ID.
    #[arg(value_name = "KID")]
    kid: String,
}

pub(super) fn init(a: &InitArgs, ctx: &Ctx) -> Result<(), CliError> {
    let mut algs = a.algs.clone();
    if algs.is_empty() {
        algs.push(Algorithm::EdDsa);
    }
    algs.sort();
    algs.dedup();
    if algs.contains(&Algorithm::Rs256) {
        a.rsa.size()?;
    }
    // A keyring always stores its policy, so that a process started later
    // with other values refuses to start instead of rotating by its own.
    let mut given = a.policy_values.overrides();
    if let (Some(lead), Some(etcd_lead)) = (given.lead_time, a.store.etcd.etcd_lead_time)
        && lead != etcd_lead
    {
        return Err(bad_flag(
            "--lead-time",
            "differs from --etcd-lead-time: give one of them",
        ));
    }
    given.lead_time = given.lead_time.or(a.store.etcd.etcd_lead_time);
    let policy = given.apply(KeyringPolicy::default());
    policy.validate().map_err(CliError::from)?;
    let now = ctx.now();
    let opened = match &a.store.keystore {
        Some(path) => {
            file::claim_new_file(
                path,
                "wid keyring init never overwrites a keystore: rotate it with `wid keyring rotate`, or remove the file first",
            )?;
            Opened::File {
                path: path.clone(),
                keyring: Keyring::new(),
            }
        }
        None => {
            let opened = a.store.open(ctx)?;
            let Opened::Etcd(r) = &opened else {
                return Err(bad_flag("--keystore", "or --etcd is required"));
            };
            etcd::refuse_held_keys(r)?;
            r.set_policy(&policy).map_err(CliError::from)?;
            opened
        }
    };
    if let Opened::File { keyring, .. } = &opened {
        keyring.set_policy(Some(policy)).map_err(CliError::from)?;
    }
    let result = algs
        .iter()
        .map(|&alg| {
            rotate_key(
                &opened,
                Pair::new(a.purpose.purpose, alg),
                &a.rsa,
                now,
                "created",
            )
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|changes| report(&opened, &a.store.custody, &changes, ctx));
    if let (Err(_), Opened::File { path, .. }) = (&result, &opened) {
        // Only our empty placeholder can be there: the save is the last step.
        let _ = std::fs::remove_file(path);
    }
    result
}

pub(super) fn rotate(a: &RotateArgs, ctx: &Ctx) -> Result<(), CliError> {
    if a.immediate && !a.store.etcd.given() {
        return Err(bad_flag(
            "--immediate",
            "applies with --etcd only: a keystore file always rotates at once",
        ));
    }
    let opened = a.store.open(ctx)?;
    if let Opened::Etcd(r) = &opened {
        etcd::refuse_empty_prefix(r, "rotate")?;
    }
    let now = ctx.now();
    let pair = Pair::new(a.purpose.purpose, a.alg);
    let changes = match &opened {
        Opened::Etcd(r) if a.immediate => etcd::rotate_now(r, pair, &a.rsa, now)?,
        _ => vec![rotate_key(&opened, pair, &a.rsa, now, "rotated")?],
    };
    report(&opened, &a.store.custody, &changes, ctx)
}

pub(super) fn plan(a: &PlanArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.store.open_with_policy(Some(a.policy.both()), ctx)?;
    let keyring = opened.keyring();
    let now = ctx.now();
    let policy = opened.rotation_policy(a.policy.policy());
    let keys: Vec<workload_identity::KeyInfo> = keyring
        .keys()
        .into_iter()
        .filter(|k| a.purpose.is_none_or(|p| k.purpose == p))
        .collect();
    let mut actions = plan_rotation(&keys, now, &policy);
    if let Some(purpose) = a.purpose {
        // With no key of the purpose the plan is for a bearer EdDSA key; a
        // first WIT key is the operator's to make (its algorithm is theirs).
        actions.retain(|x| match x {
            RotationAction::Rotate { purpose: p, .. }
            | RotationAction::Prepublish { purpose: p, .. } => *p == purpose,
            _ => true,
        });
    }
    let described: Vec<(String, Value)> = actions.iter().map(|x| describe(x, now)).collect();
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
    let next = keyring.next_key_switch(now, &policy);
    if described.is_empty() {
        human.push(match next {
            Some(t) => format!(
                "  nothing to do now; the next planned key switch is {}",
                when(t, now)
            ),
            None => "  nothing to do (no key yet: `wid keyring rotate` makes one)".into(),
        });
    }
    human.extend(described.iter().map(|(h, _)| format!("  {h}")));

    if !a.apply {
        ctx.emit(
            &human.join("\n"),
            &json!({"now": now, "actions": described.iter().map(|(_, j)| j.clone()).collect::<Vec<_>>(), "applied": false, "next_key_switch": next}),
        );
        return Ok(());
    }
    if let Opened::Etcd(r) = &opened {
        etcd::refuse_empty_prefix(r, "apply a plan")?;
    }
    if !ctx.json {
        outln!("{}", human.join("\n"));
    }
    // Every key planned on was in the copy by now.
    let seen = Instant::now();
    let mut changes = Vec::new();
    for action in &actions {
        changes.extend(apply(&opened, action, &a.rsa, now, seen, ctx)?);
    }
    report(&opened, &a.store.custody, &changes, ctx)
}

/// A planned action, for people and for scripts.
pub(super) fn describe(action: &RotationAction, now: i64) -> (String, Value) {
    match action {
        RotationAction::Rotate { algorithm, purpose } => {
            let pair = Pair::new(*purpose, *algorithm);
            (
                format!("rotate {pair}: no active {pair} key; make one now"),
                json!({"action": "rotate", "algorithm": algorithm.name(), "purpose": purpose.name()}),
            )
        }
        RotationAction::Prepublish {
            algorithm,
            purpose,
            publish_at,
        } => {
            let pair = Pair::new(*purpose, *algorithm);
            (
                format!(
                    "prepublish {pair}: a successor, published now, signing from {}",
                    when(*publish_at, now)
                ),
                json!({"action": "prepublish", "algorithm": algorithm.name(), "purpose": purpose.name(), "publish_at": publish_at}),
            )
        }
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
}

/// One planned action (`None`: not yet). Through etcd it is made the way
/// the elected rotator makes it: a prepublished key is published for at
/// least the lead time, and promoted only after it.
fn apply(
    opened: &Opened,
    action: &RotationAction,
    rsa: &RsaArgs,
    now: i64,
    seen: Instant,
    ctx: &Ctx,
) -> Result<Option<Change>, CliError> {
    let change = match action {
        RotationAction::Rotate { algorithm, purpose } => {
            rotate_key(opened, Pair::new(*purpose, *algorithm), rsa, now, "rotated")?
        }
        RotationAction::Prepublish {
            algorithm,
            purpose,
            publish_at,
        } => {
            let pair = Pair::new(*purpose, *algorithm);
            match opened {
                Opened::File { keyring, .. } => {
                    file::prepublish(keyring, pair, rsa, now, *publish_at)?
                }
                Opened::Etcd(r) => etcd::prepublish(r, pair, rsa, now, *publish_at)?,
            }
        }
        RotationAction::Promote { kid } => {
            if let Opened::Etcd(r) = opened
                && !etcd::ready_to_promote(r, kid, now, ctx)
            {
                return Ok(None);
            }
            promote_key(opened, kid.as_str(), now, seen, ctx)?
        }
        RotationAction::Deprecate { kid } => {
            let alg = alg_of(&opened.keyring(), kid.as_str())?;
            deprecate_key(opened, kid.as_str(), now)?;
            Change::Deprecated {
                kid: kid.clone(),
                alg,
            }
        }
        other => {
            return Err(CliError::new(
                ResultCode::InvalidArgument,
                format!("cannot apply {other:?}: this wid does not know that action"),
            )
            .exit(Exit::Internal));
        }
    };
    Ok(Some(change))
}

pub(super) fn promote(a: &KeyArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.store.open(ctx)?;
    let seen = Instant::now();
    let keyring = opened.keyring();
    let alg = alg_of(&keyring, &a.kid)?;
    if keyring
        .active_id_for_purpose(alg.purpose, alg.signing()?)
        .as_ref()
        .map(KeyId::as_str)
        == Some(a.kid.as_str())
    {
        ctx.note(&format!("{} is already the active {alg} key", a.kid));
        return report(&opened, &a.store.custody, &[], ctx);
    }
    let change = promote_key(&opened, &a.kid, ctx.now(), seen, ctx)?;
    report(&opened, &a.store.custody, &[change], ctx)
}

#[derive(Debug, Args)]
pub(crate) struct DeprecateArgs {
    #[command(flatten)]
    key: KeyArgs,
    /// The longest TTL of the tokens this key signed: the key is deprecated
    /// only once they have all expired (the time it stopped signing, plus
    /// this, plus 60 s of clock skew). Without it their lifetime is unknown
    /// and a key that has signed is deprecated only with --force.
    #[arg(long, value_name = "DURATION", value_parser = crate::output::parse_duration)]
    longest_ttl: Option<std::time::Duration>,
    /// Deprecate even while tokens the key signed may still be valid: every
    /// one of them is rejected from now on. It cannot be undone.
    #[arg(long)]
    force: bool,
}

/// Why deprecating `info` now would reject tokens that may still be valid,
/// if it would: a key that has signed (it has a retired time) and whose
/// tokens' lifetime is unknown, or not yet over.
fn deprecation_hazard(
    info: &workload_identity::KeyInfo,
    longest_ttl: Option<std::time::Duration>,
    now: i64,
) -> Option<String> {
    // Only a key that provably never signed is safe at once: one still
    // waiting for its publish time. Every other key may have signed (an
    // imported or verify-only key, one whose retirement time is unknown).
    if info.state == KeyState::Prepublished && info.publish_time > now {
        return None;
    }
    if info.retired_time <= 0 {
        return Some(format!(
            "{} may have signed tokens, and when it stopped signing is not recorded: deprecating it rejects every token it signed",
            info.kid
        ));
    }
    let stopped = format!(
        "{} stopped signing {}",
        info.kid,
        when(info.retired_time, now)
    );
    match longest_ttl {
        None => Some(format!(
            "{stopped}; the tokens it signed may still be valid (their longest TTL is unknown): deprecating it rejects them all"
        )),
        Some(ttl) => {
            let skew = 60;
            let safe = info
                .retired_time
                .saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX))
                .saturating_add(skew);
            (now < safe).then(|| {
                format!(
                    "{stopped}; tokens it signed (TTL up to {}) may be valid until {}: deprecating it now rejects them; it is safe from then",
                    span(ttl.as_secs()),
                    when(safe, now)
                )
            })
        }
    }
}

pub(super) fn deprecate(d: &DeprecateArgs, ctx: &Ctx) -> Result<(), CliError> {
    let a = &d.key;
    let opened = a.store.open(ctx)?;
    let keyring = opened.keyring();
    let alg = alg_of(&keyring, &a.kid)?;
    if keyring.key_info(&a.kid).map(|k| k.state) == Some(KeyState::Deprecated) {
        ctx.note(&format!("{} is already deprecated", a.kid));
        return report(&opened, &a.store.custody, &[], ctx);
    }
    // A verify-only key is never active.
    let is_active = alg.alg.signing().is_some_and(|signing| {
        keyring
            .active_id_for_purpose(alg.purpose, signing)
            .as_ref()
            .map(KeyId::as_str)
            == Some(a.kid.as_str())
    });
    if let (false, false, Some(info)) = (d.force, is_active, keyring.key_info(&a.kid)) {
        // A stored policy's LongestTTL is what issuers promise.
        let longest = keyring.longest_token_ttl().or(d.longest_ttl);
        if let Some(why) = deprecation_hazard(&info, longest, ctx.now()) {
            let unknown = info.retired_time <= 0;
            return Err(CliError::new(ResultCode::InvalidArgument, why)
                .hint(if unknown {
                    "pass --force if no token it signed is still in use".to_string()
                } else if longest.is_some() {
                    "wait until then (`wid keyring plan --longest-ttl ...` deprecates it when it is due), or pass --force to reject those tokens now".to_string()
                } else {
                    "pass --longest-ttl DURATION (the longest identity TTL in use) to let wid check, or --force to reject those tokens now".to_string()
                })
                .exit(Exit::Usage));
        }
    }
    deprecate_key(&opened, &a.kid, ctx.now()).map_err(|e| {
        let err = CliError::from(e);
        if is_active {
            err.hint(format!(
                "rotate first (`wid keyring rotate {} --alg {} --purpose {}`), then deprecate the old key once its tokens have expired",
                a.store.flags(),
                alg.alg,
                alg.purpose
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

fn alg_of(keyring: &Keyring, kid: &str) -> Result<Pair, CliError> {
    keyring.key_info(kid).map(|k| Pair::of(&k)).ok_or_else(|| {
        CliError::new(
            ResultCode::UnknownKey,
            format!("no key {kid:?} in the keystore"),
        )
        .hint("`wid keyring list` shows the key IDs")
        .exit(Exit::Usage)
    })
}

/// A new key of `alg` (a purpose and an algorithm): in a keystore's keyring
/// active at once; through etcd the way `EtcdKeyring::rotate` makes it (see
/// `etcd::rotate`).
fn rotate_key(
    opened: &Opened,
    alg: Pair,
    rsa: &RsaArgs,
    now: i64,
    how: &'static str,
) -> Result<Change, CliError> {
    match opened {
        Opened::File { keyring, .. } => file::rotate(keyring, alg, rsa, now, how),
        Opened::Etcd(r) => etcd::rotate(r, alg, rsa, now, how),
    }
}

/// Makes `kid` the active key of its algorithm: in a keystore's keyring at
/// `now`; through etcd once this process has held it for the lead time
/// (`etcd::wait_out_lead_time`), at the time after that wait.
fn promote_key(
    opened: &Opened,
    kid: &str,
    now: i64,
    seen: Instant,
    ctx: &Ctx,
) -> Result<Change, CliError> {
    let alg = alg_of(&opened.keyring(), kid)?;
    let previous = match opened {
        Opened::File { keyring, .. } => {
            let previous = keyring.active_id_for_purpose(alg.purpose, alg.signing()?);
            keyring.promote(kid, now)?;
            previous
        }
        Opened::Etcd(r) => {
            etcd::wait_out_lead_time(r, kid, seen, ctx);
            let previous = r
                .keyring()
                .active_id_for_purpose(alg.purpose, alg.signing()?);
            r.promote(kid, ctx.now())?;
            previous
        }
    };
    Ok(Change::Activated {
        kid: KeyId::new(kid)?,
        alg,
        previous,
        how: "promoted",
    })
}

/// Takes `kid` out of the JWKS: in a keystore's keyring, or as an etcd
/// transaction.
fn deprecate_key(opened: &Opened, kid: &str, now: i64) -> Result<(), workload_identity::Error> {
    match opened {
        Opened::File { keyring, .. } => keyring.deprecate(kid, now),
        Opened::Etcd(r) => r.deprecate(kid, now),
    }
}

#[cfg(test)]
mod deprecation_tests {
    use std::time::Duration;

    use workload_identity::Keyring;

    use super::deprecation_hazard;

    #[test]
    fn only_a_key_that_provably_never_signed_is_safe_at_once() {
        let kr = Keyring::new();
        let first = kr.rotate(1_000).unwrap();
        kr.rotate(2_000).unwrap();
        let retired = kr.key_info(first.as_str()).unwrap();
        let hour = Some(Duration::from_secs(3600));
        // Its tokens may live an hour (plus 60 s of skew) after it stopped.
        let why = deprecation_hazard(&retired, hour, 2_000 + 3_600).unwrap();
        assert!(why.contains("may be valid until"), "{why}");
        assert!(deprecation_hazard(&retired, hour, 2_000 + 3_660).is_none());
        // Unknown lifetime: refused.
        assert!(deprecation_hazard(&retired, None, 1 << 40).is_some());
        // A verify-only key (imported; its retirement unknown): refused.
        let (imported, _) = Keyring::from_jwks(&kr.jwks().to_json()).unwrap();
        let info = imported.key_info(first.as_str()).unwrap();
        let why = deprecation_hazard(&info, hour, 1 << 40).unwrap();
        assert!(why.contains("not recorded"), "{why}");
        // A key waiting for its publish time never signed: safe.
        let next = kr.prepublish(3_000, 9_000).unwrap();
        let waiting = kr.key_info(next.as_str()).unwrap();
        assert!(deprecation_hazard(&waiting, None, 3_000).is_none());
        // Once due it may have been promoted somewhere: refused.
        assert!(deprecation_hazard(&waiting, hour, 9_000).is_some());
    }
}
