//! Templated extra claims, set per namespace by the operator (Nomad 2.0.3).

use std::collections::BTreeMap;

use super::template::Template;
use crate::error::{Error, Result, truncate_for_message};
use crate::model::IssueRequest;

/// The longest value of one extra claim, in bytes, once rendered.
pub const MAX_EXTRA_CLAIM_VALUE_BYTES: usize = 1024;

/// The most extra claims one namespace may define (required and optional
/// together), so the most one token can carry.
pub const MAX_EXTRA_CLAIMS: usize = 32;

/// The namespace name whose claims every namespace has (as Nomad's
/// server-wide `vault.default_identity.extra_claims`).
pub const EVERY_NAMESPACE: &str = "*";

/// The most bytes a token's `extra_claims` object may take, as JSON: tokens
/// stay well under verifiers' 8 KiB default cap.
pub const MAX_EXTRA_CLAIMS_JSON_BYTES: usize = 4096;

/// Nomad's namespace name rule, `^[a-zA-Z0-9-]{1,128}$`.
fn valid_namespace(ns: &str) -> bool {
    (1..=128).contains(&ns.len()) && ns.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The longest extra claim name, in bytes.
const MAX_NAME_BYTES: usize = 64;

/// Names an extra claim may never take, compared without regard to case:
/// the registered JWT claims (RFC 7519), the claims of RFC 7800, OAuth and
/// OpenID Connect that relying parties act on, the WIMSE proof claims, every
/// claim this library or Nomad sets itself (and Nomad's `nomad_` prefix).
const RESERVED: [&str; 27] = [
    "iss",
    "sub",
    "aud",
    "exp",
    "nbf",
    "iat",
    "jti",
    "cnf",
    "azp",
    "nonce",
    "scope",
    "scp",
    "client_id",
    "act",
    "may_act",
    "auth_time",
    "acr",
    "amr",
    "sid",
    "wth",
    "ath",
    "tth",
    "oth",
    "extra_claims",
    "vault_role",
    "vault_namespace",
    "consul_namespace",
];

/// Why `name` cannot be an extra claim's name, if it cannot.
pub(crate) fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Some(format!(
            "is {} bytes; expected 1 to {MAX_NAME_BYTES}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Some(format!(
            "contains {c:?}; a claim name has letters, digits, '_', '-' and '.' only"
        ));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED.contains(&lower.as_str()) || lower.starts_with("nomad_") {
        return Some(
            "is reserved: it is a registered JWT claim, one a relying party acts on, or one this library or Nomad sets (every nomad_ name)"
                .into(),
        );
    }
    None
}

/// The extra claims of one namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct NamespaceClaims {
    /// In every identity of the namespace.
    required: BTreeMap<String, Template>,
    /// In an identity that names them (`WorkloadIdentity::extra_claims`).
    optional: BTreeMap<String, Template>,
}

/// Which extra claims identities carry, per namespace: Nomad 2.0.3's
/// `required_extra_claims` (in every identity of the namespace) and
/// `optional_extra_claims` (in an identity whose
/// [`extra_claims`](crate::model::WorkloadIdentity::extra_claims) names
/// them). The namespace [`EVERY_NAMESPACE`] (`"*"`) gives its claims to
/// every namespace, beside the namespace's own. Values are templates over the request (the
/// variables are listed in [`profile`](crate::profile)). Following Nomad, a token carries them
/// in one claim, `extra_claims`, an object of strings (a relying party reads
/// `/extra_claims/<name>`).
///
/// At issue, an identity that names a claim its namespace does not offer,
/// a template whose field the request lacks, or a value over
/// [`MAX_EXTRA_CLAIM_VALUE_BYTES`] is refused with the claim and field named.
///
/// ```
/// use workload_identity::profile::ExtraClaimsPolicy;
///
/// let policy = ExtraClaimsPolicy::new()
///     .require("default", "unique_id", "${job.namespace}:${job.id}")?
///     .offer("default", "dc", "dc:${node.datacenter}")?;
/// assert!(ExtraClaimsPolicy::new().require("default", "sub", "x").is_err()); // reserved
/// let same = ExtraClaimsPolicy::from_json(r#"{"namespaces":{"default":{
///     "required_extra_claims":{"unique_id":"${job.namespace}:${job.id}"},
///     "optional_extra_claims":{"dc":"dc:${node.datacenter}"}}}}"#)?;
/// assert_eq!(policy, same);
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtraClaimsPolicy {
    namespaces: BTreeMap<String, NamespaceClaims>,
}

