//! Where `wid` gets its inputs: keystores, JWKS files, allocation state,
//! tokens, algorithm names.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use clap::Args;
use serde::Deserialize;
use serde_json::Value;
use workload_identity::model::Allocation;
use workload_identity::{
    Algorithm, AllocState, KekFile, KeyWrapper, Keyring, KeystoreLoadOptions,
    MAX_TOKEN_BYTES_LIMIT, MemoryStore, RemoteJwks, ResultCode, Transit, TransitClient,
};

use crate::output::read_input;
use crate::{CliError, Exit};

/// The whole time a --jwks URL fetch may take.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The largest JWKS or allocation-state file read (a JWKS of 1,000 RSA keys
/// is well under this).
const MAX_DOCUMENT_BYTES: u64 = 4 << 20;

/// An algorithm by its JOSE name (`EdDSA`, `ES256`, `RS256`; any case).
pub(crate) fn parse_alg(name: &str) -> Result<Algorithm, String> {
    [Algorithm::EdDsa, Algorithm::Es256, Algorithm::Rs256]
        .into_iter()
        .find(|a| a.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| format!("unknown algorithm {name:?}: expected EdDSA, ES256 or RS256"))
}

/// How the keystore's keys are wrapped: the KEK that wraps them, if any (a
/// local KEK file, or a Vault/OpenBao Transit key).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct CustodyArgs {
    /// The key-encryption key of a wrapped keystore (version 3): a file of 32
    /// raw bytes or 44 base64 characters, mode 0600 (`wid keyring
    /// generate-kek` makes one). Keystores saved with it hold no plaintext key.
    #[arg(long, value_name = "FILE")]
    pub(crate) kek_file: Option<PathBuf>,
    /// Wrap the keystore with a Vault/OpenBao Transit key at this server
    /// (https; http only to a loopback host). The token comes from
    /// --transit-token-file, VAULT_TOKEN or BAO_TOKEN.
    #[arg(long, value_name = "URL")]
    pub(crate) transit_addr: Option<String>,
    /// The Transit encryption key (type aes256-gcm96) that wraps the keystore.
    #[arg(long, value_name = "NAME", requires = "transit_addr")]
    pub(crate) transit_key: Option<String>,
    /// Where the Transit engine is mounted.
    #[arg(long, value_name = "PATH", default_value = "transit")]
    pub(crate) transit_mount: String,
    /// Trust only this PEM CA bundle for --transit-addr (default: the
    /// Mozilla roots).
    #[arg(long, value_name = "PEM", requires = "transit_addr")]
    pub(crate) transit_ca_bundle: Option<PathBuf>,
    /// Read the Transit token from this file (mode 0600) instead of
    /// VAULT_TOKEN or BAO_TOKEN.
    #[arg(long, value_name = "FILE", requires = "transit_addr")]
    pub(crate) transit_token_file: Option<PathBuf>,
}

impl CustodyArgs {
    /// The wrapper the flags name, if any.
    pub(crate) fn wrapper(&self) -> Result<Option<Arc<dyn KeyWrapper>>, CliError> {
        match (&self.kek_file, &self.transit_key) {
            (Some(_), Some(_)) => Err(bad_flag(
                "--kek-file",
                "and --transit-key name two KEKs for one keystore: give one (to move a keystore from one to the other, `wid keyring rewrap` with --new-kek-file or --new-transit-key)",
            )),
            (Some(path), None) => Ok(Some(Arc::new(KekFile::load(path).map_err(|e| {
                CliError::from(e).hint("--kek-file takes the KEK the keystore was wrapped with")
            })?))),
            (None, Some(key)) => Ok(Some(Arc::new(self.transit(key)?))),
            // --transit-addr alone names no KEK: never fall back to plaintext.
            (None, None) if self.transit_addr.is_some() => Err(bad_flag(
                "--transit-addr",
                "names the server but no KEK: add --transit-key with the Transit key that wraps the keystore",
            )),
            (None, None) => Ok(None),
        }
    }

