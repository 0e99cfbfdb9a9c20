//! Publishing public keys (JWKS, OIDC discovery) and importing them.
//!
//! Third parties — Vault's JWT auth method, Consul, cloud IAM — read our public
//! keys from a JWKS URL or an OIDC discovery document (seed 003). The JWKS holds
//! active, prepublished and inactive keys (deprecated keys are left out), ordered
//! by create time then key ID, so the document is deterministic.
//!
//! # Import rules (verify-only keyrings)
//!
//! [`Keyring::from_jwks`] and [`Keyring::import_jwks`] accept a JWKS and are all
//! or nothing:
//! * an entry whose `use` is present and not `sig`, or whose `kty` is not `OKP`,
//!   is **skipped** and listed in the [`ImportReport`] (a JWKS may mix in other
//!   issuers' RSA or EC keys; they cannot verify EdDSA tokens);
//! * an `OKP` entry is **rejected** (the whole import fails) when its `crv` is not
//!   `Ed25519`, its `alg` is present and not `EdDSA`, it carries a private key
//!   (`d`), its `kid` is missing, invalid or repeated, or its `x` is not canonical
//!   unpadded base64url of a canonical, non-small-order 32-byte point;
//! * a `kid` already in the keyring with the same public key is left unchanged;
//!   with a different public key it is `DuplicateKey`.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

use super::policy::{RotationPolicy, jwks_max_age};
use super::{KeyId, Keyring};
use crate::error::{DecodeError, Error, Result, truncate_for_message};

/// One public key in a JWKS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Jwk {
    /// Always `OKP`.
    pub kty: &'static str,
    /// Always `Ed25519`.
    pub crv: &'static str,
    /// The public key, unpadded base64url.
    pub x: String,
    /// The key ID.
    pub kid: String,
    /// Always `EdDSA`.
    pub alg: &'static str,
    /// Always `sig`.
    #[serde(rename = "use")]
    pub use_: &'static str,
}

/// A JSON Web Key Set: `{"keys":[...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Jwks {
    /// The keys, by create time then key ID.
    pub keys: Vec<Jwk>,
}

impl Jwks {
    /// The JSON document.
    pub fn to_json(&self) -> String {
        // Plain strings only: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// An OpenID Connect discovery document (`/.well-known/openid-configuration`)
/// pointing at the JWKS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OidcDiscovery {
    /// The issuer, exactly as tokens carry it in `iss`.
    pub issuer: String,
    /// `<issuer>/.well-known/jwks.json`.
    pub jwks_uri: String,
    /// `["EdDSA"]`.
    pub id_token_signing_alg_values_supported: Vec<&'static str>,
    /// `["code"]`.
    pub response_types_supported: Vec<&'static str>,
    /// `["public"]`.
    pub subject_types_supported: Vec<&'static str>,
}

impl OidcDiscovery {
    /// The discovery document for `issuer`, which must be an `https` URL with a
    /// host and without query, fragment, user info or whitespace.
    pub fn new(issuer: &str) -> Result<OidcDiscovery> {
        validate_issuer(issuer)?;
        Ok(OidcDiscovery {
            issuer: issuer.to_string(),
            jwks_uri: format!("{}/.well-known/jwks.json", issuer.trim_end_matches('/')),
            id_token_signing_alg_values_supported: vec!["EdDSA"],
            response_types_supported: vec!["code"],
            subject_types_supported: vec!["public"],
        })
    }

    /// The JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn validate_issuer(issuer: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid(
            "OidcDiscovery",
            "issuer",
            format!(
                "{why}; expected an https URL like https://nomad.example.com (got {:?})",
                truncate_for_message(issuer)
            ),
        ))
    };
    let Some(rest) = issuer.strip_prefix("https://") else {
        return bad("must start with https://");
    };
    if issuer.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("must not contain whitespace or control characters");
    }
    if issuer.contains('?') {
        return bad("must not have a query");
    }
    if issuer.contains('#') {
        return bad("must not have a fragment");
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return bad("must not contain user info");
    }
    let host = authority.rsplit_once(':').map_or(authority, |(h, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) && !port.is_empty() {
            h
        } else {
            authority
        }
    });
    if host.is_empty() {
        return bad("must have a host");
    }
    Ok(())
}

/// An entry that [`Keyring::import_jwks`] skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedJwk {
    /// Its position in `keys`.
    pub index: usize,
    /// Its `kid`, if it had one.
    pub kid: Option<String>,
    /// Why it was skipped.
    pub reason: String,
}

/// What a JWKS import did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImportReport {
    /// Keys added.
    pub imported: Vec<KeyId>,
    /// Keys already present with the same public key.
    pub unchanged: Vec<KeyId>,
    /// Entries that are not Ed25519 signing keys.
    pub skipped: Vec<SkippedJwk>,
}

#[derive(Deserialize)]
struct RawJwks {
    keys: Vec<RawJwk>,
}

#[derive(Deserialize)]
struct RawJwk {
    kty: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    use_: Option<String>,
    d: Option<serde::de::IgnoredAny>,
}

fn jwks_error(path: String, reason: impl Into<String>) -> Error {
    Error::Decode(DecodeError {
        type_name: "JWKS",
        path,
        reason: reason.into(),
    })
}

