//! Properties: any valid request issues a token that verifies to the same claims;
//! any single-byte change to a valid token is rejected.

mod common;

use proptest::prelude::*;
use workload_identity::model::{Allocation, GoDuration, IssueRequest, Job, WorkloadIdentity};
use workload_identity::{AllocState, Audience, Verifier};

use common::identity::{AUD, NOW, world};

prop_compose! {
    fn arb_valid_request()(
        region in "[a-z][a-z0-9-]{0,15}",
        ns in "[a-z][a-z0-9-]{0,15}",
        job in "[a-zA-Z0-9_./-]{1,40}",
        parent in proptest::option::of("[a-z]{1,10}"),
        group in "[a-zA-Z0-9_-]{1,20}",
        alloc in "[a-f0-9]{8}-[a-f0-9]{4}-4[a-f0-9]{3}-[89ab][a-f0-9]{3}-[a-f0-9]{12}",
        name in "[a-zA-Z0-9_-]{1,128}",
        workload in "[a-zA-Z0-9_-]{1,30}",
        is_task in any::<bool>(),
        extra_aud in proptest::collection::vec("[a-z.]{1,20}", 0..3),
        ttl in 0i64..100_000,
    ) -> IssueRequest {
        let mut audience = vec![AUD.to_string()];
        audience.extend(extra_aud);
        IssueRequest {
            region,
            allocation: Allocation {
                id: alloc, namespace: ns, job_id: job.clone(), task_group: group,
                client_status: "running".into(), desired_status: "run".into(),
                job: parent.map(|p| Job { id: job, parent_id: p, ..Job::default() }),
            },
            task: if is_task { workload.clone() } else { String::new() },
            service: if is_task { String::new() } else { workload },
            proof_key: None,
            node: None,
            vault: None,
            consul: None,
            identity: WorkloadIdentity {
                name, audience, ttl: GoDuration::from_secs(ttl),
                ..WorkloadIdentity::default()
            },
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn issue_then_verify_round_trips(req in arb_valid_request()) {
        let w = world();
        w.store.set_state(&req.allocation.id, AllocState::Live);
        let signed = w.issuer.issue(&req, NOW).unwrap();
        let v = w.verifier.verify(&signed.token, NOW).unwrap();
        prop_assert_eq!(&v.claims, &signed.claims);
        prop_assert_eq!(v.claims.job_id.as_str(), req.allocation.identity_job_id());
        prop_assert_eq!(v.claims.audience, req.identity.audience);
        let ttl = req.identity.ttl.as_secs();
        prop_assert_eq!(v.claims.expires_at, (ttl > 0).then_some(NOW + ttl));
    }

    #[test]
    fn any_single_byte_change_is_rejected(at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let w = world();
        let verifier = Verifier::builder(w.keyring.clone(), w.store.clone(), Audience::new(AUD).unwrap())
            .key_wait(std::time::Duration::ZERO)
            .build();
        let token = w.token();
        let mut bytes = token.clone().into_bytes();
        let i = at.index(bytes.len());
        prop_assume!(bytes[i] != byte);
        bytes[i] = byte;
        prop_assert!(verifier.verify_bytes(&bytes, NOW).is_err(), "changed byte {} to {:#x}", i, byte);
        prop_assert!(verifier.verify(&token, NOW).is_ok());
    }
}