    /// The Transit client the flags name.
    pub(crate) fn transit_client(&self) -> Result<TransitClient, CliError> {
        let addr = self
            .transit_addr
            .as_deref()
            .ok_or_else(|| bad_flag("--transit-addr", "is required with a Transit key"))?;
        let mut b = TransitClient::builder(addr)
            .mount(&self.transit_mount)
            .allow_http_loopback(true);
        if let Some(ca) = &self.transit_ca_bundle {
            let pem = std::fs::read(ca).map_err(|e| {
                CliError::io(format!("reading --transit-ca-bundle {}", ca.display()), &e)
            })?;
            b = b.ca_bundle_pem(&pem);
        }
        if let Some(file) = &self.transit_token_file {
            b = b.token_file(file);
        }
        Ok(b.build()?)
    }

    /// The Transit key `key` through the flags' client.
    pub(crate) fn transit(&self, key: &str) -> Result<Transit, CliError> {
        Ok(Transit::new(self.transit_client()?, key)?)
    }

    /// The load options for these flags.
    pub(crate) fn load_options(&self) -> Result<KeystoreLoadOptions, CliError> {
        let mut options = KeystoreLoadOptions::default();
        if let Some(w) = self.wrapper()? {
            options = options.wrapper(w);
        }
        Ok(options)
    }
}

/// Loads a keystore (unwrapping it with the KEK the flags name), saying
/// what to do when it is not there or is wrapped.
pub(crate) fn load_keystore(path: &Path, custody: &CustodyArgs) -> Result<Keyring, CliError> {
    load_keystore_with(path, custody, &custody.load_options()?)
}

/// [`load_keystore`] with load options of the caller's (the KEK among them).
pub(crate) fn load_keystore_with(
    path: &Path,
    custody: &CustodyArgs,
    options: &KeystoreLoadOptions,
) -> Result<Keyring, CliError> {
    Keyring::load_with(path, options).map_err(|e| {
        let missing = matches!(&e, workload_identity::Error::Io { error, .. }
            if error.kind() == std::io::ErrorKind::NotFound);
        let wrapped = e.code() == ResultCode::KeyCustodyFailed
            && custody.kek_file.is_none()
            && custody.transit_addr.is_none();
        let err = CliError::from(e);
        if missing {
            err.hint(format!(
                "create it with `wid keyring init --keystore {}`",
                path.display()
            ))
        } else if wrapped {
            err.hint("the keystore is wrapped: add --kek-file with its KEK, or --transit-addr and --transit-key")
        } else {
            err
        }
    })
}

/// The marker `wid keyring migrate` leaves beside a keystore file it copied
/// into etcd: `FILE.migrated`, saying where the keyring went.
pub(crate) fn migrated_marker(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".migrated");
    std::path::PathBuf::from(name)
}

/// Refuses to write a keystore file whose keyring was migrated to etcd: a
/// change made there would be lost to every server reading etcd.
pub(crate) fn refuse_if_migrated(path: &Path) -> Result<(), CliError> {
    let marker = migrated_marker(path);
    match std::fs::read_to_string(&marker) {
        Ok(to) => Err(CliError::new(
            ResultCode::InvalidArgument,
            format!(
                "{} is no longer the keyring: it was migrated to {}; changes made to this file would reach no server",
                path.display(),
                to.trim()
            ),
        )
        .hint(format!(
            "change the keys there (`--etcd ... --etcd-prefix ...` instead of --keystore); to write this file again on purpose, remove {}",
            marker.display()
        ))
        .exit(Exit::Usage)),
        Err(_) => Ok(()),
    }
}

/// Saves a keystore: wrapped by the KEK the flags name (version 3), or in
/// plaintext (version 2) when they name none.
pub(crate) fn save_keystore(
    keyring: &Keyring,
    path: &Path,
    custody: &CustodyArgs,
) -> Result<(), CliError> {
    refuse_if_migrated(path)?;
    match custody.wrapper()? {
        Some(w) => keyring.save_wrapped(path, &*w)?,
        None => keyring.save(path)?,
    }
    Ok(())
}

