//! [`TransitSigner`]: signing keys that never leave Transit.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};

use super::answer::public_key;
use super::client::{TransitClient, check_key_name};
use crate::error::{Error, Result, truncate_for_message};
use crate::keyring::{
    Algorithm, ExternalSigner, KeyId, KeyInfo, KeyPurpose, KeyState, Keyring, PublicKey,
    RotationAction, RotationPolicy, plan_rotation_for_purpose,
};
/// The signing keys of one Transit key: each of its versions is one key of
/// ours, `transit.<name>.v<version>`, whose private half never leaves
/// Transit. `ed25519` keys sign EdDSA, `ecdsa-p256` ES256 (`marshaling_algorithm
/// = jws`), `rsa-2048/3072/4096` RS256 (`pkcs1v15`, SHA-256).
///
/// [`TransitSigner::sync`] brings a keyring in step with Transit (new
/// versions prepublished, then active); [`TransitSigner::rotate`] asks
/// Transit for a new version. Every signature is checked locally against the
/// version's public key before a token leaves the library. Needs `read` on
/// `<mount>/keys/<name>`, `update` on `<mount>/sign/<name>` (and on
/// `<mount>/keys/<name>/rotate` to rotate).
#[derive(Clone)]
pub struct TransitSigner {
    client: TransitClient,
    key: String,
    purpose: KeyPurpose,
}

impl fmt::Debug for TransitSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransitSigner")
            .field("addr", &self.client.addr())
            .field("key", &format_args!("{}/{}", self.client.mount(), self.key))
            .field("purpose", &self.purpose)
            .finish_non_exhaustive()
    }
}

/// What [`TransitSigner::sync`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransitSync {
    /// The key's algorithm.
    pub algorithm: Option<Algorithm>,
    /// Versions new to the keyring, by key ID.
    pub added: Vec<KeyId>,
    /// Keys that became active.
    pub promoted: Vec<KeyId>,
    /// Transit's newest version.
    pub latest_version: u32,
}

/// One version of a Transit key: its number, creation time (Unix seconds)
/// and public key.
type Version = (u32, i64, PublicKey);

/// One Transit key version, as an [`ExternalSigner`].
struct VersionSigner {
    client: TransitClient,
    key: String,
    version: u32,
    alg: Algorithm,
    purpose: KeyPurpose,
}

impl fmt::Debug for VersionSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl ExternalSigner for VersionSigner {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>> {
        let mut body = json!({
            "input": STANDARD.encode(message),
            "key_version": self.version,
        });
        match self.alg {
            Algorithm::EdDsa => {}
            Algorithm::Es256 => {
                body["hash_algorithm"] = json!("sha2-256");
                body["marshaling_algorithm"] = json!("jws");
            }
            Algorithm::Rs256 => {
                body["hash_algorithm"] = json!("sha2-256");
                body["signature_algorithm"] = json!("pkcs1v15");
            }
        }
        let what = format!("signing with {}", self.describe());
        let data = self
            .client
            .post(&format!("sign/{}", self.key), &body, &what)?;
        let sig = data
            .get("signature")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let prefix = format!("vault:v{}:", self.version);
        let Some(encoded) = sig.strip_prefix(&prefix) else {
            return Err(Error::KeyCustody {
                custodian: self.describe(),
                reason: format!(
                    "{what}: Transit answered a signature that is not {prefix}<base64> (another key version?)"
                ),
            });
        };
        // Ed25519 and RSA come in standard base64, ECDSA marshalled as JWS
        // in base64url.
        STANDARD
            .decode(encoded)
            .or_else(|_| URL_SAFE_NO_PAD.decode(encoded))
            .map_err(|_| Error::KeyCustody {
                custodian: self.describe(),
                reason: format!("{what}: the signature is not base64"),
            })
    }

    fn purpose(&self) -> KeyPurpose {
        self.purpose
    }

    fn describe(&self) -> String {
        format!(
            "transit:{}/{} v{}",
            self.client.mount(),
            self.key,
            self.version
        )
    }
}

