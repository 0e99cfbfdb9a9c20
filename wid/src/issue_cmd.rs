//! `wid issue`: sign an identity for a request file.

use clap::Args;
use serde_json::{Value, json};
use workload_identity::profile::{ExtraClaimsPolicy, SpiffeProfile};
use workload_identity::{Algorithm, Issuer, ResultCode};

use crate::etcd_args::StoreArgs;
use crate::output::{Ctx, read_input, when};
use crate::sources::{bad_flag, parse_alg};
use crate::{CliError, request};

/// The largest request file read (the codec's own default limit).
const MAX_REQUEST_BYTES: u64 = 4 << 20;

#[derive(Debug, Args)]
#[command(mut_arg("keystore", |a| a.help(
    "The keystore holding the active signing key (or --etcd: sign with the replicated keyring's active key)"
)))]
pub(crate) struct IssueArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The IssueRequest: msgpack (as Go hosts send it) or JSON with Go's field
    /// names (`Region`, `Allocation`, `Task`, `Identity`...; TTL in Go
    /// nanoseconds or as "1h"); `-` reads standard input.
    #[arg(long, value_name = "FILE")]
    request: String,
    /// Sign with the active key of this algorithm.
    #[arg(long, value_name = "EdDSA|ES256|RS256", value_parser = parse_alg, default_value = "EdDSA")]
    alg: Algorithm,
    /// Put this iss in the token (the issuer relying parties will require).
    #[arg(long, value_name = "URL")]
    issuer: Option<String>,
    /// Sign even when the request's identity has no TTL, making a token
    /// without exp: it never expires, and Vault, for one, accepts it for as
    /// long as its key is published. Without this flag such a request is
    /// refused.
    #[arg(long)]
    allow_no_exp: bool,
    /// Make the token a SPIFFE JWT-SVID of this trust domain: sub becomes
    /// spiffe://DOMAIN/<path>. A JWT-SVID needs an audience, a TTL and
    /// --alg ES256 or RS256.
    #[arg(long, value_name = "DOMAIN")]
    spiffe_trust_domain: Option<String>,
    /// The SPIFFE ID path template (with --spiffe-trust-domain); default
    /// /${job.region}/${job.namespace}/${job.id}/${group.name}/${workload.name}/${identity.name}.
    #[arg(long, value_name = "TEMPLATE", requires = "spiffe_trust_domain")]
    spiffe_path: Option<String>,
    /// The extra-claims policy: a JSON file
    /// {"namespaces":{"<ns>":{"required_extra_claims":{"<name>":"<template>"},"optional_extra_claims":{...}}}}.
    #[arg(long, value_name = "FILE")]
    extra_claims_policy: Option<String>,
}

/// The largest extra-claims policy file read.
const MAX_POLICY_BYTES: u64 = 1 << 20;

/// The issuer the flags describe.
fn issuer_for(a: &IssueArgs, keyring: workload_identity::Keyring) -> Result<Issuer, CliError> {
    let mut issuer = Issuer::new(keyring).algorithm(a.alg);
    if let Some(iss) = &a.issuer {
        // The rules `wid serve --issuer` applies: a token whose iss no
        // discovery document can name is refused by every relying party
        // that binds an issuer, so a typo is caught here, not there.
        if let Err(e) = workload_identity::OidcDiscovery::new(iss) {
            let why = match e {
                workload_identity::Error::InvalidArgument(ref inv) => inv
                    .problems
                    .first()
                    .map_or_else(|| e.to_string(), |p| p.problem.clone()),
                other => other.to_string(),
            };
            return Err(bad_flag("--issuer", why));
        }
        issuer = issuer.issuer(iss);
    }
    if let Some(td) = &a.spiffe_trust_domain {
        let mut profile = SpiffeProfile::new(td)?;
        if let Some(path) = &a.spiffe_path {
            profile = profile.path(path)?;
        }
        issuer = issuer.spiffe(profile);
    }
    if let Some(file) = &a.extra_claims_policy {
        let bytes = read_input(file, "extra-claims policy", MAX_POLICY_BYTES)?;
        let text = String::from_utf8(bytes).map_err(|_| {
            CliError::new(
                ResultCode::InvalidArgument,
                format!("the extra-claims policy {file} is not UTF-8 text"),
            )
        })?;
        issuer = issuer.extra_claims(ExtraClaimsPolicy::from_json(&text)?);
    }
    Ok(issuer)
}

