//! Proof of possession: WIMSE workload identity tokens (WIT) bound to a key
//! the workload holds, and workload proof tokens (WPT) made with that key for
//! one request each (draft-ietf-wimse-workload-creds, draft-ietf-wimse-wpt).
//!
//! * The workload makes its own key pair ([`WorkloadKey`], Ed25519 or P-256)
//!   and sends only the public half with its request ([`crate::model::ProofKey`]).
//! * The issuer signs a WIT: header `typ` `wit+jwt`, the usual Nomad claims,
//!   `sub` a workload identifier URI `wimse://<trust domain>/<region>/<namespace>/<job>/<group>/<task or service>/<identity>`,
//!   a required `exp`, and `cnf.jwk` the workload's public key with its `alg`.
//! * For each request the workload makes a WPT with its private key
//!   ([`WorkloadKey::prove`]): header `typ` `wpt+jwt`, claims `aud` (the
//!   target URI without query or fragment), `exp`, a `jti` of 128 random bits,
//!   `wth` (the WIT's hash) and, when the request carries them, `ath`, `tth`
//!   and `oth` (hashes of an access token, a transaction token, other tokens).
//! * The receiver ([`crate::Verifier::verify_proof`]) checks the WIT through
//!   the whole pipeline (signature, times, audience, issuer, live allocation),
//!   then the WPT against the WIT's `cnf.jwk`, and remembers its `jti` until it
//!   expires, so each proof is accepted once.
//!
//! A WIT is never a bearer token: [`crate::Verifier::verify`] refuses one
//! (`PROOF_REQUIRED`), and a verifier built with `require_proof(true)` refuses
//! bearer tokens too.

mod bound;
mod key_cache;
mod replay;
mod workload_key;
pub(crate) mod wpt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

pub(crate) use bound::BoundTokens;
pub(crate) use key_cache::{KeyCache, PROOF_KEYS};
pub(crate) use replay::ReplayCache;
pub use workload_key::{DEFAULT_PROOF_TTL, ProofOptions, WorkloadKey};

/// `base64url(SHA-256(value))` without padding: `wth`, `ath`, `tth`, `oth`.
pub(crate) fn token_hash(value: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(value.as_bytes()))
}

/// The target URI as a WPT's `aud` carries it: without query or fragment.
pub(crate) fn target_of(uri: &str) -> &str {
    let end = uri.find(['?', '#']).unwrap_or(uri.len());
    &uri[..end]
}

/// Percent-encodes a path segment: RFC 3986 unreserved characters stay,
/// every other byte becomes `%XX`.
fn path_segment(s: &str, out: &mut String) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// The workload identifier URI for a WIT:
/// `wimse://<trust domain>/<segments...>`, each segment percent-encoded.
pub(crate) fn workload_uri(trust_domain: &str, segments: &[&str]) -> String {
    let mut uri = format!("wimse://{trust_domain}");
    for s in segments {
        uri.push('/');
        path_segment(s, &mut uri);
    }
    uri
}

/// Why `td` cannot be a trust domain (a DNS-style name: lower-case letters,
/// digits, `-` and `.`, 1 to 253 characters, no empty label), if it cannot.
pub(crate) fn trust_domain_problem(td: &str) -> Option<String> {
    if td.is_empty() || td.len() > 253 {
        return Some(format!("is {} characters; expected 1 to 253", td.len()));
    }
    if let Some(c) = td
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return Some(format!(
            "contains {c:?}; expected lower-case letters, digits, '-' and '.' (a DNS name)"
        ));
    }
    if td
        .split('.')
        .any(|label| label.is_empty() || label.starts_with('-') || label.ends_with('-'))
    {
        return Some("has an empty label or one that starts or ends with '-'".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_uris_percent_encode_each_segment() {
        assert_eq!(
            workload_uri(
                "example.org",
                &["global", "default", "web", "g", "server", "vault_default"]
            ),
            "wimse://example.org/global/default/web/g/server/vault_default"
        );
        assert_eq!(
            workload_uri("example.org", &["a/b", "c d", "é"]),
            "wimse://example.org/a%2Fb/c%20d/%C3%A9"
        );
    }

    #[test]
    fn trust_domains_are_dns_names() {
        assert_eq!(trust_domain_problem("example.org"), None);
        assert_eq!(trust_domain_problem("prod-1.nomad.internal"), None);
        for bad in ["", "Example.org", "a..b", "-a.b", "a_b", "wimse://x", "a/b"] {
            assert!(trust_domain_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn targets_drop_query_and_fragment() {
        assert_eq!(
            target_of("https://svc.example/api/v1?x=1#f"),
            "https://svc.example/api/v1"
        );
        assert_eq!(
            target_of("https://svc.example/a#f?x"),
            "https://svc.example/a"
        );
        assert_eq!(target_of("https://svc.example/"), "https://svc.example/");
    }

    #[test]
    fn token_hashes_are_unpadded_base64url_sha256() {
        // SHA-256("abc"), RFC 6234's test vector.
        assert_eq!(
            token_hash("abc"),
            "ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0"
        );
    }
}
