//! The workload's own key pair, and the proofs (WPTs) it makes.

use std::fmt;
use std::time::Duration;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self as lc, EcdsaKeyPair, KeyPair};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::Signer as _;
use zeroize::Zeroizing;

use super::bound::BoundTokens;
use super::{target_of, token_hash};
use crate::error::{Error, Result};
use crate::keyring::Algorithm;
use crate::model::ProofKey;

/// A key pair made by and for one workload, to bind its WIT (`cnf.jwk`) and
/// sign its proofs. The private key never leaves this value except through
/// [`WorkloadKey::secret`] (for the workload's own state file); it is zeroized
/// on drop and `Debug` shows only the public key.
pub struct WorkloadKey {
    alg: Algorithm,
    secret: Secret,
    public: ProofKey,
}

enum Secret {
    /// ed25519-dalek zeroizes its signing key on drop.
    Ed25519(ed25519_dalek::SigningKey),
    /// AWS-LC frees (and clears) its key on drop; the PKCS#8 form kept for
    /// [`WorkloadKey::secret`] is zeroized.
    P256(EcdsaKeyPair, Zeroizing<Vec<u8>>),
}

impl fmt::Debug for WorkloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkloadKey")
            .field("alg", &self.alg)
            .field("public", &self.public)
            .field("secret", &"[redacted]")
            .finish()
    }
}

/// What a proof binds besides the WIT and the target, and how long it lives.
/// `Debug` never shows the tokens.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ProofOptions {
    ttl: Option<Duration>,
    tokens: BoundTokens,
}

/// A proof's default lifetime (the drafts say seconds to minutes).
pub const DEFAULT_PROOF_TTL: Duration = Duration::from_secs(60);

impl ProofOptions {
    /// No other tokens; the default lifetime (60 s).
    pub fn new() -> ProofOptions {
        ProofOptions::default()
    }

    /// How long the proof is valid (`exp` = now + ttl, whole seconds, at
    /// least 1 s).
    pub fn ttl(mut self, ttl: Duration) -> ProofOptions {
        self.ttl = Some(ttl.max(Duration::from_secs(1)));
        self
    }

    /// Binds the access token the request carries (`ath`; the token value
    /// without `Bearer `).
    pub fn access_token(mut self, token: &str) -> ProofOptions {
        self.tokens.access(token);
        self
    }

    /// Binds the transaction token the request carries (`tth`).
    pub fn transaction_token(mut self, token: &str) -> ProofOptions {
        self.tokens.transaction(token);
        self
    }

    /// Binds another token the request carries in HTTP header `header`
    /// (`oth`: the lower-cased header name to the hash of the trimmed value).
    pub fn other_token(mut self, header: &str, value: &str) -> ProofOptions {
        self.tokens.other(header, value);
        self
    }
}

impl WorkloadKey {
    /// A fresh key pair from the OS's CSPRNG: `EdDsa` (Ed25519) or `Es256`
    /// (P-256, the algorithm the drafts make mandatory to implement).
    pub fn generate(alg: Algorithm) -> Result<WorkloadKey> {
        match alg {
            Algorithm::EdDsa => {
                let mut seed = Zeroizing::new([0u8; 32]);
                getrandom::fill(&mut *seed).map_err(|e| Error::Io {
                    context: "reading the OS's random source for a workload key".into(),
                    error: std::io::Error::other(e.to_string()),
                })?;
                WorkloadKey::from_secret(alg, &*seed)
            }
            Algorithm::Es256 => {
                let doc = EcdsaKeyPair::generate_pkcs8(
                    &lc::ECDSA_P256_SHA256_FIXED_SIGNING,
                    &SystemRandom::new(),
                )
                .map_err(|_| {
                    Error::invalid(
                        "WorkloadKey",
                        "alg",
                        "AWS-LC could not generate a P-256 key",
                    )
                })?;
                WorkloadKey::from_secret(alg, doc.as_ref())
            }
            other => Err(unsupported(other)),
        }
    }

    /// The key from its secret form ([`WorkloadKey::secret`]): the 32-byte
    /// Ed25519 seed, or a P-256 key as PKCS#8 DER.
    pub fn from_secret(alg: Algorithm, secret: &[u8]) -> Result<WorkloadKey> {
        let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
        match alg {
            Algorithm::EdDsa => {
                let seed: &[u8; 32] = secret.try_into().map_err(|_| {
                    Error::invalid(
                        "WorkloadKey",
                        "secret",
                        format!(
                            "an Ed25519 workload key is a 32-byte seed, got {} bytes",
                            secret.len()
                        ),
                    )
                })?;
                let key = ed25519_dalek::SigningKey::from_bytes(seed);
                let public = ProofKey {
                    alg: "EdDSA".into(),
                    crv: "Ed25519".into(),
                    kty: "OKP".into(),
                    x: b64(key.verifying_key().as_bytes()),
                    y: String::new(),
                };
                Ok(WorkloadKey {
                    alg,
                    secret: Secret::Ed25519(key),
                    public,
                })
            }
            Algorithm::Es256 => {
                let pair = EcdsaKeyPair::from_pkcs8(&lc::ECDSA_P256_SHA256_FIXED_SIGNING, secret)
                    .map_err(|_| {
                    Error::invalid(
                        "WorkloadKey",
                        "secret",
                        "not a P-256 private key in PKCS#8 DER",
                    )
                })?;
                let point = pair.public_key().as_ref();
                // Uncompressed SEC1: 0x04 || x || y.
                let (x, y) = point[1..].split_at(32);
                let public = ProofKey {
                    alg: "ES256".into(),
                    crv: "P-256".into(),
                    kty: "EC".into(),
                    x: b64(x),
                    y: b64(y),
                };
                Ok(WorkloadKey {
                    alg,
                    secret: Secret::P256(pair, Zeroizing::new(secret.to_vec())),
                    public,
                })
            }
            other => Err(unsupported(other)),
        }
    }

