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

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

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

/// A `sub` that is none of the forms the manager knows without its signer's
/// word, described for a message.
fn differs_sub(found: &str, want: &str) -> Option<String> {
    Some(format!(
        "its sub is {:?}, the request's is {:?} (or spiffe://<trust domain>/ and the same six parts); a signer that writes another sub must say which: IdentitySigner::expected_claims",
        crate::error::truncate_for_message(found),
        crate::error::truncate_for_message(want)
    ))
}

/// The first extra claim that differs between a token's (`have`) and what
/// signing gives (`want`), described for a message.
fn extra_claims_difference(
    have: &BTreeMap<String, String>,
    want: &BTreeMap<String, String>,
) -> Option<String> {
    let t = crate::error::truncate_for_message;
    for (name, w) in want {
        match have.get(name) {
            None => return Some(format!("it lacks extra claim {:?}", t(name))),
            Some(h) if h != w => {
                return Some(format!(
                    "its extra claim {:?} is {:?}, signing the request gives {:?}",
                    t(name),
                    t(h),
                    t(w)
                ));
            }
            Some(_) => {}
        }
    }
    have.keys()
        .find(|name| !want.contains_key(*name))
        .map(|name| {
            format!(
                "it has extra claim {:?}, which signing the request does not give",
                t(name)
            )
        })
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

impl Claims {
    /// The claims for `req` signed at `now`: `iat` = `nbf` = now, `exp` = now +
    /// TTL (whole seconds) when the TTL is positive, and a fresh `jti`.
    /// `req` must already be valid.
    pub(crate) fn for_request(
        req: &IssueRequest,
        workload: Workload<'_>,
        now: i64,
        issuer: Option<&str>,
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
            jwt_id: uuid::Uuid::new_v4().hyphenated().to_string(),
            issuer: issuer.map(str::to_string),
            confirmation: None,
            node: None,
            extra_claims: BTreeMap::new(),
        }
    }

    /// The first claim taken from `req` that these claims do not carry as
    /// signing `req` would (allocation, namespace, job, task or service, `sub`,
    /// `aud`, and with `expected` the extra claims), described for a message;
    /// `None` when all match. Times, `jti` and `iss` are not compared. Without
    /// `expected`, `sub` must be Nomad's form (a WIT's: `wimse://<any valid
    /// trust domain>/<path>`); with it, exactly `expected.subject`.
    pub(crate) fn mismatch(
        &self,
        req: &IssueRequest,
        expected: Option<&ExpectedClaims>,
    ) -> Option<String> {
        let Ok(workload) = req.workload() else {
            return Some("the request names no task or service".into());
        };
        let a = &req.allocation;
        let (task, service) = match workload {
            Workload::Task(t) => (Some(t), None),
            Workload::Service(s) => (None, Some(s)),
        };
        let differs = |claim: &str, found: &str, want: &str| {
            Some(format!(
                "its {claim} is {:?}, the request's is {:?}",
                crate::error::truncate_for_message(found),
                crate::error::truncate_for_message(want)
            ))
        };
        let opt = |o: Option<&str>| o.unwrap_or("(none)").to_string();
        if self.allocation_id != a.id {
            return differs(
                "allocation (nomad_allocation_id)",
                &self.allocation_id,
                &a.id,
            );
        }
        if self.namespace != a.namespace {
            return differs("nomad_namespace", &self.namespace, &a.namespace);
        }
        if self.job_id != a.identity_job_id() {
            return differs("nomad_job_id", &self.job_id, a.identity_job_id());
        }
        if self.task.as_deref() != task {
            return differs("nomad_task", &opt(self.task.as_deref()), &opt(task));
        }
        if self.service.as_deref() != service {
            return differs(
                "nomad_service",
                &opt(self.service.as_deref()),
                &opt(service),
            );
        }
        if let Some(e) = expected {
            // Taken from the request alone, but compared only with the
            // signer's word: a Nomad server adds the Vault claims only when
            // its own configuration has the identity's Vault cluster.
            let have = [
                &self.consul_namespace,
                &self.vault_namespace,
                &self.vault_role,
            ];
            for ((claim, have), want) in EXCHANGE_CLAIMS.iter().zip(have).zip(exchange_claims(req))
            {
                if have != want {
                    return differs(claim, have, want);
                }
            }
            if self.subject != e.subject {
                return differs("sub", &self.subject, &e.subject);
            }
            if let Some(why) = extra_claims_difference(&self.extra_claims, &e.extra_claims) {
                return Some(why);
            }
        }
        match &req.proof_key {
            None if expected.is_some() => {
                if self.confirmation.is_some() {
                    return Some("it carries cnf (a WIT), the request has no ProofKey".into());
                }
            }
            Some(key) if expected.is_some() => {
                if self.confirmation.as_ref() != Some(key) {
                    return Some("its cnf.jwk is not the request's ProofKey".into());
                }
            }
            None => {
                let sub = subject_for(req, workload);
                if self.subject != sub && !self.is_default_spiffe_id(req, workload) {
                    return differs_sub(&self.subject, &sub);
                }
                if self.confirmation.is_some() {
                    return Some("it carries cnf (a WIT), the request has no ProofKey".into());
                }
            }
            Some(key) => {
                // The trust domain is the issuer's (any valid one: the
                // manager does not know it); the path is the request's.
                let path = crate::pop::workload_uri("", &subject_parts(req, workload));
                let path = path.trim_start_matches("wimse://");
                let td = self
                    .subject
                    .strip_prefix("wimse://")
                    .and_then(|rest| rest.strip_suffix(path));
                if td.is_none_or(|td| crate::pop::trust_domain_problem(td).is_some())
                    && !self.is_default_spiffe_id(req, workload)
                {
                    return differs_sub(&self.subject, &format!("wimse://<trust domain>{path}"));
                }
                if self.confirmation.as_ref() != Some(key) {
                    return Some("its cnf.jwk is not the request's ProofKey".into());
                }
            }
        }
        // A WIT carries no aud (the WPT names each request's audience).
        let expected_aud: &[String] = match req.proof_key {
            Some(_) => &[],
            None => &req.identity.audience,
        };
        if self.audience != expected_aud {
            return Some(format!(
                "its aud is {:?}, expected {:?}{}",
                self.audience
                    .iter()
                    .map(|x| crate::error::truncate_for_message(x))
                    .collect::<Vec<_>>(),
                expected_aud,
                if req.proof_key.is_some() {
                    " (a WIT carries no aud)"
                } else {
                    ""
                }
            ));
        }
        None
    }

    /// Whether `sub` is `spiffe://<any valid trust domain>` followed by the
    /// default SPIFFE path for `req` (what an issuer with a
    /// [`SpiffeProfile`](crate::profile::SpiffeProfile) of the default path
    /// writes).
    fn is_default_spiffe_id(&self, req: &IssueRequest, workload: Workload<'_>) -> bool {
        let path = subject_parts(req, workload).join("/");
        self.subject
            .strip_prefix("spiffe://")
            .and_then(|rest| rest.strip_suffix(path.as_str()))
            .and_then(|td| td.strip_suffix('/'))
            .is_some_and(|td| {
                crate::profile::spiffe_id_problem(&self.subject).is_none()
                    && !td.is_empty()
                    && !td.contains('/')
            })
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

    /// The claims as JSON (the token payload form).
    pub fn to_json(&self) -> String {
        // Strings and integers only: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Serialize for Claims {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        // A node token has no allocation claims (unless a malformed one had
        // both: then both are written back, as read).
        let allocation = self.node.is_none()
            || !(self.namespace.is_empty()
                && self.job_id.is_empty()
                && self.allocation_id.is_empty());
        if allocation {
            m.serialize_entry("nomad_namespace", &self.namespace)?;
            m.serialize_entry("nomad_job_id", &self.job_id)?;
            m.serialize_entry("nomad_allocation_id", &self.allocation_id)?;
        }
        if let Some(n) = &self.node {
            m.serialize_entry("nomad_node_id", &n.node_id)?;
            m.serialize_entry("nomad_node_pool", &n.node_pool)?;
            if !n.node_class.is_empty() {
                m.serialize_entry("nomad_node_class", &n.node_class)?;
            }
            m.serialize_entry("nomad_node_datacenter", &n.datacenter)?;
        }
        if let Some(t) = &self.task {
            m.serialize_entry("nomad_task", t)?;
        }
        if let Some(svc) = &self.service {
            m.serialize_entry("nomad_service", svc)?;
        }
        // Nomad's order and names (WorkloadIdentityClaims), each omitted
        // when empty as Nomad's omitempty does.
        let values = [
            &self.consul_namespace,
            &self.vault_namespace,
            &self.vault_role,
        ];
        for (name, v) in EXCHANGE_CLAIMS.iter().zip(values) {
            if !v.is_empty() {
                m.serialize_entry(name, v)?;
            }
        }
        m.serialize_entry("sub", &self.subject)?;
        match self.audience.as_slice() {
            [] => {}
            [one] => m.serialize_entry("aud", one)?,
            many => m.serialize_entry("aud", many)?,
        }
        for (name, v) in [
            ("iat", self.issued_at),
            ("nbf", self.not_before),
            ("exp", self.expires_at),
        ] {
            if let Some(v) = v {
                m.serialize_entry(name, &v)?;
            }
        }
        m.serialize_entry("jti", &self.jwt_id)?;
        if let Some(iss) = &self.issuer {
            m.serialize_entry("iss", iss)?;
        }
        if let Some(key) = &self.confirmation {
            m.serialize_entry(
                "cnf",
                &Cnf {
                    jwk: CnfJwk::of(key),
                },
            )?;
        }
        if !self.extra_claims.is_empty() {
            m.serialize_entry("extra_claims", &self.extra_claims)?;
        }
        m.end()
    }
}

/// `cnf`: `{"jwk": {...}}`, nothing else.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cnf<'a> {
    #[serde(borrow)]
    jwk: CnfJwk<'a>,
}