pub(crate) fn run(a: &IssueArgs, ctx: &Ctx) -> Result<(), CliError> {
    if a.request == "-" && a.extra_claims_policy.as_deref() == Some("-") {
        return Err(CliError::new(
            ResultCode::InvalidArgument,
            "--request - and --extra-claims-policy - both read standard input; give one of them a file",
        ));
    }
    let bytes = read_input(&a.request, "request", MAX_REQUEST_BYTES)?;
    let (req, format) = request::decode(&bytes, &a.request)?;
    if req.identity.ttl.as_nanos() == 0 && !a.allow_no_exp {
        return Err(CliError::new(
            ResultCode::InvalidArgument,
            format!(
                "identity {:?} of the request has no TTL: its token would have no exp and never expire",
                req.identity.name
            ),
        )
        .hint("give the identity a TTL (JSON: \"TTL\": \"1h\"; msgpack: nanoseconds), or pass --allow-no-exp if a token that never expires is really meant"));
    }
    // With --etcd: opened with one linearizable read, so the copy is
    // current, and held open (watched) until the token is signed.
    let opened = a.store.open(ctx)?;
    if let crate::etcd_args::Opened::Etcd(r) = &opened {
        crate::keyring_cmd::refuse_empty_prefix(r, "issue")?;
    }
    let keyring = opened.keyring();
    let source = a.store.flags();
    let issuer = issuer_for(a, keyring.clone())?;
    match a.issuer.as_deref() {
        None => ctx.note("no --issuer: the token carries no iss, and relying parties that bind an issuer (OpenBao's bound_issuer, AWS, GCP) refuse it"),
        Some(iss) if iss.ends_with('/') => ctx.note(&format!(
            "--issuer {iss:?} ends with a slash: relying parties compare iss exactly, so wid serve --issuer and every relying party must name it with the slash too"
        )),
        Some(_) => {}
    }
    let now = ctx.now();
    let signed = issuer.issue(&req, now).map_err(|e| {
        let code = e.code();
        let err = CliError::from(e);
        if code != ResultCode::NoActiveKey {
            return err;
        }
        // A request with a ProofKey asks for a WIT, which only a WIT key
        // signs.
        let purpose = match req.proof_key {
            Some(_) => workload_identity::KeyPurpose::Wit,
            None => workload_identity::KeyPurpose::Bearer,
        };
        let active: Vec<&str> = [Algorithm::EdDsa, Algorithm::Es256, Algorithm::Rs256]
            .into_iter()
            .filter(|alg| keyring.active_id_for_purpose(purpose, *alg).is_some())
            .map(Algorithm::name)
            .collect();
        if active.is_empty() {
            err.hint(format!(
                "make one with `wid keyring rotate {source} --alg {} --purpose {purpose}`",
                a.alg
            ))
        } else {
            err.hint(format!(
                "this keyring has active {purpose} keys for {}: pass --alg, or `wid keyring rotate {source} --alg {} --purpose {purpose}`",
                active.join(", "),
                a.alg
            ))
        }
    })?;
    if !ctx.json {
        // The token alone on stdout, so `TOKEN=$(wid issue ...)` works; the
        // facts for the person on stderr.
        outln!("{}", signed.token);
        let expires = signed
            .claims
            .expires_at
            .map_or_else(|| "never (TTL 0: no exp)".into(), |t| when(t, now));
        ctx.note(&format!(
            "signed {} with {} key {}; expires {expires}",
            signed.claims.subject, a.alg, signed.kid
        ));
        return Ok(());
    }
    // Claims render from strings and integers only: always JSON.
    let claims: Value = serde_json::from_str(&signed.claims.to_json()).unwrap_or(Value::Null);
    outln!(
        "{}",
        json!({
            "token": signed.token,
            "kid": signed.kid.as_str(),
            "algorithm": a.alg.name(),
            "request_format": format.name(),
            "claims": claims,
        })
    );
    Ok(())
}
