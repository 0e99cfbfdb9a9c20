//! [`Transit`]: root keys wrapped by a Transit encryption key.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::Value;
use zeroize::Zeroizing;

use super::client::{TransitClient, check_key_name};
use crate::custody::{KIND_TRANSIT, KeyWrapper, WrapItem};
use crate::error::{Error, Result, truncate_for_message};

/// The Transit key type that wraps keys (the contract's: AES-256-GCM, which
/// takes associated data).
const KEK_TYPE: &str = "aes256-gcm96";

/// A [`KeyWrapper`] whose KEK is a Vault/OpenBao Transit encryption key
/// (`aes256-gcm96`): the KEK never leaves Transit. `Wrapped` is Transit's
/// `vault:v<N>:...` ciphertext; the KEK ID is `<mount>/<name>`.
///
/// Wrapping and unwrapping many keys (a keystore load) is one batch request.
/// Rewrapping decrypts and encrypts again with the key's newest version:
/// Transit's own `rewrap` endpoint does not take associated data (OpenBao
/// 2.7 answers "message authentication failed"), and the material passes
/// through this process at every load anyway.
#[derive(Clone)]
pub struct Transit {
    client: TransitClient,
    key: String,
    kek_id: String,
}

impl fmt::Debug for Transit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transit")
            .field("addr", &self.client.addr())
            .field("kek_id", &self.kek_id)
            .finish_non_exhaustive()
    }
}

impl Transit {
    /// The Transit key `key` through `client`, after checking with Transit
    /// that it exists and is an AEAD encryption key (Transit's `encrypt`
    /// would otherwise create a missing key, so a misspelt name would wrap
    /// keys under a new KEK). Needs `read` on `<mount>/keys/<key>`.
    pub fn new(client: TransitClient, key: &str) -> Result<Transit> {
        check_key_name(key)?;
        let data = client.get(
            &format!("keys/{key}"),
            &format!("reading Transit key {key:?}"),
        )?;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind != KEK_TYPE {
            return Err(Error::KeyCustody {
                custodian: format!("Transit {}/{key}", client.mount()),
                reason: format!(
                    "key {key:?} is of type {:?}; wrapping needs an aes256-gcm96 encryption key",
                    truncate_for_message(kind)
                ),
            });
        }
        Ok(Transit {
            kek_id: format!("{}/{key}", client.mount()),
            client,
            key: key.to_string(),
        })
    }

    fn custodian(&self) -> String {
        format!("Transit {}", self.kek_id)
    }

    /// One batch call: `op` is `encrypt` or `decrypt`; `body` the request
    /// (built by hand in a zeroizing buffer: it may hold material). The
    /// answer's bytes (zeroizing), for [`Transit::results`] to read.
    fn batch(&self, op: &str, body: &[u8], what: &str) -> Result<Zeroizing<Vec<u8>>> {
        self.client
            .post_raw(&format!("{op}/{}", self.key), body, what)
    }

    /// The results of a batch answer, borrowed from it, checked to be one
    /// per item.
    fn results<'a>(&self, answer: &'a [u8], n: usize, what: &str) -> Result<Vec<BatchResult<'a>>> {
        let parsed: BatchAnswer<'a> =
            serde_json::from_slice(answer).map_err(|e| Error::KeyCustody {
                custodian: self.custodian(),
                // Only where it failed: serde's text could quote the answer.
                reason: format!(
                    "{what}: Transit's answer is not what it sends ({:?} at line {}, column {})",
                    e.classify(),
                    e.line(),
                    e.column()
                ),
            })?;
        let results = parsed.data.batch_results;
        if results.len() != n {
            return Err(Error::KeyCustody {
                custodian: self.custodian(),
                reason: format!(
                    "{what}: Transit answered {} results for {n} keys",
                    results.len()
                ),
            });
        }
        Ok(results)
    }

    fn item_error(&self, it: &WrapItem<'_>, what: &str, error: &str) -> Option<Error> {
        if error.is_empty() {
            return None;
        }
        let hint = if error.contains("authentication failed") {
            ": the wrapped key or its ID or algorithm was altered, or it was wrapped by another Transit key"
        } else {
            ""
        };
        Some(it.name_in(Error::KeyCustody {
            custodian: self.custodian(),
            reason: format!("{what}: {}{hint}", truncate_for_message(error)),
        }))
    }
}

/// A batch answer: `{"data":{"batch_results":[...]}}`. Strings are borrowed
/// from the answer's (zeroizing) buffer: base64 and Transit ciphertexts
/// have no escapes, so serde_json copies nothing.
#[derive(Deserialize)]
struct BatchAnswer<'a> {
    #[serde(borrow)]
    data: BatchData<'a>,
}

#[derive(Deserialize)]
struct BatchData<'a> {
    #[serde(borrow)]
    batch_results: Vec<BatchResult<'a>>,
}

#[derive(Deserialize)]
struct BatchResult<'a> {
    #[serde(default, borrow)]
    ciphertext: Option<&'a str>,
    #[serde(default, borrow)]
    plaintext: Option<&'a str>,
    #[serde(default, borrow)]
    error: Option<std::borrow::Cow<'a, str>>,
}