/// `cnf.jwk`: a public JWK with its `alg`. Members other than these (a
/// private `d`, say) make the claim set invalid; each at most once.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CnfJwk<'a> {
    #[serde(borrow)]
    kty: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    crv: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    x: std::borrow::Cow<'a, str>,
    #[serde(borrow, default, skip_serializing_if = "str::is_empty")]
    y: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    alg: std::borrow::Cow<'a, str>,
}

impl<'a> CnfJwk<'a> {
    fn of(key: &'a crate::model::ProofKey) -> CnfJwk<'a> {
        CnfJwk {
            kty: key.kty.as_str().into(),
            crv: key.crv.as_str().into(),
            x: key.x.as_str().into(),
            y: key.y.as_str().into(),
            alg: key.alg.as_str().into(),
        }
    }

    fn into_key(self) -> crate::model::ProofKey {
        crate::model::ProofKey {
            alg: self.alg.into_owned(),
            crv: self.crv.into_owned(),
            kty: self.kty.into_owned(),
            x: self.x.into_owned(),
            y: self.y.into_owned(),
        }
    }
}

/// `aud`: a string or an array of strings. Read by a visitor of its own (an
/// untagged enum would buffer the value and try each form in turn).
enum Aud {
    One(String),
    Many(Vec<String>),
}

impl<'de> Deserialize<'de> for Aud {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Aud, D::Error> {
        struct AudVisitor;
        impl<'de> Visitor<'de> for AudVisitor {
            type Value = Aud;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Aud, E> {
                Ok(Aud::One(v.to_string()))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Aud, E> {
                Ok(Aud::One(v))
            }

            fn visit_seq<S: de::SeqAccess<'de>>(self, mut seq: S) -> Result<Aud, S::Error> {
                let mut all = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(16));
                while let Some(a) = seq.next_element::<String>()? {
                    all.push(a);
                }
                Ok(Aud::Many(all))
            }
        }
        d.deserialize_any(AudVisitor)
    }
}

