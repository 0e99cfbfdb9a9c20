//! Publishing public keys: the JWKS, the WIT key set, the SPIFFE bundle and
//! the OIDC discovery document.
//!
//! Third parties — Vault's JWT auth method, Consul, cloud IAM — read our public
//! keys from a JWKS URL or an OIDC discovery document (seed 003). The JWKS holds
//! active, prepublished and inactive bearer keys (deprecated keys are left
//! out), ordered by create time then key ID, so the document is deterministic.
//! WIT keys are published apart, in the WIT key set ([`Keyring::jwks_for`]),
//! so no relying party that trusts the JWKS ever accepts a WIT (see
//! [`KeyPurpose`]).
//!
//! Importing a JWKS (a verify-only keyring) is `jwks_import.rs`.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;

use super::policy::{RotationPolicy, jwks_max_age, jwks_max_age_with_lead};
use super::{Algorithm, KeyId, KeyPurpose, Keyring, PublicKey};
use crate::error::{Error, Result, truncate_for_message};

/// One public key in a JWKS: `{"kty":"OKP","crv":"Ed25519","x",...}`,
/// `{"kty":"EC","crv":"P-256","x","y",...}` or `{"kty":"RSA","n","e",...}`,
/// each with `kid`, `alg` and `"use":"sig"`, members in that order. Binary
/// members are unpadded base64url.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Jwk {
    /// `OKP`, `EC` or `RSA`.
    pub kty: &'static str,
    /// `Ed25519`, `P-256` (or, for verify-only keys, `P-384`, `P-521`; none
    /// for RSA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crv: Option<&'static str>,
    /// The Ed25519 public key, or the P-256 point's x coordinate (32 bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    /// The P-256 point's y coordinate (32 bytes; P-384 48, P-521 66).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
    /// The RSA modulus, without leading zero bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<String>,
    /// The RSA exponent: always `AQAB` (65537).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e: Option<&'static str>,
    /// The key ID.
    pub kid: String,
    /// `EdDSA`, `ES256` or `RS256` (or a verify-only key's algorithm).
    pub alg: &'static str,
    /// Always `sig`.
    #[serde(rename = "use")]
    pub use_: &'static str,
}

impl Jwk {
    /// The JWK of `public` under `kid`.
    pub fn new(kid: &KeyId, public: &PublicKey) -> Jwk {
        let b64 = |b: &[u8]| Some(URL_SAFE_NO_PAD.encode(b));
        let mut jwk = Jwk {
            kty: public.algorithm().key_type(),
            crv: None,
            x: None,
            y: None,
            n: None,
            e: None,
            kid: kid.to_string(),
            alg: public.algorithm().name(),
            use_: "sig",
        };
        match public {
            PublicKey::Ed25519(vk) => {
                jwk.crv = Some("Ed25519");
                jwk.x = b64(vk.as_bytes());
            }
            PublicKey::P256 { x, y } => {
                jwk.crv = Some("P-256");
                jwk.x = b64(x);
                jwk.y = b64(y);
            }
            PublicKey::P384 { x, y } => {
                jwk.crv = Some("P-384");
                jwk.x = b64(x);
                jwk.y = b64(y);
            }
            PublicKey::P521 { x, y } => {
                jwk.crv = Some("P-521");
                jwk.x = b64(x);
                jwk.y = b64(y);
            }
            PublicKey::Rsa { n } | PublicKey::RsaVerifyOnly { n, .. } => {
                jwk.n = b64(n);
                jwk.e = Some("AQAB");
            }
        }
        jwk
    }
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

    /// The keys as a SPIFFE trust bundle's JWT authorities: the ES256 and
    /// RS256 keys (a JWT-SVID cannot be EdDSA, so Ed25519 keys are left
    /// out), each with `"use":"jwt-svid"`, and `spiffe_refresh_hint` (how
    /// often, in seconds, a validator should fetch the bundle again; at
    /// least 1).
    pub fn to_spiffe_bundle_json(&self, refresh_hint: Duration) -> String {
        bundle_json(&[(self, "jwt-svid")], refresh_hint, None)
    }