/// The keys to verify with: a keystore, or a JWKS from a file or a URL.
#[derive(Debug, Args)]
pub(crate) struct KeySource {
    /// Verify with the keys of this keystore file.
    #[arg(long, value_name = "FILE", conflicts_with = "jwks")]
    pub(crate) keystore: Option<std::path::PathBuf>,
    /// Verify with the keys of a JWKS: a file (`-` reads standard input), or
    /// the issuer's URL (https; http only to a loopback host), fetched once.
    #[arg(long, value_name = "FILE|URL")]
    pub(crate) jwks: Option<String>,
    /// Trust only this PEM CA bundle for an https --jwks URL (default: the
    /// Mozilla roots).
    #[arg(long, value_name = "FILE", requires = "jwks")]
    pub(crate) ca_bundle: Option<String>,
    #[command(flatten)]
    pub(crate) custody: CustodyArgs,
}

impl KeySource {
    /// The keyring, and a name for where it came from; `None` when neither
    /// flag was given.
    pub(crate) fn load(&self) -> Result<Option<(Keyring, String)>, CliError> {
        if let Some(path) = &self.keystore {
            return Ok(Some((
                load_keystore(path, &self.custody)?,
                format!("keystore {}", path.display()),
            )));
        }
        if let Some(url) = self.jwks.as_deref().filter(|j| is_url(j)) {
            return self.fetch(url).map(Some);
        }
        if let Some(path) = &self.jwks {
            if self.ca_bundle.is_some() {
                return Err(bad_flag(
                    "--ca-bundle",
                    "applies to an https --jwks URL, not a file",
                ));
            }
            let bytes = read_input(path, "JWKS", MAX_DOCUMENT_BYTES)?;
            let text = String::from_utf8(bytes)
                .map_err(|_| CliError::new(ResultCode::DecodeError, "the JWKS is not UTF-8"))?;
            let (keyring, report) = Keyring::from_jwks(&text)?;
            let mut name = format!("JWKS {path}");
            if !report.skipped.is_empty() {
                name.push_str(&format!(" ({} entries skipped)", report.skipped.len()));
            }
            return Ok(Some((keyring, name)));
        }
        Ok(None)
    }

    /// Fetches a JWKS with the library's `RemoteJwks` (its URL rules, size and
    /// key-count limits, and the same checks as a file).
    fn fetch(&self, url: &str) -> Result<(Keyring, String), CliError> {
        let mut builder = RemoteJwks::builder(url)
            .timeout(FETCH_TIMEOUT)
            // The library refuses http to anything but loopback itself.
            .allow_http_loopback(url.starts_with("http://"));
        if let Some(ca) = &self.ca_bundle {
            builder = builder.ca_bundle_pem(&read_input(ca, "CA bundle", MAX_DOCUMENT_BYTES)?);
        }
        let remote = builder.build()?;
        let report = remote.refresh().map_err(|e| {
            let err = CliError::from(e);
            // An issuer's URL given where its JWKS's was meant: say where the
            // JWKS usually is (RemoteJwks::issuer follows discovery).
            let path = url
                .split_once("://")
                .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
                .unwrap_or("");
            if path.trim_end_matches('/').is_empty()
                && !url.contains(['?', '#'])
                && err.message.contains("404")
            {
                err.hint(format!(
                    "{url} looks like an issuer, not a JWKS: a JWKS is usually at {}/.well-known/jwks.json",
                    url.trim_end_matches('/')
                ))
            } else {
                err
            }
        })?;
        let mut name = format!("JWKS {url}");
        if report.skipped > 0 {
            name.push_str(&format!(" ({} entries skipped)", report.skipped));
        }
        Ok((remote.keyring().clone(), name))
    }
}

/// Whether a --jwks argument is a URL rather than a file.
fn is_url(arg: &str) -> bool {
    arg.starts_with("https://") || arg.starts_with("http://")
}

/// How the allocation a token names is judged live: a state file, or the
/// operator's explicit word.
#[derive(Debug, Args)]
pub(crate) struct AllocSource {
    /// Allocation states as JSON: Nomad's allocation list (GET
    /// /v1/allocations) or one allocation (GET /v1/allocation/ID); each needs
    /// `ID` and `ClientStatus`.
    #[arg(long, value_name = "FILE", conflicts_with = "assume_live")]
    pub(crate) alloc_state: Option<String>,
    /// Treat the allocation the token names as live without checking it.
    /// Without this or --alloc-state no allocation is live, and every token
    /// is rejected with WID_RESULT_ALLOCATION_NOT_FOUND.
    #[arg(long)]
    pub(crate) assume_live: bool,
}