/// Decodes `x` strictly: canonical unpadded base64url, 32 bytes, a canonical
/// point encoding that is not of small order.
fn decode_x(x: &str, path: &str) -> Result<VerifyingKey> {
    let bytes = URL_SAFE_NO_PAD.decode(x).map_err(|e| {
        jwks_error(
            path.to_string(),
            format!(
                "not canonical unpadded base64url: {}",
                crate::jwt::b64_problem(e)
            ),
        )
    })?;
    let arr: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
        jwks_error(
            path.to_string(),
            format!("an Ed25519 public key is 32 bytes, got {}", bytes.len()),
        )
    })?;
    let vk = VerifyingKey::from_bytes(&arr)
        .map_err(|_| jwks_error(path.to_string(), "not a valid Ed25519 point"))?;
    if vk.to_edwards().compress().to_bytes() != arr {
        return Err(jwks_error(path.to_string(), "non-canonical point encoding"));
    }
    if vk.is_weak() {
        return Err(jwks_error(
            path.to_string(),
            "small-order (weak) public key: it would accept forged signatures",
        ));
    }
    Ok(vk)
}

/// Ed25519 keys read from a JWKS, in document order.
type PublicKeys = Vec<(KeyId, VerifyingKey)>;

/// Parses a JWKS into the Ed25519 keys to import and the entries skipped.
fn parse_jwks(json: &str) -> Result<(PublicKeys, Vec<SkippedJwk>)> {
    let raw: RawJwks = serde_json::from_str(json)
        .map_err(|e| jwks_error(String::new(), format!("{e}; expected {{\"keys\":[...]}}")))?;
    let mut keys: PublicKeys = Vec::new();
    let mut skipped = Vec::new();
    for (i, jwk) in raw.keys.into_iter().enumerate() {
        let at = |field: &str| format!("keys[{i}].{field}");
        let skip = |reason: String| SkippedJwk {
            index: i,
            kid: jwk.kid.clone(),
            reason,
        };
        if let Some(u) = jwk.use_.as_deref().filter(|u| *u != "sig") {
            skipped.push(skip(format!("use is {u:?}, not \"sig\"")));
            continue;
        }
        match jwk.kty.as_deref() {
            Some("OKP") => {}
            other => {
                skipped.push(skip(format!("kty is {other:?}, not \"OKP\"")));
                continue;
            }
        }
        if jwk.crv.as_deref() != Some("Ed25519") {
            return Err(jwks_error(
                at("crv"),
                format!("expected \"Ed25519\", got {:?}", jwk.crv),
            ));
        }
        if let Some(alg) = jwk.alg.as_deref().filter(|a| *a != "EdDSA") {
            return Err(jwks_error(
                at("alg"),
                format!("expected \"EdDSA\", got {alg:?}"),
            ));
        }
        if jwk.d.is_some() {
            return Err(jwks_error(
                at("d"),
                "the JWKS contains private key material; publish public keys only",
            ));
        }
        let Some(kid) = jwk.kid.as_deref() else {
            return Err(jwks_error(at("kid"), "missing: every key needs a kid"));
        };
        let kid = KeyId::new(kid).map_err(|e| jwks_error(at("kid"), e.to_string()))?;
        if keys.iter().any(|(k, _)| *k == kid) {
            return Err(Error::DuplicateKey {
                kid: kid.to_string(),
            });
        }
        let Some(x) = jwk.x.as_deref() else {
            return Err(jwks_error(at("x"), "missing: the public key is required"));
        };
        keys.push((kid, decode_x(x, &at("x"))?));
    }
    Ok((keys, skipped))
}

impl Keyring {
    /// The JWKS of the keys that verify (active, prepublished, inactive).
    pub fn jwks(&self) -> Jwks {
        Jwks {
            keys: self
                .keys()
                .into_iter()
                .filter(|k| k.state.verifies())
                .map(|k| Jwk {
                    kty: "OKP",
                    crv: "Ed25519",
                    x: URL_SAFE_NO_PAD.encode(k.public_key.as_bytes()),
                    kid: k.kid.to_string(),
                    alg: "EdDSA",
                    use_: "sig",
                })
                .collect(),
        }
    }

    /// The recommended `Cache-Control: max-age` for the JWKS at `now`: half the
    /// time left until the next planned key switch, at least 15 minutes.
    pub fn jwks_max_age(&self, now: i64, policy: &RotationPolicy) -> Duration {
        jwks_max_age(&self.keys(), now, policy)
    }

    /// A verify-only keyring holding the Ed25519 keys of a JWKS (see the module
    /// docs for what is skipped and what is rejected).
    pub fn from_jwks(json: &str) -> Result<(Keyring, ImportReport)> {
        let kr = Keyring::new();
        let report = kr.import_jwks(json)?;
        Ok((kr, report))
    }

    /// Adds the Ed25519 keys of a JWKS as verify-only (inactive) keys: all or
    /// nothing.
    pub fn import_jwks(&self, json: &str) -> Result<ImportReport> {
        let (keys, skipped) = parse_jwks(json)?;
        let mut report = ImportReport {
            skipped,
            ..ImportReport::default()
        };
        let mut new = Vec::new();
        for (kid, vk) in keys {
            match self.key_info(kid.as_str()) {
                Some(info) if info.public_key == vk => report.unchanged.push(kid),
                Some(_) => {
                    return Err(Error::DuplicateKey {
                        kid: kid.to_string(),
                    });
                }
                None => new.push((kid, vk)),
            }
        }
        report.imported = new.iter().map(|(k, _)| k.clone()).collect();
        self.insert_public_keys(new)?;
        Ok(report)
    }
}