/// The policy file's form.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyJson {
    #[serde(deserialize_with = "unique_map")]
    namespaces: BTreeMap<String, NamespaceJson>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespaceJson {
    #[serde(default, deserialize_with = "unique_map")]
    required_extra_claims: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "unique_map")]
    optional_extra_claims: BTreeMap<String, String>,
}

/// A JSON object as a map, refusing a key that appears twice (serde's own
/// map would keep the last silently).
fn unique_map<'de, D, V>(d: D) -> std::result::Result<BTreeMap<String, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: serde::Deserialize<'de>,
{
    struct Unique<V>(std::marker::PhantomData<V>);
    impl<'de, V: serde::Deserialize<'de>> serde::de::Visitor<'de> for Unique<V> {
        type Value = BTreeMap<String, V>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = map.next_key::<String>()? {
                if out.contains_key(&k) {
                    return Err(serde::de::Error::custom(format_args!(
                        "duplicate key {:?}",
                        truncate_for_message(&k)
                    )));
                }
                let v = map.next_value()?;
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Unique(std::marker::PhantomData))
}

impl ExtraClaimsPolicy {
    /// A policy with no extra claims.
    pub fn new() -> ExtraClaimsPolicy {
        ExtraClaimsPolicy::default()
    }

    /// Reads the JSON form: `{"namespaces": {"<namespace>":
    /// {"required_extra_claims": {"<name>": "<template>", ...},
    /// "optional_extra_claims": {...}}}}`. Unknown members and duplicate keys
    /// are refused, as is everything [`ExtraClaimsPolicy::require`] refuses.
    pub fn from_json(json: &str) -> Result<ExtraClaimsPolicy> {
        let parsed: PolicyJson = serde_json::from_str(json).map_err(|e| {
            Error::invalid(
                "ExtraClaimsPolicy",
                "json",
                format!(
                    "{e}; expected {{\"namespaces\": {{\"<namespace>\": {{\"required_extra_claims\": {{\"<name>\": \"<template>\"}}, \"optional_extra_claims\": {{...}}}}}}}}"
                ),
            )
        })?;
        let mut policy = ExtraClaimsPolicy::new();
        for (ns, claims) in parsed.namespaces {
            policy.namespaces.entry(ns.clone()).or_default();
            for (name, template) in claims.required_extra_claims {
                policy = policy.require(&ns, &name, &template)?;
            }
            for (name, template) in claims.optional_extra_claims {
                policy = policy.offer(&ns, &name, &template)?;
            }
        }
        Ok(policy)
    }

    /// Adds claim `name` with value `template` to every identity of
    /// `namespace`.
    pub fn require(self, namespace: &str, name: &str, template: &str) -> Result<ExtraClaimsPolicy> {
        self.add(namespace, name, template, true)
    }

    /// Offers claim `name` with value `template` to identities of `namespace`
    /// that name it.
    pub fn offer(self, namespace: &str, name: &str, template: &str) -> Result<ExtraClaimsPolicy> {
        self.add(namespace, name, template, false)
    }

