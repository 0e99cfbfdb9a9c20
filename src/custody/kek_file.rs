//! [`KekFile`]: a local AES-256-GCM key-encryption key read from a file.

use std::fmt;
use std::path::Path;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::Engine as _;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::{KIND_AEAD_KEK, KeyWrapper};
use crate::error::{Error, Result};
use crate::storage::atomic_file::{self, FileAccess};

/// The length of a KEK: 32 bytes (AES-256).
pub const KEK_LEN: usize = 32;
/// The GCM tag's length.
const TAG_LEN: usize = 16;
/// A base64 KEK: 44 characters, with one optional trailing newline.
const B64_LEN: usize = 44;

/// A 32-byte AES-256-GCM key-encryption key, kept in memory only as AWS-LC's
/// key schedule (freed and cleared on drop).
///
/// Each [`KeyWrapper::wrap`] draws a fresh 96-bit nonce from the OS and
/// returns `nonce || ciphertext || tag`; the KEK's ID is the lower-case hex of
/// the first 8 bytes of SHA-256 over the KEK. Custody it gives: a keystore
/// copied without the KEK file yields no key. A KEK file on the same disk as
/// the keystore only moves the problem; keep it on another volume, in a
/// secrets mount, or use a KMS.
pub struct KekFile {
    key: LessSafeKey,
    id: String,
}

impl fmt::Debug for KekFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KekFile")
            .field("kek_id", &self.id)
            .finish_non_exhaustive()
    }
}

impl KekFile {
    /// A KEK from its 32 bytes.
    pub fn from_bytes(kek: &[u8]) -> Result<KekFile> {
        if kek.len() != KEK_LEN {
            return Err(Error::invalid(
                "KEK",
                "bytes",
                format!("a KEK is exactly {KEK_LEN} bytes, got {}", kek.len()),
            ));
        }
        let digest = Sha256::digest(kek);
        let id = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let key = UnboundKey::new(&AES_256_GCM, kek)
            .map(LessSafeKey::new)
            .map_err(|_| Error::invalid("KEK", "bytes", "AES-256-GCM refused the key"))?;
        Ok(KekFile { key, id })
    }

    /// Reads a KEK file: exactly 32 raw bytes, or 44 standard-base64
    /// characters with an optional trailing newline. On Unix, a file that
    /// group or others can access is refused (`IoError`, naming its mode), as
    /// keystores are.
    pub fn load(path: impl AsRef<Path>) -> Result<KekFile> {
        let path = path.as_ref();
        let bytes = atomic_file::read_secret_file(path, "KEK file", 4096, FileAccess::OwnerOnly)?;
        let bad = |reason: String| {
            Error::invalid(
                "KEK file",
                path.display().to_string(),
                format!(
                    "{reason}; expected exactly {KEK_LEN} raw bytes, or {B64_LEN} standard-base64 characters and an optional newline"
                ),
            )
        };
        match bytes.len() {
            KEK_LEN => KekFile::from_bytes(&bytes),
            n if n == B64_LEN || (n == B64_LEN + 1 && bytes[B64_LEN] == b'\n') => {
                let mut kek = Zeroizing::new([0u8; KEK_LEN]);
                match base64::engine::general_purpose::STANDARD
                    .decode_slice(&bytes[..B64_LEN], &mut kek[..])
                {
                    Ok(KEK_LEN) => KekFile::from_bytes(&kek[..]),
                    Ok(n) => Err(bad(format!("its base64 decodes to {n} bytes"))),
                    Err(_) => Err(bad("it is neither 32 raw bytes nor valid base64".into())),
                }
            }
            n => Err(bad(format!("it holds {n} bytes"))),
        }
    }

    /// Makes a new KEK from the OS CSPRNG and writes it to `path` as base64
    /// with a newline (mode 0600); refuses to replace an existing file.
    pub fn generate(path: impl AsRef<Path>) -> Result<KekFile> {
        let path = path.as_ref();
        let mut kek = Zeroizing::new([0u8; KEK_LEN]);
        getrandom::fill(&mut kek[..]).map_err(|e| Error::Io {
            context: "drawing a KEK from the OS random source".into(),
            error: std::io::Error::other(e.to_string()),
        })?;
        let mut text = Zeroizing::new(vec![0u8; B64_LEN + 1]);
        let written = base64::engine::general_purpose::STANDARD
            .encode_slice(&kek[..], &mut text[..B64_LEN])
            .map_err(|_| Error::invalid("KEK", "bytes", "base64 of 32 bytes is 44 characters"))?;
        text[written] = b'\n';
        atomic_file::create_new_file(path, &text[..=written])?;
        KekFile::from_bytes(&kek[..])
    }

