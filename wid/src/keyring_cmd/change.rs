//! What a command changed in the keys, as printed; `report` saves a
//! keystore file first (a replicated change is committed already).

use serde_json::{Value, json};
use workload_identity::KeyId;

use super::flags::Pair;

use crate::CliError;
use crate::etcd_args::Opened;
use crate::output::{Ctx, span, when};
use crate::sources::{CustodyArgs, save_keystore};

/// One change to the keyring, as printed.
pub(super) enum Change {
    /// A key became active; `previous` (if any) became inactive.
    Activated {
        kid: KeyId,
        alg: Pair,
        previous: Option<KeyId>,
        how: &'static str,
    },
    /// A key was added that signs from `publish_at`.
    Prepublished {
        kid: KeyId,
        alg: Pair,
        publish_at: i64,
    },
    /// A successor was already waiting; nothing was added.
    Pending {
        kid: KeyId,
        alg: Pair,
        publish_at: i64,
    },
    /// A key left the JWKS.
    Deprecated { kid: KeyId, alg: Pair },
    /// A deprecated key left the keystore (or etcd).
    Removed { kid: KeyId, alg: Pair },
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
                "prepublished {alg}: key {kid} is in the {} now and signs from {}",
                published_in(alg),
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
                format!(
                    "deprecated {alg}: key {kid} left the {} and verifies no more",
                    published_in(alg)
                )
            }
            Change::Removed { kid, alg } => {
                format!("removed {alg}: deprecated key {kid} is gone from the keyring")
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
            } => {
                json!({"action": how, "algorithm": alg.alg.name(), "purpose": alg.purpose.name(), "kid": kid.as_str(),
                        "state": "active", "previous": previous.as_ref().map(KeyId::as_str)})
            }
            Change::Prepublished {
                kid,
                alg,
                publish_at,
            } => {
                json!({"action": "prepublished", "algorithm": alg.alg.name(), "purpose": alg.purpose.name(), "kid": kid.as_str(),
                        "state": "prepublished", "publish_time": publish_at})
            }
            Change::Pending {
                kid,
                alg,
                publish_at,
            } => {
                json!({"action": "already-pending", "algorithm": alg.alg.name(), "purpose": alg.purpose.name(), "kid": kid.as_str(),
                        "state": "prepublished", "publish_time": publish_at})
            }
            Change::Deprecated { kid, alg } => json!({"action": "deprecated",
                        "algorithm": alg.alg.name(), "purpose": alg.purpose.name(), "kid": kid.as_str(), "state": "deprecated"}),
            Change::Removed { kid, alg } => json!({"action": "removed",
                        "algorithm": alg.alg.name(), "purpose": alg.purpose.name(), "kid": kid.as_str(), "state": Value::Null}),
        }
    }

    /// Whether the keyring changed.
    fn changed(&self) -> bool {
        !matches!(self, Change::Pending { .. })
    }
}

/// Where keys of `pair`'s purpose are published.
fn published_in(pair: &Pair) -> &'static str {
    match pair.purpose {
        workload_identity::KeyPurpose::Bearer => "JWKS",
        workload_identity::KeyPurpose::Kubernetes => "kubernetes key set",
        _ => "WIT key set",
    }
}

/// Saves a keystore file and prints the changes (nothing is saved without
/// one); for the replicated keyring the changes are committed already, and
/// only printed.
pub(super) fn report(
    opened: &Opened,
    custody: &CustodyArgs,
    changes: &[Change],
    ctx: &Ctx,
) -> Result<(), CliError> {
    report_with(opened, custody, changes, Vec::new(), ctx)
}

/// [`report`] with more lines for people and fields for `--json`.
pub(super) fn report_with(
    opened: &Opened,
    custody: &CustodyArgs,
    changes: &[Change],
    extra: Vec<(String, Vec<String>, Value)>,
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
    for (field, lines, value) in extra {
        human.extend(lines);
        doc.insert(field, value);
    }
    ctx.emit(&human.join("\n"), &Value::Object(doc));
    Ok(())
}
