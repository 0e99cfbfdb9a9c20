//! The end of a key's life: `wid keyring remove` (deprecated keys whose
//! tokens have all expired leave the keystore or etcd) and `wid keyring
//! revoke` (a compromised key out of every JWKS at once, replaced first if
//! it signs, and what each relying party must do).

use clap::Args;
use serde_json::{Value, json};
use workload_identity::{KeyId, KeyInfo, KeyState, ResultCode};

use super::change::{Change, report, report_with};
use super::flags::{Pair, RsaArgs};
use crate::etcd_args::{Opened, StoreArgs};
use crate::output::{Ctx, parse_duration, span, when};
use crate::{CliError, Exit};

#[derive(Debug, Args)]
pub(crate) struct RemoveArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The keys to remove (each must be deprecated, with every token it
    /// signed expired). None: every deprecated key that may go now.
    #[arg(value_name = "KID")]
    kids: Vec<String>,
    /// The longest TTL of the tokens the keys signed, when the keyring
    /// stores no policy (`wid keyring policy set --longest-ttl`); a stored
    /// policy's LongestTTL applies otherwise.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    longest_ttl: Option<std::time::Duration>,
}

#[derive(Debug, Args)]
pub(crate) struct RevokeArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The compromised key.
    #[arg(value_name = "KID")]
    kid: String,
    #[command(flatten)]
    rsa: RsaArgs,
}

/// When `k` may be removed (Unix seconds), or why it may not.
fn removable_at(k: &KeyInfo, longest: Option<std::time::Duration>) -> Result<i64, String> {
    if k.state != KeyState::Deprecated {
        return Err(format!(
            "{} is {}: only a deprecated key is removed (deprecate it first, once its tokens have expired)",
            k.kid,
            k.state.name()
        ));
    }
    let Some(ttl) = longest else {
        return Err(format!(
            "{}: the longest TTL of the tokens it signed is unknown, so whether they have all expired is too; store it (`wid keyring policy set --longest-ttl`) or give --longest-ttl",
            k.kid
        ));
    };
    if k.retired_time <= 0 {
        return Err(format!(
            "{}: when it stopped signing is not recorded, so whether its tokens have expired is not known",
            k.kid
        ));
    }
    // The bound the rotator deprecates and removes by: one rule for both.
    workload_identity::KeyringPolicy::new(Some(ttl))
        .deprecate_after(k.retired_time)
        .ok_or_else(|| format!("{}: its tokens' end is not known", k.kid))
}

pub(super) fn remove(a: &RemoveArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.store.open(ctx)?;
    let keyring = opened.keyring();
    let longest = keyring.longest_token_ttl().or(a.longest_ttl);
    let now = ctx.now();
    let mut chosen: Vec<KeyInfo> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    if a.kids.is_empty() {
        for k in keyring.keys() {
            if k.state == KeyState::Deprecated {
                match removable_at(&k, longest) {
                    Ok(t) if t <= now => chosen.push(k),
                    Ok(t) => refused.push(format!(
                        "{} stays until {}: tokens it signed may be valid until then",
                        k.kid,
                        when(t, now)
                    )),
                    Err(why) => refused.push(why),
                }
            }
        }
    } else {
        for kid in &a.kids {
            let Some(k) = keyring.key_info(kid) else {
                return Err(CliError::new(
                    ResultCode::UnknownKey,
                    format!("no key {kid:?} in {}", a.store.flags()),
                )
                .hint("`wid keyring list` shows the key IDs")
                .exit(Exit::Usage));
            };
            match removable_at(&k, longest) {
                Ok(t) if t <= now => chosen.push(k),
                Ok(t) => refused.push(format!(
                    "{kid} may be removed from {}: tokens it signed (TTL up to {}) may be valid until then",
                    when(t, now),
                    span(longest.map_or(0, |d| d.as_secs()))
                )),
                Err(why) => refused.push(why),
            }
        }
        if !refused.is_empty() {
            return Err(
                CliError::new(ResultCode::InvalidArgument, refused.join("; ")).exit(Exit::Usage),
            );
        }
    }
    let mut changes = Vec::new();
    for k in &chosen {
        let done = match &opened {
            Opened::File { keyring, .. } => keyring.remove(k.kid.as_str()),
            Opened::Etcd(r) => r.remove(k.kid.as_str()),
        };
        done.map_err(CliError::from)?;
        changes.push(Change::Removed {
            kid: k.kid.clone(),
            alg: Pair::of(k),
        });
    }
    for why in &refused {
        ctx.note(&format!("kept: {why}"));
    }
    report(&opened, &a.store.custody, &changes, ctx)
}

