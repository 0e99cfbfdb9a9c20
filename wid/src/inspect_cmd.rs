//! `wid inspect`: what a token says, and why it would be accepted or rejected.
//!
//! The decoding here trusts nothing and decides nothing; the verdict and its
//! steps come from the library's own pipeline (`Verifier::explain`).

use clap::Args;
use serde_json::{Value, json};
use workload_identity::Keyring;

use crate::output::{Ctx, utc, when};
use crate::sources::{AllocSource, KeySource, Untrusted, read_token};
use crate::verify_cmd::CheckArgs;
use crate::{CliError, Exit};

pub(crate) const AFTER_HELP: &str = "\
Without --keystore or --jwks, inspect only decodes (nothing is verified).
With one, it runs the library's verification pipeline and shows every step
in order: length, structure, key, algorithm, signature, claims, times,
audience, issuer, allocation; the first failure ends it. Without --aud the
token's own first audience is checked (and the output says so).

Exit status 0: decoded (and, when verification ran, accepted); 1: rejected,
or not a token at all.";

#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// The token; `-` reads it from standard input.
    #[arg(value_name = "TOKEN")]
    token: String,
    #[command(flatten)]
    keys: KeySource,
    /// The audience to check (default: the token's own first aud).
    #[arg(long, value_name = "AUDIENCE")]
    aud: Option<String>,
    #[command(flatten)]
    checks: CheckArgs,
    #[command(flatten)]
    alloc: AllocSource,
}

/// The time claims, with when they are relative to now.
fn times(t: &Untrusted, now: i64) -> Vec<(&'static str, Value, String)> {
    ["iat", "nbf", "exp"]
        .into_iter()
        .filter_map(|name| {
            let v = t.claims.as_ref()?.get(name)?.clone();
            let text = match v.as_i64() {
                Some(secs) => when(secs, now),
                None => format!("{v} (not an integer: verification refuses it)"),
            };
            Some((name, v, text))
        })
        .collect()
}

pub(crate) fn run(a: &InspectArgs, ctx: &Ctx) -> Result<(), CliError> {
    let token = read_token(&a.token)?;
    let now = ctx.now();
    let decoded = Untrusted::decode(&token)?;
    let keys = a.keys.load()?;
    let kid = decoded.header_str("kid").map(str::to_string);

    // Which key, as far as the given keys know.
    let key_info = match (&keys, &kid) {
        (Some((keyring, _)), Some(kid)) => keyring.key_info(kid),
        _ => None,
    };
    let key_json = match (&keys, &kid, &key_info) {
        (None, _, _) => Value::Null,
        (Some((_, source)), _, Some(k)) => json!({
            "found": true, "source": source, "kid": k.kid.as_str(),
            "algorithm": k.algorithm.name(), "state": k.state.name(),
            "create_time": k.create_time,
        }),
        (Some((_, source)), _, None) => json!({"found": false, "source": source}),
    };

    // The verdict, from the library's pipeline.
    let explanation = match &keys {
        Some((keyring, _)) => Some(explain(a, &decoded, keyring, &token, now)?),
        None => None,
    };

    if ctx.json {
        let verification = explanation.as_ref().map(|(aud, from_token, basis, x)| {
            let mut v = serde_json::Map::new();
            v.insert("audience".into(), json!(aud));
            v.insert("audience_from_token".into(), json!(from_token));
            v.insert("allocation".into(), basis.to_json());
            // The steps, the verdict and its code: the library's own rendering
            // (`Explanation::to_json`, which `wid_explain` gives C callers).
            // It is always a JSON object; anything else would be dropped.
            if let Ok(Value::Object(steps)) = serde_json::from_str::<Value>(&x.to_json()) {
                v.extend(steps);
            }
            Value::Object(v)
        });
        outln!(
            "{}",
            json!({
                "header": decoded.header,
                "claims": decoded.claims,
                "payload_bytes": decoded.payload_bytes,
                "signature_bytes": decoded.signature_bytes,
                "times": times(&decoded, now).into_iter()
                    .map(|(n, v, text)| (n.to_string(), json!({"value": v, "relative": text})))
                    .collect::<serde_json::Map<_, _>>(),
                "now": now,
                "key": key_json,
                "verification": verification,
            })
        );
    } else {
        print_human(&decoded, now, &keys, kid.as_deref(), key_info.as_ref());
        if let Some((aud, from_token, basis, x)) = &explanation {
            outln!();
            let aud_note = if *from_token {
                " (the token's own; pass --aud to check yours)"
            } else {
                ""
            };
            outln!(
                "verification at {} for audience {aud:?}{aud_note}:",
                utc(now)
            );
            outln!("  (allocation: {})", basis.describe());
            for s in &x.steps {
                let mark = if s.passed { "ok  " } else { "FAIL" };
                outln!("  {mark} {:<10} {}", s.name, s.detail);
            }
            match &x.result {
                Ok(_) => outln!("verdict: accepted"),
                Err(e) => outln!("verdict: rejected, {}", e.code().name()),
            }
        }
    }
    if let Some((_, _, basis, x)) = explanation
        && let Err(e) = x.result
    {
        let code = e.code();
        let err = CliError::from(e).exit(Exit::Rejected);
        return Err(match basis.hint_for(code) {
            Some(h) => err.hint(h),
            None => err,
        });
    }
    Ok(())
}