/// One allocation in an allocation-state file (Nomad's JSON names; the rest
/// of Nomad's fields are ignored).
#[derive(Debug, Deserialize)]
struct AllocJson {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "ClientStatus")]
    client_status: String,
    #[serde(rename = "DesiredStatus", default)]
    desired_status: Option<String>,
}

#[derive(Debug)]
enum AllocFile {
    List(Vec<AllocJson>),
    One(AllocJson),
}

/// An allocation-state file: a list of allocations, or one. The error says
/// what was wrong where (serde's untagged enums only say "did not match any
/// variant"), from the shape the document itself has.
fn decode_alloc_file(bytes: &[u8]) -> Result<AllocFile, String> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let one = |v: &Value, at: &str| -> Result<AllocJson, String> {
        serde_json::from_value(v.clone()).map_err(|e| format!("{at}: {e}"))
    };
    match &value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| one(v, &format!("allocation {i} of the list")))
            .collect::<Result<Vec<_>, _>>()
            .map(AllocFile::List),
        Value::Object(_) => one(&value, "the allocation").map(AllocFile::One),
        other => Err(format!(
            "a JSON {} where a list of allocations (or one allocation) was expected",
            match other {
                Value::Null => "null",
                Value::Bool(_) => "boolean",
                Value::Number(_) => "number",
                Value::String(_) => "string",
                _ => "value",
            }
        )),
    }
}

/// What the allocation check was told, for the output.
#[derive(Debug, Clone)]
pub(crate) enum AllocBasis {
    /// States from a file.
    File { path: String, count: usize },
    /// `--assume-live`: the token's allocation was taken as live.
    AssumedLive { alloc_id: Option<String> },
    /// Neither: no allocation is live.
    Nothing,
}

impl AllocBasis {
    /// For people.
    pub(crate) fn describe(&self) -> String {
        match self {
            AllocBasis::File { path, count } => {
                format!("checked against {count} allocation(s) in {path}")
            }
            AllocBasis::AssumedLive { .. } => {
                "ASSUMED LIVE (--assume-live): not checked against any allocation state".into()
            }
            AllocBasis::Nothing => {
                "no allocation state given (--alloc-state or --assume-live): none is live".into()
            }
        }
    }

    /// For scripts.
    pub(crate) fn to_json(&self) -> Value {
        match self {
            AllocBasis::File { path, count } => {
                serde_json::json!({"basis": "alloc-state", "file": path, "allocations": count})
            }
            AllocBasis::AssumedLive { alloc_id } => {
                serde_json::json!({"basis": "assumed-live", "checked": false, "allocation_id": alloc_id})
            }
            AllocBasis::Nothing => serde_json::json!({"basis": "none"}),
        }
    }

    /// The hint for a token rejected because its allocation is unknown.
    pub(crate) fn hint_for(&self, code: ResultCode) -> Option<String> {
        match (self, code) {
            (AllocBasis::Nothing, ResultCode::AllocationNotFound) => Some(
                "no --alloc-state was given, so no allocation is known to be live: pass \
                 --alloc-state FILE (Nomad's allocation list as JSON), or --assume-live to \
                 skip the allocation check"
                    .into(),
            ),
            _ => None,
        }
    }
}

