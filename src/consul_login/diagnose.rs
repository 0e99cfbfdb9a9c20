//! What a refused Consul login or token call means, in Consul's own words
//! plus what to check. Consul answers errors as text/plain bodies; the texts
//! matched are Consul's own: `acl/errors.go` ("ACL not found", "Permission
//! denied", "ACL support disabled"), the login endpoint ("auth method %q not
//! found"), and the JWT auth method's checks (`internal/go-sso/oidcauth`:
//! "aud claim does not match any bound audience", go-jose's "invalid issuer
//! claim (iss)", "token is expired (exp)", "token not valid yet (nbf)",
//! go-oidc's "failed to verify id token signature" and "fetching keys", "no
//! known key successfully validated the token signature"). An answer that
//! matches none is reported as it came.

use crate::manager::ExchangeError;

/// How Consul is named when it cannot be reached.
pub(super) const REACH: crate::login::Reach = crate::login::Reach {
    kind: "Consul login",
    server: "Consul",
    builder: "ConsulLoginBuilder",
    down: "agent is down",
};

/// Consul's answer when ACLs are off (its `aclDisabled`: HTTP 401).
fn acl_disabled(status: u16, lower: &str) -> bool {
    status == 401 && lower.contains("acl support disabled")
}

const ACLS_DISABLED: &str = "ACLs are disabled on this Consul agent (its acl.enabled is false): there is no auth method to log in to and no token to get; enable ACLs (and bootstrap them), or do not configure a Consul login for this cluster";

/// What was wrong with a login that Consul refused with `status` and `said`
/// (its error text).
pub(super) fn login_refused(url: &str, method: &str, status: u16, said: &str) -> ExchangeError {
    let what = what_was_wrong(method, status, &said.to_ascii_lowercase());
    REACH.refused(
        url,
        &format!("with auth method {method:?}"),
        what,
        status,
        said,
    )
}

/// What was wrong with a login as method `method` that Consul refused with
/// `status` and `lower` (its error text in lower case); `None`: nothing
/// recognised.
fn what_was_wrong(method: &str, status: u16, lower: &str) -> Option<String> {
    let has = |needle: &str| lower.contains(needle);
    let what = if acl_disabled(status, lower) {
        ACLS_DISABLED.to_string()
    } else if status == 403 && has("acl not found") && has("auth method") {
        format!(
            "the auth method is wrong: Consul has no auth method {method:?} (in this namespace and partition)"
        )
    } else if status == 403 && has("permission denied") {
        format!(
            "no binding rule matched: the identity's claims satisfy no Selector of auth method {method:?}'s binding rules (or the rules that match bind a role or policy that does not exist), so Consul made no token"
        )
    } else if has("aud claim does not match") || has("audience claim found") || has("(aud)") {
        format!(
            "the audience is wrong: the identity's aud matches none of auth method {method:?}'s BoundAudiences"
        )
    } else if has("(iss)") {
        format!(
            "the issuer is wrong: the identity's iss is not auth method {method:?}'s BoundIssuer"
        )
    } else if has("(exp)") {
        "the identity token's times are wrong: Consul finds it expired (check the clocks, the identity's TTL and the auth method's ClockSkewLeeway)".to_string()
    } else if has("(nbf)") || has("(iat)") {
        "the identity token's times are wrong: Consul finds it not yet valid (check the clocks and the auth method's ClockSkewLeeway)".to_string()
    } else if has("no issue time, notbefore, or expiration time") {
        "the identity token carries none of iat, nbf and exp, which Consul requires".to_string()
    } else if has("unsupported algorithm") || has("(alg)") {
        format!(
            "the algorithm is wrong: the identity's alg is not in auth method {method:?}'s JWTSupportedAlgs"
        )
    } else if has("fetching keys") || has("get keys failed") {
        format!(
            "Consul cannot fetch the JWKS to check the token's key: is auth method {method:?}'s JWKSURL (or OIDCDiscoveryURL) reachable from Consul's servers, and its JWKSCACert right?"
        )
    } else if has("signature") {
        format!(
            "the signature is wrong: the signing key is not one auth method {method:?} knows (or the token was altered): check its JWKSURL, OIDCDiscoveryURL or JWTValidationPubKeys"
        )
    } else if has("missing jwt") || has("missing auth") {
        "the identity token was not sent (an empty BearerToken)".to_string()
    } else if status == 404 && has("invalid url path") {
        "the address is wrong: the server there is not a Consul agent's HTTP API".to_string()
    } else if status == 429 {
        "Consul is rate limiting requests; the login is retried".to_string()
    } else if has("no cluster leader") || has("no path to datacenter") || status == 503 {
        "Consul is unavailable (no cluster leader, or the datacenter is unreachable)".to_string()
    } else {
        return None;
    };
    Some(what)
}

/// Whether a token call's refusal means Consul no longer knows the token
/// (403 "ACL not found": deleted, logged out, or expired).
pub(super) fn token_gone(status: u16, said: &str) -> bool {
    status == 403 && said.to_ascii_lowercase().contains("acl not found")
}

/// A token call refused for another reason than the token being gone.
pub(super) fn token_call_refused(url: &str, status: u16, said: &str) -> ExchangeError {
    let lower = said.to_ascii_lowercase();
    let what = if acl_disabled(status, &lower) {
        ACLS_DISABLED
    } else if status == 403 && lower.contains("permission denied") {
        "Consul refused the token (it was not made by a login, or lacks the permission asked)"
    } else if status == 404 && lower.contains("invalid url path") {
        "the address is wrong: the server there is not a Consul agent's HTTP API"
    } else {
        "the call was refused"
    };
    let said = if said.is_empty() {
        "no error text"
    } else {
        said
    };
    ExchangeError(format!("{url}: {what} (HTTP {status}: {said})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Consul's own texts (from its source: the HTTP layer's status for
    /// each error type, and the JWT auth method's messages) name the part
    /// that was wrong, and Consul's words are kept.
    #[test]
    fn each_of_consuls_refusals_names_what_was_wrong() {
        crate::login::check_refusals("consul.json", |status, said| {
            login_refused(
                "https://c:8501/v1/acl/login",
                "nomad-workloads",
                status,
                said,
            )
        });
        // 401 without Consul's text is not read as ACLs disabled.
        let e = login_refused("u", "m", 401, "");
        assert!(!e.0.contains("ACLs are disabled"), "{e}");
        assert!(e.0.contains("no error text"), "{e}");
    }

    #[test]
    fn only_acl_not_found_means_the_token_is_gone() {
        assert!(token_gone(403, "ACL not found"));
        assert!(!token_gone(
            403,
            "Permission denied: token wasn't created via login"
        ));
        assert!(!token_gone(401, "ACL support disabled"));
        assert!(!token_gone(500, "ACL not found"));
        let e = token_call_refused("u", 401, "ACL support disabled");
        assert!(e.0.contains("ACLs are disabled"), "{e}");
        let e = token_call_refused("u", 500, "rpc error");
        assert!(e.0.contains("rpc error") && e.0.contains("HTTP 500"), "{e}");
    }
}
