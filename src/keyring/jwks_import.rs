//! Importing a JWKS: a verify-only keyring of its public keys, and the
//! checks of a workload's proof key (the same JWK rules).
//!
//! # Import rules (verify-only keyrings)
//!
//! [`Keyring::from_jwks`] and [`Keyring::import_jwks`] accept a JWKS and are all
//! or nothing:
//! * an entry whose `use` is present and not `sig` (nor a SPIFFE bundle's
//!   `jwt-svid` or `wit-svid`: bearer and WIT keys), or whose `kty` is not
//!   `OKP`, `EC` or `RSA`, is **skipped** and listed in the [`ImportReport`];
//! * an entry of a known `kty` is **rejected** (the whole import fails) when it
//!   carries a private member (`d`, `p`, `q`, `dp`, `dq`, `qi`, `oth`), its
//!   `alg` is present and not one its key can have, its `kid` is missing,
//!   invalid or repeated, or its key is not exactly right: `OKP` needs `crv`
//!   `Ed25519` and `x` canonical unpadded base64url of a canonical,
//!   non-small-order 32-byte point; `EC` needs `crv` `P-256`, `P-384` or
//!   `P-521` and `x`, `y` of exactly 32, 48 or 66 bytes each naming a point on
//!   that curve; `RSA` needs `e` `AQAB` (65537) and `n` of 2048 to 8192 bits
//!   without leading zero bytes;
//! * every key gets exactly one algorithm, and verifies only tokens whose
//!   header `alg` names it ([`JwsAlgorithm`]): `OKP` keys `EdDSA`; `EC` keys
//!   the algorithm of their curve (`ES256`, `ES384`, `ES512`; an `alg` naming
//!   another is refused); `RSA` keys the `alg` the JWK names (`RS256`,
//!   `RS384`, `RS512`, `PS256`, `PS384` or `PS512`). An `RSA` JWK **without
//!   `alg` is an RS256 key**, as it always was here: nothing is guessed from a
//!   token, so a key published without `alg` never verifies a PS256, RS384 or
//!   RS512 token; an issuer who signs those must say so in its JWKS. ES384,
//!   ES512, PS* and RS384/512 keys are verify-only;
//! * a `kid` already in the keyring with the same public key is left unchanged;
//!   with a different public key it is `DuplicateKey`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::VerifyingKey;
use serde::Deserialize;

use super::public_key::{Checker, check_rsa_modulus};
use super::{Algorithm, JwsAlgorithm, KeyId, KeyPurpose, Keyring, PublicKey};
use crate::error::{DecodeError, Error, Result, truncate_for_message};

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
    /// Entries that are not signing keys of a known type.
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
    y: Option<String>,
    n: Option<String>,
    e: Option<String>,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    use_: Option<String>,
    d: Option<serde::de::IgnoredAny>,
    p: Option<serde::de::IgnoredAny>,
    q: Option<serde::de::IgnoredAny>,
    dp: Option<serde::de::IgnoredAny>,
    dq: Option<serde::de::IgnoredAny>,
    qi: Option<serde::de::IgnoredAny>,
    oth: Option<serde::de::IgnoredAny>,
}

impl RawJwk {
    /// The first private-key member present, if any.
    fn private_member(&self) -> Option<&'static str> {
        [
            ("d", self.d.is_some()),
            ("p", self.p.is_some()),
            ("q", self.q.is_some()),
            ("dp", self.dp.is_some()),
            ("dq", self.dq.is_some()),
            ("qi", self.qi.is_some()),
            ("oth", self.oth.is_some()),
        ]
        .into_iter()
        .find_map(|(name, present)| present.then_some(name))
    }
}

fn jwks_error(path: String, reason: impl Into<String>) -> Error {
    Error::Decode(DecodeError {
        type_name: "JWKS",
        path,
        reason: reason.into(),
    })
}

/// Decodes a member strictly: canonical unpadded base64url.
fn decode_b64(value: &str, path: &str) -> Result<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(value).map_err(|e| {
        jwks_error(
            path.to_string(),
            format!(
                "not canonical unpadded base64url: {}",
                crate::error::b64::problem(e)
            ),
        )
    })
}

/// Decodes a member of exactly `L` bytes (`what` names it in the message).
fn decode_fixed<const L: usize>(value: &str, path: &str, what: &str) -> Result<[u8; L]> {
    let bytes = decode_b64(value, path)?;
    bytes.as_slice().try_into().map_err(|_| {
        jwks_error(
            path.to_string(),
            format!("{what} is {L} bytes, got {}", bytes.len()),
        )
    })
}

