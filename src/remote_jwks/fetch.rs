//! One fetch: discovery, the HTTP GET with its limits, the strict import
//! into the keyring, and the errors that name the URL at fault.

use std::fmt;
use std::io;
use std::time::Duration;

use serde::Deserialize;

use super::builder::check_url;
use super::freshness::freshness;
use super::{RefreshReport, Shared, Source, without_query};
use crate::error::{DecodeError, Error, Result, truncate_for_message};

impl Shared {
    /// Discovers (if needed), fetches and applies a JWKS; the URL used and
    /// the report.
    pub(super) fn fetch_and_apply(
        &self,
        jwks_uri: Option<String>,
    ) -> Result<(String, RefreshReport)> {
        let uri = match (jwks_uri, &self.config.source) {
            (Some(uri), _) => uri,
            (None, Source::Jwks(url) | Source::SpiffeBundle(url)) => url.clone(),
            (None, Source::Issuer(issuer)) => self.discover(issuer)?,
        };
        let bundle = matches!(self.config.source, Source::SpiffeBundle(_));
        let type_name = if bundle { "SpiffeBundle" } else { "JWKS" };
        let (body, max_age) = self.get(&uri, type_name)?;
        let body = String::from_utf8(body)
            .map_err(|_| decode_error(type_name, &uri, "the body is not UTF-8"))?;
        let entries = count_keys(&body);
        if entries > self.config.max_keys {
            return Err(decode_error(
                type_name,
                &uri,
                format!(
                    "the set lists {entries} keys, more than the limit of {}",
                    self.config.max_keys
                ),
            ));
        }
        let meta = if bundle {
            self.check_bundle(&body, &uri)?
        } else {
            BundleMeta::default()
        };
        let report = self.apply(&body).map_err(|e| from_url(e, &uri))?;
        let refresh_hint = meta.spiffe_refresh_hint.map(Duration::from_secs);
        let next_refresh_in = refresh_hint
            .or(max_age)
            .unwrap_or(self.config.default_refresh)
            .clamp(self.config.min_refresh, self.config.max_refresh);
        Ok((
            uri.clone(),
            RefreshReport {
                jwks_uri: without_query(&uri),
                max_age,
                next_refresh_in,
                sequence: meta.spiffe_sequence,
                refresh_hint,
                ..report
            },
        ))
    }

    /// A SPIFFE bundle's own members, checked before its keys are: a
    /// `spiffe_sequence` lower than the held bundle's refuses it (a peer
    /// rolled back, or a stale replica answered), counted apart.
    fn check_bundle(&self, body: &str, uri: &str) -> Result<BundleMeta> {
        let meta: BundleMeta = serde_json::from_str(body).map_err(|e| {
            decode_error(
                "SpiffeBundle",
                uri,
                format!(
                    "{e}; expected a SPIFFE bundle: {{\"keys\":[...]}} with optional \
                     spiffe_sequence and spiffe_refresh_hint, non-negative integers"
                ),
            )
        })?;
        let mut state = self.lock();
        let Some(held) = state.sequence else {
            return Ok(meta);
        };
        let why = match meta.spiffe_sequence {
            Some(new) if new >= held => return Ok(meta),
            Some(new) => format!("spiffe_sequence went backwards: {new}"),
            // Once a sequence was served, dropping it is a rollback too: an
            // older key set with the field left out would otherwise reset
            // the protection and bring a removed key back.
            None => "the bundle carries no spiffe_sequence".to_string(),
        };
        state.sequence_refusals += 1;
        Err(decode_error(
            "SpiffeBundle",
            uri,
            format!(
                "{why}, expected at least {held} (the sequence of the bundle held, which \
                 is kept; SpiffeBundleSource::reset_sequence accepts a peer that restarted \
                 its sequence)"
            ),
        ))
    }

