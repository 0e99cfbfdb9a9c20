//! Kubernetes service-account tokens beside workload identities, on the
//! same machine in one run: the library's `ServiceAccountSigner::sign` (the
//! claims' checks and the signature `wid k8s-signer` answers `Sign` with)
//! next to `Issuer::issue_with` for the same algorithm. `Sign` over the
//! socket, through tonic, is measured by scripts/bench-k8s-signer.sh.
//!
//! `cargo bench --bench service_account`

use std::hint::black_box;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use criterion::{Criterion, criterion_group, criterion_main};
use workload_identity::{
    Algorithm, Issuer, KeyPurpose, Keyring, KeyringPolicy, ServiceAccountSigner,
};

#[path = "../tests/common/mod.rs"]
mod common;

const ISSUER: &str = "https://cluster.example.com";

fn bench(c: &mut Criterion) {
    let now = workload_identity::unix_now();
    let kr = Keyring::new();
    kr.set_policy(Some(KeyringPolicy::new(Some(Duration::from_secs(86_400)))))
        .unwrap();
    let req = common::issue_request_task();
    let issuer = Issuer::new(kr.clone());
    let claims = B64.encode(
        serde_json::json!({
            "aud": ["https://kubernetes.default.svc"],
            "exp": now + 3600, "iat": now, "nbf": now,
            "iss": ISSUER,
            "jti": "6d5a7a0e-3c1b-4c1e-9a43-0b0c0f2f9b11",
            "sub": "system:serviceaccount:default:builder",
            "kubernetes.io": {
                "namespace": "default",
                "pod": {"name": "builder-7d9f", "uid": "1f0c"},
                "serviceaccount": {"name": "builder", "uid": "0b1c"},
            },
        })
        .to_string(),
    );
    for alg in [Algorithm::Es256, Algorithm::Rs256] {
        kr.rotate_purpose(KeyPurpose::Bearer, alg, now).unwrap();
        kr.rotate_purpose(KeyPurpose::Kubernetes, alg, now).unwrap();
        let signer = ServiceAccountSigner::new(&kr, ISSUER, alg).unwrap();
        signer.sign(&claims, now).unwrap();
        issuer.issue_with(alg, &req, now).unwrap();
        let mut g = c.benchmark_group(format!("service_account/{}", alg.name()));
        g.bench_function("issue (workload identity)", |b| {
            b.iter(|| black_box(issuer.issue_with(alg, black_box(&req), now).unwrap()))
        });
        g.bench_function("sign (service-account token)", |b| {
            b.iter(|| black_box(signer.sign(black_box(&claims), now).unwrap()))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
