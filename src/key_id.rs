//! Validated key IDs.

use std::fmt;

use crate::error::truncate_for_message;
use crate::error::{Error, Result};

/// The longest accepted key ID, in bytes.
pub const MAX_KEY_ID_LEN: usize = 128;

/// A key ID: 1 to 128 characters from `A-Z a-z 0-9 . _ : -`, never containing
/// `..` (so it is safe in file names, URLs and JWT headers). Generated IDs are
/// lower-case UUIDs. Validated once, at construction. A clone is its own copy
/// of the (short) string, not a shared reference count: threads verifying
/// under the same key never write to one shared cache line for it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(Box<str>);

impl KeyId {
    /// Validates `id` as a key ID.
    pub fn new(id: &str) -> Result<KeyId> {
        match Self::problem(id) {
            None => Ok(KeyId(Box::from(id))),
            Some(p) => Err(Error::invalid(
                "KeyId",
                "key_id",
                format!("{p} (got {:?})", truncate_for_message(id)),
            )),
        }
    }

    /// What makes `id` unusable as a key ID, or `None` when it is one. Cheap:
    /// the verifier asks it of every token's `kid` before any lookup, so a kid
    /// that can never name a key is refused at once.
    pub(crate) fn problem(id: &str) -> Option<String> {
        if id.is_empty() {
            Some("must not be empty".to_string())
        } else if id.len() > MAX_KEY_ID_LEN {
            Some(format!(
                "must be at most {MAX_KEY_ID_LEN} bytes, got {}",
                id.len()
            ))
        } else if let Some(c) = id.chars().find(|c| !Self::allowed(*c)) {
            Some(format!(
                "must contain only A-Z a-z 0-9 . _ : -, found {c:?}"
            ))
        } else if id.contains("..") {
            Some("must not contain \"..\"".to_string())
        } else {
            None
        }
    }

    /// A fresh random ID: a lower-case UUID v4 (36 characters).
    pub fn generate() -> KeyId {
        let id = uuid::Uuid::new_v4().hyphenated().to_string();
        KeyId(id.into_boxed_str())
    }

    /// The ID as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn allowed(c: char) -> bool {
        c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
    }
}

/// A `&KeyId` is usable wherever a `&str` key ID is asked for
/// (`keyring.promote(&kid, now)`).
impl std::ops::Deref for KeyId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({:?})", &*self.0)
    }
}

impl std::str::FromStr for KeyId {
    type Err = Error;
    fn from_str(s: &str) -> Result<KeyId> {
        KeyId::new(s)
    }
}

impl AsRef<str> for KeyId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        for ok in [
            "a",
            "5b6f0c6e-8d7a-4e2b-9f1c-3a2d4e5f6a7b",
            "key:rot.2026_a-1",
            ".a",
            "a.b",
        ] {
            assert_eq!(KeyId::new(ok).unwrap().as_str(), ok);
        }
        KeyId::new(&"k".repeat(128)).unwrap();
    }

    #[test]
    fn rejects_each_bad_form_with_its_reason() {
        let cases = [
            ("", "must not be empty"),
            (&"k".repeat(129) as &str, "at most 128 bytes, got 129"),
            ("a/b", "found '/'"),
            ("a..b", "must not contain \"..\""),
            ("..", "must not contain \"..\""),
            ("a\0b", "found '\\0'"),
            ("ключ", "found 'к'"),
            ("a b", "found ' '"),
        ];
        for (bad, reason) in cases {
            let e = KeyId::new(bad).unwrap_err();
            assert_eq!(e.code(), crate::error::ResultCode::InvalidArgument);
            assert!(e.to_string().contains(reason), "{bad:?}: {e}");
        }
    }

    #[test]
    fn generated_ids_are_lower_case_uuids() {
        let id = KeyId::generate();
        assert_eq!(id.as_str().len(), 36);
        assert_eq!(id.as_str(), id.as_str().to_ascii_lowercase());
        assert_eq!(KeyId::new(id.as_str()).unwrap(), id);
        assert_ne!(KeyId::generate(), id);
    }
}