    /// Reads the issuer's discovery document; its `jwks_uri`.
    fn discover(&self, issuer: &str) -> Result<String> {
        #[derive(Deserialize)]
        struct Discovery {
            issuer: String,
            jwks_uri: String,
        }
        let url = format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        );
        let (body, _) = self.get(&url, "OpenIdConfiguration")?;
        let doc: Discovery = serde_json::from_slice(&body).map_err(|e| {
            decode_error(
                "OpenIdConfiguration",
                &url,
                format!("{e}; expected {{\"issuer\":…,\"jwks_uri\":…}}"),
            )
        })?;
        if doc.issuer != issuer {
            return Err(decode_error(
                "OpenIdConfiguration",
                &url,
                format!(
                    "issuer is {:?}, expected exactly {:?}",
                    truncate_for_message(&doc.issuer),
                    truncate_for_message(issuer)
                ),
            ));
        }
        check_url(&doc.jwks_uri, self.config.allow_http_loopback, "jwks_uri").map_err(|e| {
            decode_error(
                "OpenIdConfiguration",
                &url,
                format!("unusable jwks_uri: {e}"),
            )
        })?;
        Ok(doc.jwks_uri)
    }

    /// GETs `url`, which should hold a `type_name` document: the body of a
    /// 200 answer (at most the body limit) and the freshness it declared.
    fn get(&self, url: &str, type_name: &'static str) -> Result<(Vec<u8>, Option<Duration>)> {
        let shown = without_query(url);
        let io_error = |source: io::Error| Error::Io {
            context: format!("fetching the {type_name} document from {shown}"),
            error: source,
        };
        let mut resp = self
            .agent
            .get(url)
            .header("accept", "application/jwk-set+json, application/json")
            .call()
            .map_err(|e| {
                let trust = crate::tls_pem::TrustSettings {
                    ca_bundle: "RemoteJwksBuilder::ca_bundle_pem (wid: --ca-bundle)",
                    ca_bundle_given: self.config.ca_bundle_given,
                    client_certificate: None,
                };
                match crate::tls_pem::explain_refusal(url, &e, &trust) {
                    Some(plain) => io_error(io::Error::new(io::ErrorKind::InvalidData, plain)),
                    None => io_error(e.into_io()),
                }
            })?;
        let status = resp.status();
        if status.is_redirection() {
            return Err(io_error(io::Error::other(format!(
                "HTTP status {status}, a redirect{}, expected 200 from the URL itself",
                if self.config.allow_http_loopback
                    || matches!(self.config.source, Source::SpiffeBundle(_))
                {
                    " (not followed: this source follows none)"
                } else {
                    " (followed too often)"
                }
            ))));
        }
        if status != 200 {
            return Err(io_error(io::Error::other(format!(
                "HTTP status {status}, expected 200"
            ))));
        }
        let limit = self.config.max_body_bytes;
        let too_large = || {
            decode_error(
                type_name,
                url,
                format!("the body is larger than the limit of {limit} bytes"),
            )
        };
        if resp
            .body()
            .content_length()
            .is_some_and(|n| n > limit as u64)
        {
            return Err(too_large());
        }
        let max_age = freshness(resp.headers());
        let body = resp
            .body_mut()
            .with_config()
            .limit(limit as u64)
            .read_to_vec()
            .map_err(|e| match e {
                ureq::Error::BodyExceedsLimit(_) => too_large(),
                e => io_error(e.into_io()),
            })?;
        Ok((body, max_age))
    }

    /// Checks the whole set, then brings the keyring in step with it, in one
    /// write: a refused set changes nothing.
    fn apply(&self, body: &str) -> Result<RefreshReport> {
        let m = self.keyring.mirror_jwks(body, self.config.purpose())?;
        Ok(RefreshReport {
            jwks_uri: String::new(),
            keys: m.keys,
            added: m.added,
            removed: m.removed,
            skipped: m.skipped,
            max_age: None,
            next_refresh_in: Duration::ZERO,
            sequence: None,
            refresh_hint: None,
        })
    }
}

/// The members a SPIFFE bundle adds to a JWKS (SPIFFE Trust Domain and
/// Bundle, 4.1, 4.2).
#[derive(Default, Deserialize)]
struct BundleMeta {
    spiffe_sequence: Option<u64>,
    spiffe_refresh_hint: Option<u64>,
}

/// The number of entries in a JWKS's `keys` (0 when it is not a JWKS: the
/// strict import says why).
fn count_keys(body: &str) -> usize {
    #[derive(Deserialize)]
    struct Count {
        keys: Vec<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Count>(body).map_or(0, |c| c.keys.len())
}

fn decode_error(type_name: &'static str, url: &str, reason: impl fmt::Display) -> Error {
    Error::Decode(DecodeError {
        type_name,
        path: String::new(),
        reason: format!("{reason} (from {})", without_query(url)),
    })
}

/// Names where a refused document came from (the keyring's own import errors
/// name the member at fault but not the URL).
fn from_url(e: Error, url: &str) -> Error {
    match e {
        Error::Decode(mut d) => {
            d.reason = format!("{} (from {})", d.reason, without_query(url));
            Error::Decode(d)
        }
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_entries_of_a_set() {
        assert_eq!(count_keys(r#"{"keys":[{},{"kty":"x"},1]}"#), 3);
        assert_eq!(count_keys("garbage"), 0);
    }
}