impl AllocSource {
    /// A store holding what the flags say, for a token whose (untrusted)
    /// claims name `alloc_id`.
    pub(crate) fn store(
        &self,
        alloc_id: Option<&str>,
    ) -> Result<(Arc<MemoryStore>, AllocBasis), CliError> {
        let store = Arc::new(MemoryStore::new());
        if let Some(path) = &self.alloc_state {
            let bytes = read_input(path, "allocation state", MAX_DOCUMENT_BYTES)?;
            let file = decode_alloc_file(&bytes).map_err(|why| {
                CliError::new(
                    ResultCode::DecodeError,
                    format!("cannot decode allocation state {path}: {why}"),
                )
                .hint(r#"expected Nomad's allocation list as JSON, like [{"ID":"5f8c…","ClientStatus":"running"}], or one allocation {"ID":…,"ClientStatus":…}"#)
            })?;
            let allocs = match file {
                AllocFile::List(v) => v,
                AllocFile::One(a) => vec![a],
            };
            for a in &allocs {
                store.upsert(&Allocation {
                    id: a.id.clone(),
                    client_status: a.client_status.clone(),
                    desired_status: a.desired_status.clone().unwrap_or_default(),
                    ..Allocation::default()
                });
            }
            return Ok((
                store,
                AllocBasis::File {
                    path: path.clone(),
                    count: allocs.len(),
                },
            ));
        }
        if self.assume_live {
            if let Some(id) = alloc_id {
                store.set_state(id, AllocState::Live);
            }
            return Ok((
                store,
                AllocBasis::AssumedLive {
                    alloc_id: alloc_id.map(str::to_string),
                },
            ));
        }
        Ok((store, AllocBasis::Nothing))
    }
}

/// Reads a token argument: the token itself, or `-` for standard input (keeps
/// tokens out of `ps` and shell history).
pub(crate) fn read_token(arg: &str) -> Result<String, CliError> {
    if arg != "-" {
        return Ok(arg.trim().to_string());
    }
    let bytes = read_input("-", "token", MAX_TOKEN_BYTES_LIMIT as u64)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| CliError::new(ResultCode::MalformedToken, "the token is not UTF-8"))?;
    Ok(text.trim().to_string())
}

/// A token taken apart without checking anything: for looking, never for
/// trusting.
#[derive(Debug)]
pub(crate) struct Untrusted {
    pub(crate) header: Value,
    /// The claims, when the payload is JSON.
    pub(crate) claims: Option<Value>,
    pub(crate) payload_bytes: usize,
    pub(crate) signature_bytes: usize,
}

impl Untrusted {
    /// Decodes the three segments leniently (padding allowed): verification,
    /// not this, decides whether the encoding was canonical.
    pub(crate) fn decode(token: &str) -> Result<Untrusted, CliError> {
        let malformed = |why: String| CliError::new(ResultCode::MalformedToken, why);
        if token.len() > MAX_TOKEN_BYTES_LIMIT {
            return Err(malformed(format!(
                "{} bytes, over the {MAX_TOKEN_BYTES_LIMIT}-byte limit",
                token.len()
            )));
        }
        let parts: Vec<&str> = token.split('.').collect();
        let [header, payload, signature] = parts.as_slice() else {
            return Err(malformed(format!(
                "{} dot-separated segments, expected 3 (header.payload.signature)",
                parts.len()
            )));
        };
        let lenient = GeneralPurpose::new(
            &alphabet::URL_SAFE,
            GeneralPurposeConfig::new()
                .with_decode_padding_mode(DecodePaddingMode::Indifferent)
                .with_decode_allow_trailing_bits(true),
        );
        let b64 = |name: &str, seg: &str| {
            lenient
                .decode(seg)
                .map_err(|e| malformed(format!("the {name} is not base64url: {e}")))
        };
        let header_bytes = b64("header", header)?;
        let header: Value = serde_json::from_slice(&header_bytes)
            .map_err(|e| malformed(format!("the header is not JSON: {e}")))?;
        let payload = b64("payload", payload)?;
        let signature = b64("signature", signature)?;
        Ok(Untrusted {
            header,
            claims: serde_json::from_slice(&payload).ok(),
            payload_bytes: payload.len(),
            signature_bytes: signature.len(),
        })
    }

    /// A string member of the header.
    pub(crate) fn header_str(&self, name: &str) -> Option<&str> {
        self.header.get(name).and_then(Value::as_str)
    }

    /// A string claim.
    pub(crate) fn claim_str(&self, name: &str) -> Option<&str> {
        self.claims.as_ref()?.get(name)?.as_str()
    }

    /// The token's audiences (`aud` as a string or an array).
    pub(crate) fn audiences(&self) -> Vec<String> {
        match self.claims.as_ref().and_then(|c| c.get("aud")) {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(v)) => v
                .iter()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// An error for a bad flag value found after parsing.
pub(crate) fn bad_flag(flag: &str, why: impl std::fmt::Display) -> CliError {
    CliError::usage(format!("{flag}: {why}")).exit(Exit::Usage)
}
