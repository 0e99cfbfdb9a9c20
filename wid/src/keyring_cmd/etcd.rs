//! Changes to the replicated keyring (`--etcd`), each one etcd transaction,
//! made the way the elected rotator makes them: a new key is prepublished
//! for at least the lead time, and promoted only after it.

use std::time::{Duration, Instant};

use workload_identity::{Algorithm, EtcdKeyring, KeyId, KeyInfo, KeyState, ResultCode, RsaKeySize};

use super::change::Change;
use super::flags::{Pair, RsaArgs};
use crate::CliError;
use crate::output::{Ctx, span};
use crate::sources::bad_flag;

/// `wid keyring init --etcd` adds to no keyring that has keys.
pub(super) fn refuse_held_keys(r: &EtcdKeyring) -> Result<(), CliError> {
    let held = r.keyring().len();
    if held == 0 {
        return Ok(());
    }
    Err(CliError::new(
        ResultCode::KeyringConflict,
        format!(
            "the replicated keyring at {} already holds {held} keys",
            r.prefix()
        ),
    )
    .hint("wid keyring init never adds to a keyring that has keys: rotate it with `wid keyring rotate --etcd ...`, or choose another --etcd-prefix"))
}

/// Refuses `what` (rotate, plan --apply, issue) on an etcd prefix that holds
/// no keyring: a typo in `--etcd-prefix` must not make a second keyring (or
/// sign with nothing); a new one is made by `init`.
pub(crate) fn refuse_empty_prefix(r: &EtcdKeyring, what: &str) -> Result<(), CliError> {
    if !r.keyring().is_empty() {
        return Ok(());
    }
    Err(CliError::new(
        ResultCode::UnknownKey,
        format!(
            "the etcd prefix {} holds no keyring (no keys): refusing to {what}",
            r.prefix()
        ),
    )
    .hint("check --etcd-prefix (a typo names another, empty, prefix); a new replicated keyring is made with `wid keyring init --etcd ...`")
    .exit(crate::Exit::Refused))
}

/// `EtcdKeyring::rotate`: the first key of `alg` active at once, otherwise
/// a successor prepublished for the lead time (or the one already waiting).
pub(super) fn rotate(
    r: &EtcdKeyring,
    alg: Pair,
    rsa: &RsaArgs,
    now: i64,
    how: &'static str,
) -> Result<Change, CliError> {
    let kr = r.keyring();
    let previous = kr.active_id_for_purpose(alg.purpose, alg.signing()?);
    let pending_before: Vec<KeyId> = kr
        .keys()
        .into_iter()
        .filter(|k| Pair::of(k) == alg && k.state == KeyState::Prepublished)
        .map(|k| k.kid)
        .collect();
    let kid = match alg.signing()? {
        Algorithm::Rs256 => r.rotate_rsa_purpose(alg.purpose, rsa.size()?, now)?,
        other => r.rotate_purpose(alg.purpose, other, now)?,
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

/// `wid keyring rotate --etcd --immediate`: replaces the active key of
/// `alg` at once (`EtcdKeyring::rotate_now`), cancelling (deprecating) the
/// successor that was prepublished for the replaced key, which never
/// signed; both are reported.
pub(super) fn rotate_now(
    r: &EtcdKeyring,
    alg: Pair,
    rsa: &RsaArgs,
    now: i64,
) -> Result<Vec<Change>, CliError> {
    default_rsa_only(alg.signing()?, rsa, "rotate --immediate")?;
    let kr = r.keyring();
    let previous = kr.active_id_for_purpose(alg.purpose, alg.signing()?);
    let pending: Vec<KeyId> = kr
        .keys()
        .into_iter()
        .filter(|k| Pair::of(k) == alg && k.state == KeyState::Prepublished)
        .map(|k| k.kid)
        .collect();
    let kid = r.rotate_now_purpose(alg.purpose, alg.signing()?, now)?;
    let mut changes = vec![Change::Activated {
        kid,
        alg,
        previous,
        how: "rotated at once",
    }];
    changes.extend(
        pending
            .into_iter()
            .map(|kid| Change::Deprecated { kid, alg }),
    );
    Ok(changes)
}

/// A planned successor of `alg`, published for at least the lead time
/// before it signs (later than `publish_at` if the plan said sooner).
pub(super) fn prepublish(
    r: &EtcdKeyring,
    alg: Pair,
    rsa: &RsaArgs,
    now: i64,
    publish_at: i64,
) -> Result<Change, CliError> {
    default_rsa_only(alg.signing()?, rsa, "plan --apply (prepublish)")?;
    let at = publish_at.max(now.saturating_add(lead_secs(r)));
    let kid = r.prepublish_purpose(alg.purpose, alg.signing()?, now, at)?;
    Ok(Change::Prepublished {
        kid,
        alg,
        publish_at: at,
    })
}

/// Whether a planned promotion of `kid` may be made now: a prepublished key
/// only once it has been published for the lead time (says so when not).
pub(super) fn ready_to_promote(r: &EtcdKeyring, kid: &KeyId, now: i64, ctx: &Ctx) -> bool {
    let ready = r
        .keyring()
        .key_info(kid.as_str())
        .is_some_and(|k| k.state != KeyState::Prepublished || published_for_lead_time(r, &k, now));
    if !ready {
        ctx.note(&format!(
            "not promoting {kid} yet: it has not been published for the lead time ({})",
            span(r.lead_time().as_secs())
        ));
    }
    ready
}

/// Before `kid` is promoted: the library promotes a prepublished key only
/// once this process has held it for the lead time (so every watcher has
/// it), measured from when this copy first saw it, which is no later than
/// `seen`: a one-shot `wid` waits out that time first, and says so. A key
/// published too recently by the clock is not waited for: the library
/// refuses it at once (and says when it may be promoted). Nor is one
/// published two lead times ago or more: every server has had it for a lead
/// time, and the library promotes it at once.
pub(super) fn wait_out_lead_time(r: &EtcdKeyring, kid: &str, seen: Instant, ctx: &Ctx) {
    let now = ctx.now();
    let due = r.keyring().key_info(kid).is_some_and(|k| {
        k.state == KeyState::Prepublished
            && published_for_lead_time(r, &k, now)
            && k.create_time.saturating_add(2 * lead_secs(r)) > now
    });
    if !due {
        return;
    }
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

/// Whether key `k` was published at least the lead time before `now`.
fn published_for_lead_time(r: &EtcdKeyring, k: &KeyInfo, now: i64) -> bool {
    k.create_time.saturating_add(lead_secs(r)) <= now
}

/// The lead time in whole seconds, rounded up (as the library counts it).
fn lead_secs(r: &EtcdKeyring) -> i64 {
    let lead = r.lead_time();
    i64::try_from(lead.as_secs()).unwrap_or(i64::MAX) + i64::from(lead.subsec_nanos() > 0)
}

/// The size of an RS256 key that the library makes through etcd only at its
/// default size (`rotate_now`, `prepublish`): refuses any other.
fn default_rsa_only(alg: Algorithm, rsa: &RsaArgs, what: &str) -> Result<(), CliError> {
    if alg != Algorithm::Rs256 || rsa.size()? == RsaKeySize::default() {
        return Ok(());
    }
    Err(bad_flag(
        "--rsa-bits",
        format!(
            "{what} with --etcd makes {}-bit RS256 keys only (the replicated keyring has no sized variant of it yet); `wid keyring rotate --etcd ... --alg RS256 --rsa-bits {}` prepublishes a key of that size",
            RsaKeySize::default().bits(),
            rsa.rsa_bits
        ),
    ))
}