    fn add(
        mut self,
        namespace: &str,
        name: &str,
        template: &str,
        required: bool,
    ) -> Result<ExtraClaimsPolicy> {
        let field = if required {
            "required_extra_claims"
        } else {
            "optional_extra_claims"
        };
        let bad = |why: String| {
            Error::invalid(
                "ExtraClaimsPolicy",
                format!(
                    "namespaces[{:?}].{field}[{:?}]",
                    truncate_for_message(namespace),
                    truncate_for_message(name)
                ),
                why,
            )
        };
        if namespace != EVERY_NAMESPACE && !valid_namespace(namespace) {
            return Err(bad(
                "the namespace must match Nomad's ^[a-zA-Z0-9-]{1,128}$ (or be \"*\" for every namespace)"
                    .into(),
            ));
        }
        if let Some(p) = name_problem(name) {
            return Err(bad(format!("the name {p}")));
        }
        if template.is_empty() {
            return Err(bad("the template is empty; a claim needs a value".into()));
        }
        if template.len() > MAX_EXTRA_CLAIM_VALUE_BYTES {
            return Err(bad(format!(
                "the template is {} bytes; a value is at most {MAX_EXTRA_CLAIM_VALUE_BYTES}",
                template.len()
            )));
        }
        let t = Template::parse(template).map_err(|e| bad(format!("the template {e}")))?;
        // A namespace's claims are its own and those of "*": a name may be
        // in one of the two, and their sum is bounded.
        // Names differ by more than case: a relying party that folds case
        // must not see two claims as one.
        let defines = |ns: &NamespaceClaims| {
            ns.required
                .keys()
                .chain(ns.optional.keys())
                .any(|n| n.eq_ignore_ascii_case(name))
        };
        let count = |ns: &NamespaceClaims| ns.required.len() + ns.optional.len();
        let every = self.namespaces.get(EVERY_NAMESPACE).map_or(0, count);
        let (clash, most) = if namespace == EVERY_NAMESPACE {
            let most = self
                .namespaces
                .iter()
                .map(|(n, ns)| count(ns) + if n == EVERY_NAMESPACE { 0 } else { every })
                .max()
                .unwrap_or(0);
            (self.namespaces.values().any(defines), most)
        } else {
            let own = self.namespaces.get(namespace);
            let clash = own.is_some_and(defines)
                || self.namespaces.get(EVERY_NAMESPACE).is_some_and(defines);
            (clash, own.map_or(0, count) + every)
        };
        if clash {
            return Err(bad(format!(
                "is defined twice (in this namespace, or in it and \"{EVERY_NAMESPACE}\")"
            )));
        }
        if most >= MAX_EXTRA_CLAIMS {
            return Err(bad(format!(
                "a namespace would have more than {MAX_EXTRA_CLAIMS} extra claims (its own and those of \"{EVERY_NAMESPACE}\"), the most allowed"
            )));
        }
        let ns = self.namespaces.entry(namespace.to_string()).or_default();
        if required {
            ns.required.insert(name.to_string(), t);
        } else {
            ns.optional.insert(name.to_string(), t);
        }
        Ok(self)
    }

    /// Whether the policy defines no claim at all.
    pub fn is_empty(&self) -> bool {
        self.namespaces
            .values()
            .all(|ns| ns.required.is_empty() && ns.optional.is_empty())
    }

