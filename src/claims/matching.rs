//! Whether a token's claims are what signing a request gives: the manager's
//! check of a signer's token against the request it asked for.

use std::collections::BTreeMap;

use super::{Claims, EXCHANGE_CLAIMS, ExpectedClaims, exchange_claims, subject_for, subject_parts};
use crate::model::{IssueRequest, Workload};

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

impl Claims {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut c = Claims::for_request(&req, req.workload().unwrap(), 1, None, BTreeMap::new());
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
        let c = Claims::for_request(&req, req.workload().unwrap(), 1, None, BTreeMap::new());
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
}
