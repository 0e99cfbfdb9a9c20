//! The identity claim set, with Nomad's claim names.
//!
//! ```json
//! {"nomad_namespace":"default","nomad_job_id":"web","nomad_allocation_id":"5f8c…",
//!  "nomad_task":"server","sub":"global:default:web:frontend:server:default",
//!  "aud":"vault.io","iat":1700000000,"nbf":1700000000,"exp":1700003600,
//!  "jti":"0c5e…","iss":"https://nomad.example.com"}
//! ```
//!
//! `aud` is a string when there is one audience and an array when there are
//! several; `exp` is present only when the identity has a TTL; `iss` only when an
//! issuer is configured; exactly one of `nomad_task` and `nomad_service`;
//! `consul_namespace`, `vault_namespace` and `vault_role` (Nomad 2.x, after
//! `nomad_task`/`nomad_service`) only when not empty; `cnf`
//! in a WIT only; `extra_claims` (an object of strings, last) only when the
//! issuer's [`ExtraClaimsPolicy`](crate::profile::ExtraClaimsPolicy) gives the
//! identity some. With a [`SpiffeProfile`](crate::profile::SpiffeProfile),
//! `sub` is a SPIFFE ID instead of the form above.
//!
//! Parsing is strict: every claim has one JSON type (numeric dates must be
//! integers, never floats or strings), and a claim name that appears twice —
//! known or not — is an error. Unknown claims are otherwise ignored.

pub(crate) mod canonical;

mod encode;
mod json;
mod matching;

use std::collections::BTreeMap;

use crate::model::{IssueRequest, Workload};

/// The claims of a workload identity token.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Claims {
    /// `nomad_namespace`.
    pub namespace: String,
    /// `nomad_job_id`: the parent job's ID for child jobs.
    pub job_id: String,
    /// `nomad_allocation_id`.
    pub allocation_id: String,
    /// `nomad_task`, for a task identity.
    pub task: Option<String>,
    /// `nomad_service`, for a service identity.
    pub service: Option<String>,
    /// `consul_namespace`: a Consul identity's Consul namespace (see
    /// [`IssueRequest::consul_for_claims`]); empty, and left out of the
    /// token, otherwise.
    pub consul_namespace: String,
    /// `vault_namespace`: a Vault identity's Vault namespace (see
    /// [`IssueRequest::vault_for_claims`]); empty, and left out of the
    /// token, otherwise.
    pub vault_namespace: String,
    /// `vault_role`: a Vault identity's Vault role (see
    /// [`IssueRequest::vault_for_claims`]); empty, and left out of the
    /// token, otherwise.
    pub vault_role: String,
    /// `sub`: `<region>:<namespace>:<job>:<group>:<task or service>:<identity>`;
    /// a `wimse://` URI in a WIT; a SPIFFE ID from an issuer with a
    /// [`SpiffeProfile`](crate::profile::SpiffeProfile).
    pub subject: String,
    /// `aud`.
    pub audience: Vec<String>,
    /// `iat` (Unix seconds).
    pub issued_at: Option<i64>,
    /// `nbf` (Unix seconds).
    pub not_before: Option<i64>,
    /// `exp` (Unix seconds).
    pub expires_at: Option<i64>,
    /// `jti`: a UUID v4.
    pub jwt_id: String,
    /// `iss`, when an issuer is configured.
    pub issuer: Option<String>,
    /// `cnf.jwk`: the workload's public key, in a WIMSE workload identity
    /// token (WIT) only. Checked for form when parsed; whether it is a usable
    /// key is checked when a proof is verified against it.
    pub confirmation: Option<crate::model::ProofKey>,
    /// The node claims of a node identity token (`nomad_node_id`, ...):
    /// `Some` exactly when the token carries any of them. A node token has
    /// none of the allocation claims above (the verifier refuses a token
    /// with both kinds).
    pub node: Option<NodeClaims>,
    /// `extra_claims`: the operator's templated claims (Nomad 2.0.3's form,
    /// an object of strings), empty when the token has none. See
    /// [`ExtraClaimsPolicy`](crate::profile::ExtraClaimsPolicy).
    pub extra_claims: BTreeMap<String, String>,
}

/// The claims of a client node's identity token, with Nomad 1.11's names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct NodeClaims {
    /// `nomad_node_id`.
    pub node_id: String,
    /// `nomad_node_pool`.
    pub node_pool: String,
    /// `nomad_node_class`; empty (and left out of the token) when the node
    /// has none.
    pub node_class: String,
    /// `nomad_node_datacenter`.
    pub datacenter: String,
}

impl NodeClaims {
    /// The claims of `node`.
    pub fn of(node: &crate::model::Node) -> NodeClaims {
        NodeClaims {
            node_id: node.id.clone(),
            node_pool: node.node_pool.clone(),
            node_class: node.node_class.clone(),
            datacenter: node.datacenter.clone(),
        }
    }
}

/// What the manager expects of a token it did not sign itself: the `sub` and
/// extra claims its signer gives for a request (see
/// [`IdentitySigner::expected_claims`](crate::manager::IdentitySigner::expected_claims)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExpectedClaims {
    /// `sub`.
    pub subject: String,
    /// `extra_claims`.
    pub extra_claims: BTreeMap<String, String>,
}