    /// The KEK's ID: lower-case hex of the first 8 bytes of its SHA-256.
    pub fn kek_id(&self) -> &str {
        &self.id
    }
}

impl KeyWrapper for KekFile {
    fn kind(&self) -> &str {
        KIND_AEAD_KEK
    }

    fn kek_id(&self) -> &str {
        &self.id
    }

    fn wrap(&self, material: &[u8], associated_data: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| Error::Io {
            context: "drawing a nonce from the OS random source".into(),
            error: std::io::Error::other(e.to_string()),
        })?;
        // Sized once: the buffer holds the plaintext until it is sealed in
        // place, and a reallocation would leave a copy in freed memory.
        let mut out = Vec::with_capacity(NONCE_LEN + material.len() + TAG_LEN);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(material);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated_data),
                &mut out[NONCE_LEN..],
            )
            .map_err(|_| {
                zeroize::Zeroize::zeroize(&mut out);
                Error::KeyCustody {
                    custodian: format!("KEK {}", self.id),
                    reason: "AES-256-GCM could not seal the key".into(),
                }
            })?;
        out.extend_from_slice(tag.as_ref());
        Ok(out)
    }

    fn unwrap(&self, wrapped: &[u8], associated_data: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        if wrapped.len() < NONCE_LEN + TAG_LEN {
            return Err(Error::KeyCustody {
                custodian: format!("KEK {}", self.id),
                reason: format!(
                    "a wrapped key is a {NONCE_LEN}-byte nonce, the ciphertext and a {TAG_LEN}-byte tag; got {} bytes",
                    wrapped.len()
                ),
            });
        }
        let (nonce, sealed) = wrapped.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Error::KeyCustody {
            custodian: format!("KEK {}", self.id),
            reason: "bad nonce".into(),
        })?;
        let mut buf = Zeroizing::new(sealed.to_vec());
        let len = self
            .key
            .open_in_place(nonce, Aad::from(associated_data), &mut buf)
            .map_err(|_| Error::KeyCustody {
                custodian: format!("KEK {}", self.id),
                reason: "authentication failed: the wrapped key or its ID or algorithm was altered, or it was wrapped by another KEK".into(),
            })?
            .len();
        buf.truncate(len);
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_round_trip_and_refuse_any_change() {
        let kek = KekFile::from_bytes(&[7u8; 32]).unwrap();
        let w = kek.wrap(&[1u8; 32], b"aad").unwrap();
        assert_eq!(w.len(), 12 + 32 + 16);
        assert_eq!(&kek.unwrap(&w, b"aad").unwrap()[..], &[1u8; 32]);
        // Fresh nonce per wrap.
        assert_ne!(kek.wrap(&[1u8; 32], b"aad").unwrap(), w);
        for i in 0..w.len() {
            let mut t = w.clone();
            t[i] ^= 0x01;
            let e = kek.unwrap(&t, b"aad").unwrap_err();
            assert_eq!(
                e.code(),
                crate::error::ResultCode::KeyCustodyFailed,
                "byte {i}"
            );
        }
        assert!(kek.unwrap(&w, b"aae").is_err());
        let other = KekFile::from_bytes(&[8u8; 32]).unwrap();
        assert!(other.unwrap(&w, b"aad").is_err());
        assert!(kek.unwrap(&w[..27], b"aad").is_err());
    }

    #[test]
    fn the_id_is_hex_of_sha256_prefix_and_debug_shows_only_it() {
        let kek = KekFile::from_bytes(&[0u8; 32]).unwrap();
        // SHA-256 of 32 zero bytes starts 66687aadf862bd77.
        assert_eq!(kek.kek_id(), "66687aadf862bd77");
        assert_eq!(
            format!("{kek:?}"),
            "KekFile { kek_id: \"66687aadf862bd77\", .. }"
        );
    }
}
