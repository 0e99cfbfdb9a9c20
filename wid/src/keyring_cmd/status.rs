//! `wid keyring status`: what a keyring is doing, read without the KEK — the
//! elected rotator and since when, the stored policy, the next planned
//! change and its time, the live servers and what each has applied, every
//! key's state and times.

use clap::Args;
use serde_json::{Value, json};
use workload_identity::{RotationPolicy, next_planned_change, plan_rotation};

use super::lifecycle::describe;
use super::policy::{policy_json, policy_lines};
use super::show::key_json;
use crate::CliError;
use crate::etcd_args::StoreArgs;
use crate::output::{Ctx, when};

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    store: StoreArgs,
}

pub(super) fn run(a: &StatusArgs, ctx: &Ctx) -> Result<(), CliError> {
    let seen = a.store.inspect()?;
    let now = ctx.now();
    let mut doc = seen.json_fields.clone();
    let mut human = vec![format!("keyring {}", seen.describe)];

    // The plan: the stored policy's, else the defaults (which is what a
    // rotator started without policy flags runs).
    let policy = seen
        .policy
        .map_or_else(|| RotationPolicy::new(None), |p| p.rotation_policy());
    match &seen.policy {
        Some(p) => {
            human.push("policy (stored; every process follows it):".into());
            human.extend(policy_lines(p).into_iter().map(|l| format!("  {l}")));
            doc.insert("policy".into(), policy_json(p));
        }
        None => {
            human.push(
                "policy: none stored; each process follows its own flags (planned below with the defaults: 720h, LongestTTL unknown); `wid keyring policy set` stores one".into(),
            );
            doc.insert("policy".into(), Value::Null);
        }
    }
    let due = plan_rotation(&seen.keys, now, &policy);
    let next = if due.is_empty() {
        next_planned_change(&seen.keys, now, &policy)
    } else {
        Some((now, due))
    };
    match &next {
        Some((at, actions)) => {
            let described: Vec<(String, Value)> =
                actions.iter().map(|x| describe(x, *at)).collect();
            human.push(format!("next planned change: {}", when(*at, now)));
            human.extend(described.iter().map(|(h, _)| format!("  {h}")));
            doc.insert(
                "next".into(),
                json!({"at": at, "actions": described.iter().map(|(_, j)| j.clone()).collect::<Vec<_>>()}),
            );
        }
        None => {
            human.push("next planned change: none (no key ages out under this policy)".into());
            doc.insert("next".into(), Value::Null);
        }
    }

    if let Some(status) = &seen.etcd {
        doc.insert("revision".into(), json!(status.revision));
        doc.insert("keyring_revision".into(), json!(status.keyring_revision));
        human.push(format!(
            "etcd revision {}; the keys last changed at revision {}",
            status.revision, status.keyring_revision
        ));
        let since = status.elected_since();
        match &status.rotator {
            Some(who) => human.push(format!(
                "rotator: {who}, elected {}",
                since.map_or_else(
                    || "(since when: its server publishes no record)".to_string(),
                    |t| format!("since {}", when(t, now))
                )
            )),
            None => human
                .push("rotator: none elected (no `wid serve --rotator` holds the election)".into()),
        }
        doc.insert(
            "rotator".into(),
            status.rotator.as_ref().map_or(
                Value::Null,
                |who| json!({"identity": who, "elected_since": since}),
            ),
        );
        human.push(format!("servers: {}", status.servers.len()));
        let mut servers = Vec::new();
        for s in &status.servers {
            let current = s.revision >= status.keyring_revision;
            human.push(format!(
                "  {}  {}  issuer {}  started {}  revision {} ({})",
                s.id,
                s.address,
                s.issuer.as_deref().unwrap_or("-"),
                when(s.start_time, now),
                s.revision,
                if current { "current" } else { "behind" }
            ));
            servers.push(json!({
                "id": s.id, "address": s.address, "issuer": s.issuer,
                "start_time": s.start_time, "revision": s.revision,
                "current": current, "elected_since": s.elected_since,
            }));
        }
        doc.insert("servers".into(), Value::Array(servers));
        if !status.problems.is_empty() {
            human.push("problems:".into());
            human.extend(status.problems.iter().map(|p| format!("  {p}")));
        }
        doc.insert("problems".into(), json!(status.problems));
    }
    if let Some((kind, kek)) = &seen.wrapping {
        human.push(format!("keys wrapped by {kind} KEK {kek}"));
    }
    doc.insert(
        "wrapping".into(),
        seen.wrapping.as_ref().map_or(
            Value::Null,
            |(kind, kek)| json!({"kind": kind, "kek_id": kek}),
        ),
    );
    human.push(format!("keys: {}", seen.keys.len()));
    for k in &seen.keys {
        human.push(format!(
            "  {}  {} {}  {}  created {}  signs from {}  retired {}",
            k.kid,
            k.algorithm.name(),
            k.purpose.name(),
            k.state.name(),
            when(k.create_time, now),
            when(k.publish_time, now),
            when(k.retired_time, now)
        ));
    }
    doc.insert(
        "keys".into(),
        Value::Array(seen.keys.iter().map(key_json).collect()),
    );
    ctx.emit(&human.join("\n"), &Value::Object(doc));
    Ok(())
}