type Explained = (
    String,
    bool,
    crate::sources::AllocBasis,
    workload_identity::Explanation,
);

fn explain(
    a: &InspectArgs,
    decoded: &Untrusted,
    keyring: &Keyring,
    token: &str,
    now: i64,
) -> Result<Explained, CliError> {
    let (aud, from_token) = match &a.aud {
        Some(aud) => (aud.clone(), false),
        None => match decoded.audiences().into_iter().next() {
            Some(aud) => (aud, true),
            None => {
                return Err(CliError::usage(
                    "the token has no aud to check against: pass --aud",
                ));
            }
        },
    };
    let (store, basis) = a.alloc.store(decoded.claim_str("nomad_allocation_id"))?;
    let verifier = a.checks.verifier(keyring.clone(), store, &aud)?;
    Ok((aud, from_token, basis, verifier.explain(token, now)))
}

fn print_human(
    t: &Untrusted,
    now: i64,
    keys: &Option<(Keyring, String)>,
    kid: Option<&str>,
    key: Option<&workload_identity::KeyInfo>,
) {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    outln!("header (not verified):");
    outln!("{}", indent(&pretty(&t.header)));
    match &t.claims {
        Some(c) => {
            outln!("claims (not verified):");
            outln!("{}", indent(&pretty(c)));
        }
        None => outln!("payload: {} bytes, not JSON", t.payload_bytes),
    }
    outln!("signature: {} bytes", t.signature_bytes);
    let times = times(t, now);
    if !times.is_empty() {
        outln!("times (now {}):", utc(now));
        for (name, _, text) in times {
            outln!("  {name}  {text}");
        }
    }
    let alg = t.header_str("alg");
    match (keys, kid, key) {
        (None, _, _) => outln!(
            "key: {} (pass --keystore or --jwks to look it up and verify)",
            kid.unwrap_or("none named")
        ),
        (Some((_, source)), None, _) => outln!("key: the header names no kid ({source})"),
        (Some((_, source)), Some(kid), None) => {
            outln!("key: {kid} is not in the {source}")
        }
        (Some((_, source)), Some(_), Some(k)) => {
            let matches =
                alg.and_then(workload_identity::JwsAlgorithm::from_header) == Some(k.algorithm);
            let created = if k.create_time == 0 {
                String::new()
            } else {
                format!(", created {}", utc(k.create_time))
            };
            outln!(
                "key: {} in the {source}: {}, {}{created}{}",
                k.kid,
                k.algorithm,
                k.state.name(),
                if matches {
                    ""
                } else {
                    " (NOT the algorithm the header names)"
                }
            );
        }
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
