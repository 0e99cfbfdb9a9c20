//! The four calls of a Vault login: `auth/<mount>/login`, and the token's
//! own `renew-self`, `lookup-self` and `revoke-self`. Tokens travel only in
//! the `X-Vault-Token` header and come back into zeroizing buffers.

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::diagnose;
use crate::login::{Refusal, Sent};
use crate::manager::ExchangeError;
use crate::vault_http::vault_errors;

/// The HTTP side of one [`VaultLogin`](super::VaultLogin).
#[derive(Clone)]
pub(super) struct Api {
    pub(super) agent: ureq::Agent,
    pub(super) addr: String,
    pub(super) mount: String,
    pub(super) namespace: Option<String>,
    /// Whether a CA bundle was given (for what a refused certificate means).
    pub(super) ca_bundle_given: bool,
}

/// How long a token lives from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Lease {
    /// Seconds left; 0 for a token that never expires.
    pub(super) ttl_secs: u64,
}

#[derive(Serialize)]
struct LoginBody<'a> {
    role: &'a str,
    jwt: &'a str,
}

#[derive(Deserialize)]
struct AuthAnswer {
    auth: Option<Auth>,
}

#[derive(Deserialize)]
struct Auth {
    client_token: Option<Zeroizing<String>>,
    #[serde(default)]
    lease_duration: u64,
}

#[derive(Deserialize)]
struct LookupAnswer {
    data: Option<LookupData>,
}

#[derive(Deserialize)]
struct LookupData {
    /// Read as any JSON value: only a non-negative integer is a TTL.
    #[serde(default)]
    ttl: serde_json::Value,
    /// The login path that minted it (`auth/<mount>/login`).
    #[serde(default)]
    path: serde_json::Value,
    /// The auth method's metadata (the JWT method's `role`).
    #[serde(default)]
    meta: serde_json::Value,
}

/// What `lookup-self` says of a token.
pub(super) struct Looked {
    /// Its lease; `None` without a usable `ttl`.
    pub(super) lease: Option<Lease>,
    /// The login path that minted it, when given.
    pub(super) path: Option<String>,
    /// The role it logged in as, when given.
    pub(super) role: Option<String>,
}

/// A client token, taken out of its answer.
pub(super) struct ClientToken(Zeroizing<String>);

impl ClientToken {
    pub(super) fn into_string(self) -> Zeroizing<String> {
        self.0
    }
}

impl Api {
    fn url(&self, path: &str) -> String {
        format!("{}/v1/{path}", self.addr)
    }

    fn with_namespace<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.namespace {
            Some(ns) => req.header("X-Vault-Namespace", ns.as_str()),
            None => req,
        }
    }

    /// `POST /v1/auth/<mount>/login` with `jwt` as `role`: the client token
    /// and its lease.
    pub(super) fn login(
        &self,
        role: &str,
        jwt: &str,
    ) -> Result<(ClientToken, Lease), ExchangeError> {
        let url = self.url(&format!("auth/{}/login", self.mount));
        let mut body = Zeroizing::new(Vec::with_capacity(jwt.len() + role.len() + 32));
        serde_json::to_writer(&mut *body, &LoginBody { role, jwt })
            .map_err(|e| ExchangeError(format!("encoding the login to {url}: {e}")))?;
        let resp = self
            .with_namespace(self.agent.post(&url))
            .header("content-type", "application/json")
            .send(&body[..]);
        let (status, answer) = diagnose::REACH.read(&url, resp, self.ca_bundle_given)?;
        if !(200..300).contains(&status) {
            let json = serde_json::from_slice(&answer).unwrap_or(serde_json::Value::Null);
            return Err(diagnose::login_refused(
                &url,
                role,
                status,
                &vault_errors(&json),
            ));
        }
        let parsed: AuthAnswer = serde_json::from_slice(&answer).map_err(|e| {
            ExchangeError(format!(
                "Vault login at {url} answered HTTP {status} with something that is not a login answer ({e})"
            ))
        })?;
        match parsed.auth {
            Some(Auth {
                client_token: Some(token),
                lease_duration,
            }) if !token.is_empty() => Ok((
                ClientToken(token),
                Lease {
                    ttl_secs: lease_duration,
                },
            )),
            _ => Err(ExchangeError(format!(
                "Vault login at {url} answered HTTP {status} without a client token"
            ))),
        }
    }

    /// `POST /v1/auth/token/renew-self`: the renewed lease.
    pub(super) fn renew_self(&self, token: &str) -> Result<Lease, Refusal> {
        let url = self.url("auth/token/renew-self");
        let resp = self
            .with_namespace(self.agent.post(&url))
            .header("X-Vault-Token", token)
            .header("content-type", "application/json")
            .send(&b"{}"[..]);
        let answer = self.token_call(&url, resp)?;
        let parsed: AuthAnswer = serde_json::from_slice(&answer).map_err(|e| {
            Refusal::Other(ExchangeError(format!("{url}: not a renew answer ({e})")))
        })?;
        let auth = parsed.auth.ok_or_else(|| {
            Refusal::Other(ExchangeError(format!("{url}: an answer without `auth`")))
        })?;
        Ok(Lease {
            ttl_secs: auth.lease_duration,
        })
    }

    /// `GET /v1/auth/token/lookup-self`: the token's TTL left.
    /// `GET /v1/auth/token/lookup-self`: the token's lease, or `None` when
    /// the answer gives no usable `ttl` (missing, null, negative, not a
    /// number). That says nothing of how long the token lives, so it is
    /// never read as 0, which Vault uses for a token that never expires.
    pub(super) fn lookup_self(&self, token: &str) -> Result<Looked, Refusal> {
        let url = self.url("auth/token/lookup-self");
        let resp = self
            .with_namespace(self.agent.get(&url))
            .header("X-Vault-Token", token)
            .call();
        let answer = self.token_call(&url, resp)?;
        let parsed: LookupAnswer = serde_json::from_slice(&answer).map_err(|e| {
            Refusal::Other(ExchangeError(format!("{url}: not a lookup answer ({e})")))
        })?;
        let data = parsed.data.ok_or_else(|| {
            Refusal::Other(ExchangeError(format!("{url}: an answer without `data`")))
        })?;
        Ok(Looked {
            lease: data.ttl.as_u64().map(|ttl_secs| Lease { ttl_secs }),
            path: data.path.as_str().map(str::to_string),
            role: data
                .meta
                .get("role")
                .and_then(|r| r.as_str())
                .map(str::to_string),
        })
    }

    /// `POST /v1/auth/token/revoke-self`.
    pub(super) fn revoke_self(&self, token: &str) -> Result<(), Refusal> {
        let url = self.url("auth/token/revoke-self");
        let resp = self
            .with_namespace(self.agent.post(&url))
            .header("X-Vault-Token", token)
            .send_empty();
        self.token_call(&url, resp).map(drop)
    }

    /// A call made with a token: its answer, or whether the token itself was
    /// refused.
    fn token_call(&self, url: &str, sent: Sent) -> Result<Zeroizing<Vec<u8>>, Refusal> {
        diagnose::REACH.token_call(url, sent, self.ca_bundle_given, |status, answer| {
            let json = serde_json::from_slice(answer).unwrap_or(serde_json::Value::Null);
            let said = vault_errors(&json);
            match diagnose::token_refusal(status, &said) {
                Some(why) => Refusal::TokenRefused(why),
                None => Refusal::Other(ExchangeError(format!("{url}: HTTP {status}: {said}"))),
            }
        })
    }
}