impl ExpectedClaims {
    /// What a signer's token for a request carries: `subject` as `sub`, and
    /// exactly `extra_claims`.
    pub fn new(subject: String, extra_claims: BTreeMap<String, String>) -> ExpectedClaims {
        ExpectedClaims {
            subject,
            extra_claims,
        }
    }
}

/// The claims Nomad 2.x adds for Vault and Consul logins, in its order.
const EXCHANGE_CLAIMS: [&str; 3] = ["consul_namespace", "vault_namespace", "vault_role"];

/// The values of [`EXCHANGE_CLAIMS`] signing `req` gives (empty: left out).
fn exchange_claims(req: &IssueRequest) -> [&str; 3] {
    let consul = req.consul_for_claims().map_or("", |c| c.namespace.as_str());
    let (ns, role) = req
        .vault_for_claims()
        .map_or(("", ""), |v| (v.namespace.as_str(), v.role.as_str()));
    [consul, ns, role]
}

/// `sub`: `<region>:<namespace>:<job>:<group>:<task or service>:<identity>`.
pub(crate) fn nomad_subject(req: &IssueRequest, workload: Workload<'_>) -> String {
    subject_for(req, workload)
}

/// `sub`: `<region>:<namespace>:<job>:<group>:<task or service>:<identity>`.
fn subject_for(req: &IssueRequest, workload: Workload<'_>) -> String {
    subject_parts(req, workload).join(":")
}

/// The WIMSE workload identifier for `req` in trust domain `td`: the same six
/// parts as `sub`, as path segments of a `wimse://` URI.
pub(crate) fn workload_uri(td: &str, req: &IssueRequest) -> crate::error::Result<String> {
    let workload = req.workload()?;
    Ok(crate::pop::workload_uri(td, &subject_parts(req, workload)))
}

/// The six parts of a subject: region, namespace, job, group, task or
/// service, identity name.
fn subject_parts<'a>(req: &'a IssueRequest, workload: Workload<'a>) -> [&'a str; 6] {
    let a = &req.allocation;
    let (Workload::Task(name) | Workload::Service(name)) = workload;
    [
        &req.region,
        &a.namespace,
        a.identity_job_id(),
        &a.task_group,
        name,
        &req.identity.name,
    ]
}

/// A fresh `jti`: a random UUID v4, hyphenated, encoded straight into a
/// buffer (`to_string` would go through the formatting machinery).
pub(crate) fn fresh_jwt_id() -> String {
    uuid::Uuid::new_v4()
        .hyphenated()
        .encode_lower(&mut uuid::Uuid::encode_buffer())
        .to_owned()
}

impl Claims {
    /// The claims for `req` signed at `now`: `iat` = `nbf` = now, `exp` = now +
    /// TTL (whole seconds) when the TTL is positive, and a fresh `jti`.
    /// `req` must already be valid.
    pub(crate) fn for_request(
        req: &IssueRequest,
        workload: Workload<'_>,
        now: i64,
        issuer: Option<&str>,
        extra_claims: BTreeMap<String, String>,
    ) -> Claims {
        let a = &req.allocation;
        let job = a.identity_job_id();
        let ttl = req.identity.ttl.as_secs();
        let (task, service) = match workload {
            Workload::Task(t) => (Some(t.to_string()), None),
            Workload::Service(s) => (None, Some(s.to_string())),
        };
        let [consul_namespace, vault_namespace, vault_role] =
            exchange_claims(req).map(str::to_string);
        Claims {
            namespace: a.namespace.clone(),
            job_id: job.to_string(),
            allocation_id: a.id.clone(),
            subject: subject_for(req, workload),
            task,
            service,
            consul_namespace,
            vault_namespace,
            vault_role,
            audience: req.identity.audience.clone(),
            issued_at: Some(now),
            not_before: Some(now),
            expires_at: (ttl > 0).then(|| now.saturating_add(ttl)),
            jwt_id: fresh_jwt_id(),
            issuer: issuer.map(str::to_string),
            confirmation: None,
            node: None,
            extra_claims,
        }
    }

    /// Parses a token payload strictly: our own serializer's exact form by a
    /// straight scan, anything else by the serde parser (the same claims
    /// either way; see `canonical`).
    pub(crate) fn from_payload(json: &[u8]) -> Result<Claims, serde_json::Error> {
        match canonical::parse(json) {
            Some(claims) => Ok(claims),
            None => serde_json::from_slice(json),
        }
    }

    /// Calls `f` with the token payload: the claims as compact JSON. Written
    /// into a buffer the calling thread keeps for the next token (one
    /// allocation and free less per token); a buffer grown past 64 KiB by an
    /// outsized claim set is let go rather than kept.
    pub(crate) fn with_payload<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        const KEEP: usize = 64 * 1024;
        thread_local! {
            static PAYLOAD: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
        }
        // Taken out of the cell while in use, so a nested call (none today)
        // would get a fresh buffer rather than a borrow error.
        let mut buf = PAYLOAD.try_with(std::cell::Cell::take).unwrap_or_default();
        buf.clear();
        if buf.capacity() == 0 {
            buf.reserve(512);
        }
        self.write_json(&mut buf);
        let result = f(&buf);
        if buf.capacity() <= KEEP {
            let _ = PAYLOAD.try_with(|cell| cell.set(buf));
        }
        result
    }

    /// The claims as JSON (the token payload form).
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(512);
        self.write_json(&mut out);
        // Written from `&str`s and ASCII punctuation only: always UTF-8.
        String::from_utf8(out).unwrap_or_default()
    }
}