/// Decodes a 32-byte member (`what` names it in the message).
fn decode_32(value: &str, path: &str, what: &str) -> Result<[u8; 32]> {
    decode_fixed::<32>(value, path, what)
}

/// Decodes `x` strictly: canonical unpadded base64url, 32 bytes, a canonical
/// point encoding that is not of small order.
fn decode_x(x: &str, path: &str) -> Result<VerifyingKey> {
    let arr = decode_32(x, path, "an Ed25519 public key")?;
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

/// Keys read from a JWKS, in document order.
type PublicKeys = Vec<(KeyId, PublicKey, KeyPurpose)>;

/// A required member's value.
fn required<'a>(value: &'a Option<String>, path: String, what: &str) -> Result<&'a str> {
    value
        .as_deref()
        .ok_or_else(|| jwks_error(path, format!("missing: {what} is required")))
}

/// The public key of one entry whose `kty` is known (`at` names members).
fn entry_key(jwk: &RawJwk, alg: JwsAlgorithm, at: &dyn Fn(&str) -> String) -> Result<PublicKey> {
    let crv = |want: &str| -> Result<()> {
        if jwk.crv.as_deref() == Some(want) {
            Ok(())
        } else {
            Err(jwks_error(
                at("crv"),
                format!("expected \"{want}\", got {:?}", jwk.crv),
            ))
        }
    };
    let coordinates = || -> Result<(&str, &str)> {
        Ok((
            required(&jwk.x, at("x"), "the x coordinate")?,
            required(&jwk.y, at("y"), "the y coordinate")?,
        ))
    };
    let public = match alg {
        JwsAlgorithm::EdDsa => {
            crv("Ed25519")?;
            let x = required(&jwk.x, at("x"), "the public key")?;
            PublicKey::Ed25519(decode_x(x, &at("x"))?)
        }
        JwsAlgorithm::Es256 => {
            crv("P-256")?;
            let (x, y) = coordinates()?;
            PublicKey::P256 {
                x: decode_32(x, &at("x"), "a P-256 x coordinate")?,
                y: decode_32(y, &at("y"), "a P-256 y coordinate")?,
            }
        }
        JwsAlgorithm::Es384 => {
            crv("P-384")?;
            let (x, y) = coordinates()?;
            PublicKey::P384 {
                x: decode_fixed(x, &at("x"), "a P-384 x coordinate")?,
                y: decode_fixed(y, &at("y"), "a P-384 y coordinate")?,
            }
        }
        JwsAlgorithm::Es512 => {
            crv("P-521")?;
            let (x, y) = coordinates()?;
            PublicKey::P521 {
                x: decode_fixed(x, &at("x"), "a P-521 x coordinate")?,
                y: decode_fixed(y, &at("y"), "a P-521 y coordinate")?,
            }
        }
        rsa => {
            let e = required(&jwk.e, at("e"), "the exponent")?;
            if e != "AQAB" {
                return Err(jwks_error(
                    at("e"),
                    format!(
                        "the RSA exponent must be 65537 (\"AQAB\"), got {:?}",
                        truncate_for_message(e)
                    ),
                ));
            }
            let n = decode_b64(required(&jwk.n, at("n"), "the modulus")?, &at("n"))?;
            check_rsa_modulus(&n).map_err(|why| jwks_error(at("n"), why))?;
            if rsa == JwsAlgorithm::Rs256 {
                PublicKey::Rsa { n }
            } else {
                PublicKey::RsaVerifyOnly { n, alg: rsa }
            }
        }
    };
    // The checks every key gets on insert (point on the curve, modulus usable),
    // reported here against the member that carries the key.
    let member = match alg.key_type() {
        "RSA" => "n",
        _ => "x",
    };
    Checker::new(public.clone()).map_err(|why| jwks_error(at(member), why))?;
    Ok(public)
}