    /// The private key's secret form, for the workload's own state file
    /// (which must be mode 0600): the Ed25519 seed or the P-256 PKCS#8 DER.
    pub fn secret(&self) -> Zeroizing<Vec<u8>> {
        match &self.secret {
            Secret::Ed25519(k) => Zeroizing::new(k.to_bytes().to_vec()),
            Secret::P256(_, der) => der.clone(),
        }
    }

    /// `EdDsa` or `Es256`.
    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// The public key, as a request's `ProofKey` carries it.
    pub fn proof_key(&self) -> &ProofKey {
        &self.public
    }

    /// The public key as a JWK with `alg` (what the WIT's `cnf.jwk` holds).
    pub fn public_jwk_json(&self) -> String {
        let k = &self.public;
        let mut m = serde_json::Map::new();
        m.insert("kty".into(), k.kty.clone().into());
        m.insert("crv".into(), k.crv.clone().into());
        m.insert("x".into(), k.x.clone().into());
        if !k.y.is_empty() {
            m.insert("y".into(), k.y.clone().into());
        }
        m.insert("alg".into(), k.alg.clone().into());
        serde_json::Value::Object(m).to_string()
    }

    /// A workload proof token (WPT) for one request to `target_uri` (query and
    /// fragment are dropped), bound to `wit` and to the tokens `options` name,
    /// valid from `now` (Unix seconds) for the options' lifetime.
    pub fn prove(
        &self,
        wit: &str,
        target_uri: &str,
        now: i64,
        options: &ProofOptions,
    ) -> Result<String> {
        if wit.is_empty() {
            return Err(Error::invalid("WorkloadKey::prove", "wit", "is empty"));
        }
        let target = target_of(target_uri);
        if target.is_empty() {
            return Err(Error::invalid(
                "WorkloadKey::prove",
                "target_uri",
                "is empty; expected the request's target URI, e.g. https://svc.example/api",
            ));
        }
        options.tokens.refuse_repeated_headers()?;
        let ttl = options.ttl.unwrap_or(DEFAULT_PROOF_TTL).as_secs();
        let mut jti = [0u8; 16];
        getrandom::fill(&mut jti).map_err(|e| Error::Io {
            context: "reading the OS's random source for a proof's jti".into(),
            error: std::io::Error::other(e.to_string()),
        })?;
        let mut claims = serde_json::Map::new();
        claims.insert("aud".into(), target.into());
        claims.insert(
            "exp".into(),
            now.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX))
                .into(),
        );
        claims.insert("jti".into(), URL_SAFE_NO_PAD.encode(jti).into());
        claims.insert("wth".into(), token_hash(wit).into());
        let bound = &options.tokens;
        if let Some(t) = &bound.access_token {
            claims.insert("ath".into(), token_hash(t).into());
        }
        if let Some(t) = &bound.transaction_token {
            claims.insert("tth".into(), token_hash(t).into());
        }
        if !bound.other_tokens.is_empty() {
            let mut oth = serde_json::Map::new();
            for (header, value) in &bound.other_tokens {
                oth.insert(header.clone(), token_hash(value.trim()).into());
            }
            claims.insert("oth".into(), oth.into());
        }
        let header = format!(r#"{{"alg":"{}","typ":"wpt+jwt"}}"#, self.alg.name());
        let payload = serde_json::Value::Object(claims).to_string();
        let mut token = URL_SAFE_NO_PAD.encode(header);
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(payload, &mut token);
        let signature = match &self.secret {
            Secret::Ed25519(k) => k.sign(token.as_bytes()).to_bytes().to_vec(),
            Secret::P256(pair, _) => pair
                .sign(&SystemRandom::new(), token.as_bytes())
                .map_err(|_| Error::invalid("WorkloadKey", "secret", "ECDSA signing failed"))?
                .as_ref()
                .to_vec(),
        };
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(signature, &mut token);
        Ok(token)
    }
}

fn unsupported(alg: Algorithm) -> Error {
    Error::UnsupportedAlgorithm {
        alg: alg.name().into(),
        expected: "\"EdDSA\" or \"ES256\" for a workload key".into(),
    }
}
