//! The commands that only read the keys, from a keystore file or the
//! replicated keyring: list, jwks, oidc.

use clap::Args;
use serde_json::{Value, json};
use workload_identity::{KeyInfo, KeyPurpose};

use super::flags::{PurposeArgs, parse_purpose};

use crate::CliError;
use crate::etcd_args::StoreArgs;
use crate::output::{Ctx, when};

#[derive(Debug, Args)]
pub(crate) struct JwksArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// `json`: the JWKS; `pem`: each published key as a SubjectPublicKeyInfo
    /// PEM block after a `kid:` line (for Vault's jwt_validation_pubkeys and
    /// other tools that take PEM); `spiffe`: a SPIFFE trust bundle for
    /// JWT-SVID validators (the ES256 and RS256 keys with use jwt-svid, and
    /// spiffe_refresh_hint).
    #[arg(long, value_enum, default_value = "json")]
    format: JwksFormat,
    /// With --format spiffe: how often validators should fetch the bundle
    /// again (spiffe_refresh_hint), e.g. 5m (the default).
    #[arg(long, value_name = "DURATION", value_parser = crate::output::parse_duration)]
    refresh_hint: Option<std::time::Duration>,
    /// `bearer`: the JWKS relying parties trust; `wit`: the WIT key set
    /// (`/wit/jwks.json`), for receivers of workload identity tokens only,
    /// never for a relying party that accepts bearer tokens. With --format
    /// spiffe, bearer prints the JWT-SVID authorities (use jwt-svid) and wit
    /// the WIT-SVID authorities (use wit-svid), never both in one document
    /// (a validator that ignores use would take one for the other).
    #[command(flatten)]
    purpose: PurposeArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Only the keys of this purpose (`bearer`, `wit` or `kubernetes`;
    /// default: all).
    #[arg(long, value_name = "bearer|wit|kubernetes", value_parser = parse_purpose)]
    purpose: Option<KeyPurpose>,
}

/// The forms `wid keyring jwks` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum JwksFormat {
    /// The JWKS (RFC 7517), as served.
    Json,
    /// One PEM public key per published key.
    Pem,
    /// A SPIFFE trust bundle (JWT authorities).
    Spiffe,
}

#[derive(Debug, Args)]
pub(crate) struct OidcArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The issuer URL tokens carry in iss (https).
    #[arg(long, value_name = "URL")]
    issuer: String,
}

pub(super) fn list(a: &ListArgs, ctx: &Ctx) -> Result<(), CliError> {
    // IDs, states and times need no KEK: nothing is unwrapped.
    let seen = a.store.inspect()?;
    let keys: Vec<KeyInfo> = seen
        .keys
        .into_iter()
        .filter(|k| a.purpose.is_none_or(|p| k.purpose == p))
        .collect();
    if ctx.json {
        let mut doc = seen.json_fields;
        doc.insert(
            "keys".into(),
            Value::Array(keys.iter().map(key_json).collect()),
        );
        outln!("{}", Value::Object(doc));
        return Ok(());
    }
    if keys.is_empty() {
        outln!("{}: no keys", seen.describe);
        return Ok(());
    }
    let now = ctx.now();
    let mut rows = vec![[
        "KID".to_string(),
        "ALG".into(),
        "PURPOSE".into(),
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
            k.purpose.name().to_string(),
            state,
            when(k.create_time, now),
            when(k.publish_time, now),
            when(k.retired_time, now),
        ]);
    }
    let widths: Vec<usize> = (0..7)
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

pub(super) fn key_json(k: &KeyInfo) -> Value {
    let nonzero = |t: i64| (t != 0).then_some(t);
    json!({
        "kid": k.kid.as_str(),
        "algorithm": k.algorithm.name(),
        "purpose": k.purpose.name(),
        "state": k.state.name(),
        "create_time": k.create_time,
        "publish_time": nonzero(k.publish_time),
        "retired_time": nonzero(k.retired_time),
        "can_sign": k.can_sign(),
        "rsa_bits": k.public_key.rsa_bits(),
    })
}

pub(super) fn jwks(a: &JwksArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.store.open(ctx)?;
    let keyring = opened.keyring();
    let purpose = a.purpose.purpose;
    let jwks = keyring.jwks_for(purpose);
    if a.refresh_hint.is_some() && a.format != JwksFormat::Spiffe {
        return Err(CliError::new(
            workload_identity::ResultCode::InvalidArgument,
            "--refresh-hint is the SPIFFE bundle's spiffe_refresh_hint: it goes with --format spiffe",
        ));
    }
    match a.format {
        JwksFormat::Json => ctx.print_json(&to_value(&jwks.to_json())),
        JwksFormat::Spiffe => {
            let hint = a
                .refresh_hint
                .unwrap_or(std::time::Duration::from_secs(300));
            let bundle = match purpose {
                KeyPurpose::Bearer => jwks.to_spiffe_bundle_json(hint),
                KeyPurpose::Kubernetes => {
                    return Err(crate::sources::bad_flag(
                        "--format spiffe",
                        "has no kubernetes keys: a cluster's service-account keys are no SPIFFE authority; print them as JSON or PEM",
                    ));
                }
                _ => jwks.to_wit_svid_bundle_json(hint),
            };
            let held = jwks.keys.iter().any(|k| k.kty != "OKP");
            if !held {
                ctx.note(&format!("the bundle is empty: it holds ES256 and RS256 keys only (a JWT-SVID or WIT-SVID cannot be EdDSA); make one with `wid keyring rotate --alg ES256 --purpose {purpose}`"));
            }
            ctx.print_json(&to_value(&bundle))
        }
        JwksFormat::Pem => {
            // The published keys, in the JWKS's order.
            let keys: Vec<(String, &'static str, String)> = jwks
                .keys
                .iter()
                .filter_map(|jwk| {
                    let info = keyring.key_info(&jwk.kid)?;
                    Some((
                        jwk.kid.clone(),
                        info.algorithm.name(),
                        info.public_key.to_pem(),
                    ))
                })
                .collect();
            if ctx.json {
                let list: Vec<Value> = keys
                    .iter()
                    .map(|(kid, alg, pem)| json!({"kid": kid, "alg": alg, "pem": pem}))
                    .collect();
                outln!("{}", json!({ "keys": list }));
            } else {
                for (kid, alg, pem) in &keys {
                    // Text before a PEM block is allowed (RFC 7468) and
                    // ignored by PEM readers.
                    outln!("kid: {kid} ({alg})\n{}", pem.trim_end());
                }
            }
        }
    }
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
