//! `v1.ExternalJWTSigner` over the library's `ServiceAccountSigner`: each
//! call takes the keyring as it is now (a keystore re-read when its file
//! changed, the replicated keyring as its watch keeps it).

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use serde_json::json;
use tonic::{Request, Response, Status};
use workload_identity::{
    Algorithm, Error, EtcdKeyring, Keyring, KeystoreLoadOptions, ResultCode, ServiceAccountSigner,
};

use super::proto::external_jwt_signer_server::ExternalJwtSigner;
use super::proto::{
    FetchKeysRequest, FetchKeysResponse, Key, MetadataRequest, MetadataResponse, SignJwtRequest,
    SignJwtResponse,
};
use crate::stamp::{Stamp, stamp};

/// Where the keys come from.
pub(super) enum Keys {
    /// A keystore file, re-read when it changes (a failed read keeps the
    /// last good keys, and says so once).
    File {
        path: PathBuf,
        load_options: KeystoreLoadOptions,
        loaded: Mutex<(Option<Stamp>, Keyring, Option<String>)>,
    },
    /// The replicated keyring's copy, kept current by its watch.
    Etcd(EtcdKeyring),
}

impl Keys {
    pub(super) fn file(path: PathBuf, load_options: KeystoreLoadOptions, keyring: Keyring) -> Keys {
        let first = stamp(&path);
        Keys::File {
            path,
            load_options,
            loaded: Mutex::new((first, keyring, None)),
        }
    }

    /// The keyring now.
    pub(super) fn current(&self) -> Keyring {
        let (path, load_options, loaded) = match self {
            Keys::Etcd(live) => return live.keyring(),
            Keys::File {
                path,
                load_options,
                loaded,
            } => (path, load_options, loaded),
        };
        let mut l = loaded.lock().unwrap_or_else(PoisonError::into_inner);
        let now = stamp(path);
        if now != l.0 {
            match Keyring::load_with(path, load_options) {
                Ok(k) => {
                    crate::logging::line(
                        log::Level::Info,
                        SOURCE,
                        &format!("reloaded {} ({} keys)", path.display(), k.len()),
                        serde_json::Map::new(),
                    );
                    *l = (now, k, None);
                }
                Err(e) => {
                    let why = format!("{}: {e}", e.code().name());
                    if l.2.as_deref() != Some(why.as_str()) {
                        crate::logging::line(
                            log::Level::Warn,
                            SOURCE,
                            &format!(
                                "reloading {} failed, signing with the last good keys: {why}",
                                path.display()
                            ),
                            serde_json::Map::new(),
                        );
                    }
                    l.0 = now;
                    l.2 = Some(why);
                }
            }
        }
        l.1.clone()
    }
}

/// The log lines' source.
pub(super) const SOURCE: &str = "wid k8s-signer";

/// The service.
pub(super) struct Service {
    pub(super) keys: Keys,
    pub(super) issuer: String,
    pub(super) algorithm: Algorithm,
    pub(super) fixed_now: Option<i64>,
}

impl Service {
    pub(super) fn signer(&self) -> Result<ServiceAccountSigner, Error> {
        ServiceAccountSigner::new(&self.keys.current(), &self.issuer, self.algorithm)
    }

    fn now(&self) -> i64 {
        self.fixed_now.unwrap_or_else(workload_identity::unix_now)
    }
}

/// The gRPC status for a library error: the caller's fault, the keyring's
/// state, or ours. Library messages hold no secret.
fn status(e: &Error) -> Status {
    let message = e.to_string();
    match e.code() {
        ResultCode::InvalidArgument => Status::invalid_argument(message),
        ResultCode::NoActiveKey => Status::failed_precondition(message),
        ResultCode::KeyringUnavailable | ResultCode::KeyCustodyFailed | ResultCode::IoError => {
            Status::unavailable(message)
        }
        _ => Status::internal(message),
    }
}

#[tonic::async_trait]
impl ExternalJwtSigner for Service {
    async fn sign(
        &self,
        request: Request<SignJwtRequest>,
    ) -> Result<Response<SignJwtResponse>, Status> {
        let claims = request.into_inner().claims;
        let signer = self.signer().map_err(|e| status(&e))?;
        match signer.sign(&claims, self.now()) {
            Ok(signed) => {
                let subject = signed.subject.as_deref().unwrap_or("-");
                let mut fields = serde_json::Map::new();
                fields.insert("audit".into(), json!("service-account-token"));
                fields.insert("issuer".into(), json!(self.issuer));
                fields.insert("subject".into(), json!(subject));
                fields.insert("kid".into(), json!(signed.kid.as_str()));
                fields.insert("exp".into(), json!(signed.expires_at));
                crate::logging::line(
                    log::Level::Info,
                    SOURCE,
                    &format!(
                        "signed service-account token iss={} sub={subject} kid={} exp={}",
                        self.issuer,
                        signed.kid,
                        crate::output::utc(signed.expires_at)
                    ),
                    fields,
                );
                Ok(Response::new(SignJwtResponse {
                    header: signed.header,
                    signature: signed.signature,
                }))
            }
            Err(e) => {
                crate::logging::line(
                    log::Level::Warn,
                    SOURCE,
                    &format!("refused to sign: {e}"),
                    serde_json::Map::new(),
                );
                Err(status(&e))
            }
        }
    }

    async fn fetch_keys(
        &self,
        _request: Request<FetchKeysRequest>,
    ) -> Result<Response<FetchKeysResponse>, Status> {
        let signer = self.signer().map_err(|e| status(&e))?;
        let keys: Vec<Key> = signer
            .keys()
            .into_iter()
            .map(|k| Key {
                key_id: k.key_id.as_str().to_string(),
                key: k.spki_der,
                exclude_from_oidc_discovery: k.exclude_from_oidc_discovery,
            })
            .collect();
        if keys.is_empty() {
            // The apiserver keeps the set it has on an error, but would
            // take an empty one as "nothing verifies".
            return Err(Status::unavailable(
                "the keyring holds no kubernetes key that verifies; make one with `wid keyring rotate --purpose kubernetes --alg ES256`",
            ));
        }
        Ok(Response::new(FetchKeysResponse {
            keys,
            data_timestamp: Some(prost_types::Timestamp {
                seconds: signer.data_timestamp(),
                nanos: 0,
            }),
            refresh_hint_seconds: i64::try_from(signer.refresh_hint().as_secs()).unwrap_or(60),
        }))
    }

    async fn metadata(
        &self,
        _request: Request<MetadataRequest>,
    ) -> Result<Response<MetadataResponse>, Status> {
        let signer = self.signer().map_err(|e| status(&e))?;
        let longest = signer.max_token_expiration().map_err(|e| status(&e))?;
        Ok(Response::new(MetadataResponse {
            max_token_expiration_seconds: i64::try_from(longest.as_secs()).unwrap_or(i64::MAX),
        }))
    }
}
