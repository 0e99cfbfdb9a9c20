//! The commands that only read the keys, from a keystore file or the
//! replicated keyring: list, jwks, oidc.

use clap::Args;
use serde_json::{Value, json};
use workload_identity::KeyInfo;

use crate::CliError;
use crate::etcd_args::StoreArgs;
use crate::output::{Ctx, when};

#[derive(Debug, Args)]
pub(crate) struct OidcArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The issuer URL tokens carry in iss (https).
    #[arg(long, value_name = "URL")]
    issuer: String,
}

pub(super) fn list(a: &StoreArgs, ctx: &Ctx) -> Result<(), CliError> {
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

pub(super) fn jwks(a: &StoreArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.open(ctx)?;
    ctx.print_json(&to_value(&opened.keyring().jwks().to_json()));
    Ok(())
}

pub(super) fn oidc(a: &OidcArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.store.open(ctx)?;
    let doc = opened.keyring().oidc_discovery(&a.issuer)?;
    ctx.print_json(&to_value(&doc.to_json()));
    Ok(())
}

/// A document the library rendered, as a value to print.
fn to_value(json: &str) -> Value {
    // The library renders these documents from plain strings: always JSON.
    serde_json::from_str(json).unwrap_or(Value::Null)
}
