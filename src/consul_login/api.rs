//! The three calls of a Consul login on Consul's ACL HTTP API:
//! `POST /v1/acl/login`, and the token's own `GET /v1/acl/token/self` and
//! `POST /v1/acl/logout`. Tokens travel only in the `X-Consul-Token` header
//! and the login body, and come back into zeroizing buffers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::diagnose;
use crate::login::Refusal;
use crate::manager::ExchangeError;
use crate::vault_http::read_zeroizing;

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
            Some(s) => parse_rfc3339_ms(s).map(Some).ok_or_else(|| {
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
        let (status, answer) = match read(resp) {
            Ok(x) => x,
            Err(io) => return Err(diagnose::REACH.unreachable(&url, &io, self.ca_bundle_given)),
        };
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
    fn token_call(
        &self,
        url: &str,
        resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Zeroizing<Vec<u8>>, Refusal> {
        let (status, answer) = read(resp).map_err(|io| {
            Refusal::Other(diagnose::REACH.unreachable(url, &io, self.ca_bundle_given))
        })?;
        if (200..300).contains(&status) {
            return Ok(answer);
        }
        let said = said(&answer);
        if diagnose::token_gone(status, &said) {
            return Err(Refusal::TokenRefused(format!("HTTP {status}: {said}")));
        }
        Err(Refusal::Other(diagnose::token_call_refused(
            url, status, &said,
        )))
    }
}

fn read(
    resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> std::io::Result<(u16, Zeroizing<Vec<u8>>)> {
    let mut resp = resp.map_err(ureq::Error::into_io)?;
    let status = resp.status().as_u16();
    let body = read_zeroizing(resp.body_mut())?;
    Ok((status, body))
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

/// An RFC 3339 date and time (Go's `time.Time` in JSON:
/// `2024-05-01T12:00:00.123456789Z` or with an offset such as `+02:00`) as
/// Unix milliseconds; `None` for anything else.
pub(super) fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let sep = |at: usize, c: &[u8]| b.get(at).is_some_and(|x| c.contains(x));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, min, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    // 60: a leap second, as RFC 3339 allows.
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if sep(i, b".") {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        // The first three digits are milliseconds; the rest are dropped.
        for k in 0..3 {
            let d = b
                .get(start + k)
                .filter(|_| start + k < i)
                .map_or(0, |d| d - b'0');
            millis = millis * 10 + i64::from(d);
        }
    }
    let offset_secs = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() && sep(i + 3, b":") => {
            let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if sign == b'+' { o } else { -o }
        }
        _ => return None,
    };
    // Howard Hinnant's days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_secs;
    Some(secs * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_as_go_writes_them() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2024-05-01T12:00:00Z"),
            Some(1_714_564_800_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-05-01T12:00:00.123456789Z"),
            Some(1_714_564_800_123)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-05-01T12:00:00.5Z"),
            Some(1_714_564_800_500)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-05-01T14:00:00+02:00"),
            Some(1_714_564_800_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-05-01T07:30:00-04:30"),
            Some(1_714_564_800_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2000-02-29T00:00:00Z"),
            Some(951_782_400_000)
        );
        for bad in [
            "",
            "2024-05-01",
            "2024-05-01T12:00:00",
            "2024-13-01T12:00:00Z",
            "2024-05-01T12:00:00.Z",
            "2024-05-01T12:00:00Zjunk",
            "2024-05-01T12:00:00+2:00",
            "２０２４-05-01T12:00:00Z",
            "2024-05-01T12:00:00+99:00",
            "+024-05-01T12:00:00Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn consuls_answers_are_kept_to_one_short_line() {
        assert_eq!(said(b"ACL not found\n"), "ACL not found");
        let long = "x ".repeat(1000);
        let s = said(long.as_bytes());
        assert!(s.ends_with("(shortened)") && s.len() < 450, "{s}");
        assert_eq!(said(&[0xff, b'a']), "\u{fffd}a");
    }
}