/// The one algorithm a JWK's key verifies (see the module docs): `OKP`
/// EdDSA, `EC` its curve's, `RSA` its `alg` or, without one, RS256. An `alg`
/// the key cannot have refuses the set.
fn algorithm_of(jwk: &RawJwk, kty: &str, at: &dyn Fn(&str) -> String) -> Result<JwsAlgorithm> {
    let named = jwk.alg.as_deref();
    let alg = match kty {
        "OKP" => JwsAlgorithm::EdDsa,
        // The curve fixes the algorithm; an EC alg the JWK names must be
        // its curve's (reported against the curve, as the alg is the claim
        // the key is checked against).
        "EC" => match named.and_then(JwsAlgorithm::from_name) {
            Some(alg) if alg.key_type() == "EC" => {
                let want = match alg {
                    JwsAlgorithm::Es256 => "P-256",
                    JwsAlgorithm::Es384 => "P-384",
                    _ => "P-521",
                };
                if jwk.crv.as_deref() != Some(want) {
                    return Err(jwks_error(
                        at("crv"),
                        format!(
                            "expected \"{want}\" (alg {alg}), got {:?}",
                            jwk.crv.as_deref().map(truncate_for_message)
                        ),
                    ));
                }
                alg
            }
            _ => match jwk.crv.as_deref() {
                Some("P-256") => JwsAlgorithm::Es256,
                Some("P-384") => JwsAlgorithm::Es384,
                Some("P-521") => JwsAlgorithm::Es512,
                other => {
                    return Err(jwks_error(
                        at("crv"),
                        format!(
                            "expected \"P-256\", \"P-384\" or \"P-521\", got {:?}",
                            other.map(truncate_for_message)
                        ),
                    ));
                }
            },
        },
        // No alg: RS256, as RSA JWKs without one always meant here. A named
        // RSA algorithm binds the key to it alone.
        _ => match named.and_then(JwsAlgorithm::from_name) {
            Some(alg) if alg.key_type() == "RSA" => alg,
            _ if named.is_none() => JwsAlgorithm::Rs256,
            _ => {
                return Err(jwks_error(
                    at("alg"),
                    format!(
                        "an RSA key must have alg \"RS256\", \"RS384\", \"RS512\", \"PS256\", \"PS384\" or \"PS512\" (or none, meaning RS256), got {:?}",
                        named.map(truncate_for_message).unwrap_or_default()
                    ),
                ));
            }
        },
    };
    if let Some(named) = named.filter(|a| *a != alg.name()) {
        let curve = match (kty, jwk.crv.as_deref()) {
            ("EC", Some(crv)) => format!(" {crv}"),
            _ => String::new(),
        };
        return Err(jwks_error(
            at("alg"),
            format!(
                "a {kty}{curve} key must have alg \"{}\", got {:?}",
                alg.name(),
                truncate_for_message(named)
            ),
        ));
    }
    Ok(alg)
}

/// The purpose a JWK's `use` gives its key: a SPIFFE bundle's `jwt-svid`
/// entries are bearer keys and its `wit-svid` entries WIT keys; `sig` (or no
/// `use`) leaves it to the source (`default`). `Err` (why it is skipped) for
/// an entry that is no signing key (`enc`, or an unknown use), and for a
/// `jwt-svid` entry in a set read as WIT keys: a caller who asked for WIT
/// keys never gets a key that verifies bearer tokens.
fn purpose_of_use(
    use_: Option<&str>,
    default: KeyPurpose,
) -> std::result::Result<KeyPurpose, String> {
    match use_ {
        None | Some("sig") => Ok(default),
        Some("jwt-svid") if default == KeyPurpose::Wit => {
            Err("use is \"jwt-svid\", a JWT-SVID authority, in a set read as WIT keys".into())
        }
        Some("jwt-svid") => Ok(KeyPurpose::Bearer),
        Some("wit-svid") => Ok(KeyPurpose::Wit),
        Some(other) => Err(format!(
            "use is {:?}, not \"sig\" (or a SPIFFE bundle's \"jwt-svid\" or \"wit-svid\")",
            truncate_for_message(other)
        )),
    }
}