impl<'de> Deserialize<'de> for Claims {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Claims, D::Error> {
        d.deserialize_map(ClaimsVisitor)
    }
}

struct ClaimsVisitor;

fn set<T, E: de::Error>(slot: &mut Option<T>, name: &str, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::custom(format_args!("duplicate claim {name:?}")));
    }
    *slot = Some(value);
    Ok(())
}

impl<'de> Visitor<'de> for ClaimsVisitor {
    type Value = Claims;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of claims")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Claims, A::Error> {
        let mut ns = None;
        let mut job = None;
        let mut alloc = None;
        let mut task = None;
        let mut service = None;
        let mut consul_ns = None;
        let mut vault_ns = None;
        let mut vault_role = None;
        let mut sub = None;
        let mut aud = None;
        let mut iat = None;
        let mut nbf = None;
        let mut exp = None;
        let mut jti = None;
        let mut iss = None;
        let mut cnf = None;
        let mut extra: Option<ExtraClaims> = None;
        let mut node_id = None;
        let mut node_pool = None;
        let mut node_class = None;
        let mut node_dc = None;
        let mut others: Vec<String> = Vec::new();
        // Numeric dates: integers only (a float or a string is an error).
        fn date<'de, A: MapAccess<'de>>(map: &mut A, name: &str) -> Result<i64, A::Error> {
            map.next_value::<i64>().map_err(|e| {
                de::Error::custom(format_args!(
                    "claim {name:?} must be an integer number of seconds: {e}"
                ))
            })
        }
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let k = key.as_ref();
            match k {
                "nomad_namespace" => set(&mut ns, k, map.next_value::<String>()?)?,
                "nomad_job_id" => set(&mut job, k, map.next_value::<String>()?)?,
                "nomad_allocation_id" => set(&mut alloc, k, map.next_value::<String>()?)?,
                "nomad_task" => set(&mut task, k, map.next_value::<String>()?)?,
                "nomad_service" => set(&mut service, k, map.next_value::<String>()?)?,
                "consul_namespace" => set(&mut consul_ns, k, map.next_value::<String>()?)?,
                "vault_namespace" => set(&mut vault_ns, k, map.next_value::<String>()?)?,
                "vault_role" => set(&mut vault_role, k, map.next_value::<String>()?)?,
                "nomad_node_id" => set(&mut node_id, k, map.next_value::<String>()?)?,
                "nomad_node_pool" => set(&mut node_pool, k, map.next_value::<String>()?)?,
                "nomad_node_class" => set(&mut node_class, k, map.next_value::<String>()?)?,
                "nomad_node_datacenter" => set(&mut node_dc, k, map.next_value::<String>()?)?,
                "sub" => set(&mut sub, k, map.next_value::<String>()?)?,
                "aud" => set(&mut aud, k, map.next_value::<Aud>()?)?,
                "iat" => set(&mut iat, k, date(&mut map, k)?)?,
                "nbf" => set(&mut nbf, k, date(&mut map, k)?)?,
                "exp" => set(&mut exp, k, date(&mut map, k)?)?,
                "jti" => set(&mut jti, k, map.next_value::<String>()?)?,
                "iss" => set(&mut iss, k, map.next_value::<String>()?)?,
                "cnf" => {
                    let c: Cnf<'_> = map.next_value().map_err(|e| {
                        de::Error::custom(format_args!(
                            "claim \"cnf\" must be {{\"jwk\":{{kty, crv, x, y, alg}}}}, a public key only: {e}"
                        ))
                    })?;
                    set(&mut cnf, k, c.jwk.into_key())?
                }
                "extra_claims" => {
                    let e: ExtraClaims = map.next_value().map_err(|e| {
                        de::Error::custom(format_args!(
                            "claim \"extra_claims\" must be an object of strings, each name once: {e}"
                        ))
                    })?;
                    set(&mut extra, k, e)?
                }
                other => {
                    if others.iter().any(|o| o == other) {
                        return Err(de::Error::custom(format_args!("duplicate claim {other:?}")));
                    }
                    others.push(other.to_string());
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Claims {
            namespace: ns.unwrap_or_default(),
            job_id: job.unwrap_or_default(),
            allocation_id: alloc.unwrap_or_default(),
            task,
            service,
            consul_namespace: consul_ns.unwrap_or_default(),
            vault_namespace: vault_ns.unwrap_or_default(),
            vault_role: vault_role.unwrap_or_default(),
            subject: sub.unwrap_or_default(),
            audience: match aud {
                None => Vec::new(),
                Some(Aud::One(a)) => vec![a],
                Some(Aud::Many(v)) => v,
            },
            issued_at: iat,
            not_before: nbf,
            expires_at: exp,
            jwt_id: jti.unwrap_or_default(),
            issuer: iss,
            confirmation: cnf,
            node: (node_id.is_some()
                || node_pool.is_some()
                || node_class.is_some()
                || node_dc.is_some())
            .then(|| NodeClaims {
                node_id: node_id.unwrap_or_default(),
                node_pool: node_pool.unwrap_or_default(),
                node_class: node_class.unwrap_or_default(),
                datacenter: node_dc.unwrap_or_default(),
            }),
            extra_claims: extra.map(|e| e.0).unwrap_or_default(),
        })
    }
}