    /// The keys (a WIT key set) as a SPIFFE trust bundle's WIT-SVID
    /// authorities: as [`Jwks::to_spiffe_bundle_json`], each with
    /// `"use":"wit-svid"` (the SPIFFE WIT-SVID draft keeps WIT keys apart from
    /// JWT-SVID keys; EdDSA is no WIT-SVID algorithm either).
    pub fn to_wit_svid_bundle_json(&self, refresh_hint: Duration) -> String {
        bundle_json(&[(self, "wit-svid")], refresh_hint, None)
    }
}

/// A SPIFFE bundle of the ES256 and RS256 keys of each set, with its `use`
/// (and `spiffe_sequence` when given).
pub(super) fn bundle_json(
    sets: &[(&Jwks, &'static str)],
    refresh_hint: Duration,
    sequence: Option<u64>,
) -> String {
    #[derive(Serialize)]
    struct Bundle {
        keys: Vec<Jwk>,
        spiffe_refresh_hint: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        spiffe_sequence: Option<u64>,
    }
    let keys = sets
        .iter()
        .flat_map(|(set, use_)| {
            set.keys
                .iter()
                .filter(|k| k.kty != "OKP")
                .map(|k| Jwk { use_, ..k.clone() })
        })
        .collect();
    // Plain strings and an integer only: serialization cannot fail.
    serde_json::to_string(&Bundle {
        keys,
        spiffe_refresh_hint: refresh_hint.as_secs().max(1),
        spiffe_sequence: sequence,
    })
    .unwrap_or_default()
}

/// An OpenID Connect discovery document (`/.well-known/openid-configuration`)
/// pointing at the JWKS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OidcDiscovery {
    /// The issuer, exactly as tokens carry it in `iss`.
    pub issuer: String,
    /// `<issuer>/.well-known/jwks.json`.
    pub jwks_uri: String,
    /// The algorithms of the published keys (`["EdDSA"]` by default).
    pub id_token_signing_alg_values_supported: Vec<&'static str>,
    /// `["code"]`.
    pub response_types_supported: Vec<&'static str>,
    /// `["public"]`.
    pub subject_types_supported: Vec<&'static str>,
    /// Every claim the issuer writes ([`CLAIMS_SUPPORTED`](crate::CLAIMS_SUPPORTED)):
    /// some relying parties read it to know what they may bind to.
    pub claims_supported: Vec<&'static str>,
}

impl OidcDiscovery {
    /// The discovery document for `issuer`, which must be an `https` URL with a
    /// host and without query, fragment, user info or whitespace (`http` only
    /// to a loopback host — `localhost`, `127.0.0.0/8`, `[::1]` — so standard
    /// OIDC clients can be tested on one machine), listing
    /// EdDSA (see [`Keyring::oidc_discovery`] for the keyring's algorithms).
    pub fn new(issuer: &str) -> Result<OidcDiscovery> {
        OidcDiscovery::with_algorithms(issuer, &[Algorithm::EdDsa])
    }

    /// The discovery document for `issuer` listing `algorithms` (an empty list
    /// lists EdDSA, the algorithm a first key would have).
    pub fn with_algorithms(issuer: &str, algorithms: &[Algorithm]) -> Result<OidcDiscovery> {
        validate_issuer(issuer)?;
        let mut algs: Vec<&'static str> = algorithms.iter().map(|a| a.name()).collect();
        if algs.is_empty() {
            algs.push(Algorithm::EdDsa.name());
        }
        algs.dedup();
        Ok(OidcDiscovery {
            issuer: issuer.to_string(),
            jwks_uri: format!("{}/.well-known/jwks.json", issuer.trim_end_matches('/')),
            id_token_signing_alg_values_supported: algs,
            response_types_supported: vec!["code"],
            subject_types_supported: vec!["public"],
            claims_supported: crate::claim_names::CLAIMS_SUPPORTED.to_vec(),
        })
    }

    /// The JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Whether `host` (of a URL's authority, without the port) names this machine:
/// `localhost`, `127.0.0.0/8` or `[::1]`.
fn is_loopback_host(host: &str) -> bool {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn validate_issuer(issuer: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid(
            "OidcDiscovery",
            "issuer",
            format!(
                "{why}; expected an https URL like https://nomad.example.com, or http to a loopback host for local tests (got {:?})",
                truncate_for_message(issuer)
            ),
        ))
    };
    let (rest, http) = match (
        issuer.strip_prefix("https://"),
        issuer.strip_prefix("http://"),
    ) {
        (Some(rest), _) => (rest, false),
        (None, Some(rest)) => (rest, true),
        (None, None) => return bad("must start with https://"),
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
    if http && !is_loopback_host(host) {
        return bad("must start with https:// (http only to localhost, 127.0.0.0/8 or [::1])");
    }
    Ok(())
}

impl Keyring {
    /// The JWKS relying parties trust: the bearer keys that verify (active,
    /// prepublished, inactive), of every algorithm. WIT keys are never in it
    /// (see [`KeyPurpose`]); [`Keyring::jwks_for`] gives the WIT key set.
    pub fn jwks(&self) -> Jwks {
        self.jwks_for(KeyPurpose::Bearer)
    }

    /// The key set of `purpose`: the keys of that purpose that verify.
    /// `jwks_for(KeyPurpose::Wit)` is the WIT key set, for receivers of WITs
    /// only (`/wit/jwks.json`); never serve it where bearer tokens are checked.
    pub fn jwks_for(&self, purpose: KeyPurpose) -> Jwks {
        Jwks {
            keys: self
                .keys()
                .into_iter()
                .filter(|k| k.state.verifies() && k.purpose == purpose)
                .map(|k| Jwk::new(&k.kid, &k.public_key))
                .collect(),
        }
    }

    /// The SPIFFE trust bundle of this keyring with both kinds of JWT
    /// authority: its ES256/RS256 bearer keys as `jwt-svid` entries and its
    /// ES256/RS256 WIT keys as `wit-svid` entries (see
    /// [`Jwks::to_spiffe_bundle_json`], [`Jwks::to_wit_svid_bundle_json`]).
    /// Give it only to validators
    /// that honour `use`: one that ignores it would take a WIT key as a
    /// JWT-SVID authority. `jwks().to_spiffe_bundle_json(..)` is the bundle
    /// of JWT-SVID authorities alone, what `wid keyring jwks --format spiffe`
    /// prints.
    pub fn spiffe_bundle_json(&self, refresh_hint: Duration) -> String {
        bundle_json(
            &[
                (&self.jwks_for(KeyPurpose::Bearer), "jwt-svid"),
                (&self.jwks_for(KeyPurpose::Wit), "wit-svid"),
            ],
            refresh_hint,
            None,
        )
    }

    /// The bundle a SPIFFE bundle endpoint serves: [`Keyring::spiffe_bundle_json`]
    /// with `spiffe_sequence` = [`Keyring::spiffe_sequence`].
    pub fn spiffe_endpoint_bundle_json(&self, refresh_hint: Duration) -> String {
        bundle_json(
            &[
                (&self.jwks_for(KeyPurpose::Bearer), "jwt-svid"),
                (&self.jwks_for(KeyPurpose::Wit), "wit-svid"),
            ],
            refresh_hint,
            Some(self.spiffe_sequence()),
        )
    }

    /// The OIDC discovery document for `issuer`, listing the algorithms of the
    /// published bearer keys (EdDSA when there are none yet).
    pub fn oidc_discovery(&self, issuer: &str) -> Result<OidcDiscovery> {
        OidcDiscovery::with_algorithms(issuer, &self.algorithms())
    }

    /// The recommended `Cache-Control: max-age` for the JWKS at `now`: half the
    /// time left until the next planned key switch, at least 15 minutes.
    pub fn jwks_max_age(&self, now: i64, policy: &RotationPolicy) -> Duration {
        jwks_max_age(&self.keys(), now, policy)
    }

    /// [`Keyring::jwks_max_age`] bounded by the next planned change: never
    /// more than the time until the policy's next planned change (a key
    /// switch, a prepublish, a promotion, a deprecation) less `lead`, the
    /// time a new key is published before it signs; so a cache honouring it
    /// fetches the set again before a planned key can sign unseen (0 when a
    /// change is due within the lead time).
    pub fn jwks_max_age_with_lead(
        &self,
        now: i64,
        policy: &RotationPolicy,
        lead: Duration,
    ) -> Duration {
        jwks_max_age_with_lead(&self.keys(), now, policy, lead)
    }

    /// When the next key switch the rotation policy plans is (Unix seconds):
    /// the soonest prepublished key's publish time, else when an active
    /// key's successor is due to take over (it may be past: overdue); `None`
    /// for an empty keyring.
    pub fn next_key_switch(&self, now: i64, policy: &RotationPolicy) -> Option<i64> {
        super::policy::next_key_switch(&self.keys(), now, policy)
    }
}
