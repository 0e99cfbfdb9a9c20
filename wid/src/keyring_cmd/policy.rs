//! `wid keyring policy show | set`: the policy stored with the keys (the
//! replicated keyring's `<prefix>policy` record, a keystore file's `Policy`),
//! which every process of the keyring follows.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use workload_identity::KeyringPolicy;
use workload_identity::model::GoDuration;

use super::flags::StoredPolicyArgs;
use crate::CliError;
use crate::etcd_args::{Opened, StoreArgs};
use crate::output::Ctx;
use crate::sources::{bad_flag, save_keystore};

#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Print the stored policy (or say that none is stored).
    Show(ShowArgs),
    /// Store the policy: the values given, the stored (or default) ones for
    /// the rest. Every process of the keyring follows it from then on:
    /// rotators plan with it, issuers refuse tokens longer than
    /// --longest-ttl, and processes started with other values refuse to
    /// start.
    Set(SetArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct SetArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    values: StoredPolicyArgs,
    /// Lower a stored --longest-ttl even though tokens signed under the
    /// longer one may still be live (a key deprecated by the shorter one
    /// would reject them).
    #[arg(long)]
    force: bool,
}

pub(super) fn run(cmd: &PolicyCommand, ctx: &Ctx) -> Result<(), CliError> {
    match cmd {
        PolicyCommand::Show(a) => show(a, ctx),
        PolicyCommand::Set(a) => set(a, ctx),
    }
}

/// The policy as JSON (Go durations as operators write them, and seconds).
pub(crate) fn policy_json(p: &KeyringPolicy) -> Value {
    let d = |d: Duration| json!(go_span(d));
    json!({
        "rotation_threshold": d(p.rotation_threshold),
        "longest_ttl": p.longest_token_ttl.map_or(Value::Null, d),
        "lead_time": d(p.lead_time),
        "retention": d(p.retention),
        "rotation_threshold_secs": p.rotation_threshold.as_secs(),
        "longest_ttl_secs": p.longest_token_ttl.map(|d| d.as_secs()),
        "lead_time_secs": p.lead_time.as_secs(),
        "retention_secs": p.retention.as_secs(),
    })
}

/// `720h`, `1h30m`, `30s`: as the flags read them.
pub(crate) fn go_span(d: Duration) -> String {
    GoDuration::from(d).to_string()
}

/// The policy in lines for people.
pub(crate) fn policy_lines(p: &KeyringPolicy) -> Vec<String> {
    let s = go_span;
    vec![
        format!("RotationThreshold {}", s(p.rotation_threshold)),
        format!(
            "LongestTTL        {}",
            p.longest_token_ttl.map_or(
                "unknown (no key is ever deprecated by the policy)".into(),
                s
            )
        ),
        format!("LeadTime          {}", s(p.lead_time)),
        format!("Retention         {}", s(p.retention)),
    ]
}

fn show(a: &ShowArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.store.open(ctx)?;
    let mut doc = opened.json_fields();
    let human = match opened.keyring().policy() {
        Some(p) => {
            doc.insert("policy".into(), policy_json(&p));
            let mut lines = vec![format!("policy of {}:", a.store.flags())];
            lines.extend(policy_lines(&p).into_iter().map(|l| format!("  {l}")));
            lines.join("\n")
        }
        None => {
            doc.insert("policy".into(), Value::Null);
            format!(
                "no policy is stored with {}: each process follows its own flags (--rotation-threshold, --longest-ttl, --etcd-lead-time); store one with `wid keyring policy set`",
                a.store.flags()
            )
        }
    };
    ctx.emit(&human, &Value::Object(doc));
    Ok(())
}

fn set(a: &SetArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.store.open(ctx)?;
    let keyring = opened.keyring();
    let before = keyring.policy();
    let policy = a.values.overrides().apply(before.unwrap_or_default());
    policy.validate().map_err(CliError::from)?;
    let mut notes = Vec::new();
    // A shorter promise does not shorten tokens already signed.
    let lowered = match (
        before.map(|b| b.longest_token_ttl),
        policy.longest_token_ttl,
    ) {
        (Some(Some(old)), Some(new)) if new < old => {
            Some(format!("from {} to {}", go_span(old), go_span(new)))
        }
        (Some(None), Some(new)) => Some(format!("from unknown to {}", go_span(new))),
        _ => None,
    };
    if let Some(change) = lowered {
        if !a.force {
            return Err(bad_flag(
                "--longest-ttl",
                format!(
                    "lowers the stored LongestTTL {change}: tokens signed under the longer one may still be live, and a key deprecated by the shorter one would reject them"
                ),
            )
            .hint("wait until the longest token signed before has expired (the old LongestTTL after now), then set it; or give --force if no such token is in use"));
        }
        notes.push(format!(
            "warning: LongestTTL lowered {change} with --force: tokens signed before under the longer one may be rejected once their key is deprecated"
        ));
    }
    if before.is_none() {
        notes.push(
            "note: tokens signed before this policy was stored are not bound by its LongestTTL"
                .into(),
        );
    }
    let mut doc = opened.json_fields();
    match &opened {
        Opened::File { path, .. } => {
            keyring.set_policy(Some(policy)).map_err(CliError::from)?;
            save_keystore(&keyring, path, &a.store.custody)?;
            notes.push(format!("saved {}", path.display()));
        }
        Opened::Etcd(r) => {
            let revision = r.set_policy(&policy).map_err(CliError::from)?;
            notes.push(format!(
                "committed to etcd {} at revision {revision}: every process of the keyring follows it now",
                r.prefix()
            ));
            doc.insert("revision".into(), json!(revision));
        }
    }
    doc.insert("policy".into(), policy_json(&policy));
    doc.insert(
        "previous".into(),
        before.as_ref().map_or(Value::Null, policy_json),
    );
    let mut lines = vec![format!("policy of {}:", a.store.flags())];
    lines.extend(policy_lines(&policy).into_iter().map(|l| format!("  {l}")));
    lines.extend(notes);
    ctx.emit(&lines.join("\n"), &Value::Object(doc));
    Ok(())
}