/// Parses a JWKS (or a SPIFFE bundle) into the keys to import, with the
/// purpose each gets (`default` for plain `sig` keys), and the entries
/// skipped.
fn parse_jwks(json: &str, default: KeyPurpose) -> Result<(PublicKeys, Vec<SkippedJwk>)> {
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
        let purpose = match purpose_of_use(jwk.use_.as_deref(), default) {
            Ok(p) => p,
            Err(why) => {
                skipped.push(skip(why));
                continue;
            }
        };
        let kty = match jwk.kty.as_deref() {
            Some(kty @ ("OKP" | "EC" | "RSA")) => kty,
            other => {
                skipped.push(skip(format!(
                    "kty is {:?}, not \"OKP\", \"EC\" or \"RSA\"",
                    other.map(truncate_for_message)
                )));
                continue;
            }
        };
        if let Some(member) = jwk.private_member() {
            return Err(jwks_error(
                at(member),
                "the JWKS contains private key material; publish public keys only",
            ));
        }
        let alg = algorithm_of(&jwk, kty, &at)?;
        let Some(kid) = jwk.kid.as_deref() else {
            return Err(jwks_error(at("kid"), "missing: every key needs a kid"));
        };
        let kid = KeyId::new(kid).map_err(|e| jwks_error(at("kid"), e.to_string()))?;
        if keys.iter().any(|(k, _, _)| *k == kid) {
            return Err(Error::DuplicateKey {
                kid: kid.to_string(),
            });
        }
        keys.push((kid, entry_key(&jwk, alg, &at)?, purpose));
    }
    Ok((keys, skipped))
}
impl Keyring {
    /// A verify-only keyring holding the keys of a JWKS: OKP Ed25519, EC P-256,
    /// P-384 and P-521, and RSA (2048 to 8192 bits, e = 65537; RS256 unless the
    /// JWK's `alg` names RS384, RS512, PS256, PS384 or PS512) keys with `use`
    /// absent or `sig`
    /// become inactive bearer keys (a SPIFFE bundle's `jwt-svid` entries
    /// too, and its `wit-svid` entries WIT keys); `use: enc` entries and
    /// unknown key types are skipped (and reported); a private member, an
    /// off-curve or small-order point, a duplicate `kid` or an `alg` that does
    /// not match the key refuses the whole set.
    pub fn from_jwks(json: &str) -> Result<(Keyring, ImportReport)> {
        Keyring::from_jwks_as(json, KeyPurpose::Bearer)
    }

    /// [`Keyring::from_jwks`] for a key set of `purpose`: the WIT key set
    /// (`/wit/jwks.json`, `wid keyring jwks --purpose wit`) is imported with
    /// `KeyPurpose::Wit`, so its keys verify WITs only, never bearer tokens.
    pub fn from_jwks_as(json: &str, purpose: KeyPurpose) -> Result<(Keyring, ImportReport)> {
        let kr = Keyring::new();
        let report = kr.import_jwks_as(json, purpose)?;
        Ok((kr, report))
    }

    /// Adds the keys of a JWKS as verify-only (inactive) bearer keys (or as
    /// a SPIFFE bundle's entries say): all or nothing.
    pub fn import_jwks(&self, json: &str) -> Result<ImportReport> {
        self.import_jwks_as(json, KeyPurpose::Bearer)
    }

    /// [`Keyring::import_jwks`] for a key set of `purpose`. A kid already
    /// held with the same public key but another purpose is refused
    /// (`DuplicateKey`): one key never serves both.
    pub fn import_jwks_as(&self, json: &str, purpose: KeyPurpose) -> Result<ImportReport> {
        let (keys, skipped) = parse_jwks(json, purpose)?;
        let mut report = ImportReport {
            skipped,
            ..ImportReport::default()
        };
        let mut new: Vec<(KeyId, PublicKey, KeyPurpose)> = Vec::new();
        for (kid, public, purpose) in keys {
            match self.key_info(kid.as_str()) {
                Some(info) if info.public_key == public && info.purpose == purpose => {
                    report.unchanged.push(kid)
                }
                Some(_) => {
                    return Err(Error::DuplicateKey {
                        kid: kid.to_string(),
                    });
                }
                None => new.push((kid, public, purpose)),
            }
        }
        report.imported = new.iter().map(|(k, _, _)| k.clone()).collect();
        self.insert_public_keys(new)?;
        Ok(report)
    }
}

/// What [`Keyring::mirror_jwks`] changed.
#[cfg(feature = "remote-jwks")]
#[derive(Debug, Default)]
pub(crate) struct MirrorReport {
    /// The set's keys, in document order.
    pub(crate) keys: Vec<KeyId>,
    /// Keys new to the keyring (a kid whose key changed counts here too).
    pub(crate) added: Vec<KeyId>,
    /// Keys taken out: gone from the set, or replaced under their kid.
    pub(crate) removed: Vec<KeyId>,
    /// Entries skipped as not signing keys.
    pub(crate) skipped: usize,
}