/// `{"batch_input":[{"<field>":"<base64 or ciphertext>","associated_data":"<base64>"},...]}`,
/// written into one buffer sized up front (no reallocation leaves a copy).
fn batch_body(field: &str, items: &[(&[u8], bool, &[u8])]) -> Zeroizing<Vec<u8>> {
    let b64 = |n: usize| n.div_ceil(3) * 4;
    let size = 20
        + items
            .iter()
            .map(|(v, encode, aad)| {
                48 + field.len() + if *encode { b64(v.len()) } else { v.len() } + b64(aad.len())
            })
            .sum::<usize>();
    let mut out = Zeroizing::new(Vec::with_capacity(size));
    out.extend_from_slice(b"{\"batch_input\":[");
    for (i, (value, encode, aad)) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"");
        out.extend_from_slice(field.as_bytes());
        out.extend_from_slice(b"\":\"");
        if *encode {
            let start = out.len();
            out.resize(start + b64(value.len()), 0);
            let n = STANDARD
                .encode_slice(value, &mut out[start..])
                .unwrap_or_default();
            out.truncate(start + n);
        } else {
            out.extend_from_slice(value);
        }
        out.extend_from_slice(b"\",\"associated_data\":\"");
        let start = out.len();
        out.resize(start + b64(aad.len()), 0);
        let n = STANDARD
            .encode_slice(aad, &mut out[start..])
            .unwrap_or_default();
        out.truncate(start + n);
        out.extend_from_slice(b"\"}");
    }
    out.extend_from_slice(b"]}");
    out
}

impl KeyWrapper for Transit {
    fn kind(&self) -> &str {
        KIND_TRANSIT
    }

    fn kek_id(&self) -> &str {
        &self.kek_id
    }

    fn wrap(&self, material: &[u8], associated_data: &[u8]) -> Result<Vec<u8>> {
        let mut out = self.wrap_many(&[WrapItem::new("", material, associated_data)])?;
        Ok(out.pop().unwrap_or_default())
    }

    fn unwrap(&self, wrapped: &[u8], associated_data: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        let mut out = self.unwrap_many(&[WrapItem::new("", wrapped, associated_data)])?;
        Ok(out.pop().unwrap_or_default())
    }

    fn wrap_many(&self, items: &[WrapItem<'_>]) -> Result<Vec<Vec<u8>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let input: Vec<(&[u8], bool, &[u8])> = items
            .iter()
            .map(|it| (it.bytes, true, it.associated_data))
            .collect();
        let body = batch_body("plaintext", &input);
        let answer = self.batch("encrypt", &body, "wrapping keys")?;
        drop(body);
        let results = self.results(&answer, items.len(), "wrapping keys")?;
        items
            .iter()
            .zip(&results)
            .map(|(it, r)| {
                if let Some(e) = self.item_error(it, "wrapping", r.error.as_deref().unwrap_or("")) {
                    return Err(e);
                }
                match r.ciphertext {
                    Some(c) if c.starts_with("vault:v") => Ok(c.as_bytes().to_vec()),
                    _ => Err(it.name_in(Error::KeyCustody {
                        custodian: self.custodian(),
                        reason: "wrapping: Transit answered without a vault:v<N>: ciphertext"
                            .into(),
                    })),
                }
            })
            .collect()
    }

    fn unwrap_many(&self, items: &[WrapItem<'_>]) -> Result<Vec<Zeroizing<Vec<u8>>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        for it in items {
            let ok = std::str::from_utf8(it.bytes).is_ok_and(|c| {
                c.starts_with("vault:v")
                    && c.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"+/=:-_".contains(&b))
            });
            if !ok {
                return Err(it.name_in(Error::KeyCustody {
                    custodian: self.custodian(),
                    reason: "unwrapping: not a Transit ciphertext (vault:v<N>:<base64>)".into(),
                }));
            }
        }
        let input: Vec<(&[u8], bool, &[u8])> = items
            .iter()
            .map(|it| (it.bytes, false, it.associated_data))
            .collect();
        let body = batch_body("ciphertext", &input);
        let answer = self.batch("decrypt", &body, "unwrapping keys")?;
        let results = self.results(&answer, items.len(), "unwrapping keys")?;
        items
            .iter()
            .zip(&results)
            .map(|(it, r)| {
                if let Some(e) = self.item_error(it, "unwrapping", r.error.as_deref().unwrap_or(""))
                {
                    return Err(e);
                }
                let Some(text) = r.plaintext.filter(|t| !t.is_empty()) else {
                    return Err(it.name_in(Error::KeyCustody {
                        custodian: self.custodian(),
                        reason: "unwrapping: Transit answered without a plaintext".into(),
                    }));
                };
                let mut out = Zeroizing::new(vec![0u8; text.len() / 4 * 3 + 3]);
                let n = STANDARD.decode_slice(text, &mut out[..]).map_err(|_| {
                    it.name_in(Error::KeyCustody {
                        custodian: self.custodian(),
                        reason: "unwrapping: Transit's plaintext is not base64".into(),
                    })
                })?;
                out.truncate(n);
                Ok(out)
            })
            .collect()
    }
}
