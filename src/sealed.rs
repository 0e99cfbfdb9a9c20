//! Sealed files: a versioned, checksummed msgpack envelope around a body, read
//! whole or not at all, and written crash-safely through [`crate::persist`].
//!
//! The envelope never changes between versions: `Format` (names the kind of
//! file), `Version`, `Body` (bin: the msgpack-encoded body) and `SHA256` (bin:
//! SHA-256 of `Body`). Reading checks, in order: the envelope decodes, `Format`
//! is the expected one, `Version` is one this library reads, the checksum
//! matches, the body decodes. Any failure is an error naming what was wrong.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::codec::{self, Bin, DecodeLimits, WireType, wire_struct};
use crate::error::{DecodeError, Error, Result, truncate_for_message};
use crate::persist;

/// Largest sealed file accepted.
const MAX_FILE_BYTES: u64 = 16 << 20;

wire_struct! {
    /// The envelope: stable across versions.
    pub struct Envelope {
        /// The msgpack-encoded body.
        pub body: Bin => "Body",
        /// The kind of file.
        pub format: String => "Format",
        /// SHA-256 of `body`.
        pub sha256: Bin => "SHA256",
        /// The body's format version.
        pub version: u32 => "Version",
    }
}

/// One kind of sealed file.
pub(crate) struct SealedFormat {
    /// The `Format` value, e.g. `workload-identity-keystore`.
    pub(crate) format: &'static str,
    /// The version written, and the newest read.
    pub(crate) version: u32,
    /// What the file is, for messages: `keystore`.
    pub(crate) what: &'static str,
}

impl SealedFormat {
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
    pub(crate) fn seal<T: WireType>(
        &self,
        body: &T,
        capacity_hint: usize,
    ) -> Result<Zeroizing<Vec<u8>>> {
        let body_bytes = codec::encode_secret(body, capacity_hint)?;
        let sha = Sha256::digest(&*body_bytes);
        let envelope = Envelope {
            body: Bin::new(body_bytes.to_vec()),
            format: self.format.into(),
            sha256: Bin::new(sha.to_vec()),
            version: self.version,
        };
        codec::encode_secret(&envelope, body_bytes.len() + 128)
    }

    /// The body of a sealed file's bytes (see the module docs for the checks).
    pub(crate) fn unseal<T: WireType>(&self, bytes: &[u8]) -> Result<T> {
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
        match envelope.version {
            v if v == ours => {}
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
                    format!("{what} format version {v} is not valid (expected {ours})"),
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
        codec::decode_with(envelope.body.as_slice(), &Self::limits())
    }

    /// Seals `body` and replaces the file at `path` with it, crash-safely.
    pub(crate) fn save<T: WireType>(
        &self,
        path: &Path,
        body: &T,
        capacity_hint: usize,
    ) -> Result<()> {
        let bytes = self.seal(body, capacity_hint)?;
        persist::replace_file(path, &bytes)
    }

    /// Reads and unseals the file at `path`. With [`FileAccess::OwnerOnly`] (on
    /// Unix) a file that group or others have any access to is refused before
    /// it is read: it holds secrets. The file is read into one zeroized buffer
    /// of its exact size (no reallocation leaves copies behind).
    pub(crate) fn load<T: WireType>(&self, path: &Path, access: FileAccess) -> Result<T> {
        let what = self.what;
        let io = |e| Error::Io {
            context: format!("reading {what} {}", path.display()),
            source: e,
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        check_mode(&meta, access).map_err(|e| Error::Io {
            context: format!("refusing {what} {}", path.display()),
            source: e,
        })?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(self.corrupt(
                "",
                format!(
                    "{} is larger than the {MAX_FILE_BYTES}-byte limit",
                    path.display()
                ),
            ));
        }
        // Fits: at most MAX_FILE_BYTES (16 MiB).
        let len = usize::try_from(meta.len()).unwrap_or(usize::MAX);
        let mut bytes = Zeroizing::new(vec![0u8; len]);
        file.read_exact(&mut bytes).map_err(io)?;
        let mut probe = [0u8; 1];
        if file.read(&mut probe).map_err(io)? != 0 {
            return Err(io(std::io::Error::other(
                "the file grew while it was being read",
            )));
        }
        self.unseal(&bytes)
    }
}

/// Which file modes [`SealedFormat::load`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileAccess {
    /// Only files no one but the owner may access (mode `0600` or stricter).
    OwnerOnly,
    /// Any mode (an explicit opt-out).
    AnyMode,
}

#[cfg(unix)]
fn check_mode(meta: &std::fs::Metadata, access: FileAccess) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o7777;
    if access == FileAccess::OwnerOnly && mode & 0o077 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "group or others have access to it (mode {mode:04o}) and it holds secrets; `chmod 600` it (files this library writes are 0600)"
            ),
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_mode(_: &std::fs::Metadata, _: FileAccess) -> std::io::Result<()> {
    Ok(())
}