impl TransitSigner {
    /// The signing key `key` of Transit through `client` (checked when
    /// [`TransitSigner::sync`] first reads it).
    pub fn new(client: TransitClient, key: &str) -> Result<TransitSigner> {
        check_key_name(key)?;
        Ok(TransitSigner {
            client,
            key: key.to_string(),
            purpose: KeyPurpose::Bearer,
        })
    }

    /// The purpose of this Transit key's versions (bearer unless set): a
    /// Transit key kept for WITs (`KeyPurpose::Wit`) signs WITs only and is
    /// published only in the WIT key set. Keep one Transit key per purpose:
    /// a key's versions all share its purpose.
    pub fn with_purpose(mut self, purpose: KeyPurpose) -> TransitSigner {
        self.purpose = purpose;
        self
    }

    /// Our key ID for `version`: `transit.<name>.v<version>`.
    pub fn key_id(&self, version: u32) -> Result<KeyId> {
        KeyId::new(&format!("transit.{}.v{version}", self.key))
    }

    fn custodian(&self) -> String {
        format!("Transit {}/{}", self.client.mount(), self.key)
    }

    /// Asks Transit for a new version of the key; returns it. The keyring
    /// learns of it at the next [`TransitSigner::sync`], which prepublishes
    /// it before it signs.
    pub fn rotate(&self) -> Result<u32> {
        let what = format!("rotating {}", self.custodian());
        self.client
            .post(&format!("keys/{}/rotate", self.key), &json!({}), &what)?;
        let (_, versions) = self.read()?;
        Ok(versions.iter().map(|v| v.0).max().unwrap_or(0))
    }

