//! Envelopes: a versioned, checksummed msgpack frame around a body, read whole
//! or not at all, and written crash-safely through [`super::atomic_file`]. The
//! checksum catches truncation and corruption, not tampering, and the body is
//! not encrypted.
//!
//! The envelope never changes between versions: `Format` (names the kind of
//! file), `Version`, `Body` (bin: the msgpack-encoded body) and `SHA256` (bin:
//! SHA-256 of `Body`). Reading checks, in order: the envelope decodes, `Format`
//! is the expected one, `Version` is one this library reads, the checksum
//! matches, the body decodes. Any failure is an error naming what was wrong.

use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::atomic_file::{self, FileAccess};
use crate::codec::{self, Bin, DecodeLimits, WireType, wire_struct};
use crate::error::{DecodeError, Error, Result, truncate_for_message};

/// Largest envelope file accepted.
const MAX_FILE_BYTES: u64 = 16 << 20;

wire_struct! {
    /// The envelope: stable across versions.
    pub(crate) struct Envelope {
        /// The msgpack-encoded body.
        pub(crate) body: Bin => "Body",
        /// The kind of file.
        pub(crate) format: String => "Format",
        /// SHA-256 of `body`.
        pub(crate) sha256: Bin => "SHA256",
        /// The body's format version.
        pub(crate) version: u32 => "Version",
    }
}

/// One kind of envelope file.
pub(crate) struct EnvelopeFormat {
    /// The `Format` value, e.g. `workload-identity-keystore`.
    pub(crate) format: &'static str,
    /// The version written, and the newest read.
    pub(crate) version: u32,
    /// The oldest version read.
    pub(crate) oldest: u32,
    /// What the file is, for messages: `keystore`.
    pub(crate) what: &'static str,
}

impl EnvelopeFormat {
    fn corrupt(&self, path: &str, reason: impl Into<String>) -> Error {
        Error::Decode(DecodeError {
            type_name: self.what,
            path: path.to_string(),
            reason: reason.into(),
        })
    }

    fn limits() -> DecodeLimits {
        DecodeLimits::default().max_bytes(MAX_FILE_BYTES as usize)
    }

    /// The file's bytes for `body`, in buffers zeroized on drop (`capacity_hint`
    /// sizes them so secrets are not left behind by reallocation).
    pub(crate) fn encode<T: WireType>(
        &self,
        body: &T,
        capacity_hint: usize,
    ) -> Result<Zeroizing<Vec<u8>>> {
        self.encode_as(self.version, body, capacity_hint)
    }

    /// [`EnvelopeFormat::encode`] as format `version` (one this format reads:
    /// a body an older reader understands is written as the older version).
    pub(crate) fn encode_as<T: WireType>(
        &self,
        version: u32,
        body: &T,
        capacity_hint: usize,
    ) -> Result<Zeroizing<Vec<u8>>> {
        debug_assert!((self.oldest..=self.version).contains(&version));
        let body_bytes = codec::encode_secret(body, capacity_hint)?;
        let sha = Sha256::digest(&*body_bytes);
        let envelope = Envelope {
            body: Bin::new(body_bytes.to_vec()),
            format: self.format.into(),
            sha256: Bin::new(sha.to_vec()),
            version,
        };
        codec::encode_secret(&envelope, body_bytes.len() + 128)
    }

    /// The version (from `oldest` to `version`) and body of an envelope file's
    /// bytes (see the module docs for the checks).
    pub(crate) fn decode_versioned<T: WireType>(&self, bytes: &[u8]) -> Result<(u32, T)> {
        let what = self.what;
        let envelope: Envelope = codec::decode_with(bytes, &Self::limits()).map_err(|e| {
            self.corrupt(
                "",
                format!("not a workload-identity {what} or truncated: {e}"),
            )
        })?;
        if envelope.format != self.format {
            return Err(self.corrupt(
                "Format",
                format!(
                    "not a workload-identity {what}: Format is {:?}, expected {:?}",
                    truncate_for_message(&envelope.format),
                    self.format
                ),
            ));
        }
        let ours = self.version;
        let oldest = self.oldest;
        match envelope.version {
            v if (oldest..=ours).contains(&v) => {}
            v if v > ours => {
                return Err(self.corrupt(
                    "Version",
                    format!(
                        "{what} format version {v} is newer than this library reads (up to {ours}); upgrade workload-identity"
                    ),
                ));
            }
            v => {
                return Err(self.corrupt(
                    "Version",
                    format!("{what} format version {v} is not valid (expected {oldest} to {ours})"),
                ));
            }
        }
        let sha = Sha256::digest(envelope.body.as_slice());
        if !bool::from(sha.as_slice().ct_eq(envelope.sha256.as_slice())) {
            return Err(self.corrupt(
                "SHA256",
                format!("checksum mismatch: the {what} is corrupted"),
            ));
        }
        let body = codec::decode_with(envelope.body.as_slice(), &Self::limits())?;
        Ok((envelope.version, body))
    }

    /// Encodes `body` and replaces the file at `path` with it, crash-safely.
    pub(crate) fn save<T: WireType>(
        &self,
        path: &Path,
        body: &T,
        capacity_hint: usize,
    ) -> Result<()> {
        let bytes = self.encode(body, capacity_hint)?;
        atomic_file::replace_file(path, &bytes)
    }

    /// [`EnvelopeFormat::save`] as format `version` (see
    /// [`EnvelopeFormat::encode_as`]).
    pub(crate) fn save_as<T: WireType>(
        &self,
        path: &Path,
        version: u32,
        body: &T,
        capacity_hint: usize,
    ) -> Result<()> {
        let bytes = self.encode_as(version, body, capacity_hint)?;
        atomic_file::replace_file(path, &bytes)
    }

    /// Reads and decodes the file at `path` (see
    /// [`atomic_file::read_secret_file`] for the checks made before reading).
    pub(crate) fn load<T: WireType>(&self, path: &Path, access: FileAccess) -> Result<T> {
        self.load_versioned(path, access).map(|(_, body)| body)
    }

    /// [`EnvelopeFormat::load`], with the file's version.
    pub(crate) fn load_versioned<T: WireType>(
        &self,
        path: &Path,
        access: FileAccess,
    ) -> Result<(u32, T)> {
        let bytes = atomic_file::read_secret_file(path, self.what, MAX_FILE_BYTES, access)?;
        self.decode_versioned(&bytes)
    }
}
