//! What a refused login or token call means, in Vault's own words plus what
//! to check. The texts matched are OpenBao's and Vault's JWT auth method's
//! (`path_login.go`) and token store's; an answer that matches none is
//! reported as it came.

use crate::manager::ExchangeError;

/// How Vault is named when it cannot be reached.
pub(super) const REACH: crate::login::Reach = crate::login::Reach {
    kind: "Vault login",
    server: "Vault",
    builder: "VaultLoginBuilder",
    down: "server is down",
};

/// What was wrong with a login that Vault refused with `status` and `said`
/// (its `errors`, joined).
pub(super) fn login_refused(url: &str, role: &str, status: u16, said: &str) -> ExchangeError {
    let what = what_was_wrong(role, status, &said.to_ascii_lowercase());
    REACH.refused(url, &format!("as role {role:?}"), what, status, said)
}

/// What was wrong with a login as role `role` that Vault refused with
/// `status` and `lower` (its error text in lower case); `None`: nothing
/// recognised.
fn what_was_wrong(role: &str, status: u16, lower: &str) -> Option<String> {
    let has = |needle: &str| lower.contains(needle);
    let what = if has("could not be found") && has("role") {
        format!("the role is wrong: there is no role {role:?} on this mount")
    } else if has("missing role") {
        "the role is missing".to_string()
    } else if has("role_type") {
        format!(
            "the role is wrong: role {role:?} is an OIDC role; logins with a JWT need role_type \"jwt\""
        )
    } else if has("missing token") {
        "the identity token was not sent (an empty token)".to_string()
    } else if has("invalid audience") {
        format!(
            "the audience is wrong: the identity's aud matches none of role {role:?}'s bound_audiences"
        )
    } else if has("error validating claims") {
        format!(
            "a bound claim is wrong: the identity's claims do not satisfy role {role:?}'s bound_claims"
        )
    } else if has("not found in token") {
        format!("role {role:?}'s user_claim names a claim the identity does not carry")
    } else if has("(exp)") || has("(nbf)") || has("(iat)") {
        "the identity token's times are wrong: it is expired or not yet valid (check the clocks and the identity's TTL)".to_string()
    } else if has("(iss)") {
        "the issuer is wrong: the token's iss is not the auth method's bound_issuer".to_string()
    } else if has("(sub)") {
        format!("the subject is wrong: the token's sub is not role {role:?}'s bound_subject")
    } else if has("(alg)") {
        "the algorithm is wrong: the token's alg is not in the auth method's jwt_supported_algs"
            .to_string()
    } else if has("fetching keys") {
        "Vault cannot fetch the JWKS to check the token's key: is the auth method's jwks_url (or discovery URL) reachable from Vault?".to_string()
    } else if has("signature") {
        "the signing key is not one Vault knows (or the token was altered): check the auth method's jwks_url, oidc_discovery_url or jwt_validation_pubkeys".to_string()
    } else if has("could not load configuration") {
        "the JWT auth method at this mount is not configured (write its config first)".to_string()
    } else if status == 403 || status == 404 {
        "the mount is wrong: no JWT auth method answers at this path".to_string()
    } else if status == 503 || has("sealed") {
        "Vault is unavailable (sealed or in standby)".to_string()
    } else {
        return None;
    };
    Some(what)
}

/// Whether a token call's refusal was of the token itself (expired,
/// revoked, unknown, not renewable): then `Some(why)`.
pub(super) fn token_refusal(status: u16, said: &str) -> Option<String> {
    // Vault answers an expired, revoked or unknown token with a bare 403
    // "permission denied" (the three cannot be told apart), and a token it
    // will not renew (a batch token, renewal switched off) with a 400.
    if status == 403 || status == 400 {
        return Some(format!("HTTP {status}: {said}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OpenBao 2.7's own texts (each seen on a real server) name the part
    /// that was wrong.
    #[test]
    fn each_of_openbaos_refusals_names_what_was_wrong() {
        crate::login::check_refusals("vault.json", |status, said| {
            login_refused("https://v:8200/v1/auth/jwt/login", "web", status, said)
        });
        assert!(token_refusal(403, "permission denied").is_some());
        assert!(token_refusal(400, "lease is not renewable").is_some());
        assert!(token_refusal(400, "batch tokens cannot be renewed").is_some());
        assert!(token_refusal(500, "internal error").is_none());
        assert!(token_refusal(503, "Vault is sealed").is_none());
    }
}
