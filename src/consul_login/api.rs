//! The three calls of a Consul login on Consul's ACL HTTP API:
//! `POST /v1/acl/login`, and the token's own `GET /v1/acl/token/self` and
//! `POST /v1/acl/logout`. Tokens travel only in the `X-Consul-Token` header
//! and the login body, and come back into zeroizing buffers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::diagnose;
use crate::login::{Refusal, Sent};
use crate::manager::ExchangeError;

/// The HTTP side of one [`ConsulLogin`](super::ConsulLogin).
#[derive(Clone)]
pub(super) struct Api {
    pub(super) agent: ureq::Agent,
    pub(super) addr: String,
    pub(super) namespace: Option<String>,
    pub(super) partition: Option<String>,
    pub(super) datacenter: Option<String>,
    /// Whether a CA bundle was given (for what a refused certificate means).
    pub(super) ca_bundle_given: bool,
}

/// What Consul says of a token's life (from a login's or a `token/self`
/// answer). Times are Unix milliseconds by Consul's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TokenLife {
    /// Its `AccessorID` (not a secret: it names the token in logs).
    pub(super) accessor: String,
    /// The auth method that made it (empty for a token made otherwise).
    pub(super) auth_method: String,
    /// Its `CreateTime`, if Consul said one that could be read.
    pub(super) created_ms: Option<i64>,
    /// Its `ExpirationTime`; `None` for a token that never expires.
    pub(super) expires_ms: Option<i64>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct LoginBody<'a> {
    auth_method: &'a str,
    bearer_token: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    meta: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<&'a str>,
}

/// The fields of Consul's `ACLToken` that a login reads (Consul sends the
/// whole token; the rest is ignored).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TokenAnswer {
    #[serde(rename = "AccessorID", default)]
    accessor_id: String,
    #[serde(rename = "SecretID", default)]
    secret_id: Option<Zeroizing<String>>,
    #[serde(default)]
    auth_method: String,
    #[serde(default)]
    create_time: Option<String>,
    #[serde(default)]
    expiration_time: Option<String>,
}

impl TokenAnswer {
    fn life(&self, url: &str) -> Result<TokenLife, ExchangeError> {
        let when = |field: &str, v: &Option<String>| match v.as_deref() {
            None | Some("") => Ok(None),
            Some(s) => crate::clock::parse_rfc3339_ms(s).map(Some).ok_or_else(|| {
                ExchangeError(format!(
                    "{url}: the token's {field} {:?} is not an RFC 3339 date and time",
                    crate::error::truncate_for_message(s)
                ))
            }),
        };
        Ok(TokenLife {
            accessor: self.accessor_id.clone(),
            auth_method: self.auth_method.clone(),
            // CreateTime only refines the schedule: one Consul wrote oddly
            // is not worth failing a login for.
            created_ms: when("CreateTime", &self.create_time).unwrap_or(None),
            expires_ms: when("ExpirationTime", &self.expiration_time)?,
        })
    }
}

/// A SecretID, taken out of its answer.
pub(super) struct Secret(Zeroizing<String>);

impl Secret {
    pub(super) fn into_string(self) -> Zeroizing<String> {
        self.0
    }
}

impl Api {
    /// The URL of `path` (after `/v1/`) with the `dc`, `ns` and `partition`
    /// query parameters this login was given (`with_scope`: for the token
    /// calls; the login carries namespace and partition in its body).
    fn url(&self, path: &str, with_scope: bool) -> String {
        let mut query: Vec<String> = Vec::new();
        if let Some(dc) = &self.datacenter {
            query.push(format!("dc={dc}"));
        }
        if with_scope {
            if let Some(ns) = &self.namespace {
                query.push(format!("ns={ns}"));
            }
            if let Some(p) = &self.partition {
                query.push(format!("partition={p}"));
            }
        }
        if query.is_empty() {
            format!("{}/v1/{path}", self.addr)
        } else {
            format!("{}/v1/{path}?{}", self.addr, query.join("&"))
        }
    }