/// What each kind of relying party must do after a key is revoked.
fn relying_party_steps(kid: &str, jwks_url_hint: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "wid serve and verifiers fed by the keyring",
            format!(
                "nothing: servers on the same keystore or etcd prefix drop {kid} from {jwks_url_hint} at once, and EtcdKeyring watchers refuse its tokens as soon as the change reaches them"
            ),
        ),
        (
            "OpenBao / Vault (jwt auth with jwks_url or oidc_discovery_url)",
            "it caches the key set: write auth/jwt/config again with the same parameters (`bao write auth/jwt/config jwks_url=... bound_issuer=...`) to drop the cache; until then it accepts the revoked key's tokens".into(),
        ),
        (
            "RemoteJwks clients (wid verify --jwks, the Go and C bindings)",
            "they fetch the JWKS again when their cache expires (its Cache-Control max-age); restart long-running verifiers to drop the key at once".into(),
        ),
        (
            "AWS IAM, GCP workload identity federation, Azure, other OIDC relying parties",
            "they fetch the JWKS on their own schedule and cannot be told to refresh: assume they accept the key's unexpired tokens for up to a day; where the relying party allows it, re-save its OIDC provider (re-upload the JWKS for a static one) now".into(),
        ),
    ]
}

pub(super) fn revoke(a: &RevokeArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.store.open(ctx)?;
    let keyring = opened.keyring();
    let now = ctx.now();
    let Some(info) = keyring.key_info(&a.kid) else {
        return Err(CliError::new(
            ResultCode::UnknownKey,
            format!("no key {:?} in {}", a.kid, a.store.flags()),
        )
        .hint("`wid keyring list` shows the key IDs")
        .exit(Exit::Usage));
    };
    let pair = Pair::of(&info);
    let kid = KeyId::new(&a.kid)?;
    let mut changes = Vec::new();
    if info.state == KeyState::Deprecated {
        ctx.note(&format!(
            "{} is already deprecated: it is in no JWKS and verifies no more",
            a.kid
        ));
    } else {
        match &opened {
            Opened::File { keyring, .. } => {
                if info.state == KeyState::Active {
                    changes.push(super::file::rotate(
                        keyring,
                        pair,
                        &a.rsa,
                        now,
                        "replaced (revoked key)",
                    )?);
                }
                keyring.deprecate(&a.kid, now).map_err(CliError::from)?;
            }
            Opened::Etcd(r) => {
                if let Some(new) = r.revoke(&a.kid, now).map_err(CliError::from)? {
                    changes.push(Change::Activated {
                        kid: new,
                        alg: pair,
                        previous: None,
                        how: "replaced (revoked key)",
                    });
                }
            }
        }
        changes.push(Change::Deprecated {
            kid: kid.clone(),
            alg: pair,
        });
    }
    let published = match pair.purpose {
        workload_identity::KeyPurpose::Bearer => "/.well-known/jwks.json",
        workload_identity::KeyPurpose::Kubernetes => "/kubernetes/jwks.json",
        _ => "/wit/jwks.json",
    };
    let steps = relying_party_steps(&a.kid, published);
    let mut lines = vec![format!("what each relying party must do about {}:", a.kid)];
    lines.extend(steps.iter().map(|(who, what)| format!("  - {who}: {what}")));
    let json_steps: Vec<Value> = steps
        .iter()
        .map(|(who, what)| json!({"relying_party": who, "action": what}))
        .collect();
    report_with(
        &opened,
        &a.store.custody,
        &changes,
        vec![("relying_parties".into(), lines, Value::Array(json_steps))],
        ctx,
    )
}