    /// The extra claims `req` carries: its namespace's required claims and
    /// the optional ones its identity names, rendered.
    pub fn claims_for(&self, req: &IssueRequest) -> Result<BTreeMap<String, String>> {
        let namespace = &req.allocation.namespace;
        // Its own claims and those of every namespace (no name is in both).
        let scopes: Vec<&NamespaceClaims> = [namespace.as_str(), EVERY_NAMESPACE]
            .iter()
            .filter_map(|n| self.namespaces.get(*n))
            .collect();
        let mut out = BTreeMap::new();
        for (i, name) in req.identity.extra_claims.iter().enumerate() {
            let known = scopes
                .iter()
                .any(|ns| ns.optional.contains_key(name) || ns.required.contains_key(name));
            if !known {
                let offered: Vec<&String> =
                    scopes.iter().flat_map(|ns| ns.optional.keys()).collect();
                return Err(Error::invalid(
                    "IssueRequest",
                    format!("Identity.ExtraClaims[{i}]"),
                    format!(
                        "names {:?}, which the extra-claims policy does not offer namespace {:?} (it offers {})",
                        truncate_for_message(name),
                        truncate_for_message(namespace),
                        if offered.is_empty() {
                            "none".to_string()
                        } else {
                            format!("{offered:?}")
                        }
                    ),
                ));
            }
        }
        let asked = |name: &String| req.identity.extra_claims.contains(name);
        let chosen = scopes.iter().flat_map(|ns| {
            ns.required
                .iter()
                .chain(ns.optional.iter().filter(|(name, _)| asked(name)))
        });
        for (name, template) in chosen {
            let value = template.render(req).map_err(|m| {
                Error::invalid(
                    "IssueRequest",
                    &m.field,
                    format!(
                        "is missing or empty, but extra claim {name:?} of namespace {:?} is {:?}, which names {}",
                        truncate_for_message(namespace),
                        template.source(),
                        m.var
                    ),
                )
            })?;
            if value.len() > MAX_EXTRA_CLAIM_VALUE_BYTES {
                return Err(Error::invalid(
                    "IssueRequest",
                    template.fields(req).join(", "),
                    format!(
                        "make extra claim {name:?} ({:?}) {} bytes long; a value is at most {MAX_EXTRA_CLAIM_VALUE_BYTES}",
                        template.source(),
                        value.len()
                    ),
                ));
            }
            out.insert(name.clone(), value);
        }
        // The claims as the token will carry them (escapes included).
        let encoded = serde_json::to_string(&out).map_or(usize::MAX, |j| j.len());
        if encoded > MAX_EXTRA_CLAIMS_JSON_BYTES {
            let (name, value) = out
                .iter()
                .max_by_key(|(_, v)| v.len())
                .map(|(n, v)| (n.as_str(), v.len()))
                .unwrap_or_default();
            return Err(Error::invalid(
                "IssueRequest",
                "Identity.ExtraClaims",
                format!(
                    "the extra claims would take {encoded} bytes of JSON, over the {MAX_EXTRA_CLAIMS_JSON_BYTES} a token may spend on them (the largest, {name:?}, is {value} bytes)"
                ),
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> IssueRequest {
        let mut r = IssueRequest {
            region: "global".into(),
            task: "server".into(),
            ..IssueRequest::default()
        };
        r.allocation.id = "a1".into();
        r.allocation.namespace = "default".into();
        r.allocation.job_id = "web".into();
        r.allocation.task_group = "frontend".into();
        r.identity.name = "vault_default".into();
        r
    }

    fn policy() -> ExtraClaimsPolicy {
        ExtraClaimsPolicy::new()
            .require("default", "unique_id", "${job.namespace}:${job.id}")
            .unwrap()
            .offer("default", "dc", "dc:${node.datacenter}")
            .unwrap()
            .offer("default", "owner", "${job.meta.owner}")
            .unwrap()
    }

    #[test]
    fn required_always_optional_when_named() {
        let mut r = req();
        let c = policy().claims_for(&r).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c["unique_id"], "default:web");
        r.identity.extra_claims = vec!["dc".into()];
        r.node = Some(crate::model::Node {
            datacenter: "dc1".into(),
            ..Default::default()
        });
        let c = policy().claims_for(&r).unwrap();
        assert_eq!(c["dc"], "dc:dc1");
        assert_eq!(c.len(), 2);
        // Another namespace has none.
        r.allocation.namespace = "other".into();
        r.identity.extra_claims.clear();
        assert!(policy().claims_for(&r).unwrap().is_empty());
    }

    #[test]
    fn refusals_name_the_claim_and_the_field() {
        let mut r = req();
        r.identity.extra_claims = vec!["dc".into()];
        let e = policy().claims_for(&r).unwrap_err().to_string();
        assert!(e.contains("Node.Datacenter") && e.contains("\"dc\""), "{e}");
        r.identity.extra_claims = vec!["secret".into()];
        let e = policy().claims_for(&r).unwrap_err().to_string();
        assert!(
            e.contains("Identity.ExtraClaims[0]") && e.contains("\"secret\""),
            "{e}"
        );
        assert!(e.contains("[\"dc\", \"owner\"]"), "{e}");
        r.identity.extra_claims = vec!["owner".into()];
        r.allocation.job = Some(crate::model::Job {
            meta: [("owner", "x".repeat(MAX_EXTRA_CLAIM_VALUE_BYTES + 6))]
                .into_iter()
                .collect(),
            ..Default::default()
        });
        let e = policy().claims_for(&r).unwrap_err().to_string();
        assert!(
            e.contains("1030 bytes") && e.contains("Allocation.Job.Meta[\"owner\"]"),
            "{e}"
        );
        // Control characters count as the token will carry them: escaped.
        let mut p = ExtraClaimsPolicy::new();
        for i in 0..5 {
            p = p
                .require("default", &format!("c{i}"), "${job.meta.owner}")
                .unwrap();
        }
        r.identity.extra_claims.clear();
        r.allocation.job = Some(crate::model::Job {
            meta: [("owner", "\u{1}".repeat(200))].into_iter().collect(),
            ..Default::default()
        });
        let e = p.claims_for(&r).unwrap_err().to_string();
        assert!(e.contains("bytes of JSON, over the 4096"), "{e}");
    }

    #[test]
    fn reserved_and_malformed_names_are_refused() {
        for name in [
            "sub",
            "SUB",
            "exp",
            "cnf",
            "nomad_task",
            "Nomad_x",
            "extra_claims",
            "",
            "a b",
            "a/b",
            &"x".repeat(65),
        ] {
            assert!(
                ExtraClaimsPolicy::new()
                    .require("default", name, "v")
                    .is_err(),
                "{name:?}"
            );
        }
        assert!(
            ExtraClaimsPolicy::new()
                .require("default", "x", "")
                .is_err()
        );
        assert!(
            ExtraClaimsPolicy::new()
                .require("default", "x", "${group}")
                .is_err()
        );
        assert!(policy().offer("default", "unique_id", "again").is_err());
        assert!(policy().offer("default", "Unique_ID", "again").is_err());
        for ns in ["", "Default ", "a/b", "a_b", &"n".repeat(129)] {
            assert!(
                ExtraClaimsPolicy::new().require(ns, "x", "v").is_err(),
                "{ns:?}"
            );
        }
        let mut p = ExtraClaimsPolicy::new();
        for i in 0..MAX_EXTRA_CLAIMS {
            p = p.offer("ns", &format!("c{i}"), "v").unwrap();
        }
        assert!(p.offer("ns", "one_more", "v").is_err());
    }

    #[test]
    fn every_namespace_shares_the_claims_of_star() {
        let p = ExtraClaimsPolicy::new()
            .require("*", "unique_id", "${job.namespace}:${job.id}")
            .unwrap()
            .offer("prod", "owner", "${job.meta.owner}")
            .unwrap();
        let mut r = req();
        assert_eq!(p.claims_for(&r).unwrap()["unique_id"], "default:web");
        r.allocation.namespace = "prod".into();
        r.identity.extra_claims = vec!["owner".into()];
        r.allocation.job = Some(crate::model::Job {
            meta: [("owner", "ops")].into_iter().collect(),
            ..Default::default()
        });
        let c = p.claims_for(&r).unwrap();
        assert_eq!(
            (c["unique_id"].as_str(), c["owner"].as_str()),
            ("prod:web", "ops")
        );
        // A name in "*" and a namespace, either way round, is refused.
        assert!(p.clone().offer("prod", "unique_id", "x").is_err());
        assert!(p.clone().offer("*", "owner", "x").is_err());
        // The bound counts both.
        let mut p = ExtraClaimsPolicy::new();
        for i in 0..MAX_EXTRA_CLAIMS - 1 {
            p = p.offer("ns", &format!("c{i}"), "v").unwrap();
        }
        let p = p.require("*", "last", "v").unwrap();
        assert!(p.clone().require("*", "too_many", "v").is_err());
        assert!(p.offer("ns", "too_many", "v").is_err());
    }

    #[test]
    fn the_json_form_is_strict() {
        for bad in [
            r#"{"namespaces":{"default":{"required_extra_claims":{"a":"x","a":"y"}}}}"#,
            r#"{"namespaces":{"default":{"required":{"a":"x"}}}}"#,
            r#"{"namespace":{}}"#,
            r#"{"namespaces":{"default":{"optional_extra_claims":{"a":1}}}}"#,
            r#"{"namespaces":{"d":{}},"namespaces":{}}"#,
        ] {
            assert!(ExtraClaimsPolicy::from_json(bad).is_err(), "{bad}");
        }
        let p = ExtraClaimsPolicy::from_json(r#"{"namespaces":{}}"#).unwrap();
        assert!(p.is_empty());
    }
}