    /// `POST /v1/acl/login`: the new token's SecretID and life.
    pub(super) fn login(
        &self,
        auth_method: &str,
        jwt: &str,
        meta: &BTreeMap<String, String>,
    ) -> Result<(Secret, TokenLife), ExchangeError> {
        let url = self.url("acl/login", false);
        let mut body = Zeroizing::new(Vec::with_capacity(jwt.len() + 256));
        serde_json::to_writer(
            &mut *body,
            &LoginBody {
                auth_method,
                bearer_token: jwt,
                meta,
                namespace: self.namespace.as_deref(),
                partition: self.partition.as_deref(),
            },
        )
        .map_err(|e| ExchangeError(format!("encoding the login to {url}: {e}")))?;
        let resp = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .send(&body[..]);
        let (status, answer) = diagnose::REACH.read(&url, resp, self.ca_bundle_given)?;
        if !(200..300).contains(&status) {
            return Err(diagnose::login_refused(
                &url,
                auth_method,
                status,
                &said(&answer),
            ));
        }
        let parsed: TokenAnswer = serde_json::from_slice(&answer).map_err(|e| {
            ExchangeError(format!(
                "Consul login at {url} answered HTTP {status} with something that is not an ACL token ({e})"
            ))
        })?;
        let life = parsed.life(&url)?;
        match parsed.secret_id {
            Some(secret) if !secret.is_empty() => Ok((Secret(secret), life)),
            _ => Err(ExchangeError(format!(
                "Consul login at {url} answered HTTP {status} without a SecretID"
            ))),
        }
    }

    /// `GET /v1/acl/token/self`: the token's life, or whether Consul no
    /// longer knows it.
    pub(super) fn token_self(&self, token: &str) -> Result<TokenLife, Refusal> {
        let url = self.url("acl/token/self", true);
        let resp = self.agent.get(&url).header("X-Consul-Token", token).call();
        let answer = self.token_call(&url, resp)?;
        let parsed: TokenAnswer = serde_json::from_slice(&answer)
            .map_err(|e| Refusal::Other(ExchangeError(format!("{url}: not an ACL token ({e})"))))?;
        parsed.life(&url).map_err(Refusal::Other)
    }

    /// `POST /v1/acl/logout`.
    pub(super) fn logout(&self, token: &str) -> Result<(), Refusal> {
        let url = self.url("acl/logout", true);
        let resp = self
            .agent
            .post(&url)
            .header("X-Consul-Token", token)
            .send_empty();
        self.token_call(&url, resp).map(drop)
    }

    /// A call made with a token: its answer, or whether Consul no longer
    /// knows the token.
    fn token_call(&self, url: &str, sent: Sent) -> Result<Zeroizing<Vec<u8>>, Refusal> {
        diagnose::REACH.token_call(url, sent, self.ca_bundle_given, |status, answer| {
            let said = said(answer);
            if diagnose::token_gone(status, &said) {
                Refusal::TokenRefused(format!("HTTP {status}: {said}"))
            } else {
                Refusal::Other(diagnose::token_call_refused(url, status, &said))
            }
        })
    }
}

/// Consul's error answer (a text/plain body: its error's text, which names
/// auth methods, claims and rules, never a secret), on one line, shortened.
fn said(answer: &[u8]) -> String {
    let text = String::from_utf8_lossy(answer);
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    // Longer than a one-line message: Consul's texts run to a few hundred
    // bytes (a JWKS fetch error names the URL and the cause).
    const MAX: usize = 400;
    if joined.len() <= MAX {
        return joined;
    }
    let mut end = MAX;
    while !joined.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} (shortened)", &joined[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consuls_answers_are_kept_to_one_short_line() {
        assert_eq!(said(b"ACL not found\n"), "ACL not found");
        let long = "x ".repeat(1000);
        let s = said(long.as_bytes());
        assert!(s.ends_with("(shortened)") && s.len() < 450, "{s}");
        assert_eq!(said(&[0xff, b'a']), "\u{fffd}a");
    }
}
