//! `wid verify`: the relying party's check, with the library's `Verifier`.

use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};
use workload_identity::{Audience, Keyring, MemoryStore, Verifier};

use crate::output::{Ctx, when};
use crate::sources::{AllocBasis, AllocSource, KeySource, Untrusted, read_token};
use crate::{CliError, Exit};

pub(crate) const AFTER_HELP: &str = "\
The allocation a token names must be live: give --alloc-state FILE (Nomad's
allocation list as JSON), or --assume-live to skip that check on purpose
(the output says so). With neither, no allocation is live and the token is
rejected with WID_RESULT_ALLOCATION_NOT_FOUND.

Exit status 0: accepted; 1: rejected (the reason's code on stderr).";

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The token; `-` reads it from standard input (keeps it out of `ps`).
    #[arg(value_name = "TOKEN")]
    token: String,
    /// The audience this relying party accepts (the token's aud must include it).
    #[arg(long, value_name = "AUDIENCE")]
    aud: String,
    #[command(flatten)]
    keys: KeySource,
    #[command(flatten)]
    pub(crate) checks: CheckArgs,
    #[command(flatten)]
    alloc: AllocSource,
}

/// The verifier's options beyond the audience.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Require this iss.
    #[arg(long, value_name = "URL")]
    pub(crate) issuer: Option<String>,
    /// Clock skew allowed on exp, nbf and iat.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = crate::output::parse_duration)]
    pub(crate) leeway: Duration,
    /// Refuse tokens without exp.
    #[arg(long)]
    pub(crate) require_exp: bool,
}

impl CheckArgs {
    /// A verifier over `keyring` and `store` for `audience`. Keys come from a
    /// file read once, so an unknown kid is not waited for.
    pub(crate) fn verifier(
        &self,
        keyring: Keyring,
        store: std::sync::Arc<MemoryStore>,
        audience: &str,
    ) -> Result<Verifier, CliError> {
        let mut builder = Verifier::builder(keyring, store, Audience::new(audience)?)
            .leeway(self.leeway)
            .require_exp(self.require_exp)
            .key_wait(Duration::ZERO);
        if let Some(iss) = &self.issuer {
            builder = builder.issuer(iss);
        }
        Ok(builder.build())
    }
}

pub(crate) fn run(a: &VerifyArgs, ctx: &Ctx) -> Result<(), CliError> {
    let Some((keyring, source)) = a.keys.load()? else {
        return Err(
            CliError::usage("verify needs the keys: --keystore FILE or --jwks FILE")
                .exit(Exit::Usage),
        );
    };
    let token = read_token(&a.token)?;
    // Only to know which allocation --assume-live vouches for; the verifier
    // decides everything else.
    let alloc_id = Untrusted::decode(&token)
        .ok()
        .and_then(|t| t.claim_str("nomad_allocation_id").map(str::to_string));
    let (store, basis) = a.alloc.store(alloc_id.as_deref())?;
    if let AllocBasis::AssumedLive { .. } = basis {
        ctx.note("--assume-live: the token's allocation is taken as live, NOT checked; every other rule is");
    }
    let verifier = a.checks.verifier(keyring.clone(), store, &a.aud)?;
    let identity = verifier.verify(&token, ctx.now()).map_err(|e| {
        let code = e.code();
        let err = CliError::from(e);
        match basis.hint_for(code) {
            Some(h) => err.hint(h),
            None => err,
        }
    })?;
    let c = &identity.claims;
    let key = keyring.key_info(identity.kid.as_str());
    let (alg, state) = key
        .as_ref()
        .map_or(("?", "?"), |k| (k.algorithm.name(), k.state.name()));
    if ctx.json {
        let claims: Value = serde_json::from_str(&c.to_json()).unwrap_or(Value::Null);
        outln!(
            "{}",
            json!({
                "accepted": true,
                "kid": identity.kid.as_str(),
                "algorithm": alg,
                "key_state": state,
                "keys": source,
                "allocation": basis.to_json(),
                "claims": claims,
            })
        );
        return Ok(());
    }
    let now = ctx.now();
    let workload = c
        .task
        .as_deref()
        .map(|t| format!("task {t}"))
        .or_else(|| c.service.as_deref().map(|s| format!("service {s}")))
        .unwrap_or_default();
    outln!("accepted: {}", c.subject);
    outln!(
        "  key         {} ({alg}, {state}) from {source}",
        identity.kid
    );
    outln!(
        "  workload    {workload} of allocation {} (job {}, namespace {})",
        c.allocation_id,
        c.job_id,
        c.namespace
    );
    outln!("  allocation  {}", basis.describe());
    outln!("  audience    {}", c.audience.join(", "));
    if let Some(iss) = &c.issuer {
        outln!("  issuer      {iss}");
    }
    outln!(
        "  expires     {}",
        c.expires_at
            .map_or_else(|| "never (no exp)".into(), |t| when(t, now))
    );
    Ok(())
}
