//! The audit trail: every key change a process sees and every election
//! change, logged at once through the `log` facade under the target
//! [`AUDIT_TARGET`], at `info` (the message says it in words; the key-values
//! carry it for structured loggers: `event`, `prefix`, `kid`, `algorithm`,
//! `purpose`, `from`, `to`, `revision`, `process`, `by`, `why`).
//!
//! A change is logged twice over: by the process that commits it (`event`
//! `committed`: which process, and why — the rotator's policy or a direct
//! call such as an operator's command) and by every copy that applies it
//! (`event` `key`: the key's old and new state, at the etcd revision).

use crate::keyring::{KeyPurpose, KeyState};

/// The `log` target of the audit trail.
pub const AUDIT_TARGET: &str = "workload_identity::audit";

/// This process, as records and the trail name it: `<hostname>:<pid>`.
pub(crate) fn process_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!("{host}:{}", std::process::id())
}

fn state_name(s: Option<KeyState>) -> &'static str {
    s.map_or("absent", KeyState::name)
}

/// A key of the copy at `prefix` went from `from` to `to` (`None`: absent).
pub(crate) fn key_changed(
    prefix: &str,
    kid: &str,
    (algorithm, purpose): (crate::keyring::JwsAlgorithm, KeyPurpose),
    from: Option<KeyState>,
    to: Option<KeyState>,
    revision: i64,
) {
    let (from, to) = (state_name(from), state_name(to));
    log::info!(
        target: AUDIT_TARGET,
        event = "key", prefix = prefix, kid = kid, algorithm = algorithm.name(),
        purpose = purpose.name(), from = from, to = to, revision = revision;
        "key {kid} ({} {}) {from} -> {to} at revision {revision} in {prefix}",
        algorithm.name(),
        purpose.name()
    );
}

/// This process committed a change to the keyring at `prefix`.
pub(crate) fn committed(prefix: &str, what: &str, by: &str, revision: i64) {
    let process = process_identity();
    log::info!(
        target: AUDIT_TARGET,
        event = "committed", prefix = prefix, process = process.as_str(), by = by,
        why = what, revision = revision;
        "{process} committed to {prefix} at revision {revision}: {what} ({by})"
    );
}

/// A rotation candidate's election changed: `event` is `elected`, `lost` or
/// `resigned`; `revision`, for `elected`, is the etcd revision that created
/// the election key (each election's is higher than the last's; the
/// key-value `revision` is 0 for the others).
pub(crate) fn election(
    prefix: &str,
    identity: &str,
    event: &str,
    why: &str,
    revision: Option<i64>,
) {
    let at = revision.map_or(String::new(), |r| format!(" at revision {r}"));
    log::info!(
        target: AUDIT_TARGET,
        event = "election", prefix = prefix, process = identity, to = event, why = why,
        revision = revision.unwrap_or(0);
        "rotator {identity} {event} for {prefix}{at}: {why}"
    );
}

/// A record of the keyring at `prefix` was refused: it is not what the
/// keyring's authenticated manifest lists (written without the KEK), so it
/// is not followed.
pub(crate) fn refused(prefix: &str, record: &str, why: &str, revision: i64) {
    log::warn!(
        target: AUDIT_TARGET,
        event = "refused", prefix = prefix, record = record, why = why, revision = revision;
        "record {prefix}{record} refused at revision {revision}: {why}"
    );
}