    /// The key's algorithm and its versions (number, creation time in Unix
    /// seconds, public key).
    fn read(&self) -> Result<(Algorithm, Vec<Version>)> {
        let what = format!("reading {}", self.custodian());
        let data = self.client.get(&format!("keys/{}", self.key), &what)?;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or_default();
        let alg = match kind {
            "ed25519" => Algorithm::EdDsa,
            "ecdsa-p256" => Algorithm::Es256,
            "rsa-2048" | "rsa-3072" | "rsa-4096" => Algorithm::Rs256,
            other => {
                return Err(Error::KeyCustody {
                    custodian: self.custodian(),
                    reason: format!(
                        "{what}: type {:?} cannot sign our tokens; expected ed25519, ecdsa-p256 or rsa-2048/3072/4096",
                        truncate_for_message(other)
                    ),
                });
            }
        };
        let bad = |why: String| Error::KeyCustody {
            custodian: self.custodian(),
            reason: format!("{what}: {why}"),
        };
        let keys = data
            .get("keys")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("the answer lists no key versions".into()))?;
        let mut versions = Vec::with_capacity(keys.len());
        for (v, info) in keys {
            let version: u32 = v.parse().map_err(|_| {
                bad(format!(
                    "version {:?} is not a number",
                    truncate_for_message(v)
                ))
            })?;
            let created = info
                .get("creation_time")
                .and_then(Value::as_str)
                .and_then(crate::clock::parse_rfc3339_ms)
                .map(|ms| ms.div_euclid(1000))
                .ok_or_else(|| bad(format!("version {version} has no readable creation_time")))?;
            let pem = info
                .get("public_key")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let public = public_key(alg, pem)
                .map_err(|why| bad(format!("version {version}'s public key: {why}")))?;
            versions.push((version, created, public));
        }
        versions.sort_by_key(|v| v.0);
        Ok((alg, versions))
    }

    /// Brings `keyring` in step with Transit: every version not yet in it is
    /// added (older ones inactive; the newest prepublished until
    /// `max(creation_time, now) + lead_secs`, or active at once when the
    /// keyring has no active key of its algorithm), then prepublished keys
    /// whose time has come are promoted. A key ID already in the keyring
    /// with another public key is refused (`DuplicateKey`): Transit's key
    /// was replaced under the same name.
    ///
    /// The lead counts from when this keyring first publishes the version,
    /// not from when Transit made it: a version made long before this call
    /// (Transit's auto-rotation, an operator's `rotate`, a sync paused for
    /// hours) is in the JWKS for `lead_secs` before it signs, so every
    /// verifier can have it. Only `lead_secs` 0 lets it sign at once.
    pub fn sync(&self, keyring: &Keyring, now: i64, lead_secs: i64) -> Result<TransitSync> {
        self.sync_with(keyring, now, |created| first_signs(created, now, lead_secs))
    }

    /// [`TransitSigner::sync`], with the newest version's publish time
    /// `publish_at(creation time)` (never earlier than `now`).
    fn sync_with(
        &self,
        keyring: &Keyring,
        now: i64,
        publish_at: impl Fn(i64) -> i64,
    ) -> Result<TransitSync> {
        let (alg, versions) = self.read()?;
        let mut report = TransitSync {
            algorithm: Some(alg),
            latest_version: versions.last().map_or(0, |v| v.0),
            ..TransitSync::default()
        };
        for (version, created, public) in &versions {
            let kid = self.key_id(*version)?;
            if let Some(info) = keyring.key_info(kid.as_str()) {
                if &info.public_key != public {
                    return Err(Error::DuplicateKey {
                        kid: kid.to_string(),
                    });
                }
                if info.purpose != self.purpose {
                    return Err(Error::invalid(
                        "TransitSigner",
                        "purpose",
                        format!(
                            "key {kid} is in the keyring as a {} key, but this signer's purpose is {}: keep one Transit key per purpose",
                            info.purpose, self.purpose
                        ),
                    ));
                }
                continue;
            }
            let newest = *version == report.latest_version;
            let publish_at = publish_at(*created);
            let (state, publish_time) = if !newest {
                (KeyState::Inactive, 0)
            } else if keyring.active_id_for_purpose(self.purpose, alg).is_none() {
                (KeyState::Active, 0)
            } else if publish_at > now {
                (KeyState::Prepublished, publish_at)
            } else {
                (KeyState::Prepublished, now)
            };
            let signer = Arc::new(VersionSigner {
                client: self.client.clone(),
                key: self.key.clone(),
                version: *version,
                alg,
                purpose: self.purpose,
            });
            keyring.insert_external(
                kid.clone(),
                public.clone(),
                signer,
                state,
                *created,
                publish_time,
            )?;
            report.added.push(kid);
        }
        report.promoted = keyring.promote_due(now);
        Ok(report)
    }
}

impl TransitSigner {
    /// Runs the rotation policy over this signer's keys, as `wid keyring plan
    /// --apply` does for local keys: brings the keyring in step
    /// ([`TransitSigner::sync`] with `lead_secs`: a version made outside
    /// this call signs only `lead_secs` after it is first published), then
    /// carries out [`crate::plan_rotation_for`] for the key's algorithm,
    /// where a new key is a new Transit version ([`TransitSigner::rotate`]):
    /// prepublished at once and signing from the plan's `publish_at`, or
    /// `lead_secs` from now if that is later (a version made because no key
    /// is active signs at once). Only this key's
    /// versions are planned over (other keys of the algorithm are left
    /// alone). Returns the actions taken (a promotion the sync made first
    /// included).
    pub fn apply_policy(
        &self,
        keyring: &Keyring,
        policy: &RotationPolicy,
        now: i64,
        lead_secs: i64,
    ) -> Result<Vec<RotationAction>> {
        let report = self.sync(keyring, now, lead_secs)?;
        let Some(alg) = report.algorithm else {
            return Ok(Vec::new());
        };
        let prefix = format!("transit.{}.v", self.key);
        let ours: Vec<KeyInfo> = keyring
            .keys()
            .into_iter()
            .filter(|k| k.kid.as_str().starts_with(&prefix))
            .collect();
        let plan = plan_rotation_for_purpose(&ours, self.purpose, alg, now, policy);
        // The sync may already have promoted a version whose time came.
        let mut done: Vec<RotationAction> = report
            .promoted
            .into_iter()
            .map(|kid| RotationAction::Promote { kid })
            .collect();
        for action in &plan {
            match action {
                RotationAction::Rotate { .. } => {
                    self.rotate()?;
                    let latest = self.latest_kid()?;
                    // No key signs: the new one must at once (below).
                    self.sync(keyring, now, lead_secs)?;
                    if keyring.active_id_for_purpose(self.purpose, alg).as_ref() != Some(&latest) {
                        keyring.promote(latest.as_str(), now)?;
                    }
                }
                RotationAction::Prepublish { publish_at, .. } => {
                    self.rotate()?;
                    // The plan's time, but never less than the lead.
                    let at = *publish_at;
                    self.sync_with(keyring, now, |created| {
                        at.max(first_signs(created, now, lead_secs))
                    })?;
                }
                RotationAction::Promote { kid } => keyring.promote(kid.as_str(), now)?,
                RotationAction::Deprecate { kid } => keyring.deprecate(kid.as_str(), now)?,
            }
        }
        done.extend(plan);
        Ok(done)
    }