#[cfg(feature = "remote-jwks")]
impl Keyring {
    /// Makes this keyring's keys exactly the keys of a JWKS (a remote
    /// issuer's latest set): new kids are added (verify-only), kids whose key
    /// changed are replaced, kids gone from the set are removed. All or
    /// nothing, in one write: a set that does not import, or that would
    /// replace an active key (one the caller inserted to sign with; it
    /// cannot be removed), changes nothing. An active key absent from the set
    /// is kept, as `remove` would refuse it.
    pub(crate) fn mirror_jwks(&self, json: &str, purpose: KeyPurpose) -> Result<MirrorReport> {
        let (keys, skipped) = parse_jwks(json, purpose)?;
        // Checked outside the lock; the expensive part.
        let mut entries = Vec::with_capacity(keys.len());
        for (id, public, purpose) in keys {
            entries.push(super::KeyEntry::public_only(id, purpose, public)?);
        }
        let mut report = MirrorReport {
            keys: entries.iter().map(|e| e.id.clone()).collect(),
            skipped: skipped.len(),
            ..MirrorReport::default()
        };
        {
            let mut inner = self.write();
            // Plan first: nothing changes unless everything can.
            for e in &entries {
                let replaced = inner.keys.get(&e.id).is_some_and(|held| {
                    held.entry.public_key() != e.public_key() || held.entry.purpose != e.purpose
                });
                if replaced && inner.is_active(e.id.as_str()) {
                    return Err(Error::DuplicateKey {
                        kid: e.id.to_string(),
                    });
                }
            }
            let gone: Vec<KeyId> = inner
                .keys
                .keys()
                .filter(|held| !report.keys.contains(held))
                .cloned()
                .collect();
            for kid in gone {
                if inner.is_active(kid.as_str()) {
                    log::debug!("remote JWKS: keeping {kid}, an active key the set does not list");
                    continue;
                }
                inner.keys.remove(&kid);
                report.removed.push(kid);
            }
            let meta = super::Meta {
                state: super::KeyState::Inactive,
                create_time: 0,
                publish_time: 0,
                retired_time: 0,
            };
            for e in entries {
                match inner.keys.get(&e.id) {
                    // Kept as it is: its verification table may be built.
                    Some(held)
                        if held.entry.public_key() == e.public_key()
                            && held.entry.purpose == e.purpose =>
                    {
                        continue;
                    }
                    Some(_) => report.removed.push(e.id.clone()),
                    None => {}
                }
                report.added.push(e.id.clone());
                inner.put(e, meta);
            }
        }
        self.changed();
        Ok(report)
    }
}

/// The checked public key of a workload's `ProofKey` (a request's, or a WIT's
/// `cnf.jwk`): Ed25519 (`OKP`, `Ed25519`, `EdDSA`) or P-256 (`EC`, `P-256`,
/// `ES256`), canonical, on the curve, not of small order. `at` names the
/// place in messages (`cnf.jwk` or `ProofKey`).
pub(crate) fn proof_key_checker(
    key: &crate::model::ProofKey,
    at: &str,
) -> std::result::Result<Checker, String> {
    let alg = match (key.kty.as_str(), key.alg.as_str()) {
        ("OKP", "EdDSA") => Algorithm::EdDsa,
        ("EC", "ES256") => Algorithm::Es256,
        (kty, alg) => {
            return Err(format!(
                "{at}: kty {:?} with alg {:?}; expected OKP with EdDSA (Ed25519) or EC with ES256 (P-256)",
                truncate_for_message(kty),
                truncate_for_message(alg)
            ));
        }
    };
    if alg == Algorithm::EdDsa && !key.y.is_empty() {
        return Err(format!("{at}.y: an Ed25519 key has no y"));
    }
    let raw = RawJwk {
        kty: Some(key.kty.clone()),
        crv: Some(key.crv.clone()),
        x: Some(key.x.clone()),
        y: (!key.y.is_empty()).then(|| key.y.clone()),
        n: None,
        e: None,
        kid: None,
        alg: Some(key.alg.clone()),
        use_: None,
        d: None,
        p: None,
        q: None,
        dp: None,
        dq: None,
        qi: None,
        oth: None,
    };
    let public = entry_key(&raw, alg.into(), &|m| format!("{at}.{m}")).map_err(|e| match e {
        Error::Decode(d) => format!("{}: {}", d.path, d.reason),
        other => other.to_string(),
    })?;
    Checker::for_proof_key(public).map_err(|why| format!("{at}: {why}"))
}