/// `extra_claims`: an object of strings, each name once.
struct ExtraClaims(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for ExtraClaims {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ExtraClaims, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ExtraClaims;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ExtraClaims, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(k) = map.next_key::<String>()? {
                    if out.contains_key(&k) {
                        return Err(de::Error::custom(format_args!(
                            "duplicate name {:?}",
                            crate::error::truncate_for_message(&k)
                        )));
                    }
                    let v = map.next_value::<String>()?;
                    out.insert(k, v);
                }
                Ok(ExtraClaims(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Claims, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn a_wit_matches_its_request_only_with_one_valid_trust_domain_before_the_path() {
        let mut req = crate::model::IssueRequest {
            region: "global".into(),
            task: "server".into(),
            ..Default::default()
        };
        req.allocation.id = "a1".into();
        req.allocation.namespace = "default".into();
        req.allocation.job_id = "web".into();
        req.allocation.task_group = "g".into();
        req.identity.name = "default".into();
        req.proof_key = Some(crate::model::ProofKey {
            alg: "EdDSA".into(),
            ..Default::default()
        });
        let mut c = Claims::for_request(&req, req.workload().unwrap(), 1, None);
        c.confirmation = req.proof_key.clone();
        for (sub, ok) in [
            (
                "wimse://td.example/global/default/web/g/server/default",
                true,
            ),
            (
                "wimse://evil.example/extra/global/default/web/g/server/default",
                false,
            ),
            ("wimse:///global/default/web/g/server/default", false),
            ("global:default:web:g:server:default", false),
            (
                "spiffe://td.example/global/default/web/g/server/default",
                true,
            ),
            (
                "spiffe://td.example/x/global/default/web/g/server/default",
                false,
            ),
            ("spiffe://TD/global/default/web/g/server/default", false),
        ] {
            c.subject = sub.into();
            assert_eq!(
                c.mismatch(&req, None).is_none(),
                ok,
                "{sub}: {:?}",
                c.mismatch(&req, None)
            );
        }
        c.subject = "wimse://td.example/global/default/web/g/server/default".into();
        c.confirmation = None;
        assert!(c.mismatch(&req, None).unwrap().contains("cnf"));
    }

    #[test]
    fn the_exchange_claims_are_compared_only_with_the_signers_word() {
        let mut req = crate::model::IssueRequest {
            region: "global".into(),
            task: "server".into(),
            ..Default::default()
        };
        req.allocation.id = "a1".into();
        req.allocation.namespace = "default".into();
        req.allocation.job_id = "web".into();
        req.allocation.task_group = "g".into();
        req.identity.name = "vault_default".into();
        req.vault = Some(crate::model::Vault {
            role: "r".into(),
            namespace: "ns".into(),
            ..Default::default()
        });
        let c = Claims::for_request(&req, req.workload().unwrap(), 1, None);
        assert_eq!(
            (c.vault_role.as_str(), c.vault_namespace.as_str()),
            ("r", "ns")
        );
        let expected = ExpectedClaims::new(c.subject.clone(), BTreeMap::new());
        assert_eq!(c.mismatch(&req, Some(&expected)), None);
        // A token without them (a Nomad server with no such Vault cluster
        // configured signs none) is still the request's when the signer
        // (a host's RPC) does not say what it writes...
        let mut without = c.clone();
        without.vault_role.clear();
        assert_eq!(without.mismatch(&req, None), None);
        // ... but not when it does (our Issuer).
        let why = without.mismatch(&req, Some(&expected)).unwrap();
        assert!(why.contains("vault_role") && why.contains("\"r\""), "{why}");
        let mut other = c.clone();
        other.consul_namespace = "c".into();
        let why = other.mismatch(&req, Some(&expected)).unwrap();
        assert!(why.contains("consul_namespace"), "{why}");
    }

    #[test]
    fn audience_is_a_string_when_one_and_an_array_when_several() {
        let mut c = Claims {
            audience: vec!["vault.io".into()],
            ..Claims::default()
        };
        assert!(
            c.to_json().contains("\"aud\":\"vault.io\""),
            "{}",
            c.to_json()
        );
        c.audience.push("consul.io".into());
        assert!(c.to_json().contains("\"aud\":[\"vault.io\",\"consul.io\"]"));
        c.audience.clear();
        assert!(!c.to_json().contains("aud"));
    }

    #[test]
    fn round_trips() {
        let c = Claims {
            namespace: "default".into(),
            job_id: "web".into(),
            allocation_id: "a1".into(),
            task: Some("server".into()),
            service: None,
            consul_namespace: String::new(),
            vault_namespace: "ns1/team".into(),
            vault_role: "web".into(),
            subject: "global:default:web:g:server:default".into(),
            audience: vec!["a".into(), "b".into()],
            issued_at: Some(10),
            not_before: Some(10),
            expires_at: Some(70),
            jwt_id: "j".into(),
            issuer: Some("https://x".into()),
            confirmation: None,
            node: None,
            extra_claims: [("unique_id".to_string(), "default:web".to_string())]
                .into_iter()
                .collect(),
        };
        assert_eq!(parse(&c.to_json()).unwrap(), c);
    }

    #[test]
    fn node_tokens_round_trip_without_allocation_claims() {
        let c = Claims {
            node: Some(NodeClaims {
                node_id: "n1".into(),
                node_pool: "default".into(),
                node_class: String::new(),
                datacenter: "dc1".into(),
            }),
            subject: "node:global:default:n1:default".into(),
            audience: vec!["nomadproject.io".into()],
            jwt_id: "j".into(),
            ..Claims::default()
        };
        let json = c.to_json();
        assert!(
            json.starts_with(r#"{"nomad_node_id":"n1","nomad_node_pool":"default","nomad_node_datacenter":"dc1","sub":"#),
            "{json}"
        );
        assert!(!json.contains("nomad_namespace") && !json.contains("nomad_node_class"));
        assert_eq!(parse(&json).unwrap(), c);
        assert_eq!(
            canonical::parse(json.as_bytes()),
            None,
            "node tokens take serde"
        );
        // Any node claim makes it a node token's claims.
        assert!(
            parse(r#"{"nomad_node_class":"gpu"}"#)
                .unwrap()
                .node
                .is_some()
        );
        assert!(
            parse(r#"{"nomad_allocation_id":"a"}"#)
                .unwrap()
                .node
                .is_none()
        );
    }

    #[test]
    fn strict_types_and_no_duplicates() {
        for (json, why) in [
            (r#"{"exp":"100"}"#, "must be an integer"),
            (r#"{"exp":100.0}"#, "must be an integer"),
            (r#"{"exp":1.5}"#, "must be an integer"),
            (r#"{"iat":1e3}"#, "must be an integer"),
            (r#"{"nbf":18446744073709551615}"#, "must be an integer"),
            (r#"{"sub":"a","sub":"b"}"#, "duplicate claim \"sub\""),
            (r#"{"x":1,"x":2}"#, "duplicate claim \"x\""),
            (r#"{"aud":5}"#, ""),
            (r#"{"aud":["a",5]}"#, ""),
            (r#"{"extra_claims":{"a":1}}"#, "object of strings"),
            (r#"{"extra_claims":["a"]}"#, "object of strings"),
            (
                r#"{"extra_claims":{"a":"x","a":"y"}}"#,
                "duplicate name \"a\"",
            ),
            (
                r#"{"extra_claims":{},"extra_claims":{}}"#,
                "duplicate claim",
            ),
            (r#"[]"#, ""),
        ] {
            let e = parse(json).unwrap_err().to_string();
            assert!(e.contains(why), "{json}: {e}");
        }
        let c = parse(r#"{"aud":"x","extra":{"deep":[1,2]},"exp":-5}"#).unwrap();
        assert_eq!(c.audience, ["x"]);
        assert_eq!(c.expires_at, Some(-5));
    }
}