    /// The key ID of Transit's newest version.
    fn latest_kid(&self) -> Result<KeyId> {
        let (_, versions) = self.read()?;
        self.key_id(versions.last().map_or(0, |v| v.0))
    }
}

/// When a version Transit made at `created` and this keyring first
/// publishes at `now` may sign: `lead_secs` (at least 0) after the later of
/// the two. Counting from `created` alone would let a version made more than
/// the lead before it is first seen sign in the very sync that publishes it.
fn first_signs(created: i64, now: i64, lead_secs: i64) -> i64 {
    created.max(now).saturating_add(lead_secs.max(0))
}
#[cfg(test)]
mod tests {
    use super::*;

    /// A fake Transit that answers `GET /v1/transit/keys/<any>` with an
    /// Ed25519 key whose versions (number, creation time) the test sets;
    /// every other request is a 404. Connections are closed after each
    /// answer. The thread ends with the test process.
    struct FakeTransit {
        addr: String,
        versions: Arc<std::sync::Mutex<Vec<(u32, &'static str)>>>,
    }

    fn public_of(version: u32) -> String {
        let k = ed25519_dalek::SigningKey::from_bytes(&[version as u8; 32]);
        STANDARD.encode(k.verifying_key().as_bytes())
    }

    impl FakeTransit {
        fn start() -> FakeTransit {
            use std::io::{BufRead, BufReader, Write};
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = format!("http://{}", listener.local_addr().unwrap());
            let versions: Arc<std::sync::Mutex<Vec<(u32, &'static str)>>> = Arc::default();
            let shared = versions.clone();
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    let mut first = String::new();
                    let _ = reader.read_line(&mut first);
                    loop {
                        let mut line = String::new();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => break,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let (status, body) = if first.starts_with("GET /v1/transit/keys/") {
                        let keys: serde_json::Map<String, Value> = shared
                            .lock()
                            .unwrap()
                            .iter()
                            .map(|(v, created)| {
                                (
                                    v.to_string(),
                                    json!({"creation_time": created, "public_key": public_of(*v)}),
                                )
                            })
                            .collect();
                        ("200 OK", json!({"data": {"type": "ed25519", "keys": keys}}))
                    } else {
                        ("404 Not Found", json!({"errors": []}))
                    };
                    let body = body.to_string();
                    let _ = write!(
                        conn,
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
            FakeTransit { addr, versions }
        }

        fn signer(&self) -> TransitSigner {
            let client = TransitClient::builder(&self.addr)
                .token("t0ken")
                .allow_http_loopback(true)
                .build()
                .unwrap();
            TransitSigner::new(client, "wid").unwrap()
        }

        fn set(&self, versions: &[(u32, &'static str)]) {
            *self.versions.lock().unwrap() = versions.to_vec();
        }
    }

    /// 2023-11-14T22:13:20Z and one hour later.
    const V1_CREATED: (&str, i64) = ("2023-11-14T22:13:20Z", 1_700_000_000);
    const V2_CREATED: (&str, i64) = ("2023-11-14T23:13:20Z", 1_700_003_600);

    /// A version Transit made long before this process first sees it (an
    /// auto-rotation, an operator's rotation, a sync paused for hours) is
    /// published now and signs only a lead time later: never in the call
    /// that first publishes it.
    #[test]
    fn a_version_made_long_ago_is_published_first_and_signs_a_lead_time_later() {
        let fake = FakeTransit::start();
        let s = fake.signer();
        let kr = Keyring::new();
        fake.set(&[(1, V1_CREATED.0)]);
        let report = s.sync(&kr, V1_CREATED.1, 600).unwrap();
        assert_eq!(report.promoted, Vec::<KeyId>::new());
        let v1 = s.key_id(1).unwrap();
        assert_eq!(kr.active_id(), Some(v1.clone()), "the first signs at once");

        // Rotated in Transit at V2_CREATED; this process syncs two hours on.
        fake.set(&[(1, V1_CREATED.0), (2, V2_CREATED.0)]);
        let now = V2_CREATED.1 + 7200;
        let v2 = s.key_id(2).unwrap();
        let report = s.sync(&kr, now, 600).unwrap();
        assert_eq!(report.added, vec![v2.clone()]);
        assert!(report.promoted.is_empty(), "{report:?}");
        let info = kr.key_info(v2.as_str()).unwrap();
        assert_eq!(info.state, KeyState::Prepublished);
        assert_eq!(
            info.publish_time,
            now + 600,
            "first seen now, plus the lead"
        );
        assert_eq!(kr.active_id(), Some(v1.clone()), "v1 still signs");
        assert!(s.sync(&kr, now + 599, 600).unwrap().promoted.is_empty());
        assert_eq!(
            s.sync(&kr, now + 600, 600).unwrap().promoted,
            vec![v2.clone()]
        );
        assert_eq!(kr.active_id(), Some(v2));

        // A version seen before Transit's creation time (clocks apart):
        // published at its creation time plus the lead.
        fake.set(&[
            (1, V1_CREATED.0),
            (2, V2_CREATED.0),
            (3, "2023-11-15T02:13:20Z"),
        ]);
        let v3 = s.key_id(3).unwrap();
        s.sync(&kr, now + 601, 600).unwrap();
        assert_eq!(
            kr.key_info(v3.as_str()).unwrap().publish_time,
            1_700_014_400 + 600
        );
    }

    /// `apply_policy` syncs with the lead it is given: a version made
    /// outside it is not promoted by the run that first publishes it.
    #[test]
    fn apply_policy_publishes_a_new_version_for_the_lead_time_first() {
        let fake = FakeTransit::start();
        let s = fake.signer();
        let kr = Keyring::new();
        let policy = RotationPolicy::new(Some(std::time::Duration::from_secs(100)))
            .rotation_threshold(std::time::Duration::from_secs(100_000));
        fake.set(&[(1, V1_CREATED.0)]);
        s.apply_policy(&kr, &policy, V1_CREATED.1, 600).unwrap();
        fake.set(&[(1, V1_CREATED.0), (2, V2_CREATED.0)]);
        let now = V2_CREATED.1 + 7200;
        let done = s.apply_policy(&kr, &policy, now, 600).unwrap();
        assert!(done.is_empty(), "{done:?}");
        let v2 = s.key_id(2).unwrap();
        assert_eq!(
            kr.key_info(v2.as_str()).unwrap().state,
            KeyState::Prepublished
        );
        assert_eq!(kr.active_id(), Some(s.key_id(1).unwrap()));
        let done = s.apply_policy(&kr, &policy, now + 600, 600).unwrap();
        assert_eq!(done, vec![RotationAction::Promote { kid: v2.clone() }]);
        assert_eq!(kr.active_id(), Some(v2));
    }
}
